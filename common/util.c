/*
 * util: the small helpers every binary needs. Allocation failures abort: the sizes that reach
 * these functions are bounded by the caller (see util.h).
 */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <ftw.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uuid/uuid.h>

const char *ts_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case TS_E_MODEL_NOT_FOUND:
        return "model not found";
    case TS_E_VERSION_NOT_FOUND:
        return "model version not found";
    case TS_E_QUEUE_FULL:
        return "job queue is full";
    case TS_E_NO_WORKER:
        return "no worker";
    case TS_E_BAD_INPUT:
        return "bad input";
    case TS_E_TOO_LARGE:
        return "too large";
    case TS_E_PROTOCOL:
        return "protocol error";
    case TS_E_INCOMPLETE:
        return "incomplete frame";
    case TS_E_BAD_ARCHIVE:
        return "bad archive";
    case TS_E_BAD_CONFIG:
        return "bad configuration";
    case TS_E_EXISTS:
        return "already exists";
    default:
        if (err < 0 && err > TS_E_BASE)
            return strerror(-err);
        return "unknown error";
    }
}

static void oom(size_t n)
{
    fprintf(stderr, "out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *few_or_alloc(void *few, size_t cap, size_t n, size_t size)
{
    return n <= cap ? few : xcalloc(n, size);
}

void free_unless_few(void *p, const void *few)
{
    if (p != few)
        free(p);
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void buf_init(struct buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    buf_init(b);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void buf_reserve(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void buf_put(struct buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_put_u8(struct buf *b, uint8_t v)
{
    buf_put(b, &v, 1);
}

void buf_put_i32(struct buf *b, int32_t v)
{
    uint32_t u = (uint32_t)v;
    uint8_t be[4] = {(uint8_t)(u >> 24), (uint8_t)(u >> 16), (uint8_t)(u >> 8), (uint8_t)u};
    buf_put(b, be, 4);
}

void buf_puts(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

int buf_read_file(struct buf *b, const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    char chunk[8192];
    size_t n, total = 0;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if ((total += n) > max) {
            rc = TS_E_TOO_LARGE;
            break;
        }
        buf_put(b, chunk, n);
    }
    if (!rc && ferror(f))
        rc = -EIO;
    fclose(f);
    return rc;
}

int64_t ts_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t ts_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ts_log4j_time(char *out, size_t n)
{
    int64_t ms = ts_wall_ms();
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ",%03d", (int)(ms % 1000));
}

int ts_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (end == s)
        return -EINVAL; /* no digits at all, e.g. only blanks */
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end)
        return -EINVAL;
    if (v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int ts_parse_bool(const char *s, int *out)
{
    if (s && !strcasecmp(s, "true")) {
        *out = 1;
        return 0;
    }
    if (s && !strcasecmp(s, "false")) {
        *out = 0;
        return 0;
    }
    return -EINVAL;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -errno : 0;
}

int ts_file_in(const char *dir, const char *name)
{
    char *p = xasprintf("%s/%s", dir, name);
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

int ts_rmtree(const char *path)
{
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Request ids need to be unique, not secret: a per-thread xoshiro256** generator seeded once
 * from getrandom() replaces libuuid, which re-seeds (6 syscalls) on every call. */
static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_random(void)
{
    static __thread uint64_t st[4];
    static __thread int seeded;
    if (!seeded) {
        if (getrandom(st, sizeof(st), 0) != (ssize_t)sizeof(st)) {
            uuid_t u; /* no getrandom: libuuid's own seeding */
            uuid_generate(u);
            memcpy(st, u, sizeof(u));
            st[2] = (uint64_t)ts_now_us();
            st[3] = (uint64_t)getpid();
        }
        seeded = 1;
    }
    uint64_t r = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return r;
}

/* RFC 4122 version 4 text of 16 random bytes */
static void uuid_format(uint8_t b[16], char out[37])
{
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    static const char hex[] = "0123456789abcdef";
    int k = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[k++] = '-';
        out[k++] = hex[b[i] >> 4];
        out[k++] = hex[b[i] & 15];
    }
    out[k] = '\0';
}

void ts_uuid(char out[37])
{
    uint8_t b[16];
    uint64_t hi = next_random(), lo = next_random();
    memcpy(b, &hi, 8);
    memcpy(b + 8, &lo, 8);
    uuid_format(b, out);
}

/* For ids that are capabilities: whoever knows a sequence id can continue or cancel that
 * sequence. ts_uuid's generator is fast but not cryptographic, and its outputs are public
 * (x-request-id on every response), so the next one could be computed from a few of them;
 * these come from the kernel's CSPRNG instead. */
void ts_uuid_secure(char out[37])
{
    uint8_t b[16];
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            uuid_t u; /* no getrandom(2): libuuid reads /dev/urandom */
            uuid_generate_random(u);
            memcpy(b, u, sizeof(b));
            break;
        }
        got += (size_t)n;
    }
    uuid_format(b, out);
}

static int check_name(const char *what, const char *s, int letter_first, char *why, size_t n)
{
    size_t len = s ? strlen(s) : 0;
    const char *bad = NULL;
    if (len == 0)
        bad = "is empty";
    else if (len > TS_NAME_MAX)
        bad = "is longer than 128 bytes";
    else if (letter_first && !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        bad = "must start with a letter";
    else if (strstr(s, ".."))
        bad = "must not contain \"..\"";
    for (const char *p = s; !bad && *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            bad = "may contain only letters, digits, '_', '-' and '.'";
    if (!bad)
        return 0;
    snprintf(why, n, "Invalid model %s '%.64s%s': it %s", what, s ? s : "", len > 64 ? "..." : "",
             bad);
    return -1;
}

int ts_check_model_name(const char *s, char *why, size_t n)
{
    return check_name("name", s, 1, why, n);
}

int ts_check_model_version(const char *s, char *why, size_t n)
{
    return check_name("version", s, 0, why, n);
}

/* Levenshtein distance, case-insensitive, for short keys (longer ones compare as far apart). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = diag + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *ts_closest(const char *s, const char *const *candidates, size_t n)
{
    size_t limit = strlen(s) / 3, best = SIZE_MAX;
    if (limit < 2)
        limit = 2;
    const char *pick = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(s, candidates[i]);
        if (d < best) {
            best = d;
            pick = candidates[i];
        }
    }
    return best <= limit ? pick : NULL;
}

/* The inode of the listening socket on port, from one /proc/net/tcp file; 0 if none. */
static unsigned long listen_inode(const char *table, int port)
{
    FILE *f = fopen(table, "r");
    if (!f)
        return 0;
    char line[512];
    unsigned long found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char local[128];
        unsigned st;
        unsigned long inode;
        if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*d %*d %lu", local, &st, &inode) != 3)
            continue;
        const char *colon = strrchr(local, ':');
        if (st == 0x0A && colon && strtol(colon + 1, NULL, 16) == port) /* 0A: LISTEN */
            found = inode;
    }
    fclose(f);
    return found;
}

void ts_port_holder(int port, char *out, size_t n)
{
    out[0] = '\0';
    unsigned long inode = listen_inode("/proc/net/tcp", port);
    if (!inode)
        inode = listen_inode("/proc/net/tcp6", port);
    if (!inode)
        return;
    char want[64];
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    DIR *proc = opendir("/proc");
    struct dirent *p;
    while (proc && !out[0] && (p = readdir(proc))) {
        if (p->d_name[0] < '0' || p->d_name[0] > '9')
            continue;
        char dir[300];
        snprintf(dir, sizeof(dir), "/proc/%s/fd", p->d_name);
        DIR *fds = opendir(dir);
        struct dirent *fd;
        while (fds && !out[0] && (fd = readdir(fds))) {
            char link[600], target[128];
            snprintf(link, sizeof(link), "%s/%s", dir, fd->d_name);
            ssize_t len = readlink(link, target, sizeof(target) - 1);
            if (len <= 0)
                continue;
            target[len] = '\0';
            if (strcmp(target, want))
                continue;
            char comm[64] = "?", path[300];
            snprintf(path, sizeof(path), "/proc/%s/comm", p->d_name);
            FILE *c = fopen(path, "r");
            if (c) {
                if (fgets(comm, sizeof(comm), c))
                    comm[strcspn(comm, "\n")] = '\0';
                fclose(c);
            }
            snprintf(out, n, "pid %s (%s)", p->d_name, comm);
        }
        if (fds)
            closedir(fds);
    }
    if (proc)
        closedir(proc);
}
