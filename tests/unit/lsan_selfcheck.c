/* The runner's own check (make test-unit under SANITIZE=address): a test that leaks 1,000 bytes
 * must fail. It is not a test_*.c, so the normal run does not build it; the Makefile requires
 * this program to report a failure. */
#include "tap.h"

static void *volatile sink;

TEST(leaks_1000_bytes)
{
    sink = malloc(1000);
    sink = NULL; /* unreachable now */
}

int main(void)
{
    RUN(leaks_1000_bytes);
    return tap_done();
}
