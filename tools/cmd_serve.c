/* cmd_serve.c — `kiln serve --repo DIR`: serve a model repository over HTTP (KServe v2 for tensor
 * engines, OpenAI for LLMs) until SIGTERM; see docs/serve.md. */
#include "cli.h"

#include "serve/serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln serve --repo DIR [options]\n"
    "\n"
    "  --repo DIR          the model repository: DIR/<model>/[config.json] and DIR/<model>/<version>/\n"
    "  --host H            listen address (default 127.0.0.1)\n"
    "  --port P            listen port (default 8000; 0: any free port, printed at start)\n"
    "  --api-key KEY       require this key (Authorization: Bearer KEY); repeatable; also KILN_API_KEYS=k1,k2\n"
    "  --keys FILE         hashed keys with per-key models and limits (docs/serve.md)\n"
    "  --config FILE       server settings (JSON): body limit, timeouts, drain deadline, default limits\n"
    "  --open-health       /v2/health/*, /metrics and / need no key\n"
    "  --access-log FILE   one JSON line per request to FILE ('-': stdout)\n";

int kiln_cmd_serve(int argc, char **argv) {
    serve_options o = {.host = "127.0.0.1", .port = 8000};
    const char **keys = calloc((size_t)argc + 1, sizeof *keys);
    if (!keys) return cli_usage_error("serve ", "out of memory");
    o.api_keys = keys;
    int rc = -1;
    for (int i = 1; i < argc && rc < 0; i++) {
        const char *a = argv[i];
        static const char *const takes_value[] = {"--repo", "--host", "--port", "--api-key", "--keys", "--config",
                                                  "--access-log"};
        bool wants_value = false;
        for (size_t k = 0; k < sizeof takes_value / sizeof takes_value[0]; k++) wants_value |= !strcmp(a, takes_value[k]);
        if (cli_is_help(a)) {
            fputs(USAGE, stdout);
            rc = 0;
        } else if (!strcmp(a, "--open-health")) {
            o.open_health = true;
        } else if (wants_value && i + 1 == argc) {
            rc = cli_usage_error("serve ", "%s needs a value", a);
        } else if (!strcmp(a, "--repo")) {
            o.repo = argv[++i];
        } else if (!strcmp(a, "--host")) {
            o.host = argv[++i];
        } else if (!strcmp(a, "--port")) {
            char *end;
            long p = strtol(argv[++i], &end, 10);
            if (*end || p < 0 || p > 65535) rc = cli_usage_error("serve ", "--port %s is not a port (0..65535)", argv[i]);
            o.port = (int)p;
        } else if (!strcmp(a, "--api-key")) {
            keys[o.n_api_keys++] = argv[++i];
        } else if (!strcmp(a, "--keys")) {
            o.keys_file = argv[++i];
        } else if (!strcmp(a, "--config")) {
            o.config_file = argv[++i];
        } else if (!strcmp(a, "--access-log")) {
            o.access_log = argv[++i];
        } else {
            rc = cli_usage_error("serve ", "unknown option '%s'", a);
        }
    }
    if (rc < 0 && !o.repo) rc = cli_usage_error("serve ", "--repo DIR is required");
    if (rc < 0) rc = serve_run(&o);
    free(keys);
    return rc;
}
