/*
 * _ts_stream: the worker calls of handlers that keep requests across steps in an event loop (our
 * MLServer and Inferless runtimes, backend/python/tsc_runtimes/): a request's streamed input
 * (ts_input_next) and the wake-up descriptor of the loop (ts_set_wake_fd).
 *
 * As in _ts_worker (py_module.c), a request is its index in the current handle call, and an index
 * out of range raises IndexError. Worker thread only, with the GIL.
 *
 * A continuous handler keeps state per request across steps, but the worker drops a held request
 * that is cancelled without another handle call. track(i) makes the worker note the request's
 * id when it frees the request before the handler answered it (ts_set_user's free function, on
 * the worker's thread; untrack(i) once answered); gone() hands the ids over, and the handler
 * forgets those requests. Between steps (the GIL is free: a cancel read while the worker
 * waits) the function given to on_gone() is called at once, with the GIL, so that the request's
 * work stops now rather than at the next step, which may never come.
 */
#include "py_handler.h"

#include <stdlib.h>
#include <string.h>

struct gone_id {
    struct gone_id *next;
    int answered; /* untrack(): freed as finished, not gone */
    char id[];
};

static struct gone_id *gone_head;
static PyObject *gone_cb; /* on_gone() */

static void note_gone(void *user)
{
    struct gone_id *g = user;
    if (g->answered) {
        free(g);
        return;
    }
    g->next = gone_head;
    gone_head = g;
    if (!gone_cb || PyGILState_Check())
        return; /* inside a step: the handler reads gone() at its next one */
    PyGILState_STATE st = PyGILState_Ensure();
    PyObject *r = PyObject_CallNoArgs(gone_cb);
    if (!r) {
        PyErr_Print();
        PyErr_Clear();
    }
    Py_XDECREF(r);
    PyGILState_Release(st);
}

/* input_next(i) -> (content type, body bytes) for the next message of request i's streamed
 * input; None when none has arrived yet; False when its client will send no more. */
static PyObject *s_input_next(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t i;
    if (pyh_arg_idx(arg, &i))
        return NULL;
    const void *body;
    size_t len;
    const char *ctype;
    int rc = ts_input_next(pyh_ctx, (size_t)i, &body, &len, &ctype);
    if (rc < 0)
        Py_RETURN_FALSE;
    if (rc == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(sy#)", ctype, (const char *)body, (Py_ssize_t)len);
}

/* set_wake_fd(fd): held requests are due when fd is readable (-1: none). */
static PyObject *s_set_wake_fd(PyObject *self, PyObject *arg)
{
    (void)self;
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (!pyh_ctx) {
        PyErr_SetString(PyExc_RuntimeError, "set_wake_fd outside the worker");
        return NULL;
    }
    ts_set_wake_fd(pyh_ctx, (int)fd);
    Py_RETURN_NONE;
}

/* track(i): request i's id is listed by gone() once the worker frees it. */
static PyObject *s_track(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t i;
    if (pyh_arg_idx(arg, &i))
        return NULL;
    const char *id = ts_request_id(pyh_ctx, (size_t)i);
    size_t n = strlen(id);
    struct gone_id *g = malloc(sizeof(*g) + n + 1);
    if (!g)
        return PyErr_NoMemory();
    g->next = NULL;
    g->answered = 0;
    memcpy(g->id, id, n + 1);
    ts_set_user(pyh_ctx, (size_t)i, g, note_gone);
    Py_RETURN_NONE;
}

/* untrack(i): request i is answered; its end is not news. */
static PyObject *s_untrack(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t i;
    if (pyh_arg_idx(arg, &i))
        return NULL;
    struct gone_id *g = ts_get_user(pyh_ctx, (size_t)i);
    if (g)
        g->answered = 1;
    Py_RETURN_NONE;
}

/* on_gone(f): f() is called when a tracked request is dropped between steps. */
static PyObject *s_on_gone(PyObject *self, PyObject *f)
{
    (void)self;
    if (f != Py_None && !PyCallable_Check(f)) {
        PyErr_SetString(PyExc_TypeError, "on_gone takes a callable or None");
        return NULL;
    }
    Py_XSETREF(gone_cb, f == Py_None ? NULL : Py_NewRef(f));
    Py_RETURN_NONE;
}

/* gone() -> [request id]: the tracked requests the worker freed since the last call. */
static PyObject *s_gone(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    while (gone_head) {
        struct gone_id *g = gone_head;
        PyObject *s = PyUnicode_DecodeUTF8(g->id, (Py_ssize_t)strlen(g->id), "replace");
        if (!s || PyList_Append(out, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(s);
        gone_head = g->next;
        free(g);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"input_next", s_input_next, METH_O, "next message of request i's streamed input"},
    {"set_wake_fd", s_set_wake_fd, METH_O, "held requests are due when fd is readable"},
    {"track", s_track, METH_O, "list request i's id in gone() once the worker frees it"},
    {"untrack", s_untrack, METH_O, "request i is answered"},
    {"gone", s_gone, METH_NOARGS, "ids of tracked requests freed since the last call"},
    {"on_gone", s_on_gone, METH_O, "call f() when a tracked request is dropped between steps"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_ts_stream",
    "torchserve-c worker calls for event-loop handlers (internal)",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyObject *pyh_stream_module_init(void)
{
    return PyModule_Create(&module);
}
