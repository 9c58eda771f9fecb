/* server.c — the HTTP side of `kiln serve`: libmicrohttpd in thread-per-connection mode, request
 * bodies gathered under a size limit, keys and rate limits checked, endpoints dispatched, one JSON
 * access-log line and the request metrics written when each request completes, and the graceful
 * drain on SIGTERM (stop accepting, let requests in flight finish within the deadline, exit 0). */
#include "serve/http.h"
#include "serve/serve.h"

#include "core/log.h"
#include "core/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Each connection's memory pool (headers and the read buffer) is the setting connection_memory_bytes:
 * libmicrohttpd's default of 32 KiB hands a body of megabytes (binary tensors) to on_request in
 * hundreds of small pieces; 256 KiB reads it in pieces of about 100 KB (the server spent about a
 * third less CPU per 4.8 MB request). Larger costs every request: libmicrohttpd zeroes the whole
 * pool between the requests of a connection. The read buffer grows in steps of an eighth of it. */

const char *const SERVE_STAGE_NAMES[SERVE_STAGES] = {"receive", "parse", "queue", "input", "compute", "output"};

double serve_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

enum MHD_Result serve_reply(serve_conn *c, int status, const char *content_type, const void *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    for (int i = 0; i < c->n_headers; i++) MHD_add_response_header(r, c->headers[i][0], c->headers[i][1]);
    enum MHD_Result ok = MHD_queue_response(c->mhd, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    c->bytes_out = len;
    return ok;
}

enum MHD_Result serve_reply_json(serve_conn *c, int status, cJSON *json) {
    char *text = json ? cJSON_PrintUnformatted(json) : NULL;
    cJSON_Delete(json);
    if (!text) return serve_reply(c, 500, "application/json", "{\"error\":\"out of memory\"}", 25);
    enum MHD_Result ok = serve_reply(c, status, "application/json", text, strlen(text));
    cJSON_free(text);
    return ok;
}

enum MHD_Result serve_reply_error(serve_conn *c, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", msg);
    return serve_reply_json(c, status, j);
}

void serve_add_header(serve_conn *c, const char *name, const char *value) {
    if (c->n_headers == 4) return;
    snprintf(c->headers[c->n_headers][0], 64, "%s", name);
    snprintf(c->headers[c->n_headers][1], 64, "%s", value);
    c->n_headers++;
}

const char *serve_header(serve_conn *c, const char *name) {
    return MHD_lookup_connection_value(c->mhd, MHD_HEADER_KIND, name);
}

bool serve_client_gone(serve_conn *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c->mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return true;
    struct pollfd p = {.fd = info->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

bool serve_client_gone_arg(void *conn) { return serve_client_gone(conn); }

void serve_conn_set_model(serve_conn *c, const char *model, const char *version) {
    snprintf(c->model, sizeof c->model, "%s", model ? model : "");
    snprintf(c->version, sizeof c->version, "%s", version ? version : "");
}

void serve_rate_history(serve_server *s, double *per_second, int n) {
    int64_t now = (int64_t)time(NULL);
    pthread_mutex_lock(&s->active_mu);
    for (int i = 0; i < n; i++) {
        int64_t second = now - n + i;
        int slot = (int)(second % 60);
        per_second[i] = s->rate_second[slot] == second ? s->rate_count[slot] : 0;
    }
    pthread_mutex_unlock(&s->active_mu);
}

/* An error in the shape of the endpoint family: OpenAI's under /v1, KServe's elsewhere. */
static enum MHD_Result reply_family_error(serve_conn *c, int status, const char *type, const char *msg) {
    if (strncmp(c->url, "/v1/", 4)) return serve_reply_error(c, status, "%s", msg);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return serve_reply_json(c, status, j);
}

static bool is_open_path(const char *url) {
    return !strncmp(url, "/v2/health/", 11) || !strcmp(url, "/metrics") || !strcmp(url, "/");
}

/* Whether c may hold the server's shared resources before its body is whole (the landing memory of
 * binary tensors): without keys any request may; with keys only one that names a valid key (an
 * unknown client gets its 401 after its body, buffered, as before). */
static bool key_accepted(serve_conn *c) {
    serve_server *s = c->srv;
    if (!serve_auth_enabled(&s->auth)) return true;
    serve_key *key;
    char msg[256];
    return serve_auth_check(&s->auth, serve_header(c, MHD_HTTP_HEADER_AUTHORIZATION), &key, msg, sizeof msg) == 200;
}

static enum MHD_Result dispatch(serve_conn *c) {
    serve_server *s = c->srv;
    if (serve_auth_enabled(&s->auth) && !(s->open_health && is_open_path(c->url))) {
        char msg[256];
        if (serve_auth_check(&s->auth, serve_header(c, MHD_HTTP_HEADER_AUTHORIZATION), &c->key, msg, sizeof msg) != 200) {
            serve_add_header(c, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
            return reply_family_error(c, 401, "authentication_error", msg);
        }
        double retry = 0;
        if (serve_auth_admit(&s->auth, c->key, &retry, msg, sizeof msg) != 200) {
            char secs[32];
            snprintf(secs, sizeof secs, "%d", (int)retry + 1);
            serve_add_header(c, MHD_HTTP_HEADER_RETRY_AFTER, secs);
            return reply_family_error(c, 429, "rate_limit_error", msg);
        }
    }
    if (!strcmp(c->url, "/")) return serve_status_page(c);
    if (!strcmp(c->url, "/metrics")) return serve_metrics_page(c);
    if (!strcmp(c->url, "/v2") || !strncmp(c->url, "/v2/", 4)) return serve_kserve(c);
    if (!strncmp(c->url, "/v1/", 4)) return serve_openai(c);
    char msg[300];
    snprintf(msg, sizeof msg, "no endpoint %.200s (see docs/serve.md: /v2/..., /v1/..., /metrics, /)", c->url);
    return reply_family_error(c, 404, "not_found_error", msg);
}

/* Grows c's body buffer to hold cap bytes (the announced Content-Length at once, so that a large
 * body is neither reallocated nor copied while it arrives). false when out of memory. */
static bool reserve_body(serve_conn *c, size_t cap) {
    if (cap <= c->body_cap) return true;
    char *grown = realloc(c->body, cap);
    if (!grown) return false;
    c->body = grown;
    c->body_cap = cap;
    return true;
}

/* Takes a piece of a body whose binary part lands in landing memory: the JSON header into c->body,
 * the rest where it lands (libmicrohttpd hands over no more than the announced Content-Length). */
static void land(serve_conn *c, const char *data, size_t n) {
    if (c->body_len < c->landing_json) {
        size_t take = n < c->landing_json - c->body_len ? n : c->landing_json - c->body_len;
        memcpy(c->body + c->body_len, data, take);
        c->body_len += take;
        c->body[c->body_len] = 0;
        data += take;
        n -= take;
    }
    size_t room = c->landing_len - c->landing_got;
    if (n > room) n = room;
    memcpy(c->landing + c->landing_got, data, n);
    c->landing_got += n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    serve_server *s = cls;
    serve_conn *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        *con_cls = c;
        c->srv = s;
        c->mhd = connection;
        c->method = method;
        c->url = url;
        c->t_start_us = serve_now_us();
        pthread_mutex_lock(&s->active_mu);
        s->active++;
        c->counted = true;
        pthread_mutex_unlock(&s->active_mu);
        const char *cl = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long announced = cl ? strtoull(cl, NULL, 10) : 0;
        if (announced > s->max_body_bytes) {
            c->too_large = true;
            return reply_family_error(c, 413, "invalid_request_error", "the request body is larger than the server's limit");
        }
        if (s->draining) {
            serve_add_header(c, MHD_HTTP_HEADER_CONNECTION, "close");
            return reply_family_error(c, 503, "unavailable_error", "the server is shutting down");
        }
        if (announced && key_accepted(c)) serve_kserve_landing(c, (size_t)announced);
        size_t buffered = c->landing ? c->landing_json : (size_t)announced;
        if (announced && !reserve_body(c, buffered + 1)) return MHD_NO;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (c->status || c->too_large) return MHD_YES;
        if (c->landing) {
            land(c, upload_data, n);
            return MHD_YES;
        }
        if (c->body_len + n > s->max_body_bytes) {
            c->too_large = true;
            free(c->body);
            c->body = NULL;
            return MHD_YES;
        }
        if (c->body_len + n + 1 > c->body_cap) {
            size_t cap = c->body_cap ? c->body_cap : 4096;
            while (cap < c->body_len + n + 1) cap *= 2;
            if (!reserve_body(c, cap)) return MHD_NO;
        }
        memcpy(c->body + c->body_len, upload_data, n);
        c->body_len += n;
        c->body[c->body_len] = 0;
        return MHD_YES;
    }
    if (c->status) return MHD_YES;
    c->t_body_us = serve_now_us();
    if (c->too_large)
        return reply_family_error(c, 413, "invalid_request_error", "the request body is larger than the server's limit");
    return dispatch(c);
}

static void json_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
}

/* The durations of c's stages (SERVE_STAGE_*) in microseconds, when it is a tensor inference that
 * ran (else false); the output stage ends at end_us, when the request completed. */
static bool stage_durations(const serve_conn *c, double end_us, double *us) {
    if (!c->ran) return false;
    const double marks[SERVE_STAGES + 1] = {c->t_start_us,       c->t_body_us,   c->queued_us, c->run_start_us,
                                            c->inputs_joined_us, c->run_done_us, end_us};
    for (int k = 0; k < SERVE_STAGES; k++) us[k] = marks[k + 1] - marks[k];
    return true;
}

static void access_log(serve_server *s, serve_conn *c, double ms, const double *stage_us,
                       enum MHD_RequestTerminationCode toe) {
    if (!s->access_log) return;
    char when[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char peer[64] = "";
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c->mhd, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info && info->client_addr && info->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)info->client_addr)->sin_addr, peer, sizeof peer);
    pthread_mutex_lock(&s->log_mu);
    fprintf(s->access_log, "{\"time\":\"%s\",\"remote\":\"%s\",\"method\":\"", when, peer);
    json_escape(s->access_log, c->method);
    fputs("\",\"path\":\"", s->access_log);
    json_escape(s->access_log, c->url);
    fprintf(s->access_log, "\",\"status\":%d,\"model\":\"", c->status);
    json_escape(s->access_log, c->model);
    fputs("\",\"version\":\"", s->access_log);
    json_escape(s->access_log, c->version);
    fprintf(s->access_log, "\",\"key\":\"");
    json_escape(s->access_log, c->key ? c->key->name : "");
    fprintf(s->access_log, "\",\"bytes_in\":%zu,\"bytes_out\":%zu,\"ms\":%.3f,\"completed\":%s", c->body_len + c->landing_got,
            c->bytes_out, ms, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "true" : "false");
    for (int k = 0; stage_us && k < SERVE_STAGES; k++)
        fprintf(s->access_log, "%s\"%s\":%.3f", k ? "," : ",\"stages_ms\":{", SERVE_STAGE_NAMES[k], stage_us[k] / 1e3);
    fputs(stage_us ? "}}\n" : "}\n", s->access_log);
    fflush(s->access_log);
    pthread_mutex_unlock(&s->log_mu);
}

static void on_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    serve_server *s = cls;
    serve_conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    if (c->stream) c->stream_free(c->stream, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    double end_us = serve_now_us(), ms = (end_us - c->t_start_us) / 1e3;
    double stage_us[SERVE_STAGES];
    bool staged = stage_durations(c, end_us, stage_us);
    if (c->model[0]) {
        char labels[400], with_status[440];
        serve_metrics_labels(labels, sizeof labels, c->model, c->version);
        snprintf(with_status, sizeof with_status, "%s,status=\"%d\"", labels,
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? c->status : 499);
        serve_metrics_add(s->metrics, "kiln_requests_total", with_status, 1);
        serve_metrics_observe(s->metrics, "kiln_request_duration_seconds", labels, ms / 1e3);
        if (staged) serve_metrics_record_stages(s->metrics, labels, SERVE_STAGE_NAMES, stage_us, SERVE_STAGES);
    }
    access_log(s, c, ms, staged ? stage_us : NULL, toe);
    serve_kserve_landing_release(c);
    int64_t second = (int64_t)time(NULL);
    pthread_mutex_lock(&s->active_mu);
    if (c->counted) s->active--;
    int slot = (int)(second % 60);
    if (s->rate_second[slot] != second) s->rate_second[slot] = second, s->rate_count[slot] = 0;
    s->rate_count[slot]++;
    pthread_mutex_unlock(&s->active_mu);
    free(c->body);
    free(c);
}

static void quiet_mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    KILN_LOG(KILN_LOG_VERBOSE, "http: %s", msg);
}

static kiln_status setup(serve_server *s, const serve_options *o, serve_settings *set) {
    char *text = NULL;
    size_t len = 0;
    kiln_status st = KILN_OK;
    if (o->config_file) {
        FILE *f = fopen(o->config_file, "rb");
        if (!f) return kiln_error(KILN_ERR_IO, "--config %s: %s", o->config_file, strerror(errno));
        text = malloc(1 << 20);
        len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        if (!text) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "--config");
    }
    st = serve_settings_parse(text, len, o->config_file ? o->config_file : "", set);
    free(text);
    if (st) return st;
    s->max_body_bytes = set->max_body_bytes;
    s->drain_timeout_s = set->drain_timeout_s;
    s->open_health = o->open_health;
    s->auth.default_rps = set->requests_per_second;
    s->auth.default_burst = set->burst;
    s->auth.default_tpm = set->tokens_per_minute;
    for (int i = 0; i < o->n_api_keys && !st; i++) st = serve_auth_add_plain(&s->auth, o->api_keys[i]);
    const char *env = getenv("KILN_API_KEYS");
    if (env && !st) {
        char *copy = strdup(env), *save = NULL;
        for (char *k = copy ? strtok_r(copy, ",", &save) : NULL; k && !st; k = strtok_r(NULL, ",", &save))
            st = serve_auth_add_plain(&s->auth, k);
        free(copy);
    }
    if (o->keys_file && !st) st = serve_auth_load_file(&s->auth, o->keys_file);
    if (st) return st;
    if (o->access_log) {
        s->access_log = strcmp(o->access_log, "-") ? fopen(o->access_log, "a") : stdout;
        if (!s->access_log) return kiln_error(KILN_ERR_IO, "--access-log %s: %s", o->access_log, strerror(errno));
    }
    s->metrics = serve_metrics_create();
    if (!s->metrics) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "metrics");
    return serve_repo_open(o->repo, &s->repo);
}

typedef struct poller {
    serve_server *s;
    double interval_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
} poller;

/* Reloads the repository's changed models every interval until stopped. */
static void *poll_main(void *arg) {
    poller *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + (double)until.tv_nsec / 1e9 + p->interval_s;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&p->cv, &p->mu, &until);
        if (p->stop) break;
        pthread_mutex_unlock(&p->mu);
        serve_repo_poll(p->s->repo);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void poll_stop(poller *p, bool started) {
    if (!started) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
}

/* Waits until requests in flight reach zero or the drain deadline passes. */
static void drain(serve_server *s) {
    double deadline = serve_now_us() + s->drain_timeout_s * 1e6;
    for (;;) {
        pthread_mutex_lock(&s->active_mu);
        int active = s->active;
        pthread_mutex_unlock(&s->active_mu);
        if (!active) break;
        if (serve_now_us() >= deadline) {
            KILN_LOG(KILN_LOG_WARN, "drain deadline passed with %d request(s) in flight: closing them", active);
            break;
        }
        usleep(10000);
    }
    s->stopping = true;
}

int serve_run(const serve_options *o) {
    serve_server s = {0};
    serve_auth_init(&s.auth);
    pthread_mutex_init(&s.log_mu, NULL);
    pthread_mutex_init(&s.active_mu, NULL);
    s.started_s = (double)time(NULL);
    serve_settings set;
    struct MHD_Daemon *d = NULL;
    int rc = 1;
    /* SIGTERM and SIGINT go to sigwait below, never to a connection thread */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (setup(&s, o, &set)) goto out;
    int failed = serve_repo_load_all(s.repo);
    if (failed) KILN_LOG(KILN_LOG_WARN, "%d model(s) failed to load; see above", failed);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &addr.sin_addr) != 1) {
        kiln_error(KILN_ERR_INVALID_ARGUMENT, "--host %s is not an IPv4 address", o->host);
        goto out;
    }
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                             MHD_USE_ERROR_LOG,
                         (uint16_t)o->port, NULL, NULL, on_request, &s, MHD_OPTION_SOCK_ADDR, &addr,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, set.connection_memory_bytes,
                         MHD_OPTION_CONNECTION_MEMORY_INCREMENT, set.connection_memory_bytes / 8,
                         MHD_OPTION_CONNECTION_TIMEOUT, set.connection_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                         set.max_connections, MHD_OPTION_NOTIFY_COMPLETED, on_completed, &s,
                         MHD_OPTION_EXTERNAL_LOGGER, quiet_mhd_log, NULL, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1,
                         MHD_OPTION_END);
    if (!d) {
        kiln_error(KILN_ERR_IO, "cannot listen on %s:%d (%s)", o->host, o->port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *bound = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    poller poll = {.s = &s, .interval_s = set.poll_repository_s, .mu = PTHREAD_MUTEX_INITIALIZER,
                   .cv = PTHREAD_COND_INITIALIZER};
    bool polling = set.poll_repository_s > 0 && pthread_create(&poll.thread, NULL, poll_main, &poll) == 0;
    fprintf(stderr, "kiln serve: listening on http://%s:%d (%d model(s) in %s)\n", o->host,
            bound ? (int)bound->port : o->port, s.repo->n_models, o->repo);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kiln serve: %s: draining (up to %.0f s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", s.drain_timeout_s);
    s.draining = true;
    poll_stop(&poll, polling);
    MHD_socket listener = MHD_quiesce_daemon(d);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    drain(&s);
    MHD_stop_daemon(d);
    rc = 0;
out:
    if (rc) fprintf(stderr, "kiln: error: %s\n", kiln_last_error());
    serve_repo_close(s.repo);
    serve_metrics_free(s.metrics);
    serve_auth_free(&s.auth);
    if (s.access_log && s.access_log != stdout) fclose(s.access_log);
    pthread_mutex_destroy(&s.active_mu);
    pthread_mutex_destroy(&s.log_mu);
    return rc;
}
