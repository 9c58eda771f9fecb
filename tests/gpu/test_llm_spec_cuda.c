/* test_llm_spec_cuda.c — speculative decoding by prompt lookup and with a draft model on CUDA, through the public API
 * (kiln/kiln_llm.h): four greedy requests at once (two speculating, two plain, prompts repetitive and
 * not; tokens taken one by one by callback) on tiny random GPT-2 and Llama models in fp16 and bf16 and on the bundled GPT-2
 * (models/kjv-gpt2, from KILN_SOURCE_DIR or the working directory's ../..), each against the same
 * requests without speculation: the tokens must be equal (the verify step's logits come from the
 * multi-token path, a CUDA graph from a shape's second step, and the GPU sampler picks a token per row,
 * which the drafts are compared with; plain decode steps use the decode kernels). With a draft model
 * (a random shape drafting for itself or for another shape of the same vocabulary, the bundled GPT-2
 * drafting for itself; the draft opened on the same GPU with its own cache) and with early-exit drafts
 * ("layers:N": the target's first layers on its own cache) the tokens must be equal too, and a model
 * drafting for itself and the bundled GPT-2's early exits must have drafts accepted. Sampled (temperature
 * 0.8, seeded): speculating with the GPU sampler (greedy rows' tokens on the device, the speculating rows
 * handed back for the rejection rule on the host) gives the tokens of the host sampler, bit for bit. The
 * two models of that comparison share a timing cache, so that the second takes the first's product
 * configurations instead of timing its own: the same logits, which is what the GPU sampler's equality
 * with the host's holds for (two models that time their GEMV configurations and cuBLASLt algorithms
 * anew may pick ones that sum in another order, and a draw that lands within such a difference of a
 * token's edge in the cumulative sum then takes the neighbouring token: in the CPU forward's logits the
 * bundled GPT-2's request 1 draws its 26th token 7e-7 of the total below the edge of a token of
 * probability 2e-5).
 * Prints each case's acceptance rate and tokens per speculating step. Without a GPU prints
 * "skipped: no GPU (...)" and exits 77. */
#include "kiln/kiln_llm.h"
#include "llm/llm_cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_REQ = 4, PROMPT = 24, GEN = 48 };

static int failures;

typedef struct outputs {
    int32_t tokens[N_REQ][GEN];
    int n[N_REQ];
    int finished;
    pthread_mutex_t mu;
    pthread_cond_t done;
    kiln_llm_stats stats;
} outputs;

typedef struct req_ref {
    outputs *out;
    int i;
} req_ref;

/* Every event, on the engine loop's thread: the request's tokens, one by one. */
static void on_event(const kiln_llm_event *ev) {
    const req_ref *ref = ev->user;
    outputs *o = ref->out;
    pthread_mutex_lock(&o->mu);
    if (ev->token >= 0 && o->n[ref->i] < GEN) o->tokens[ref->i][o->n[ref->i]++] = ev->token;
    if (ev->finish != KILN_LLM_FINISH_NONE) {
        o->finished++;
        pthread_cond_signal(&o->done);
    }
    pthread_mutex_unlock(&o->mu);
}

/* Runs the four requests on llm to their end, greedy (temperature 0) or sampled with seeds 1 .. 4. */
static int run_requests(kiln_llm *llm, int vocab, float temperature, outputs *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_init(&out->mu, NULL);
    pthread_cond_init(&out->done, NULL);
    req_ref refs[N_REQ];
    int submitted = 0;
    for (int i = 0; i < N_REQ; i++) {
        int32_t prompt[PROMPT];
        const int period = i < 2 ? 5 + i : PROMPT; /* repetitive prompts first */
        for (int t = 0; t < PROMPT; t++) prompt[t] = (int32_t)((t % period * 131 + i * 17 + 3) % vocab);
        refs[i] = (req_ref){out, i};
        kiln_llm_request q = kiln_llm_request_defaults();
        q.prompt_ids = prompt;
        q.n_prompt_ids = PROMPT;
        q.max_tokens = GEN;
        q.ignore_eos = true;
        q.no_speculation = i % 2 == 1;
        q.user = &refs[i];
        q.sampling.temperature = temperature;
        q.sampling.seed = (uint64_t)i + 1;
        q.on_event = on_event;
        uint64_t id;
        if (kiln_llm_submit(llm, &q, &id) != KILN_OK) break;
        submitted++;
    }
    pthread_mutex_lock(&out->mu);
    while (out->finished < submitted) pthread_cond_wait(&out->done, &out->mu);
    pthread_mutex_unlock(&out->mu);
    pthread_mutex_destroy(&out->mu);
    pthread_cond_destroy(&out->done);
    return submitted != N_REQ || kiln_llm_get_stats(llm, &out->stats) != KILN_OK;
}

/* Opens the model (a random shape, or dir) with and without speculation (by prompt lookup, or with the
 * draft model `draft`: a shape with shape, else a directory) and compares the tokens. */
static void run_case(const char *shape, const char *dir, kiln_precision precision, const char *draft) {
    char name[4200];
    snprintf(name, sizeof name, "%s%s%s", shape ? shape : dir, draft ? " drafted by " : "", draft ? draft : "");
    outputs res[2];
    for (int spec = 0; spec < 2; spec++) {
        kiln_llm_options o = {.target = "cuda", .max_seqs = N_REQ, .max_context = PROMPT + GEN + 8,
                              .spec = spec && !draft ? "ngram" : NULL, .draft_tokens = 4,
                              .draft = spec ? draft : NULL};
        kiln_llm *llm = NULL;
        kiln_status st = shape ? kiln_llm_open_random(shape, precision, 5, &o, &llm) : kiln_llm_open(dir, &o, &llm);
        kiln_llm_info info;
        if (st == KILN_OK) st = kiln_llm_get_info(llm, &info);
        if (st != KILN_OK || run_requests(llm, info.vocab, 0.0f, &res[spec])) {
            fprintf(stderr, "FAIL %s: %s\n", name, kiln_last_error());
            failures++;
            kiln_llm_close(llm);
            return;
        }
        kiln_llm_close(llm);
    }
    int bad = 0;
    for (int i = 0; i < N_REQ; i++) {
        int at = 0;
        while (at < GEN && at < res[0].n[i] && res[0].tokens[i][at] == res[1].tokens[i][at]) at++;
        if (res[0].n[i] != GEN || res[1].n[i] != GEN || at < GEN) {
            fprintf(stderr, "FAIL %s request %d (%s): %d and %d tokens, first difference at %d\n", name, i,
                    i % 2 ? "plain" : "speculating", res[0].n[i], res[1].n[i], at);
            bad++;
        }
    }
    const kiln_llm_stats *s = &res[1].stats;
    /* n-gram, the model drafting for itself, or the bundled GPT-2's early exits: some drafts must pass */
    const bool itself = !draft || !strcmp(draft, shape ? shape : dir) || (dir && !strncmp(draft, "layers:", 7));
    if (!s->spec_steps || (itself && !s->spec_accepted)) {
        fprintf(stderr, "FAIL %s: no draft accepted (%llu speculating steps)\n", name, (unsigned long long)s->spec_steps);
        bad++;
    }
    failures += bad;
    printf("%-60s %-5s acceptance %.3f (%llu of %llu), %.2f tokens per speculating step, steps %llu -> %llu  %s\n",
           name, precision == KILN_PRECISION_BF16 ? "bf16" : "fp16",
           s->spec_drafted ? (double)s->spec_accepted / (double)s->spec_drafted : 0.0,
           (unsigned long long)s->spec_accepted, (unsigned long long)s->spec_drafted,
           s->spec_steps ? (double)s->spec_emitted / (double)s->spec_steps : 0.0,
           (unsigned long long)res[0].stats.steps, (unsigned long long)s->steps, bad ? "FAIL" : "ok");
}

/* Sampled speculation with the GPU sampler and with the host sampler, on the same product configurations
 * (one timing cache, written by the first model and read by the second): the same tokens. */
static void run_sampled_case(const char *shape, const char *dir, kiln_precision precision, const char *draft) {
    char name[4200], cache[64];
    snprintf(name, sizeof name, "%s, sampled, %s", shape ? shape : dir, draft ? draft : "ngram");
    snprintf(cache, sizeof cache, "test_llm_spec_cuda_%d.tcache", (int)getpid());
    remove(cache);
    outputs res[2];
    for (int host = 0; host < 2; host++) {
        kiln_llm_options o = {.target = "cuda", .max_seqs = N_REQ, .max_context = PROMPT + GEN + 8,
                              .spec = draft ? NULL : "ngram", .draft_tokens = 4, .draft = draft, .host_sampler = host,
                              .timing_cache = cache};
        kiln_llm *llm = NULL;
        kiln_status st = shape ? kiln_llm_open_random(shape, precision, 5, &o, &llm) : kiln_llm_open(dir, &o, &llm);
        kiln_llm_info info;
        if (st == KILN_OK) st = kiln_llm_get_info(llm, &info);
        if (st != KILN_OK || run_requests(llm, info.vocab, 0.8f, &res[host])) {
            fprintf(stderr, "FAIL %s: %s\n", name, kiln_last_error());
            failures++;
            kiln_llm_close(llm);
            remove(cache);
            return;
        }
        kiln_llm_close(llm);
    }
    remove(cache);
    int bad = 0;
    for (int i = 0; i < N_REQ; i++) {
        int at = 0;
        while (at < GEN && at < res[0].n[i] && at < res[1].n[i] && res[0].tokens[i][at] == res[1].tokens[i][at]) at++;
        if (res[0].n[i] != GEN || res[1].n[i] != GEN || at < GEN) {
            fprintf(stderr, "FAIL %s request %d: the GPU sampler's tokens differ from the host sampler's (%d and %d "
                    "tokens, first difference at %d: %d and %d)\n", name, i, res[0].n[i], res[1].n[i], at,
                    at < res[0].n[i] ? res[0].tokens[i][at] : -1, at < res[1].n[i] ? res[1].tokens[i][at] : -1);
            bad++;
        }
    }
    const kiln_llm_stats *s = &res[0].stats, *h = &res[1].stats;
    if (!s->spec_steps || s->spec_steps != h->spec_steps || s->spec_drafted != h->spec_drafted ||
        s->spec_accepted != h->spec_accepted || s->spec_emitted != h->spec_emitted) {
        fprintf(stderr, "FAIL %s: %llu speculating steps, statistics differ between the samplers\n", name,
                (unsigned long long)s->spec_steps);
        bad++;
    }
    failures += bad;
    printf("%-60s %-5s acceptance %.3f (%llu of %llu)  %s\n", name, precision == KILN_PRECISION_BF16 ? "bf16" : "fp16",
           s->spec_drafted ? (double)s->spec_accepted / (double)s->spec_drafted : 0.0,
           (unsigned long long)s->spec_accepted, (unsigned long long)s->spec_drafted, bad ? "FAIL" : "ok");
}

int main(void) {
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
    printf("test_llm_spec_cuda on %s\n", desc);
    run_case("tiny-gpt2", NULL, KILN_PRECISION_FP16, NULL);
    run_case("tiny-llama", NULL, KILN_PRECISION_BF16, NULL);
    run_case("tiny-llama", NULL, KILN_PRECISION_FP16, NULL);
    run_case("tiny-gpt2", NULL, KILN_PRECISION_FP16, "tiny-gpt2");
    run_case("tiny-llama", NULL, KILN_PRECISION_BF16, "tiny-llama");
    run_case("tiny-llama", NULL, KILN_PRECISION_FP16, "tiny-gpt2");
    const char *src = getenv("KILN_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/kjv-gpt2", src ? src : "../..");
    run_case("tiny-gpt2", NULL, KILN_PRECISION_FP16, "layers:1");
    run_case("tiny-llama", NULL, KILN_PRECISION_BF16, "layers:1");
    run_case(NULL, dir, KILN_PRECISION_FP16, NULL);
    run_case(NULL, dir, KILN_PRECISION_FP16, dir);
    for (int n = 1; n <= 5; n++) {
        char layers[16];
        snprintf(layers, sizeof layers, "layers:%d", n);
        run_case(NULL, dir, KILN_PRECISION_FP16, layers);
    }
    run_sampled_case("tiny-llama", NULL, KILN_PRECISION_BF16, NULL);
    run_sampled_case("tiny-gpt2", NULL, KILN_PRECISION_FP16, "tiny-gpt2");
    run_sampled_case(NULL, dir, KILN_PRECISION_FP16, "layers:4");
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures ? 1 : 0;
}
