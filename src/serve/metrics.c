/* metrics.c — the server's Prometheus counters and histograms (contract in metrics.h). */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { COUNTER, HISTOGRAM };

static const double SECONDS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                 0.25,   0.5,   1,      2.5,   5,     10,    30,    60};
static const double STAGE_SECONDS[] = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                       0.01,    0.025,    0.05,    0.1,    0.25,    0.5,    1,     2.5,    10};
static const double TOKENS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
static const double ROWS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

typedef struct metric_family {
    const char *name, *help;
    int type;
    const double *bounds;
    int n_bounds;
} metric_family;

static const metric_family FAMILIES[] = {
    {"kiln_requests_total", "Requests answered, by model, version and HTTP status.", COUNTER, NULL, 0},
    {"kiln_prompt_tokens_total", "Prompt tokens processed.", COUNTER, NULL, 0},
    {"kiln_generation_tokens_total", "Tokens generated.", COUNTER, NULL, 0},
    {"kiln_request_duration_seconds", "End-to-end request latency in the server.", HISTOGRAM, SECONDS, N_OF(SECONDS)},
    {"kiln_request_stage_duration_seconds",
     "A tensor inference's time by stage (receive, parse, queue, input, compute, output); they add up to "
     "kiln_request_duration_seconds.", HISTOGRAM, STAGE_SECONDS, N_OF(STAGE_SECONDS)},
    {"kiln_queue_duration_seconds", "Time a request waited before its first run.", HISTOGRAM, SECONDS, N_OF(SECONDS)},
    {"kiln_compute_duration_seconds", "Time of the run (tensor models) or of generation after the queue (LLMs).",
     HISTOGRAM, SECONDS, N_OF(SECONDS)},
    {"kiln_batch_size", "Rows per run of the dynamic batcher (one sample per run).", HISTOGRAM, ROWS, N_OF(ROWS)},
    {"kiln_time_to_first_token_seconds", "Time to the first generated token.", HISTOGRAM, SECONDS, N_OF(SECONDS)},
    {"kiln_inter_token_latency_seconds", "Time between consecutive streamed token events.", HISTOGRAM, SECONDS,
     N_OF(SECONDS)},
    {"kiln_request_prompt_tokens", "Prompt tokens per request.", HISTOGRAM, TOKENS, N_OF(TOKENS)},
    {"kiln_request_generation_tokens", "Generated tokens per request.", HISTOGRAM, TOKENS, N_OF(TOKENS)},
};
#define N_FAMILIES N_OF(FAMILIES)

typedef struct series {
    int family;
    char *labels;
    double value;  /* counter value, or histogram sum */
    uint64_t count;
    uint64_t *buckets; /* histogram: [n_bounds], not cumulative */
} series;

struct serve_metrics {
    pthread_mutex_t mu;
    series *s;
    int n, cap;
};

serve_metrics *serve_metrics_create(void) {
    serve_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void serve_metrics_free(serve_metrics *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free(m->s[i].labels), free(m->s[i].buckets);
    free(m->s);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int family_index(const char *name) {
    for (int f = 0; f < N_FAMILIES; f++)
        if (!strcmp(FAMILIES[f].name, name)) return f;
    return -1;
}

/* The series (created when missing); NULL on an unknown family or out of memory. Holds the mutex. */
static series *find(serve_metrics *m, const char *name, const char *labels, bool create) {
    int f = family_index(name);
    if (f < 0) return NULL;
    for (int i = 0; i < m->n; i++)
        if (m->s[i].family == f && !strcmp(m->s[i].labels, labels)) return &m->s[i];
    if (!create) return NULL;
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 32;
        series *grown = realloc(m->s, sizeof(series) * (size_t)cap);
        if (!grown) return NULL;
        m->s = grown;
        m->cap = cap;
    }
    series *s = &m->s[m->n];
    *s = (series){.family = f, .labels = strdup(labels)};
    if (FAMILIES[f].type == HISTOGRAM) s->buckets = calloc((size_t)FAMILIES[f].n_bounds, sizeof(uint64_t));
    if (!s->labels || (FAMILIES[f].type == HISTOGRAM && !s->buckets)) {
        free(s->labels), free(s->buckets);
        return NULL;
    }
    m->n++;
    return s;
}

void serve_metrics_add(serve_metrics *m, const char *family, const char *labels, double v) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, family, labels, true);
    if (s) s->value += v;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_observe(serve_metrics *m, const char *family, const char *labels, double v) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, family, labels, true);
    if (s && s->buckets) {
        const metric_family *f = &FAMILIES[s->family];
        int b = 0;
        while (b < f->n_bounds && v > f->bounds[b]) b++;
        if (b < f->n_bounds) s->buckets[b]++;
        s->count++;
        s->value += v;
    }
    pthread_mutex_unlock(&m->mu);
}

double serve_metrics_value(serve_metrics *m, const char *family, const char *labels) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, family, labels, false);
    double v = s ? s->value : 0;
    pthread_mutex_unlock(&m->mu);
    return v;
}

int serve_metrics_histogram(serve_metrics *m, const char *family, const char *labels, uint64_t *counts, double *bounds,
                            int n, double *sum, uint64_t *count) {
    pthread_mutex_lock(&m->mu);
    series *s = find(m, family, labels, false);
    int written = 0;
    if (s && s->buckets) {
        const metric_family *f = &FAMILIES[s->family];
        uint64_t below = 0;
        for (; written < n && written < f->n_bounds; written++) {
            counts[written] = s->buckets[written];
            below += s->buckets[written];
            if (bounds) bounds[written] = f->bounds[written];
        }
        if (written < n && written == f->n_bounds) {
            counts[written] = s->count - below;
            if (bounds) bounds[written] = 0;
            written++;
        }
        *sum = s->value;
        *count = s->count;
    }
    pthread_mutex_unlock(&m->mu);
    return written;
}

void serve_metrics_render(serve_metrics *m, kiln_strbuf *out) {
    pthread_mutex_lock(&m->mu);
    for (int f = 0; f < N_FAMILIES; f++) {
        const metric_family *fam = &FAMILIES[f];
        kiln_strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help, fam->name,
                           fam->type == COUNTER ? "counter" : "histogram");
        for (int i = 0; i < m->n; i++) {
            const series *s = &m->s[i];
            if (s->family != f) continue;
            const char *sep = s->labels[0] ? "," : "";
            if (fam->type == COUNTER) {
                kiln_strbuf_printf(out, "%s{%s} %.17g\n", fam->name, s->labels, s->value);
                continue;
            }
            uint64_t cumulative = 0;
            for (int b = 0; b < fam->n_bounds; b++) {
                cumulative += s->buckets[b];
                kiln_strbuf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", fam->name, s->labels, sep, fam->bounds[b],
                                   (unsigned long long)cumulative);
            }
            kiln_strbuf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", fam->name, s->labels, sep,
                               (unsigned long long)s->count);
            kiln_strbuf_printf(out, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", fam->name, s->labels, s->value, fam->name,
                               s->labels, (unsigned long long)s->count);
        }
    }
    pthread_mutex_unlock(&m->mu);
}

static size_t put_escaped(char *buf, size_t at, size_t size, const char *s) {
    for (; *s && at + 3 < size; s++) {
        if (*s == '\\' || *s == '"') buf[at++] = '\\', buf[at++] = *s;
        else if (*s == '\n') buf[at++] = '\\', buf[at++] = 'n';
        else buf[at++] = *s;
    }
    return at;
}

void serve_metrics_labels(char *buf, size_t size, const char *model, const char *version) {
    size_t at = 0;
    static const char M[] = "model=\"", V[] = "\",version=\"";
    if (size < sizeof M + sizeof V + 2) {
        if (size) buf[0] = 0;
        return;
    }
    memcpy(buf, M, sizeof M - 1), at = sizeof M - 1;
    at = put_escaped(buf, at, size - sizeof V - 2, model);
    memcpy(buf + at, V, sizeof V - 1), at += sizeof V - 1;
    at = put_escaped(buf, at, size - 2, version);
    buf[at++] = '"';
    buf[at] = 0;
}

void serve_metrics_record_run(serve_metrics *m, const char *model, const char *version, double queue_s,
                              double compute_s, int batch_rows) {
    char labels[400];
    serve_metrics_labels(labels, sizeof labels, model, version);
    serve_metrics_observe(m, "kiln_queue_duration_seconds", labels, queue_s);
    serve_metrics_observe(m, "kiln_compute_duration_seconds", labels, compute_s);
    if (batch_rows > 0) serve_metrics_observe(m, "kiln_batch_size", labels, batch_rows);
}

void serve_metrics_record_stages(serve_metrics *m, const char *labels, const char *const *stage_names,
                                 const double *stage_us, int n) {
    char with_stage[480];
    for (int k = 0; k < n; k++) {
        snprintf(with_stage, sizeof with_stage, "%s%sstage=\"%s\"", labels, labels[0] ? "," : "", stage_names[k]);
        serve_metrics_observe(m, "kiln_request_stage_duration_seconds", with_stage, stage_us[k] / 1e6);
    }
}
