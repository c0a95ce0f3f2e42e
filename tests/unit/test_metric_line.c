#include "../../common/metric_line.c"
#include "tap.h"

static int parse(const char *s, struct metric_line *m, char *why)
{
    return metric_line_parse(s, strlen(s), m, why, 160);
}

static int eq(struct otf_str s, const char *want)
{
    return (size_t)s.len == strlen(want) && !memcmp(s.p, want, (size_t)s.len);
}

/* TorchServe's own lines (caching_metric.py) */
TEST(torchserve_lines)
{
    struct metric_line m;
    char why[160];
    CHECK_EQ_INT(
        parse("HandlerMethodTime.ms:9.39|#MethodName:preprocess,ModelName:mnist,Level:Model|"
              "#type:GAUGE|#hostname:h1,1717105563,4a2f-1,4a2f-2",
              &m, why),
        0);
    CHECK(eq(m.name, "HandlerMethodTime") && eq(m.unit, "ms") && m.kind == 'g');
    CHECK(m.value > 9.389 && m.value < 9.391);
    CHECK_EQ_INT(m.n_dims, 3);
    CHECK(eq(m.dim_name[0], "MethodName") && eq(m.dim_value[0], "preprocess"));
    CHECK(eq(m.dim_name[2], "Level") && eq(m.dim_value[2], "Model"));
    CHECK(eq(m.host, "h1") && eq(m.timestamp, "1717105563"));
    CHECK(eq(m.request_ids, "4a2f-1,4a2f-2"));

    CHECK_EQ_INT(parse("InferenceRequestCount.count:1|#|#type:COUNTER|#hostname:h,1", &m, why), 0);
    CHECK(m.kind == 'c' && m.n_dims == 0 && m.request_ids.len == 0);
    CHECK_EQ_INT(parse("X.percent:50|#Level:Model|#type:histogram|#hostname:h,1,id", &m, why), 0);
    CHECK(m.kind == 'h' && eq(m.request_ids, "id"));
    /* older lines have no type: a gauge */
    CHECK_EQ_INT(
        parse("PredictionTime.Milliseconds:2.5|#ModelName:m,Level:Model|#hostname:h,7", &m, why),
        0);
    CHECK(m.kind == 'g' && m.value == 2.5);
    /* a value may hold ':' */
    CHECK_EQ_INT(parse("T.ms:1|#Url:http://x|#hostname:h,1", &m, why), 0);
    CHECK(eq(m.dim_value[0], "http://x"));
}

TEST(refusals_name_the_field)
{
    struct metric_line m;
    char why[160];
    CHECK_EQ_INT(parse("bad-name.ms:1|#|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "metric name"));
    CHECK_EQ_INT(parse("N.m s:1|#|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "unit"));
    CHECK_EQ_INT(parse("N.ms:nan|#|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "value"));
    CHECK_EQ_INT(parse("N.ms:1e999|#|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "finite"));
    CHECK_EQ_INT(parse("N.ms:1|#1x:v|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "dimension name"));
    CHECK_EQ_INT(parse("N.ms:1|#a:b\tc|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "dimension value"));
    CHECK_EQ_INT(parse("N.ms:1|#a:b,|#hostname:h,1", &m, why), -1);
    CHECK_EQ_INT(parse("N.ms:1|#a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "more than 8"));
    CHECK_EQ_INT(parse("N.ms:1|#|#type:METER|#hostname:h,1", &m, why), -1);
    CHECK(strstr(why, "type"));
    CHECK_EQ_INT(parse("N.ms:1|#|#hostname:h", &m, why), -1);
    CHECK_EQ_INT(parse("N.ms:1|#|#hostname:h,12x", &m, why), -1);
    CHECK(strstr(why, "timestamp"));
    CHECK_EQ_INT(parse("N.ms:1|#", &m, why), -1);
    CHECK_EQ_INT(parse("N.ms:1", &m, why), -1);
    CHECK_EQ_INT(parse("", &m, why), -1);
    /* a NUL byte is no unit byte (the fuzzer's find: strchr matches the terminator) */
    static const char nul[] = "N.m\0s:1|#|#hostname:h,1";
    CHECK_EQ_INT(metric_line_parse(nul, sizeof(nul) - 1, &m, why, sizeof why), -1);
    CHECK(strstr(why, "unit"));
    char name[80];
    memset(name, 'a', 65);
    name[65] = '\0';
    char line[160];
    snprintf(line, sizeof line, "%s.ms:1|#|#hostname:h,1", name);
    CHECK_EQ_INT(parse(line, &m, why), -1);
}

int main(void)
{
    RUN(torchserve_lines);
    RUN(refusals_name_the_field);
    return tap_done();
}
