/*
 * oip_wire: the normalized OIP tensor payload (layout in oip_wire.h) and the datatype table.
 *
 * The JSON header keeps the payload self-describing and lets request parameters pass through
 * untouched, while tensor data stays raw: neither side formats or parses numbers on the way
 * to the worker, and the frontend copies raw gRPC contents without conversion.
 */
#include "oip_wire.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "jnum.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[OIP_DTYPE_COUNT] = {
    [OIP_BOOL] = {"BOOL", 1},     [OIP_UINT8] = {"UINT8", 1},   [OIP_UINT16] = {"UINT16", 2},
    [OIP_UINT32] = {"UINT32", 4}, [OIP_UINT64] = {"UINT64", 8}, [OIP_INT8] = {"INT8", 1},
    [OIP_INT16] = {"INT16", 2},   [OIP_INT32] = {"INT32", 4},   [OIP_INT64] = {"INT64", 8},
    [OIP_FP16] = {"FP16", 2},     [OIP_FP32] = {"FP32", 4},     [OIP_FP64] = {"FP64", 8},
    [OIP_BF16] = {"BF16", 2},     [OIP_BYTES] = {"BYTES", 0},
};

int oip_dtype_from_name(const char *s)
{
    if (!s)
        return -1;
    for (int i = 0; i < OIP_DTYPE_COUNT; i++)
        if (!strcmp(s, dtypes[i].name))
            return i;
    return -1;
}

const char *oip_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < OIP_DTYPE_COUNT ? dtypes[dtype].name : "?";
}

size_t oip_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < OIP_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

int64_t oip_numel(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (shape[i] && n > INT64_MAX / shape[i])
            return -1;
        n *= shape[i];
    }
    return n;
}

void oip_shape_str(char *out, size_t n, const int64_t *shape, int ndim)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < n)
        snprintf(out + k, n - k, "]");
}

uint64_t oip_rd_le(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int oip_bytes_next(const uint8_t **p, const uint8_t *end, const uint8_t **s, uint32_t *n)
{
    if (*p == end)
        return 0;
    if (end - *p < 4)
        return -1;
    uint32_t len = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 |
                   (uint32_t)(*p)[3] << 24;
    if ((size_t)(end - *p - 4) < len)
        return -1;
    *s = *p + 4;
    *n = len;
    *p += 4 + (size_t)len;
    return 1;
}

int oip_check_data(int dtype, const int64_t *shape, int ndim, const uint8_t *data, size_t nbytes,
                   char *err, size_t errlen)
{
    char sh[128];
    int64_t numel = oip_numel(shape, ndim);
    if (numel < 0) {
        oip_shape_str(sh, sizeof(sh), shape, ndim);
        snprintf(err, errlen, "shape %s is not a valid shape", sh);
        return -1;
    }
    if (dtype != OIP_BYTES) {
        size_t es = oip_dtype_size(dtype);
        if (!es || (uint64_t)numel > SIZE_MAX / es || (size_t)numel * es != nbytes) {
            oip_shape_str(sh, sizeof(sh), shape, ndim);
            if (es && (uint64_t)numel > (uint64_t)INT64_MAX / es) /* the product would overflow */
                snprintf(err, errlen, "%s %s is too large, got %zu bytes", oip_dtype_name(dtype),
                         sh, nbytes);
            else
                snprintf(err, errlen, "expected %lld bytes for %s %s, got %zu",
                         (long long)numel * (long long)es, oip_dtype_name(dtype), sh, nbytes);
            return -1;
        }
        return 0;
    }
    const uint8_t *p = data, *end = data + nbytes, *s;
    uint32_t n;
    int64_t count = 0;
    int rc;
    while ((rc = oip_bytes_next(&p, end, &s, &n)) == 1)
        count++;
    if (rc < 0) {
        snprintf(err, errlen, "BYTES data is truncated after %lld element(s)", (long long)count);
        return -1;
    }
    if (count != numel) {
        oip_shape_str(sh, sizeof(sh), shape, ndim);
        snprintf(err, errlen, "BYTES shape %s needs %lld element(s), got %lld", sh,
                 (long long)numel, (long long)count);
        return -1;
    }
    return 0;
}

float oip_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, x;
    if (exp == 0) {
        if (!man) {
            x = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            x = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | man << 13;
    } else {
        x = sign | (exp + 112) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Round to nearest, ties to even. */
uint16_t oip_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int e = (int)exp - 112;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        int shift = 14 - e;
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is still right: it rounds up to the next binade */
    return (uint16_t)(sign | h);
}

float oip_bf16_to_float(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t oip_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffff))
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

void oip_wire_put_header(struct buf *b, const char *json, size_t len)
{
    uint8_t le[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
    buf_put(b, "OIP1", 4);
    buf_put(b, le, 4);
    buf_put(b, json, len);
}

int oip_wire_split(const void *p, size_t len, const char **json, size_t *jlen, const uint8_t **raw,
                   size_t *rawlen, char *err, size_t errlen)
{
    const uint8_t *u = p;
    if (!p || len < 8 || memcmp(u, "OIP1", 4)) {
        snprintf(err, errlen, "not an OIP tensor payload");
        return -1;
    }
    size_t n = (size_t)u[4] | (size_t)u[5] << 8 | (size_t)u[6] << 16 | (size_t)u[7] << 24;
    if (n > len - 8) {
        snprintf(err, errlen, "OIP payload header of %zu bytes exceeds the payload", n);
        return -1;
    }
    *json = (const char *)u + 8;
    *jlen = n;
    *raw = u + 8 + n;
    *rawlen = len - 8 - n;
    return 0;
}

int oip_wire_tensors(json_t *header, const char *key, const uint8_t *raw, size_t rawlen,
                     struct oip_tensor *out, size_t max, size_t *n, char *err, size_t errlen)
{
    *n = 0;
    json_t *arr = json_object_get(header, key);
    if (!arr)
        return 0;
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "%s: expected an array", key);
        return -1;
    }
    if (json_array_size(arr) > max) {
        snprintf(err, errlen, "%s: more than %zu tensors", key, max);
        return -1;
    }
    size_t off = 0, i;
    json_t *t;
    char why[256];
    json_array_foreach(arr, i, t)
    {
        struct oip_tensor *o = &out[i];
        memset(o, 0, sizeof(*o));
        json_t *name = json_object_get(t, "name"), *dt = json_object_get(t, "datatype");
        json_t *shape = json_object_get(t, "shape"), *size = json_object_get(t, "size");
        if (!json_is_string(name) || !json_is_string(dt) || !json_is_array(shape) ||
            !json_is_integer(size) || json_integer_value(size) < 0) {
            snprintf(err, errlen, "%s[%zu]: needs name, datatype, shape and size", key, i);
            return -1;
        }
        o->name = json_string_value(name);
        o->dtype = oip_dtype_from_name(json_string_value(dt));
        if (o->dtype < 0) {
            snprintf(err, errlen, "%s[%zu].datatype: unknown datatype \"%s\"", key, i,
                     json_string_value(dt));
            return -1;
        }
        if (json_array_size(shape) > OIP_MAX_DIMS) {
            snprintf(err, errlen, "%s[%zu].shape: more than %d dimensions", key, i, OIP_MAX_DIMS);
            return -1;
        }
        size_t k;
        json_t *d;
        json_array_foreach(shape, k, d)
        {
            if (!json_is_integer(d) || json_integer_value(d) < 0) {
                snprintf(err, errlen, "%s[%zu].shape[%zu]: expected a size >= 0", key, i, k);
                return -1;
            }
            o->shape[o->ndim++] = json_integer_value(d);
        }
        size_t sz = (size_t)json_integer_value(size);
        if (sz > rawlen - off) {
            snprintf(err, errlen, "%s[%zu].size: %zu bytes exceed the payload", key, i, sz);
            return -1;
        }
        o->data = raw + off;
        o->nbytes = sz;
        off += sz;
        if (oip_check_data(o->dtype, o->shape, o->ndim, o->data, sz, why, sizeof(why))) {
            snprintf(err, errlen, "%s[%zu]: %s", key, i, why);
            return -1;
        }
        json_t *prm = json_object_get(t, "parameters");
        o->parameters = json_is_object(prm) ? prm : NULL;
        (*n)++;
    }
    if (off != rawlen) {
        snprintf(err, errlen, "%s: %zu bytes of tensor data left over", key, rawlen - off);
        return -1;
    }
    return 0;
}

void oip_wire_describe(json_t *arr, const char *name, int dtype, const int64_t *shape, int ndim,
                       size_t nbytes)
{
    json_t *o = json_object();
    json_t *sh = json_array();
    for (int i = 0; i < ndim; i++)
        json_array_append_new(sh, json_integer(shape[i]));
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "datatype", json_string(oip_dtype_name(dtype)));
    json_object_set_new(o, "shape", sh);
    json_object_set_new(o, "size", json_integer((json_int_t)nbytes));
    json_array_append_new(arr, o);
}

void oip_wire_put_jstr(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n + 2);
    buf_put_u8(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        buf_put(b, s + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
        switch (ch) {
        case '"':
            buf_put(b, "\\\"", 2);
            break;
        case '\\':
            buf_put(b, "\\\\", 2);
            break;
        case '\n':
            buf_put(b, "\\n", 2);
            break;
        case '\r':
            buf_put(b, "\\r", 2);
            break;
        case '\t':
            buf_put(b, "\\t", 2);
            break;
        default:
            buf_put(b, esc, 6);
        }
    }
    buf_put(b, s + run, n - run);
    buf_put_u8(b, '"');
}

void oip_wire_put_desc(struct buf *b, int first, const char *name, int dtype, const int64_t *shape,
                       int ndim, size_t nbytes)
{
    char num[JNUM_MAX];
    buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
    oip_wire_put_jstr(b, name, strlen(name));
    buf_puts(b, ",\"datatype\":\"");
    buf_puts(b, oip_dtype_name(dtype));
    buf_puts(b, "\",\"shape\":[");
    for (int i = 0; i < ndim; i++) {
        if (i)
            buf_put_u8(b, ',');
        buf_put(b, num, jnum_i64(num, shape[i]));
    }
    buf_puts(b, "],\"size\":");
    buf_put(b, num, jnum_u64(num, nbytes));
    buf_put_u8(b, '}');
}

/* ---------------------------------------------------------------- fast header scan
 *
 * The headers this project writes are small and regular; jansson's DOM for one costs more than
 * the tensors. oip_wire_scan reads that form straight into tensors. It never reports an error:
 * on anything unexpected it says "not mine" and the caller runs jansson and oip_wire_tensors,
 * which own the messages, on the same bytes.
 */
/* An integer >= 0 of at most 18 digits, in JSON's spelling. */
static int hs_size(struct jcur *s, int64_t *v)
{
    jcur_ws(s);
    char *b = s->p;
    int64_t x = 0;
    for (; s->p < s->end && *s->p >= '0' && *s->p <= '9'; s->p++)
        if (s->p - b < 18) /* more digits are refused below: never overflow on the way */
            x = x * 10 + (*s->p - '0');
    size_t nd = (size_t)(s->p - b);
    if (!nd || nd > 18 || (nd > 1 && *b == '0'))
        return 0;
    if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
        return 0;
    *v = x;
    return 1;
}

static int hs_tensor(struct jcur *s, struct oip_tensor *o)
{
    int have = 0;
    int64_t size = 0;
    memset(o, 0, sizeof(*o));
    if (!jcur_lit(s, '{'))
        return 0;
    do {
        const char *k = jcur_str(s, NULL);
        int bit;
        if (!k || !jcur_lit(s, ':'))
            return 0;
        if (!strcmp(k, "name")) {
            bit = 1;
            if (!(o->name = jcur_str(s, NULL)))
                return 0;
        } else if (!strcmp(k, "datatype")) {
            const char *dt = jcur_str(s, NULL);
            bit = 2;
            if (!dt || (o->dtype = oip_dtype_from_name(dt)) < 0)
                return 0;
        } else if (!strcmp(k, "shape")) {
            bit = 4;
            if (!jcur_lit(s, '['))
                return 0;
            if (!jcur_lit(s, ']')) {
                do {
                    if (o->ndim == OIP_MAX_DIMS || !hs_size(s, &o->shape[o->ndim++]))
                        return 0;
                } while (jcur_lit(s, ','));
                if (!jcur_lit(s, ']'))
                    return 0;
            }
        } else if (!strcmp(k, "size")) {
            bit = 8;
            if (!hs_size(s, &size))
                return 0;
        } else {
            return 0; /* parameters, or a key of a newer writer */
        }
        if (have & bit)
            return 0;
        have |= bit;
    } while (jcur_lit(s, ','));
    if (!jcur_lit(s, '}') || have != 15)
        return 0;
    o->nbytes = (size_t)size;
    return 1;
}

int oip_wire_scan(const char *json, size_t jlen, char *scratch, const char *key, const uint8_t *raw,
                  size_t rawlen, struct oip_tensor *out, size_t max, size_t *n, const char **outs,
                  size_t *nouts)
{
    memcpy(scratch, json, jlen);
    scratch[jlen] = '\0';
    struct jcur s = {scratch, scratch + jlen};
    int seen = 0;
    size_t nt = 0, no = 0;
    if (!jcur_lit(&s, '{'))
        return 0;
    do {
        const char *k = jcur_str(&s, NULL);
        if (!k || !jcur_lit(&s, ':'))
            return 0;
        if (!strcmp(k, key)) {
            if ((seen & 1) || !jcur_lit(&s, '['))
                return 0;
            seen |= 1;
            if (jcur_lit(&s, ']'))
                continue;
            do {
                if (nt == max || !hs_tensor(&s, &out[nt]))
                    return 0;
                nt++;
            } while (jcur_lit(&s, ','));
            if (!jcur_lit(&s, ']'))
                return 0;
        } else if (outs && !strcmp(k, "outputs")) {
            if ((seen & 2) || !jcur_lit(&s, '['))
                return 0;
            seen |= 2;
            if (jcur_lit(&s, ']'))
                continue;
            do {
                if (no == OIP_MAX_TENSORS || !(outs[no++] = jcur_str(&s, NULL)))
                    return 0;
            } while (jcur_lit(&s, ','));
            if (!jcur_lit(&s, ']'))
                return 0;
        } else if (!strcmp(k, "id")) {
            if ((seen & 4) || !jcur_str(&s, NULL))
                return 0;
            seen |= 4;
        } else {
            return 0;
        }
    } while (jcur_lit(&s, ','));
    if (!jcur_lit(&s, '}') || !(seen & 1))
        return 0;
    jcur_ws(&s);
    if (s.p != s.end)
        return 0;
    /* the data, checked as oip_wire_tensors checks it */
    size_t off = 0;
    char why[8];
    for (size_t i = 0; i < nt; i++) {
        struct oip_tensor *o = &out[i];
        if (o->nbytes > rawlen - off)
            return 0;
        o->data = raw + off;
        off += o->nbytes;
        if (oip_check_data(o->dtype, o->shape, o->ndim, o->data, o->nbytes, why, sizeof(why)))
            return 0;
    }
    if (off != rawlen)
        return 0;
    *n = nt;
    if (nouts)
        *nouts = no;
    return 1;
}
