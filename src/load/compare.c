/* compare.c — `kiln load compare A.json B.json`: reads two results written by --json and prints
 * them side by side, step by step (steps are paired by position), with B's change relative to A
 * for rates, latency percentiles, errors and goodput. */
#include "load/load.h"

#include "core/file.h"
#include "core/status.h"
#include "core/json_read.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct result_file {
    const char *path;
    kiln_jdoc doc;
    const kiln_jnode *root, *config, *steps;
} result_file;

/* Reads and checks one result file. */
static kiln_status open_result(const char *path, result_file *f) {
    memset(f, 0, sizeof *f);
    f->path = path;
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    kiln_status s = kiln_jdoc_parse(m.data ? (const char *)m.data : "", m.size, path, &f->doc);
    kiln_file_unmap(&m);
    KILN_TRY(s);
    f->root = kiln_jdoc_root(&f->doc);
    f->config = kiln_jdoc_get(&f->doc, f->root, "config");
    f->steps = kiln_jdoc_get(&f->doc, f->root, "steps");
    if (!kiln_jdoc_get(&f->doc, f->root, "kiln_load_format") || !f->steps || f->steps->type != KILN_JNODE_ARRAY) {
        kiln_jdoc_free(&f->doc);
        return kiln_error(KILN_ERR_PARSE, "%s: not a kiln load result (write one with kiln load --json FILE)", path);
    }
    return KILN_OK;
}

/* A number at a path of object keys below v (NAN when absent). */
static double num_at(const kiln_jdoc *d, const kiln_jnode *v, const char *k1, const char *k2, const char *k3) {
    const char *keys[3] = {k1, k2, k3};
    for (int i = 0; i < 3 && keys[i] && v; i++) v = kiln_jdoc_get(d, v, keys[i]);
    double x;
    return kiln_jdoc_num(v, &x) ? x : NAN;
}

/* A string member of obj, or "-". */
static const char *str_at(const kiln_jdoc *d, const kiln_jnode *obj, const char *key) {
    const char *s = kiln_jdoc_str(kiln_jdoc_get(d, obj, key));
    return s ? s : "-";
}

/* One comparison line: label, A, B, and B's change from A in percent. */
static void line(FILE *out, const char *label, double a, double b, int decimals) {
    if (isnan(a) && isnan(b)) return;
    char ca[32] = "-", cb[32] = "-", change[32] = "";
    if (!isnan(a)) snprintf(ca, sizeof ca, "%.*f", decimals, a);
    if (!isnan(b)) snprintf(cb, sizeof cb, "%.*f", decimals, b);
    if (!isnan(a) && !isnan(b) && a != 0) snprintf(change, sizeof change, "%+.1f%%", (b - a) / fabs(a) * 100);
    else if (!isnan(a) && !isnan(b) && b == a) snprintf(change, sizeof change, "=");
    fprintf(out, "  %-22s %16s %16s %10s\n", label, ca, cb, change);
}

/* "rate 20/s" / "concurrency 4" of a step object. */
static void step_label(const kiln_jdoc *d, const kiln_jnode *s, char *buf, size_t cap) {
    if (!s) snprintf(buf, cap, "-");
    else if (!strcmp(str_at(d, s, "mode"), "open")) snprintf(buf, cap, "rate %g/s", num_at(d, s, "rate", NULL, NULL));
    else snprintf(buf, cap, "concurrency %g", num_at(d, s, "concurrency", NULL, NULL));
}

/* Compares step i of both files. */
static void compare_step(FILE *out, const result_file *a, const result_file *b, int i) {
    const kiln_jnode *sa = kiln_jdoc_at(&a->doc, a->steps, i), *sb = kiln_jdoc_at(&b->doc, b->steps, i);
    char la[48], lb[48];
    step_label(&a->doc, sa, la, sizeof la);
    step_label(&b->doc, sb, lb, sizeof lb);
    fprintf(out, "step %d %*s %16s %16s %10s\n", i + 1, 17, "", la, lb, "B vs A");
#define BOTH(k1, k2, k3) num_at(&a->doc, sa, k1, k2, k3), num_at(&b->doc, sb, k1, k2, k3)
    line(out, "scheduled req/s", BOTH("scheduled_rate", NULL, NULL), 2);
    line(out, "completed req/s", BOTH("completed_rate", NULL, NULL), 2);
    line(out, "ok", BOTH("ok", NULL, NULL), 0);
    line(out, "failed", BOTH("failed", NULL, NULL), 0);
    line(out, "sent late", BOTH("late", NULL, NULL), 0);
    static const char *const METRICS[] = {"e2e", "ttft", "itl", "tpot"};
    static const char *const STATS[] = {"p50", "p90", "p99", "p99.9", "max"};
    for (int m = 0; m < 4; m++) {
        double ca = num_at(&a->doc, sa, "latency_ms", METRICS[m], "count"), cb = num_at(&b->doc, sb, "latency_ms", METRICS[m], "count");
        if (!(ca > 0) && !(cb > 0)) continue;
        for (int s = 0; s < 5; s++) {
            char label[48];
            snprintf(label, sizeof label, "%s %s ms", METRICS[m], STATS[s]);
            line(out, label, ca > 0 ? num_at(&a->doc, sa, "latency_ms", METRICS[m], STATS[s]) : NAN,
                 cb > 0 ? num_at(&b->doc, sb, "latency_ms", METRICS[m], STATS[s]) : NAN, 3);
        }
    }
    line(out, "output tokens/s", BOTH("output_token_rate", NULL, NULL), 1);
    double ga = num_at(&a->doc, sa, "goodput", NULL, NULL), gb = num_at(&b->doc, sb, "goodput", NULL, NULL);
    line(out, "goodput %", ga * 100, gb * 100, 2);
#undef BOTH
}

kiln_status kiln_load_compare(const char *path_a, const char *path_b, FILE *out) {
    result_file a, b;
    KILN_TRY(open_result(path_a, &a));
    kiln_status s = open_result(path_b, &b);
    if (s != KILN_OK) {
        kiln_jdoc_free(&a.doc);
        return s;
    }
    fprintf(out, "kiln load compare\n  %-22s %s\n  %-22s %s\n", "A", path_a, "B", path_b);
    fprintf(out, "  %-22s %16s %16s\n", "api", str_at(&a.doc, a.config, "api"), str_at(&b.doc, b.config, "api"));
    fprintf(out, "  %-22s %16s %16s\n", "started", str_at(&a.doc, a.root, "started_at"), str_at(&b.doc, b.root, "started_at"));
    fprintf(out, "  %-22s %16s %16s\n", "token counts", str_at(&a.doc, a.root, "token_counts"), str_at(&b.doc, b.root, "token_counts"));
    fprintf(out, "  A: %s\n  B: %s\n", str_at(&a.doc, a.config, "endpoint"), str_at(&b.doc, b.config, "endpoint"));
    int n = a.steps->count > b.steps->count ? a.steps->count : b.steps->count;
    if (a.steps->count != b.steps->count)
        fprintf(out, "note: A has %d steps, B has %d; steps are paired by position\n", a.steps->count, b.steps->count);
    for (int i = 0; i < n; i++) compare_step(out, &a, &b, i);
    double ra = num_at(&a.doc, a.root, "capacity", "rate_per_server", NULL), rb = num_at(&b.doc, b.root, "capacity", "rate_per_server", NULL);
    if (!isnan(ra) || !isnan(rb)) {
        fprintf(out, "capacity\n");
        line(out, "req/s per server", ra, rb, 2);
        line(out, "servers needed", num_at(&a.doc, a.root, "capacity", "servers_needed", NULL),
             num_at(&b.doc, b.root, "capacity", "servers_needed", NULL), 0);
    }
    kiln_jdoc_free(&a.doc);
    kiln_jdoc_free(&b.doc);
    return KILN_OK;
}
