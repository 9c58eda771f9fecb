/* bench_sweep.c — kiln bench's stress-test matrix: --sweep precision=fp32,fp16,bf16,int8,fp8 --sweep batch=1,8
 * [--sweep streams=1,2] builds one engine per precision (from the ONNX model), runs the benchmark for
 * every batch x streams, and compares each configuration's outputs on the seeded inputs with those of
 * the fp32 configuration of the same batch (fp32 runs first for that). A configuration that cannot
 * be built or run is one row with its reason ("unsupported: ..." for what the target does not
 * support), and the sweep goes on. */
#include "bench/bench_internal.h"

#include "compare/compare.h"
#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *kiln_bench_precision_name(kiln_precision p) {
    static const char *const names[] = {"fp32", "fp16", "bf16", "int8", "fp8"};
    return (unsigned)p < sizeof names / sizeof *names ? names[p] : "fp32";
}

/* Parses a positive integer list item [p, end). */
static bool parse_int(const char *p, const char *end, int64_t max, int64_t *out) {
    char *e;
    long long v = strtoll(p, &e, 10);
    if (e != end || v < 1 || v > max) return false;
    *out = v;
    return true;
}

kiln_status kiln_bench_sweep_parse(kiln_bench_sweep *s, const char *spec) {
    const char *eq = strchr(spec, '=');
    if (!eq || !eq[1]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep expects KEY=V1,V2,... (precision, batch or streams), got '%s'", spec);
    size_t klen = (size_t)(eq - spec);
    int key = klen == 9 && !strncmp(spec, "precision", 9) ? 0 : klen == 5 && !strncmp(spec, "batch", 5) ? 1
            : klen == 7 && !strncmp(spec, "streams", 7) ? 2 : -1;
    if (key < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep: unknown key '%.*s' (precision, batch or streams)", (int)klen, spec);
    int *count = key == 0 ? &s->nprecisions : key == 1 ? &s->nbatches : &s->nstreams;
    int cap = key == 0 ? 8 : key == 1 ? 16 : 8;
    if (*count) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep %.*s is given twice", (int)klen, spec);
    for (const char *p = eq + 1; *p;) {
        const char *end = p + strcspn(p, ",");
        if (*count == cap) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep %.*s: at most %d values", (int)klen, spec, cap);
        int64_t v = 0;
        if (key == 0) {
            size_t n = (size_t)(end - p);
            kiln_precision pr = (kiln_precision)-1;
            for (int k = KILN_PRECISION_FP32; k <= KILN_PRECISION_FP8; k++)
                if (strlen(kiln_bench_precision_name((kiln_precision)k)) == n && !strncmp(p, kiln_bench_precision_name((kiln_precision)k), n))
                    pr = (kiln_precision)k;
            if ((int)pr < 0)
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep precision: '%.*s' is not fp32, fp16, bf16, int8 or fp8", (int)n, p);
            s->precisions[(*count)++] = pr;
        } else if (!parse_int(p, end, key == 1 ? 1 << 20 : 256, &v)) {
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep %.*s: '%.*s' is not an integer from 1 to %d", (int)klen, spec,
                              (int)(end - p), p, key == 1 ? 1 << 20 : 256);
        } else if (key == 1) {
            s->batches[(*count)++] = v;
        } else {
            s->streams[(*count)++] = (int)v;
        }
        p = *end ? end + 1 : end;
    }
    if ((s->nprecisions ? s->nprecisions : 1) * (s->nbatches ? s->nbatches : 1) * (s->nstreams ? s->nstreams : 1) > KILN_BENCH_SWEEP_MAX)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "--sweep: more than %d configurations", KILN_BENCH_SWEEP_MAX);
    return KILN_OK;
}

void kiln_bench_compare_outputs(const kiln_tensor *a, const kiln_tensor *ref, int n, double *max_abs, double *max_rel) {
    double diff = 0, scale = 0;
    bool any = false;
    for (int i = 0; i < n; i++) {
        kiln_dtype t = ref[i].dtype;
        if (t != KILN_F32 && t != KILN_F16 && t != KILN_BF16 && t != KILN_F64) continue;
        int64_t m = kiln_tensor_numel(&ref[i]);
        if (a[i].dtype != t || kiln_tensor_numel(&a[i]) != m) continue;
        any = true;
        for (int64_t k = 0; k < m; k++) {
            double x = kiln_tensor_get_f64(&a[i], k), y = kiln_tensor_get_f64(&ref[i], k);
            double d = isnan(x) != isnan(y) ? INFINITY : fabs(x - y);
            if (d > diff || isnan(d)) diff = isnan(d) ? 0 : d;
            if (fabs(y) > scale) scale = fabs(y);
        }
    }
    *max_abs = any ? diff : NAN;
    *max_rel = any ? (scale > 0 ? diff / scale : diff > 0 ? INFINITY : 0) : NAN;
}

/* The row's cosine similarity (the least over float outputs) and top-1 agreement against ref. */
static void accuracy(const kiln_tensor *a, const kiln_tensor *ref, int n, kiln_bench_sweep_row *row) {
    for (int i = 0; i < n; i++) {
        kiln_dtype t = ref[i].dtype;
        if (t != KILN_F32 && t != KILN_F16 && t != KILN_BF16 && t != KILN_F64) continue;
        kiln_compare_stats st;
        kiln_compare_tensors(&a[i], &ref[i], 0.0, 0.0, &st);
        if (!st.shape_ok) continue;
        row->cosine = isnan(row->cosine) ? st.cosine : fmin(row->cosine, st.cosine);
        row->top1 += st.top1;
        row->top1_rows += st.rows;
    }
}

/* The row's error text for a failed status. */
static void row_error(kiln_bench_sweep_row *row, kiln_status st) {
    snprintf(row->error, sizeof row->error, "%s: %s", st == KILN_ERR_UNSUPPORTED ? "unsupported" : "failed", kiln_last_error());
}

/* Measures one configuration on engine e into row; ref/nref are the fp32 outputs of this batch (or
 * NULL), *keep receives this run's outputs when it is the fp32 one. */
static void run_row(kiln_engine *e, const kiln_bench_config *cfg, kiln_bench_env *env, kiln_bench_sweep_row *row,
                    kiln_tensor **ref, int *nref) {
    kiln_bench_result r;
    kiln_bench_sampler *smp = kiln_bench_sampler_start(env);
    kiln_status st = kiln_bench_run(e, cfg, &r);
    kiln_bench_sampler_stop(smp, env);
    if (st != KILN_OK) {
        row_error(row, st);
        return;
    }
    row->qps = r.qps;
    row->items_per_s = r.items_per_s;
    row->p50_ms = r.latency.s.median;
    row->p95_ms = r.latency.p95;
    row->p99_ms = r.latency.p99;
    row->memory_mb = (double)r.mem.total / 1e6;
    row->gpu_util_pct = env->util_mean_pct;
    row->gpu_mem_peak_mb = env->mem_used_peak_mb;
    if (row->precision == KILN_PRECISION_FP32 && !*ref) { /* the reference of this batch: keep it */
        *ref = r.outputs;
        *nref = r.noutputs;
        r.outputs = NULL;
        r.noutputs = 0;
        row->max_abs_err = row->max_rel_err = 0;
        accuracy(*ref, *ref, *nref, row);
    } else if (*ref && *nref == r.noutputs) {
        kiln_bench_compare_outputs(r.outputs, *ref, r.noutputs, &row->max_abs_err, &row->max_rel_err);
        accuracy(r.outputs, *ref, r.noutputs, row);
    }
    kiln_bench_result_free(&r);
}

/* Whether precision p is a calibrated one (int8, fp8): its row needs calibration batches. */
static bool quantized(kiln_precision p) { return p == KILN_PRECISION_INT8 || p == KILN_PRECISION_FP8; }

kiln_status kiln_bench_sweep_run(kiln_bench_sweep *s, const char *model, bool is_engine, const char *target, int device,
                                 kiln_precision base_precision, const kiln_bench_config *base, kiln_bench_env *env) {
    if (!s->nprecisions) s->precisions[s->nprecisions++] = base_precision;
    if (!s->nbatches) s->batches[s->nbatches++] = base->batch;
    if (!s->nstreams) s->streams[s->nstreams++] = base->streams;
    /* fp32 first: it is the accuracy reference of the others */
    for (int i = 1; i < s->nprecisions; i++)
        if (s->precisions[i] == KILN_PRECISION_FP32) {
            s->precisions[i] = s->precisions[0];
            s->precisions[0] = KILN_PRECISION_FP32;
        }
    kiln_tensor *refs[16] = {0};
    int nrefs[16] = {0};
    s->nrows = 0;
    char *random_calib = NULL; /* int8 and fp8 rows without --calib */
    kiln_status calib_st = KILN_OK;
    for (int pi = 0; !is_engine && !s->calib_dir && pi < s->nprecisions; pi++)
        if (quantized(s->precisions[pi]) && !random_calib && calib_st == KILN_OK) {
            calib_st = kiln_bench_random_calib(model, base, &random_calib);
            s->random_calib = calib_st == KILN_OK;
        }
    for (int pi = 0; pi < s->nprecisions; pi++) {
        kiln_engine *e = NULL;
        double build_s;
        int64_t bytes;
        kiln_build_options o = kiln_bench_sweep_options(s->precisions[pi], target, device,
                                                        s->calib_dir ? s->calib_dir : random_calib);
        kiln_status st = is_engine ? kiln_bench_open(model, true, target, s->precisions[pi], device, &e, &build_s, &bytes)
                       : quantized(s->precisions[pi]) && calib_st != KILN_OK ? calib_st
                       : kiln_bench_open_options(model, &o, &e, &build_s, &bytes);
        if (st == KILN_OK && is_engine && s->precisions[pi] != KILN_PRECISION_FP32)
            st = kiln_error(KILN_ERR_UNSUPPORTED, "an engine file has the precision it was built with; give the ONNX model to sweep precision");
        for (int bi = 0; bi < s->nbatches; bi++) {
            for (int si = 0; si < s->nstreams; si++) {
                kiln_bench_sweep_row *row = &s->rows[s->nrows++];
                *row = (kiln_bench_sweep_row){.precision = s->precisions[pi], .batch = s->batches[bi], .streams = s->streams[si],
                                              .build_s = build_s, .engine_bytes = bytes, .gpu_util_pct = -1, .gpu_mem_peak_mb = -1,
                                              .max_abs_err = NAN, .max_rel_err = NAN, .cosine = NAN};
                if (st != KILN_OK) {
                    row_error(row, st);
                    continue;
                }
                kiln_bench_config cfg = *base;
                cfg.batch = row->batch;
                cfg.streams = row->streams;
                run_row(e, &cfg, env, row, &refs[bi], &nrefs[bi]);
            }
        }
        kiln_engine_free(e);
    }
    for (int bi = 0; bi < 16; bi++) {
        for (int k = 0; refs[bi] && k < nrefs[bi]; k++) kiln_tensor_release(&refs[bi][k]);
        free(refs[bi]);
    }
    kiln_bench_random_calib_remove(random_calib);
    return KILN_OK;
}
