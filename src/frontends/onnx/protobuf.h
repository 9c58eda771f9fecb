/* protobuf.h — a small zero-copy decoder for the protobuf wire format over a byte buffer.
 *
 * A reader is just the unread range [p, end) of a buffer; length-delimited fields come back as
 * sub-readers over the same bytes (nothing is copied). Every read is bounds-checked and returns a
 * kiln_pb_err instead of a status so the caller (which knows the file and the message being read)
 * can word the message; on error the reader's p is left at the byte where the problem starts, so
 * the caller can report an offset. Schema knowledge lives in the caller: this file knows only tags,
 * wire types, varints and fixed-width values. */
#ifndef KILN_ONNX_PROTOBUF_H
#define KILN_ONNX_PROTOBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Groups may nest at most this deep (each level costs a little stack in kiln_pb_skip_group). */
#define KILN_PB_MAX_DEPTH 64
/* The largest valid field number (2^29 - 1). */
#define KILN_PB_MAX_FIELD 536870911u

typedef struct kiln_pb {
    const uint8_t *p, *end;
} kiln_pb;

typedef enum kiln_pb_wire {
    KILN_PB_VARINT = 0,
    KILN_PB_I64 = 1,
    KILN_PB_LEN = 2,
    KILN_PB_SGROUP = 3,
    KILN_PB_EGROUP = 4,
    KILN_PB_I32 = 5,
} kiln_pb_wire;

typedef enum kiln_pb_err {
    KILN_PB_OK = 0,
    KILN_PB_TRUNCATED_VARINT,  /* the buffer ends inside a varint */
    KILN_PB_OVERLONG_VARINT,   /* more than 10 bytes, or bits beyond 64 set */
    KILN_PB_TRUNCATED_FIXED,   /* the buffer ends inside a 32/64-bit value */
    KILN_PB_TRUNCATED_LEN,     /* a length prefix runs past the end of the enclosing message */
    KILN_PB_BAD_TAG,           /* a tag that does not fit 32 bits */
    KILN_PB_BAD_FIELD_NUMBER,  /* field number 0 or above 2^29 - 1 */
    KILN_PB_BAD_WIRE_TYPE,     /* wire type 6 or 7 */
    KILN_PB_UNMATCHED_GROUP,   /* an end-group tag without its start, or a group never closed */
    KILN_PB_TOO_DEEP,          /* groups nested deeper than KILN_PB_MAX_DEPTH */
    KILN_PB_BAD_PACKED,        /* a packed fixed-width payload whose length is not a multiple */
    KILN_PB_WRONG_WIRE_TYPE,   /* the field has a wire type its schema does not allow (caller-set) */
} kiln_pb_err;

/* One field: its number and wire type, and its value. VARINT, I64 and I32 values are in u (fixed
 * values as raw little-endian bits, zero-extended); LEN values and group contents (without the
 * end-group tag) are in data. start is the first byte of the field's tag. */
typedef struct kiln_pb_field {
    uint32_t number;
    kiln_pb_wire wire;
    uint64_t u;
    kiln_pb data;
    const uint8_t *start;
} kiln_pb_field;

static inline kiln_pb kiln_pb_make(const void *data, size_t size) {
    const uint8_t *p = data;
    return (kiln_pb){p, p ? p + size : p};
}
static inline bool kiln_pb_done(const kiln_pb *r) { return r->p >= r->end; }
static inline size_t kiln_pb_left(const kiln_pb *r) { return (size_t)(r->end - r->p); }

static inline int64_t kiln_pb_zigzag64(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }
static inline int32_t kiln_pb_zigzag32(uint32_t v) { return (int32_t)(v >> 1) ^ -(int32_t)(v & 1); }

/* A short English description of an error ("truncated varint"). */
const char *kiln_pb_err_str(kiln_pb_err e);

/* Primitive reads. Each advances r past what it read on success and leaves r unchanged on error. */
kiln_pb_err kiln_pb_read_varint(kiln_pb *r, uint64_t *v);
kiln_pb_err kiln_pb_read_fixed32(kiln_pb *r, uint32_t *v);
kiln_pb_err kiln_pb_read_fixed64(kiln_pb *r, uint64_t *v);
/* A tag: validates the field number and the wire type. */
kiln_pb_err kiln_pb_read_tag(kiln_pb *r, uint32_t *field, kiln_pb_wire *wire);
/* A length prefix and the bytes it covers, returned as a sub-reader. */
kiln_pb_err kiln_pb_read_len(kiln_pb *r, kiln_pb *sub);

/* Skips the value of a field whose tag (with this wire type and field number) was just read. A
 * start-group is skipped up to its matching end-group, nesting at most KILN_PB_MAX_DEPTH; a bare
 * end-group is an error. On error r->p points where the problem starts. */
kiln_pb_err kiln_pb_skip(kiln_pb *r, uint32_t field, kiln_pb_wire wire);

/* Reads the next field (tag and value). Groups are read whole: f->data holds their contents. On
 * error r->p points where the problem starts and f is unspecified. */
kiln_pb_err kiln_pb_next(kiln_pb *r, kiln_pb_field *f);

/* Counts the elements that field f contributes to a repeated scalar field whose elements are encoded
 * with wire type elem (VARINT, I64 or I32): one when f is a single element, the payload's element
 * count when f is a packed (LEN) run. Validates the whole payload; on error *at (if at != NULL)
 * receives where the problem starts. A field of any other wire type is KILN_PB_WRONG_WIRE_TYPE. */
kiln_pb_err kiln_pb_repeated_count(const kiln_pb_field *f, kiln_pb_wire elem, size_t *n, const uint8_t **at);
/* Decodes the elements that kiln_pb_repeated_count counted (it must have succeeded) into out, as raw
 * 64-bit values (the varint, or the fixed bits zero-extended). Returns the number written. */
size_t kiln_pb_repeated_read(const kiln_pb_field *f, kiln_pb_wire elem, uint64_t *out);

#endif
