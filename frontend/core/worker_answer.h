/*
 * worker_answer: what the pool does to each prediction of a worker's frame before the job's sink
 * sees it. The worker's metadata headers (OTF_METRICS_KEY, OTF_STEP_KEY) are never a client's:
 * they are taken out and handed to the group (its step time, which the batcher follows, and its
 * owner's metrics hook). Then what a handler may not set is applied (handler_reply.h), and what
 * was mended is logged, one line per 10 s at most.
 *
 * Loop thread only (worker_pool.c's reader).
 */
#ifndef TS_WORKER_ANSWER_H
#define TS_WORKER_ANSWER_H

#include "worker_pool.h"

/* p: a prediction of w's frame, changed in place; j: its job, NULL when it is gone (cancelled). */
void worker_answer_prepare(struct worker *w, struct otf_prediction *p, struct job *j);

#endif
