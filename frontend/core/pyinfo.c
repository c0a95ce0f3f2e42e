/*
 * pyinfo: the plugin's Python and the `python` key (pyinfo.h).
 *
 * A venv's python is a symlink to its base interpreter (or, made with --copies, a copy of it)
 * next to a pyvenv.cfg that names the base's directory (`home`) and, since 3.11, the base
 * itself (`executable`) and its version. So an interpreter is acceptable when it resolves to
 * the plugin's base interpreter (the interpreter itself, or a symlinked venv), or when its
 * pyvenv.cfg names that base (a copied venv: same home directory and major.minor version).
 */
#include "pyinfo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Copies a "key=value" line's value (or "key = value", pyvenv.cfg's form) for key. */
static int kv_line(const char *line, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    while (*line == ' ' || *line == '\t')
        line++;
    if (strncmp(line, key, kl))
        return 0;
    const char *p = line + kl;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p != '=')
        return 0;
    p++;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t len = strcspn(p, "\r\n");
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    if (len >= n)
        return 0;
    memcpy(out, p, len);
    out[len] = '\0';
    return 1;
}

int pyinfo_load(const char *path, struct pyinfo *pi, char *err, size_t errlen)
{
    memset(pi, 0, sizeof(*pi));
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[PATH_MAX + 64];
    while (fgets(line, sizeof(line), f)) {
        kv_line(line, "executable", pi->executable, sizeof(pi->executable));
        kv_line(line, "base_executable", pi->base_executable, sizeof(pi->base_executable));
        kv_line(line, "version", pi->version, sizeof(pi->version));
    }
    fclose(f);
    if (!pi->executable[0] || !pi->version[0]) {
        snprintf(err, errlen, "%s: no executable= or version= line", path);
        return -1;
    }
    if (!pi->base_executable[0])
        snprintf(pi->base_executable, sizeof(pi->base_executable), "%s", pi->executable);
    return 0;
}

/* A bare name through PATH, as execvp would find it; a path made absolute. */
static int locate(const char *python, char *out, size_t n)
{
    if (strchr(python, '/')) {
        if (python[0] == '/') {
            snprintf(out, n, "%s", python);
        } else {
            char cwd[PATH_MAX];
            if (!getcwd(cwd, sizeof(cwd)))
                return -1;
            snprintf(out, n, "%s/%s", cwd, python);
        }
        return access(out, X_OK);
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t dl = strcspn(path, ":");
        snprintf(out, n, "%.*s/%s", (int)dl, dl ? path : ".", python);
        if (out[0] == '/' && access(out, X_OK) == 0)
            return 0;
        path += dl + (path[dl] == ':');
    }
    return -1;
}

static int same_file(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
}

/* The pyvenv.cfg of the venv exe is in (next to it, or one directory up), read into home,
 * base (its `executable`, maybe "") and version (`version` or `version_info`); 0 if found. */
static int read_venv(const char *exe, char *home, char *base, char *version, size_t n)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", exe);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    for (int up = 0; up < 2; up++) {
        char cfg[PATH_MAX + 16];
        snprintf(cfg, sizeof(cfg), "%s/pyvenv.cfg", dir);
        FILE *f = fopen(cfg, "r");
        if (f) {
            char line[PATH_MAX + 64];
            home[0] = base[0] = version[0] = '\0';
            while (fgets(line, sizeof(line), f)) {
                kv_line(line, "home", home, n);
                kv_line(line, "executable", base, n);
                if (!kv_line(line, "version", version, n))
                    kv_line(line, "version_info", version, n);
            }
            fclose(f);
            return home[0] ? 0 : -1;
        }
        if (!(slash = strrchr(dir, '/')) || slash == dir)
            return -1;
        *slash = '\0';
    }
    return -1;
}

/* "3.12.3" is of "3.12" (not of "3.1"). */
static int version_of(const char *full, const char *mm)
{
    size_t l = strlen(mm);
    return !strncmp(full, mm, l) && (full[l] == '.' || full[l] == '\0');
}

int pyinfo_check(const struct pyinfo *pi, const char *python, char *resolved, size_t rlen,
                 char *err, size_t errlen)
{
    if (!python || !*python || locate(python, resolved, rlen)) {
        snprintf(err, errlen, "python=%s: no such executable", python ? python : "");
        return -1;
    }
    if (same_file(resolved, pi->executable) || same_file(resolved, pi->base_executable))
        return 0;
    char home[PATH_MAX], base[PATH_MAX], version[64];
    if (!read_venv(resolved, home, base, version, sizeof(home))) {
        if (base[0] && same_file(base, pi->base_executable))
            return 0;
        char bdir[PATH_MAX];
        snprintf(bdir, sizeof(bdir), "%s", pi->base_executable);
        char *slash = strrchr(bdir, '/');
        if (slash)
            *slash = '\0';
        if (same_file(home, bdir) && version_of(version, pi->version))
            return 0;
    }
    snprintf(err, errlen,
             "python=%s: not the interpreter the Python plugin was built for (%s, Python %s) "
             "nor a venv of it; build the plugin for it: make PYTHON=%s",
             python, pi->executable, pi->version, resolved);
    return -1;
}
