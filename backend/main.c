/*
 * torchserve-c-worker's main: the command line, libtorch's threads, the table of built-in
 * handlers, and the step loop (worker/worker.h). Only wiring lives here: the one file that sees
 * the worker, the built-in handlers and the Python plugin's leak settings at once.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers/builtins.h"
#include "log.h"
/* LeakSanitizer in the ASan build: a Python worker embeds CPython, which is never finalised;
 * every ts_* call a Python handler makes ends in code a C handler exercises too */
#include "python/lsan_python.h"
#include "torch/torch_shim.h"
#include "util.h"
#include "worker/handler_loader.h"
#include "worker/worker.h"

#define WORKER_FD 3
#define DEFAULT_MAX_REQUEST_SIZE 6553500L

struct options {
    int threads;
    long max_request_size;
    const char *state_dir;
    const char *state_redis;
    const char *log_level;
    long busy_poll_us;
    long stream_buffer_size;
};

static void usage(void)
{
    fprintf(stderr, "usage: torchserve-c-worker [--threads N] [--max-request-size BYTES] "
                    "[--state-dir DIR] [--state-redis redis://HOST:PORT[/DB]]\n"
                    "                           [--log-level debug|info|warn|error] "
                    "[--busy-poll-us US] [--stream-buffer-size BYTES]\n"
                    "The frontend's socket must be on fd 3.\n");
}

static int parse_args(int argc, char **argv, struct options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = NULL;
        const char *eq = strchr(a, '=');
        size_t klen = eq ? (size_t)(eq - a) : strlen(a);
        if (eq)
            v = eq + 1;
        else if (i + 1 < argc)
            v = argv[i + 1];
#define OPT(name) (klen == strlen(name) && !strncmp(a, name, klen))
        if (OPT("--help") || OPT("-h")) {
            usage();
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "torchserve-c-worker: %s needs a value\n", a);
            return -1;
        }
        long n;
        if (OPT("--threads")) {
            if (ts_parse_long(v, 0, 1024, &n))
                goto bad;
            o->threads = (int)n;
        } else if (OPT("--max-request-size")) {
            if (ts_parse_long(v, 1, 0x7fffffffL, &n))
                goto bad;
            o->max_request_size = n;
        } else if (OPT("--stream-buffer-size")) {
            if (ts_parse_long(v, 1024, 1L << 30, &n))
                goto bad;
            o->stream_buffer_size = n;
        } else if (OPT("--busy-poll-us")) {
            if (ts_parse_long(v, 0, 10000, &n))
                goto bad;
            o->busy_poll_us = n;
        } else if (OPT("--state-dir")) {
            o->state_dir = v;
        } else if (OPT("--state-redis")) {
            o->state_redis = v;
        } else if (OPT("--log-level")) {
            o->log_level = v;
        } else {
            fprintf(stderr, "torchserve-c-worker: unknown option %s\n", a);
            return -1;
        }
#undef OPT
        if (!eq)
            i++;
        continue;
    bad:
        fprintf(stderr, "torchserve-c-worker: bad value for %.*s: %s\n", (int)klen, a, v);
        return -1;
    }
    return 0;
}

static const struct handler_builtin builtins[] = {
    {"torchscript", ts_handler_torchscript},
    {"TorchScriptHandler", ts_handler_torchscript},
    {"", ts_handler_torchscript},
    {"identity_text", ts_handler_identity_text},
    {"char_lm", ts_handler_char_lm},
    {"stateful", ts_handler_stateful},
    {"lstm_stateful", ts_handler_lstm_stateful},
    {"textgen", ts_handler_textgen},
};

/* glibc's malloc serves a block above 128 kB (its threshold grows to the largest freed, up to
 * 32 MB) with a fresh mapping, and gives free memory at the top of a heap back to the kernel:
 * a model's tensors are such blocks, so every forward touched new pages. tiny_gpt's requests
 * took 500-1,500 page faults each, 1 ms of a 7 ms prompt step. The worker keeps up to
 * WORKER_MALLOC_KEEP_MB of freed memory per heap instead and mmaps only blocks above
 * WORKER_MALLOC_MMAP_MB, unless the environment sets glibc's malloc tunables itself. */
#define WORKER_MALLOC_MMAP_MB 32
#define WORKER_MALLOC_KEEP_MB 64
#define MB_STR_(n) #n
#define MB_STR(n) MB_STR_(n)

static const char *malloc_setup(void)
{
    const char *t = getenv("GLIBC_TUNABLES");
    if ((t && strstr(t, "glibc.malloc.")) || getenv("MALLOC_MMAP_THRESHOLD_") ||
        getenv("MALLOC_TRIM_THRESHOLD_"))
        return "as the environment sets it";
    if (!mallopt(M_MMAP_THRESHOLD, WORKER_MALLOC_MMAP_MB << 20) ||
        !mallopt(M_TRIM_THRESHOLD, WORKER_MALLOC_KEEP_MB << 20))
        return "glibc's defaults (mallopt refused)";
    return "keeps " MB_STR(WORKER_MALLOC_KEEP_MB) " MB of freed memory per heap, mmaps "
                                                  "above " MB_STR(WORKER_MALLOC_MMAP_MB) " MB";
}

int main(int argc, char **argv)
{
    struct options o = {.threads = 0, .max_request_size = DEFAULT_MAX_REQUEST_SIZE};
    log_init('W', stderr);
    if (parse_args(argc, argv, &o)) {
        usage();
        return WORKER_EXIT_FATAL;
    }
    if (o.log_level)
        log_set_level_name(o.log_level);
    signal(SIGPIPE, SIG_IGN);
    const char *malloc_how = malloc_setup();

    char *err = NULL;
    if (tsh_init(o.threads, &err)) {
        LOG_WARN("libtorch thread setup: %s", err);
        free(err);
    }
    handler_loader_builtins(builtins, sizeof(builtins) / sizeof(builtins[0]));
    LOG_INFO("worker started (threads %d, max request size %ld, busy poll %ld us, malloc %s)",
             o.threads, o.max_request_size, o.busy_poll_us, malloc_how);
    struct worker_opts wo = {
        .fd = WORKER_FD,
        .max_request_size = (size_t)o.max_request_size,
        .state_dir = o.state_dir,
        .state_redis = o.state_redis,
        .busy_poll_us = o.busy_poll_us,
        .stream_buffer_size = (size_t)o.stream_buffer_size,
    };
    return worker_run(&wo);
}
