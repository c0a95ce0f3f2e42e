#include "../../frontend/mgmt/archive.c"
#include "tap.h"

#include <sys/sysmacros.h>

/* One entry of a hand-made (possibly malicious) archive. */
struct tentry {
    const char *name;
    mode_t type;      /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFIFO, AE_IFCHR; 0 = hard link */
    const char *data; /* file contents, link target */
    size_t fill;      /* AE_IFREG: if set, write this many zero bytes instead of data */
    int no_size;      /* leave the size out of the header */
};

static char tmp[96];

static void mktmp(void)
{
    snprintf(tmp, sizeof tmp, "%s/t.XXXXXX", tbase);
    CHECK(mkdtemp(tmp));
}

static char *tpath(const char *rel)
{
    return xasprintf("%s/%s", tmp, rel);
}

static void make_archive(const char *path, enum archive_format fmt, const struct tentry *es,
                         size_t n)
{
    struct archive *a = archive_write_new();
    if (fmt == ARCHIVE_FMT_ZIP) {
        CHECK(archive_write_set_format_zip(a) == ARCHIVE_OK);
    } else {
        CHECK(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
        CHECK(archive_write_add_filter_gzip(a) == ARCHIVE_OK);
    }
    CHECK(archive_write_open_filename(a, path) == ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        const struct tentry *t = &es[i];
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, t->name);
        if (t->type == 0) {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_perm(e, 0644);
            archive_entry_set_hardlink(e, t->data);
            archive_entry_set_size(e, 0);
        } else {
            archive_entry_set_filetype(e, t->type);
            archive_entry_set_perm(e, t->type == AE_IFLNK ? 0777 : 0644);
        }
        if (t->type == AE_IFLNK)
            archive_entry_set_symlink(e, t->data);
        if (t->type == AE_IFCHR)
            archive_entry_set_rdev(e, makedev(1, 3));
        size_t size = t->type == AE_IFREG ? (t->fill ? t->fill : strlen(t->data)) : 0;
        if (t->type == AE_IFREG && !t->no_size)
            archive_entry_set_size(e, (la_int64_t)size);
        CHECK(archive_write_header(a, e) == ARCHIVE_OK);
        if (t->type == AE_IFREG) {
            if (t->fill) {
                char *z = xcalloc(1, 65536);
                for (size_t done = 0; done < size;) {
                    size_t k = size - done < 65536 ? size - done : 65536;
                    CHECK(archive_write_data(a, z, k) == (la_ssize_t)k);
                    done += k;
                }
                free(z);
            } else if (size) {
                CHECK(archive_write_data(a, t->data, size) == (la_ssize_t)size);
            }
        }
        archive_entry_free(e);
    }
    CHECK(archive_write_close(a) == ARCHIVE_OK);
    archive_write_free(a);
}

static int exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Extracts a hand-made archive and expects a refusal with exactly want; checks the destination
 * directory is gone afterwards. */
static void expect_refusal(enum archive_format fmt, const struct tentry *es, size_t n,
                           const struct archive_limits *lim, const char *want)
{
    mktmp();
    char *arc = tpath(fmt == ARCHIVE_FMT_ZIP ? "evil.mar" : "evil.tar.gz");
    char *dest = tpath("out/model");
    char *out = tpath("out");
    CHECK(mkdir(out, 0755) == 0);
    make_archive(arc, fmt, es, n);
    char err[512] = "";
    int rc = archive_extract(arc, dest, lim, err, sizeof err);
    if (rc != TS_E_BAD_ARCHIVE || strcmp(err, want)) {
        fprintf(stderr, "  rc %d err '%s', expected '%s'\n", rc, err, want);
        CHECK(0);
    }
    CHECK(!exists(dest));
    /* nothing landed next to the destination either */
    DIR *d = opendir(out);
    CHECK(d);
    struct dirent *de;
    int others = 0;
    while ((de = readdir(d)))
        others += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    CHECK_EQ_INT(others, 0);
    free(arc);
    free(dest);
    free(out);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define BOTH(es, lim, want)                                                                        \
    do {                                                                                           \
        expect_refusal(ARCHIVE_FMT_ZIP, es, N(es), lim, want);                                     \
        expect_refusal(ARCHIVE_FMT_TGZ, es, N(es), lim, want);                                     \
    } while (0)

TEST(refuses_dotdot)
{
    struct tentry es[] = {{"ok.txt", AE_IFREG, "fine", 0, 0},
                          {"../evil.txt", AE_IFREG, "pwned", 0, 0}};
    BOTH(es, NULL, "archive entry '../evil.txt': path escapes the archive directory");
    struct tentry es2[] = {{"a/b/../../../evil.txt", AE_IFREG, "pwned", 0, 0}};
    BOTH(es2, NULL, "archive entry 'a/b/../../../evil.txt': path escapes the archive directory");
}

TEST(refuses_absolute)
{
    struct tentry es[] = {{"/tmp/evil.txt", AE_IFREG, "pwned", 0, 0}};
    BOTH(es, NULL, "archive entry '/tmp/evil.txt': absolute paths are not allowed");
}

TEST(refuses_symlink_out)
{
    struct tentry es[] = {{"MAR-INF/MANIFEST.json", AE_IFREG, "{}", 0, 0},
                          {"etc", AE_IFLNK, "/etc", 0, 0}};
    BOTH(es, NULL, "archive entry 'etc': symbolic link to an absolute path '/etc'");
    struct tentry es2[] = {{"sub/up", AE_IFLNK, "../../secret", 0, 0}};
    BOTH(es2, NULL,
         "archive entry 'sub/up': symbolic link target '../../secret' escapes the archive "
         "directory");
}

TEST(refuses_write_through_symlink)
{
    struct tentry es[] = {{"d", AE_IFLNK, ".", 0, 0}, {"d/x.txt", AE_IFREG, "x", 0, 0}};
    BOTH(es, NULL, "archive entry 'd/x.txt': path goes through a symbolic link");
    /* a link that is fine alone but escapes through another link */
    struct tentry es2[] = {{"d", AE_IFLNK, ".", 0, 0}, {"e", AE_IFLNK, "d/..", 0, 0}};
    BOTH(es2, NULL, "archive entry 'e': symbolic link target 'd/..' escapes the archive directory");
    /* a file entry over an existing link */
    struct tentry es3[] = {{"f", AE_IFLNK, "g", 0, 0}, {"f", AE_IFREG, "x", 0, 0}};
    BOTH(es3, NULL, "archive entry 'f': path already exists and is not a regular file");
}

TEST(refuses_hardlinks_out)
{
    struct tentry es[] = {{"passwd", 0, "/etc/passwd", 0, 0}};
    expect_refusal(ARCHIVE_FMT_TGZ, es, N(es), NULL,
                   "archive entry 'passwd': hard link to an absolute path");
    struct tentry es2[] = {{"passwd", 0, "../../etc/passwd", 0, 0}};
    expect_refusal(ARCHIVE_FMT_TGZ, es2, N(es2), NULL,
                   "archive entry 'passwd': hard link target escapes the archive directory");
    struct tentry es3[] = {{"d", AE_IFLNK, ".", 0, 0}, {"h", 0, "d/nothing", 0, 0}};
    expect_refusal(ARCHIVE_FMT_TGZ, es3, N(es3), NULL,
                   "archive entry 'h': hard link target is not a file extracted earlier");
    /* (leaked the cleaned target "", which LeakSanitizer sees in the sanitizer build) */
    struct tentry es4[] = {{"h", 0, "./", 0, 0}};
    expect_refusal(ARCHIVE_FMT_TGZ, es4, N(es4), NULL,
                   "archive entry 'h': hard link to the archive root");
}

TEST(refuses_devices)
{
    struct tentry es[] = {{"fifo", AE_IFIFO, "", 0, 0}};
    expect_refusal(ARCHIVE_FMT_TGZ, es, N(es), NULL,
                   "archive entry 'fifo': devices, fifos and sockets are not allowed");
    struct tentry es2[] = {{"null", AE_IFCHR, "", 0, 0}};
    expect_refusal(ARCHIVE_FMT_TGZ, es2, N(es2), NULL,
                   "archive entry 'null': devices, fifos and sockets are not allowed");
}

TEST(refuses_oversize)
{
    struct archive_limits lim;
    archive_default_limits(&lim);
    lim.max_entry_bytes = 1000;
    struct tentry es[] = {{"small", AE_IFREG, "ok", 0, 0}, {"big.bin", AE_IFREG, "", 5000, 0}};
    BOTH(es, &lim, "archive entry 'big.bin': larger than the limit of 1000 bytes");
    /* no size in the header (zip data descriptor): the bytes themselves are counted */
    struct tentry es2[] = {{"bomb.bin", AE_IFREG, "", 3 << 20, 1}};
    lim.max_entry_bytes = 1 << 20;
    expect_refusal(ARCHIVE_FMT_ZIP, es2, N(es2), &lim,
                   "archive entry 'bomb.bin': larger than the limit of 1048576 bytes");
}

TEST(refuses_total_and_count)
{
    struct archive_limits lim;
    archive_default_limits(&lim);
    lim.max_total_bytes = 3000;
    struct tentry es[] = {
        {"a", AE_IFREG, "", 1500, 0}, {"b", AE_IFREG, "", 1500, 0}, {"c", AE_IFREG, "", 1500, 0}};
    BOTH(es, &lim, "archive entry 'c': archive expands to more than the limit of 3000 bytes");
    archive_default_limits(&lim);
    lim.max_entries = 3;
    struct tentry es2[] = {{"1", AE_IFREG, "1", 0, 0},
                           {"2", AE_IFREG, "2", 0, 0},
                           {"3", AE_IFREG, "3", 0, 0},
                           {"4", AE_IFREG, "4", 0, 0}};
    BOTH(es2, &lim, "archive entry '4': archive has more than 3 entries");
}

static void write_file_at(const char *rel, const char *text, mode_t mode)
{
    char *p = tpath(rel);
    FILE *f = fopen(p, "w");
    CHECK(f);
    fputs(text, f);
    fclose(f);
    chmod(p, mode);
    free(p);
}

static char *read_all(const char *p)
{
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    struct buf b;
    buf_init(&b);
    char c[4096];
    size_t n;
    while ((n = fread(c, 1, sizeof c, f)) > 0)
        buf_put(&b, c, n);
    fclose(f);
    buf_puts(&b, "");
    return (char *)b.data;
}

static void make_tree(void)
{
    char *p = tpath("src");
    CHECK(mkdir(p, 0755) == 0);
    free(p);
    p = tpath("src/MAR-INF");
    CHECK(mkdir(p, 0755) == 0);
    free(p);
    p = tpath("src/sub");
    CHECK(mkdir(p, 0755) == 0);
    free(p);
    p = tpath("src/sub/deeper");
    CHECK(mkdir(p, 0755) == 0);
    free(p);
    write_file_at("src/MAR-INF/MANIFEST.json", "{\"model\": {\"modelName\": \"m\"}}\n", 0644);
    write_file_at("src/model.pt", "weights", 0644);
    write_file_at("src/run.sh", "#!/bin/sh\n", 0755);
    write_file_at("src/sub/deeper/x.txt", "deep", 0644);
    p = tpath("src/link");
    CHECK(symlink("sub/deeper/x.txt", p) == 0);
    free(p);
}

static void check_tree(const char *root)
{
    const char *files[][2] = {{"MAR-INF/MANIFEST.json", "{\"model\": {\"modelName\": \"m\"}}\n"},
                              {"model.pt", "weights"},
                              {"run.sh", "#!/bin/sh\n"},
                              {"sub/deeper/x.txt", "deep"},
                              {"link", "deep"}};
    for (size_t i = 0; i < N(files); i++) {
        char *p = xasprintf("%s/%s", root, files[i][0]);
        char *s = read_all(p);
        CHECK_STR(s, files[i][1]);
        free(s);
        free(p);
    }
    char *p = xasprintf("%s/run.sh", root);
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK(st.st_mode & 0100);
    free(p);
    p = xasprintf("%s/link", root);
    CHECK(lstat(p, &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    free(p);
}

static void round_trip(enum archive_format fmt, const char *name)
{
    mktmp();
    make_tree();
    char *src = tpath("src"), *arc = tpath(name), *dest = tpath("dest");
    char err[512] = "";
    CHECK_EQ_INT(archive_create(src, arc, fmt, err, sizeof err), 0);
    enum archive_format got;
    CHECK_EQ_INT(archive_detect(arc, &got), 0);
    CHECK_EQ_INT(got, fmt);
    CHECK_EQ_INT(archive_extract(arc, dest, NULL, err, sizeof err), 0);
    check_tree(dest);
    /* extracting again into the now non-empty dest is refused */
    CHECK_EQ_INT(archive_extract(arc, dest, NULL, err, sizeof err), TS_E_EXISTS);
    check_tree(dest);
    /* an existing empty directory is fine */
    char *empty = tpath("empty");
    CHECK(mkdir(empty, 0755) == 0);
    CHECK_EQ_INT(archive_extract(arc, empty, NULL, err, sizeof err), 0);
    check_tree(empty);
    free(empty);
    free(src);
    free(arc);
    free(dest);
}

TEST(round_trip_zip)
{
    round_trip(ARCHIVE_FMT_ZIP, "m.mar");
}

TEST(round_trip_tgz)
{
    round_trip(ARCHIVE_FMT_TGZ, "m.tar.gz");
}

TEST(zip_is_deflated)
{
    mktmp();
    char *src = tpath("src");
    CHECK(mkdir(src, 0755) == 0);
    char *big = tpath("src/zeros");
    FILE *f = fopen(big, "w");
    for (int i = 0; i < 100000; i++)
        fputc('a', f);
    fclose(f);
    char *arc = tpath("z.mar");
    char err[256] = "";
    CHECK_EQ_INT(archive_create(src, arc, ARCHIVE_FMT_ZIP, err, sizeof err), 0);
    struct stat st;
    CHECK(stat(arc, &st) == 0);
    CHECK(st.st_size < 10000);
    free(src);
    free(big);
    free(arc);
}

TEST(copy_tree_format)
{
    mktmp();
    make_tree();
    char *src = tpath("src"), *dst = tpath("copy");
    char err[256] = "";
    CHECK_EQ_INT(archive_create(src, dst, ARCHIVE_FMT_DIR, err, sizeof err), 0);
    check_tree(dst);
    enum archive_format got;
    CHECK_EQ_INT(archive_detect(dst, &got), 0);
    CHECK_EQ_INT(got, ARCHIVE_FMT_DIR);
    free(src);
    free(dst);
}

TEST(detect_and_corrupt)
{
    mktmp();
    enum archive_format got;
    char *p = tpath("nope.mar");
    CHECK_EQ_INT(archive_detect(p, &got), -ENOENT);
    write_file_at("garbage.mar", "this is not an archive", 0644);
    free(p);
    p = tpath("garbage.mar");
    CHECK_EQ_INT(archive_detect(p, &got), TS_E_BAD_ARCHIVE);
    char *dest = tpath("dest");
    char err[512] = "";
    CHECK_EQ_INT(archive_extract(p, dest, NULL, err, sizeof err), TS_E_BAD_ARCHIVE);
    CHECK(strstr(err, "not a zip (.mar) or gzip tar archive"));
    CHECK(!exists(dest));
    free(p);

    /* a truncated zip: refused, nothing left behind */
    struct tentry es[] = {{"a.bin", AE_IFREG, "", 200000, 0}, {"b.bin", AE_IFREG, "", 200000, 0}};
    p = tpath("t.mar");
    make_archive(p, ARCHIVE_FMT_ZIP, es, N(es));
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK(truncate(p, st.st_size / 2) == 0);
    CHECK_EQ_INT(archive_detect(p, &got), 0);
    CHECK_EQ_INT(got, ARCHIVE_FMT_ZIP);
    CHECK_EQ_INT(archive_extract(p, dest, NULL, err, sizeof err), TS_E_BAD_ARCHIVE);
    CHECK(!exists(dest));
    free(p);
    free(dest);
}

/* Extracts a hand-made archive and expects the extraction directory to be its model root. */
static void expect_own_root(const char *name, enum archive_format fmt, const struct tentry *es,
                            size_t n)
{
    char *arc = tpath(name), *dest = xasprintf("%s.d", arc);
    char err[512] = "";
    make_archive(arc, fmt, es, n);
    CHECK_EQ_INT(archive_extract(arc, dest, NULL, err, sizeof err), 0);
    char *root = archive_model_root(dest);
    CHECK_STR(root, dest);
    free(root);
    free(arc);
    free(dest);
}

/* torch-model-archiver --archive-format tgz: regular files only (no directory entries), every
 * one under NAME/, the manifest last. The model root is NAME/; a tree with MAR-INF at the top, or
 * with more than one top entry, is its own root. */
TEST(tgz_under_one_top_directory)
{
    mktmp();
    struct tentry es[] = {
        {"resnet/model.py", AE_IFREG, "import torch\n", 0, 0},
        {"resnet/sub/labels.json", AE_IFREG, "{}", 0, 0},
        {"resnet/MAR-INF/MANIFEST.json", AE_IFREG, "{\"runtime\": \"python\"}", 0, 0}};
    char *arc = tpath("resnet.tar.gz"), *dest = tpath("dest");
    make_archive(arc, ARCHIVE_FMT_TGZ, es, N(es));
    char err[512] = "";
    CHECK_EQ_INT(archive_extract(arc, dest, NULL, err, sizeof err), 0);
    char *root = archive_model_root(dest);
    char *want = tpath("dest/resnet");
    CHECK_STR(root, want);
    char *p = xasprintf("%s/MAR-INF/MANIFEST.json", root);
    char *text = read_all(p);
    CHECK_STR(text, "{\"runtime\": \"python\"}");
    free(text);
    free(p);
    /* the root of the root is itself: MAR-INF is there */
    char *again = archive_model_root(root);
    CHECK_STR(again, want);
    free(again);
    free(root);
    free(want);
    free(arc);
    free(dest);

    /* two top entries, or a single top-level file: no descent */
    struct tentry two[] = {{"a/x.txt", AE_IFREG, "x", 0, 0}, {"b.txt", AE_IFREG, "b", 0, 0}};
    struct tentry one[] = {{"only.txt", AE_IFREG, "x", 0, 0}};
    expect_own_root("two.tar.gz", ARCHIVE_FMT_TGZ, two, N(two));
    expect_own_root("one.mar", ARCHIVE_FMT_ZIP, one, N(one));
}

int main(void)
{
    tbase_make("test_archive");
    RUN(refuses_dotdot);
    RUN(refuses_absolute);
    RUN(refuses_symlink_out);
    RUN(refuses_write_through_symlink);
    RUN(refuses_hardlinks_out);
    RUN(refuses_devices);
    RUN(refuses_oversize);
    RUN(refuses_total_and_count);
    RUN(round_trip_zip);
    RUN(round_trip_tgz);
    RUN(zip_is_deflated);
    RUN(copy_tree_format);
    RUN(detect_and_corrupt);
    RUN(tgz_under_one_top_directory);
    tbase_remove();
    return tap_done();
}
