/* cmd_compare_llm.c — `kiln compare --llm A B --prompts FILE`: how closely two LLMs (engines or Hugging
 * Face checkpoints, of any precision, on any target) agree under greedy decoding, through the public
 * LLM API: every prompt generates --max-tokens tokens (eos ignored) on each, one request at a time
 * (so that both see the same batches); reports the share of prompts whose tokens are identical, the
 * mean length of the matching prefix, and the share whose first token (top-1 of the prompt's logits)
 * agrees. */
#include "cli.h"

#include "core/file.h"
#include "core/status.h"
#include "kiln/kiln_llm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln compare --llm A B --prompts FILE [options]\n"
    "\n"
    "Greedy-decoding agreement of two LLMs A and B (LLM engines from `kiln build --hf`, or Hugging\n"
    "Face checkpoint directories; their vocabularies must be the same size): each non-empty line of\n"
    "FILE is a prompt, encoded by each model's tokenizer; each model generates --max-tokens tokens for\n"
    "it (greedy, end-of-sequence ignored). Prints the share of prompts whose tokens are identical, the\n"
    "mean length of the matching prefix, and the first-token (top-1) agreement.\n"
    "\n"
    "options:\n"
    "  --prompts FILE         one prompt per line (required)\n"
    "  --max-tokens N         tokens generated per prompt (default 32)\n"
    "  --target cpu|cuda      where both run (default cpu)\n"
    "  --target-a T, --target-b T  where A, or B, runs (overrides --target)\n"
    "  --device N             the CUDA device (default 0)\n"
    "  --kv-cache-a auto|fp8, --kv-cache-b auto|fp8  A's, or B's, KV cache (default auto; fp8: E4M3\n"
    "                         with per-head scales)\n"
    "  --calib-text FILE      the fp8 KV scales from each model's keys and values over FILE (without\n"
    "                         it: 1.0, with a warning)\n"
    "  -h, --help             this help\n";

#define MAX_PROMPTS 100000

typedef struct llm_cmp_args {
    const char *a, *b, *prompts, *target_a, *target_b;
    const char *kv_a, *kv_b, *calib_text; /* NULL: auto; NULL: none */
    int max_tokens, device;
} llm_cmp_args;

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, llm_cmp_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 32;
    a->target_a = a->target_b = "cpu";
    const char *target = NULL, *ta = NULL, *tb = NULL;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(s)) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(s, "--llm")) continue;
        if (s[0] != '-') {
            if (a->b) return cli_usage_error("compare --llm ", "unexpected argument '%s'", s);
            *(a->a ? &a->b : &a->a) = s;
            continue;
        }
        const char **str = !strcmp(s, "--prompts") ? &a->prompts : !strcmp(s, "--target") ? &target
                           : !strcmp(s, "--target-a") ? &ta : !strcmp(s, "--target-b") ? &tb
                           : !strcmp(s, "--kv-cache-a") ? &a->kv_a : !strcmp(s, "--kv-cache-b") ? &a->kv_b
                           : !strcmp(s, "--calib-text") ? &a->calib_text : NULL;
        int *num = !strcmp(s, "--max-tokens") ? &a->max_tokens : !strcmp(s, "--device") ? &a->device : NULL;
        if (!str && !num) return cli_usage_error("compare --llm ", "unknown option '%s'", s);
        if (!val) return cli_usage_error("compare --llm ", "%s needs a value", s);
        i++;
        if (str == &a->kv_a || str == &a->kv_b) {
            if (strcmp(val, "auto") && strcmp(val, "fp8"))
                return cli_usage_error("compare --llm ", "%s must be auto or fp8, got '%s'", s, val);
            *str = val;
            continue;
        }
        if (str) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda") && str != &a->prompts && str != &a->calib_text)
                return cli_usage_error("compare --llm ", "%s must be cpu or cuda, got '%s'", s, val);
            *str = val;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(val, &end, 10);
        const long lo = num == &a->max_tokens ? 1 : 0;
        if (end == val || *end || errno || v < lo || v > 1 << 20)
            return cli_usage_error("compare --llm ", "%s expects an integer in [%ld, %d], got '%s'", s, lo, 1 << 20, val);
        *num = (int)v;
    }
    if (!a->b) return cli_usage_error("compare --llm ", "two models are needed: kiln compare --llm A B --prompts FILE");
    if (!a->prompts) return cli_usage_error("compare --llm ", "--prompts FILE is required");
    a->target_a = ta ? ta : target ? target : "cpu";
    a->target_b = tb ? tb : target ? target : "cpu";
    return -1;
}

/* The non-empty lines of the file (at most MAX_PROMPTS) as NUL-terminated strings in one block
 * (*block, free()), *lines pointing at them (free()). */
static kiln_status read_prompts(const char *path, char **block, char ***lines, int *n) {
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    *block = malloc(m.size + 1);
    *lines = malloc((m.size / 2 + 1) * sizeof **lines);
    if (!*block || !*lines) {
        kiln_file_unmap(&m);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for the prompts of %s", path);
    }
    if (m.size) memcpy(*block, m.data, m.size);
    (*block)[m.size] = '\0';
    kiln_file_unmap(&m);
    *n = 0;
    for (char *p = *block, *save = NULL, *line; (line = strtok_r(p, "\r\n", &save)); p = NULL) {
        if (*n == MAX_PROMPTS) /* strtok_r gives no empty lines */
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s holds more than %d prompts", path, MAX_PROMPTS);
        (*lines)[(*n)++] = line;
    }
    if (!*n) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s holds no prompt (one per line)", path);
    return KILN_OK;
}

/* One request's tokens, gathered by the callback on the engine-loop thread. */
typedef struct collected {
    pthread_mutex_t mu;
    pthread_cond_t done_cv;
    int32_t *tokens;
    int cap, n;
    bool done;
    kiln_llm_finish finish;
    char message[256];
} collected;

static void on_event(const kiln_llm_event *ev) {
    collected *c = ev->user;
    pthread_mutex_lock(&c->mu);
    if (ev->token >= 0 && c->n < c->cap) c->tokens[c->n++] = ev->token;
    if (ev->finish != KILN_LLM_FINISH_NONE) {
        c->done = true;
        c->finish = ev->finish;
        if (ev->message) snprintf(c->message, sizeof c->message, "%s", ev->message);
        pthread_cond_signal(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Greedy tokens for prompt on llm into out[0..max_tokens); *got how many came (fewer only when the
 * context ran out). */
static kiln_status generate(kiln_llm *llm, const char *prompt, int max_tokens, int32_t *out, int *got) {
    collected c = {.tokens = out, .cap = max_tokens};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.done_cv, NULL);
    kiln_llm_request req = kiln_llm_request_defaults();
    req.prompt = prompt;
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.user = &c;
    req.on_event = on_event;
    uint64_t id;
    kiln_status st = kiln_llm_submit(llm, &req, &id);
    if (st == KILN_OK) {
        pthread_mutex_lock(&c.mu);
        while (!c.done) pthread_cond_wait(&c.done_cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
        if (c.finish == KILN_LLM_FINISH_ERROR)
            st = kiln_error(KILN_ERR_BACKEND, "generation failed for prompt '%.40s': %s", prompt, c.message);
    }
    *got = c.n;
    pthread_cond_destroy(&c.done_cv);
    pthread_mutex_destroy(&c.mu);
    return st;
}

static kiln_status open_model(const char *path, const char *target, int device, const char *kv_cache,
                              const char *calib_text, kiln_llm **out) {
    kiln_llm_options o = {.target = target, .device = device, .max_seqs = 1, .kv_cache_dtype = kv_cache,
                          .kv_calib_text = kv_cache ? calib_text : NULL};
    kiln_status st = kiln_llm_open(path, &o, out);
    if (st == KILN_OK) return KILN_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_error(st, "%s: %s", path, why);
}

typedef struct agreement {
    int n, identical, first_same;
    double prefix_sum;
} agreement;

static kiln_status run_compare(const llm_cmp_args *a, char **prompts, int n, kiln_llm *ma, kiln_llm *mb,
                               agreement *ag) {
    kiln_llm_info ia, ib;
    KILN_TRY(kiln_llm_get_info(ma, &ia));
    KILN_TRY(kiln_llm_get_info(mb, &ib));
    if (ia.vocab != ib.vocab)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "the models' vocabularies differ (%d and %d tokens): their tokens "
                          "cannot be compared", ia.vocab, ib.vocab);
    int32_t *ta = malloc((size_t)a->max_tokens * sizeof *ta), *tb = malloc((size_t)a->max_tokens * sizeof *tb);
    kiln_status st = ta && tb ? KILN_OK
                              : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d tokens per model",
                                           a->max_tokens);
    *ag = (agreement){.n = n};
    for (int p = 0; st == KILN_OK && p < n; p++) {
        int na = 0, nb = 0;
        st = generate(ma, prompts[p], a->max_tokens, ta, &na);
        if (st == KILN_OK) st = generate(mb, prompts[p], a->max_tokens, tb, &nb);
        if (st != KILN_OK) break;
        int same = 0;
        while (same < na && same < nb && ta[same] == tb[same]) same++;
        ag->identical += same == na && na == nb;
        ag->first_same += na && nb && ta[0] == tb[0];
        ag->prefix_sum += same;
    }
    free(ta);
    free(tb);
    return st;
}

int kiln_cmd_compare_llm(int argc, char **argv) {
    llm_cmp_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    char *block = NULL, **prompts = NULL;
    int n = 0;
    kiln_llm *ma = NULL, *mb = NULL;
    agreement ag = {0};
    kiln_status st = read_prompts(a.prompts, &block, &prompts, &n);
    if (st == KILN_OK) st = open_model(a.a, a.target_a, a.device, a.kv_a, a.calib_text, &ma);
    if (st == KILN_OK) st = open_model(a.b, a.target_b, a.device, a.kv_b, a.calib_text, &mb);
    if (st == KILN_OK) st = run_compare(&a, prompts, n, ma, mb, &ag);
    kiln_llm_close(ma);
    kiln_llm_close(mb);
    free(block);
    free(prompts);
    if (st != KILN_OK) return cli_fail();
    printf("prompts %d, max tokens %d\n", ag.n, a.max_tokens);
    printf("identical sequences: %d / %d (%.2f %%)\n", ag.identical, ag.n, 100.0 * ag.identical / ag.n);
    printf("mean matching prefix: %.2f tokens of %d\n", ag.prefix_sum / ag.n, a.max_tokens);
    printf("first-token agreement: %d / %d (%.2f %%)\n", ag.first_same, ag.n, 100.0 * ag.first_same / ag.n);
    return 0;
}
