/* onnx_common.c — the ONNX frontend's shared plumbing: the import context (error path, external
 * files), error formatting with file, field and byte offset, and field-level readers on top of the
 * protobuf decoder. */
#include "frontends/onnx/onnx_internal.h"

#include "core/status.h"
#include "engine/engine_format.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void onnx_ctx_release(onnx_ctx *c) {
    for (int i = 0; i < c->n_ext; i++) {
        free(c->ext[i].location);
        if (!c->root) kiln_file_map_free(c->ext[i].map);
    }
    free(c->ext);
    c->ext = NULL;
    c->n_ext = c->cap_ext = 0;
}

size_t onnx_where_push(onnx_ctx *c, const char *what, onnx_str name) {
    size_t saved = c->wlen, cap = sizeof c->where;
    char clean[80];
    size_t k = 0;
    if (name.p) {
        /* names come from the file: keep messages printable and short */
        for (size_t i = 0; i < name.n && k < 64; i++) {
            unsigned char ch = (unsigned char)name.p[i];
            clean[k++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
        }
        if (name.n > 64) k += (size_t)snprintf(clean + k, sizeof clean - k, "...");
    }
    clean[k] = 0;
    if (c->wlen < cap - 1) {
        int w = name.p ? snprintf(c->where + c->wlen, cap - c->wlen, "%s%s '%s'", c->wlen ? " " : "", what, clean)
                       : snprintf(c->where + c->wlen, cap - c->wlen, "%s%s", c->wlen ? " " : "", what);
        if (w > 0) c->wlen += (size_t)w < cap - c->wlen ? (size_t)w : cap - 1 - c->wlen;
    }
    return saved;
}

kiln_status onnx_fail(onnx_ctx *c, kiln_status s, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->wlen) return kiln_error(s, "%s: %s: %s", c->file, c->where, msg);
    return kiln_error(s, "%s: %s", c->file, msg);
}

kiln_status onnx_refuse_other_formats(onnx_ctx *c, const uint8_t *d, size_t size) {
    if (size >= 8 && !memcmp(d, KILN_ENGINE_MAGIC, 8))
        return onnx_fail(c, KILN_ERR_PARSE, "this is a kiln engine, not an ONNX model (run it with `kiln run`, describe "
                         "it with `kiln inspect`)");
    if (size >= 6 && !memcmp(d, "\x93NUMPY", 6))
        return onnx_fail(c, KILN_ERR_PARSE, "this is a NumPy .npy array, not an ONNX model");
    uint64_t header = 0; /* safetensors: u64 little-endian header size, then the JSON header */
    for (int i = 7; size >= 10 && i >= 0; i--) header = header << 8 | d[i];
    if (size >= 10 && d[8] == '{' && header >= 2 && header <= size - 8)
        return onnx_fail(c, KILN_ERR_PARSE, "this is a safetensors file (weights without a graph), not an ONNX model; for "
                         "a Hugging Face checkpoint, build its directory with `kiln build --hf DIR`");
    return KILN_OK;
}

kiln_status onnx_prefix(onnx_ctx *c, kiln_status s) {
    if (c->wlen) return kiln_error_prefix(s, "%s: %s", c->file, c->where);
    return kiln_error_prefix(s, "%s", c->file);
}

kiln_status onnx_pb_fail(onnx_ctx *c, kiln_pb_err e, const uint8_t *at) {
    return onnx_fail(c, KILN_ERR_PARSE, "%s at byte %zu", kiln_pb_err_str(e), (size_t)(at - c->base));
}

static const char *wire_name(kiln_pb_wire w) {
    switch (w) {
    case KILN_PB_VARINT: return "varint";
    case KILN_PB_I64: return "64-bit";
    case KILN_PB_LEN: return "length-delimited";
    case KILN_PB_SGROUP: return "group";
    case KILN_PB_EGROUP: return "end-group";
    case KILN_PB_I32: return "32-bit";
    }
    return "?";
}

kiln_status onnx_want(onnx_ctx *c, const kiln_pb_field *f, kiln_pb_wire w, const char *field) {
    if (f->wire == w) return KILN_OK;
    return onnx_fail(c, KILN_ERR_PARSE, "field '%s' (%u) is %s, expected %s, at byte %zu", field, f->number,
                     wire_name(f->wire), wire_name(w), (size_t)(f->start - c->base));
}

kiln_status onnx_next(onnx_ctx *c, kiln_pb *r, kiln_pb_field *f) {
    kiln_pb_err e = kiln_pb_next(r, f);
    return e ? onnx_pb_fail(c, e, r->p) : KILN_OK;
}

onnx_str onnx_peek_string(kiln_pb msg, uint32_t number) {
    onnx_str s = {NULL, 0};
    kiln_pb_field f;
    while (!kiln_pb_done(&msg) && kiln_pb_next(&msg, &f) == KILN_PB_OK)
        if (f.number == number && f.wire == KILN_PB_LEN) s = (onnx_str){(const char *)f.data.p, kiln_pb_left(&f.data)};
    return s;
}

kiln_status onnx_repeated(onnx_ctx *c, kiln_pb msg, uint32_t number, kiln_pb_wire elem, const char *field,
                          uint64_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    size_t total = 0;
    kiln_pb r = msg;
    kiln_pb_field f;
    while (!kiln_pb_done(&r)) {
        KILN_TRY(onnx_next(c, &r, &f));
        if (f.number != number) continue;
        size_t k;
        const uint8_t *at = f.start;
        kiln_pb_err e = kiln_pb_repeated_count(&f, elem, &k, &at);
        if (e == KILN_PB_WRONG_WIRE_TYPE) return onnx_want(c, &f, elem, field);
        if (e) return onnx_fail(c, KILN_ERR_PARSE, "field '%s': %s at byte %zu", field, kiln_pb_err_str(e),
                                (size_t)(at - c->base));
        total += k; /* k <= bytes in the buffer, so this cannot overflow */
    }
    if (!total) return KILN_OK;
    uint64_t *vals = malloc(total * sizeof *vals);
    if (!vals) return onnx_fail(c, KILN_ERR_OUT_OF_MEMORY, "out of memory reading %zu values of '%s'", total, field);
    size_t got = 0;
    r = msg;
    while (!kiln_pb_done(&r)) {
        kiln_status s = onnx_next(c, &r, &f); /* cannot fail: the first pass read the same bytes */
        if (s != KILN_OK) {
            free(vals);
            return s;
        }
        if (f.number == number) got += kiln_pb_repeated_read(&f, elem, vals + got);
    }
    KILN_ASSERT(got == total);
    *out = vals;
    *n = total;
    return KILN_OK;
}
