#include "../../common/manifest.c"
#include "tap.h"

static char dir[96];

static void write_manifest(const char *text)
{
    char p[256];
    snprintf(p, sizeof p, "%s/MAR-INF", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/MAR-INF/MANIFEST.json", dir);
    FILE *f = fopen(p, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
}

static void mkdir_tmp(void)
{
    snprintf(dir, sizeof dir, "%s/t.XXXXXX", tbase);
    CHECK(mkdtemp(dir));
}

TEST(missing_file_is_empty)
{
    mkdir_tmp();
    struct manifest m;
    char err[256] = "";
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), 0);
    CHECK_STR(m.model_name, "");
    CHECK_STR(m.handler, "");
    CHECK_STR(m.runtime, "");
    CHECK_STR(m.config_file, "");
    CHECK_STR(m.envelope, "");
    manifest_free(&m);
    CHECK(m.model_name == NULL);
}

TEST(reads_torchserve_manifest)
{
    mkdir_tmp();
    write_manifest("{\n"
                   "  \"createdOn\": \"01/02/2024 10:11:12\",\n"
                   "  \"runtime\": \"python\",\n"
                   "  \"model\": {\n"
                   "    \"modelName\": \"mnist\",\n"
                   "    \"serializedFile\": \"mnist_cnn.pt\",\n"
                   "    \"handler\": \"mnist_handler.py\",\n"
                   "    \"modelFile\": \"model.py\",\n"
                   "    \"modelVersion\": 2,\n"
                   "    \"requirementsFile\": \"requirements.txt\",\n"
                   "    \"configFile\": \"model-config.yaml\",\n"
                   "    \"extensions\": null,\n"
                   "    \"description\": \"ignored\"\n"
                   "  },\n"
                   "  \"archiverVersion\": \"0.9.0\"\n"
                   "}\n");
    struct manifest m;
    char err[256] = "";
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), 0);
    CHECK_STR(m.model_name, "mnist");
    CHECK_STR(m.serialized_file, "mnist_cnn.pt");
    CHECK_STR(m.handler, "mnist_handler.py");
    CHECK_STR(m.model_file, "model.py");
    CHECK_STR(m.requirements_file, "requirements.txt");
    CHECK_STR(m.model_version, "2");
    CHECK_STR(m.config_file, "model-config.yaml");
    CHECK_STR(m.runtime, "python");
    CHECK_STR(m.envelope, "");
    CHECK_STR(m.created_on, "01/02/2024 10:11:12");
    CHECK_STR(m.archiver_version, "0.9.0");
    manifest_free(&m);
}

TEST(bad_json_names_file_and_line)
{
    mkdir_tmp();
    write_manifest(
        "{\n  \"runtime\": \"c\",\n  \"model\": {\n    \"modelName\": \"x\",,\n  }\n}\n");
    struct manifest m;
    char err[256] = "";
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), TS_E_BAD_ARCHIVE);
    char want[128];
    snprintf(want, sizeof want, "%s/MAR-INF/MANIFEST.json:4: ", dir);
    CHECK(strncmp(err, want, strlen(want)) == 0);
    CHECK_STR(m.model_name, "");
    manifest_free(&m);
}

TEST(bad_field_type_names_json_path)
{
    mkdir_tmp();
    write_manifest("{\"model\": {\"handler\": [1]}}");
    struct manifest m;
    char err[256] = "";
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), TS_E_BAD_ARCHIVE);
    CHECK(strstr(err, "MANIFEST.json: model.handler: expected a string"));
    manifest_free(&m);
    write_manifest("[1, 2]");
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), TS_E_BAD_ARCHIVE);
    CHECK(strstr(err, "expected a JSON object"));
    manifest_free(&m);
    write_manifest("{\"model\": 3}");
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), TS_E_BAD_ARCHIVE);
    CHECK(strstr(err, "model: expected an object"));
    manifest_free(&m);
}

TEST(round_trip)
{
    mkdir_tmp();
    struct manifest w = {0};
    w.created_on = "05/06/2024 01:02:03";
    w.runtime = "c";
    w.model_name = "add";
    w.model_version = "1.0";
    w.serialized_file = "add.pt";
    w.handler = "torchscript";
    w.model_file = "model.py";
    w.requirements_file = "requirements.txt";
    w.config_file = "model-config.yaml";
    w.archiver_version = "0.1.0";
    char *json = manifest_to_json(&w);
    CHECK(strstr(json, "\"modelName\": \"add\""));
    CHECK(strstr(json, "envelope") == NULL); /* empty fields are left out */
    CHECK(strstr(json, "\"createdOn\"") < strstr(json, "\"model\""));
    write_manifest(json);
    free(json);
    struct manifest m;
    char err[256] = "";
    CHECK_EQ_INT(manifest_load(dir, &m, err, sizeof err), 0);
    CHECK_STR(m.model_name, "add");
    CHECK_STR(m.model_version, "1.0");
    CHECK_STR(m.serialized_file, "add.pt");
    CHECK_STR(m.handler, "torchscript");
    CHECK_STR(m.model_file, "model.py");
    CHECK_STR(m.requirements_file, "requirements.txt");
    CHECK_STR(m.config_file, "model-config.yaml");
    CHECK_STR(m.runtime, "c");
    CHECK_STR(m.created_on, "05/06/2024 01:02:03");
    CHECK_STR(m.archiver_version, "0.1.0");
    manifest_free(&m);
}

int main(void)
{
    tbase_make("test_manifest");
    RUN(missing_file_is_empty);
    RUN(reads_torchserve_manifest);
    RUN(bad_json_names_file_and_line);
    RUN(bad_field_type_names_json_path);
    RUN(round_trip);
    tbase_remove();
    return tap_done();
}
