/* test_cuda_backend.c — the cuda backend against the cpu backend (the oracle), end to end through the
 * public API: models/sample_cnn.onnx and the PyTorch exports in tests/data/torch are built for target
 * cuda in fp32, fp16 and bf16 and run on the same random inputs as the cpu engine. Checks, per model
 * and precision:
 *   - accuracy: max |cuda - cpu| / max |cpu| <= 1e-4 (fp32: TF32 must be off), 2e-2 (fp16), 5e-2 (bf16);
 *   - replays: the 2nd and 3rd runs (captured / replayed CUDA graphs) are bit-identical to the 1st;
 *   - shape changes: batch 1 -> 3 -> 1 on one context, each right, the second batch-1 run identical;
 *   - fp32 only: a context with KILN_CUDA_GRAPHS=0 matches the graph runs bit for bit, two contexts on
 *     two threads at once give the right outputs, and a saved and reloaded engine gives the same bits,
 *     loaded on device 0 by kiln_engine_load_with too; on a device that does not exist it is refused.
 * Without a GPU (or without the cuda backend) it prints why and exits 77, which CTest reports as
 * skipped. usage: test_cuda_backend [REPO_DIR] (default: $KILN_SOURCE_DIR, else .)
 * env: KILN_TEST_MODELS (check only the models whose file name contains it), KILN_TEST_THREAD_ROUNDS
 * (rounds of the two-thread check, default 2). */
#include "check.h"
#include "core/half.h"
#include "kiln/kiln.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IO 8

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------- tensors */

typedef struct tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t bytes;
} tensor;

typedef struct io {
    int n;
    tensor t[MAX_IO];
} io;

static void io_free(io *x) {
    for (int i = 0; i < x->n; i++) free(x->t[i].data);
    memset(x, 0, sizeof *x);
}

static double elem(const tensor *t, int64_t i) {
    switch (t->dtype) {
    case KILN_F32: return ((const float *)t->data)[i];
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)t->data)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case KILN_F64: return ((const double *)t->data)[i];
    case KILN_I64: return (double)((const int64_t *)t->data)[i];
    case KILN_I32: return ((const int32_t *)t->data)[i];
    case KILN_BOOL: case KILN_U8: return ((const uint8_t *)t->data)[i];
    default: return NAN;
    }
}

static int64_t numel(const tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->dims[d];
    return n;
}

/* xorshift64*: reproducible inputs without libc's rand state */
static uint64_t next_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Random inputs for e: symbolic dim 0 = batch, other symbolic dims = seq. Floats uniform in [-1, 1);
 * int inputs named *mask*: ones, the second half of the last row zero (padding); other ints: ids in
 * [0, 100). */
static void make_inputs(const kiln_engine *e, int64_t batch, int64_t seq, uint64_t seed, io *out) {
    memset(out, 0, sizeof *out);
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    out->n = kiln_engine_num_inputs(e);
    for (int i = 0; i < out->n; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        tensor *t = &out->t[i];
        t->dtype = d.dtype;
        t->ndim = d.ndim;
        for (int k = 0; k < d.ndim; k++) t->dims[k] = d.dims[k] >= 0 ? d.dims[k] : k == 0 ? batch : seq;
        int64_t n = numel(t);
        t->bytes = (size_t)n * kiln_dtype_size(d.dtype);
        t->data = calloc(1, t->bytes + 1);
        for (int64_t j = 0; j < n; j++) {
            uint64_t r = next_rand(&s);
            if (d.dtype == KILN_F32) {
                ((float *)t->data)[j] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            } else if (d.dtype == KILN_I64 && strstr(d.name, "mask")) {
                bool pad = t->ndim == 2 && t->dims[1] > 1 && j / t->dims[1] == t->dims[0] - 1 && j % t->dims[1] >= t->dims[1] / 2;
                ((int64_t *)t->data)[j] = pad ? 0 : 1;
            } else if (d.dtype == KILN_I64) {
                ((int64_t *)t->data)[j] = (int64_t)(r % 100);
            }
        }
    }
}

/* Binds in, runs c once, copies the outputs into out. */
static kiln_status run(kiln_context *c, const kiln_engine *e, const io *in, io *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < in->n; i++) {
        kiln_tensor_desc d;
        kiln_engine_input(e, i, &d);
        kiln_status s = kiln_context_set_input(c, d.name, in->t[i].dtype, in->t[i].ndim, in->t[i].dims, in->t[i].data);
        if (s != KILN_OK) return s;
    }
    kiln_status s = kiln_context_run(c);
    if (s != KILN_OK) return s;
    out->n = kiln_engine_num_outputs(e);
    for (int i = 0; i < out->n; i++) {
        kiln_tensor_desc d;
        const void *data;
        if ((s = kiln_context_output(c, i, &d, &data)) != KILN_OK) return s;
        tensor *t = &out->t[i];
        t->dtype = d.dtype;
        t->ndim = d.ndim;
        memcpy(t->dims, d.dims, sizeof t->dims);
        t->bytes = (size_t)numel(t) * kiln_dtype_size(d.dtype);
        t->data = malloc(t->bytes + 1);
        memcpy(t->data, data, t->bytes);
    }
    return KILN_OK;
}

/* One run on a fresh context. */
static kiln_status run_fresh(kiln_engine *e, const io *in, io *out) {
    kiln_context *c;
    kiln_status s = kiln_context_create(e, &c);
    if (s == KILN_OK) s = run(c, e, in, out);
    kiln_context_free(c);
    return s;
}

/* max |got - want| / max |want| over every output (shapes and dtypes must agree; ints exactly). */
static double rel_error(const io *got, const io *want, char *why, size_t cap) {
    double worst = 0;
    why[0] = 0;
    if (got->n != want->n) {
        snprintf(why, cap, "%d outputs, expected %d", got->n, want->n);
        return INFINITY;
    }
    for (int i = 0; i < got->n; i++) {
        const tensor *a = &got->t[i], *b = &want->t[i];
        if (a->dtype != b->dtype || a->ndim != b->ndim || memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim)) {
            snprintf(why, cap, "output %d is %s rank %d, expected %s rank %d (or other dims)", i, kiln_dtype_name(a->dtype),
                     a->ndim, kiln_dtype_name(b->dtype), b->ndim);
            return INFINITY;
        }
        double maxdiff = 0, maxref = 0;
        for (int64_t j = 0; j < numel(a); j++) {
            double x = elem(a, j), y = elem(b, j);
            double diff = fabs(x - y);
            if (isnan(x) != isnan(y) || isnan(diff)) diff = INFINITY;
            if (diff > maxdiff) maxdiff = diff;
            if (fabs(y) > maxref) maxref = fabs(y);
        }
        bool exact = b->dtype != KILN_F32 && b->dtype != KILN_F16 && b->dtype != KILN_BF16 && b->dtype != KILN_F64;
        double err = exact ? (maxdiff > 0 ? INFINITY : 0) : maxdiff / (maxref > 1e-30 ? maxref : 1e-30);
        if (err > worst) {
            worst = err;
            snprintf(why, cap, "output %d: max diff %.3g, max ref %.3g", i, maxdiff, maxref);
        }
    }
    return worst;
}

static bool same_bits(const io *a, const io *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (a->t[i].bytes != b->t[i].bytes || memcmp(a->t[i].data, b->t[i].data, a->t[i].bytes)) return false;
    return true;
}

/* ---------------------------------------------------------------- two threads */

typedef struct worker {
    kiln_engine *e;
    const io *in, *want;
    double tol;
    int runs;
    char error[512];
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    kiln_context *c;
    if (kiln_context_create(w->e, &c) != KILN_OK) {
        snprintf(w->error, sizeof w->error, "context: %s", kiln_last_error());
        return NULL;
    }
    for (int r = 0; r < w->runs && !w->error[0]; r++) {
        io out;
        char why[256];
        if (run(c, w->e, w->in, &out) != KILN_OK) {
            snprintf(w->error, sizeof w->error, "run %d: %s", r, kiln_last_error());
            break;
        }
        double err = rel_error(&out, w->want, why, sizeof why);
        if (!(err <= w->tol)) snprintf(w->error, sizeof w->error, "run %d: relative error %.3g (%s)", r, err, why);
        io_free(&out);
    }
    kiln_context_free(c);
    return NULL;
}

/* ---------------------------------------------------------------- per model */

typedef struct model {
    const char *file;
    int64_t seq; /* size of the non-batch symbolic dims */
} model;

static const model g_models[] = {
    {"models/sample_cnn.onnx", 1},
    {"tests/data/torch/mobilenet_v2_torchscript.onnx", 1},
    {"tests/data/torch/mobilenet_v2_dynamo.onnx", 1},
    {"tests/data/torch/mobilenet_v3_torchscript.onnx", 1},
    {"tests/data/torch/mobilenet_v3_dynamo.onnx", 1},
    {"tests/data/torch/bert_torchscript.onnx", 16},
    {"tests/data/torch/bert_dynamo.onnx", 16},
    {"tests/data/torch/gpt2_dynamo.onnx", 16},
    {"tests/data/torch/llama_dynamo.onnx", 16},
};

static const char *const g_precision_names[] = {"fp32", "fp16", "bf16"};
static const double g_tolerance[] = {1e-4, 2e-2, 5e-2};

/* Checks one cuda engine of model m against the cpu engine. */
/* kiln_engine_load_with's device override: on GPU 0 (the one built for) the same bits; on a GPU
 * ordinal past the last, KILN_ERR_ENGINE_MISMATCH naming it. */
static void check_device_override(const model *m, const char *epath, const io *in, const io *first) {
    kiln_engine *e = NULL;
    io out = {0};
    kiln_engine_load_options o = {.set_device = true, .device = 0};
    kiln_status s = kiln_engine_load_with(epath, &o, &e);
    if (s == KILN_OK) s = run_fresh(e, in, &out);
    EXPECT(s == KILN_OK, "%s: load on device 0: %s", m->file, kiln_last_error());
    EXPECT(s != KILN_OK || same_bits(&out, first), "%s: the engine loaded on device 0 gives other bits", m->file);
    kiln_engine_free(e);
    io_free(&out);
    o.device = 64;
    s = kiln_engine_load_with(epath, &o, &e);
    EXPECT(s == KILN_ERR_ENGINE_MISMATCH && strstr(kiln_last_error(), "CUDA device 64 does not exist"),
           "%s: load on device 64: %d %s", m->file, (int)s, kiln_last_error());
}

static void check_engine(const model *m, kiln_engine *cpu, kiln_engine *gpu, kiln_precision p, const char *workdir) {
    const char *pn = g_precision_names[p];
    double tol = g_tolerance[p];
    char why[256];
    /* accuracy and replays at batch 2 */
    io in, want, first = {0}, again;
    make_inputs(cpu, 2, m->seq, 1, &in);
    if (run_fresh(cpu, &in, &want) != KILN_OK) {
        EXPECT(0, "%s: cpu run: %s", m->file, kiln_last_error());
        io_free(&in);
        return;
    }
    kiln_context *c;
    kiln_status s = kiln_context_create(gpu, &c);
    EXPECT(s == KILN_OK, "%s %s: context: %s", m->file, pn, kiln_last_error());
    if (s != KILN_OK) goto done_in;
    s = run(c, gpu, &in, &first);
    EXPECT(s == KILN_OK, "%s %s: first run: %s", m->file, pn, kiln_last_error());
    if (s == KILN_OK) {
        double err = rel_error(&first, &want, why, sizeof why);
        printf("  %-48s %s  batch 2: relative error %.3g (tolerance %.0e)\n", m->file, pn, err, tol);
        EXPECT(err <= tol, "%s %s: relative error %.3g > %.0e (%s)", m->file, pn, err, tol, why);
        for (int r = 2; r <= 3; r++) {
            s = run(c, gpu, &in, &again);
            EXPECT(s == KILN_OK, "%s %s: run %d: %s", m->file, pn, r, kiln_last_error());
            if (s != KILN_OK) break;
            EXPECT(same_bits(&again, &first), "%s %s: run %d (CUDA graph) differs from run 1", m->file, pn, r);
            io_free(&again);
        }
    }
    /* shape changes on the same context: batch 1 -> 3 -> 1 */
    io b1 = {0};
    for (int step = 0; step < 3 && s == KILN_OK; step++) {
        int64_t batch = step == 1 ? 3 : 1;
        io sin, swant, sgot;
        make_inputs(cpu, batch, m->seq, 10 + (uint64_t)batch, &sin);
        if (run_fresh(cpu, &sin, &swant) == KILN_OK) {
            s = run(c, gpu, &sin, &sgot);
            EXPECT(s == KILN_OK, "%s %s: batch %lld: %s", m->file, pn, (long long)batch, kiln_last_error());
            if (s == KILN_OK) {
                double err = rel_error(&sgot, &swant, why, sizeof why);
                EXPECT(err <= tol, "%s %s: batch %lld (step %d): relative error %.3g (%s)", m->file, pn, (long long)batch,
                       step, err, why);
                if (step == 0) b1 = sgot;
                else if (step == 2) EXPECT(same_bits(&sgot, &b1), "%s %s: batch 1 after batch 3 differs", m->file, pn);
                if (step != 0) io_free(&sgot);
            }
            io_free(&swant);
        } else {
            EXPECT(0, "%s: cpu run at batch %lld: %s", m->file, (long long)batch, kiln_last_error());
        }
        io_free(&sin);
    }
    io_free(&b1);
    kiln_context_free(c);
    if (p == KILN_PRECISION_FP32 && first.n) {
        /* eager (no CUDA graphs) gives the same bits */
        setenv("KILN_CUDA_GRAPHS", "0", 1);
        io eager = {0};
        s = kiln_context_create(gpu, &c);
        unsetenv("KILN_CUDA_GRAPHS");
        for (int r = 0; s == KILN_OK && r < 2; r++) { /* the plan's first run syncs per node, the second does not */
            io_free(&eager);
            s = run(c, gpu, &in, &eager);
        }
        kiln_context_free(c); /* NULL when the create failed */
        EXPECT(s == KILN_OK, "%s: run without CUDA graphs: %s", m->file, kiln_last_error());
        EXPECT(s != KILN_OK || same_bits(&eager, &first), "%s: eager runs differ from CUDA graph runs", m->file);
        io_free(&eager);
        /* two contexts on two threads at once, KILN_TEST_THREAD_ROUNDS times (default 2) */
        const char *rounds_env = getenv("KILN_TEST_THREAD_ROUNDS");
        int rounds = rounds_env ? atoi(rounds_env) : 2, failed_rounds = 0;
        for (int round = 0; round < rounds; round++) {
            worker w[2];
            pthread_t th[2];
            for (int t = 0; t < 2; t++) {
                w[t] = (worker){.e = gpu, .in = &in, .want = &want, .tol = tol, .runs = 4};
                pthread_create(&th[t], NULL, worker_main, &w[t]);
            }
            bool ok = true;
            for (int t = 0; t < 2; t++) {
                pthread_join(th[t], NULL);
                EXPECT(!w[t].error[0], "%s: round %d, thread %d: %s", m->file, round, t, w[t].error);
                ok &= !w[t].error[0];
            }
            failed_rounds += !ok;
        }
        if (rounds > 1) printf("  %-48s fp32  two threads: %d of %d round(s) failed\n", m->file, failed_rounds, rounds);
        /* save -> load -> run: the same bits */
        char epath[4096];
        snprintf(epath, sizeof epath, "%s/test_cuda_backend.kiln", workdir);
        kiln_engine *loaded = NULL;
        io rel = {0};
        s = kiln_engine_save(gpu, epath);
        if (s == KILN_OK) s = kiln_engine_load(epath, &loaded);
        if (s == KILN_OK) s = run_fresh(loaded, &in, &rel);
        EXPECT(s == KILN_OK, "%s: save/load/run: %s", m->file, kiln_last_error());
        EXPECT(s != KILN_OK || same_bits(&rel, &first), "%s: the reloaded engine gives other bits", m->file);
        kiln_engine_free(loaded);
        if (p == KILN_PRECISION_FP32 && s == KILN_OK) check_device_override(m, epath, &in, &first);
        io_free(&rel);
        remove(epath);
    }
    io_free(&first);
done_in:
    io_free(&in);
    io_free(&want);
}

/* Exits 77 when this kiln cannot run cuda here, printing why. */
static void skip_without_gpu(const char *probe_model) {
    kiln_build_options o = {.target = "cuda"};
    kiln_engine *e;
    if (kiln_build_onnx(probe_model, &o, &e) == KILN_OK) {
        kiln_engine_free(e);
        return;
    }
    const char *msg = kiln_last_error(), *p = strstr(msg, "(cudaGetDeviceCount:");
    if (p) {
        printf("skipped: no GPU %s\n", p);
        exit(77);
    }
    if (strstr(msg, "unknown target 'cuda'")) {
        printf("skipped: this kiln was built without the cuda backend (%s)\n", msg);
        exit(77);
    }
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, g_models[0].file);
    skip_without_gpu(path);
    const char *workdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    int checked = 0;
    const char *only = getenv("KILN_TEST_MODELS"); /* a substring of the model files to check */
    for (size_t i = 0; i < sizeof g_models / sizeof *g_models; i++) {
        const model *m = &g_models[i];
        if (only && !strstr(m->file, only)) continue;
        snprintf(path, sizeof path, "%s/%s", root, m->file);
        kiln_engine *cpu;
        if (kiln_build_onnx(path, NULL, &cpu) != KILN_OK) {
            EXPECT(0, "%s: cpu build: %s", m->file, kiln_last_error());
            continue;
        }
        for (int p = KILN_PRECISION_FP32; p <= KILN_PRECISION_BF16; p++) {
            kiln_build_options o = {.target = "cuda", .precision = (kiln_precision)p};
            kiln_engine *gpu;
            if (kiln_build_onnx(path, &o, &gpu) != KILN_OK) {
                EXPECT(0, "%s %s: cuda build: %s", m->file, g_precision_names[p], kiln_last_error());
                continue;
            }
            int before = failures;
            check_engine(m, cpu, gpu, (kiln_precision)p, workdir);
            checked += failures == before;
            kiln_engine_free(gpu);
        }
        kiln_engine_free(cpu);
    }
    if (failures) {
        fprintf(stderr, "test_cuda_backend: %d check(s) failed\n", failures);
        return 1;
    }
    printf("cuda backend: %d model x precision engines agree with the cpu backend\n", checked);
    return 0;
}
