/* test_roundtrip.c — engine round trip: build -> run in memory; save -> load -> run; the outputs must
 * be bit-identical, for random inputs and every symbolic size given; a cpu engine ignores
 * kiln_engine_load_with's device override and a negative device is refused.
 * usage: test_roundtrip MODEL.onnx WORKDIR */
#include "kiln/kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, " [%s]\n", kiln_last_error());                                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct buffer {
    void *data;
    size_t bytes;
} buffer;

/* Binds random inputs (symbolic dims = sym_size) to c; returns the buffers (caller frees). */
static buffer *bind_random(kiln_engine *e, kiln_context *c, int64_t sym_size, unsigned seed) {
    int n = kiln_engine_num_inputs(e);
    buffer *bufs = calloc((size_t)n + 1, sizeof *bufs);
    srand(seed);
    for (int i = 0; i < n; i++) {
        kiln_tensor_desc d;
        CHECK(kiln_engine_input(e, i, &d) == KILN_OK, "input %d", i);
        int64_t dims[KILN_MAX_DIMS], numel = 1;
        for (int k = 0; k < d.ndim; k++) {
            dims[k] = d.dims[k] >= 0 ? d.dims[k] : sym_size;
            numel *= dims[k];
        }
        CHECK(d.dtype == KILN_F32, "round-trip model inputs are float32");
        bufs[i].bytes = (size_t)numel * sizeof(float);
        float *p = malloc(bufs[i].bytes + 1);
        for (int64_t k = 0; k < numel; k++) p[k] = (float)rand() / (float)RAND_MAX * 2.f - 1.f;
        bufs[i].data = p;
        CHECK(kiln_context_set_input(c, d.name, d.dtype, d.ndim, dims, p) == KILN_OK, "bind %s", d.name);
    }
    return bufs;
}

/* Runs e on seeded random inputs and returns copies of all outputs. */
static buffer *run_once(kiln_engine *e, int64_t sym_size, unsigned seed) {
    kiln_context *c;
    CHECK(kiln_context_create(e, &c) == KILN_OK, "context");
    buffer *in = bind_random(e, c, sym_size, seed);
    CHECK(kiln_context_run(c) == KILN_OK, "run");
    int n = kiln_engine_num_outputs(e);
    buffer *out = calloc((size_t)n + 1, sizeof *out);
    for (int i = 0; i < n; i++) {
        kiln_tensor_desc d;
        const void *data;
        CHECK(kiln_context_output(c, i, &d, &data) == KILN_OK, "output %d", i);
        int64_t numel = 1;
        for (int k = 0; k < d.ndim; k++) numel *= d.dims[k];
        out[i].bytes = (size_t)numel * kiln_dtype_size(d.dtype);
        out[i].data = malloc(out[i].bytes + 1);
        memcpy(out[i].data, data, out[i].bytes);
    }
    for (int i = 0; i < kiln_engine_num_inputs(e); i++) free(in[i].data);
    free(in);
    kiln_context_free(c);
    return out;
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: test_roundtrip MODEL.onnx WORKDIR");
    char path[4096];
    mkdir(argv[2], 0777); /* may exist */
    snprintf(path, sizeof path, "%s/roundtrip.kiln", argv[2]);
    kiln_engine *built, *loaded;
    CHECK(kiln_build_onnx(argv[1], NULL, &built) == KILN_OK, "build %s", argv[1]);
    CHECK(kiln_engine_save(built, path) == KILN_OK, "save %s", path);
    CHECK(kiln_engine_load(path, &loaded) == KILN_OK, "load %s", path);
    /* a device override is for cuda engines: a cpu engine ignores it; a negative ordinal is refused */
    kiln_engine *moved;
    kiln_engine_load_options on3 = {.set_device = true, .device = 3}, negative = {.set_device = true, .device = -1};
    CHECK(kiln_engine_load_with(path, &on3, &moved) == KILN_OK, "load %s with device 3: %s", path, kiln_last_error());
    kiln_engine_free(moved);
    CHECK(kiln_engine_load_with(path, &negative, &moved) == KILN_ERR_INVALID_ARGUMENT && !moved &&
          strstr(kiln_last_error(), "device -1 is not a GPU ordinal"), "device -1: %s", kiln_last_error());
    CHECK(kiln_engine_num_inputs(built) == kiln_engine_num_inputs(loaded), "input count");
    CHECK(kiln_engine_num_outputs(built) == kiln_engine_num_outputs(loaded), "output count");
    int checked = 0;
    for (int64_t sym = 1; sym <= 3; sym++) {
        buffer *a = run_once(built, sym, (unsigned)sym), *b = run_once(loaded, sym, (unsigned)sym);
        for (int i = 0; i < kiln_engine_num_outputs(built); i++) {
            CHECK(a[i].bytes == b[i].bytes, "output %d size %zu vs %zu", i, a[i].bytes, b[i].bytes);
            CHECK(a[i].bytes > 0, "output %d is empty", i);
            CHECK(!memcmp(a[i].data, b[i].data, a[i].bytes), "output %d differs after the round trip (size %lld)", i,
                  (long long)sym);
            checked++;
            free(a[i].data);
            free(b[i].data);
        }
        free(a);
        free(b);
    }
    kiln_engine_free(built);
    kiln_engine_free(loaded);
    remove(path);
    printf("round trip: %d outputs bit-identical over 3 symbolic sizes\n", checked);
    return 0;
}
