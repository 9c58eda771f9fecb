/* test_tokenizer_spm.c — src/llm/tokenizer.h on a hand-made SentencePiece-style tokenizer in the
 * Llama 2 form (Prepend / Replace normalizer, character BPE with byte fallback and fused unk,
 * Replace / ByteFallback / Fuse / Strip decoder, "<s> $A" template): the ids, and the decode of
 * ByteFallback runs (valid UTF-8, invalid: one U+FFFD per token, cut off), the leading-space Strip with
 * and without special tokens, and the streaming decode equal to decode on each, including a run
 * longer than the stream holds back. The ids and texts expected are those `tokenizers` 0.23 gives for
 * the same file; each token's own bytes (kiln_tokenizer_token_text). Exit 0 = pass. */
#include "check.h"
#include "core/status.h"
#include "llm/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ids: 0 <unk>, 1 <s>, 2 </s>, 3 <0x0A>, 4 <0x41>, 5 <0xE6>, 6 <0x97>, 7 <0xA5>, 8 ▁, 9 a, 10 b, 11 h,
 * 12 e, 13 l, 14 o, 15 ▁a, 16 he, 17 ll, 18 hell, 19 hello, 20 ▁hello */
static const char SPM[] =
    "{\"added_tokens\": ["
    "{\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
    "{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
    "{\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false}],"
    "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
    " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
    "\"pre_tokenizer\": null,"
    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
    " {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1]}}},"
    "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"},"
    " \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
    " {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
    "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true,"
    " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"<0x0A>\": 3, \"<0x41>\": 4, \"<0xE6>\": 5, \"<0x97>\": 6,"
    " \"<0xA5>\": 7, \"\\u2581\": 8, \"a\": 9, \"b\": 10, \"h\": 11, \"e\": 12, \"l\": 13, \"o\": 14, \"\\u2581a\": 15,"
    " \"he\": 16, \"ll\": 17, \"hell\": 18, \"hello\": 19, \"\\u2581hello\": 20},"
    " \"merges\": [[\"\\u2581\", \"a\"], [\"h\", \"e\"], [\"l\", \"l\"], [\"he\", \"ll\"], [\"hell\", \"o\"],"
    " [\"\\u2581\", \"hello\"]]}}";

/* Encoding text (with the template) gives want[0..n). */
static void expect_ids(const kiln_tokenizer *tok, const char *text, const int32_t *want, size_t n) {
    int32_t *ids = NULL;
    size_t got = 0;
    CHECK_OK(kiln_tokenizer_encode(tok, text, strlen(text), true, &ids, &got));
    bool same = got == n && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
    CHECKF(same, "encode of \"%s\": %zu ids, want %zu", text, got, n);
    free(ids);
}

/* Decoding ids[0..n) gives want, and so does the streaming decode token by token. */
static void expect_text(const kiln_tokenizer *tok, const int32_t *ids, size_t n, bool skip, const char *want) {
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(kiln_tokenizer_decode(tok, ids, n, skip, &text, &len));
    CHECKF(text && len == strlen(want) && !memcmp(text, want, len), "decode: \"%s\", want \"%s\"", text ? text : "", want);
    free(text);
    kiln_tokenizer_stream st;
    kiln_tokenizer_stream_init(&st);
    kiln_strbuf out = {0};
    for (size_t i = 0; i < n; i++) CHECK_OK(kiln_tokenizer_stream_push(tok, &st, ids[i], skip, &out));
    kiln_tokenizer_stream_flush(&st, &out);
    CHECKF(out.len == strlen(want) && !memcmp(out.data, want, out.len), "stream: \"%.*s\", want \"%s\"", (int)out.len,
           out.data ? out.data : "", want);
    kiln_strbuf_free(&out);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)
#define FFFD "\xef\xbf\xbd"

int main(void) {
    kiln_tokenizer *tok = NULL;
    REQUIRE_OK(kiln_tokenizer_load_memory(SPM, sizeof SPM - 1, NULL, 0, "spm test", &tok));
    CHECK(kiln_tokenizer_vocab_size(tok) == 21 && kiln_tokenizer_bos_id(tok) == 1);
    size_t tl;
    const char *t = kiln_tokenizer_token_text(tok, 5, &tl); /* <0xE6>: its byte */
    CHECK(t && tl == 1 && (unsigned char)t[0] == 0xE6);
    t = kiln_tokenizer_token_text(tok, 20, &tl); /* ▁hello: the Replace applied */
    CHECK(t && tl == 6 && !memcmp(t, " hello", 6));

    expect_ids(tok, "hello", IDS(1, 20));
    expect_ids(tok, " hello  ahello", IDS(1, 8, 20, 8, 15, 19));
    expect_ids(tok, "A\n\xe6\x97\xa5", IDS(1, 8, 4, 3, 5, 6, 7));       /* byte fallback */
    expect_ids(tok, "zz\xf0\x9f\x98\x80 b", IDS(1, 8, 0, 8, 10));       /* no byte tokens: one fused unk */
    expect_ids(tok, "<s>hello</s>", IDS(1, 1, 20, 2));                 /* each segment gets its ▁ */
    expect_ids(tok, "", IDS(1));

    expect_text(tok, IDS(1, 20, 8, 15), false, "<s> hello  a");
    expect_text(tok, IDS(1, 20, 8, 15), true, "hello  a");            /* <s> skipped, then the space stripped */
    expect_text(tok, IDS(8, 8, 20), false, "  hello");                 /* one leading space only */
    expect_text(tok, IDS(5, 6, 7, 20), false, "\xe6\x97\xa5 hello");
    expect_text(tok, IDS(5, 6, 20), false, FFFD FFFD " hello");        /* cut off: one U+FFFD per token */
    expect_text(tok, IDS(4, 5, 6, 7, 6), false, FFFD FFFD FFFD FFFD FFFD); /* an invalid run spoils it all */
    expect_text(tok, IDS(5, 6, 7, 1, 5), true, FFFD FFFD FFFD FFFD);   /* a skipped token does not end a run */
    expect_text(tok, IDS(3, 4, 9), false, "\nAa");
    int32_t run[3 * 40 + 1];
    kiln_strbuf want = {0};
    for (int i = 0; i < 40; i++) {
        run[3 * i] = 5, run[3 * i + 1] = 6, run[3 * i + 2] = 7;
        kiln_strbuf_puts(&want, "\xe6\x97\xa5");
    }
    run[120] = 19;
    kiln_strbuf_puts(&want, "hello");
    expect_text(tok, run, 121, false, want.data);                      /* longer than the stream holds */
    kiln_strbuf_free(&want);
    kiln_tokenizer_free(tok);
    return checks_report("test_tokenizer_spm");
}
