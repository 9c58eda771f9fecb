/* test_llm_cuda.c — the LLM forward on CUDA (src/llm/cuda/, llm_cuda.h) against the CPU forward (the
 * oracle, itself tested against transformers) on tiny random models: GPT-2 (head_dim 64, tied
 * embeddings, odd vocabulary), Llama with head_dim 128, 2 query heads per KV head and dynamic NTK RoPE,
 * Llama with head_dim 64, 4 query heads per KV head and Llama 3 RoPE, Llama with head_dim 128 and
 * 8 query heads per KV head, GPT-2 with head_dim 16, Llama with head_dim 256 and 12 query heads
 * per KV head (the decode attention in two chunks of heads), and a head_dim 128 model with every other
 * family's feature (GeGLU, embedding scale, 1 + w norms, q/k/v biases, partial RoPE with LongRoPE). First, every GEMV kernel configuration
 * alone against a CPU product (test_gemv_kernels below: fp16/bf16, n 1/3/5/8, decode shapes, ragged N,
 * bias, FP32 out), and the
 * decode attention kernel alone against a CPU attention (test_decode_kernel below: splits, GQA 1-8,
 * hd 64/128, batches 1/3/33, graph replays).
 *
 * Every model runs the same schedule on both: three sequences (prompts of 37, 5 and 150 tokens) in
 * scrambled cache blocks of 16 tokens; step 0 prefills the first two whole and the third's first 64
 * tokens with all_logits; steps 1-2 decode the first two while the third's prompt continues in chunks
 * of 64 and 22; then 32 decode steps of all three (the third's context reaches 182 tokens: two
 * splits of the decode attention). Decode tokens are the CPU's greedy choices, fed to both.
 * The GPU runs in fp16 and bf16, each with the GEMV kernel for small steps (its configuration timed
 * per shape on first use) kernel by kernel, the same with the fused GEMV (KILN_LLM_FUSE=on: norm
 * prologue, activation / residual epilogues) and with it under programmatic dependent launch
 * (KILN_LLM_FUSE=pdl; plain fused before sm_90), and with cuBLASLt only; each runs the schedule twice
 * on one model and cache, without and then with CUDA graphs for the decode steps, whose logits must
 * equal the eager pass's (relative difference <= 1e-6) and which must have been captured and replayed.
 * The path a model took (kiln_llm_cuda_decode_path) must be the one KILN_LLM_FUSE asked for.
 *
 * Checks per step: max |gpu - cpu| / max |cpu| over the logits <= 2e-2 (fp16) or 5e-2 (bf16); the
 * GPU's greedy ids equal the argmax of its own logits exactly; where they differ from the CPU's
 * argmax, the CPU's top-two margin is within twice the tolerance (a near tie). Also: a block table
 * naming a block the cache did not hand out is refused; on the first model, a timing cache file
 * (options.timing_cache) makes a second model time no product shape the first one timed
 * (test_timing_cache). Prints a table of the results.
 * Without a GPU (or without the cuda backend) prints "skipped: no GPU (...)" and exits 77. */
#include "llm/kv_cache.h"
#include "llm/llm.h"
#include "llm/llm_cuda.h"
#include "llm/llm_random.h"
#include "llm_test_util.h"
#ifdef KILN_HAVE_CUDA
#include "llm/cuda/llm_cuda_internal.h" /* the decode attention and GEMV launchers, tested alone */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_SEQ 3
#define BLOCK 16
#define MAX_BLOCKS 16 /* 256 tokens per sequence */
#define N_BLOCKS 64
#define DECODE 32
#define MAX_STEPS 40
#define MAX_TOKENS 256
#define N_MODELS 7

/* One step of the schedule, with the CPU's logits. */
typedef struct step {
    int n_tokens, n_seqs, n_out;
    int32_t tokens[MAX_TOKENS], positions[MAX_TOKENS], seq_start[N_SEQ + 1], ctx_len[N_SEQ];
    bool all_logits;
    float *ref; /* [n_out, vocab] */
} step;

typedef struct schedule {
    int n_steps;
    step steps[MAX_STEPS];
    int32_t table[N_SEQ * MAX_BLOCKS];
} schedule;

static const int prompt_len[N_SEQ] = {37, 5, 150};

static kiln_llm_batch batch_of(const schedule *sc, const step *st) {
    kiln_llm_batch b = {st->n_tokens, st->tokens,     st->positions, st->n_seqs, st->seq_start,
                        st->ctx_len,  sc->table,      MAX_BLOCKS,    st->all_logits, NULL};
    return b;
}

static int argmax_row(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* The largest and second largest values of row. */
static void top2(const float *row, int n, float *a, float *b) {
    *a = *b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (row[i] > *a) {
            *b = *a;
            *a = row[i];
        } else if (row[i] > *b) {
            *b = row[i];
        }
    }
}

/* Builds the schedule on the CPU model (reference logits, greedy decode tokens). */
static int make_schedule(const kiln_llm_model *m, schedule *sc) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    kiln_kv_cache_config kc = {.n_layer = c->n_layer, .n_kv_head = c->n_kv_head, .head_dim = c->head_dim,
                               .block_size = BLOCK, .n_blocks = N_BLOCKS, .dtype = KILN_F32};
    kiln_kv_cache *kv;
    if (kiln_kv_cache_create(&kc, &kv) != KILN_OK) return fprintf(stderr, "FAIL: %s\n", kiln_last_error()), 1;
    /* every block taken (ids 0..N_BLOCKS-1, as on the GPU), handed to the sequences shuffled */
    int ids[N_BLOCKS];
    for (int i = 0; i < N_BLOCKS; i++) ids[i] = kiln_kv_cache_alloc_block(kv);
    unsigned rng = 2024;
    for (int i = N_BLOCKS - 1; i > 0; i--) {
        rng = rng * 1103515245u + 12345u;
        int j = (int)((rng >> 8) % (unsigned)(i + 1)), t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    for (int i = 0; i < N_SEQ * MAX_BLOCKS; i++) sc->table[i] = ids[i];
    int32_t prompts[N_SEQ][160];
    uint32_t r = 77;
    for (int s = 0; s < N_SEQ; s++)
        for (int t = 0; t < prompt_len[s]; t++) {
            r = r * 1664525u + 1013904223u;
            prompts[s][t] = (int32_t)((r >> 8) % (uint32_t)c->vocab);
        }
    /* chunk of the third prompt at steps 0, 1, 2; the first two are whole at step 0 */
    static const int chunk3[3] = {64, 64, 22};
    int done[N_SEQ] = {0}, next_tok[N_SEQ] = {0};
    sc->n_steps = 3 + DECODE;
    for (int k = 0; k < sc->n_steps; k++) {
        step *st = &sc->steps[k];
        memset(st, 0, sizeof *st);
        st->n_seqs = N_SEQ;
        st->all_logits = k == 0;
        for (int s = 0; s < N_SEQ; s++) {
            int take = 1;
            const int32_t *src = &next_tok[s];
            if (done[s] < prompt_len[s]) {
                take = s < 2 ? prompt_len[s] : chunk3[k];
                src = prompts[s] + done[s];
            }
            st->seq_start[s] = st->n_tokens;
            for (int t = 0; t < take; t++) {
                st->tokens[st->n_tokens] = src[t];
                st->positions[st->n_tokens++] = done[s] + t;
            }
            done[s] += take;
            st->ctx_len[s] = done[s];
        }
        st->seq_start[N_SEQ] = st->n_tokens;
        st->n_out = st->all_logits ? st->n_tokens : N_SEQ;
        st->ref = malloc((size_t)st->n_out * c->vocab * sizeof(float));
        kiln_llm_batch b = batch_of(sc, st);
        if (!st->ref || kiln_llm_forward(m, kv, &b, st->ref) != KILN_OK) {
            fprintf(stderr, "FAIL: CPU forward step %d: %s\n", k, kiln_last_error());
            kiln_kv_cache_free(kv);
            return 1;
        }
        for (int s = 0; s < N_SEQ; s++) {
            int row = st->all_logits ? st->seq_start[s + 1] - 1 : s;
            next_tok[s] = argmax_row(st->ref + (size_t)row * c->vocab, c->vocab);
        }
    }
    kiln_kv_cache_free(kv);
    return 0;
}

/* Results of one GPU configuration over one phase of the schedule. */
typedef struct phase_result {
    double max_err;
    int rows, agree, near_ties, self_mismatch;
} phase_result;

/* Logits rows of the whole schedule. */
static size_t schedule_rows(const schedule *sc) {
    size_t n = 0;
    for (int k = 0; k < sc->n_steps; k++) n += (size_t)sc->steps[k].n_out;
    return n;
}

/* Runs the schedule on the GPU twice on one model and cache (the second pass rewrites the cache
 * with the same values): pass 0 without CUDA graphs (probe->eager), pass 1 with them (decode steps
 * captured and replayed); both compared with the CPU, res[pass][0..2]: prefill (step 0), chunked
 * (1-2), decode. *same_err: the largest |pass 1 - pass 0| over all logits / max |pass 0|. The probe's
 * graph counters come back in *probe. */
static int run_gpu(const kiln_llm_model *m, const schedule *sc, kiln_dtype dt, int gemv, const char *fuse, double tol,
                   phase_result res[2][3], double *same_err, kiln_llm_cuda_probe *probe) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    kiln_llm_cuda_options o;
    kiln_llm_cuda_options_default(&o);
    o.max_tokens = MAX_TOKENS;
    o.max_seqs = 8;
    o.max_context = MAX_BLOCKS * BLOCK;
    o.gemv_max_tokens = gemv;
    o.use_graphs = true;
    memset(probe, 0, sizeof *probe);
    o.probe = probe;
    lt_err same = {0, 0}; /* graph pass vs eager pass */
    *same_err = INFINITY;
    kiln_llm_cuda *g = NULL;
    kiln_llm_cuda_kv *kv = NULL;
    float *logits = malloc((size_t)MAX_TOKENS * c->vocab * sizeof(float));
    float *eager = malloc(schedule_rows(sc) * (size_t)c->vocab * sizeof(float));
    int32_t ids[MAX_TOKENS];
    memset(res, 0, 6 * sizeof res[0][0]);
    const uint64_t per_block = (uint64_t)c->n_layer * 2 * c->n_kv_head * BLOCK * c->head_dim * 2;
    kiln_llm_cuda_kv_options ko = {.block_size = BLOCK, .mem_fraction = 0.5, .max_bytes = per_block * N_BLOCKS};
    setenv("KILN_LLM_FUSE", fuse, 1);
    if (!logits || !eager || kiln_llm_cuda_create(m, dt, &o, &g) != KILN_OK ||
        kiln_llm_cuda_kv_create(g, &ko, &kv) != KILN_OK) {
        unsetenv("KILN_LLM_FUSE");
        LT_EXPECT(0, "create: %s", kiln_last_error());
        goto done;
    }
    unsetenv("KILN_LLM_FUSE");
    const bool fused_path = strstr(kiln_llm_cuda_decode_path(g), "fused GEMVs") != NULL; /* not "unfused" */
    LT_EXPECT(fused_path == (strcmp(fuse, "off") != 0), "KILN_LLM_FUSE=%s gave %s", fuse, kiln_llm_cuda_decode_path(g));
    LT_EXPECT(kiln_llm_cuda_kv_blocks(kv) == N_BLOCKS, "cuda KV cache has %d blocks, expected %d", kiln_llm_cuda_kv_blocks(kv),
           N_BLOCKS);
    for (int i = 0; i < N_BLOCKS; i++) kiln_llm_cuda_kv_alloc_block(kv);
    for (int pass = 0; pass < 2; pass++) {
        probe->eager = pass == 0;
        size_t at = 0;
        for (int k = 0; k < sc->n_steps; k++) {
            const step *st = &sc->steps[k];
            kiln_llm_batch b = batch_of(sc, st);
            for (size_t i = 0; i < (size_t)st->n_out * c->vocab; i++) logits[i] = NAN; /* poison */
            if (kiln_llm_cuda_forward(g, kv, &b, logits, ids) != KILN_OK) {
                LT_EXPECT(0, "cuda forward pass %d step %d: %s", pass, k, kiln_last_error());
                goto done;
            }
            const size_t cnt = (size_t)st->n_out * c->vocab;
            if (pass == 0) {
                memcpy(eager + at, logits, cnt * sizeof(float));
            } else {
                for (size_t i = 0; i < cnt; i++) lt_err_add(&same, logits[i], eager[at + i]);
            }
            at += cnt;
            phase_result *pr = &res[pass][k == 0 ? 0 : k < 3 ? 1 : 2];
            for (int r = 0; r < st->n_out; r++) {
                const float *ref = st->ref + (size_t)r * c->vocab, *got = logits + (size_t)r * c->vocab;
                lt_err er = {0, 0};
                for (int i = 0; i < c->vocab; i++) lt_err_add(&er, got[i], ref[i]);
                double err = lt_err_rel(&er);
                pr->max_err = fmax(pr->max_err, err);
                pr->rows++;
                int want = argmax_row(ref, c->vocab);
                if (ids[r] != argmax_row(got, c->vocab)) pr->self_mismatch++;
                if (ids[r] == want) {
                    pr->agree++;
                } else {
                    float a, b2;
                    top2(ref, c->vocab, &a, &b2);
                    if (a - b2 <= 2 * tol * er.max_want) pr->near_ties++;
                }
            }
        }
    }
    *same_err = lt_err_rel(&same);
    /* a block the cache did not hand out is refused */
    {
        kiln_llm_cuda_kv_release_block(kv, sc->table[0]);
        kiln_llm_batch b = batch_of(sc, &sc->steps[sc->n_steps - 1]);
        LT_EXPECT(kiln_llm_cuda_forward(g, kv, &b, logits, NULL) == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "block"),
               "a released block was not refused (%s)", kiln_last_error());
    }
done:
    kiln_llm_cuda_kv_free(kv);
    kiln_llm_cuda_free(g);
    free(logits);
    free(eager);
    return 0;
}

/* The timing cache (options.timing_cache) on model m in fp16, GEMV on: made with a missing cache
 * file, the model times its product shapes and writes them there; made again with that file, it times
 * none, finds every one, and its logits over the schedule (eager steps) equal the first model's
 * (relative difference <= 1e-6: the same algorithms and configurations). */
static void test_timing_cache(const kiln_llm_model *m, const schedule *sc) {
    const kiln_llm_config *c = kiln_llm_model_config(m);
    char path[64];
    snprintf(path, sizeof path, "test_llm_cuda_%d.tcache", (int)getpid());
    remove(path);
    const size_t rows = schedule_rows(sc) * (size_t)c->vocab;
    float *out[2] = {malloc(rows * sizeof(float)), malloc(rows * sizeof(float))};
    kiln_llm_cuda_probe probe[2];
    memset(probe, 0, sizeof probe);
    for (int run = 0; run < 2 && out[0] && out[1]; run++) {
        kiln_llm_cuda_options o;
        kiln_llm_cuda_options_default(&o);
        o.max_tokens = MAX_TOKENS;
        o.max_seqs = 8;
        o.max_context = MAX_BLOCKS * BLOCK;
        o.timing_cache = path;
        o.probe = &probe[run];
        probe[run].eager = true;
        kiln_llm_cuda *g = NULL;
        kiln_llm_cuda_kv *kv = NULL;
        const uint64_t per_block = (uint64_t)c->n_layer * 2 * c->n_kv_head * BLOCK * c->head_dim * 2;
        kiln_llm_cuda_kv_options ko = {.block_size = BLOCK, .mem_fraction = 0.5, .max_bytes = per_block * N_BLOCKS};
        if (kiln_llm_cuda_create(m, KILN_F16, &o, &g) != KILN_OK || kiln_llm_cuda_kv_create(g, &ko, &kv) != KILN_OK) {
            LT_EXPECT(0, "timing cache run %d: create: %s", run, kiln_last_error());
        } else {
            for (int i = 0; i < N_BLOCKS; i++) kiln_llm_cuda_kv_alloc_block(kv);
            size_t at = 0;
            for (int k = 0; k < sc->n_steps; k++) {
                kiln_llm_batch b = batch_of(sc, &sc->steps[k]);
                if (kiln_llm_cuda_forward(g, kv, &b, out[run] + at, NULL) != KILN_OK) {
                    LT_EXPECT(0, "timing cache run %d step %d: %s", run, k, kiln_last_error());
                    break;
                }
                at += (size_t)sc->steps[k].n_out * c->vocab;
            }
        }
        kiln_llm_cuda_kv_free(kv);
        kiln_llm_cuda_free(g);
    }
    lt_err same = {0, 0};
    for (size_t i = 0; out[0] && out[1] && i < rows; i++) lt_err_add(&same, out[1][i], out[0][i]);
    const bool ok = probe[0].tactics_timed > 0 && probe[0].tactics_cached == 0 && probe[1].tactics_timed == 0 &&
                    probe[1].tactics_cached == probe[0].tactics_timed && lt_err_rel(&same) <= 1e-6;
    printf("timing cache: first model timed %d product shapes (found %d), second timed %d (found %d); "
           "|second - first| / max %.2e %s\n\n", probe[0].tactics_timed, probe[0].tactics_cached,
           probe[1].tactics_timed, probe[1].tactics_cached, lt_err_rel(&same), ok ? "ok" : "FAIL");
    LT_EXPECT(ok, "timing cache: timed %d / found %d, then timed %d / found %d, logits differ by %.3e",
              probe[0].tactics_timed, probe[0].tactics_cached, probe[1].tactics_timed, probe[1].tactics_cached,
              lt_err_rel(&same));
    remove(path);
    free(out[0]);
    free(out[1]);
}

/* ---------------------------------------------------------------- the decode attention kernel alone */

#ifdef KILN_HAVE_CUDA
/* llmc_decode_attention (src/llm/cuda/llm_cuda_decode.cu) against a double-precision CPU attention over
 * the same 16-bit values: head_dim 64 and 128, GQA groups 1, 3, 4 and 8, batches 1, 3 and 33, contexts
 * of 1..max_ctx that are mostly not multiples of the cache's 16-token blocks, scrambled blocks, and
 * keys per split from the heuristic (with the device's SMs and with 8 SMs), forced small (16 or 48
 * keys: more splits than tiles, a split ending inside a tile) and forced to one split; the previous
 * kernels too. Then a CUDA graph captured once is replayed while the contexts grow inside the bucket
 * (as decode steps do), and the split counters must be back at zero. */

#define KT_BS 16
#define KT_CTX 1024 /* the bucket: longest context */

typedef struct kt_shape {
    int hd, n_head, n_kv;
} kt_shape;

/* max |gpu - cpu| / max |cpu| over every sequence and head. */
static double kt_compare(const kt_shape *sh, kiln_dtype dt, int n_seqs, const int32_t *ctx, const int32_t *table,
                         int table_stride, const float *q, int ldq, const float *kc, const float *vc,
                         const uint16_t *out, int ldo) {
    const int hd = sh->hd, group = sh->n_head / sh->n_kv;
    lt_err er = {0, 0};
    double *sc = malloc((size_t)KT_CTX * sizeof *sc), *acc = malloc((size_t)hd * sizeof *acc);
    for (int s = 0; s < n_seqs; s++)
        for (int h = 0; h < sh->n_head; h++) {
            const int g = h / group;
            double m = -INFINITY, l = 0;
            for (int j = 0; j < ctx[s]; j++) {
                const size_t row = ((size_t)table[s * table_stride + j / KT_BS] * sh->n_kv + g) * KT_BS + j % KT_BS;
                double d = 0;
                for (int e = 0; e < hd; e++)
                    d += (double)q[(size_t)s * ldq + (size_t)h * hd + e] * kc[row * hd + e];
                sc[j] = d / sqrt((double)hd);
                m = fmax(m, sc[j]);
            }
            for (int e = 0; e < hd; e++) acc[e] = 0;
            for (int j = 0; j < ctx[s]; j++) {
                const size_t row = ((size_t)table[s * table_stride + j / KT_BS] * sh->n_kv + g) * KT_BS + j % KT_BS;
                const double p = exp(sc[j] - m);
                l += p;
                for (int e = 0; e < hd; e++) acc[e] += p * vc[row * hd + e];
            }
            for (int e = 0; e < hd; e++) {
                const double ref = acc[e] / l, got = lt_to_f32(out[(size_t)s * ldo + (size_t)h * hd + e], dt);
                lt_err_add(&er, got, ref);
            }
        }
    free(sc);
    free(acc);
    return lt_err_rel(&er);
}

/* The decode attention call over the test's buffers (bufs: every field but the shape's) for dtype dt,
 * shape sh and b sequences, q and out packed per sequence. */
static llmc_decode_attn kt_attn(const llmc_decode_attn *bufs, kiln_dtype dt, const kt_shape *sh, int b) {
    llmc_decode_attn a = *bufs;
    a.dtype = dt;
    a.head_dim = sh->hd;
    a.n_head = sh->n_head;
    a.n_kv_head = sh->n_kv;
    a.n_seqs = b;
    a.ldq = (sh->n_head + 2 * sh->n_kv) * sh->hd;
    a.ldo = sh->n_head * sh->hd;
    return a;
}

static void test_decode_kernel(void) {
    static const kt_shape shapes[] = {{64, 4, 4}, {64, 6, 2}, {64, 16, 2}, {128, 2, 2}, {128, 8, 2}, {128, 8, 1}};
    static const int batches[] = {1, 3, 33};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]), max_seqs = 33, split_cap = 64;
    const int table_stride = KT_CTX / KT_BS, n_blocks = max_seqs * table_stride;
    int sm = 0, dev_sm = 0;
    if (cudaDeviceGetAttribute(&dev_sm, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) dev_sm = 132;
    cudaStream_t stream = NULL;
    void *d_q = NULL, *d_out = NULL, *d_k = NULL, *d_v = NULL;
    int32_t *d_ctx = NULL, *d_table = NULL;
    float *d_part = NULL;
    unsigned *d_count = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    const size_t kv_elems = (size_t)n_blocks * 2 * KT_BS * 128; /* the largest n_kv * hd: 2 * 128 */
    const size_t q_elems = (size_t)max_seqs * 24 * 128, out_elems = (size_t)max_seqs * 16 * 128;
    uint16_t *kc = malloc(kv_elems * 2), *vc = malloc(kv_elems * 2), *q = malloc(q_elems * 2), *out = malloc(out_elems * 2);
    float *kf = malloc(kv_elems * 4), *vf = malloc(kv_elems * 4), *qf = malloc(q_elems * 4); /* the same values */
    int32_t *table = malloc((size_t)n_blocks * 4), ctx[33];
    unsigned counts[33 * 4]; /* [seq][n_kv <= 4] */
    if (!kc || !vc || !q || !out || !table || !kf || !vf || !qf) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    LT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    LT_CUDA(cudaMalloc(&d_q, q_elems * 2));
    LT_CUDA(cudaMalloc(&d_out, out_elems * 2));
    LT_CUDA(cudaMalloc(&d_k, kv_elems * 2));
    LT_CUDA(cudaMalloc(&d_v, kv_elems * 2));
    LT_CUDA(cudaMalloc((void **)&d_ctx, max_seqs * 4));
    LT_CUDA(cudaMalloc((void **)&d_table, (size_t)n_blocks * 4));
    LT_CUDA(cudaMalloc((void **)&d_part, (size_t)max_seqs * 16 * split_cap * (128 + 2) * 4));
    LT_CUDA(cudaMalloc((void **)&d_count, sizeof counts));
    LT_CUDA(cudaMemset(d_count, 0, sizeof counts));
    const llmc_decode_attn bufs = {.block_size = KT_BS, .max_ctx = KT_CTX, .q = d_q, .out = d_out, .ctx_len = d_ctx,
                                   .table = d_table, .table_stride = table_stride, .kc = d_k, .vc = d_v, .part = d_part,
                                   .split_cap = split_cap, .count = d_count};
    /* scrambled blocks: sequence s, block b -> a permutation of 0..n_blocks-1 */
    for (int i = 0; i < n_blocks; i++) table[i] = i;
    uint32_t rng = 4242;
    for (int i = n_blocks - 1; i > 0; i--) {
        rng = rng * 1664525u + 1013904223u;
        const int j = (int)((rng >> 8) % (uint32_t)(i + 1)), t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
    LT_CUDA(cudaMemcpy(d_table, table, (size_t)n_blocks * 4, cudaMemcpyHostToDevice));
    printf("%-22s %-5s %5s %-26s %10s %s\n", "decode kernel: shape", "dtype", "batch", "keys per split", "max rel err",
           "result");
    for (int di = 0; di < 2; di++) {
        const kiln_dtype dt = di ? KILN_BF16 : KILN_F16;
        const double tol = di ? 2e-2 : 5e-3;
        for (size_t i = 0; i < kv_elems; i++) {
            rng = rng * 1664525u + 1013904223u;
            kc[i] = lt_from_f32((float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f, dt);
            rng = rng * 1664525u + 1013904223u;
            vc[i] = lt_from_f32((float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f, dt);
            kf[i] = lt_to_f32(kc[i], dt);
            vf[i] = lt_to_f32(vc[i], dt);
        }
        for (size_t i = 0; i < q_elems; i++) {
            rng = rng * 1664525u + 1013904223u;
            q[i] = lt_from_f32(3.0f * ((float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f), dt);
            qf[i] = lt_to_f32(q[i], dt);
        }
        LT_CUDA(cudaMemcpy(d_k, kc, kv_elems * 2, cudaMemcpyHostToDevice));
        LT_CUDA(cudaMemcpy(d_v, vc, kv_elems * 2, cudaMemcpyHostToDevice));
        LT_CUDA(cudaMemcpy(d_q, q, q_elems * 2, cudaMemcpyHostToDevice));
        for (int si = 0; si < n_shapes; si++) {
            const kt_shape *sh = &shapes[si];
            const int ldq = (sh->n_head + 2 * sh->n_kv) * sh->hd, ldo = sh->n_head * sh->hd;
            for (int bi = 0; bi < 3; bi++) {
                const int b = batches[bi];
                /* contexts: 1, block edges +- 1, the bucket itself, and random lengths */
                static const int fixed[] = {KT_CTX, 1, 17, 15, 129, 255, 33, 1000, 64, 513};
                for (int s = 0; s < b; s++) {
                    rng = rng * 1664525u + 1013904223u;
                    ctx[s] = s < 10 ? fixed[(s + si + bi) % 10] : 1 + (int)((rng >> 8) % KT_CTX);
                }
                if (b == 1) ctx[0] = si % 2 ? 1000 : 777;
                LT_CUDA(cudaMemcpy(d_ctx, ctx, (size_t)b * 4, cudaMemcpyHostToDevice));
                /* keys per split: heuristic (device SMs, 8 SMs), 16, 48, one split */
                const int variants = 5;
                for (int vi = 0; vi < variants; vi++) {
                    llmc_decode_attn a = kt_attn(&bufs, dt, sh, b);
                    sm = vi == 1 ? 8 : dev_sm;
                    a.sm_count = sm;
                    a.part_keys = vi == 2 ? 16 : vi == 3 ? 48 : vi == 4 ? KT_CTX : 0;
                    const int part = a.part_keys ? a.part_keys
                                                 : llmc_decode_part(sh->hd, b, sh->n_kv, KT_CTX, sm, split_cap);
                    LT_CUDA(cudaMemsetAsync(d_out, 0xff, out_elems * 2, stream)); /* NaN poison */
                    const kiln_status st = llmc_decode_attention(&a, stream);
                    LT_EXPECT(st == KILN_OK, "decode attention: %s", kiln_last_error());
                    LT_CUDA(cudaStreamSynchronize(stream));
                    LT_CUDA(cudaMemcpy(out, d_out, (size_t)b * ldo * 2, cudaMemcpyDeviceToHost));
                    const double err = kt_compare(sh, dt, b, ctx, table, table_stride, qf, ldq, kf, vf, out, ldo);
                    char what[40], name[32];
                    snprintf(what, sizeof what, "%d (%d splits%s)", part, (KT_CTX + part - 1) / part,
                             vi == 0 ? ", auto" : vi == 1 ? ", auto 8 SMs" : "");
                    snprintf(name, sizeof name, "hd %d, %d/%d heads", sh->hd, sh->n_head, sh->n_kv);
                    const bool ok = st == KILN_OK && err <= tol;
                    if (!ok || vi == 0 || bi == 2)
                        printf("%-22s %-5s %5d %-26s %10.2e %s\n", name, di ? "bf16" : "fp16", b, what, err,
                               ok ? "ok" : "FAIL");
                    LT_EXPECT(ok, "decode kernel %s %s batch %d, keys per split %s: max rel err %.3e (tol %.0e)", name,
                           di ? "bf16" : "fp16", b, what, err, tol);
                }
                LT_CUDA(cudaMemcpy(counts, d_count, sizeof counts, cudaMemcpyDeviceToHost));
                for (int i = 0; i < 33 * 4; i++) LT_EXPECT(counts[i] == 0, "split counter %d left at %u", i, counts[i]);
            }
        }
        /* a graph captured once (batch 33, GQA 4 hd 128, several splits), replayed as contexts grow */
        {
            const kt_shape *sh = &shapes[4];
            const int b = 33, ldq = (sh->n_head + 2 * sh->n_kv) * sh->hd, ldo = sh->n_head * sh->hd;
            llmc_decode_attn a = kt_attn(&bufs, dt, sh, b);
            a.sm_count = dev_sm;
            a.part_keys = 128; /* 8 splits */
            for (int s = 0; s < b; s++) ctx[s] = 500 + 13 * s;
            LT_CUDA(cudaMemcpy(d_ctx, ctx, (size_t)b * 4, cudaMemcpyHostToDevice));
            LT_EXPECT(llmc_decode_attention(&a, stream) == KILN_OK, "eager: %s", kiln_last_error()); /* opts in */
            LT_CUDA(cudaStreamSynchronize(stream));
            LT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            const kiln_status st = llmc_decode_attention(&a, stream);
            LT_CUDA(cudaStreamEndCapture(stream, &graph));
            LT_EXPECT(st == KILN_OK, "capture: %s", kiln_last_error());
            LT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
            double worst = 0;
            for (int rep = 0; rep < 4; rep++) {
                for (int s = 0; s < b; s++) ctx[s] = 500 + 13 * s + rep * 5 > KT_CTX ? KT_CTX : 500 + 13 * s + rep * 5;
                LT_CUDA(cudaMemcpyAsync(d_ctx, ctx, (size_t)b * 4, cudaMemcpyHostToDevice, stream));
                LT_CUDA(cudaMemsetAsync(d_out, 0xff, out_elems * 2, stream));
                LT_CUDA(cudaGraphLaunch(exec, stream));
                LT_CUDA(cudaStreamSynchronize(stream));
                LT_CUDA(cudaMemcpy(out, d_out, (size_t)b * ldo * 2, cudaMemcpyDeviceToHost));
                worst = fmax(worst, kt_compare(sh, dt, b, ctx, table, table_stride, qf, ldq, kf, vf, out, ldo));
            }
            LT_CUDA(cudaMemcpy(counts, d_count, sizeof counts, cudaMemcpyDeviceToHost));
            bool zero = true;
            for (int i = 0; i < 33 * 4; i++) zero = zero && counts[i] == 0;
            printf("%-22s %-5s %5d %-26s %10.2e %s\n", "graph, growing ctx", di ? "bf16" : "fp16", b,
                   "128 (8 splits), 4 replays", worst, worst <= tol && zero ? "ok" : "FAIL");
            LT_EXPECT(worst <= tol && zero, "graph replays: max rel err %.3e (tol %.0e), counters %s", worst, tol,
                   zero ? "zero" : "not zero");
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
            exec = NULL;
            graph = NULL;
        }
    }
    printf("\n");
done:
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaFree(d_q);
    cudaFree(d_out);
    cudaFree(d_k);
    cudaFree(d_v);
    cudaFree(d_ctx);
    cudaFree(d_table);
    cudaFree(d_part);
    cudaFree(d_count);
    if (stream) cudaStreamDestroy(stream);
    free(kc);
    free(vc);
    free(q);
    free(out);
    free(table);
    free(kf);
    free(vf);
    free(qf);
}

/* ---------------------------------------------------------------- the GEMV kernels alone */

/* Every GEMV configuration (llmc_gemv_launch: the 8 of the tuned family) against a double-precision
 * CPU product over the same 16-bit values, so that a wrong configuration cannot hide behind the
 * autotune (which may never pick it here): fp16 and bf16;
 * n = 1, 3, 5 (the 8-row kernel with rows masked) and 8 token rows; GPT-2 124M/XL and Llama-3-8B
 * shapes (K 768, 1600, 4096, 6400; N 2304, 4800, 6400, 1600, 14336) and N not a multiple of any
 * configuration's rows per block (301, 1001); x with a row stride past K, y with one past N; bias on
 * and off; 16-bit and FP32 (logits) output. y starts as NaN: every output must be written, and the
 * stride padding and the rows past n must stay NaN (nothing written out of place).
 * Error: max |gpu - cpu| / max |cpu| <= 1e-4 (FP32 out), 1.5e-3 (fp16), 1e-2 (bf16 out). */
typedef struct kg_shape {
    int K, N;
} kg_shape;

static void test_gemv_kernels(void) {
    static const kg_shape shapes[] = {{768, 2304}, {768, 301},   {1600, 4800}, {1600, 6400},
                                      {6400, 1600}, {1600, 1001}, {4096, 14336}, {4096, 1600}};
    static const int ns[] = {1, 3, 5, 8};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]), n_ns = (int)(sizeof ns / sizeof ns[0]);
    const int max_k = 6400, max_wk = 4096 * 14336, max_n = 14336, pad = 8, n_cfg = LLMC_GEMV_CONFIGS;
    cudaStream_t stream = NULL;
    void *d_x = NULL, *d_w = NULL, *d_b = NULL, *d_y = NULL;
    uint16_t *w16 = malloc((size_t)max_wk * 2), *x16 = malloc((size_t)LLMC_GEMV_MAX * (max_k + pad) * 2);
    uint16_t *b16 = malloc((size_t)max_n * 2);
    float *wf = malloc((size_t)max_wk * 4), *xf = malloc((size_t)LLMC_GEMV_MAX * max_k * 4), *bf = malloc((size_t)max_n * 4);
    double *ref = malloc((size_t)LLMC_GEMV_MAX * max_n * sizeof *ref);
    const size_t y_bytes = (size_t)LLMC_GEMV_MAX * (max_n + pad) * 4;
    unsigned char *yh = malloc(y_bytes);
    int fails = 0, runs = 0;
    double worst[2][2] = {{0}}; /* [dtype][fp32 out] */
    if (!w16 || !x16 || !b16 || !wf || !xf || !bf || !ref || !yh) {
        LT_EXPECT(0, "out of memory");
        goto done;
    }
    LT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    LT_CUDA(cudaMalloc(&d_w, (size_t)max_wk * 2));
    LT_CUDA(cudaMalloc(&d_x, (size_t)LLMC_GEMV_MAX * (max_k + pad) * 2));
    LT_CUDA(cudaMalloc(&d_b, (size_t)max_n * 2));
    LT_CUDA(cudaMalloc(&d_y, y_bytes));
    uint32_t rng = 777;
    for (int di = 0; di < 2; di++) {
        const kiln_dtype dt = di ? KILN_BF16 : KILN_F16;
        for (int si = 0; si < n_shapes; si++) {
            const int K = shapes[si].K, N = shapes[si].N, ldx = K + pad, ldy = N + pad;
            lt_fill16(&rng, w16, wf, (size_t)N * K, 1.0f, dt);
            for (int t = 0; t < LLMC_GEMV_MAX; t++)
                for (int k = 0; k < ldx; k++) {
                    const float u = lt_urand(&rng);
                    /* the stride padding holds huge values: a kernel reading it shows */
                    const float v = k < K ? u : 30000.0f;
                    x16[(size_t)t * ldx + k] = lt_from_f32(v, dt);
                    if (k < K) xf[(size_t)t * K + k] = lt_to_f32(x16[(size_t)t * ldx + k], dt);
                }
            lt_fill16(&rng, b16, bf, (size_t)N, 1.0f, dt);
            LT_CUDA(cudaMemcpy(d_w, w16, (size_t)N * K * 2, cudaMemcpyHostToDevice));
            LT_CUDA(cudaMemcpy(d_x, x16, (size_t)LLMC_GEMV_MAX * ldx * 2, cudaMemcpyHostToDevice));
            LT_CUDA(cudaMemcpy(d_b, b16, (size_t)N * 2, cudaMemcpyHostToDevice));
            for (int t = 0; t < LLMC_GEMV_MAX; t++) /* the products without bias, all rows */
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    const float *xr = xf + (size_t)t * K, *wr = wf + (size_t)j * K;
                    for (int k = 0; k < K; k++) s += (double)xr[k] * wr[k];
                    ref[(size_t)t * N + j] = s;
                }
            for (int ni = 0; ni < n_ns; ni++) {
                const int n = ns[ni];
                for (int ci = 0; ci < n_cfg; ci++) {
                    const int cfg = ci;
                    for (int v = 0; v < 3; v++) { /* bias + 16-bit out, 16-bit out, FP32 out */
                        const bool bias = v == 0, f32 = v == 2;
                        const size_t es = f32 ? 4 : 2;
                        LT_CUDA(cudaMemsetAsync(d_y, 0xff, (size_t)LLMC_GEMV_MAX * ldy * es, stream)); /* NaN */
                        /* odd configurations as programmatic dependent launches (after the memset) */
                        const kiln_status st = llmc_gemv_launch(dt, stream, cfg, d_x, ldx, n, K, d_w, bias ? d_b : NULL,
                                                                N, d_y, ldy, f32, cfg % 2 == 1);
                        if (st != KILN_OK) {
                            LT_EXPECT(0, "gemv %s: %s", llmc_gemv_config_name(cfg), kiln_last_error());
                            goto done;
                        }
                        LT_CUDA(cudaStreamSynchronize(stream));
                        LT_CUDA(cudaMemcpy(yh, d_y, (size_t)LLMC_GEMV_MAX * ldy * es, cudaMemcpyDeviceToHost));
                        lt_err er = {0, 0};
                        int stray = 0;
                        for (int t = 0; t < LLMC_GEMV_MAX; t++)
                            for (int j = 0; j < ldy; j++) {
                                const size_t at = (size_t)t * ldy + j;
                                const double got = f32 ? ((const float *)yh)[at] : lt_to_f32(((const uint16_t *)yh)[at], dt);
                                if (t >= n || j >= N) {
                                    stray += !isnan(got); /* must still be the NaN poison */
                                    continue;
                                }
                                const double want = ref[(size_t)t * N + j] + (bias ? bf[j] : 0.0);
                                lt_err_add(&er, got, want);
                            }
                        const double err = lt_err_rel(&er), tol = f32 ? 1e-4 : di ? 1e-2 : 1.5e-3;
                        worst[di][f32] = fmax(worst[di][f32], err);
                        runs++;
                        if (!(err <= tol) || stray) {
                            fails++;
                            LT_EXPECT(0, "gemv %s %s K %d N %d n %d%s%s: max rel err %.3e (tol %.0e), %d values written "
                                   "outside [n, N]", llmc_gemv_config_name(cfg), di ? "bf16" : "fp16", K, N, n,
                                   bias ? " bias" : "", f32 ? " fp32 out" : "", err, tol, stray);
                        }
                    }
                }
            }
        }
    }
    printf("GEMV kernels: %d configurations x %d shapes x n {1,3,5,8} x {bias, no bias, fp32 out} x {fp16, bf16}: "
           "%d runs, %d failed; worst rel err fp16 %.1e (fp32 out %.1e), bf16 %.1e (fp32 out %.1e) %s\n\n", n_cfg,
           n_shapes, runs, fails, worst[0][0], worst[0][1], worst[1][0], worst[1][1], fails ? "FAIL" : "ok");
done:
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_b);
    cudaFree(d_y);
    if (stream) cudaStreamDestroy(stream);
    free(w16);
    free(x16);
    free(b16);
    free(wf);
    free(xf);
    free(bf);
    free(ref);
    free(yh);
}
#endif

typedef struct model_case {
    const char *name;
    kiln_llm_config cfg;
} model_case;

static void make_cases(model_case *mc) {
    mc[0].name = "gpt2 (hd 64, tied)";
    kiln_llm_config_init(&mc[0].cfg, KILN_LLM_GPT2, 2, 128, 2, 2, 512, 301, 256);
    mc[0].cfg.tied_embeddings = true;
    mc[1].name = "llama (hd 128, gqa 2, ntk)";
    kiln_llm_config_init(&mc[1].cfg, KILN_LLM_LLAMA, 2, 256, 4, 2, 352, 512, 64);
    mc[1].cfg.head_dim = 128;
    mc[1].cfg.rope_scaling = KILN_ROPE_DYNAMIC;
    mc[1].cfg.rope_factor = 2.0f;
    mc[2].name = "llama (hd 64, gqa 4, llama3)";
    kiln_llm_config_init(&mc[2].cfg, KILN_LLM_LLAMA, 2, 256, 8, 2, 384, 512, 1024);
    mc[2].cfg.head_dim = 64;
    mc[2].cfg.rope_theta = 500000.0f;
    mc[2].cfg.rope_scaling = KILN_ROPE_LLAMA3;
    mc[2].cfg.rope_factor = 8.0f;
    mc[2].cfg.rope_low_freq_factor = 1.0f;
    mc[2].cfg.rope_high_freq_factor = 4.0f;
    mc[2].cfg.rope_original_max_pos = 64;
    mc[3].name = "llama (hd 128, gqa 8)";
    kiln_llm_config_init(&mc[3].cfg, KILN_LLM_LLAMA, 2, 256, 8, 1, 384, 512, 1024);
    mc[3].cfg.head_dim = 128;
    mc[4].name = "gpt2 (hd 16)";
    kiln_llm_config_init(&mc[4].cfg, KILN_LLM_GPT2, 2, 64, 4, 4, 256, 301, 256);
    mc[5].name = "llama (hd 256, gqa 12)";
    kiln_llm_config_init(&mc[5].cfg, KILN_LLM_LLAMA, 2, 256, 12, 1, 384, 512, 1024);
    mc[5].cfg.head_dim = 256;
    /* the other families' features at once (no real model has them all): Gemma's GeGLU, embedding scale
     * and 1 + w norms, Qwen2's q/k/v biases, Phi-3's partial RoPE with LongRoPE's factors */
    mc[6].name = "families (hd 128, all feats)";
    kiln_llm_config_init(&mc[6].cfg, KILN_LLM_LLAMA, 2, 256, 4, 2, 352, 512, 1024);
    mc[6].cfg.head_dim = 128;
    mc[6].cfg.family = KILN_FAMILY_GEMMA;
    mc[6].cfg.gate_act = KILN_GATE_GELU_TANH;
    mc[6].cfg.scale_emb = true;
    mc[6].cfg.qkv_bias = true;
    mc[6].cfg.rotary_dim = 64;
    mc[6].cfg.rope_scaling = KILN_ROPE_LONGROPE;
    mc[6].cfg.rope_original_max_pos = 96; /* the third sequence passes it: long factors */
    mc[6].cfg.rope_attn_factor = 1.2f;
    for (int i = 0; i < 32; i++) {
        mc[6].cfg.rope_short[i] = 1.0f + 0.03f * (float)i;
        mc[6].cfg.rope_long[i] = 1.0f + 0.4f * (float)i;
    }
}

int main(void) {
    char desc[256];
    if (kiln_llm_cuda_device_check(0, desc, sizeof desc) != KILN_OK) {
        printf("skipped: no GPU (%s)\n", desc);
        return 77;
    }
    printf("test_llm_cuda on %s\n\n", desc);
#ifdef KILN_HAVE_CUDA
    test_gemv_kernels();
    test_decode_kernel();
#endif
    printf("%-30s %-5s %-19s %-8s %5s %10s %7s %-16s %s\n", "model", "dtype", "products", "phase", "rows",
           "max rel err",
           "tol", "argmax = cpu", "result");
    static const char *const phase_name[3] = {"prefill", "chunked", "decode"};
    model_case mc[N_MODELS];
    make_cases(mc);
    for (int mi = 0; mi < N_MODELS; mi++) {
        kiln_llm_model *m;
        if (kiln_llm_model_random(&mc[mi].cfg, 1234 + (uint64_t)mi, &m) != KILN_OK) {
            LT_EXPECT(0, "%s: %s", mc[mi].name, kiln_last_error());
            continue;
        }
        static schedule sc;
        if (make_schedule(m, &sc) != 0) {
            lt_failures++;
            kiln_llm_model_free(m);
            continue;
        }
        if (mi == 0) test_timing_cache(m, &sc);
        for (int di = 0; di < 2; di++) {
            const kiln_dtype dt = di ? KILN_BF16 : KILN_F16;
            const double tol = di ? 5e-2 : 2e-2;
            /* products: the tuned GEMV, cuBLASLt only; each run without, then with CUDA graphs for the
             * decode steps, whose logits must equal the eager pass's */
            static const char *const prod_name[4] = {"gemv", "cublasLt", "gemv+fuse", "gemv+fuse+pdl"};
            static const char *const prod_fuse[4] = {"off", "off", "on", "pdl"};
            for (int gi = 0; gi < 4; gi++) {
                phase_result res[2][3];
                kiln_llm_cuda_probe probe;
                double same_err = 0;
                const int before = lt_failures;
                run_gpu(m, &sc, dt, gi == 1 ? 0 : 8, prod_fuse[gi], tol, res, &same_err, &probe);
                /* 32 decode steps of 3 sequences, all in the context bucket 256 (longest context 151..182):
                 * run eagerly once, captured on the second, replayed from then on */
                const bool used = probe.graphs_captured >= 1 && probe.graph_replays >= 20;
                const bool same_ok = same_err <= 1e-6;
                printf("%-30s %-5s %-19s graphs: %d captured, %d replays; |graphs - eager| / max %.2e %s%s%s\n",
                       mc[mi].name, di ? "bf16" : "fp16", prod_name[gi], probe.graphs_captured, probe.graph_replays,
                       same_err, used && same_ok ? "ok" : "FAIL", probe.graph_error[0] ? "; capture error: " : "",
                       probe.graph_error);
                LT_EXPECT(used, "%s %s %s: CUDA graphs not used (%d captured, %d replays; %s)", mc[mi].name,
                       di ? "bf16" : "fp16", prod_name[gi], probe.graphs_captured, probe.graph_replays,
                       probe.graph_error[0] ? probe.graph_error : "no capture error");
                LT_EXPECT(same_ok, "%s %s %s: logits with CUDA graphs differ from eager by %.3e (relative)", mc[mi].name,
                       di ? "bf16" : "fp16", prod_name[gi], same_err);
                for (int pass = 0; pass < 2; pass++)
                    for (int p = 0; p < 3; p++) {
                        const phase_result *r = &res[pass][p];
                        const bool ok = r->rows > 0 && r->max_err <= tol && r->self_mismatch == 0 &&
                                        r->agree + r->near_ties == r->rows && lt_failures == before;
                        char agree[32], prod[32];
                        snprintf(agree, sizeof agree, "%d/%d (%d ties)", r->agree, r->rows, r->near_ties);
                        snprintf(prod, sizeof prod, "%s%s", prod_name[gi], pass ? "+graph" : "");
                        printf("%-30s %-5s %-19s %-8s %5d %10.2e %7.0e %-16s %s\n", mc[mi].name, di ? "bf16" : "fp16",
                               prod, phase_name[p], r->rows, r->max_err, tol, agree, ok ? "ok" : "FAIL");
                        LT_EXPECT(ok, "%s %s %s %s: max rel err %.3e (tol %.0e), argmax %d/%d + %d near ties, %d greedy "
                               "ids differ from the argmax of the GPU's own logits", mc[mi].name, di ? "bf16" : "fp16",
                               prod, phase_name[p], r->max_err, tol, r->agree, r->rows, r->near_ties, r->self_mismatch);
                    }
            }
        }
        for (int k = 0; k < sc.n_steps; k++) free(sc.steps[k].ref);
        kiln_llm_model_free(m);
    }
    if (lt_failures) {
        printf("\ntest_llm_cuda: %d failure(s)\n", lt_failures);
        return 1;
    }
    printf("\ntest_llm_cuda: all passed\n");
    return 0;
}
