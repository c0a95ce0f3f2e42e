/* Unit tests for the connection budget (frontend/core/conn_budget.c): the cap follows the fd
 * limit, gRPC holds at most its share, and closed connections are noticed. Each test runs in its
 * own child (tap.h), so lowering the limit touches nothing else. */
#include "../../frontend/core/conn_budget.c"

#include <sys/socket.h>

#include "tap.h"

static void limit(long n)
{
    struct rlimit rl = {(rlim_t)n, (rlim_t)n};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = (rlim_t)n;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static int sock(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return -1;
    close(sv[1]);
    return sv[0];
}

TEST(cap_follows_the_limit)
{
    conn_budget_init(0);
    limit(256);
    /* the reserve: 256/8 = 32, at least 64 */
    CHECK_EQ_INT(conn_budget_cap(), 256 - 64);
    limit(4096);
    CHECK_EQ_INT(conn_budget_cap(), 4096 - 512);
    CHECK(!conn_budget_full());
}

TEST(max_connections_from_the_start)
{
    limit(4096);
    conn_budget_init(100);
    CHECK_EQ_INT(conn_budget_cap(), base + 100);
    CHECK_EQ_INT(conn_budget_grpc_max(), 50);
}

TEST(grpc_holds_its_share_and_closed_ones_are_noticed)
{
    limit(4096);
    conn_budget_init(40); /* gRPC: 20 */
    int max = conn_budget_grpc_max();
    CHECK_EQ_INT(max, 20);
    int fds[20];
    for (int i = 0; i < max; i++) {
        fds[i] = sock();
        CHECK(conn_budget_grpc_admit(fds[i]));
    }
    int extra = sock();
    CHECK(!conn_budget_grpc_admit(extra));
    close(extra);
    /* two close; their descriptors may be reused by anything: the next admission sweeps */
    close(fds[3]);
    close(fds[7]);
    int reuse = open("/dev/null", O_RDONLY); /* takes a freed number: not a socket */
    last_sweep_us = 0;
    int a = sock();
    CHECK(conn_budget_grpc_admit(a));
    CHECK_EQ_INT(conn_budget_grpc_held(), 19);
    close(reuse);
}

TEST(no_connection_in_the_reserve)
{
    limit(4096);
    conn_budget_init(20);
    int cap = conn_budget_cap();
    int high = fcntl(sock(), F_DUPFD, cap); /* a descriptor at or above the cap */
    CHECK(high >= cap);
    CHECK(!conn_budget_grpc_admit(high));
}

int main(void)
{
    RUN(cap_follows_the_limit);
    RUN(max_connections_from_the_start);
    RUN(grpc_holds_its_share_and_closed_ones_are_noticed);
    RUN(no_connection_in_the_reserve);
    return tap_done();
}
