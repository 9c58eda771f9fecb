/* llm_op_attention.c — the attention cases of test_backend_ops's LLM kernels (llm_op_cases.h):
 * llmc_prefill_attention (its CUDA-core and its tensor-core kernel) and llmc_decode_attention (keys per
 * split from the heuristic or forced, and the token rows of a prefill step) against kiln_llm_attention
 * over the same paged cache.
 *
 * Parameters: hd (head dim), heads and kv (query and KV heads), batch (sequences, at most 8), rot (the
 * first sequence's row of the shape table), seqs (0: prompts, some after a cached prefix; 1: chunks of
 * 1..300 new tokens after cached prefixes of up to 600), holes (cache blocks no sequence owns, spread
 * among the owned ones by the scrambled block order), kernel (prefill: 1 CUDA cores, 2 tensor cores),
 * part (decode: keys per split, 0 the heuristic's), rows (decode: 1 runs the prefill sequences of
 * seqs through the decode kernel, one row per new token), refused (1: the launcher must refuse the
 * shapes with KILN_ERR_INVALID_ARGUMENT; with kernel 3.. an unknown kernel), window (a sliding window
 * of that many keys, Mistral's: position p sees max(0, p + 1 - window) .. p; 0 none), fp8 (1: an FP8
 * (E4M3) cache of random codes with a key and a value scale per KV head, the CPU reading the same
 * codes through a KILN_F8E4M3FN kiln_kv_cache). Decode contexts run from 1 to 600 tokens, at and
 * around the 16-token block edges. Bound on the error: 5e-3 (fp16), 2e-2 (bf16) of the largest
 * |output|; the decode split counters must be back at zero. */
#include "llm_op_cases.h"
#include "llm_test_util.h"

#include "llm/cuda/llm_cuda_internal.h"
#include "llm/kv_cache.h"
#include "llm/llm_cpu_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 16 /* tokens per cache block */
#define ATT_MAX_SEQS 8
#define ATT_MAX_CTX 600
#define ATT_SPLIT_CAP 64
#define ATT_MAX_KV 16 /* KV heads of an FP8 case (its scales) */

/* (new tokens, context) of the prefill sequences: seqs 0 (prompts, some after a cached prefix) and 1
 * (chunks after cached prefixes ending at, before and past block edges and the kernels' 32- and
 * 64-key tiles, whole prompts among them) */
static const int seq_tables[2][8][2] = {
    {{1, 1}, {17, 17}, {16, 40}, {33, 33}, {5, 300}, {64, 100}, {3, 257}, {48, 48}},
    {{300, 300}, {1, 17}, {129, 160}, {64, 64}, {200, 555}, {7, 33}, {100, 600}, {255, 257}},
};
static const int decode_ctx[10] = {1, 15, 16, 17, 32, 33, 255, 256, 257, 600};

typedef struct attn_case {
    int hd, n_head, n_kv, batch, rot, holes;
    bool decode, token_rows;
    int part, kernel, window;
    bool fp8;
    const int (*seqs)[2];
} attn_case;


/* The launcher must refuse the case's shapes (or its unknown prefill kernel). */
static bool refusal_case(llm_run *run, const attn_case *c) {
    if (!run->on_gpu) return true;
    kiln_status st;
    if (c->decode) {
        llmc_decode_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = run->dt;
        a.head_dim = c->hd;
        a.n_head = c->n_head;
        a.n_kv_head = c->n_kv;
        a.n_seqs = 1;
        a.block_size = BS;
        a.max_ctx = BS;
        a.split_cap = 1;
        st = llmc_decode_attention(&a, NULL);
    } else {
        llmc_prefill_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = run->dt;
        a.head_dim = c->hd;
        a.n_head = c->n_head;
        a.n_kv_head = c->n_kv;
        a.n_seqs = 1;
        a.block_size = BS;
        a.max_new = 1;
        a.kernel = c->kernel;
        st = llmc_prefill_attention(&a, NULL);
    }
    if (st != KILN_ERR_INVALID_ARGUMENT)
        return llm_fail(run, "the launcher returned status %d, expected KILN_ERR_INVALID_ARGUMENT (%d)", (int)st,
                        (int)KILN_ERR_INVALID_ARGUMENT);
    return true;
}

/* The host side of a case: the sequences, a scrambled paged cache with holes, the queries and the
 * reference output. */
typedef struct attn_host {
    int n_new[ATT_MAX_SEQS], ctx[ATT_MAX_SEQS], seq_start[ATT_MAX_SEQS + 1];
    int n_tok, max_new, n_blocks, ldq, ldo, table_stride;
    size_t cache_elems, esz;          /* esz: bytes of a cached element (FP8: 1, the codes in k16, v16) */
    float scales[2 * ATT_MAX_KV];     /* FP8: [2][n_kv] key then value scales */
    uint16_t *q16, *k16, *v16;
    int32_t *table, *rows; /* rows: [n_tok] sequences, then [n_tok] positions (token rows) */
    float *ref;
} attn_host;

static void attn_host_free(attn_host *h) {
    free(h->q16);
    free(h->k16);
    free(h->v16);
    free(h->table);
    free(h->rows);
    free(h->ref);
}

static bool attn_host_make(llm_run *run, const attn_case *c, attn_host *h) {
    const kiln_dtype dt = run->dt;
    const int hd = c->hd;
    int n_used = 0;
    h->ldq = (c->n_head + 2 * c->n_kv) * hd;
    h->ldo = c->n_head * hd;
    h->table_stride = (ATT_MAX_CTX + BS - 1) / BS;
    for (int s = 0; s < c->batch; s++) {
        h->n_new[s] = c->decode && !c->token_rows ? 1 : c->seqs[(s + c->rot) % 8][0];
        h->ctx[s] = c->decode && !c->token_rows ? decode_ctx[(s * 3 + c->rot) % 10] : c->seqs[(s + c->rot) % 8][1];
        h->seq_start[s] = h->n_tok;
        h->n_tok += h->n_new[s];
        h->max_new = h->n_new[s] > h->max_new ? h->n_new[s] : h->max_new;
        n_used += (h->ctx[s] + BS - 1) / BS;
    }
    h->seq_start[c->batch] = h->n_tok;
    h->n_blocks = n_used + c->holes;
    const size_t block_elems = (size_t)c->n_kv * BS * hd;
    h->cache_elems = (size_t)h->n_blocks * block_elems;
    h->esz = c->fp8 ? 1 : 2;
    for (int i = 0; i < 2 * c->n_kv && c->fp8; i++) h->scales[i] = (0.5f + (float)(i % 5)) / 448.0f;
    kiln_kv_cache_config kc = {.n_layer = 1, .n_kv_head = c->n_kv, .head_dim = hd, .block_size = BS,
                               .n_blocks = h->n_blocks, .dtype = c->fp8 ? KILN_F8E4M3FN : dt,
                               .scales = c->fp8 ? h->scales : NULL};
    kiln_kv_cache *kv = NULL;
    h->q16 = malloc((size_t)h->n_tok * h->ldq * 2);
    h->k16 = malloc(h->cache_elems * 2);
    h->v16 = malloc(h->cache_elems * 2);
    h->table = calloc((size_t)c->batch * h->table_stride, 4);
    h->rows = malloc((size_t)2 * h->n_tok * 4);
    h->ref = malloc((size_t)h->n_tok * h->ldo * 4);
    float *qf = malloc((size_t)h->n_tok * h->ldo * 4);
    float *scratch = malloc(KILN_LLM_ATTN_SCRATCH(h->max_new, ATT_MAX_CTX, c->n_head, hd) * 4);
    int32_t *perm = malloc((size_t)h->n_blocks * 4);
    bool ok = false;
    if (!h->q16 || !h->k16 || !h->v16 || !h->table || !h->rows || !h->ref || !qf || !scratch || !perm) {
        llm_fail(run, "out of memory");
        goto done;
    }
    if (kiln_kv_cache_create(&kc, &kv) != KILN_OK) {
        llm_fail(run, "kv cache: %s", kiln_last_error());
        goto done;
    }
    /* random keys and values; blocks handed out in a scrambled order, the holes among them unowned */
    lt_fill16(&run->rng, h->k16, NULL, h->cache_elems, 1.0f, dt);
    lt_fill16(&run->rng, h->v16, NULL, h->cache_elems, 1.0f, dt);
    if (c->fp8) /* byte i: an E4M3 code from random bits (element i / 2 <= i is read before byte i is written) */
        for (size_t i = 0; i < h->cache_elems; i++) {
            ((uint8_t *)h->k16)[i] = llm_random_e4m3(h->k16[i]);
            ((uint8_t *)h->v16)[i] = llm_random_e4m3(h->v16[i]);
        }
    const size_t block_bytes = block_elems * h->esz;
    for (int b = 0; b < h->n_blocks; b++) {
        memcpy(kiln_kv_cache_keys(kv, 0, b), (char *)h->k16 + (size_t)b * block_bytes, block_bytes);
        memcpy(kiln_kv_cache_values(kv, 0, b), (char *)h->v16 + (size_t)b * block_bytes, block_bytes);
        perm[b] = b;
    }
    for (int i = h->n_blocks - 1; i > 0; i--) {
        run->rng = run->rng * 1664525u + 1013904223u;
        const int j = (int)((run->rng >> 8) % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int s = 0, next = 0; s < c->batch; s++)
        for (int b = 0; b < (h->ctx[s] + BS - 1) / BS; b++) h->table[s * h->table_stride + b] = perm[next++];
    for (int s = 0; s < c->batch; s++)
        for (int j = 0; j < h->n_new[s]; j++) {
            h->rows[h->seq_start[s] + j] = s;
            h->rows[h->n_tok + h->seq_start[s] + j] = h->ctx[s] - h->n_new[s] + j;
        }
    /* queries: the q part of qkv rows (the k and v parts random too: never read as queries) */
    lt_fill16(&run->rng, h->q16, NULL, (size_t)h->n_tok * h->ldq, 2.0f, dt);
    for (int t = 0; t < h->n_tok; t++)
        for (int i = 0; i < h->ldo; i++) qf[(size_t)t * h->ldo + i] = lt_to_f32(h->q16[(size_t)t * h->ldq + i], dt);
    for (int s = 0; s < c->batch; s++) {
        const kiln_llm_seq_kv skv = {kv, 0, h->table + s * h->table_stride};
        kiln_llm_attention(&skv, h->n_new[s], h->ctx[s], c->window, c->n_head, qf + (size_t)h->seq_start[s] * h->ldo, h->ldo,
                           h->ref + (size_t)h->seq_start[s] * h->ldo, h->ldo, scratch);
    }
    ok = true;
done:
    kiln_kv_cache_free(kv);
    free(qf);
    free(scratch);
    free(perm);
    return ok;
}

/* Launches the case's kernel on the device arrays; the decode kernel's counters must end at zero. */
static bool attn_gpu(llm_run *run, const attn_case *c, const attn_host *h) {
    const int n_tok = h->n_tok, batch = c->batch;
    const int n_counts = batch * llmc_decode_counters(c->n_head, c->n_kv);
    void *d_q = NULL, *d_out = NULL, *d_k = NULL, *d_v = NULL;
    int32_t *d_meta = NULL;
    float *d_part = NULL, *d_scales = NULL;
    unsigned *d_count = NULL, *counts = NULL;
    uint16_t *out16 = malloc((size_t)n_tok * h->ldo * 2);
    bool ok = false;
    if (!out16) {
        llm_fail(run, "out of memory");
        goto done;
    }
    const size_t meta = (size_t)batch * h->table_stride + 2 * ATT_MAX_SEQS + 1 + 2 * (size_t)n_tok;
    LLM_CUDA(run, cudaMalloc(&d_q, (size_t)n_tok * h->ldq * 2));
    LLM_CUDA(run, cudaMalloc(&d_out, (size_t)n_tok * h->ldo * 2));
    LLM_CUDA(run, cudaMalloc(&d_k, h->cache_elems * h->esz));
    LLM_CUDA(run, cudaMalloc(&d_v, h->cache_elems * h->esz));
    LLM_CUDA(run, cudaMalloc((void **)&d_meta, meta * 4));
    LLM_CUDA(run, cudaMemcpy(d_q, h->q16, (size_t)n_tok * h->ldq * 2, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_k, h->k16, h->cache_elems * h->esz, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_v, h->v16, h->cache_elems * h->esz, cudaMemcpyHostToDevice));
    if (c->fp8) {
        LLM_CUDA(run, cudaMalloc((void **)&d_scales, sizeof h->scales));
        LLM_CUDA(run, cudaMemcpy(d_scales, h->scales, sizeof h->scales, cudaMemcpyHostToDevice));
    }
    int32_t *d_table = d_meta, *d_ctx = d_meta + (size_t)batch * h->table_stride, *d_start = d_ctx + ATT_MAX_SEQS;
    int32_t *d_rows = d_start + ATT_MAX_SEQS + 1;
    LLM_CUDA(run, cudaMemcpy(d_table, h->table, (size_t)batch * h->table_stride * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_ctx, h->ctx, (size_t)batch * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_start, h->seq_start, (size_t)(batch + 1) * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemcpy(d_rows, h->rows, (size_t)2 * n_tok * 4, cudaMemcpyHostToDevice));
    LLM_CUDA(run, cudaMemset(d_out, 0xff, (size_t)n_tok * h->ldo * 2)); /* NaN poison */
    kiln_status st;
    if (c->decode) {
        int sm_count = 0;
        LLM_CUDA(run, cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, run->device));
        LLM_CUDA(run, cudaMalloc((void **)&d_part, (size_t)batch * c->n_head * ATT_SPLIT_CAP * (c->hd + 2) * 4));
        LLM_CUDA(run, cudaMalloc((void **)&d_count, (size_t)n_counts * sizeof(unsigned)));
        LLM_CUDA(run, cudaMemset(d_count, 0, (size_t)n_counts * sizeof(unsigned)));
        llmc_decode_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = run->dt;
        a.head_dim = c->hd;
        a.n_head = c->n_head;
        a.n_kv_head = c->n_kv;
        a.n_seqs = c->token_rows ? n_tok : batch;
        a.block_size = BS;
        a.max_ctx = ATT_MAX_CTX;
        a.q = d_q;
        a.ldq = h->ldq;
        a.out = d_out;
        a.ldo = h->ldo;
        a.ctx_len = d_ctx;
        a.table = d_table;
        a.table_stride = h->table_stride;
        a.kc = d_k;
        a.vc = d_v;
        a.part = d_part;
        a.split_cap = ATT_SPLIT_CAP;
        a.count = d_count;
        a.sm_count = sm_count;
        a.part_keys = c->token_rows ? -1 : c->part;
        a.window = c->window;
        a.kv_scales = d_scales;
        if (c->token_rows) {
            a.row_seq = d_rows;
            a.row_pos = d_rows + n_tok;
        }
        st = llmc_decode_attention(&a, NULL);
    } else {
        llmc_prefill_attn a;
        memset(&a, 0, sizeof a);
        a.dtype = run->dt;
        a.head_dim = c->hd;
        a.n_head = c->n_head;
        a.n_kv_head = c->n_kv;
        a.n_seqs = batch;
        a.block_size = BS;
        a.max_new = h->max_new;
        a.q = d_q;
        a.ldq = h->ldq;
        a.out = d_out;
        a.ldo = h->ldo;
        a.seq_start = d_start;
        a.ctx_len = d_ctx;
        a.table = d_table;
        a.table_stride = h->table_stride;
        a.kc = d_k;
        a.vc = d_v;
        a.kernel = c->kernel;
        a.window = c->window;
        a.kv_scales = d_scales;
        st = llmc_prefill_attention(&a, NULL);
    }
    if (st != KILN_OK) {
        llm_fail(run, "launch: %s", kiln_last_error());
        goto done;
    }
    LLM_CUDA(run, cudaDeviceSynchronize());
    LLM_CUDA(run, cudaMemcpy(out16, d_out, (size_t)n_tok * h->ldo * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < (size_t)n_tok * h->ldo; i++) llm_err_add(run, lt_to_f32(out16[i], run->dt), h->ref[i]);
    if (c->decode && !c->token_rows) {
        counts = malloc((size_t)n_counts * sizeof *counts);
        if (!counts) {
            llm_fail(run, "out of memory");
            goto done;
        }
        LLM_CUDA(run, cudaMemcpy(counts, d_count, (size_t)n_counts * sizeof *counts, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n_counts; i++) run->wrong += counts[i] != 0;
        if (run->wrong) {
            llm_fail(run, "%d split counter(s) not left at zero", run->wrong);
            goto done;
        }
    }
    ok = true;
done:
    cudaFree(d_q);
    cudaFree(d_out);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_meta);
    cudaFree(d_part);
    cudaFree(d_count);
    cudaFree(d_scales);
    free(counts);
    free(out16);
    return ok;
}

bool llm_attention_case(llm_run *run, const char *op, llm_params *pr) {
    attn_case c;
    memset(&c, 0, sizeof c);
    c.decode = !strcmp(op, "llm.DecodeAttention");
    c.hd = (int)llm_param(pr, "hd", 64);
    c.n_head = (int)llm_param(pr, "heads", 2);
    c.n_kv = (int)llm_param(pr, "kv", c.n_head);
    c.batch = (int)llm_param(pr, "batch", 1);
    c.rot = (int)llm_param(pr, "rot", 0);
    c.holes = (int)llm_param(pr, "holes", 0);
    const int seqs = (int)llm_param(pr, "seqs", 0);
    c.seqs = seq_tables[seqs == 1];
    c.kernel = c.decode ? 0 : (int)llm_param(pr, "kernel", LLMC_PREFILL_CUDA_CORES);
    c.part = c.decode ? (int)llm_param(pr, "part", 0) : 0;
    c.token_rows = c.decode && llm_param(pr, "rows", 0) != 0;
    c.window = (int)llm_param(pr, "window", 0);
    c.fp8 = llm_param(pr, "fp8", 0) != 0;
    if (llm_param(pr, "refused", 0)) return refusal_case(run, &c);
    run->tol = run->dt == KILN_F16 ? 5e-3 : 2e-2;
    if (c.batch < 1 || c.batch > ATT_MAX_SEQS || c.rot < 0 || c.holes < 0 || (seqs != 0 && seqs != 1) ||
        c.window < 0 || (c.fp8 && c.n_kv > ATT_MAX_KV))
        return llm_fail(run, "bad case: batch 1..%d, rot, holes and window >= 0, seqs 0 or 1, fp8 with kv <= %d",
                        ATT_MAX_SEQS, ATT_MAX_KV);
    if (run->on_gpu && !c.decode && c.kernel == LLMC_PREFILL_TENSOR_CORES) {
        int cc_major = 0;
        const cudaError_t e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, run->device);
        if (e != cudaSuccess || cc_major < 8) {
            run->r->status = LLM_CASE_UNSUPPORTED;
            snprintf(run->r->msg, sizeof run->r->msg, "the tensor-core prefill kernel needs sm_80 (this GPU: sm_%d.x)",
                     cc_major);
            return false;
        }
    }
    attn_host h;
    memset(&h, 0, sizeof h);
    bool ok = attn_host_make(run, &c, &h) && (!run->on_gpu || attn_gpu(run, &c, &h));
    attn_host_free(&h);
    return ok;
}
