/* bench_print.c — kiln bench's console report: trtexec's "Performance summary" lines (same labels and
 * order, with stddev, p99.9 and the methods added), then the environment, memory, roofline, the
 * diagnosis, the per-layer profile and its sums per op type, and for a sweep one comparison table. Absent measurements say
 * "absent" rather than disappearing. */
#include "bench/bench_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kiln_bench_bytes_text(double bytes, char *buf, size_t cap) {
    const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (bytes >= 1000 && u < 4) {
        bytes /= 1000;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

void kiln_bench_print_stats(FILE *f, const char *label, const kiln_bench_stats *s) {
    if (!s->present) {
        fprintf(f, "%s: absent\n", label);
        return;
    }
    fprintf(f,
            "%s: min = %.5g ms, max = %.5g ms, mean = %.5g ms, median = %.5g ms, percentile(90%%) = %.5g ms, "
            "percentile(95%%) = %.5g ms, percentile(99%%) = %.5g ms, percentile(99.9%%) = %.5g ms, stddev = %.5g ms (cv %.2f %%)\n",
            label, s->s.min, s->s.max, s->s.mean, s->s.median, s->p90, s->p95, s->p99, s->p999, s->s.stddev, 100 * s->s.cv);
}

static void sample_line(FILE *f, const char *when, const kiln_gpu_sample *s) {
    if (!s->valid) {
        fprintf(f, "  %-7s clocks, power, temperature: absent\n", when);
        return;
    }
    char thr[256];
    kiln_bench_throttle_text(s->throttle, thr, sizeof thr);
    fprintf(f, "  %-7s SM %.0f MHz, memory %.0f MHz, %.1f W, %.0f C, utilization %.0f %%, throttle: %s\n", when, s->sm_mhz, s->mem_mhz,
            s->power_w, s->temp_c, s->util_pct, thr);
}

static const char *or_absent(const char *s) { return s && s[0] ? s : "absent"; }

void kiln_bench_print_env(const kiln_bench_env *env, const char *target, FILE *f) {
    fprintf(f, "=== Environment ===\n");
    fprintf(f, "CPU: %s, %d threads; host %s, %s\n", env->cpu_model, env->cpu_threads, env->host, env->os);
    if (!env->gpu) {
        fprintf(f, "GPU: absent (target %s)\n", target);
        return;
    }
    fprintf(f, "GPU: %s (%s), PCI %s\n", or_absent(env->gpu_name), or_absent(env->gpu_arch), or_absent(env->gpu_pci));
    fprintf(f, "  driver %s, CUDA driver %s, CUDA runtime %s, cuBLASLt %s, cuDNN %s\n", or_absent(env->driver), or_absent(env->cuda_driver),
            or_absent(env->cuda_runtime), or_absent(env->cublas), or_absent(env->cudnn));
    if (!env->nvml) fprintf(f, "  NVML: absent (%s)\n", or_absent(env->nvml_error));
    sample_line(f, "before", &env->before);
    sample_line(f, "after", &env->after);
    if (env->util_mean_pct >= 0)
        fprintf(f, "  during  utilization mean %.1f %%, max %.0f %%; memory used peak %.0f MB\n", env->util_mean_pct, env->util_max_pct,
                env->mem_used_peak_mb);
}

static void print_memory_roofline(const kiln_bench_doc *d, FILE *f) {
    const kiln_bench_result *r = d->res;
    const kiln_bench_memory *m = &r->mem;
    char a[32], b[32], c[32], e[32], t[32];
    fprintf(f, "=== Memory (%s) ===\n", m->device ? "device" : "host");
    fprintf(f, "weights %s, activations %s per context (peak), workspace %s, pinned staging %s; total %s for %d stream%s\n",
            kiln_bench_bytes_text((double)m->weights, a, 32), kiln_bench_bytes_text((double)m->activations, b, 32),
            kiln_bench_bytes_text((double)m->workspace, c, 32), kiln_bench_bytes_text((double)m->staging, e, 32),
            kiln_bench_bytes_text((double)m->total, t, 32), d->cfg->streams, d->cfg->streams == 1 ? "" : "s");
    fprintf(f, "=== Roofline ===\n");
    fprintf(f, "work per query (estimate): %.4g GFLOP (MatMul, Gemm, Conv, Attention), %s touched (inputs + outputs of every layer)\n",
            r->flops / 1e9, kiln_bench_bytes_text(r->bytes, a, 32));
    const kiln_bench_diagnosis *dg = d->diag;
    const kiln_bench_ceilings *cl = d->ceil;
    if (dg->achieved_gbps >= 0) fprintf(f, "achieved over the median compute time: %.2f GB/s, %.4f TFLOP/s\n", dg->achieved_gbps, dg->achieved_tflops);
    char fp16[32] = "absent";
    if (cl && cl->tflops_fp16 > 0) snprintf(fp16, sizeof fp16, "%.2f TFLOP/s", cl->tflops_fp16);
    if (cl && cl->known)
        fprintf(f, "ceilings of %s (measured %s): %.1f GB/s, %.3f TFLOP/s fp32, fp16 %s -> %.1f %% of bandwidth, %.1f %% of compute\n",
                cl->device, cl->measured_at, cl->mem_gbps, cl->tflops_fp32, fp16, 100 * dg->frac_mem, 100 * dg->frac_compute);
    else fprintf(f, "ceilings: absent (run `kiln bench --ceilings%s` once)\n", d->env->gpu ? " --target cuda" : "");
}

static void print_profile(const kiln_bench_result *r, FILE *f) {
    fprintf(f, "=== Profile (%d runs, mean per layer) ===\n", r->profile_runs);
    fprintf(f, "%-32s %-18s %-24s %-9s %10s %7s %10s %10s\n", "layer", "op", "tactic", "precision", "time ms", "share", "GB/s", "TFLOP/s");
    double total = 0;
    for (int i = 0; i < r->nlayers; i++) {
        const kiln_bench_layer *l = &r->layers[i];
        if (l->ms < 0) {
            fprintf(f, "%-32.32s %-18.18s %-24.24s %-9s %10s\n", l->name, l->op, l->tactic, l->precision, "-");
            continue;
        }
        total += l->ms;
        double s = l->ms * 1e-3;
        fprintf(f, "%-32.32s %-18.18s %-24.24s %-9s %10.4f %6.1f%% %10.2f %10.4f\n", l->name, l->op, l->tactic, l->precision, l->ms,
                100 * l->share, s > 0 ? l->bytes / s / 1e9 : 0, s > 0 ? l->flops / s / 1e12 : 0);
    }
    fprintf(f, "%-32s %-18s %-24s %-9s %10.4f %6.1f%%\n", "Total", "", "", "", total, 100.0);
}

int kiln_bench_op_totals(const kiln_bench_result *r, kiln_bench_op_total *out, int cap) {
    int n = 0, all = 0;
    double total = 0;
    kiln_bench_op_total *rows = calloc((size_t)r->nlayers + 1, sizeof *rows);
    if (!rows) return 0;
    for (int i = 0; i < r->nlayers; i++) {
        const kiln_bench_layer *l = &r->layers[i];
        if (l->ms < 0) continue;
        int k = 0;
        while (k < all && strcmp(rows[k].op, l->op)) k++;
        if (k == all) rows[all++].op = l->op;
        rows[k].layers++;
        rows[k].ms += l->ms;
        total += l->ms;
    }
    for (int k = 0; k < all; k++) rows[k].share = total > 0 ? rows[k].ms / total : 0;
    for (int k = 1; k < all; k++) /* insertion sort, stable: ties keep first-appearance order */
        for (int j = k; j > 0 && rows[j].ms > rows[j - 1].ms; j--) {
            kiln_bench_op_total t = rows[j];
            rows[j] = rows[j - 1];
            rows[j - 1] = t;
        }
    for (; n < all && n < cap; n++) out[n] = rows[n];
    free(rows);
    return n;
}

/* The profile summed per op type: where the time goes, one line an op. */
static void print_op_totals(const kiln_bench_result *r, FILE *f) {
    kiln_bench_op_total *rows = calloc((size_t)r->nlayers + 1, sizeof *rows);
    if (!rows) return;
    int n = kiln_bench_op_totals(r, rows, r->nlayers);
    fprintf(f, "=== Profile by op (sum over layers of each op, mean per query) ===\n");
    fprintf(f, "%-24s %7s %10s %7s\n", "op", "layers", "time ms", "share");
    for (int k = 0; k < n; k++)
        fprintf(f, "%-24.24s %7d %10.4f %6.1f%%\n", rows[k].op, rows[k].layers, rows[k].ms, 100 * rows[k].share);
    free(rows);
}

static void print_sweep(const kiln_bench_sweep *s, FILE *f) {
    fprintf(f, "=== Sweep (%d configurations) ===\n", s->nrows);
    fprintf(f, "%-9s %6s %7s %8s %10s %11s %12s %9s %9s %9s %10s %8s %11s %11s %9s %9s\n", "precision", "batch", "streams", "build s",
            "engine MB", "qps", "items/s", "p50 ms", "p95 ms", "p99 ms", "memory MB", "GPU %", "max abs err", "max rel err", "cosine",
            "top-1");
    for (int i = 0; i < s->nrows; i++) {
        const kiln_bench_sweep_row *r = &s->rows[i];
        fprintf(f, "%-9s %6lld %7d ", kiln_bench_precision_name(r->precision), (long long)r->batch, r->streams);
        if (r->error[0]) {
            fprintf(f, "%s\n", r->error);
            continue;
        }
        char build[16] = "-", eng[16] = "-", util[16] = "absent", ea[16] = "absent", er[16] = "absent", cos[16] = "absent",
             top1[48] = "-";
        if (r->build_s >= 0) snprintf(build, sizeof build, "%.2f", r->build_s);
        if (r->engine_bytes >= 0) snprintf(eng, sizeof eng, "%.2f", (double)r->engine_bytes / 1e6);
        if (r->gpu_util_pct >= 0) snprintf(util, sizeof util, "%.0f", r->gpu_util_pct);
        if (!isnan(r->max_abs_err)) snprintf(ea, sizeof ea, "%.3g", r->max_abs_err);
        if (!isnan(r->max_rel_err)) snprintf(er, sizeof er, "%.3g", r->max_rel_err);
        if (!isnan(r->cosine)) snprintf(cos, sizeof cos, "%.6f", r->cosine);
        if (r->top1_rows > 0) snprintf(top1, sizeof top1, "%lld/%lld", (long long)r->top1, (long long)r->top1_rows);
        fprintf(f, "%8s %10s %11.1f %12.1f %9.4f %9.4f %9.4f %10.2f %8s %11s %11s %9s %9s\n", build, eng, r->qps, r->items_per_s, r->p50_ms,
                r->p95_ms, r->p99_ms, r->memory_mb, util, ea, er, cos, top1);
    }
    fprintf(f, "accuracy: against the fp32 configuration of the same batch on the same seeded inputs "
               "(max |out - ref|, and that over max |ref|; the least cosine similarity of an output; top-1: rows of "
               "[rows, classes] outputs whose top class is fp32's)\n");
    if (s->random_calib)
        fprintf(f, "int8 / fp8: calibrated on random inputs (no --calib): their accuracy means little; give --calib "
                   "DIR with real data\n");
}

void kiln_bench_print(const kiln_bench_doc *d, FILE *f) {
    fprintf(f, "=== kiln bench: %s (target %s, %s) ===\n", d->model_path, d->target, kiln_bench_precision_name(d->precision));
    fprintf(f, "device: %s\n", d->device);
    char a[32];
    if (d->build_s >= 0) fprintf(f, "engine: built in memory in %.3f s, %s serialized\n", d->build_s, d->engine_bytes >= 0 ? kiln_bench_bytes_text((double)d->engine_bytes, a, 32) : "?");
    else if (d->engine_bytes >= 0) fprintf(f, "engine: loaded, %s\n", kiln_bench_bytes_text((double)d->engine_bytes, a, 32));
    if (d->sweep) {
        print_sweep(d->sweep, f);
        kiln_bench_print_env(d->env, d->target, f);
        return;
    }
    const kiln_bench_result *r = d->res;
    const kiln_bench_config *c = d->cfg;
    fprintf(f, "inputs: %s (batch %lld)%s%s\n", r->inputs, (long long)r->batch, r->notes[0] ? "; " : "", r->notes);
    fprintf(f, "method: warm-up %.0f ms (%lld queries), then >= %g s and >= %lld queries on %d stream%s%s; CUDA graphs %s; transfers %s\n",
            c->warmup_ms, (long long)r->warmup_queries, c->duration_s, (long long)c->iterations, c->streams, c->streams == 1 ? "" : "s",
            r->contexts_per_stream > 1 ? " (2 contexts each, transfers overlapping computation)" : "",
            !r->graphs_available ? "n/a (cpu)" : c->graphs == 0 ? "off" : "on",
            c->no_transfers ? "off (--no-transfers)" : "on");
    fprintf(f, "=== Performance summary ===\n");
    fprintf(f, "Throughput: %.4g qps, %.4g items/s (batch %lld)\n", r->qps, r->items_per_s, (long long)r->batch);
    kiln_bench_print_stats(f, "Latency", &r->latency);
    kiln_bench_print_stats(f, "Enqueue Time", &r->enqueue);
    kiln_bench_print_stats(f, "H2D Latency", &r->h2d);
    kiln_bench_print_stats(f, d->env->gpu ? "GPU Compute Time" : "Compute Time (host)", &r->compute);
    kiln_bench_print_stats(f, "D2H Latency", &r->d2h);
    fprintf(f, "Total Host Walltime: %.5g s (%zu queries)\n", r->walltime_s, r->nqueries);
    fprintf(f, "Total %s Compute Time: %.5g s\n", d->env->gpu ? "GPU" : "host", r->gpu_time_s);
    fprintf(f, "Methods: percentile %s; median %s; stddev %s\n", KILN_SUMMARY_PERCENTILE_METHOD, KILN_SUMMARY_MEDIAN_METHOD,
            KILN_SUMMARY_STDDEV_METHOD);
    kiln_bench_print_env(d->env, d->target, f);
    print_memory_roofline(d, f);
    fprintf(f, "=== Diagnosis ===\n%s\n", d->diag->text);
    for (int i = 0; i < d->diag->nwarnings; i++) fprintf(f, "[W] %s\n", d->diag->warnings[i]);
    if (c->profile) {
        print_profile(r, f);
        print_op_totals(r, f);
    }
}
