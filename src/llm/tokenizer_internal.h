/* tokenizer_internal.h — the loaded form of a BPE tokenizer (byte-level or SentencePiece style),
 * shared by its loader (tokenizer_load.c, tokenizer_parts.c, tokenizer_norm_dec.c), encoder
 * (tokenizer_encode.c, tokenizer_bpe.c) and decoder (tokenizer_decode.c). */
#ifndef KILN_LLM_TOKENIZER_INTERNAL_H
#define KILN_LLM_TOKENIZER_INTERNAL_H

#include "llm/tokenizer.h"

#include "core/json_read.h"
#include "llm/pretokenize.h"
#include "llm/tokenizer_hash.h"

/* Token ids above this are refused at load (they size per-id tables). */
#define KILN_TOK_MAX_ID (1 << 24)
#define KILN_TOK_MAX_STAGES 8
#define KILN_TOK_MAX_TEMPLATE 8

/* A token of added_tokens: matched in the raw text before pre-tokenization. */
typedef struct kiln_tok_added {
    const char *content; /* into kiln_tokenizer.text */
    size_t len;
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} kiln_tok_added;

/* The longest string a Replace / Prepend normalizer or a Metaspace step may name. */
#define KILN_TOK_MAX_AFFIX 16

/* One normalizer step, applied to the whole text between non-normalized added tokens. */
typedef enum kiln_tok_norm_kind {
    KILN_TOK_NORM_NFC,
    KILN_TOK_NORM_PREPEND, /* `to` before a non-empty text */
    KILN_TOK_NORM_REPLACE, /* every `from` by `to` */
} kiln_tok_norm_kind;

typedef struct kiln_tok_norm {
    kiln_tok_norm_kind kind;
    char from[KILN_TOK_MAX_AFFIX + 1], to[KILN_TOK_MAX_AFFIX + 1]; /* NUL-ended */
} kiln_tok_norm;

/* One pre-tokenizer step, applied to every piece in turn. */
typedef enum kiln_tok_stage_kind {
    KILN_TOK_PREFIX_SPACE, /* ByteLevel add_prefix_space: prepend ' ' unless the piece starts with one */
    KILN_TOK_SPLIT,        /* split into the pattern's matches (Split Isolated, ByteLevel use_regex) */
    KILN_TOK_METASPACE,    /* ' ' -> replacement, prepended per prepend_scheme, split before each one */
    KILN_TOK_SPLIT_STRING, /* split at each occurrence of a string (Split {"String": ...}) */
} kiln_tok_stage_kind;

/* What a string Split does with each occurrence (SplitDelimiterBehavior). */
typedef enum kiln_tok_split_behavior {
    KILN_TOK_SPLIT_REMOVED,
    KILN_TOK_SPLIT_ISOLATED,
    KILN_TOK_SPLIT_MERGED_PREV, /* the occurrence ends the piece before it */
    KILN_TOK_SPLIT_MERGED_NEXT, /* the occurrence starts the piece after it */
    KILN_TOK_SPLIT_CONTIGUOUS,  /* adjacent occurrences form one isolated piece */
} kiln_tok_split_behavior;

/* Metaspace's prepend_scheme: when the replacement goes before a piece that does not start with it. */
typedef enum kiln_tok_prepend {
    KILN_TOK_PREPEND_NEVER,
    KILN_TOK_PREPEND_FIRST,  /* only the piece at the start of the text */
    KILN_TOK_PREPEND_ALWAYS,
} kiln_tok_prepend;

typedef struct kiln_tok_stage {
    kiln_tok_stage_kind kind;
    kiln_pretok_pattern pattern; /* KILN_TOK_SPLIT */
    char replacement[KILN_TOK_MAX_AFFIX + 1]; /* KILN_TOK_METASPACE; the string of KILN_TOK_SPLIT_STRING */
    kiln_tok_split_behavior behavior;         /* KILN_TOK_SPLIT_STRING */
    kiln_tok_prepend prepend;                 /* KILN_TOK_METASPACE */
    bool split;                               /* KILN_TOK_METASPACE */
} kiln_tok_stage;

struct kiln_tokenizer {
    int32_t nids;        /* one past the largest id */
    char *text;          /* every token's vocabulary text, then every added token's content */
    size_t text_used;    /* bytes of `text` filled while loading */
    int64_t *tok_off;    /* [nids] the id's text in `text` (the added token's content when it is
                            one, as `tokenizers` names ids), -1 when no token has this id */
    uint32_t *tok_len;   /* [nids] */
    char *dec;           /* every token's decoded bytes (the ByteLevel decoder, or the decoder's
                            Replace, per token) */
    size_t *dec_off;     /* [nids + 1] id i decodes to dec[dec_off[i] .. dec_off[i+1]) */
    uint8_t *special;    /* [nids] 1 for special added tokens */
    int16_t *byte_of;    /* [nids] with the ByteFallback decoder: the byte of a "<0xXX>" token, else -1 */

    kiln_tok_strmap vocab;   /* model vocabulary: text -> id */
    kiln_tok_pairmap merges; /* (left, right) -> rank, merged id */
    bool ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;          /* -1 when the model has no unk_token */
    char byte_char[256][3];  /* ByteLevel: the UTF-8 of the character each byte maps to, NUL-ended */
    int32_t byte_id[256];    /* vocabulary id of byte_char[b], -1 when absent */
    int32_t fallback_id[256]; /* with byte_fallback: id of "<0xXX>", -1 when absent */

    kiln_tok_added *added; /* sorted by first byte, then longest first (empty ones left out) */
    int nadded;
    int added_start[257];  /* the added tokens starting with byte b are [added_start[b], added_start[b+1]) */

    kiln_tok_norm norms[KILN_TOK_MAX_STAGES];
    int nnorms;
    /* Without a ByteLevel pre-tokenizer the model works on characters (SentencePiece style): a word's
     * symbols are its UTF-8 characters, and the decoder is Replace / ByteFallback / Fuse / Strip. */
    bool byte_level;
    char dec_from[KILN_TOK_MAX_AFFIX + 1], dec_to[KILN_TOK_MAX_AFFIX + 1]; /* the decoder's Replace */
    bool dec_byte_fallback; /* ByteFallback: runs of "<0xXX>" tokens decode to their bytes */
    int dec_strip;          /* Strip: at most this many leading ' ' leave the decoded text */

    kiln_tok_stage stages[KILN_TOK_MAX_STAGES];
    int nstages;

    int32_t prefix[KILN_TOK_MAX_TEMPLATE], suffix[KILN_TOK_MAX_TEMPLATE]; /* add_special ids */
    int nprefix, nsuffix;
    bool has_template; /* the post-processor was a TemplateProcessing */
    int32_t bos_id, eos_id;
};

/* ------------------------------------------------------------------------ tokenizer_load.c */
/* Copies s[0..len) into the tokenizer's text (sized for every token at load) and returns its offset. */
size_t kiln_tok_keep_text(kiln_tokenizer *tok, const char *s, size_t len);

/* ------------------------------------------------------------------------ tokenizer_parts.c,
 * tokenizer_norm_dec.c: each reads one part of tokenizer.json (`root`) into tok; `path` names the file
 * in messages. */
kiln_status kiln_tok_read_added(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path);
kiln_status kiln_tok_read_normalizer(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path);
kiln_status kiln_tok_read_pre_tokenizer(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root,
                                        const char *path);
kiln_status kiln_tok_read_decoder(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root, const char *path);
kiln_status kiln_tok_read_post_processor(kiln_tokenizer *tok, const kiln_jdoc *d, const kiln_jnode *root,
                                         const char *path);
/* A boolean member: *out = its value, or dflt when missing or null; KILN_ERR_PARSE when mistyped. */
kiln_status kiln_tok_get_bool(const kiln_jdoc *d, const kiln_jnode *obj, const char *key, bool dflt, bool *out,
                              const char *path);
/* A string member, or NULL when missing or null; KILN_ERR_PARSE when mistyped. */
kiln_status kiln_tok_get_str(const kiln_jdoc *d, const kiln_jnode *obj, const char *key, const char **out,
                             const char *path);
/* Copies the string member `key` of v (`what` names v in messages) into out: KILN_ERR_PARSE when it is
 * missing or empty, KILN_ERR_UNSUPPORTED when longer than KILN_TOK_MAX_AFFIX bytes. */
kiln_status kiln_tok_get_affix(const kiln_jdoc *d, const kiln_jnode *v, const char *key, const char *what, char *out,
                               const char *path);
/* A token id member (an integer in [0, KILN_TOK_MAX_ID)); KILN_ERR_PARSE otherwise. */
kiln_status kiln_tok_id_of(const kiln_jnode *v, const char *what, const char *path, int32_t *out);

/* ------------------------------------------------------------------------ tokenizer_bpe.c */
/* Fills byte_char with GPT-2's bytes-to-unicode table. */
void kiln_tok_init_byte_chars(kiln_tokenizer *tok);
/* The byte that ByteLevel maps to code point cp, or -1. */
int kiln_tok_char_byte(uint32_t cp);

/* Scratch memory of one encode call. */
typedef struct kiln_tok_work {
    kiln_strbuf mapped; /* a word in its byte-level form */
    kiln_strbuf normalized[2]; /* a text between non-normalized added tokens, normalized step by step */
    bool at_start; /* nothing of the text has been encoded yet (Metaspace's prepend_scheme first) */
    kiln_strbuf stage_text[KILN_TOK_MAX_STAGES]; /* a piece with its prefix space, per stage */
    struct kiln_tok_sym *syms;
    struct kiln_tok_heap_ent *heap;
    size_t cap;
    int32_t *ids; /* the output */
    size_t nids, idcap;
    bool oom;
} kiln_tok_work;

void kiln_tok_work_free(kiln_tok_work *w);
/* Appends id to the output (sets oom on failure). */
void kiln_tok_emit(kiln_tok_work *w, int32_t id);
/* Appends the BPE ids of one pre-tokenized word word[0..len) (raw bytes, before the byte mapping). */
void kiln_tok_bpe_word(const kiln_tokenizer *tok, const char *word, size_t len, kiln_tok_work *w);

#endif
