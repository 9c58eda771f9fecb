/* test_cuda_int8_plan.c — the cuda backend's host side of an INT8 engine, which needs no GPU: the
 * sample CNN calibrated (`--int8`, two random batches) is placed on the device in fp32 and in fp16
 * with every node required to have a device kernel — its kiln.QConv / kiln.QMatMul layers
 * (quant_gemm.cu) and QuantizeLinear / DequantizeLinear (quant.cu) pass their build-time checks and
 * run on the device, integer values keep their types, and a layer's float output is in the engine's
 * float type (float16 in the fp16 engine: the layers outside int8 are 16-bit, not fp32); the same laid
 * out channels-last (the int8 convolutions as channels-last QConv) places entirely on the device too.
 * usage: test_cuda_int8_plan [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "backends/cuda/cuda_internal.h"
#include "check.h"
#include "core/npy.h"
#include "ir/quant_ops.h"
#include "runtime/engine_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes two random calibration batches of e's single input (a dynamic dim taken as 2) into dir. */
static void write_batches(const kiln_engine *e, const char *dir) {
    kiln_tensor_desc d;
    REQUIRE_OK(kiln_engine_input(e, 0, &d));
    int64_t dims[KILN_MAX_DIMS];
    for (int i = 0; i < d.ndim; i++) dims[i] = d.dims[i] > 0 ? d.dims[i] : 2;
    uint64_t rng = 12345;
    for (int k = 0; k < 2; k++) {
        kiln_tensor t = {0};
        REQUIRE_OK(kiln_tensor_alloc(&t, KILN_F32, d.ndim, dims));
        float *x = t.data;
        for (int64_t i = 0; i < kiln_tensor_numel(&t); i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((rng >> 40) & 0xffff) / 32768.0f - 1.0f;
        }
        char path[600];
        snprintf(path, sizeof path, "%s/batch%d.npy", dir, k);
        REQUIRE_OK(kiln_npy_write(path, &t));
        kiln_tensor_release(&t);
    }
}

static bool is_op(const kiln_node *n, const char *domain, const char *op) {
    return !strcmp(n->op_type, op) && !strcmp(n->domain ? n->domain : "", domain);
}

/* Places g on the device in precision p (every node must have a device kernel) and checks the
 * integer layers' and the Q/DQ nodes' placement and value types. */
static void check_precision(const kiln_graph *g, kiln_precision p, kiln_dtype float_type) {
    kiln_backend_engine *be;
    kiln_status s = kiln_cuda_engine_prepare(g, p, NULL, true, true, &be);
    CHECKF(s == KILN_OK, "precision %d: %s", (int)p, kiln_last_error());
    if (s != KILN_OK) return;
    int layers = 0, qdq = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const kiln_node *n = &g->nodes[i];
        bool layer = is_op(n, KILN_FUSED_DOMAIN, "QConv") || is_op(n, KILN_FUSED_DOMAIN, "QMatMul");
        bool q = is_op(n, "", "QuantizeLinear"), dq = is_op(n, "", "DequantizeLinear");
        if (!layer && !q && !dq) continue;
        CHECKF(be->kernels[i] != NULL, "%s '%s' has no device kernel", n->op_type, n->name);
        kiln_dtype in = be->dev_dtype[n->inputs[0]], out = be->dev_dtype[n->outputs[0]];
        if (layer) {
            kiln_quant_layer ql;
            CHECK_OK(kiln_quant_layer_read(n, &ql));
            CHECKF(in == KILN_I8 || in == KILN_U8, "%s '%s' reads %s", n->op_type, n->name, kiln_dtype_name(in));
            kiln_dtype want = ql.y_dtype == KILN_F32 ? float_type : ql.y_dtype;
            CHECKF(out == want, "%s '%s' writes %s, expected %s", n->op_type, n->name, kiln_dtype_name(out),
                   kiln_dtype_name(want));
            layers++;
        } else {
            CHECKF(q ? (in == float_type && out == KILN_I8) : out == float_type, "%s '%s': %s -> %s", n->op_type, n->name,
                   kiln_dtype_name(in), kiln_dtype_name(out));
            qdq++;
        }
    }
    CHECKF(layers == 4 && qdq > 0, "precision %d: %d integer layers, %d Q/DQ nodes", (int)p, layers, qdq);
    kiln_cuda_engine_free(be);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char model[4096], dir[] = "/tmp/kiln_test_cuda_int8_XXXXXX";
    snprintf(model, sizeof model, "%s/models/sample_cnn.onnx", root);
    REQUIRE_OK(mkdtemp(dir) ? KILN_OK : KILN_ERR_IO);
    kiln_engine *fp32;
    REQUIRE_OK(kiln_build_onnx(model, NULL, &fp32));
    write_batches(fp32, dir);
    kiln_engine_free(fp32);
    kiln_build_options o = {.target = "cpu", .int8 = true, .calib_dir = dir};
    kiln_engine *e;
    REQUIRE_OK(kiln_build_onnx(model, &o, &e));
    check_precision(e->g, KILN_PRECISION_FP32, KILN_F32);
    check_precision(e->g, KILN_PRECISION_FP16, KILN_F16);
    kiln_engine_free(e);
    /* laid out channels-last, as a 16-bit cuda build does: the integer layers, their int8 Transposes
     * and channel Pad, the QuantizeLinears between regions all on the device */
    o.channels_last = KILN_SWITCH_ON;
    REQUIRE_OK(kiln_build_onnx(model, &o, &e));
    int laid_out = 0;
    for (int i = 0; i < e->g->nnodes; i++)
        laid_out += !strcmp(e->g->nodes[i].op_type, "QConv") && kiln_attr_int(&e->g->nodes[i], "channels_last", 0) == 1;
    CHECKF(laid_out > 0, "channels-last build: no QConv laid out");
    check_precision(e->g, KILN_PRECISION_FP16, KILN_F16);
    kiln_engine_free(e);
    for (int k = 0; k < 2; k++) {
        char path[600];
        snprintf(path, sizeof path, "%s/batch%d.npy", dir, k);
        unlink(path);
    }
    rmdir(dir);
    return checks_report("test_cuda_int8_plan");
}
