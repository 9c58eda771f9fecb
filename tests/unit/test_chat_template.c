/* test_chat_template.c — kiln's chat templates (kiln_llm.h, src/llm/jinja*.c, chat_template.c):
 *  - every case of tests/data/chat_templates/expected.json (real templates of Llama-3.x, Mistral,
 *    Qwen, Phi-3, Gemma, DeepSeek and kiln-subset.jinja, rendered by transformers) byte for byte,
 *    errors included (raise_exception's message exactly), also with tool definitions and tool calls
 *    (kiln_chat_template_apply_json), and the one-construct snippets of snippets.txt;
 *  - the built-in ChatML template;
 *  - syntax errors and unsupported constructs name line:column; runtime errors are
 *    KILN_ERR_INVALID_ARGUMENT;
 *  - one template rendered from four threads at once;
 *  - hostile templates: huge loops, deep recursion, big outputs end with a clear error; every
 *    truncation of every fixture template parses or fails cleanly, and renders or fails cleanly.
 * usage: test_chat_template [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "check.h"
#include "core/json_read.h"
#include "kiln/kiln_llm.h"
#include "llm/chat_template_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct tm FIXED_NOW = {.tm_year = 125, .tm_mon = 2, .tm_mday = 4, .tm_hour = 15, .tm_min = 6,
                                    .tm_sec = 7, .tm_wday = 2, .tm_yday = 62};

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) p[n] = 0;
    if (len) *len = (size_t)n;
    return p;
}

/* Renders source with one conversation; returns the status, *out the text (or NULL). */
static kiln_status render(const char *source, const char *bos, const char *eos, const kiln_chat_message *m, int n,
                          bool agp, char **out) {
    kiln_chat_template *t = NULL;
    *out = NULL;
    kiln_status s = kiln_chat_template_create(source, bos, eos, &t);
    if (s != KILN_OK) return s;
    size_t len;
    s = kiln_chat_template_apply_at(t, m, n, agp, &FIXED_NOW, out, &len);
    kiln_chat_template_free(t);
    return s;
}

/* A conversation of plain {role, content} strings and no tools goes through the public call; any
 * other (tool definitions, tool calls, null contents) through the JSON one. */
static bool plain_conversation(const kiln_jdoc *doc, const kiln_jnode *conv) {
    if (kiln_jdoc_get(doc, conv, "tools")->type != KILN_JNODE_NULL) return false;
    const kiln_jnode *messages = kiln_jdoc_get(doc, conv, "messages");
    for (const kiln_jnode *m = kiln_jdoc_first(doc, messages); m; m = kiln_jdoc_next(doc, m)) {
        if (m->count != 2) return false;
        const kiln_jnode *role = kiln_jdoc_get(doc, m, "role"), *content = kiln_jdoc_get(doc, m, "content");
        if (!role || !content || role->type != KILN_JNODE_STRING || content->type != KILN_JNODE_STRING) return false;
    }
    return true;
}

/* Renders one conversation with t. */
static kiln_status render_conversation(const kiln_jdoc *doc, const kiln_jnode *conv, const kiln_chat_template *t,
                                       bool agp, char **out) {
    size_t len;
    if (plain_conversation(doc, conv)) {
        kiln_chat_message m[32];
        int n = 0;
        for (const kiln_jnode *x = kiln_jdoc_first(doc, kiln_jdoc_get(doc, conv, "messages")); x && n < 32;
             x = kiln_jdoc_next(doc, x), n++) {
            m[n].role = kiln_jdoc_str(kiln_jdoc_get(doc, x, "role"));
            m[n].content = kiln_jdoc_str(kiln_jdoc_get(doc, x, "content"));
        }
        return kiln_chat_template_apply_at(t, m, n, agp, &FIXED_NOW, out, &len);
    }
    kiln_strbuf mjson = {0}, tjson = {0};
    const kiln_jnode *tools = kiln_jdoc_get(doc, conv, "tools");
    kiln_jdoc_write(doc, kiln_jdoc_get(doc, conv, "messages"), &mjson);
    if (tools->type != KILN_JNODE_NULL) kiln_jdoc_write(doc, tools, &tjson);
    kiln_status s = kiln_chat_template_apply_json(t, mjson.data, tjson.data, agp, &FIXED_NOW, out, &len);
    kiln_strbuf_free(&mjson);
    kiln_strbuf_free(&tjson);
    return s;
}

/* Checks a render against a case's "output", or its "error" (the message exactly for raise_exception). */
static void check_case(const kiln_jdoc *doc, const kiln_jnode *c, kiln_status s, const char *got, const char *what) {
    const kiln_jnode *want = kiln_jdoc_get(doc, c, "output");
    if (want) {
        CHECKF(s == KILN_OK && strlen(got) == want->len && memcmp(got, want->str, want->len) == 0,
               "%s\n--- expected\n%s\n--- got\n%s\n---", what, want->str, s == KILN_OK ? got : kiln_last_error());
        return;
    }
    const char *msg = kiln_jdoc_str(kiln_jdoc_get(doc, c, "error"));
    const char *kind = kiln_jdoc_str(kiln_jdoc_get(doc, c, "kind"));
    if (strcmp(kind, "syntax") == 0) { /* Jinja refuses to compile it: so must kiln_chat_template_create */
        CHECKF(s == KILN_ERR_PARSE || s == KILN_ERR_UNSUPPORTED, "%s: expected the syntax error '%s', got %s", what,
               msg, s == KILN_OK ? got : kiln_status_name(s));
        return;
    }
    CHECKF(s == KILN_ERR_INVALID_ARGUMENT, "%s: expected the error '%s', got %s", what, msg,
           s == KILN_OK ? got : kiln_status_name(s));
    if (s != KILN_OK && strcmp(kind, "raise") == 0)
        CHECKF(strcmp(kiln_last_error(), msg) == 0, "%s: '%s', expected '%s'", what, kiln_last_error(), msg);
}

/* Every case and snippet of expected.json; the template texts read are kept in sources. */
static int check_fixtures(const char *root, char **sources, int *nsources) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/chat_templates/expected.json", root);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    kiln_jdoc doc = {0};
    REQUIRE_OK(kiln_jdoc_parse(text, len, path, &doc));
    const kiln_jnode *root_node = kiln_jdoc_root(&doc);
    const kiln_jnode *templates = kiln_jdoc_get(&doc, root_node, "templates");
    const kiln_jnode *conversations = kiln_jdoc_get(&doc, root_node, "conversations");
    int ncases = 0, nerrors = 0, njson = 0;
    for (const kiln_jnode *tn = kiln_jdoc_first(&doc, templates); tn; tn = kiln_jdoc_next(&doc, tn)) {
        snprintf(path, sizeof path, "%s/tests/data/chat_templates/%s.jinja", root, tn->key);
        char *source = read_file(path, NULL);
        if (!source) {
            CHECKF(false, "cannot read %s", path);
            continue;
        }
        sources[(*nsources)++] = source;
        kiln_chat_template *t = NULL;
        CHECK_OK(kiln_chat_template_create(source, kiln_jdoc_str(kiln_jdoc_get(&doc, tn, "bos_token")),
                                           kiln_jdoc_str(kiln_jdoc_get(&doc, tn, "eos_token")), &t));
        if (!t) continue;
        for (const kiln_jnode *c = kiln_jdoc_first(&doc, kiln_jdoc_get(&doc, root_node, "cases")); c;
             c = kiln_jdoc_next(&doc, c)) {
            if (strcmp(kiln_jdoc_str(kiln_jdoc_get(&doc, c, "template")), tn->key) != 0) continue;
            const char *conv_name = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "conversation"));
            const kiln_jnode *conv = kiln_jdoc_get(&doc, conversations, conv_name);
            bool agp = kiln_jdoc_get(&doc, c, "add_generation_prompt")->type == KILN_JNODE_TRUE;
            char *got = NULL, what[512];
            kiln_status s = render_conversation(&doc, conv, t, agp, &got);
            snprintf(what, sizeof what, "%s / %s / add_generation_prompt=%d", tn->key, conv_name, agp);
            check_case(&doc, c, s, got, what);
            free(got);
            ncases++;
            nerrors += kiln_jdoc_get(&doc, c, "error") != NULL;
            njson += !plain_conversation(&doc, conv);
        }
        kiln_chat_template_free(t);
    }
    /* the one-construct snippets */
    const kiln_jnode *smsgs = kiln_jdoc_get(&doc, root_node, "snippet_messages");
    kiln_chat_message sm[4];
    int nsm = 0;
    for (const kiln_jnode *x = kiln_jdoc_first(&doc, smsgs); x && nsm < 4; x = kiln_jdoc_next(&doc, x), nsm++) {
        sm[nsm].role = kiln_jdoc_str(kiln_jdoc_get(&doc, x, "role"));
        sm[nsm].content = kiln_jdoc_str(kiln_jdoc_get(&doc, x, "content"));
    }
    int nsnippets = 0;
    for (const kiln_jnode *c = kiln_jdoc_first(&doc, kiln_jdoc_get(&doc, root_node, "snippets")); c;
         c = kiln_jdoc_next(&doc, c), nsnippets++) {
        const char *source = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "template"));
        char *got = NULL, what[256];
        kiln_status s = render(source, "<s>", "</s>", sm, nsm, true, &got);
        snprintf(what, sizeof what, "snippet %.200s", source);
        check_case(&doc, c, s, got, what);
        free(got);
    }
    kiln_jdoc_free(&doc);
    free(text);
    printf("fixtures: %d renders of %d templates (%d expected errors, %d through the JSON call), %d snippets\n",
           ncases, *nsources, nerrors, njson, nsnippets);
    return ncases;
}

static void check_chatml(void) {
    kiln_chat_template *t;
    REQUIRE_OK(kiln_chat_template_chatml(&t));
    kiln_chat_message m[] = {{"system", "S"}, {"user", "héllo"}};
    char *text;
    size_t len;
    CHECK_OK(kiln_chat_template_apply(t, m, 2, true, &text, &len));
    const char *want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n";
    CHECKF(strcmp(text, want) == 0 && len == strlen(want), "chatml: %s", text);
    free(text);
    CHECK_OK(kiln_chat_template_apply(t, m, 0, false, &text, &len));
    CHECK(len == 0 && text && text[0] == 0);
    free(text);
    kiln_chat_template_free(t);
    kiln_chat_template_free(NULL);
}

/* source must fail to parse with status s and a message containing `where` (line:col). */
static void expect_parse_error(const char *source, kiln_status s, const char *where) {
    kiln_chat_template *t = NULL;
    kiln_status got = kiln_chat_template_create(source, "", "", &t);
    CHECKF(got == s && strstr(kiln_last_error(), where), "'%s': %s: %s (expected %s at %s)", source,
           kiln_status_name(got), kiln_last_error(), kiln_status_name(s), where);
    CHECK(t == NULL);
    kiln_chat_template_free(t);
}

/* source must parse and fail to render with a message containing msg. */
static void expect_render_error(const char *source, const char *msg) {
    kiln_chat_message m[] = {{"user", "hi"}, {"user", "again"}};
    char *out;
    kiln_status s = render(source, "<s>", "</s>", m, 2, false, &out);
    CHECKF(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), msg), "'%.60s': %s: %s (expected '%s')",
           source, kiln_status_name(s), kiln_last_error(), msg);
    free(out);
}

static void expect_output(const char *source, const char *want) {
    kiln_chat_message m[] = {{"user", "hi"}, {"assistant", "yo"}};
    char *out;
    kiln_status s = render(source, "<s>", "</s>", m, 2, true, &out);
    CHECKF(s == KILN_OK && strcmp(out, want) == 0, "'%s': got '%s' (%s), expected '%s'", source, out ? out : "",
           kiln_last_error(), want);
    free(out);
}

static void check_errors(void) {
    expect_parse_error("hello {{ x ", KILN_ERR_PARSE, "unclosed {{ tag (at line 1:12)");
    expect_parse_error("a\n  {% if x %}b", KILN_ERR_PARSE, "missing {% endif %}");
    expect_parse_error("{% for x in y %}\n{% endif %}", KILN_ERR_PARSE, "line 2:4");
    expect_parse_error("{{ 'abc }}", KILN_ERR_PARSE, "line 1:4");
    expect_parse_error("{{ 1 + }}", KILN_ERR_PARSE, "line 1:8");
    expect_parse_error("{{ x | nosuchfilter }}", KILN_ERR_UNSUPPORTED, "line 1:8");
    expect_parse_error("{{ x is nosuchtest }}", KILN_ERR_UNSUPPORTED, "line 1:9");
    expect_parse_error("line\n{% extends 'base.html' %}", KILN_ERR_UNSUPPORTED, "line 2:4");
    expect_parse_error("{% include 'x' %}", KILN_ERR_UNSUPPORTED, "line 1:4");
    expect_parse_error("{% raw %}{{ x }}{% endraw %}", KILN_ERR_UNSUPPORTED, "line 1:1");
    expect_parse_error("{% for x in y recursive %}{% endfor %}", KILN_ERR_UNSUPPORTED, "line 1:15");
    expect_parse_error("{% frobnicate %}", KILN_ERR_PARSE, "unknown statement");
    expect_parse_error("{# never closed", KILN_ERR_PARSE, "unclosed comment");
    expect_render_error("{{ raise_exception('No ' ~ messages[0].role ~ ' here!') }}", "No user here!");
    expect_render_error("{{ messages[5]['role'] }}", "list object has no element 5");
    expect_render_error("{{ nothing.attr }}", "'nothing' is undefined");
    expect_render_error("{{ nothing() }}", "'nothing' is undefined");
    expect_render_error("{{ 'a' + 1 }}", "unsupported operand");
    expect_render_error("{{ 1 // 0 }}", "by zero");
    expect_render_error("{{ nothing | tojson }}", "not JSON serializable");
    expect_render_error("{{ 'x'.nomethod() }}", "no method 'nomethod'");
    expect_render_error("{% set x = 1 %}{% set x.y = 2 %}", "non-namespace");
    /* what Jinja allows on Undefined */
    expect_output("[{{ nothing }}][{{ nothing | length }}][{% for x in nothing %}x{% endfor %}]"
                  "[{{ nothing is defined }}]",
                  "[][0][][False]");
    expect_output("{% if messages[0].missing is defined %}y{% else %}n{% endif %}{{ messages[0].missing }}", "n");
}

/* The work budget grows with the messages: a template that scans a long message several times fits,
 * the same template over a short message with a loop of the same work does not. */
static void check_budget_grows_with_input(void) {
    size_t n = 1 << 20;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = 0;
    kiln_chat_message m[] = {{"user", big}};
    const char *scan = "{% for i in range(8) %}{{ messages[0].content.count('y') }}{% endfor %}";
    char *out;
    kiln_status s = render(scan, "", "", m, 1, false, &out);
    CHECKF(s == KILN_OK && out && strcmp(out, "00000000") == 0, "8 scans of a 1 MiB message: %s", kiln_last_error());
    free(out);
    big[1000] = 0; /* the same scans over a 1000-byte message are 8 kB of work; 8 MB of it is too much */
    s = render("{% for i in range(8000) %}{{ messages[0].content.count('y') }}{% endfor %}", "", "", m, 1, false, &out);
    CHECKF(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "steps"), "8000 scans of 1000 bytes: %s",
           kiln_last_error());
    free(out);
    free(big);
}

static void check_limits(void) {
    expect_render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                        "steps (the limit: 250000 plus 64 per byte of the messages and tools)");
    expect_render_error("{{ range(1000000000) }}", "range too big");
    expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recurses deeper");
    expect_render_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                        "");
    expect_render_error("{% for i in range(100000) %}{% for j in range(9) %}{{ 'x' * 100 }}{% endfor %}{% endfor %}",
                        "");
    expect_render_error("{{ 'x' * 1000000000000 }}", "too long");
    expect_render_error("{% set r = range(100000) %}{% for i in r %}{{ 99999 in r }}{% endfor %}", "steps");
    expect_render_error("{% set big = 'x' * 1000000 %}{{ ([big] * 100000) | tojson }}", "exceeds");
    expect_render_error("{% set big = 'x' * 1000000 %}{{ [big] * 100000 }}", "exceeds");
    expect_render_error("{{ ('a' * 20000) | replace('a', 'b' * 1000) }}", "too large");
    expect_render_error("{{ ('a\n' * 20000) | indent('b' * 1000) }}", "too large");
    expect_render_error("{{ 9999999999 * 9999999999 }}", "integer overflow");
    check_budget_grows_with_input();
    /* substring searches (memmem: linear time; one position at a time, each of these took ~10^8 byte
     * comparisons) */
    expect_output("{% set hay = 'a' * 20000 %}{% set pin = 'a' * 10000 ~ 'b' %}"
                  "{{ pin in hay }} {{ hay.find(pin) }} {{ hay.count(pin) }} {{ hay.split(pin) | length }}"
                  " {{ hay.replace(pin, 'x') | length }} {{ (hay ~ 'b').find(pin) }}",
                  "False -1 0 1 20000 10000");
    /* deep nesting is a parse error, not a stack overflow */
    char deep[8192];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 2000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 2000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    expect_parse_error(deep, KILN_ERR_PARSE, "nests deeper");
}

/* Every prefix of every fixture template parses or fails with a status, and what parses renders or
 * fails with a status (run under the sanitizers too). Templates beyond 8 KB (gpt-oss, functionary
 * v3.2) are cut at every 5th byte, to keep the quadratic cost of re-lexing every prefix in check. */
static void check_truncations(char **sources, int nsources) {
    kiln_chat_message m[] = {{"system", "sys"}, {"user", "hi"}, {"assistant", "<think>a</think>b"}, {"user", "q"}};
    int parsed = 0, total = 0;
    for (int i = 0; i < nsources; i++) {
        size_t len = strlen(sources[i]);
        char *buf = malloc(len + 1);
        size_t step = len > 8192 ? 5 : 1;
        for (size_t cut = 0; cut <= len; cut += (cut + step > len && cut < len) ? len - cut : step) {
            memcpy(buf, sources[i], cut);
            buf[cut] = 0;
            kiln_chat_template *t = NULL;
            kiln_status s = kiln_chat_template_create(buf, "<s>", "</s>", &t);
            total++;
            CHECKF(s == KILN_OK || s == KILN_ERR_PARSE || s == KILN_ERR_UNSUPPORTED, "cut %zu: %s", cut,
                   kiln_status_name(s));
            if (s != KILN_OK) {
                CHECK(kiln_last_error()[0] != 0);
                continue;
            }
            parsed++;
            char *out = NULL;
            size_t n;
            s = kiln_chat_template_apply_at(t, m, 4, cut % 2 == 0, &FIXED_NOW, &out, &n);
            CHECKF(s == KILN_OK || s == KILN_ERR_INVALID_ARGUMENT, "cut %zu render: %s", cut, kiln_status_name(s));
            CHECK(s != KILN_OK || (out && strlen(out) == n));
            free(out);
            kiln_chat_template_free(t);
        }
        free(buf);
    }
    printf("truncations: %d prefixes, %d parsed\n", total, parsed);
}

/* One parsed template rendered by several threads at once gives every thread the same text. */
typedef struct render_job {
    const kiln_chat_template *t;
    const char *want;
    int mismatches;
} render_job;

static void *render_many(void *arg) {
    render_job *job = arg;
    kiln_chat_message m[] = {{"system", "S"}, {"user", "question"}, {"assistant", "answer"}, {"user", "again"}};
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        size_t len;
        if (kiln_chat_template_apply_at(job->t, m, 4, true, &FIXED_NOW, &out, &len) != KILN_OK ||
            strcmp(out, job->want) != 0)
            job->mismatches++;
        free(out);
    }
    return NULL;
}

static void check_threads(const char *root) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/chat_templates/llama-3.1-instruct.jinja", root);
    char *source = read_file(path, NULL);
    kiln_chat_template *t = NULL;
    if (!source || kiln_chat_template_create(source, "<|begin_of_text|>", "<|eot_id|>", &t) != KILN_OK) {
        CHECKF(false, "llama-3.1-instruct: %s", kiln_last_error());
        free(source);
        return;
    }
    kiln_chat_message m[] = {{"system", "S"}, {"user", "question"}, {"assistant", "answer"}, {"user", "again"}};
    char *want = NULL;
    size_t len;
    REQUIRE_OK(kiln_chat_template_apply_at(t, m, 4, true, &FIXED_NOW, &want, &len));
    render_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){t, want, 0};
        CHECK(pthread_create(&th[i], NULL, render_many, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(jobs[i].mismatches == 0, "thread %d: %d renders differ", i, jobs[i].mismatches);
    }
    free(want);
    kiln_chat_template_free(t);
    free(source);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char *sources[128];
    int nsources = 0;
    if (check_fixtures(root, sources, &nsources) <= 0) failures++;
    check_chatml();
    check_errors();
    check_limits();
    check_threads(root);
    check_truncations(sources, nsources);
    for (int i = 0; i < nsources; i++) free(sources[i]);
    return checks_report("test_chat_template");
}
