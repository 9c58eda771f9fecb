/* llm_driver.c — test helper (not a test itself) for tests/e2e/test_llm_forward.py: loads a Hugging
 * Face checkpoint directory and runs kiln_llm_forward over one or more token sequences, fed together
 * in steps of a given chunking, through a paged KV cache, and writes the logits as .npy.
 *
 *   llm_driver DIR [--seq 1,2,3]... [--chunks 3,1,2] [--block-size 4] [--kv-dtype f32|f16|bf16]
 *              [--scramble] [--last] [--target cpu|cuda] [--dtype f16|bf16] [--out logits.npy]
 *
 * Every step takes the next chunk of every unfinished sequence (chunk sizes from --chunks, the last
 * one repeating; default: a whole sequence in one step). The output is [total tokens, vocab] with the
 * rows of each sequence in turn. With --last only each sequence's last token of every step has
 * logits (all_logits false), the other rows are NaN. --scramble hands out cache blocks in a shuffled
 * order. Without --seq it prints config.json as parsed (weights unread) and exits.
 * --target cuda runs the step through llm_runner.h (the CUDA forward, weights and KV cache in --dtype,
 * default f16; --kv-dtype is ignored there) on device 0: the same batches, the device blocks mapped
 * from the host table as kiln generate does. Without a GPU (or a cuda build) it fails with the runner's
 * "--target cuda is not available: ..." message.
 * Errors: "kiln: error: ..." and exit 1. */
#include "core/npy.h"
#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/llm_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEQS 16

typedef struct seq {
    int32_t *ids;
    int len, done, row0; /* tokens, tokens already run, first output row */
    int32_t *blocks;
} seq;

typedef struct opts {
    const char *dir, *out;
    seq seqs[MAX_SEQS];
    int n_seqs;
    int chunks[64], n_chunks;
    int block_size;
    kiln_dtype kv_dtype;
    int scramble, last;
    const char *target; /* "cpu" (kiln_llm_forward) or "cuda" (llm_runner) */
    int bf16;           /* cuda: bf16 instead of fp16 */
} opts;

static int fail(const char *msg) {
    fprintf(stderr, "kiln: error: %s\n", msg);
    return 1;
}

/* Comma-separated integers into out (at most cap); their count, or -1 on a malformed list. */
static int parse_ints(const char *s, int32_t *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || n == cap) return -1;
        out[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->block_size = 16;
    o->kv_dtype = KILN_F32;
    o->target = "cpu";
    if (argc < 2) return fail("usage: llm_driver DIR [--seq ids]... [--chunks n,...] [--block-size n] "
                              "[--kv-dtype f32|f16|bf16] [--scramble] [--last] [--target cpu|cuda] "
                              "[--dtype f16|bf16] [--out file.npy]");
    o->dir = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--scramble")) { o->scramble = 1; continue; }
        if (!strcmp(a, "--last")) { o->last = 1; continue; }
        if (!v) return fail("option needs a value");
        i++;
        if (!strcmp(a, "--seq")) {
            if (o->n_seqs == MAX_SEQS) return fail("too many --seq");
            seq *s = &o->seqs[o->n_seqs++];
            s->ids = malloc((strlen(v) + 1) * sizeof *s->ids);
            if (!s->ids || (s->len = parse_ints(v, s->ids, (int)strlen(v) + 1)) < 1) return fail("bad --seq list");
        } else if (!strcmp(a, "--chunks")) {
            int32_t tmp[64];
            if ((o->n_chunks = parse_ints(v, tmp, 64)) < 1) return fail("bad --chunks list");
            for (int j = 0; j < o->n_chunks; j++) {
                if (tmp[j] < 1) return fail("chunk sizes must be positive");
                o->chunks[j] = tmp[j];
            }
        } else if (!strcmp(a, "--block-size")) {
            o->block_size = atoi(v);
        } else if (!strcmp(a, "--kv-dtype")) {
            o->kv_dtype = !strcmp(v, "f16") ? KILN_F16 : !strcmp(v, "bf16") ? KILN_BF16 : KILN_F32;
        } else if (!strcmp(a, "--target")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda")) return fail("--target expects cpu or cuda");
            o->target = v;
        } else if (!strcmp(a, "--dtype")) {
            if (strcmp(v, "f16") && strcmp(v, "bf16")) return fail("--dtype expects f16 or bf16");
            o->bf16 = !strcmp(v, "bf16");
        } else if (!strcmp(a, "--out")) {
            o->out = v;
        } else {
            return fail("unknown option");
        }
    }
    return 0;
}

static void print_config(const kiln_llm_config *c) {
    static const char *const scaling[] = {"none", "linear", "dynamic", "llama3", "longrope"};
    printf("arch=%s\nn_layer=%d\nd_model=%d\nn_head=%d\nn_kv_head=%d\nhead_dim=%d\nd_ff=%d\nvocab=%d\nmax_pos=%d\n",
           c->arch == KILN_LLM_GPT2 ? "gpt2" : "llama", c->n_layer, c->d_model, c->n_head, c->n_kv_head, c->head_dim,
           c->d_ff, c->vocab, c->max_pos);
    printf("norm_eps=%g\nrope_theta=%g\nrope_scaling=%s\nrope_factor=%g\nrope_low_freq_factor=%g\n", c->norm_eps,
           c->rope_theta, scaling[c->rope_scaling], c->rope_factor, c->rope_low_freq_factor);
    printf("rope_high_freq_factor=%g\nrope_original_max_pos=%d\ntied=%d\nbos_id=%d\neos_id=%d\neos_ids=",
           c->rope_high_freq_factor, c->rope_original_max_pos, c->tied_embeddings, c->bos_id, c->eos_id);
    for (int i = 0; i < c->n_eos; i++) printf(i ? ",%d" : "%d", c->eos_ids[i]);
    printf("\nfamily=%s\ngate_act=%s\nqkv_bias=%d\nscale_emb=%d\nrotary_dim=%d\nsliding_window=%d\n",
           kiln_llm_family_name(c->family), c->gate_act == KILN_GATE_GELU_TANH ? "gelu_tanh" : "silu", c->qkv_bias,
           c->scale_emb, c->rotary_dim, c->sliding_window);
}

/* Gives every sequence the blocks it needs, in allocation order or shuffled. */
static int assign_blocks(opts *o, kiln_kv_cache *kv, int max_blocks) {
    int n = kiln_kv_cache_free_blocks(kv);
    int *all = malloc((size_t)n * sizeof *all);
    if (!all) return fail("out of memory");
    for (int i = 0; i < n; i++) all[i] = kiln_kv_cache_alloc_block(kv);
    unsigned rng = 12345;
    for (int i = n - 1; o->scramble && i > 0; i--) {
        rng = rng * 1103515245u + 12345u;
        int j = (int)((rng >> 8) % (unsigned)(i + 1)), t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    int next = 0;
    for (int s = 0; s < o->n_seqs; s++) {
        o->seqs[s].blocks = malloc((size_t)max_blocks * sizeof(int32_t));
        if (!o->seqs[s].blocks) {
            free(all);
            return fail("out of memory");
        }
        for (int j = 0; j < max_blocks; j++) o->seqs[s].blocks[j] = -1;
        for (int j = 0; j < (o->seqs[s].len + o->block_size - 1) / o->block_size; j++) o->seqs[s].blocks[j] = all[next++];
    }
    free(all);
    return 0;
}

/* Runs all sequences to the end in steps; logits rows into out [total, vocab]. */
static int run_steps(opts *o, const kiln_llm_model *m, llm_runner *rn, kiln_kv_cache *kv, int total, int max_blocks,
                     float *out) {
    const int vocab = kiln_llm_model_config(m)->vocab;
    int32_t *tokens = malloc((size_t)total * sizeof(int32_t)), *pos = malloc((size_t)total * sizeof(int32_t));
    int32_t seq_start[MAX_SEQS + 1], ctx[MAX_SEQS], rows[MAX_SEQS], *table = malloc((size_t)o->n_seqs * max_blocks * 4);
    float *logits = malloc((size_t)total * vocab * sizeof(float));
    int rc = !tokens || !pos || !table || !logits ? fail("out of memory") : 0;
    for (int step = 0; rc == 0; step++) {
        int chunk = o->n_chunks ? o->chunks[step < o->n_chunks ? step : o->n_chunks - 1] : 1 << 30;
        int n = 0, ns = 0;
        for (int s = 0; s < o->n_seqs; s++) {
            seq *q = &o->seqs[s];
            if (q->done == q->len) continue;
            int take = q->len - q->done < chunk ? q->len - q->done : chunk;
            seq_start[ns] = n;
            for (int t = 0; t < take; t++) {
                tokens[n] = q->ids[q->done + t];
                pos[n++] = q->done + t;
            }
            ctx[ns] = q->done + take;
            rows[ns] = q->row0 + q->done;
            memcpy(table + (size_t)ns * max_blocks, q->blocks, (size_t)max_blocks * 4);
            q->done += take;
            ns++;
        }
        if (!ns) break;
        seq_start[ns] = n;
        kiln_llm_batch b = {n, tokens, pos, ns, seq_start, ctx, table, max_blocks, !o->last, NULL};
        if ((rn ? llm_runner_forward(rn, kv, &b, logits) : kiln_llm_forward(m, kv, &b, logits)) != KILN_OK) {
            rc = fail(kiln_last_error());
            break;
        }
        for (int s = 0; s < ns; s++) {
            int cnt = seq_start[s + 1] - seq_start[s];
            if (o->last)
                memcpy(out + (size_t)(rows[s] + cnt - 1) * vocab, logits + (size_t)s * vocab, (size_t)vocab * 4);
            else
                memcpy(out + (size_t)rows[s] * vocab, logits + (size_t)seq_start[s] * vocab, (size_t)cnt * vocab * 4);
        }
    }
    free(tokens);
    free(pos);
    free(table);
    free(logits);
    return rc;
}

/* Prints the config, or loads the model and runs the sequences; 0 or 1 as main returns. */
static int run(opts *o, kiln_llm_model **m, llm_runner **rn, kiln_kv_cache **kv, kiln_tensor *out) {
    if (!o->n_seqs) {
        kiln_llm_config cfg;
        if (kiln_llm_config_load_hf(o->dir, &cfg) != KILN_OK) return fail(kiln_last_error());
        print_config(&cfg);
        return 0;
    }
    if (kiln_llm_model_load_hf(o->dir, m) != KILN_OK) return fail(kiln_last_error());
    const kiln_llm_config *c = kiln_llm_model_config(*m);
    int total = 0, max_blocks = 1, n_blocks = 4, max_len = 1;
    for (int s = 0; s < o->n_seqs; s++) {
        o->seqs[s].row0 = total;
        total += o->seqs[s].len;
        int nb = o->block_size > 0 ? (o->seqs[s].len + o->block_size - 1) / o->block_size : 1;
        n_blocks += nb;
        if (nb > max_blocks) max_blocks = nb;
        if (o->seqs[s].len > max_len) max_len = o->seqs[s].len;
    }
    if (!strcmp(o->target, "cuda")) {
        /* the CUDA forward: a device cache of n_blocks blocks behind a host bookkeeping cache */
        llm_runner_options ro = {.target = "cuda", .device = 0, .max_seqs = o->n_seqs, .max_tokens = total,
                                 .max_context = max_len, .bf16 = o->bf16 != 0};
        char desc[256] = "";
        if (llm_runner_create(*m, &ro, desc, sizeof desc, rn) != KILN_OK) return fail(kiln_last_error());
        if (llm_runner_make_cache(*rn, n_blocks, o->block_size, false, kv) != KILN_OK) return fail(kiln_last_error());
        fprintf(stderr, "llm_driver: %s\n", desc);
    } else {
        kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                                   .block_size = o->block_size, .n_blocks = n_blocks, .dtype = o->kv_dtype};
        if (kiln_kv_cache_create(&kc, kv) != KILN_OK) return fail(kiln_last_error());
    }
    if (assign_blocks(o, *kv, max_blocks)) return 1;
    int64_t dims[2] = {total, c->vocab};
    if (kiln_tensor_alloc(out, KILN_F32, 2, dims) != KILN_OK) return fail(kiln_last_error());
    for (int64_t i = 0; i < (int64_t)total * c->vocab; i++) ((float *)out->data)[i] = NAN;
    if (run_steps(o, *m, *rn, *kv, total, max_blocks, out->data)) return 1;
    if (o->out && kiln_npy_write(o->out, out) != KILN_OK) return fail(kiln_last_error());
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    kiln_llm_model *m = NULL;
    llm_runner *rn = NULL;
    kiln_kv_cache *kv = NULL;
    kiln_tensor out = {0};
    int rc = parse_args(argc, argv, &o);
    if (!rc) rc = run(&o, &m, &rn, &kv, &out);
    kiln_tensor_release(&out);
    for (int s = 0; s < o.n_seqs; s++) {
        free(o.seqs[s].ids);
        free(o.seqs[s].blocks);
    }
    kiln_kv_cache_free(kv);
    llm_runner_free(rn); /* after the cache it keeps the books of */
    kiln_llm_model_free(m);
    return rc;
}
