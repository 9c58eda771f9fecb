/* compare.h — checking an engine's outputs against a reference engine's on the same inputs (what
 * `kiln compare` does): error statistics per output, the tolerance rule, and the walk over every
 * value two engines share in the reference's execution order (per-layer mode). */
#ifndef KILN_COMPARE_H
#define KILN_COMPARE_H

#include "core/tensor.h"
#include "kiln/kiln.h"

typedef struct kiln_compare_stats {
    int64_t count;   /* elements compared */
    int64_t failing; /* elements outside the tolerance (NaN/inf where the other side differs included) */
    double max_abs;  /* max |test - ref| */
    double max_rel;  /* max |test - ref| / |ref| over elements with |ref| > atol (0 when there are none) */
    double mean_abs; /* mean |test - ref| */
    double cosine;   /* cosine similarity of the two as vectors (1 when both are all zeros) */
    int64_t rows;    /* classifier-shaped outputs ([rows, classes], classes >= 2, float): rows compared */
    int64_t top1;    /* of them, the rows whose largest element (first on ties) is at the same class */
    bool shape_ok;   /* same shape (dtypes may differ: values are compared as float64) */
    bool pass;       /* shape_ok and no failing element */
} kiln_compare_stats;

/* The default tolerances for an engine computing in p: fp32 1e-4/1e-4, fp16 1e-2/1e-2, bf16 2e-2/2e-2. */
void kiln_compare_tolerance(kiln_precision p, double *atol, double *rtol);

/* Compares test with ref element by element: an element passes when |test - ref| <= atol + rtol * |ref|
 * (NaN matches NaN, an infinity the same infinity). */
void kiln_compare_tensors(const kiln_tensor *test, const kiln_tensor *ref, double atol, double rtol,
                          kiln_compare_stats *out);

typedef struct kiln_compare_item {
    const char *name;      /* the value's name (borrowed from the reference engine) */
    const char *node, *op; /* its producer in the reference graph ("" for a constant or an input) */
    int order;             /* the producer's position in the reference's execution order (-1: none) */
    kiln_compare_stats st;
    char shapes[192];      /* "float32[2,3] vs reference float32[2,4]" when the shapes differ */
} kiln_compare_item;

typedef struct kiln_compare_result {
    kiln_compare_item *items; /* every output of the reference that test also has, by execution order */
    int nitems;
    int nfailed;
    int first_failed;         /* index of the first failing item, or -1 */
    int only_reference;       /* outputs of the reference that test does not have (fused away) */
} kiln_compare_result;

/* Runs ref and test once on the same inputs (inputs[i]: ref's input i; test's are bound by name) and
 * compares every output of ref that test has under the same name. On success *out is owned by the
 * caller (kiln_compare_result_free). Fails when either run fails (the message says which side). */
kiln_status kiln_compare_run(kiln_engine *ref, kiln_engine *test, const kiln_tensor *inputs, double atol,
                             double rtol, kiln_compare_result *out);
void kiln_compare_result_free(kiln_compare_result *r);

#endif
