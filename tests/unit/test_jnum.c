/* test_jnum: JSON numbers without strtod / printf (common/jnum.c). */
#include "../../common/jnum.c"

#include <stdio.h>

#include "tap.h"

static int scan_is_strtod(const char *tok)
{
    const char *next = NULL;
    float f;
    if (jnum_scan_f32(tok, tok + strlen(tok), &next, &f))
        return 1; /* gave up: the caller's slow path decides */
    /* an integer token is read as jansson does (strtoll): "-0" is 0, not -0 */
    float want = (float)strtod(tok, NULL);
    return next == tok + strlen(tok) && !memcmp(&f, &want, sizeof(f));
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
    RUN(scan_gives_up);
    RUN(f32_is_printf);
    RUN(integers);
    return tap_done();
}
