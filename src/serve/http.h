/* http.h — what the endpoint handlers of `kiln serve` share: the server, one request's state, and
 * the helpers that answer it (JSON bodies, KServe and OpenAI error shapes). Handlers run on the
 * connection's own thread (libmicrohttpd's thread-per-connection mode), so they may block. */
#ifndef KILN_SERVE_HTTP_H
#define KILN_SERVE_HTTP_H

#include "serve/auth.h"
#include "serve/metrics.h"
#include "serve/repo.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct serve_server {
    serve_repo *repo;
    serve_metrics *metrics;
    serve_auth auth;
    bool open_health;         /* the health endpoints, /metrics and / need no key */
    size_t max_body_bytes;
    double drain_timeout_s;
    FILE *access_log;         /* NULL: none */
    pthread_mutex_t log_mu;
    volatile bool draining;   /* SIGTERM came: new requests get 503, readiness is false */
    volatile bool stopping;   /* the drain deadline passed: handlers waiting on generation give up */
    double started_s;         /* wall-clock start, for the status page */
    pthread_mutex_t active_mu;
    int active;               /* requests being answered */
    int64_t rate_second[60];  /* requests completed per wall-clock second, ring of the last minute */
    uint32_t rate_count[60];
} serve_server;

/* The stages of a tensor inference as /metrics (kiln_request_stage_duration_seconds) and the access
 * log show them, in the order they follow one another; their durations add up to the request's. */
enum {
    SERVE_STAGE_RECEIVE, /* the request's headers to the last byte of its body */
    SERVE_STAGE_PARSE,   /* dispatch, keys, the body parsed and checked against the model, until queued */
    SERVE_STAGE_QUEUE,   /* queued until an instance takes its batch */
    SERVE_STAGE_INPUT,   /* the batch's inputs copied into the page-locked staging (or bound where they landed) */
    SERVE_STAGE_COMPUTE, /* the batch's run: uploads, computation, downloads */
    SERVE_STAGE_OUTPUT,  /* outputs split, the response built and sent */
    SERVE_STAGES
};
extern const char *const SERVE_STAGE_NAMES[SERVE_STAGES];

typedef struct serve_conn {
    serve_server *srv;
    struct MHD_Connection *mhd;
    const char *method;
    const char *url;
    char *body;               /* the body as received (only its JSON header when its binary part lands) */
    size_t body_len, body_cap;
    char *landing;            /* where the binary part of a KServe body lands (the model's landing memory), or NULL */
    size_t landing_json;      /* its JSON header's length (Inference-Header-Content-Length) */
    size_t landing_len, landing_got; /* the binary part's announced bytes, and those received */
    serve_version *landing_v; /* the model version whose landing memory holds it (acquired) */
    bool too_large;
    bool counted;             /* counted in srv->active */
    double t_start_us;
    double t_body_us;         /* the body's last byte arrived (the request was dispatched) */
    bool ran;                 /* a tensor inference that ran: queued_us... below are its timeline */
    double queued_us, run_start_us, inputs_joined_us, run_done_us;
    int status;               /* the status answered (0: none yet) */
    size_t bytes_out;
    char model[SERVE_NAME_MAX];
    char version[32];
    serve_key *key;           /* the caller's key (NULL: keys not required) */
    void *stream;             /* an LLM request answered by a content reader (openai.c) */
    void (*stream_free)(void *stream, bool completed);
    char headers[4][2][64];   /* extra response headers (serve_add_header) */
    int n_headers;
} serve_conn;

/* Queues a response with a copy of body; records the status. Returns MHD_YES or MHD_NO. */
enum MHD_Result serve_reply(serve_conn *c, int status, const char *content_type, const void *body, size_t len);
/* Prints json (unformatted), frees it and answers with it. */
enum MHD_Result serve_reply_json(serve_conn *c, int status, cJSON *json);
/* KServe's error shape: {"error": "message"}. */
enum MHD_Result serve_reply_error(serve_conn *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Adds a response header to the next serve_reply* of this request (e.g. Retry-After); up to 4. */
void serve_add_header(serve_conn *c, const char *name, const char *value);
/* A request header's value, or NULL. */
const char *serve_header(serve_conn *c, const char *name);
/* true when the client has closed its side of the connection (checked without reading). */
bool serve_client_gone(serve_conn *c);
/* serve_client_gone with the connection as a void pointer (a serve_infer's client_gone). */
bool serve_client_gone_arg(void *conn);
/* Remembers the model and version of the request for the access log and metrics. */
void serve_conn_set_model(serve_conn *c, const char *model, const char *version);
double serve_now_us(void);
/* Requests completed in each of the last n (<= 60) whole seconds, oldest first. */
void serve_rate_history(serve_server *s, double *per_second, int n);

/* At a request's start (its headers read, its body not yet): for a KServe binary inference of a
 * model with landing memory, reserves room there for the binary part of the body (Content-Length
 * `announced` minus Inference-Header-Content-Length), so that it is received straight into it
 * (c->landing); nothing otherwise. on_completed gives it back (serve_kserve_landing_release). */
void serve_kserve_landing(serve_conn *c, size_t announced);
void serve_kserve_landing_release(serve_conn *c);

/* Endpoint families: each answers the request (returns MHD_YES/MHD_NO as MHD's handler does). */
enum MHD_Result serve_kserve(serve_conn *c);       /* /v2... */
enum MHD_Result serve_openai(serve_conn *c);       /* /v1... */
enum MHD_Result serve_metrics_page(serve_conn *c); /* /metrics */
enum MHD_Result serve_status_page(serve_conn *c);  /* / */
/* NVML's GPU gauges (utilization, memory, power, temperature) in Prometheus text, when
 * libnvidia-ml.so.1 can be opened at run time; nothing otherwise. */
void serve_gpu_metrics(kiln_strbuf *out);
/* Whether the server is ready: not draining, and every loaded model's engines alive (LLM engine
 * loops' heartbeats recent). */
bool serve_ready(serve_server *s);

#endif
