/* llm_attn_bench.c — the paged decode attention kernel alone (llmc_decode_attention, src/llm/cuda/
 * llm_cuda_decode.cu) at real shapes: GPT-2 XL (25 heads, head_dim 64, fp16), Llama-3-8B (32 query
 * heads over 8 KV heads, head_dim 128, bf16), Phi-2 (head_dim 80), Phi-3-mini (head_dim 96), Gemma-7B
 * (head_dim 256) and Falcon-7B (71 query heads over one KV head: 9 chunks of heads), batch 1, 8, 64 x
 * context 256, 1024, 4096 (every
 * sequence at that context, which is also the graph bucket), 16-token cache blocks in scrambled order.
 *
 * Per case: µs per call and the achieved GB/s of the keys and values one call must read (batch x
 * context x KV heads x head_dim x 2 x 2 bytes; x 1 byte with --fp8, an FP8 E4M3 cache with a key and
 * a value scale per KV head) against H200's 4.8 TB/s. Calls are timed as CUDA
 * graph replays (as decode steps run), rotating over enough copies of the cache (distinct blocks,
 * >= 256 MB together) that the reads come from HBM, not L2. Each case first checks the kernel
 * against a CPU attention on its first and last sequence (max |gpu - cpu| / max |cpu|).
 *
 *   llm_attn_bench [--only gpt2-xl,llama3-8b,phi-2,phi-3-mini,gemma-7b,falcon-7b] [--batch 1,8,64]
 *                  [--ctx 256,1024,4096] [--part N] [--fp8]
 *   (--part: keys per split instead of the kernel's heuristic)
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
#include "quant/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HBM_TBPS 4.8
#define BS 16
#define SPLIT_CAP 64 /* 4096 keys / 64 */
#define ROTATE_BYTES ((double)(256 << 20))
#define REPLAYS 7
#define FP8_SCALE (2.0f / 448.0f) /* every KV head's key and value scale with --fp8 */

static bool g_fp8; /* --fp8: the cache holds E4M3 codes (one byte an element) */

typedef struct shape {
    const char *name;
    kiln_dtype dtype;
    int n_head, n_kv, hd;
} shape;

static const shape SHAPES[] = {{"gpt2-xl", KILN_F16, 25, 25, 64},    {"llama3-8b", KILN_BF16, 32, 8, 128},
                               {"phi-2", KILN_F16, 32, 32, 80},      {"phi-3-mini", KILN_BF16, 32, 32, 96},
                               {"gemma-7b", KILN_BF16, 16, 16, 256}, {"falcon-7b", KILN_BF16, 71, 1, 64}};

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "llm_attn_bench: %s: %s\n", #call, cudaGetErrorString(e_));           \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Whether name is one of the comma-separated names in list. */
static int listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

/* Up to 8 comma-separated ints. */
static int parse_ints(const char *s, int *v) {
    int n = 0;
    while (*s && n < 8) {
        v[n++] = atoi(s);
        s = strchr(s, ',') ? strchr(s, ',') + 1 : s + strlen(s);
    }
    return n;
}

static float to_f(uint16_t v, kiln_dtype dt) { return dt == KILN_F16 ? kiln_f16_to_f32(v) : kiln_bf16_to_f32(v); }
static uint16_t from_f(float v, kiln_dtype dt) { return dt == KILN_F16 ? kiln_f32_to_f16(v) : kiln_f32_to_bf16(v); }

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Device buffers of one case. */
typedef struct bufs {
    uint8_t *k, *v; /* 16-bit elements, or E4M3 codes with --fp8 */
    float *scales;  /* --fp8: [2][n_kv] */
    uint16_t *q, *out;
    int32_t *ctx, *tables; /* tables: [copies][batch][nb] */
    float *part;
    unsigned *count;
} bufs;

/* max |gpu - cpu| / max |cpu| over sequences 0 and batch - 1 (copy 0's table) of the output on the device. */
static int check(const shape *sh, int batch, int ctx, int nb, const bufs *d, const int32_t *table, double *err) {
    const int ldq = (sh->n_head + 2 * sh->n_kv) * sh->hd, ldo = sh->n_head * sh->hd, group = sh->n_head / sh->n_kv;
    const size_t row_elems = (size_t)sh->hd, esz = g_fp8 ? 1 : 2;
    uint16_t *out = malloc((size_t)ldo * 2), *q = malloc((size_t)ldq * 2), *krow = malloc(row_elems * 2 * BS);
    uint16_t *vrow = malloc(row_elems * 2 * BS);
    const uint8_t *k8 = (const uint8_t *)krow, *v8 = (const uint8_t *)vrow;
    double *sc = malloc((size_t)ctx * sizeof *sc), *acc = malloc(row_elems * sizeof *acc), mx = 0, diff = 0;
    float *kf = malloc((size_t)ctx * row_elems * 4), *vf = malloc((size_t)ctx * row_elems * 4);
    if (!out || !q || !krow || !vrow || !sc || !acc || !kf || !vf) return 1;
    for (int s = 0; s < batch; s += batch > 1 ? batch - 1 : 1) {
        CK(cudaMemcpy(out, d->out + (size_t)s * ldo, (size_t)ldo * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(q, d->q + (size_t)s * ldq, (size_t)ldq * 2, cudaMemcpyDeviceToHost));
        for (int g = 0; g < sh->n_kv; g++) {
            for (int b = 0; b < nb; b++) { /* the head's rows of each block: BS contiguous rows */
                const size_t at = ((size_t)table[(size_t)s * nb + b] * sh->n_kv + g) * BS * row_elems * esz;
                CK(cudaMemcpy(krow, d->k + at, row_elems * esz * BS, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(vrow, d->v + at, row_elems * esz * BS, cudaMemcpyDeviceToHost));
                for (int j = 0; j < BS && b * BS + j < ctx; j++)
                    for (size_t e = 0; e < row_elems; e++) {
                        const size_t i = j * row_elems + e, o = (size_t)(b * BS + j) * row_elems + e;
                        kf[o] = g_fp8 ? kiln_e4m3_to_f32(k8[i]) * FP8_SCALE : to_f(krow[i], sh->dtype);
                        vf[o] = g_fp8 ? kiln_e4m3_to_f32(v8[i]) * FP8_SCALE : to_f(vrow[i], sh->dtype);
                    }
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                double m = -INFINITY, l = 0;
                for (int j = 0; j < ctx; j++) {
                    double t = 0;
                    for (size_t e = 0; e < row_elems; e++)
                        t += (double)to_f(q[h * row_elems + e], sh->dtype) * kf[j * row_elems + e];
                    sc[j] = t / sqrt((double)sh->hd);
                    m = fmax(m, sc[j]);
                }
                for (size_t e = 0; e < row_elems; e++) acc[e] = 0;
                for (int j = 0; j < ctx; j++) {
                    const double p = exp(sc[j] - m);
                    l += p;
                    for (size_t e = 0; e < row_elems; e++) acc[e] += p * vf[j * row_elems + e];
                }
                for (size_t e = 0; e < row_elems; e++) {
                    const double ref = acc[e] / l, dd = fabs(to_f(out[h * row_elems + e], sh->dtype) - ref);
                    mx = fmax(mx, fabs(ref));
                    diff = isnan(dd) ? INFINITY : fmax(diff, dd);
                }
            }
        }
    }
    *err = diff / (mx > 0 ? mx : 1);
    free(out);
    free(q);
    free(krow);
    free(vrow);
    free(sc);
    free(acc);
    free(kf);
    free(vf);
    return 0;
}

/* Times the kernel: a graph of `iters` calls rotating over the copies; the median replay. */
static int time_variant(llmc_decode_attn *a, const bufs *d, int copies, int batch, int nb, cudaStream_t st,
                        double *us) {
    const int iters = copies * ((16 + copies - 1) / copies);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    a->table = d->tables;
    if (llmc_decode_attention(a, st) != KILN_OK) return fprintf(stderr, "llm_attn_bench: %s\n", kiln_last_error()), 1;
    CK(cudaStreamSynchronize(st)); /* eager first: the kernel's attributes are set outside the capture */
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    kiln_status s = KILN_OK;
    for (int i = 0; i < iters && s == KILN_OK; i++) {
        a->table = d->tables + (size_t)(i % copies) * batch * nb;
        s = llmc_decode_attention(a, st);
    }
    cudaError_t ce = cudaStreamEndCapture(st, &graph);
    if (s != KILN_OK) return fprintf(stderr, "llm_attn_bench: %s\n", kiln_last_error()), 1;
    CK(ce);
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[REPLAYS];
    CK(cudaGraphLaunch(exec, st)); /* warm-up */
    for (int r = 0; r < REPLAYS; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, REPLAYS, sizeof ms[0], cmp_float);
    *us = ms[REPLAYS / 2] * 1e3 / iters;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    a->table = d->tables;
    return 0;
}

static int run_case(const shape *sh, int batch, int ctx, int force_part, int sm, cudaStream_t st) {
    const int nb = (ctx + BS - 1) / BS, ldq = (sh->n_head + 2 * sh->n_kv) * sh->hd, ldo = sh->n_head * sh->hd;
    const size_t esz = g_fp8 ? 1 : 2;
    const double bytes = (double)batch * ctx * sh->n_kv * sh->hd * 2 * (double)esz;
    int copies = (int)ceil(ROTATE_BYTES / bytes);
    copies = copies < 1 ? 1 : copies > 64 ? 64 : copies;
    const size_t n_blocks = (size_t)copies * batch * nb, block_elems = (size_t)sh->n_kv * BS * sh->hd;
    const size_t kv_elems = n_blocks * block_elems;
    bufs d;
    memset(&d, 0, sizeof d);
    CK(cudaMalloc((void **)&d.k, kv_elems * esz));
    CK(cudaMalloc((void **)&d.v, kv_elems * esz));
    if (g_fp8) {
        float sc[2 * 128];
        for (int i = 0; i < 2 * sh->n_kv; i++) sc[i] = FP8_SCALE;
        CK(cudaMalloc((void **)&d.scales, (size_t)2 * sh->n_kv * sizeof(float)));
        CK(cudaMemcpy(d.scales, sc, (size_t)2 * sh->n_kv * sizeof(float), cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc((void **)&d.q, (size_t)batch * ldq * 2));
    CK(cudaMalloc((void **)&d.out, (size_t)batch * ldo * 2));
    CK(cudaMalloc((void **)&d.ctx, (size_t)batch * 4));
    CK(cudaMalloc((void **)&d.tables, n_blocks * 4));
    CK(cudaMalloc((void **)&d.part, (size_t)batch * sh->n_head * SPLIT_CAP * (sh->hd + 2) * 4));
    const size_t counters = (size_t)batch * llmc_decode_counters(sh->n_head, sh->n_kv);
    CK(cudaMalloc((void **)&d.count, counters * 4));
    CK(cudaMemset(d.count, 0, counters * 4));
    /* random values: a 16 MB pattern repeated over the cache (distinct copies are not needed) */
    const size_t chunk = (size_t)8 << 20;
    uint16_t *h = malloc((chunk + 1024) * 2);
    int32_t *table = malloc(n_blocks * 4), *ctxs = malloc((size_t)batch * 4);
    if (!h || !table || !ctxs) return fprintf(stderr, "llm_attn_bench: out of memory\n"), 1;
    uint32_t r = 12345;
    for (size_t i = 0; i < chunk + 1024; i++) {
        r = r * 1664525u + 1013904223u;
        h[i] = from_f((float)((r >> 8) & 0xffff) / 32768.0f - 1.0f, sh->dtype);
    }
    CK(cudaMemcpy(d.q, h + 777, (size_t)batch * ldq * 2, cudaMemcpyHostToDevice)); /* before h becomes codes */
    if (g_fp8) /* the same values in [-1, 1) as E4M3 codes over the scale (no NaN code) */
        for (size_t i = 0; i < chunk + 1024; i++) ((uint8_t *)h)[i] = kiln_f32_to_e4m3(to_f(h[i], sh->dtype) / FP8_SCALE);
    for (size_t at = 0; at < kv_elems; at += chunk) {
        const size_t n = kv_elems - at < chunk ? kv_elems - at : chunk;
        CK(cudaMemcpy(d.k + at * esz, h, n * esz, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d.v + at * esz, (uint8_t *)h + 1024 * esz, n * esz, cudaMemcpyHostToDevice)); /* shifted: V != K */
    }
    for (size_t i = 0; i < n_blocks; i++) table[i] = (int32_t)i;
    for (size_t i = n_blocks - 1; i > 0; i--) {
        r = r * 1664525u + 1013904223u;
        const size_t j = ((size_t)r << 8 ^ (r >> 8)) % (i + 1);
        const int32_t t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
    CK(cudaMemcpy(d.tables, table, n_blocks * 4, cudaMemcpyHostToDevice));
    for (int i = 0; i < batch; i++) ctxs[i] = ctx;
    CK(cudaMemcpy(d.ctx, ctxs, (size_t)batch * 4, cudaMemcpyHostToDevice));
    llmc_decode_attn a;
    memset(&a, 0, sizeof a);
    a.dtype = sh->dtype;
    a.head_dim = sh->hd;
    a.n_head = sh->n_head;
    a.n_kv_head = sh->n_kv;
    a.n_seqs = batch;
    a.block_size = BS;
    a.max_ctx = ctx;
    a.q = d.q;
    a.ldq = ldq;
    a.out = d.out;
    a.ldo = ldo;
    a.ctx_len = d.ctx;
    a.table = d.tables;
    a.table_stride = nb;
    a.kc = d.k;
    a.vc = d.v;
    a.part = d.part;
    a.split_cap = SPLIT_CAP;
    a.count = d.count;
    a.sm_count = sm;
    a.part_keys = force_part;
    a.kv_scales = d.scales;
    const int part = force_part ? force_part : llmc_decode_part(sh->hd, batch, sh->n_kv, ctx, sm, SPLIT_CAP);
    double us_new = 0, err_new = 0;
    int rc = 0;
    if (llmc_decode_attention(&a, st) != KILN_OK) rc = 1;
    if (rc == 0) CK(cudaStreamSynchronize(st));
    if (rc == 0) rc = check(sh, batch, ctx, nb, &d, table, &err_new);
    if (rc == 0) rc = time_variant(&a, &d, copies, batch, nb, st, &us_new);
    if (rc == 0) {
        const double gbs = bytes / us_new * 1e-3, floor_us = bytes / (HBM_TBPS * 1e12) * 1e6;
        printf("%-10s %5d %5d %6d %6d %6.1f %9.2f %8.0f %6.0f%% %9.1e\n", sh->name, batch, ctx, part,
               (ctx + part - 1) / part, bytes / 1e6, us_new, gbs, 100.0 * floor_us / us_new, err_new);
    } else {
        fprintf(stderr, "llm_attn_bench: %s batch %d ctx %d: %s\n", sh->name, batch, ctx, kiln_last_error());
    }
    cudaFree(d.k);
    cudaFree(d.v);
    cudaFree(d.scales);
    cudaFree(d.q);
    cudaFree(d.out);
    cudaFree(d.ctx);
    cudaFree(d.tables);
    cudaFree(d.part);
    cudaFree(d.count);
    free(h);
    free(table);
    free(ctxs);
    return rc;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int batches[8] = {1, 8, 64}, n_b = 3, ctxs[8] = {256, 1024, 4096}, n_c = 3, part = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            n_b = parse_ints(argv[++i], batches);
        } else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) {
            n_c = parse_ints(argv[++i], ctxs);
        } else if (!strcmp(argv[i], "--part") && i + 1 < argc) {
            part = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--fp8")) {
            g_fp8 = true;
        } else {
            fprintf(stderr, "usage: llm_attn_bench [--only gpt2-xl,llama3-8b] [--batch 1,8,64] [--ctx 256,1024,4096] "
                            "[--part N] [--fp8]\n");
            return 2;
        }
    }
    for (int i = 0; i < n_c; i++)
        if (ctxs[i] < 1 || ctxs[i] > SPLIT_CAP * 64) return fprintf(stderr, "llm_attn_bench: ctx 1..%d\n", SPLIT_CAP * 64), 2;
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
    int sm = 0;
    CK(cudaSetDevice(0));
    CK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    printf("llm_attn_bench on %s (%d SMs): decode attention alone, graph replays, cache blocks of %d tokens%s\n", desc,
           sm, BS, g_fp8 ? ", FP8 (E4M3) cache" : "");
    printf("MB = keys + values read per call; %% = of the %.1f TB/s floor; err = max |gpu - cpu| / max |cpu|\n\n",
           HBM_TBPS);
    printf("%-10s %5s %5s %6s %6s %6s %9s %8s %7s %9s\n", "shape", "batch", "ctx", "part", "splits", "MB", "us/call",
           "GB/s", "floor", "err");
    int rc = 0;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        if (only && !listed(only, SHAPES[si].name)) continue;
        for (int bi = 0; bi < n_b; bi++)
            for (int ci = 0; ci < n_c; ci++)
                if (run_case(&SHAPES[si], batches[bi], ctxs[ci], part, sm, st)) rc = 1;
    }
    cudaStreamDestroy(st);
    return rc;
}
#endif
