/* dw_conv_bench.c — the CPU depthwise Conv kernel alone (kiln_conv2d_run_depthwise,
 * src/backends/cpu/conv2d_depthwise.c) at the layer shapes of torchvision EfficientNet-B0 and
 * MobileNetV3-Small (224x224, batch 1): channels, plane size, kernel size and stride, pads of half
 * the kernel, bias and SiLU epilogue. Per shape: the smallest thread CPU time of one call over 5
 * repeats of a loop of calls (about 2e8 multiply-adds each), in µs, and their sum. The input stays
 * in cache between calls, so this times the kernel's own work, not a model's memory traffic.
 *
 *   KILN_NUM_THREADS=1 dw_conv_bench
 * Exits 1 on an error. */
#define _POSIX_C_SOURCE 200809L
#include "backends/cpu/conv2d.h"
#include "backends/cpu/fused_kernels.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One layer: channels, square plane side, square kernel side, stride. */
typedef struct dw_shape {
    int64_t C, H, K, stride;
} dw_shape;

/* The smallest µs per call of the layer over 5 timed loops; negative on an error. */
static double time_layer(const dw_shape *s) {
    const int64_t C = s->C, H = s->H, K = s->K, pad = K / 2;
    kiln_conv2d g = {1, C, H, H, C, 0, 0, K, K, C, s->stride, s->stride, 1, 1, pad, pad};
    g.OH = g.OW = (H + 2 * pad - K) / s->stride + 1;
    const kiln_act silu = {KILN_ACT_SILU, 0, 0};
    float *x = calloc((size_t)(C * H * H), sizeof *x), *w = calloc((size_t)(C * K * K), sizeof *w);
    float *b = calloc((size_t)C, sizeof *b), *y = calloc((size_t)(C * g.OH * g.OW), sizeof *y);
    double best = -1;
    if (x && w && b && y) {
        for (int64_t i = 0; i < C * H * H; i++) x[i] = (float)(i % 7) * 0.1f;
        for (int64_t i = 0; i < C * K * K; i++) w[i] = (float)(i % 5) * 0.05f;
        const int calls = (int)(2e8 / (double)(C * H * H * K * K)) + 3;
        for (int r = 0; r < 5; r++) {
            double t0 = thread_seconds();
            for (int i = 0; i < calls; i++)
                if (kiln_conv2d_run_depthwise(&g, x, w, b, NULL, &silu, y) != KILN_OK) goto done;
            double t = (thread_seconds() - t0) / calls * 1e6;
            if (best < 0 || t < best) best = t;
        }
    }
done:
    free(x);
    free(w);
    free(b);
    free(y);
    return best;
}

int main(void) {
    const dw_shape shapes[] = {
        {32, 112, 3, 1},  {144, 56, 3, 1}, {240, 28, 5, 1},  {480, 14, 3, 1},  {672, 14, 5, 1},
        {1152, 7, 5, 1},  {1152, 7, 3, 1}, {96, 112, 3, 2},  {144, 56, 5, 2},  {240, 28, 3, 2},
        {672, 14, 5, 2},  {88, 28, 3, 1},  {576, 7, 5, 1},
    };
    double total = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const dw_shape *s = &shapes[i];
        double us = time_layer(s);
        if (us < 0) {
            fprintf(stderr, "dw_conv_bench: C%lld %lldx%lld k%lld s%lld failed: %s\n", (long long)s->C,
                    (long long)s->H, (long long)s->H, (long long)s->K, (long long)s->stride, kiln_last_error());
            return 1;
        }
        total += us;
        printf("C%-5lld %3lldx%-3lld k%lld s%lld: %8.1f us\n", (long long)s->C, (long long)s->H, (long long)s->H,
               (long long)s->K, (long long)s->stride, us);
    }
    printf("total %.1f us\n", total);
    return 0;
}
