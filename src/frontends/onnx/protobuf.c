/* protobuf.c — the protobuf wire-format primitives behind protobuf.h: varints, fixed-width values,
 * tags, length-delimited payloads, group skipping and packed repeated scalars. */
#include "frontends/onnx/protobuf.h"

const char *kiln_pb_err_str(kiln_pb_err e) {
    switch (e) {
    case KILN_PB_OK: return "ok";
    case KILN_PB_TRUNCATED_VARINT: return "truncated varint";
    case KILN_PB_OVERLONG_VARINT: return "overlong varint (more than 64 bits)";
    case KILN_PB_TRUNCATED_FIXED: return "truncated fixed-width value";
    case KILN_PB_TRUNCATED_LEN: return "length-delimited field runs past the end of its message";
    case KILN_PB_BAD_TAG: return "tag does not fit 32 bits";
    case KILN_PB_BAD_FIELD_NUMBER: return "invalid field number";
    case KILN_PB_BAD_WIRE_TYPE: return "invalid wire type";
    case KILN_PB_UNMATCHED_GROUP: return "unmatched group tag";
    case KILN_PB_TOO_DEEP: return "groups nested too deeply";
    case KILN_PB_BAD_PACKED: return "packed field length is not a multiple of its element size";
    case KILN_PB_WRONG_WIRE_TYPE: return "unexpected wire type for this field";
    }
    return "unknown protobuf error";
}

kiln_pb_err kiln_pb_read_varint(kiln_pb *r, uint64_t *v) {
    const uint8_t *p = r->p;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= r->end) return KILN_PB_TRUNCATED_VARINT;
        uint8_t b = *p++;
        /* the 10th byte carries bit 63 only */
        if (i == 9 && b > 1) return KILN_PB_OVERLONG_VARINT;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            r->p = p;
            *v = x;
            return KILN_PB_OK;
        }
    }
    return KILN_PB_OVERLONG_VARINT;
}

kiln_pb_err kiln_pb_read_fixed32(kiln_pb *r, uint32_t *v) {
    if (kiln_pb_left(r) < 4) return KILN_PB_TRUNCATED_FIXED;
    const uint8_t *p = r->p;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    r->p += 4;
    return KILN_PB_OK;
}

kiln_pb_err kiln_pb_read_fixed64(kiln_pb *r, uint64_t *v) {
    if (kiln_pb_left(r) < 8) return KILN_PB_TRUNCATED_FIXED;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | r->p[i];
    *v = x;
    r->p += 8;
    return KILN_PB_OK;
}

kiln_pb_err kiln_pb_read_tag(kiln_pb *r, uint32_t *field, kiln_pb_wire *wire) {
    kiln_pb t = *r;
    uint64_t v;
    kiln_pb_err e = kiln_pb_read_varint(&t, &v);
    if (e) return e;
    if (v > UINT32_MAX) return KILN_PB_BAD_TAG;
    uint32_t w = (uint32_t)(v & 7), num = (uint32_t)(v >> 3);
    if (num == 0 || num > KILN_PB_MAX_FIELD) return KILN_PB_BAD_FIELD_NUMBER;
    if (w > 5) return KILN_PB_BAD_WIRE_TYPE;
    *field = num;
    *wire = (kiln_pb_wire)w;
    *r = t;
    return KILN_PB_OK;
}

kiln_pb_err kiln_pb_read_len(kiln_pb *r, kiln_pb *sub) {
    kiln_pb t = *r;
    uint64_t len;
    kiln_pb_err e = kiln_pb_read_varint(&t, &len);
    if (e) return e;
    if (len > kiln_pb_left(&t)) return KILN_PB_TRUNCATED_LEN;
    sub->p = t.p;
    sub->end = t.p + len;
    r->p = sub->end;
    return KILN_PB_OK;
}

/* Skips a non-group value of wire type w. */
static kiln_pb_err skip_scalar(kiln_pb *r, kiln_pb_wire w) {
    uint64_t u;
    uint32_t u32;
    kiln_pb sub;
    switch (w) {
    case KILN_PB_VARINT: return kiln_pb_read_varint(r, &u);
    case KILN_PB_I64: return kiln_pb_read_fixed64(r, &u);
    case KILN_PB_I32: return kiln_pb_read_fixed32(r, &u32);
    case KILN_PB_LEN: return kiln_pb_read_len(r, &sub);
    default: return KILN_PB_BAD_WIRE_TYPE;
    }
}

/* r is just past the start-group tag of field `field`. Advances r past the matching end-group tag
 * and sets *content_end to the first byte of that tag. Iterative, with an explicit stack of open
 * field numbers, so hostile nesting costs no native stack. */
static kiln_pb_err skip_group(kiln_pb *r, uint32_t field, const uint8_t **content_end) {
    uint32_t open[KILN_PB_MAX_DEPTH];
    int depth = 0;
    open[depth++] = field;
    while (depth > 0) {
        if (kiln_pb_done(r)) return KILN_PB_UNMATCHED_GROUP;
        const uint8_t *tag_at = r->p;
        uint32_t num;
        kiln_pb_wire w;
        kiln_pb_err e = kiln_pb_read_tag(r, &num, &w);
        if (e) return e;
        if (w == KILN_PB_EGROUP) {
            if (num != open[depth - 1]) {
                r->p = tag_at;
                return KILN_PB_UNMATCHED_GROUP;
            }
            if (--depth == 0) *content_end = tag_at;
        } else if (w == KILN_PB_SGROUP) {
            if (depth == KILN_PB_MAX_DEPTH) {
                r->p = tag_at;
                return KILN_PB_TOO_DEEP;
            }
            open[depth++] = num;
        } else {
            e = skip_scalar(r, w);
            if (e) return e;
        }
    }
    return KILN_PB_OK;
}

kiln_pb_err kiln_pb_skip(kiln_pb *r, uint32_t field, kiln_pb_wire wire) {
    if (wire == KILN_PB_EGROUP) return KILN_PB_UNMATCHED_GROUP;
    if (wire == KILN_PB_SGROUP) {
        const uint8_t *end;
        return skip_group(r, field, &end);
    }
    return skip_scalar(r, wire);
}

kiln_pb_err kiln_pb_next(kiln_pb *r, kiln_pb_field *f) {
    kiln_pb t = *r;
    f->start = t.p;
    kiln_pb_err e = kiln_pb_read_tag(&t, &f->number, &f->wire);
    if (e) return e;
    f->u = 0;
    f->data = (kiln_pb){t.p, t.p};
    const uint8_t *value_at = t.p;
    uint32_t u32 = 0;
    switch (f->wire) {
    case KILN_PB_VARINT: e = kiln_pb_read_varint(&t, &f->u); break;
    case KILN_PB_I64: e = kiln_pb_read_fixed64(&t, &f->u); break;
    case KILN_PB_I32:
        e = kiln_pb_read_fixed32(&t, &u32);
        f->u = u32;
        break;
    case KILN_PB_LEN: e = kiln_pb_read_len(&t, &f->data); break;
    case KILN_PB_SGROUP: {
        const uint8_t *content_end = NULL;
        e = skip_group(&t, f->number, &content_end);
        if (!e) f->data.end = content_end;
        *r = t; /* past the group, or (on error) at the problem skip_group found */
        return e;
    }
    case KILN_PB_EGROUP: return KILN_PB_UNMATCHED_GROUP; /* r->p stays at the tag */
    }
    if (e) {
        r->p = value_at;
        return e;
    }
    *r = t;
    return KILN_PB_OK;
}

kiln_pb_err kiln_pb_repeated_count(const kiln_pb_field *f, kiln_pb_wire elem, size_t *n, const uint8_t **at) {
    if (f->wire == elem) {
        *n = 1;
        return KILN_PB_OK;
    }
    if (f->wire != KILN_PB_LEN) {
        if (at) *at = f->start;
        return KILN_PB_WRONG_WIRE_TYPE;
    }
    size_t len = kiln_pb_left(&f->data);
    if (elem == KILN_PB_I32 || elem == KILN_PB_I64) {
        size_t w = elem == KILN_PB_I32 ? 4 : 8;
        if (len % w) {
            if (at) *at = f->data.p;
            return KILN_PB_BAD_PACKED;
        }
        *n = len / w;
        return KILN_PB_OK;
    }
    kiln_pb r = f->data;
    size_t count = 0;
    while (!kiln_pb_done(&r)) {
        uint64_t v;
        kiln_pb_err e = kiln_pb_read_varint(&r, &v);
        if (e) {
            if (at) *at = r.p;
            return e;
        }
        count++;
    }
    *n = count;
    return KILN_PB_OK;
}

size_t kiln_pb_repeated_read(const kiln_pb_field *f, kiln_pb_wire elem, uint64_t *out) {
    if (f->wire == elem) {
        out[0] = f->u;
        return 1;
    }
    kiln_pb r = f->data;
    size_t count = 0;
    while (!kiln_pb_done(&r)) {
        uint64_t v = 0;
        uint32_t u32 = 0;
        if (elem == KILN_PB_I32) {
            if (kiln_pb_read_fixed32(&r, &u32)) break;
            v = u32;
        } else if (elem == KILN_PB_I64) {
            if (kiln_pb_read_fixed64(&r, &v)) break;
        } else if (kiln_pb_read_varint(&r, &v)) {
            break;
        }
        out[count++] = v;
    }
    return count;
}
