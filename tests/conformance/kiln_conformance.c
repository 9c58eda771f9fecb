/* kiln_conformance.c — runs the ONNX project's node test cases (written to disk by
 * gen_onnx_node_tests.py as CASES/<case>/{model.onnx,test_data_set_N/{input,output}_K.pb,
 * tolerance.txt}) through kiln's public API on the CPU target (or another, --target: the cuda
 * backend's fp32 engines must give the same results), and prints a per-op coverage table.
 *
 * Every case is classified as
 *   pass         built, ran, every output matched (numpy.testing.assert_allclose semantics);
 *   fail         with a one-line reason;
 *   unsupported  the build said KILN_ERR_UNSUPPORTED (an op or opset kiln does not implement);
 *   out-of-scope the model or its data uses a dtype kiln does not target (float16, bfloat16,
 *                float64, string, float8, sub-byte, complex), or sequences/optionals (test data
 *                missing), or asks for training-mode semantics (BatchNormalization
 *                training_mode=1, Dropout with a training_mode input): kiln runs inference only.
 *                Such cases are still run when possible; their result is shown with --verbose but
 *                they never count as failures.
 * The op of a case is the op type it tests: among the model's node op types, the one whose
 * snake_case (or lower-case) name is the longest prefix of the case name; an "_expanded" case
 * counts under the op of the case it expands. The model's dtypes and op types are read with a
 * small protobuf scanner here, independently of the importer under test.
 *
 * usage: kiln_conformance CASES_DIR [--filter SUBSTR]... [--verbose] [--list-failures]
 *                         [--required OPS_FILE] [--target NAME] [--strict]
 * Exit status: 0; 1 when --required is given and an in-scope case of a required op failed or was
 * unsupported (expanded cases that also use ops outside the required list are listed, not gated),
 * or with --strict when any in-scope case failed (a wrong result, or a build error other than
 * unsupported: a target may refuse what it does not run, never compute it wrong);
 * 2 on a usage error or an empty case directory; 77 (CTest's "skipped") when CASES_DIR does not
 * exist. A crashing case kills the process after naming the case; a case still running after
 * HANG_CASE_SECONDS ends the run with status 3. */
#include "kiln/kiln.h"

#include "core/half.h"
#include "core/tensor.h"
#include "frontends/onnx/onnx_import.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Under AddressSanitizer the sanitizer owns the crash signals; the runner uses its death callback. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_CONF_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KILN_CONF_ASAN 1
#endif
#ifdef KILN_CONF_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define SLOW_CASE_SECONDS 10.0
#define HANG_CASE_SECONDS 300 /* a case still running after this is reported and the run aborted */
#define STR_(x) #x
#define STR(x) STR_(x)
#define MAX_IO 64             /* inputs/outputs per data set */
#define REASON_CAP 512

/* ------------------------------------------------------------------ small utilities */

/* Prints a message and exits: only for the runner's own resource exhaustion. */
static void die(const char *what) {
    fprintf(stderr, "kiln_conformance: %s\n", what);
    exit(2);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static char *xstrndup(const char *s, size_t n) {
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

/* A growable array of owned strings. */
typedef struct strlist {
    char **v;
    int n, cap;
} strlist;

static void strlist_push(strlist *l, char *owned) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = owned;
}

static bool strlist_has(const strlist *l, const char *s) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0) return true;
    return false;
}

static void strlist_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whole file into a malloc'd buffer; NULL when it cannot be read. */
static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

#define PATH_CAP 4096

/* Formats a path into buf (PATH_CAP bytes); a path that does not fit ends the run. */
static void xpath(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void xpath(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, PATH_CAP, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= PATH_CAP) die("path too long");
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Formats into a fixed reason buffer (truncating). */
static void set_reason(char *reason, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(char *reason, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, REASON_CAP, fmt, ap);
    va_end(ap);
}

/* kiln_last_error() on one line (line breaks become "; ", or " " after a colon), at most 240
 * characters, into buf. */
static const char *last_error_line(char *buf, size_t cap) {
    const char *m = kiln_last_error();
    size_t k = 0, limit = cap - 1 < 240 ? cap - 1 : 240;
    for (; *m && k < limit; m++) {
        if (*m == '\n') {
            while (m[1] == ' ' || m[1] == '\n') m++;
            if (m[1] && k + 2 < limit) {
                if (k > 0 && buf[k - 1] != ':') buf[k++] = ';';
                buf[k++] = ' ';
            }
        } else {
            buf[k++] = *m;
        }
    }
    buf[k] = '\0';
    return buf;
}

/* The dtype's name, also for the ONNX types newer than kiln_dtype (23..26). */
static const char *dtype_str(int dt, char *buf, size_t cap) {
    static const char *const newer[] = {"float4e2m1", "float8e8m0", "uint2", "int2"};
    if (dt >= 23 && dt <= 26) return newer[dt - 23];
    const char *s = (dt >= 0 && dt < KILN_DTYPE_COUNT) ? kiln_dtype_name((kiln_dtype)dt) : "?";
    if (strcmp(s, "?") == 0) {
        snprintf(buf, cap, "dtype %d", dt);
        return buf;
    }
    return s;
}

/* The element types kiln targets; everything else makes a case out of scope. */
static bool dtype_in_scope(int dt) {
    switch (dt) {
    case KILN_F32: case KILN_U8: case KILN_I8: case KILN_U16: case KILN_I16: case KILN_I32:
    case KILN_I64: case KILN_BOOL: case KILN_U32: case KILN_U64:
        return true;
    default:
        return false;
    }
}

/* ------------------------------------------------------------------ protobuf scanning */

/* A cursor over one serialized protobuf message. */
typedef struct pb {
    const unsigned char *p, *end;
} pb;

/* One field: number, wire type, and its varint value or its bytes (wire type 2). */
typedef struct pb_field {
    uint32_t num;
    int wire;
    uint64_t v;
    const unsigned char *data;
    size_t len;
} pb_field;

static bool pb_varint(pb *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return false;
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Reads the next field. Returns 1 on a field, 0 at the end, -1 on malformed input. */
static int pb_next(pb *r, pb_field *f) {
    if (r->p >= r->end) return 0;
    uint64_t key;
    if (!pb_varint(r, &key)) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    f->data = NULL;
    f->len = 0;
    f->v = 0;
    switch (f->wire) {
    case 0:
        return pb_varint(r, &f->v) ? 1 : -1;
    case 1:
        if (r->end - r->p < 8) return -1;
        r->p += 8;
        return 1;
    case 5:
        if (r->end - r->p < 4) return -1;
        r->p += 4;
        return 1;
    case 2: {
        uint64_t len;
        if (!pb_varint(r, &len) || len > (uint64_t)(r->end - r->p)) return -1;
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        return 1;
    }
    default:
        return -1;
    }
}

static pb pb_sub(const pb_field *f) { return (pb){f->data, f->data + f->len}; }

/* TensorProto: data_type (2) and name (8). */
static bool pb_tensor_info(pb r, int *dtype, char **name) {
    pb_field f;
    int st;
    *dtype = 0;
    if (name) *name = NULL;
    while ((st = pb_next(&r, &f)) == 1) {
        if (f.num == 2 && f.wire == 0) *dtype = (int)f.v;
        if (f.num == 8 && f.wire == 2 && name) {
            free(*name);
            *name = xstrndup((const char *)f.data, f.len);
        }
    }
    return st == 0;
}

/* What the runner needs to know about a model. */
typedef struct model_info {
    strlist op_types;       /* distinct top-level node op types, in node order */
    strlist all_ops;        /* distinct op types of every node, subgraphs included */
    strlist inputs;         /* graph inputs that are not initializers (bound at run time) */
    strlist outputs;        /* graph outputs */
    char scope_reason[REASON_CAP]; /* "" when every dtype is in scope */
} model_info;

static void model_info_free(model_info *m) {
    strlist_free(&m->op_types);
    strlist_free(&m->all_ops);
    strlist_free(&m->inputs);
    strlist_free(&m->outputs);
}

static void note_scope(model_info *m, const char *what, const char *name, int dtype) {
    if (m->scope_reason[0] || dtype == 0 || dtype_in_scope(dtype)) return;
    char b[32];
    set_reason(m->scope_reason, "%s %s '%s'", dtype_str(dtype, b, sizeof b), what, name);
}

/* ValueInfoProto: its name, and whether its type is a tensor (with elem type) or something else. */
static bool pb_value_info(pb r, char **name, int *elem, const char **kind) {
    pb_field f;
    int st;
    *name = NULL;
    *elem = 0;
    *kind = "tensor";
    while ((st = pb_next(&r, &f)) == 1) {
        if (f.wire != 2) continue;
        if (f.num == 1) {
            free(*name);
            *name = xstrndup((const char *)f.data, f.len);
        } else if (f.num == 2) { /* TypeProto */
            pb t = pb_sub(&f);
            pb_field tf;
            int ts;
            while ((ts = pb_next(&t, &tf)) == 1) {
                if (tf.wire != 2) continue;
                if (tf.num == 1) { /* TypeProto.Tensor */
                    pb tt = pb_sub(&tf);
                    pb_field e;
                    while (pb_next(&tt, &e) == 1)
                        if (e.num == 1 && e.wire == 0) *elem = (int)e.v;
                } else if (tf.num == 4) {
                    *kind = "sequence";
                } else if (tf.num == 5) {
                    *kind = "map";
                } else if (tf.num == 8) {
                    *kind = "sparse tensor";
                } else if (tf.num == 9) {
                    *kind = "optional";
                }
            }
            if (ts < 0) return false;
        }
    }
    if (!*name) *name = xstrdup("");
    return st == 0;
}

/* Adds the op type of every node of a GraphProto, and of the graphs in its nodes' attributes
 * (g = 6, graphs = 11), to ops. */
static void collect_ops(pb graph, strlist *ops, int depth) {
    pb_field f;
    while (depth < 16 && pb_next(&graph, &f) == 1) {
        if (f.num != 1 || f.wire != 2) continue;
        pb n = pb_sub(&f);
        pb_field nf;
        while (pb_next(&n, &nf) == 1) {
            if (nf.num == 4 && nf.wire == 2) {
                char *op = xstrndup((const char *)nf.data, nf.len);
                if (!strlist_has(ops, op))
                    strlist_push(ops, op);
                else
                    free(op);
            } else if (nf.num == 5 && nf.wire == 2) {
                pb a = pb_sub(&nf);
                pb_field af;
                while (pb_next(&a, &af) == 1)
                    if ((af.num == 6 || af.num == 11) && af.wire == 2) collect_ops(pb_sub(&af), ops, depth + 1);
            }
        }
    }
}

/* One NodeProto: its op type (malloc'd into *op), the dtypes of its tensor attributes (Constant
 * values), and whether it asks for training-mode semantics: an attribute training_mode != 0
 * (BatchNormalization) or a Dropout with its training_mode input (the third) given. */
static void scan_node(pb n, model_info *m, char **op, bool *training) {
    pb_field nf;
    int ninputs = 0;
    bool last_input_named = false;
    while (pb_next(&n, &nf) == 1) {
        if (nf.wire != 2) continue;
        if (nf.num == 1) {
            ninputs++;
            last_input_named = nf.len > 0;
        } else if (nf.num == 4) {
            free(*op);
            *op = xstrndup((const char *)nf.data, nf.len);
        } else if (nf.num == 5) { /* AttributeProto: name = 1, i = 3, t = 5 */
            pb a = pb_sub(&nf);
            pb_field af;
            bool is_training_mode = false;
            uint64_t ival = 0;
            while (pb_next(&a, &af) == 1) {
                if (af.num == 1 && af.wire == 2)
                    is_training_mode = af.len == 13 && memcmp(af.data, "training_mode", 13) == 0;
                else if (af.num == 3 && af.wire == 0)
                    ival = af.v;
                else if (af.num == 5 && af.wire == 2) {
                    int dt;
                    pb_tensor_info(pb_sub(&af), &dt, NULL);
                    note_scope(m, "constant", "attribute", dt);
                }
            }
            if (is_training_mode && ival != 0) *training = true;
        }
    }
    if (*op && strcmp(*op, "Dropout") == 0 && ninputs >= 3 && last_input_named) *training = true;
}

/* Scans model.onnx: node op types, bound inputs, outputs, and the first out-of-scope dtype or
 * non-tensor type among inputs, outputs, initializers and Constant node tensors. */
static bool model_info_read(const char *path, model_info *m) {
    memset(m, 0, sizeof *m);
    size_t size;
    unsigned char *buf = read_file(path, &size);
    if (!buf) return false;
    pb r = {buf, buf + size}, graph = {NULL, NULL};
    pb_field f;
    int st;
    while ((st = pb_next(&r, &f)) == 1)
        if (f.num == 7 && f.wire == 2) graph = pb_sub(&f);
    bool ok = st == 0 && graph.p != NULL;
    if (ok) collect_ops(graph, &m->all_ops, 0);
    strlist inits = {0}, raw_inputs = {0};
    while (ok && (st = pb_next(&graph, &f)) == 1) {
        if (f.wire != 2) continue;
        if (f.num == 1) { /* NodeProto */
            char *op = NULL;
            bool training = false;
            scan_node(pb_sub(&f), m, &op, &training);
            if (training && op && !m->scope_reason[0])
                set_reason(m->scope_reason, "%s in training mode", op);
            if (op && !strlist_has(&m->op_types, op))
                strlist_push(&m->op_types, op);
            else
                free(op);
        } else if (f.num == 5) { /* initializer */
            int dt;
            char *name;
            ok = pb_tensor_info(pb_sub(&f), &dt, &name);
            note_scope(m, "initializer", name ? name : "", dt);
            strlist_push(&inits, name ? name : xstrdup(""));
        } else if (f.num == 11 || f.num == 12) { /* input / output */
            char *name;
            int elem;
            const char *kind;
            ok = pb_value_info(pb_sub(&f), &name, &elem, &kind);
            const char *role = f.num == 11 ? "input" : "output";
            if (strcmp(kind, "tensor") != 0 && !m->scope_reason[0])
                set_reason(m->scope_reason, "%s %s '%s'", kind, role, name);
            note_scope(m, role, name, elem);
            strlist_push(f.num == 11 ? &raw_inputs : &m->outputs, name);
        }
    }
    if (st < 0) ok = false;
    for (int i = 0; ok && i < raw_inputs.n; i++)
        if (!strlist_has(&inits, raw_inputs.v[i])) strlist_push(&m->inputs, xstrdup(raw_inputs.v[i]));
    strlist_free(&inits);
    strlist_free(&raw_inputs);
    free(buf);
    if (!ok) model_info_free(m);
    return ok;
}

/* ------------------------------------------------------------------ op of a case */

/* "BatchNormalization" -> "batch_normalization", "HardSwish" -> "hard_swish", "LRN" -> "lrn". */
static void snake_case(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; s[i] && k + 2 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isupper(c) && i > 0) {
            unsigned char prev = (unsigned char)s[i - 1], next = (unsigned char)s[i + 1];
            if (islower(prev) || isdigit(prev) || (isupper(prev) && islower(next))) out[k++] = '_';
        }
        out[k++] = (char)tolower(c);
    }
    out[k] = '\0';
}

/* Whether case name (without "test_") starts with form at a word boundary. */
static bool name_has_prefix(const char *name, const char *form) {
    size_t n = strlen(form);
    if (n == 0 || strncmp(name, form, n) != 0) return false;
    char next = name[n];
    return next == '\0' || next == '_' || isdigit((unsigned char)next);
}

/* The tested op among op_types for case `name`: longest snake_case / lower-case prefix match;
 * otherwise the single op type, otherwise the first; "?" for an empty model. */
static const char *op_for_case(const char *name, const strlist *op_types) {
    const char *rest = strncmp(name, "test_", 5) == 0 ? name + 5 : name;
    const char *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < op_types->n; i++) {
        char snake[128], lower[128];
        snake_case(op_types->v[i], snake, sizeof snake);
        snprintf(lower, sizeof lower, "%s", op_types->v[i]);
        for (char *c = lower; *c; c++) *c = (char)tolower((unsigned char)*c);
        const char *forms[2] = {snake, lower};
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(forms[k]);
            if (name_has_prefix(rest, forms[k]) && n > best_len) {
                best = op_types->v[i];
                best_len = n;
            }
        }
    }
    if (best) return best;
    return op_types->n > 0 ? op_types->v[0] : "?";
}

/* The case an "_expanded" / "_expanded_verN" case expands, as a malloc'd name, or NULL. */
static char *expanded_base(const char *name) {
    const char *e = strstr(name, "_expanded");
    if (!e) return NULL;
    const char *tail = e + strlen("_expanded");
    if (*tail != '\0') {
        if (strncmp(tail, "_ver", 4) != 0) return NULL;
        for (const char *c = tail + 4; *c; c++)
            if (!isdigit((unsigned char)*c)) return NULL;
    }
    return xstrndup(name, (size_t)(e - name));
}

/* ------------------------------------------------------------------ comparing outputs */

static double read_float_elem(const void *data, int dtype, int64_t i) {
    switch (dtype) {
    case KILN_F32: return ((const float *)data)[i];
    case KILN_F64: return ((const double *)data)[i];
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)data)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return NAN;
    }
}

static bool is_float_dtype(int dt) {
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

/* assert_allclose for one element: NaN == NaN, infinities equal only to themselves. */
static bool close_enough(double got, double exp, double rtol, double atol) {
    if (isnan(exp) || isnan(got)) return isnan(exp) && isnan(got);
    if (isinf(exp) || isinf(got)) return got == exp;
    return fabs(got - exp) <= atol + rtol * fabs(exp);
}

/* Compares engine output `name` (dtype/shape/data) with the expected tensor. Fills reason on a
 * mismatch. */
static bool compare_output(const char *name, const kiln_tensor_desc *d, const void *data,
                           const kiln_tensor *exp, double rtol, double atol, char *reason) {
    char b1[64], b2[64];
    if ((int)d->dtype != (int)exp->dtype) {
        set_reason(reason, "output '%s': dtype %s, expected %s", name,
                   dtype_str(d->dtype, b1, sizeof b1), dtype_str(exp->dtype, b2, sizeof b2));
        return false;
    }
    bool same_shape = d->ndim == exp->ndim;
    for (int k = 0; same_shape && k < d->ndim; k++) same_shape = d->dims[k] == exp->dims[k];
    if (!same_shape) {
        set_reason(reason, "output '%s': shape %s, expected %s", name,
                   kiln_shape_str(b1, sizeof b1, d->ndim, d->dims),
                   kiln_shape_str(b2, sizeof b2, exp->ndim, exp->dims));
        return false;
    }
    int64_t n = kiln_numel(exp->ndim, exp->dims);
    if (n == 0) return true;
    if (!data) {
        set_reason(reason, "output '%s': no data for %lld elements", name, (long long)n);
        return false;
    }
    size_t esz = kiln_dtype_size(exp->dtype);
    if (esz == 0) {
        set_reason(reason, "output '%s': cannot compare %s", name, dtype_str(exp->dtype, b1, sizeof b1));
        return false;
    }
    int64_t bad = 0, first = -1;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        bool ok;
        if (is_float_dtype(exp->dtype)) {
            double g = read_float_elem(data, exp->dtype, i), e = read_float_elem(exp->data, exp->dtype, i);
            ok = close_enough(g, e, rtol, atol);
            if (!ok && !isnan(g - e) && fabs(g - e) > worst) worst = fabs(g - e);
        } else if (exp->dtype == KILN_BOOL) {
            ok = (((const uint8_t *)data)[i] != 0) == (((const uint8_t *)exp->data)[i] != 0);
        } else {
            ok = memcmp((const char *)data + (size_t)i * esz, (const char *)exp->data + (size_t)i * esz, esz) == 0;
        }
        if (!ok && bad++ == 0) first = i;
    }
    if (bad == 0) return true;
    kiln_tensor got_view;
    kiln_tensor_view(&got_view, exp->dtype, exp->ndim, exp->dims, (void *)data);
    double g = kiln_tensor_get_f64(&got_view, first), e = kiln_tensor_get_f64(exp, first);
    if (is_float_dtype(exp->dtype))
        set_reason(reason, "output '%s': %lld/%lld mismatched (rtol %g atol %g); first at %lld: got %.8g expected %.8g; max abs err %.3g",
                   name, (long long)bad, (long long)n, rtol, atol, (long long)first, g, e, worst);
    else
        set_reason(reason, "output '%s': %lld/%lld mismatched; first at %lld: got %.17g expected %.17g",
                   name, (long long)bad, (long long)n, (long long)first, g, e);
    return false;
}

/* ------------------------------------------------------------------ one case */

/* V_NOT_RUN only happens to out-of-scope cases (no usable test data). */
typedef enum verdict { V_PASS, V_FAIL, V_UNSUPPORTED, V_NOT_RUN, V_NCOUNT } verdict;
static const char *const verdict_names[V_NCOUNT] = {"pass", "fail", "unsupported", "not run"};

typedef struct case_result {
    char *name;
    char *op;
    verdict v;
    bool out_of_scope;
    char scope_reason[REASON_CAP];
    char reason[REASON_CAP];
    char ungated[REASON_CAP]; /* non-empty: an expanded case of a required op that also uses ops
                                 outside the required list; --required does not gate on it */
    double seconds;
} case_result;

/* Tensors of one test_data_set directory, owned. */
typedef struct data_set {
    int nin, nout;
    kiln_tensor in[MAX_IO], out[MAX_IO];
    char *in_names[MAX_IO], *out_names[MAX_IO];
} data_set;

static void data_set_free(data_set *ds) {
    for (int i = 0; i < ds->nin; i++) {
        kiln_tensor_release(&ds->in[i]);
        free(ds->in_names[i]);
    }
    for (int i = 0; i < ds->nout; i++) {
        kiln_tensor_release(&ds->out[i]);
        free(ds->out_names[i]);
    }
    memset(ds, 0, sizeof *ds);
}

/* Number of consecutive <prefix>_K.pb files in dir. */
static int count_pb(const char *dir, const char *prefix) {
    int k = 0;
    char path[PATH_CAP];
    for (;; k++) {
        xpath(path, "%s/%s_%d.pb", dir, prefix, k);
        if (!file_exists(path) || k >= MAX_IO) return k;
    }
}

/* Reads the data set's .pb files. Fails (reason set) when a file cannot be read. */
static bool data_set_read(const char *dir, data_set *ds, char *reason) {
    memset(ds, 0, sizeof *ds);
    int nin = count_pb(dir, "input"), nout = count_pb(dir, "output");
    char path[PATH_CAP], err[256];
    for (int pass = 0; pass < 2; pass++) {
        int n = pass == 0 ? nin : nout;
        for (int k = 0; k < n; k++) {
            kiln_tensor *t = pass == 0 ? &ds->in[k] : &ds->out[k];
            char **nm = pass == 0 ? &ds->in_names[k] : &ds->out_names[k];
            xpath(path, "%s/%s_%d.pb", dir, pass == 0 ? "input" : "output", k);
            memset(t, 0, sizeof *t);
            if (kiln_onnx_read_tensor_file(path, t, nm) != KILN_OK) {
                set_reason(reason, "reading %s_%d.pb: %s", pass == 0 ? "input" : "output", k,
                           last_error_line(err, sizeof err));
                return false;
            }
            if (pass == 0)
                ds->nin++;
            else
                ds->nout++;
        }
    }
    return true;
}

/* First out-of-scope dtype among a data set's .pb files (scanned, not decoded), into reason. */
static void data_set_scope(const char *dir, char *reason) {
    char path[PATH_CAP], b[32];
    for (int pass = 0; pass < 2 && !reason[0]; pass++) {
        const char *prefix = pass == 0 ? "input" : "output";
        int n = count_pb(dir, prefix);
        for (int k = 0; k < n && !reason[0]; k++) {
            xpath(path, "%s/%s_%d.pb", dir, prefix, k);
            size_t size;
            unsigned char *buf = read_file(path, &size);
            int dt = 0;
            if (buf) pb_tensor_info((pb){buf, buf + size}, &dt, NULL);
            free(buf);
            if (dt != 0 && !dtype_in_scope(dt))
                set_reason(reason, "%s test data %s_%d.pb", dtype_str(dt, b, sizeof b), prefix, k);
        }
    }
}

/* Index of the tensor called name among names[0..n), else `fallback` when counts line up, else -1. */
static int match_name(char *const *names, int n, const char *name, int fallback, int expected_n) {
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return i;
    return (n == expected_n && fallback < n) ? fallback : -1;
}

/* Runs one data set through a fresh context and compares the outputs; *unsupported is set when the
 * run itself says KILN_ERR_UNSUPPORTED (a target that plans per shape refuses then, not at build). */
static bool run_data_set(kiln_engine *e, const data_set *ds, double rtol, double atol, char *reason, bool *unsupported) {
    char err[256];
    kiln_context *c = NULL;
    if (kiln_context_create(e, &c) != KILN_OK) {
        set_reason(reason, "context: %s", last_error_line(err, sizeof err));
        return false;
    }
    bool ok = true;
    int nin = kiln_engine_num_inputs(e), nout = kiln_engine_num_outputs(e);
    for (int i = 0; ok && i < nin; i++) {
        kiln_tensor_desc d;
        if (kiln_engine_input(e, i, &d) != KILN_OK) {
            set_reason(reason, "engine input %d: %s", i, last_error_line(err, sizeof err));
            ok = false;
            break;
        }
        if (!d.name) d.name = "";
        int k = match_name(ds->in_names, ds->nin, d.name, i, nin);
        if (k < 0) {
            set_reason(reason, "no test data for engine input '%s'", d.name);
            ok = false;
        } else if (kiln_context_set_input(c, d.name, ds->in[k].dtype, ds->in[k].ndim, ds->in[k].dims,
                                          ds->in[k].data) != KILN_OK) {
            set_reason(reason, "set_input '%s': %s", d.name, last_error_line(err, sizeof err));
            ok = false;
        }
    }
    if (ok && nout != ds->nout) {
        set_reason(reason, "engine has %d outputs, test data has %d", nout, ds->nout);
        ok = false;
    }
    kiln_status rs = ok ? kiln_context_run(c) : KILN_OK;
    if (rs != KILN_OK) {
        set_reason(reason, "run: %s", last_error_line(err, sizeof err));
        *unsupported = rs == KILN_ERR_UNSUPPORTED;
        ok = false;
    }
    for (int i = 0; ok && i < nout; i++) {
        kiln_tensor_desc d;
        const void *data = NULL;
        if (kiln_context_output(c, i, &d, &data) != KILN_OK) {
            set_reason(reason, "output %d: %s", i, last_error_line(err, sizeof err));
            ok = false;
            break;
        }
        int k = match_name(ds->out_names, ds->nout, d.name ? d.name : "", i, nout);
        if (k < 0) {
            set_reason(reason, "no expected data for output '%s'", d.name ? d.name : "?");
            ok = false;
        } else {
            ok = compare_output(d.name ? d.name : "?", &d, data, &ds->out[k], rtol, atol, reason);
        }
    }
    kiln_context_free(c);
    return ok;
}

static void read_tolerance(const char *case_dir, double *rtol, double *atol) {
    char path[PATH_CAP];
    *rtol = 1e-3; /* the ONNX backend test runner's defaults */
    *atol = 1e-7;
    xpath(path, "%s/tolerance.txt", case_dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    double r, a;
    if (fscanf(f, "%lf %lf", &r, &a) == 2) {
        *rtol = r;
        *atol = a;
    }
    fclose(f);
}

/* Sorted test_data_set_* subdirectory names of a case. */
static void list_data_sets(const char *case_dir, strlist *out) {
    DIR *d = opendir(case_dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "test_data_set_", 14) == 0) strlist_push(out, xstrdup(de->d_name));
    closedir(d);
    if (out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_str);
}

/* The target every case is built for (--target). */
static const char *g_target = "cpu";

/* The case now running, for the crash and hang handlers. */
static const char *volatile g_current_case = "";

/* Builds, runs and checks one case; fills r (r->name and r->op are set by the caller). */
static void run_case(const char *cases_dir, case_result *r, const model_info *mi) {
    char case_dir[PATH_CAP], model[PATH_CAP], err[256];
    xpath(case_dir, "%s/%s", cases_dir, r->name);
    xpath(model, "%s/model.onnx", case_dir);
    strlist sets = {0};
    list_data_sets(case_dir, &sets);
    if (mi->scope_reason[0]) set_reason(r->scope_reason, "%s", mi->scope_reason);
    for (int s = 0; s < sets.n && !r->scope_reason[0]; s++) {
        char dir[PATH_CAP];
        xpath(dir, "%s/%s", case_dir, sets.v[s]);
        data_set_scope(dir, r->scope_reason);
        if (!r->scope_reason[0] && (count_pb(dir, "input") < mi->inputs.n || count_pb(dir, "output") < mi->outputs.n))
            set_reason(r->scope_reason, "test data missing (sequence or optional values)");
    }
    if (sets.n == 0 && !r->scope_reason[0]) set_reason(r->scope_reason, "no test data");
    r->out_of_scope = r->scope_reason[0] != '\0';
    if (r->out_of_scope && (sets.n == 0 || strncmp(r->scope_reason, "test data missing", 17) == 0)) {
        r->v = V_NOT_RUN;
        strlist_free(&sets);
        return;
    }

    double rtol, atol;
    read_tolerance(case_dir, &rtol, &atol);
    kiln_build_options opts = {.target = g_target, .verbose = false};
    kiln_engine *e = NULL;
    kiln_status st = kiln_build_onnx(model, &opts, &e);
    if (st != KILN_OK) {
        r->v = st == KILN_ERR_UNSUPPORTED ? V_UNSUPPORTED : V_FAIL;
        set_reason(r->reason, "build: %s: %s", kiln_status_name(st), last_error_line(err, sizeof err));
        strlist_free(&sets);
        return;
    }
    r->v = V_PASS;
    for (int s = 0; s < sets.n && r->v == V_PASS; s++) {
        char dir[PATH_CAP];
        xpath(dir, "%s/%s", case_dir, sets.v[s]);
        data_set ds;
        bool unsupported = false;
        bool ok = data_set_read(dir, &ds, r->reason) && run_data_set(e, &ds, rtol, atol, r->reason, &unsupported);
        data_set_free(&ds);
        if (!ok) {
            r->v = unsupported ? V_UNSUPPORTED : V_FAIL;
            if (sets.n > 1) {
                char tmp[REASON_CAP];
                snprintf(tmp, sizeof tmp, "%s: %s", sets.v[s], r->reason);
                memcpy(r->reason, tmp, sizeof tmp);
            }
        }
    }
    kiln_engine_free(e);
    strlist_free(&sets);
}

/* ------------------------------------------------------------------ crash / hang reporting */

static void write_str(const char *s) {
    ssize_t w = write(STDERR_FILENO, s, strlen(s));
    (void)w;
}

static void on_hang(int sig) {
    (void)sig;
    write_str("\nkiln_conformance: HANG: case ");
    write_str((const char *)g_current_case);
    write_str(" still running after " STR(HANG_CASE_SECONDS) " s; aborting the run\n");
    _exit(3);
}

#ifdef KILN_CONF_ASAN
/* Called by the sanitizer runtime just before it ends the process on a report. */
static void on_sanitizer_death(void) {
    write_str("\nkiln_conformance: sanitizer report in case ");
    write_str((const char *)g_current_case);
    write_str("\n");
}
#else
/* Names the case, then dies of the same signal. */
static void on_crash(int sig) {
    write_str("\nkiln_conformance: CRASH (");
    write_str(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
              : sig == SIGILL ? "SIGILL" : "SIGABRT");
    write_str(") in case ");
    write_str((const char *)g_current_case);
    write_str("\n");
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif

/* Installs the crash reporting (signal handlers; under AddressSanitizer, which handles the signals
 * itself, its death callback instead) and the hang watchdog. */
static void install_handlers(void) {
#ifdef KILN_CONF_ASAN
    __sanitizer_set_death_callback(on_sanitizer_death);
#else
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_crash);
#endif
    signal(SIGALRM, on_hang);
}

/* ------------------------------------------------------------------ report */

typedef struct op_row {
    const char *op;
    int count[V_NCOUNT];
    int oos;
    bool required;
} op_row;

static int cmp_row(const void *a, const void *b) {
    return strcmp(((const op_row *)a)->op, ((const op_row *)b)->op);
}

/* Reads the required op list (one op type per line; '#' comments and blank lines ignored). */
static bool read_required(const char *path, strlist *out) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#');
        if (h) *h = '\0';
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        size_t n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
        if (n > 0 && !strlist_has(out, s)) strlist_push(out, xstrdup(s));
    }
    fclose(f);
    return true;
}

/* Reads the case's model, finds its op and whether the --required gate applies, then runs it
 * (timed, under the hang watchdog). */
static void check_case(const char *cases_dir, case_result *r, const strlist *required) {
    char path[PATH_CAP];
    xpath(path, "%s/%s/model.onnx", cases_dir, r->name);
    model_info mi;
    if (!model_info_read(path, &mi)) {
        r->op = xstrdup("?");
        r->v = V_FAIL;
        set_reason(r->reason, "model.onnx cannot be read or is not a ModelProto");
        return;
    }
    char *base = expanded_base(r->name);
    model_info bi;
    xpath(path, "%s/%s/model.onnx", cases_dir, base ? base : "");
    if (base && model_info_read(path, &bi)) {
        r->op = xstrdup(op_for_case(base, &bi.op_types));
        model_info_free(&bi);
    } else {
        r->op = xstrdup(op_for_case(base ? base : r->name, &mi.op_types));
    }
    if (base && strlist_has(required, r->op)) {
        size_t k = 0;
        for (int j = 0; j < mi.all_ops.n; j++)
            if (!strlist_has(required, mi.all_ops.v[j]) && k + 2 < REASON_CAP)
                k += (size_t)snprintf(r->ungated + k, REASON_CAP - k, "%s%s", k ? ", " : "uses ",
                                      mi.all_ops.v[j]);
    }
    free(base);

    g_current_case = r->name;
    alarm(HANG_CASE_SECONDS);
    double t0 = now_seconds();
    run_case(cases_dir, r, &mi);
    r->seconds = now_seconds() - t0;
    alarm(0);
    g_current_case = "";
    model_info_free(&mi);
}

/* One line per case for --verbose. */
static void print_case(const case_result *r) {
    if (r->out_of_scope)
        printf("%-60s %-22s out-of-scope (%s): %s%s%s  %.2fs\n", r->name, r->op, r->scope_reason,
               verdict_names[r->v], r->reason[0] ? ": " : "", r->reason, r->seconds);
    else
        printf("%-60s %-22s %s%s%s  %.2fs\n", r->name, r->op, verdict_names[r->v], r->reason[0] ? ": " : "",
               r->reason, r->seconds);
    fflush(stdout);
}

/* Counts the results per op, prints the table sorted by op with totals, and returns the rows
 * (*nrows of them; caller frees). */
static op_row *print_table(const case_result *res, int n, const strlist *required, int *nrows) {
    op_row *rows = calloc((size_t)n, sizeof *rows);
    if (!rows) die("out of memory");
    int nr = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < nr && strcmp(rows[k].op, res[i].op) != 0) k++;
        if (k == nr) {
            rows[nr].op = res[i].op;
            rows[nr].required = strlist_has(required, res[i].op);
            nr++;
        }
        if (res[i].out_of_scope)
            rows[k].oos++;
        else
            rows[k].count[res[i].v]++;
    }
    qsort(rows, (size_t)nr, sizeof *rows, cmp_row);
    int tot[V_NCOUNT] = {0}, tot_oos = 0;
    printf("\n%-28s %6s %6s %12s %13s\n", "op", "pass", "fail", "unsupported", "out-of-scope");
    printf("%-28s %6s %6s %12s %13s\n", "----------------------------", "------", "------", "------------",
           "-------------");
    for (int k = 0; k < nr; k++) {
        char label[64];
        snprintf(label, sizeof label, "%s%s", rows[k].op, rows[k].required ? " *" : "");
        printf("%-28s %6d %6d %12d %13d\n", label, rows[k].count[V_PASS], rows[k].count[V_FAIL],
               rows[k].count[V_UNSUPPORTED], rows[k].oos);
        for (int v = 0; v < V_NCOUNT; v++) tot[v] += rows[k].count[v];
        tot_oos += rows[k].oos;
    }
    printf("%-28s %6d %6d %12d %13d\n", "total", tot[V_PASS], tot[V_FAIL], tot[V_UNSUPPORTED], tot_oos);
    printf("%d cases, %d ops%s\n", n, nr, required->n ? "; * = required op" : "");
    *nrows = nr;
    return rows;
}

/* The --required gate: lists every in-scope case of a required op that did not pass and returns 1
 * if there is one. Expanded cases that also need ops outside the list are reported, not gated. */
static int check_required(const case_result *res, int n, const strlist *required, const op_row *rows,
                          int nrows, bool filtered) {
    int bad = 0, ungated = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].out_of_scope || res[i].v == V_PASS || !strlist_has(required, res[i].op)) continue;
        if (res[i].ungated[0]) {
            ungated++;
            continue;
        }
        if (bad++ == 0) printf("\nrequired ops not fully passing:\n");
        printf("  %-58s %-22s %s: %s\n", res[i].name, res[i].op, verdict_names[res[i].v], res[i].reason);
    }
    if (ungated) printf("\nnot gated (expansions of required ops that also use other ops):\n");
    for (int i = 0; ungated && i < n; i++)
        if (!res[i].out_of_scope && res[i].v != V_PASS && res[i].ungated[0] && strlist_has(required, res[i].op))
            printf("  %-58s %-22s %s (%s): %s\n", res[i].name, res[i].op, verdict_names[res[i].v],
                   res[i].ungated, res[i].reason);
    int unseen = 0;
    for (int q = 0; q < required->n && !filtered; q++) {
        bool seen = false;
        for (int k = 0; k < nrows && !seen; k++)
            seen = strcmp(rows[k].op, required->v[q]) == 0 && rows[k].count[V_PASS] > 0;
        if (!seen) printf("%s%s", unseen++ ? " " : "note: required ops without a passing in-scope case: ", required->v[q]);
    }
    if (unseen) printf("\n");
    printf("%s: %d in-scope case(s) of required ops not passing\n", bad ? "FAILED" : "OK", bad);
    return bad ? 1 : 0;
}

static void usage(void) {
    fprintf(stderr,
            "usage: kiln_conformance CASES_DIR [--filter SUBSTR]... [--verbose] [--list-failures]\n"
            "                        [--required OPS_FILE] [--target NAME] [--strict]\n"
            "  CASES_DIR       ONNX node test cases written by tests/conformance/gen_onnx_node_tests.py\n"
            "  --filter S      only cases whose name contains S (repeatable: any of them)\n"
            "  --verbose       print every case with its result and reason\n"
            "  --list-failures print every failing or unsupported case with its reason\n"
            "  --required F    op types (one per line) that must fully pass: exit 1 otherwise\n"
            "  --target NAME   build every case for this target (default cpu; cuda: fp32 engines)\n"
            "  --strict        exit 1 when any in-scope case fails (unsupported cases do not count)\n");
}

/* Quiet logger: library warnings only show with --verbose. */
static void quiet_log(kiln_log_level level, const char *msg, void *user) {
    if (*(const bool *)user) fprintf(stderr, "    [kiln][%d] %s\n", (int)level, msg);
}

int main(int argc, char **argv) {
    const char *cases_dir = NULL, *required_path = NULL;
    strlist filters = {0}, required = {0};
    bool verbose = false, list_failures = false, strict = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--target") == 0 && i + 1 < argc) {
            g_target = argv[++i];
        } else if (strcmp(argv[i], "--strict") == 0) {
            strict = true;
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            strlist_push(&filters, xstrdup(argv[++i]));
        } else if (strcmp(argv[i], "--required") == 0 && i + 1 < argc) {
            required_path = argv[++i];
        } else if (strcmp(argv[i], "--verbose") == 0) {
            verbose = true;
        } else if (strcmp(argv[i], "--list-failures") == 0) {
            list_failures = true;
        } else if (argv[i][0] != '-' && !cases_dir) {
            cases_dir = argv[i];
        } else {
            usage();
            return 2;
        }
    }
    if (!cases_dir) {
        usage();
        return 2;
    }
    if (required_path && !read_required(required_path, &required)) {
        fprintf(stderr, "kiln_conformance: cannot read required op list %s\n", required_path);
        return 2;
    }

    strlist names = {0};
    DIR *d = opendir(cases_dir);
    if (!d) {
        fprintf(stderr, "kiln_conformance: SKIPPED: cannot open %s (generate the cases with "
                        "python tests/conformance/gen_onnx_node_tests.py %s)\n", cases_dir, cases_dir);
        strlist_free(&required);
        strlist_free(&filters);
        return 77;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        bool keep = filters.n == 0;
        for (int i = 0; i < filters.n && !keep; i++) keep = strstr(de->d_name, filters.v[i]) != NULL;
        char model[PATH_CAP];
        xpath(model, "%s/%s/model.onnx", cases_dir, de->d_name);
        if (keep && file_exists(model)) strlist_push(&names, xstrdup(de->d_name));
    }
    closedir(d);
    if (names.n == 0) {
        fprintf(stderr, "kiln_conformance: no cases in %s%s\n", cases_dir, filters.n ? " match the filters" : "");
        strlist_free(&required);
        strlist_free(&filters);
        strlist_free(&names);
        return 2;
    }
    qsort(names.v, (size_t)names.n, sizeof *names.v, cmp_str);

    kiln_log_set_level(KILN_LOG_WARN);
    kiln_log_set_callback(quiet_log, &verbose);
    install_handlers();

    case_result *res = calloc((size_t)names.n, sizeof *res);
    if (!res) die("out of memory");
    for (int i = 0; i < names.n; i++) {
        res[i].name = names.v[i];
        check_case(cases_dir, &res[i], &required);
        if (verbose) print_case(&res[i]);
    }
    int nrows = 0;
    op_row *rows = print_table(res, names.n, &required, &nrows);

    for (int i = 0; i < names.n; i++)
        if (res[i].seconds > SLOW_CASE_SECONDS)
            printf("SLOW: %s took %.1f s (> %.0f s)\n", res[i].name, res[i].seconds, SLOW_CASE_SECONDS);

    if (list_failures) {
        int listed = 0;
        printf("\nfailing / unsupported in-scope cases:\n");
        for (int i = 0; i < names.n; i++) {
            if (res[i].out_of_scope || res[i].v == V_PASS) continue;
            printf("  %-58s %-22s %s: %s\n", res[i].name, res[i].op, verdict_names[res[i].v], res[i].reason);
            listed++;
        }
        if (!listed) printf("  none\n");
    }

    int status = required.n ? check_required(res, names.n, &required, rows, nrows, filters.n > 0) : 0;
    if (strict) {
        int failed = 0;
        for (int i = 0; i < names.n; i++) failed += !res[i].out_of_scope && res[i].v == V_FAIL;
        printf("\n--strict (target %s): %d in-scope case(s) failed\n", g_target, failed);
        if (failed) status = 1;
    }

    for (int i = 0; i < names.n; i++) free(res[i].op);
    free(res);
    free(rows);
    strlist_free(&names);
    strlist_free(&filters);
    strlist_free(&required);
    return status;
}
