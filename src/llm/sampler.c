/* sampler.c — the per-request sampler of sampler.h. Candidates are the tokens with a finite logit,
 * kept as (logit, unnormalised probability, id) triples so that truncation only reorders and shortens
 * one array; probabilities are exp(logit - max) (sample_math.h's exponential), sums are in double, and
 * log-probabilities are computed from logits (logit - max - log Z) so that unlikely tokens do not
 * underflow to -inf. The candidates stay in id order until top-p sorts them by probability, so every
 * sum and the draw walk a canonical order that the GPU sampler (llm_cuda.h) reproduces exactly. */
#include "llm/sampler.h"

#include "core/status.h"
#include "llm/sample_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float v;  /* processed logit */
    float p;  /* exp(v - max v), filled once truncation by logit is done */
    int32_t id;
} cand;

struct kiln_sampler {
    int vocab;
    float *work;    /* [vocab] penalised logits */
    int32_t *count; /* [vocab] occurrences among generated tokens; zero between calls */
    uint8_t *seen;  /* [vocab] token is in prompt or generated; zero between calls */
    cand *cand;     /* [vocab] */
};

kiln_sampling_params kiln_sampling_defaults(void) {
    return (kiln_sampling_params){.temperature = 0, .top_p = 1, .repetition_penalty = 1};
}

kiln_status kiln_sampling_validate(const kiln_sampling_params *p) {
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "temperature must be >= 0 and finite, got %g", p->temperature);
    if (p->top_k < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "top_k must be >= 0 (0 = off), got %d", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "top_p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "min_p must be in [0, 1], got %g", p->min_p);
    if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "repetition_penalty must be > 0 and finite, got %g",
                          p->repetition_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
    if (p->top_logprobs < 0 || p->top_logprobs > KILN_MAX_TOP_LOGPROBS)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "top_logprobs must be in [0, %d], got %d", KILN_MAX_TOP_LOGPROBS,
                          p->top_logprobs);
    return KILN_OK;
}

double kiln_sample_uniform(uint64_t seed, uint64_t n) { return kiln_sample_uniform_at(seed, n); }

kiln_status kiln_sampler_create(int vocab, kiln_sampler **out) {
    *out = NULL;
    if (vocab <= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: vocabulary size must be > 0, got %d", vocab);
    kiln_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->vocab = vocab;
        s->work = malloc((size_t)vocab * sizeof *s->work);
        s->count = calloc((size_t)vocab, sizeof *s->count);
        s->seen = calloc((size_t)vocab, 1);
        s->cand = malloc((size_t)vocab * sizeof *s->cand);
    }
    if (!s || !s->work || !s->count || !s->seen || !s->cand) {
        kiln_sampler_free(s);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "sampler: cannot allocate scratch for %d tokens", vocab);
    }
    *out = s;
    return KILN_OK;
}

void kiln_sampler_free(kiln_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->count);
    free(s->seen);
    free(s->cand);
    free(s);
}

/* Strict total order: higher value first, then lower id. */
static bool better(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

static int cmp_by_id(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_by_p(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* HF repetition penalty over prompt ∪ generated, then OpenAI frequency / presence over generated. */
static void apply_penalties(kiln_sampler *s, const kiln_sampling_params *p, const int32_t *prompt, int n_prompt,
                            const int32_t *gen, int n_gen) {
    float *l = s->work;
    float r = p->repetition_penalty;
    if (r != 1) {
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *t = pass ? gen : prompt;
            for (int i = 0, n = pass ? n_gen : n_prompt; i < n; i++) {
                if (s->seen[t[i]]) continue;
                s->seen[t[i]] = 1;
                l[t[i]] = l[t[i]] > 0 ? l[t[i]] / r : l[t[i]] * r;
            }
        }
        for (int i = 0; i < n_prompt; i++) s->seen[prompt[i]] = 0;
        for (int i = 0; i < n_gen; i++) s->seen[gen[i]] = 0;
    }
    if (p->frequency_penalty != 0 || p->presence_penalty != 0) {
        for (int i = 0; i < n_gen; i++) s->count[gen[i]]++;
        for (int i = 0; i < n_gen; i++) {
            int32_t c = s->count[gen[i]];
            if (!c) continue;
            l[gen[i]] -= (float)c * p->frequency_penalty + p->presence_penalty;
            s->count[gen[i]] = 0;
        }
    }
}

/* Reorders c[0, n) so that c[0, k) are its k best by (v, id), in any order (Hoare's selection). */
static void select_best(cand *c, int n, int k) {
    int lo = 0, hi = n - 1, target = k - 1;
    while (lo < hi) {
        cand x = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (better(c[i].v, c[i].id, x.v, x.id)) i++;
            while (better(x.v, x.id, c[j].v, c[j].id)) j--;
            if (i <= j) {
                cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (j < target) lo = i;
        if (target < i) hi = j;
    }
}

/* Writes the n_top best of c[0, n) by (v, id), best first, as log-probabilities v - lse. */
static int top_alternatives(const cand *c, int n, int want, double lse, kiln_token_logprob *top) {
    int m = 0;
    for (int i = 0; i < n && want > 0; i++) {
        if (m == want && !better(c[i].v, c[i].id, top[m - 1].logprob, top[m - 1].token)) continue;
        int j = m < want ? m++ : m - 1;
        while (j > 0 && better(c[i].v, c[i].id, top[j - 1].logprob, top[j - 1].token)) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (kiln_token_logprob){c[i].id, c[i].v};
    }
    for (int i = 0; i < m; i++) top[i].logprob = (float)(top[i].logprob - lse);
    return m;
}

/* Keeps the smallest prefix of the most likely candidates whose mass reaches top_p of the total.
 * Candidates below (1 - top_p) / n of the total are dropped before sorting: all of them together weigh
 * at most 1 - top_p, so they lie outside the nucleus. Leaves c sorted by probability. */
static int truncate_top_p(cand *c, int n, float top_p, double z) {
    double drop_below = (1.0 - top_p) * z / n;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (c[i].p >= drop_below) c[m++] = c[i];
    qsort(c, (size_t)m, sizeof *c, cmp_by_p);
    double cum = 0, need = top_p * z;
    for (int i = 0; i < m; i++) {
        cum += c[i].p;
        if (cum >= need) return i + 1;
    }
    return m; /* rounding left the sum just short: keep everything that survived */
}

/* Temperature, truncation and the draw; returns the number of kept candidates (c[0, n)) and the
 * chosen one's index. */
static int sample_random(cand *c, int n, const kiln_sampling_params *p, uint64_t counter, int *chosen) {
    if (p->temperature != 1)
        for (int i = 0; i < n; i++) c[i].v /= p->temperature;
    if (p->top_k > 0 && p->top_k < n) {
        select_best(c, n, p->top_k);
        n = p->top_k;
        qsort(c, (size_t)n, sizeof *c, cmp_by_id); /* back to id order */
    }
    float vmax = c[0].v;
    for (int i = 1; i < n; i++) vmax = fmaxf(vmax, c[i].v);
    double z = 0;
    for (int i = 0; i < n; i++) {
        c[i].p = kiln_sample_exp(c[i].v - vmax);
        z += c[i].p;
    }
    if (p->top_p < 1) n = truncate_top_p(c, n, p->top_p, z);
    if (p->min_p > 0) { /* the most likely candidate has p == 1 */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].p >= p->min_p) c[m++] = c[i];
        n = m;
    }
    z = 0;
    for (int i = 0; i < n; i++) z += c[i].p;
    double u = kiln_sample_uniform(p->seed, counter) * z, acc = 0;
    *chosen = n - 1;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (u < acc) {
            *chosen = i;
            break;
        }
    }
    return n;
}

static double log_sum_exp(const cand *c, int n) {
    float vmax = c[0].v;
    for (int i = 1; i < n; i++) vmax = fmaxf(vmax, c[i].v);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp((double)c[i].v - vmax);
    return vmax + log(z);
}

/* Penalised candidates of logits into s->cand (their count in *n), after checking the history and
 * the logits. */
static kiln_status candidates(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                              const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                              int *n_out) {
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *t = pass ? generated : prompt;
        for (int i = 0, n = pass ? n_generated : n_prompt; i < n; i++)
            if (t[i] < 0 || t[i] >= s->vocab)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: %s token %d is %d, outside the vocabulary of %d",
                                  pass ? "generated" : "prompt", i, t[i], s->vocab);
    }
    memcpy(s->work, logits, (size_t)s->vocab * sizeof *s->work);
    apply_penalties(s, p, prompt, n_prompt, generated, n_generated);
    int n = 0;
    for (int i = 0; i < s->vocab; i++) {
        if (isnan(s->work[i]) || s->work[i] == INFINITY)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: the logit of token %d is %g", i, s->work[i]);
        if (s->work[i] > -INFINITY) s->cand[n++] = (cand){.v = s->work[i], .id = i};
    }
    if (!n) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: every logit is -inf");
    *n_out = n;
    return KILN_OK;
}

/* out's token c[chosen] and, when asked, its log-probabilities over c[0, n). */
static void fill_sample(const cand *c, int n, int chosen, const kiln_sampling_params *p, kiln_sample *out) {
    out->token = c[chosen].id;
    if (p->logprobs) {
        double lse = log_sum_exp(c, n);
        out->logprob = (float)(c[chosen].v - lse);
        out->n_top = top_alternatives(c, n, p->top_logprobs, lse, out->top);
    }
}

kiln_status kiln_sample_next(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                             const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                             kiln_sample *out) {
    memset(out, 0, sizeof *out);
    int n, chosen = 0;
    KILN_TRY(candidates(s, p, logits, prompt, n_prompt, generated, n_generated, &n));
    cand *c = s->cand;
    if (p->temperature == 0) {
        for (int i = 1; i < n; i++)
            if (better(c[i].v, c[i].id, c[chosen].v, c[chosen].id)) chosen = i;
    } else {
        n = sample_random(c, n, p, (uint64_t)n_generated, &chosen);
    }
    fill_sample(c, n, chosen, p, out);
    return KILN_OK;
}

/* The stream of the acceptance draws, apart from the sampling draws of the same seed. */
static uint64_t accept_stream(uint64_t seed) { return seed ^ 0x5DEECE66DA3B1F27ull; }

kiln_status kiln_sample_verify_draft(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                                     const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                                     int32_t draft, kiln_sample *out, bool *accepted) {
    *accepted = false;
    if (p->temperature == 0) {
        KILN_TRY(kiln_sample_next(s, p, logits, prompt, n_prompt, generated, n_generated, out));
        *accepted = out->token == draft;
        return KILN_OK;
    }
    memset(out, 0, sizeof *out);
    int n, chosen = 0;
    KILN_TRY(candidates(s, p, logits, prompt, n_prompt, generated, n_generated, &n));
    cand *c = s->cand;
    n = sample_random(c, n, p, (uint64_t)n_generated, &chosen); /* truncates and sets c[i].p */
    double z = 0, pd = 0;
    int at = -1;
    for (int i = 0; i < n; i++) {
        z += c[i].p;
        if (c[i].id == draft) at = i;
    }
    if (at >= 0) pd = c[at].p;
    if (at >= 0 && kiln_sample_uniform(accept_stream(p->seed), (uint64_t)n_generated) * z < pd) {
        *accepted = true;
        fill_sample(c, n, at, p, out);
        return KILN_OK;
    }
    /* rejected: a draw from the rest, max(p - point mass at draft, 0) normalised */
    double u = kiln_sample_uniform(p->seed, (uint64_t)n_generated) * (z - pd), acc = 0;
    chosen = at == n - 1 ? n - 2 : n - 1;
    for (int i = 0; i < n; i++) {
        if (i == at) continue;
        acc += c[i].p;
        if (u < acc) {
            chosen = i;
            break;
        }
    }
    fill_sample(c, n, chosen, p, out);
    return KILN_OK;
}

/* The stream of a draft model's draws, apart from the target's sampling and acceptance draws. */
static uint64_t draft_stream(uint64_t seed) { return seed ^ 0x2545F4914F6CDD1Dull; }

kiln_status kiln_sample_draft(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                              const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated, float *q,
                              kiln_sample *out) {
    if (p->temperature == 0) return kiln_sample_next(s, p, logits, prompt, n_prompt, generated, n_generated, out);
    memset(out, 0, sizeof *out);
    int n, chosen = 0;
    KILN_TRY(candidates(s, p, logits, prompt, n_prompt, generated, n_generated, &n));
    kiln_sampling_params dp = *p;
    dp.seed = draft_stream(p->seed);
    n = sample_random(s->cand, n, &dp, (uint64_t)n_generated, &chosen);
    double z = 0;
    for (int i = 0; i < n; i++) z += s->cand[i].p;
    memset(q, 0, (size_t)s->vocab * sizeof *q);
    for (int i = 0; i < n; i++) q[s->cand[i].id] = (float)(s->cand[i].p / z);
    fill_sample(s->cand, n, chosen, p, out);
    return KILN_OK;
}

kiln_status kiln_sample_verify_draft_dist(kiln_sampler *s, const kiln_sampling_params *p, const float *logits,
                                          const int32_t *prompt, int n_prompt, const int32_t *generated,
                                          int n_generated, int32_t draft, const float *q, kiln_sample *out,
                                          bool *accepted) {
    if (p->temperature == 0)
        return kiln_sample_verify_draft(s, p, logits, prompt, n_prompt, generated, n_generated, draft, out, accepted);
    *accepted = false;
    memset(out, 0, sizeof *out);
    int n, chosen = 0;
    KILN_TRY(candidates(s, p, logits, prompt, n_prompt, generated, n_generated, &n));
    cand *c = s->cand;
    n = sample_random(c, n, p, (uint64_t)n_generated, &chosen); /* truncates and sets c[i].p */
    double z = 0, pd = 0;
    int at = -1;
    for (int i = 0; i < n; i++) {
        z += c[i].p;
        if (c[i].id == draft) at = i;
    }
    if (at >= 0) pd = c[at].p / z;
    const double qd = draft >= 0 && draft < s->vocab ? q[draft] : 0;
    if (at >= 0 && kiln_sample_uniform(accept_stream(p->seed), (uint64_t)n_generated) * qd < pd) {
        *accepted = true;
        fill_sample(c, n, at, p, out);
        return KILN_OK;
    }
    /* rejected: a draw from max(p - q, 0) normalised (from p itself if rounding left nothing) */
    double rest = 0;
    for (int i = 0; i < n; i++) rest += fmax(c[i].p / z - q[c[i].id], 0);
    const bool residual = rest > 0;
    double u = kiln_sample_uniform(p->seed, (uint64_t)n_generated) * (residual ? rest : 1), acc = 0;
    chosen = n - 1;
    for (int i = 0; i < n; i++) {
        acc += residual ? fmax(c[i].p / z - q[c[i].id], 0) : c[i].p / z;
        if (u < acc) {
            chosen = i;
            break;
        }
    }
    fill_sample(c, n, chosen, p, out);
    return KILN_OK;
}
