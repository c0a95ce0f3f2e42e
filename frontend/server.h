/*
 * server: start-up and shutdown of the frontend process. Wiring only: it fills in the one global
 * (struct server, core/core.h), starts the core, management and the transports in that order,
 * runs the loop, and takes them down in reverse.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

struct server_opts {
    const char *model_store;
    const char *ts_config;
    const char **models; /* --models arguments, NULL-terminated */
    int n_models;
    int ncs;
    int disable_token_auth;
    int enable_model_api;
    /* --continue-on-model-error: serve the other models when one named in --models failed to
     * load, instead of exiting 1 */
    int continue_on_model_error;
    int ready_fd; /* write "1" here once started (background launcher), -1 if none */
};

int server_main(const struct server_opts *o);

#endif
