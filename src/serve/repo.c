/* repo.c — the model repository: scanning DIR, loading versions by policy, swapping them in,
 * holding them for requests, and unloading (contract in repo.h). */
#include "serve/repo.h"

#include "core/log.h"
#include "core/status.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A positive decimal version number, or -1. */
static int64_t version_number(const char *s) {
    if (!*s || strlen(s) > 15) return -1;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10 + (*s - '0');
    }
    return v > 0 ? v : -1;
}

static bool valid_model_name(const char *s) {
    return s[0] && s[0] != '.' && strlen(s) < SERVE_NAME_MAX && !strchr(s, '/');
}

/* Reads a whole small file (NUL-terminated) into *out; KILN_ERR_IO when it cannot. */
static kiln_status read_text(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_error(KILN_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *grown = cap <= (64u << 20) ? realloc(buf, cap) : NULL;
            if (!grown) {
                free(buf);
                fclose(f);
                return kiln_error(KILN_ERR_IO, "%s: too large for a config file", path);
            }
            buf = grown;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096) break;
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    *len = n;
    return KILN_OK;
}

/* Frees a tensor version's instances and engines (so that another engine file can be tried). */
static void drop_tensor(serve_version *v) {
    serve_pool_free(v->pool);
    v->pool = NULL;
    for (int k = 0; k < v->n_engines; k++) kiln_engine_free(v->engines[k]), v->engines[k] = NULL;
    v->n_engines = 0;
    v->engine = NULL;
}

static void version_free(serve_version *v) {
    if (!v) return;
    drop_tensor(v);
    kiln_tokenizer_free(v->tokenizer);
    for (int k = 0; k < v->n_llms; k++) kiln_llm_close(v->llms[k]);
    free(v);
}

/* The entries of dir (hidden ones left out), sorted, joined with ", " into buf (for error messages). */
static void list_dir(const char *dir, char *buf, size_t size) {
    buf[0] = 0;
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && at < size)
            at += (size_t)snprintf(buf + at, size - at, "%s%s", at ? ", " : "", names[i]->d_name);
        free(names[i]);
    }
    free(names);
    if (!buf[0]) snprintf(buf, size, "nothing");
}

static bool has_safetensors(const char *dir) {
    DIR *d = opendir(dir);
    bool found = false;
    struct dirent *e;
    while (d && !found && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        found = n > 12 && !strcmp(e->d_name + n - 12, ".safetensors");
    }
    if (d) closedir(d);
    return found;
}

/* Opens the LLM once per device of the model, with the model's options; mdir is the model's
 * directory (for its chat template, KV calibration text and a relative draft model; "layers:N" is the
 * model's own early exit). */
static kiln_status open_llm(const char *path, const char *mdir, const serve_model_config *c, serve_version *v) {
    kiln_llm_options o = c->llm;
    o.target = c->target;
    char *chat = NULL;
    size_t len;
    if (c->chat_template[0]) {
        char file[4500];
        snprintf(file, sizeof file, "%s/%s", mdir, c->chat_template);
        kiln_status st = read_text(file, &chat, &len);
        if (st) return kiln_error_prefix(st, "chat_template");
        o.chat_template = chat;
    }
    char calib[4500];
    if (c->kv_calib_text[0]) {
        snprintf(calib, sizeof calib, "%s/%s", mdir, c->kv_calib_text);
        o.kv_calib_text = calib;
    }
    char draft[4500];
    if (c->draft[0]) {
        if (c->draft[0] == '/' || !strncmp(c->draft, "layers:", 7)) /* absolute, or an early exit */
            snprintf(draft, sizeof draft, "%s", c->draft);
        else snprintf(draft, sizeof draft, "%s/%s", mdir, c->draft);
        o.draft = draft;
    }
    kiln_status st = KILN_OK;
    for (int k = 0; k < c->n_devices && !st; k++) {
        o.device = c->devices[k];
        st = kiln_llm_open(path, &o, &v->llms[k]);
        if (st && c->n_devices > 1) st = kiln_error_prefix(st, "device %d", c->devices[k]);
        if (!st) v->llm_devices[v->n_llms++] = c->devices[k];
    }
    v->llm = v->llms[0];
    free(chat);
    return st;
}

static kiln_status start_tensor(const serve_model_config *c, serve_version *v) {
    return serve_pool_create(v->engines, c->devices, v->n_engines, &c->batch, &v->pool);
}

/* Loads engine file path for device k of the model: on that device when the config lists
 * "devices", else where it was built. */
static kiln_status load_engine_on(const char *path, const serve_model_config *c, int k, serve_version *v) {
    kiln_engine_load_options o = {.set_device = c->devices_listed, .device = c->devices[k]};
    kiln_status st = kiln_engine_load_with(path, &o, &v->engines[k]);
    if (st) return c->devices_listed ? kiln_error_prefix(st, "device %d", c->devices[k]) : st;
    v->n_engines = k + 1;
    v->engine = v->engines[0];
    return KILN_OK;
}

/* The tensor engine file path, already loaded for the first device, on the other devices, then
 * the instances. */
static kiln_status start_tensor_file(const char *path, const serve_model_config *c, serve_version *v) {
    for (int k = 1; k < c->n_devices; k++) KILN_TRY(load_engine_on(path, c, k, v));
    return start_tensor(c, v);
}

/* model.kiln: a tensor engine, else an LLM engine. */
static kiln_status load_kiln_file(const char *path, const char *mdir, const serve_model_config *c, serve_version *v) {
    kiln_status st = load_engine_on(path, c, 0, v);
    if (!st) return start_tensor_file(path, c, v);
    char tensor_err[512];
    snprintf(tensor_err, sizeof tensor_err, "%s", kiln_last_error());
    if (!open_llm(path, mdir, c, v)) return KILN_OK;
    return kiln_error(st, "%s opens neither as a tensor engine (%s) nor as an LLM engine (%s)", path, tensor_err,
                      kiln_last_error());
}

/* model.onnx built for each device of the model (with the repository's timing cache), then the
 * instances. */
static kiln_status build_onnx(const char *path, const char *cache, const serve_model_config *c, serve_version *v) {
    for (int k = 0; k < c->n_devices; k++) {
        kiln_build_options o = {.target = c->target, .device = c->devices[k], .timing_cache = cache,
                                .tuning_level = strcmp(c->target, "cuda") ? 0 : 2, .io_fp16 = c->io_fp16};
        kiln_status st = kiln_build_onnx(path, &o, &v->engines[k]);
        if (st) return c->n_devices > 1 ? kiln_error_prefix(st, "device %d", c->devices[k]) : st;
        v->n_engines = k + 1;
        v->engine = v->engines[0];
    }
    return start_tensor(c, v);
}

/* model.<gpu>.kiln variants: the first (in reverse name order, so newer GPUs first) that loads. */
static kiln_status load_variants(const char *vdir, const serve_model_config *c, serve_version *v, bool *found) {
    struct dirent **names = NULL;
    int n = scandir(vdir, &names, NULL, alphasort);
    char errors[1536] = "";
    size_t at = 0;
    kiln_status st = KILN_ERR_ENGINE_MISMATCH;
    *found = false;
    for (int i = n - 1; i >= 0; i--) {
        const char *name = names[i]->d_name;
        size_t len = strlen(name);
        if (st && len > 11 && !strncmp(name, "model.", 6) && !strcmp(name + len - 5, ".kiln") && strcmp(name, "model.kiln")) {
            *found = true;
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", vdir, name);
            st = load_engine_on(path, c, 0, v);
            if (!st) st = start_tensor_file(path, c, v);
            if (!st) snprintf(v->source, sizeof v->source, "%s", name);
            else {
                if (at < sizeof errors)
                    at += (size_t)snprintf(errors + at, sizeof errors - at, "%s%s: %s", at ? "; " : "", name, kiln_last_error());
                drop_tensor(v);
            }
        }
        free(names[i]);
    }
    free(names);
    if (*found && st) return kiln_error(st, "no GPU variant of the engine loads on this device (%s)", errors);
    return st;
}

/* vdir/tokenizer.json, when there is one, for /v1/embeddings of text; one that does not load is
 * logged and left out (the model then takes token ids only). */
static void load_tokenizer(const char *vdir, serve_version *v) {
    char path[4300];
    snprintf(path, sizeof path, "%s/tokenizer.json", vdir);
    if (!is_file(path)) return;
    if (kiln_tokenizer_load(path, &v->tokenizer))
        KILN_LOG(KILN_LOG_WARN, "%s does not load (%s): /v1/embeddings takes token ids only", path, kiln_last_error());
}

static kiln_status load_version(const serve_repo *r, const char *mdir, int64_t number, const serve_model_config *c,
                                serve_version **out) {
    char vdir[4200], path[4500];
    snprintf(vdir, sizeof vdir, "%s/%lld", mdir, (long long)number);
    serve_version *v = calloc(1, sizeof *v);
    if (!v) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "version %lld", (long long)number);
    v->number = number;
    kiln_status st;
    bool found = false;
    snprintf(path, sizeof path, "%s/config.json", vdir);
    if (is_file(path) && has_safetensors(vdir)) {
        snprintf(v->source, sizeof v->source, "checkpoint");
        st = open_llm(vdir, mdir, c, v);
    } else if (snprintf(path, sizeof path, "%s/model.kiln", vdir), is_file(path)) {
        snprintf(v->source, sizeof v->source, "model.kiln");
        st = load_kiln_file(path, mdir, c, v);
    } else if ((st = load_variants(vdir, c, v, &found)), found) {
        /* st says whether a variant loaded */
    } else if (snprintf(path, sizeof path, "%s/model.onnx", vdir), is_file(path)) {
        snprintf(v->source, sizeof v->source, "model.onnx");
        char cache[4200];
        snprintf(cache, sizeof cache, "%s/timing.cache", r->dir);
        st = build_onnx(path, cache, c, v);
    } else {
        char have[1024];
        list_dir(vdir, have, sizeof have);
        st = kiln_error(KILN_ERR_IO,
                        "%s holds no model: expected model.kiln, model.<gpu>.kiln, model.onnx, or a Hugging Face "
                        "checkpoint (config.json + *.safetensors); it holds %s",
                        vdir, have);
    }
    if (st) {
        version_free(v);
        return kiln_error_prefix(st, "version %lld", (long long)number);
    }
    if (v->engine) load_tokenizer(vdir, v);
    *out = v;
    return KILN_OK;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The version numbers the policy wants from mdir, ascending, into want[0..*n). */
static kiln_status wanted_versions(const char *mdir, const serve_model_config *c, int64_t **want, int *n) {
    *want = NULL;
    *n = 0;
    DIR *d = opendir(mdir);
    if (!d) return kiln_error(KILN_ERR_IO, "%s: %s", mdir, strerror(errno));
    int64_t *all = NULL;
    int n_all = 0, cap = 0;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d))) {
        int64_t v = version_number(e->d_name);
        snprintf(path, sizeof path, "%s/%s", mdir, e->d_name);
        if (v < 0 || !is_dir(path)) continue;
        if (n_all == cap) {
            cap = cap ? 2 * cap : 8;
            int64_t *grown = realloc(all, sizeof(int64_t) * (size_t)cap);
            if (!grown) {
                free(all);
                closedir(d);
                return kiln_error(KILN_ERR_OUT_OF_MEMORY, "listing %s", mdir);
            }
            all = grown;
        }
        all[n_all++] = v;
    }
    closedir(d);
    if (!n_all) {
        free(all);
        return kiln_error(KILN_ERR_IO, "%s has no version directory (1/, 2/, ...)", mdir);
    }
    qsort(all, (size_t)n_all, sizeof(int64_t), cmp_i64);
    if (c->n_specific) {
        int k = 0;
        for (int i = 0; i < c->n_specific; i++) {
            bool present = false;
            for (int j = 0; j < n_all; j++) present |= all[j] == c->version_specific[i];
            if (!present) {
                free(all);
                return kiln_error(KILN_ERR_IO, "%s: version %lld of version_policy.specific does not exist", mdir,
                                  (long long)c->version_specific[i]);
            }
            all[k++] = c->version_specific[i];
        }
        qsort(all, (size_t)k, sizeof(int64_t), cmp_i64);
        n_all = k;
    } else if (!c->version_all && n_all > c->version_latest) {
        memmove(all, all + n_all - c->version_latest, sizeof(int64_t) * (size_t)c->version_latest);
        n_all = c->version_latest;
    }
    *want = all;
    *n = n_all;
    return KILN_OK;
}

kiln_status serve_repo_open(const char *dir, serve_repo **out) {
    *out = NULL;
    if (!is_dir(dir)) return kiln_error(KILN_ERR_IO, "model repository %s is not a directory", dir);
    if (strlen(dir) > 2048) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the model repository's path is too long");
    serve_repo *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(dir))) {
        free(r);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "model repository");
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->admin_mu, NULL);
    pthread_cond_init(&r->released, NULL);
    *out = r;
    return KILN_OK;
}

/* Removes and frees versions[0..n) once no request holds them; the caller holds admin_mu only. */
static void retire(serve_repo *r, serve_version **versions, int n) {
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < n; i++)
        while (versions[i]->refs > 0) pthread_cond_wait(&r->released, &r->mu);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < n; i++) version_free(versions[i]);
    free(versions);
}

void serve_repo_close(serve_repo *r) {
    if (!r) return;
    for (int i = 0; i < r->n_models; i++) serve_repo_unload(r, r->models[i].name);
    free(r->models);
    pthread_cond_destroy(&r->released);
    pthread_mutex_destroy(&r->admin_mu);
    pthread_mutex_destroy(&r->mu);
    free(r->dir);
    free(r);
}

/* The model entry for name, created when missing; the caller holds mu. */
static serve_model *model_entry(serve_repo *r, const char *name) {
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i].name, name)) return &r->models[i];
    if (r->n_models == r->cap_models) {
        int cap = r->cap_models ? 2 * r->cap_models : 8;
        serve_model *grown = realloc(r->models, sizeof(serve_model) * (size_t)cap);
        if (!grown) return NULL;
        r->models = grown;
        r->cap_models = cap;
    }
    serve_model *m = &r->models[r->n_models++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    serve_model_config_parse(NULL, 0, "", &m->cfg);
    return m;
}

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)data)[i]) * 0x100000001b3ull;
    return h;
}

/* Folds the names, sizes and modification times of dir's entries (and, depth > 0, of their
 * subdirectories' entries) into h, in name order. */
static uint64_t fold_dir(uint64_t h, const char *dir, int depth) {
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char path[4400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(path, &st) == 0) {
            int64_t facts[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
            h = fnv(h, names[i]->d_name, strlen(names[i]->d_name) + 1);
            if (S_ISDIR(st.st_mode)) h = depth > 0 ? fold_dir(h, path, depth - 1) : h;
            else h = fnv(h, facts, sizeof facts);
        }
        free(names[i]);
    }
    free(names);
    return h;
}

/* The signature of a model directory's files (0 when it does not exist). */
static uint64_t model_signature(const char *mdir) {
    return is_dir(mdir) ? fold_dir(0xcbf29ce484222325ull, mdir, 1) : 0;
}

kiln_status serve_repo_load(serve_repo *r, const char *name) {
    if (!valid_model_name(name)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is not a model name", name);
    char mdir[4096], path[4200];
    snprintf(mdir, sizeof mdir, "%s/%s", r->dir, name);
    if (!is_dir(mdir)) return kiln_error(KILN_ERR_IO, "model '%s' is not in the repository (no directory %s)", name, mdir);
    pthread_mutex_lock(&r->admin_mu);
    uint64_t signature = model_signature(mdir);
    serve_model_config cfg;
    char *json = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", mdir);
    kiln_status st = is_file(path) ? read_text(path, &json, &len) : KILN_OK;
    if (!st) st = serve_model_config_parse(json, len, path, &cfg);
    free(json);
    int64_t *want = NULL;
    int n_want = 0;
    if (!st) st = wanted_versions(mdir, &cfg, &want, &n_want);
    serve_version **fresh = calloc((size_t)n_want + 1, sizeof(serve_version *));
    if (!st && !fresh) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "model '%s'", name);
    for (int i = 0; i < n_want && !st; i++) st = load_version(r, mdir, want[i], &cfg, &fresh[i]);
    free(want);
    serve_version **old = NULL;
    int n_old = 0;
    pthread_mutex_lock(&r->mu);
    serve_model *m = model_entry(r, name);
    if (!m && !st) st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "model '%s'", name);
    if (m) m->signature = signature;
    if (st) {
        if (m) snprintf(m->reason, sizeof m->reason, "%s", kiln_last_error());
    } else {
        old = m->versions, n_old = m->n_versions;
        m->versions = fresh, m->n_versions = n_want, fresh = NULL;
        m->cfg = cfg;
        m->reason[0] = 0;
        m->unloaded = false;
    }
    pthread_mutex_unlock(&r->mu);
    if (st) {
        char why[1024];
        snprintf(why, sizeof why, "%s", kiln_last_error());
        for (int i = 0; fresh && i < n_want; i++) version_free(fresh[i]);
        free(fresh);
        kiln_error(st, "loading model '%s': %s", name, why);
    } else {
        retire(r, old, n_old);
    }
    pthread_mutex_unlock(&r->admin_mu);
    return st;
}

void serve_repo_scan(serve_repo *r) {
    struct dirent **names = NULL;
    int n = scandir(r->dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", r->dir, names[i]->d_name);
        if (valid_model_name(names[i]->d_name) && is_dir(path)) {
            pthread_mutex_lock(&r->mu);
            serve_model *m = model_entry(r, names[i]->d_name);
            if (m && !m->n_versions && !m->reason[0] && !m->unloaded) snprintf(m->reason, sizeof m->reason, "not loaded");
            pthread_mutex_unlock(&r->mu);
        }
        free(names[i]);
    }
    free(names);
}

int serve_repo_load_all(serve_repo *r) {
    serve_repo_scan(r);
    int failed = 0;
    for (int i = 0; i < r->n_models; i++) {
        char name[SERVE_NAME_MAX];
        pthread_mutex_lock(&r->mu);
        snprintf(name, sizeof name, "%s", r->models[i].name);
        pthread_mutex_unlock(&r->mu);
        if (serve_repo_load(r, name)) {
            KILN_LOG(KILN_LOG_ERROR, "%s", kiln_last_error());
            failed++;
        } else {
            KILN_LOG(KILN_LOG_INFO, "loaded model '%s'", name);
        }
    }
    return failed;
}

int serve_repo_poll(serve_repo *r) {
    serve_repo_scan(r);
    int failed = 0;
    for (int i = 0;; i++) {
        char name[SERVE_NAME_MAX], mdir[4096];
        pthread_mutex_lock(&r->mu);
        bool more = i < r->n_models;
        uint64_t seen = 0;
        bool unloaded = false, loaded = false;
        if (more) {
            snprintf(name, sizeof name, "%s", r->models[i].name);
            seen = r->models[i].signature;
            unloaded = r->models[i].unloaded;
            loaded = r->models[i].n_versions > 0;
        }
        pthread_mutex_unlock(&r->mu);
        if (!more) break;
        snprintf(mdir, sizeof mdir, "%s/%s", r->dir, name);
        uint64_t now = model_signature(mdir);
        if (now == seen) continue;
        if (!now) {
            if (loaded) {
                KILN_LOG(KILN_LOG_WARN, "model '%s' left the repository: unloading it", name);
                serve_repo_unload(r, name);
            }
            pthread_mutex_lock(&r->mu);
            r->models[i].signature = 0;
            snprintf(r->models[i].reason, sizeof r->models[i].reason, "its directory is gone");
            pthread_mutex_unlock(&r->mu);
        } else if (serve_repo_load(r, name)) {
            KILN_LOG(KILN_LOG_ERROR, "%s", kiln_last_error());
            failed++;
        } else {
            KILN_LOG(KILN_LOG_WARN, "model '%s' changed on disk: reloaded%s", name, unloaded ? " (it had been unloaded)" : "");
        }
    }
    return failed;
}

kiln_status serve_repo_unload(serve_repo *r, const char *name) {
    pthread_mutex_lock(&r->admin_mu);
    pthread_mutex_lock(&r->mu);
    serve_model *m = NULL;
    for (int i = 0; i < r->n_models; i++)
        if (!strcmp(r->models[i].name, name)) m = &r->models[i];
    serve_version **old = NULL;
    int n_old = 0;
    if (m) {
        old = m->versions, n_old = m->n_versions;
        m->versions = NULL, m->n_versions = 0;
        m->unloaded = true;
        m->reason[0] = 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (m) retire(r, old, n_old);
    pthread_mutex_unlock(&r->admin_mu);
    return m ? KILN_OK : kiln_error(KILN_ERR_INVALID_ARGUMENT, "model '%s' is not in the repository", name);
}

serve_model *serve_repo_find(serve_repo *r, const char *name) {
    for (int i = 0; i < r->n_models; i++) {
        serve_model *m = &r->models[i];
        if (!strcmp(m->name, name)) return m;
        for (int a = 0; a < m->cfg.n_aliases; a++)
            if (!strcmp(m->cfg.aliases[a], name)) return m;
    }
    return NULL;
}

/* The version a request without one goes to: drawn by the traffic weights among the loaded
 * versions that have one, else the highest loaded. The caller holds mu. */
static serve_version *pick_by_traffic(const serve_model *m) {
    double total = 0, w[SERVE_MAX_SPECIFIC] = {0};
    serve_version *v[SERVE_MAX_SPECIFIC] = {0};
    for (int i = 0; i < m->cfg.n_traffic; i++)
        for (int k = 0; k < m->n_versions; k++)
            if (m->versions[k]->number == m->cfg.traffic_version[i]) v[i] = m->versions[k], w[i] = m->cfg.traffic_weight[i];
    for (int i = 0; i < m->cfg.n_traffic; i++) total += w[i];
    if (total <= 0) return m->versions[m->n_versions - 1];
    /* splitmix64 over a process-wide sequence: connections come and go with their threads */
    static atomic_ullong sequence;
    uint64_t z = atomic_fetch_add(&sequence, 1) * 0x9e3779b97f4a7c15ull + (uint64_t)time(NULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double x = (double)(z >> 11) / 9007199254740992.0 * total;
    for (int i = 0; i < m->cfg.n_traffic; i++) {
        if (x < w[i]) return v[i];
        x -= w[i];
    }
    for (int i = m->cfg.n_traffic - 1; i >= 0; i--)
        if (v[i] && w[i] > 0) return v[i];
    return m->versions[m->n_versions - 1];
}

int serve_repo_acquire(serve_repo *r, const char *name, const char *version, serve_version **out, char *msg,
                       size_t msg_size) {
    *out = NULL;
    int status = 200;
    pthread_mutex_lock(&r->mu);
    serve_model *m = serve_repo_find(r, name);
    if (!m) {
        snprintf(msg, msg_size, "unknown model '%s'", name);
        status = 404;
    } else if (!m->n_versions) {
        snprintf(msg, msg_size, "model '%s' is not loaded%s%s", name, m->reason[0] ? ": " : "", m->reason);
        status = 503;
    } else if (!version || !version[0]) {
        *out = pick_by_traffic(m);
    } else {
        int64_t want = version_number(version);
        for (int i = 0; i < m->n_versions; i++)
            if (m->versions[i]->number == want) *out = m->versions[i];
        if (!*out) {
            snprintf(msg, msg_size, "model '%s' has no loaded version '%s'", name, version);
            status = 404;
        }
    }
    if (*out) (*out)->refs++;
    pthread_mutex_unlock(&r->mu);
    return status;
}

void serve_repo_release(serve_repo *r, serve_version *v) {
    if (!v) return;
    pthread_mutex_lock(&r->mu);
    if (--v->refs == 0) pthread_cond_broadcast(&r->released);
    pthread_mutex_unlock(&r->mu);
}

int serve_version_take_llm(serve_version *v, int n) {
    int best = 0;
    for (int k = 1; k < v->n_llms; k++)
        if (atomic_load(&v->llm_live[k]) < atomic_load(&v->llm_live[best])) best = k;
    atomic_fetch_add(&v->llm_live[best], n);
    return best;
}

void serve_version_llm_done(serve_version *v, int k, int n) { atomic_fetch_sub(&v->llm_live[k], n); }
