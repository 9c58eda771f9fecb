/* einsum_eq.h — parsing of an Einsum equation ("bij,bjk->bik", "...ii->...i", "i,i") into label ids
 * per operand dimension, and the label sizes / strides of one call; shared by Einsum's shape inference
 * and its kernels (CPU and CUDA).
 *
 * Label ids: 'A'..'Z' are 0..25 and 'a'..'z' are 26..51 (so id order is ASCII order); the
 * dimensions an ellipsis stands for are 52 .. 52 + nell - 1, right-aligned across operands (numpy
 * broadcasting: an operand whose ellipsis covers fewer dims uses the last ones). */
#ifndef KILN_IR_EINSUM_EQ_H
#define KILN_IR_EINSUM_EQ_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stdint.h>

#define KILN_EINSUM_MAX_INPUTS 16
#define KILN_EINSUM_LETTERS 52
#define KILN_EINSUM_MAX_LABELS (KILN_EINSUM_LETTERS + KILN_MAX_DIMS)

typedef struct kiln_einsum_eq {
    int ninputs;
    int in_rank[KILN_EINSUM_MAX_INPUTS];
    int in_label[KILN_EINSUM_MAX_INPUTS][KILN_MAX_DIMS]; /* label id of each operand dim */
    int out_rank;                                      /* -1 when an operand rank was unknown */
    int out_label[KILN_MAX_DIMS];
    int nell;                                          /* dims covered by the ellipsis (max over operands) */
} kiln_einsum_eq;

/* Parses equation for ninputs operands of the given ranks. A rank of -1 (unknown) is accepted: the
 * operand's rank is then taken from its term when the term has no ellipsis, otherwise the result
 * has out_rank = -1 (and in_rank -1 for that operand). Fails with KILN_ERR_INVALID_ARGUMENT naming
 * what is wrong (bad character, term count, rank mismatch, output label not in any input,
 * repeated output label, ...), or KILN_ERR_UNSUPPORTED for more than KILN_EINSUM_MAX_INPUTS operands
 * or an output rank above KILN_MAX_DIMS. */
kiln_status kiln_einsum_parse(const char *equation, int ninputs, const int *ranks, kiln_einsum_eq *eq);

/* The label sizes and per-operand label strides of one call: out_size/out_stride[k] per output dim,
 * con_size/con_stride[k] per contraction label (a label in no output dim, ascending ids). A label
 * repeated in one operand adds its strides (a diagonal); a size-1 dim gets stride 0 (broadcast). */
typedef struct kiln_einsum_plan {
    int nin, nout, ncon;
    int64_t out_size[KILN_MAX_DIMS], con_size[KILN_EINSUM_MAX_LABELS];
    int64_t out_stride[KILN_EINSUM_MAX_INPUTS][KILN_MAX_DIMS];
    int64_t con_stride[KILN_EINSUM_MAX_INPUTS][KILN_EINSUM_MAX_LABELS];
} kiln_einsum_plan;

/* Sizes every label of eq from the operand dims (dims[k] has eq->in_rank[k] entries; 1 broadcasts)
 * and derives the strides into p. Fails with KILN_ERR_SHAPE, naming op, when a label has two sizes. */
kiln_status kiln_einsum_plan_build(const char *op, const kiln_einsum_eq *eq, const int64_t *const *dims,
                                   kiln_einsum_plan *p);

/* Label l as the equation writes it ("i", or "...#2" for the third ellipsis dim), in buf. */
const char *kiln_einsum_label_name(int l, char buf[16]);

#endif
