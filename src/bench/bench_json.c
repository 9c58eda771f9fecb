/* bench_json.c — kiln bench --export-json: every measurement, the environment and, for one
 * benchmark, the per-layer table and every query's times; for a sweep, its rows. The schema is
 * docs/bench.schema.json (described in docs/bench.md); absent measurements are null, never left out. */
#include "bench/bench_internal.h"

#include "core/json_write.h"
#include "core/status.h"

#include <math.h>
#include <string.h>

/* A number, or null when it is marked absent (negative or NaN). */
static void num_or_null(kiln_json *j, const char *key, double v) {
    kiln_json_key(j, key);
    if (v >= 0) kiln_json_number(j, v);
    else kiln_json_null(j);
}

static void str_or_null(kiln_json *j, const char *key, const char *s) { kiln_json_kv_string(j, key, s && s[0] ? s : NULL); }

void kiln_bench_json_stats(kiln_json *j, const char *key, const kiln_bench_stats *s) {
    kiln_json_key(j, key);
    if (!s->present) {
        kiln_json_null(j);
        return;
    }
    kiln_json_object_begin(j);
    kiln_json_kv_int(j, "n", (int64_t)s->s.n);
    kiln_json_kv_number(j, "min", s->s.min);
    kiln_json_kv_number(j, "max", s->s.max);
    kiln_json_kv_number(j, "mean", s->s.mean);
    kiln_json_kv_number(j, "median", s->s.median);
    kiln_json_kv_number(j, "p90", s->p90);
    kiln_json_kv_number(j, "p95", s->p95);
    kiln_json_kv_number(j, "p99", s->p99);
    kiln_json_kv_number(j, "p99_9", s->p999);
    kiln_json_kv_number(j, "stddev", s->s.stddev);
    kiln_json_kv_number(j, "cv", s->s.cv);
    kiln_json_object_end(j);
}

static void sample(kiln_json *j, const char *key, const kiln_gpu_sample *s) {
    kiln_json_key(j, key);
    if (!s->valid) {
        kiln_json_null(j);
        return;
    }
    char thr[256];
    kiln_bench_throttle_text(s->throttle, thr, sizeof thr);
    kiln_json_object_begin(j);
    num_or_null(j, "sm_clock_mhz", s->sm_mhz);
    num_or_null(j, "mem_clock_mhz", s->mem_mhz);
    num_or_null(j, "power_w", s->power_w);
    num_or_null(j, "temperature_c", s->temp_c);
    num_or_null(j, "utilization_pct", s->util_pct);
    num_or_null(j, "memory_used_mb", s->mem_used_mb);
    kiln_json_kv_string(j, "throttle_reasons", thr);
    kiln_json_object_end(j);
}

void kiln_bench_json_environment(kiln_json *j, const kiln_bench_env *env) {
    kiln_json_key(j, "environment");
    kiln_json_object_begin(j);
    kiln_json_kv_string(j, "cpu_model", env->cpu_model);
    kiln_json_kv_int(j, "cpu_threads", env->cpu_threads);
    kiln_json_kv_string(j, "host", env->host);
    kiln_json_kv_string(j, "os", env->os);
    kiln_json_key(j, "gpu");
    if (!env->gpu) {
        kiln_json_null(j);
    } else {
        kiln_json_object_begin(j);
        str_or_null(j, "name", env->gpu_name);
        str_or_null(j, "arch", env->gpu_arch);
        str_or_null(j, "pci_bus_id", env->gpu_pci);
        str_or_null(j, "driver", env->driver);
        str_or_null(j, "cuda_driver", env->cuda_driver);
        str_or_null(j, "cuda_runtime", env->cuda_runtime);
        str_or_null(j, "cublaslt", env->cublas);
        str_or_null(j, "cudnn", env->cudnn);
        kiln_json_kv_bool(j, "nvml", env->nvml);
        str_or_null(j, "nvml_error", env->nvml_error);
        sample(j, "before", &env->before);
        sample(j, "after", &env->after);
        num_or_null(j, "utilization_mean_pct", env->util_mean_pct);
        num_or_null(j, "utilization_max_pct", env->util_max_pct);
        num_or_null(j, "memory_used_peak_mb", env->mem_used_peak_mb);
        kiln_json_object_end(j);
    }
    kiln_json_object_end(j);
}

static void header(kiln_json *j, const kiln_bench_doc *d) {
    const kiln_bench_config *c = d->cfg;
    kiln_json_kv_int(j, "schema_version", 1);
    kiln_json_kv_string(j, "kind", d->sweep ? "sweep" : "bench");
    kiln_json_kv_string(j, "kiln_version", kiln_version());
    kiln_json_kv_string(j, "started_at", d->started_at);
    kiln_json_key(j, "model");
    kiln_json_object_begin(j);
    kiln_json_kv_string(j, "path", d->model_path);
    kiln_json_kv_string(j, "target", d->target);
    kiln_json_kv_string(j, "precision", kiln_bench_precision_name(d->precision));
    kiln_json_kv_string(j, "device", d->device);
    num_or_null(j, "build_s", d->build_s);
    num_or_null(j, "engine_bytes", (double)d->engine_bytes);
    kiln_json_object_end(j);
    kiln_json_key(j, "config");
    kiln_json_object_begin(j);
    kiln_json_kv_number(j, "warmup_ms", c->warmup_ms);
    kiln_json_kv_number(j, "duration_s", c->duration_s);
    kiln_json_kv_int(j, "iterations", c->iterations);
    kiln_json_kv_int(j, "streams", c->streams);
    if (d->res) kiln_json_kv_int(j, "contexts_per_stream", d->res->contexts_per_stream);
    kiln_json_kv_string(j, "graphs", c->graphs < 0 ? "default" : c->graphs ? "on" : "off");
    kiln_json_kv_bool(j, "transfers", !c->no_transfers);
    kiln_json_kv_bool(j, "profile", c->profile);
    kiln_json_kv_string(j, "shapes", c->shapes);
    num_or_null(j, "batch", c->batch > 0 ? (double)c->batch : -1);
    kiln_json_kv_int(j, "seed", (int64_t)c->seed);
    kiln_json_object_end(j);
    kiln_json_key(j, "methods");
    kiln_json_object_begin(j);
    kiln_json_kv_string(j, "percentile", KILN_SUMMARY_PERCENTILE_METHOD);
    kiln_json_kv_string(j, "median", KILN_SUMMARY_MEDIAN_METHOD);
    kiln_json_kv_string(j, "stddev", KILN_SUMMARY_STDDEV_METHOD);
    kiln_json_kv_string(j, "throughput", "queries / (last query end - first query start); items/s = qps x batch");
    kiln_json_object_end(j);
    kiln_bench_json_environment(j, d->env);
    kiln_json_key(j, "ceilings");
    if (!d->ceil || !d->ceil->known) {
        kiln_json_null(j);
    } else {
        kiln_json_object_begin(j);
        kiln_json_kv_string(j, "device", d->ceil->device);
        kiln_json_kv_number(j, "mem_gbps", d->ceil->mem_gbps);
        kiln_json_kv_number(j, "tflops_fp32", d->ceil->tflops_fp32);
        num_or_null(j, "tflops_fp16", d->ceil->tflops_fp16 > 0 ? d->ceil->tflops_fp16 : -1);
        kiln_json_kv_string(j, "measured_at", d->ceil->measured_at);
        kiln_json_kv_string(j, "method", d->ceil->method);
        kiln_json_object_end(j);
    }
}

static void results(kiln_json *j, const kiln_bench_result *r) {
    kiln_json_key(j, "results");
    kiln_json_object_begin(j);
    kiln_json_kv_int(j, "queries", (int64_t)r->nqueries);
    kiln_json_kv_int(j, "warmup_queries", r->warmup_queries);
    kiln_json_kv_number(j, "walltime_s", r->walltime_s);
    kiln_json_kv_number(j, "qps", r->qps);
    kiln_json_kv_number(j, "items_per_s", r->items_per_s);
    kiln_json_kv_int(j, "batch", r->batch);
    kiln_json_kv_string(j, "inputs", r->inputs);
    kiln_json_kv_string(j, "notes", r->notes);
    kiln_json_kv_number(j, "total_compute_s", r->gpu_time_s);
    kiln_bench_json_stats(j, "latency_ms", &r->latency);
    kiln_bench_json_stats(j, "enqueue_ms", &r->enqueue);
    kiln_bench_json_stats(j, "h2d_ms", &r->h2d);
    kiln_bench_json_stats(j, "compute_ms", &r->compute);
    kiln_bench_json_stats(j, "d2h_ms", &r->d2h);
    kiln_json_object_end(j);
    kiln_json_key(j, "memory");
    kiln_json_object_begin(j);
    kiln_json_kv_bool(j, "device", r->mem.device);
    kiln_json_kv_int(j, "weights_bytes", (int64_t)r->mem.weights);
    kiln_json_kv_int(j, "activations_bytes", (int64_t)r->mem.activations);
    kiln_json_kv_int(j, "workspace_bytes", (int64_t)r->mem.workspace);
    kiln_json_kv_int(j, "staging_bytes", (int64_t)r->mem.staging);
    kiln_json_kv_int(j, "total_bytes", (int64_t)r->mem.total);
    kiln_json_object_end(j);
}

static void layers_and_queries(kiln_json *j, const kiln_bench_result *r) {
    kiln_json_key(j, "layers");
    kiln_json_array_begin(j);
    for (int i = 0; i < r->nlayers; i++) {
        const kiln_bench_layer *l = &r->layers[i];
        kiln_json_object_begin(j);
        kiln_json_kv_string(j, "name", l->name);
        kiln_json_kv_string(j, "op", l->op);
        kiln_json_kv_string(j, "tactic", l->tactic);
        kiln_json_kv_string(j, "precision", l->precision);
        num_or_null(j, "time_ms", l->ms);
        num_or_null(j, "share", l->ms >= 0 ? l->share : -1);
        kiln_json_kv_number(j, "flops", l->flops);
        kiln_json_kv_number(j, "bytes", l->bytes);
        num_or_null(j, "gbps", l->ms > 0 ? l->bytes / (l->ms * 1e-3) / 1e9 : -1);
        num_or_null(j, "tflops", l->ms > 0 ? l->flops / (l->ms * 1e-3) / 1e12 : -1);
        kiln_json_object_end(j);
    }
    kiln_json_array_end(j);
    kiln_json_key(j, "queries");
    kiln_json_array_begin(j);
    for (size_t i = 0; i < r->nqueries; i++) {
        const kiln_bench_query *q = &r->queries[i];
        kiln_json_object_begin(j);
        kiln_json_kv_number(j, "start_ms", q->start_ms);
        kiln_json_kv_number(j, "end_ms", q->end_ms);
        kiln_json_kv_number(j, "latency_ms", q->latency_ms);
        num_or_null(j, "enqueue_ms", q->enqueue_ms);
        num_or_null(j, "h2d_ms", q->h2d_ms);
        num_or_null(j, "compute_ms", q->compute_ms);
        num_or_null(j, "d2h_ms", q->d2h_ms);
        kiln_json_kv_int(j, "stream", q->stream);
        kiln_json_object_end(j);
    }
    kiln_json_array_end(j);
}

static void analysis(kiln_json *j, const kiln_bench_doc *d) {
    const kiln_bench_result *r = d->res;
    const kiln_bench_diagnosis *g = d->diag;
    kiln_json_key(j, "roofline");
    kiln_json_object_begin(j);
    kiln_json_kv_number(j, "flops", r->flops);
    kiln_json_kv_number(j, "bytes", r->bytes);
    num_or_null(j, "achieved_gbps", g->achieved_gbps);
    num_or_null(j, "achieved_tflops", g->achieved_tflops);
    num_or_null(j, "fraction_of_bandwidth", g->frac_mem);
    num_or_null(j, "fraction_of_compute", g->frac_compute);
    kiln_json_object_end(j);
    kiln_json_key(j, "diagnosis");
    kiln_json_object_begin(j);
    kiln_json_kv_string(j, "bound", kiln_bench_bound_name(g->bound));
    kiln_json_kv_string(j, "text", g->text);
    kiln_json_key(j, "warnings");
    kiln_json_array_begin(j);
    for (int i = 0; i < g->nwarnings; i++) kiln_json_string(j, g->warnings[i]);
    kiln_json_array_end(j);
    kiln_json_object_end(j);
}

static void sweep(kiln_json *j, const kiln_bench_sweep *s) {
    kiln_json_key(j, "sweep");
    kiln_json_object_begin(j);
    kiln_json_key(j, "rows");
    kiln_json_array_begin(j);
    for (int i = 0; i < s->nrows; i++) {
        const kiln_bench_sweep_row *r = &s->rows[i];
        bool ok = !r->error[0];
        kiln_json_object_begin(j);
        kiln_json_kv_string(j, "precision", kiln_bench_precision_name(r->precision));
        kiln_json_kv_int(j, "batch", r->batch);
        kiln_json_kv_int(j, "streams", r->streams);
        kiln_json_kv_string(j, "status", ok ? "ok" : !strncmp(r->error, "unsupported", 11) ? "unsupported" : "failed");
        kiln_json_kv_string(j, "error", ok ? NULL : r->error);
        num_or_null(j, "build_s", r->build_s);
        num_or_null(j, "engine_bytes", (double)r->engine_bytes);
        num_or_null(j, "qps", ok ? r->qps : -1);
        num_or_null(j, "items_per_s", ok ? r->items_per_s : -1);
        num_or_null(j, "p50_ms", ok ? r->p50_ms : -1);
        num_or_null(j, "p95_ms", ok ? r->p95_ms : -1);
        num_or_null(j, "p99_ms", ok ? r->p99_ms : -1);
        num_or_null(j, "memory_mb", ok ? r->memory_mb : -1);
        num_or_null(j, "gpu_util_pct", r->gpu_util_pct);
        num_or_null(j, "gpu_mem_peak_mb", r->gpu_mem_peak_mb);
        num_or_null(j, "max_abs_err", isnan(r->max_abs_err) ? -1 : r->max_abs_err);
        num_or_null(j, "max_rel_err", isnan(r->max_rel_err) ? -1 : r->max_rel_err);
        kiln_json_key(j, "cosine"); /* may be negative: null only when absent */
        if (isnan(r->cosine)) kiln_json_null(j);
        else kiln_json_number(j, r->cosine);
        num_or_null(j, "top1_agree", r->top1_rows > 0 ? (double)r->top1 : -1);
        num_or_null(j, "top1_rows", r->top1_rows > 0 ? (double)r->top1_rows : -1);
        kiln_json_object_end(j);
    }
    kiln_json_array_end(j);
    kiln_json_object_end(j);
}

kiln_status kiln_bench_write_json(const kiln_bench_doc *d, const char *path) {
    kiln_strbuf b = {0};
    kiln_json j;
    kiln_json_init(&j, &b, 1);
    kiln_json_object_begin(&j);
    header(&j, d);
    if (d->sweep) {
        sweep(&j, d->sweep);
    } else {
        results(&j, d->res);
        analysis(&j, d);
        layers_and_queries(&j, d->res);
    }
    kiln_json_object_end(&j);
    kiln_status s = kiln_json_finish(&j);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s;
}
