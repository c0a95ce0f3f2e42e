/*
 * server: the one global of the frontend. Everything mutable lives here and is touched only on
 * the loop thread (the libevent base). Start-up order: config -> listeners -> startup models ->
 * "Model server started." -> loop; shutdown on SIGINT/SIGTERM stops listeners, then workers.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include <stdint.h>
#include <sys/queue.h>

#include "config.h"

struct event_base;
struct event;
struct evhttp;
struct model;

struct server_opts {
    const char *model_store;
    const char *ts_config;
    const char **models; /* --models arguments, NULL-terminated */
    int n_models;
    int ncs;
    int disable_token_auth;
    int enable_model_api;
    int ready_fd; /* write "1" here once started (background launcher), -1 if none */
};

struct metrics_counters {
    uint64_t requests_2xx, requests_4xx, requests_5xx;
};

struct server {
    struct event_base *base;
    struct config cfg;
    char *worker_bin;  /* torchserve-c-worker next to our own binary */
    char *model_store; /* absolute */
    char *run_dir;     /* per-instance scratch dir: extracted archives */
    struct evhttp *http_inference;
    struct evhttp *http_management;
    struct evhttp *http_metrics;
    struct event *ev_sigint, *ev_sigterm, *ev_sigchld;
    int next_worker_id;
    int stopping;
    int64_t start_us;
    struct metrics_counters counters;
    LIST_HEAD(, model) models;
};

extern struct server *srv;

int server_main(const struct server_opts *o);

#endif
