/* fuzz_json.c — libFuzzer target for the JSON reader (core/json_read.c), which every JSON kiln reads
 * goes through: Hugging Face configs and tokenizers, safetensors headers, server responses and stream
 * chunks, prompt files. The input is parsed; a document that loads is walked with the accessors and
 * written back with kiln_jdoc_write; that text must parse again, and parsing and writing must then
 * reach a fixed point (the second rewrite gives the same bytes as the first: the first may differ from
 * the input, as the writer replaces bytes of invalid UTF-8 with "\ufffd"). A writer whose output the
 * reader refuses or reads differently is a finding, reported by abort. Seeds: fuzz/corpus/fuzz_json/
 * (configs, tokenizer fragments, responses, edge cases). */
#include "core/json_read.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Visits every node through the public accessors (the paths the readers of kiln take). */
static void walk(const kiln_jdoc *doc, const kiln_jnode *v) {
    double d;
    (void)kiln_jdoc_num(v, &d);
    (void)kiln_jdoc_str(v);
    int i = 0;
    for (const kiln_jnode *c = kiln_jdoc_first(doc, v); c; c = kiln_jdoc_next(doc, c), i++) {
        if (kiln_jdoc_at(doc, v, i) != c) abort();
        if (c->key && v->type == KILN_JNODE_OBJECT && !kiln_jdoc_get(doc, v, c->key)) abort();
        walk(doc, c);
    }
    if (i != v->count) abort();
}

/* Parses text[0..len) (which must parse: it is the writer's output) and writes it back into out. */
static void rewrite(const char *text, size_t len, kiln_strbuf *out) {
    kiln_jdoc doc;
    if (kiln_jdoc_parse(text, len, "fuzz (written back)", &doc) != KILN_OK) abort();
    kiln_jdoc_write(&doc, kiln_jdoc_root(&doc), out);
    kiln_jdoc_free(&doc);
    if (kiln_strbuf_status(out) != KILN_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    kiln_jdoc doc;
    if (kiln_jdoc_parse((const char *)data, size, "fuzz", &doc) != KILN_OK) return 0;
    walk(&doc, kiln_jdoc_root(&doc));
    kiln_strbuf once = {0}, twice = {0}, thrice = {0};
    kiln_jdoc_write(&doc, kiln_jdoc_root(&doc), &once);
    kiln_jdoc_free(&doc);
    if (kiln_strbuf_status(&once) != KILN_OK) abort();
    rewrite(once.data, once.len, &twice);
    rewrite(twice.data, twice.len, &thrice);
    if (thrice.len != twice.len || memcmp(thrice.data, twice.data, twice.len)) abort();
    kiln_strbuf_free(&once);
    kiln_strbuf_free(&twice);
    kiln_strbuf_free(&thrice);
    return 0;
}
