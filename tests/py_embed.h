/*
 * py_embed: an isolated CPython in a test executable (tests/unit/test_py_json.c,
 * tests/fuzz/py_json.c), started as Debian's /usr/bin/python3.11 and without its signal
 * handlers. Include after Python.h.
 */
#ifndef TS_TESTS_PY_EMBED_H
#define TS_TESTS_PY_EMBED_H

/* 0 once the interpreter runs, -1 if it could not start */
static int py_embed_start(void)
{
    PyConfig cfg;
    PyConfig_InitIsolatedConfig(&cfg);
    cfg.install_signal_handlers = 0;
    PyStatus st = PyConfig_SetBytesString(&cfg, &cfg.program_name, "/usr/bin/python3.11");
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&cfg);
    PyConfig_Clear(&cfg);
    return PyStatus_Exception(st) ? -1 : 0;
}

#endif
