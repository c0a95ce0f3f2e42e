/*
 * llm_load: streams of generated text, each on its own connection, started at set times; when
 * each chunk (a token) arrives. The load generator of llm_bench.py: one thread, epoll, no
 * parsing beyond HTTP/1.1 chunked framing, so that it costs the 2-core machine it shares with
 * the server little.
 *
 * usage: llm_load PORT PATH BODIES STREAMS SPREAD_MS
 *   BODIES: a file of request bodies, one per line (JSON, so no raw newline inside); stream i
 *   sends line i % lines. Stream i starts at i * SPREAD_MS / STREAMS ms: evenly spread over the
 *   first SPREAD_MS.
 * prints one line per stream: "stream I start_us T first_us T chunks N gaps G1,G2,... worker
 * W,P,C" (times in microseconds from the first start; gaps between consecutive chunks; W, P, C
 * the worker's x-ts-worker-wait_us, -prefill_us and -collect_us headers, -1 where absent), then
 * "done".
 * Exits 1 on any connection or HTTP error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHUNKS 65536

struct stream {
    int fd;
    int started, done;
    double start, first;
    char *req;
    size_t req_len, req_off;
    char *buf; /* what has been read and not parsed */
    size_t len, cap;
    int head_done;
    long chunk_left; /* bytes of the current chunk's data still to come; -1: at a size line */
    double *times;
    size_t n;
    long parts[3]; /* the worker's wait_us, prefill_us, collect_us headers */
};

static const char *const part_names[3] = {
    "x-ts-worker-wait_us: ", "x-ts-worker-prefill_us: ", "x-ts-worker-collect_us: "};

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, int i)
{
    fprintf(stderr, "llm_load: stream %d: %s (%s)\n", i, what, strerror(errno));
    exit(1);
}

/* Parses what s->buf holds; t is when it was read. 1 when the reply is complete. */
static int parse(struct stream *s, int i, double t)
{
    size_t off = 0;
    if (!s->head_done) {
        char *e = memmem(s->buf, s->len, "\r\n\r\n", 4);
        if (!e)
            return 0;
        if (strncmp(s->buf, "HTTP/1.1 200", 12)) {
            fprintf(stderr, "llm_load: stream %d: %.*s\n", i, (int)(e - s->buf), s->buf);
            exit(1);
        }
        if (!memmem(s->buf, (size_t)(e - s->buf), "chunked", 7)) {
            fprintf(stderr, "llm_load: stream %d: the reply is not chunked\n", i);
            exit(1);
        }
        for (int k = 0; k < 3; k++) {
            size_t nl = strlen(part_names[k]);
            char *h = memmem(s->buf, (size_t)(e - s->buf), part_names[k], nl);
            s->parts[k] = h ? strtol(h + nl, NULL, 10) : -1;
        }
        s->head_done = 1;
        s->chunk_left = -1;
        off = (size_t)(e - s->buf) + 4;
    }
    for (;;) {
        if (s->chunk_left < 0) {
            char *nl = memmem(s->buf + off, s->len - off, "\r\n", 2);
            if (!nl)
                break;
            long size = strtol(s->buf + off, NULL, 16);
            off = (size_t)(nl - s->buf) + 2;
            if (size == 0) {
                s->done = 1;
                break;
            }
            s->chunk_left = size + 2; /* the data and its CRLF */
            if (s->n < MAX_CHUNKS)
                s->times[s->n++] = t;
            if (s->n == 1)
                s->first = t;
        }
        size_t take = s->len - off < (size_t)s->chunk_left ? s->len - off : (size_t)s->chunk_left;
        off += take;
        s->chunk_left -= (long)take;
        if (s->chunk_left > 0)
            break;
        s->chunk_left = -1;
    }
    memmove(s->buf, s->buf + off, s->len - off);
    s->len -= off;
    return s->done;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: llm_load PORT PATH BODIES STREAMS SPREAD_MS\n");
        return 2;
    }
    int port = atoi(argv[1]), nstreams = atoi(argv[4]);
    double spread = atof(argv[5]) * 1000.0;
    FILE *f = fopen(argv[3], "r");
    if (!f || nstreams < 1)
        die("cannot read the bodies", -1);
    char **bodies = NULL;
    size_t nbodies = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t ll;
    while ((ll = getline(&line, &lcap, f)) > 0) {
        while (ll && (line[ll - 1] == '\n' || line[ll - 1] == '\r'))
            line[--ll] = '\0';
        if (!ll)
            continue;
        if (nbodies == cap)
            bodies = realloc(bodies, (cap = cap ? cap * 2 : 64) * sizeof(*bodies));
        bodies[nbodies++] = strdup(line);
    }
    fclose(f);
    free(line);
    if (!nbodies)
        die("no bodies", -1);

    struct stream *st = calloc((size_t)nstreams, sizeof(*st));
    for (int i = 0; i < nstreams; i++) {
        const char *b = bodies[(size_t)i % nbodies];
        size_t bl = strlen(b);
        st[i].req = malloc(bl + 256);
        st[i].req_len = (size_t)snprintf(st[i].req, bl + 256,
                                         "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                         "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                         argv[2], bl, b);
        st[i].cap = 1 << 16;
        st[i].buf = malloc(st[i].cap);
        st[i].times = malloc(MAX_CHUNKS * sizeof(double));
        st[i].fd = -1;
    }
    int ep = epoll_create1(0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    double t0 = now_us();
    int next = 0, left = nstreams;
    struct epoll_event evs[256];
    while (left) {
        double now = now_us();
        while (next < nstreams && now >= t0 + next * spread / nstreams) {
            struct stream *s = &st[next];
            s->fd = socket(AF_INET, SOCK_STREAM, 0);
            int one = 1;
            setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            if (connect(s->fd, (struct sockaddr *)&sa, sizeof(sa)))
                die("connect", next);
            s->start = now_us();
            ssize_t w = write(s->fd, s->req, s->req_len); /* a small request: one write */
            if (w != (ssize_t)s->req_len)
                die("write", next);
            fcntl(s->fd, F_SETFL, O_NONBLOCK);
            struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)next};
            epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
            s->started = 1;
            next++;
        }
        int timeout = -1;
        if (next < nstreams) {
            double due = t0 + next * spread / nstreams - now_us();
            timeout = due > 0 ? (int)(due / 1000.0) + 1 : 0;
        }
        int n = epoll_wait(ep, evs, 256, timeout);
        if (n < 0 && errno != EINTR)
            die("epoll_wait", -1);
        for (int k = 0; k < n; k++) {
            int i = (int)evs[k].data.u32;
            struct stream *s = &st[i];
            for (;;) {
                if (s->cap - s->len < 4096)
                    s->buf = realloc(s->buf, s->cap *= 2);
                ssize_t r = read(s->fd, s->buf + s->len, s->cap - s->len);
                if (r > 0) {
                    s->len += (size_t)r;
                    if (parse(s, i, now_us())) {
                        epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
                        close(s->fd);
                        left--;
                        break;
                    }
                    continue;
                }
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    break;
                die(r == 0 ? "the server closed the connection" : "read", i);
            }
        }
    }
    for (int i = 0; i < nstreams; i++) {
        struct stream *s = &st[i];
        printf("stream %d start_us %.0f first_us %.0f chunks %zu gaps ", i, s->start - t0,
               s->first - t0, s->n);
        for (size_t k = 1; k < s->n; k++)
            printf("%s%.0f", k > 1 ? "," : "", s->times[k] - s->times[k - 1]);
        printf(" worker %ld,%ld,%ld\n", s->parts[0], s->parts[1], s->parts[2]);
    }
    printf("done\n");
    return 0;
}
