/* config.properties' python against the plugin's Python (frontend/core/pyinfo.c): the
 * interpreter itself, a venv of it (symlinked, or copied with a pyvenv.cfg naming its home),
 * a bare name found on PATH; and another interpreter, or a venv of another, refused by name. The
 * "interpreters" are files in a temp directory: only paths, links and pyvenv.cfg matter. */
#include "../../frontend/core/pyinfo.c"

#include <fcntl.h>

#include "tap.h"

static void touch_exe(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, "#!/bin/sh\n", 10) == 10);
        close(fd);
    }
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char base_dir[256], base_exe[300], other_exe[300], info[300];

static void setup(void)
{
    snprintf(base_dir, sizeof(base_dir), "%s/usr/bin", tbase);
    char usr[300];
    snprintf(usr, sizeof(usr), "%s/usr", tbase);
    mkdir(usr, 0755);
    mkdir(base_dir, 0755);
    snprintf(base_exe, sizeof(base_exe), "%s/python3.12", base_dir);
    touch_exe(base_exe);
    snprintf(other_exe, sizeof(other_exe), "%s/python3.9", base_dir);
    touch_exe(other_exe);
    snprintf(info, sizeof(info), "%s/libts_python.info", tbase);
    char text[1024];
    snprintf(text, sizeof(text),
             "executable=%s\nbase_executable=%s\nversion=3.12\nprefix=/usr\nbase_prefix=/usr\n",
             base_exe, base_exe);
    write_text(info, text);
}

/* a venv at dir: bin/python3 linked to (or a copy of) target, pyvenv.cfg as given */
static void venv(const char *dir, const char *target, int copy, const char *cfg)
{
    char p[400];
    mkdir(dir, 0755);
    snprintf(p, sizeof(p), "%s/bin", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/bin/python3", dir);
    if (copy)
        touch_exe(p);
    else
        CHECK_EQ_INT(symlink(target, p), 0);
    snprintf(p, sizeof(p), "%s/pyvenv.cfg", dir);
    write_text(p, cfg);
}

static int check(const struct pyinfo *pi, const char *python, char *err)
{
    char resolved[PATH_MAX];
    return pyinfo_check(pi, python, resolved, sizeof(resolved), err, 1024);
}

TEST(the_interpreter_and_its_venvs)
{
    setup();
    struct pyinfo pi;
    char err[1024] = "";
    CHECK_EQ_INT(pyinfo_load(info, &pi, err, sizeof(err)), 0);
    CHECK_STR(pi.version, "3.12");
    CHECK_EQ_INT(check(&pi, base_exe, err), 0);
    char dir[300], py[320], cfg[600];
    /* python -m venv: a link to the base, pyvenv.cfg with home */
    snprintf(dir, sizeof(dir), "%s/venv", tbase);
    snprintf(cfg, sizeof(cfg), "home = %s\nversion = 3.12.3\n", base_dir);
    venv(dir, base_exe, 0, cfg);
    snprintf(py, sizeof(py), "%s/bin/python3", dir);
    CHECK_EQ_INT(check(&pi, py, err), 0);
    /* python -m venv --copies: a copy; pyvenv.cfg's home and version say whose */
    snprintf(dir, sizeof(dir), "%s/copies", tbase);
    venv(dir, NULL, 1, cfg);
    snprintf(py, sizeof(py), "%s/bin/python3", dir);
    CHECK_EQ_INT(check(&pi, py, err), 0);
    /* 3.11+ also writes the base's path */
    snprintf(dir, sizeof(dir), "%s/copies2", tbase);
    snprintf(cfg, sizeof(cfg), "home = /elsewhere\nexecutable = %s\nversion = 3.12.3\n", base_exe);
    venv(dir, NULL, 1, cfg);
    snprintf(py, sizeof(py), "%s/bin/python3", dir);
    CHECK_EQ_INT(check(&pi, py, err), 0);
    /* a bare name, on PATH */
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("PATH", base_dir, 1);
    CHECK_EQ_INT(check(&pi, "python3.12", err), 0);
    if (saved) {
        setenv("PATH", saved, 1);
        free(saved);
    }
}

TEST(another_interpreter_is_refused_by_name)
{
    setup();
    struct pyinfo pi;
    char err[1024] = "";
    CHECK_EQ_INT(pyinfo_load(info, &pi, err, sizeof(err)), 0);
    CHECK_EQ_INT(check(&pi, other_exe, err), -1);
    char want[1200];
    snprintf(want, sizeof(want),
             "python=%s: not the interpreter the Python plugin was built for (%s, Python 3.12) "
             "nor a venv of it; build the plugin for it: make PYTHON=%s",
             other_exe, base_exe, other_exe);
    CHECK_STR(err, want);
    /* a venv of the other one, linked or copied */
    char dir[300], py[320], cfg[600];
    snprintf(dir, sizeof(dir), "%s/venv39", tbase);
    snprintf(cfg, sizeof(cfg), "home = %s\nversion = 3.9.18\n", base_dir);
    venv(dir, other_exe, 0, cfg);
    snprintf(py, sizeof(py), "%s/bin/python3", dir);
    CHECK_EQ_INT(check(&pi, py, err), -1);
    snprintf(dir, sizeof(dir), "%s/copies39", tbase);
    venv(dir, NULL, 1, cfg);
    snprintf(py, sizeof(py), "%s/bin/python3", dir);
    CHECK_EQ_INT(check(&pi, py, err), -1);
    CHECK_EQ_INT(check(&pi, "/nonexistent/python3", err), -1);
    CHECK_STR(err, "python=/nonexistent/python3: no such executable");
    CHECK_EQ_INT(pyinfo_load("/nonexistent.info", &pi, err, sizeof(err)), -1);
    CHECK_STR(err, "/nonexistent.info: No such file or directory");
}

int main(void)
{
    tbase_make("test_pyinfo");
    RUN(the_interpreter_and_its_venvs);
    RUN(another_interpreter_is_refused_by_name);
    tbase_remove();
    return tap_done();
}
