/* packed_weights.h — float32 weights stored in the engine file already packed for the CPU's matrix
 * products (packed_gemm.h), so a CPU engine neither repacks them at load nor keeps a plain copy.
 * At `kiln build --target cpu` (the backend's store_weights hook) the constant weight of every node
 * whose prepared kernel packs it (Conv, MatMul, Gemm and their fused forms; a Conv run by Winograd
 * F(4x4, 3x3) packs its weights' transforms) is replaced by its panels: a 1-D float32 constant,
 * the value keeping its declared shape, and the node gets the INTS attribute KILN_PACKED_ATTR
 * naming the layout (kiln_packed_tag). At load the prepared kernels use the panels in place from
 * the mapped file; panels cut to another width than this kiln's kernels use are re-cut once at
 * load (one warning per engine). Layout: docs/engine-format.md. */
#ifndef KILN_CPU_PACKED_WEIGHTS_H
#define KILN_CPU_PACKED_WEIGHTS_H

#include "engine/engine_format.h"
#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#define KILN_PACKED_ATTR "kiln_packed_weights"

typedef enum kiln_packed_kind {
    KILN_PACKED_MATMUL = 0,       /* MatMul / Gemm B [K, N]: kiln_pg_pack_b's column panels; P = N, L = K */
    KILN_PACKED_CONV_ROWS = 1,    /* Conv W, per group the tap-major [M / group, Cg * KH * KW] matrix in
                                   * kiln_pg_pack_a's row panels; P = M / group, L = Cg * KH * KW */
    KILN_PACKED_CONV_COLUMNS = 2, /* the same matrix transposed, in kiln_pg_pack_b's column panels */
    KILN_PACKED_WINOGRAD_ROWS = 3, /* Conv 3x3, stride 1, one group, run by Winograd F(4x4, 3x3): the 36
                                    * transforms U_xi [M, Cg] in kiln_pg_pack_a's row panels (conv2d.h);
                                    * groups = 36 (one block per xi), P = M, L = Cg */
    KILN_PACKED_WINOGRAD_TILES = 4, /* the same transforms transposed, [Cg, M] in kiln_pg_pack_b's
                                     * column panels (the products run with the tiles in the rows) */
    KILN_PACKED_KINDS = 5,
} kiln_packed_kind;

/* The attribute's six values, in this order. `groups` blocks of packed panels follow each other,
 * each holding an [L, P] matrix as ceil(P / width) panels of width x L floats (zero past P); isa is
 * the kiln_pg_isa the engine was built on (for inspect and the load log: the layout depends only on
 * kind and width). */
typedef struct kiln_packed_tag {
    int64_t kind, isa, width, groups, P, L;
} kiln_packed_tag;

/* The panel width this kiln's kernels use for weights of kind (KILN_PG_MR for conv rows and
 * Winograd rows, else KILN_PG_NR). */
int64_t kiln_packed_width(int64_t kind);

/* The store_weights hook of the cpu backend (backend.h): unless opts->cpu_packed_weights is OFF,
 * packs, in g, the weights of every node whose prepared kernel packs them and that only that node
 * reads (float32 input, not a graph output). Fails only with KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_cpu_store_weights(kiln_graph *g, const kiln_engine_meta *meta, const kiln_build_options *opts);

/* For node n of a loaded engine: when n has KILN_PACKED_ATTR, checks the tag (kind as wanted:
 * KILN_PACKED_MATMUL, or any Conv kind for KILN_PACKED_CONV_ROWS; width, sizes) against n's weight
 * constant (input 1: float32, 1-D, exactly the floats the tag describes), fills *tag and sets
 * *panels to panels of this kiln's width: the constant's data in place (*owned NULL), or, when they
 * were cut to another width, a repacked copy that the caller frees (*owned, 64-byte aligned); the
 * caller checks the tag against n's declared weights. Without the attribute *panels and *owned are
 * NULL. Fails with KILN_ERR_PARSE naming the node when the tag or the constant disagree,
 * KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_cpu_stored_panels(const kiln_graph *g, const kiln_node *n, kiln_packed_kind want,
                                   kiln_packed_tag *tag, const float **panels, float **owned);

/* The error of a prepare hook that cannot keep the panels kiln_cpu_stored_panels gave it:
 * KILN_ERR_OUT_OF_MEMORY when they fit the node's declared weights (fits), else KILN_ERR_PARSE
 * saying they do not (a corrupt engine). */
kiln_status kiln_cpu_stored_refused(bool fits);

/* Logs one warning when the cpu backend re-cuts any of g's stored weights at load (their panels
 * have another width than this kiln's kernels use), naming the ISA they were packed on. */
void kiln_cpu_log_repacked(const kiln_graph *g);

/* Writes one line to out saying how many weights of g are stored packed, their size and the
 * instruction set and panel widths they were packed for (and whether this CPU re-cuts them), or
 * that none are (for `kiln inspect`). */
void kiln_cpu_describe_packed(const kiln_graph *g, FILE *out);

#endif
