/* pool.c — CPU pooling: MaxPool (float32/float64/int8/uint8, optional Indices with either storage
 * order), AveragePool and LpPool (float32), and the global forms, for any number of spatial dims.
 * Float16/bfloat16 run through float32. The window geometry (pads, auto_pad, ceil_mode, dilations)
 * comes from nn_window.c.
 *
 * Work is organised by output line (one position over all spatial dims but the last): for a line,
 * the window taps over the outer dims that land inside the input give a list of input row
 * offsets; each such row and each tap k of the last dim then updates the whole output line at
 * once, y[ow] op= x[row + ow * stride + k * dilation - pad] over the ow range where that tap is
 * inside the input. No per-element bounds checks remain, and the inner loops run along rows (on
 * 8-lane vectors for float32 MaxPool with strides 1 and 2; 2-D float32 MaxPool takes each output
 * row's input rows first, then its columns; the 2x2 and 3x3 stride-2 windows take 16 outputs at a
 * time from the even and odd lanes of the row maxima). The global forms and float32 MaxPool
 * without indices split their planes over the thread pool. */
#include "backends/cpu/nn_kernels.h"

#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/packed_gemm.h"

#include "core/ckd.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "ir/nn_window.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KILN_NO_SIMD_CLONES)
#define POOL_AVX512 1 /* the AVX-512 plane sums are compiled (and chosen where the processor has them) */
#include <immintrin.h>
#endif

typedef struct pool_plan {
    int nsp;
    int64_t in[KILN_MAX_DIMS], out[KILN_MAX_DIMS], k[KILN_MAX_DIMS], s[KILN_MAX_DIMS], d[KILN_MAX_DIMS];
    int64_t pb[KILN_MAX_DIMS], istr[KILN_MAX_DIMS];
    int64_t in_size, out_size, planes, lines, L; /* L = output line length (last output dim) */
    /* per dim i and output index o: taps [lo, hi) inside the input; hp = taps inside input + pads */
    int64_t *lo[KILN_MAX_DIMS], *hi[KILN_MAX_DIMS], *hp[KILN_MAX_DIMS];
    /* per tap k of the last dim: the ow range [klo, khi) where it is inside the input, and its
     * input offset k * dilation - pad */
    int64_t *klo, *khi, *koff;
    int64_t *ranges; /* storage of all the tables above */
    int64_t *rows;   /* scratch: input row offsets of one line's outer taps */
} pool_plan;

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void plan_free(pool_plan *p) {
    free(p->ranges);
    free(p->rows);
}

/* Validates X [N, C, in...], parses the window and builds the tap tables; fills the output dims. */
static kiln_status plan_make(const kiln_node *n, const kiln_tensor *x, pool_plan *p, int64_t *odims) {
    memset(p, 0, sizeof *p);
    if (x->ndim < 3) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 3, has rank %d", n->op_type, x->ndim);
    int nsp = x->ndim - 2, last = nsp - 1;
    kiln_window w;
    KILN_TRY(kiln_window_parse(n, nsp, NULL, &w));
    if (!w.has_kernel) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s needs the kernel_shape attribute", n->op_type);
    p->nsp = nsp;
    p->in_size = p->out_size = 1;
    int64_t pe[KILN_MAX_DIMS], total = 0, outer_taps = 1;
    for (int i = 0; i < nsp; i++) {
        p->in[i] = x->dims[2 + i];
        p->k[i] = w.kernel[i];
        p->s[i] = w.stride[i];
        p->d[i] = w.dilation[i];
        KILN_TRY(kiln_window_out(&w, i, p->in[i], &p->out[i], &p->pb[i], &pe[i]));
        /* the output and the tap tables (sized by the kernel) are bounded like any tensor */
        if (!kiln_mul_i64_ok(p->in_size, p->in[i], &p->in_size) || !kiln_mul_i64_ok(p->out_size, p->out[i], &p->out_size) ||
            (i < last && !kiln_mul_i64_ok(outer_taps, p->k[i], &outer_taps)) || p->out_size > KILN_MAX_TENSOR_ELEMENTS ||
            p->out[i] > KILN_MAX_TENSOR_ELEMENTS || outer_taps > KILN_MAX_TENSOR_ELEMENTS || p->k[i] > KILN_MAX_TENSOR_ELEMENTS)
            return kiln_error(KILN_ERR_SHAPE, "%s: spatial dimension %d: its output (%lld) or kernel window (%lld) makes more "
                              "than 2^40 elements", n->op_type, i, (long long)p->out[i], (long long)p->k[i]);
        total += 3 * p->out[i];
    }
    kiln_strides(nsp, p->in, p->istr);
    p->planes = x->dims[0] * x->dims[1];
    p->L = p->out[last];
    p->lines = p->L ? p->out_size / p->L : 0;
    odims[0] = x->dims[0];
    odims[1] = x->dims[1];
    memcpy(odims + 2, p->out, (size_t)nsp * sizeof *odims);
    p->ranges = malloc((size_t)(total + 3 * p->k[last] + 1) * sizeof *p->ranges);
    p->rows = malloc((size_t)outer_taps * sizeof *p->rows);
    if (!p->ranges || !p->rows) {
        plan_free(p);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", n->op_type);
    }
    int64_t *r = p->ranges;
    for (int i = 0; i < nsp; i++) {
        p->lo[i] = r;
        p->hi[i] = r + p->out[i];
        p->hp[i] = r + 2 * p->out[i];
        r += 3 * p->out[i];
        for (int64_t o = 0; o < p->out[i]; o++) {
            int64_t start = o * p->s[i] - p->pb[i];
            p->lo[i][o] = clamp(ceil_div(-start, p->d[i]), 0, p->k[i]);
            p->hi[i][o] = clamp(ceil_div(p->in[i] - start, p->d[i]), p->lo[i][o], p->k[i]);
            p->hp[i][o] = clamp(ceil_div(p->in[i] + pe[i] - start, p->d[i]), 0, p->k[i]);
        }
    }
    p->klo = r;
    p->khi = r + p->k[last];
    p->koff = r + 2 * p->k[last];
    for (int64_t k = 0; k < p->k[last]; k++) {
        int64_t off = k * p->d[last] - p->pb[last], s = p->s[last];
        p->koff[k] = off;
        p->klo[k] = clamp(ceil_div(-off, s), 0, p->L);
        p->khi[k] = clamp(ceil_div(p->in[last] - off, s), p->klo[k], p->L);
    }
    return KILN_OK;
}

/* Fills p->rows with the input offsets (within a plane) of the rows that output line oidx[0..last)
 * reads, i.e. its window taps over the outer dims that lie inside the input; returns their count.
 * *count_outer gets the number of outer taps inside the input (include_pad = 0) or inside the
 * padded input (1). */
static int64_t line_rows(const pool_plan *p, const int64_t *oidx, bool include_pad, int64_t *count_outer) {
    int last = p->nsp - 1;
    int64_t t[KILN_MAX_DIMS], c = 1;
    bool empty = false;
    for (int i = 0; i < last; i++) {
        int64_t lo = p->lo[i][oidx[i]], hi = p->hi[i][oidx[i]];
        c *= include_pad ? p->hp[i][oidx[i]] : hi - lo;
        empty = empty || lo >= hi;
        t[i] = lo;
    }
    *count_outer = c;
    if (empty) return 0;
    int64_t count = 0;
    for (;;) {
        int64_t base = 0;
        for (int i = 0; i < last; i++) base += (oidx[i] * p->s[i] - p->pb[i] + t[i] * p->d[i]) * p->istr[i];
        p->rows[count++] = base;
        int i = last - 1;
        for (; i >= 0; i--) {
            if (++t[i] < p->hi[i][oidx[i]]) break;
            t[i] = p->lo[i][oidx[i]];
        }
        if (i < 0) return count;
    }
}

static void next_index(int m, const int64_t *dims, int64_t *idx) {
    for (int i = m - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return;
        idx[i] = 0;
    }
}

/* Column-major offset within a plane of the row-major plane offset off (MaxPool storage_order 1). */
static int64_t col_major(const pool_plan *p, int64_t off) {
    int64_t r = 0, mul = 1, idx[KILN_MAX_DIMS];
    for (int i = p->nsp - 1; i >= 0; i--) {
        idx[i] = off % p->in[i];
        off /= p->in[i];
    }
    for (int i = 0; i < p->nsp; i++) {
        r += idx[i] * mul;
        mul *= p->in[i];
    }
    return r;
}

/* y[j] = x[j * s] > y[j] ? x[j * s] : y[j] for j in [0, n): one tap of MaxPool over an output line. */
#define DEFINE_MAX_ROW(T)                                                                          \
    static void max_row_##T(T *y, const T *x, int64_t n, int64_t s) {                              \
        for (int64_t j = 0; j < n; j++) y[j] = x[j * s] > y[j] ? x[j * s] : y[j];                  \
    }
DEFINE_MAX_ROW(double)
DEFINE_MAX_ROW(int8_t)
DEFINE_MAX_ROW(uint8_t)

/* max_row for float32, 8 lanes at a time for strides 1 and 2 (the even lanes of two vectors). */
KILN_SIMD_CLONES
static void max_row_float(float *y, const float *x, int64_t n, int64_t s) {
    typedef int32_t v8i __attribute__((vector_size(32)));
    int64_t j = 0;
    if (s <= 2)
        for (; j + 8 <= n; j += 8) {
            kiln_v8f xv = kiln_v8_load(x + j * s), yv = kiln_v8_load(y + j);
            if (s == 2) {
                kiln_v8f hi = kiln_v8_load(x + j * 2 + 8);
                xv = __builtin_shufflevector(xv, hi, 0, 2, 4, 6, 8, 10, 12, 14);
            }
            v8i m = xv > yv;
            kiln_v8_store(y + j, (kiln_v8f)((m & (v8i)xv) | (~m & (v8i)yv)));
        }
    for (; j < n; j++) y[j] = x[j * s] > y[j] ? x[j * s] : y[j];
}

/* Max over each window for element type T; ind (may be NULL) gets the flat input index of the
 * first maximum in window order. An empty window (only with huge pads) yields LOWEST. */
#define DEFINE_MAXPOOL(T, LOWEST)                                                                  \
    static void maxpool_##T(pool_plan *p, const T *xd, T *yd, int64_t *ind, bool col) {            \
        int last = p->nsp - 1;                                                                     \
        int64_t L = p->L, s = p->s[last], kl = p->k[last];                                         \
        for (int64_t pl = 0; pl < p->planes; pl++) {                                               \
            const T *xp = xd + pl * p->in_size;                                                    \
            int64_t oidx[KILN_MAX_DIMS] = {0};                                                     \
            for (int64_t l = 0; l < p->lines; l++, next_index(last, p->out, oidx)) {               \
                T *y = yd + pl * p->out_size + l * L;                                              \
                int64_t *yi = ind ? ind + pl * p->out_size + l * L : NULL, unused;                 \
                for (int64_t j = 0; j < L; j++) y[j] = (LOWEST);                                   \
                if (yi)                                                                            \
                    for (int64_t j = 0; j < L; j++) yi[j] = -1;                                    \
                int64_t nrows = line_rows(p, oidx, false, &unused);                                \
                for (int64_t r = 0; r < nrows; r++)                                                \
                    for (int64_t k = 0; k < kl; k++) {                                             \
                        int64_t base = p->rows[r] + p->koff[k];                                    \
                        if (!yi) {                                                                 \
                            int64_t lo_ = p->klo[k];                                               \
                            max_row_##T(y + lo_, xp + base + lo_ * s, p->khi[k] - lo_, s);         \
                        } else {                                                                   \
                            for (int64_t j = p->klo[k]; j < p->khi[k]; j++)                        \
                                if (yi[j] < 0 || xp[base + j * s] > y[j]) {                        \
                                    y[j] = xp[base + j * s];                                       \
                                    yi[j] = base + j * s;                                          \
                                }                                                                  \
                        }                                                                          \
                    }                                                                              \
                if (yi)                                                                            \
                    for (int64_t j = 0; j < L; j++) {                                              \
                        int64_t o = yi[j] < 0 ? 0 : yi[j];                                         \
                        yi[j] = pl * p->in_size + (col ? col_major(p, o) : o);                     \
                    }                                                                              \
            }                                                                                      \
        }                                                                                          \
    }
DEFINE_MAXPOOL(float, -INFINITY)
DEFINE_MAXPOOL(double, -INFINITY)
DEFINE_MAXPOOL(int8_t, INT8_MIN)
DEFINE_MAXPOOL(uint8_t, 0)

/* Outer taps a line of the plan can read at most (the size p->rows needs). */
static int64_t outer_taps(const pool_plan *p) {
    int64_t t = 1;
    for (int i = 0; i < p->nsp - 1; i++) t *= p->k[i];
    return t;
}

#define POOL_PART_ROWS 64
typedef struct maxpool_job {
    const pool_plan *p;
    const float *x;
    float *y;
} maxpool_job;

/* One plane of a 2-D float32 MaxPool without indices: each output row takes the maximum over its
 * window's input rows first (whole rows, into r: in[1] floats of scratch), then over the window's
 * columns of that one row. The same comparisons as maxpool_float (NaN is never taken), in fewer
 * passes over short rows. */
static void maxpool2d_plane(const pool_plan *p, const float *x, float *y, float *r) {
    const int64_t W = p->in[1], L = p->L, s = p->s[1];
    for (int64_t oh = 0; oh < p->out[0]; oh++) {
        float *yr = y + oh * L;
        for (int64_t j = 0; j < L; j++) yr[j] = -INFINITY;
        int64_t lo = p->lo[0][oh], hi = p->hi[0][oh];
        if (lo >= hi) continue;
        for (int64_t j = 0; j < W; j++) r[j] = -INFINITY;
        for (int64_t t = lo; t < hi; t++) max_row_float(r, x + (oh * p->s[0] - p->pb[0] + t * p->d[0]) * W, W, 1);
        for (int64_t k = 0; k < p->k[1]; k++)
            max_row_float(yr + p->klo[k], r + p->klo[k] * s + p->koff[k], p->khi[k] - p->klo[k], s);
    }
}

/* The 16-lane kernels below: AVX-512 registers, two AVX2 ones, or four SSE ones, by clone. */
#if defined(__x86_64__) && defined(__linux__) && !defined(KILN_NO_SIMD_CLONES)
#define POOL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define POOL_CLONES
#endif
typedef float pool_v16f __attribute__((vector_size(64)));
typedef int32_t pool_v16i __attribute__((vector_size(64)));
#define V16_LOAD(p)                                                                                \
    ({                                                                                             \
        pool_v16f v_;                                                                              \
        memcpy(&v_, (p), sizeof v_);                                                               \
        v_;                                                                                        \
    })
/* a > b ? a : b per lane: a NaN in a is never taken */
#define V16_MAX(a, b)                                                                              \
    ({                                                                                             \
        pool_v16f a_ = (a), b_ = (b);                                                              \
        pool_v16i m_ = a_ > b_;                                                                    \
        (pool_v16f)((m_ & (pool_v16i)a_) | (~m_ & (pool_v16i)b_));                                 \
    })
/* lanes 0, 2, ..., 30 (EVEN) or 1, 3, ..., 31 (ODD) of the 32 of lo then hi */
#define V16_EVEN(lo, hi)                                                                           \
    __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
#define V16_ODD(lo, hi)                                                                            \
    __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)

/* Whether the plan is a 2-D MaxPool with the 2x2 or 3x3 window at stride 2, no dilation (the
 * classifiers' pools, any pads, ceil_mode or not): maxpool2d_s2_plane runs it. */
static bool is_s2_pool(const pool_plan *p) {
    return p->nsp == 2 && p->s[0] == 2 && p->s[1] == 2 && p->d[0] == 1 && p->d[1] == 1 && p->k[0] == p->k[1] &&
           (p->k[0] == 2 || p->k[0] == 3) && p->pb[1] >= 0 && p->pb[1] < p->k[1];
}

/* Floats of scratch maxpool2d_s2_plane needs: the padded column maxima of its 16-output blocks. */
static size_t s2_scratch(const pool_plan *p) {
    int64_t blocks = 2 * ((p->L + 15) / 16 * 16) + 32, row = p->pb[1] + p->in[1];
    return (size_t)(blocks > row ? blocks : row);
}

/* One plane of a pool that is_s2_pool accepts: for each output row, r gets the maximum over the
 * window's input rows inside the input, laid out with the left pad in front and -inf wherever a
 * window reaches past the input; then 16 outputs at a time take the maximum of r's even lanes, odd
 * lanes and (3x3) the even lanes two further on, y[j] = max(r[2j], r[2j + 1], r[2j + 2]). The
 * same comparisons as maxpool2d_plane: NaN is never taken. */
POOL_CLONES
static void maxpool2d_s2_plane(const pool_plan *p, const float *x, float *y, float *r) {
    const int64_t W = p->in[1], L = p->L, pad = p->pb[1], n = (int64_t)s2_scratch(p);
    for (int64_t i = 0; i < n; i++) r[i] = -INFINITY;
    for (int64_t oh = 0; oh < p->out[0]; oh++) {
        float *yr = y + oh * L, *rc = r + pad;
        int64_t lo = p->lo[0][oh], hi = p->hi[0][oh];
        if (lo >= hi) {
            for (int64_t j = 0; j < L; j++) yr[j] = -INFINITY;
            continue;
        }
        const float *x0 = x + (oh * 2 - p->pb[0] + lo) * W;
        const pool_v16f lowest = (pool_v16f){0} - INFINITY;
        int64_t c = 0;
        for (; c + 16 <= W; c += 16) {
            pool_v16f v = lowest;
            for (int64_t t = 0; t < hi - lo; t++) v = V16_MAX(V16_LOAD(x0 + t * W + c), v);
            memcpy(rc + c, &v, sizeof v);
        }
        for (; c < W; c++) {
            float v = -INFINITY;
            for (int64_t t = 0; t < hi - lo; t++) v = x0[t * W + c] > v ? x0[t * W + c] : v;
            rc[c] = v;
        }
        for (int64_t j = 0; j < L; j += 16) {
            const float *rj = r + 2 * j;
            pool_v16f a = V16_LOAD(rj), b = V16_LOAD(rj + 16);
            pool_v16f m = V16_MAX(V16_ODD(a, b), V16_EVEN(a, b));
            if (p->k[1] == 3) {
                pool_v16f c = V16_LOAD(rj + 2), d = V16_LOAD(rj + 18);
                m = V16_MAX(V16_EVEN(c, d), m);
            }
            if (j + 16 <= L) memcpy(yr + j, &m, sizeof m);
            else memcpy(yr + j, &m, (size_t)(L - j) * sizeof *yr);
        }
    }
}

/* Planes [b, e) of a float32 MaxPool without indices (kiln_parallel_fn): 2-D planes one by one
 * (the 2x2 and 3x3 stride-2 pools on their own kernel), others through the plan with its own row
 * scratch. */
static void maxpool_f32_part(void *ctx, int64_t b, int64_t e) {
    const maxpool_job *j = ctx;
    float *r2 = is_s2_pool(j->p) ? kiln_cpu_scratch(KILN_SCRATCH_TASK, s2_scratch(j->p)) : NULL;
    if (r2) {
        for (int64_t pl = b; pl < e; pl++)
            maxpool2d_s2_plane(j->p, j->x + pl * j->p->in_size, j->y + pl * j->p->out_size, r2);
        return;
    }
    float *r = j->p->nsp == 2 ? kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)j->p->in[1] + 1) : NULL;
    if (r) {
        for (int64_t pl = b; pl < e; pl++)
            maxpool2d_plane(j->p, j->x + pl * j->p->in_size, j->y + pl * j->p->out_size, r);
        return;
    }
    int64_t rows[POOL_PART_ROWS];
    pool_plan local = *j->p;
    local.rows = rows;
    local.planes = e - b;
    maxpool_float(&local, j->x + b * local.in_size, j->y + b * local.out_size, NULL, false);
}

/* MaxPool: X [N, C, in...] -> Y [N, C, out...], Indices (int64, same shape) when requested. */
static NN_EXEC(max_pool) {
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    const kiln_tensor *x = in[0];
    kiln_tensor *y = out[0];
    if (x->dtype != KILN_F32 && x->dtype != KILN_F64 && x->dtype != KILN_I8 && x->dtype != KILN_U8)
        return kiln_error(KILN_ERR_UNSUPPORTED, "MaxPool does not support %s input", kiln_dtype_name(x->dtype));
    int64_t order = kiln_attr_int(n, "storage_order", 0);
    if (order != 0 && order != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "MaxPool storage_order must be 0 or 1, got %lld", (long long)order);
    pool_plan p;
    int64_t odims[KILN_MAX_DIMS];
    KILN_TRY(plan_make(n, x, &p, odims));
    /* every output (and index) is written below */
    kiln_status st = kiln_tensor_alloc_uninit(y, x->dtype, x->ndim, odims);
    int64_t *ind = NULL;
    if (st == KILN_OK && nout > 1 && out[1]) {
        st = kiln_tensor_alloc_uninit(out[1], KILN_I64, x->ndim, odims);
        ind = out[1]->data;
    }
    if (st != KILN_OK) {
        plan_free(&p);
        return st;
    }
    maxpool_job job = {&p, x->data, y->data};
    int64_t per = p.out_size > 0 ? (INT64_C(1) << 13) / p.out_size : p.planes; /* 8 K outputs a chunk */
    switch (x->dtype) {
    case KILN_F32:
        if (!ind && outer_taps(&p) <= POOL_PART_ROWS)
            kiln_parallel_for(p.planes, per > 1 ? per : 1, maxpool_f32_part, &job);
        else maxpool_float(&p, x->data, y->data, ind, order == 1);
        break;
    case KILN_F64: maxpool_double(&p, x->data, y->data, ind, order == 1); break;
    case KILN_I8: maxpool_int8_t(&p, x->data, y->data, ind, order == 1); break;
    default: maxpool_uint8_t(&p, x->data, y->data, ind, order == 1); break;
    }
    plan_free(&p);
    return KILN_OK;
}

/* AveragePool (lp == 0) or LpPool (lp = p > 0) on float32. */
static kiln_status avg_lp_pool(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, float lp) {
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    const kiln_tensor *x = in[0];
    KILN_TRY(nn_require_f32(n, x, 0));
    int64_t cip = kiln_attr_int(n, "count_include_pad", 0);
    if (cip != 0 && cip != 1)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s count_include_pad must be 0 or 1", n->op_type);
    pool_plan p;
    int64_t odims[KILN_MAX_DIMS];
    KILN_TRY(plan_make(n, x, &p, odims));
    kiln_status st = kiln_tensor_alloc(out[0], KILN_F32, x->ndim, odims);
    if (st != KILN_OK) {
        plan_free(&p);
        return st;
    }
    int last = p.nsp - 1;
    int64_t L = p.L, s = p.s[last], kl = p.k[last];
    const int64_t *clo = p.lo[last], *chi = p.hi[last], *chp = p.hp[last];
    const float *xd = x->data;
    float *yd = out[0]->data; /* zeroed by the allocation */
    bool avg = lp == 0.0f, p2 = lp == 2.0f, p1 = lp == 1.0f;
    for (int64_t pl = 0; pl < p.planes; pl++) {
        const float *xp = xd + pl * p.in_size;
        int64_t oidx[KILN_MAX_DIMS] = {0};
        for (int64_t l = 0; l < p.lines; l++, next_index(last, p.out, oidx)) {
            float *y = yd + pl * p.out_size + l * L;
            int64_t outer_count;
            int64_t nrows = line_rows(&p, oidx, cip == 1, &outer_count);
            for (int64_t r = 0; r < nrows; r++)
                for (int64_t k = 0; k < kl; k++) {
                    int64_t j0 = p.klo[k], cnt = p.khi[k] - j0;
                    if (cnt <= 0) continue;
                    const float *xr = xp + p.rows[r] + p.koff[k] + j0 * s; /* the tap of ow = j0 */
                    float *yr = y + j0;
                    if (avg)
                        for (int64_t j = 0; j < cnt; j++) yr[j] += xr[j * s];
                    else if (p1)
                        for (int64_t j = 0; j < cnt; j++) yr[j] += fabsf(xr[j * s]);
                    else if (p2)
                        for (int64_t j = 0; j < cnt; j++) yr[j] += xr[j * s] * xr[j * s];
                    else
                        for (int64_t j = 0; j < cnt; j++) yr[j] += powf(fabsf(xr[j * s]), lp);
                }
            if (avg) {
                for (int64_t j = 0; j < L; j++) {
                    int64_t div = outer_count * (cip == 1 ? chp[j] : chi[j] - clo[j]);
                    y[j] = div > 0 ? y[j] / (float)div : NAN;
                }
            } else if (p2) {
                for (int64_t j = 0; j < L; j++) y[j] = sqrtf(y[j]);
            } else if (!p1) {
                for (int64_t j = 0; j < L; j++) y[j] = powf(y[j], 1.0f / lp);
            }
        }
    }
    plan_free(&p);
    return KILN_OK;
}

/* The LpPool / GlobalLpPool exponent (a float attribute in opset 1, an int later); must be > 0. */
static kiln_status lp_exponent(const kiln_node *n, float *p) {
    *p = kiln_attr_float(n, "p", 2.0f);
    if (!(*p > 0.0f)) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s p must be positive, got %g", n->op_type, (double)*p);
    return KILN_OK;
}

static NN_EXEC(average_pool) {
    if (n->opset < 19 && kiln_node_attr(n, "dilations"))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "AveragePool accepts dilations only from opset 19");
    return avg_lp_pool(n, in, nin, out, 0.0f);
}

static NN_EXEC(lp_pool) {
    float p;
    KILN_TRY(lp_exponent(n, &p));
    return avg_lp_pool(n, in, nin, out, p);
}

/* Global pools: X [N, C, D...] -> Y [N, C, 1...]; kind 'a' average, 'm' max, 'l' Lp. */
typedef struct global_job {
    const float *x;
    float *y;
    int64_t size;
    float lp;
    char kind;
} global_job;

/* Sum of p[0, n) in double: eight partial sums in two 4-lane vectors (the adds pipeline), lane j
 * of vector v summing the elements 8 i + 4 v + j. */
KILN_SIMD_CLONES
static double sum_f64(const float *p, int64_t n) {
    typedef double v4d __attribute__((vector_size(32)));
    typedef float v4f __attribute__((vector_size(16)));
    v4d a0 = {0}, a1 = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f lo, hi;
        memcpy(&lo, p + i, sizeof lo);
        memcpy(&hi, p + i + 4, sizeof hi);
        a0 += __builtin_convertvector(lo, v4d);
        a1 += __builtin_convertvector(hi, v4d);
    }
    v4d a = a0 + a1;
    double s = (a[0] + a[1]) + (a[2] + a[3]);
    for (; i < n; i++) s += p[i];
    return s;
}

#if defined(POOL_AVX512)
/* sum_f64 on AVX-512: 32 partial sums in four 8-lane double vectors (four add chains in flight,
 * every float converted exactly), lane j of vector v summing the elements 32 i + 8 v + j. */
__attribute__((target("avx512f"))) static double sum_f64_avx512(const float *p, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(p + i)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(p + i + 8)));
        a2 = _mm512_add_pd(a2, _mm512_cvtps_pd(_mm256_loadu_ps(p + i + 16)));
        a3 = _mm512_add_pd(a3, _mm512_cvtps_pd(_mm256_loadu_ps(p + i + 24)));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
    for (; i < n; i++) s += p[i];
    return s;
}

/* The sum of p[0, n) in double, on AVX-512 where the processor has it. */
static double plane_sum(const float *p, int64_t n) {
    return kiln_pg_isa_current() == KILN_PG_AVX512 ? sum_f64_avx512(p, n) : sum_f64(p, n);
}
#else
static double plane_sum(const float *p, int64_t n) { return sum_f64(p, n); }
#endif

/* Planes [b, e) of a global pool (kiln_parallel_fn). */
static void global_part(void *ctx, int64_t b, int64_t e) {
    const global_job *j = ctx;
    for (int64_t pl = b; pl < e; pl++) {
        const float *xp = j->x + pl * j->size;
        if (j->kind == 'm') {
            float m = j->size ? xp[0] : -INFINITY;
            for (int64_t i = 1; i < j->size; i++) m = xp[i] > m ? xp[i] : m;
            j->y[pl] = m;
        } else if (j->kind == 'a') {
            j->y[pl] = j->size ? (float)(plane_sum(xp, j->size) / (double)j->size) : NAN;
        } else {
            double acc = 0.0;
            for (int64_t i = 0; i < j->size; i++)
                acc += j->lp == 2.0f ? (double)xp[i] * xp[i] : pow(fabs((double)xp[i]), j->lp);
            j->y[pl] = (float)pow(acc, 1.0 / j->lp);
        }
    }
}

static kiln_status global_pool(const kiln_node *n, kiln_tensor *const *in, int nin, kiln_tensor *const *out, char kind) {
    KILN_TRY(nn_require_inputs(n, in, nin, 1));
    const kiln_tensor *x = in[0];
    KILN_TRY(nn_require_f32(n, x, 0));
    if (x->ndim < 2) return kiln_error(KILN_ERR_SHAPE, "%s input must have rank >= 2, has rank %d", n->op_type, x->ndim);
    float lp = 0.0f;
    if (kind == 'l') KILN_TRY(lp_exponent(n, &lp));
    int64_t odims[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) odims[i] = i < 2 ? x->dims[i] : 1;
    KILN_TRY(kiln_tensor_alloc(out[0], KILN_F32, x->ndim, odims));
    int64_t planes = x->dims[0] * x->dims[1], size = kiln_tensor_numel(x) / (planes ? planes : 1);
    global_job j = {x->data, out[0]->data, size, lp, kind};
    /* planes in chunks of at least 16 K elements: below that a thread costs more than it saves */
    int64_t per = size > 0 ? (INT64_C(1) << 14) / size : planes;
    kiln_parallel_for(planes, per > 1 ? per : 1, global_part, &j);
    return KILN_OK;
}

static NN_EXEC(global_average_pool) { return global_pool(n, in, nin, out, 'a'); }
static NN_EXEC(global_max_pool) { return global_pool(n, in, nin, out, 'm'); }
static NN_EXEC(global_lp_pool) { return global_pool(n, in, nin, out, 'l'); }

NN_FLOAT_EXEC(kiln_cpu_max_pool, max_pool, 1u)
NN_FLOAT_EXEC(kiln_cpu_average_pool, average_pool, 1u)
NN_FLOAT_EXEC(kiln_cpu_lp_pool, lp_pool, 1u)
NN_FLOAT_EXEC(kiln_cpu_global_average_pool, global_average_pool, 1u)
NN_FLOAT_EXEC(kiln_cpu_global_max_pool, global_max_pool, 1u)
NN_FLOAT_EXEC(kiln_cpu_global_lp_pool, global_lp_pool, 1u)
