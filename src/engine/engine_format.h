/* engine_format.h — reading and writing the .kiln engine file (layout: docs/engine-format.md).
 * An engine file holds a header (magic, format version, kiln version, target, device, build
 * options, I/O bindings), the compiled graph (nodes, attributes, values, execution order) and the
 * weights, each section checksummed, weights aligned so they can be used in place from the mapping. */
#ifndef KILN_ENGINE_FORMAT_H
#define KILN_ENGINE_FORMAT_H

#include "ir/graph.h"

#define KILN_ENGINE_MAGIC "KILNENG1"   /* 8 bytes at offset 0 */
#define KILN_ENGINE_FORMAT_VERSION 7

/* What an engine file holds (header field `kind`). */
typedef enum kiln_engine_kind {
    KILN_ENGINE_KIND_GRAPH = 0, /* a compiled ONNX graph: kiln run, kiln bench */
    KILN_ENGINE_KIND_LLM = 1,   /* a decoder-only LLM (kiln build --hf): kiln generate, kiln bench --llm */
} kiln_engine_kind;

/* The shapes one graph input accepts in one optimization profile: min[d] <= size <= max[d]; opt is
 * the shape backends may plan for. ndim == -1: the profile does not constrain this input. */
typedef struct kiln_profile_range {
    int ndim;
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} kiln_profile_range;

/* How one node's library call is made: recorded at build time by a backend that times candidate
 * algorithms (cuda: `kiln build --tuning-level`), replayed when the engine runs. */
typedef enum kiln_tactic_kind {
    KILN_TACTIC_HEURISTIC = 0, /* nothing recorded: the library's heuristic chooses at run time */
    KILN_TACTIC_CUBLASLT = 1,  /* a cuBLASLt matmul algorithm: blob holds its cublasLtMatmulAlgo_t */
    KILN_TACTIC_CUDNN = 2,     /* a cuDNN forward convolution algorithm (algo) and math type (math) */
    KILN_TACTIC_LLM_GEMV = 3,  /* the LLM runtime's GEMV kernel in configuration algo (timing cache only) */
    KILN_TACTIC_PATH = 4,      /* an integer layer's path: algo 0 its int8 kernel, 1 its float16 one */
} kiln_tactic_kind;

typedef struct kiln_tactic {
    uint32_t kind;           /* kiln_tactic_kind */
    int32_t algo;            /* cuBLASLt CUBLASLT_ALGO_CONFIG_ID, or cudnnConvolutionFwdAlgo_t */
    int32_t math;            /* cudnnMathType_t; 0 for cuBLASLt */
    int32_t heuristic_index; /* its place in the library heuristic's list (0: the heuristic's own choice) */
    float time_ms;           /* its measured time when it was chosen */
    float heuristic_ms;      /* the measured time of the heuristic's first choice (0: not measured) */
    uint8_t blob[64];        /* cuBLASLt: the opaque cublasLtMatmulAlgo_t; zeros otherwise */
} kiln_tactic;

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
    /* The tactic of each node in each profile ([kiln_engine_tactic_sets(meta) * g->nnodes], profile-major:
     * profile p's tactic of node i at p * g->nnodes + i; kind KILN_TACTIC_HEURISTIC where none was
     * chosen), or NULL: every node as the libraries' heuristics choose. Set by auto-tuning at build
     * time, which tunes each profile at its opt shapes. */
    kiln_tactic *tactics;
    /* Not stored in the file: the GPU to run on instead of the one built for (kiln_engine_load_with),
     * when run_device_set. */
    bool run_device_set;
    int run_device;
    /* profiles, node_precision and tactics live in the memory of the engine's graph (kiln_graph_alloc): they
     * are valid as long as that graph, and a copy of the meta shares them. */
} kiln_engine_meta;

/* The number of tactic sets an engine with meta m has: one per profile, one without profiles. */
static inline int kiln_engine_tactic_sets(const kiln_engine_meta *m) { return m->nprofiles > 0 ? m->nprofiles : 1; }

/* Writes g (nodes in their current order, which is the execution order) and meta to path, atomically.
 * An empty meta->kiln_version records this kiln's version. Fails (KILN_ERR_UNSUPPORTED) for what the
 * format cannot hold (subgraph and sparse attributes, string and sub-byte tensors), naming it. */
kiln_status kiln_engine_file_write(const kiln_graph *g, const kiln_engine_meta *meta, const char *path);
/* An engine file begun before its graph section is final: a build knows its weights (the engine's
 * layout and precision) before the device plans and tuning make the rest of the metadata, and the
 * weights are most of the file. kiln_engine_out_begin opens path under the rules of
 * kiln_file_write_atomic (core/file.h: checked, a temporary renamed over it at the end) and writes g's
 * weights section on a thread of its own while the caller goes on; g's constants must stay as they
 * are until the file is finished or freed. Fails as kiln_engine_file_write does for what the format
 * cannot hold, or with KILN_ERR_IO / KILN_ERR_INVALID_ARGUMENT for path. */
typedef struct kiln_engine_out kiln_engine_out;
kiln_status kiln_engine_out_begin(const kiln_graph *g, const char *path, kiln_engine_out **out);
/* Whether o (may be NULL) was begun for path and is not finished yet. */
bool kiln_engine_out_pending(const kiln_engine_out *o, const char *path);
/* Finishes o as kiln_engine_file_write(g, meta, path) would write it: waits for the weights section,
 * writes the graph section and the header, and renames the file into place. g is the graph begun (its
 * weights written again when they changed since). On failure nothing is left behind. o is finished
 * either way; free it with kiln_engine_out_free. */
kiln_status kiln_engine_out_finish(kiln_engine_out *o, const kiln_graph *g, const kiln_engine_meta *meta);
/* Frees o (may be NULL); an unfinished file is removed, the file at its path untouched. */
void kiln_engine_out_free(kiln_engine_out *o);
/* Maps and verifies path (magic, format version, sizes, checksums) and rebuilds the graph; constants
 * point into the mapping, which the graph keeps alive. Version or target mismatches fail with
 * KILN_ERR_ENGINE_MISMATCH and say how to rebuild; corruption fails with KILN_ERR_PARSE.
 * expected_target may be NULL (accept any). On success the caller owns *g. meta may be NULL; it is
 * filled on success and also on a kiln version or target mismatch (for `kiln inspect`). Constant
 * data is read-only memory: a pass that changes a constant must copy it first. */
kiln_status kiln_engine_file_read(const char *path, const char *expected_target, kiln_graph **g,
                                  kiln_engine_meta *meta);
/* The kind of the engine file at path, from its header (magic, format version, header size and
 * checksum are checked). Errors as kiln_engine_file_read gives for those. */
kiln_status kiln_engine_file_kind(const char *path, kiln_engine_kind *kind);
/* Same, over a buffer the caller keeps alive as long as the graph (for fuzzing). */
kiln_status kiln_engine_buffer_read(const void *data, size_t size, const char *expected_target,
                                    kiln_graph **g, kiln_engine_meta *meta);

#endif
