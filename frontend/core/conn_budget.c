/*
 * conn_budget: the descriptors the connections of every listener may hold (see conn_budget.h).
 *
 * gRPC core gives no word when it closes a connection, so the gRPC connections held are kept
 * as (descriptor, inode) pairs: a pair whose descriptor no longer names that socket (closed, or
 * reused for something else) is gone. The pairs are checked only when their count reaches the
 * limit (at most every SWEEP_US), so admitting a connection costs one fstat.
 */
#include "conn_budget.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define SWEEP_US 100000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int base;            /* the lowest free descriptor at start */
static int max_connections; /* config; 0 = derived from the limit */

struct held {
    int fd;
    ino_t ino;
};
static struct held *grpc_held;
static int n_held, cap_held;
static int64_t last_sweep_us;

static long fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 20) ? (1L << 20)
                                                                    : (long)rl.rlim_cur;
}

static int lowest_free_fd(void)
{
    int fd = fcntl(0, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return INT_MAX; /* EMFILE itself: full */
    close(fd);
    return fd;
}

static long cap_for(long lim)
{
    long reserve = lim / 8;
    if (reserve < 64)
        reserve = 64;
    if (reserve > 1024)
        reserve = 1024;
    long cap = max_connections > 0 ? base + max_connections : lim - reserve;
    if (cap > lim - 16)
        cap = lim - 16;
    if (cap < base + 16)
        cap = base + 16;
    return cap;
}

void conn_budget_init(int max_conn)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        if (want == RLIM_INFINITY || want > (1u << 20))
            want = 1u << 20; /* select()-era code in libraries is not our concern; memory is */
        if (want > rl.rlim_cur) {
            rl.rlim_cur = want;
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                LOG_WARN("cannot raise the fd limit to %lu: %s", (unsigned long)want,
                         strerror(errno));
        }
    }
    pthread_mutex_lock(&mu);
    max_connections = max_conn;
    base = lowest_free_fd();
    pthread_mutex_unlock(&mu);
    LOG_INFO("fd limit %ld: connections may hold descriptors below %d (gRPC at most %d of them)",
             fd_limit(), conn_budget_cap(), conn_budget_grpc_max());
}

int conn_budget_cap(void)
{
    return (int)cap_for(fd_limit());
}

int conn_budget_full(void)
{
    return lowest_free_fd() >= conn_budget_cap();
}

int conn_budget_grpc_max(void)
{
    int n = (conn_budget_cap() - base) / 2;
    return n > 8 ? n : 8;
}

/* Drops the pairs whose descriptor no longer names their socket. Under mu. */
static void sweep(void)
{
    int n = 0;
    for (int i = 0; i < n_held; i++) {
        struct stat st;
        if (fstat(grpc_held[i].fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
            st.st_ino == grpc_held[i].ino)
            grpc_held[n++] = grpc_held[i];
    }
    n_held = n;
    last_sweep_us = ts_now_us();
}

int conn_budget_grpc_admit(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return 0;
    int max = conn_budget_grpc_max();
    if (fd >= conn_budget_cap())
        return 0; /* the reserve: never a connection's */
    pthread_mutex_lock(&mu);
    if (n_held >= max && ts_now_us() - last_sweep_us >= SWEEP_US)
        sweep();
    int ok = n_held < max;
    if (ok) {
        if (n_held == cap_held) {
            cap_held = cap_held ? 2 * cap_held : 64;
            grpc_held = xrealloc(grpc_held, (size_t)cap_held * sizeof(*grpc_held));
        }
        grpc_held[n_held].fd = fd;
        grpc_held[n_held++].ino = st.st_ino;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

int conn_budget_grpc_held(void)
{
    pthread_mutex_lock(&mu);
    sweep();
    int n = n_held;
    pthread_mutex_unlock(&mu);
    return n;
}
