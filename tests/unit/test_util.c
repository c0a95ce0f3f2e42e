/* Unit tests for common/util.c. */
#include "../../common/util.c"

#include <sys/stat.h>

#include "tap.h"

TEST(buf_grows_and_stays_terminated)
{
    struct buf b;
    buf_init(&b);
    for (int i = 0; i < 1000; i++)
        buf_printf(&b, "%d,", i);
    CHECK(b.len > 3000);
    CHECK_EQ_INT(b.data[b.len], 0);
    CHECK(!strncmp((char *)b.data, "0,1,2,", 6));
    buf_reset(&b);
    CHECK_EQ_INT(b.len, 0);
    buf_put_i32(&b, -1);
    buf_put_i32(&b, 0x01020304);
    CHECK_EQ_INT(b.len, 8);
    CHECK(b.data[0] == 0xff && b.data[3] == 0xff && b.data[4] == 1 && b.data[7] == 4);
    buf_free(&b);
}

TEST(parse_long_is_strict)
{
    long v = 0;
    CHECK_EQ_INT(ts_parse_long("42", 0, 100, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(ts_parse_long("42 ", 0, 100, &v), 0);
    CHECK_EQ_INT(ts_parse_long("4x", 0, 100, &v), -EINVAL);
    CHECK_EQ_INT(ts_parse_long("", 0, 100, &v), -EINVAL);
    CHECK_EQ_INT(ts_parse_long("  ", 0, 100, &v), -EINVAL);
    CHECK_EQ_INT(ts_parse_long("101", 0, 100, &v), -ERANGE);
    CHECK_EQ_INT(ts_parse_long("-1", 0, 100, &v), -ERANGE);
    CHECK_EQ_INT(ts_parse_long("99999999999999999999999", 0, 100, &v), -ERANGE);
}

TEST(parse_bool_takes_true_and_false_only)
{
    int b = -1;
    CHECK_EQ_INT(ts_parse_bool("TRUE", &b), 0);
    CHECK_EQ_INT(b, 1);
    CHECK_EQ_INT(ts_parse_bool("false", &b), 0);
    CHECK_EQ_INT(b, 0);
    CHECK_EQ_INT(ts_parse_bool("yes", &b), -EINVAL);
    CHECK_EQ_INT(ts_parse_bool(NULL, &b), -EINVAL);
}

TEST(uuid_is_v4_text)
{
    char a[37], b[37];
    ts_uuid(a);
    ts_uuid(b);
    CHECK_EQ_INT(strlen(a), 36);
    CHECK(a[8] == '-' && a[13] == '-' && a[14] == '4' && a[18] == '-' && a[23] == '-');
    CHECK(strchr("89ab", a[19]) != NULL);
    CHECK(strcmp(a, b) != 0);
    uuid_t u;
    CHECK_EQ_INT(uuid_parse(a, u), 0);
}

TEST(secure_uuid_is_v4_text_and_not_the_fast_stream)
{
    char a[37], b[37], f[37];
    ts_uuid_secure(a);
    ts_uuid(f);
    ts_uuid_secure(b);
    CHECK_EQ_INT(strlen(a), 36);
    CHECK(a[14] == '4' && strchr("89ab", a[19]) != NULL);
    CHECK(strcmp(a, b) != 0 && strcmp(a, f) != 0 && strcmp(b, f) != 0);
    uuid_t u;
    CHECK_EQ_INT(uuid_parse(b, u), 0);
}

TEST(rmtree_removes_nested_dirs_but_not_link_targets)
{
    char dir[] = "/tmp/tsc-util-XXXXXX", keep[] = "/tmp/tsc-keep-XXXXXX";
    CHECK(mkdtemp(dir) && mkdtemp(keep));
    char *sub = xasprintf("%s/a/b", dir), *a = xasprintf("%s/a", dir);
    char *f = xasprintf("%s/a/b/f", dir), *kf = xasprintf("%s/k", keep);
    char *ln = xasprintf("%s/a/link", dir);
    CHECK(mkdir(a, 0700) == 0 && mkdir(sub, 0700) == 0);
    FILE *fp = fopen(f, "w");
    CHECK(fp);
    fclose(fp);
    fp = fopen(kf, "w");
    CHECK(fp);
    fclose(fp);
    CHECK(symlink(keep, ln) == 0);
    /* ts_file_in: a regular file only */
    CHECK(ts_file_in(sub, "f") && !ts_file_in(dir, "a") && !ts_file_in(sub, "nope"));
    CHECK(!ts_file_in(a, "link")); /* a link to a directory */
    CHECK_EQ_INT(ts_rmtree(dir), 0);
    struct stat st;
    CHECK(stat(dir, &st) != 0);
    CHECK(stat(kf, &st) == 0); /* the link was removed, not followed */
    CHECK_EQ_INT(ts_rmtree(keep), 0);
    free(sub);
    free(a);
    free(f);
    free(kf);
    free(ln);
}

TEST(strerror_names_project_codes)
{
    CHECK_STR(ts_strerror(TS_E_QUEUE_FULL), "job queue is full");
    CHECK_STR(ts_strerror(-ENOENT), strerror(ENOENT));
}

int main(void)
{
    RUN(buf_grows_and_stays_terminated);
    RUN(parse_long_is_strict);
    RUN(parse_bool_takes_true_and_false_only);
    RUN(uuid_is_v4_text);
    RUN(secure_uuid_is_v4_text_and_not_the_fast_stream);
    RUN(rmtree_removes_nested_dirs_but_not_link_targets);
    RUN(strerror_names_project_codes);
    return tap_done();
}
