#include "../../frontend/core/metrics_config.c"
#include "../../frontend/core/model_metrics.c"
#include "tap.h"

static struct metric_line sample(char kind, const char *name, const char *unit, double v)
{
    struct metric_line s = {.kind = kind, .name = otf_s(name), .unit = otf_s(unit), .value = v};
    return s;
}

static void dim(struct metric_line *s, const char *k, const char *v)
{
    s->dim_name[s->n_dims] = otf_s(k);
    s->dim_value[s->n_dims++] = otf_s(v);
}

TEST(auto_detect_registers_in_the_samples_order)
{
    struct model_metrics mm;
    model_metrics_init(&mm, 1);
    char why[200];
    struct metric_line s = sample('c', "Calls", "count", 1);
    dim(&s, "ModelName", "a");
    dim(&s, "Level", "Model");
    CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why), 0);
    s.dim_value[0] = otf_s("b");
    CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why), 0);
    s.value = 2;
    CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why), 0);
    const struct mm_metric *m = model_metrics_find(&mm, "Calls", 5);
    CHECK(m && m->kind == 'c' && m->n_dims == 2 && !strcmp(m->dims[1], "Level"));
    CHECK_EQ_INT(m->n_series, 2);
    CHECK(!strcmp(m->series[1].values[0], "b") && m->series[1].value == 3);
    /* another kind, a counter going down */
    s.kind = 'g';
    CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why), -1);
    CHECK(strstr(why, "is a counter, not a gauge"));
    s.kind = 'c';
    s.value = -1;
    CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why), -1);
    CHECK_EQ_INT(mm.refused, 2);
    model_metrics_free(&mm);
}

TEST(declared_metrics_map_dimensions_by_name)
{
    struct model_metrics mm;
    model_metrics_init(&mm, 0);
    char why[200];
    const char *dims[] = {"ModelName"};
    CHECK_EQ_INT(
        model_metrics_declare(&mm, 'g', "RequestBatchSize", "count", dims, 1, why, sizeof why), 0);
    struct metric_line s = sample('g', "RequestBatchSize", "x", 4);
    dim(&s, "Level", "Model");
    dim(&s, "ModelName", "m");
    CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why), 0);
    const struct mm_metric *m = model_metrics_find(&mm, "RequestBatchSize", 16);
    CHECK(!strcmp(m->unit, "count") && m->n_series == 1 && !strcmp(m->series[0].values[0], "m"));
    /* a declared dimension the sample lacks; an undeclared metric without auto-detection */
    struct metric_line t = sample('g', "RequestBatchSize", "", 1);
    CHECK_EQ_INT(model_metrics_record(&mm, &t, why, sizeof why), -1);
    CHECK(strstr(why, "no value for its dimension ModelName"));
    t = sample('g', "Other", "", 1);
    CHECK_EQ_INT(model_metrics_record(&mm, &t, why, sizeof why), -1);
    CHECK(strstr(why, "not declared in metrics_config"));
    CHECK_EQ_INT(model_metrics_declare(&mm, 'c', "RequestBatchSize", "", NULL, 0, why, sizeof why),
                 -1);
    const char *bad[] = {"Hostname"};
    CHECK_EQ_INT(model_metrics_declare(&mm, 'c', "X", "", bad, 1, why, sizeof why), -1);
    model_metrics_free(&mm);
}

TEST(series_are_bounded)
{
    struct model_metrics mm;
    model_metrics_init(&mm, 1);
    char why[200], v[16];
    for (int i = 0; i <= MODEL_METRICS_SERIES_MAX; i++) {
        struct metric_line s = sample('g', "G", "", i);
        snprintf(v, sizeof v, "%d", i);
        dim(&s, "K", v);
        CHECK_EQ_INT(model_metrics_record(&mm, &s, why, sizeof why),
                     i < MODEL_METRICS_SERIES_MAX ? 0 : -1);
    }
    CHECK(strstr(why, "series already"));
    model_metrics_free(&mm);
}

TEST(log_line_as_torchserve_writes_it)
{
    struct buf b;
    buf_init(&b);
    struct metric_line s = sample('g', "PredictionTime", "ms", 2);
    dim(&s, "ModelName", "mlp");
    dim(&s, "Level", "Model");
    s.request_ids = otf_s("r1");
    model_metrics_log_line(&b, &s, "ms", "h", 17);
    buf_put(&b, "", 1);
    CHECK_STR((char *)b.data,
              "PredictionTime.ms:2.0|#ModelName:mlp,Level:Model|#hostname:h,requestID:r1,"
              "timestamp:17\n");
    char out[40];
    model_metrics_fmt_value(out, sizeof out, 17.63);
    CHECK_STR(out, "17.63");
    buf_free(&b);
}

static const char *write_file(const char *name, const char *text)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/%s", tbase, name);
    FILE *f = fopen(p, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
    return p;
}

TEST(metrics_yaml_with_anchors)
{
    const char *p = write_file("metrics.yaml", "dimensions:\n"
                                               "  - &model_name \"ModelName\"\n"
                                               "  - &level \"Level\"\n"
                                               "ts_metrics:\n"
                                               "  counter:\n"
                                               "    - name: Requests2XX\n"
                                               "      unit: Count\n"
                                               "      dimensions: [*level]\n"
                                               "model_metrics:\n"
                                               "  gauge:\n"
                                               "    - name: HandlerTime\n"
                                               "      unit: ms\n"
                                               "      dimensions: [*model_name, *level]\n"
                                               "  histogram:\n"
                                               "    - name: Sizes\n"
                                               "      unit: kB\n"
                                               "      dimensions: []\n");
    struct model_metrics mm;
    struct metrics_config mc;
    model_metrics_init(&mm, 0);
    char err[512];
    CHECK_EQ_INT(metrics_config_load(p, &mm, &mc, NULL, NULL, err, sizeof err), 0);
    CHECK(metrics_config_ts_declared(&mc, "Requests2XX"));
    CHECK(!metrics_config_ts_declared(&mc, "Requests4XX"));
    const struct mm_metric *m = model_metrics_find(&mm, "HandlerTime", 11);
    CHECK(m && m->declared && m->n_dims == 2 && !strcmp(m->dims[0], "ModelName"));
    CHECK(model_metrics_find(&mm, "Sizes", 5)->kind == 'h');
    char *json = metrics_config_worker_json(&mm);
    CHECK_STR(json, "[{\"name\":\"HandlerTime\",\"unit\":\"ms\",\"type\":\"gauge\",\"dimensions\":"
                    "[\"ModelName\",\"Level\"]},{\"name\":\"Sizes\",\"unit\":\"kB\",\"type\":"
                    "\"histogram\",\"dimensions\":[]}]");
    free(json);
    metrics_config_free(&mc);
    model_metrics_free(&mm);

    p = write_file("bad.yaml", "model_metrics:\n  gauge:\n    - name: A\n      unit: ms\n"
                               "      dimensions: A\n");
    model_metrics_init(&mm, 0);
    CHECK_EQ_INT(metrics_config_load(p, &mm, &mc, NULL, NULL, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK(strstr(err, "bad.yaml:5: A: dimensions: expected a list of names"));
    metrics_config_free(&mc);
    model_metrics_free(&mm);
}

int main(void)
{
    tbase_make("test_model_metrics");
    RUN(auto_detect_registers_in_the_samples_order);
    RUN(declared_metrics_map_dimensions_by_name);
    RUN(series_are_bounded);
    RUN(log_line_as_torchserve_writes_it);
    RUN(metrics_yaml_with_anchors);
    tbase_remove();
    return tap_done();
}
