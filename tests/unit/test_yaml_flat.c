#include "../../common/yaml_flat.c"
#include "tap.h"

static int parse(const char *text, struct yflat *y, char *err, size_t errlen)
{
    return yflat_parse_string(text, strlen(text), "model-config.yaml", y, err, errlen);
}

TEST(nested_paths_and_lines)
{
    const char *t = "minWorkers: 1\n"
                    "maxWorkers: 4\n"
                    "handler:\n"
                    "  delay_ms: 200\n"
                    "  cache:\n"
                    "    capacity: 4\n"
                    "deviceIds: [2, 3]\n"
                    "list:\n"
                    "  - a\n"
                    "  - name: x\n"
                    "    size: 7\n"
                    "after: end\n";
    struct yflat y;
    char err[256] = "";
    CHECK_EQ_INT(parse(t, &y, err, sizeof err), 0);
    const struct yflat_entry *e = yflat_get(&y, "handler.delay_ms");
    CHECK(e);
    CHECK_STR(e->value, "200");
    CHECK_EQ_INT(e->line, 4);
    e = yflat_get(&y, "handler.cache.capacity");
    CHECK(e);
    CHECK_STR(e->value, "4");
    CHECK_EQ_INT(e->line, 6);
    CHECK_STR(yflat_get(&y, "deviceIds.0")->value, "2");
    CHECK_STR(yflat_get(&y, "deviceIds.1")->value, "3");
    CHECK_STR(yflat_get(&y, "list.0")->value, "a");
    CHECK_STR(yflat_get(&y, "list.1.name")->value, "x");
    CHECK_STR(yflat_get(&y, "list.1.size")->value, "7");
    CHECK_EQ_INT(yflat_get(&y, "list.1.size")->line, 11);
    CHECK_STR(yflat_get(&y, "after")->value, "end");
    CHECK_EQ_INT(yflat_get(&y, "after")->line, 12);
    CHECK_STR(yflat_get(&y, "minWorkers")->value, "1");
    CHECK(yflat_get(&y, "handler") == NULL);
    CHECK(yflat_get(&y, "nope") == NULL);
    CHECK_EQ_INT(y.n, 10);
    yflat_free(&y);
}

TEST(empty_value_and_empty_doc)
{
    struct yflat y;
    char err[256] = "";
    CHECK_EQ_INT(parse("", &y, err, sizeof err), 0);
    CHECK_EQ_INT(y.n, 0);
    yflat_free(&y);
    CHECK_EQ_INT(parse("# only a comment\n", &y, err, sizeof err), 0);
    CHECK_EQ_INT(y.n, 0);
    yflat_free(&y);
    CHECK_EQ_INT(parse("a:\nb: {}\nc: []\n", &y, err, sizeof err), 0);
    CHECK_EQ_INT(y.n, 1);
    CHECK_STR(yflat_get(&y, "a")->value, "");
    yflat_free(&y);
}

TEST(duplicate_key_last_wins)
{
    struct yflat y;
    char err[256] = "";
    CHECK_EQ_INT(parse("a: 1\na: 2\n", &y, err, sizeof err), 0);
    CHECK_STR(yflat_get(&y, "a")->value, "2");
    CHECK_EQ_INT(yflat_get(&y, "a")->line, 2);
    yflat_free(&y);
}

TEST(syntax_error_names_file_and_line)
{
    struct yflat y;
    char err[256] = "";
    int rc = parse("a: 1\nb: [1, 2\nc: 3\n", &y, err, sizeof err);
    CHECK_EQ_INT(rc, TS_E_BAD_CONFIG);
    CHECK(strncmp(err, "model-config.yaml:", 18) == 0);
    CHECK_EQ_INT(y.n, 0);
    CHECK(y.e == NULL);

    rc = parse("a: 1\n  b: 2\n", &y, err, sizeof err);
    CHECK_EQ_INT(rc, TS_E_BAD_CONFIG);
    CHECK(strstr(err, "model-config.yaml:2: ") == err);
}

TEST(top_level_scalar_and_alias_refused)
{
    struct yflat y;
    char err[256] = "";
    CHECK_EQ_INT(parse("hello\n", &y, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "model-config.yaml:1: expected a mapping at the top level");
    CHECK_EQ_INT(parse("a: &x 1\nb: *x\n", &y, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "model-config.yaml:2: YAML aliases are not supported");
    CHECK_EQ_INT(parse("? [a, b]\n: 1\n", &y, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK(strstr(err, "complex"));
}

TEST(nul_in_key_or_value_refused)
{
    struct yflat y;
    char err[256] = "";
    /* values are C strings: "1\0junk" would read as 1 */
    CHECK_EQ_INT(parse("minWorkers: 1\nbatchSize: \"1\\0junk\"\n", &y, err, sizeof err),
                 TS_E_BAD_CONFIG);
    CHECK_STR(err, "model-config.yaml:2: value contains a NUL byte");
    CHECK_EQ_INT(y.n, 0);
    CHECK_EQ_INT(parse("\"a\\0b\": 1\n", &y, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "model-config.yaml:1: key contains a NUL byte");
}

TEST(parse_file)
{
    char dir[96];
    snprintf(dir, sizeof dir, "%s/t.XXXXXX", tbase);
    CHECK(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/model-config.yaml", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("batchSize: 4\nhandler:\n  x: \"quoted: yes\"\n", f);
    fclose(f);
    struct yflat y;
    char err[256] = "";
    CHECK_EQ_INT(yflat_parse_file(path, "model-config.yaml", &y, err, sizeof err), 0);
    CHECK_STR(yflat_get(&y, "batchSize")->value, "4");
    CHECK_STR(yflat_get(&y, "handler.x")->value, "quoted: yes");
    yflat_free(&y);
    unlink(path);
    rmdir(dir);
    CHECK(yflat_parse_file(path, "model-config.yaml", &y, err, sizeof err) == -ENOENT);
    CHECK(strstr(err, "model-config.yaml: cannot open") == err);
}

int main(void)
{
    tbase_make("test_yaml_flat");
    RUN(nested_paths_and_lines);
    RUN(empty_value_and_empty_doc);
    RUN(duplicate_key_last_wins);
    RUN(syntax_error_names_file_and_line);
    RUN(top_level_scalar_and_alias_refused);
    RUN(nul_in_key_or_value_refused);
    RUN(parse_file);
    tbase_remove();
    return tap_done();
}
