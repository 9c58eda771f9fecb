/* conv2d_depthwise.c — kiln_conv2d_run_depthwise (conv2d.h): depthwise 2-D Conv (one input channel
 * per group, up to 8 output channels each), one output plane per task. A task copies its input
 * plane, padded, into a per-thread buffer in "phase" layout (padded row r, column q at
 * buf[r * ld + (q % sw) * lp + q / sw], lp the phase length), so tap kw of output ow reads phase
 * (kw * dw) % sw at ow + (kw * dw) / sw: contiguous in ow for any stride.
 *
 * On AVX-512 (16-lane vectors): a stride-1 plane is read in place, no copy: each tap's columns
 * under the mask of those inside the input row, the taps of rows outside the plane skipped. Other
 * strides copy the padded rows by masked loads (stride 2: deinterleaved by vpermt2ps), only as far
 * as outputs read. 3x3 and 5x5 kernels run with their taps unrolled and their weights in
 * registers, others through loops or a tap table; four rows' sums are in flight; the epilogue
 * (bias, residual, activation) is applied to the sums before the one store. Elsewhere: 8-lane
 * vectors (cpu_simd.h), the padding zeroed by memset, and the epilogue as a second pass over the
 * plane, which is still in cache. */
#include "backends/cpu/conv2d.h"

#include "backends/cpu/activation_v16.h"
#include "backends/cpu/cpu_scratch.h"
#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/fused_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "core/status.h"
#include "core/threadpool.h"

#include <stdatomic.h>
#include <string.h>

/* Taps of a depthwise kernel the direct path takes (8x8 and below); larger ones go through im2col. */
#define DW_MAX_TAPS 64
/* Floats past a padded row's outputs that a vector may read (one 16-lane vector), and past the
 * padded plane that the flattened rows' last block of four vectors may read. */
#define DW_SLACK 16
#define DW_FLAT_SLACK 64
/* Kernel columns up to which, and output widths within which, a stride-1 plane is read in place
 * on AVX-512 (narrower planes run faster over flattened padded rows, wider ones from a padded copy). */
#define DW_DIRECT_MAX_KW 8
#define DW_DIRECT_MIN_OW 8
#define DW_DIRECT_MAX_OW 32

bool kiln_conv2d_depthwise_fits(int64_t M, int64_t Cg, int64_t KH, int64_t KW, int64_t group) {
    return Cg == 1 && group > 1 && M / group <= 8 && KH * KW <= DW_MAX_TAPS;
}

typedef struct dw_job dw_job;
struct dw_job {
    const kiln_conv2d *g;
    const float *x, *w, *bias, *z;
    const kiln_act *act; /* NULL: none */
    float *y;
    int64_t Mg, HW, OHW;
    int64_t PH, lp, ld;      /* padded rows, phase length, padded row length (lp * sw) */
    int64_t off[DW_MAX_TAPS]; /* where tap t of output (0, 0) reads in the padded plane */
    bool wide;               /* 16-lane AVX-512 kernels */
    bool direct;             /* wide, stride 1, KW and OW in range: read in place, no padded plane */
    bool flat;               /* wide, over the plane's rows as one run of ld-float rows (stride 1, no residual) */
    atomic_bool oom;
#if defined(KILN_V16)
    /* the 16-lane plane kernel for this kernel size, stride and dilation; buf: the padded plane, or
     * the input plane where direct */
    void (*plane16)(const dw_job *j, const float *buf, const float *wk, float bias, const float *z,
                    const kiln_act *act, float *y, float *tmp);
#endif
};

/* ------------------------------------------------------------------ padded planes */
/* d[i] = s[i * stride] for i in [0, n). */
static void copy_strided(float *restrict d, const float *restrict s, int64_t n, int64_t stride) {
    if (stride == 1) memcpy(d, s, (size_t)n * sizeof *d);
    else
        for (int64_t i = 0; i < n; i++) d[i] = s[i * stride];
}

#if defined(KILN_V16)
#define DW_V16 __attribute__((target("avx512f,fma")))

/* The lanes i of a vector whose source column b + i lies in [0, W). */
KILN_V16_FN __mmask16 in_row16(int64_t b, int64_t W) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm512_cmplt_epu32_mask(_mm512_add_epi32(iota, _mm512_set1_epi32((int32_t)b)), _mm512_set1_epi32((int32_t)W));
}

/* pad_plane for strides 1 and 2 on 16-lane vectors, without calls: each phase row is written 16
 * floats at a time, by masked loads that give zeros outside the input row (stride 2: two of them
 * and their even lanes), up to the last column an output reads; the columns past it (slack that
 * only the dropped lanes of a vector read) keep whatever they held. A row's last vector may run
 * up to 15 floats past that column, into what the loop writes next or into padding. */
DW_V16 static void pad_plane16(const dw_job *j, const float *x, float *buf) {
    const kiln_conv2d *g = j->g;
    const int64_t ld = j->ld, lp = j->lp, sw = g->sw, W = g->W;
    const int64_t read = g->OW + (g->KW - 1) * g->dw / sw, need = read < lp ? read : lp; /* columns outputs read */
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    memset(buf, 0, (size_t)(g->ph * ld) * sizeof *buf);
    memset(buf + (g->ph + g->H) * ld, 0, (size_t)((j->PH - g->ph - g->H) * ld + DW_SLACK) * sizeof *buf);
    for (int64_t ih = 0; ih < g->H; ih++) {
        const float *src = x + ih * W;
        for (int64_t phase = 0; phase < sw; phase++) {
            float *dst = buf + (ih + g->ph) * ld + phase * lp;
            for (int64_t c = 0, b = phase - g->pw; c < need; c += 16, b += 16 * sw) { /* b: source column of dst[c] */
                __m512 v = _mm512_maskz_loadu_ps(in_row16(b, W), src + b);
                if (sw == 2) v = _mm512_permutex2var_ps(v, even, _mm512_maskz_loadu_ps(in_row16(b + 16, W), src + b + 16));
                _mm512_storeu_ps(dst + c, v);
            }
        }
    }
}
#endif

/* The padded plane of input channel x (H x W) into buf (PH x ld floats, phase layout, and
 * DW_SLACK floats past them): every float a tap may read is written, the padding and slack with
 * zeros. The portable form; pad_plane16 the AVX-512 one. */
static void pad_plane(const dw_job *j, const float *x, float *buf) {
    const kiln_conv2d *g = j->g;
    const int64_t ld = j->ld, lp = j->lp, sw = g->sw;
    memset(buf, 0, (size_t)(g->ph * ld) * sizeof *buf);
    memset(buf + (g->ph + g->H) * ld, 0, (size_t)((j->PH - g->ph - g->H) * ld + DW_SLACK) * sizeof *buf);
    for (int64_t phase = 0; phase < sw; phase++) { /* padded columns q = phase + i * sw, q >= pw */
        int64_t i = (g->pw - phase + sw - 1) / sw, q = phase + i * sw;
        int64_t n = q < g->pw + g->W ? (g->pw + g->W - q + sw - 1) / sw : 0; /* floats of the phase from x */
        for (int64_t ih = 0; ih < g->H; ih++) {
            float *dst = buf + (ih + g->ph) * ld + phase * lp;
            const float *src = x + ih * g->W + (q - g->pw);
            memset(dst, 0, (size_t)i * sizeof *dst);
            if (n > 0) copy_strided(dst + i, src, n, sw);
            memset(dst + i + n, 0, (size_t)(lp - i - n) * sizeof *dst);
        }
    }
}

/* ------------------------------------------------------------------ 16-lane planes */
#if defined(KILN_V16)
/* acc + residual (masked) through the activation, stored to y under mask. */
KILN_V16_FN void store_epilogue(__m512 acc, const float *z, const kiln_act *act, __mmask16 mask, float *y) {
    if (z) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mask, z));
    if (act) acc = (__m512)act16((v16f)acc, act->kind, act->p0, act->p1);
    _mm512_mask_storeu_ps(y, mask, acc);
}

/* Where tap (kh, kw) of output (0, 0) reads, from base (the plane's row of that output): for a
 * constant stride sw > 0 and no dilation, an expression the compiler folds once the loops over the
 * taps are unrolled; for sw == 0, the job's table (any stride and dilation). */
KILN_V16_FN const float *tap16(const dw_job *j, const float *base, int64_t kh, int64_t kw, int64_t KW, int sw) {
    if (sw > 0) return base + kh * j->ld + (kw % sw) * j->lp + kw / sw;
    return base + j->off[kh * KW + kw];
}

/* Output rows [oh, oh + NR) of a plane from the padded plane buf, KH x KW taps read as tap16 does
 * with sw (constants where a caller below inlines a kernel size, so the taps unroll and the
 * weights wv stay in registers): 16 outputs of each row at a time, the NR rows' sums independent
 * (NR chains of FMAs in flight), the last vector of a row under a mask (the padded rows' slack
 * covers the loads). z: the plane's residual or NULL; act: NULL for none. */
KILN_V16_FN void rows16(const dw_job *j, const float *buf, const __m512 *wv, float bias, const float *z,
                        const kiln_act *act, float *y, int64_t oh, const int NR, const int64_t KH, const int64_t KW,
                        const int sw) {
    const kiln_conv2d *g = j->g;
    const int64_t OW = g->OW, step = g->sh * j->ld;
    const float *base = buf + oh * step;
    for (int64_t ow = 0; ow < OW; ow += 16) {
        __m512 acc[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[r] = _mm512_set1_ps(bias);
#pragma GCC unroll 8
        for (int64_t kh = 0; kh < KH; kh++)
#pragma GCC unroll 8
            for (int64_t kw = 0; kw < KW; kw++) {
                const float *p = tap16(j, base, kh, kw, KW, sw) + ow;
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++)
                    acc[r] = _mm512_fmadd_ps(wv[kh * KW + kw], _mm512_loadu_ps(p + r * step), acc[r]);
            }
        int64_t left = OW - ow;
        __mmask16 mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            int64_t o = (oh + r) * OW + ow;
            store_epilogue(acc[r], z ? z + o : NULL, act, mask, y + o);
        }
    }
}

/* One output plane by rows16, four rows at a time, then one. */
KILN_V16_FN void plane16(const dw_job *j, const float *buf, const float *wk, float bias, const float *z,
                         const kiln_act *act, float *y, const int64_t KH, const int64_t KW, const int sw) {
    __m512 wv[DW_MAX_TAPS];
    for (int64_t t = 0; t < KH * KW; t++) wv[t] = _mm512_set1_ps(wk[t]);
    int64_t oh = 0;
    for (; oh + 4 <= j->g->OH; oh += 4) rows16(j, buf, wv, bias, z, act, y, oh, 4, KH, KW, sw);
    for (; oh < j->g->OH; oh++) rows16(j, buf, wv, bias, z, act, y, oh, 1, KH, KW, sw);
}

/* plane16 for a stride-1 plane without residual: the outputs computed on the padded plane's grid,
 * consecutive positions of the flattened rows (the ld - OW columns between rows are computed and
 * dropped), four independent vectors at a time, into tmp (OH * ld + 64 floats), whose rows are
 * then copied to y. */
KILN_V16_FN void flat16(const dw_job *j, const float *buf, const float *wk, float bias, const kiln_act *act, float *y,
                        float *tmp, const int64_t KH, const int64_t KW, const int sw) {
    const kiln_conv2d *g = j->g;
    const int64_t ld = j->ld, span = (g->OH - 1) * ld + g->OW;
    __m512 wv[DW_MAX_TAPS];
    for (int64_t t = 0; t < KH * KW; t++) wv[t] = _mm512_set1_ps(wk[t]);
    for (int64_t p = 0; p < span; p += 64) {
        __m512 a0 = _mm512_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
        for (int64_t kh = 0; kh < KH; kh++)
#pragma GCC unroll 8
            for (int64_t kw = 0; kw < KW; kw++) {
                const float *q = tap16(j, buf, kh, kw, KW, sw) + p;
                a0 = _mm512_fmadd_ps(wv[kh * KW + kw], _mm512_loadu_ps(q), a0);
                a1 = _mm512_fmadd_ps(wv[kh * KW + kw], _mm512_loadu_ps(q + 16), a1);
                a2 = _mm512_fmadd_ps(wv[kh * KW + kw], _mm512_loadu_ps(q + 32), a2);
                a3 = _mm512_fmadd_ps(wv[kh * KW + kw], _mm512_loadu_ps(q + 48), a3);
            }
        store_epilogue(a0, NULL, act, 0xffff, tmp + p);
        store_epilogue(a1, NULL, act, 0xffff, tmp + p + 16);
        store_epilogue(a2, NULL, act, 0xffff, tmp + p + 32);
        store_epilogue(a3, NULL, act, 0xffff, tmp + p + 48);
    }
    for (int64_t oh = 0; oh < g->OH; oh++) memcpy(y + oh * g->OW, tmp + oh * ld, (size_t)g->OW * sizeof *y);
}

/* Outputs [ow, ow + 16) of rows [oh, oh + NR) of a stride-1 plane read in place from the input
 * plane x (H x W), no padded copy: when masked, tap kw's input columns are loaded under cols[kw],
 * the mask of those inside the row (the padding's lanes read as zeros, their loads suppressed),
 * else (every column inside) by plain loads; when edge is set, the taps whose input row lies
 * outside the plane are skipped. KH x KW taps, dilations dh and dw: constants where a caller below
 * inlines a kernel size. Sums, residual and epilogue as rows16. */
KILN_V16_FN void direct_block16(const dw_job *j, const float *x, const __m512 *wv, float bias, const float *z,
                                const kiln_act *act, float *y, int64_t oh, int64_t ow, const __mmask16 *cols,
                                const int NR, const int64_t KH, const int64_t KW, const int64_t dh, const int64_t dw,
                                const bool edge, const bool masked) {
    const kiln_conv2d *g = j->g;
    const int64_t W = g->W, OW = g->OW;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) acc[r] = _mm512_set1_ps(bias);
#pragma GCC unroll 8
    for (int64_t kh = 0; kh < KH; kh++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const int64_t ih = oh + r - g->ph + kh * dh;
            if (edge && (ih < 0 || ih >= g->H)) continue;
            const float *row = x + ih * W + ow - g->pw;
#pragma GCC unroll 8
            for (int64_t kw = 0; kw < KW; kw++) {
                __m512 v = masked ? _mm512_maskz_loadu_ps(cols[kw], row + kw * dw) : _mm512_loadu_ps(row + kw * dw);
                acc[r] = _mm512_fmadd_ps(wv[kh * KW + kw], v, acc[r]);
            }
        }
    int64_t left = OW - ow;
    __mmask16 mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        int64_t o = (oh + r) * OW + ow;
        store_epilogue(acc[r], z ? z + o : NULL, act, mask, y + o);
    }
}

/* Output rows [oh, oh + NR) of a stride-1 plane by direct_block16, 16 outputs at a time: plain
 * loads where every tap's 16 columns lie inside the row, masked ones elsewhere (KW <= 8). */
KILN_V16_FN void direct_rows16(const dw_job *j, const float *x, const __m512 *wv, float bias, const float *z,
                               const kiln_act *act, float *y, int64_t oh, const int NR, const int64_t KH,
                               const int64_t KW, const int64_t dh, const int64_t dw, const bool edge) {
    const kiln_conv2d *g = j->g;
    for (int64_t ow = 0; ow < g->OW; ow += 16) {
        const int64_t c0 = ow - g->pw; /* input column of output ow's tap kw = 0 */
        if (c0 >= 0 && c0 + (KW - 1) * dw + 16 <= g->W) {
            direct_block16(j, x, wv, bias, z, act, y, oh, ow, NULL, NR, KH, KW, dh, dw, edge, false);
            continue;
        }
        __mmask16 cols[DW_DIRECT_MAX_KW] = {0};
#pragma GCC unroll 8
        for (int64_t kw = 0; kw < KW; kw++) cols[kw] = in_row16(c0 + kw * dw, g->W);
        direct_block16(j, x, wv, bias, z, act, y, oh, ow, cols, NR, KH, KW, dh, dw, edge, true);
    }
}

/* One stride-1 output plane by direct_rows16, four rows at a time (without the row checks where
 * every tap of the four rows reads inside the plane), then the last one to three rows together. */
KILN_V16_FN void direct16(const dw_job *j, const float *x, const float *wk, float bias, const float *z,
                          const kiln_act *act, float *y, const int64_t KH, const int64_t KW, const int64_t dh,
                          const int64_t dw) {
    const kiln_conv2d *g = j->g;
    __m512 wv[DW_MAX_TAPS];
    for (int64_t t = 0; t < KH * KW; t++) wv[t] = _mm512_set1_ps(wk[t]);
    const int64_t lo = g->ph, hi = g->H + g->ph - (KH - 1) * dh; /* rows [lo, hi) read only inside */
    int64_t oh = 0;
    for (; oh + 4 <= g->OH; oh += 4) {
        if (oh >= lo && oh + 4 <= hi) direct_rows16(j, x, wv, bias, z, act, y, oh, 4, KH, KW, dh, dw, false);
        else direct_rows16(j, x, wv, bias, z, act, y, oh, 4, KH, KW, dh, dw, true);
    }
    if (g->OH - oh == 3) direct_rows16(j, x, wv, bias, z, act, y, oh, 3, KH, KW, dh, dw, true);
    if (g->OH - oh == 2) direct_rows16(j, x, wv, bias, z, act, y, oh, 2, KH, KW, dh, dw, true);
    if (g->OH - oh == 1) direct_rows16(j, x, wv, bias, z, act, y, oh, 1, KH, KW, dh, dw, true);
}

/* One plane from the padded plane buf by flat16 or plane16: KH x KW taps of stride sw and no
 * dilation, all constants, then any kernel through the tap table. */
#define DW_PLANE16(NAME, KH, KW, SW)                                                                          \
    DW_V16 static void NAME(const dw_job *j, const float *buf, const float *wk, float bias, const float *z, \
                            const kiln_act *act, float *y, float *tmp) {                                  \
        if (j->flat) flat16(j, buf, wk, bias, act, y, tmp, KH, KW, SW);                                   \
        else plane16(j, buf, wk, bias, z, act, y, KH, KW, SW);                                            \
    }
DW_PLANE16(plane16_3x3_s1, 3, 3, 1)
DW_PLANE16(plane16_5x5_s1, 5, 5, 1)
DW_PLANE16(plane16_3x3_s2, 3, 3, 2)
DW_PLANE16(plane16_5x5_s2, 5, 5, 2)
DW_PLANE16(plane16_any, j->g->KH, j->g->KW, 0)

/* One stride-1 plane read in place from the input plane (passed as buf) by direct16: 3x3 and 5x5
 * without dilation as constants, then any kernel of at most DW_DIRECT_MAX_KW columns. */
#define DW_DIRECT16(NAME, KH, KW, DH, DWL)                                                                    \
    DW_V16 static void NAME(const dw_job *j, const float *x, const float *wk, float bias, const float *z,   \
                            const kiln_act *act, float *y, float *tmp) {                                  \
        (void)tmp;                                                                                        \
        direct16(j, x, wk, bias, z, act, y, KH, KW, DH, DWL);                                             \
    }
DW_DIRECT16(direct16_3x3, 3, 3, 1, 1)
DW_DIRECT16(direct16_5x5, 5, 5, 1, 1)
DW_DIRECT16(direct16_any, j->g->KH, j->g->KW, j->g->dh, j->g->dw)
#endif

/* ------------------------------------------------------------------ 8-lane planes */
/* One output plane (bias included, no epilogue) on 8-lane vectors: 16 outputs at a time, then 8
 * (the slack covers the last vector's reads). */
KILN_SIMD_CLONES
static void plane8(const dw_job *j, const float *buf, const float *wk, float bias, float *y) {
    const kiln_conv2d *g = j->g;
    const int64_t taps = g->KH * g->KW, OW = g->OW;
    for (int64_t oh = 0; oh < g->OH; oh++) {
        float *yr = y + oh * OW;
        const float *base = buf + oh * g->sh * j->ld;
        int64_t ow = 0;
        for (; ow + 16 <= OW; ow += 16) {
            kiln_v8f a0 = kiln_v8_splat(bias), a1 = a0;
            for (int64_t t = 0; t < taps; t++) {
                kiln_v8f w = kiln_v8_splat(wk[t]);
                a0 += w * kiln_v8_load(base + j->off[t] + ow);
                a1 += w * kiln_v8_load(base + j->off[t] + ow + 8);
            }
            kiln_v8_store(yr + ow, a0);
            kiln_v8_store(yr + ow + 8, a1);
        }
        for (; ow < OW; ow += 8) {
            kiln_v8f acc = kiln_v8_splat(bias);
            for (int64_t t = 0; t < taps; t++) acc += kiln_v8_splat(wk[t]) * kiln_v8_load(base + j->off[t] + ow);
            if (ow + 8 <= OW) kiln_v8_store(yr + ow, acc);
            else
                for (int64_t i = 0; ow + i < OW; i++) yr[ow + i] = acc[i];
        }
    }
}

/* ------------------------------------------------------------------ tasks */
static void depthwise_part(void *ctx, int64_t t0, int64_t t1) {
    dw_job *j = ctx;
    const kiln_conv2d *g = j->g;
    int64_t plane = j->PH * j->ld + DW_FLAT_SLACK; /* the flat kernel's last vectors read past the rows */
    float *buf = j->direct ? NULL : kiln_cpu_scratch(KILN_SCRATCH_TASK, (size_t)(plane + (j->flat ? g->OH * j->ld + 64 : 0)));
    if (!j->direct && !buf) {
        atomic_store(&j->oom, true);
        return;
    }
    const int64_t taps = g->KH * g->KW;
    int64_t prev_in = -1;
    for (int64_t t = t0; t < t1; t++) { /* t = image * M + output channel */
        int64_t m = t % g->M, img = t / g->M, cin = img * g->C + m / j->Mg;
        if (cin != prev_in && !j->direct) {
#if defined(KILN_V16)
            if (j->wide && g->sw <= 2) pad_plane16(j, j->x + cin * j->HW, buf);
            else
#endif
                pad_plane(j, j->x + cin * j->HW, buf);
        }
        prev_in = cin;
        float *y = j->y + t * j->OHW;
        const float *z = j->z ? j->z + t * j->OHW : NULL, *wk = j->w + m * taps;
        float bias = j->bias ? j->bias[m] : 0.0f;
#if defined(KILN_V16)
        if (j->wide) {
            if (j->direct) j->plane16(j, j->x + cin * j->HW, wk, bias, z, j->act, y, NULL);
            else j->plane16(j, buf, wk, bias, z, j->act, y, buf + plane);
            continue;
        }
#endif
        plane8(j, buf, wk, bias, y);
        if (z)
            for (int64_t i = 0; i < j->OHW; i++) y[i] += z[i];
        if (j->act) kiln_cpu_activation_apply(y, j->OHW, j->act);
    }
}

kiln_status kiln_conv2d_run_depthwise(const kiln_conv2d *g, const float *x, const float *w, const float *bias,
                                      const float *residual, const kiln_act *act, float *y) {
    dw_job job = {.g = g, .x = x, .w = w, .bias = bias, .z = residual, .y = y}, *j = &job;
    j->act = act && act->kind != KILN_ACT_NONE ? act : NULL;
    j->Mg = g->M / g->group;
    j->HW = g->H * g->W;
    j->OHW = g->OH * g->OW;
    atomic_init(&j->oom, false);
#if defined(KILN_V16)
    j->wide = kiln_pg_isa_current() == KILN_PG_AVX512;
#endif
    int64_t rows_read = (g->OH - 1) * g->sh + (g->KH - 1) * g->dh + 1;
    j->PH = g->H + g->ph > rows_read ? g->H + g->ph : rows_read;
    int64_t lp_in = (g->W + g->pw) / g->sw + 1, lp_read = g->OW + DW_SLACK + (g->KW - 1) * g->dw / g->sw + 1;
    j->lp = lp_in > lp_read ? lp_in : lp_read;
    j->direct = j->wide && g->sh == 1 && g->sw == 1 && g->KW <= DW_DIRECT_MAX_KW && g->OW >= DW_DIRECT_MIN_OW &&
                g->OW <= DW_DIRECT_MAX_OW;
    /* flat: rows just wide enough for the input and the taps */
    int64_t tight = g->W + g->pw > g->OW + (g->KW - 1) * g->dw ? g->W + g->pw : g->OW + (g->KW - 1) * g->dw;
    j->flat = j->wide && !j->direct && g->sh == 1 && g->sw == 1 && !residual && g->OW % 16 != 0;
    if (j->flat) j->lp = tight;
    j->ld = j->lp * g->sw;
    for (int64_t kh = 0; kh < g->KH; kh++)
        for (int64_t kw = 0; kw < g->KW; kw++) {
            int64_t c = kw * g->dw;
            j->off[kh * g->KW + kw] = kh * g->dh * j->ld + (c % g->sw) * j->lp + c / g->sw;
        }
#if defined(KILN_V16)
    bool plain = g->dh == 1 && g->dw == 1, k3 = g->KH == 3 && g->KW == 3, k5 = g->KH == 5 && g->KW == 5;
    j->plane16 = j->direct ? direct16_any : plane16_any;
    if (plain && j->direct && (k3 || k5)) j->plane16 = k3 ? direct16_3x3 : direct16_5x5;
    if (plain && !j->direct && g->sw == 1 && (k3 || k5)) j->plane16 = k3 ? plane16_3x3_s1 : plane16_5x5_s1;
    if (plain && g->sw == 2 && (k3 || k5)) j->plane16 = k3 ? plane16_3x3_s2 : plane16_5x5_s2;
#endif
    int64_t tasks = g->N * g->M;
    kiln_parallel_for(tasks, tasks * j->OHW * g->KH * g->KW < 16384 ? tasks : 1, depthwise_part, j);
    if (atomic_load(&j->oom)) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "Conv: out of memory for the per-thread scratch");
    return KILN_OK;
}
