/*
 * py_json: the JSON of the Python handler's hot path, in C: request bodies into Python objects
 * and results into response bytes, for the common cases only.
 *
 * Both functions give exactly what Python's json module gives (json.loads of the UTF-8 text,
 * json.dumps with its defaults); whatever they cannot decide cheaply (escapes in strings, NaN,
 * big integers, deep nesting, subclasses, non-str keys, anything malformed) they leave to the
 * caller, which takes the json module's path. So a fast-path miss never changes a result, an
 * error or a warning: it only costs the time the json module takes.
 *
 * Called with the GIL held (the worker thread). No Python code runs inside them: only exact
 * built-in types are handled, so no __repr__, __eq__ or __hash__ of a user's class is called.
 */
#ifndef TS_PY_JSON_H
#define TS_PY_JSON_H

#include "py_handler.h"

/* A growable byte buffer (PyMem). Zero-initialise; pyj_buf_free releases it. */
struct pyj_buf {
    char *data;
    size_t len, cap;
};

void pyj_buf_free(struct pyj_buf *b);

/* json.loads(text.decode("utf-8")) for the n bytes at text: a new reference, or NULL. NULL with
 * no exception set means "not on the fast path" (the caller runs json.loads, which gives the
 * value or the error); NULL with an exception set is a memory error. */
PyObject *pyj_loads(const char *text, size_t n);

/* Appends json.dumps(v).encode() to b: 0; 1 when v is not on the fast path (b's length is then
 * as before: the caller runs json.dumps); -1 with an exception set (memory). */
int pyj_dumps(PyObject *v, struct pyj_buf *b);

#endif
