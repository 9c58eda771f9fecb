/* conv2d.h — the CPU backend's fast 2-D Conv (float32, NCHW): a direct depthwise kernel, 1x1
 * convolutions as matrix products straight on the input, the rest on input planes shifted per tap
 * (packed weights) or im2col in cache-sized column chunks (OpenBLAS), all split over the thread
 * pool, each part applying the epilogue (bias, residual, activation) to its outputs while they are
 * still in cache. The matrix products run on weights packed once per engine (packed_gemm.h) when
 * the caller has them, else through OpenBLAS. Conv (conv.c) and FusedConv (fused.c) both run
 * through it. */
#ifndef KILN_CPU_CONV2D_H
#define KILN_CPU_CONV2D_H

#include "backends/cpu/nn_kernels.h"
#include "ir/fused_ops.h"

#include <stdbool.h>
#include <stdint.h>

/* The geometry of one 2-D convolution: X [N, C, H, W] (*) W [M, C / group, KH, KW] -> Y [N, M, OH, OW]
 * with strides sh, sw, dilations dh, dw and leading pads ph, pw (trailing pads are implied by OH, OW). */
typedef struct kiln_conv2d {
    int64_t N, C, H, W, M, OH, OW, KH, KW, group;
    int64_t sh, sw, dh, dw, ph, pw;
} kiln_conv2d;

/* Weights [M, Cg, KH, KW] in `group` groups, packed once for the matrix products of kiln_conv2d_run:
 * group gr's [M / group, KH * KW * Cg] matrix (tap-major: column (kh * KW + kw) * Cg + c) in
 * kiln_pg_pack_a's layout at data + gr * group_floats. */
typedef struct kiln_conv2d_weights {
    int64_t M, Cg, KH, KW, group;
    int64_t group_floats;
    bool by_columns; /* the transpose [KH * KW * Cg, M / group] per group, in kiln_pg_pack_b's layout */
    bool winograd;   /* 3x3, one group: the 36 Winograd transforms [M, Cg], group_floats apart (conv2d_winograd.c) */
    bool winograd_by_tiles; /* those transforms transposed, [Cg, M] in kiln_pg_pack_b's layout */
    float *data;
    bool stored;     /* the engine file stores them packed (packed_weights.h): W has no plain copy */
    bool borrowed;   /* data lies in the engine file: kiln_conv2d_weights_free leaves it */
} kiln_conv2d_weights;

/* Outputs of at most this many positions are multiplied transposed (conv2d_small.c). */
#define KILN_CONV2D_SMALL_OUTPUT 64

/* Input and output channels from which a 3x3 stride-1 convolution runs by Winograd's F(4x4, 3x3);
 * on outputs of fewer than KILN_CONV2D_WINOGRAD_POSITIONS positions, its products run with the
 * tiles in the rows. */
#define KILN_CONV2D_WINOGRAD_CHANNELS 16
#define KILN_CONV2D_WINOGRAD_POSITIONS 256

/* The positions xi of the 6x6 Winograd transform: a weight's transforms are 36 matrices. */
#define KILN_CONV2D_WINOGRAD_XI 36

/* Packs w [M, Cg, KH, KW] (float32, group groups; M a multiple of group) into *out, which the
 * caller frees with kiln_conv2d_weights_free; by columns when out_positions (OH * OW where the
 * graph knows it, else 0) is at most KILN_CONV2D_SMALL_OUTPUT; else as Winograd transforms when
 * unit_stride (strides and dilations of 1) and w is 3x3 in one group with channels as above. *out
 * is NULL, with KILN_OK, when
 * kiln_conv2d_run would not use packed weights for this shape (depthwise convolutions run a direct
 * kernel). Fails only with KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_conv2d_weights_pack(const float *w, int64_t M, int64_t Cg, int64_t KH, int64_t KW, int64_t group,
                                     int64_t out_positions, bool unit_stride, kiln_conv2d_weights **out);
void kiln_conv2d_weights_free(kiln_conv2d_weights *pw);

/* Whether pw (may be NULL: false) was packed from weights of the shape and groups of g (and, by
 * columns, for an output of at most KILN_CONV2D_SMALL_OUTPUT positions; as Winograd transforms,
 * for strides and dilations of 1). */
bool kiln_conv2d_weights_fit(const kiln_conv2d_weights *pw, const kiln_conv2d *g);

/* Fills g for Conv node n on 4-D X and W (only shapes are read), checking what the Conv kernel
 * checks: channels and groups agree, the optional bias is [M], the window fits, planes and kernel
 * matrices stay below 2^31 elements. */
kiln_status kiln_conv2d_geometry(const kiln_node *n, const kiln_tensor *x, const kiln_tensor *w, const kiln_tensor *b,
                                 kiln_conv2d *g);

/* y = act(conv(x, w) + bias + residual), all float32 in the shapes of g; packed (may be NULL) is w
 * packed by kiln_conv2d_weights_pack, used when it fits g (else OpenBLAS runs on w); bias,
 * residual and act may be NULL; y aliases neither x nor residual. Fails with
 * KILN_ERR_OUT_OF_MEMORY (scratch), or KILN_ERR_SHAPE when stored weights do not fit g (w is
 * then no plain copy). */
kiln_status kiln_conv2d_run(const kiln_conv2d *g, const float *x, const float *w, const kiln_conv2d_weights *packed,
                            const float *bias, const float *residual, const kiln_act *act, float *y);

/* Internal to the 2-D Conv kernels, kiln_conv2d_run on packed weights that fit g: for a
 * non-pointwise g (any stride, dilation) on weights packed by rows (conv2d_shifted.c), on weights packed by columns
 * (conv2d_small.c), and on Winograd transforms (conv2d_winograd.c). */
kiln_status kiln_conv2d_run_shifted(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                    const float *bias, const float *residual, const kiln_act *act, float *y);
kiln_status kiln_conv2d_run_small(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                  const float *bias, const float *residual, const kiln_act *act, float *y);
kiln_status kiln_conv2d_run_winograd(const kiln_conv2d *g, const float *x, const kiln_conv2d_weights *packed,
                                     const float *bias, const float *residual, const kiln_act *act, float *y);

/* Internal to the 2-D Conv kernels: d[i] = s[i * stride] for i in [0, n) (stride >= 1), the even
 * lanes of two 8-lane vectors at a time for stride 2, memcpy for stride 1. */
void kiln_conv2d_copy_strided(float *restrict d, const float *restrict s, int64_t n, int64_t stride);

/* Writes the Winograd F(4x4, 3x3) transforms of w [M, C, 3, 3] to dst
 * (kiln_conv2d_winograd_floats of them): for each of the 36 positions xi, the [M, C] matrix U_xi
 * in kiln_pg_pack_a's layout, or with tiles_in_rows its transpose [C, M] in kiln_pg_pack_b's
 * layout, one after the other. u: scratch of 36 C floats (one output channel's transforms). */
void kiln_conv2d_winograd_pack(const float *w, int64_t M, int64_t C, bool tiles_in_rows, float *u, float *dst);

/* The floats kiln_conv2d_winograd_pack writes for M output and C input channels: 36 matrices of
 * kiln_pg_packed_a_floats(M, C) floats (M rounded up to whole KILN_PG_MR-row panels), or with
 * tiles_in_rows of kiln_pg_packed_b_floats(C, M) (M rounded up to whole KILN_PG_NR-column
 * panels); a 36th of it is the group_floats of kiln_conv2d_weights. */
int64_t kiln_conv2d_winograd_floats(int64_t M, int64_t C, bool tiles_in_rows);

/* Whether kiln_conv2d_run takes the direct depthwise kernel for weights [M, Cg, KH, KW] in group
 * groups: one input channel per group, at most 8 output channels per group, at most 64 taps. */
bool kiln_conv2d_depthwise_fits(int64_t M, int64_t Cg, int64_t KH, int64_t KW, int64_t group);

/* Internal to the 2-D Conv kernels, kiln_conv2d_run for a g that kiln_conv2d_depthwise_fits (its
 * contract, weights plain [M, 1, KH, KW]); the epilogue runs on each output vector before it is
 * stored. */
kiln_status kiln_conv2d_run_depthwise(const kiln_conv2d *g, const float *x, const float *w, const float *bias,
                                      const float *residual, const kiln_act *act, float *y);

#endif
