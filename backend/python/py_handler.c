/*
 * py_handler: CPython embedded behind the handler ABI.
 *
 * init() starts an isolated interpreter (no PYTHON* environment, no user site, no signal
 * handlers: the worker owns signals) whose program name is the Python the plugin was built for
 * (its sys.executable, TS_PY_EXECUTABLE from the Makefile), or a venv of it: the model's own when
 * the frontend made one (TS_WORKER_VENV, install_py_dep_per_model), else config.properties'
 * `python` (the frontend checked it and passes it as TS_PYTHON_EXECUTABLE). CPython finds its
 * prefix from the program name, and a venv's pyvenv.cfg next to it, so a venv's or conda env's
 * site-packages are the handler's. It puts our `ts` package (<plugin dir>/python) first on
 * sys.path and the model directory after it, and calls ts._service.load(); handle() calls
 * ts._service.step(n), which does the rest through _ts_worker (py_module.c). A Python exception
 * never escapes into the worker: load errors become the load reply, step errors a 500 for each
 * request of the call.
 *
 * Extension modules (torch, numpy) are not linked against libpython: they need its symbols in
 * the global scope, so init() re-opens libpython with RTLD_GLOBAL (the worker dlopened us
 * RTLD_LOCAL), by the path the dynamic linker found it at: no Python version is named here. torch
 * in Python and the worker's libtorch are the same shared library, so the worker's intra-op thread
 * setting (--threads) holds for the handler too. The interpreter is never finalised: the worker
 * exits after destroy, and finalising with torch loaded only adds shutdown work and risk. The
 * GIL is released between calls (py_handler.h).
 */
#include "py_handler.h"

#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TS_PY_EXECUTABLE
#error "TS_PY_EXECUTABLE: the Makefile passes the sys.executable of the Python built against"
#endif

struct ts_ctx *pyh_ctx;
size_t pyh_n;

int pyh_check_idx(Py_ssize_t i)
{
    if (!pyh_ctx || i < 0 || (size_t)i >= pyh_n) {
        PyErr_Format(PyExc_IndexError, "request index %zd out of range (the call has %zu)", i,
                     pyh_n);
        return -1;
    }
    return 0;
}

int pyh_arg_idx(PyObject *arg, Py_ssize_t *i)
{
    *i = PyLong_AsSsize_t(arg);
    return (*i == -1 && PyErr_Occurred()) ? -1 : pyh_check_idx(*i);
}

static PyObject *step_fn;
static PyThreadState *main_ts; /* the worker thread's state while it does not hold the GIL */

/* "Type: message" of the pending exception (just the message for ImportError, whose text we
 * write ourselves), cleared. */
static void exception_text(char *out, size_t n)
{
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    PyErr_NormalizeException(&type, &val, &tb);
    const char *tname = type ? ((PyTypeObject *)type)->tp_name : "error";
    PyObject *s = val ? PyObject_Str(val) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!msg) {
        PyErr_Clear();
        msg = "(no message)";
    }
    if (type && PyErr_GivenExceptionMatches(type, PyExc_ImportError))
        snprintf(out, n, "%s", msg);
    else
        snprintf(out, n, "%s: %s", tname, msg);
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
}

/* The interpreter's program name: the model's own virtual environment's python when the frontend
 * made one (TS_WORKER_VENV, install_py_dep_per_model), else config.properties' python (the
 * frontend checked that it is the interpreter we were built for or a venv of it), else the one
 * we were built for. */
static void program_name(char *out, size_t n)
{
    const char *venv = getenv("TS_WORKER_VENV");
    const char *py = getenv("TS_PYTHON_EXECUTABLE");
    if (venv && *venv)
        snprintf(out, n, "%s/bin/python3", venv);
    else
        snprintf(out, n, "%s", py && *py ? py : TS_PY_EXECUTABLE);
}

/* libpython again, RTLD_GLOBAL: the library that defines Py_InitializeFromConfig for us. */
static int make_libpython_global(struct ts_ctx *ctx)
{
    Dl_info info;
    if (!dladdr((void *)Py_InitializeFromConfig, &info) || !info.dli_fname) {
        ts_set_load_error(ctx, "python: cannot find which libpython this plugin uses");
        return -1;
    }
    if (!dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) {
        ts_set_load_error(ctx, "python: cannot make %s global: %s", info.dli_fname, dlerror());
        return -1;
    }
    return 0;
}

static int start_interpreter(struct ts_ctx *ctx)
{
    if (make_libpython_global(ctx))
        return -1;
    if (PyImport_AppendInittab("_ts_worker", pyh_module_init) < 0 ||
        PyImport_AppendInittab("_ts_stream", pyh_stream_module_init) < 0) {
        ts_set_load_error(ctx, "python: cannot register the _ts_worker modules");
        return -1;
    }
    PyConfig cfg;
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.install_signal_handlers = 0;
    cfg.parse_argv = 0;
    /* the prefix (stdlib, site-packages, a venv's pyvenv.cfg) is found from the program name:
     * a venv's site-packages come before the system's (its venvs are --system-site-packages) */
    char program[4096];
    program_name(program, sizeof(program));
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.program_name, program);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    if (PyStatus_Exception(st)) {
        ts_set_load_error(ctx, "python: cannot start the interpreter %s: %s", program,
                          st.err_msg ? st.err_msg : "unknown error");
        return -1;
    }
    ts_log(ctx, 1, "python: %s, Python %s", program, Py_GetVersion());
    return 0;
}

/* <directory of this plugin>/python: where the Makefile puts our ts package. */
static char *package_dir(void)
{
    Dl_info info;
    if (!dladdr((void *)package_dir, &info) || !info.dli_fname)
        return NULL;
    char *copy = strdup(info.dli_fname);
    if (!copy)
        abort();
    const char *dir = dirname(copy); /* may point into copy */
    size_t n = strlen(dir) + sizeof("/python");
    char *out = malloc(n);
    if (!out)
        abort();
    snprintf(out, n, "%s/python", dir);
    free(copy);
    return out;
}

static int py_init_common(struct ts_ctx *ctx, void **state, int continuous)
{
    char err[1024];
    *state = NULL;
    pyh_ctx = ctx;
    pyh_n = 0;
    if (start_interpreter(ctx))
        return -1;
    char *pkg = package_dir();
    if (!pkg) {
        ts_set_load_error(ctx, "python: cannot find the plugin's directory");
        return -1;
    }
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *p = PyUnicode_DecodeFSDefault(pkg);
    free(pkg);
    if (!path || !p || PyList_Insert(path, 0, p) < 0) {
        Py_XDECREF(p);
        exception_text(err, sizeof(err));
        ts_set_load_error(ctx, "python: sys.path: %s", err);
        return -1;
    }
    Py_DECREF(p);

    PyObject *mod = PyImport_ImportModule("ts._service");
    if (!mod) {
        exception_text(err, sizeof(err));
        ts_set_load_error(ctx, "python: cannot import our ts package: %s", err);
        return -1;
    }
    /* step after load: load binds it to the loaded service's method */
    PyObject *r =
        PyObject_CallMethod(mod, "load", "sssiii", ts_handler_spec(ctx), ts_model_name(ctx),
                            ts_model_dir(ctx), ts_batch_size(ctx), continuous, ts_gpu_id(ctx));
    if (r)
        step_fn = PyObject_GetAttrString(mod, "step");
    if (!step_fn)
        Py_CLEAR(r);
    Py_DECREF(mod);
    if (!r) {
        exception_text(err, sizeof(err));
        ts_set_load_error(ctx, "%s", err);
        return -1;
    }
    Py_DECREF(r);
    main_ts = PyEval_SaveThread();
    return 0;
}

static int py_init(struct ts_ctx *ctx, void **state)
{
    return py_init_common(ctx, state, 0);
}

static int py_init_continuous(struct ts_ctx *ctx, void **state)
{
    return py_init_common(ctx, state, 1);
}

static void py_handle(void *state, struct ts_ctx *ctx, size_t n)
{
    (void)state;
    pyh_ctx = ctx;
    pyh_n = n;
    PyEval_RestoreThread(main_ts);
    PyObject *r = PyObject_CallFunction(step_fn, "n", (Py_ssize_t)n);
    if (!r) {
        /* ts._service answers handler errors itself; this is a fault of ours */
        char err[1024];
        exception_text(err, sizeof(err));
        ts_log(ctx, 3, "python: step failed: %s", err);
        for (size_t i = 0; i < n; i++)
            ts_set_error(ctx, i, 500, "python worker: %s", err);
    }
    Py_XDECREF(r);
    pyh_n = 0;
    main_ts = PyEval_SaveThread();
}

static void py_destroy(void *state)
{
    (void)state;
    if (main_ts) {
        PyEval_RestoreThread(main_ts);
        main_ts = NULL;
    }
    /* the service's own unload (an MLServer runtime's unload(), an Inferless finalize()) */
    PyObject *mod = PyImport_ImportModule("ts._service");
    PyObject *r = mod ? PyObject_CallMethod(mod, "destroy", NULL) : NULL;
    if (!r) {
        char err[1024];
        exception_text(err, sizeof(err));
        if (pyh_ctx)
            ts_log(pyh_ctx, 2, "python: unloading the model: %s", err);
    }
    Py_XDECREF(r);
    Py_XDECREF(mod);
    Py_CLEAR(step_fn);
}

static const struct ts_handler python_handler = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "python",
    .flags = 0,
    .init = py_init,
    .handle = py_handle,
    .destroy = py_destroy,
};

static const struct ts_handler python_handler_continuous = {
    .abi_version = TS_HANDLER_ABI_VERSION,
    .name = "python",
    .flags = TS_HANDLER_CONTINUOUS,
    .init = py_init_continuous,
    .handle = py_handle,
    .destroy = py_destroy,
};

const struct ts_handler *ts_python_handler(void)
{
    return &python_handler;
}

const struct ts_handler *ts_python_handler_continuous(void)
{
    return &python_handler_continuous;
}
