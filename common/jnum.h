/*
 * jnum: JSON numbers without strtod or printf, for the per-element hot paths (the worker's
 * tjson, the frontend's OIP REST parse and reply).
 *
 * jnum_scan_f32 reads a JSON number token and gives exactly the float that (float) of jansson's
 * value gives (strtod's correctly rounded double, or an integer token via long long, cast to
 * float); it gives up (-1) on anything it cannot decide cheaply, and the caller then takes its
 * slow path. jnum_f32 prints a float exactly as printf's "%.9g" (the shortest width that always
 * round-trips float32), or returns 0 for the few values it leaves to snprintf.
 *
 * Pure: no globals, no allocation; any thread.
 */
#ifndef TS_JNUM_H
#define TS_JNUM_H

#include <stddef.h>
#include <stdint.h>

/* Longest output of jnum_f32 / jnum_i64 / jnum_u64, without a NUL. */
#define JNUM_MAX 24

/* The JSON number starting at p (before end) as a float. 0 with *next just past the token, or
 * -1 to give up: not a JSON number, an integer of more than 18 digits (jansson may refuse it),
 * or a real that overflows (jansson refuses it). */
int jnum_scan_f32(const char *p, const char *end, const char **next, float *out);

/* printf("%.9g", f) into s (no NUL): its length, or 0 for NaN, infinities and the tiny values
 * it leaves to snprintf. s holds JNUM_MAX bytes. */
size_t jnum_f32(char *s, float f);

/* Decimal integers into s (no NUL): the length. */
size_t jnum_i64(char *s, int64_t v);
size_t jnum_u64(char *s, uint64_t v);

/* A cursor for the hand-written JSON fast paths (OIP requests and wire headers). */
struct jcur {
    char *p, *end;
};

/* Skips JSON white space. */
static inline void jcur_ws(struct jcur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Skips white space, then consumes ch if it comes next: 1, else 0. */
static inline int jcur_lit(struct jcur *c, char ch)
{
    jcur_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* After white space, an ASCII string without escapes, NUL-terminated in place (the closing
 * quote is overwritten); *len (optional) gets its length. NULL if the next token is not that. */
static inline const char *jcur_str(struct jcur *c, size_t *len)
{
    jcur_ws(c);
    if (c->p >= c->end || *c->p != '"')
        return NULL;
    char *s = ++c->p;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x80)
            return NULL;
        c->p++;
    }
    if (c->p >= c->end)
        return NULL;
    *c->p++ = '\0';
    if (len)
        *len = (size_t)(c->p - 1 - s);
    return s;
}

#endif
