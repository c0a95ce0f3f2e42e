/*
 * _ts_worker: the C module the Python side of the handler (ts._service, ts.context) calls.
 *
 * Every function refers to a request by its index in the current handle call (pyh_ctx, pyh_n);
 * an index out of range raises IndexError instead of reaching the worker. Bytes and strings are
 * copied by the worker (handler.h), so nothing here outlives a call.
 */
#include "py_handler.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

static int check_idx(Py_ssize_t i)
{
    if (!pyh_ctx || i < 0 || (size_t)i >= pyh_n) {
        PyErr_Format(PyExc_IndexError, "request index %zd out of range (the call has %zu)", i,
                     pyh_n);
        return -1;
    }
    return 0;
}

/* [(request id, is new, [(name, value)], [(name, content type, bytes)])] */
static PyObject *w_batch(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    struct ts_ctx *c = pyh_ctx;
    PyObject *out = PyList_New((Py_ssize_t)pyh_n);
    if (!out)
        return NULL;
    for (size_t i = 0; i < pyh_n; i++) {
        size_t nh = ts_header_count(c, i), np = ts_param_count(c, i);
        PyObject *hs = PyList_New((Py_ssize_t)nh), *ps = PyList_New((Py_ssize_t)np);
        if (!hs || !ps)
            goto fail_item;
        for (size_t k = 0; k < nh; k++) {
            const char *name;
            const char *val = ts_header_at(c, i, k, &name);
            PyObject *t = Py_BuildValue("(s#s#)", name, (Py_ssize_t)strlen(name), val,
                                        (Py_ssize_t)strlen(val));
            if (!t) {
                /* not UTF-8: TorchServe would fail too; keep the bytes readable */
                PyErr_Clear();
                t = Py_BuildValue("(ss)", "", "");
            }
            if (!t)
                goto fail_item;
            PyList_SET_ITEM(hs, (Py_ssize_t)k, t);
        }
        for (size_t k = 0; k < np; k++) {
            const char *name, *ctype;
            size_t len;
            const void *v = ts_param_at(c, i, k, &name, &len, &ctype);
            PyObject *t =
                Py_BuildValue("(ssy#)", name, ctype ? ctype : "", (const char *)v, (Py_ssize_t)len);
            if (!t)
                goto fail_item;
            PyList_SET_ITEM(ps, (Py_ssize_t)k, t);
        }
        PyObject *item =
            Py_BuildValue("(sNNN)", ts_request_id(c, i), PyBool_FromLong(ts_is_new(c, i)), hs, ps);
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
        continue;
    fail_item:
        Py_XDECREF(hs);
        Py_XDECREF(ps);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* Status, headers (content-type among them) of request i before its body is sent. */
static int apply_meta(size_t i, int status, const char *phrase, PyObject *headers)
{
    if (status != 200 || (phrase && *phrase))
        ts_set_status(pyh_ctx, i, status, phrase ? phrase : "");
    if (!headers || headers == Py_None)
        return 0;
    if (!PyDict_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "response headers must be a dict");
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(headers, &pos, &k, &v)) {
        PyObject *ks = PyObject_Str(k), *vs = PyObject_Str(v);
        const char *key = ks ? PyUnicode_AsUTF8(ks) : NULL;
        const char *val = vs ? PyUnicode_AsUTF8(vs) : NULL;
        if (key && val) {
            if (!strcasecmp(key, "content-type"))
                ts_set_content_type(pyh_ctx, i, val);
            else
                ts_set_header(pyh_ctx, i, key, val);
        }
        Py_XDECREF(ks);
        Py_XDECREF(vs);
        if (!key || !val)
            return -1;
    }
    return 0;
}

/* The arguments (i, body, status, phrase, headers) of respond and intermediate, with the status
 * and headers applied to request i. 0, or -1 with a Python exception set. */
static int answer_args(PyObject *args, size_t *i, const char **body, size_t *len)
{
    Py_ssize_t idx, n;
    const char *phrase;
    int status;
    PyObject *headers;
    if (!PyArg_ParseTuple(args, "ny#izO", &idx, body, &n, &status, &phrase, &headers) ||
        check_idx(idx) || apply_meta((size_t)idx, status, phrase, headers))
        return -1;
    *i = (size_t)idx;
    *len = (size_t)n;
    return 0;
}

/* respond(i, body, status, phrase, headers): the final answer of request i. */
static PyObject *w_respond(PyObject *self, PyObject *args)
{
    (void)self;
    size_t i, len;
    const char *body;
    if (answer_args(args, &i, &body, &len))
        return NULL;
    ts_set_response(pyh_ctx, i, body, len);
    Py_RETURN_NONE;
}

/* intermediate(i, body, status, phrase, headers) -> False if the request was cancelled;
 * otherwise the partial result is on its way to the frontend. */
static PyObject *w_intermediate(PyObject *self, PyObject *args)
{
    (void)self;
    size_t i, len;
    const char *body;
    if (answer_args(args, &i, &body, &len))
        return NULL;
    if (ts_is_cancelled(pyh_ctx, i))
        Py_RETURN_FALSE;
    int rc = ts_send_intermediate_response(pyh_ctx, i, body, len);
    if (rc == -ECANCELED)
        Py_RETURN_FALSE;
    if (rc == 0)
        ts_flush(pyh_ctx);
    Py_RETURN_TRUE;
}

static PyObject *w_error(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t i;
    int status;
    const char *msg;
    if (!PyArg_ParseTuple(args, "nis", &i, &status, &msg) || check_idx(i))
        return NULL;
    ts_set_error(pyh_ctx, (size_t)i, status, "%s", msg);
    Py_RETURN_NONE;
}

/* cont(i[, delay_us]): keep request i for the next step (continuous models only). */
static PyObject *w_cont(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t i;
    long long delay = 0;
    if (!PyArg_ParseTuple(args, "n|L", &i, &delay) || check_idx(i))
        return NULL;
    ts_continue(pyh_ctx, (size_t)i, delay);
    Py_RETURN_NONE;
}

static PyObject *w_is_cancelled(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if ((i == -1 && PyErr_Occurred()) || check_idx(i))
        return NULL;
    return PyBool_FromLong(ts_is_cancelled(pyh_ctx, (size_t)i));
}

/* metric(i, name, unit, kind, value): context.metrics records, to /metrics (ts_metric_add). */
static PyObject *w_metric(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t i;
    const char *name, *unit;
    int kind;
    double value;
    if (!PyArg_ParseTuple(args, "nszid", &i, &name, &unit, &kind, &value) || check_idx(i))
        return NULL;
    ts_metric_add(pyh_ctx, (size_t)i, name, unit, kind, value);
    Py_RETURN_NONE;
}

/* log(python level number, message): one worker log line per line of the message. */
static PyObject *w_log(PyObject *self, PyObject *args)
{
    (void)self;
    int pylevel;
    const char *msg;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "is#", &pylevel, &msg, &len))
        return NULL;
    int level = pylevel >= 40 ? 3 : pylevel >= 30 ? 2 : pylevel >= 20 ? 1 : 0;
    const char *p = msg, *end = msg + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        ts_log(pyh_ctx, level, "%.*s", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"batch", w_batch, METH_NOARGS, "the requests of the current call"},
    {"respond", w_respond, METH_VARARGS, "final answer of request i"},
    {"intermediate", w_intermediate, METH_VARARGS, "stream a partial answer of request i now"},
    {"error", w_error, METH_VARARGS, "error answer of request i"},
    {"cont", w_cont, METH_VARARGS, "keep request i for the next step"},
    {"is_cancelled", w_is_cancelled, METH_O, "request i was cancelled"},
    {"metric", w_metric, METH_VARARGS, "report a handler metric"},
    {"log", w_log, METH_VARARGS, "write to the worker's log"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_ts_worker",
    "torchserve-c worker calls (internal)",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyObject *pyh_module_init(void)
{
    return PyModule_Create(&module);
}
