/* compare_int8.c — what `kiln compare` adds for INT8 builds: the check that its inputs are not the
 * calibration batches (accuracy is measured on held-out data), a calibration cache for the
 * sensitivity builds, and `--per-layer`'s ranking of the int8 layers by the output error each adds
 * when quantized alone (src/quant/sensitivity.h), measured on compare's inputs. */
#include "cli.h"

#include "core/status.h"
#include "core/tensor.h"
#include "ir/fused_ops.h"
#include "quant/sensitivity.h"
#include "runtime/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool compare_int8_build(const kiln_build_options *o) {
    bool q = o->int8;
    for (int i = 0; i < o->nlayer_precisions; i++) q |= o->layer_precisions[i].precision == KILN_PRECISION_INT8;
    return q;
}

/* Whether file f is the calibration path itself or lies in that directory (same inode, or parent). */
static bool in_calibration(const char *f, const char *calib) {
    struct stat fs, cs, ps;
    if (stat(f, &fs) || stat(calib, &cs)) return false;
    if (fs.st_dev == cs.st_dev && fs.st_ino == cs.st_ino) return true;
    char *parent = strdup(f);
    if (!parent) return false;
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    bool same = !stat(slash ? (parent[0] ? parent : "/") : ".", &ps) && ps.st_dev == cs.st_dev && ps.st_ino == cs.st_ino;
    free(parent);
    return same;
}

int compare_int8_check_inputs(const cli_inputs *in, const kiln_build_options *o) {
    for (int i = 0; o->calib_dir && i < in->nfiles; i++)
        if (in_calibration(in->files[i], o->calib_dir))
            return cli_usage_error("compare ", "--input '%s' is calibration data (%s): accuracy must be measured on "
                                   "inputs the calibration did not see", in->files[i], o->calib_dir);
    return 0;
}

kiln_status compare_int8_temp_cache(char **path) {
    const char *dir = getenv("TMPDIR");
    dir = dir && *dir ? dir : "/tmp";
    size_t n = strlen(dir) + 32;
    if (!(*path = malloc(n))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(*path, n, "%s/kiln-calib-XXXXXX", dir);
    int fd = mkstemp(*path);
    if (fd < 0) {
        free(*path);
        *path = NULL;
        return kiln_error(KILN_ERR_IO, "cannot create a temporary file in '%s'", dir);
    }
    close(fd);
    unlink(*path); /* the build writes it: a cache that does not exist is not read */
    return KILN_OK;
}

/* The feed of one batch: compare's input tensors, lent (not owned) to each run. */
static kiln_status lend_input(void *ctx, int batch, int input, kiln_tensor *out) {
    (void)batch;
    *out = ((const kiln_tensor *)ctx)[input];
    out->owned = false;
    return KILN_OK;
}

kiln_status compare_int8_rank(const char *model, const kiln_build_options *o, const char *cache, const kiln_engine *test,
                              const kiln_tensor *inputs) {
    const kiln_graph *g = test->g;
    const char **names = calloc((size_t)g->nnodes + 1, sizeof *names);
    const char **ops = calloc((size_t)g->nnodes + 1, sizeof *ops);
    double *error = calloc((size_t)g->nnodes + 1, sizeof *error);
    int *order = calloc((size_t)g->nnodes + 1, sizeof *order);
    kiln_status s = names && ops && error && order ? KILN_OK : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int n = 0;
    for (int i = 0; s == KILN_OK && i < g->nnodes; i++) {
        const kiln_node *node = &g->nodes[i];
        if (node->domain && !strcmp(node->domain, KILN_FUSED_DOMAIN) && (!strcmp(node->op_type, "QConv") || !strcmp(node->op_type, "QMatMul"))) {
            ops[n] = node->op_type;
            names[n++] = node->name;
        }
    }
    kiln_quant_feed feed = {1, lend_input, (void *)inputs};
    if (s == KILN_OK) s = kiln_quant_sensitivity_measure(model, cache, o->calibrator, &feed, n, names, error);
    if (s == KILN_OK) {
        kiln_quant_rank(n, error, order);
        printf("per-layer (int8): each int8 layer quantized alone on these inputs, ranked by the error it adds to the "
               "outputs (sum |y - y_fp32|^2 / sum |y_fp32|^2); `kiln build --keep-sensitive N` keeps the top N in "
               "float\n");
        int w = 24;
        for (int i = 0; i < n; i++) w = (int)strlen(names[i]) > w ? (int)strlen(names[i]) : w;
        printf("  %4s  %-*s %-8s %12s\n", "rank", w, "layer", "op", "rel sq error");
        for (int r = 0; r < n; r++)
            printf("  %4d  %-*s %-8s %12.3g\n", r + 1, w, names[order[r]], ops[order[r]], error[order[r]]);
    }
    free(names), free(ops), free(error), free(order);
    return s;
}
