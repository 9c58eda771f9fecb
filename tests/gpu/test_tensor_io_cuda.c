/* test_tensor_io_cuda.c — the tensor API's I/O on the cuda backend: models/sample_cnn.onnx (batch 8,
 * fp32 and fp16) run from page-locked inputs (kiln_host_alloc) into page-locked and ordinary output
 * buffers gives the bits of a plain kiln_context_run; two contexts enqueued alternately over 8
 * different batches (each wait after the other context's enqueue, so uploads, computation and
 * downloads of consecutive batches overlap; kiln_context_query polled until the run is done) give
 * every batch's bits; a too small output buffer fails
 * the run with KILN_ERR_SHAPE. The time of the 8 batches run one by one and pipelined is printed (not
 * checked: it varies). Exits 77 (skipped) without a GPU or without the cuda backend.
 * usage: test_tensor_io_cuda [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "check.h"

#include "kiln/kiln.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#define BATCH 8
#define NBATCHES 8
#define IN_ELEMS (BATCH * 3 * 32 * 32)
#define OUT_ELEMS (BATCH * 10)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fill(float *x, unsigned seed) {
    for (int i = 0; i < IN_ELEMS; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
}

static kiln_status bind_input(kiln_context *c, const float *x) {
    int64_t dims[4] = {BATCH, 3, 32, 32};
    return kiln_context_set_input(c, "image", KILN_F32, 4, dims, x);
}

/* The output of a plain run of x (ordinary memory in and out) into out[OUT_ELEMS]. */
static kiln_status reference(kiln_context *c, const float *x, float *out) {
    KILN_TRY(bind_input(c, x));
    KILN_TRY(kiln_context_set_output_buffer(c, "probs", NULL, 0));
    KILN_TRY(kiln_context_run(c));
    kiln_tensor_desc d;
    const void *data;
    KILN_TRY(kiln_context_output(c, 0, &d, &data));
    memcpy(out, data, OUT_ELEMS * sizeof *out);
    return KILN_OK;
}

static void check_engine(kiln_engine *e, const char *label) {
    kiln_context *c[2];
    REQUIRE_OK(kiln_context_create(e, &c[0]));
    REQUIRE_OK(kiln_context_create(e, &c[1]));
    float *in[NBATCHES], *out[NBATCHES];
    static float want[NBATCHES][OUT_ELEMS];
    static float plain_in[IN_ELEMS];
    for (int b = 0; b < NBATCHES; b++) {
        REQUIRE_OK(kiln_host_alloc(IN_ELEMS * sizeof(float), (void **)&in[b]));
        REQUIRE_OK(kiln_host_alloc(OUT_ELEMS * sizeof(float), (void **)&out[b]));
        fill(plain_in, 1000u + (unsigned)b);
        memcpy(in[b], plain_in, sizeof plain_in);
        REQUIRE_OK(reference(c[0], plain_in, want[b]));
    }

    /* page-locked in and out, then an ordinary output buffer */
    double t0 = now_ms();
    for (int b = 0; b < NBATCHES; b++) {
        memset(out[b], 0, OUT_ELEMS * sizeof(float));
        CHECK_OK(bind_input(c[0], in[b]));
        CHECK_OK(kiln_context_set_output_buffer(c[0], "probs", out[b], OUT_ELEMS * sizeof(float)));
        CHECK_OK(kiln_context_run(c[0]));
        kiln_tensor_desc d;
        const void *data = NULL;
        CHECK_OK(kiln_context_output(c[0], 0, &d, &data));
        CHECKF(data == out[b] && !memcmp(out[b], want[b], sizeof want[b]), "%s: page-locked batch %d differs", label, b);
    }
    double one_by_one = now_ms() - t0;
    static float plain_out[OUT_ELEMS + 1];
    plain_out[OUT_ELEMS] = -3.0f;
    CHECK_OK(kiln_context_set_output_buffer(c[0], "probs", plain_out, sizeof plain_out));
    CHECK_OK(kiln_context_run(c[0]));
    CHECKF(!memcmp(plain_out, want[NBATCHES - 1], sizeof want[0]) && plain_out[OUT_ELEMS] == -3.0f,
           "%s: ordinary output buffer differs", label);

    /* two contexts, alternately: batch b waits for batch b - 2 on the same context */
    for (int b = 0; b < NBATCHES; b++) memset(out[b], 0, OUT_ELEMS * sizeof(float));
    t0 = now_ms();
    for (int b = 0; b < NBATCHES + 2; b++) {
        kiln_context *x = c[b % 2];
        if (b >= 2) {
            bool done = false;
            kiln_status q = KILN_OK;
            for (int spin = 0; spin < 10000000 && !done && q == KILN_OK; spin++) q = kiln_context_query(x, &done);
            CHECK_OK(q);
            CHECK(done);
            CHECK_OK(kiln_context_wait(x));
            CHECKF(!memcmp(out[b - 2], want[b - 2], sizeof want[0]), "%s: pipelined batch %d differs", label, b - 2);
        }
        if (b >= NBATCHES) continue;
        CHECK_OK(bind_input(x, in[b]));
        CHECK_OK(kiln_context_set_output_buffer(x, "probs", out[b], OUT_ELEMS * sizeof(float)));
        CHECK_OK(kiln_context_enqueue(x));
    }
    double pipelined = now_ms() - t0;
    printf("%s: %d batches of %d one by one %.2f ms, two contexts pipelined %.2f ms\n", label, NBATCHES, BATCH, one_by_one,
           pipelined);

    /* a buffer one row short fails the run, on the device path as on the cpu */
    CHECK_OK(kiln_context_set_output_buffer(c[0], "probs", out[0], (OUT_ELEMS - 10) * sizeof(float)));
    CHECK(kiln_context_run(c[0]) == KILN_ERR_SHAPE);
    CHECKF(strstr(kiln_last_error(), "'probs'") != NULL, "%s", kiln_last_error());

    kiln_context_free(c[0]);
    kiln_context_free(c[1]);
    for (int b = 0; b < NBATCHES; b++) {
        kiln_host_free(in[b]);
        kiln_host_free(out[b]);
    }
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/models/sample_cnn.onnx", root);
    for (int p = KILN_PRECISION_FP32; p <= KILN_PRECISION_FP16; p++) {
        kiln_build_options o = {.target = "cuda", .precision = (kiln_precision)p};
        kiln_engine *e;
        if (kiln_build_onnx(path, &o, &e) != KILN_OK) {
            const char *msg = kiln_last_error();
            if (strstr(msg, "cudaGetDeviceCount") || strstr(msg, "unknown target 'cuda'") || strstr(msg, "does not have")) {
                printf("skipped: %s\n", msg);
                return 77;
            }
            REQUIRE_OK(KILN_ERR_BACKEND);
        }
        check_engine(e, p == KILN_PRECISION_FP32 ? "fp32" : "fp16");
        kiln_engine_free(e);
    }
    return checks_report("test_tensor_io_cuda");
}
