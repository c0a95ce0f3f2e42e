/*
 * instance: pidfiles per inference address and scratch directories with an owner (see
 * instance.h).
 *
 * An owner record is "pid start-time\ncwd\n". A record names a live instance only while that
 * pid is a torchserve-c process that started at that time: a pidfile left by a killed server,
 * whose pid the kernel has since given to another program, is stale, never a target for
 * --stop. Records are written to a temporary name and renamed, so a reader never sees half of
 * one.
 *
 * Pidfiles live in ${TMPDIR:-/tmp}/torchserve-c-<uid>, a directory only this user can write
 * (created 0700; used only when it is a real directory, owned by us, with no group or other
 * write bit). The temporary name is mkstemp's (O_EXCL: a name planted in advance, a symlink
 * included, is never opened), and rename replaces a link at the final name instead of
 * following it. A record is read with O_NOFOLLOW. So a link another user plants cannot make a
 * server, root included, write or read through it.
 */
#include "instance.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "util.h"

#define OWNER_FILE "owner"

static char *own_pidfile; /* this process's pidfile once acquired */

static const char *tmp_dir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

/* The directory of this user's pidfiles (malloc'd). */
static char *pid_dir(void)
{
    return xasprintf("%s/torchserve-c-%u", tmp_dir(), (unsigned)geteuid());
}

/* 0 when dir is a directory that only we can write (created 0700 if missing and create), else
 * -errno after saying why on stderr: a link, another owner or a group/other write bit would let
 * someone else plant files where we write. */
static int private_dir(const char *dir, int create)
{
    if (create && mkdir(dir, 0700) != 0 && errno != EEXIST) {
        int e = errno;
        fprintf(stderr, "torchserve-c: cannot create %s: %s\n", dir, strerror(e));
        return -e;
    }
    struct stat st;
    if (lstat(dir, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        fprintf(stderr,
                "torchserve-c: %s is not a directory that only uid %u can write (%s, owner %u, "
                "mode %03o): refusing to use it for pidfiles; remove it or set TMPDIR\n",
                dir, (unsigned)geteuid(), S_ISLNK(st.st_mode) ? "a link" : "found",
                (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

static char *pidfile_for(const struct config *cfg)
{
    const struct listen_addr *a = &cfg->inference_address;
    char key[256];
    size_t k = 0;
    for (const char *p = a->host ? a->host : ""; *p && k < sizeof(key) - 1; p++)
        key[k++] = isalnum((unsigned char)*p) || *p == '.' || *p == '-' ? *p : '_';
    key[k] = '\0';
    char *dir = pid_dir();
    char *path = xasprintf("%s/%s_%d.pid", dir, key, a->port);
    free(dir);
    return path;
}

/* The start time of pid in clock ticks after boot (field 22 of /proc/PID/stat); 0 when there
 * is no such process or it is a zombie. */
static unsigned long long proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return 0;
    p += 2; /* field 3, the state */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return 0;
        p++;
    }
    return strtoull(p, NULL, 10);
}

/* 1 when the last component of path is "torchserve-c" */
static int names_torchserve_c(const char *path)
{
    const char *base = strrchr(path, '/');
    return !strcmp(base ? base + 1 : path, "torchserve-c");
}

static int is_torchserve_c(pid_t pid)
{
    char path[64], exe[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    char *deleted = strstr(exe, " (deleted)"); /* the binary was rebuilt while it runs */
    if (deleted)
        *deleted = '\0';
    if (names_torchserve_c(exe))
        return 1;
    /* under valgrind the executable is the tool's; the program is one of its arguments */
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    n = (ssize_t)fread(exe, 1, sizeof(exe) - 1, f);
    fclose(f);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    for (const char *a = exe; a < exe + n; a += strlen(a) + 1)
        if (names_torchserve_c(a))
            return 1;
    return 0;
}

/* 0 and the record's fields, or -1 when there is no readable record. */
static int owner_read(const char *path, pid_t *pid, unsigned long long *start, char *cwd,
                      size_t cwdlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    long p = 0;
    unsigned long long s = 0;
    int ok = fscanf(f, "%ld %llu", &p, &s) == 2 && p > 0;
    if (ok && cwd) {
        cwd[0] = '\0';
        if (fgetc(f) == '\n' && fgets(cwd, (int)cwdlen, f))
            cwd[strcspn(cwd, "\n")] = '\0';
    }
    fclose(f);
    if (!ok)
        return -1;
    *pid = (pid_t)p;
    *start = s;
    return 0;
}

static int owner_alive(pid_t pid, unsigned long long start)
{
    return pid > 0 && start != 0 && proc_start_time(pid) == start && is_torchserve_c(pid);
}

static int owner_write(const char *path)
{
    char cwd[4096];
    if (!getcwd(cwd, sizeof(cwd)))
        snprintf(cwd, sizeof(cwd), ".");
    char *tmp = xasprintf("%s.XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL, mode 0600 */
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    int rc = -1;
    if (f) {
        fchmod(fd, 0644); /* --stop of another user may read who runs where */
        fprintf(f, "%d %llu\n%s\n", (int)getpid(), proc_start_time(getpid()), cwd);
        rc = fclose(f) == 0 && rename(tmp, path) == 0 ? 0 : -1;
    } else if (fd >= 0) {
        close(fd);
    }
    if (rc != 0) {
        rc = -errno;
        if (fd >= 0)
            unlink(tmp);
    }
    free(tmp);
    return rc;
}

int instance_acquire(const struct config *cfg)
{
    char *dir = pid_dir();
    int prc = private_dir(dir, 1);
    free(dir);
    if (prc != 0)
        return -1;
    char *path = pidfile_for(cfg);
    pid_t pid;
    unsigned long long start;
    if (owner_read(path, &pid, &start, NULL, 0) == 0 && pid != getpid() &&
        owner_alive(pid, start)) {
        fprintf(stderr,
                "torchserve-c is already running on %s://%s:%d (pid %d). Stop it with "
                "`torchserve-c --stop --ts-config FILE` first.\n",
                cfg->inference_address.scheme, cfg->inference_address.host,
                cfg->inference_address.port, (int)pid);
        free(path);
        return -1;
    }
    int rc = owner_write(path);
    if (rc != 0) {
        fprintf(stderr, "torchserve-c: cannot write %s: %s\n", path, strerror(-rc));
        free(path);
        return -1;
    }
    own_pidfile = path;
    return 0;
}

void instance_release(void)
{
    if (!own_pidfile)
        return;
    pid_t pid;
    unsigned long long start;
    if (owner_read(own_pidfile, &pid, &start, NULL, 0) == 0 && pid == getpid())
        unlink(own_pidfile);
    free(own_pidfile);
    own_pidfile = NULL;
}

/* Removes the scratch directories whose owner is gone (a killed instance leaves its extracted
 * archives and sequence state behind). A directory without an owner record is left alone: it
 * may be one being created right now. */
static void sweep_run_dirs(void)
{
    DIR *d = opendir(tmp_dir());
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "torchserve-c.", 13) || strlen(e->d_name) != 19)
            continue;
        char *dir = xasprintf("%s/%s", tmp_dir(), e->d_name);
        char *rec = xasprintf("%s/%s", dir, OWNER_FILE);
        pid_t pid;
        unsigned long long start;
        if (owner_read(rec, &pid, &start, NULL, 0) == 0 && !owner_alive(pid, start)) {
            int rc = ts_rmtree(dir);
            fprintf(stderr, "torchserve-c: %s the scratch directory %s of a stopped instance%s\n",
                    rc == 0 ? "removed" : "could not remove", dir, rc == 0 ? "" : " (ignored)");
        }
        free(rec);
        free(dir);
    }
    closedir(d);
}

int instance_make_run_dir(char **out)
{
    sweep_run_dirs();
    char *dir = xasprintf("%s/torchserve-c.XXXXXX", tmp_dir());
    if (!mkdtemp(dir)) {
        int rc = -errno;
        fprintf(stderr, "torchserve-c: cannot create %s: %s\n", dir, strerror(errno));
        free(dir);
        return rc;
    }
    char *rec = xasprintf("%s/%s", dir, OWNER_FILE);
    int rc = owner_write(rec);
    free(rec);
    if (rc != 0) {
        fprintf(stderr, "torchserve-c: cannot write in %s: %s\n", dir, strerror(-rc));
        ts_rmtree(dir);
        free(dir);
        return rc;
    }
    *out = dir;
    return 0;
}

/* Fills *info from a pidfile that names a live instance; removes a stale one. */
static int check_pidfile(const char *path, struct instance_info *info)
{
    pid_t pid;
    unsigned long long start;
    if (owner_read(path, &pid, &start, info->cwd, sizeof(info->cwd)) != 0)
        return 0;
    if (!owner_alive(pid, start)) {
        unlink(path);
        return 0;
    }
    info->pid = pid;
    snprintf(info->pidfile, sizeof(info->pidfile), "%s", path);
    return 1;
}

int instance_find(const struct config *cfg, struct instance_info *out, int max)
{
    if (max <= 0)
        return 0;
    if (cfg) {
        char *path = pidfile_for(cfg);
        int n = check_pidfile(path, &out[0]);
        free(path);
        return n;
    }
    char *dir = pid_dir();
    DIR *d = private_dir(dir, 0) == 0 ? opendir(dir) : NULL;
    if (!d) {
        free(dir);
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || e->d_name[0] == '.' || strcmp(e->d_name + len - 4, ".pid"))
            continue;
        char *path = xasprintf("%s/%s", dir, e->d_name);
        n += check_pidfile(path, &out[n]);
        free(path);
    }
    closedir(d);
    free(dir);
    return n;
}
