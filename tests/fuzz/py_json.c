/*
 * Fuzz target: py_json's decoder (backend/python/py_json.c), which turns a client's request body
 * into Python objects in a Python worker, against CPython's own json module. Whatever pyj_loads
 * decides must be what json.loads(text.decode()) gives (same types, same repr; the text must be
 * UTF-8 and JSON the json module accepts), and what pyj_dumps writes for that value must be
 * json.dumps(value).encode(). A miss (NULL without an exception, or 1 from pyj_dumps) is always
 * allowed: the worker then runs the json module itself.
 */
#include "../../backend/python/py_json.c"

#include "../../backend/python/lsan_python.h"
#include "../py_embed.h"
/* not fuzz.h: it brings common/util.h, whose buf_* names py_json.c uses too */
#include "fuzz_check.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

static PyObject *same_fn, *loads_fn, *dumps_fn;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    FUZZ_CHECK(py_embed_start() == 0);
    PyObject *ns = PyModule_GetDict(PyImport_AddModule("__main__"));
    PyObject *r = PyRun_String("import json\n"
                               "def same(a, b):\n"
                               "    return type(a) is type(b) and repr(a) == repr(b)\n",
                               Py_file_input, ns, ns);
    FUZZ_CHECK(r != NULL);
    Py_DECREF(r);
    same_fn = PyDict_GetItemString(ns, "same");
    PyObject *json = PyDict_GetItemString(ns, "json");
    FUZZ_CHECK(same_fn && json);
    loads_fn = PyObject_GetAttrString(json, "loads");
    dumps_fn = PyObject_GetAttrString(json, "dumps");
    FUZZ_CHECK(loads_fn && dumps_fn);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    PyObject *got = pyj_loads((const char *)data, size);
    if (!got) {
        FUZZ_CHECK(!PyErr_Occurred()); /* only a memory error may raise */
        return 0;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)data, (Py_ssize_t)size, "strict");
    FUZZ_CHECK(text != NULL); /* decided only on UTF-8 */
    PyObject *want = PyObject_CallOneArg(loads_fn, text);
    FUZZ_CHECK(want != NULL); /* decided only on JSON the json module takes */
    PyObject *same = PyObject_CallFunctionObjArgs(same_fn, got, want, NULL);
    FUZZ_CHECK(same == Py_True);
    Py_DECREF(same);

    struct pyj_buf b = {0};
    int rc = pyj_dumps(got, &b);
    FUZZ_CHECK(rc >= 0);
    if (rc == 0) {
        PyObject *s = PyObject_CallOneArg(dumps_fn, got);
        FUZZ_CHECK(s != NULL);
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(s, &n);
        FUZZ_CHECK(u && (size_t)n == b.len && memcmp(u, b.data, b.len) == 0);
        Py_DECREF(s);
    }
    pyj_buf_free(&b);
    Py_DECREF(text);
    Py_DECREF(want);
    Py_DECREF(got);
    return 0;
}
