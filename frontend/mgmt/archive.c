/*
 * archive: .mar (zip) and .tar.gz model archives, read and written with libarchive.
 *
 * Extraction does not use archive_write_disk: we need to count the bytes actually written (a
 * header's size can lie, a zip bomb's always does) and to name the entry we refuse. So every
 * entry goes through the same checks before anything touches the disk:
 *   - its path is relative, has no `..` component, and no existing component of it is a
 *     symbolic link (nothing is ever written through a link, which defeats link-then-write
 *     tricks such as `d -> .` followed by `d/../x`);
 *   - it is a directory, a regular file, a symbolic link or a hard link; devices, fifos and
 *     sockets are refused;
 *   - a link's target is relative and stays in the tree (checked lexically at once, then once
 *     more with realpath() after the last entry, which catches chains of links);
 *   - sizes and counts stay under the limits, counting the bytes we write.
 * On any refusal the partial tree is removed, so a caller never sees half an archive.
 */
#include "archive.h"

/* -Ifrontend makes <archive.h> resolve to our own header, so libarchive's is named in full */
#include </usr/include/archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define COPY_CHUNK 65536

void archive_default_limits(struct archive_limits *l)
{
    l->max_entry_bytes = 2ull << 30;
    l->max_total_bytes = 4ull << 30;
    l->max_entries = 10000;
}

int archive_detect(const char *src, enum archive_format *fmt)
{
    struct stat st;
    if (stat(src, &st) != 0)
        return -errno;
    if (S_ISDIR(st.st_mode)) {
        *fmt = ARCHIVE_FMT_DIR;
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return TS_E_BAD_ARCHIVE;
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    unsigned char m[4] = {0};
    ssize_t n = read(fd, m, sizeof m);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    /* content first: a .mar that is really a tarball (or the reverse) still loads */
    if (n >= 4 && m[0] == 'P' && m[1] == 'K' &&
        ((m[2] == 3 && m[3] == 4) || (m[2] == 5 && m[3] == 6))) {
        *fmt = ARCHIVE_FMT_ZIP;
        return 0;
    }
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
        *fmt = ARCHIVE_FMT_TGZ;
        return 0;
    }
    return TS_E_BAD_ARCHIVE;
}

/* ---- removal ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* Removes dir and everything under it, never following links. */
static void remove_tree(const char *dir)
{
    nftw(dir, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

static void remove_contents(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = xasprintf("%s/%s", dir, de->d_name);
        remove_tree(p);
        free(p);
    }
    closedir(d);
}

/* ---- path checks ---- */

/* Normalises an entry name: drops "./" and empty components. Returns a malloc'd relative path
 * ("" for the root itself), or NULL with *why set. */
static char *clean_path(const char *name, const char **why)
{
    if (name[0] == '/') {
        *why = "absolute paths are not allowed";
        return NULL;
    }
    struct buf b;
    buf_init(&b);
    buf_puts(&b, "");
    const char *p = name;
    while (*p) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            buf_free(&b);
            *why = "path escapes the archive directory";
            return NULL;
        }
        if (n && !(n == 1 && p[0] == '.')) {
            if (b.len)
                buf_put_u8(&b, '/');
            buf_put(&b, p, n);
        }
        p += n;
        if (*p == '/')
            p++;
    }
    return (char *)b.data;
}

/* Whether a symbolic link at rel (cleaned, relative to the root) pointing at target stays inside
 * the tree, resolving `..` lexically from the link's directory. 0 if so, else the reason is
 * written into why. */
static int check_symlink(const char *rel, const char *target, char *why, size_t whylen)
{
    if (!*target) {
        snprintf(why, whylen, "symbolic link with an empty target");
        return -1;
    }
    if (target[0] == '/') {
        snprintf(why, whylen, "symbolic link to an absolute path '%s'", target);
        return -1;
    }
    long depth = 0;
    for (const char *c = rel; *c; c++)
        depth += *c == '/';
    for (const char *p = target; *p;) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0) {
                snprintf(why, whylen, "symbolic link target '%s' escapes the archive directory",
                         target);
                return -1;
            }
        } else if (n && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p += n;
        if (*p == '/')
            p++;
    }
    return 0;
}

/* Creates (if create) the parent directories of rel under root, refusing to go through a
 * symbolic link or a non-directory. NULL if fine, else the reason (errno-based ones in *e). */
static const char *make_parents(const char *root, const char *rel, int create, int *e)
{
    *e = 0;
    char *full = xasprintf("%s/%s", root, rel);
    size_t rootlen = strlen(root);
    const char *why = NULL;
    for (char *c = full + rootlen + 1; *c && !why; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        struct stat st;
        if (lstat(full, &st) != 0) {
            if (errno != ENOENT || !create || mkdir(full, 0755) != 0) {
                *e = errno;
                why = "cannot create its directory";
            }
        } else if (S_ISLNK(st.st_mode)) {
            why = "path goes through a symbolic link";
        } else if (!S_ISDIR(st.st_mode)) {
            why = "a parent of this path is not a directory";
        }
        *c = '/';
    }
    free(full);
    return why;
}

struct xstate {
    const char *src;
    const char *dest;
    const struct archive_limits *lim;
    uint64_t total;
    char **links; /* cleaned paths of symlinks, checked again at the end */
    size_t n_links;
    char *chunk; /* COPY_CHUNK bytes */
    char *err;
    size_t errlen;
};

static int refuse(struct xstate *x, const char *entry, const char *why, int e)
{
    if (e)
        snprintf(x->err, x->errlen, "archive entry '%s': %s: %s", entry, why, strerror(e));
    else
        snprintf(x->err, x->errlen, "archive entry '%s': %s", entry, why);
    return TS_E_BAD_ARCHIVE;
}

static int write_file(struct xstate *x, struct archive *a, struct archive_entry *ent,
                      const char *name, const char *rel)
{
    const struct archive_limits *lim = x->lim;
    if (archive_entry_size_is_set(ent) && archive_entry_size(ent) > 0 &&
        (uint64_t)archive_entry_size(ent) > lim->max_entry_bytes) {
        char why[96];
        snprintf(why, sizeof why, "larger than the limit of %llu bytes",
                 (unsigned long long)lim->max_entry_bytes);
        return refuse(x, name, why, 0);
    }
    char *full = xasprintf("%s/%s", x->dest, rel);
    struct stat st;
    if (lstat(full, &st) == 0 && !S_ISREG(st.st_mode)) {
        free(full);
        return refuse(x, name, "path already exists and is not a regular file", 0);
    }
    mode_t perm = 0644 | (archive_entry_perm(ent) & 0111);
    int fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, perm);
    free(full);
    if (fd < 0)
        return refuse(x, name, "cannot create file", errno);
    char *chunk = x->chunk;
    uint64_t written = 0;
    int rc = 0;
    for (;;) {
        la_ssize_t n = archive_read_data(a, chunk, COPY_CHUNK);
        if (n == 0)
            break;
        if (n < 0) {
            snprintf(x->err, x->errlen, "archive entry '%s': %s", name,
                     archive_error_string(a) ? archive_error_string(a) : "read error");
            rc = TS_E_BAD_ARCHIVE;
            break;
        }
        written += (uint64_t)n;
        x->total += (uint64_t)n;
        if (written > lim->max_entry_bytes) {
            char why[96];
            snprintf(why, sizeof why, "larger than the limit of %llu bytes",
                     (unsigned long long)lim->max_entry_bytes);
            rc = refuse(x, name, why, 0);
            break;
        }
        if (x->total > lim->max_total_bytes) {
            char why[128];
            snprintf(why, sizeof why, "archive expands to more than the limit of %llu bytes",
                     (unsigned long long)lim->max_total_bytes);
            rc = refuse(x, name, why, 0);
            break;
        }
        const char *p = chunk;
        size_t left = (size_t)n;
        while (left) {
            ssize_t w = write(fd, p, left);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                int e = errno;
                close(fd);
                snprintf(x->err, x->errlen, "archive entry '%s': write failed: %s", name,
                         strerror(e));
                return -e;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (close(fd) != 0 && !rc) {
        int e = errno;
        snprintf(x->err, x->errlen, "archive entry '%s': write failed: %s", name, strerror(e));
        return -e;
    }
    return rc;
}

static int extract_entry(struct xstate *x, struct archive *a, struct archive_entry *ent)
{
    const char *name = archive_entry_pathname(ent);
    if (!name)
        name = archive_entry_pathname_utf8(ent);
    if (!name)
        return refuse(x, "?", "unreadable entry name", 0);
    const char *why = NULL;
    char *rel = clean_path(name, &why);
    if (!rel)
        return refuse(x, name, why, 0);
    int rc = 0, e = 0;
    const char *hard = archive_entry_hardlink(ent);
    mode_t type = archive_entry_filetype(ent);
    if (!*rel) { /* "./" or "/" alone: the root itself */
        if (type != AE_IFDIR && type != 0)
            rc = refuse(x, name, "entry names the archive root", 0);
        free(rel);
        return rc;
    }
    if ((why = make_parents(x->dest, rel, 1, &e))) {
        free(rel);
        return refuse(x, name, why, e);
    }
    char *full = xasprintf("%s/%s", x->dest, rel);
    struct stat st;
    if (hard) {
        char *trel = clean_path(hard, &why);
        if (!trel) {
            rc = refuse(x, name,
                        hard[0] == '/' ? "hard link to an absolute path"
                                       : "hard link target escapes the archive directory",
                        0);
        } else if (!*trel) {
            rc = refuse(x, name, "hard link to the archive root", 0);
        } else {
            char *tfull = xasprintf("%s/%s", x->dest, trel);
            int dummy;
            /* the target must be a file we extracted, reached without links */
            if (make_parents(x->dest, trel, 0, &dummy) || lstat(tfull, &st) != 0 ||
                !S_ISREG(st.st_mode))
                rc = refuse(x, name, "hard link target is not a file extracted earlier", 0);
            else if (lstat(full, &st) == 0)
                rc = refuse(x, name, "path already exists", 0);
            else if (link(tfull, full) != 0)
                rc = refuse(x, name, "cannot create hard link", errno);
            free(tfull);
        }
        free(trel); /* "" for a link to the root too */
    } else {
        switch (type) {
        case AE_IFDIR:
            if (lstat(full, &st) == 0) {
                if (!S_ISDIR(st.st_mode))
                    rc = refuse(x, name, "path already exists and is not a directory", 0);
            } else if (mkdir(full, 0755) != 0) {
                rc = refuse(x, name, "cannot create directory", errno);
            }
            break;
        case AE_IFLNK: {
            const char *target = archive_entry_symlink(ent);
            if (!target)
                target = "";
            char msg[PATH_MAX + 128];
            if (check_symlink(rel, target, msg, sizeof msg)) {
                rc = refuse(x, name, msg, 0);
            } else if (lstat(full, &st) == 0) {
                rc = refuse(x, name, "path already exists", 0);
            } else if (symlink(target, full) != 0) {
                rc = refuse(x, name, "cannot create symbolic link", errno);
            } else {
                x->links = xrealloc(x->links, (x->n_links + 1) * sizeof *x->links);
                x->links[x->n_links++] = xstrdup(rel);
            }
            break;
        }
        case 0: /* zip entries written without a Unix mode */
        case AE_IFREG:
            rc = write_file(x, a, ent, name, rel);
            break;
        default:
            rc = refuse(x, name, "devices, fifos and sockets are not allowed", 0);
        }
    }
    free(full);
    free(rel);
    return rc;
}

/* After the last entry: every symbolic link must resolve inside the tree. */
static int check_links(struct xstate *x)
{
    char *root = realpath(x->dest, NULL);
    if (!root) {
        snprintf(x->err, x->errlen, "%s: %s", x->dest, strerror(errno));
        return -errno;
    }
    size_t rl = strlen(root);
    int rc = 0;
    for (size_t i = 0; i < x->n_links && !rc; i++) {
        char *full = xasprintf("%s/%s", x->dest, x->links[i]);
        char target[PATH_MAX], why[PATH_MAX + 128];
        ssize_t tl = readlink(full, target, sizeof target - 1);
        target[tl > 0 ? tl : 0] = '\0';
        char *res = realpath(full, NULL);
        if (!res) {
            snprintf(why, sizeof why,
                     "symbolic link target '%s' does not resolve inside the archive", target);
            rc = refuse(x, x->links[i], why, 0);
        } else if (strncmp(res, root, rl) || (res[rl] != '/' && res[rl] != '\0')) {
            snprintf(why, sizeof why, "symbolic link target '%s' escapes the archive directory",
                     target);
            rc = refuse(x, x->links[i], why, 0);
        }
        free(res);
        free(full);
    }
    free(root);
    return rc;
}

char *archive_model_root(const char *dir)
{
    char *mar_inf = xasprintf("%s/MAR-INF", dir);
    struct stat st;
    int has_mar_inf = lstat(mar_inf, &st) == 0;
    free(mar_inf);
    DIR *d = has_mar_inf ? NULL : opendir(dir);
    if (!d)
        return xstrdup(dir);
    char *only = NULL;
    int count = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && count++ == 0)
            only = xasprintf("%s/%s", dir, de->d_name);
    closedir(d);
    /* lstat: a top entry that is a link is not followed, the tree is used as it is */
    if (count == 1 && lstat(only, &st) == 0 && S_ISDIR(st.st_mode))
        return only;
    free(only);
    return xstrdup(dir);
}

int archive_extract(const char *src, const char *dest_dir, const struct archive_limits *lim,
                    char *err, size_t errlen)
{
    struct archive_limits deflim;
    if (!lim) {
        archive_default_limits(&deflim);
        lim = &deflim;
    }
    enum archive_format fmt;
    int rc = archive_detect(src, &fmt);
    if (rc || fmt == ARCHIVE_FMT_DIR) {
        if (rc && rc != TS_E_BAD_ARCHIVE)
            snprintf(err, errlen, "%s: %s", src, strerror(-rc));
        else
            snprintf(err, errlen, "%s: not a zip (.mar) or gzip tar archive", src);
        return rc ? rc : TS_E_BAD_ARCHIVE;
    }

    int created = 0;
    if (mkdir(dest_dir, 0755) == 0) {
        created = 1;
    } else if (errno == EEXIST) {
        DIR *d = opendir(dest_dir);
        if (!d) {
            snprintf(err, errlen, "%s: %s", dest_dir, strerror(errno));
            return -errno;
        }
        struct dirent *de;
        int empty = 1;
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                empty = 0;
        closedir(d);
        if (!empty) {
            snprintf(err, errlen, "%s: exists and is not empty", dest_dir);
            return TS_E_EXISTS;
        }
    } else {
        int e = errno;
        snprintf(err, errlen, "%s: cannot create: %s", dest_dir, strerror(e));
        return -e;
    }

    struct archive *a = archive_read_new();
    if (fmt == ARCHIVE_FMT_ZIP) {
        archive_read_support_format_zip(a);
    } else {
        archive_read_support_filter_gzip(a);
        archive_read_support_format_tar(a);
        archive_read_support_format_gnutar(a);
    }
    struct xstate x = {src, dest_dir, lim, 0, NULL, 0, xmalloc(COPY_CHUNK), err, errlen};
    if (archive_read_open_filename(a, src, COPY_CHUNK) != ARCHIVE_OK) {
        snprintf(err, errlen, "%s: %s", src, archive_error_string(a));
        rc = TS_E_BAD_ARCHIVE;
    }
    size_t count = 0;
    while (!rc) {
        struct archive_entry *ent;
        int r = archive_read_next_header(a, &ent);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            snprintf(err, errlen, "%s: %s", src,
                     archive_error_string(a) ? archive_error_string(a) : "corrupt archive");
            rc = TS_E_BAD_ARCHIVE;
            break;
        }
        if (++count > lim->max_entries) {
            char why[96];
            snprintf(why, sizeof why, "archive has more than %zu entries", lim->max_entries);
            const char *n = archive_entry_pathname(ent);
            rc = refuse(&x, n ? n : "?", why, 0);
            break;
        }
        rc = extract_entry(&x, a, ent);
    }
    if (!rc)
        rc = check_links(&x);
    archive_read_free(a);
    for (size_t i = 0; i < x.n_links; i++)
        free(x.links[i]);
    free(x.links);
    free(x.chunk);
    if (rc) {
        if (created)
            remove_tree(dest_dir);
        else
            remove_contents(dest_dir);
    }
    return rc;
}

/* ---- creation ---- */

struct cstate {
    struct archive *a;
    char *err;
    size_t errlen;
};

static int add_tree(struct cstate *c, const char *root, const char *rel);

static int add_path(struct cstate *c, const char *root, const char *rel)
{
    char *full = xasprintf("%s/%s", root, rel);
    struct stat st;
    int rc = 0;
    if (lstat(full, &st) != 0) {
        rc = -errno;
        snprintf(c->err, c->errlen, "%s: %s", full, strerror(errno));
        free(full);
        return rc;
    }
    struct archive_entry *ent = archive_entry_new();
    archive_entry_set_pathname(ent, rel);
    archive_entry_set_mtime(ent, st.st_mtime, 0);
    if (S_ISDIR(st.st_mode)) {
        archive_entry_set_filetype(ent, AE_IFDIR);
        archive_entry_set_perm(ent, 0755);
        if (archive_write_header(c->a, ent) != ARCHIVE_OK)
            rc = TS_E_BAD_ARCHIVE;
        else
            rc = add_tree(c, root, rel);
    } else if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(full, target, sizeof target - 1);
        if (n < 0) {
            rc = -errno;
            snprintf(c->err, c->errlen, "%s: %s", full, strerror(errno));
        } else {
            target[n] = '\0';
            archive_entry_set_filetype(ent, AE_IFLNK);
            archive_entry_set_perm(ent, 0777);
            archive_entry_set_symlink(ent, target);
            if (archive_write_header(c->a, ent) != ARCHIVE_OK)
                rc = TS_E_BAD_ARCHIVE;
        }
    } else if (S_ISREG(st.st_mode)) {
        archive_entry_set_filetype(ent, AE_IFREG);
        archive_entry_set_perm(ent, st.st_mode & 0755);
        archive_entry_set_size(ent, st.st_size);
        int fd = open(full, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            snprintf(c->err, c->errlen, "%s: %s", full, strerror(errno));
        } else if (archive_write_header(c->a, ent) != ARCHIVE_OK) {
            rc = TS_E_BAD_ARCHIVE;
        } else {
            char *chunk = xmalloc(COPY_CHUNK);
            ssize_t n;
            while ((n = read(fd, chunk, COPY_CHUNK)) > 0)
                if (archive_write_data(c->a, chunk, (size_t)n) != n) {
                    rc = TS_E_BAD_ARCHIVE;
                    break;
                }
            if (n < 0) {
                rc = -errno;
                snprintf(c->err, c->errlen, "%s: %s", full, strerror(errno));
            }
            free(chunk);
        }
        if (fd >= 0)
            close(fd);
    } else {
        snprintf(c->err, c->errlen, "%s: not a regular file, directory or symbolic link", full);
        rc = TS_E_BAD_ARCHIVE;
    }
    if (rc == TS_E_BAD_ARCHIVE && !c->err[0])
        snprintf(c->err, c->errlen, "%s: %s", rel, archive_error_string(c->a));
    archive_entry_free(ent);
    free(full);
    return rc;
}

/* Adds every child of root/rel (rel "" = root) in name order, so archives are reproducible. */
static int add_tree(struct cstate *c, const char *root, const char *rel)
{
    char *dir = *rel ? xasprintf("%s/%s", root, rel) : xstrdup(root);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        int e = errno;
        snprintf(c->err, c->errlen, "%s: %s", dir, strerror(e));
        free(dir);
        return -e;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (!rc && strcmp(nm, ".") && strcmp(nm, "..")) {
            char *child = *rel ? xasprintf("%s/%s", rel, nm) : xstrdup(nm);
            rc = add_path(c, root, child);
            free(child);
        }
        free(names[i]);
    }
    free(names);
    free(dir);
    return rc;
}

/* ARCHIVE_FMT_DIR: a plain copy of the tree (torch-model-archiver's no-archive format). */
static int copy_tree(const char *src, const char *dst, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(src, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", src, strerror(e));
        return -e;
    }
    if (S_ISDIR(st.st_mode)) {
        if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            snprintf(err, errlen, "%s: %s", dst, strerror(e));
            return -e;
        }
        struct dirent **names;
        int n = scandir(src, &names, NULL, alphasort);
        if (n < 0) {
            int e = errno;
            snprintf(err, errlen, "%s: %s", src, strerror(e));
            return -e;
        }
        int rc = 0;
        for (int i = 0; i < n; i++) {
            const char *nm = names[i]->d_name;
            if (!rc && strcmp(nm, ".") && strcmp(nm, "..")) {
                char *s = xasprintf("%s/%s", src, nm), *d = xasprintf("%s/%s", dst, nm);
                rc = copy_tree(s, d, err, errlen);
                free(s);
                free(d);
            }
            free(names[i]);
        }
        free(names);
        return rc;
    }
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(src, target, sizeof target - 1);
        if (n < 0 || (target[n] = '\0', symlink(target, dst) != 0)) {
            int e = errno;
            snprintf(err, errlen, "%s: %s", dst, strerror(e));
            return -e;
        }
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file, directory or symbolic link", src);
        return TS_E_BAD_ARCHIVE;
    }
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", src, strerror(e));
        return -e;
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0755);
    if (out < 0) {
        int e = errno;
        close(in);
        snprintf(err, errlen, "%s: %s", dst, strerror(e));
        return -e;
    }
    char *chunk = xmalloc(COPY_CHUNK);
    int rc = 0;
    ssize_t n;
    while ((n = read(in, chunk, COPY_CHUNK)) > 0) {
        char *p = chunk;
        while (n > 0) {
            ssize_t w = write(out, p, (size_t)n);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                break;
            }
            p += w;
            n -= w;
        }
        if (n > 0)
            break;
    }
    if (n != 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: copy failed: %s", dst, strerror(errno));
    }
    free(chunk);
    close(in);
    if (close(out) != 0 && !rc) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", dst, strerror(errno));
    }
    return rc;
}

int archive_create(const char *src_dir, const char *out_path, enum archive_format fmt, char *err,
                   size_t errlen)
{
    err[0] = '\0';
    struct stat st;
    if (stat(src_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: not a directory", src_dir);
        return -ENOTDIR;
    }
    if (fmt == ARCHIVE_FMT_DIR) {
        int rc = copy_tree(src_dir, out_path, err, errlen);
        if (rc)
            remove_tree(out_path);
        return rc;
    }
    /* written next to the target and renamed, so a reader never sees half an archive */
    char *tmp = xasprintf("%s.tmp.%ld", out_path, (long)getpid());
    struct archive *a = archive_write_new();
    if (fmt == ARCHIVE_FMT_ZIP || fmt == ARCHIVE_FMT_ZIP_STORE) {
        archive_write_set_format_zip(a);
        if (fmt == ARCHIVE_FMT_ZIP)
            archive_write_zip_set_compression_deflate(a);
        else
            archive_write_zip_set_compression_store(a);
    } else {
        archive_write_set_format_pax_restricted(a);
        archive_write_add_filter_gzip(a);
    }
    int rc = 0;
    if (archive_write_open_filename(a, tmp) != ARCHIVE_OK) {
        snprintf(err, errlen, "%s: %s", out_path, archive_error_string(a));
        rc = archive_errno(a) > 0 ? -archive_errno(a) : TS_E_BAD_ARCHIVE;
    } else {
        struct cstate c = {a, err, errlen};
        rc = add_tree(&c, src_dir, "");
        if (archive_write_close(a) != ARCHIVE_OK && !rc) {
            snprintf(err, errlen, "%s: %s", out_path, archive_error_string(a));
            rc = TS_E_BAD_ARCHIVE;
        }
    }
    archive_write_free(a);
    if (!rc && rename(tmp, out_path) != 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", out_path, strerror(errno));
    }
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
}
