/* llm_prefill_bench.c — the paged prefill attention alone (llmc_prefill_attention, src/llm/cuda/),
 * its CUDA-core kernel (llm_cuda_attn.cu) against its tensor-core kernel (llm_cuda_prefill.cu) and
 * the decode kernel with one row per new token (llmc_decode_attn.row_seq: llmc_attention's choice
 * for at most LLMC_TOKEN_ROWS_MAX_NEW new tokens over a context at least 4x longer), at real shapes:
 * GPT-2 XL (25 heads, head_dim 64, fp16; a 128-token prompt) and Llama-3-8B (32 query heads over 8 KV
 * heads, head_dim 128, bf16; a 2048-token prompt), batch 1, no cached prefix unless asked; 16-token
 * cache blocks in scrambled order.
 *
 * Per case and kernel: µs per call (the median of 7 runs of 20 back-to-back launches, the cache warm
 * in L2 after the first) and TFLOP/s of the causal attention (4 x head_dim flops per visible (query
 * head, key) pair); err = max |gpu - cpu| / max |cpu| over the last new token of the first and last
 * sequence (a double-precision CPU attention), vs cc = max |x - cc| / max |cc| over every output.
 *
 *   llm_prefill_bench [--only gpt2-xl,llama3-8b] [--tokens N] [--prefix P] [--batch B]
 *   (--tokens: new tokens per sequence instead of the shape's prompt; --prefix: cached keys before them)
 * Exits 77 ("skipped: no GPU (...)") without a GPU, 1 on an error. */
#include "llm/llm_cuda.h"

#include <stdio.h>

#ifndef KILN_HAVE_CUDA
int main(void) {
    printf("skipped: no GPU (built without the cuda backend)\n");
    return 77;
}
#else
#include "core/half.h"
#include "core/status.h"
#include "llm/cuda/llm_cuda_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BS 16
#define RUNS 7
#define LAUNCHES 20

typedef struct shape {
    const char *name;
    kiln_dtype dtype;
    int n_head, n_kv, hd, tokens;
} shape;

static const shape SHAPES[] = {{"gpt2-xl", KILN_F16, 25, 25, 64, 128}, {"llama3-8b", KILN_BF16, 32, 8, 128, 2048}};

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "llm_prefill_bench: %s: %s\n", #call, cudaGetErrorString(e_));        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static float to_f(uint16_t v, kiln_dtype dt) { return dt == KILN_F16 ? kiln_f16_to_f32(v) : kiln_bf16_to_f32(v); }
static uint16_t from_f(float v, kiln_dtype dt) { return dt == KILN_F16 ? kiln_f32_to_f16(v) : kiln_f32_to_bf16(v); }

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The host side of a case: queries, the cache blocks and the block table, as uploaded. */
typedef struct host_case {
    const shape *sh;
    int batch, n_new, ctx, nb; /* nb: blocks per sequence */
    uint16_t *q, *k, *v;
    int32_t *table; /* [batch][nb] */
} host_case;

/* max |out - cpu| / max |cpu| over the last new token of sequences 0 and batch - 1 (out: every token's
 * output heads, [batch * n_new][n_head * hd]). */
static double cpu_err(const host_case *c, const uint16_t *out) {
    const shape *sh = c->sh;
    const int hd = sh->hd, ldq = (sh->n_head + 2 * sh->n_kv) * hd, ldo = sh->n_head * hd, group = sh->n_head / sh->n_kv;
    double *sc = malloc((size_t)c->ctx * sizeof *sc), *acc = malloc((size_t)hd * sizeof *acc), mx = 0, diff = 0;
    if (!sc || !acc) {
        free(sc);
        free(acc);
        return INFINITY;
    }
    for (int s = 0; s < c->batch; s += c->batch > 1 ? c->batch - 1 : 1) {
        const size_t t = (size_t)s * c->n_new + c->n_new - 1;
        for (int h = 0; h < sh->n_head; h++) {
            const size_t head = (size_t)(h / group) * BS * hd;
            double m = -INFINITY, l = 0;
            for (int j = 0; j < c->ctx; j++) {
                const uint16_t *kr = c->k + (size_t)c->table[s * c->nb + j / BS] * sh->n_kv * BS * hd + head + (size_t)(j % BS) * hd;
                double dot = 0;
                for (int e = 0; e < hd; e++) dot += (double)to_f(c->q[t * ldq + (size_t)h * hd + e], sh->dtype) * to_f(kr[e], sh->dtype);
                sc[j] = dot / sqrt((double)hd);
                m = fmax(m, sc[j]);
            }
            for (int e = 0; e < hd; e++) acc[e] = 0;
            for (int j = 0; j < c->ctx; j++) {
                const uint16_t *vr = c->v + (size_t)c->table[s * c->nb + j / BS] * sh->n_kv * BS * hd + head + (size_t)(j % BS) * hd;
                const double p = exp(sc[j] - m);
                l += p;
                for (int e = 0; e < hd; e++) acc[e] += p * to_f(vr[e], sh->dtype);
            }
            for (int e = 0; e < hd; e++) {
                const double ref = acc[e] / l, d = fabs(to_f(out[t * ldo + (size_t)h * hd + e], sh->dtype) - ref);
                mx = fmax(mx, fabs(ref));
                diff = isnan(d) ? INFINITY : fmax(diff, d);
            }
        }
    }
    free(sc);
    free(acc);
    return diff / (mx > 0 ? mx : 1);
}

/* One kernel under test: the prefill attention with its kernel field set (p), or the decode kernel
 * with one row per new token (d: what llmc_attention takes for few new tokens over long contexts). */
typedef struct variant {
    const char *name;
    const llmc_prefill_attn *p;
    const llmc_decode_attn *d;
} variant;

static kiln_status launch(const variant *v, cudaStream_t st) {
    return v->p ? llmc_prefill_attention(v->p, st) : llmc_decode_attention(v->d, st);
}

/* µs per call of v: the median of RUNS event-timed runs of LAUNCHES calls. */
static int time_kernel(const variant *v, cudaStream_t st, double *us) {
    if (launch(v, st) != KILN_OK) return fprintf(stderr, "llm_prefill_bench: %s\n", kiln_last_error()), 1;
    CK(cudaStreamSynchronize(st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[RUNS];
    for (int r = 0; r < RUNS; r++) {
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < LAUNCHES; i++)
            if (launch(v, st) != KILN_OK) return fprintf(stderr, "llm_prefill_bench: %s\n", kiln_last_error()), 1;
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, RUNS, sizeof ms[0], cmp_float);
    *us = ms[RUNS / 2] * 1e3 / LAUNCHES;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

/* Uploads c, runs and times the three kernels, prints their lines. */
static int run_case(const host_case *c, cudaStream_t st) {
    const shape *sh = c->sh;
    const int hd = sh->hd, ldq = (sh->n_head + 2 * sh->n_kv) * hd, ldo = sh->n_head * hd, n_tok = c->batch * c->n_new;
    const size_t n_blocks = (size_t)c->batch * c->nb, cache = n_blocks * sh->n_kv * BS * hd, outs = (size_t)n_tok * ldo;
    /* meta: the block table, ctx_len [batch], seq_start [batch + 1], then the token rows' sequences and
     * positions [n_tok] each */
    const size_t n_meta = n_blocks + 2 * (size_t)c->batch + 1 + 2 * (size_t)n_tok;
    const size_t n_counts = (size_t)n_tok * llmc_decode_counters(sh->n_head, sh->n_kv);
    int32_t *meta = malloc(n_meta * 4);
    uint16_t *out[3] = {malloc(outs * 2), malloc(outs * 2), malloc(outs * 2)};
    void *d_q = NULL, *d_k = NULL, *d_v = NULL, *d_out = NULL;
    int32_t *d_meta = NULL;
    float *d_part = NULL;
    unsigned *d_count = NULL;
    if (!meta || !out[0] || !out[1] || !out[2]) return fprintf(stderr, "llm_prefill_bench: out of memory\n"), 1;
    memcpy(meta, c->table, n_blocks * 4);
    int32_t *ctx_len = meta + n_blocks, *seq_start = ctx_len + c->batch, *row_seq = seq_start + c->batch + 1;
    for (int s = 0; s <= c->batch; s++) {
        if (s < c->batch) ctx_len[s] = c->ctx;
        seq_start[s] = s * c->n_new;
    }
    for (int t = 0; t < n_tok; t++) {
        row_seq[t] = t / c->n_new;
        row_seq[n_tok + t] = c->ctx - c->n_new + t % c->n_new;
    }
    CK(cudaMalloc(&d_q, (size_t)n_tok * ldq * 2));
    CK(cudaMalloc(&d_k, cache * 2));
    CK(cudaMalloc(&d_v, cache * 2));
    CK(cudaMalloc(&d_out, outs * 2));
    CK(cudaMalloc((void **)&d_meta, n_meta * 4));
    CK(cudaMalloc((void **)&d_part, (size_t)n_tok * sh->n_head * (hd + 2) * sizeof(float)));
    CK(cudaMalloc((void **)&d_count, n_counts * sizeof(unsigned)));
    CK(cudaMemset(d_count, 0, n_counts * sizeof(unsigned)));
    CK(cudaMemcpy(d_q, c->q, (size_t)n_tok * ldq * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_k, c->k, cache * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_v, c->v, cache * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_meta, meta, n_meta * 4, cudaMemcpyHostToDevice));
    llmc_prefill_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = sh->dtype;
    a.head_dim = hd;
    a.n_head = sh->n_head;
    a.n_kv_head = sh->n_kv;
    a.n_seqs = c->batch;
    a.block_size = BS;
    a.max_new = c->n_new;
    a.q = d_q;
    a.ldq = ldq;
    a.out = d_out;
    a.ldo = ldo;
    a.table = d_meta;
    a.table_stride = c->nb;
    a.ctx_len = d_meta + n_blocks;
    a.seq_start = d_meta + n_blocks + c->batch;
    a.kc = d_k;
    a.vc = d_v;
    llmc_prefill_attn a_tc = a;
    a.kernel = LLMC_PREFILL_CUDA_CORES;
    a_tc.kernel = LLMC_PREFILL_TENSOR_CORES;
    llmc_decode_attn r;
    memset(&r, 0, sizeof r);
    r.dtype = sh->dtype;
    r.head_dim = hd;
    r.n_head = sh->n_head;
    r.n_kv_head = sh->n_kv;
    r.n_seqs = n_tok;
    r.block_size = BS;
    r.max_ctx = c->ctx;
    r.q = d_q;
    r.ldq = ldq;
    r.out = d_out;
    r.ldo = ldo;
    r.ctx_len = a.ctx_len;
    r.table = d_meta;
    r.table_stride = c->nb;
    r.kc = d_k;
    r.vc = d_v;
    r.part = d_part;
    r.split_cap = 1;
    r.count = d_count;
    r.sm_count = 132;
    r.part_keys = -1;
    r.row_seq = a.seq_start + c->batch + 1;
    r.row_pos = r.row_seq + n_tok;
    const variant variants[3] = {{"cuda cores", &a, NULL}, {"tensor", &a_tc, NULL}, {"token rows", NULL, &r}};
    /* causal flops: every (sequence, query head, new token) pair sees prefix + its index + 1 keys */
    const int prefix = c->ctx - c->n_new;
    const double flops = 4.0 * hd * sh->n_head * c->batch * ((double)c->n_new * prefix + (double)c->n_new * (c->n_new + 1) / 2);
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        double us = 0;
        CK(cudaMemset(d_out, 0xff, outs * 2)); /* NaN poison */
        if (time_kernel(&variants[i], st, &us)) {
            rc = 1;
            break;
        }
        CK(cudaMemcpy(out[i], d_out, outs * 2, cudaMemcpyDeviceToHost));
        char vs_cc[16] = "-";
        if (i > 0) {
            double mx = 0, diff = 0;
            for (size_t e = 0; e < outs; e++) {
                const double ref = to_f(out[0][e], sh->dtype), d = fabs(to_f(out[i][e], sh->dtype) - ref);
                mx = fmax(mx, fabs(ref));
                diff = isnan(d) ? INFINITY : fmax(diff, d);
            }
            snprintf(vs_cc, sizeof vs_cc, "%.2e", diff / (mx > 0 ? mx : 1));
        }
        printf("%-10s %5d %6d %6d %-10s %9.1f %8.2f %9.2e %9s\n", sh->name, c->batch, c->n_new, prefix, variants[i].name, us,
               flops / (us * 1e-6) / 1e12, cpu_err(c, out[i]), vs_cc);
    }
    cudaFree(d_q);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_out);
    cudaFree(d_meta);
    cudaFree(d_part);
    cudaFree(d_count);
    free(meta);
    for (int i = 0; i < 3; i++) free(out[i]);
    return rc;
}

/* Builds the host case of sh (random queries and cache, blocks scrambled) and runs it. */
static int bench_shape(const shape *sh, int batch, int tokens, int prefix, cudaStream_t st) {
    host_case c = {sh, batch, tokens > 0 ? tokens : sh->tokens, 0, 0, NULL, NULL, NULL, NULL};
    c.ctx = prefix + c.n_new;
    c.nb = (c.ctx + BS - 1) / BS;
    const int ldq = (sh->n_head + 2 * sh->n_kv) * sh->hd;
    const size_t n_blocks = (size_t)batch * c.nb, cache = n_blocks * sh->n_kv * BS * sh->hd;
    const size_t nq = (size_t)batch * c.n_new * ldq;
    c.q = malloc(nq * 2);
    c.k = malloc(cache * 2);
    c.v = malloc(cache * 2);
    c.table = malloc(n_blocks * 4);
    int rc = 1;
    if (c.q && c.k && c.v && c.table) {
        uint32_t rng = 12345;
        for (size_t i = 0; i < nq + 2 * cache; i++) {
            rng = rng * 1664525u + 1013904223u;
            const uint16_t x = from_f((float)(rng >> 8) / 8388608.0f - 1.0f, sh->dtype);
            if (i < nq) c.q[i] = x;
            else if (i < nq + cache) c.k[i - nq] = x;
            else c.v[i - nq - cache] = x;
        }
        for (size_t b = 0; b < n_blocks; b++) c.table[b] = (int32_t)b;
        for (size_t b = n_blocks - 1; b > 0; b--) {
            rng = rng * 1664525u + 1013904223u;
            const size_t j = (rng >> 8) % (b + 1);
            const int32_t t = c.table[b];
            c.table[b] = c.table[j];
            c.table[j] = t;
        }
        rc = run_case(&c, st);
    } else {
        fprintf(stderr, "llm_prefill_bench: out of memory\n");
    }
    free(c.q);
    free(c.k);
    free(c.v);
    free(c.table);
    return rc;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int tokens = 0, prefix = 0, batch = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prefix") && i + 1 < argc) prefix = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: llm_prefill_bench [--only gpt2-xl,llama3-8b] [--tokens N] [--prefix P] [--batch B]\n");
            return 2;
        }
    }
    if (tokens < 0 || tokens > 16384 || prefix < 0 || prefix > 65536 || batch < 1 || batch > 64)
        return fprintf(stderr, "llm_prefill_bench: tokens 1..16384, prefix 0..65536, batch 1..64\n"), 2;
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
    CK(cudaSetDevice(0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("llm_prefill_bench on %s: prefill attention alone, cache blocks of %d tokens\n", desc, BS);
    printf("err = max |gpu - cpu| / max |cpu| (last new token); vs cc = max |x - cc| / max |cc| (every output)\n\n");
    printf("%-10s %5s %6s %6s %-10s %9s %8s %9s %9s\n", "shape", "batch", "new", "prefix", "kernel", "us/call", "TFLOP/s",
           "err", "vs cc");
    int rc = 0;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const size_t n = strlen(SHAPES[si].name);
        const char *p = only ? strstr(only, SHAPES[si].name) : NULL;
        if (only && !(p && (p == only || p[-1] == ',') && (p[n] == ',' || p[n] == 0))) continue;
        if (bench_shape(&SHAPES[si], batch, tokens, prefix, st)) rc = 1;
    }
    cudaStreamDestroy(st);
    return rc;
}
#endif
