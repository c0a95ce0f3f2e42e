/*
 * handler_loader: built-ins by name, else dlopen from the model directory, else the Python plugin.
 *
 * A library path is taken relative to the model directory and may not climb out of it ("..") or
 * be absolute: the archive decides what runs, not a path that happens to exist on the host.
 * RTLD_LOCAL keeps two models' libraries from resolving each other's symbols; the worker exports
 * the ts_* ABI with -rdynamic, so a library resolves those against the worker.
 */
#include "handler_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "py_builtins.h"
#include "util.h"

static const struct handler_builtin *builtins;
static size_t n_builtins;

void handler_loader_builtins(const struct handler_builtin *table, size_t n)
{
    builtins = table;
    n_builtins = n;
}

static int has_suffix(const char *s, size_t n, const char *suf)
{
    size_t m = strlen(suf);
    return n >= m && !memcmp(s + n - m, suf, m);
}

static const struct ts_handler *check_abi(const struct ts_handler *h, const char *what, char *err,
                                          size_t errlen)
{
    if (!h) {
        snprintf(err, errlen, "handler %s: returned no handler", what);
        return NULL;
    }
    if (h->abi_version != TS_HANDLER_ABI_VERSION) {
        snprintf(err, errlen, "handler %s: ABI version %d, this worker implements %d", what,
                 h->abi_version, TS_HANDLER_ABI_VERSION);
        return NULL;
    }
    if (!h->init || !h->handle) {
        snprintf(err, errlen, "handler %s: init and handle are required", what);
        return NULL;
    }
    return h;
}

/* dlopen(path) and the handler its symbol sym returns; what prefixes a dlopen error. */
static const struct ts_handler *open_library(const char *path, const char *sym, const char *spec,
                                             const char *what, char *err, size_t errlen)
{
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        snprintf(err, errlen, "handler \"%s\"%s: %s", spec, what, dlerror());
        return NULL;
    }
    dlerror();
    /* POSIX: a function pointer round-trips through void * returned by dlsym */
    ts_handler_get_fn *get;
    *(void **)&get = dlsym(dl, sym);
    if (!get) {
        snprintf(err, errlen, "handler \"%s\": symbol %s not found in %s", spec, sym, path);
        dlclose(dl);
        return NULL;
    }
    const struct ts_handler *h = check_abi(get(), spec, err, errlen);
    if (!h)
        dlclose(dl);
    return h;
}

static const struct ts_handler *load_library(const char *spec, const char *model_dir, char *err,
                                             size_t errlen)
{
    const char *colon = strchr(spec, ':');
    size_t liblen = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *sym = colon ? colon + 1 : "ts_handler_v1";
    if (!*sym) {
        snprintf(err, errlen, "handler \"%s\": empty symbol name", spec);
        return NULL;
    }
    char *lib = xstrndup(spec, liblen);
    if (lib[0] == '/' || !strncmp(lib, "../", 3) || strstr(lib, "/../")) {
        snprintf(err, errlen, "handler \"%s\": the library must be inside the model directory",
                 spec);
        free(lib);
        return NULL;
    }
    char *path = xasprintf("%s/%s", model_dir, lib);
    free(lib);
    const struct ts_handler *h = open_library(path, sym, spec, "", err, errlen);
    free(path);
    return h;
}

static int is_python(const char *spec, size_t modlen, const char *runtime)
{
    if (runtime && (!strcmp(runtime, "python") || !strcmp(runtime, "python3")))
        return 1;
    if (has_suffix(spec, modlen, ".py"))
        return 1;
    /* TorchServe's built-in Python handlers, served by the Python plugin */
    return py_builtin_handler(spec, modlen);
}

/* The Python plugin lives next to the worker: <dir of the executable>/../lib. Loaded only here,
 * so a worker of any other model never maps libpython. */
static const struct ts_handler *load_python(const char *spec, int continuous, char *err,
                                            size_t errlen)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        snprintf(err, errlen, "handler \"%s\": cannot find the worker's path: %s", spec,
                 strerror(errno));
        return NULL;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    char *path = xasprintf("%s/../lib/libts_python.so", exe);
    const struct ts_handler *h =
        open_library(path, continuous ? "ts_python_handler_continuous" : "ts_python_handler", spec,
                     " needs the Python plugin", err, errlen);
    free(path);
    return h;
}

const struct ts_handler *handler_loader_find(const char *spec, const char *runtime, int continuous,
                                             const char *model_dir, char *err, size_t errlen)
{
    if (!spec)
        spec = "";
    for (size_t i = 0; i < n_builtins; i++)
        if (!strcmp(spec, builtins[i].name))
            return check_abi(builtins[i].get(), spec, err, errlen);
    const char *colon = strchr(spec, ':');
    size_t liblen = colon ? (size_t)(colon - spec) : strlen(spec);
    if (has_suffix(spec, liblen, ".so") || memmem(spec, liblen, ".so.", 4))
        return load_library(spec, model_dir, err, errlen);
    /* the model contracts of other servers that the Python plugin serves (the frontend names
     * them from the model's files): their requests run concurrently, held across steps */
    if (!strcmp(spec, "mlserver") || !strcmp(spec, "inferless"))
        return load_python(spec, 1, err, errlen);
    if (is_python(spec, liblen, runtime))
        return load_python(spec, continuous, err, errlen);
    /* the names without their aliases (an alias follows its handler in the table) */
    char names[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n_builtins && used < sizeof(names); i++)
        if (*builtins[i].name && (i == 0 || builtins[i].get != builtins[i - 1].get))
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "",
                                     builtins[i].name);
    snprintf(err, errlen,
             "unknown handler \"%s\" (built-in: %s; or libfoo.so[:symbol] in the model archive; "
             "or a Python handler: handler.py[:function], a TorchServe built-in name, or runtime "
             "python in MANIFEST.json)",
             spec, names);
    return NULL;
}
