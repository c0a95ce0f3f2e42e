/*
 * startup: waits for the start-up models' first outcome, so that what failed is on the
 * terminal before "Model server started." instead of only in a log (see startup.h).
 *
 * The test for a model is the one a synchronous register uses (mgmt/management.c): settled
 * when its READY workers reach its minimum, failed as soon as one worker failed to load or
 * died while loading (WORKER_FAILED or WORKER_BACKOFF before the minimum was READY). A timer
 * polls every 100 ms; the registry is asked again each time (model_find), so a model that a
 * management call removes meanwhile is no dangling pointer here.
 */
#include "startup.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/model.h"
#include "core/worker_pool.h"
#include "log.h"
#include "util.h"

#define STARTUP_POLL_MS 100
/* beyond the longest startupTimeout: a worker that hangs is killed at its timeout and counts
 * as failed then; this only bounds the wait if something else keeps a model pending */
#define STARTUP_GRACE_S 10

enum outcome { PENDING, LOADED, FAILED };

struct entry {
    char *name, *version; /* NULL when the registration failed */
    char *spec;
    char *why;
    int named;
    enum outcome outcome;
};

static struct entry *entries;
static int n_entries, cap_entries, n_failed;
static struct event *timer;
static startup_done_fn *done_fn;
static void *done_arg;
static int64_t start_us, deadline_us;

static struct entry *add(const char *spec, int named)
{
    if (n_entries == cap_entries) {
        cap_entries = cap_entries ? 2 * cap_entries : 8;
        entries = xrealloc(entries, (size_t)cap_entries * sizeof(*entries));
    }
    struct entry *e = &entries[n_entries++];
    memset(e, 0, sizeof(*e));
    e->spec = xstrdup(spec);
    e->named = named;
    return e;
}

void startup_failed(const char *spec, const char *why, int named)
{
    struct entry *e = add(spec, named);
    e->why = xstrdup(why);
    e->outcome = FAILED;
}

void startup_registered(const char *name, const char *version, const char *spec, int named)
{
    struct entry *e = add(spec, named);
    e->name = xstrdup(name);
    e->version = xstrdup(version);
}

static int known(const struct model *m)
{
    for (int i = 0; i < n_entries; i++)
        if (entries[i].name && !strcmp(entries[i].name, m->name) &&
            !strcmp(entries[i].version, m->version))
            return 1;
    return 0;
}

static void check(struct entry *e, int64_t now)
{
    struct model *m;
    if (model_find(e->name, e->version, &m) != 0) {
        e->outcome = FAILED;
        e->why = xstrdup("it was unregistered while its workers loaded");
        return;
    }
    int ready = 0, failed = 0;
    const struct worker *w;
    TAILQ_FOREACH(w, &m->pool.workers, link)
    {
        if (w->state == WORKER_READY)
            ready++;
        else if (w->state == WORKER_FAILED || w->state == WORKER_BACKOFF)
            failed = 1;
    }
    if (ready >= m->min_workers) {
        e->outcome = LOADED;
    } else if (failed) {
        e->outcome = FAILED;
        e->why = xstrdup(*m->pool.load_error ? m->pool.load_error
                                             : "its worker died while loading the model");
    } else if (now >= deadline_us) {
        e->outcome = FAILED;
        e->why =
            xasprintf("%d of its %d workers were not ready %d s after the start",
                      m->min_workers - ready, m->min_workers, (int)((now - start_us) / 1000000));
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    int64_t now = ts_now_us();
    int pending = 0;
    for (int i = 0; i < n_entries; i++) {
        if (entries[i].outcome == PENDING)
            check(&entries[i], now);
        pending += entries[i].outcome == PENDING;
    }
    if (pending) {
        struct timeval tv = {0, STARTUP_POLL_MS * 1000};
        evtimer_add(timer, &tv);
        return;
    }
    int fatal = 0;
    for (int i = 0; i < n_entries; i++) {
        const struct entry *e = &entries[i];
        if (e->outcome != FAILED)
            continue;
        n_failed++;
        fatal |= e->named;
        if (e->name && strcmp(e->spec, e->name))
            LOG_ERROR("model %s (%s) failed to load: %s", e->name, e->spec, e->why);
        else
            LOG_ERROR("model %s failed to load: %s", e->spec, e->why);
    }
    done_fn(done_arg, fatal);
}

void startup_watch(startup_done_fn *done, void *arg)
{
    int longest = 0;
    for (struct model *m = model_first(); m; m = model_next(m)) {
        if (!known(m))
            startup_registered(m->name, m->version, m->name, 0);
        if (m->pool.startup_timeout_s > longest)
            longest = m->pool.startup_timeout_s;
    }
    done_fn = done;
    done_arg = arg;
    start_us = ts_now_us();
    deadline_us = start_us + (int64_t)(longest + STARTUP_GRACE_S) * 1000000;
    timer = evtimer_new(srv->base, on_timer, NULL);
    event_active(timer, EV_TIMEOUT, 1);
}

int startup_n_failed(void)
{
    return n_failed;
}

void startup_free(void)
{
    for (int i = 0; i < n_entries; i++) {
        free(entries[i].name);
        free(entries[i].version);
        free(entries[i].spec);
        free(entries[i].why);
    }
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    if (timer)
        event_free(timer);
    timer = NULL;
}
