/* cmd_tokenize.c — `kiln tokenize TOKENIZER` (not listed in `kiln --help`): encodes or decodes with a
 * Hugging Face tokenizer.json through src/llm/tokenizer.h and prints JSON, for the tests that compare
 * kiln's tokenizer with `tokenizers` and for looking at how a text tokenizes. */
#include "cli.h"

#include "core/json_read.h"
#include "core/json_write.h"
#include "core/status.h"
#include "llm/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *USAGE =
    "usage: kiln tokenize TOKENIZER [options]\n"
    "\n"
    "Encodes the text on stdin with TOKENIZER (a tokenizer.json or its directory) and prints\n"
    "{\"ids\": [...]}.\n"
    "\n"
    "options:\n"
    "  --text FILE      read the text from FILE instead of stdin\n"
    "  --no-special     do not add the post-processor's special tokens (e.g. bos)\n"
    "  --count          print {\"count\": N, \"bytes\", \"ms\", \"cpu_ms\": encode time} instead of the ids\n"
    "  --decode         read a JSON array of ids from stdin and print their text\n"
    "  --skip-special   with --decode: leave special tokens out\n"
    "  --jsonl FILE     every line of FILE is a JSON string; print one line per string:\n"
    "                   {\"ids\": [...], \"text\": decoded ids, \"stream\": streaming decode of the ids}\n"
    "  --info           print {\"vocab_size\", \"bos_id\", \"eos_id\"}\n"
    "  -h, --help       this help\n";

typedef struct tok_args {
    const char *tokenizer, *text_file, *jsonl;
    bool no_special, count, decode, skip_special, info;
} tok_args;

/* Reads all of f into b; KILN_ERR_IO naming `what` on a read error. */
static kiln_status read_all(FILE *f, const char *what, kiln_strbuf *b) {
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) kiln_strbuf_append(b, chunk, n);
    if (ferror(f)) return kiln_error(KILN_ERR_IO, "cannot read %s", what);
    return kiln_strbuf_status(b);
}

static kiln_status read_file(const char *path, kiln_strbuf *b) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_error(KILN_ERR_IO, "cannot open %s", path);
    kiln_status s = read_all(f, path, b);
    fclose(f);
    return s;
}

/* Writes {"ids": [...]} (plus, when text is given, "text" and "stream") as one line to out. */
static void put_ids(kiln_strbuf *out, const int32_t *ids, size_t n, const char *text, size_t tlen,
                    const kiln_strbuf *stream) {
    kiln_strbuf_puts(out, "{\"ids\": [");
    for (size_t i = 0; i < n; i++) kiln_strbuf_printf(out, "%s%d", i ? ", " : "", ids[i]);
    kiln_strbuf_puts(out, "]");
    if (text) {
        kiln_strbuf_puts(out, ", \"text\": ");
        kiln_json_escape(out, text, tlen);
        kiln_strbuf_puts(out, ", \"stream\": ");
        kiln_json_escape(out, stream->data ? stream->data : "", stream->len);
    }
    kiln_strbuf_puts(out, "}\n");
}

/* The streaming decode of ids into out, token by token. */
static kiln_status stream_decode(const kiln_tokenizer *tok, const int32_t *ids, size_t n, kiln_strbuf *out) {
    kiln_tokenizer_stream st;
    kiln_tokenizer_stream_init(&st);
    for (size_t i = 0; i < n; i++) KILN_TRY(kiln_tokenizer_stream_push(tok, &st, ids[i], false, out));
    kiln_tokenizer_stream_flush(&st, out);
    return kiln_strbuf_status(out);
}

/* One JSON-string line of --jsonl: encode, decode, stream-decode, print. */
static kiln_status jsonl_line(const kiln_tokenizer *tok, const tok_args *a, const char *line, size_t len, int lineno,
                              kiln_strbuf *out) {
    kiln_jdoc d = {0};
    int32_t *ids = NULL;
    size_t n = 0, tlen = 0;
    char *text = NULL;
    kiln_strbuf stream = {0};
    kiln_status s = kiln_jdoc_parse(line, len, "--jsonl line", &d);
    const kiln_jnode *v = kiln_jdoc_root(&d);
    if (s == KILN_OK && v->type != KILN_JNODE_STRING)
        s = kiln_error(KILN_ERR_PARSE, "--jsonl line %d is not a JSON string", lineno);
    if (s == KILN_OK) s = kiln_tokenizer_encode(tok, v->str, v->len, !a->no_special, &ids, &n);
    if (s == KILN_OK) s = kiln_tokenizer_decode(tok, ids, n, a->skip_special, &text, &tlen);
    if (s == KILN_OK) s = stream_decode(tok, ids, n, &stream);
    if (s == KILN_OK) put_ids(out, ids, n, text, tlen, &stream);
    kiln_strbuf_free(&stream);
    free(text);
    free(ids);
    kiln_jdoc_free(&d);
    return s;
}

static kiln_status run_jsonl(const kiln_tokenizer *tok, const tok_args *a, kiln_strbuf *out) {
    kiln_strbuf in = {0};
    kiln_status s = read_file(a->jsonl, &in);
    size_t pos = 0;
    for (int lineno = 1; s == KILN_OK && pos < in.len; lineno++) {
        const char *nl = memchr(in.data + pos, '\n', in.len - pos);
        size_t end = nl ? (size_t)(nl - in.data) : in.len;
        if (end > pos) s = jsonl_line(tok, a, in.data + pos, end - pos, lineno, out);
        pos = end + 1;
    }
    kiln_strbuf_free(&in);
    return s;
}

static kiln_status run_decode(const kiln_tokenizer *tok, const tok_args *a, kiln_strbuf *out) {
    kiln_strbuf in = {0};
    kiln_jdoc d = {0};
    int32_t *ids = NULL;
    char *text = NULL;
    size_t n = 0, tlen;
    kiln_status s = read_all(stdin, "stdin", &in);
    if (s == KILN_OK) s = kiln_jdoc_parse(in.data ? in.data : "", in.len, "stdin", &d);
    const kiln_jnode *arr = kiln_jdoc_root(&d);
    if (s == KILN_OK && arr->type != KILN_JNODE_ARRAY) s = kiln_error(KILN_ERR_PARSE, "stdin: not a JSON array of ids");
    if (s == KILN_OK && !(ids = malloc(((size_t)arr->count + 1) * sizeof *ids)))
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (const kiln_jnode *v = kiln_jdoc_first(&d, arr); s == KILN_OK && v; v = kiln_jdoc_next(&d, v)) {
        if (v->type != KILN_JNODE_NUMBER || v->num < -2147483648.0 || v->num > 2147483647.0)
            s = kiln_error(KILN_ERR_PARSE, "stdin: element %zu is not a token id", n);
        else ids[n++] = (int32_t)v->num;
    }
    if (s == KILN_OK) s = kiln_tokenizer_decode(tok, ids, n, a->skip_special, &text, &tlen);
    if (s == KILN_OK) kiln_strbuf_append(out, text, tlen);
    free(text);
    free(ids);
    kiln_jdoc_free(&d);
    kiln_strbuf_free(&in);
    return s;
}

/* CPU time of this process in ms (what a timing check on a busy machine should look at). */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static kiln_status run_encode(const kiln_tokenizer *tok, const tok_args *a, kiln_strbuf *out) {
    kiln_strbuf in = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    kiln_status s = a->text_file ? read_file(a->text_file, &in) : read_all(stdin, "stdin", &in);
    double t0 = cli_now_ms(), c0 = cpu_ms();
    if (s == KILN_OK) s = kiln_tokenizer_encode(tok, in.data, in.len, !a->no_special, &ids, &n);
    double ms = cli_now_ms() - t0, cms = cpu_ms() - c0;
    if (s == KILN_OK && a->count)
        kiln_strbuf_printf(out, "{\"count\": %zu, \"bytes\": %zu, \"ms\": %.3f, \"cpu_ms\": %.3f}\n", n, in.len, ms, cms);
    else if (s == KILN_OK) put_ids(out, ids, n, NULL, 0, NULL);
    free(ids);
    kiln_strbuf_free(&in);
    return s;
}

static int parse_args(int argc, char **argv, tok_args *a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(s)) { fputs(USAGE, stdout); return 0; }
        if ((!strcmp(s, "--text") || !strcmp(s, "--jsonl")) && !val) return cli_usage_error("tokenize ", "%s needs a value", s);
        if (!strcmp(s, "--text")) a->text_file = argv[++i];
        else if (!strcmp(s, "--jsonl")) a->jsonl = argv[++i];
        else if (!strcmp(s, "--no-special")) a->no_special = true;
        else if (!strcmp(s, "--count")) a->count = true;
        else if (!strcmp(s, "--decode")) a->decode = true;
        else if (!strcmp(s, "--skip-special")) a->skip_special = true;
        else if (!strcmp(s, "--info")) a->info = true;
        else if (s[0] == '-') return cli_usage_error("tokenize ", "unknown option '%s'", s);
        else if (!a->tokenizer) a->tokenizer = s;
        else return cli_usage_error("tokenize ", "unexpected argument '%s'", s);
    }
    if (!a->tokenizer) return cli_usage_error("tokenize ", "missing TOKENIZER (a tokenizer.json or its directory)");
    return -1;
}

int kiln_cmd_tokenize(int argc, char **argv) {
    tok_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    kiln_tokenizer *tok;
    if (kiln_tokenizer_load(a.tokenizer, &tok) != KILN_OK) return cli_fail();
    kiln_strbuf out = {0};
    kiln_status s = KILN_OK;
    if (a.info)
        kiln_strbuf_printf(&out, "{\"vocab_size\": %d, \"bos_id\": %d, \"eos_id\": %d}\n", kiln_tokenizer_vocab_size(tok),
                           kiln_tokenizer_bos_id(tok), kiln_tokenizer_eos_id(tok));
    else if (a.jsonl) s = run_jsonl(tok, &a, &out);
    else if (a.decode) s = run_decode(tok, &a, &out);
    else s = run_encode(tok, &a, &out);
    kiln_tokenizer_free(tok);
    if (s == KILN_OK) s = kiln_strbuf_status(&out);
    if (s == KILN_OK) fwrite(out.data ? out.data : "", 1, out.len, stdout);
    kiln_strbuf_free(&out);
    return s == KILN_OK ? 0 : cli_fail();
}
