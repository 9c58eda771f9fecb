/* test_bench.c — tests of src/bench/ that need no engine run: the FLOP / byte estimate per op
 * (MatMul, Gemm with transA, grouped Conv, ConvTranspose, Attention, unknown dims, other ops), the
 * diagnosis rules (each bound and the warnings), the statistics of a known sample, --sweep parsing,
 * the output comparison of a sweep, throttle-reason text, and the ceilings file (two devices kept,
 * one replaced, a missing file, a malformed one). */
#include "bench/bench.h"

#include "check.h"
#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A value with static dims (ndim < 0: unknown rank). */
static kiln_value val(kiln_dtype t, int ndim, const int64_t *dims) {
    kiln_value v = {.dtype = t, .ndim = ndim, .producer = -1};
    for (int i = 0; i < ndim; i++) v.dims[i] = kiln_dim_static(dims[i]);
    return v;
}

static void test_cost(void) {
    kiln_value vals[8];
    int in[4] = {0, 1, 2, -1}, out[1] = {3};
    kiln_node n = {.name = "n", .op_type = "MatMul", .domain = "", .ninputs = 2, .noutputs = 1, .inputs = in, .outputs = out};
    double flops, bytes;
    /* MatMul [2,8,16] x [16,32] -> [2,8,32]: 2 * 512 * 16 */
    vals[0] = val(KILN_F32, 3, (int64_t[]){2, 8, 16});
    vals[1] = val(KILN_F32, 2, (int64_t[]){16, 32});
    vals[3] = val(KILN_F32, 3, (int64_t[]){2, 8, 32});
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(flops, 2.0 * 512 * 16, 0);
    CHECK_NEAR(bytes, 4.0 * (256 + 512 + 512), 0);
    /* fp16 values count 2 bytes */
    vals[0].dtype = vals[1].dtype = vals[3].dtype = KILN_F16;
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(bytes, 2.0 * (256 + 512 + 512), 0);
    /* Gemm with transA: A [K=10, M=4], B [10, 6] -> [4, 6]: 2 * 24 * 10; the bias is read too */
    kiln_attr ta = {.name = "transA", .type = KILN_ATTR_INT, .i = 1};
    n.op_type = "Gemm";
    n.nattrs = 1;
    n.attrs = &ta;
    n.ninputs = 3;
    vals[0] = val(KILN_F32, 2, (int64_t[]){10, 4});
    vals[1] = val(KILN_F32, 2, (int64_t[]){10, 6});
    vals[2] = val(KILN_F32, 1, (int64_t[]){6});
    vals[3] = val(KILN_F32, 2, (int64_t[]){4, 6});
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(flops, 2.0 * 24 * 10, 0);
    CHECK_NEAR(bytes, 4.0 * (40 + 60 + 6 + 24), 0);
    n.nattrs = 0;
    n.attrs = NULL;
    /* grouped FusedConv: W [16, 4 (=8/2), 3, 3], Y [1, 16, 10, 10]: 2 * 1600 * 36 */
    n.op_type = "FusedConv";
    n.domain = "kiln";
    n.ninputs = 2;
    vals[0] = val(KILN_F32, 4, (int64_t[]){1, 8, 12, 12});
    vals[1] = val(KILN_F32, 4, (int64_t[]){16, 4, 3, 3});
    vals[3] = val(KILN_F32, 4, (int64_t[]){1, 16, 10, 10});
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(flops, 2.0 * 1600 * 36, 0);
    /* an ONNX op named like a fused one in the wrong domain is not counted */
    n.domain = "";
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(flops, 0, 0);
    /* ConvTranspose: X [1, 4, 5, 5], W [4, 2, 3, 3]: 2 * 100 * 18 */
    n.op_type = "ConvTranspose";
    vals[0] = val(KILN_F32, 4, (int64_t[]){1, 4, 5, 5});
    vals[1] = val(KILN_F32, 4, (int64_t[]){4, 2, 3, 3});
    vals[3] = val(KILN_F32, 4, (int64_t[]){1, 2, 7, 7});
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(flops, 2.0 * 100 * 18, 0);
    /* Attention: Q [2, 4, 8, 16], K [2, 4, 12, 16], V [2, 4, 12, 32] -> O [2, 4, 8, 32]:
     * 2 * (2*4*8) * 12 * (16 + 32) */
    int ain[3] = {0, 1, 2};
    kiln_node att = {.name = "a", .op_type = "Attention", .domain = "kiln", .ninputs = 3, .noutputs = 1, .inputs = ain, .outputs = out};
    vals[0] = val(KILN_F32, 4, (int64_t[]){2, 4, 8, 16});
    vals[1] = val(KILN_F32, 4, (int64_t[]){2, 4, 12, 16});
    vals[2] = val(KILN_F32, 4, (int64_t[]){2, 4, 12, 32});
    vals[3] = val(KILN_F32, 4, (int64_t[]){2, 4, 8, 32});
    kiln_bench_node_cost(&att, vals, &flops, &bytes);
    CHECK_NEAR(flops, 2.0 * 64 * 12 * 48, 0);
    /* an unknown (symbolic) dim: no FLOPs, and that value's bytes are not counted */
    vals[3].dims[0] = (kiln_dim){-1, 1};
    kiln_bench_node_cost(&att, vals, &flops, &bytes);
    CHECK_NEAR(flops, 0, 0);
    CHECK_NEAR(bytes, 4.0 * (1024 + 1536 + 3072), 0);
    /* other ops: bytes only */
    n.op_type = "Relu";
    n.ninputs = 1;
    vals[0] = val(KILN_F32, 1, (int64_t[]){100});
    vals[3] = val(KILN_F32, 1, (int64_t[]){100});
    kiln_bench_node_cost(&n, vals, &flops, &bytes);
    CHECK_NEAR(flops, 0, 0);
    CHECK_NEAR(bytes, 800, 0);
}

static void test_diagnose(void) {
    kiln_bench_diagnosis d;
    /* transfers: 0.6 + 0.5 >= 1.0 */
    kiln_bench_diag_input in = {.enqueue_ms = 0.1, .h2d_ms = 0.6, .compute_ms = 1.0, .d2h_ms = 0.5, .flops = 1e9, .bytes = 1e8,
                                .ceil_gbps = 1000, .ceil_tflops = 100, .gpu = true, .graphs_available = true, .graphs_on = true};
    kiln_bench_diagnose(&in, &d);
    CHECK(d.bound == KILN_BOUND_TRANSFERS);
    CHECK(strstr(d.text, "--no-transfers") != NULL);
    CHECK(!strcmp(kiln_bench_bound_name(d.bound), "transfers"));
    /* enqueue: 0.9 > 0.8 x 1.0, and graphs off suggests --graph on */
    in.h2d_ms = in.d2h_ms = 0.1;
    in.enqueue_ms = 0.9;
    in.graphs_on = false;
    kiln_bench_diagnose(&in, &d);
    CHECK(d.bound == KILN_BOUND_ENQUEUE);
    CHECK(strstr(d.text, "--graph on") != NULL);
    /* memory: 1e8 B / 1 ms = 100 GB/s = 10 % of 1000; 1e9 FLOP / 1 ms = 1 TFLOP/s = 1 % of 100 */
    in.enqueue_ms = 0.1;
    in.graphs_on = true;
    kiln_bench_diagnose(&in, &d);
    CHECK(d.bound == KILN_BOUND_MEMORY);
    CHECK_NEAR(d.achieved_gbps, 100, 1e-9);
    CHECK_NEAR(d.frac_mem, 0.1, 1e-12);
    CHECK_NEAR(d.frac_compute, 0.01, 1e-12);
    /* compute: 5e10 FLOP / 1 ms = 50 TFLOP/s = 50 % */
    in.flops = 5e10;
    kiln_bench_diagnose(&in, &d);
    CHECK(d.bound == KILN_BOUND_COMPUTE);
    /* overhead: both under 10 % */
    in.flops = 1e9;
    in.bytes = 1e7;
    kiln_bench_diagnose(&in, &d);
    CHECK(d.bound == KILN_BOUND_OVERHEAD);
    /* unknown without ceilings; the CPU has no enqueue rule; an unstable compute time warns */
    kiln_bench_diag_input cpu = {.enqueue_ms = -1, .h2d_ms = -1, .d2h_ms = -1, .compute_ms = 2, .compute_cv = 0.05, .flops = 1e9, .bytes = 1e6};
    kiln_bench_diagnose(&cpu, &d);
    CHECK(d.bound == KILN_BOUND_UNKNOWN);
    CHECK(strstr(d.text, "--ceilings") != NULL);
    CHECK(d.nwarnings == 1 && strstr(d.warnings[0], "5.0 %") != NULL);
    CHECK_NEAR(d.achieved_tflops, 0.5, 1e-12); /* 1e9 FLOP in 2 ms */
    cpu.compute_ms = -1;
    kiln_bench_diagnose(&cpu, &d);
    CHECK(d.bound == KILN_BOUND_UNKNOWN && d.achieved_gbps < 0);
}

static void test_stats(void) {
    double x[10] = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
    kiln_bench_stats s;
    CHECK(kiln_bench_stats_of(x, 10, &s) == KILN_OK);
    CHECK(s.present && s.s.n == 10);
    CHECK_NEAR(s.s.median, 5.5, 0);
    CHECK_NEAR(s.p90, 9, 0);   /* rank ceil(9) = 9 */
    CHECK_NEAR(s.p95, 10, 0);  /* rank ceil(9.5) = 10 */
    CHECK_NEAR(s.p999, 10, 0);
    CHECK_NEAR(s.s.stddev, sqrt(8.25), 1e-12);
    CHECK(kiln_bench_stats_of(x, 0, &s) == KILN_OK && !s.present);
}

static void test_sweep_parse(void) {
    kiln_bench_sweep s;
    memset(&s, 0, sizeof s);
    CHECK(kiln_bench_sweep_parse(&s, "precision=fp32,fp16,bf16") == KILN_OK);
    CHECK(s.nprecisions == 3 && s.precisions[2] == KILN_PRECISION_BF16);
    CHECK(kiln_bench_sweep_parse(&s, "batch=1,8,64") == KILN_OK);
    CHECK(s.nbatches == 3 && s.batches[2] == 64);
    CHECK(kiln_bench_sweep_parse(&s, "streams=1,2") == KILN_OK);
    CHECK(s.nstreams == 2 && s.streams[1] == 2);
    CHECK(kiln_bench_sweep_parse(&s, "batch=2") == KILN_ERR_INVALID_ARGUMENT); /* twice */
    CHECK(strstr(kiln_last_error(), "twice") != NULL);
    memset(&s, 0, sizeof s);
    CHECK(kiln_bench_sweep_parse(&s, "colour=red") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "colour") != NULL);
    CHECK(kiln_bench_sweep_parse(&s, "precision=fp4") == KILN_ERR_INVALID_ARGUMENT);
    memset(&s, 0, sizeof s);
    CHECK(kiln_bench_sweep_parse(&s, "precision=fp32,int8,fp8") == KILN_OK);
    CHECK(s.nprecisions == 3 && s.precisions[1] == KILN_PRECISION_INT8 && s.precisions[2] == KILN_PRECISION_FP8);
    CHECK(kiln_bench_sweep_parse(&s, "batch=0") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_bench_sweep_parse(&s, "batch=1,,2") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_bench_sweep_parse(&s, "streams=300") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_bench_sweep_parse(&s, "batch") == KILN_ERR_INVALID_ARGUMENT);
    memset(&s, 0, sizeof s);
    CHECK(kiln_bench_sweep_parse(&s, "batch=1,2,3,4,5,6,7,8") == KILN_OK);
    CHECK(kiln_bench_sweep_parse(&s, "streams=1,2,3,4,5,6,7,8") == KILN_OK);
    CHECK(kiln_bench_sweep_parse(&s, "precision=fp32,fp16") == KILN_ERR_INVALID_ARGUMENT); /* 128 configurations */
}

static void test_compare(void) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2.5f, 3, -8};
    int64_t dims[1] = {4};
    kiln_tensor ta, tb;
    kiln_tensor_view(&ta, KILN_F32, 1, dims, a);
    kiln_tensor_view(&tb, KILN_F32, 1, dims, b);
    double abs_err, rel_err;
    kiln_bench_compare_outputs(&ta, &tb, 1, &abs_err, &rel_err);
    CHECK_NEAR(abs_err, 12, 0);
    CHECK_NEAR(rel_err, 12.0 / 8, 0);
    int64_t ints[2] = {1, 2};
    int64_t d2[1] = {2};
    kiln_tensor_view(&ta, KILN_I64, 1, d2, ints);
    kiln_bench_compare_outputs(&ta, &ta, 1, &abs_err, &rel_err);
    CHECK(isnan(abs_err) && isnan(rel_err)); /* no float output */
}

/* The profile by op: timed layers summed per op, largest first (ties in first-appearance order),
 * untimed layers left out, shares of the timed total, and cap respected. */
static void test_op_totals(void) {
    kiln_bench_layer layers[6] = {
        {.op = "QMatMul", .ms = 0.5}, {.op = "QuantizeLinear", .ms = 0.25}, {.op = "Shape", .ms = -1},
        {.op = "QMatMul", .ms = 1.0}, {.op = "LayerNormalization", .ms = 0.25}, {.op = "QuantizeLinear", .ms = 0.0},
    };
    kiln_bench_result r = {0};
    r.layers = layers;
    r.nlayers = 6;
    kiln_bench_op_total rows[6];
    int n = kiln_bench_op_totals(&r, rows, 6);
    CHECK(n == 3);
    CHECK(!strcmp(rows[0].op, "QMatMul") && rows[0].layers == 2);
    CHECK_NEAR(rows[0].ms, 1.5, 1e-12);
    CHECK_NEAR(rows[0].share, 0.75, 1e-12);
    CHECK(!strcmp(rows[1].op, "QuantizeLinear") && rows[1].layers == 2 && !strcmp(rows[2].op, "LayerNormalization"));
    CHECK_NEAR(rows[1].share, 0.125, 1e-12);
    CHECK(kiln_bench_op_totals(&r, rows, 1) == 1 && !strcmp(rows[0].op, "QMatMul"));
}

static void test_throttle(void) {
    char buf[256];
    kiln_bench_throttle_text(0, buf, sizeof buf);
    CHECK(!strcmp(buf, "none"));
    kiln_bench_throttle_text(0x4 | 0x40, buf, sizeof buf);
    CHECK(!strcmp(buf, "sw_power_cap, hw_thermal_slowdown"));
}

static void test_ceilings_file(void) {
    char dir[] = "/tmp/kiln-test-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        failures++;
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/sub/ceilings.json", dir);
    kiln_bench_ceilings c = {.known = true, .mem_gbps = 100, .tflops_fp32 = 2, .tflops_fp16 = 0};
    snprintf(c.device, sizeof c.device, "CPU \"A\"");
    snprintf(c.measured_at, sizeof c.measured_at, "2026-01-01T00:00:00Z");
    kiln_bench_ceilings got;
    CHECK(kiln_bench_ceilings_load(path, "CPU \"A\"", &got) == KILN_OK && !got.known); /* no file yet */
    CHECK(kiln_bench_ceilings_save(path, &c) == KILN_OK);
    kiln_bench_ceilings g2 = {.known = true, .mem_gbps = 3000, .tflops_fp32 = 50, .tflops_fp16 = 700};
    snprintf(g2.device, sizeof g2.device, "NVIDIA H200");
    CHECK(kiln_bench_ceilings_save(path, &g2) == KILN_OK);
    c.mem_gbps = 120; /* replaces A's entry, keeps the GPU's */
    CHECK(kiln_bench_ceilings_save(path, &c) == KILN_OK);
    CHECK(kiln_bench_ceilings_load(path, "CPU \"A\"", &got) == KILN_OK);
    CHECK(got.known && got.mem_gbps == 120 && got.tflops_fp32 == 2 && !strcmp(got.measured_at, "2026-01-01T00:00:00Z"));
    CHECK(kiln_bench_ceilings_load(path, "NVIDIA H200", &got) == KILN_OK);
    CHECK(got.known && got.tflops_fp16 == 700);
    CHECK(kiln_bench_ceilings_load(path, "other", &got) == KILN_OK && !got.known);
    FILE *f = fopen(path, "w");
    fputs("{\"devices\": [", f);
    fclose(f);
    CHECK(kiln_bench_ceilings_load(path, "CPU \"A\"", &got) == KILN_ERR_PARSE);
    unlink(path);
    snprintf(path, sizeof path, "%s/sub", dir);
    rmdir(path);
    rmdir(dir);
}

int main(void) {
    test_cost();
    test_diagnose();
    test_stats();
    test_sweep_parse();
    test_compare();
    test_op_totals();
    test_throttle();
    test_ceilings_file();
    return checks_report("test_bench");
}
