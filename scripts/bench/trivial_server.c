/*
 * trivial_server: the HTTP ceiling of this machine for the core benchmark.
 *
 * One libevent evhttp loop thread, as torchserve-c's frontend has, answering every request with
 * a fixed JSON body the size of an mlp prediction (10 floats). The request body is read (evhttp
 * buffers it) and dropped. Whatever wrk measures here is what HTTP/1.1 parsing and loopback TCP
 * cost on this machine with this library, with no model behind it.
 *
 * usage: trivial_server PORT    (prints "listening" once bound; stops on SIGINT/SIGTERM)
 */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char body[] = "[-0.0706225783, 0.0165408365, -0.0727480277, -0.0367044806, "
                           "-0.013034923, -0.0388493203, -0.0496511236, 0.059477631, "
                           "-0.0170485601, 0.0316295773]";

static void on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    evbuffer_drain(in, evbuffer_get_length(in));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    struct evbuffer *out = evbuffer_new();
    evbuffer_add_reference(out, body, sizeof(body) - 1, NULL, NULL);
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    struct event_base *base = event_base_new();
    struct evhttp *http = evhttp_new(base);
    evhttp_set_gencb(http, on_request, NULL);
    if (evhttp_bind_socket(http, "127.0.0.1", (ev_uint16_t)atoi(argv[1])) != 0) {
        fprintf(stderr, "trivial_server: cannot listen on 127.0.0.1:%s\n", argv[1]);
        return 1;
    }
    struct event *si = evsignal_new(base, SIGINT, on_signal, base);
    struct event *st = evsignal_new(base, SIGTERM, on_signal, base);
    evsignal_add(si, NULL);
    evsignal_add(st, NULL);
    printf("listening\n");
    fflush(stdout);
    event_base_dispatch(base);
    event_free(si);
    event_free(st);
    evhttp_free(http);
    event_base_free(base);
    return 0;
}
