/*
 * builtins: the C handlers compiled into torchserve-c-worker (this directory). The worker's
 * main registers them with the handler loader by name (backend/main.c); each is a
 * ts_handler_get_fn (handler.h).
 */
#ifndef TS_BUILTINS_H
#define TS_BUILTINS_H

#include "handler.h"

const struct ts_handler *ts_handler_torchscript(void);
const struct ts_handler *ts_handler_identity_text(void);
const struct ts_handler *ts_handler_char_lm(void);
const struct ts_handler *ts_handler_stateful(void);
const struct ts_handler *ts_handler_lstm_stateful(void);
const struct ts_handler *ts_handler_textgen(void);

struct tsh_model;
/* The model's file (its serializedFile) from the model directory, on the worker's device; NULL
 * with the load error set ("cannot load FILE: why"). */
struct tsh_model *ts_builtin_load(struct ts_ctx *ctx, const char *file);

#endif
