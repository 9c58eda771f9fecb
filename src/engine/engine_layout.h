/* engine_layout.h — private to the engine file code (and its tests and fuzzer): the byte layout of
 * the .kiln header, section ids and alignments, and little-endian field access. The authoritative
 * description is docs/engine-format.md; keep the two in step. */
#ifndef KILN_ENGINE_LAYOUT_H
#define KILN_ENGINE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

struct kiln_file_out;

/* Header: KILN_ENGINE_HEADER_SIZE bytes at offset 0. */
enum {
    KILN_ENGINE_HEADER_SIZE = 1280,
    KILN_EH_MAGIC = 0,            /* u8[8]  "KILNENG1" */
    KILN_EH_FORMAT_VERSION = 8,   /* u32 */
    KILN_EH_HEADER_SIZE = 12,     /* u32 */
    KILN_EH_FILE_SIZE = 16,       /* u64 */
    KILN_EH_CREATED = 24,         /* u64 seconds since 1970 */
    KILN_EH_SECTION_COUNT = 32,   /* u32 */
    KILN_EH_PRECISION = 36,       /* u32 kiln_precision: 0 fp32, 1 fp16, 2 bf16 */
    KILN_EH_KIND = 40,            /* u32 kiln_engine_kind (format version 3) */
    KILN_EH_RESERVED0 = 44,       /* 20 zero bytes */
    KILN_EH_KILN_VERSION = 64,    /* char[32], NUL-terminated, zero-padded */
    KILN_EH_TARGET = 96,          /* char[16] */
    KILN_EH_DEVICE = 112,         /* char[128] */
    KILN_EH_BUILD_OPTIONS = 240,  /* char[512] */
    KILN_EH_SOURCE = 752,         /* char[256] */
    KILN_EH_SECTIONS = 1008,      /* KILN_ENGINE_MAX_SECTIONS entries of KILN_ES_SIZE bytes */
    KILN_EH_RESERVED1 = 1200,     /* 76 zero bytes */
    KILN_EH_HEADER_CRC = 1276,    /* u32 CRC-32C of bytes [0, 1276) */
};

/* One section table entry (at KILN_EH_SECTIONS + i * KILN_ES_SIZE). */
enum {
    KILN_ES_SIZE = 24,
    KILN_ES_ID = 0,     /* u32 section id */
    KILN_ES_CRC = 4,    /* u32 CRC-32C of the section's bytes */
    KILN_ES_OFFSET = 8, /* u64 from the start of the file */
    KILN_ES_BYTES = 16, /* u64 */
};

enum {
    KILN_ENGINE_MAX_SECTIONS = 8,
    KILN_SECTION_GRAPH = 1,
    KILN_SECTION_WEIGHTS = 2,
    KILN_SECTION_LLM_CONFIG = 3,  /* LLM engines: the model's config and eos ids */
    KILN_SECTION_TOKENIZER = 4,   /* LLM engines: tokenizer.json and tokenizer_config.json, verbatim */
    KILN_SECTION_LLM_TENSORS = 5, /* LLM engines: the name, dtype, shape and place of every weight */
    KILN_ENGINE_WEIGHTS_ALIGN = 4096, /* file offset of the weights section (format version 7) */
    KILN_ENGINE_TENSOR_ALIGN = 64,    /* offset of each tensor inside the weights section */
};

/* Bytes of one record of the tactics table: node, kind, algo, math, heuristic index, two times, blob. */
enum { KILN_TACTIC_RECORD_BYTES = 8 * 4 + 64 };

/* Value record flags. */
enum {
    KILN_EV_INPUT = 1u << 0,
    KILN_EV_OUTPUT = 1u << 1,
    KILN_EV_CONSTANT = 1u << 2, /* the record ends with the constant's tensor id */
};

static inline uint32_t kiln_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t kiln_le64(const uint8_t *p) { return kiln_le32(p) | (uint64_t)kiln_le32(p + 4) << 32; }
static inline void kiln_put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void kiln_put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The sections of one engine, in table order. */
typedef struct kiln_engine_section {
    uint32_t id, crc;
    uint64_t offset, bytes;
} kiln_engine_section;

/* "graph", "weights", "llm config", "tokenizer", "llm tensors" ("unknown" otherwise). */
const char *kiln_engine_section_name(uint32_t id);

/* Checks the header of image d[0..size) (magic, format version, sizes, header checksum, reserved bytes,
 * text fields, the kiln version, the kind, the target when expected_target is not NULL) and that its
 * section table holds exactly n sections with ids[0..n) in order, laid out as the format requires:
 * the last entry's (the weights) at file offset 4096 with zero padding before it, the others right
 * after the weights in table order, each next one right after the previous, the last ending the
 * file. Then checks every
 * section's checksum. Fills meta (also on a kiln version, kind or target mismatch, for `kiln
 * inspect`) and secs[0..n). A file of another kind is KILN_ERR_ENGINE_MISMATCH saying which command
 * reads it; path (or NULL) is used in messages only. (engine_read.c) */
kiln_status kiln_engine_check_image(const uint8_t *d, size_t size, uint32_t kind, const char *expected_target,
                                    const char *path, const uint32_t *ids, int n, kiln_engine_section *secs,
                                    struct kiln_engine_meta *meta);

/* A weights section being written to an open file on a thread of its own (engine_image_write.c):
 * ntensors blocks tensor_data[i] of tensor_bytes[i] at tensor_offsets[i] (ascending, 64-byte
 * aligned, not overlapping) with zeros between, weights_size bytes in all, at file offset
 * KILN_ENGINE_WEIGHTS_ALIGN, its checksum computed on the way, then an fsync. The tensor data must
 * stay alive and unchanged until kiln_engine_weights_write_wait; the arrays may go at once. */
typedef struct kiln_engine_weights_write kiln_engine_weights_write;
kiln_status kiln_engine_weights_write_start(struct kiln_file_out *f, const void *const *tensor_data,
                                            const size_t *tensor_bytes, const uint64_t *tensor_offsets,
                                            uint32_t ntensors, uint64_t weights_size, kiln_engine_weights_write **out);
/* Waits for w's thread and frees w (NULL: nothing to wait for); the section's checksum in *crc (crc
 * may be NULL). The write's failure, if any, as the status and message. */
kiln_status kiln_engine_weights_write_wait(kiln_engine_weights_write *w, uint32_t *crc);
/* Writes the rest of an engine file around its weights section (weights_size bytes, checksum
 * weights_crc, id ids[n - 1]): the header for meta and kind, its zero padding to the weights, and
 * the n - 1 other sections (ids[i], data[i], bytes[i]) packed after the weights, ending the file. An
 * empty meta->kiln_version records this kiln's. */
kiln_status kiln_engine_write_rest(struct kiln_file_out *f, const struct kiln_engine_meta *meta, uint32_t kind,
                                   const uint32_t *ids, const void *const *data, const size_t *bytes, int n,
                                   uint32_t weights_crc, uint64_t weights_size);
/* Writes an engine file atomically: the weights section (kiln_engine_weights_write_start's
 * arguments) and the rest (kiln_engine_write_rest's). */
kiln_status kiln_engine_write_image(const char *path, const struct kiln_engine_meta *meta, uint32_t kind,
                                    const uint32_t *ids, const void *const *data, const size_t *bytes, int n,
                                    const void *const *tensor_data, const size_t *tensor_bytes,
                                    const uint64_t *tensor_offsets, uint32_t ntensors, uint64_t weights_size);

/* Recomputes, in place, the checksum of every section the table of image[0..size) describes within
 * bounds, then the header checksum. Does nothing when size < KILN_ENGINE_HEADER_SIZE. Tests and the
 * fuzzer use it to reach the structural checks that sit behind the checksums. */
void kiln_engine_reseal(uint8_t *image, size_t size);

#endif
