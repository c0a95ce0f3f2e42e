/* test_textstop: stop sequences and UTF-8 boundaries over streamed text (common/textstop.c). */
#include "../../common/textstop.c"

#include "tap.h"

/* Pushes the pieces of text (split at '|'), then finishes unless a stop was found; the released
 * text of each push joined with '|' (empty releases included), and "#" at the end when stopped. */
static void run(const char *const *stop, size_t nstop, const char *pieces, char *got, size_t cap)
{
    struct textstop t;
    size_t len[TEXTSTOP_MAX];
    for (size_t i = 0; i < nstop; i++)
        len[i] = strlen(stop[i]);
    CHECK_EQ_INT(textstop_init(&t, stop, len, nstop), 0);
    struct buf all;
    buf_init(&all);
    const char *p = pieces;
    int stopped = 0;
    for (;;) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        struct buf out;
        buf_init(&out);
        stopped = textstop_push(&t, p, n, &out);
        if (all.len || p != pieces)
            buf_put_u8(&all, '|');
        buf_put(&all, out.data, out.len);
        buf_free(&out);
        if (!e)
            break;
        p = e + 1;
    }
    if (stopped) {
        buf_put_u8(&all, '#');
    } else {
        struct buf out;
        buf_init(&out);
        textstop_finish(&t, &out);
        buf_put_u8(&all, '/');
        buf_put(&all, out.data, out.len);
        buf_free(&out);
    }
    snprintf(got, cap, "%s", all.data ? (char *)all.data : "");
    buf_free(&all);
    textstop_free(&t);
}

TEST(no_stop_releases_everything_at_once)
{
    char got[256];
    run(NULL, 0, "Hel|lo, |world", got, sizeof got);
    CHECK_STR(got, "Hel|lo, |world/");
}

TEST(stop_inside_one_push_cuts_there)
{
    char got[256];
    const char *stop[] = {"END"};
    run(stop, 1, "abcENDdef|more", got, sizeof got);
    CHECK_STR(got, "abc|#"); /* the push after the stop releases nothing */
}

TEST(stop_split_over_pushes_is_held_then_dropped)
{
    char got[256];
    const char *stop[] = {"\n\n"};
    /* the first newline may start the stop: held; the second completes it */
    run(stop, 1, "one|\n|\n|two", got, sizeof got);
    CHECK_STR(got, "one|||#");
}

TEST(a_prefix_that_does_not_complete_is_released_late)
{
    char got[256];
    const char *stop[] = {"abc"};
    run(stop, 1, "xa|b|d|y", got, sizeof got);
    CHECK_STR(got, "x||abd|y/");
}

TEST(held_prefix_is_released_at_the_end)
{
    char got[256];
    const char *stop[] = {"STOP"};
    run(stop, 1, "go ST", got, sizeof got);
    CHECK_STR(got, "go /ST");
}

TEST(earliest_of_several_stops_wins)
{
    char got[256];
    const char *stop[] = {"zz", "b", "cd"};
    run(stop, 3, "acdb", got, sizeof got);
    CHECK_STR(got, "a#");
}

/* "cd" ends before "bcde" would: generation would have stopped at "cd" (a regression the fuzz
 * target found: the earliest start was taken, in one push, and another cut in pieces) */
TEST(the_stop_complete_first_wins)
{
    char got[256];
    const char *stop[] = {"bcde", "cd"};
    run(stop, 2, "abcdef", got, sizeof got);
    CHECK_STR(got, "ab#");
    run(stop, 2, "ab|c|d|ef", got, sizeof got);
    CHECK_STR(got, "a||b|#");
    const char *same_end[] = {"d", "bcd"};
    run(same_end, 2, "abcd", got, sizeof got);
    CHECK_STR(got, "a#"); /* both end at d: the longer one is cut */
}

TEST(utf8_split_bytes_are_held_until_complete)
{
    char got[256];
    /* e-acute is C3 A9; the euro sign E2 82 AC arrives one byte per push */
    run(NULL, 0, "caf\xc3|\xa9 \xe2|\x82|\xac!", got, sizeof got);
    CHECK_STR(got, "caf|\xc3\xa9 ||\xe2\x82\xac!/");
}

TEST(malformed_utf8_becomes_replacement_characters)
{
    char got[256];
    /* a stray continuation byte, an overlong lead, a surrogate, a truncated end */
    run(NULL, 0,
        "a\x80"
        "b\xc0\xaf"
        "c\xed\xa0\x80"
        "d\xe2\x82",
        got, sizeof got);
    CHECK_STR(got, "a\xef\xbf\xbd"
                   "b\xef\xbf\xbd\xef\xbf\xbd"
                   "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                   "d/\xef\xbf\xbd");
}

TEST(pushes_after_a_stop_release_nothing)
{
    struct textstop t;
    const char *stop[] = {"x"};
    size_t len[] = {1};
    CHECK_EQ_INT(textstop_init(&t, stop, len, 1), 0);
    struct buf out;
    buf_init(&out);
    CHECK_EQ_INT(textstop_push(&t, "ax", 2, &out), 1);
    CHECK_EQ_INT(textstop_push(&t, "more", 4, &out), 1);
    textstop_finish(&t, &out);
    CHECK_EQ_INT(out.len, 1);
    CHECK(out.data[0] == 'a');
    buf_free(&out);
    textstop_free(&t);
}

TEST(limits_are_refused)
{
    struct textstop t;
    const char *stop[] = {"a", "b", "c", "d", "e"};
    size_t len[] = {1, 1, 1, 1, 1};
    CHECK_EQ_INT(textstop_init(&t, stop, len, 5), -1);
    textstop_free(&t);
    size_t zero[] = {0};
    CHECK_EQ_INT(textstop_init(&t, stop, zero, 1), -1);
    textstop_free(&t);
    size_t big[] = {TEXTSTOP_MAX_LEN + 1};
    CHECK_EQ_INT(textstop_init(&t, stop, big, 1), -1);
    textstop_free(&t);
}

int main(void)
{
    RUN(no_stop_releases_everything_at_once);
    RUN(stop_inside_one_push_cuts_there);
    RUN(stop_split_over_pushes_is_held_then_dropped);
    RUN(a_prefix_that_does_not_complete_is_released_late);
    RUN(held_prefix_is_released_at_the_end);
    RUN(earliest_of_several_stops_wins);
    RUN(the_stop_complete_first_wins);
    RUN(utf8_split_bytes_are_held_until_complete);
    RUN(malformed_utf8_becomes_replacement_characters);
    RUN(pushes_after_a_stop_release_nothing);
    RUN(limits_are_refused);
    return tap_done();
}
