/* llm_loop.c — the engine loop of one kiln_llm, on its own thread: it takes new requests and cancels
 * from the inbox (under the mutex, never held during a forward step), ends the requests that were
 * cancelled or waited past queue_timeout_ms, runs one scheduler step, and turns the step's events into
 * the requests' events (text deltas, stop strings, usage), those of polled requests sent together once
 * per step (one lock, the pollers woken after it). It sleeps while there is nothing to do,
 * waking once a second to beat its heartbeat, and exits once closing and every request has ended. */
#include "llm/llm_api_internal.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double llm_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void llm_cond_init(pthread_cond_t *c) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

struct timespec llm_deadline(double ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(ms * 1e6);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

static void live_push(kiln_llm *llm, llm_req *r) {
    r->prev = llm->live_tail;
    r->next = NULL;
    if (llm->live_tail) llm->live_tail->next = r;
    else llm->live_head = r;
    llm->live_tail = r;
}

static void live_unlink(kiln_llm *llm, llm_req *r) {
    if (r->prev) r->prev->next = r->next;
    else llm->live_head = r->next;
    if (r->next) r->next->prev = r->prev;
    else llm->live_tail = r->prev;
}

/* The scheduler's view and the counters, for kiln_llm_get_stats. */
static void publish(kiln_llm *llm) {
    kiln_scheduler_stats s = kiln_scheduler_get_stats(llm->sched);
    pthread_mutex_lock(&llm->mu);
    llm->snap = s;
    llm->generated_snap = llm->generated;
    llm->busy_snap = llm->busy;
    llm->heartbeat_ms = llm_now_ms();
    pthread_mutex_unlock(&llm->mu);
}

/* Leaves the loop once its final event went out and the scheduler let go of it; freed now unless a
 * poller still has to release it. */
static void retire(kiln_llm *llm, llm_req *r) {
    if (!r->final_sent || r->in_sched || r->pending) return;
    live_unlink(llm, r);
    pthread_mutex_lock(&llm->mu);
    r->loop_done = true;
    if (r->on_event || r->released) llm_req_destroy(llm, r);
    pthread_mutex_unlock(&llm->mu);
}

void llm_loop_on_admit(void *user) {
    llm_req *r = user;
    r->admitted = true;
    r->usage.queue_ms = llm_now_ms() - r->t_submit;
    pthread_mutex_lock(&r->llm->mu);
    llm_req_unqueue(r->llm, r);
    pthread_mutex_unlock(&r->llm->mu);
}

/* The final event of a request that no step ended (token -1): the held-back text goes with it. */
static void emit_end(kiln_llm *llm, llm_req *r, kiln_llm_finish why, const char *message) {
    const double now = llm_now_ms();
    if (!r->admitted) r->usage.queue_ms = now - r->t_submit;
    bool stop_hit;
    const bool text_ok = llm_req_text(llm, r, -1, true, true, &stop_hit) == KILN_OK;
    kiln_llm_event ev = {.id = r->id, .user = r->user, .token = -1, .text = text_ok ? r->delta.data : "",
                         .text_len = text_ok ? r->delta.len : 0, .finish = why,
                         .message = why == KILN_LLM_FINISH_ERROR ? message : NULL, .usage = r->usage, .time_ms = now};
    llm_req_emit(llm, r, &ev);
    retire(llm, r);
}

/* Hands the inbox's requests to the scheduler (a refusal ends the request with its message). */
static void take_inbox(kiln_llm *llm, llm_req *in) {
    for (llm_req *r = in, *next; r; r = next) {
        next = r->qnext;
        r->qnext = NULL;
        live_push(llm, r);
        kiln_request_params p = {.prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->max_tokens,
                                 .sampling = r->sampling, .stop_ids = r->stop_ids, .n_stop_ids = r->n_stop_ids,
                                 .user = r, .speculate = r->speculate};
        if (kiln_scheduler_add(llm->sched, &p, &r->sched_id) == KILN_OK) {
            r->in_sched = true;
            continue;
        }
        char msg[256];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        emit_end(llm, r, KILN_LLM_FINISH_ERROR, msg);
    }
}

/* Ends the requests cancelled (or all, when closing) and those that waited too long: their blocks are
 * freed first, then the statistics published, then their final events sent. */
static void end_requests(kiln_llm *llm, bool cancels, bool closing) {
    const double now = llm_now_ms();
    int n = 0;
    if (cancels || closing) pthread_mutex_lock(&llm->mu);
    for (llm_req *r = llm->live_head; r; r = r->next) {
        if (r->final_sent) continue;
        kiln_llm_finish why = KILN_LLM_FINISH_NONE;
        if ((cancels || closing) && (r->cancel_requested || closing)) why = KILN_LLM_FINISH_CANCELLED;
        else if (!r->admitted && llm->queue_timeout_ms > 0 && now - r->t_submit > llm->queue_timeout_ms)
            why = KILN_LLM_FINISH_TIMEOUT;
        if (why == KILN_LLM_FINISH_NONE) continue;
        r->ending = why;
        n++;
    }
    if (cancels || closing) pthread_mutex_unlock(&llm->mu);
    if (!n) return;
    for (llm_req *r = llm->live_head; r; r = r->next)
        if (r->ending && r->in_sched) kiln_scheduler_finish(llm->sched, r->sched_id, KILN_FINISH_ABORTED);
    publish(llm);
    for (llm_req *r = llm->live_head, *next; r; r = next) {
        next = r->next;
        if (!r->ending) continue;
        kiln_llm_finish why = r->ending;
        r->ending = KILN_LLM_FINISH_NONE;
        emit_end(llm, r, why, NULL);
    }
}

static kiln_llm_finish map_finish(kiln_finish_reason f) {
    switch (f) {
    case KILN_FINISH_NONE: return KILN_LLM_FINISH_NONE;
    case KILN_FINISH_LENGTH: return KILN_LLM_FINISH_LENGTH;
    case KILN_FINISH_STOP_TOKEN: return KILN_LLM_FINISH_STOP_TOKEN;
    case KILN_FINISH_STOP_STRING: return KILN_LLM_FINISH_STOP_STRING;
    case KILN_FINISH_ABORTED: return KILN_LLM_FINISH_CANCELLED;
    case KILN_FINISH_ERROR: return KILN_LLM_FINISH_ERROR;
    }
    return KILN_LLM_FINISH_ERROR;
}

/* Sends the step's batch of polled events and retires the requests that ended. */
static void flush_batch(kiln_llm *llm) {
    const int n = llm->n_batch;
    llm_req_emit_batch(llm);
    for (int i = 0; i < n; i++) retire(llm, llm->batch[i].r);
}

/* Adds a polled request's event to the step's batch (sent now when the batch cannot grow). */
static void batch_event(kiln_llm *llm, llm_req *r, const kiln_llm_event *ev) {
    if (r->pending) flush_batch(llm); /* a second event of r this step: its delta is about to change */
    if (llm->n_batch == llm->batch_cap) {
        const int cap = llm->batch_cap ? 2 * llm->batch_cap : 64;
        llm_step_event *grown = realloc(llm->batch, (size_t)cap * sizeof *grown);
        if (!grown) {
            llm_req_emit(llm, r, ev);
            retire(llm, r);
            return;
        }
        llm->batch = grown;
        llm->batch_cap = cap;
    }
    if (ev->finish != KILN_LLM_FINISH_NONE) r->final_sent = true;
    r->pending = true;
    llm->batch[llm->n_batch++] = (llm_step_event){.r = r, .ev = *ev};
}

/* One scheduler event: the request's token, text and end (a polled request's into the step's batch,
 * unless it carries an error message). */
static void on_sched_event(kiln_llm *llm, const kiln_sched_event *e, double now, double step_ms) {
    llm_req *r = e->user;
    if (e->finish != KILN_FINISH_NONE) r->in_sched = false;
    if (r->final_sent) { /* the loop ended it already (cancel, timeout, stop string): this is the echo */
        retire(llm, r);
        return;
    }
    const int32_t token = e->sample.token;
    if (token >= 0) {
        if (!r->usage.completion_tokens) r->usage.ttft_ms = now - r->t_submit;
        r->usage.completion_tokens = e->n_generated;
    }
    r->usage.preemptions = e->preemptions;
    if (r->pending) flush_batch(llm); /* a second token of r this step (speculative decoding): its delta changes now */
    kiln_llm_finish why = map_finish(e->finish);
    const char *message = e->message;
    char msg[256];
    bool stop_hit = false;
    if (llm_req_text(llm, r, token, e->finish == KILN_FINISH_STOP_TOKEN, why != KILN_LLM_FINISH_NONE, &stop_hit) !=
        KILN_OK) {
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        message = msg;
        why = KILN_LLM_FINISH_ERROR;
        kiln_strbuf_clear(&r->delta);
        kiln_strbuf_append(&r->delta, "", 0);
    } else if (stop_hit) {
        why = KILN_LLM_FINISH_STOP_STRING;
    }
    if (why != KILN_LLM_FINISH_NONE && r->in_sched) /* a stop string, or text that failed: the scheduler lets go now */
        kiln_scheduler_finish(llm->sched, r->sched_id,
                              why == KILN_LLM_FINISH_STOP_STRING ? KILN_FINISH_STOP_STRING : KILN_FINISH_ABORTED);
    const bool lp = r->sampling.logprobs && token >= 0;
    kiln_llm_event ev = {.id = r->id, .user = r->user, .token = token, .text = r->delta.data ? r->delta.data : "",
                         .text_len = r->delta.len, .logprob = lp ? e->sample.logprob : 0,
                         .n_top = lp ? e->sample.n_top : 0, .top = lp && e->sample.n_top ? e->sample.top : NULL,
                         .finish = why, .message = why == KILN_LLM_FINISH_ERROR ? message : NULL, .usage = r->usage,
                         .time_ms = now, .step_ms = step_ms};
    if (!r->on_event && !ev.message) { /* a message may live on this stack: such an event goes now */
        batch_event(llm, r, &ev);
        return;
    }
    if (r->pending) flush_batch(llm);
    llm_req_emit(llm, r, &ev);
    retire(llm, r);
}

/* One scheduler step and its events. */
static void step(kiln_llm *llm) {
    const double t0 = llm_now_ms();
    const uint64_t steps = kiln_scheduler_get_stats(llm->sched).steps;
    const kiln_sched_event *ev;
    int n = 0;
    kiln_scheduler_step(llm->sched, &ev, &n); /* a failed step's requests end with its message in their events */
    const double t1 = llm_now_ms();
    const double step_ms = kiln_scheduler_get_stats(llm->sched).steps != steps ? t1 - t0 : 0;
    llm->busy += step_ms;
    for (int i = 0; i < n; i++) llm->generated += ev[i].sample.token >= 0;
    publish(llm);
    for (int i = 0; i < n; i++) on_sched_event(llm, &ev[i], t1, ev[i].sample.token >= 0 ? step_ms : 0);
    flush_batch(llm);
}

static void *loop_main(void *arg) {
    kiln_llm *llm = arg;
    pthread_mutex_lock(&llm->mu);
    for (;;) {
        while (!llm->closing && !llm->inbox_head && !llm->n_cancels && !kiln_scheduler_has_work(llm->sched)) {
            struct timespec ts = llm_deadline(1000);
            pthread_cond_timedwait(&llm->wake, &llm->mu, &ts);
            llm->heartbeat_ms = llm_now_ms();
        }
        llm_req *in = llm->inbox_head;
        llm->inbox_head = llm->inbox_tail = NULL;
        llm->n_inbox = 0;
        const bool cancels = llm->n_cancels > 0, closing = llm->closing;
        llm->n_cancels = 0;
        pthread_mutex_unlock(&llm->mu);
        take_inbox(llm, in);
        end_requests(llm, cancels, closing);
        if (kiln_scheduler_has_work(llm->sched)) step(llm);
        else publish(llm);
        pthread_mutex_lock(&llm->mu);
        if (closing && !llm->live_head && !llm->inbox_head && !kiln_scheduler_has_work(llm->sched)) break;
    }
    pthread_mutex_unlock(&llm->mu);
    return NULL;
}

kiln_status llm_loop_start(kiln_llm *llm) {
    llm->heartbeat_ms = llm_now_ms();
    int e = pthread_create(&llm->thread, NULL, loop_main, llm);
    if (e) return kiln_error(KILN_ERR_INTERNAL, "cannot start the engine loop's thread: %s", strerror(e));
    llm->thread_started = true;
    return KILN_OK;
}

void llm_loop_stop(kiln_llm *llm) {
    if (!llm->thread_started) return;
    pthread_mutex_lock(&llm->mu);
    llm->closing = true;
    pthread_cond_signal(&llm->wake);
    pthread_mutex_unlock(&llm->mu);
    pthread_join(llm->thread, NULL);
    llm->thread_started = false;
}
