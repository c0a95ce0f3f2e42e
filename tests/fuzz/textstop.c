/*
 * textstop: generated text through stop sequences and UTF-8 boundaries (common/textstop.c), the
 * worker's text to a client. The first byte gives the number of stop sequences (low 3 bits, at
 * most 4) and the next ones their lengths (1 to 16); then their bytes; the rest is the text,
 * pushed in pieces of 1 to 8 bytes (sizes from the text's own bytes).
 *
 * Differential: the pieces must release, in all, exactly what one push of the whole text
 * releases, with the same verdict (stopped or not): holding back a tail must never change the
 * outcome. Independently of textstop: what is released is valid UTF-8; when the text holds no
 * stop sequence and is valid UTF-8 it comes back unchanged; when the stop sequence complete first
 * (the text read a byte at a time) follows valid UTF-8, exactly the text before it comes back.
 */
#include "../../common/textstop.c"

#include "fuzz.h"

/* valid UTF-8, by the book (RFC 3629), not by textstop's own table */
static int utf8_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

static int run(struct textstop *t, const uint8_t *text, size_t n, int split, struct buf *out)
{
    int stopped = 0;
    size_t i = 0;
    while (i < n && !stopped) {
        size_t k = split ? 1 + text[i] % 8 : n;
        if (k > n - i)
            k = n - i;
        stopped = textstop_push(t, text + i, k, out);
        i += k;
    }
    if (!stopped)
        textstop_finish(t, out);
    return stopped;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t nstop = data[0] & 7, off = 1;
    if (nstop > TEXTSTOP_MAX || off + nstop > size)
        return 0;
    size_t len[TEXTSTOP_MAX];
    const char *stop[TEXTSTOP_MAX];
    for (size_t i = 0; i < nstop; i++)
        len[i] = 1 + data[off++] % 16;
    for (size_t i = 0; i < nstop; i++) {
        if (off + len[i] > size)
            return 0;
        stop[i] = (const char *)data + off;
        off += len[i];
    }
    const uint8_t *text = data + off;
    size_t n = size - off;

    struct textstop a, b;
    FUZZ_CHECK(textstop_init(&a, stop, len, nstop) == 0);
    FUZZ_CHECK(textstop_init(&b, stop, len, nstop) == 0);
    struct buf pieces, whole;
    buf_init(&pieces);
    buf_init(&whole);
    int sa = run(&a, text, n, 1, &pieces);
    int sb = run(&b, text, n, 0, &whole);
    FUZZ_CHECK(sa == sb);
    FUZZ_CHECK(pieces.len == whole.len &&
               (!pieces.len || !memcmp(pieces.data, whole.data, pieces.len)));
    FUZZ_CHECK(utf8_ok(whole.data, whole.len));

    /* the stop sequence complete first, found the slow way: the text a byte at a time */
    size_t at = n;
    for (size_t e = 1; e <= n && at == n; e++)
        for (size_t i = 0; i < nstop; i++)
            if (len[i] <= e && !memcmp(text + e - len[i], stop[i], len[i]) && e - len[i] < at)
                at = e - len[i];
    FUZZ_CHECK(sa == (at < n));
    if (utf8_ok(text, at))
        FUZZ_CHECK(whole.len == at && (!at || !memcmp(whole.data, text, at)));

    buf_free(&pieces);
    buf_free(&whole);
    textstop_free(&a);
    textstop_free(&b);
    return 0;
}
