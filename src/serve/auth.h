/* auth.h — API keys and per-key limits of `kiln serve`. Keys come from --api-key and KILN_API_KEYS
 * (plain text, all models, the server's default limits) or from a --keys file of SHA-256 hashes,
 * one key per line:
 *     <64 hex digits of sha256(key)> [name=NAME] [models=a,b] [rps=R] [burst=B] [tpm=T]
 * ('#' starts a comment). Only hashes are kept in memory. A request's `Authorization: Bearer KEY`
 * is hashed and looked up: missing or unknown -> 401; a key that names models and not this one ->
 * 403; a key past its token bucket of requests per second (burst B, default max(1, R)) or of tokens
 * per minute -> 429 with the seconds to wait. */
#ifndef KILN_SERVE_AUTH_H
#define KILN_SERVE_AUTH_H

#include "kiln/kiln.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct serve_key {
    char hash[65];
    char name[64];
    char *models;          /* comma-separated allowed models, NULL: all */
    double rps, burst, tpm; /* 0: unlimited */
    double req_bucket, tok_bucket, last_us; /* token buckets and their last refill */
} serve_key;

typedef struct serve_auth {
    serve_key *keys;
    int n_keys, cap_keys;
    double default_rps, default_burst, default_tpm; /* for plain keys */
    pthread_mutex_t mu;
} serve_auth;

void serve_auth_init(serve_auth *a);
void serve_auth_free(serve_auth *a);
/* Adds a plain-text key (hashed here) with the default limits. */
kiln_status serve_auth_add_plain(serve_auth *a, const char *key);
/* Adds the keys of a --keys file; errors name the file and line. */
kiln_status serve_auth_load_file(serve_auth *a, const char *path);
/* Whether any key is configured (else every request is let in). */
bool serve_auth_enabled(const serve_auth *a);

/* Checks an Authorization header value: 200 with *key, or 401 with msg. */
int serve_auth_check(serve_auth *a, const char *authorization, serve_key **key, char *msg, size_t msg_size);
/* Whether key may use model (name as requested). */
bool serve_auth_allows(const serve_key *key, const char *model);
/* Takes one request from the key's buckets: 200, or 429 with *retry_after_s and msg. */
int serve_auth_admit(serve_auth *a, serve_key *key, double *retry_after_s, char *msg, size_t msg_size);
/* Charges tokens (prompt + generated) to the key's tokens-per-minute bucket. */
void serve_auth_charge_tokens(serve_auth *a, serve_key *key, int tokens);

#endif
