#include "../../common/rlog.c"

#include <sys/stat.h>

#include "tap.h"

/* Sizes as config.properties writes them. */
TEST(parse_size)
{
    long v;
    CHECK(rlog_parse_size("4096", &v) == 0 && v == 4096);
    CHECK(rlog_parse_size("10MB", &v) == 0 && v == 10L << 20);
    CHECK(rlog_parse_size("512KB", &v) == 0 && v == 512L << 10);
    CHECK(rlog_parse_size("2k", &v) == 0 && v == 2048);
    CHECK(rlog_parse_size("1G", &v) == 0 && v == 1L << 30);
    CHECK(rlog_parse_size("3b", &v) == 0 && v == 3);
    const char *bad[] = {"", "0", "-1", "MB", "10 MB", "10TB", "1.5MB", "99999999999999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(rlog_parse_size(bad[i], &v) == -EINVAL);
}

static off_t size_of(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? st.st_size : -1;
}

/* Lines are written whole, files rotate before they pass max_size, and only max_files rotated
 * files are kept: the newest lines survive, in order. close() flushes what is buffered. */
TEST(rotation_keeps_whole_lines)
{
    char path[128], p1[140], p2[140], p3[140];
    snprintf(path, sizeof(path), "%s/sub/dir/a.log", tbase);
    snprintf(p1, sizeof(p1), "%s.1", path);
    snprintf(p2, sizeof(p2), "%s.2", path);
    snprintf(p3, sizeof(p3), "%s.3", path);
    char why[256];
    struct rlog *r = rlog_open(path, 100, 2, why, sizeof(why));
    CHECK(r != NULL);
    for (int i = 0; i < 40; i++) {
        char line[32];
        int n = snprintf(line, sizeof(line), "line %02d xxxxxxxxxxxxxxxxxx\n", i); /* 27 B */
        rlog_write(r, line, (size_t)n);
    }
    rlog_close(r);
    CHECK(size_of(path) > 0 && size_of(path) <= 100);
    CHECK(size_of(p1) > 0 && size_of(p1) <= 100);
    CHECK(size_of(p2) > 0 && size_of(p2) <= 100);
    CHECK(size_of(p3) == -1);
    /* the last line is in the current file, the ones before it in .1 */
    struct buf b;
    buf_init(&b);
    CHECK(buf_read_file(&b, path, 1000) == 0);
    CHECK(strstr((char *)b.data, "line 39") != NULL);
    CHECK(b.len % 27 == 0);
    buf_reset(&b);
    CHECK(buf_read_file(&b, p1, 1000) == 0);
    CHECK(b.len % 27 == 0 && b.len == 81 && !strncmp((char *)b.data, "line ", 5));
    buf_free(&b);
}

TEST(open_failure_says_why)
{
    char why[256] = "";
    CHECK(rlog_open("/proc/no/such/x.log", 100, 1, why, sizeof(why)) == NULL);
    CHECK(strstr(why, "cannot open /proc/no/such/x.log") == why);
}

int main(void)
{
    tbase_make("test_rlog");
    RUN(parse_size);
    RUN(rotation_keeps_whole_lines);
    RUN(open_failure_says_why);
    tbase_remove();
    return tap_done();
}
