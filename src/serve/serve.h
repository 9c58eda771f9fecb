/* serve.h — `kiln serve`: an HTTP server (libmicrohttpd) over a model repository, speaking KServe v2
 * for tensor engines and the OpenAI API for LLMs (docs/serve.md). tools/cmd_serve.c parses the
 * command line into serve_options and calls serve_run. */
#ifndef KILN_SERVE_SERVE_H
#define KILN_SERVE_SERVE_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct serve_options {
    const char *repo;
    const char *host;              /* "127.0.0.1" */
    int port;                      /* 8000 */
    const char **api_keys;         /* plain keys (--api-key, KILN_API_KEYS) */
    int n_api_keys;
    const char *keys_file;         /* --keys: hashed keys with limits */
    const char *config_file;       /* --config: server settings (JSON) */
    bool open_health;
    const char *access_log;        /* a file, "-" for stdout, NULL for none */
} serve_options;

/* The server settings of a --config file, with their defaults. */
typedef struct serve_settings {
    size_t max_body_bytes;         /* 64 MiB */
    unsigned connection_timeout_s; /* idle connections closed after it: 30 */
    unsigned max_connections;      /* 512 */
    double drain_timeout_s;        /* SIGTERM: time given to requests in flight: 30 */
    double requests_per_second;    /* per-key defaults for plain keys (0: unlimited) */
    double burst;
    double tokens_per_minute;
    double poll_repository_s;      /* look for changed models this often (0: never) */
    size_t connection_memory_bytes; /* each connection's libmicrohttpd memory (headers, read buffer): 256 KiB */
} serve_settings;

/* Defaults, then the JSON text's settings (NULL: defaults). Unknown keys and bad values are
 * KILN_ERR_INVALID_ARGUMENT naming them. */
kiln_status serve_settings_parse(const char *json, size_t len, const char *what, serve_settings *s);

/* Loads the repository, serves until SIGTERM or SIGINT, drains, and returns the process's exit
 * status: 0 after a clean drain, 1 when it could not start (the message is printed). */
int serve_run(const serve_options *o);

#endif
