/* load.h — kiln load: an open-loop load generator for inference servers (OpenAI completions and
 * chat, KServe v2, plain HTTP). This header is what the `kiln load` command uses: the configuration
 * (filled by the parsers of load_parse.c), running one measurement or a sweep, the results, and the
 * writers (console summary, JSON, CSV, HTML report, comparison of two JSON results).
 *
 * Measurement rules (docs/load.md explains them for users):
 *  - Open loop (--rate): request k has an intended send time t_k (constant spacing or Poisson
 *    arrivals); its latency is measured from t_k, not from when it could actually be sent, so a
 *    server stall shows in the latency of every request scheduled during it (no coordinated
 *    omission). A request sent more than KILN_LOAD_LATE_US after t_k is counted as late.
 *  - Closed loop (--concurrency N): N requests in flight; each is timed from its actual send.
 *  - A step = warm-up (recorded nowhere) + measured window; a request belongs to the phase its
 *    intended (open) or actual (closed) send time falls in. After the window, in-flight measured
 *    requests are waited for (up to the request timeout).
 *  - All latencies are in microseconds in lossless log-linear histograms (stats/histogram.h).
 */
#ifndef KILN_LOAD_LOAD_H
#define KILN_LOAD_LOAD_H

#include "kiln/kiln.h"
#include "load/prompts.h"
#include "stats/histogram.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define KILN_LOAD_LATE_US 1000   /* a request sent later than this after its intended time is late */
#define KILN_LOAD_MAX_STEPS 64   /* values in one sweep */
#define KILN_LOAD_MAX_STOPS 8    /* conditions in one --stop-when */
#define KILN_LOAD_MAX_HEADERS 32
#define KILN_LOAD_MAX_INPUTS 32  /* --input NAME=FILE.npy / --shape NAME=DIMS */
#define KILN_LOAD_MAX_THREADS 64 /* --threads */

typedef enum kiln_load_api {
    KILN_LOAD_API_HTTP,
    KILN_LOAD_API_OPENAI_CHAT,
    KILN_LOAD_API_OPENAI_COMPLETIONS,
    KILN_LOAD_API_KSERVE,
} kiln_load_api;

/* The latency metrics recorded per request. */
typedef enum kiln_load_metric {
    KILN_METRIC_E2E,  /* intended send -> last byte */
    KILN_METRIC_TTFT, /* intended send -> first content token (streaming) */
    KILN_METRIC_ITL,  /* between consecutive content chunks (streaming; one sample per gap) */
    KILN_METRIC_TPOT, /* (last token - first token) / (output tokens - 1) per request (streaming) */
    KILN_METRIC_LAG,  /* actual send - intended send (how late the generator was) */
    KILN_METRIC_COUNT
} kiln_load_metric;

/* How a request failed. */
typedef enum kiln_load_err {
    KILN_LOADERR_HTTP,      /* a non-2xx status (see status_counts) */
    KILN_LOADERR_REFUSED,   /* connection refused */
    KILN_LOADERR_TIMEOUT,   /* no complete response within --timeout */
    KILN_LOADERR_RESOLVE,   /* host name did not resolve */
    KILN_LOADERR_CONNECT,   /* other connection failures (unreachable, TLS) */
    KILN_LOADERR_CLOSED,    /* the server closed or reset the connection mid-request */
    KILN_LOADERR_MALFORMED, /* a 2xx response kiln load could not make sense of */
    KILN_LOADERR_NOT_SENT,  /* still queued when the run ended (the server never freed a slot) */
    KILN_LOADERR_OTHER,
    KILN_LOADERR_COUNT
} kiln_load_err;

/* How requests travel: kiln's own HTTP/1.1 client on epoll (plain http://, the fastest), or libcurl
 * (https:// and anything else). AUTO picks native for http:// and curl for https://. */
typedef enum kiln_load_transport { KILN_TRANSPORT_AUTO, KILN_TRANSPORT_NATIVE, KILN_TRANSPORT_CURL } kiln_load_transport;

typedef enum kiln_sweep_kind { KILN_SWEEP_NONE, KILN_SWEEP_RATE, KILN_SWEEP_CONCURRENCY } kiln_sweep_kind;

/* One --stop-when condition: metric percentile > threshold (µs), or error rate > threshold. */
typedef struct kiln_load_stop {
    bool error_rate;         /* "errors>1%": fraction of measured requests that failed */
    kiln_load_metric metric; /* latency conditions */
    double percentile;       /* 0..100; 100 = max; -1 = mean */
    double threshold;        /* µs, or a fraction for error_rate */
} kiln_load_stop;

typedef struct kiln_load_config {
    const char *url;  /* server root (http://host:port) or a full endpoint URL */
    kiln_load_api api;
    kiln_load_transport transport;
    const char *model;     /* OpenAI "model" / KServe model name */
    const char *model_version; /* KServe: optional version */
    bool stream;           /* OpenAI: stream over SSE */
    bool ignore_eos;       /* OpenAI: add "ignore_eos": true so outputs have the requested length */
    const char *extra_json; /* OpenAI: extra members merged into each request ("{...}") */
    /* plain HTTP */
    const char *method;    /* NULL: GET, or POST when there is a body */
    const char *body;      /* request body (owned by the caller), body_len bytes */
    size_t body_len;
    const char *headers[KILN_LOAD_MAX_HEADERS]; /* "Name: value" */
    int nheaders;
    /* load model */
    double rate;           /* open loop, requests/s (> 0), or 0 for closed loop */
    bool poisson;          /* Poisson arrivals instead of constant spacing */
    int concurrency;       /* closed loop: requests in flight */
    int connections;       /* open loop: most requests in flight (connection pool size) */
    int threads;           /* event loops (threads) sharing the connections and the rate (default 1) */
    double duration_s;     /* measured window (0 = bounded by `requests` only) */
    int64_t requests;      /* measured requests (0 = bounded by duration only) */
    double warmup_s;
    double timeout_s;      /* per request */
    uint64_t seed;
    /* sweep */
    kiln_sweep_kind sweep;
    double sweep_values[KILN_LOAD_MAX_STEPS];
    int nsweep;
    kiln_load_stop stops[KILN_LOAD_MAX_STOPS];
    int nstops;
    /* SLO and capacity planning (µs; 0 = not part of the SLO) */
    int64_t slo_ttft_us, slo_tpot_us, slo_e2e_us, slo_itl_us;
    double goodput_share;  /* a step meets the SLO when good / scheduled >= this (default 0.99) */
    double target_rate;    /* requests/s the fleet must sustain (0 = not asked) */
    /* payload */
    kiln_len_dist input_len, output_len;
    const char *prompts_path; /* JSONL; NULL = synthetic */
    int nprompts;          /* synthetic prompts to pre-generate */
    /* KServe */
    bool kserve_binary;    /* binary tensor data extension */
    char input_names[KILN_LOAD_MAX_INPUTS][128];
    const char *input_files[KILN_LOAD_MAX_INPUTS]; /* point into the --input argument */
    int ninputs;
    char shape_names[KILN_LOAD_MAX_INPUTS][128];
    int64_t shape_dims[KILN_LOAD_MAX_INPUTS][8];
    int shape_ndims[KILN_LOAD_MAX_INPUTS];
    int nshapes;
    /* server metrics */
    const char *metrics_url;  /* NULL = no scrape */
    const char *metrics_match; /* substring of metric names to keep (case-insensitive); NULL = GPU util */
    double scrape_interval_s;
    bool progress;         /* one status line per second on stderr */
} kiln_load_config;

/* Fills the defaults (closed loop 1, 10 s, warm-up 1 s, timeout 60 s, input 128, output 128, ...). */
void kiln_load_config_defaults(kiln_load_config *c);

/* One second of a step (from the step's start, warm-up included). */
typedef struct kiln_load_tick {
    int64_t sent, ok, failed;
    double e2e_sum_us;
    int64_t e2e_max_us;
    int64_t out_tokens;
} kiln_load_tick;

/* One scrape of the server's /metrics: the matching series' mean and max. */
typedef struct kiln_load_scrape {
    double t_s;  /* seconds from the step's start */
    double mean, max;
    int nseries;
} kiln_load_scrape;

/* The result of one measured window. */
typedef struct kiln_load_step {
    bool open_loop, poisson;
    double rate;           /* open loop: scheduled requests/s */
    int concurrency;       /* closed loop */
    double warmup_s, window_s; /* window_s: planned measured window (open loop: scheduled span) */
    double elapsed_s;      /* window start -> last measured completion */
    int64_t scheduled;     /* measured requests scheduled (open) or started (closed) */
    int64_t sent, ok, failed, late, warmup_requests;
    int64_t err[KILN_LOADERR_COUNT];
    int64_t status_counts[600]; /* HTTP status of failed requests */
    kiln_hist *hist[KILN_METRIC_COUNT];
    int64_t in_tokens, out_tokens;
    int64_t window_ok, window_out_tokens; /* good responses (warm-up ones too) completed inside the measured
                                  window, and their output tokens: what the server delivered in that time */
    int64_t tokens_from_usage, tokens_estimated; /* requests whose counts came from usage / estimate */
    int64_t good;          /* ok and within every SLO term */
    kiln_load_tick *ticks;
    int nticks;
    kiln_load_scrape *scrapes;
    int nscrapes;
    int64_t scrape_failures;
    char first_error[256]; /* the first failure, with detail (for the console) */
    bool stopped;          /* the stop rule fired after this step */
    char stop_reason[128];
} kiln_load_step;

typedef struct kiln_load_result {
    kiln_load_step *steps;
    int nsteps;
    const char *token_source; /* "usage", "estimated", "usage and estimated" or "none" */
    /* capacity planning (a sweep or a single run with an SLO) */
    bool have_capacity;
    int capacity_step;     /* index of the best step within the SLO, -1 if none */
    double capacity_rate;  /* requests/s one server sustains within the SLO */
    int servers_needed;    /* for target_rate; 0 when not asked or no step met the SLO */
    char endpoint[2048];   /* the request URL used */
    char model[256];       /* the model name used ("" for plain HTTP) */
    const char *transport; /* "native" or "curl" */
    char started_at[32];   /* UTC, ISO 8601 */
} kiln_load_result;

/* Runs the configured measurement: one step, or a sweep (stopping after the first step that trips
 * the stop rule). Prepares first (KServe metadata and inputs, prompts) and fails before sending load
 * when that fails. Request failures are results, not errors. On success *out owns the result (free
 * with kiln_load_result_free). Errors: KILN_ERR_INVALID_ARGUMENT (an inconsistent configuration or
 * URL), KILN_ERR_IO (a file; KServe metadata unreachable), KILN_ERR_PARSE, KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_load_run(const kiln_load_config *cfg, kiln_load_result **out);
void kiln_load_result_free(kiln_load_result *r);

/* Whether request i of a step met the SLO is decided by the engine; this says whether a step did:
 * good / scheduled >= goodput_share (and at least one request was scheduled). */
bool kiln_load_step_meets_slo(const kiln_load_config *cfg, const kiln_load_step *s);
/* Goodput share of a step: good / scheduled (0 when nothing was scheduled). */
double kiln_load_step_goodput(const kiln_load_step *s);
/* A step's rates (per second): scheduled and sent over the measured window; completed (ok),
 * good (within the SLO) and output tokens over window start -> last completion (or the window,
 * when that is longer); window_completed and window_out_tokens over the window: the server's steady
 * rates (the others also count the drain after the window, when the server runs below them: with
 * requests of seconds, as LLM streams are, they fall well short of the rate the server sustained). */
typedef struct kiln_load_rates {
    double scheduled, sent, completed, good, out_tokens, window_completed, window_out_tokens;
} kiln_load_rates;
void kiln_load_step_rates(const kiln_load_step *s, kiln_load_rates *out);

/* The percentiles every report shows, and their labels ("p50", ..., "p99.9"). */
#define KILN_LOAD_NPCT 5
extern const double kiln_load_pcts[KILN_LOAD_NPCT];
extern const char *const kiln_load_pct_names[KILN_LOAD_NPCT];

/* Percentile p (0..100) of a latency histogram in µs: HdrHistogram's value (the highest equivalent
 * value of the bucket holding rank ceil(p/100 N)), capped at the exact maximum so that no
 * percentile reads above the largest recorded value. 0 for an empty histogram. */
int64_t kiln_load_pct_us(const kiln_hist *h, double p);

/* Whether the configuration has any SLO term. */
bool kiln_load_has_slo(const kiln_load_config *cfg);

/* Printable names. */
const char *kiln_load_api_name(kiln_load_api a);
const char *kiln_load_metric_name(kiln_load_metric m);
const char *kiln_load_err_name(kiln_load_err e);

/* The console summary (LoadGen-like): scenario, scheduled vs completed rate, percentiles, errors,
 * SLO verdict, capacity. */
void kiln_load_print_summary(const kiln_load_config *cfg, const kiln_load_result *r, FILE *f);
/* Result files. Errors: KILN_ERR_IO naming the path, KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_load_write_json(const kiln_load_config *cfg, const kiln_load_result *r, const char *path);
kiln_status kiln_load_write_csv(const kiln_load_config *cfg, const kiln_load_result *r, const char *path);
kiln_status kiln_load_write_html(const kiln_load_config *cfg, const kiln_load_result *r, const char *path);
/* `kiln load compare A.json B.json`: both runs side by side, step by step, with B's change from A.
 * Errors: KILN_ERR_IO, KILN_ERR_PARSE (not a kiln load result). */
kiln_status kiln_load_compare(const char *path_a, const char *path_b, FILE *f);

/* ------------------------------------------------------------------ argument parsers (load_parse.c)
 * Each fails with KILN_ERR_INVALID_ARGUMENT and a message naming the text and the accepted form. */
/* "250ms", "2s", "1.5m", "800us", or a bare number of seconds, into µs (> 0). */
kiln_status kiln_load_parse_duration_us(const char *text, int64_t *out);
/* "openai-chat", "openai-completions" (or "openai"), "kserve", "http". */
kiln_status kiln_load_parse_api(const char *text, kiln_load_api *out);
/* "auto", "native", "curl". */
kiln_status kiln_load_parse_transport(const char *text, kiln_load_transport *out);
/* "ttft=200ms,tpot=50ms,e2e=2s,itl=100ms" into the cfg's slo_* fields (any subset). */
kiln_status kiln_load_parse_slo(const char *text, kiln_load_config *cfg);
/* "rate=10,20,40" or "concurrency=1,2,4" into the cfg's sweep fields. */
kiln_status kiln_load_parse_sweep(const char *text, kiln_load_config *cfg);
/* "p99>500ms", "ttft_p99>200ms", "tpot_p50>40ms", "e2e_max>5s", "errors>1%" (comma-separated,
 * any of them stops the sweep) into the cfg's stops. */
kiln_status kiln_load_parse_stop(const char *text, kiln_load_config *cfg);
/* "NAME=1x3x224x224" (KServe shape override) appended to the cfg. */
kiln_status kiln_load_parse_shape(const char *text, kiln_load_config *cfg);
/* "NAME=FILE.npy" (KServe input from a file) appended to the cfg; the file name points into text. */
kiln_status kiln_load_parse_input(const char *text, kiln_load_config *cfg);

#endif
