/*
 * http_openai_out: what the OpenAI-compatible API answers (http_openai.c decodes the requests):
 * a job's frames become OpenAI's completion and chat completion objects, or their SSE chunks
 * followed by `data: [DONE]`, and errors become OpenAI's error object. Plugged into http_stream
 * as a call's transform and error_body; the per-call state is a struct oai_call (the call's arg).
 *
 * Text comes from each frame as OIP reads it (oip/oip_req.h): a text handler's chunk, or the
 * first element of the BYTES output the model declares (openai.textOutput, else the first
 * BYTES output). It goes through the request's stop sequences (common/textstop.h): a stop found
 * here ends the reply and cancels the job, whatever the model did with `stop`. Usage and the
 * finish reason are the model's when its frames carry x-ts-prompt-tokens,
 * x-ts-completion-tokens and x-ts-finish-reason (docs/openai.md); else usage is null and the
 * finish reason is "stop".
 *
 * Loop thread only. The call owns its oai_call and frees it with http_openai_out_free.
 */
#ifndef TS_HTTP_OPENAI_OUT_H
#define TS_HTTP_OPENAI_OUT_H

#include <stddef.h>

#include "textstop.h"
#include "util.h"

struct http_call;
struct otf_prediction;

struct oai_call {
    int chat;          /* /v1/chat/completions, else /v1/completions */
    int stream;        /* SSE chunks, else one object at the end */
    int include_usage; /* stream_options.include_usage: a last chunk with the usage */
    char id[48];       /* "cmpl-..." / "chatcmpl-..." */
    long long created; /* Unix seconds */
    char *model;       /* echoed as "model" */
    char *text_output; /* the OIP output that carries text, NULL: the first BYTES output */
    struct textstop ts;
    struct buf text;                       /* whole replies: the text so far */
    int role_sent;                         /* chat streams: delta.role went out */
    int frontend_stop;                     /* the stop sequence was found here */
    long prompt_tokens, completion_tokens; /* the model's, -1 when it did not say */
    char finish[16];                       /* the model's finish reason, "" when none */
};

/* A call's state; stop sequences as textstop_init takes them (already checked). */
struct oai_call *http_openai_out_new(int chat, int stream, int include_usage, const char *model,
                                     const char *text_output, const char *const *stop,
                                     const size_t *stop_len, size_t nstop);
void http_openai_out_free(void *arg);

/* http_transform_fn and http_error_body_fn for a call whose arg is a struct oai_call. */
char *http_openai_out_transform(struct http_call *c, const struct otf_prediction *p, int final,
                                size_t *len);
char *http_openai_out_error_body(struct http_call *c, int status, const char *type,
                                 const char *msg);

/* OpenAI's error object {"error": {"message", "type", "param", "code"}}, malloc'd JSON: the
 * type follows the HTTP status (400 invalid_request_error, 401 with code invalid_api_key, 404,
 * 429 rate_limit_error, 5xx server_error); param and code may be NULL. */
char *http_openai_error_json(int status, const char *msg, const char *param, const char *code);

#endif
