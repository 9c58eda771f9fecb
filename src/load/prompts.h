/* prompts.h — what kiln load sends to language-model servers: a seeded random generator, length
 * distributions (fixed, uniform, normal) for input and output lengths, and prompt sets — synthetic
 * (random common English words, about one token each in the usual BPE vocabularies) or read from a
 * JSONL file. Lengths are in tokens; without a tokenizer, a synthetic prompt of N words stands for
 * N tokens (an estimate, reported as such when the server sends no usage counts). */
#ifndef KILN_LOAD_PROMPTS_H
#define KILN_LOAD_PROMPTS_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* xoshiro256** seeded through splitmix64: fast, reproducible for a given seed. */
typedef struct kiln_rng {
    uint64_t s[4];
} kiln_rng;

void kiln_rng_seed(kiln_rng *r, uint64_t seed);
uint64_t kiln_rng_next(kiln_rng *r);
/* Uniform in [0, 1). */
double kiln_rng_uniform(kiln_rng *r);
/* Standard normal (Box-Muller). */
double kiln_rng_normal(kiln_rng *r);
/* Exponential with the given mean (> 0): the gap between Poisson arrivals. */
double kiln_rng_exponential(kiln_rng *r, double mean);

typedef enum kiln_len_kind { KILN_LEN_FIXED, KILN_LEN_UNIFORM, KILN_LEN_NORMAL } kiln_len_kind;

/* A distribution of lengths. FIXED: always a. UNIFORM: integers in [a, b]. NORMAL: mean a, standard
 * deviation b, rounded and clamped to [1, 4a + 1] (so it is never zero, negative or absurd). */
typedef struct kiln_len_dist {
    kiln_len_kind kind;
    double a, b;
} kiln_len_dist;

/* Parses "N" or "fixed:N", "uniform:LO,HI", "normal:MEAN,SD" (N, LO, MEAN >= 1; LO <= HI; SD >= 0;
 * all at most 1,000,000). Errors: KILN_ERR_INVALID_ARGUMENT saying what is wrong and the accepted
 * forms. */
kiln_status kiln_len_dist_parse(const char *text, kiln_len_dist *out);
/* One sample (>= 1). */
int kiln_len_dist_sample(const kiln_len_dist *d, kiln_rng *r);
/* "fixed 128", "uniform 64..256", "normal mean 128 sd 32" into buf (returns buf). */
char *kiln_len_dist_str(const kiln_len_dist *d, char *buf, size_t cap);

/* One prompt. For chat, `messages` (a JSON array, as it goes into the request) is used when set,
 * else `text` becomes one user message; for completions, `text` is the prompt. */
typedef struct kiln_prompt {
    char *text;          /* NUL-terminated; owned */
    char *messages;      /* JSON array text or NULL; owned */
    int input_tokens;    /* estimate: words of a synthetic prompt, bytes / 4 for a file's prompt */
    int max_tokens;      /* requested output length from the file; 0 = draw from the distribution */
} kiln_prompt;

typedef struct kiln_prompt_set {
    kiln_prompt *items;
    int n;
} kiln_prompt_set;

/* Makes `count` (>= 1) synthetic prompts with lengths drawn from `input`, seeded by `seed`. Each
 * starts differently (so a server's prefix cache does not make them free). *out owns the set (free
 * with kiln_prompts_free). Errors: KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_prompts_synthetic(const kiln_len_dist *input, int count, uint64_t seed,
                                   kiln_prompt_set *out);
/* Reads a JSONL file: one JSON object per non-blank line with "prompt" (or "text") as a string
 * and/or "messages" (an array of {"role","content"}), and optionally "max_tokens" (or
 * "output_tokens") as a positive integer. Errors: KILN_ERR_IO (the file), KILN_ERR_PARSE naming the
 * line and what is wrong, KILN_ERR_INVALID_ARGUMENT for a file without prompts. */
kiln_status kiln_prompts_load_jsonl(const char *path, kiln_prompt_set *out);
/* Frees a set; accepts a zeroed one. */
void kiln_prompts_free(kiln_prompt_set *set);

#endif
