/* llm_cuda_sample.cu — sampler.h's sampler on the GPU, one block per row of device logits, giving
 * kiln_sample_next's token bit for bit: the same penalties, temperature, top-k, top-p, min-p and draw,
 * each in the precision, rounding (no FMA: explicit _rn intrinsics, and the file builds with
 * --fmad=false) and order of sampler.c. Candidates stay in id order (ordered block-wide compaction);
 * top-k finds the k-th best (value, id) with a radix select on the values and takes the lowest ids
 * among the ties; top-p sorts the survivors by (probability desc, id asc) with a bitonic sort (in
 * shared memory when they fit, else in the row's global scratch); every double sum and the draw walk
 * run on one thread in the CPU's order (the total only once without top-p, the walk resumed from the
 * partial sum of the chunk where it ends). The exponential and the uniform draw are sample_math.h's. */
#include "llm/cuda/llm_cuda_internal.h"
#include "llm/sample_math.h"

#include "core/status.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE_THREADS 1024
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
#define SHARED_SORT 4096 /* most keys sorted in shared memory */
#define DRAW_CHUNK 1024  /* candidates per partial sum the draw keeps (doubled while more than DRAW_MARKS) */
#define DRAW_MARKS 256

/* One row's parameters as the kernel reads them. */
typedef struct srow {
    float temperature, top_p, min_p, rep, freq, pres;
    int top_k;
    int hist_start, hist_n; /* its entries in the history array: (token, count among generated) */
    uint64_t seed, counter;
} srow;

struct kiln_llm_cuda_sampler {
    int device, vocab, max_rows, max_hist, pow2; /* pow2: keys per row, the power of two >= vocab */
    kiln_cuda_ctx kc; /* its stream only (cuda_device.h) */
    cudaEvent_t logits_ready; /* recorded on the model's stream when sampling its logits */
    float *logits;            /* [max_rows, vocab] host logits uploaded here */
    float *w, *cp;            /* [max_rows, vocab] penalised logits; kept values, then probabilities */
    int32_t *ci;              /* [max_rows, vocab] ids of the kept candidates */
    unsigned long long *keys; /* [max_rows, pow2] top-p sort keys */
    srow *rows_h, *rows_d;    /* [max_rows] */
    int2 *hist_h, *hist_d;    /* [max_hist] */
    int32_t *out_h, *out_d;   /* [max_rows] token, or -1 (no finite logit), or -2 - t (token t is NaN/+inf) */
    int32_t *count;           /* host [vocab] occurrences among generated tokens; zero between rows */
    unsigned char *seen;      /* host [vocab] token already in the history; zero between rows */
};

/* ---------------------------------------------------------------- block helpers */

/* Exclusive prefix count of flag over the block (thread order) and the block's total. Every thread
 * of the block calls it. */
static __device__ int block_excl_scan(bool flag, int *total, int *s_warp) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned b = __ballot_sync(0xffffffffu, flag);
    __syncthreads(); /* s_warp of the previous call has been read */
    if (lane == 0) s_warp[warp] = __popc(b);
    __syncthreads();
    int before = 0, tot = 0;
    for (int i = 0; i < SAMPLE_WARPS; i++) {
        const int c = s_warp[i];
        before += i < warp ? c : 0;
        tot += c;
    }
    *total = tot;
    return before + __popc(b & ((1u << lane) - 1u));
}

static __device__ int block_sum(int v, int *s_warp) {
    int total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) s_warp[warp] = v;
    __syncthreads();
    total = 0;
    for (int i = 0; i < SAMPLE_WARPS; i++) total += s_warp[i];
    return total;
}

static __device__ float block_max(float v, float *s_f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) s_f[warp] = v;
    __syncthreads();
    v = s_f[0];
    for (int i = 1; i < SAMPLE_WARPS; i++) v = fmaxf(v, s_f[i]);
    return v;
}

/* sampler.c's order: (va, ia) before (vb, ib) when va > vb, or equal values and ia < ib. */
static __device__ __forceinline__ bool better(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && ia < ib);
}

/* Unsigned key ordered as the float value (-0 as +0, so that equal values have equal keys). */
static __device__ __forceinline__ unsigned value_key(float v) {
    const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Ascending bitonic sort of a[0, n), n a power of two, by the whole block. */
static __device__ void bitonic_sort(unsigned long long *a, int n) {
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
                const int i = 2 * t - (t & (stride - 1)), j = i + stride;
                const unsigned long long x = a[i], y = a[j];
                if ((x > y) == ((i & size) == 0)) {
                    a[i] = y;
                    a[j] = x;
                }
            }
            __syncthreads();
        }
}

/* Walks the running double sum start + p[0] + ... of p[0, n) in order, one thread (values loaded 16
 * ahead): returns the first j whose running sum reaches t (sum >= t when inclusive, else sum > t), or
 * -1 with *total the whole sum. A walk that starts from an earlier walk's partial sum continues that
 * walk's sums bit for bit. */
static __device__ int running_sum_reach(const float *p, int n, double start, double t, bool inclusive, double *total) {
    double acc = start;
    for (int j0 = 0; j0 < n; j0 += 16) {
        float buf[16];
#pragma unroll
        for (int q = 0; q < 16; q++) buf[q] = j0 + q < n ? p[j0 + q] : 0.0f;
#pragma unroll
        for (int q = 0; q < 16; q++) {
            if (j0 + q >= n) break;
            acc = __dadd_rn(acc, (double)buf[q]);
            if (inclusive ? acc >= t : acc > t) return j0 + q;
        }
    }
    *total = acc;
    return -1;
}

/* ---------------------------------------------------------------- the kernel */

__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(const float *__restrict__ logits, int vocab, int pow2, const srow *__restrict__ rows,
                  const int2 *__restrict__ hist, float *w_all, float *cp_all, int32_t *ci_all,
                  unsigned long long *keys_all, int32_t *__restrict__ out) {
    __shared__ int s_warp[SAMPLE_WARPS];
    __shared__ float s_f[SAMPLE_WARPS];
    __shared__ unsigned s_hist[256];
    __shared__ int s_bad, s_sel, s_krem, s_n;
    __shared__ double s_z;
    __shared__ double s_marks[DRAW_MARKS];
    __shared__ unsigned long long s_keys[SHARED_SORT];
    const int tid = threadIdx.x, T = blockDim.x, row = blockIdx.x;
    const srow P = rows[row];
    const float *L = logits + (size_t)row * vocab;
    float *w = w_all + (size_t)row * vocab, *cp = cp_all + (size_t)row * vocab;
    int32_t *ci = ci_all + (size_t)row * vocab;
    unsigned long long *keys = keys_all + (size_t)row * pow2;

    /* penalties on a copy: repetition over prompt ∪ generated, then frequency / presence */
    if (tid == 0) s_bad = INT_MAX;
    for (int i = tid; i < vocab; i += T) w[i] = L[i];
    __syncthreads();
    for (int j = tid; j < P.hist_n; j += T) {
        const int2 h = hist[P.hist_start + j];
        float l = w[h.x];
        if (P.rep != 1.0f) l = l > 0 ? __fdiv_rn(l, P.rep) : __fmul_rn(l, P.rep);
        if ((P.freq != 0.0f || P.pres != 0.0f) && h.y > 0)
            l = __fsub_rn(l, __fadd_rn(__fmul_rn((float)h.y, P.freq), P.pres));
        w[h.x] = l;
    }
    __syncthreads();

    /* NaN / +inf refused; temperature on the finite logits; greedy takes the best candidate */
    const bool greedy = P.temperature == 0.0f, scale = !greedy && P.temperature != 1.0f;
    int cnt = 0, best = INT_MAX;
    float bv = -INFINITY;
    for (int i = tid; i < vocab; i += T) {
        float v = w[i];
        if (isnan(v) || v == INFINITY) {
            atomicMin(&s_bad, i);
        } else if (v > -INFINITY) {
            cnt++;
            if (better(v, i, bv, best)) bv = v, best = i;
            if (scale) w[i] = __fdiv_rn(v, P.temperature);
        }
    }
    const int n = block_sum(cnt, s_warp); /* also orders the writes above before the reads below */
    if (s_bad != INT_MAX || n == 0) {
        if (tid == 0) out[row] = n == 0 && s_bad == INT_MAX ? -1 : -2 - s_bad;
        return;
    }
    if (greedy) {
        for (int o = 16; o > 0; o >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, bv, o);
            const int i = __shfl_xor_sync(0xffffffffu, best, o);
            if (better(v, i, bv, best)) bv = v, best = i;
        }
        __syncthreads();
        if ((tid & 31) == 0) {
            s_f[tid >> 5] = bv;
            s_warp[tid >> 5] = best;
        }
        __syncthreads();
        if (tid == 0) {
            for (int i = 1; i < SAMPLE_WARPS; i++)
                if (better(s_f[i], s_warp[i], bv, best)) bv = s_f[i], best = s_warp[i];
            out[row] = best;
        }
        return;
    }

    /* top-k: the k-th best value by radix select (8 bits a pass), and how many of its ties to keep */
    const int k = P.top_k > 0 && P.top_k < n ? P.top_k : 0;
    unsigned kth = 0;
    int take_ties = 0;
    if (k) {
        unsigned prefix = 0, mask = 0;
        int krem = k;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int d = tid; d < 256; d += T) s_hist[d] = 0;
            __syncthreads();
            for (int i = tid; i < vocab; i += T) {
                const float v = w[i];
                if (v > -INFINITY && (value_key(v) & mask) == prefix) atomicAdd(&s_hist[(value_key(v) >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (tid == 0) {
                int cum = 0;
                for (int d = 255; d >= 0; d--) {
                    const int h = (int)s_hist[d];
                    if (cum + h >= krem) {
                        s_sel = d;
                        s_krem = krem - cum;
                        break;
                    }
                    cum += h;
                }
            }
            __syncthreads();
            prefix |= (unsigned)s_sel << shift;
            mask |= 255u << shift;
            krem = s_krem;
        }
        kth = prefix;
        take_ties = krem;
    }

    /* the kept candidates, in id order, into (cp = value, ci = id) */
    int m = 0, ties = 0;
    for (int c0 = 0; c0 < vocab; c0 += T) {
        const int i = c0 + tid;
        const float v = i < vocab ? w[i] : -INFINITY;
        const bool cand = v > -INFINITY;
        bool keep = cand;
        if (k) {
            const unsigned key = value_key(v);
            const bool tie = cand && key == kth;
            int tie_total;
            const int rank = ties + block_excl_scan(tie, &tie_total, s_warp);
            keep = cand && (key > kth || (tie && rank < take_ties));
            ties += tie_total;
        }
        int total;
        const int pos = m + block_excl_scan(keep, &total, s_warp);
        if (keep) {
            cp[pos] = v;
            ci[pos] = i;
        }
        m += total;
    }
    __syncthreads();
    float vmax = -INFINITY;
    for (int j = tid; j < m; j += T) vmax = fmaxf(vmax, cp[j]);
    vmax = block_max(vmax, s_f);
    for (int j = tid; j < m; j += T) cp[j] = kiln_sample_exp(__fsub_rn(cp[j], vmax));
    __syncthreads();

    /* top-p: drop what lies surely outside the nucleus, sort by (p desc, id asc), cut where the
     * cumulative mass first reaches top_p of the total */
    if (P.top_p < 1.0f) {
        if (tid == 0) {
            double z = 0;
            running_sum_reach(cp, m, 0, INFINITY, false, &z);
            s_z = z;
        }
        __syncthreads();
        const double drop = __ddiv_rn(__dmul_rn(__dsub_rn(1.0, (double)P.top_p), s_z), (double)m);
        int m2 = 0;
        for (int c0 = 0; c0 < m; c0 += T) {
            const int j = c0 + tid;
            const bool keep = j < m && (double)cp[j] >= drop;
            int total;
            const int pos = m2 + block_excl_scan(keep, &total, s_warp);
            if (keep)
                keys[pos] = ((unsigned long long)(0xffffffffu - __float_as_uint(cp[j])) << 32) | (unsigned)ci[j];
            m2 += total;
        }
        __syncthreads();
        int len = 1;
        while (len < m2) len <<= 1;
        unsigned long long *a = len <= SHARED_SORT ? s_keys : keys;
        for (int j = tid; j < len; j += T) a[j] = j < m2 ? keys[j] : ~0ull;
        __syncthreads();
        bitonic_sort(a, len);
        for (int j = tid; j < m2; j += T) {
            cp[j] = __uint_as_float(0xffffffffu - (unsigned)(a[j] >> 32));
            ci[j] = (int32_t)(a[j] & 0xffffffffu);
        }
        __syncthreads();
        if (tid == 0) {
            double cum;
            const int j = running_sum_reach(cp, m2, 0, __dmul_rn((double)P.top_p, s_z), true, &cum);
            s_n = j < 0 ? m2 : j + 1; /* rounding left the sum just short: keep every survivor */
        }
        __syncthreads();
        m = s_n;
    }

    /* min-p (relative to the most likely candidate, whose p is 1), order kept, in place */
    if (P.min_p > 0.0f) {
        int m3 = 0;
        for (int c0 = 0; c0 < m; c0 += T) {
            const int j = c0 + tid;
            const float p = j < m ? cp[j] : 0.0f;
            const int32_t id = j < m ? ci[j] : 0;
            const bool keep = j < m && p >= P.min_p;
            int total;
            const int pos = m3 + block_excl_scan(keep, &total, s_warp); /* every read above precedes it */
            if (keep) {
                cp[pos] = p;
                ci[pos] = id;
            }
            m3 += total;
        }
        m = m3;
        __syncthreads();
    }

    /* the draw: u * z against the running sum, in order. The pass that sums z keeps the partial sum at
     * the start of each chunk, so that the walk to u * z resumes in the one chunk where the sum passes
     * it instead of summing the candidates again from the first. */
    if (tid == 0) {
        int chunk = DRAW_CHUNK;
        while ((m + chunk - 1) / chunk > DRAW_MARKS) chunk <<= 1;
        double z = 0;
        int n_chunks = 0;
        for (int c0 = 0; c0 < m; c0 += chunk) {
            s_marks[n_chunks++] = z;
            running_sum_reach(cp + c0, min(chunk, m - c0), z, INFINITY, false, &z);
        }
        const double t = __dmul_rn(kiln_sample_uniform_at(P.seed, P.counter), z);
        int c = 0; /* the first chunk whose end sum exceeds t (sums never fall: every p >= 0), else the last */
        while (c + 1 < n_chunks && !(s_marks[c + 1] > t)) c++;
        double acc;
        const int j = n_chunks ? running_sum_reach(cp + c * chunk, min(chunk, m - c * chunk), s_marks[c], t, false, &acc)
                               : -1;
        out[row] = ci[j < 0 ? m - 1 : c * chunk + j];
    }
}

/* ---------------------------------------------------------------- host side */

/* The sampler's stream, event, buffers and kernel; the caller holds the setup lock. */
static kiln_status sampler_alloc_locked(kiln_llm_cuda_sampler *s) {
    const size_t cells = (size_t)s->max_rows * (size_t)s->vocab, hist = s->max_hist > 0 ? (size_t)s->max_hist : 1;
    const int max_rows = s->max_rows;
    KILN_TRY(kiln_cuda_ctx_open(s->device, 0, 0, &s->kc));
    KILN_CUDA_TRY(cudaEventCreateWithFlags(&s->logits_ready, cudaEventDisableTiming));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->logits, cells * sizeof(float)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->w, cells * sizeof(float)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->cp, cells * sizeof(float)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->ci, cells * sizeof(int32_t)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->keys, (size_t)max_rows * (size_t)s->pow2 * sizeof(unsigned long long)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->rows_d, (size_t)max_rows * sizeof(srow)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->hist_d, hist * sizeof(int2)));
    KILN_CUDA_TRY(cudaMalloc((void **)&s->out_d, (size_t)max_rows * sizeof(int32_t)));
    KILN_CUDA_TRY(cudaMallocHost((void **)&s->rows_h, (size_t)max_rows * sizeof(srow)));
    KILN_CUDA_TRY(cudaMallocHost((void **)&s->hist_h, hist * sizeof(int2)));
    KILN_CUDA_TRY(cudaMallocHost((void **)&s->out_h, (size_t)max_rows * sizeof(int32_t)));
    struct cudaFuncAttributes attr; /* loads the kernel now, under the lock, not at the first sampling */
    KILN_CUDA_TRY(cudaFuncGetAttributes(&attr, sample_kernel));
    return KILN_OK;
}

kiln_status kiln_llm_cuda_sampler_create(int device, int vocab, int max_rows, int max_history,
                                         kiln_llm_cuda_sampler **out) {
    *out = NULL;
    if (vocab <= 0 || vocab > (1 << 30) || max_rows <= 0 || max_history < 0)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda sampler: vocab %d, max_rows %d, max_history %d out of range",
                          vocab, max_rows, max_history);
    kiln_llm_cuda_sampler *s = (kiln_llm_cuda_sampler *)calloc(1, sizeof *s);
    if (!s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "cuda sampler: out of memory");
    *out = s;
    s->device = device;
    s->vocab = vocab;
    s->max_rows = max_rows;
    s->max_hist = max_history;
    for (s->pow2 = 1; s->pow2 < vocab; s->pow2 <<= 1) {}
    s->count = (int32_t *)calloc((size_t)vocab, sizeof *s->count);
    s->seen = (unsigned char *)calloc((size_t)vocab, 1);
    if (!s->count || !s->seen) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "cuda sampler: out of memory");
    kiln_cuda_setup_lock();
    const kiln_status st = sampler_alloc_locked(s);
    kiln_cuda_setup_unlock();
    return st;
}

void kiln_llm_cuda_sampler_free(kiln_llm_cuda_sampler *s) {
    if (!s) return;
    kiln_cuda_setup_lock();
    if (s->kc.stream) { /* teardown: nothing to report, so the statuses are not kept */
        (void)cudaSetDevice(s->device);
        (void)cudaStreamSynchronize(s->kc.stream);
    }
    (void)cudaFree(s->logits);
    (void)cudaFree(s->w);
    (void)cudaFree(s->cp);
    (void)cudaFree(s->ci);
    (void)cudaFree(s->keys);
    (void)cudaFree(s->rows_d);
    (void)cudaFree(s->hist_d);
    (void)cudaFree(s->out_d);
    (void)cudaFreeHost(s->rows_h);
    (void)cudaFreeHost(s->hist_h);
    (void)cudaFreeHost(s->out_h);
    if (s->logits_ready) (void)cudaEventDestroy(s->logits_ready);
    kiln_cuda_ctx_close(&s->kc);
    kiln_cuda_setup_unlock();
    free(s->count);
    free(s->seen);
    free(s);
}

/* Fills row r's kernel parameters and appends its history (distinct tokens of prompt ∪ generated,
 * first occurrence first, with their counts among generated) at *n_hist; validates as
 * kiln_sample_next does. */
static kiln_status pack_row(kiln_llm_cuda_sampler *s, int r, const kiln_llm_cuda_sample_row *in, int *n_hist) {
    const kiln_sampling_params *p = in->params;
    KILN_TRY(kiln_sampling_validate(p));
    if (p->logprobs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda sampler: row %d asks for logprobs (the CPU sampler's job)", r);
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *t = pass ? in->generated : in->prompt;
        for (int i = 0, n = pass ? in->n_generated : in->n_prompt; i < n; i++)
            if (t[i] < 0 || t[i] >= s->vocab)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: %s token %d is %d, outside the vocabulary of %d",
                                  pass ? "generated" : "prompt", i, t[i], s->vocab);
    }
    srow *o = &s->rows_h[r];
    o->temperature = p->temperature;
    o->top_p = p->top_p;
    o->min_p = p->min_p;
    o->rep = p->repetition_penalty;
    o->freq = p->frequency_penalty;
    o->pres = p->presence_penalty;
    o->top_k = p->top_k;
    o->hist_start = *n_hist;
    o->hist_n = 0;
    o->seed = p->seed;
    o->counter = (uint64_t)in->n_generated;
    const bool rep = p->repetition_penalty != 1, counts = p->frequency_penalty != 0 || p->presence_penalty != 0;
    if (!rep && !counts) return KILN_OK;
    for (int i = 0; i < in->n_generated; i++) s->count[in->generated[i]]++;
    kiln_status st = KILN_OK;
    for (int pass = rep ? 0 : 1; pass < 2 && st == KILN_OK; pass++) {
        const int32_t *t = pass ? in->generated : in->prompt;
        for (int i = 0, n = pass ? in->n_generated : in->n_prompt; i < n; i++) {
            if (s->seen[t[i]]) continue;
            s->seen[t[i]] = 1;
            if (*n_hist == s->max_hist) {
                st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda sampler: more than %d distinct history tokens in one call",
                                s->max_hist);
                break;
            }
            s->hist_h[(*n_hist)++] = make_int2(t[i], s->count[t[i]]);
            o->hist_n++;
        }
    }
    for (int i = 0; i < in->n_prompt; i++) s->seen[in->prompt[i]] = 0;
    for (int i = 0; i < in->n_generated; i++) s->seen[in->generated[i]] = s->count[in->generated[i]] = 0;
    return st;
}

kiln_status kiln_llm_cuda_sample(kiln_llm_cuda_sampler *s, const kiln_llm_cuda *g, const float *host_logits,
                                 int n_rows, const kiln_llm_cuda_sample_row *rows, int32_t *tokens) {
    if (n_rows <= 0 || n_rows > s->max_rows)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "cuda sampler: %d rows (1..%d)", n_rows, s->max_rows);
    if (!host_logits && (!g || g->cfg.vocab != s->vocab || g->opt.device != s->device || g->last_rows < n_rows))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "cuda sampler: no host logits, and no model step with %d rows of %d logits on device %d",
                          n_rows, s->vocab, s->device);
    int n_hist = 0;
    for (int r = 0; r < n_rows; r++) KILN_TRY(pack_row(s, r, &rows[r], &n_hist));
    KILN_CUDA_TRY(cudaSetDevice(s->device));
    const float *logits = s->logits;
    if (host_logits) {
        KILN_CUDA_TRY(cudaMemcpyAsync(s->logits, host_logits, (size_t)n_rows * (size_t)s->vocab * sizeof(float),
                                      cudaMemcpyHostToDevice, s->kc.stream));
    } else {
        logits = g->logits;
        KILN_CUDA_TRY(cudaEventRecord(s->logits_ready, g->kc.stream));
        KILN_CUDA_TRY(cudaStreamWaitEvent(s->kc.stream, s->logits_ready, 0));
    }
    KILN_CUDA_TRY(cudaMemcpyAsync(s->rows_d, s->rows_h, (size_t)n_rows * sizeof(srow), cudaMemcpyHostToDevice, s->kc.stream));
    if (n_hist)
        KILN_CUDA_TRY(cudaMemcpyAsync(s->hist_d, s->hist_h, (size_t)n_hist * sizeof(int2), cudaMemcpyHostToDevice, s->kc.stream));
    sample_kernel<<<n_rows, SAMPLE_THREADS, 0, s->kc.stream>>>(logits, s->vocab, s->pow2, s->rows_d, s->hist_d, s->w, s->cp,
                                                            s->ci, s->keys, s->out_d);
    KILN_CUDA_LAUNCH_CHECK("sample_kernel");
    KILN_CUDA_TRY(cudaMemcpyAsync(s->out_h, s->out_d, (size_t)n_rows * sizeof(int32_t), cudaMemcpyDeviceToHost, s->kc.stream));
    KILN_CUDA_TRY(cudaStreamSynchronize(s->kc.stream));
    for (int r = 0; r < n_rows; r++) {
        const int32_t t = s->out_h[r];
        if (t == -1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: row %d: every logit is -inf", r);
        if (t < -1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "sampler: row %d: the logit of token %d is NaN or +inf", r, -2 - t);
        tokens[r] = t;
    }
    return KILN_OK;
}
