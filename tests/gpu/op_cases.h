/* op_cases.h — the case tables of test_backend_ops: one single-node graph per entry, written in a
 * small text notation so that a case fits on one line.
 *
 * inputs: space-separated, one token per node input, in order:
 *     [K]TYPE[d0,d1,...]{lo,hi}=v0,v1,...      or  -   (an absent optional input)
 *   K         the input is a constant (an initializer, known at build time) instead of a graph input
 *   TYPE      f    float32 in the model, computed in the engine's precision (the host quantizes the
 *                  random data to that precision, so both backends see the same numbers)
 *             fi   the same, holding integers only (for comparisons, Round, Sign, ties)
 *             fs   the same, one value in eight NaN, +Inf, -Inf or 0 (IsNaN, IsInf)
 *             f16  float16 in the model (the host passes float16)
 *             i64 i32 i8 u8 u32 u64 b(ool)
 *   [dims]    the shape; [] is a scalar
 *   {lo,hi}   range of the random values: floats uniform in [lo, hi) (default [-1, 1)), integers in
 *             [lo, hi) (default [0, 8)); bools are fair coins
 *   =v,...    fixed values instead of random ones (exactly numel of them; "nan", "inf" allowed)
 * attrs: space-separated name=value: 3 (INT), 0.5 or 1e-5 (FLOAT, has '.' or 'e'), 'text' (STRING),
 *   [1,2] (INTS), [1.0,2.0] (FLOATS), <f:1.5> or <i64:7> (a one-element TENSOR of that type).
 *
 * LLM kernel cases (op "llm.Kernel", llm_op_cases.h) build no graph: inputs holds the kernel's shape
 * and settings as space-separated name=number tokens ("hd=128 heads=8 kv=2 batch=3"), attrs is NULL. */
#ifndef KILN_TEST_OP_CASES_H
#define KILN_TEST_OP_CASES_H

typedef struct op_case {
    const char *op;     /* ONNX op type; "domain.Op" for another domain (imported at version 1) */
    const char *inputs; /* input tokens, see above */
    const char *attrs;  /* attribute tokens, "" or NULL for none */
    int nout;           /* node outputs, all compared (0 means 1) */
    int opset;          /* default-domain opset of the model (0 means OP_CASES_OPSET) */
} op_case;

/* The default-domain opset of a case that names none: new enough for every op's current form (Gelu
 * needs 20; RMSNormalization names 23 itself). */
#define OP_CASES_OPSET 21

/* Correctness cases: odd sizes (1, 7, 33, 1000, 4097), broadcasting, ranks 0-5, attributes; then the
 * LLM kernels. */
extern const op_case kiln_op_cases[];
/* --perf cases: large shapes; weights are constants as they are in real models. */
extern const op_case kiln_perf_cases[];

#endif
