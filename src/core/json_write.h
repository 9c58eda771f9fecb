/* json_write.h — a small streaming JSON writer into a kiln_strbuf (correct escaping; non-finite
 * numbers become null), and the shortest round-trip formatting of doubles it shares with the CSV
 * and HTML writers of stats/report.h. The reader is json_read.h. */
#ifndef KILN_CORE_JSON_WRITE_H
#define KILN_CORE_JSON_WRITE_H

#include "core/strbuf.h"
#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Formats a finite double in the shortest of %.15g / %.16g / %.17g that reads back as the same
 * value ("0.1", "1e+300", "3"); non-finite values as "nan", "inf" or "-inf". buf must hold 32 bytes.
 * Returns buf. */
char *kiln_format_double(char buf[32], double v);

/* Usage:
 *   kiln_strbuf b = {0}; kiln_json j; kiln_json_init(&j, &b, 2);
 *   kiln_json_object_begin(&j);
 *     kiln_json_kv_string(&j, "model", name);
 *     kiln_json_key(&j, "p99_ms"); kiln_json_number(&j, p99);
 *   kiln_json_object_end(&j);
 *   KILN_TRY(kiln_json_finish(&j));   // then use b.data / kiln_strbuf_write_file
 * Misuse (a value in an object without a key, a key in an array, unbalanced ends, a second top-level
 * value, nesting deeper than KILN_JSON_MAX_DEPTH) writes nothing more and is reported by
 * kiln_json_finish; so is running out of memory. Strings are UTF-8: valid sequences pass through
 * unchanged, '"', '\\' and control characters (< 0x20) are escaped (\n \r \t \b \f or \u00XX), and each
 * byte of an invalid UTF-8 sequence becomes \ufffd, so the output is always valid JSON. */
#define KILN_JSON_MAX_DEPTH 64

typedef struct kiln_json {
    kiln_strbuf *out;
    int indent;                            /* spaces per level; 0 = compact, one line */
    int depth;                             /* open containers */
    bool pending_key;                      /* a key was written and awaits its value */
    bool done;                             /* a complete top-level value has been written */
    unsigned char open[KILN_JSON_MAX_DEPTH]; /* per open container: bit 0 object, bit 1 non-empty */
    const char *misuse;                    /* first misuse, NULL if none */
} kiln_json;

/* Starts a JSON document appended to `out` (which the caller owns and keeps alive). */
void kiln_json_init(kiln_json *j, kiln_strbuf *out, int indent);
void kiln_json_object_begin(kiln_json *j);
void kiln_json_object_end(kiln_json *j);
void kiln_json_array_begin(kiln_json *j);
void kiln_json_array_end(kiln_json *j);
/* The next member's key (only directly inside an object). */
void kiln_json_key(kiln_json *j, const char *key);
/* A string value; NULL writes null. */
void kiln_json_string(kiln_json *j, const char *s);
/* A string value of n bytes (may contain NULs, written as \u0000). */
void kiln_json_string_n(kiln_json *j, const char *s, size_t n);
/* A number (kiln_format_double); NaN and +-infinity are written as null. */
void kiln_json_number(kiln_json *j, double v);
void kiln_json_int(kiln_json *j, int64_t v);
void kiln_json_bool(kiln_json *j, bool v);
void kiln_json_null(kiln_json *j);
/* Key + value in one call. */
void kiln_json_kv_string(kiln_json *j, const char *key, const char *s);
void kiln_json_kv_number(kiln_json *j, const char *key, double v);
void kiln_json_kv_int(kiln_json *j, const char *key, int64_t v);
void kiln_json_kv_bool(kiln_json *j, const char *key, bool v);
/* Ends the document (appends a newline). KILN_OK when exactly one complete value was written with
 * no misuse; KILN_ERR_INVALID_ARGUMENT naming the misuse; KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_json_finish(kiln_json *j);
/* Appends s[0..n) as a quoted, escaped JSON string (the rules above). */
void kiln_json_escape(kiln_strbuf *out, const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
