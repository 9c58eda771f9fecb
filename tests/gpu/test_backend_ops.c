/* test_backend_ops.c — every op case of op_cases.c run on a backend (default: cuda) and on the CPU
 * backend, the oracle, and compared (after llama.cpp's test-backend-ops).
 *
 * Each case is a single-node graph built twice with kiln_build_graph: for "cpu" in FP32 and for the
 * backend under test in the engine precision being checked (f32, f16, bf16). Both get the same
 * inputs: random with a fixed seed per case, float32 on the host, quantized to the engine precision
 * so that the only difference left is the kernels' own arithmetic. The engine under test first runs
 * on other random inputs, so that an output element a kernel forgets to write keeps a wrong value
 * (the poison) instead of happening to be right. Float outputs are compared by normalised MSE
 * sum((got - want)^2) / sum(want^2), integer and bool outputs exactly (the requantized outputs of
 * kiln.QMatMul and kiln.QConv within one unit, in at most 1% of the elements), NaN/Inf by position.
 *
 * The LLM kernels are cases of the same table (ops "llm.*", llm_op_cases.h): no graph, each launcher
 * of src/llm/cuda/ on device arrays against its CPU reference (src/llm/llm_cpu_ops.c, sampler.c), in
 * f16 and bf16 (argmax and the sampler, on FP32 logits: f32), by the same driver, filters and report;
 * besides the NMSE bound they hold a bound on the largest error of their own. With --target cpu they
 * run their CPU reference alone.
 *
 * Prints one line per case, a summary table per op, the unsupported cases (the backend refused the
 * node at build time, or the CPU has no kernel to check it against: reported, not a failure) and the
 * failures. Exit status: 0 when no case failed, 1 when one did, 2 for a usage error, 77 when there is
 * no GPU (CTest: skipped).
 *
 * The cases run in a child process; when it crashes, hangs or meets a backend error (after which a
 * CUDA context may be unusable), that case fails and a fresh child goes on with the next one, so one
 * broken kernel does not hide the results of all the others. --no-fork runs everything in-process.
 *
 * --perf times the engine under test instead, on the large shapes of kiln_perf_cases: the median of
 * --iters kiln_context_run calls after a warm-up. The timed runs move no data between host and device
 * (kiln_context_set_transfers off: the inputs stay on the device, the outputs are not copied back), so
 * they time the kernels; --transfers times the whole call, copies included (a ResNet-sized activation
 * then measures PCIe, not the layer). Each line also gives the bytes of the graph inputs and outputs
 * with the GB/s they imply, and TFLOP/s (TOP/s for the integer layers) for MatMul, Gemm, Conv,
 * kiln.FusedConv, ConvTranspose, kiln.QMatMul, kiln.F8MatMul and kiln.QConv. */
#include "backends/backend.h"
#include "builder.h"
#include "core/half.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/op_schema.h"
#include "kiln/kiln.h"
#include "llm_op_cases.h"
#include "op_cases.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Normalised MSE allowed per engine precision (index = kiln_precision). The inputs are already exact in
 * the engine precision, so only the kernels' rounding is measured: float32 must agree to 1e-7, which a
 * TF32 matrix product (10-bit mantissa inputs, about 1.6e-7) does not, as intended; rounding the
 * outputs alone costs about 1e-7 in float16 (11-bit mantissa) and 5e-6 in bfloat16 (8-bit), so these
 * bounds leave room for FP32-accumulated sums of half-precision products and nothing like a wrong
 * index or a missed element. Integer and bool outputs must be equal. No op needs a looser bound. */
static const double TOLERANCE[3] = {1e-7, 1e-3, 1e-2};
static const char *const PRECISION_NAME[3] = {"f32", "f16", "bf16"};

#define MAX_INPUTS 8
#define MAX_OUTPUTS 4
#define MAX_ATTRS 12
#define MAX_FIXED 16
#define MAX_LIST 64
#define MAX_OPS 256
#define PERF_WARMUP 3
#define CASE_TIMEOUT_S 300 /* a case (or a --perf case) that runs longer is taken for hung */

/* ---------------------------------------------------------------------------------- case parsing */

typedef struct input_spec {
    bool present, constant;
    bool engine_float; /* float32 computed in the engine precision: quantized on the host */
    bool integral;     /* "fi": integer values */
    bool specials;     /* "fs": one value in eight is NaN, +Inf or -Inf */
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    double lo, hi;
    int nfixed;
    double fixed_f[MAX_FIXED];
    int64_t fixed_i[MAX_FIXED];
} input_spec;

typedef struct attr_spec {
    char name[32];
    kiln_attr_type type;
    int64_t i;
    double f;
    char s[64];
    int n;
    int64_t ints[MAX_LIST];
    float floats[MAX_LIST];
    kiln_dtype tensor_dtype; /* TENSOR: one element holding i or f */
} attr_spec;

typedef struct parsed_case {
    const op_case *c;
    int opset, nout, nin, nattrs;
    input_spec in[MAX_INPUTS];
    attr_spec attrs[MAX_ATTRS];
} parsed_case;

static bool is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64; }

static bool fail_parse(char *err, size_t cap, const char *what, const char *tok) {
    snprintf(err, cap, "bad case: %s in '%s'", what, tok);
    return false;
}

/* Parses one input token (grammar in op_cases.h) into s. */
static bool parse_input(const char *tok, input_spec *s, char *err, size_t cap) {
    static const struct {
        const char *name;
        kiln_dtype dtype;
        bool engine_float, integral, specials;
    } types[] = {
        {"f16", KILN_F16, false, false, false}, {"fi", KILN_F32, true, true, false},
        {"fs", KILN_F32, true, false, true},    {"f", KILN_F32, true, false, false},
        {"i64", KILN_I64, false, false, false}, {"i32", KILN_I32, false, false, false},
        {"i8", KILN_I8, false, false, false},   {"u8", KILN_U8, false, false, false},
        {"u32", KILN_U32, false, false, false}, {"u64", KILN_U64, false, false, false},
        {"b", KILN_BOOL, false, false, false},
    };
    memset(s, 0, sizeof *s);
    if (!strcmp(tok, "-")) return true;
    s->present = true;
    const char *p = tok;
    if (*p == 'K') {
        s->constant = true;
        p++;
    }
    size_t t = 0, ntypes = sizeof types / sizeof *types;
    while (t < ntypes && !(strncmp(p, types[t].name, strlen(types[t].name)) == 0 && p[strlen(types[t].name)] == '['))
        t++;
    if (t == ntypes) return fail_parse(err, cap, "unknown type", tok);
    s->dtype = types[t].dtype;
    s->engine_float = types[t].engine_float;
    s->integral = types[t].integral;
    s->specials = types[t].specials;
    p += strlen(types[t].name) + 1;
    while (*p != ']') {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || s->ndim == KILN_MAX_DIMS) return fail_parse(err, cap, "bad shape", tok);
        s->dims[s->ndim++] = d;
        p = end;
        if (*p == ',') p++;
        else if (*p != ']') return fail_parse(err, cap, "bad shape", tok);
    }
    p++;
    bool flt = is_float(s->dtype) && !s->integral;
    s->lo = flt ? -1 : s->integral ? -3 : 0;
    s->hi = flt ? 1 : s->integral ? 3 : 8;
    if (*p == '{') {
        char *end;
        s->lo = strtod(p + 1, &end);
        if (*end != ',') return fail_parse(err, cap, "bad range", tok);
        s->hi = strtod(end + 1, &end);
        if (*end != '}' || !(s->hi > s->lo)) return fail_parse(err, cap, "bad range", tok);
        p = end + 1;
    }
    if (*p == '=') {
        p++;
        while (*p) {
            char *end;
            if (s->nfixed == MAX_FIXED) return fail_parse(err, cap, "too many values", tok);
            if (is_float(s->dtype)) s->fixed_f[s->nfixed] = strtod(p, &end);
            else s->fixed_i[s->nfixed] = strtoll(p, &end, 10);
            if (end == p) return fail_parse(err, cap, "bad value", tok);
            s->nfixed++;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') return fail_parse(err, cap, "bad value", tok);
        }
        if (s->nfixed != kiln_numel(s->ndim, s->dims)) return fail_parse(err, cap, "value count differs from the shape", tok);
    }
    if (*p) return fail_parse(err, cap, "trailing text", tok);
    return true;
}

/* Parses one attribute token name=value (grammar in op_cases.h) into a. */
static bool parse_attr(const char *tok, attr_spec *a, char *err, size_t cap) {
    memset(a, 0, sizeof *a);
    const char *eq = strchr(tok, '=');
    if (!eq || eq == tok || (size_t)(eq - tok) >= sizeof a->name) return fail_parse(err, cap, "bad attribute", tok);
    memcpy(a->name, tok, (size_t)(eq - tok));
    const char *v = eq + 1;
    char *end;
    if (*v == '\'') {
        const char *close = strchr(v + 1, '\'');
        if (!close || close[1] || (size_t)(close - v - 1) >= sizeof a->s) return fail_parse(err, cap, "bad string", tok);
        a->type = KILN_ATTR_STRING;
        memcpy(a->s, v + 1, (size_t)(close - v - 1));
    } else if (*v == '[') {
        bool floats = strpbrk(v, ".eEn") != NULL;
        a->type = floats ? KILN_ATTR_FLOATS : KILN_ATTR_INTS;
        const char *p = v + 1;
        while (*p != ']') {
            if (a->n == MAX_LIST) return fail_parse(err, cap, "list too long", tok);
            if (floats) a->floats[a->n] = strtof(p, &end);
            else a->ints[a->n] = strtoll(p, &end, 10);
            if (end == p || (*end != ',' && *end != ']')) return fail_parse(err, cap, "bad list", tok);
            a->n++;
            p = *end == ',' ? end + 1 : end;
        }
        if (p[1]) return fail_parse(err, cap, "trailing text", tok);
    } else if (*v == '<') {
        a->type = KILN_ATTR_TENSOR;
        const char *colon = strchr(v, ':');
        if (!colon) return fail_parse(err, cap, "bad tensor", tok);
        if (!strncmp(v + 1, "f:", 2)) a->tensor_dtype = KILN_F32, a->f = strtod(colon + 1, &end);
        else if (!strncmp(v + 1, "i64:", 4)) a->tensor_dtype = KILN_I64, a->i = strtoll(colon + 1, &end, 10);
        else if (!strncmp(v + 1, "i32:", 4)) a->tensor_dtype = KILN_I32, a->i = strtoll(colon + 1, &end, 10);
        else return fail_parse(err, cap, "bad tensor type", tok);
        if (end == colon + 1 || strcmp(end, ">")) return fail_parse(err, cap, "bad tensor", tok);
    } else if (strpbrk(v, ".eEn")) {
        a->type = KILN_ATTR_FLOAT;
        a->f = strtod(v, &end);
        if (end == v || *end) return fail_parse(err, cap, "bad float", tok);
    } else {
        a->type = KILN_ATTR_INT;
        a->i = strtoll(v, &end, 10);
        if (end == v || *end) return fail_parse(err, cap, "bad int", tok);
    }
    return true;
}

/* Parses case c. On failure err says what is wrong with the table entry. */
static bool parse_case(const op_case *c, parsed_case *pc, char *err, size_t cap) {
    memset(pc, 0, sizeof *pc);
    pc->c = c;
    pc->opset = c->opset ? c->opset : OP_CASES_OPSET;
    pc->nout = c->nout ? c->nout : 1;
    if (pc->nout > MAX_OUTPUTS) return fail_parse(err, cap, "too many outputs", c->op);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", c->inputs);
    char *save;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (pc->nin == MAX_INPUTS) return fail_parse(err, cap, "too many inputs", c->inputs);
        if (!parse_input(tok, &pc->in[pc->nin++], err, cap)) return false;
    }
    snprintf(buf, sizeof buf, "%s", c->attrs ? c->attrs : "");
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (pc->nattrs == MAX_ATTRS) return fail_parse(err, cap, "too many attributes", c->attrs);
        if (!parse_attr(tok, &pc->attrs[pc->nattrs++], err, cap)) return false;
    }
    return true;
}

static int64_t attr_int(const parsed_case *pc, const char *name, int64_t dflt) {
    for (int i = 0; i < pc->nattrs; i++)
        if (!strcmp(pc->attrs[i].name, name) && pc->attrs[i].type == KILN_ATTR_INT) return pc->attrs[i].i;
    return dflt;
}

/* "f[33,1000] f[1000]  axis=1  (opset 11)" */
static const char *case_text(const op_case *c, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s", c->inputs);
    if (c->attrs && c->attrs[0] && n >= 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "  %s", c->attrs);
    if (c->opset && n >= 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "  (opset %d)", c->opset);
    return buf;
}

/* ---------------------------------------------------------------------------------- input data */

/* splitmix64 */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* v rounded to the nearest value of precision p (as float32 holds it). */
static double quantize(double v, kiln_precision p) {
    if (p == KILN_PRECISION_FP16) return kiln_f16_to_f32(kiln_f32_to_f16((float)v));
    if (p == KILN_PRECISION_BF16) return kiln_bf16_to_f32(kiln_f32_to_bf16((float)v));
    return (float)v;
}

/* Allocates t for input spec s and fills it: fixed values, or random ones from rng in the spec's range;
 * engine floats are quantized to precision p. poison moves random floats to the next range up,
 * [hi, 2 hi - lo), so that the poison run's outputs differ from the real ones even where a function
 * of many inputs (a global minimum, a sum) hardly depends on which random draw it sees; integers
 * (indices) stay in their range. */
static kiln_status make_tensor(const input_spec *s, kiln_precision p, uint64_t *rng, bool poison, kiln_tensor *t) {
    static const double specials[4] = {NAN, INFINITY, -INFINITY, 0.0};
    KILN_TRY(kiln_tensor_alloc(t, s->dtype, s->ndim, s->dims));
    int64_t n = kiln_tensor_numel(t);
    uint64_t span = (uint64_t)(int64_t)(s->hi - s->lo);
    double shift = poison ? s->hi - s->lo : 0;
    for (int64_t k = 0; k < n; k++) {
        if (is_float(s->dtype)) {
            uint64_t r = rng_next(rng);
            double u = (double)(r >> 11) / 9007199254740992.0;
            double v = s->nfixed                 ? s->fixed_f[k]
                       : s->specials && r % 8 == 0 ? specials[(r >> 3) % 4]
                       : s->integral && span > 0 ? shift + s->lo + (double)(rng_next(rng) % span)
                                                 : shift + s->lo + (s->hi - s->lo) * u;
            kiln_tensor_set_f64(t, k, s->engine_float ? quantize(v, p) : v);
        } else if (s->dtype == KILN_BOOL) {
            kiln_tensor_set_f64(t, k, s->nfixed ? s->fixed_i[k] != 0 : (double)((rng_next(rng) >> 32) & 1));
        } else {
            int64_t v = s->nfixed ? s->fixed_i[k] : (int64_t)s->lo + (int64_t)(span ? rng_next(rng) % span : 0);
            if (s->dtype == KILN_I64) ((int64_t *)t->data)[k] = v;
            else kiln_tensor_set_f64(t, k, (double)v);
        }
    }
    return KILN_OK;
}

static void release_all(kiln_tensor *t, int n) {
    for (int i = 0; i < n; i++) kiln_tensor_release(&t[i]);
}

/* ---------------------------------------------------------------------------------- graphs and engines */

/* Sets attribute spec a on node n of g. */
static kiln_status add_attr(kiln_graph *g, kiln_node *n, const attr_spec *a) {
    kiln_attr *at = kiln_node_add_attr(g, n, a->name, a->type);
    if (!at) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    switch (a->type) {
    case KILN_ATTR_INT: at->i = a->i; break;
    case KILN_ATTR_FLOAT: at->f = (float)a->f; break;
    case KILN_ATTR_STRING:
        at->s = kiln_graph_strdup(g, a->s);
        at->s_len = strlen(a->s);
        if (!at->s) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        break;
    case KILN_ATTR_INTS:
        at->n = a->n;
        at->ints = kiln_graph_alloc(g, sizeof *at->ints * (size_t)(a->n + 1));
        if (!at->ints) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        memcpy(at->ints, a->ints, sizeof *at->ints * (size_t)a->n);
        break;
    case KILN_ATTR_FLOATS:
        at->n = a->n;
        at->floats = kiln_graph_alloc(g, sizeof *at->floats * (size_t)(a->n + 1));
        if (!at->floats) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        memcpy(at->floats, a->floats, sizeof *at->floats * (size_t)a->n);
        break;
    case KILN_ATTR_TENSOR: {
        at->t = kiln_graph_alloc(g, sizeof *at->t);
        if (!at->t) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        memset(at->t, 0, sizeof *at->t);
        int64_t one = 1;
        KILN_TRY(kiln_tensor_alloc(at->t, a->tensor_dtype, 1, &one));
        if (a->tensor_dtype == KILN_I64) *(int64_t *)at->t->data = a->i;
        else kiln_tensor_set_f64(at->t, 0, a->tensor_dtype == KILN_F32 ? a->f : (double)a->i);
        break;
    }
    default: return kiln_error(KILN_ERR_INTERNAL, "attribute '%s': unexpected type %d", a->name, (int)a->type);
    }
    return KILN_OK;
}

/* Fills empty graph g with the case's node: graph inputs "in<i>", constants (copies of data[i]),
 * outputs "out<k>", attributes. */
static kiln_status fill_graph(kiln_graph *g, const parsed_case *pc, const kiln_tensor *data) {
    g->opsets = kiln_graph_alloc(g, 2 * sizeof *g->opsets);
    g->name = kiln_graph_strdup(g, pc->c->op);
    const char *dot = strchr(pc->c->op, '.'), *op = dot ? dot + 1 : pc->c->op;
    char domain[64] = "";
    if (dot) snprintf(domain, sizeof domain, "%.*s", (int)(dot - pc->c->op), pc->c->op);
    if (!g->opsets || !g->name) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    g->opsets[0] = (kiln_opset_import){kiln_graph_strdup(g, ""), pc->opset};
    g->opsets[1] = (kiln_opset_import){kiln_graph_strdup(g, domain), 1};
    g->nopsets = dot ? 2 : 1;
    if (!g->opsets[0].domain || !g->opsets[1].domain) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    g->ir_version = 8;
    int in_ids[MAX_INPUTS], out_ids[MAX_OUTPUTS];
    for (int i = 0; i < pc->nin; i++) {
        const input_spec *s = &pc->in[i];
        in_ids[i] = -1;
        if (!s->present) continue;
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        KILN_TRY(kiln_graph_value(g, name, &in_ids[i]));
        if (s->constant) {
            kiln_tensor t = {0};
            KILN_TRY(kiln_tensor_copy(&t, &data[i]));
            kiln_status st = kiln_graph_set_constant(g, in_ids[i], &t);
            kiln_tensor_release(&t);
            KILN_TRY(st);
        } else {
            kiln_value *v = &g->values[in_ids[i]];
            v->dtype = s->dtype;
            v->ndim = s->ndim;
            for (int d = 0; d < s->ndim; d++) v->dims[d] = kiln_dim_static(s->dims[d]);
            KILN_TRY(kiln_graph_add_input(g, in_ids[i]));
        }
    }
    for (int k = 0; k < pc->nout; k++) {
        char name[16];
        snprintf(name, sizeof name, "out%d", k);
        KILN_TRY(kiln_graph_value(g, name, &out_ids[k]));
    }
    int node;
    KILN_TRY(kiln_graph_add_node(g, op, domain, "node", pc->nin, in_ids, pc->nout, out_ids, &node));
    for (int k = 0; k < pc->nout; k++) KILN_TRY(kiln_graph_add_output(g, out_ids[k]));
    for (int a = 0; a < pc->nattrs; a++) KILN_TRY(add_attr(g, &g->nodes[node], &pc->attrs[a]));
    return KILN_OK;
}

/* Builds the case into an engine for target in precision p. */
static kiln_status build_engine(const parsed_case *pc, const kiln_tensor *data, const char *target, kiln_precision p,
                                int device, kiln_engine **out) {
    *out = NULL;
    kiln_graph *g = kiln_graph_create();
    if (!g) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = fill_graph(g, pc, data);
    if (s != KILN_OK) {
        kiln_graph_free(g);
        return s;
    }
    kiln_build_options opts = {.target = target, .precision = p, .device = device};
    return kiln_build_graph(g, pc->c->op, &opts, out);
}

/* Binds the graph inputs (not the constants) of the case to data. */
static kiln_status bind_inputs(kiln_context *c, const parsed_case *pc, const kiln_tensor *data) {
    for (int i = 0; i < pc->nin; i++) {
        if (!pc->in[i].present || pc->in[i].constant) continue;
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        KILN_TRY(kiln_context_set_input(c, name, data[i].dtype, data[i].ndim, data[i].dims, data[i].data));
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------------------------- results */

typedef enum { CASE_OK, CASE_FAIL, CASE_UNSUPPORTED, CASE_NO_DEVICE } case_status;

/* One case in one precision, as a child process reports it to the parent through a pipe (small
 * enough for one atomic write). item -1 is the child's first report: the device, or why there is none. */
typedef struct item_result {
    int item;
    case_status status;
    bool restart; /* a backend call failed: go on in a fresh process (a CUDA error can be sticky) */
    double nmse;  /* worst over the float outputs; -1 when every output is compared exactly */
    char msg[512];
    char line[1536]; /* what the parent prints */
} item_result;

/* The message of the last kiln error on one line. */
static const char *last_error_line(char *buf, size_t cap) {
    snprintf(buf, cap, "%s", kiln_last_error());
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return buf;
}

/* Marks r failed with a message "what: <last kiln error>"; a backend error asks for a fresh process. */
static void fail_with(item_result *r, kiln_status s, const char *what) {
    char err[400];
    r->status = s == KILN_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
    r->restart = s == KILN_ERR_BACKEND;
    snprintf(r->msg, sizeof r->msg, "%s%s%s", what, what[0] ? ": " : "", last_error_line(err, sizeof err));
}

/* Whether op's integer outputs are requantized floats (kiln.QMatMul, kiln.QConv): the float32 scaling
 * before the rounding may differ by an ulp between backends (an erf-based activation, summation of
 * the bias), so an element may land one unit away; the sums themselves are exact. */
static bool requantizes(const char *op) { return !strcmp(op, "kiln.QMatMul") || !strcmp(op, "kiln.QConv"); }

/* Compares output k of the engine under test (got) with the oracle's (want). Returns false with r->msg
 * set on a mismatch; raises r->nmse for a float output. Integer outputs must be equal, or, with
 * int_tol 1, within one unit in every element and equal in at least 99% of them. */
static bool compare_output(int k, const kiln_tensor_desc *wd, const void *want, const kiln_tensor_desc *gd,
                           const void *got, double tol, int int_tol, item_result *r) {
    char ws[128], gs[128];
    kiln_shape_str(ws, sizeof ws, wd->ndim, wd->dims);
    kiln_shape_str(gs, sizeof gs, gd->ndim, gd->dims);
    if (gd->dtype != wd->dtype || strcmp(ws, gs)) {
        snprintf(r->msg, sizeof r->msg, "output %d is %s%s, expected %s%s", k, kiln_dtype_name(gd->dtype), gs,
                 kiln_dtype_name(wd->dtype), ws);
        return false;
    }
    kiln_tensor w, g;
    kiln_tensor_view(&w, wd->dtype, wd->ndim, wd->dims, (void *)want);
    kiln_tensor_view(&g, gd->dtype, gd->ndim, gd->dims, (void *)got);
    int64_t n = kiln_tensor_numel(&w), bad = 0, first = -1, worst = -1;
    if (is_float(wd->dtype)) {
        double err = 0, ref = 0, worst_d = -1;
        for (int64_t i = 0; i < n; i++) {
            double a = kiln_tensor_get_f64(&g, i), b = kiln_tensor_get_f64(&w, i);
            if (!isfinite(a) || !isfinite(b)) {
                if (!((isnan(a) && isnan(b)) || a == b) && bad++ == 0) first = i;
                continue;
            }
            double d = (a - b) * (a - b);
            err += d;
            ref += b * b;
            if (d > worst_d) worst_d = d, worst = i;
        }
        double nmse = ref > 0 ? err / ref : err;
        if (nmse > r->nmse) r->nmse = nmse;
        if (bad) {
            snprintf(r->msg, sizeof r->msg, "output %d: %lld NaN/Inf mismatch(es), first at %lld: got %g, want %g", k,
                     (long long)bad, (long long)first, kiln_tensor_get_f64(&g, first), kiln_tensor_get_f64(&w, first));
            return false;
        }
        if (!(nmse <= tol)) {
            snprintf(r->msg, sizeof r->msg, "output %d: NMSE %.3g above %.0e; worst at %lld: got %.7g, want %.7g", k, nmse,
                     tol, (long long)worst, kiln_tensor_get_f64(&g, worst), kiln_tensor_get_f64(&w, worst));
            return false;
        }
        return true;
    }
    int64_t off_by_one = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = kiln_tensor_get_i64(&g, i) - kiln_tensor_get_i64(&w, i);
        if ((d == 1 || d == -1) && int_tol >= 1) off_by_one++;
        else if (d != 0 && bad++ == 0) first = i;
    }
    if (off_by_one * 100 > n) {
        snprintf(r->msg, sizeof r->msg, "output %d (%s): %lld of %lld elements one unit off (at most 1%% may be)", k,
                 kiln_dtype_name(wd->dtype), (long long)off_by_one, (long long)n);
        return false;
    }
    if (bad) {
        snprintf(r->msg, sizeof r->msg, "output %d (%s): %lld of %lld differ, first at %lld: got %lld, want %lld", k,
                 kiln_dtype_name(wd->dtype), (long long)bad, (long long)n, (long long)first,
                 (long long)kiln_tensor_get_i64(&g, first), (long long)kiln_tensor_get_i64(&w, first));
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------------------------- options */

typedef struct options {
    const char *ops[64];
    int nops;
    int dtype; /* -1: every precision */
    bool perf, transfers, verbose, fork;
    int iters, device;
    const char *target;
    const char *shape; /* only cases whose inputs text contains this (NULL: all) */
} options;

static const char *USAGE =
    "usage: test_backend_ops [--op NAME]... [--dtype f32|f16|bf16] [--perf [--iters N] [--transfers]]\n"
    "                        [--target NAME] [--shape TEXT]\n"
    "                        [--device N] [--no-fork] [--verbose]\n"
    "\n"
    "Checks every op case on a backend against the CPU backend (or, with --perf, times it).\n"
    "  --op NAME        only cases of this op (repeatable); NAME* every op whose name starts so\n"
    "                   (--op 'llm.*': the LLM kernels alone)\n"
    "  --dtype P        only engine precision P (default: f32, f16 and bf16)\n"
    "  --shape TEXT     only cases whose inputs contain TEXT (\"i8[256,56,56,64]\": one layer, e.g. for ncu)\n"
    "  --perf           time the large --perf cases instead (median of --iters runs, default 20), on\n"
    "                   the device alone: inputs stay there, outputs are not copied back\n"
    "  --transfers      with --perf, time each run with its input and output copies\n"
    "  --target NAME    the backend under test (default cuda; cpu checks the case table itself)\n"
    "  --device N       the GPU (default 0)\n"
    "  --no-fork        run every case in this process (for debuggers and sanitizers); by default the\n"
    "                   cases run in a child process that is replaced after a crash, a hang (300 s)\n"
    "                   or a backend error, so that one broken kernel does not take the rest down\n"
    "  --verbose        kiln's own warnings and build logs\n"
    "Exit status: 0 no failure, 1 a case failed, 2 usage, 77 no GPU.\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test_backend_ops: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n%s", USAGE);
    va_end(ap);
    return 2;
}

/* Returns -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->dtype = -1;
    o->iters = 20;
    o->target = "cuda";
    o->fork = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--perf")) {
            o->perf = true;
        } else if (!strcmp(a, "--transfers")) {
            o->transfers = true;
        } else if (!strcmp(a, "--no-fork")) {
            o->fork = false;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            o->verbose = true;
        } else if (!v && (!strcmp(a, "--op") || !strcmp(a, "--dtype") || !strcmp(a, "--iters") || !strcmp(a, "--target") ||
                          !strcmp(a, "--device") || !strcmp(a, "--shape"))) {
            return usage_error("%s needs a value", a);
        } else if (!strcmp(a, "--shape")) {
            o->shape = v;
            i++;
        } else if (!strcmp(a, "--op")) {
            if (o->nops == (int)(sizeof o->ops / sizeof *o->ops)) return usage_error("too many --op (%s)", v);
            o->ops[o->nops++] = v;
            i++;
        } else if (!strcmp(a, "--dtype")) {
            o->dtype = !strcmp(v, "f32") ? 0 : !strcmp(v, "f16") ? 1 : !strcmp(v, "bf16") ? 2 : -2;
            if (o->dtype == -2) return usage_error("--dtype must be f32, f16 or bf16, not '%s'", v);
            i++;
        } else if (!strcmp(a, "--iters") || !strcmp(a, "--device")) {
            char *end;
            long n = strtol(v, &end, 10);
            bool iters = !strcmp(a, "--iters");
            if (*end || end == v || n < (iters ? 1 : 0) || n > 100000) return usage_error("%s: bad number '%s'", a, v);
            *(iters ? &o->iters : &o->device) = (int)n;
            i++;
        } else if (!strcmp(a, "--target")) {
            o->target = v;
            i++;
        } else {
            return usage_error("unknown argument '%s'", a);
        }
    }
    return -1;
}

/* Whether op matches --op pattern: the same name, or with a trailing '*' one that starts alike. */
static bool op_matches(const char *pattern, const char *op) {
    const size_t n = strlen(pattern);
    return n && pattern[n - 1] == '*' ? !strncmp(pattern, op, n - 1) : !strcmp(pattern, op);
}

static bool op_selected(const options *o, const char *op) {
    if (o->nops == 0) return true;
    for (int i = 0; i < o->nops; i++)
        if (op_matches(o->ops[i], op)) return true;
    return false;
}

/* ---------------------------------------------------------------------------------- one case */

/* The printed line of a checked case. */
static void format_case_line(item_result *r, const op_case *c, kiln_precision p) {
    static const char *const label[] = {"OK", "FAIL", "UNSUPPORTED", "NO DEVICE"};
    char text[512], nmse[32];
    if (r->status == CASE_UNSUPPORTED) nmse[0] = 0;
    else if (r->status != CASE_OK && r->nmse < 0) snprintf(nmse, sizeof nmse, "-");
    else if (r->nmse >= 0) snprintf(nmse, sizeof nmse, "nmse %.2e", r->nmse);
    else snprintf(nmse, sizeof nmse, "exact");
    snprintf(r->line, sizeof r->line, "%-11s %-22s %-4s %-52s %-14s%s%.500s", label[r->status], c->op, PRECISION_NAME[p],
             case_text(c, text, sizeof text), nmse, r->msg[0] ? " | " : "", r->msg);
}

/* Runs LLM kernel case c (llm_op_cases.h) in precision p: its launcher on the GPU against its CPU
 * reference, or with --target cpu the reference alone. */
static void run_llm_case(const options *o, const op_case *c, int idx, kiln_precision p, item_result *r) {
    static const case_status status[] = {[LLM_CASE_OK] = CASE_OK, [LLM_CASE_FAIL] = CASE_FAIL,
                                         [LLM_CASE_UNSUPPORTED] = CASE_UNSUPPORTED};
    llm_case_result lr;
    const uint64_t seed = 0x6b696c6e00000000ull + (uint64_t)idx * 1000003ull + (uint64_t)p;
    llm_case_run(c->op, c->inputs, p, seed, o->device, strcmp(o->target, "cpu") != 0, TOLERANCE[p], &lr);
    r->status = status[lr.status];
    r->restart = lr.restart;
    r->nmse = lr.nmse;
    snprintf(r->msg, sizeof r->msg, "%s", lr.msg);
    format_case_line(r, c, p);
}

/* Runs case c (table index idx) in precision p on the backend under test and on the CPU oracle. */
static void run_case(const options *o, const op_case *c, int idx, kiln_precision p, item_result *r) {
    if (llm_case_op(c->op)) {
        run_llm_case(o, c, idx, p, r);
        return;
    }
    r->nmse = -1;
    r->status = CASE_FAIL;
    parsed_case pc;
    kiln_tensor data[MAX_INPUTS] = {{0}}, poison[MAX_INPUTS] = {{0}};
    kiln_engine *ref_e = NULL, *e = NULL;
    kiln_context *ref_c = NULL, *ctx = NULL;
    kiln_status s = KILN_OK;
    uint64_t rng = 0x6b696c6e00000000ull + (uint64_t)idx * 1000003ull + (uint64_t)p, prng = ~rng;
    if (!parse_case(c, &pc, r->msg, sizeof r->msg)) goto done;
    for (int i = 0; i < pc.nin && s == KILN_OK; i++) {
        if (!pc.in[i].present) continue;
        s = make_tensor(&pc.in[i], p, &rng, false, &data[i]);
        if (s == KILN_OK && !pc.in[i].constant) s = make_tensor(&pc.in[i], p, &prng, true, &poison[i]);
    }
    if (s != KILN_OK) {
        fail_with(r, s, "inputs");
        goto done;
    }
    if ((s = build_engine(&pc, data, "cpu", KILN_PRECISION_FP32, 0, &ref_e)) != KILN_OK ||
        (s = kiln_context_create(ref_e, &ref_c)) != KILN_OK || (s = bind_inputs(ref_c, &pc, data)) != KILN_OK ||
        (s = kiln_context_run(ref_c)) != KILN_OK) {
        fail_with(r, s, "the CPU oracle cannot run it");
        goto done;
    }
    if ((s = build_engine(&pc, data, o->target, p, o->device, &e)) != KILN_OK) {
        fail_with(r, s, s == KILN_ERR_UNSUPPORTED ? "" : "build");
        goto done;
    }
    if ((s = kiln_context_create(e, &ctx)) != KILN_OK || (s = bind_inputs(ctx, &pc, poison)) != KILN_OK ||
        (s = kiln_context_run(ctx)) != KILN_OK) {
        fail_with(r, s == KILN_ERR_UNSUPPORTED ? KILN_ERR_INTERNAL : s, "run (poison inputs)");
        goto done;
    }
    if ((s = bind_inputs(ctx, &pc, data)) != KILN_OK || (s = kiln_context_run(ctx)) != KILN_OK) {
        fail_with(r, s == KILN_ERR_UNSUPPORTED ? KILN_ERR_INTERNAL : s, "run");
        goto done;
    }
    int nout = kiln_engine_num_outputs(ref_e);
    if (kiln_engine_num_outputs(e) != nout) {
        snprintf(r->msg, sizeof r->msg, "%d outputs, expected %d", kiln_engine_num_outputs(e), nout);
        goto done;
    }
    for (int k = 0; k < nout; k++) {
        kiln_tensor_desc wd, gd;
        const void *want, *got;
        if ((s = kiln_context_output(ref_c, k, &wd, &want)) != KILN_OK || (s = kiln_context_output(ctx, k, &gd, &got)) != KILN_OK) {
            fail_with(r, s, "output");
            goto done;
        }
        if (!compare_output(k, &wd, want, &gd, got, TOLERANCE[p], requantizes(c->op) ? 1 : 0, r)) goto done;
    }
    r->status = CASE_OK;
done:
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_context_free(ref_c);
    kiln_engine_free(ref_e);
    release_all(data, MAX_INPUTS);
    release_all(poison, MAX_INPUTS);
    format_case_line(r, c, p);
}

/* ---------------------------------------------------------------------------------- --perf, one case */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Floating-point operations of one run of the case (2 per multiply-add) for the matrix ops, else 0. */
static double case_flops(const parsed_case *pc, const kiln_tensor_desc *out0) {
    const char *op = pc->c->op;
    double out = (double)kiln_numel(out0->ndim, out0->dims);
    const input_spec *a = &pc->in[0], *w = &pc->in[1];
    if (pc->nin < 2) return 0;
    if (!strcmp(op, "MatMul") || !strcmp(op, "kiln.QMatMul") || !strcmp(op, "kiln.F8MatMul")) return 2 * out * (double)(a->ndim ? a->dims[a->ndim - 1] : 1);
    if (!strcmp(op, "kiln.Attention") && a->ndim >= 2 && w->ndim >= 2 && out0->ndim >= 1) {
        /* Q K^T and P V over the visible keys: 2 (D + Dv) per score; causal keeps about half */
        double d = (double)a->dims[a->ndim - 1], dv = (double)out0->dims[out0->ndim - 1], sk = (double)w->dims[w->ndim - 2];
        double scores = out / (dv > 0 ? dv : 1) * sk;
        return 2 * scores * (d + dv) * (attr_int(pc, "causal", 0) ? 0.5 : 1.0);
    }
    if (!strcmp(op, "Gemm") && a->ndim == 2) return 2 * out * (double)a->dims[attr_int(pc, "transA", 0) ? 0 : 1];
    bool conv = !strcmp(op, "Conv") || !strcmp(op, "kiln.FusedConv") || !strcmp(op, "kiln.QConv"); /* W's dims after the first multiply in either layout */
    if ((conv || !strcmp(op, "ConvTranspose")) && w->ndim >= 3) {
        double per = (double)kiln_numel(w->ndim - 1, w->dims + 1);
        return 2 * per * (conv ? out : (double)kiln_numel(a->ndim, a->dims));
    }
    return 0;
}

/* Times case c in precision p on the backend under test. */
static void perf_case(const options *o, const op_case *c, int idx, kiln_precision p, item_result *r) {
    parsed_case pc;
    char text[512];
    kiln_tensor data[MAX_INPUTS] = {{0}};
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    kiln_status s = KILN_OK;
    double *times = calloc((size_t)o->iters, sizeof *times);
    uint64_t rng = 0x70657266ull + (uint64_t)idx * 7919ull + (uint64_t)p;
    r->status = CASE_FAIL;
    r->nmse = -1;
    case_text(c, text, sizeof text);
    if (!times) {
        snprintf(r->msg, sizeof r->msg, "out of memory");
        goto done;
    }
    if (!parse_case(c, &pc, r->msg, sizeof r->msg)) goto done;
    for (int i = 0; i < pc.nin && s == KILN_OK; i++)
        if (pc.in[i].present) s = make_tensor(&pc.in[i], p, &rng, false, &data[i]);
    if (s != KILN_OK || (s = build_engine(&pc, data, o->target, p, o->device, &e)) != KILN_OK ||
        (s = kiln_context_create(e, &ctx)) != KILN_OK || (s = bind_inputs(ctx, &pc, data)) != KILN_OK) {
        fail_with(r, s, s == KILN_ERR_UNSUPPORTED ? "" : "build");
        goto done;
    }
    for (int w = 0; w < PERF_WARMUP + o->iters; w++) {
        /* the first warm-up run uploads the inputs; later ones reuse them unless --transfers */
        if (w == 1 && !o->transfers && (s = kiln_context_set_transfers(ctx, false)) != KILN_OK) {
            fail_with(r, s, "transfers");
            goto done;
        }
        double t0 = now_ms();
        if ((s = kiln_context_run(ctx)) != KILN_OK) {
            fail_with(r, s == KILN_ERR_UNSUPPORTED ? KILN_ERR_INTERNAL : s, "run");
            goto done;
        }
        if (w >= PERF_WARMUP) times[w - PERF_WARMUP] = now_ms() - t0;
    }
    qsort(times, (size_t)o->iters, sizeof *times, cmp_double);
    double median = o->iters % 2 ? times[o->iters / 2] : (times[o->iters / 2 - 1] + times[o->iters / 2]) / 2;
    double bytes = 0, flops = 0;
    for (int i = 0; i < pc.nin; i++)
        if (pc.in[i].present && !pc.in[i].constant) bytes += (double)data[i].nbytes;
    for (int k = 0; k < kiln_engine_num_outputs(e); k++) {
        kiln_tensor_desc d;
        const void *ptr;
        if ((s = kiln_context_output(ctx, k, &d, &ptr)) != KILN_OK) {
            fail_with(r, s, "output");
            goto done;
        }
        bytes += (double)kiln_numel(d.ndim, d.dims) * (double)kiln_dtype_size(d.dtype);
        if (k == 0) flops = case_flops(&pc, &d);
    }
    int n = snprintf(r->line, sizeof r->line, "perf %-18s %-4s %-52s median %9.3f ms  min %9.3f ms  %9.1f MB  %8.1f GB/s",
                     c->op, PRECISION_NAME[p], text, median, times[0], bytes / 1e6, bytes / median / 1e6);
    if (flops > 0 && n > 0 && (size_t)n < sizeof r->line)
        snprintf(r->line + n, sizeof r->line - (size_t)n, "  %7.2f TFLOP/s", flops / median / 1e9);
    r->status = CASE_OK;
done:
    if (r->status != CASE_OK)
        snprintf(r->line, sizeof r->line, "%-11s %-18s %-4s %-52s | %.500s", r->status == CASE_UNSUPPORTED ? "UNSUPPORTED" : "FAIL",
                 c->op, PRECISION_NAME[p], text, r->msg);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    release_all(data, MAX_INPUTS);
    free(times);
}

/* ---------------------------------------------------------------------------------- the driver */

typedef struct work_item {
    int idx; /* into the table */
    kiln_precision p;
} work_item;

typedef struct op_stats {
    const char *op;
    int total[3], ok[3], fail[3], unsupported[3];
    double worst[3];           /* worst NMSE of the float cases run, -1 when none */
    char first_reason[3][200]; /* the first UNSUPPORTED message per precision */
} op_stats;

typedef struct driver {
    const options *o;
    const op_case *table;
    work_item *items;
    int nitems;
    void (*run)(const options *o, const op_case *c, int idx, kiln_precision p, item_result *r);
    bool have_device, no_device;
    int ok, failed, unsupported;
    op_stats stats[MAX_OPS];
    int nstats;
    char *fail_lines; /* the FAIL lines again, for the end */
    size_t fail_len, fail_cap;
} driver;

static op_stats *stats_for(driver *d, const char *op) {
    for (int i = 0; i < d->nstats; i++)
        if (!strcmp(d->stats[i].op, op)) return &d->stats[i];
    if (d->nstats == MAX_OPS) return NULL;
    op_stats *s = &d->stats[d->nstats++];
    memset(s, 0, sizeof *s);
    s->op = op;
    for (int p = 0; p < 3; p++) s->worst[p] = -1;
    return s;
}

static void append_fail_line(driver *d, const char *line) {
    size_t len = strlen(line) + 1; /* with the newline */
    if (d->fail_len + len + 1 > d->fail_cap) {
        size_t cap = (d->fail_cap + len) * 2;
        char *grown = realloc(d->fail_lines, cap);
        if (!grown) return;
        d->fail_lines = grown;
        d->fail_cap = cap;
    }
    snprintf(d->fail_lines + d->fail_len, d->fail_cap - d->fail_len, "%s\n", line);
    d->fail_len += len;
}

/* The parent's side of a result: the device report (item -1) or a case's line and counts. */
static void collect(driver *d, const item_result *r) {
    if (r->item < 0) {
        if (r->status == CASE_NO_DEVICE) {
            d->no_device = true;
            printf("skipped: no GPU (%s)\n", r->line);
        } else if (!d->have_device) {
            d->have_device = true;
            if (d->o->perf)
                printf("test_backend_ops --perf: %s (device %d: %s); median of %d kiln_context_run calls after %d warm-up "
                       "runs.\n%s", d->o->target, d->o->device, r->line, d->o->iters, PERF_WARMUP,
                       d->o->transfers ? "Each run copies the graph inputs to the device and the outputs back (constants "
                                         "stay there): MB and GB/s\ncount those bytes, so they measure the whole call, "
                                         "not the kernel alone.\n"
                                       : "Runs move no data between host and device (--transfers: they do): MB and "
                                         "GB/s count the graph\ninputs and outputs the kernels read and write.\n");
            else
                printf("test_backend_ops: %s (device %d: %s) against cpu; tolerance (normalised MSE) f32 %.0e, f16 %.0e, "
                       "bf16 %.0e\n",
                       d->o->target, d->o->device, r->line, TOLERANCE[0], TOLERANCE[1], TOLERANCE[2]);
        }
        fflush(stdout);
        return;
    }
    const work_item *it = &d->items[r->item];
    op_stats *st = stats_for(d, d->table[it->idx].op);
    puts(r->line);
    fflush(stdout);
    if (st) {
        st->total[it->p]++;
        if (r->nmse > st->worst[it->p]) st->worst[it->p] = r->nmse;
    }
    if (r->status == CASE_OK) {
        d->ok++;
        if (st) st->ok[it->p]++;
    } else if (r->status == CASE_UNSUPPORTED) {
        d->unsupported++;
        if (st && st->unsupported[it->p]++ == 0)
            snprintf(st->first_reason[it->p], sizeof st->first_reason[it->p], "%.199s", r->msg);
    } else {
        d->failed++;
        if (st) st->fail[it->p]++;
        append_fail_line(d, r->line);
    }
}

/* Hands r to the parent through pipe_fd, or (pipe_fd < 0: no child process) to collect directly. */
static bool emit(driver *d, int pipe_fd, const item_result *r) {
    if (pipe_fd < 0) {
        collect(d, r);
        return true;
    }
    return write(pipe_fd, r, sizeof *r) == (ssize_t)sizeof *r;
}

/* Reports the device (item -1), then runs items from start on. In a child (pipe_fd >= 0), a result
 * that asks for a restart ends the run, and an alarm ends a case that hangs. */
static void work(driver *d, int start, int pipe_fd) {
    item_result r;
    memset(&r, 0, sizeof r);
    r.item = -1;
    const kiln_backend *b = kiln_backend_find(d->o->target);
    if (b->device_name(d->o->device, r.line, sizeof r.line) != KILN_OK) {
        r.status = CASE_NO_DEVICE;
        last_error_line(r.line, sizeof r.line);
    }
    if (!emit(d, pipe_fd, &r) || r.status == CASE_NO_DEVICE) return;
    for (int i = start; i < d->nitems; i++) {
        memset(&r, 0, sizeof r);
        r.item = i;
        if (pipe_fd >= 0) alarm(CASE_TIMEOUT_S);
        d->run(d->o, &d->table[d->items[i].idx], d->items[i].idx, d->items[i].p, &r);
        if (!emit(d, pipe_fd, &r) || (pipe_fd >= 0 && r.restart)) return;
    }
}

/* Reads one whole record; false at the end of the pipe. */
static bool read_result(int fd, item_result *r) {
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(fd, (char *)r + got, sizeof *r - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        got += (size_t)n;
    }
    return true;
}

/* Runs every item, in child processes unless --no-fork: a child that dies (crash, or the alarm of a
 * hung case) costs the case it was running, recorded as a failure, and a new child takes the rest. */
static void drive(driver *d) {
    if (!d->o->fork) {
        work(d, 0, -1);
        return;
    }
    for (int start = 0; start < d->nitems && !d->no_device;) {
        int fds[2];
        if (pipe(fds) != 0) {
            perror("test_backend_ops: pipe");
            d->failed++;
            return;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            perror("test_backend_ops: fork");
            close(fds[0]);
            close(fds[1]);
            d->failed++;
            return;
        }
        if (pid == 0) {
            close(fds[0]);
            work(d, start, fds[1]);
            close(fds[1]);
            _exit(0);
        }
        close(fds[1]);
        item_result r;
        int last = start - 1;
        bool restart = false;
        while (read_result(fds[0], &r)) {
            collect(d, &r);
            if (r.item >= 0) last = r.item, restart = r.restart;
        }
        close(fds[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
        if (d->no_device) return;
        start = last + 1;
        bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (start < d->nitems && !(clean && restart)) {
            memset(&r, 0, sizeof r);
            r.item = start;
            r.status = CASE_FAIL;
            r.nmse = -1;
            if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
                snprintf(r.msg, sizeof r.msg, "no result after %d s: the test process was stopped", CASE_TIMEOUT_S);
            else if (WIFSIGNALED(st))
                snprintf(r.msg, sizeof r.msg, "the test process died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
            else
                snprintf(r.msg, sizeof r.msg, "the test process exited (status %d) without a result", WEXITSTATUS(st));
            const work_item *it = &d->items[start];
            if (d->o->perf)
                snprintf(r.line, sizeof r.line, "FAIL        %-18s %-4s %s | %s", d->table[it->idx].op, PRECISION_NAME[it->p],
                         d->table[it->idx].inputs, r.msg);
            else
                format_case_line(&r, &d->table[it->idx], it->p);
            collect(d, &r);
            start++;
        }
    }
}

/* ---------------------------------------------------------------------------------- reports */

typedef struct missing_ops {
    char list[4096];
    size_t len;
    int count;
} missing_ops;

/* kiln_op_schema_each callback: notes schemas that no case of the table exercises. */
static void note_missing(const kiln_op_schema *s, void *user) {
    missing_ops *m = user;
    char name[128];
    snprintf(name, sizeof name, "%s%s%s", s->domain, s->domain[0] ? "." : "", s->op_type);
    for (const op_case *c = kiln_op_cases; c->op; c++)
        if (!strcmp(c->op, name)) return;
    if (m->len < sizeof m->list)
        m->len += (size_t)snprintf(m->list + m->len, sizeof m->list - m->len, "%s%s", m->count ? ", " : "", name);
    m->count++;
}

static void print_cell(const op_stats *s, int p) {
    char cell[96];
    int n = 0;
    if (s->total[p] == 0) n = snprintf(cell, sizeof cell, "-");
    else if (s->unsupported[p] == s->total[p]) n = snprintf(cell, sizeof cell, "unsupported");
    else {
        n = snprintf(cell, sizeof cell, "%d/%d", s->ok[p], s->total[p] - s->unsupported[p]);
        if (s->worst[p] >= 0) n += snprintf(cell + n, sizeof cell - (size_t)n, " %.1e", s->worst[p]);
        if (s->fail[p]) n += snprintf(cell + n, sizeof cell - (size_t)n, " FAIL %d", s->fail[p]);
        if (s->unsupported[p]) snprintf(cell + n, sizeof cell - (size_t)n, " (%d unsup.)", s->unsupported[p]);
    }
    printf(" %-28s |", cell);
}

/* The summary of a checking run; returns the exit status. */
static int report_tests(const driver *d) {
    printf("\nsummary per op: passed/run (unsupported cases not run), worst NMSE, failures\n");
    printf("| %-22s | %-28s | %-28s | %-28s |\n", "op", "f32", "f16", "bf16");
    printf("|------------------------|------------------------------|------------------------------|------------------------------|\n");
    for (int i = 0; i < d->nstats; i++) {
        printf("| %-22s |", d->stats[i].op);
        for (int p = 0; p < 3; p++) print_cell(&d->stats[i], p);
        printf("\n");
    }
    if (d->unsupported) {
        printf("\nUNSUPPORTED (refused at build by %s; reported, not failures):\n", d->o->target);
        for (int i = 0; i < d->nstats; i++)
            for (int p = 0; p < 3; p++)
                if (d->stats[i].unsupported[p])
                    printf("  %-22s %-4s %d of %d case(s): %.150s\n", d->stats[i].op, PRECISION_NAME[p],
                           d->stats[i].unsupported[p], d->stats[i].total[p], d->stats[i].first_reason[p]);
    }
    if (d->o->nops == 0) {
        missing_ops m = {{0}, 0, 0};
        kiln_op_schema_each(note_missing, &m);
        if (m.count) printf("\nops kiln knows that no case exercises (%d): %s\n", m.count, m.list);
    }
    if (d->failed) printf("\nFAILED (%d):\n%s", d->failed, d->fail_lines ? d->fail_lines : "");
    printf("\n%d case(s): %d ok, %d FAIL, %d unsupported\n", d->ok + d->failed + d->unsupported, d->ok, d->failed,
           d->unsupported);
    return d->failed ? 1 : 0;
}

/* ---------------------------------------------------------------------------------- main */

int main(int argc, char **argv) {
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;
    const op_case *table = o.perf ? kiln_perf_cases : kiln_op_cases;
    for (int i = 0; i < o.nops; i++) {
        const op_case *c = table;
        while (c->op && !op_matches(o.ops[i], c->op)) c++;
        if (!c->op) return usage_error("no %scase for op '%s'", o.perf ? "--perf " : "", o.ops[i]);
    }
    if (!o.verbose) kiln_log_set_level(KILN_LOG_ERROR);
    if (!kiln_backend_find(o.target)) {
        printf("skipped: no GPU (this kiln was built without the '%s' backend; it has: %s)\n", o.target, kiln_backend_names());
        return 77;
    }
    static driver d; /* large (per-op statistics): not on the stack */
    d.o = &o;
    d.table = table;
    d.run = o.perf ? perf_case : run_case;
    int ncases = 0;
    while (table[ncases].op) ncases++;
    d.items = calloc((size_t)ncases * 3 + 1, sizeof *d.items);
    if (!d.items) return 1;
    for (int i = 0; i < ncases; i++)
        for (int p = 0; p < 3; p++)
            if (op_selected(&o, table[i].op) && (o.dtype < 0 || o.dtype == p) &&
                (!o.shape || strstr(table[i].inputs, o.shape)) &&
                (!llm_case_op(table[i].op) || llm_case_runs_in(table[i].op, (kiln_precision)p)))
                d.items[d.nitems++] = (work_item){i, (kiln_precision)p};
    drive(&d);
    if (d.no_device) rc = 77;
    else if (o.perf) {
        printf("\n--perf: %d case(s) timed, %d unsupported, %d could not run\n", d.ok, d.unsupported, d.failed);
        rc = d.failed ? 1 : 0;
    } else {
        rc = report_tests(&d);
    }
    free(d.items);
    free(d.fail_lines);
    return rc;
}
