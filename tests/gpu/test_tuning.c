/* test_tuning.c — auto-tuning on the GPU (kiln_build_options.tuning_level, .timing_cache): the sample
 * CNN (Conv, Gemm) and the BERT export (MatMul, Gemm) are built for cuda in fp16 at level 0, then
 * twice at level 2 with one timing cache. The first tuned build must time tactics and tune layers;
 * the second must time nothing (every layer a cache hit); the second engine, saved and reloaded,
 * must give exactly the first's outputs; tuned engines must agree with the CPU backend. Prints the
 * build time of each level. Then the bounds: the sample CNN without a profile (a dynamic batch) is
 * tuned at batch 1; with a 1 ms build budget it tunes nothing, says so, and still runs as the CPU
 * does; with two profiles it is tuned once per profile, and runs in each agree with the CPU. Exits 77 ("skipped: no GPU") without a GPU or the cuda backend.
 * usage: test_tuning [REPO_DIR] */
#include "kiln/kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

#define MAX_IO 8

/* Host tensors: the inputs or outputs of one run (float32 / int64 only: what the two models use). */
typedef struct io {
    int n;
    kiln_dtype dtype[MAX_IO];
    int ndim[MAX_IO];
    int64_t dims[MAX_IO][KILN_MAX_DIMS];
    size_t bytes[MAX_IO];
    void *data[MAX_IO];
} io;

static void io_free(io *x) {
    for (int i = 0; i < x->n; i++) free(x->data[i]);
    memset(x, 0, sizeof *x);
}

typedef struct model {
    const char *file;
    const char *inputs[2]; /* inputs given the profile ranges below (NULL: none) */
    int64_t min[2], opt[2], max[2]; /* the ranges of dims 0 and 1, shared by the inputs (the CNN's image:
                                     * dim 0 only, its other dims are static) */
} model;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Inputs of e: symbolic dim 0 = 2 (batch), other symbolic dims = 16; floats in [-1, 1), *mask* ones,
 * other ints ids in [0, 100). */
static void make_inputs(const kiln_engine *e, io *out) {
    memset(out, 0, sizeof *out);
    uint64_t s = 0x9E3779B97F4A7C15ULL;
    out->n = kiln_engine_num_inputs(e);
    for (int i = 0; i < out->n && i < MAX_IO; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        out->dtype[i] = d.dtype;
        out->ndim[i] = d.ndim;
        int64_t n = 1;
        for (int k = 0; k < d.ndim; k++) {
            out->dims[i][k] = d.dims[k] >= 0 ? d.dims[k] : k == 0 ? 2 : 16;
            n *= out->dims[i][k];
        }
        out->bytes[i] = (size_t)n * kiln_dtype_size(d.dtype);
        out->data[i] = calloc(1, out->bytes[i] + 1);
        for (int64_t j = 0; j < n; j++) {
            uint64_t r = next_rand(&s);
            if (d.dtype == KILN_F32) ((float *)out->data[i])[j] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            else if (d.dtype == KILN_I64) ((int64_t *)out->data[i])[j] = strstr(d.name, "mask") ? 1 : (int64_t)(r % 100);
        }
    }
}

/* One run of e on in (a fresh context); the outputs copied into out. */
static kiln_status run(kiln_engine *e, const io *in, io *out) {
    memset(out, 0, sizeof *out);
    kiln_context *c;
    kiln_status s = kiln_context_create(e, &c);
    for (int i = 0; i < in->n && s == KILN_OK; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        s = kiln_context_set_input(c, d.name, in->dtype[i], in->ndim[i], in->dims[i], in->data[i]);
    }
    if (s == KILN_OK) s = kiln_context_run(c);
    out->n = s == KILN_OK ? kiln_engine_num_outputs(e) : 0;
    for (int i = 0; i < out->n && i < MAX_IO && s == KILN_OK; i++) {
        kiln_tensor_desc d;
        const void *data;
        if ((s = kiln_context_output(c, i, &d, &data)) != KILN_OK) break;
        int64_t n = 1;
        for (int k = 0; k < d.ndim; k++) n *= d.dims[k];
        out->dtype[i] = d.dtype;
        out->bytes[i] = (size_t)n * kiln_dtype_size(d.dtype);
        out->data[i] = malloc(out->bytes[i] + 1);
        memcpy(out->data[i], data, out->bytes[i]);
    }
    kiln_context_free(c);
    return s;
}

/* max |a - b| / max |b| over the float32 outputs (INFINITY when their layout differs). */
static double rel_error(const io *a, const io *b) {
    if (a->n != b->n) return INFINITY;
    double worst = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->bytes[i] != b->bytes[i] || a->dtype[i] != KILN_F32 || b->dtype[i] != KILN_F32) return INFINITY;
        const float *x = a->data[i], *y = b->data[i];
        double md = 0, mr = 0;
        for (size_t j = 0; j < a->bytes[i] / 4; j++) {
            double d = fabs((double)x[j] - y[j]);
            if (isnan(d)) d = INFINITY;
            md = d > md ? d : md;
            mr = fabs(y[j]) > mr ? fabs(y[j]) : mr;
        }
        double err = md / (mr > 1e-30 ? mr : 1e-30);
        worst = err > worst ? err : worst;
    }
    return worst;
}

static bool same_bits(const io *a, const io *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (a->bytes[i] != b->bytes[i] || memcmp(a->data[i], b->data[i], a->bytes[i])) return false;
    return true;
}

/* Builds m for cuda fp16 at level (with cache, or none); *ms gets the build time. */
static kiln_engine *build(const char *path, const model *m, int level, const char *cache, kiln_tuning_stats *st,
                          double *ms) {
    kiln_input_range r[2];
    int nr = 0;
    for (int k = 0; k < 2 && m->inputs[k]; k++, nr++) {
        memset(&r[k], 0, sizeof r[k]);
        r[k].input = m->inputs[k];
        bool image = !strcmp(m->inputs[k], "image");
        r[k].ndim = image ? 4 : 2;
        int64_t img[3] = {3, 32, 32};
        for (int d = 0; d < r[k].ndim; d++) {
            bool first = d == 0;
            r[k].min[d] = image ? (first ? m->min[0] : img[d - 1]) : m->min[d];
            r[k].opt[d] = image ? (first ? m->opt[0] : img[d - 1]) : m->opt[d];
            r[k].max[d] = image ? (first ? m->max[0] : img[d - 1]) : m->max[d];
        }
    }
    kiln_build_options o = {.target = "cuda", .precision = KILN_PRECISION_FP16, .tuning_level = level,
                            .timing_cache = cache, .tuning_stats = st, .ranges = r, .nranges = nr};
    kiln_engine *e = NULL;
    double t0 = now_ms();
    kiln_status s = kiln_build_onnx(path, &o, &e);
    *ms = now_ms() - t0;
    EXPECT(s == KILN_OK, "%s: cuda fp16 build at level %d: %s", m->file, level, kiln_last_error());
    return s == KILN_OK ? e : NULL;
}

static void check_model(const char *root, const model *m, const char *dir) {
    char path[4096], cache[4200], saved[4200];
    snprintf(path, sizeof path, "%s/%s", root, m->file);
    snprintf(cache, sizeof cache, "%s/timing.cache", dir);
    snprintf(saved, sizeof saved, "%s/tuned.kiln", dir);
    unlink(cache);
    kiln_engine *cpu = NULL;
    EXPECT(kiln_build_onnx(path, NULL, &cpu) == KILN_OK, "%s: cpu build: %s", m->file, kiln_last_error());
    kiln_tuning_stats s0, s1, s2;
    double ms0, ms1, ms2;
    kiln_engine *e0 = build(path, m, 0, NULL, &s0, &ms0);
    kiln_engine *e1 = build(path, m, 2, cache, &s1, &ms1);
    kiln_engine *e2 = build(path, m, 2, cache, &s2, &ms2);
    if (!cpu || !e0 || !e1 || !e2) goto done;
    EXPECT(s0.layers == 0 && s0.tactics_timed == 0, "%s: level 0 tuned %d layers", m->file, s0.layers);
    /* a cold cache still hits for a layer whose signature an earlier layer of the same build timed */
    EXPECT(s1.tuned > 0 && s1.tactics_timed > 0 && s1.cache_misses > 0 && s1.cache_hits < s1.tuned,
           "%s: cold cache: %d of %d layers tuned, %d timed, %d hits, %d misses", m->file, s1.tuned, s1.layers,
           s1.tactics_timed, s1.cache_hits, s1.cache_misses);
    EXPECT(s2.tactics_timed == 0 && s2.cache_hits == s1.tuned && s2.tuned == s1.tuned, "%s: warm cache: %d tactics timed, "
           "%d hits (%d layers tuned the first time)", m->file, s2.tactics_timed, s2.cache_hits, s1.tuned);
    EXPECT(s1.same_as_earlier == s1.cache_hits && s2.same_as_earlier == 0, "%s: hits from this build: %d of %d cold, "
           "%d of %d warm", m->file, s1.same_as_earlier, s1.cache_hits, s2.same_as_earlier, s2.cache_hits);
    printf("%-44s level 0 build %7.1f ms | level 2, cold cache %7.1f ms (%d of %d layers tuned, %d tactics timed) | "
           "warm cache %7.1f ms (%d hits, %d timed)\n", m->file, ms0, ms1, s1.tuned, s1.layers, s1.tactics_timed, ms2,
           s2.cache_hits, s2.tactics_timed);
    EXPECT(kiln_engine_save(e2, saved) == KILN_OK, "%s: save: %s", m->file, kiln_last_error());
    kiln_engine_free(e2);
    e2 = NULL;
    EXPECT(kiln_engine_load(saved, &e2) == KILN_OK, "%s: reload: %s", m->file, kiln_last_error());
    if (!e2) goto done;
    io in, want, out0, out1, out2;
    make_inputs(cpu, &in);
    kiln_status rc = run(cpu, &in, &want), r0 = run(e0, &in, &out0), r1 = run(e1, &in, &out1), r2 = run(e2, &in, &out2);
    EXPECT(rc == KILN_OK && r0 == KILN_OK && r1 == KILN_OK && r2 == KILN_OK, "%s: runs: %s", m->file, kiln_last_error());
    if (rc == KILN_OK && r0 == KILN_OK && r1 == KILN_OK && r2 == KILN_OK) {
        double e_0 = rel_error(&out0, &want), e_1 = rel_error(&out1, &want);
        EXPECT(e_1 <= 2e-2, "%s: tuned engine vs cpu: relative error %.3g", m->file, e_1);
        EXPECT(same_bits(&out1, &out2), "%s: the warm-cache engine (reloaded) differs from the cold-cache one (rel %.3g)",
               m->file, rel_error(&out2, &out1));
        printf("%-44s vs cpu: level 0 %.2e, level 2 %.2e; warm-cache engine bit-identical: %s\n", m->file, e_0, e_1,
               same_bits(&out1, &out2) ? "yes" : "NO");
    }
    io_free(&in);
    io_free(&want);
    io_free(&out0);
    io_free(&out1);
    io_free(&out2);
done:
    kiln_engine_free(cpu);
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    kiln_engine_free(e2);
    unlink(saved);
    unlink(cache);
}

/* The sample CNN (dynamic batch) built without a profile: tuned at batch 1 by default; with a 1 ms
 * budget, every layer follows the heuristics and the engine still agrees with the CPU backend. */
static void check_bounds(const char *root) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/sample_cnn.onnx", root);
    kiln_engine *cpu = NULL, *dflt = NULL, *tight = NULL;
    kiln_tuning_stats sd = {0}, st = {0};
    kiln_build_options o = {.target = "cuda", .tuning_level = 2, .tuning_stats = &sd};
    EXPECT(kiln_build_onnx(path, NULL, &cpu) == KILN_OK, "sample_cnn: cpu build: %s", kiln_last_error());
    EXPECT(kiln_build_onnx(path, &o, &dflt) == KILN_OK, "sample_cnn: cuda build: %s", kiln_last_error());
    o.tuning_budget_ms = 1;
    o.tuning_stats = &st;
    EXPECT(kiln_build_onnx(path, &o, &tight) == KILN_OK, "sample_cnn: cuda build, 1 ms budget: %s", kiln_last_error());
    EXPECT(sd.tuned > 0 && sd.out_of_budget == 0, "sample_cnn without a profile: %d of %d layers tuned", sd.tuned, sd.layers);
    EXPECT(st.tuned == 0 && st.out_of_budget == st.layers && st.layers > 0, "sample_cnn, 1 ms budget: %d tuned, %d of %d "
           "layers out of budget", st.tuned, st.out_of_budget, st.layers);
    printf("%-44s no profile: %d of %d layers tuned (%.1f ms, %d dropped); 1 ms budget: %d of %d out of budget\n",
           "models/sample_cnn.onnx", sd.tuned, sd.layers, sd.ms, sd.dropped, st.out_of_budget, st.layers);
    if (cpu && tight) {
        io in, want, got;
        make_inputs(cpu, &in);
        kiln_status rc = run(cpu, &in, &want), rt = run(tight, &in, &got);
        EXPECT(rc == KILN_OK && rt == KILN_OK, "sample_cnn, 1 ms budget: runs: %s", kiln_last_error());
        if (rc == KILN_OK && rt == KILN_OK) EXPECT(rel_error(&got, &want) <= 1e-3, "sample_cnn, 1 ms budget: vs cpu %.3g",
                                                   rel_error(&got, &want));
        io_free(&in);
        io_free(&want);
        io_free(&got);
    }
    kiln_engine_free(dflt);
    kiln_engine_free(tight);
    /* two profiles: batch 1..2 (opt 1) and 3..8 (opt 8), a tactic set each */
    kiln_input_range r[2] = {{.profile = 0, .input = "image", .ndim = 4, .min = {1, 3, 32, 32}, .opt = {1, 3, 32, 32},
                              .max = {2, 3, 32, 32}},
                             {.profile = 1, .input = "image", .ndim = 4, .min = {3, 3, 32, 32}, .opt = {8, 3, 32, 32},
                              .max = {8, 3, 32, 32}}};
    kiln_tuning_stats sp = {0};
    kiln_build_options op = {.target = "cuda", .tuning_level = 2, .tuning_stats = &sp, .ranges = r, .nranges = 2};
    kiln_engine *two = NULL;
    EXPECT(kiln_build_onnx(path, &op, &two) == KILN_OK, "sample_cnn, two profiles: %s", kiln_last_error());
    EXPECT(sp.layers == 2 * sd.layers && sp.tuned > sd.layers, "sample_cnn, two profiles: %d of %d layers tuned (%d "
           "layers a profile)", sp.tuned, sp.layers, sd.layers);
    for (int batch = 2; cpu && two && batch <= 6; batch += 4) {
        io in, want, got;
        make_inputs(cpu, &in);
        in.dims[0][0] = batch; /* make_inputs sized batch 2: grow the buffer for 6 */
        in.bytes[0] = in.bytes[0] / 2 * (size_t)batch;
        free(in.data[0]);
        in.data[0] = calloc(1, in.bytes[0]);
        for (size_t j = 0; j < in.bytes[0] / 4; j++) ((float *)in.data[0])[j] = (float)((j * 37 % 101) / 50.0 - 1.0);
        kiln_status rc = run(cpu, &in, &want), rt = run(two, &in, &got);
        EXPECT(rc == KILN_OK && rt == KILN_OK, "sample_cnn, two profiles, batch %d: %s", batch, kiln_last_error());
        if (rc == KILN_OK && rt == KILN_OK)
            EXPECT(rel_error(&got, &want) <= 1e-3, "sample_cnn, two profiles, batch %d: vs cpu %.3g", batch,
                   rel_error(&got, &want));
        io_free(&in);
        io_free(&want);
        io_free(&got);
    }
    printf("%-44s two profiles: %d of %d layers tuned\n", "models/sample_cnn.onnx", sp.tuned, sp.layers);
    kiln_engine_free(two);
    kiln_engine_free(cpu);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/models/sample_cnn.onnx", root);
    kiln_build_options o = {.target = "cuda"};
    kiln_engine *e;
    if (kiln_build_onnx(probe, &o, &e) != KILN_OK) {
        const char *msg = kiln_last_error();
        if (strstr(msg, "cudaGetDeviceCount") || strstr(msg, "unknown target 'cuda'")) {
            printf("skipped: no GPU (%s)\n", msg);
            return 77;
        }
        fprintf(stderr, "FAIL: cuda build of %s: %s\n", probe, msg);
        return 1;
    }
    kiln_engine_free(e);
    char dir[] = "/tmp/kiln-test-tuning-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    static const model models[] = {
        {"models/sample_cnn.onnx", {"image", NULL}, {1}, {4}, {8}},
        {"tests/data/torch/bert_torchscript.onnx", {"input_ids", "attention_mask"}, {1, 1}, {2, 16}, {4, 64}},
    };
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_model(root, &models[i], dir);
    check_bounds(root);
    rmdir(dir);
    if (g_failures) {
        fprintf(stderr, "test_tuning: %d check(s) failed\n", g_failures);
        return 1;
    }
    printf("test_tuning: ok\n");
    return 0;
}
