/* engine_format.h — reading and writing the .kiln engine file (layout: docs/engine-format.md).
 * An engine file holds a header (magic, format version, kiln version, target, device, build
 * options, I/O bindings), the compiled graph (nodes, attributes, values, execution order) and the
 * weights, each section checksummed, weights aligned so they can be used in place from the mapping. */
#ifndef KILN_ENGINE_FORMAT_H
#define KILN_ENGINE_FORMAT_H

#include "ir/graph.h"

#define KILN_ENGINE_MAGIC "KILNENG1"   /* 8 bytes at offset 0 */
#define KILN_ENGINE_FORMAT_VERSION 2

/* The shapes one graph input accepts in one optimization profile: min[d] <= size <= max[d]; opt is
 * the shape backends may plan for. ndim == -1: the profile does not constrain this input. */
typedef struct kiln_profile_range {
    int ndim;
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} kiln_profile_range;

typedef struct kiln_engine_meta {
    char kiln_version[32];   /* "0.1.0" */
    char target[16];         /* "cpu" */
    char device[128];        /* "x86_64 CPU" or the GPU name */
    char build_options[512]; /* the build flags as text, for inspect */
    char source[256];        /* the model file it was built from (basename) */
    uint64_t created_unix;
    kiln_precision precision;          /* what floating-point tensors are computed in */
    uint64_t graph_bytes, weights_bytes; /* section sizes: filled by the reader, ignored by the writer */
    /* Optimization profiles: nprofiles × g->ninputs ranges, profile-major (0: no profiles). */
    int nprofiles;
    kiln_profile_range *profiles;
    /* The precision each node computes in ([g->nnodes] kiln_precision values), or NULL: every node in
     * `precision`. Set by --layer-precision. */
    uint8_t *node_precision;
    /* profiles and node_precision live in the memory of the engine's graph (kiln_graph_alloc): they
     * are valid as long as that graph, and a copy of the meta shares them. */
} kiln_engine_meta;

/* Writes g (nodes in their current order, which is the execution order) and meta to path, atomically.
 * An empty meta->kiln_version records this kiln's version. Fails (KILN_ERR_UNSUPPORTED) for what the
 * format cannot hold (subgraph and sparse attributes, string and sub-byte tensors), naming it. */
kiln_status kiln_engine_file_write(const kiln_graph *g, const kiln_engine_meta *meta, const char *path);
/* Maps and verifies path (magic, format version, sizes, checksums) and rebuilds the graph; constants
 * point into the mapping, which the graph keeps alive. Version or target mismatches fail with
 * KILN_ERR_ENGINE_MISMATCH and say how to rebuild; corruption fails with KILN_ERR_PARSE.
 * expected_target may be NULL (accept any). On success the caller owns *g. meta may be NULL; it is
 * filled on success and also on a kiln version or target mismatch (for `kiln inspect`). Constant
 * data is read-only memory: a pass that changes a constant must copy it first. */
kiln_status kiln_engine_file_read(const char *path, const char *expected_target, kiln_graph **g,
                                  kiln_engine_meta *meta);
/* Same, over a buffer the caller keeps alive as long as the graph (for fuzzing). */
kiln_status kiln_engine_buffer_read(const void *data, size_t size, const char *expected_target,
                                    kiln_graph **g, kiln_engine_meta *meta);

#endif
