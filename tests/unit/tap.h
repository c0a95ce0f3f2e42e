/*
 * tap.h: a tiny test runner for tests/unit. Each test runs in its own forked child with a
 * timeout, so a crash or a hang fails that test only, and a leak too under ASan (the child
 * exits through exit(), where LeakSanitizer checks). Output ends with "N passed, N failed".
 *
 *   TEST(name) { CHECK(x); CHECK_EQ_INT(a, b); CHECK_STR(a, b); }
 *   int main(void) { RUN(name); ...; return tap_done(); }
 */
#ifndef TS_TAP_H
#define TS_TAP_H

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int tap_pass, tap_fail;

/* Tests that write files keep them under one directory made by tbase_make() in main() and
 * removed by tbase_remove() at the end. */
static char tbase[64] __attribute__((unused));

__attribute__((unused)) static int tbase_rm_one(const char *p, const struct stat *st, int flag,
                                                struct FTW *f)
{
    (void)st;
    (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

__attribute__((unused)) static void tbase_make(const char *name)
{
    snprintf(tbase, sizeof tbase, "/tmp/%s.XXXXXX", name);
    if (!mkdtemp(tbase)) {
        perror("mkdtemp");
        exit(1);
    }
}

__attribute__((unused)) static void tbase_remove(void)
{
    nftw(tbase, tbase_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#define TEST(name) static void test_##name(void)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);             \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "  %s:%d: %s == %lld, expected %lld\n", __FILE__, __LINE__, #a, a_,    \
                    b_);                                                                           \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_)) {                                                        \
            fprintf(stderr, "  %s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #a,    \
                    a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                       \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static void tap_run(const char *name, void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        fn();
        fflush(NULL);
        /* exit, not _exit: under ASan, LeakSanitizer runs at exit and fails the test (exit code
         * 23) when it leaked (tests/unit/lsan_selfcheck.c proves it) */
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        tap_pass++;
        printf("ok - %s\n", name);
    } else {
        tap_fail++;
        printf("not ok - %s%s\n", name,
               WIFSIGNALED(st) ? (WTERMSIG(st) == SIGALRM ? " (timeout)" : " (crashed)") : "");
    }
}

#define RUN(name) tap_run(#name, test_##name)

static int tap_done(void)
{
    printf("%d passed, %d failed\n", tap_pass, tap_fail);
    return tap_fail ? 1 : 0;
}

#endif
