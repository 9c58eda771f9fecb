/* test_tensor_io.c — the tensor API's I/O additions on the cpu backend: kiln_host_alloc / free,
 * caller-owned output buffers (results equal to the context's own, too small buffers refused with the
 * bytes named, at bind time for static outputs and at run time for dynamic ones), enqueue / query /
 * wait semantics (kiln_context_run = enqueue + wait, misuse refused), and the ranges of every profile of an
 * engine built with profiles. Usage: test_tensor_io SOURCE_DIR */
#include "check.h"

#include "kiln/kiln.h"

#include <stdint.h>
#include <string.h>

static void test_host_memory(void) {
    void *p = NULL;
    CHECK_OK(kiln_host_alloc(1000, &p));
    CHECK(p != NULL && (uintptr_t)p % 256 == 0);
    if (p) memset(p, 0xab, 1000); /* every byte is usable (ASan checks the bounds) */
    kiln_host_free(p);
    kiln_host_free(NULL);
    CHECK(kiln_host_alloc(0, &p) == KILN_ERR_INVALID_ARGUMENT && p == NULL);
    CHECK(kiln_host_alloc(SIZE_MAX, &p) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_host_alloc(16, NULL) == KILN_ERR_INVALID_ARGUMENT);
}

/* The static engine onnx_external.onnx: x float[2,3] -> y float[2,4]. */
static void test_static_outputs(const char *src) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/onnx_external.onnx", src);
    kiln_engine *e;
    REQUIRE_OK(kiln_build_onnx(path, NULL, &e));
    kiln_context *c;
    REQUIRE_OK(kiln_context_create(e, &c));
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {2, 3};
    REQUIRE_OK(kiln_context_set_input(c, "x", KILN_F32, 2, dims, x));
    REQUIRE_OK(kiln_context_run(c));
    kiln_tensor_desc d;
    const void *own;
    REQUIRE_OK(kiln_context_output(c, 0, &d, &own));
    float want[8];
    memcpy(want, own, sizeof want);

    float small[7], buf[9];
    CHECK(kiln_context_set_output_buffer(c, "y", small, sizeof small) == KILN_ERR_SHAPE);
    CHECKF(strstr(kiln_last_error(), "'y'") && strstr(kiln_last_error(), "32 bytes") && strstr(kiln_last_error(), "28 bytes"),
           "%s", kiln_last_error());
    CHECK(kiln_context_set_output_buffer(c, "nope", buf, sizeof buf) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "'y'") != NULL, "the message lists the outputs: %s", kiln_last_error());
    CHECK_OK(kiln_context_set_output_buffer(c, "y", buf, sizeof buf)); /* larger than needed is fine */
    CHECK(kiln_context_output(c, 0, &d, &own) == KILN_ERR_INVALID_ARGUMENT); /* rebinding drops the outputs */

    /* enqueue / wait: wait before enqueue, a second enqueue and outputs while in flight are refused */
    CHECK(kiln_context_wait(c) == KILN_ERR_INVALID_ARGUMENT);
    bool done = false;
    CHECK(kiln_context_query(c, &done) == KILN_ERR_INVALID_ARGUMENT);
    buf[8] = -7.0f;
    CHECK_OK(kiln_context_enqueue(c));
    CHECK_OK(kiln_context_query(c, &done));
    CHECK(done); /* the cpu backend runs within the enqueue */
    CHECK(kiln_context_enqueue(c) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "kiln_context_wait") != NULL, "%s", kiln_last_error());
    CHECK(kiln_context_output(c, 0, &d, &own) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_context_set_output_buffer(c, "y", NULL, 0) == KILN_ERR_INVALID_ARGUMENT);
    CHECK_OK(kiln_context_wait(c));
    CHECK(kiln_context_wait(c) == KILN_ERR_INVALID_ARGUMENT);
    CHECK_OK(kiln_context_output(c, 0, &d, &own));
    CHECK(own == buf && d.ndim == 2 && d.dims[0] == 2 && d.dims[1] == 4);
    CHECK(!memcmp(buf, want, sizeof want));
    CHECK(buf[8] == -7.0f); /* nothing written past the output */

    /* kiln_context_run writes the buffer too; unbinding returns to the context's memory */
    memset(buf, 0, sizeof buf);
    CHECK_OK(kiln_context_run(c));
    CHECK(!memcmp(buf, want, sizeof want));
    CHECK_OK(kiln_context_set_output_buffer(c, "y", NULL, 0));
    CHECK_OK(kiln_context_run(c));
    CHECK_OK(kiln_context_output(c, 0, &d, &own));
    CHECK(own != buf && !memcmp(own, want, sizeof want));
    CHECK(kiln_engine_num_profiles(e) == 0);
    kiln_input_range r;
    CHECK(kiln_engine_profile_range(e, 0, 0, &r) == KILN_ERR_INVALID_ARGUMENT);
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* sample_cnn.onnx (image float[batch,3,32,32] -> probs float[batch,10]) built with two profiles. */
static void test_profiles_and_dynamic_outputs(const char *src) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/sample_cnn.onnx", src);
    kiln_input_range ranges[2] = {
        {0, "image", 4, {1, 3, 32, 32}, {4, 3, 32, 32}, {8, 3, 32, 32}},
        {1, "image", 4, {9, 3, 32, 32}, {12, 3, 32, 32}, {16, 3, 32, 32}},
    };
    kiln_build_options opts = {.target = "cpu", .ranges = ranges, .nranges = 2};
    kiln_engine *e;
    REQUIRE_OK(kiln_build_onnx(path, &opts, &e));
    CHECK(kiln_engine_num_profiles(e) == 2);
    for (int p = 0; p < 2; p++) {
        kiln_input_range r;
        CHECK_OK(kiln_engine_profile_range(e, p, 0, &r));
        CHECK(r.profile == p && r.input && !strcmp(r.input, "image") && r.ndim == 4);
        CHECK(!memcmp(r.min, ranges[p].min, 4 * sizeof *r.min) && !memcmp(r.opt, ranges[p].opt, 4 * sizeof *r.opt) &&
              !memcmp(r.max, ranges[p].max, 4 * sizeof *r.max));
    }
    kiln_input_range r;
    CHECK(kiln_engine_profile_range(e, 2, 0, &r) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "profile 2") != NULL, "%s", kiln_last_error());
    CHECK(kiln_engine_profile_range(e, 0, 1, &r) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_engine_profile_range(e, -1, 0, &r) == KILN_ERR_INVALID_ARGUMENT);

    kiln_context *c;
    REQUIRE_OK(kiln_context_create(e, &c));
    static float image[10 * 3 * 32 * 32];
    for (size_t i = 0; i < sizeof image / sizeof *image; i++) image[i] = (float)((i * 7919) % 255) / 255.0f;
    int64_t dims[4] = {10, 3, 32, 32};
    REQUIRE_OK(kiln_context_set_input(c, "image", KILN_F32, 4, dims, image));
    REQUIRE_OK(kiln_context_run(c));
    CHECK(kiln_context_profile(c) == 1);
    kiln_tensor_desc d;
    const void *own;
    REQUIRE_OK(kiln_context_output(c, 0, &d, &own));
    float want[100];
    memcpy(want, own, sizeof want);

    void *buf = NULL;
    REQUIRE_OK(kiln_host_alloc(16 * 10 * sizeof(float), &buf));
    CHECK_OK(kiln_context_set_output_buffer(c, "probs", buf, 16 * 10 * sizeof(float)));
    CHECK_OK(kiln_context_enqueue(c));
    CHECK_OK(kiln_context_wait(c));
    CHECK_OK(kiln_context_output(c, 0, &d, &own));
    CHECK(own == buf && d.dims[0] == 10 && !memcmp(buf, want, sizeof want));
    /* a buffer for batch 9 cannot take batch 10: refused at run time, naming the bytes */
    CHECK_OK(kiln_context_set_output_buffer(c, "probs", buf, 9 * 10 * sizeof(float)));
    CHECK(kiln_context_run(c) == KILN_ERR_SHAPE);
    CHECKF(strstr(kiln_last_error(), "'probs'") && strstr(kiln_last_error(), "400 bytes") &&
           strstr(kiln_last_error(), "360 bytes"), "%s", kiln_last_error());
    CHECK(kiln_context_output(c, 0, &d, &own) == KILN_ERR_INVALID_ARGUMENT);
    dims[0] = 9; /* the same buffer holds batch 9 */
    CHECK_OK(kiln_context_set_input(c, "image", KILN_F32, 4, dims, image));
    CHECK_OK(kiln_context_run(c));
    CHECK(kiln_context_profile(c) == 1);
    CHECK_OK(kiln_context_output(c, 0, &d, &own));
    CHECK(own == buf && d.dims[0] == 9);
    for (int i = 0; i < 90; i++) CHECK_NEAR(((const float *)buf)[i], want[i], 1e-5);
    kiln_context_free(c);
    kiln_host_free(buf);
    kiln_engine_free(e);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_tensor_io SOURCE_DIR\n");
        return 2;
    }
    test_host_memory();
    test_static_outputs(argv[1]);
    test_profiles_and_dynamic_outputs(argv[1]);
    return checks_report("test_tensor_io");
}
