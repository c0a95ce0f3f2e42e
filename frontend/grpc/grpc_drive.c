/*
 * grpc_drive: the two ways the completion queue is driven (see grpc_drive.h).
 *
 * Loop drive. gRPC's epoll1 poller watches every gRPC socket in one epoll set. Its fd is not
 * public, but it is the one epoll fd grpc_init creates (init_poller finds it in /proc/self/fd),
 * and an epoll fd is itself pollable: the loop watches it like any socket and, when it is
 * readable, drains the queue without blocking. gRPC's reads, writes and completions then all run
 * on the loop thread, next to the models and jobs the services touch. A call crossing threads
 * costs two to four wake-ups (15-30 us each on the machines we measured), and when two threads
 * drive the same HTTP/2 connection gRPC moves work to its executor threads. What the epoll fd
 * does not show:
 *   - a completion made by a gRPC call outside drain (a batch started when a worker answered,
 *     a call unref'ed): gRPC completes it at once on this thread but only flags it for a
 *     poller, which is not there. grpc_drive_soon drains once the loop turn's callbacks are done;
 *   - one non-blocking round handles one of the epoll events gRPC fetched (epoll1 fetches up to
 *     100 at a time), so a round that yields nothing does not mean that nothing is left. gRPC
 *     calls epoll_wait only once it has handled every event it fetched, and it calls it through
 *     the PLT: the frontend defines epoll_wait (core/loop_wait.c), and its observer here notes
 *     when gRPC's set had nothing; drain stops at that round. Without that note (a gRPC that
 *     polls otherwise) drain stops after IDLE_ROUNDS empty rounds in a row, which cost a third
 *     of a call's instructions;
 *   - a completion made on one of gRPC's own threads (a deadline's timer, work moved to its
 *     executor). The tick finds these, and whatever a drain left.
 *
 * Thread drive. The CQ thread blocks in grpc_completion_queue_next (with a short deadline, so
 * that it notices grpc_drive_stop) and appends each completion to the mailbox; the first one
 * of a batch writes the eventfd, whose read event on the loop takes every completion out under
 * the lock and handles them. Nothing else crosses: the loop starts batches itself (gRPC allows
 * that from any thread) and never waits for the CQ thread.
 */
#include "grpc_drive.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/core.h"
#include "core/loop_wait.h"
#include "log.h"
#include "util.h"

/* empty non-blocking rounds after which drain stops, when epoll_wait tells nothing (see drain) */
#define IDLE_ROUNDS 8
/* completions one drain handles at most before it lets the loop's other events in */
#define DRAIN_MAX 256
/* rounds one drain makes at most: rounds that only read (a large message arriving in many
 * segments) make no completion, and must not keep the loop from HTTP and the workers either */
#define DRAIN_ROUNDS_MAX (4 * DRAIN_MAX)
/* the tick's period while calls are under way, and while none is */
#define TICK_BUSY_MS 10
#define TICK_IDLE_MS 100
/* how often the CQ thread looks up from grpc_completion_queue_next for grpc_drive_stop */
#define THREAD_WAKE_MS 200

struct completion {
    void *tag;
    int success;
};

static struct {
    enum { DRIVE_NONE, DRIVE_LOOP, DRIVE_THREAD } kind;
    const char *forced; /* why the thread drive must be used, decided before grpc_init */
    grpc_completion_queue *cq;
    grpc_drive_handle_fn *handle;
    /* loop drive */
    int poller_fd;           /* gRPC's epoll fd (not ours to close) */
    struct event *ev_poller; /* the loop's read event on it */
    struct event *ev_tick;   /* drains every TICK_BUSY_MS / TICK_IDLE_MS */
    struct event *ev_drain;  /* a drain soon, after a batch started outside drain */
    int in_drain, drain_soon;
    /* thread drive */
    pthread_t thread;
    int stop; /* under mu */
    pthread_mutex_t mu;
    struct completion *box; /* the mailbox, under mu */
    size_t n_box, cap_box;
    int efd;
    struct event *ev_box;
} D = {.poller_fd = -1, .efd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

const char *grpc_drive_name(void)
{
    return D.kind == DRIVE_THREAD ? "thread" : D.kind == DRIVE_LOOP ? "loop" : "none";
}

/* ---- the loop drive ---- */

static void set_tick(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(D.ev_tick, &tv);
}

/* What gRPC's last epoll_wait on its poller's fd found, noted on the thread that drains: set
 * only while it drains, so other threads' and libevent's waits never touch it. */
static __thread struct {
    int draining;
    int empty; /* this round's epoll_wait on the poller found nothing */
} tl;
/* gRPC's waits were seen at least once: drain can trust tl.empty */
static int waits_seen;

/* loop_wait's observer: what gRPC's epoll_wait on its poller's fd found while this thread
 * drains */
static void on_wait(int epfd, int n)
{
    if (tl.draining && epfd == D.poller_fd) {
        waits_seen = 1;
        tl.empty = n == 0;
    }
}

/* Handles every completion gRPC has for us, without blocking. One round handles at most one of
 * the epoll events gRPC fetched, and gRPC fetches more (epoll_wait) only when it has handled
 * them all: a round that yields nothing and found the epoll set empty means that nothing is
 * left. What a drain leaves (work finished on gRPC's own threads) waits for the next event of
 * the poller's fd or the tick. */
static void drain(void)
{
    D.in_drain = 1;
    tl.draining = 1;
    int handled = 0, idle = 0, rounds = 0;
    while (handled < DRAIN_MAX && rounds++ < DRAIN_ROUNDS_MAX) {
        tl.empty = 0;
        grpc_event ev = grpc_completion_queue_next(D.cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type != GRPC_OP_COMPLETE) {
            if (waits_seen ? tl.empty : ++idle >= IDLE_ROUNDS)
                break;
            continue;
        }
        idle = 0;
        handled++;
        D.handle(ev.tag, ev.success);
    }
    tl.draining = 0;
    D.in_drain = 0;
    if (handled == DRAIN_MAX || rounds > DRAIN_ROUNDS_MAX) /* let HTTP and the workers in */
        grpc_drive_soon();
}

/* The loop's three reasons to drain: the poller's fd is readable (ev_poller), gRPC was used
 * outside a drain (ev_drain, see grpc_drive_soon), and the tick (ev_tick). */
static void on_drain_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    D.drain_soon = 0;
    drain();
}

void grpc_drive_soon(void)
{
    if (D.kind == DRIVE_LOOP && !D.in_drain && !D.drain_soon) {
        D.drain_soon = 1;
        event_active(D.ev_drain, EV_READ, 0);
    }
}

void grpc_drive_busy(int busy)
{
    if (D.kind == DRIVE_LOOP)
        set_tick(busy ? TICK_BUSY_MS : TICK_IDLE_MS);
}

/* The epoll instances among this process's fds, appended to *out as ints. */
static void list_epoll_fds(struct buf *out)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char link[64];
        ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (strcmp(link, "anon_inode:[eventpoll]") == 0) {
            int fd = atoi(e->d_name);
            buf_put(out, &fd, sizeof(fd));
        }
    }
    closedir(d);
}

/* grpc_init with the epoll1 engine, and the epoll fd it created (see the top), or -1. */
static int init_poller(void)
{
    struct buf before = {0}, after = {0};
    list_epoll_fds(&before);
    setenv("GRPC_POLL_STRATEGY", "epoll1", 1);
    grpc_init();
    list_epoll_fds(&after);
    int found = -1, n_new = 0;
    const int *a = (const int *)after.data, *b = (const int *)before.data;
    for (size_t i = 0; i < after.len / sizeof(int); i++) {
        int old = 0;
        for (size_t j = 0; j < before.len / sizeof(int); j++)
            old |= a[i] == b[j];
        if (!old) {
            found = a[i];
            n_new++;
        }
    }
    buf_free(&before);
    buf_free(&after);
    return n_new == 1 ? found : -1;
}

/* How many fds the epoll instance fd watches (its fdinfo has a "tfd:" line for each). */
static int epoll_watch_count(int fd)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strncmp(line, "tfd:", 4) == 0;
    fclose(f);
    return n;
}

static void start_loop_drive(void)
{
    D.kind = DRIVE_LOOP;
    D.ev_tick = event_new(srv->base, -1, EV_PERSIST, on_drain_event, NULL);
    D.ev_drain = event_new(srv->base, -1, 0, on_drain_event, NULL);
    D.ev_poller = event_new(srv->base, D.poller_fd, EV_READ | EV_PERSIST, on_drain_event, NULL);
    event_add(D.ev_poller, NULL);
    set_tick(TICK_IDLE_MS);
    drain(); /* anything that came before the event was added */
}

/* ---- the thread drive ---- */

static void *cq_thread(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&D.mu);
        int stop = D.stop;
        pthread_mutex_unlock(&D.mu);
        if (stop)
            return NULL;
        gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_millis(THREAD_WAKE_MS, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(D.cq, until, NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        pthread_mutex_lock(&D.mu);
        if (D.n_box == D.cap_box) {
            D.cap_box = D.cap_box ? D.cap_box * 2 : 64;
            D.box = xrealloc(D.box, D.cap_box * sizeof(*D.box));
        }
        D.box[D.n_box++] = (struct completion){ev.tag, ev.success};
        int first = D.n_box == 1;
        pthread_mutex_unlock(&D.mu);
        if (first) { /* the loop takes the whole box at once: one wake-up per batch */
            uint64_t one = 1;
            while (write(D.efd, &one, sizeof(one)) < 0 && errno == EINTR)
                ;
        }
    }
}

/* Handles what the CQ thread handed over. The box is swapped out under the lock, so the thread
 * never waits for the handlers. */
static void empty_box(void)
{
    for (;;) {
        pthread_mutex_lock(&D.mu);
        struct completion *box = D.box;
        size_t n = D.n_box;
        D.box = NULL;
        D.n_box = D.cap_box = 0;
        pthread_mutex_unlock(&D.mu);
        if (!n) {
            free(box);
            return;
        }
        for (size_t i = 0; i < n; i++)
            D.handle(box[i].tag, box[i].success);
        free(box);
    }
}

static void on_box(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    (void)arg;
    uint64_t n;
    while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    empty_box();
}

static int start_thread_drive(const char *why)
{
    D.kind = DRIVE_THREAD;
    D.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (D.efd < 0) {
        LOG_ERROR("gRPC: eventfd: %s", strerror(errno));
        return -1;
    }
    D.ev_box = event_new(srv->base, D.efd, EV_READ | EV_PERSIST, on_box, NULL);
    event_add(D.ev_box, NULL);
    int rc = pthread_create(&D.thread, NULL, cq_thread, NULL);
    if (rc != 0) {
        LOG_ERROR("gRPC: cannot start the completion-queue thread: %s", strerror(rc));
        return -1;
    }
    LOG_INFO("gRPC is driven by a completion-queue thread (%s)", why);
    return 0;
}

/* ---- start / stop ---- */

void grpc_drive_init(void)
{
    const char *want = getenv("TS_GRPC_DRIVE");
    const char *ps = getenv("GRPC_POLL_STRATEGY");
    if (ps && !*ps) { /* gRPC refuses an empty list of engines (and aborts); empty means unset */
        unsetenv("GRPC_POLL_STRATEGY");
        ps = NULL;
    }
    grpc_absl_release_mode();
    if (want && *want && strcmp(want, "loop") && strcmp(want, "auto") && strcmp(want, "thread"))
        LOG_WARN("TS_GRPC_DRIVE=%s: expected loop, thread or auto; using auto", want);
    if (want && !strcmp(want, "thread"))
        D.forced = "TS_GRPC_DRIVE=thread";
    else if (ps && *ps && strcmp(ps, "epoll1"))
        D.forced = "GRPC_POLL_STRATEGY names another poll engine";
    if (D.forced) {
        grpc_init();
        return;
    }
    D.poller_fd = init_poller();
    loop_wait_observe(on_wait);
}

int grpc_drive_start(grpc_completion_queue *cq, int n_listeners, grpc_drive_handle_fn *handle)
{
    D.cq = cq;
    D.handle = handle;
    if (D.forced)
        return start_thread_drive(D.forced);
    if (D.poller_fd < 0)
        return start_thread_drive("the epoll fd of gRPC's epoll1 poller was not found");
    /* the listening sockets must be in it, or no call would ever be seen */
    if (epoll_watch_count(D.poller_fd) < n_listeners)
        return start_thread_drive("gRPC's epoll fd does not watch its listeners");
    start_loop_drive();
    LOG_INFO("gRPC is driven from the loop thread (epoll1 poller fd %d); a drain ends %s",
             D.poller_fd,
             waits_seen ? "when gRPC's epoll_wait finds nothing" : "after empty rounds");
    return 0;
}

void grpc_drive_stop(void)
{
    if (D.kind == DRIVE_THREAD) {
        pthread_mutex_lock(&D.mu);
        D.stop = 1;
        pthread_mutex_unlock(&D.mu);
        pthread_join(D.thread, NULL);
        empty_box();
        event_free(D.ev_box);
        close(D.efd);
        D.efd = -1;
    } else if (D.kind == DRIVE_LOOP) {
        event_free(D.ev_poller);
        event_free(D.ev_tick);
        event_free(D.ev_drain);
    }
    loop_wait_observe(NULL);
    D.kind = DRIVE_NONE;
}
