/*
 * py_embed: an isolated CPython in a test executable (tests/unit/test_py_json.c,
 * tests/fuzz/py_json.c), started as the Python the Makefile built it against (TS_PY_EXECUTABLE,
 * that Python's sys.executable) and without its signal handlers. Include after Python.h.
 */
#ifndef TS_TESTS_PY_EMBED_H
#define TS_TESTS_PY_EMBED_H

#ifndef TS_PY_EXECUTABLE
#error "TS_PY_EXECUTABLE: the Makefile passes the sys.executable of the Python built against"
#endif

/* 0 once the interpreter runs, -1 if it could not start */
static int py_embed_start(void)
{
    PyConfig cfg;
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.install_signal_handlers = 0;
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.program_name, TS_PY_EXECUTABLE);
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    return PyStatus_Exception(st) ? -1 : 0;
}

#endif
