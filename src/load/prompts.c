/* prompts.c — random numbers, length distributions and prompt sets of prompts.h. */
#include "load/prompts.h"

#include "core/file.h"
#include "core/status.h"
#include "core/json_read.h"
#include "core/strbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 step: spreads a seed over the generator state. */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void kiln_rng_seed(kiln_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t kiln_rng_next(kiln_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kiln_rng_uniform(kiln_rng *r) { return (double)(kiln_rng_next(r) >> 11) * 0x1.0p-53; }

double kiln_rng_normal(kiln_rng *r) {
    double u = 1.0 - kiln_rng_uniform(r); /* (0, 1]: log is finite */
    double v = kiln_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * 3.14159265358979323846 * v);
}

double kiln_rng_exponential(kiln_rng *r, double mean) { return -mean * log(1.0 - kiln_rng_uniform(r)); }

/* Parses a number in [lo, hi] from text[0..n); false if it is not one. */
static bool parse_num(const char *text, size_t n, double lo, double hi, double *out) {
    char tmp[64];
    if (n == 0 || n >= sizeof tmp) return false;
    memcpy(tmp, text, n);
    tmp[n] = '\0';
    char *end;
    double v = strtod(tmp, &end);
    if (*end || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

kiln_status kiln_len_dist_parse(const char *text, kiln_len_dist *out) {
    static const char *FORMS = "expected N, fixed:N, uniform:LO,HI or normal:MEAN,SD (1 <= N <= 1000000)";
    const double MAX = 1e6;
    const char *colon = strchr(text, ':');
    const char *args = colon ? colon + 1 : text;
    size_t klen = colon ? (size_t)(colon - text) : 0;
    const char *comma = strchr(args, ',');
    size_t alen = comma ? (size_t)(comma - args) : strlen(args);
    kiln_len_dist d = {0};
    bool ok;
    if (!colon || (klen == 5 && !memcmp(text, "fixed", 5))) {
        d.kind = KILN_LEN_FIXED;
        ok = !comma && parse_num(args, alen, 1, MAX, &d.a);
    } else if (klen == 7 && !memcmp(text, "uniform", 7)) {
        d.kind = KILN_LEN_UNIFORM;
        ok = comma && parse_num(args, alen, 1, MAX, &d.a) && parse_num(comma + 1, strlen(comma + 1), 1, MAX, &d.b) &&
             d.a <= d.b;
    } else if (klen == 6 && !memcmp(text, "normal", 6)) {
        d.kind = KILN_LEN_NORMAL;
        ok = comma && parse_num(args, alen, 1, MAX, &d.a) && parse_num(comma + 1, strlen(comma + 1), 0, MAX, &d.b);
    } else {
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "length distribution '%s': unknown kind; %s", text, FORMS);
    }
    if (!ok) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "length distribution '%s': %s", text, FORMS);
    *out = d;
    return KILN_OK;
}

int kiln_len_dist_sample(const kiln_len_dist *d, kiln_rng *r) {
    double v;
    switch (d->kind) {
    case KILN_LEN_UNIFORM: v = d->a + floor(kiln_rng_uniform(r) * (d->b - d->a + 1)); break;
    case KILN_LEN_NORMAL: v = fmin(fmax(round(d->a + d->b * kiln_rng_normal(r)), 1), 4 * d->a + 1); break;
    default: v = d->a; break;
    }
    return v < 1 ? 1 : (int)v;
}

char *kiln_len_dist_str(const kiln_len_dist *d, char *buf, size_t cap) {
    switch (d->kind) {
    case KILN_LEN_UNIFORM: snprintf(buf, cap, "uniform %g..%g", d->a, d->b); break;
    case KILN_LEN_NORMAL: snprintf(buf, cap, "normal mean %g sd %g", d->a, d->b); break;
    default: snprintf(buf, cap, "fixed %g", d->a); break;
    }
    return buf;
}

/* Short, frequent English words: one token each (with the leading space) in GPT-2/Llama vocabularies. */
static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
    "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
    "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each",
    "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
    "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look",
    "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than",
    "first", "water", "been", "call", "who", "its", "now", "find", "long", "down", "day", "did", "get",
    "come", "made", "may", "part", "over", "new", "sound", "take", "only", "little", "work", "know",
    "place", "year", "live", "me", "back", "give", "most", "very", "after", "thing", "our", "just",
    "name", "good", "sentence", "man", "think", "say", "great", "where", "help", "through", "much",
};
#define NWORDS (sizeof WORDS / sizeof WORDS[0])

void kiln_prompts_free(kiln_prompt_set *set) {
    if (!set) return;
    for (int i = 0; i < set->n; i++) {
        free(set->items[i].text);
        free(set->items[i].messages);
    }
    free(set->items);
    set->items = NULL;
    set->n = 0;
}

kiln_status kiln_prompts_synthetic(const kiln_len_dist *input, int count, uint64_t seed, kiln_prompt_set *out) {
    KILN_ASSERT(count >= 1);
    memset(out, 0, sizeof *out);
    out->items = calloc((size_t)count, sizeof *out->items);
    if (!out->items) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for %d prompts", count);
    kiln_rng r;
    kiln_rng_seed(&r, seed ^ 0x70726f6d707473ull);
    for (int i = 0; i < count; i++) {
        int n = kiln_len_dist_sample(input, &r);
        kiln_strbuf b = {0};
        for (int w = 0; w < n; w++) {
            if (w) kiln_strbuf_putc(&b, ' ');
            kiln_strbuf_puts(&b, WORDS[kiln_rng_next(&r) % NWORDS]);
        }
        if (kiln_strbuf_status(&b) != KILN_OK) {
            kiln_strbuf_free(&b);
            kiln_prompts_free(out);
            return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory for synthetic prompts");
        }
        out->items[i].text = b.data;
        out->items[i].input_tokens = n;
        out->n++;
    }
    return KILN_OK;
}

/* Fills p from one parsed JSONL line; `where` names the line in errors. */
static kiln_status prompt_from_json(const kiln_jdoc *doc, const char *where, kiln_prompt *p) {
    const kiln_jnode *root = kiln_jdoc_root(doc);
    if (root->type != KILN_JNODE_OBJECT) return kiln_error(KILN_ERR_PARSE, "%s: expected a JSON object", where);
    const kiln_jnode *text = kiln_jdoc_get(doc, root, "prompt");
    if (!text) text = kiln_jdoc_get(doc, root, "text");
    const kiln_jnode *msgs = kiln_jdoc_get(doc, root, "messages");
    if (text && text->type != KILN_JNODE_STRING) return kiln_error(KILN_ERR_PARSE, "%s: \"prompt\" must be a string", where);
    if (msgs && (msgs->type != KILN_JNODE_ARRAY || msgs->count == 0))
        return kiln_error(KILN_ERR_PARSE, "%s: \"messages\" must be a non-empty array", where);
    if (!text && !msgs) return kiln_error(KILN_ERR_PARSE, "%s: neither \"prompt\" nor \"messages\"", where);
    kiln_strbuf t = {0}, m = {0};
    if (text) {
        kiln_strbuf_append(&t, text->str, text->len);
    } else { /* completions need text: the messages' contents, one per line */
        for (const kiln_jnode *c = kiln_jdoc_first(doc, msgs); c; c = kiln_jdoc_next(doc, c)) {
            const char *content = kiln_jdoc_str(kiln_jdoc_get(doc, c, "content"));
            if (!content) {
                kiln_strbuf_free(&t);
                return kiln_error(KILN_ERR_PARSE, "%s: a message without a string \"content\"", where);
            }
            if (t.len) kiln_strbuf_putc(&t, '\n');
            kiln_strbuf_puts(&t, content);
        }
    }
    kiln_strbuf_putc(&t, '\0'); /* allocate even for an empty prompt; the NUL is not content */
    if (t.len) t.len--;
    if (msgs) kiln_jdoc_write(doc, msgs, &m);
    double mt = kiln_jdoc_get_num(doc, root, "max_tokens", kiln_jdoc_get_num(doc, root, "output_tokens", 0));
    if (mt < 0 || mt > 1e6 || mt != floor(mt)) {
        kiln_strbuf_free(&t);
        kiln_strbuf_free(&m);
        return kiln_error(KILN_ERR_PARSE, "%s: \"max_tokens\" must be an integer in 1..1000000", where);
    }
    if (kiln_strbuf_status(&t) != KILN_OK || kiln_strbuf_status(&m) != KILN_OK) {
        kiln_strbuf_free(&t);
        kiln_strbuf_free(&m);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", where);
    }
    p->text = t.data;
    p->messages = m.data;
    p->input_tokens = (int)(t.len / 4) > 0 ? (int)(t.len / 4) : 1;
    p->max_tokens = (int)mt;
    return KILN_OK;
}

kiln_status kiln_prompts_load_jsonl(const char *path, kiln_prompt_set *out) {
    memset(out, 0, sizeof *out);
    kiln_file_map map;
    KILN_TRY(kiln_file_map_open(path, &map));
    const char *s = (const char *)map.data;
    size_t size = map.size, pos = 0;
    int cap = 0, line = 0;
    kiln_status st = KILN_OK;
    while (pos < size && st == KILN_OK) {
        const char *nl = memchr(s + pos, '\n', size - pos);
        size_t end = nl ? (size_t)(nl - s) : size, start = pos;
        pos = end + 1;
        line++;
        size_t k = start;
        while (k < end && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k == end) continue; /* blank line */
        if (out->n == cap) {
            cap = cap ? cap * 2 : 64;
            kiln_prompt *items = realloc(out->items, (size_t)cap * sizeof *items);
            if (!items) { st = kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", path); break; }
            out->items = items;
        }
        char where[512];
        snprintf(where, sizeof where, "%s:%d", path, line);
        kiln_jdoc doc;
        st = kiln_jdoc_parse(s + start, end - start, where, &doc);
        if (st == KILN_OK) {
            memset(&out->items[out->n], 0, sizeof out->items[out->n]);
            st = prompt_from_json(&doc, where, &out->items[out->n]);
            if (st == KILN_OK) out->n++;
            kiln_jdoc_free(&doc);
        }
    }
    kiln_file_unmap(&map);
    if (st == KILN_OK && out->n == 0) st = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s: no prompts (the file is empty)", path);
    if (st != KILN_OK) kiln_prompts_free(out);
    return st;
}
