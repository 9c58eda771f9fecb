/* test_tokenizer.c — src/llm/tokenizer.h on a tiny hand-made byte-level BPE (merge order, added and
 * special tokens, bos from tokenizer_config.json, decode, streaming decode of a character split over
 * two tokens, lossy decode) and on bad input: a missing file, bad JSON, unsupported model, normalizer,
 * pre-tokenizer pattern and decoder, merges of unknown tokens, every truncation of a valid
 * tokenizer.json and every byte of it replaced (errors or a working tokenizer, never a crash).
 * Writes its files under ./tokenizer_test/ (the test's working directory). Exit 0 = pass. */
#include "check.h"
#include "core/status.h"
#include "llm/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIR "tokenizer_test"

/* "Ġ" is the byte-level form of ' ', "Ã" and "©" those of the bytes of 'é' (C3 A9). */
static const char GOOD[] =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,\n"
    " \"added_tokens\": [{\"id\": 7, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false,\n"
    "   \"rstrip\": false, \"normalized\": false, \"special\": true}],\n"
    " \"normalizer\": null,\n"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
    " \"post_processor\": null,\n"
    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"fuse_unk\": false, \"byte_fallback\": false,\n"
    "   \"ignore_merges\": false,\n"
    "   \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, \"\\u0120ab\": 6,\n"
    "             \"\\u00c3\": 8, \"\\u00a9\": 9},\n"
    "   \"merges\": [\"a b\", [\"ab\", \"c\"], \"\\u0120 ab\"]}}\n";

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(text, 1, len, f) == len);
    fclose(f);
}

/* Encodes text and compares with want[0..n). */
static void check_encode(const kiln_tokenizer *tok, const char *text, bool special, const int32_t *want, size_t n) {
    int32_t *ids = NULL;
    size_t got = 0;
    CHECK(kiln_tokenizer_encode(tok, text, strlen(text), special, &ids, &got) == KILN_OK);
    CHECK(got == n && (n == 0 || !memcmp(ids, want, n * sizeof *ids)));
    if (got != n || (n && memcmp(ids, want, n * sizeof *ids))) {
        fprintf(stderr, "  encode(\"%s\"):", text);
        for (size_t i = 0; i < got; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
}

/* Decodes ids and compares with want. */
static void check_decode(const kiln_tokenizer *tok, const int32_t *ids, size_t n, bool skip, const char *want) {
    char *text = NULL;
    size_t len = 0;
    CHECK(kiln_tokenizer_decode(tok, ids, n, skip, &text, &len) == KILN_OK);
    CHECK(text && len == strlen(want) && !memcmp(text, want, len) && text[len] == '\0');
    free(text);
}

static void test_good(void) {
    kiln_tokenizer *tok = NULL;
    write_file(DIR "/tokenizer.json", GOOD, strlen(GOOD));
    CHECK(kiln_tokenizer_load(DIR "/tokenizer.json", &tok) == KILN_OK);
    if (!tok) return;
    CHECK(kiln_tokenizer_vocab_size(tok) == 10);
    CHECK(kiln_tokenizer_find(tok, "<|endoftext|>") == 7 && kiln_tokenizer_find(tok, "\xc4\xa0" "ab") == 6);
    CHECK(kiln_tokenizer_find(tok, "nope") == -1);
    CHECK(kiln_tokenizer_bos_id(tok) == 7 && kiln_tokenizer_eos_id(tok) == 7); /* GPT-2's convention */
    CHECK(kiln_tokenizer_is_special(tok, 7) && !kiln_tokenizer_is_special(tok, 6));
    check_encode(tok, "abc ab", true, (const int32_t[]){5, 6}, 2);
    check_encode(tok, "abc<|endoftext|> ab", false, (const int32_t[]){5, 7, 6}, 3);
    check_encode(tok, "ba", false, (const int32_t[]){1, 0}, 2);
    check_encode(tok, "", true, NULL, 0);
    check_encode(tok, "xyz", false, NULL, 0); /* bytes without a token and no unk: dropped */
    check_encode(tok, "\xc3\xa9", false, (const int32_t[]){8, 9}, 2);
    check_decode(tok, (const int32_t[]){5, 6, 7}, 3, false, "abc ab<|endoftext|>");
    check_decode(tok, (const int32_t[]){5, 6, 7}, 3, true, "abc ab");
    check_decode(tok, NULL, 0, false, "");
    check_decode(tok, (const int32_t[]){8, 0}, 2, false, "\xef\xbf\xbd" "a"); /* cut character: U+FFFD */
    char *text = NULL;
    size_t len;
    CHECK(kiln_tokenizer_decode(tok, (const int32_t[]){0, 10}, 2, false, &text, &len) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(text == NULL && strstr(kiln_last_error(), "10"));
    size_t tl;
    CHECK(kiln_tokenizer_token_text(tok, 6, &tl) && tl == 3 && !memcmp(kiln_tokenizer_token_text(tok, 6, &tl), " ab", 3));
    CHECK(kiln_tokenizer_token_text(tok, -1, &tl) == NULL && tl == 0);

    kiln_tokenizer_stream st;
    kiln_strbuf out = {0};
    kiln_tokenizer_stream_init(&st);
    CHECK(kiln_tokenizer_stream_push(tok, &st, 0, false, &out) == KILN_OK && out.len == 1);
    CHECK(kiln_tokenizer_stream_push(tok, &st, 8, false, &out) == KILN_OK && out.len == 1); /* held back */
    CHECK(kiln_tokenizer_stream_push(tok, &st, 9, false, &out) == KILN_OK && out.len == 3);
    CHECK(kiln_tokenizer_stream_push(tok, &st, 7, true, &out) == KILN_OK && out.len == 3);
    CHECK(kiln_tokenizer_stream_push(tok, &st, 8, false, &out) == KILN_OK && out.len == 3);
    CHECK(kiln_tokenizer_stream_push(tok, &st, 99, false, &out) == KILN_ERR_INVALID_ARGUMENT);
    kiln_tokenizer_stream_flush(&st, &out);
    CHECK(out.len == 6 && !memcmp(out.data, "a\xc3\xa9\xef\xbf\xbd", 6));
    kiln_strbuf_free(&out);
    kiln_tokenizer_free(tok);
}

/* A directory with tokenizer_config.json: bos from add_bos_token. */
static void test_config(void) {
    kiln_tokenizer *tok = NULL;
    const char *cfg = "{\"bos_token\": {\"content\": \"<|endoftext|>\"}, \"eos_token\": \"ab\", \"add_bos_token\": true}";
    write_file(DIR "/tokenizer_config.json", cfg, strlen(cfg));
    CHECK(kiln_tokenizer_load(DIR, &tok) == KILN_OK);
    if (tok) {
        CHECK(kiln_tokenizer_bos_id(tok) == 7 && kiln_tokenizer_eos_id(tok) == 4);
        check_encode(tok, "abc", true, (const int32_t[]){7, 5}, 2);
        check_encode(tok, "abc", false, (const int32_t[]){5}, 1);
        kiln_tokenizer_free(tok);
    }
    cfg = "{\"bos_token\": \"<s>\"}";
    write_file(DIR "/tokenizer_config.json", cfg, strlen(cfg));
    CHECK(kiln_tokenizer_load(DIR, &tok) == KILN_ERR_PARSE && strstr(kiln_last_error(), "<s>"));
    remove(DIR "/tokenizer_config.json");
}

/* GOOD with `from` replaced by `to` must fail to load with status `want` and a message naming `needle`. */
static void check_bad(const char *from, const char *to, kiln_status want, const char *needle) {
    const char *at = strstr(GOOD, from);
    CHECK(at != NULL);
    if (!at) return;
    char buf[sizeof GOOD + 256];
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - GOOD), GOOD, to, at + strlen(from));
    write_file(DIR "/bad.json", buf, strlen(buf));
    kiln_tokenizer *tok = NULL;
    kiln_status s = kiln_tokenizer_load(DIR "/bad.json", &tok);
    CHECK(s == want && tok == NULL);
    CHECK(strstr(kiln_last_error(), needle) != NULL);
    if (s != want || !strstr(kiln_last_error(), needle))
        fprintf(stderr, "  %s -> %s: %s (%s)\n", from, to, kiln_status_name(s), kiln_last_error());
    kiln_tokenizer_free(tok);
}

static void test_bad(void) {
    kiln_tokenizer *tok = NULL;
    CHECK(kiln_tokenizer_load(DIR "/missing.json", &tok) == KILN_ERR_IO && tok == NULL);
    CHECK(strstr(kiln_last_error(), "missing.json") != NULL);
    CHECK(kiln_tokenizer_load(DIR "/empty_dir_without_json/", &tok) == KILN_ERR_IO);
    check_bad("\"BPE\"", "\"WordPiece\"", KILN_ERR_UNSUPPORTED, "WordPiece");
    check_bad("\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}", KILN_ERR_UNSUPPORTED, "NFKC");
    check_bad("{\"type\": \"ByteLevel\", \"add_prefix_space\": false",
              "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"},"
              " \"behavior\": \"Isolated\", \"invert\": false}]}, \"x\": {\"a\": false", KILN_ERR_UNSUPPORTED, "\\w+");
    check_bad("\"pre_tokenizer\": {\"type\": \"ByteLevel\"", "\"pre_tokenizer\": {\"type\": \"Whitespace\"",
              KILN_ERR_UNSUPPORTED, "Whitespace");
    check_bad("\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"WordPiece\"", KILN_ERR_UNSUPPORTED,
              "decoder");
    check_bad("\"post_processor\": null", "\"post_processor\": {\"type\": \"BertProcessing\"}", KILN_ERR_UNSUPPORTED,
              "BertProcessing");
    check_bad("\"dropout\": null", "\"dropout\": 0.1", KILN_ERR_UNSUPPORTED, "dropout");
    check_bad("\"a b\"", "\"a q\"", KILN_ERR_PARSE, "merges[0]");
    check_bad("\"a b\"", "\"a  b\"", KILN_ERR_PARSE, "merges[0]");
    check_bad("[\"ab\", \"c\"]", "[\"ab\"]", KILN_ERR_PARSE, "merges[1]");
    check_bad("\"a\": 0", "\"a\": -1", KILN_ERR_PARSE, "vocab");
    check_bad("\"a\": 0", "\"a\": 1e12", KILN_ERR_UNSUPPORTED, "limit");
    check_bad("\"id\": 7", "\"id\": \"7\"", KILN_ERR_PARSE, "added_tokens");
    check_bad("\"unk_token\": null", "\"unk_token\": \"<unk>\"", KILN_ERR_PARSE, "<unk>");
    check_bad("\"version\"", "\"version\" \"", KILN_ERR_PARSE, "invalid JSON");
}

/* Writes DIR/hole.json: GOOD with its added token moved from id 7 to 11 (so that no token has id 7 or
 * 10) and a TemplateProcessing post-processor whose one special token "<s>" has id template_id. */
static void write_template_variant(int template_id) {
    const char *added = strstr(GOOD, "\"id\": 7"), *post = strstr(GOOD, "\"post_processor\": null");
    CHECK(added && post && added < post);
    if (!added || !post) return;
    char buf[sizeof GOOD + 512];
    snprintf(buf, sizeof buf,
             "%.*s\"id\": 11%.*s\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
             "{\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [%d]}}}%s",
             (int)(added - GOOD), GOOD, (int)(post - added - 7), added + 7, template_id,
             post + strlen("\"post_processor\": null"));
    write_file(DIR "/hole.json", buf, strlen(buf));
}

/* A template naming an id inside the id range that no token has is refused: encode would hand the
 * id out and decode refuse it (found by fuzz/fuzz_tokenizer.c). The moved token itself is fine. */
static void test_template_names_a_hole(void) {
    kiln_tokenizer *tok = NULL;
    write_template_variant(7);
    CHECK(kiln_tokenizer_load(DIR "/hole.json", &tok) == KILN_ERR_PARSE && tok == NULL);
    CHECK(strstr(kiln_last_error(), "post_processor id 7 names no token") != NULL);
    kiln_tokenizer_free(tok);
    write_template_variant(11);
    CHECK(kiln_tokenizer_load(DIR "/hole.json", &tok) == KILN_OK);
    if (tok) check_encode(tok, "abc", true, (const int32_t[]){11, 5}, 2);
    kiln_tokenizer_free(tok);
}

/* Every truncation fails cleanly; every byte replaced by another loads or fails, never crashes, and a
 * tokenizer that loads still encodes and decodes. */
static void test_truncations_and_flips(void) {
    size_t n = strlen(GOOD);
    for (size_t cut = 0; cut + 1 < n; cut++) { /* GOOD minus its final newline is complete */
        kiln_tokenizer *tok = NULL;
        write_file(DIR "/cut.json", GOOD, cut);
        kiln_status s = kiln_tokenizer_load(DIR "/cut.json", &tok);
        CHECK(s != KILN_OK && tok == NULL && kiln_last_error()[0] != '\0');
    }
    static const char repl[] = {'x', '"', '}', '0', ' ', '\\', '\xff'};
    char buf[sizeof GOOD];
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < sizeof repl; r++) {
            memcpy(buf, GOOD, n);
            buf[i] = repl[r];
            write_file(DIR "/flip.json", buf, n);
            kiln_tokenizer *tok = NULL;
            if (kiln_tokenizer_load(DIR "/flip.json", &tok) != KILN_OK) {
                CHECK(tok == NULL && kiln_last_error()[0] != '\0');
                continue;
            }
            int32_t *ids = NULL;
            size_t nid = 0, len = 0;
            char *text = NULL;
            const char *sample = "abc ab<|endoftext|>\xc3\xa9 xyz\xff";
            CHECK(kiln_tokenizer_encode(tok, sample, strlen(sample), true, &ids, &nid) == KILN_OK);
            CHECK(kiln_tokenizer_decode(tok, ids, nid, false, &text, &len) == KILN_OK);
            free(ids);
            free(text);
            kiln_tokenizer_free(tok);
        }
}

int main(void) {
    mkdir(DIR, 0755);
    test_good();
    test_config();
    test_bad();
    test_template_names_a_hole();
    test_truncations_and_flips();
    return checks_report("test_tokenizer");
}
