/*
 * textgen_prefill.c: the prefill thread of a textgen worker (handler.prefill_thread; struct
 * tg_prefill in textgen_int.h): it runs the step() of the job the main thread posts (tg_pf_run)
 * and marks it done; textgen.c builds the jobs and hands out their results.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textgen_int.h"
#include "util.h"

static void *pf_main(void *arg)
{
    struct tg_state *s = arg;
    struct tg_prefill *pf = s->pf;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (pf->state == PF_IDLE || pf->state == PF_DONE)
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->state == PF_QUIT)
            break;
        pthread_mutex_unlock(&pf->mu);
        pf->out = NULL;
        pf->nout = 0;
        pf->rc = tg_run_step(s, s->m_pf ? s->m_pf : s->m, pf->r, pf->n, pf->n_dec, pf->groups,
                             pf->ngroups, pf->chunkp, pf->nchunks, &pf->out, &pf->nout, pf->err,
                             sizeof(pf->err));
        pf->done_us = ts_now_us();
        pthread_mutex_lock(&pf->mu);
        pf->state = PF_DONE;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

/* Until the job (if any) is done. */
void tg_pf_wait(struct tg_prefill *pf)
{
    pthread_mutex_lock(&pf->mu);
    while (pf->state == PF_RUN)
        pthread_cond_wait(&pf->cv, &pf->mu);
    pthread_mutex_unlock(&pf->mu);
}

/* n requests of the done job have its result: the job ends with the last. */
void tg_pf_release(struct tg_prefill *pf, size_t n)
{
    pthread_mutex_lock(&pf->mu);
    pf->pending -= n;
    if (pf->pending == 0) {
        tsh_tensors_free(pf->out, pf->nout);
        pf->out = NULL;
        pf->state = PF_IDLE;
    }
    pthread_mutex_unlock(&pf->mu);
}

int tg_pf_state(struct tg_prefill *pf)
{
    pthread_mutex_lock(&pf->mu);
    int st = pf->state;
    pthread_mutex_unlock(&pf->mu);
    return st;
}

int tg_pf_start(struct tg_state *s, char *err, size_t errlen)
{
    struct tg_prefill *pf = xcalloc(1, sizeof(*pf));
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->cv, NULL);
    pf->chunks = xmalloc((size_t)s->slots * 3 * sizeof(*pf->chunks));
    tg_grow_rows(&pf->rows, (size_t)s->max_prefill);
    s->pf = pf;
    int rc = pthread_create(&pf->thread, NULL, pf_main, s);
    if (rc) {
        snprintf(err, errlen, "cannot start the prefill thread: %s", strerror(rc));
        s->pf = NULL;
        free(pf->chunks);
        free(pf->rows.tok);
        free(pf->rows.slot);
        free(pf->rows.pos);
        free(pf);
        return -1;
    }
    return 0;
}

void tg_pf_stop(struct tg_state *s)
{
    struct tg_prefill *pf = s->pf;
    if (!pf)
        return;
    tg_pf_wait(pf);
    pthread_mutex_lock(&pf->mu);
    pf->state = PF_QUIT;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    tsh_tensors_free(pf->out, pf->nout);
    pthread_mutex_destroy(&pf->mu);
    pthread_cond_destroy(&pf->cv);
    free(pf->chunks);
    free(pf->rows.tok);
    free(pf->rows.slot);
    free(pf->rows.pos);
    free(pf);
    s->pf = NULL;
}

/* Posts the job the main thread wrote into pf->rows and pf->chunks: nchunks requests. */
void tg_pf_run(struct tg_prefill *pf, size_t nchunks)
{
    pthread_mutex_lock(&pf->mu);
    pf->pending = nchunks;
    pf->out = NULL;
    pf->nout = 0;
    pf->state = PF_RUN;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
}
