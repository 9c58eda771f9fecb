/* repo.h — the model repository of `kiln serve`: DIR/<model>/config.json (optional) and
 * DIR/<model>/<version>/ holding model.kiln, per-GPU variants model.<gpu>.kiln (the first that loads
 * on this device wins), model.onnx (built at load, with DIR/timing.cache), or a Hugging Face
 * checkpoint (config.json + *.safetensors, opened as an LLM; an LLM engine file also works as
 * model.kiln). A tensor model's version directory may hold a tokenizer.json (for /v1/embeddings of
 * text). Versions are positive integers; the version policy picks which load.
 *
 * Loading a model builds its whole new set of versions first and swaps it in only when every
 * version loaded: a failure leaves the versions that were serving in place (rollback) and records
 * the reason. Requests hold a version through serve_repo_acquire / _release; an unload waits for
 * them to finish before freeing the engine, contexts and KV cache. */
#ifndef KILN_SERVE_REPO_H
#define KILN_SERVE_REPO_H

#include "kiln/kiln.h"
#include "kiln/kiln_llm.h"
#include "kiln/kiln_tokenizer.h"
#include "serve/batcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_NAME_MAX 128
#define SERVE_MAX_ALIASES 8
#define SERVE_MAX_SPECIFIC 16
#define SERVE_MAX_DEVICES 16

typedef struct serve_model_config {
    serve_batch_config batch;
    int version_latest;                  /* load the N highest versions (default 1) */
    int64_t version_specific[SERVE_MAX_SPECIFIC]; /* or exactly these (n_specific > 0) */
    int n_specific;
    bool version_all;
    /* Canary / A-B: requests that name no version go to version traffic_version[i] with weight
     * traffic_weight[i] (among those loaded); none: the highest loaded version. */
    int64_t traffic_version[SERVE_MAX_SPECIFIC];
    double traffic_weight[SERVE_MAX_SPECIFIC];
    int n_traffic;
    char target[16];                     /* "cpu" (default) or "cuda" */
    bool io_fp16;                        /* "io_format": "fp16": model.onnx is built with float16 I/O */
    int device;                          /* the GPU of a one-GPU model ("device"; devices[0] too) */
    int devices[SERVE_MAX_DEVICES];      /* the GPUs the model runs on ("devices", or just "device") */
    int n_devices;                       /* >= 1; batch.instances instances (or one LLM) on each */
    bool devices_listed;                 /* "devices" was given: engine files load on each (else as built) */
    char aliases[SERVE_MAX_ALIASES][SERVE_NAME_MAX]; /* further names of the model */
    int n_aliases;
    kiln_llm_options llm;                /* LLMs: KV-cache budget, admission limits (target set from above) */
    char chat_template[256];             /* LLMs: a Jinja chat template file, relative to the model's directory */
    char kv_calib_text[256];             /* LLMs with kv_cache_dtype fp8: a calibration text, relative to it too */
    char draft[256];                     /* LLMs: a draft model's directory or engine file ("draft"), relative to
                                            the model's directory unless absolute; "" = none */
} serve_model_config;

/* Fills c with the defaults and then the settings of the JSON text (NULL: defaults only). Unknown
 * keys and wrong types are KILN_ERR_INVALID_ARGUMENT naming the key and `what` (the file), and so is
 * a "devices" list on a model whose target is not "cuda" (for tests, KILN_SERVE_CPU_DEVICES=1 in the
 * environment lets a cpu model take one: an instance set per entry, all on the CPU). */
kiln_status serve_model_config_parse(const char *json, size_t len, const char *what, serve_model_config *c);

typedef struct serve_version {
    int64_t number;
    char source[256];       /* the file or "checkpoint" it came from */
    kiln_engine *engine;    /* tensor models: the engine of the first device (descriptions) */
    kiln_engine *engines[SERVE_MAX_DEVICES]; /* tensor models: one per device (engines[0] == engine) */
    int n_engines;
    serve_pool *pool;
    kiln_tokenizer *tokenizer; /* tensor models: the version directory's tokenizer.json, if it loads */
    kiln_llm *llm;          /* LLMs: the one on the first device (tokenizer, info) */
    kiln_llm *llms[SERVE_MAX_DEVICES]; /* LLMs: one per device of the model's config (llms[0] == llm) */
    int llm_devices[SERVE_MAX_DEVICES];
    atomic_int llm_live[SERVE_MAX_DEVICES]; /* sequences submitted to llms[k] and not yet released */
    int n_llms;
    int refs;               /* requests holding it */
} serve_version;

typedef struct serve_model {
    char name[SERVE_NAME_MAX];
    serve_model_config cfg;
    serve_version **versions; /* loaded, ascending by number */
    int n_versions;
    char reason[512];         /* why the last load or unload failed ("" if it did not) */
    bool unloaded;            /* unloaded through the API */
    uint64_t signature;       /* of the files as the last load attempt saw them (serve_repo_poll) */
} serve_model;

typedef struct serve_repo {
    char *dir;
    pthread_mutex_t mu;        /* guards models and every version's refs */
    pthread_cond_t released;   /* a version's refs dropped */
    pthread_mutex_t admin_mu;  /* one load or unload at a time */
    serve_model *models;
    int n_models, cap_models;
} serve_repo;

/* Opens the repository directory (nothing is loaded yet). KILN_ERR_IO when dir is not a directory. */
kiln_status serve_repo_open(const char *dir, serve_repo **out);
/* Unloads every model (waiting for their requests) and frees the repository. Accepts NULL. */
void serve_repo_close(serve_repo *r);

/* Loads every model directory of the repository; returns how many failed (each logged). */
int serve_repo_load_all(serve_repo *r);
/* Loads (or reloads) model `name` from its directory: KILN_OK, or an error with the reason also
 * recorded in the model (KILN_ERR_IO for a directory that does not exist). */
kiln_status serve_repo_load(serve_repo *r, const char *name);
/* Unloads every version of model `name`: KILN_ERR_INVALID_ARGUMENT when unknown. */
kiln_status serve_repo_unload(serve_repo *r, const char *name);

/* Reloads what changed on disk since the last look: a model directory whose files (config.json,
 * version directories and their files: names, sizes, modification times) changed is loaded again
 * (keeping what serves if that fails), a new one is loaded, one that disappeared is unloaded. Models
 * unloaded through the API stay unloaded until their files change. Returns how many loads failed. */
int serve_repo_poll(serve_repo *r);

/* Finds model `name` (or an alias) and version (NULL or "": the highest loaded) and holds it for a
 * request. Returns the HTTP status: 200 with *out set, 404 (unknown model or version) or 503 (not
 * loaded), with a message in msg. */
int serve_repo_acquire(serve_repo *r, const char *name, const char *version, serve_version **out, char *msg,
                       size_t msg_size);
void serve_repo_release(serve_repo *r, serve_version *v);

/* Picks the LLM of v (one per device) for a new request of n sequences and counts them in: the
 * one with the fewest sequences waiting and running (those submitted to it and not yet released,
 * counted here rather than read from kiln_llm_get_stats, which lags a request on its way from the
 * inbox into the scheduler), the first of equals. Returns its index in v->llms. */
int serve_version_take_llm(serve_version *v, int n);
/* Counts n sequences of v->llms[k] out (their request released). */
void serve_version_llm_done(serve_version *v, int k, int n);

/* Registers the model directories of the repository that are not known yet (unloaded). */
void serve_repo_scan(serve_repo *r);

/* The model of that name or alias, or NULL; the caller holds r->mu. */
serve_model *serve_repo_find(serve_repo *r, const char *name);

#endif
