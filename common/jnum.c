/*
 * jnum: see jnum.h.
 *
 * Scanning: the digits go into a 64-bit integer m (up to 19 significant ones) and a decimal
 * exponent, the first run of each part eight bytes at a time where eight bytes remain; when m and
 * 10^|e| are both exact doubles, one multiplication or division is strtod's own rounding (Clinger's
 * fast case). Up to 19 digits the double is within 2 ulps of the exact value, so it rounds to
 * strtod's float unless it lies near a float rounding boundary; near one, or with more digits,
 * strtod decides.
 *
 * Printing: see jnum_f32 below.
 */
#include "jnum.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int digit(char c)
{
    return (unsigned char)(c - '0') < 10;
}

static const uint64_t pow10_u64[20] = {1ULL,
                                       10ULL,
                                       100ULL,
                                       1000ULL,
                                       10000ULL,
                                       100000ULL,
                                       1000000ULL,
                                       10000000ULL,
                                       100000000ULL,
                                       1000000000ULL,
                                       10000000000ULL,
                                       100000000000ULL,
                                       1000000000000ULL,
                                       10000000000000ULL,
                                       100000000000000ULL,
                                       1000000000000000ULL,
                                       10000000000000000ULL,
                                       100000000000000000ULL,
                                       1000000000000000000ULL,
                                       10000000000000000000ULL};

/* Digit runs read eight bytes at a time need the first byte in the low end of the word. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR_DIGITS 1
#else
#define SWAR_DIGITS 0
#endif

#define ONES8 0x0101010101010101ULL

/* The run of digits at p, up to 8 of them, read as one 64-bit word (p + 8 <= end): *k gets
 * the run's length and *lz its leading '0's; the run's value. The word holds the bytes in
 * memory order, the first in the low byte (SWAR_DIGITS: little-endian only), so the first digit
 * is the most significant one. */
static inline uint64_t digits8(const char *p, int *k, int *lz)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    uint64_t x = w ^ (ONES8 * '0'); /* a digit byte becomes 0..9 */
    /* bit 7 of each byte that is not 0..9: from x >= 0x80, or from x & 0x7f >= 10 (adding
     * 0x76 carries into bit 7 and never out of the byte) */
    uint64_t bad = (((x & (ONES8 * 0x7f)) + ONES8 * 0x76) | x) & (ONES8 * 0x80);
    int n = bad ? __builtin_ctzll(bad) >> 3 : 8;
    *k = n;
    *lz = 0;
    if (n == 0)
        return 0;
    x <<= 8 * (8 - n); /* the run into the high bytes: shifted-in zeros are leading zeros */
    uint64_t nz = x >> (8 * (8 - n));
    *lz = nz ? __builtin_ctzll(nz) >> 3 : n;
    /* pairs, then fours, then all eight: each step folds adjacent fields as hi * 10^w + lo */
    x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffULL;
    x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffULL;
    x = (x * 10000 + (x >> 32)) & 0xffffffffULL;
    return x;
}

/* 10^0 .. 10^22: exactly representable as doubles */
static const double exact_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

int jnum_scan_f32(const char *p, const char *end, const char **next, float *out)
{
    const char *tok = p;
    int neg = 0, is_int = 1, nd = 0, many = 0, e10 = 0;
    uint64_t m = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p == end || !digit(*p))
        return -1;
    if (*p == '0') {
        p++;
        if (p < end && digit(*p))
            return -1; /* a leading zero is not JSON */
    } else {
        if (SWAR_DIGITS && end - p >= 8) {
            int k, lz;
            m = digits8(p, &k, &lz); /* k >= 1; no leading zero */
            nd = k;
            p += k;
        }
        for (; p < end && digit(*p); p++) {
            if (nd < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                nd++;
            } else {
                many = 1;
                e10++;
            }
        }
    }
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p == end || !digit(*p))
            return -1;
        if (SWAR_DIGITS && end - p >= 8 && nd <= 11) {
            /* what the loop below makes of these k <= 8 digits, as nd + k <= 19 */
            int k, lz;
            uint64_t v = digits8(p, &k, &lz);
            nd = m ? nd + k : k - lz;
            m = m * pow10_u64[k] + v;
            e10 -= k;
            p += k;
        }
        for (; p < end && digit(*p); p++) {
            if (nd < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                nd += m != 0; /* leading zeros of 0.000123 are not significant */
                e10--;
            } else if (*p != '0') {
                many = 1;
            }
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        int eneg = 0, ev = 0;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p == end || !digit(*p))
            return -1;
        for (; p < end && digit(*p); p++)
            if (ev < 100000)
                ev = ev * 10 + (*p - '0');
        e10 += eneg ? -ev : ev;
    }
    *next = p;
    if (is_int) {
        /* jansson reads it with strtoll: 18 digits always fit, more may not */
        if (many || nd > 18)
            return -1;
        *out = m == 0 ? 0.0f : (float)(neg ? -(double)m : (double)m);
        return 0;
    }
    if (!many && m == 0) {
        *out = neg ? -0.0f : 0.0f;
        return 0;
    }
    if (!many && e10 >= -22 && e10 <= 22) {
        double d = (double)m;
        d = e10 < 0 ? d / exact_pow10[-e10] : d * exact_pow10[e10];
        if (m <= (1ULL << 53)) {
            /* both operands exact, one rounding: this is strtod's double (Clinger) */
            *out = (float)(neg ? -d : d);
            return 0;
        }
        /* m up to 19 digits: d is within 2 ulps of the exact value, so it rounds to the same
         * float as strtod's double unless it lies near a float rounding boundary (a double
         * whose 29 bits below float precision are 1000...0); near one, or outside the range
         * of normal floats, strtod decides */
        uint64_t bits;
        memcpy(&bits, &d, sizeof(bits));
        int bexp = (int)(bits >> 52) & 0x7ff;
        int64_t lo = (int64_t)(bits & 0x1fffffff) - 0x10000000;
        if (bexp > 1023 - 126 && bexp < 1023 + 127 && (lo > 16 || lo < -16)) {
            *out = (float)(neg ? -d : d);
            return 0;
        }
    }
    char tmp[64];
    size_t n = (size_t)(p - tok);
    if (n >= sizeof(tmp))
        return -1;
    memcpy(tmp, tok, n);
    tmp[n] = '\0';
    errno = 0;
    double d = strtod(tmp, NULL);
    if (errno == ERANGE && isinf(d))
        return -1; /* jansson: "real number overflow" */
    *out = (float)d;
    return 0;
}

/* printf's "%.9g" of a float, without printf: the float is m * 2^e exactly, so its decimal
 * expansion is the integer m * 5^-e (or m * 2^e) scaled by a power of ten; rounding that to 9
 * digits (half to even, as glibc does on exact ties) gives printf's digits. Covers every finite
 * float whose m * 5^-e fits in 128 bits (all above about 1e-7, and many below); returns 0 for
 * the rest, which snprintf prints. */
typedef unsigned __int128 u128;

/* 5^0 .. 5^27, the powers of five that fit in 64 bits */
static const uint64_t pow5_u64[28] = {1ULL,
                                      5ULL,
                                      25ULL,
                                      125ULL,
                                      625ULL,
                                      3125ULL,
                                      15625ULL,
                                      78125ULL,
                                      390625ULL,
                                      1953125ULL,
                                      9765625ULL,
                                      48828125ULL,
                                      244140625ULL,
                                      1220703125ULL,
                                      6103515625ULL,
                                      30517578125ULL,
                                      152587890625ULL,
                                      762939453125ULL,
                                      3814697265625ULL,
                                      19073486328125ULL,
                                      95367431640625ULL,
                                      476837158203125ULL,
                                      2384185791015625ULL,
                                      11920928955078125ULL,
                                      59604644775390625ULL,
                                      298023223876953125ULL,
                                      1490116119384765625ULL,
                                      7450580596923828125ULL};

static u128 pow10_u128(int i) /* 0 <= i <= 38 */
{
    return i < 20 ? (u128)pow10_u64[i] : (u128)pow10_u64[19] * pow10_u64[i - 19];
}

static int bitlen_u128(u128 v)
{
    uint64_t hi = (uint64_t)(v >> 64), lo = (uint64_t)v;
    return hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
}

size_t jnum_f32(char *s, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    int bexp = (int)(bits >> 23) & 0xff;
    uint32_t m = bits & 0x7fffff;
    size_t k = 0;
    if (bexp == 0xff)
        return 0;
    if (bits >> 31)
        s[k++] = '-';
    if (bexp == 0 && m == 0) {
        s[k++] = '0';
        return k;
    }
    int e = bexp ? bexp - 150 : -149;
    if (bexp)
        m |= 1u << 23;
    while (!(m & 1)) {
        m >>= 1;
        e++;
    }
    u128 n;
    int scale; /* the value is n * 10^-scale */
    if (e >= 0) {
        n = (u128)m << e; /* e <= 104 and m < 2^24 */
        scale = 0;
    } else {
        /* 2.322 > log2(5): an upper bound of the bits of m * 5^-e */
        if (bitlen_u128(m) + (-e * 2322 + 999) / 1000 > 127)
            return 0;
        n = m;
        for (int k5 = -e; k5 > 0; k5 -= 27)
            n *= pow5_u64[k5 < 27 ? k5 : 27];
        scale = -e;
    }
    int t = (bitlen_u128(n) * 1233) >> 12;
    int digits = t + 1 - (n < pow10_u128(t));
    uint64_t q;
    if (digits <= 9) {
        q = (uint64_t)n;
    } else {
        u128 div = pow10_u128(digits - 9), half = div / 2;
        u128 q128 = n / div, r = n - q128 * div;
        q = (uint64_t)q128;
        if (r > half || (r == half && (q & 1)))
            q++;
        if (q == 1000000000ULL) {
            q = 100000000ULL;
            digits++;
        }
    }
    int x = digits - 1 - scale; /* decimal exponent of the first digit */
    char d[10];
    int nd = digits < 9 ? digits : 9;
    for (int i = nd - 1; i >= 0; i--) {
        d[i] = (char)('0' + q % 10);
        q /= 10;
    }
    while (nd > 1 && d[nd - 1] == '0')
        nd--;
    if (x < -4 || x >= 9) {
        s[k++] = d[0];
        if (nd > 1) {
            s[k++] = '.';
            memcpy(s + k, d + 1, (size_t)nd - 1);
            k += (size_t)nd - 1;
        }
        s[k++] = 'e';
        s[k++] = x < 0 ? '-' : '+';
        int ax = x < 0 ? -x : x;
        if (ax >= 100)
            s[k++] = (char)('0' + ax / 100);
        s[k++] = (char)('0' + ax / 10 % 10);
        s[k++] = (char)('0' + ax % 10);
    } else if (x < 0) {
        s[k++] = '0';
        s[k++] = '.';
        for (int i = 0; i < -x - 1; i++)
            s[k++] = '0';
        memcpy(s + k, d, (size_t)nd);
        k += (size_t)nd;
    } else {
        for (int i = 0; i <= x; i++)
            s[k++] = i < nd ? d[i] : '0';
        if (nd > x + 1) {
            s[k++] = '.';
            memcpy(s + k, d + x + 1, (size_t)(nd - x - 1));
            k += (size_t)(nd - x - 1);
        }
    }
    return k;
}

size_t jnum_u64(char *s, uint64_t v)
{
    char d[20];
    size_t n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        s[i] = d[n - 1 - i];
    return n;
}

size_t jnum_i64(char *s, int64_t v)
{
    if (v >= 0)
        return jnum_u64(s, (uint64_t)v);
    s[0] = '-';
    return 1 + jnum_u64(s + 1, -(uint64_t)v);
}
