/* test_jnum: JSON numbers without strtod / printf (common/jnum.c). */
#include "../../common/jnum.c"

#include <stdio.h>

#include "tap.h"

/* The token read where it ends the buffer and where a list goes on after it: digit runs are
 * read eight bytes at a time only where eight bytes remain, so the two take different paths,
 * and they must give the same answer and the same end, whatever follows. */
static int scan_is_strtod(const char *tok)
{
    size_t len = strlen(tok);
    char buf[96];
    if (len + 16 > sizeof(buf))
        return 0;
    /* whatever follows a number ends its digits, however close to '0'..'9' it is */
    static const char *const after[] = {", 0.125]",
                                        ":1234567",
                                        "/9999999",
                                        "\x80"
                                        "1234567",
                                        " 1234567",
                                        "]]]]]]]]",
                                        "-1234567",
                                        "\xb9"
                                        "9999999"};
    static unsigned turn;
    memcpy(buf, tok, len);
    memcpy(buf + len, after[turn++ % 8], 9);
    const char *next = NULL, *next_in = NULL;
    float f, f_in;
    int rc = jnum_scan_f32(tok, tok + len, &next, &f);
    int rc_in = jnum_scan_f32(buf, buf + len + 8, &next_in, &f_in);
    if (rc != rc_in)
        return 0;
    if (rc)
        return 1; /* gave up: the caller's slow path decides */
    /* an integer token is read as jansson does (strtoll): "-0" is 0, not -0 */
    float want =
        strpbrk(tok, ".eE") ? (float)strtod(tok, NULL) : (float)(double)strtoll(tok, NULL, 10);
    return next == tok + len && next_in == buf + len && !memcmp(&f, &want, sizeof(f)) &&
           !memcmp(&f_in, &want, sizeof(f));
}

TEST(scan_matches_strtod)
{
    static const char *const toks[] = {"0",
                                       "-0.0",
                                       "0.5",
                                       "-0.3523",
                                       "1e10",
                                       "1.5E-3",
                                       "123456789",
                                       "3.4028235e38",
                                       "1e-45",
                                       "0.000123",
                                       "-7.25e+2",
                                       "16777217",
                                       "0.1",
                                       "2.5e-8",
                                       "9007199254740993",
                                       "1234567890123456789e-10",
                                       "0.30000001192092896"};
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++)
        CHECK(scan_is_strtod(toks[i]));
    /* random decimal spellings of random floats */
    uint32_t x = 12345;
    char tok[64];
    for (int i = 0; i < 20000; i++) {
        x = x * 1103515245u + 12345u;
        float f;
        uint32_t bits = x & 0x7fffffff;
        memcpy(&f, &bits, sizeof(f));
        if (!isfinite(f))
            continue;
        snprintf(tok, sizeof(tok), i % 2 ? "%.9g" : "%.6g", (double)f);
        CHECK(scan_is_strtod(tok));
    }
}

/* Random digit runs of 1 to 21 digits on both sides of the point (around the eight-byte
 * reads), leading zeros in the fraction, and exponents: the same float and the same end as
 * strtod, on both paths, or a give-up on both. */
TEST(scan_digit_runs)
{
    uint32_t x = 777;
#define RND(n) ((x = x * 1103515245u + 12345u) >> 8) % (n)
    char tok[64];
    for (int i = 0; i < 40000; i++) {
        size_t n = 0;
        if (RND(2))
            tok[n++] = '-';
        size_t ni = 1 + RND(21);
        if (RND(4) == 0)
            tok[n++] = '0';
        else
            for (size_t j = 0; j < ni; j++)
                tok[n++] = (char)('0' + (j ? RND(10) : 1 + RND(9)));
        if (RND(4)) {
            tok[n++] = '.';
            size_t zeros = RND(3) ? 0 : RND(12), nf = 1 + RND(21);
            for (size_t j = 0; j < zeros; j++)
                tok[n++] = '0';
            for (size_t j = 0; j < nf; j++)
                tok[n++] = (char)('0' + RND(10));
        }
        if (RND(4) == 0)
            n += (size_t)sprintf(tok + n, "e%d", (int)RND(60) - 30);
        tok[n] = '\0';
        if (!scan_is_strtod(tok)) {
            fprintf(stderr, "# %s\n", tok);
            CHECK(!"scan differs from strtod");
        }
    }
#undef RND
}

TEST(scan_gives_up)
{
    const char *next;
    float f;
    static const char *const bad[] = {
        "", "-", "01", "1.", ".5", "1e", "1e+", "x", "1234567890123456789"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(jnum_scan_f32(bad[i], bad[i] + strlen(bad[i]), &next, &f), -1);
    const char *s = "1e999";
    CHECK_EQ_INT(jnum_scan_f32(s, s + 5, &next, &f), -1); /* overflow */
    s = "2.5,";
    CHECK_EQ_INT(jnum_scan_f32(s, s + 4, &next, &f), 0);
    CHECK(next == s + 3 && f == 2.5f);
}

TEST(f32_is_printf)
{
    uint32_t x = 99;
    char a[JNUM_MAX + 1], b[64];
    for (int i = 0; i < 20000; i++) {
        x = x * 1103515245u + 12345u;
        float f;
        memcpy(&f, &x, sizeof(f));
        size_t n = jnum_f32(a, f);
        if (!n)
            continue;
        a[n] = '\0';
        snprintf(b, sizeof(b), "%.9g", (double)f);
        CHECK_STR(a, b);
    }
    CHECK_EQ_INT((int)jnum_f32(a, NAN), 0);
}

TEST(integers)
{
    char s[JNUM_MAX + 1];
    s[jnum_i64(s, 0)] = '\0';
    CHECK_STR(s, "0");
    s[jnum_i64(s, -42)] = '\0';
    CHECK_STR(s, "-42");
    s[jnum_i64(s, INT64_MIN)] = '\0';
    CHECK_STR(s, "-9223372036854775808");
    s[jnum_u64(s, UINT64_MAX)] = '\0';
    CHECK_STR(s, "18446744073709551615");
}

int main(void)
{
    RUN(scan_matches_strtod);
    RUN(scan_digit_runs);
    RUN(scan_gives_up);
    RUN(f32_is_printf);
    RUN(integers);
    return tap_done();
}
