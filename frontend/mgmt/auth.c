/*
 * auth: TorchServe's token authorization (see auth.h).
 *
 * The key file is written to a temporary name in the working directory with mode 0600 from
 * the start (open O_EXCL), then renamed over key_file.json, so no other user can ever read a
 * key through a permissive umask, and a reader never sees half a file. Expiry instants are kept
 * on the wall clock, as the file shows them.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define KEY_LEN 8 /* base64 of 6 bytes */

struct key {
    char k[KEY_LEN + 1];
    int64_t expires_ms; /* 0 = never */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int enabled;
static double expiration_min = 60;
static struct key keys[3]; /* indexed by enum auth_scope */

static int new_key(struct key *k, int expires)
{
    static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char r[6];
    size_t got = 0;
    while (got < sizeof(r)) {
        ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        got += (size_t)n;
    }
    /* 6 bytes = 48 bits = exactly 8 sextets, no padding */
    for (int i = 0; i < 2; i++) {
        uint32_t v = (uint32_t)r[3 * i] << 16 | (uint32_t)r[3 * i + 1] << 8 | r[3 * i + 2];
        k->k[4 * i] = b64url[(v >> 18) & 63];
        k->k[4 * i + 1] = b64url[(v >> 12) & 63];
        k->k[4 * i + 2] = b64url[(v >> 6) & 63];
        k->k[4 * i + 3] = b64url[v & 63];
    }
    k->k[KEY_LEN] = '\0';
    k->expires_ms = expires ? ts_wall_ms() + (int64_t)(expiration_min * 60000.0) : 0;
    return 0;
}

/* ISO-8601 instant in UTC, as Java's Instant.toString() prints it. */
static void iso_instant(int64_t ms, char out[64])
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* Called with the lock held; writes k (indexed by enum auth_scope). */
static int write_key_file(const struct key *k)
{
    char em[64], ei[64];
    iso_instant(k[AUTH_MANAGEMENT].expires_ms, em);
    iso_instant(k[AUTH_INFERENCE].expires_ms, ei);
    char *body = xasprintf("{\n"
                           "  \"management\": {\n"
                           "    \"key\": \"%s\",\n"
                           "    \"expiration time\": \"%s\"\n"
                           "  },\n"
                           "  \"inference\": {\n"
                           "    \"key\": \"%s\",\n"
                           "    \"expiration time\": \"%s\"\n"
                           "  },\n"
                           "  \"API\": {\n"
                           "    \"key\": \"%s\"\n"
                           "  }\n"
                           "}",
                           k[AUTH_MANAGEMENT].k, em, k[AUTH_INFERENCE].k, ei, k[AUTH_API].k);
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", AUTH_KEY_FILE, (int)getpid());
    unlink(tmp);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
    } else {
        size_t n = strlen(body), off = 0;
        while (off < n) {
            ssize_t w = write(fd, body + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = -errno;
                break;
            }
            off += (size_t)w;
        }
        if (fchmod(fd, 0600) != 0 && rc == 0)
            rc = -errno;
        if (close(fd) != 0 && rc == 0)
            rc = -errno;
        if (rc == 0 && rename(tmp, AUTH_KEY_FILE) != 0)
            rc = -errno;
        if (rc)
            unlink(tmp);
    }
    free(body);
    return rc;
}

int auth_init(int on, double exp_min)
{
    pthread_mutex_lock(&lock);
    enabled = on;
    expiration_min = exp_min > 0 ? exp_min : 60;
    int rc = 0;
    if (on) {
        if ((rc = new_key(&keys[AUTH_MANAGEMENT], 1)) == 0 &&
            (rc = new_key(&keys[AUTH_INFERENCE], 1)) == 0 &&
            (rc = new_key(&keys[AUTH_API], 0)) == 0)
            rc = write_key_file(keys);
    }
    pthread_mutex_unlock(&lock);
    if (on && rc == 0) {
        char cwd[512];
        LOG_INFO("token authorization is on: keys in %s/%s (send Authorization: Bearer <key>)",
                 getcwd(cwd, sizeof(cwd)) ? cwd : ".", AUTH_KEY_FILE);
    }
    return rc;
}

int auth_enabled(void)
{
    pthread_mutex_lock(&lock);
    int on = enabled;
    pthread_mutex_unlock(&lock);
    return on;
}

/* "Bearer <token>" as TorchServe's ^Bearer\s+(\S+)$: the token, or NULL. */
static const char *parse_bearer(const char *h, size_t *len)
{
    if (!h || strncmp(h, "Bearer", 6))
        return NULL;
    const char *p = h + 6;
    if (!(*p == ' ' || *p == '\t'))
        return NULL;
    while (*p == ' ' || *p == '\t')
        p++;
    const char *t = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
        p++;
    if (*p || p == t)
        return NULL;
    *len = (size_t)(p - t);
    return t;
}

/* Compares the whole key whatever the input: the time does not depend on where they differ. */
static int const_time_eq(const char *a, size_t alen, const char *key)
{
    unsigned diff = alen != KEY_LEN;
    for (size_t i = 0; i < KEY_LEN; i++)
        diff |= (unsigned char)(i < alen ? a[i] : 0) ^ (unsigned char)key[i];
    return diff == 0;
}

int auth_check(enum auth_scope scope, const char *authorization)
{
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (enabled) {
        size_t len = 0;
        const char *t = parse_bearer(authorization, &len);
        const struct key *k = &keys[scope];
        if (!t || !const_time_eq(t, len, k->k) || (k->expires_ms && ts_wall_ms() >= k->expires_ms))
            rc = -EACCES;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int auth_rotate(enum auth_scope scope, char key[16], char expires[64])
{
    if (scope != AUTH_MANAGEMENT && scope != AUTH_INFERENCE)
        return -EINVAL;
    pthread_mutex_lock(&lock);
    /* the new key goes live only once key_file.json holds it: a file that cannot be written
     * leaves the old key working and the file as it was, never a key that nobody can read */
    struct key next[3];
    memcpy(next, keys, sizeof(next));
    int rc = enabled ? new_key(&next[scope], 1) : -EINVAL;
    if (rc == 0)
        rc = write_key_file(next);
    if (rc == 0) {
        keys[scope] = next[scope];
        snprintf(key, 16, "%s", next[scope].k);
        iso_instant(next[scope].expires_ms, expires);
    }
    memset(next, 0, sizeof(next));
    pthread_mutex_unlock(&lock);
    return rc;
}

void auth_shutdown(void)
{
    pthread_mutex_lock(&lock);
    memset(keys, 0, sizeof(keys));
    pthread_mutex_unlock(&lock);
}
