/*
 * grpc_accept: the budget on gRPC's accepts (see grpc_accept.h).
 *
 * Which listening descriptor is gRPC's is learned once per descriptor, from the port it is
 * bound to, and kept in a small table: listeners are opened at start and live as long as the
 * servers.
 */
#include "grpc_accept.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/conn_budget.h"
#include "log.h"
#include "util.h"

#define PORTS_MAX 4
#define KNOWN_FDS 4096

enum { FD_UNKNOWN, FD_GRPC, FD_OTHER };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ports[PORTS_MAX];
static int n_ports;
static unsigned char kind_of[KNOWN_FDS]; /* under mu */
static int spare = -1;                   /* under mu */
static int64_t last_log_us;              /* under mu */
static long shed;                        /* connections closed over the budget, under mu */

void grpc_accept_init(void)
{
    pthread_mutex_lock(&mu);
    if (spare < 0)
        spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_unlock(&mu);
}

void grpc_accept_watch_port(int port)
{
    pthread_mutex_lock(&mu);
    if (n_ports < PORTS_MAX)
        ports[n_ports++] = port;
    memset(kind_of, FD_UNKNOWN, sizeof(kind_of));
    pthread_mutex_unlock(&mu);
}

void grpc_accept_shutdown(void)
{
    pthread_mutex_lock(&mu);
    n_ports = 0;
    memset(kind_of, FD_UNKNOWN, sizeof(kind_of));
    if (spare >= 0)
        close(spare);
    spare = -1;
    pthread_mutex_unlock(&mu);
}

static int sys_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    return (int)syscall(SYS_accept4, fd, addr, len, flags);
}

/* Under mu. */
static int is_grpc_listener(int fd)
{
    if (n_ports == 0)
        return 0;
    if (fd >= 0 && fd < KNOWN_FDS && kind_of[fd] != FD_UNKNOWN)
        return kind_of[fd] == FD_GRPC;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int port = -1;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    int grpc = 0;
    for (int i = 0; i < n_ports; i++)
        grpc |= port == ports[i];
    if (fd >= 0 && fd < KNOWN_FDS)
        kind_of[fd] = grpc ? FD_GRPC : FD_OTHER;
    return grpc;
}

/* At most one line per second; under mu. */
static void note(const char *what, int err)
{
    int64_t now = ts_now_us();
    if (now - last_log_us < 1000000)
        return;
    last_log_us = now;
    LOG_WARN("gRPC listener: %s%s%s (%ld connections over the budget closed so far; at most %d "
             "gRPC connections, descriptors below %d)",
             what, err ? ": " : "", err ? strerror(err) : "", shed, conn_budget_grpc_max(),
             conn_budget_cap());
}

/* Takes the connection that waits with the spare descriptor and closes it. 1 if one was
 * taken. Under mu. */
static int shed_with_spare(int fd)
{
    if (spare < 0)
        return 0;
    close(spare);
    int c = sys_accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) {
        close(c);
        shed++;
    }
    spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return c >= 0;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    pthread_mutex_lock(&mu);
    int grpc = is_grpc_listener(fd);
    pthread_mutex_unlock(&mu);
    if (!grpc)
        return sys_accept4(fd, addr, len, flags);
    for (;;) {
        socklen_t l0 = len ? *len : 0;
        int c = sys_accept4(fd, addr, len, flags);
        if (c >= 0) {
            if (conn_budget_grpc_admit(c))
                return c;
            close(c);
            pthread_mutex_lock(&mu);
            shed++;
            note("over the connection budget: closed", 0);
            pthread_mutex_unlock(&mu);
            if (len)
                *len = l0;
            continue; /* until EAGAIN: the backlog is drained, the next connection wakes us */
        }
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED) {
            errno = e;
            return -1;
        }
        pthread_mutex_lock(&mu);
        int took = (e == EMFILE || e == ENFILE) && shed_with_spare(fd);
        note("accept4 failed", e);
        pthread_mutex_unlock(&mu);
        if (took)
            continue;
        /* never an error gRPC would close its listener for */
        errno = EAGAIN;
        return -1;
    }
}
