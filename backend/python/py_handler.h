/*
 * py_handler: the Python handler plugin (build/lib/libts_python.so), internal header.
 *
 * The plugin embeds CPython in the worker that serves a Python model and runs TorchServe's
 * handler contract (our `ts` package, backend/python/ts/). py_handler.c is the `struct
 * ts_handler`; py_module.c is the C module `_ts_worker` through which the Python side reads the
 * requests of the current call and answers them; py_stream.c is `_ts_stream`, the calls of
 * handlers that keep requests across steps in an event loop (backend/python/tsc_runtimes/).
 * Worker thread only. The worker's thread holds the GIL during init and each handle call and
 * releases it in between, so that threads a handler starts (an Inferless app's generate thread,
 * an executor) run while the worker waits for its next step.
 */
#ifndef TS_PY_HANDLER_H
#define TS_PY_HANDLER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "handler.h"

/* The worker context and request count of the call in progress (init: n = 0). */
extern struct ts_ctx *pyh_ctx;
extern size_t pyh_n;

/* For both modules, which name a request by its index in the call in progress: 0 when i is one,
 * else -1 with IndexError set. pyh_arg_idx reads the index a METH_O function was given first
 * (-1 with the exception set when it is not an integer). */
int pyh_check_idx(Py_ssize_t i);
int pyh_arg_idx(PyObject *arg, Py_ssize_t *i);

/* PyImport_AppendInittab entries of _ts_worker and _ts_stream. */
PyObject *pyh_module_init(void);
PyObject *pyh_stream_module_init(void);

/* The handler getters the worker's handler_loader looks up (handler.h's ts_handler_get_fn). */
const struct ts_handler *ts_python_handler(void);
const struct ts_handler *ts_python_handler_continuous(void);

#endif
