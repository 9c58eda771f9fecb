/* cmd_load.c — `kiln load URL [options]`: drive an inference server (OpenAI-compatible, KServe v2 or
 * plain HTTP) open- or closed-loop, optionally as a sweep, and report what users would feel; and
 * `kiln load compare A.json B.json`. The work is in src/load/; this file turns arguments into a
 * kiln_load_config and results into files. */
#include "cli.h"

#include "core/file.h"
#include "load/load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln load URL [options]\n"
    "       kiln load compare A.json B.json\n"
    "\n"
    "Sends load to an inference server and reports latency percentiles, throughput, errors and goodput\n"
    "under an SLO. Open loop (--rate) measures every request from its intended send time, so a server\n"
    "stall is never hidden (no coordinated omission). URL is the server root (http://HOST:PORT), which\n"
    "gets the API's standard path, or a full endpoint URL. See docs/load.md.\n"
    "\n"
    "what to call:\n"
    "  --api KIND             openai-chat | openai-completions | kserve | http (default http)\n"
    "  --model NAME           OpenAI model (default: the first of GET /v1/models); KServe model name\n"
    "  --model-version V      KServe model version\n"
    "  --stream               OpenAI: stream (SSE) and measure TTFT, inter-token latency and TPOT\n"
    "  -H, --header 'K: V'    add a request header (repeatable)\n"
    "  --method M             http: request method (default GET, or POST with a body)\n"
    "  --data TEXT            http: request body\n"
    "  --body FILE            http: request body read from FILE\n"
    "  --transport T          native (kiln's HTTP/1.1 client; http:// only, fastest), curl (libcurl;\n"
    "                         https://) or auto (default: native for http://, curl for https://)\n"
    "\n"
    "load (every run is bounded by --duration and/or --requests):\n"
    "  --rate R               open loop at R requests/s, constant spacing\n"
    "  --poisson              open loop with Poisson arrivals at --rate\n"
    "  --concurrency N        closed loop with N requests in flight (the default: 1)\n"
    "  --connections N        open loop: at most N requests in flight (default 256); requests beyond\n"
    "                         wait, keeping their intended send time\n"
    "  --threads N            N event loops on N threads, each with its share of the connections\n"
    "                         (or concurrency), rate and requests; results merged (default 1). More\n"
    "                         when one loop cannot keep up (large bodies: binary tensors)\n"
    "  --duration D           measured window, e.g. 30s (default 10s unless --requests is given)\n"
    "  --requests N           measured requests (with --duration, whichever ends first)\n"
    "  --warmup D             warm-up before each measured window, not counted (default 1s; 0: none)\n"
    "  --timeout D            per-request timeout (default 60s)\n"
    "  --seed N               seed for arrivals, prompts and lengths (default 1)\n"
    "\n"
    "sweeps:\n"
    "  --sweep rate=R1,R2,..  one step per rate (open loop), or concurrency=N1,N2,.. (closed loop);\n"
    "                         each step has its own warm-up and measured window\n"
    "  --stop-when C[,C..]    end the sweep after a step where any condition holds: [METRIC_]STAT>D\n"
    "                         (METRIC e2e|ttft|itl|tpot, STAT p50|p90|p95|p99|p99.9|max|mean; e.g.\n"
    "                         p99>500ms, ttft_p99>200ms) or errors>PCT% (e.g. errors>1%)\n"
    "\n"
    "SLO and capacity planning:\n"
    "  --slo T=D[,T=D..]      per-request SLO, terms ttft, tpot, itl (every gap), e2e; e.g.\n"
    "                         ttft=200ms,tpot=50ms,e2e=2s. Goodput = requests within it / scheduled\n"
    "  --goodput PCT          share of scheduled requests that must be within the SLO (default 99)\n"
    "  --target-rate R        requests/s the fleet must serve: prints how many servers that takes\n"
    "\n"
    "prompts (OpenAI):\n"
    "  --input-len DIST       prompt length in tokens (words): N | fixed:N | uniform:LO,HI |\n"
    "                         normal:MEAN,SD (default 128)\n"
    "  --output-len DIST      max_tokens per request, same forms (default 128)\n"
    "  --prompts FILE.jsonl   prompts from a file: {\"prompt\": ...} or {\"messages\": [...]}, optional\n"
    "                         \"max_tokens\"; used in turn\n"
    "  --ignore-eos           ask the server to generate exactly max_tokens (\"ignore_eos\": true)\n"
    "  --extra JSON           extra request members, e.g. '{\"temperature\":0}'\n"
    "\n"
    "KServe v2:\n"
    "  --input NAME=FILE.npy  input from a .npy file (repeatable); other inputs are generated from\n"
    "                         the model's metadata (GET /v2/models/NAME)\n"
    "  --shape NAME=DIMS      shape of a generated input, e.g. input=8x3x224x224 (default: the\n"
    "                         metadata's, with -1 as 1)\n"
    "  --binary               send tensors with the binary data extension\n"
    "\n"
    "server metrics:\n"
    "  --scrape               scrape ROOT/metrics (Prometheus text) during the run for GPU utilization\n"
    "  --metrics-url URL      scrape this URL instead (implies --scrape)\n"
    "  --metrics-match TEXT   keep series whose name contains TEXT (default: names with gpu and util)\n"
    "  --scrape-interval D    time between scrapes (default 1s)\n"
    "\n"
    "output:\n"
    "  --json FILE            full results (input of `kiln load compare`)\n"
    "  --csv FILE             one row per step\n"
    "  --report FILE.html     self-contained report: latency CDF, throughput vs latency across a\n"
    "                         sweep, TTFT and ITL histograms, rate and latency over time\n"
    "  -q, --quiet            no progress lines on stderr\n"
    "  -h, --help             this help\n"
    "\n"
    "exit status: 0 done (and the SLO met, when one is given), 1 error or every request failed,\n"
    "2 bad arguments, 3 the SLO was not met (for a sweep: by no step).\n";

/* Flag parsing state: argv and the value of the flag being handled. */
typedef struct args {
    int argc, i;
    char **argv;
    const char *flag;
} args;

/* Takes the flag's value ("--flag VALUE" or "--flag=VALUE"); NULL when missing. */
static const char *value(args *a, const char *inline_value) {
    if (inline_value) return inline_value;
    return a->i + 1 < a->argc ? a->argv[++a->i] : NULL;
}

/* Parses a number in [lo, hi] (whole when `whole`), or prints a usage error and returns false. */
static bool number(const char *flag, const char *text, double lo, double hi, bool whole, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !isfinite(v) || v < lo || v > hi || (whole && v != floor(v))) {
        cli_usage_error("load ", "%s '%s': expected a %s in [%g, %g]", flag, text, whole ? "whole number" : "number", lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* A duration in seconds ("0" allowed when allow_zero). */
static bool seconds(const char *flag, const char *text, bool allow_zero, double *out) {
    char *end;
    if (allow_zero && strtod(text, &end) == 0 && end != text && (!*end || !strcmp(end, "s") || !strcmp(end, "ms"))) {
        *out = 0;
        return true;
    }
    int64_t us;
    if (kiln_load_parse_duration_us(text, &us) != KILN_OK) {
        cli_usage_error("load ", "%s: %s", flag, kiln_last_error());
        return false;
    }
    *out = (double)us / 1e6;
    return true;
}

typedef struct outputs {
    const char *json, *csv, *html;
    bool have_rate, have_conc;
    char *body; /* --body FILE's contents (owned) */
} outputs;

/* Reads --body FILE into o->body (freed by kiln_cmd_load) and points the config at it. */
static bool read_body(const char *path, kiln_load_config *c, outputs *o) {
    kiln_file_map m;
    if (kiln_file_map_open(path, &m) != KILN_OK) {
        cli_usage_error("load ", "--body: %s", kiln_last_error());
        return false;
    }
    char *buf = malloc(m.size + 1);
    if (buf) {
        if (m.size) memcpy(buf, m.data, m.size);
        buf[m.size] = '\0';
    }
    kiln_file_unmap(&m);
    free(o->body);
    o->body = buf;
    c->body = buf;
    c->body_len = buf ? m.size : 0;
    if (!buf) cli_usage_error("load ", "--body %s: out of memory", path);
    return buf != NULL;
}

/* Handles one option (a->argv[a->i]); false after printing a usage error. */
static bool option(args *a, kiln_load_config *c, outputs *o) {
    char name[64];
    const char *arg = a->argv[a->i], *eq = strchr(arg, '=');
    snprintf(name, sizeof name, "%.*s", eq && !strncmp(arg, "--", 2) ? (int)(eq - arg) : (int)strlen(arg), arg);
    const char *inl = eq && !strncmp(arg, "--", 2) ? eq + 1 : NULL;
    double d;
    static const char *const SWITCHES[] = {"--stream", "--poisson", "--ignore-eos", "--binary", "--scrape", "-q", "--quiet"};
    for (size_t k = 0; k < sizeof SWITCHES / sizeof SWITCHES[0]; k++) {
        if (strcmp(name, SWITCHES[k])) continue;
        if (inl) return cli_usage_error("load ", "%s takes no value", name), false;
        if (!strcmp(name, "--stream")) c->stream = true;
        else if (!strcmp(name, "--poisson")) c->poisson = true;
        else if (!strcmp(name, "--ignore-eos")) c->ignore_eos = true;
        else if (!strcmp(name, "--binary")) c->kserve_binary = true;
        else if (!strcmp(name, "--scrape")) c->metrics_url = c->metrics_url ? c->metrics_url : "";
        else c->progress = false;
        return true;
    }
    const char *v = value(a, inl);
    if (!v) return cli_usage_error("load ", "%s needs a value (or unknown option)", name), false;
    kiln_status s = KILN_OK;
    if (!strcmp(name, "--api")) s = kiln_load_parse_api(v, &c->api);
    else if (!strcmp(name, "--transport")) s = kiln_load_parse_transport(v, &c->transport);
    else if (!strcmp(name, "--model")) c->model = v;
    else if (!strcmp(name, "--model-version")) c->model_version = v;
    else if (!strcmp(name, "-H") || !strcmp(name, "--header")) {
        if (!strchr(v, ':')) return cli_usage_error("load ", "--header '%s': expected 'Name: value'", v), false;
        if (c->nheaders == KILN_LOAD_MAX_HEADERS) return cli_usage_error("load ", "more than %d headers", KILN_LOAD_MAX_HEADERS), false;
        c->headers[c->nheaders++] = v;
    } else if (!strcmp(name, "--method")) c->method = v;
    else if (!strcmp(name, "--data")) { c->body = v; c->body_len = strlen(v); }
    else if (!strcmp(name, "--body")) return read_body(v, c, o);
    else if (!strcmp(name, "--rate")) { if (!number(name, v, 1e-3, 1e7, false, &c->rate)) return false; o->have_rate = true; }
    else if (!strcmp(name, "--concurrency")) { if (!number(name, v, 1, 100000, true, &d)) return false; c->concurrency = (int)d; o->have_conc = true; }
    else if (!strcmp(name, "--connections")) { if (!number(name, v, 1, 100000, true, &d)) return false; c->connections = (int)d; }
    else if (!strcmp(name, "--threads")) { if (!number(name, v, 1, KILN_LOAD_MAX_THREADS, true, &d)) return false; c->threads = (int)d; }
    else if (!strcmp(name, "--duration")) return seconds(name, v, false, &c->duration_s);
    else if (!strcmp(name, "--requests")) { if (!number(name, v, 1, 1e12, true, &d)) return false; c->requests = (int64_t)d; }
    else if (!strcmp(name, "--warmup")) return seconds(name, v, true, &c->warmup_s);
    else if (!strcmp(name, "--timeout")) return seconds(name, v, false, &c->timeout_s);
    else if (!strcmp(name, "--seed")) { if (!number(name, v, 0, 9007199254740992.0, true, &d)) return false; c->seed = (uint64_t)d; }
    else if (!strcmp(name, "--sweep")) s = kiln_load_parse_sweep(v, c);
    else if (!strcmp(name, "--stop-when")) s = kiln_load_parse_stop(v, c);
    else if (!strcmp(name, "--slo")) s = kiln_load_parse_slo(v, c);
    else if (!strcmp(name, "--goodput")) { if (!number(name, v, 0.001, 100, false, &d)) return false; c->goodput_share = d / 100; }
    else if (!strcmp(name, "--target-rate")) return number(name, v, 1e-6, 1e12, false, &c->target_rate);
    else if (!strcmp(name, "--input-len")) s = kiln_len_dist_parse(v, &c->input_len);
    else if (!strcmp(name, "--output-len")) s = kiln_len_dist_parse(v, &c->output_len);
    else if (!strcmp(name, "--prompts")) c->prompts_path = v;
    else if (!strcmp(name, "--extra")) c->extra_json = v;
    else if (!strcmp(name, "--input")) s = kiln_load_parse_input(v, c);
    else if (!strcmp(name, "--shape")) s = kiln_load_parse_shape(v, c);
    else if (!strcmp(name, "--metrics-url")) c->metrics_url = v;
    else if (!strcmp(name, "--metrics-match")) c->metrics_match = v;
    else if (!strcmp(name, "--scrape-interval")) return seconds(name, v, false, &c->scrape_interval_s);
    else if (!strcmp(name, "--json")) o->json = v;
    else if (!strcmp(name, "--csv")) o->csv = v;
    else if (!strcmp(name, "--report")) o->html = v;
    else return cli_usage_error("load ", "unknown option '%s'", name), false;
    if (s != KILN_OK) return cli_usage_error("load ", "%s", kiln_last_error()), false;
    return true;
}

/* Cross-checks options that only make sense together; false after a usage error. */
static bool consistent(kiln_load_config *c, const outputs *o) {
    if (o->have_rate && o->have_conc) return cli_usage_error("load ", "--rate (open loop) and --concurrency (closed loop) exclude each other"), false;
    if (c->sweep == KILN_SWEEP_RATE && o->have_conc) return cli_usage_error("load ", "--sweep rate=... is open loop: drop --concurrency"), false;
    if (c->sweep == KILN_SWEEP_CONCURRENCY && o->have_rate) return cli_usage_error("load ", "--sweep concurrency=... is closed loop: drop --rate"), false;
    if (c->poisson && !o->have_rate && c->sweep != KILN_SWEEP_RATE) return cli_usage_error("load ", "--poisson needs --rate or --sweep rate=..."), false;
    if (c->nstops && c->sweep == KILN_SWEEP_NONE) return cli_usage_error("load ", "--stop-when applies to a --sweep"), false;
    if (c->duration_s <= 0 && c->requests <= 0) c->duration_s = 10;
    return true;
}

/* `kiln load URL ...` after the help and compare cases; o->body is freed by the caller. */
static int load_command(int argc, char **argv, outputs *o) {
    kiln_load_config c;
    kiln_load_config_defaults(&c);
    c.progress = true;
    args a = {.argc = argc, .argv = argv};
    for (a.i = 1; a.i < argc; a.i++) {
        const char *arg = argv[a.i];
        if (cli_is_help(arg)) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (arg[0] == '-' && arg[1]) {
            if (!option(&a, &c, o)) return 2;
        } else if (!c.url) {
            c.url = arg;
        } else {
            return cli_usage_error("load ", "unexpected argument '%s' (one URL only)", arg);
        }
    }
    if (!c.url) return cli_usage_error("load ", "no URL given");
    if (!consistent(&c, o)) return 2;
    kiln_load_result *r;
    kiln_status s = kiln_load_run(&c, &r);
    if (s == KILN_ERR_INVALID_ARGUMENT) return cli_usage_error("load ", "%s", kiln_last_error());
    if (s != KILN_OK) return cli_fail();
    kiln_load_print_summary(&c, r, stdout);
    int rc = 0;
    if (o->json && kiln_load_write_json(&c, r, o->json) != KILN_OK) rc = cli_fail();
    if (o->csv && kiln_load_write_csv(&c, r, o->csv) != KILN_OK) rc = cli_fail();
    if (o->html && kiln_load_write_html(&c, r, o->html) != KILN_OK) rc = cli_fail();
    int64_t ok = 0, sched = 0;
    for (int i = 0; i < r->nsteps; i++) {
        ok += r->steps[i].ok;
        sched += r->steps[i].scheduled;
    }
    if (rc == 0 && ok == 0 && sched > 0) {
        fprintf(stderr, "kiln: error: every request failed (first: %s)\n", r->steps[0].first_error);
        rc = 1;
    }
    if (rc == 0 && r->have_capacity && r->capacity_step < 0) rc = 3;
    kiln_load_result_free(r);
    return rc;
}

int kiln_cmd_load(int argc, char **argv) {
    if (argc >= 2 && cli_is_help(argv[1])) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "compare")) {
        if (argc != 4) return cli_usage_error("load ", "usage: kiln load compare A.json B.json");
        return kiln_load_compare(argv[2], argv[3], stdout) == KILN_OK ? 0 : cli_fail();
    }
    outputs o = {0};
    int rc = load_command(argc, argv, &o);
    free(o.body);
    return rc;
}
