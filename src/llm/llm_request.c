/* llm_request.c — one request's state behind kiln/kiln_llm.h: the request table (ids to requests),
 * the text of its events (streaming detokenization, stop strings held back while they could still
 * match and cut where they do), and the delivery of its events to a callback or a poll queue. */
#include "llm/llm_api_internal.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

llm_req *llm_table_find(kiln_llm *llm, uint64_t id) {
    for (llm_req *r = llm->table[id % LLM_HASH_BUCKETS]; r; r = r->hnext)
        if (r->id == id) return r;
    return NULL;
}

static void free_recs(llm_event_rec *rec) {
    while (rec) {
        llm_event_rec *next = rec->next;
        kiln_strbuf_free(&rec->text);
        free(rec);
        rec = next;
    }
}

void llm_req_free(llm_req *r) {
    if (!r) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    kiln_strbuf_free(&r->held);
    kiln_strbuf_free(&r->delta);
    free_recs(r->head);
    free_recs(r->current);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void llm_req_destroy(kiln_llm *llm, llm_req *r) {
    for (llm_req **p = &llm->table[r->id % LLM_HASH_BUCKETS]; *p; p = &(*p)->hnext)
        if (*p == r) {
            *p = r->hnext;
            break;
        }
    llm_req_free(r);
}

void llm_req_unqueue(kiln_llm *llm, llm_req *r) {
    if (!r->queued) return;
    r->queued = false;
    llm->queued--;
    llm->queued_tokens -= r->n_prompt;
}

/* The longest tail of text[0..len) that is a proper prefix of one of the stop strings. */
static size_t stop_prefix_tail(const llm_req *r, const char *text, size_t len) {
    size_t hold = 0;
    for (int k = 0; k < r->n_stop; k++) {
        size_t sl = strlen(r->stop[k]);
        for (size_t n = sl - 1 < len ? sl - 1 : len; n > hold; n--)
            if (!memcmp(text + len - n, r->stop[k], n)) {
                hold = n;
                break;
            }
    }
    return hold;
}

/* The first occurrence of any stop string in text[0..len), or len. */
static size_t first_stop(const llm_req *r, const char *text, size_t len) {
    size_t first = len;
    for (int k = 0; k < r->n_stop; k++) {
        size_t sl = strlen(r->stop[k]);
        for (size_t i = 0; i + sl <= len && i < first; i++)
            if (!memcmp(text + i, r->stop[k], sl)) {
                first = i;
                break;
            }
    }
    return first;
}

kiln_status llm_req_text(kiln_llm *llm, llm_req *r, int32_t token, bool no_text, bool final, bool *stop_hit) {
    *stop_hit = false;
    kiln_strbuf_clear(&r->delta);
    const kiln_tokenizer *tok = llm->bundle.tok;
    size_t named_len;
    if (tok && token >= 0 && !no_text && kiln_tokenizer_token_text(tok, token, &named_len))
        KILN_TRY(kiln_tokenizer_stream_push(tok, &r->stream, token, !r->keep_special, &r->held));
    if (final) kiln_tokenizer_stream_flush(&r->stream, &r->held);
    KILN_TRY(kiln_strbuf_status(&r->held));
    const char *text = r->held.data ? r->held.data : "";
    size_t len = r->held.len, send = first_stop(r, text, len);
    if (send < len) *stop_hit = true;
    else if (!final) send = len - stop_prefix_tail(r, text, len);
    kiln_strbuf_append(&r->delta, text, send);
    if (!r->delta.data) kiln_strbuf_append(&r->delta, "", 0);
    if (*stop_hit || final) {
        kiln_strbuf_clear(&r->held);
    } else if (send) {
        memmove(r->held.data, r->held.data + send, len - send + 1);
        r->held.len = len - send;
    }
    return kiln_strbuf_status(&r->delta);
}

/* A queued copy of ev (its text, logprobs and message owned by the record). */
static llm_event_rec *new_rec(const kiln_llm_event *ev) {
    llm_event_rec *rec = calloc(1, sizeof *rec);
    if (!rec) return NULL;
    rec->ev = *ev;
    kiln_strbuf_append(&rec->text, ev->text, ev->text_len);
    kiln_strbuf_append(&rec->text, "", 0);
    if (ev->n_top) memcpy(rec->top, ev->top, (size_t)ev->n_top * sizeof *rec->top);
    if (ev->message) snprintf(rec->message, sizeof rec->message, "%s", ev->message);
    if (kiln_strbuf_status(&rec->text) != KILN_OK) {
        kiln_strbuf_free(&rec->text);
        free(rec);
        return NULL;
    }
    return rec;
}

/* Merges ev into the unread record rec: the text appended, the rest the newest. */
static bool coalesce(llm_event_rec *rec, const kiln_llm_event *ev) {
    kiln_strbuf_append(&rec->text, ev->text, ev->text_len);
    if (kiln_strbuf_status(&rec->text) != KILN_OK) return false;
    kiln_llm_event e = *ev;
    if (ev->message) snprintf(rec->message, sizeof rec->message, "%s", ev->message);
    e.n_top = 0;
    rec->ev = e;
    return true;
}

/* Points the record's event at the record's own memory. */
static void fix_pointers(llm_event_rec *rec) {
    rec->ev.text = rec->text.data;
    rec->ev.text_len = rec->text.len;
    rec->ev.top = rec->ev.n_top ? rec->top : NULL;
    rec->ev.message = rec->ev.finish == KILN_LLM_FINISH_ERROR ? rec->message : NULL;
}

/* Queues ev for the poller (mu held); false when out of memory. */
static bool enqueue(llm_req *r, const kiln_llm_event *ev) {
    if (r->tail && !r->sampling.logprobs) {
        if (!coalesce(r->tail, ev)) return false;
        fix_pointers(r->tail);
        return true;
    }
    llm_event_rec *rec = new_rec(ev);
    if (!rec) return false;
    fix_pointers(rec);
    if (r->tail) r->tail->next = rec;
    else r->head = rec;
    r->tail = rec;
    return true;
}

/* The bookkeeping of r's final event (mu held): r ended, out of the waiting totals and the live count. */
static void ended(kiln_llm *llm, llm_req *r) {
    r->ended = true;
    llm_req_unqueue(llm, r);
    llm->live--;
    pthread_cond_broadcast(&llm->idle);
}

/* Queues r's event for its poller (mu held): out of memory for a final event still tells the poller
 * that r ended; a final event does the bookkeeping of the end. */
static void queue_polled(kiln_llm *llm, llm_req *r, const kiln_llm_event *ev) {
    const bool final = ev->finish != KILN_LLM_FINISH_NONE;
    if (!r->released && !enqueue(r, ev) && final) {
        kiln_llm_event e = {.id = ev->id, .user = ev->user, .token = -1, .text = "", .finish = KILN_LLM_FINISH_ERROR,
                            .message = "out of memory for the request's events", .usage = ev->usage,
                            .time_ms = ev->time_ms};
        free_recs(r->head);
        r->head = r->tail = NULL;
        enqueue(r, &e);
    }
    if (final) {
        llm->finished++;
        ended(llm, r);
    }
}

void llm_req_emit(kiln_llm *llm, llm_req *r, const kiln_llm_event *ev) {
    const bool final = ev->finish != KILN_LLM_FINISH_NONE;
    if (final) r->final_sent = true;
    if (r->on_event) {
        if (final) { /* counted before the caller sees it; `live` drops after, so that drain waits for the callback */
            pthread_mutex_lock(&llm->mu);
            llm->finished++;
            pthread_mutex_unlock(&llm->mu);
        }
        r->on_event(ev);
        if (!final) return;
        pthread_mutex_lock(&llm->mu);
        ended(llm, r);
        pthread_mutex_unlock(&llm->mu);
        return;
    }
    pthread_mutex_lock(&llm->mu);
    queue_polled(llm, r, ev);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&llm->mu);
}

void llm_req_emit_batch(kiln_llm *llm) {
    if (!llm->n_batch) return;
    pthread_mutex_lock(&llm->mu);
    for (int i = 0; i < llm->n_batch; i++) queue_polled(llm, llm->batch[i].r, &llm->batch[i].ev);
    pthread_mutex_unlock(&llm->mu);
    /* r stays allocated until the loop retires it (loop_done), so its condition variable outlives this;
     * a poller that had not started waiting sees the queued event under the lock */
    for (int i = 0; i < llm->n_batch; i++) {
        pthread_cond_signal(&llm->batch[i].r->cv);
        llm->batch[i].r->pending = false;
    }
    llm->n_batch = 0;
}
