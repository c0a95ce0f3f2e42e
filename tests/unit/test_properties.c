#include "../../common/properties.c"
#include "tap.h"

static int parse(const char *t, struct props *ps, char *err, size_t errlen)
{
    return props_parse_string(t, strlen(t), ps, err, errlen);
}

TEST(separators_comments_trim)
{
    const char *t = "# comment\n"
                    "! also a comment\n"
                    "\n"
                    "inference_address=http://0.0.0.0:8080\n"
                    "  management_address : http://0.0.0.0:8081  \n"
                    "model_store /tmp/store\r\n"
                    "empty=\n"
                    "bare\n"
                    "colon:value:with:colons\n"
                    "sp = a b c\n";
    struct props ps;
    char err[256] = "";
    CHECK_EQ_INT(parse(t, &ps, err, sizeof err), 0);
    CHECK_EQ_INT(ps.n, 7);
    const struct prop *p = props_get(&ps, "inference_address");
    CHECK_STR(p->value, "http://0.0.0.0:8080");
    CHECK_EQ_INT(p->line, 4);
    p = props_get(&ps, "management_address");
    CHECK_STR(p->value, "http://0.0.0.0:8081");
    CHECK_EQ_INT(p->line, 5);
    CHECK_STR(props_get(&ps, "model_store")->value, "/tmp/store");
    CHECK_STR(props_get(&ps, "empty")->value, "");
    CHECK_STR(props_get(&ps, "bare")->value, "");
    CHECK_STR(props_get(&ps, "colon")->value, "value:with:colons");
    CHECK_STR(props_get(&ps, "sp")->value, "a b c");
    CHECK(props_get(&ps, "# comment") == NULL);
    props_free(&ps);
}

TEST(continuation_and_escapes)
{
    const char *t = "models={\\\n"
                    "    \"a\": 1\\\n"
                    "  }\n"
                    "after=x\n"
                    "path=C:\\\\dir\\\\file\n"
                    "tab=a\\tb\n"
                    "uni=\\u00e9\n"
                    "key\\ with\\ space=v\n"
                    "odd=ends in two \\\\\n"
                    "next=1\n";
    struct props ps;
    char err[256] = "";
    CHECK_EQ_INT(parse(t, &ps, err, sizeof err), 0);
    const struct prop *p = props_get(&ps, "models");
    CHECK_STR(p->value, "{\"a\": 1}");
    CHECK_EQ_INT(p->line, 1);
    CHECK_EQ_INT(props_get(&ps, "after")->line, 4);
    CHECK_STR(props_get(&ps, "path")->value, "C:\\dir\\file");
    CHECK_STR(props_get(&ps, "tab")->value, "a\tb");
    CHECK_STR(props_get(&ps, "uni")->value, "\xc3\xa9");
    CHECK_STR(props_get(&ps, "key with space")->value, "v");
    CHECK_STR(props_get(&ps, "odd")->value, "ends in two \\");
    CHECK_STR(props_get(&ps, "next")->value, "1");
    CHECK_EQ_INT(props_get(&ps, "next")->line, 10);
    props_free(&ps);
}

TEST(env_substitution)
{
    setenv("TS_TEST_PORT", "9090", 1);
    unsetenv("TS_TEST_UNSET");
    const char *t = "a=http://127.0.0.1:$$TS_TEST_PORT$$\n"
                    "b=x$$TS_TEST_UNSET$$y\n"
                    "c=cost $$ 5\n"
                    "d=$$TS_TEST_PORT$$$$TS_TEST_PORT$$\n";
    struct props ps;
    char err[256] = "";
    CHECK_EQ_INT(parse(t, &ps, err, sizeof err), 0);
    CHECK_STR(props_get(&ps, "a")->value, "http://127.0.0.1:9090");
    CHECK_STR(props_get(&ps, "b")->value, "xy");
    CHECK_STR(props_get(&ps, "c")->value, "cost $$ 5");
    CHECK_STR(props_get(&ps, "d")->value, "90909090");
    props_free(&ps);
}

TEST(last_wins)
{
    struct props ps;
    char err[256] = "";
    CHECK_EQ_INT(parse("a=1\nb=2\na=3", &ps, err, sizeof err), 0);
    CHECK_STR(props_get(&ps, "a")->value, "3");
    CHECK_EQ_INT(props_get(&ps, "a")->line, 3);
    props_free(&ps);
}

TEST(errors_name_line)
{
    struct props ps;
    char err[256] = "";
    CHECK_EQ_INT(parse("a=1\nb=\\u12g4\n", &ps, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "properties:2: malformed \\uXXXX escape");
    CHECK_EQ_INT(ps.n, 0);
    CHECK_EQ_INT(parse("a=1\n\n=oops\n", &ps, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "properties:3: missing key before '='");
    CHECK_EQ_INT(parse("x=\\u12", &ps, err, sizeof err), TS_E_BAD_CONFIG);
    /* an escaped NUL would cut a key or a value short: "\u0000x=1" was the key "" */
    CHECK_EQ_INT(parse("a=1\n\\u0000x=1\n", &ps, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_STR(err, "properties:2: \\u0000 (a NUL byte) in line");
    CHECK_EQ_INT(parse("port=80\\u0000junk", &ps, err, sizeof err), TS_E_BAD_CONFIG);
    CHECK_EQ_INT(ps.n, 0);
}

TEST(parse_file)
{
    char dir[96];
    snprintf(dir, sizeof dir, "%s/t.XXXXXX", tbase);
    CHECK(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/config.properties", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("job_queue_size=5\n=bad\n", f);
    fclose(f);
    struct props ps;
    char err[512] = "";
    CHECK_EQ_INT(props_parse_file(path, &ps, err, sizeof err), TS_E_BAD_CONFIG);
    char want[600];
    snprintf(want, sizeof want, "%s:2: missing key before '='", path);
    CHECK_STR(err, want);
    f = fopen(path, "w");
    fputs("job_queue_size=5\n", f);
    fclose(f);
    CHECK_EQ_INT(props_parse_file(path, &ps, err, sizeof err), 0);
    CHECK_STR(props_get(&ps, "job_queue_size")->value, "5");
    props_free(&ps);
    unlink(path);
    rmdir(dir);
    CHECK_EQ_INT(props_parse_file(path, &ps, err, sizeof err), -ENOENT);
}

int main(void)
{
    tbase_make("test_properties");
    RUN(separators_comments_trim);
    RUN(continuation_and_escapes);
    RUN(env_substitution);
    RUN(last_wins);
    RUN(errors_name_line);
    RUN(parse_file);
    tbase_remove();
    return tap_done();
}
