/* json_read.h — a small strict JSON reader (RFC 8259) for every JSON kiln reads: Hugging Face config and
 * tokenizer files, safetensors headers, OpenAI and KServe v2 responses and stream chunks, JSONL prompt
 * files, and kiln's own JSON results. The whole text is parsed into a tree of nodes held in one
 * document; strings are decoded (escapes, \u surrogate pairs to UTF-8) and NUL-terminated.
 * kiln_jdoc_write writes a parsed value back out. JSON is written with the writer of core/json_write.h. */
#ifndef KILN_CORE_JSON_READ_H
#define KILN_CORE_JSON_READ_H

#include "kiln/kiln.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum kiln_jtype {
    KILN_JNODE_NULL,
    KILN_JNODE_FALSE,
    KILN_JNODE_TRUE,
    KILN_JNODE_NUMBER,
    KILN_JNODE_STRING,
    KILN_JNODE_ARRAY,
    KILN_JNODE_OBJECT,
} kiln_jtype;

/* One value. Children of an array or object are linked through `next` (indices into the document's
 * node array, -1 ends the list); an object member's key is in `key`. */
typedef struct kiln_jnode {
    kiln_jtype type;
    int first;        /* first child (array / object), -1 if none */
    int next;         /* next sibling, -1 if last */
    int count;        /* number of children (array / object) */
    double num;       /* NUMBER */
    const char *str;  /* STRING: decoded, NUL-terminated (may contain NULs: see len) */
    size_t len;       /* STRING: decoded byte length */
    const char *key;  /* member key when the parent is an object, else NULL */
} kiln_jnode;

typedef struct kiln_jdoc {
    kiln_jnode *nodes; /* nodes[0] is the root */
    int nnodes, cap;
    char *strings;         /* decoded strings and keys */
} kiln_jdoc;

/* Parses text[0..len) as exactly one JSON value (surrounding whitespace allowed). On success *doc
 * owns the tree (free with kiln_jdoc_free). Errors: KILN_ERR_PARSE naming `what` and the byte offset
 * and the problem; KILN_ERR_OUT_OF_MEMORY. Nesting deeper than 256 levels is a parse error. On
 * failure *doc is left empty (kiln_jdoc_free on it is harmless). */
kiln_status kiln_jdoc_parse(const char *text, size_t len, const char *what, kiln_jdoc *doc);
/* Frees a document; accepts a zeroed or already freed one. */
void kiln_jdoc_free(kiln_jdoc *doc);

/* The root node (NULL for an empty document). */
const kiln_jnode *kiln_jdoc_root(const kiln_jdoc *doc);
/* Member `key` of an object node, or NULL (also when obj is NULL or not an object). */
const kiln_jnode *kiln_jdoc_get(const kiln_jdoc *doc, const kiln_jnode *obj, const char *key);
/* Element i of an array node (or member i of an object), or NULL. */
const kiln_jnode *kiln_jdoc_at(const kiln_jdoc *doc, const kiln_jnode *arr, int i);
/* First child / next sibling for iteration; NULL at the end. */
const kiln_jnode *kiln_jdoc_first(const kiln_jdoc *doc, const kiln_jnode *v);
const kiln_jnode *kiln_jdoc_next(const kiln_jdoc *doc, const kiln_jnode *v);
/* The number of a NUMBER node into *out and true; false (and *out untouched) otherwise. */
bool kiln_jdoc_num(const kiln_jnode *v, double *out);
/* The string of a STRING node, or NULL. */
const char *kiln_jdoc_str(const kiln_jnode *v);
/* Shorthand: member `key` of obj as a number, or `dflt` when missing or not a number. */
double kiln_jdoc_get_num(const kiln_jdoc *doc, const kiln_jnode *obj, const char *key, double dflt);

/* Appends v (and everything under it) to out as compact JSON (strings re-escaped; numbers in
 * their shortest round-trip form; keys containing NULs are cut at the first NUL). */
void kiln_jdoc_write(const kiln_jdoc *doc, const kiln_jnode *v, kiln_strbuf *out);

#endif
