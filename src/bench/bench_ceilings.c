/* bench_ceilings.c — the measured limits of a device that kiln bench compares achieved GB/s and
 * TFLOP/s with: kept in a JSON file (~/.cache/kiln/ceilings.json by default) keyed by device name,
 *   {"version": 1, "devices": {"NAME": {"mem_gbps": .., "tflops_fp32": .., "tflops_fp16": ..,
 *                                        "measured_at": "..", "method": ".."}, ...}}
 * and, for the CPU, measured here: a STREAM-like copy (memcpy of 256 MiB, read + write bytes) and an
 * OpenBLAS sgemm (2048^3), each the best of several runs. The GPU's are in bench_cuda.c. */
#include "bench/bench_internal.h"

#include "core/file.h"
#include "core/json_read.h"
#include "core/json_write.h"
#include "core/status.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

const char *kiln_bench_ceilings_default_path(char *buf, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0]) snprintf(buf, cap, "%s/kiln/ceilings.json", xdg);
    else snprintf(buf, cap, "%s/.cache/kiln/ceilings.json", home && home[0] ? home : ".");
    return buf;
}

/* Parses the file (missing: *found false). */
static kiln_status read_doc(const char *path, kiln_jdoc *doc, bool *found) {
    *found = false;
    struct stat st;
    if (stat(path, &st) != 0) return KILN_OK;
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open_for_update(path, &m));
    kiln_status s = kiln_jdoc_parse((const char *)m.data, m.size, path, doc);
    kiln_file_unmap(&m);
    if (s == KILN_OK) *found = true;
    return s;
}

kiln_status kiln_bench_ceilings_load(const char *path, const char *device, kiln_bench_ceilings *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->device, sizeof out->device, "%s", device);
    kiln_jdoc doc = {0};
    bool found;
    KILN_TRY(read_doc(path, &doc, &found));
    if (!found) return KILN_OK;
    const kiln_jnode *devs = kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "devices");
    const kiln_jnode *d = kiln_jdoc_get(&doc, devs, device);
    if (d) {
        out->mem_gbps = kiln_jdoc_get_num(&doc, d, "mem_gbps", 0);
        out->tflops_fp32 = kiln_jdoc_get_num(&doc, d, "tflops_fp32", 0);
        out->tflops_fp16 = kiln_jdoc_get_num(&doc, d, "tflops_fp16", 0);
        const char *at = kiln_jdoc_str(kiln_jdoc_get(&doc, d, "measured_at"));
        const char *method = kiln_jdoc_str(kiln_jdoc_get(&doc, d, "method"));
        snprintf(out->measured_at, sizeof out->measured_at, "%s", at ? at : "");
        snprintf(out->method, sizeof out->method, "%s", method ? method : "");
        out->known = out->mem_gbps > 0 && out->tflops_fp32 > 0;
    }
    kiln_jdoc_free(&doc);
    return KILN_OK;
}

/* mkdir -p of path's directory. */
static kiln_status make_parent(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return kiln_error(KILN_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
        *p = '/';
    }
    return KILN_OK;
}

kiln_status kiln_bench_ceilings_save(const char *path, const kiln_bench_ceilings *c) {
    kiln_jdoc doc = {0};
    bool found;
    KILN_TRY(read_doc(path, &doc, &found));
    kiln_strbuf b = {0};
    kiln_json j;
    kiln_json_init(&j, &b, 0);
    kiln_json_object_begin(&j);
    kiln_json_kv_int(&j, "version", 1);
    kiln_json_key(&j, "devices");
    kiln_json_object_begin(&j);
    kiln_json_key(&j, c->device);
    kiln_json_object_begin(&j);
    kiln_json_kv_number(&j, "mem_gbps", c->mem_gbps);
    kiln_json_kv_number(&j, "tflops_fp32", c->tflops_fp32);
    kiln_json_kv_number(&j, "tflops_fp16", c->tflops_fp16);
    kiln_json_kv_string(&j, "measured_at", c->measured_at);
    kiln_json_kv_string(&j, "method", c->method);
    kiln_json_object_end(&j);
    kiln_json_object_end(&j);
    kiln_json_object_end(&j);
    kiln_status s = kiln_json_finish(&j);
    /* the other devices' entries, spliced in before the devices object closes */
    const kiln_jnode *devs = found ? kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "devices") : NULL;
    kiln_strbuf out = {0};
    if (s == KILN_OK) {
        kiln_strbuf_append(&out, b.data, b.len - 3); /* b ends with "}}}\n": keep up to the entry's "}" */
        for (const kiln_jnode *d = kiln_jdoc_first(&doc, devs); d; d = kiln_jdoc_next(&doc, d)) {
            if (!d->key || !strcmp(d->key, c->device)) continue;
            kiln_strbuf_putc(&out, ',');
            kiln_json_escape(&out, d->key, strlen(d->key));
            kiln_strbuf_putc(&out, ':');
            kiln_jdoc_write(&doc, d, &out);
        }
        kiln_strbuf_puts(&out, "}}\n");
        s = make_parent(path);
    }
    if (s == KILN_OK) s = kiln_strbuf_write_file(&out, path);
    kiln_strbuf_free(&b);
    kiln_strbuf_free(&out);
    kiln_jdoc_free(&doc);
    return s;
}

kiln_status kiln_bench_ceilings_measure_cpu(kiln_bench_ceilings *out) {
    memset(out, 0, sizeof *out);
    const size_t bytes = (size_t)256 << 20;
    const int n = 2048;
    char *a = malloc(bytes), *b = malloc(bytes);
    float *x = malloc((size_t)n * n * sizeof *x), *y = malloc((size_t)n * n * sizeof *y), *z = malloc((size_t)n * n * sizeof *z);
    if (!a || !b || !x || !y || !z) {
        free(a), free(b), free(x), free(y), free(z);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory measuring the CPU ceilings");
    }
    memset(a, 1, bytes);
    memset(b, 0, bytes);
    for (size_t i = 0; i < (size_t)n * n; i++) x[i] = y[i] = (float)(i % 7) * 0.25f;
    double best_copy = 1e30, best_gemm = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = kiln_bench_now_ms();
        memcpy(r % 2 ? a : b, r % 2 ? b : a, bytes);
        double t = kiln_bench_now_ms() - t0;
        if (r > 0 && t < best_copy) best_copy = t;
    }
    for (int r = 0; r < 4; r++) {
        double t0 = kiln_bench_now_ms();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, x, n, y, n, 0.0f, z, n);
        double t = kiln_bench_now_ms() - t0;
        if (r > 0 && t < best_gemm) best_gemm = t;
    }
    free(a), free(b), free(x), free(y), free(z);
    out->mem_gbps = 2.0 * (double)bytes / (best_copy * 1e-3) / 1e9;
    out->tflops_fp32 = 2.0 * (double)n * n * n / (best_gemm * 1e-3) / 1e12;
    snprintf(out->method, sizeof out->method,
             "memcpy of 256 MiB (read + write bytes), best of 5; OpenBLAS sgemm 2048^3, best of 3 after 1 warm-up");
    out->known = true;
    return KILN_OK;
}
