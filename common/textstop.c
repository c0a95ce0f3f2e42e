/*
 * textstop: stop sequences and UTF-8 boundaries over streamed text (see textstop.h).
 *
 * Everything pushed goes into `held`; a push then looks for the stop sequence that was complete
 * first in it (as generation would meet them, one token at a time). Without one, it keeps back the
 * longest tail of held that is a proper prefix of some stop sequence (no occurrence can start
 * earlier: it would have been found), and an incomplete UTF-8 sequence, and releases the rest. held
 * therefore stays shorter than the longest stop sequence plus the last push, and a stop sequence
 * that spans two pushes is still found.
 */
#include "textstop.h"

#include <string.h>

int textstop_init(struct textstop *t, const char *const *stop, const size_t *len, size_t n)
{
    memset(t, 0, sizeof(*t));
    buf_init(&t->held);
    if (n > TEXTSTOP_MAX)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (len[i] == 0 || len[i] > TEXTSTOP_MAX_LEN)
            return -1;
    for (size_t i = 0; i < n; i++) {
        memcpy(t->stop[i], stop[i], len[i]);
        t->stop_len[i] = len[i];
    }
    t->nstop = n;
    return 0;
}

void textstop_free(struct textstop *t)
{
    buf_free(&t->held);
}

/* The length of the UTF-8 sequence that starts at p (at most n bytes there): > 0 for a valid
 * one, -k for k bytes that are malformed (to be replaced by one U+FFFD), 0 when the bytes are a
 * valid start that n cuts short. */
static int seq_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f; /* no UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f; /* nothing past U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return 0;
        unsigned char b = p[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf))
            return -i; /* the valid start, one replacement; b is read again */
    }
    return len;
}

size_t textstop_utf8(const unsigned char *p, size_t n, int keep_tail, struct buf *out)
{
    size_t i = 0;
    while (i < n) {
        int k = seq_len(p + i, n - i);
        if (k > 0) {
            buf_put(out, p + i, (size_t)k);
            i += (size_t)k;
        } else if (k < 0) {
            buf_put(out, "\xef\xbf\xbd", 3);
            i += (size_t)-k;
        } else if (keep_tail) {
            break;
        } else {
            buf_put(out, "\xef\xbf\xbd", 3); /* a sequence the stream's end cut short */
            i = n;
        }
    }
    return i;
}

/* Releases held[0..n): as UTF-8 into out, less an incomplete tail when keep_tail. */
static void release(struct textstop *t, size_t n, int keep_tail, struct buf *out)
{
    if (!t->held.data)
        return; /* nothing was ever pushed */
    size_t done = textstop_utf8(t->held.data, n, keep_tail, out);
    memmove(t->held.data, t->held.data + done, t->held.len - done);
    t->held.len -= done;
    if (t->held.data)
        t->held.data[t->held.len] = '\0';
}

int textstop_push(struct textstop *t, const void *p, size_t n, struct buf *out)
{
    if (t->stopped)
        return 1;
    buf_put(&t->held, p, n);
    const unsigned char *h = t->held.data;
    size_t hl = t->held.len;
    /* the stop sequence that was complete first: the earliest end (generation stops there; a
     * longer one that started earlier would only have ended later), then the earliest start */
    size_t at = hl, end = (size_t)-1;
    for (size_t s = 0; s < t->nstop; s++) {
        size_t sl = t->stop_len[s];
        for (size_t i = 0; i + sl <= hl && i + sl <= end; i++)
            if (!memcmp(h + i, t->stop[s], sl)) {
                if (i + sl < end || i < at) {
                    at = i;
                    end = i + sl;
                }
                break;
            }
    }
    if (at < hl) {
        t->held.len = at;
        release(t, at, 0, out);
        t->held.len = 0;
        t->stopped = 1;
        return 1;
    }
    /* the longest tail that a stop sequence may still complete */
    size_t keep = 0;
    for (size_t s = 0; s < t->nstop; s++) {
        size_t sl = t->stop_len[s];
        for (size_t k = sl - 1 < hl ? sl - 1 : hl; k > keep; k--)
            if (!memcmp(h + hl - k, t->stop[s], k)) {
                keep = k;
                break;
            }
    }
    release(t, hl - keep, 1, out);
    return 0;
}

void textstop_finish(struct textstop *t, struct buf *out)
{
    if (!t->stopped)
        release(t, t->held.len, 0, out);
    t->held.len = 0;
}
