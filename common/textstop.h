/*
 * textstop: generated text on its way to a client, through stop sequences (OpenAI's `stop`)
 * and UTF-8 boundaries. One per stream, owned by its caller; pure (no I/O, no globals), so the
 * worker's generator and the frontend's OpenAI API, which checks the text of any model, apply
 * the same rule.
 *
 * Text is pushed as it is generated, split anywhere (a byte-level model makes one byte per
 * token). What textstop_push releases is what may go to the client now: the text so far, less
 * (a) a tail that may still become a stop sequence and (b) an incomplete UTF-8 sequence at the
 * end. When a stop sequence appears, the text before it is released and the stream is over: the
 * stop sequence and anything after it are dropped, as OpenAI does. Of overlapping ones, the one
 * complete first counts, as if the text had come a byte at a time. textstop_finish releases
 * what was held back. Released text is always valid UTF-8: a malformed sequence becomes U+FFFD.
 */
#ifndef TS_TEXTSTOP_H
#define TS_TEXTSTOP_H

#include <stddef.h>

#include "util.h"

#define TEXTSTOP_MAX 4      /* stop sequences per stream: OpenAI's limit */
#define TEXTSTOP_MAX_LEN 64 /* bytes per stop sequence */

struct textstop {
    char stop[TEXTSTOP_MAX][TEXTSTOP_MAX_LEN];
    size_t stop_len[TEXTSTOP_MAX];
    size_t nstop;
    struct buf held; /* pushed, not yet released */
    int stopped;     /* a stop sequence was found: later pushes release nothing */
};

/* n stop sequences of the given lengths (0 < len <= TEXTSTOP_MAX_LEN, n <= TEXTSTOP_MAX).
 * 0, or -1 when they do not fit those limits (t is then still initialised, without stops). */
int textstop_init(struct textstop *t, const char *const *stop, const size_t *len, size_t n);
/* Adds n bytes and appends what may be sent now to out. 1 when a stop sequence has been found
 * (now or before): the stream is over; else 0. */
int textstop_push(struct textstop *t, const void *p, size_t n, struct buf *out);
/* The stream ends (length, end of the model's output): appends what was held back. */
void textstop_finish(struct textstop *t, struct buf *out);
void textstop_free(struct textstop *t);

/* Appends p[0..n) to out as valid UTF-8: each malformed or truncated sequence becomes U+FFFD.
 * Returns the number of bytes of p consumed: n, less an incomplete sequence at the very end
 * when keep_tail is set (it may be completed by the next bytes). */
size_t textstop_utf8(const unsigned char *p, size_t n, int keep_tail, struct buf *out);

#endif
