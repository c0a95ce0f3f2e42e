/*
 * startup: the outcome of the start-up models, known before "Model server started.".
 *
 * server.c registers the start-up models (--models, models=, load_models=, a snapshot) and
 * starts their workers, then runs the loop while they load. Registrations that failed are
 * told here with startup_failed(); the models that were registered are found in the registry.
 * startup_watch() then waits until every one of them has its minimum of READY workers, or has
 * failed (a worker that failed to load or died while loading, as a synchronous register sees
 * it), and logs one ERROR line per model that failed, with its reason. done(arg, fatal) runs
 * once, on the loop: fatal when a model named on the command line (not through `all`) failed.
 *
 * Loop thread only (the main thread, before and while the loop runs). Owns copies of what it
 * is given; startup_free() releases them.
 */
#ifndef TS_STARTUP_H
#define TS_STARTUP_H

/* A start-up model's registration failed. spec: what named it (e.g. "foo=foo.mar"); named: it
 * was named on the command line. */
void startup_failed(const char *spec, const char *why, int named);
/* The model registered from spec; named as above. Models of the registry that were not told
 * here (a snapshot's, `all`'s) are watched too, as not named. */
void startup_registered(const char *name, const char *version, const char *spec, int named);

typedef void startup_done_fn(void *arg, int fatal);
/* Starts watching; done runs from the loop once every model is settled (at the latest after
 * the longest startupTimeout + 10 s, when a model still loading counts as failed). */
void startup_watch(startup_done_fn *done, void *arg);
/* Number of start-up models that failed, once done has run. */
int startup_n_failed(void);
void startup_free(void);

#endif
