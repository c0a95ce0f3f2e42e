/* model_kind (frontend/mgmt/model_kind.c): MLServer and Inferless folders recognised by their
 * files, the name and version an MLServer folder gives its model, and a bad model-settings.json
 * refused with the file, its line and the field. */
#include "../../frontend/mgmt/model_kind.c"
#include "tap.h"

static char dir[96];

static void fresh_dir(void)
{
    snprintf(dir, sizeof dir, "%s/k.XXXXXX", tbase);
    CHECK(mkdtemp(dir));
}

static void put(const char *name, const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
}

TEST(a_torchserve_folder_is_neither)
{
    fresh_dir();
    put("model.pt", "x");
    put("app.py", "# app.py alone is not an Inferless app\n");
    struct model_kind_info k;
    char err[256] = "";
    CHECK_EQ_INT(model_kind_detect(dir, &k, err, sizeof err), 0);
    CHECK_EQ_INT(k.kind, MODEL_KIND_NONE);
    CHECK(model_kind_handler(k.kind) == NULL);
    model_kind_free(&k);
}

TEST(model_settings_make_an_mlserver_runtime_named_by_it)
{
    fresh_dir();
    put("model-settings.json", "{\"name\": \"text-model\", \"implementation\": \"m.C\",\n"
                               " \"parameters\": {\"version\": \"v1.2.3\", \"uri\": \"./x\"}}\n");
    struct model_kind_info k;
    char err[256] = "";
    CHECK_EQ_INT(model_kind_detect(dir, &k, err, sizeof err), 0);
    CHECK_EQ_INT(k.kind, MODEL_KIND_MLSERVER);
    CHECK_STR(model_kind_handler(k.kind), "mlserver");
    CHECK_STR(k.name, "text-model");
    CHECK_STR(k.version, "v1.2.3");
    CHECK_EQ_INT(model_kind_default_batch(k.kind), MODEL_KIND_MLSERVER_BATCH);
    model_kind_free(&k);

    /* name and version are optional (MLServer then uses the folder's name) */
    put("model-settings.json", "{\"implementation\": \"m.C\", \"parameters\": null}");
    CHECK_EQ_INT(model_kind_detect(dir, &k, err, sizeof err), 0);
    CHECK_EQ_INT(k.kind, MODEL_KIND_MLSERVER);
    CHECK(k.name == NULL && k.version == NULL);
    model_kind_free(&k);
}

TEST(app_and_input_schema_make_an_inferless_app)
{
    fresh_dir();
    put("app.py", "class InferlessPythonModel: pass\n");
    put("input_schema.py", "INPUT_SCHEMA = {}\n");
    struct model_kind_info k;
    char err[256] = "";
    CHECK_EQ_INT(model_kind_detect(dir, &k, err, sizeof err), 0);
    CHECK_EQ_INT(k.kind, MODEL_KIND_INFERLESS);
    CHECK_STR(model_kind_handler(k.kind), "inferless");
    CHECK_EQ_INT(model_kind_default_batch(k.kind), 1);
    model_kind_free(&k);
}

TEST(a_bad_model_settings_is_refused_with_where)
{
    static const struct {
        const char *text, *err;
    } cases[] = {
        {"{\"name\": \"x\",\n \"implementation\": }", "model-settings.json:2: "},
        {"[1, 2]", "model-settings.json: expected a JSON object"},
        {"{\"name\": 7}", "model-settings.json: name: expected a string"},
        {"{\"parameters\": []}", "model-settings.json: parameters: expected an object"},
        {"{\"parameters\": {\"version\": 2}}",
         "model-settings.json: parameters.version: expected a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fresh_dir();
        put("model-settings.json", cases[i].text);
        struct model_kind_info k;
        char err[256] = "";
        CHECK_EQ_INT(model_kind_detect(dir, &k, err, sizeof err), TS_E_BAD_ARCHIVE);
        CHECK(!strncmp(err, cases[i].err, strlen(cases[i].err)));
        CHECK(k.name == NULL && k.version == NULL);
    }
}

int main(void)
{
    tbase_make("model_kind");
    RUN(a_torchserve_folder_is_neither);
    RUN(model_settings_make_an_mlserver_runtime_named_by_it);
    RUN(app_and_input_schema_make_an_inferless_app);
    RUN(a_bad_model_settings_is_refused_with_where);
    tbase_remove();
    return tap_done();
}
