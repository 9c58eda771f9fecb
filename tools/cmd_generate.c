/* cmd_generate.c — `kiln generate DIR|ENGINE --prompt TEXT`: loads a Hugging Face checkpoint and its
 * tokenizer (or an LLM engine built from one), runs one request through the scheduler (scheduler.h) on the CPU or CUDA
 * forward step (llm_runner.h; on CUDA the tokens are sampled on the GPU unless KILN_LLM_HOST_SAMPLER=1), streams
 * the text to stdout as it is generated (whole UTF-8 characters only, and never a stop string or the
 * start of one), and prints a timing line to stderr. */
#include "cli.h"

#include "core/status.h"
#include "core/strbuf.h"
#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/llm_runner.h"
#include "llm/llm_engine.h"
#include "llm/scheduler.h"
#include "llm/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE =
    "usage: kiln generate DIR|ENGINE.kiln --prompt TEXT [options]\n"
    "\n"
    "Generates text with the model in DIR (a Hugging Face checkpoint: config.json, *.safetensors and\n"
    "tokenizer.json) or in an LLM engine (kiln build --hf), on the CPU or the GPU, printing it to\n"
    "stdout as it comes. Generation stops at an end-of-sequence\n"
    "token (the tokenizer's eos, config.json's and generation_config.json's eos_token_id), a --stop\n"
    "string (not printed), or --max-tokens. The sampling defaults are llama.cpp's (llama-cli); vLLM's\n"
    "API defaults are --temperature 1 --top-k 0 --top-p 1 --min-p 0. Processing order (vLLM's):\n"
    "penalties, temperature, top-k, top-p, min-p.\n"
    "\n"
    "options:\n"
    "  --prompt TEXT               the prompt (required); the tokenizer's bos is added as it specifies\n"
    "  --max-tokens N              tokens to generate at most (default 64)\n"
    "  --temperature T             0 = greedy: the most likely token, lowest id on ties (default 0.8)\n"
    "  --top-k K                   sample from the K most likely tokens; 0 = off (default 40)\n"
    "  --top-p P                   ... from the smallest set holding probability P; 1 = off (default 0.95)\n"
    "  --min-p P                   ... from tokens at least P x the most likely one's; 0 = off (default 0.05)\n"
    "  --repetition-penalty R      divide positive / multiply negative logits of tokens seen in the\n"
    "                              prompt or output (Hugging Face); 1 = off (default 1)\n"
    "  --frequency-penalty F       subtract F x count of each generated token (OpenAI, -2..2; default 0)\n"
    "  --presence-penalty P        subtract P once from each generated token (OpenAI, -2..2; default 0)\n"
    "  --seed S                    random seed (default: from the clock; printed in the timing line)\n"
    "  --stop STR                  stop before the first occurrence of STR (repeatable)\n"
    "  --kv-budget-mb N            KV cache size (default: what prompt + max-tokens need)\n"
    "  --target cpu|cuda           where the model runs (default cpu): cpu computes in fp32; cuda in\n"
    "                              bf16 for a bf16 engine, else fp16\n"
    "  --device N                  the CUDA device (default 0)\n"
    "  --print-ids                 print {\"prompt_ids\", \"generated_ids\", \"finish\"} to stderr at the end\n"
    "  -h, --help                  this help\n"
    "\n"
    "The timing line (stderr): prompt tokens; prefill = forward time before the first token (and\n"
    "prompt tokens/s); TTFT = time from the request to its first token; TPOT = mean time per output\n"
    "token after the first (and tokens/s); finish reason; load time.\n";

#define MAX_STOPS 16
#define MAX_STOP_IDS 16
#define BLOCK_SIZE 16

typedef struct gen_args {
    const char *dir, *prompt;
    int max_tokens;
    kiln_sampling_params sp;
    bool seed_given, print_ids;
    const char *stops[MAX_STOPS];
    int n_stops;
    double kv_budget_mb; /* 0: fit the request */
    const char *target;  /* "cpu" or "cuda" */
    int device;
} gen_args;

static int parse_number(const char *opt, const char *val, double lo, double hi, bool integer, double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (end == val || *end || errno || !(v >= lo && v <= hi) || (integer && v != floor(v)))
        return cli_usage_error("generate ", "%s expects %s in [%g, %g], got '%s'", opt,
                               integer ? "an integer" : "a number", lo, hi, val);
    *out = v;
    return -1;
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, gen_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 64;
    a->target = "cpu";
    a->sp = kiln_sampling_defaults();
    a->sp.temperature = 0.8f; /* llama.cpp's defaults */
    a->sp.top_k = 40;
    a->sp.top_p = 0.95f;
    a->sp.min_p = 0.05f;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(s, "--print-ids")) {
            a->print_ids = true;
            continue;
        }
        if (s[0] != '-') {
            if (a->dir) return cli_usage_error("generate ", "unexpected argument '%s'", s);
            a->dir = s;
            continue;
        }
        static const char *const takes_value[] = {"--prompt", "--stop", "--max-tokens", "--temperature", "--top-k",
                                                  "--top-p", "--min-p", "--repetition-penalty", "--frequency-penalty",
                                                  "--presence-penalty", "--seed", "--kv-budget-mb", "--target",
                                                  "--device"};
        bool known = false;
        for (size_t k = 0; k < sizeof takes_value / sizeof *takes_value; k++) known |= !strcmp(s, takes_value[k]);
        if (!known) return cli_usage_error("generate ", "unknown option '%s'", s);
        if (!val) return cli_usage_error("generate ", "%s needs a value", s);
        double v = 0;
        int rc = -1;
        i++;
        if (!strcmp(s, "--prompt")) a->prompt = val;
        else if (!strcmp(s, "--stop")) {
            if (a->n_stops == MAX_STOPS) return cli_usage_error("generate ", "at most %d --stop strings", MAX_STOPS);
            if (!*val) return cli_usage_error("generate ", "--stop needs a non-empty string");
            a->stops[a->n_stops++] = val;
        } else if (!strcmp(s, "--max-tokens")) {
            if ((rc = parse_number(s, val, 1, 1e9, true, &v)) < 0) a->max_tokens = (int)v;
        } else if (!strcmp(s, "--temperature")) {
            if ((rc = parse_number(s, val, 0, 1e6, false, &v)) < 0) a->sp.temperature = (float)v;
        } else if (!strcmp(s, "--top-k")) {
            if ((rc = parse_number(s, val, 0, 1e9, true, &v)) < 0) a->sp.top_k = (int)v;
        } else if (!strcmp(s, "--top-p")) {
            if ((rc = parse_number(s, val, 1e-9, 1, false, &v)) < 0) a->sp.top_p = (float)v;
        } else if (!strcmp(s, "--min-p")) {
            if ((rc = parse_number(s, val, 0, 1, false, &v)) < 0) a->sp.min_p = (float)v;
        } else if (!strcmp(s, "--repetition-penalty")) {
            if ((rc = parse_number(s, val, 1e-6, 1e6, false, &v)) < 0) a->sp.repetition_penalty = (float)v;
        } else if (!strcmp(s, "--frequency-penalty")) {
            if ((rc = parse_number(s, val, -2, 2, false, &v)) < 0) a->sp.frequency_penalty = (float)v;
        } else if (!strcmp(s, "--presence-penalty")) {
            if ((rc = parse_number(s, val, -2, 2, false, &v)) < 0) a->sp.presence_penalty = (float)v;
        } else if (!strcmp(s, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long seed = strtoull(val, &end, 10);
            if (end == val || *end || errno || val[0] == '-')
                return cli_usage_error("generate ", "--seed expects a non-negative integer, got '%s'", val);
            a->sp.seed = seed;
            a->seed_given = true;
        } else if (!strcmp(s, "--kv-budget-mb")) {
            rc = parse_number(s, val, 1e-6, 1e9, false, &a->kv_budget_mb);
        } else if (!strcmp(s, "--target")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda"))
                return cli_usage_error("generate ", "--target expects cpu or cuda, got '%s'", val);
            a->target = val;
        } else if (!strcmp(s, "--device")) {
            if ((rc = parse_number(s, val, 0, 1024, true, &v)) < 0) a->device = (int)v;
        }
        if (rc >= 0) return rc;
    }
    if (!a->dir) return cli_usage_error("generate ", "a checkpoint directory or LLM engine is required");
    if (!a->prompt) return cli_usage_error("generate ", "--prompt is required");
    return -1;
}

/* One generation: the loaded parts, the text streamed so far and the timings. */
typedef struct gen_run {
    const gen_args *a;
    kiln_llm_bundle llm;    /* owns model and tok */
    kiln_llm_model *model;
    kiln_tokenizer *tok;
    llm_runner *runner;
    kiln_kv_cache *kv;
    kiln_scheduler *sched;
    int32_t *prompt_ids, *out_ids;
    size_t n_prompt;
    int n_out;
    int32_t stop_ids[MAX_STOP_IDS];
    int n_stop_ids;
    kiln_tokenizer_stream stream;
    kiln_strbuf text;   /* everything decoded so far */
    size_t printed;     /* bytes of text written to stdout */
    bool stopped;       /* a stop string was found: nothing more is printed */
    kiln_finish_reason finish;
    double forward_ms, prefill_ms, t_request, t_first, t_last, load_ms;
} gen_run;

static kiln_status timed_forward(void *ctx, kiln_kv_cache *kv, const kiln_llm_batch *b, float *logits) {
    gen_run *g = ctx;
    double t = cli_now_ms();
    kiln_status st = llm_runner_forward(g->runner, kv, b, logits);
    g->forward_ms += cli_now_ms() - t;
    return st;
}

/* The GPU sampler's call (--target cuda): it waits for the step, so its time counts as forward time. */
static kiln_status timed_sample(void *ctx, int n_rows, const kiln_sched_sample_row *rows, float *host_logits,
                                int32_t *tokens) {
    gen_run *g = ctx;
    double t = cli_now_ms();
    kiln_status st = llm_runner_sample(g->runner, n_rows, rows, host_logits, tokens);
    g->forward_ms += cli_now_ms() - t;
    return st;
}

static void add_stop_id(gen_run *g, double id) {
    int vocab = kiln_llm_model_config(g->model)->vocab;
    if (id < 0 || id >= vocab || id != floor(id) || g->n_stop_ids == MAX_STOP_IDS) return;
    for (int i = 0; i < g->n_stop_ids; i++)
        if (g->stop_ids[i] == (int32_t)id) return;
    g->stop_ids[g->n_stop_ids++] = (int32_t)id;
}

/* The end-of-sequence ids: the tokenizer's, config.json's, and generation_config.json's eos_token_id
 * (a number or a list; instruction-tuned models name their end-of-turn token there). */
static void collect_stop_ids(gen_run *g) {
    add_stop_id(g, kiln_tokenizer_eos_id(g->tok));
    add_stop_id(g, kiln_llm_model_config(g->model)->eos_id);
    for (int i = 0; i < g->llm.n_gen_eos; i++) add_stop_id(g, g->llm.gen_eos[i]);
}

static void print_upto(gen_run *g, size_t upto) {
    if (upto <= g->printed) return;
    fwrite(g->text.data + g->printed, 1, upto - g->printed, stdout);
    fflush(stdout);
    g->printed = upto;
}

/* Prints the new text except what could still become a stop string; at a stop string, prints the
 * text before it and ends the request. */
static kiln_status print_new_text(gen_run *g, uint64_t id) {
    const char *t = g->text.data ? g->text.data : "";
    size_t len = g->text.len, first = len, hold = 0;
    for (int k = 0; k < g->a->n_stops; k++) {
        const char *hit = strstr(t + g->printed, g->a->stops[k]);
        if (hit && (size_t)(hit - t) < first) first = (size_t)(hit - t);
        size_t sl = strlen(g->a->stops[k]);
        for (size_t n = sl - 1; n > hold; n--) /* longest tail of the text that starts this stop string */
            if (n <= len - g->printed && !memcmp(t + len - n, g->a->stops[k], n)) {
                hold = n;
                break;
            }
    }
    if (first < len) {
        print_upto(g, first);
        g->stopped = true;
        return kiln_scheduler_finish(g->sched, id, KILN_FINISH_STOP_STRING);
    }
    print_upto(g, len - hold);
    return KILN_OK;
}

static kiln_status on_token(gen_run *g, const kiln_sched_event *ev) {
    double now = cli_now_ms();
    if (!g->n_out) {
        g->t_first = now;
        g->prefill_ms = g->forward_ms;
    }
    g->t_last = now;
    g->out_ids[g->n_out++] = ev->sample.token;
    if (ev->finish == KILN_FINISH_STOP_TOKEN) return KILN_OK; /* eos prints nothing */
    KILN_TRY(kiln_tokenizer_stream_push(g->tok, &g->stream, ev->sample.token, true, &g->text));
    return print_new_text(g, ev->id);
}

/* The forward for --target, and a KV cache sized by --kv-budget-mb or for the request. */
static kiln_status make_runner_and_cache(gen_run *g) {
    const kiln_llm_config *c = kiln_llm_model_config(g->model);
    int64_t total = (int64_t)g->n_prompt + g->a->max_tokens;
    if (total > c->max_pos) total = c->max_pos;
    llm_runner_options ro = {.target = g->a->target, .device = g->a->device, .max_seqs = 1,
                             .max_tokens = (int)g->n_prompt, .max_context = (int)total,
                             .bf16 = g->llm.weights == KILN_PRECISION_BF16};
    char desc[256];
    KILN_TRY(llm_runner_create(g->model, &ro, desc, sizeof desc, &g->runner));
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = BLOCK_SIZE, .dtype = KILN_F32};
    if (g->a->kv_budget_mb > 0) {
        kc.n_blocks = kiln_kv_cache_blocks_for_budget(&kc, (uint64_t)(g->a->kv_budget_mb * 1048576.0));
        if (!kc.n_blocks)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--kv-budget-mb %g holds no KV-cache block of this model",
                              g->a->kv_budget_mb);
    } else {
        kc.n_blocks = total > 1 ? (int)((total - 1 + BLOCK_SIZE - 1) / BLOCK_SIZE) : 1;
    }
    return llm_runner_make_cache(g->runner, kc.n_blocks, BLOCK_SIZE, false, &g->kv);
}

static kiln_status setup(gen_run *g) {
    double t0 = cli_now_ms();
    KILN_TRY(kiln_llm_bundle_open(g->a->dir, true, &g->llm));
    g->model = g->llm.model;
    g->tok = g->llm.tok;
    g->load_ms = cli_now_ms() - t0;
    collect_stop_ids(g);
    KILN_TRY(kiln_tokenizer_encode(g->tok, g->a->prompt, strlen(g->a->prompt), true, &g->prompt_ids, &g->n_prompt));
    if (!g->n_prompt) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the prompt encodes to no token");
    if (!(g->out_ids = malloc((size_t)g->a->max_tokens * sizeof *g->out_ids)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d tokens", g->a->max_tokens);
    KILN_TRY(make_runner_and_cache(g));
    const kiln_llm_config *c = kiln_llm_model_config(g->model);
    kiln_scheduler_config sc = {.forward = timed_forward, .sample = llm_runner_sample_fn(g->runner) ? timed_sample : NULL,
                                .model = g, .kv = g->kv, .vocab = c->vocab, .max_model_len = c->max_pos,
                                .max_num_seqs = 1};
    return kiln_scheduler_create(&sc, &g->sched);
}

static kiln_status generate(gen_run *g) {
    KILN_TRY(setup(g));
    kiln_request_params rp = {.prompt = g->prompt_ids, .n_prompt = (int)g->n_prompt, .max_tokens = g->a->max_tokens,
                              .sampling = g->a->sp, .stop_ids = g->stop_ids, .n_stop_ids = g->n_stop_ids};
    uint64_t id;
    g->t_request = cli_now_ms();
    KILN_TRY(kiln_scheduler_add(g->sched, &rp, &id));
    while (kiln_scheduler_has_work(g->sched)) {
        const kiln_sched_event *ev;
        int n;
        kiln_status st = kiln_scheduler_step(g->sched, &ev, &n);
        for (int i = 0; i < n; i++) {
            if (ev[i].finish == KILN_FINISH_ERROR)
                return kiln_error(st != KILN_OK ? st : KILN_ERR_INVALID_ARGUMENT, "%s%s", ev[i].message,
                                  st == KILN_OK && g->a->kv_budget_mb > 0 ? " (raise --kv-budget-mb)" : "");
            if (ev[i].sample.token >= 0) KILN_TRY(on_token(g, &ev[i]));
            if (ev[i].finish != KILN_FINISH_NONE) g->finish = ev[i].finish;
        }
        KILN_TRY(st);
    }
    if (!g->stopped) {
        kiln_tokenizer_stream_flush(&g->stream, &g->text);
        print_upto(g, g->text.len);
    }
    if (isatty(STDOUT_FILENO) && g->printed && g->text.data[g->printed - 1] != '\n') putchar('\n');
    return kiln_strbuf_status(&g->text);
}

static void print_ids(const int32_t *ids, int n) {
    fputc('[', stderr);
    for (int i = 0; i < n; i++) fprintf(stderr, i ? ", %d" : "%d", ids[i]);
    fputc(']', stderr);
}

static void print_report(const gen_run *g) {
    double ttft = g->t_first - g->t_request, decode = g->t_last - g->t_first;
    fprintf(stderr, "kiln: prompt %zu tokens, prefill %.1f ms (%.1f tok/s), TTFT %.1f ms | generated %d tokens",
            g->n_prompt, g->prefill_ms, g->prefill_ms > 0 ? g->n_prompt * 1e3 / g->prefill_ms : 0.0, ttft, g->n_out);
    if (g->n_out > 1 && decode > 0)
        fprintf(stderr, ", TPOT %.2f ms (%.1f tok/s)", decode / (g->n_out - 1), (g->n_out - 1) * 1e3 / decode);
    fprintf(stderr, " | finish %s | load %.0f ms", kiln_finish_reason_name(g->finish), g->load_ms);
    if (g->a->sp.temperature > 0) fprintf(stderr, " | seed %llu", (unsigned long long)g->a->sp.seed);
    fputc('\n', stderr);
    if (!g->a->print_ids) return;
    fprintf(stderr, "{\"prompt_ids\": ");
    print_ids(g->prompt_ids, (int)g->n_prompt);
    fprintf(stderr, ", \"generated_ids\": ");
    print_ids(g->out_ids, g->n_out);
    fprintf(stderr, ", \"finish\": \"%s\"}\n", kiln_finish_reason_name(g->finish));
}

int kiln_cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (!a.seed_given) a.sp.seed = (uint64_t)(cli_now_ms() * 1e3) ^ ((uint64_t)getpid() << 32);
    if (kiln_sampling_validate(&a.sp) != KILN_OK) return cli_usage_error("generate ", "%s", kiln_last_error());
    gen_run g = {.a = &a};
    kiln_status st = generate(&g);
    if (st == KILN_OK) print_report(&g);
    kiln_scheduler_free(g.sched);
    kiln_kv_cache_free(g.kv);
    llm_runner_free(g.runner);
    kiln_llm_bundle_free(&g.llm);
    free(g.prompt_ids);
    free(g.out_ids);
    kiln_strbuf_free(&g.text);
    return st == KILN_OK ? 0 : cli_fail();
}
