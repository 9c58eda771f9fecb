/* bench_model.c — the engine kiln bench measures: an engine file loaded as is, or an ONNX model built
 * in memory for the requested target and precision, with the build time and the size the engine would
 * have on disk (it is saved to a temporary file, measured and removed). */
#include "bench/bench_internal.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status kiln_bench_open(const char *path, bool is_engine, const char *target, kiln_precision precision, int device,
                            kiln_engine **out, double *build_s, int64_t *engine_bytes) {
    struct stat st;
    *build_s = -1;
    *engine_bytes = -1;
    if (is_engine) {
        KILN_TRY(kiln_engine_load(path, out));
        if (stat(path, &st) == 0) *engine_bytes = (int64_t)st.st_size;
        return KILN_OK;
    }
    kiln_build_options o = {.target = target, .precision = precision, .device = device};
    return kiln_bench_open_options(path, &o, out, build_s, engine_bytes);
}

kiln_status kiln_bench_open_options(const char *path, const kiln_build_options *o, kiln_engine **out, double *build_s,
                                    int64_t *engine_bytes) {
    struct stat st;
    *build_s = -1;
    *engine_bytes = -1;
    double t0 = kiln_bench_now_ms();
    KILN_TRY(kiln_build_onnx(path, o, out));
    *build_s = (kiln_bench_now_ms() - t0) / 1e3;
    const char *tmp = getenv("TMPDIR");
    char name[4096];
    snprintf(name, sizeof name, "%s/kiln-bench-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(name);
    if (fd < 0) return KILN_OK; /* the size stays unknown; the benchmark does not need it */
    close(fd);
    if (kiln_engine_save(*out, name) == KILN_OK && stat(name, &st) == 0) *engine_bytes = (int64_t)st.st_size;
    else kiln_error_clear();
    unlink(name);
    return KILN_OK;
}

void kiln_bench_engine_info(const kiln_engine *e, int device, const char **target, kiln_precision *precision, char *desc,
                            size_t cap) {
    *target = e->backend->name;
    *precision = e->meta.precision;
    if (e->backend->device_name(device, desc, cap) != KILN_OK) {
        snprintf(desc, cap, "%s", e->meta.device);
        kiln_error_clear();
    }
}

kiln_status kiln_bench_device_desc(const char *target, int device, char *desc, size_t cap) {
    const kiln_backend *b = kiln_backend_find(target);
    if (!b) return kiln_error(KILN_ERR_UNSUPPORTED, "target '%s' is not built into this kiln (it has: %s)", target, kiln_backend_names());
    return b->device_name(device, desc, cap);
}
