/* llm_poll.c — the poll side of kiln/kiln_llm.h: kiln_llm_next waits on a request's own condition
 * variable for its next (coalesced) event, kiln_llm_release hands the request back (cancelling it if
 * it still runs; its memory goes when both the caller and the engine loop are done with it). */
#include "llm/llm_api_internal.h"

#include "core/status.h"

#include <errno.h>
#include <stdlib.h>

/* A polled request that is not released (mu held), or NULL. */
static llm_req *find_polled(kiln_llm *llm, uint64_t id) {
    llm_req *r = llm_table_find(llm, id);
    return r && !r->on_event && !r->released ? r : NULL;
}

kiln_status kiln_llm_next(kiln_llm *llm, uint64_t id, int timeout_ms, kiln_llm_event *ev) {
    if (!llm || !ev) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_next: llm and ev are required");
    pthread_mutex_lock(&llm->mu);
    llm_req *r = find_polled(llm, id);
    if (!r) {
        pthread_mutex_unlock(&llm->mu);
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_next: no polled request has id %llu (unknown, released, "
                          "or submitted with a callback)", (unsigned long long)id);
    }
    llm_event_rec *old = r->current;
    r->current = NULL;
    if (timeout_ms != 0 && !r->head) {
        struct timespec deadline = llm_deadline(timeout_ms);
        int e = 0;
        while (!r->head && !r->ended && e != ETIMEDOUT)
            e = timeout_ms < 0 ? pthread_cond_wait(&r->cv, &llm->mu) : pthread_cond_timedwait(&r->cv, &llm->mu, &deadline);
    }
    llm_event_rec *rec = r->head;
    const bool r_ended = r->ended;
    if (rec) {
        r->head = rec->next;
        if (!r->head) r->tail = NULL;
        rec->next = NULL;
        r->current = rec;
        *ev = rec->ev;
    }
    pthread_mutex_unlock(&llm->mu);
    if (old) {
        kiln_strbuf_free(&old->text);
        free(old);
    }
    if (!rec && r_ended)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_next: request %llu has ended (its final event was read)",
                          (unsigned long long)id);
    if (!rec) return kiln_error(KILN_ERR_BUSY, "kiln_llm_next: no event of request %llu within %d ms",
                                (unsigned long long)id, timeout_ms);
    return KILN_OK;
}

void kiln_llm_release(kiln_llm *llm, uint64_t id) {
    if (!llm) return;
    pthread_mutex_lock(&llm->mu);
    llm_req *r = find_polled(llm, id);
    if (r) {
        r->released = true;
        if (!r->ended && !r->cancel_requested) {
            r->cancel_requested = true;
            llm->n_cancels++;
            pthread_cond_signal(&llm->wake);
        }
        if (r->loop_done) llm_req_destroy(llm, r);
    }
    pthread_mutex_unlock(&llm->mu);
}
