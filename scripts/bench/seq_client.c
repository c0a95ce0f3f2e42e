/*
 * seq_client: latency of sequential requests on ONE keep-alive connection.
 *
 * Sends the same POST N times (after W warm-up requests), one at a time, and times each from the
 * first byte written to the last body byte read (CLOCK_MONOTONIC). When the response carries
 * x-ts-worker-forward-us (the forward time the torchscript handler measures in the worker), the
 * per-request overhead is latency - forward: frontend, worker socket, frame codec, the handler's
 * JSON work, and the client's loopback TCP.
 *
 * usage: seq_client PORT PATH BODYFILE N [W]
 * prints: lat_p50=.. lat_p99=.. fwd_p50=.. fwd_p99=.. ovh_p50=.. ovh_p99=.. (microseconds)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    int i = (int)(p / 100.0 * (n - 1) + 0.5);
    return v[i];
}

/* Finds a header's value in the head (case-insensitive name), or NULL. */
static const char *header(const char *head, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        const char *l = p + 2;
        if (!strncasecmp(l, name, nl) && l[nl] == ':')
            return l + nl + 1;
    }
    return NULL;
}

static char rx[1 << 16];

/* One request/response; returns the forward time header (or -1), exits on errors. */
static long roundtrip(int fd, const char *req, size_t reqlen)
{
    if (write(fd, req, reqlen) != (ssize_t)reqlen) {
        perror("write");
        exit(1);
    }
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t n = read(fd, rx + have, sizeof(rx) - 1 - have);
        if (n <= 0) {
            fprintf(stderr, "seq_client: connection closed\n");
            exit(1);
        }
        have += (size_t)n;
        rx[have] = '\0';
        end = strstr(rx, "\r\n\r\n");
    }
    *end = '\0';
    if (strncmp(rx, "HTTP/1.1 200", 12)) {
        fprintf(stderr, "seq_client: %s\n", rx);
        exit(1);
    }
    const char *cl = header(rx, "content-length");
    const char *fw = header(rx, "x-ts-worker-forward-us");
    long fwd = fw ? atol(fw) : -1;
    size_t body = cl ? (size_t)atol(cl) : 0;
    size_t got = have - (size_t)(end + 4 - rx);
    while (got < body) {
        ssize_t n = read(fd, rx, sizeof(rx));
        if (n <= 0) {
            fprintf(stderr, "seq_client: connection closed in the body\n");
            exit(1);
        }
        got += (size_t)n;
    }
    return fwd;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s PORT PATH BODYFILE N [WARMUP]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[4]), warm = argc > 5 ? atoi(argv[5]) : 100;
    FILE *f = fopen(argv[3], "rb");
    if (!f) {
        perror(argv[3]);
        return 1;
    }
    static char bodybuf[1 << 16];
    size_t blen = fread(bodybuf, 1, sizeof(bodybuf), f);
    fclose(f);
    char *req = malloc(blen + 512);
    int hl = snprintf(req, 512,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      argv[2], blen);
    memcpy(req + hl, bodybuf, blen);
    size_t reqlen = (size_t)hl + blen;

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("connect");
        return 1;
    }
    for (int i = 0; i < warm; i++)
        roundtrip(fd, req, reqlen);
    double *lat = calloc((size_t)n, sizeof(double));
    double *fwd = calloc((size_t)n, sizeof(double));
    double *ovh = calloc((size_t)n, sizeof(double));
    int nf = 0;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        long fw = roundtrip(fd, req, reqlen);
        lat[i] = now_us() - t0;
        if (fw >= 0) {
            fwd[nf] = (double)fw;
            ovh[nf++] = lat[i] - (double)fw;
        }
    }
    close(fd);
    printf("lat_p50=%.0f lat_p99=%.0f fwd_p50=%.0f fwd_p99=%.0f ovh_p50=%.0f ovh_p99=%.0f\n",
           pct(lat, n, 50), pct(lat, n, 99), pct(fwd, nf, 50), pct(fwd, nf, 99), pct(ovh, nf, 50),
           pct(ovh, nf, 99));
    free(lat);
    free(fwd);
    free(ovh);
    free(req);
    return 0;
}
