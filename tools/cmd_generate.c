/* cmd_generate.c — `kiln generate DIR|ENGINE --prompt TEXT`: opens a Hugging Face checkpoint or an LLM
 * engine through the public LLM API (kiln/kiln_llm.h) on the CPU or CUDA, submits one request (the
 * prompt as given, or with --chat the model's chat template applied to it), streams its text to
 * stdout as the engine loop delivers it (whole UTF-8 characters, stop strings held back and cut),
 * and prints a timing line to stderr. */
#include "cli.h"

#include "core/status.h"
#include "core/strbuf.h"
#include "kiln/kiln_llm.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
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
    "  --chat                      the prompt is a user message: the model's chat template (tokenizer_config.json's\n"
    "                              chat_template, else ChatML) turns it into the prompt, with an assistant turn\n"
    "  --system TEXT               with --chat: a system message before it\n"
    "  --chat-template FILE        with --chat: this Jinja chat template instead of the model's\n"
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
    "  --kv-budget-mb N            KV cache size (default: one whole context, at most 1 GiB on the CPU)\n"
    "  --kv-cache auto|fp8         the KV cache's type: auto (fp32 on the CPU, 16-bit on cuda) or fp8\n"
    "                              (E4M3 with per-head scales: 4x the tokens of the CPU's fp32 cache, 2x cuda's)\n"
    "  --calib-text FILE           --kv-cache fp8: the scales from the model's keys and values over FILE\n"
    "                              (without it: scales 1.0, with a warning)\n"
    "  --no-prefix-cache           turn automatic prefix caching off (on by default; the same tokens either way)\n"
    "  --spec ngram|off            speculative decoding by prompt lookup (default off; the same tokens, greedy,\n"
    "                              or the same distribution, sampled; acceptance in the timing line)\n"
    "  --draft DIR_OR_ENGINE       speculative decoding with a draft model: a smaller model with the same\n"
    "                              tokenizer proposes the tokens (--spec draft; the same tokens as without);\n"
    "                              layers:N, the model's own first N layers (early-exit self-speculation)\n"
    "  --draft-tokens K            draft tokens per step with --spec or --draft (1..16, default 4)\n"
    "  --target cpu|cuda           where the model runs (default cpu): cpu computes in fp32; cuda in\n"
    "                              bf16 for a bf16 engine or checkpoint, else fp16\n"
    "  --device N                  the CUDA device (default 0)\n"
    "  --timing-cache FILE         cuda: reuse and extend the product tactics timed in FILE (kiln build's\n"
    "                              --timing-cache file; per GPU, driver and library versions)\n"
    "  --print-ids                 print {\"prompt_ids\", \"generated_ids\", \"finish\"} to stderr at the end\n"
    "  -h, --help                  this help\n"
    "\n"
    "The timing line (stderr): prompt tokens; prefill = forward time before the first token (and\n"
    "prompt tokens/s); TTFT = time from the request to its first token; TPOT = mean time per output\n"
    "token after the first (and tokens/s); finish reason; load time.\n";

#define MAX_STOPS 16

typedef struct gen_args {
    const char *dir, *prompt, *system, *chat_template_file;
    int max_tokens;
    kiln_sampling_params sp;
    bool seed_given, print_ids, chat, no_prefix_cache;
    const char *stops[MAX_STOPS];
    int n_stops;
    double kv_budget_mb; /* 0: fit the request */
    const char *target;  /* "cpu" or "cuda" */
    int device;
    const char *timing_cache; /* NULL: none */
    const char *spec;         /* NULL: off */
    int draft_tokens;
    const char *kv_cache, *calib_text; /* NULL: auto; NULL: none */
    const char *draft;        /* the draft model (--draft), NULL: none */
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
        if (!strcmp(s, "--no-prefix-cache")) {
            a->no_prefix_cache = true;
            continue;
        }
        if (!strcmp(s, "--print-ids") || !strcmp(s, "--chat")) {
            *(s[2] == 'p' ? &a->print_ids : &a->chat) = true;
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
                                                  "--device", "--system", "--chat-template", "--timing-cache",
                                                  "--spec", "--draft-tokens", "--draft", "--kv-cache", "--calib-text"};
        bool known = false;
        for (size_t k = 0; k < sizeof takes_value / sizeof *takes_value; k++) known |= !strcmp(s, takes_value[k]);
        if (!known) return cli_usage_error("generate ", "unknown option '%s'", s);
        if (!val) return cli_usage_error("generate ", "%s needs a value", s);
        double v = 0;
        int rc = -1;
        i++;
        if (!strcmp(s, "--prompt")) a->prompt = val;
        else if (!strcmp(s, "--system")) a->system = val;
        else if (!strcmp(s, "--chat-template")) a->chat_template_file = val;
        else if (!strcmp(s, "--timing-cache")) a->timing_cache = val;
        else if (!strcmp(s, "--calib-text")) a->calib_text = val;
        else if (!strcmp(s, "--kv-cache")) {
            if (strcmp(val, "auto") && strcmp(val, "fp8"))
                return cli_usage_error("generate ", "--kv-cache expects auto or fp8, got '%s'", val);
            a->kv_cache = val;
        } else if (!strcmp(s, "--stop")) {
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
                return cli_usage_error("generate ", "--seed expects an integer from 0 to 18446744073709551615, got '%s'", val);
            a->sp.seed = seed;
            a->seed_given = true;
        } else if (!strcmp(s, "--kv-budget-mb")) {
            rc = parse_number(s, val, 1e-6, 1e9, false, &a->kv_budget_mb);
        } else if (!strcmp(s, "--target")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda"))
                return cli_usage_error("generate ", "--target expects cpu or cuda, got '%s'", val);
            a->target = val;
        } else if (!strcmp(s, "--spec")) {
            if (strcmp(val, "ngram") && strcmp(val, "draft") && strcmp(val, "off"))
                return cli_usage_error("generate ", "--spec expects ngram, draft or off, got '%s'", val);
            a->spec = val;
        } else if (!strcmp(s, "--draft")) {
            a->draft = val;
        } else if (!strcmp(s, "--draft-tokens")) {
            if ((rc = parse_number(s, val, 1, KILN_LLM_MAX_DRAFT_TOKENS, true, &v)) < 0) a->draft_tokens = (int)v;
        } else if (!strcmp(s, "--device")) {
            if ((rc = parse_number(s, val, 0, 1024, true, &v)) < 0) a->device = (int)v;
        }
        if (rc >= 0) return rc;
    }
    if (!a->dir) return cli_usage_error("generate ", "a checkpoint directory or LLM engine is required");
    if (!a->prompt) return cli_usage_error("generate ", "--prompt is required");
    if ((a->system || a->chat_template_file) && !a->chat)
        return cli_usage_error("generate ", "--system and --chat-template go with --chat");
    if (a->draft && !a->spec) a->spec = "draft";
    if ((a->spec && !strcmp(a->spec, "draft")) != (a->draft != NULL))
        return cli_usage_error("generate ", a->draft ? "--draft goes with --spec draft" : "--spec draft needs --draft");
    if (a->draft_tokens && (!a->spec || !strcmp(a->spec, "off")))
        return cli_usage_error("generate ", "--draft-tokens goes with --spec ngram or --draft");
    return -1;
}

/* One generation: the model, the request's tokens and text as they come, and the timings. */
typedef struct gen_run {
    const gen_args *a;
    kiln_llm *llm;
    int32_t *prompt_ids, *out_ids;
    size_t n_prompt;
    int n_out, cap_out;
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    bool done, printed_any, ends_newline;
    kiln_llm_finish finish;
    char message[512];
    double busy0, prefill_ms, t_request, t_first, t_last, load_ms;
} gen_run;

/* The engine loop's events: tokens recorded, text printed as it comes. */
static void on_event(const kiln_llm_event *ev) {
    gen_run *g = ev->user;
    if (ev->token >= 0) {
        if (!g->n_out) {
            kiln_llm_stats s;
            g->t_first = ev->time_ms;
            if (kiln_llm_get_stats(g->llm, &s) == KILN_OK) g->prefill_ms = s.busy_ms - g->busy0;
        }
        g->t_last = ev->time_ms;
        if (g->n_out < g->cap_out) g->out_ids[g->n_out++] = ev->token;
    }
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        g->printed_any = true;
        g->ends_newline = ev->text[ev->text_len - 1] == '\n';
    }
    if (ev->finish == KILN_LLM_FINISH_NONE) return;
    pthread_mutex_lock(&g->mu);
    g->finish = ev->finish;
    if (ev->message) snprintf(g->message, sizeof g->message, "%s", ev->message);
    g->done = true;
    pthread_cond_signal(&g->done_cv);
    pthread_mutex_unlock(&g->mu);
}

static kiln_status read_text_file(const char *path, char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_error(KILN_ERR_IO, "cannot open --chat-template %s: %s", path, strerror(errno));
    kiln_strbuf b = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) kiln_strbuf_append(&b, buf, n);
    const bool bad = ferror(f);
    fclose(f);
    kiln_strbuf_append(&b, "", 0);
    if (bad) {
        kiln_strbuf_free(&b);
        return kiln_error(KILN_ERR_IO, "cannot read --chat-template %s", path);
    }
    *out = b.data;
    return kiln_strbuf_status(&b);
}

/* The prompt's token ids: the text as given, or (--chat) the chat template applied to the user message
 * (after --system's), whose special tokens the template writes itself. */
static kiln_status encode_prompt(gen_run *g) {
    const gen_args *a = g->a;
    if (!a->chat)
        return kiln_llm_tokenize(g->llm, a->prompt, strlen(a->prompt), true, &g->prompt_ids, &g->n_prompt);
    kiln_chat_message m[2];
    int n = 0;
    if (a->system) m[n++] = (kiln_chat_message){.role = "system", .content = a->system};
    m[n++] = (kiln_chat_message){.role = "user", .content = a->prompt};
    char *text;
    size_t len;
    KILN_TRY(kiln_llm_apply_chat_template(g->llm, m, n, true, &text, &len));
    kiln_status st = kiln_llm_tokenize(g->llm, text, len, false, &g->prompt_ids, &g->n_prompt);
    free(text);
    return st;
}

static kiln_status setup(gen_run *g, char **chat_template) {
    const gen_args *a = g->a;
    if (a->chat_template_file) KILN_TRY(read_text_file(a->chat_template_file, chat_template));
    kiln_llm_options o = {.target = a->target, .device = a->device, .max_seqs = 1, .chat_template = *chat_template,
                          .kv_cache_bytes = (uint64_t)(a->kv_budget_mb * 1048576.0),
                          .no_prefix_cache = a->no_prefix_cache, .timing_cache = a->timing_cache,
                          .spec = a->spec, .draft_tokens = a->draft_tokens, .draft = a->draft,
                          .kv_cache_dtype = a->kv_cache, .kv_calib_text = a->calib_text};
    double t0 = cli_now_ms();
    kiln_status st = kiln_llm_open(a->dir, &o, &g->llm);
    if (st != KILN_OK && a->kv_budget_mb > 0 && strstr(kiln_last_error(), "kv_cache_bytes"))
        return kiln_error(st, "--kv-budget-mb %g holds no KV-cache block of this model", a->kv_budget_mb);
    KILN_TRY(st);
    g->load_ms = cli_now_ms() - t0;
    kiln_llm_info info;
    KILN_TRY(kiln_llm_get_info(g->llm, &info));
    if (!info.has_tokenizer)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s has no tokenizer (its checkpoint had no tokenizer.json)", a->dir);
    KILN_TRY(encode_prompt(g));
    if (!g->n_prompt) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the prompt encodes to no token");
    g->cap_out = a->max_tokens;
    if (!(g->out_ids = malloc((size_t)g->cap_out * sizeof *g->out_ids)))
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d tokens", a->max_tokens);
    return KILN_OK;
}

static kiln_status generate(gen_run *g) {
    const gen_args *a = g->a;
    kiln_llm_request q = kiln_llm_request_defaults();
    q.prompt_ids = g->prompt_ids;
    q.n_prompt_ids = (int)g->n_prompt;
    q.max_tokens = a->max_tokens;
    q.sampling = a->sp;
    q.stop = a->stops;
    q.n_stop = a->n_stops;
    q.user = g;
    q.on_event = on_event;
    kiln_llm_stats s;
    KILN_TRY(kiln_llm_get_stats(g->llm, &s));
    g->busy0 = s.busy_ms;
    g->t_request = cli_now_ms();
    uint64_t id;
    kiln_status st = kiln_llm_submit(g->llm, &q, &id);
    if (st != KILN_OK && a->kv_budget_mb > 0 && strstr(kiln_last_error(), "KV-cache blocks")) {
        char why[512];
        snprintf(why, sizeof why, "%s", kiln_last_error());
        return kiln_error(st, "%s (raise --kv-budget-mb)", why);
    }
    KILN_TRY(st);
    pthread_mutex_lock(&g->mu);
    while (!g->done) pthread_cond_wait(&g->done_cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    if (isatty(STDOUT_FILENO) && g->printed_any && !g->ends_newline) putchar('\n');
    if (g->finish == KILN_LLM_FINISH_ERROR) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s", g->message);
    return KILN_OK;
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
    fprintf(stderr, " | finish %s | load %.0f ms", kiln_llm_finish_name(g->finish), g->load_ms);
    if (g->a->sp.temperature > 0) fprintf(stderr, " | seed %llu", (unsigned long long)g->a->sp.seed);
    kiln_llm_stats s;
    if (g->a->spec && strcmp(g->a->spec, "off") && kiln_llm_get_stats(g->llm, &s) == KILN_OK)
        fprintf(stderr, " | spec acceptance %.2f (%llu of %llu drafts), %.2f tokens per step",
                s.spec_drafted ? (double)s.spec_accepted / (double)s.spec_drafted : 0.0,
                (unsigned long long)s.spec_accepted, (unsigned long long)s.spec_drafted,
                s.spec_steps ? (double)s.spec_emitted / (double)s.spec_steps : 0.0);
    kiln_llm_info info;
    if (g->a->kv_cache && !strcmp(g->a->kv_cache, "fp8") && kiln_llm_get_info(g->llm, &info) == KILN_OK)
        fprintf(stderr, " | KV cache fp8: %d blocks, %lld tokens", info.kv_blocks_total,
                (long long)info.kv_blocks_total * info.block_size);
    fputc('\n', stderr);
    if (!g->a->print_ids) return;
    fprintf(stderr, "{\"prompt_ids\": ");
    print_ids(g->prompt_ids, (int)g->n_prompt);
    fprintf(stderr, ", \"generated_ids\": ");
    print_ids(g->out_ids, g->n_out);
    fprintf(stderr, ", \"finish\": \"%s\"}\n", kiln_llm_finish_name(g->finish));
}

int kiln_cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (!a.seed_given) a.sp.seed = (uint64_t)(cli_now_ms() * 1e3) ^ ((uint64_t)getpid() << 32);
    if (kiln_sampling_validate(&a.sp) != KILN_OK) return cli_usage_error("generate ", "%s", kiln_last_error());
    gen_run g = {.a = &a};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.done_cv, NULL);
    char *chat_template = NULL;
    kiln_status st = setup(&g, &chat_template);
    if (st == KILN_OK) st = generate(&g);
    if (st == KILN_OK) print_report(&g);
    kiln_llm_close(g.llm);
    free(chat_template);
    free(g.prompt_ids);
    free(g.out_ids);
    pthread_cond_destroy(&g.done_cv);
    pthread_mutex_destroy(&g.mu);
    return st == KILN_OK ? 0 : cli_fail();
}
