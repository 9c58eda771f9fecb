/* bench_diagnose.c — what bounds a benchmarked engine, in one line with its numbers and what to try,
 * plus trtexec's warnings. The rules, in order:
 *   transfers  median H2D + D2H >= median compute (trtexec warns when either one alone is);
 *   enqueue    median enqueue > 0.8 x median compute (trtexec's rule) on a GPU;
 *   memory / compute: with measured ceilings, achieved GB/s and TFLOP/s (the FLOP / byte estimate over
 *              the median compute time) as fractions of them; the larger fraction names the bound,
 *              unless both are under 10 %: then overhead (launches, small kernels, host work);
 *   unknown    without ceilings or compute time (then the numbers and `kiln bench --ceilings`).
 * Warnings: compute CoV above 1 % (trtexec's), a GPU run without CUDA graphs. */
#include "bench/bench.h"

#include <stdio.h>
#include <string.h>

const char *kiln_bench_bound_name(kiln_bench_bound b) {
    switch (b) {
    case KILN_BOUND_ENQUEUE: return "enqueue";
    case KILN_BOUND_TRANSFERS: return "transfers";
    case KILN_BOUND_MEMORY: return "memory";
    case KILN_BOUND_COMPUTE: return "compute";
    case KILN_BOUND_OVERHEAD: return "overhead";
    case KILN_BOUND_UNKNOWN: break;
    }
    return "unknown";
}

static void warn(kiln_bench_diagnosis *d, const char *text) {
    if (d->nwarnings < 4) snprintf(d->warnings[d->nwarnings++], sizeof d->warnings[0], "%s", text);
}

/* The achieved rates and their fractions of the ceilings. */
static void rates(const kiln_bench_diag_input *in, kiln_bench_diagnosis *d) {
    d->achieved_gbps = d->achieved_tflops = d->frac_mem = d->frac_compute = -1;
    if (!(in->compute_ms > 0)) return;
    d->achieved_gbps = in->bytes / (in->compute_ms * 1e-3) / 1e9;
    d->achieved_tflops = in->flops / (in->compute_ms * 1e-3) / 1e12;
    if (in->ceil_gbps > 0) d->frac_mem = d->achieved_gbps / in->ceil_gbps;
    if (in->ceil_tflops > 0) d->frac_compute = d->achieved_tflops / in->ceil_tflops;
}

void kiln_bench_diagnose(const kiln_bench_diag_input *in, kiln_bench_diagnosis *d) {
    memset(d, 0, sizeof *d);
    rates(in, d);
    double xfer = (in->h2d_ms > 0 ? in->h2d_ms : 0) + (in->d2h_ms > 0 ? in->d2h_ms : 0);
    size_t cap = sizeof d->text;
    if (in->compute_ms > 0 && in->h2d_ms >= 0 && xfer >= in->compute_ms) {
        d->bound = KILN_BOUND_TRANSFERS;
        snprintf(d->text, cap,
                 "bound by transfers: H2D %.3f ms + D2H %.3f ms >= compute %.3f ms per query; try --no-transfers to time the "
                 "computation alone, keep inputs on the device, or batch more work per copy",
                 in->h2d_ms, in->d2h_ms > 0 ? in->d2h_ms : 0, in->compute_ms);
    } else if (in->gpu && in->compute_ms > 0 && in->enqueue_ms > 0.8 * in->compute_ms) {
        d->bound = KILN_BOUND_ENQUEUE;
        snprintf(d->text, cap,
                 "bound by enqueue/launch: enqueue %.3f ms > 0.8 x compute %.3f ms, the GPU waits for the host; try %s"
                 "a larger batch, or more --streams",
                 in->enqueue_ms, in->compute_ms, in->graphs_available && !in->graphs_on ? "--graph on, " : "");
    } else if (d->frac_mem >= 0 && d->frac_compute >= 0) {
        if (d->frac_mem < 0.1 && d->frac_compute < 0.1) {
            d->bound = KILN_BOUND_OVERHEAD;
            snprintf(d->text, cap,
                     "bound by overhead (latency): %.1f GB/s is %.1f %% of %.0f GB/s and %.3f TFLOP/s is %.1f %% of %.2f TFLOP/s; "
                     "small kernels, launches or host work dominate: try a larger batch, more --streams, %s--profile to "
                     "find the slow layers",
                     d->achieved_gbps, 100 * d->frac_mem, in->ceil_gbps, d->achieved_tflops, 100 * d->frac_compute, in->ceil_tflops,
                     in->graphs_available && !in->graphs_on ? "--graph on, " : "");
        } else if (d->frac_mem >= d->frac_compute) {
            d->bound = KILN_BOUND_MEMORY;
            snprintf(d->text, cap,
                     "bound by memory bandwidth: %.1f GB/s is %.1f %% of the measured %.0f GB/s (compute %.1f %% of %.2f TFLOP/s); "
                     "try fp16/bf16 to halve the bytes, or a larger batch to reuse the weights",
                     d->achieved_gbps, 100 * d->frac_mem, in->ceil_gbps, 100 * d->frac_compute, in->ceil_tflops);
        } else {
            d->bound = KILN_BOUND_COMPUTE;
            snprintf(d->text, cap,
                     "bound by compute: %.3f TFLOP/s is %.1f %% of the measured %.2f TFLOP/s (memory %.1f %% of %.0f GB/s); "
                     "try fp16/bf16 (tensor cores) or fewer FLOPs (a smaller model or input)",
                     d->achieved_tflops, 100 * d->frac_compute, in->ceil_tflops, 100 * d->frac_mem, in->ceil_gbps);
        }
    } else {
        d->bound = KILN_BOUND_UNKNOWN;
        if (in->compute_ms > 0)
            snprintf(d->text, cap,
                     "bound: unknown without the device's ceilings (achieved %.1f GB/s, %.3f TFLOP/s); run `kiln bench --ceilings` "
                     "once to measure them",
                     d->achieved_gbps, d->achieved_tflops);
        else snprintf(d->text, cap, "bound: unknown (the backend measured no compute time)");
    }
    if (in->compute_cv > 0.01) {
        char w[320];
        snprintf(w, sizeof w, "compute time is unstable: coefficient of variation %.1f %%; %s", 100 * in->compute_cv,
                 in->gpu ? "lock the GPU clocks or close other GPU work" : "pin the process to cores or close other work");
        warn(d, w);
    }
    if (in->gpu && in->graphs_available && !in->graphs_on && d->bound != KILN_BOUND_ENQUEUE)
        warn(d, "CUDA graphs were off (--graph off): launch overhead is included in every query");
}
