/* strbuf.h — a growable byte buffer that the JSON, CSV and HTML writers append to. Appending never
 * fails loudly: on out of memory the buffer sets `failed`, drops that and every later append, and
 * kiln_strbuf_status() / kiln_strbuf_write_file() report it. The contents are always NUL-terminated
 * once anything was appended (data may be NULL before that). */
#ifndef KILN_CORE_STRBUF_H
#define KILN_CORE_STRBUF_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kiln_strbuf {
    char *data;  /* owned; NUL-terminated; NULL while empty */
    size_t len;  /* bytes used, excluding the NUL */
    size_t cap;  /* bytes allocated */
    bool failed; /* an allocation failed: the contents are incomplete */
} kiln_strbuf;

/* An empty buffer (also what `kiln_strbuf b = {0};` gives). */
void kiln_strbuf_init(kiln_strbuf *b);
/* Frees the contents and leaves an empty buffer. Accepts a zeroed buffer. */
void kiln_strbuf_free(kiln_strbuf *b);
/* Empties the buffer but keeps its memory; clears `failed`. */
void kiln_strbuf_clear(kiln_strbuf *b);
/* Appends n bytes (which may include NULs). */
void kiln_strbuf_append(kiln_strbuf *b, const void *s, size_t n);
/* Appends a NUL-terminated string. */
void kiln_strbuf_puts(kiln_strbuf *b, const char *s);
/* Appends one byte. */
void kiln_strbuf_putc(kiln_strbuf *b, char c);
/* Appends printf-formatted text. */
void kiln_strbuf_printf(kiln_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* KILN_OK, or KILN_ERR_OUT_OF_MEMORY (with a message) when an append failed. */
kiln_status kiln_strbuf_status(const kiln_strbuf *b);
/* Writes the contents to `path` with kiln_file_write_atomic (its output rules apply). Errors:
 * KILN_ERR_OUT_OF_MEMORY when the contents are incomplete (nothing is written), else those of
 * kiln_file_write_atomic. */
kiln_status kiln_strbuf_write_file(const kiln_strbuf *b, const char *path);

#endif
