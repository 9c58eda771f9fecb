/* load_internal.h — the pieces of kiln load behind load.h: the prepared target (URLs, headers,
 * prompts, KServe payload), the per-connection request slot, the event-loop engine, and the
 * protocol hooks (build a request, consume response bytes, judge a finished response). */
#ifndef KILN_LOAD_INTERNAL_H
#define KILN_LOAD_INTERNAL_H

#include "load/http1.h"
#include "load/load.h"
#include "load/sse.h"
#include "core/strbuf.h"

#include <curl/curl.h>
#include <sys/socket.h>

/* What every request of a run shares, prepared once before any load is sent (read-only while the
 * event loops run, which may be several threads). */
typedef struct load_target {
    const kiln_load_config *cfg;
    char url[2048];         /* the request URL */
    char metrics_url[2048]; /* "" = no scrape */
    char model[256];        /* OpenAI / KServe model name (from --model or the server's list) */
    struct curl_slist *headers;
    kiln_prompt_set prompts; /* OpenAI */
    char *extra_members;    /* OpenAI: the members of --extra without its braces; owned */
    kiln_strbuf payload;     /* KServe (and plain HTTP with a body): the same body for every request */
    bool kserve_outputs_binary; /* KServe: the request asks for binary outputs */
    /* native transport */
    bool native;            /* requests go through conn.c instead of libcurl */
    struct sockaddr_storage addrs[4]; /* the server's addresses, resolved once */
    socklen_t addrlens[4];
    int naddrs;             /* 0 when the name did not resolve (every request then fails "resolve") */
    char resolve_error[256];
    kiln_strbuf request_head; /* "METHOD /path HTTP/1.1", Host, headers; ends before Content-Length */
    bool head_method;       /* requests are HEAD: responses have no body */
    const char *body;       /* the fixed body (KServe payload, --data) or NULL */
    size_t body_len;
} load_target;

/* One request slot: an easy handle (its connection is reused) and the state of the request in it. */
typedef struct load_slot {
    CURL *h;
    struct load_engine *eng;
    int index;
    bool busy, measured;
    int64_t intended_ns, sent_ns, first_token_ns, last_token_ns, now_ns;
    int max_tokens;         /* requested output tokens (OpenAI) */
    int input_tokens;       /* estimate for the chosen prompt */
    kiln_strbuf req;        /* request body (OpenAI: built per request) */
    kiln_strbuf resp;       /* response body (non-streaming OpenAI, KServe) */
    size_t resp_bytes;      /* bytes received */
    kiln_sse sse;
    int64_t *tok_ns;        /* arrival time of each content chunk (streaming) */
    int ntok, tokcap;
    size_t content_bytes;   /* generated text bytes */
    int64_t usage_in, usage_out; /* from the server's usage block; -1 = not sent */
    bool done_marker;       /* "data: [DONE]" seen */
    bool malformed;
    char detail[200];       /* why a response was malformed */
    int64_t infer_header_len; /* KServe Inference-Header-Content-Length of the response, or -1 */
    /* native transport */
    int fd;                 /* the connection, -1 when none */
    bool connecting, reused, want_out;
    int addr_try, addr_index; /* for the connection being opened: addresses tried, the current one */
    int attempts;           /* sends of the current request (a dead kept-alive connection is retried once) */
    kiln_strbuf out;        /* head bytes of the current request */
    const char *body;       /* its body (not owned) */
    size_t body_len, sent;  /* bytes of head + body written so far */
    kiln_http1_parser parser;
} load_slot;

/* epoll event tags: data.u64 = (index << 2) | tag. */
enum { LOAD_TAG_TIMER = 0, LOAD_TAG_CURL = 1, LOAD_TAG_NATIVE = 2 };

/* One event loop: native connections and/or one curl multi handle, driven by epoll, on one thread.
 * With --threads N, each of N loops runs its share of a step (thread_index of threads): rate / N,
 * its part of the connections or concurrency and of --requests; only loop 0 scrapes /metrics and
 * prints progress. */
typedef struct load_engine {
    const kiln_load_config *cfg;
    load_target *tgt;
    int thread_index, threads;
    int preferred_addr;       /* native: the target's address that last accepted a connection */
    CURLM *multi;
    int epfd, tfd;
    int64_t curl_deadline_ns; /* -1: curl wants no timeout */
    int64_t armed_ns;         /* the deadline the timerfd is armed for (-1 none) */
    load_slot *slots;
    int nslots;
    int *free_slots;
    int nfree;
    kiln_rng rng;
    int next_prompt;
    /* the step being run */
    kiln_load_step *step;
    bool open_loop;
    int64_t t0_ns, window_start_ns, window_end_ns; /* window_end: INT64_MAX when bounded by count */
    int64_t first_ns;         /* open loop: this loop's first intended send (t0, offset among the loops) */
    int64_t next_ns;          /* next intended send (open loop) */
    double mean_gap_ns;
    int64_t issued;           /* requests scheduled so far, warm-up included */
    int64_t requests;         /* this loop's share of cfg->requests (0: bounded by duration only) */
    bool sched_done;
    int64_t sched_end_ns;     /* when scheduling stopped (open loop: the first unscheduled time) */
    int64_t *queue;           /* open loop backlog: intended times of requests waiting for a slot */
    int64_t qhead, qcount, qcap;
    int64_t last_done_ns;     /* latest completion of a measured request */
    /* /metrics scrape */
    CURL *scrape_h;
    bool scrape_busy;
    int64_t next_scrape_ns;
    kiln_strbuf scrape_body;
} load_engine;

/* ---- target (load_target.c) */
/* Resolves URLs, headers and payloads from cfg (fetching KServe metadata). */
kiln_status load_target_prepare(const kiln_load_config *cfg, load_target *t);
void load_target_free(load_target *t);

/* GET url (blocking, for set-up requests): the body into *body (cleared first), the status into
 * *status. Errors: KILN_ERR_IO naming the URL and curl's reason. */
kiln_status load_http_get(const char *url, const struct curl_slist *headers, double timeout_s, kiln_strbuf *body, long *status);

/* ---- protocols (proto_openai.c, proto_kserve.c) */
/* Builds the next OpenAI request for slot s into s->req (prompt and output length from the engine's
 * generator). */
void load_openai_build(load_engine *e, load_slot *s);
/* Consumes response bytes of an OpenAI request (SSE events when streaming, else buffered). */
void load_openai_body(load_slot *s, const char *data, size_t n);
/* Judges a finished 2xx OpenAI response: true when well-formed (then token counts are set); false
 * with s->detail saying why not. */
bool load_openai_finish(load_slot *s);
/* Fetches the KServe model metadata and builds the request payload into t->payload. */
kiln_status load_kserve_prepare(load_target *t, const char *metadata_url);
/* Judges a finished 2xx KServe response (JSON, or binary extension with a JSON header). */
bool load_kserve_finish(load_slot *s);

/* ---- native HTTP/1.1 transport (conn.c) */
/* Fills the target's request head and resolves the server's address (a failure is kept, not
 * returned: requests then fail with "resolve"). Errors: KILN_ERR_INVALID_ARGUMENT (not http://). */
kiln_status load_native_prepare(load_target *t, const char *url);
/* Sends slot s's request (s->body set), connecting first when the slot has no connection. */
void load_native_start(load_engine *e, load_slot *s);
/* Handles epoll events on slot s's connection. */
void load_native_event(load_engine *e, load_slot *s, uint32_t events);
/* Fails the requests that have run longer than the timeout. */
void load_native_timeouts(load_engine *e, int64_t now_ns);
/* Closes s's connection (if any). */
void load_native_close(load_engine *e, load_slot *s);

/* ---- the engine (engine.c) */
/* Consumes response body bytes of slot s (both transports; s->now_ns is their arrival time). */
void load_slot_body(load_slot *s, const char *data, size_t n);
/* Ends slot s's request: err < 0 when the transport delivered a complete response with `status`,
 * else a kiln_load_err with `detail`; records it and frees the slot. */
void load_engine_finish(load_engine *e, load_slot *s, int err, long status, const char *detail);
/* Prepares loop thread_index of `threads` with nslots connections (its share). */
kiln_status load_engine_init(load_engine *e, const kiln_load_config *cfg, load_target *t, int nslots, int thread_index,
                             int threads);
void load_engine_free(load_engine *e);
/* Runs this loop's share of one step into *step (allocated by the caller with load_step_init),
 * starting at t0_ns (the same for every loop of the step, so that their per-second series line
 * up): open loop at rate / threads when rate > 0 (constant spacing interleaved with the other
 * loops'), else closed loop with the loop's nslots requests in flight. */
kiln_status load_engine_run_step(load_engine *e, double rate, int64_t t0_ns, kiln_load_step *step);
int64_t load_now_ns(void);

/* ---- recording (record.c) */
kiln_status load_step_init(kiln_load_step *s);
void load_step_free(kiln_load_step *s);
/* Adds step `from` (one loop's share) into `into`: counts, histograms, per-second series; the
 * window and elapsed time are the longest, scrapes and the first error the first loop's that has
 * them. Errors: KILN_ERR_OUT_OF_MEMORY. */
kiln_status load_step_merge(kiln_load_step *into, const kiln_load_step *from);
/* Records the outcome of a finished request of slot s (measured or not) at time done_ns: err < 0
 * for a complete response with HTTP `status`, else a kiln_load_err described by `detail`. */
void load_record_done(load_engine *e, load_slot *s, int64_t done_ns, int err, long status, const char *detail);
/* The error kind of a failed curl transfer. */
kiln_load_err load_curl_error_kind(CURL *h, CURLcode rc);
/* Records a request that was never sent (still queued at the end of the run). */
void load_record_not_sent(load_engine *e, int64_t intended_ns);
/* Counts a send in the per-second series. */
void load_record_sent(load_engine *e, int64_t now_ns);

/* ---- server metrics (scrape.c) */
/* Starts a scrape of the target's metrics URL when one is due and none is in flight. */
void load_scrape_maybe_start(load_engine *e, int64_t now_ns);
/* Handles the end of a scrape transfer. */
void load_scrape_done(load_engine *e, CURLcode rc);
/* Parses Prometheus text exposition: mean and max over the samples whose metric name contains
 * `match` (case-insensitive), or a GPU-utilization name when match is NULL. Returns the number of
 * matching samples (0: none). */
int load_prometheus_scan(const char *text, size_t n, const char *match, double *mean, double *max);

#endif
