/*
 * pyinfo: which Python the workers' Python plugin embeds, and whether config.properties'
 * `python` (TorchServe's key: the interpreter of Python workers) may name another one.
 *
 * The plugin is built against one Python (make PYTHON=PATH); the Makefile writes what that is
 * into <build>/lib/libts_python.info (scripts/python_embed.py info). A worker can run a venv of
 * that Python instead (its site-packages, the same libpython), never another Python: the key is
 * accepted for the interpreter itself or a venv of it, and refused by name otherwise.
 *
 * No state, no logging; reads files (the info file, a venv's pyvenv.cfg) and resolves paths.
 */
#ifndef TS_PYINFO_H
#define TS_PYINFO_H

#include <limits.h>
#include <stddef.h>

struct pyinfo {
    char executable[PATH_MAX];      /* sys.executable of the Python built against */
    char base_executable[PATH_MAX]; /* the interpreter under it (itself, or a venv's base) */
    char version[16];               /* "3.12" */
};

/* Reads an info file. 0, or -1 with err ("PATH: reason"). */
int pyinfo_load(const char *path, struct pyinfo *pi, char *err, size_t errlen);

/* Whether python, the key's value (a path, or a bare name looked up on PATH as TorchServe's
 * "python" is), is pi's interpreter or a venv of it (a pyvenv.cfg next to it or one directory
 * up whose interpreter is pi's base, by path or by home directory and version). 0 with the
 * absolute path in resolved, or -1 with err naming both interpreters. */
int pyinfo_check(const struct pyinfo *pi, const char *python, char *resolved, size_t rlen,
                 char *err, size_t errlen);

#endif
