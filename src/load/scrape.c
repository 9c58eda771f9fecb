/* scrape.c — server-side metrics during a run: GET the server's Prometheus /metrics endpoint every
 * --scrape-interval on the same event loop as the load (one transfer at a time, never counted as
 * load), and keep, per scrape, the mean and max of the series of interest — by default GPU
 * utilization (a metric name containing "gpu" and "util", as DCGM's DCGM_FI_DEV_GPU_UTIL,
 * nvidia_gpu_utilization or kiln's own), or the names containing --metrics-match. */
#include "load/load_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Case-insensitive substring test on a name of n bytes. */
static bool name_has(const char *name, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        while (k < m && tolower((unsigned char)name[i + k]) == tolower((unsigned char)needle[k])) k++;
        if (k == m) return true;
    }
    return false;
}

int load_prometheus_scan(const char *text, size_t n, const char *match, double *mean, double *max) {
    double sum = 0, mx = -INFINITY;
    int count = 0;
    size_t pos = 0;
    while (pos < n) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - line) : n - pos;
        pos += len + 1;
        size_t i = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == len || line[i] == '#') continue;
        size_t name_start = i;
        while (i < len && line[i] != '{' && line[i] != ' ' && line[i] != '\t') i++;
        size_t name_len = i - name_start;
        if (i < len && line[i] == '{') { /* skip labels; values are quoted and may hold '}' */
            bool quoted = false;
            for (i++; i < len; i++) {
                if (quoted && line[i] == '\\') i++;
                else if (line[i] == '"') quoted = !quoted;
                else if (!quoted && line[i] == '}') break;
            }
            i++;
        }
        const char *name = line + name_start;
        bool keep = match ? name_has(name, name_len, match) : name_has(name, name_len, "gpu") && name_has(name, name_len, "util");
        if (!keep || i >= len) continue;
        char num[64];
        while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
        size_t k = 0;
        while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && k + 1 < sizeof num) num[k++] = line[i++];
        num[k] = '\0';
        char *end;
        double v = strtod(num, &end);
        if (k == 0 || *end || !isfinite(v)) continue;
        sum += v;
        if (v > mx) mx = v;
        count++;
    }
    if (count) {
        *mean = sum / count;
        *max = mx;
    }
    return count;
}

/* Body sink of the scrape transfer. */
static size_t scrape_sink(char *data, size_t size, size_t nmemb, void *userp) {
    kiln_strbuf_append(userp, data, size * nmemb);
    return size * nmemb;
}

void load_scrape_maybe_start(load_engine *e, int64_t now_ns) {
    if (!e->tgt->metrics_url[0] || e->thread_index != 0 || e->scrape_busy || now_ns < e->next_scrape_ns) return;
    if (!e->scrape_h) {
        e->scrape_h = curl_easy_init();
        if (!e->scrape_h) return;
        curl_easy_setopt(e->scrape_h, CURLOPT_URL, e->tgt->metrics_url);
        curl_easy_setopt(e->scrape_h, CURLOPT_WRITEFUNCTION, scrape_sink);
        curl_easy_setopt(e->scrape_h, CURLOPT_WRITEDATA, &e->scrape_body);
        curl_easy_setopt(e->scrape_h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e->scrape_h, CURLOPT_TIMEOUT_MS, 5000L);
    }
    kiln_strbuf_clear(&e->scrape_body);
    e->next_scrape_ns = now_ns + (int64_t)(e->cfg->scrape_interval_s * 1e9);
    if (curl_multi_add_handle(e->multi, e->scrape_h) == CURLM_OK) e->scrape_busy = true;
}

void load_scrape_done(load_engine *e, CURLcode rc) {
    kiln_load_step *st = e->step;
    e->scrape_busy = false;
    long status = 0;
    curl_easy_getinfo(e->scrape_h, CURLINFO_RESPONSE_CODE, &status);
    double mean = 0, max = 0;
    int n = 0;
    if (rc == CURLE_OK && status == 200 && kiln_strbuf_status(&e->scrape_body) == KILN_OK)
        n = load_prometheus_scan(e->scrape_body.data ? e->scrape_body.data : "", e->scrape_body.len, e->cfg->metrics_match, &mean, &max);
    if (rc != CURLE_OK || status != 200) {
        st->scrape_failures++;
        return;
    }
    if (n == 0) return; /* reachable, but no matching series: nothing to plot */
    kiln_load_scrape *sc = realloc(st->scrapes, (size_t)(st->nscrapes + 1) * sizeof *sc);
    if (!sc) return;
    st->scrapes = sc;
    sc[st->nscrapes++] = (kiln_load_scrape){.t_s = (double)(load_now_ns() - e->t0_ns) / 1e9, .mean = mean, .max = max, .nseries = n};
}
