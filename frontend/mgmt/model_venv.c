/*
 * model_venv: see model_venv.h. Each command runs with posix_spawn (never fork: the frontend has
 * gRPC's threads), its stdout and stderr on one pipe read to the end; the whole output goes to
 * the server's log, and a failure's message keeps pip's "ERROR:" lines (else the last lines).
 */
#include "model_venv.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

extern char **environ;

#define OUTPUT_KEPT (64u << 10) /* of a command's output: its last 64 KiB */

/* Runs argv in cwd; out gets the end of its output. The exit status (0..255), 256 + the signal
 * that ended it, or -errno when it could not be started. */
static int run(char *const argv[], const char *cwd, struct buf *out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (cwd)
        posix_spawn_file_actions_addchdir_np(&fa, cwd);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        return -rc;
    }
    char chunk[4096];
    for (;;) {
        ssize_t n = read(p[0], chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        buf_put(out, chunk, (size_t)n);
        if (out->len > OUTPUT_KEPT) { /* keep the end: pip's errors come last */
            size_t drop = out->len - OUTPUT_KEPT / 2;
            memmove(out->data, out->data + drop, out->len - drop);
            out->len -= drop;
        }
    }
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 256 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* pip's "ERROR:" lines of out, else its last lines; at most n bytes into dst. */
static void summary(const struct buf *out, char *dst, size_t n)
{
    dst[0] = '\0';
    const char *s = out->data ? (const char *)out->data : "", *end = s + out->len;
    size_t k = 0;
    for (const char *p = s; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (len >= 6 && !strncmp(p, "ERROR:", 6) && k + 2 < n)
            k += (size_t)snprintf(dst + k, n - k, "%s%.*s", k ? " " : "", (int)len, p);
        p += len + 1;
    }
    if (k)
        return;
    /* no ERROR line: the last three non-empty lines */
    const char *from = end;
    for (int lines = 0; from > s && lines < 3;) {
        from--;
        if (*from == '\n' && from + 1 < end && from[1] != '\n')
            lines++;
    }
    for (const char *p = from; p < end && k + 2 < n; p++)
        if (*p != '\n' || (k && dst[k - 1] != ' '))
            dst[k++] = *p == '\n' ? ' ' : *p;
    while (k && dst[k - 1] == ' ')
        k--;
    dst[k < n ? k : n - 1] = '\0';
}

static void log_output(const char *what, const struct buf *out)
{
    if (out->len)
        LOG_INFO("%s:\n%.*s", what, (int)out->len, (const char *)out->data);
}

int model_venv_install(const char *python, const char *venv_dir, const char *model_dir,
                       const char *requirements, char *err, size_t errlen)
{
    struct buf out;
    buf_init(&out);
    char tail[768];
    char *mk[] = {(char *)python,   "-m", "venv", "--system-site-packages", "--without-pip",
                  (char *)venv_dir, NULL};
    int rc = run(mk, model_dir, &out);
    log_output("python -m venv", &out);
    if (rc != 0) {
        summary(&out, tail, sizeof(tail));
        snprintf(err, errlen, "cannot create the virtual environment %s (%s): %s", venv_dir,
                 rc < 0 ? strerror(-rc) : "python -m venv failed",
                 *tail ? tail : "no output (is python3-venv installed?)");
        buf_free(&out);
        return TS_E_BAD_CONFIG;
    }
    buf_reset(&out);
    char *py = xasprintf("%s/bin/python3", venv_dir);
    char *req = xasprintf("%s/%s", model_dir, requirements);
    char *pip[] = {py, "-m", "pip", "install", "--disable-pip-version-check", "-r", req, NULL};
    int64_t t0 = ts_now_us();
    rc = run(pip, model_dir, &out);
    log_output("pip install", &out);
    if (rc != 0) {
        summary(&out, tail, sizeof(tail));
        if (rc < 0)
            snprintf(err, errlen, "%s: cannot run pip: %s", requirements, strerror(-rc));
        else if (rc > 255)
            snprintf(err, errlen, "%s: pip install was killed by signal %d", requirements,
                     rc - 256);
        else
            snprintf(err, errlen, "%s: pip install failed (exit %d): %s", requirements, rc,
                     *tail ? tail : "no output (is python3-pip installed?)");
    } else {
        LOG_INFO("%s installed into %s in %.1f s", requirements, venv_dir,
                 (double)(ts_now_us() - t0) / 1e6);
    }
    free(py);
    free(req);
    buf_free(&out);
    return rc ? TS_E_BAD_CONFIG : 0;
}
