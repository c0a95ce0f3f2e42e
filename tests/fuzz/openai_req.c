/*
 * openai_req: OpenAI API request bodies (frontend/http/http_openai.c), a client's bytes. The
 * first byte picks the route (bit 0: chat completions, else completions); the rest is the body.
 *
 * An accepted body must give what the job promises the model: parameters as an object with
 * temperature in [0, 2], top_p in (0, 1] if given, max_tokens an integer >= 0 (always there for
 * completions: OpenAI's 16), stop as a list of 1 to 4 strings of 1 to 64 bytes that are exactly
 * the stop sequences the reply applies (textstop takes them); a chat prompt ends with the
 * assistant's line. A refused body has a message.
 */
#include "../../frontend/http/http_openai.c"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    json_t *body = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!body)
        return 0;
    struct oai_req q;
    memset(&q, 0, sizeof(q));
    q.chat = data[0] & 1;
    q.params = json_object();
    buf_init(&q.prompt);
    struct oai_err e = {.param = NULL};
    e.msg[0] = '\0';
    if (read_request(body, &q, &e)) {
        FUZZ_CHECK(e.msg[0]);
    } else {
        FUZZ_CHECK(json_is_object(q.params));
        json_t *t = json_object_get(q.params, "temperature");
        FUZZ_CHECK(json_is_real(t) && json_real_value(t) >= 0 && json_real_value(t) <= 2);
        json_t *p = json_object_get(q.params, "top_p");
        FUZZ_CHECK(!p || (json_real_value(p) > 0 && json_real_value(p) <= 1));
        json_t *m = json_object_get(q.params, "max_tokens");
        FUZZ_CHECK(!m || (json_is_integer(m) && json_integer_value(m) >= 0));
        FUZZ_CHECK(q.chat || m);
        json_t *s = json_object_get(q.params, "stop");
        FUZZ_CHECK(q.nstop <= TEXTSTOP_MAX && (s ? json_array_size(s) == q.nstop : !q.nstop));
        for (size_t i = 0; i < q.nstop; i++) {
            json_t *x = json_array_get(s, i);
            FUZZ_CHECK(q.stop_len[i] >= 1 && q.stop_len[i] <= TEXTSTOP_MAX_LEN);
            FUZZ_CHECK(json_string_length(x) == q.stop_len[i]);
            FUZZ_CHECK(!memcmp(json_string_value(x), q.stop[i], q.stop_len[i]));
        }
        struct textstop ts;
        FUZZ_CHECK(textstop_init(&ts, q.stop, q.stop_len, q.nstop) == 0);
        textstop_free(&ts);
        static const char tail[] = "assistant:";
        FUZZ_CHECK(!q.chat || (q.prompt.len >= sizeof(tail) - 1 &&
                               !memcmp(q.prompt.data + q.prompt.len - (sizeof(tail) - 1), tail,
                                       sizeof(tail) - 1)));
    }
    buf_free(&q.prompt);
    json_decref(q.params);
    json_decref(body);
    return 0;
}
