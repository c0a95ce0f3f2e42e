/*
 * archive: a model archive a client registers (.mar zip or .tar.gz), extracted by
 * frontend/mgmt/archive.c into a private directory under small limits (1 MiB an entry, 4 MiB in
 * all, 64 entries), then removed. The first byte picks the form: 0, the rest is the archive; 1,
 * the rest is gzip-compressed first, so that the fuzzer mutates a tar in the clear.
 *
 * Whatever the archive, nothing may appear beside the destination; after a refusal the
 * destination is gone; after a success every entry is a directory, a regular file within the
 * limits or a symbolic link that resolves inside the destination (or nowhere).
 */
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <zlib.h>

#include "fuzz.h"
#include "mgmt/archive.h"

#define MAX_ENTRY (1u << 20)
#define MAX_TOTAL (4u << 20)
#define MAX_ENTRIES 64

static char root[PATH_MAX]; /* realpath of the destination */
static uint64_t total;
static ino_t inodes[4 * MAX_ENTRIES];
static size_t n_inodes;

static int check_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_SL || flag == FTW_SLN) {
        char *res = realpath(path, NULL);
        if (res) {
            size_t rl = strlen(root);
            FUZZ_CHECK(!strncmp(res, root, rl) && (res[rl] == '/' || res[rl] == '\0'));
            free(res);
        }
        return 0;
    }
    if (S_ISDIR(st->st_mode))
        return 0;
    FUZZ_CHECK(S_ISREG(st->st_mode));
    FUZZ_CHECK((uint64_t)st->st_size <= MAX_ENTRY);
    for (size_t i = 0; i < n_inodes; i++)
        if (inodes[i] == st->st_ino)
            return 0;
    FUZZ_CHECK(n_inodes < sizeof(inodes) / sizeof(inodes[0]));
    inodes[n_inodes++] = st->st_ino;
    total += (uint64_t)st->st_size;
    FUZZ_CHECK(total <= MAX_TOTAL);
    return 0;
}

/* The names in dir other than "." and ".." (and `except`). */
static int others(const char *dir, const char *except)
{
    DIR *d = opendir(dir);
    FUZZ_CHECK(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            (!except || strcmp(de->d_name, except)))
            n++;
    closedir(d);
    return n;
}

static const void *gzip(const uint8_t *data, size_t size, size_t *out_len)
{
    static uint8_t *out;
    static size_t cap;
    uLong need = compressBound(size) + 32;
    if (need > cap) {
        free(out);
        cap = need;
        out = xmalloc(cap);
    }
    z_stream z;
    memset(&z, 0, sizeof(z));
    FUZZ_CHECK(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
    *out_len = z.total_out;
    deflateEnd(&z);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    const void *arc = data + 1;
    size_t arc_len = size - 1;
    if (data[0] == 1)
        arc = gzip(data + 1, size - 1, &arc_len);
    else if (data[0] != 0)
        return 0;
    const char *dir = fuzz_dir();
    char *box = xasprintf("%s/box", dir), *dest = xasprintf("%s/box/out", dir);
    mkdir(box, 0755);
    struct archive_limits lim = {MAX_ENTRY, MAX_TOTAL, MAX_ENTRIES};
    char err[1024] = "";
    int rc = archive_extract(fuzz_file(arc, arc_len), dest, &lim, err, sizeof(err));
    FUZZ_CHECK(others(dir, "box") == 0); /* nothing written beside the box ... */
    FUZZ_CHECK(others(box, "out") == 0); /* ... or beside the destination */
    struct stat st;
    if (rc) {
        FUZZ_CHECK(err[0]);
        FUZZ_CHECK(lstat(dest, &st) != 0); /* the partial tree is removed */
    } else {
        FUZZ_CHECK(realpath(dest, root));
        total = 0;
        n_inodes = 0;
        FUZZ_CHECK(nftw(dest, check_one, 16, FTW_PHYS) == 0);
        FUZZ_CHECK(ts_rmtree(dest) == 0);
    }
    free(box);
    free(dest);
    return 0;
}
