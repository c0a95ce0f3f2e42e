/*
 * py_json: json.loads and json.dumps for the shapes handlers exchange (lists of numbers, small
 * dicts of strings), without the json module's per-call Python work.
 *
 * Why: for a small model, Python's JSON was a large part of the Python path's cost per request
 * (the decoder makes a str per number and goes through float(); dumps builds an encoder and a
 * list of chunks per call), and a cold one: each request runs it once, after the forward evicted
 * it from the caches.
 *
 * Exactness: numbers follow the json module's grammar. An integer token gives int (up to 18
 * digits here, longer ones go to json.loads); a real token gives the double float() gives: with
 * at most 15 significant digits and a power of ten up to 22 that is one correctly rounded
 * multiplication or division of two exact doubles (Clinger's fast path), otherwise
 * PyOS_string_to_double, the function float() itself calls. Strings with an escape or a control
 * character are left to json.loads, as are NaN and Infinity. dumps writes floats with
 * PyOS_double_to_string(.., 'r', ..), which is float.__repr__, and strings with the json
 * module's ensure_ascii escaping.
 */
#include "py_json.h"

#include <math.h>
#include <string.h>

/* Deeper documents go to the json module, whose recursion limit then applies as before. */
#define PYJ_MAX_DEPTH 64

/* ---- buffer ---- */

void pyj_buf_free(struct pyj_buf *b)
{
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int buf_reserve(struct pyj_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    char *d = PyMem_Realloc(b->data, cap);
    if (!d) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

static int buf_put(struct pyj_buf *b, const char *s, size_t n)
{
    if (buf_reserve(b, n))
        return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

/* ---- decoding ---- */

struct dec {
    const char *p, *end;
    int depth;
};

static void skip_ws(struct dec *d)
{
    while (d->p < d->end && (*d->p == ' ' || *d->p == '\t' || *d->p == '\n' || *d->p == '\r'))
        d->p++;
}

static int is_digit(char c)
{
    return (unsigned char)(c - '0') < 10;
}

/* 10^0 .. 10^22, exact as doubles */
static const double exact_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static PyObject *dec_number(struct dec *d)
{
    const char *tok = d->p, *p = d->p, *end = d->end;
    int neg = 0, nd = 0, sig = 0;
    unsigned long long m = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (p == end || !is_digit(*p))
        return NULL;
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return NULL; /* json.loads stops after the 0 and then fails */
    } else {
        for (; p < end && is_digit(*p); p++, nd++) {
            if (sig < 19) {
                m = m * 10 + (unsigned)(*p - '0');
                sig++;
            } else {
                sig = 99; /* more digits than the fast path takes */
            }
        }
    }
    int is_real = 0, exp10 = 0;
    if (p < end && *p == '.') {
        if (p + 1 == end || !is_digit(p[1]))
            return NULL;
        is_real = 1;
        for (p++; p < end && is_digit(*p); p++) {
            if (sig < 19 && (m || *p != '0')) {
                m = m * 10 + (unsigned)(*p - '0');
                sig++;
                exp10--;
            } else if (sig < 19) {
                exp10--; /* a leading zero of 0.00123 */
            } else {
                sig = 99; /* more digits than the fast path takes */
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        int eneg = 0, e = 0, ed = 0;
        if (q < end && (*q == '+' || *q == '-'))
            eneg = *q++ == '-';
        for (; q < end && is_digit(*q); q++, ed++)
            if (ed < 6)
                e = e * 10 + (*q - '0');
        if (!ed)
            return NULL; /* json.loads leaves the 'e' unread, then fails */
        is_real = 1;
        if (ed >= 6)
            sig = 99;
        exp10 += eneg ? -e : e;
        p = q;
    }
    d->p = p;
    if (!is_real) {
        if (nd > 18)
            return NULL; /* big: int() and its digit limit, in json.loads */
        long long v = (long long)m;
        return PyLong_FromLongLong(neg ? -v : v);
    }
    if (m == 0 && sig < 99)
        return PyFloat_FromDouble(neg ? -0.0 : 0.0);
    if (sig <= 15 && exp10 >= -22 && exp10 <= 22) {
        double v = (double)m;
        v = exp10 < 0 ? v / exact_pow10[-exp10] : v * exact_pow10[exp10];
        return PyFloat_FromDouble(neg ? -v : v);
    }
    /* the rest as float() reads it */
    size_t n = (size_t)(p - tok);
    char small[64];
    char *s = n < sizeof(small) ? small : PyMem_Malloc(n + 1);
    if (!s)
        return PyErr_NoMemory();
    memcpy(s, tok, n);
    s[n] = 0;
    char *stop = NULL;
    double v = PyOS_string_to_double(s, &stop, NULL);
    int whole = stop == s + n;
    if (s != small)
        PyMem_Free(s);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear(); /* not for a token of this grammar; json.loads decides */
        return NULL;
    }
    return whole ? PyFloat_FromDouble(v) : NULL;
}

static PyObject *dec_string(struct dec *d)
{
    const char *s = ++d->p;
    const char *p = s;
    while (p < d->end && *p != '"') {
        if (*p == '\\' || (unsigned char)*p < 0x20)
            return NULL; /* escapes and control characters: json.loads */
        p++;
    }
    if (p == d->end)
        return NULL;
    d->p = p + 1;
    PyObject *str = PyUnicode_DecodeUTF8(s, p - s, NULL);
    if (!str && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear(); /* the json module's path reports it */
    return str;
}

static int lit(struct dec *d, const char *word, size_t n)
{
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n))
        return 0;
    d->p += n;
    return 1;
}

static PyObject *dec_value(struct dec *d);

/* After an array's or object's item: 1 at its closing bracket (taken), 0 after a comma (and
 * the space after it), -1 for anything else. */
static int after_item(struct dec *d, char close)
{
    skip_ws(d);
    if (d->p == d->end)
        return -1;
    if (*d->p == close) {
        d->p++;
        return 1;
    }
    if (*d->p != ',')
        return -1;
    d->p++;
    skip_ws(d);
    return 0;
}

/* Past an array's or object's opening bracket and the space after it: 1 when the container is
 * empty (its closing bracket taken too), else 0. */
static int open_container(struct dec *d, char close)
{
    d->p++;
    skip_ws(d);
    if (d->p < d->end && *d->p == close) {
        d->p++;
        return 1;
    }
    return 0;
}

static PyObject *dec_array(struct dec *d)
{
    PyObject *list = PyList_New(0);
    if (!list || open_container(d, ']'))
        return list;
    for (;;) {
        PyObject *v = dec_value(d);
        if (!v || PyList_Append(list, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(v);
        int r = after_item(d, ']');
        if (r > 0)
            return list;
        if (r < 0)
            break;
    }
    Py_DECREF(list);
    return NULL;
}

static PyObject *dec_object(struct dec *d)
{
    PyObject *dict = PyDict_New();
    if (!dict || open_container(d, '}'))
        return dict;
    for (;;) {
        if (d->p == d->end || *d->p != '"')
            break;
        PyObject *k = dec_string(d);
        if (!k)
            break;
        skip_ws(d);
        if (d->p == d->end || *d->p != ':') {
            Py_DECREF(k);
            break;
        }
        d->p++;
        skip_ws(d);
        PyObject *v = dec_value(d);
        int rc = v ? PyDict_SetItem(dict, k, v) : -1;
        Py_DECREF(k);
        Py_XDECREF(v);
        if (rc < 0)
            break;
        int r = after_item(d, '}');
        if (r > 0)
            return dict;
        if (r < 0)
            break;
    }
    Py_DECREF(dict);
    return NULL;
}

static PyObject *dec_value(struct dec *d)
{
    if (d->p == d->end)
        return NULL;
    PyObject *v = NULL;
    switch (*d->p) {
    case '{':
    case '[':
        if (++d->depth > PYJ_MAX_DEPTH)
            return NULL;
        v = *d->p == '{' ? dec_object(d) : dec_array(d);
        d->depth--;
        return v;
    case '"':
        return dec_string(d);
    case 't':
        return lit(d, "true", 4) ? Py_NewRef(Py_True) : NULL;
    case 'f':
        return lit(d, "false", 5) ? Py_NewRef(Py_False) : NULL;
    case 'n':
        return lit(d, "null", 4) ? Py_NewRef(Py_None) : NULL;
    default:
        return *d->p == '-' || is_digit(*d->p) ? dec_number(d) : NULL;
    }
}

PyObject *pyj_loads(const char *text, size_t n)
{
    struct dec d = {.p = text, .end = text + n, .depth = 0};
    skip_ws(&d);
    PyObject *v = dec_value(&d);
    if (!v)
        return NULL;
    skip_ws(&d);
    if (d.p != d.end) {
        Py_DECREF(v);
        return NULL; /* "Extra data": json.loads says so */
    }
    return v;
}

/* ---- encoding ---- */

/* The length of s in ensure_ascii JSON, quotes included. */
static size_t str_len(int kind, const void *data, Py_ssize_t n)
{
    size_t len = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~')
            len += c == '\\' || c == '"' ? 2 : 1;
        else if (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t')
            len += 2;
        else
            len += c >= 0x10000 ? 12 : 6;
    }
    return len;
}

static int enc_str(struct pyj_buf *b, PyObject *s)
{
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    /* a short string takes the worst case (each code point a \uXXXX\uXXXX pair) unmeasured */
    if (buf_reserve(b, n < 64 ? 2 + 12 * (size_t)n : str_len(kind, data, n)))
        return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '\\':
        case '"':
            *o++ = (char)c;
            continue;
        case '\b':
            *o++ = 'b';
            continue;
        case '\f':
            *o++ = 'f';
            continue;
        case '\n':
            *o++ = 'n';
            continue;
        case '\r':
            *o++ = 'r';
            continue;
        case '\t':
            *o++ = 't';
            continue;
        }
        if (c >= 0x10000) {
            Py_UCS4 v = c - 0x10000, hi = 0xd800 | ((v >> 10) & 0x3ff), lo = 0xdc00 | (v & 0x3ff);
            *o++ = 'u';
            for (int sh = 12; sh >= 0; sh -= 4)
                *o++ = hex[(hi >> sh) & 0xf];
            *o++ = '\\';
            c = lo;
        }
        *o++ = 'u';
        for (int sh = 12; sh >= 0; sh -= 4)
            *o++ = hex[(c >> sh) & 0xf];
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    return 0;
}

typedef unsigned __int128 u128;

/* 5^0 .. 5^54 (5^54 < 2^126): short_repr's k stays within 27 of zero */
static u128 pow5_tab[55];

static u128 pow5(int k)
{
    if (!pow5_tab[0]) {
        pow5_tab[0] = 1;
        for (int i = 1; i < 55; i++)
            pow5_tab[i] = pow5_tab[i - 1] * 5;
    }
    return pow5_tab[k];
}

/* c = x / 10^k rounded to nearest, x = m2 * 2^e2: 0; 1 when x / 10^k is exactly halfway
 * between c and c + 1; -1 when the numbers do not fit (left to dtoa). */
static int round_div(uint64_t m2, int e2, int k, u128 *c)
{
    u128 num, den;
    int sh = k - e2;
    if (k < 0) { /* m2 * 5^-k / 2^(k - e2) */
        num = (u128)m2 * pow5(-k);
        if (sh <= 0) { /* an integer */
            if (-sh >= 10 || (num >> (126 + sh)))
                return -1;
            *c = num << -sh;
            return 0;
        }
        if (sh >= 127)
            return -1;
        /* a power of two: shifts, not a 128-bit division */
        u128 half = (u128)1 << (sh - 1), r = num & ((half << 1) - 1);
        *c = (num >> sh) + (r > half);
        return r == half;
    } else { /* m2 / (5^k * 2^(k - e2)) */
        num = m2;
        if (sh <= 0 || sh + 2.33 * k >= 126)
            return -1;
        den = pow5(k) << sh;
    }
    u128 q = num / den, r = num - q * den;
    *c = q + (2 * r > den);
    return 2 * r == den;
}

/* Whether c * 10^k lies strictly inside x's rounding interval, x = m2 * 2^e2, whose half-width
 * is 2^(e2 - 1) (m2 is not a power of two): 1 inside, 0 outside, -1 on its edge. All in units
 * of 2^(e2 - 1): x is 2 * m2 and the edges 2 * m2 -+ 1; scaled by 5^-k when k < 0. */
static int inside(uint64_t m2, int e2, int k, u128 c)
{
    int sh = k - (e2 - 1);
    u128 a, bx, w;
    if (k < 0) {
        w = pow5(-k);
        bx = (u128)(2 * m2) * w;
    } else {
        w = 1;
        bx = (u128)(2 * m2);
        c *= pow5(k);
    }
    if (sh < 0 || sh >= 127 || (c >> (127 - sh)))
        return 0; /* far above x */
    a = c << sh;
    u128 d = a > bx ? a - bx : bx - a;
    return d < w ? 1 : d == w ? -1 : 0;
}

/* float.__repr__(x) for 2^-30 <= |x| < 2^50 whose mantissa is not a power of two, the
 * range handler outputs (probabilities, logits) live in: Python's repr is the shortest digit
 * string that reads back as x (dtoa mode 0), which costs dtoa some 6,700 instructions for a
 * float32 value as a double. Here: the candidates c * 10^k nearest to x, from 17 significant
 * digits (always inside x's interval) to fewer, while they stay inside; exact 128-bit integer
 * arithmetic. 0 when it leaves x to PyOS_double_to_string (other ranges, ties, edges). */
static size_t short_repr(double x, char *out)
{
    double ax = fabs(x);
    if (!(ax >= 0x1p-30 && ax < 0x1p50))
        return 0;
    int e;
    double f = frexp(ax, &e); /* ax = f * 2^e, f in [0.5, 1) */
    uint64_t m2 = (uint64_t)ldexp(f, 53);
    int e2 = e - 53;
    if (m2 == (uint64_t)1 << 52)
        return 0;                    /* the interval is lopsided below a power of two */
    int top = (int)floor(log10(ax)); /* first digit's power of ten, maybe off by one */
    int k = top - 17;                /* 18 or 17 digits: inside */
    u128 best = 0;
    int best_k = 0, found = 0;
    for (; k <= top + 1; k++) {
        u128 c;
        int tie = round_div(m2, e2, k, &c);
        if (tie < 0)
            return 0;
        if (c == 0)
            break;
        int in = inside(m2, e2, k, c);
        if (in < 0 || (in && tie))
            return 0; /* on an edge, or two candidates as near: dtoa's rules decide */
        if (!in)
            break;
        best = c;
        best_k = k;
        found = 1;
    }
    if (!found)
        return 0;
    char dig[40];
    int n = 0;
    if (best >> 64)
        return 0;
    for (uint64_t c = (uint64_t)best; c; c /= 10) /* at most 19 digits: 64-bit division */
        dig[n++] = (char)('0' + (int)(c % 10));
    for (int i = 0; i < n / 2; i++) {
        char t = dig[i];
        dig[i] = dig[n - 1 - i];
        dig[n - 1 - i] = t;
    }
    while (n > 1 && dig[n - 1] == '0') {
        n--;
        best_k++;
    }
    if (n > 17)
        return 0;
    int decpt = n + best_k; /* x = 0.dig * 10^decpt */
    size_t o = 0;
    if (x < 0)
        out[o++] = '-';
    if (decpt <= -4 || decpt > 16) {
        int ex = decpt - 1;
        out[o++] = dig[0];
        if (n > 1) {
            out[o++] = '.';
            memcpy(out + o, dig + 1, (size_t)n - 1);
            o += (size_t)n - 1;
        }
        o += (size_t)sprintf(out + o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[o++] = '0';
        memcpy(out + o, dig, (size_t)n);
        o += (size_t)n;
    } else if (decpt >= n) {
        memcpy(out + o, dig, (size_t)n);
        o += (size_t)n;
        for (int i = n; i < decpt; i++)
            out[o++] = '0';
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, dig, (size_t)decpt);
        o += (size_t)decpt;
        out[o++] = '.';
        memcpy(out + o, dig + decpt, (size_t)(n - decpt));
        o += (size_t)(n - decpt);
    }
    return o;
}

static int enc_float(struct pyj_buf *b, double x)
{
    if (!isfinite(x)) {
        if (isnan(x))
            return buf_put(b, "NaN", 3);
        return x > 0 ? buf_put(b, "Infinity", 8) : buf_put(b, "-Infinity", 9);
    }
    char fast[48];
    size_t n = short_repr(x, fast);
    if (n)
        return buf_put(b, fast, n);
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s)
        return -1;
    int rc = buf_put(b, s, strlen(s));
    PyMem_Free(s);
    return rc;
}

static int enc_value(struct pyj_buf *b, PyObject *v, int depth)
{
    if (v == Py_None)
        return buf_put(b, "null", 4);
    if (v == Py_True)
        return buf_put(b, "true", 4);
    if (v == Py_False)
        return buf_put(b, "false", 5);
    if (PyFloat_CheckExact(v))
        return enc_float(b, PyFloat_AS_DOUBLE(v));
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return 1; /* int.__repr__ and its digit limit, in json.dumps */
        char s[24];
        int n = snprintf(s, sizeof(s), "%lld", x);
        return buf_put(b, s, (size_t)n);
    }
    if (PyUnicode_CheckExact(v))
        return enc_str(b, v);
    if (depth >= PYJ_MAX_DEPTH)
        return 1;
    if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        PyObject **items = PySequence_Fast_ITEMS(v);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (buf_put(b, "[", 1))
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            int rc = i ? buf_put(b, ", ", 2) : 0;
            if (!rc)
                rc = enc_value(b, items[i], depth + 1);
            if (rc)
                return rc;
        }
        return buf_put(b, "]", 1);
    }
    if (PyDict_CheckExact(v)) {
        PyObject *k, *val;
        Py_ssize_t pos = 0;
        int first = 1;
        if (buf_put(b, "{", 1))
            return -1;
        while (PyDict_Next(v, &pos, &k, &val)) {
            if (!PyUnicode_CheckExact(k))
                return 1; /* json.dumps converts or refuses other keys */
            int rc = first ? 0 : buf_put(b, ", ", 2);
            first = 0;
            if (!rc)
                rc = enc_str(b, k);
            if (!rc)
                rc = buf_put(b, ": ", 2);
            if (!rc)
                rc = enc_value(b, val, depth + 1);
            if (rc)
                return rc;
        }
        return buf_put(b, "}", 1);
    }
    return 1;
}

int pyj_dumps(PyObject *v, struct pyj_buf *b)
{
    size_t len = b->len;
    int rc = enc_value(b, v, 0);
    if (rc)
        b->len = len;
    return rc;
}
