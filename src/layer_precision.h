/* layer_precision.h — per-layer precision for `kiln build --layer-precision`: which precision each
 * node of the optimized graph computes in, with explicit Casts where precisions meet. */
#ifndef KILN_LAYER_PRECISION_H
#define KILN_LAYER_PRECISION_H

#include "ir/graph.h"
#include "kiln/kiln.h"

/* "fp32", "fp16", "bf16", "int8", "fp8" */
const char *kiln_precision_name(kiln_precision p);

/* True when s matches the glob pat: `*` any run of characters (also none), `?` one character. */
bool kiln_glob_match(const char *pat, const char *s);

/* Whether rule r names node n (its pattern over n's name, or "op:GLOB" over its op type). */
bool kiln_layer_rule_matches(const kiln_layer_precision *r, const kiln_node *n);

/* Gives every node of g (optimized, in execution order) a precision: `engine` unless a rule matches
 * it (rules[i].pattern: a glob over node names, or "op:GLOB" over op types; later rules win). When
 * nodes of several precisions meet, every float value read by a node of another precision than its
 * producer's is routed through a new Cast node ("<value>:fp32", the reader's precision), and float
 * constants read in several precisions get one alias per precision ("<name>:fp32"), so that each
 * node reads and writes only its own precision. Shapes are re-inferred and the graph verified.
 * On success *out ([g->nnodes], in the graph's memory) holds each node's kiln_precision. Fails with
 * KILN_ERR_INVALID_ARGUMENT naming a rule that matches no node. */
kiln_status kiln_layer_precision_apply(kiln_graph *g, kiln_precision engine, const kiln_layer_precision *rules,
                                       int nrules, uint8_t **out);

#endif
