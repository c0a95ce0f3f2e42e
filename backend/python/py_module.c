/*
 * _ts_worker: the C module the Python side of the handler (ts._service, ts.context) calls.
 *
 * Every function refers to a request by its index in the current handle call (pyh_ctx, pyh_n);
 * an index out of range raises IndexError instead of reaching the worker. Bytes and strings are
 * copied by the worker (handler.h), so nothing here outlives a call.
 */
#include "py_handler.h"
#include "py_builtins.h"
#include "py_json.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

/* A parameter's value as TorchServe's `data` holds it: application/json parsed, text/... decoded
 * from UTF-8, when py_json's fast path or the decoder manage; otherwise the bytes, and
 * ts._service makes the value (or the warning) with the json module as before. */
static PyObject *param_value(const char *ctype, const void *v, size_t len)
{
    PyObject *val = NULL;
    if (!strcmp(ctype, "application/json")) {
        val = pyj_loads(v, len);
    } else if (!strncmp(ctype, "text", 4)) {
        val = PyUnicode_DecodeUTF8(v, (Py_ssize_t)len, NULL);
        if (!val && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear();
    }
    if (val || PyErr_Occurred())
        return val;
    return PyBytes_FromStringAndSize(v, (Py_ssize_t)len);
}

/* [(request id, is new, [(name, value)], [(name, content type, value)])]; the value: see
 * param_value */
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
            PyObject *val = param_value(ctype ? ctype : "", v, len);
            PyObject *t = val ? Py_BuildValue("(ssN)", name, ctype ? ctype : "", val) : NULL;
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

/* Status, headers (content-type among them) of request i before its body is sent; *has_ctype
 * (if given) tells whether a content-type was among them. */
static int apply_meta(size_t i, int status, const char *phrase, PyObject *headers, int *has_ctype)
{
    if (has_ctype)
        *has_ctype = 0;
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
            if (!strcasecmp(key, "content-type")) {
                ts_set_content_type(pyh_ctx, i, val);
                if (has_ctype)
                    *has_ctype = 1;
            } else
                ts_set_header(pyh_ctx, i, key, val);
        }
        Py_XDECREF(ks);
        Py_XDECREF(vs);
        if (!key || !val)
            return -1;
    }
    return 0;
}

/* respond(i, value, status, phrase, headers) -> True: the final answer of request i, value
 * encoded as ts.protocol.otf_message_handler's encode_value does it, with its
 * default_content_type unless headers name one. False, with nothing done, for a value that is
 * not bytes, str or JSON on py_json's fast path (a tensor, a subclass, ...): _service then
 * encodes it with those functions and responds with the bytes. */
static PyObject *w_respond(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t idx, len;
    const char *phrase, *body, *ctype;
    int status, has_ctype;
    PyObject *value, *headers;
    struct pyj_buf json = {0};
    if (!PyArg_ParseTuple(args, "nOizO", &idx, &value, &status, &phrase, &headers) ||
        pyh_check_idx(idx))
        return NULL;
    if (PyBytes_CheckExact(value)) {
        body = PyBytes_AS_STRING(value);
        len = PyBytes_GET_SIZE(value);
        ctype = "application/octet-stream";
    } else if (PyUnicode_CheckExact(value)) {
        body = PyUnicode_AsUTF8AndSize(value, &len);
        if (!body) {
            PyErr_Clear(); /* str.encode raises it, with its message */
            Py_RETURN_FALSE;
        }
        ctype = "text/plain; charset=utf-8";
    } else {
        int rc = pyj_dumps(value, &json);
        if (rc) {
            pyj_buf_free(&json);
            if (rc < 0)
                return NULL;
            Py_RETURN_FALSE;
        }
        body = json.data;
        len = (Py_ssize_t)json.len;
        ctype = "application/json";
    }
    if (apply_meta((size_t)idx, status, phrase, headers, &has_ctype)) {
        pyj_buf_free(&json);
        return NULL;
    }
    if (!has_ctype)
        ts_set_content_type(pyh_ctx, (size_t)idx, ctype);
    ts_set_response(pyh_ctx, (size_t)idx, body, (size_t)len);
    pyj_buf_free(&json);
    Py_RETURN_TRUE;
}

/* intermediate(i, body, status, phrase, headers) -> False if the request was cancelled;
 * otherwise the partial result is on its way to the frontend. */
static PyObject *w_intermediate(PyObject *self, PyObject *args)
{
    (void)self;
    Py_ssize_t idx, n;
    const char *phrase, *body;
    int status;
    PyObject *headers;
    if (!PyArg_ParseTuple(args, "ny#izO", &idx, &body, &n, &status, &phrase, &headers) ||
        pyh_check_idx(idx) || apply_meta((size_t)idx, status, phrase, headers, NULL))
        return NULL;
    size_t i = (size_t)idx, len = (size_t)n;
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
    if (!PyArg_ParseTuple(args, "nis", &i, &status, &msg) || pyh_check_idx(i))
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
    if (!PyArg_ParseTuple(args, "n|L", &i, &delay) || pyh_check_idx(i))
        return NULL;
    ts_continue(pyh_ctx, (size_t)i, delay);
    Py_RETURN_NONE;
}

static PyObject *w_is_cancelled(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t i;
    if (pyh_arg_idx(arg, &i))
        return NULL;
    return PyBool_FromLong(ts_is_cancelled(pyh_ctx, (size_t)i));
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
    {"respond", w_respond, METH_VARARGS, "final answer of request i (False: encode it first)"},
    {"intermediate", w_intermediate, METH_VARARGS, "stream a partial answer of request i now"},
    {"error", w_error, METH_VARARGS, "error answer of request i"},
    {"cont", w_cont, METH_VARARGS, "keep request i for the next step"},
    {"is_cancelled", w_is_cancelled, METH_O, "request i was cancelled"},
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
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    /* the built-in handler names, from the list the loader and the archiver read */
    PyObject *names = PyTuple_New((Py_ssize_t)PY_BUILTIN_HANDLERS_N);
    for (size_t i = 0; names && i < PY_BUILTIN_HANDLERS_N; i++)
        PyTuple_SET_ITEM(names, (Py_ssize_t)i, PyUnicode_FromString(PY_BUILTIN_HANDLERS[i]));
    if (!names || PyModule_AddObject(m, "BUILTIN_HANDLERS", names) != 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
