/* nn_window.h — sliding-window geometry shared by the shape inference (infer_nn.c) and the CPU
 * kernels of Conv, ConvTranspose and the pooling ops: parsing of kernel_shape, strides, dilations,
 * pads, auto_pad, ceil_mode, output_padding and output_shape, and the output size and effective
 * padding of each spatial dimension. One definition keeps build-time shapes and run-time shapes
 * identical. */
#ifndef KILN_IR_NN_WINDOW_H
#define KILN_IR_NN_WINDOW_H

#include "ir/graph.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum kiln_auto_pad {
    KILN_AUTO_PAD_NOTSET = 0,
    KILN_AUTO_PAD_SAME_UPPER,
    KILN_AUTO_PAD_SAME_LOWER,
    KILN_AUTO_PAD_VALID,
} kiln_auto_pad;

typedef struct kiln_window {
    int nsp;                          /* number of spatial dimensions */
    bool has_kernel;                  /* kernel[] is known */
    int64_t kernel[KILN_MAX_DIMS];
    int64_t stride[KILN_MAX_DIMS];
    int64_t dilation[KILN_MAX_DIMS];
    int64_t pads[2 * KILN_MAX_DIMS];  /* ONNX order: begin_0..begin_{nsp-1}, end_0..end_{nsp-1} */
    int64_t out_pad[KILN_MAX_DIMS];   /* ConvTranspose output_padding (0 otherwise) */
    bool has_out_shape;               /* ConvTranspose output_shape given */
    int64_t out_shape[KILN_MAX_DIMS];
    kiln_auto_pad auto_pad;
    bool ceil_mode;                   /* pooling only */
} kiln_window;

/* Reads n's window attributes for nsp spatial dimensions (1 <= nsp <= KILN_MAX_DIMS - 2).
 * weight_kernel: the kernel's spatial size taken from a weight tensor, or NULL when not known; the
 * kernel_shape attribute, when present, must agree with it. Fails with KILN_ERR_INVALID_ARGUMENT
 * naming the attribute when a list has the wrong length or a value is out of range. */
kiln_status kiln_window_parse(const kiln_node *n, int nsp, const int64_t *weight_kernel, kiln_window *w);

/* Conv and pooling: output size of spatial dimension i for input size in, and the padding actually
 * applied before/after it (auto_pad resolved; ceil_mode honoured). Fails with KILN_ERR_SHAPE when
 * the (dilated) kernel does not fit the padded input. Requires w->has_kernel. */
kiln_status kiln_window_out(const kiln_window *w, int i, int64_t in, int64_t *out, int64_t *pad_begin,
                            int64_t *pad_end);

/* ConvTranspose: output size of spatial dimension i for input size in, and the padding cropped
 * from the start of the full transposed result (output_shape / auto_pad resolved as the ONNX spec
 * states, negative total padding extending the output at the end). Requires w->has_kernel. */
kiln_status kiln_window_out_transpose(const kiln_window *w, int i, int64_t in, int64_t *out,
                                      int64_t *pad_begin);

/* The output shape of n, a convolution of x [N, C, D1..Dk] by w [M, C/group, k1..kk] under n's
 * window attributes and group (Conv and its quantized forms): *rank is -1 when neither rank is
 * known, else out[0..rank) holds [N, M, O1..Ok] with unknown dims where the inputs leave them
 * unknown. Fails with KILN_ERR_SHAPE / KILN_ERR_INVALID_ARGUMENT, naming n->op_type, when ranks,
 * group, channel counts or windows disagree. */
kiln_status kiln_window_conv_shape(const kiln_node *n, const kiln_value *x, const kiln_value *w, int *rank,
                                   kiln_dim out[KILN_MAX_DIMS]);

#endif
