/* test_chat_template.c — kiln's chat templates (kiln_llm.h, src/llm/jinja*.c, chat_template.c):
 *  - every case of tests/data/chat_templates/expected.json (real templates of Llama-3.x, Mistral,
 *    Qwen, Phi-3, Gemma, DeepSeek and kiln-subset.jinja, rendered by transformers) byte for byte,
 *    errors included (raise_exception's message exactly), also with tool definitions and tool calls
 *    (kiln_chat_template_apply_json), and the one-construct snippets of snippets.txt;
 *  - the built-in ChatML template;
 *  - syntax errors and unsupported constructs name line:column; runtime errors are
 *    KILN_ERR_INVALID_ARGUMENT;
 *  - hostile templates: huge loops, deep recursion, big outputs end with a clear error; every
 *    truncation of every fixture template parses or fails cleanly, and renders or fails cleanly.
 * usage: test_chat_template [REPO_DIR] (default: $KILN_SOURCE_DIR, else .) */
#include "check.h"
#include "core/json_read.h"
#include "kiln/kiln_llm.h"
#include "llm/chat_template_internal.h"

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
    const kiln_jnode *cases = kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "cases");
    int ncases = 0, nerrors = 0;
    char last_name[256] = "";
    char *source = NULL;
    for (const kiln_jnode *c = kiln_jdoc_first(&doc, cases); c; c = kiln_jdoc_next(&doc, c)) {
        const char *name = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "template"));
        const char *conv = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "conversation"));
        if (strcmp(name, last_name) != 0) {
            snprintf(path, sizeof path, "%s/tests/data/chat_templates/%s.jinja", root, name);
            source = read_file(path, NULL);
            if (!source) {
                fprintf(stderr, "cannot read %s\n", path);
                failures++;
                continue;
            }
            sources[(*nsources)++] = source;
            snprintf(last_name, sizeof last_name, "%s", name);
        }
        const kiln_jnode *msgs = kiln_jdoc_get(&doc, c, "messages");
        kiln_chat_message m[16];
        int n = 0;
        for (const kiln_jnode *x = kiln_jdoc_first(&doc, msgs); x && n < 16; x = kiln_jdoc_next(&doc, x), n++) {
            m[n].role = kiln_jdoc_str(kiln_jdoc_get(&doc, x, "role"));
            m[n].content = kiln_jdoc_str(kiln_jdoc_get(&doc, x, "content"));
        }
        bool agp = kiln_jdoc_get(&doc, c, "add_generation_prompt")->type == KILN_JNODE_TRUE;
        const char *bos = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "bos_token"));
        const char *eos = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "eos_token"));
        const kiln_jnode *want = kiln_jdoc_get(&doc, c, "output");
        char *got = NULL;
        kiln_status s = render(source, bos, eos, m, n, agp, &got);
        ncases++;
        if (want) {
            CHECKF(s == KILN_OK, "%s / %s / agp=%d: %s", name, conv, agp, kiln_last_error());
            if (s == KILN_OK && (strlen(got) != want->len || memcmp(got, want->str, want->len) != 0)) {
                fprintf(stderr, "%s / %s / agp=%d: output differs\n--- expected\n%s\n--- got\n%s\n---\n", name, conv,
                        agp, want->str, got);
                failures++;
            }
        } else {
            nerrors++;
            const char *msg = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "error"));
            const char *kind = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "kind"));
            CHECKF(s == KILN_ERR_INVALID_ARGUMENT, "%s / %s: expected an error (%s), got %s", name, conv, msg,
                   kiln_status_name(s));
            if (strcmp(kind, "raise") == 0)
                CHECKF(strcmp(kiln_last_error(), msg) == 0, "%s / %s: message '%s', expected '%s'", name, conv,
                       kiln_last_error(), msg);
        }
        free(got);
    }
    /* tool definitions and tool calls, through the JSON entry point */
    int ntool = 0;
    const kiln_jnode *tool_cases = kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "tool_cases");
    for (const kiln_jnode *c = kiln_jdoc_first(&doc, tool_cases); c; c = kiln_jdoc_next(&doc, c), ntool++) {
        const char *name = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "template"));
        const char *conv = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "conversation"));
        snprintf(path, sizeof path, "%s/tests/data/chat_templates/%s.jinja", root, name);
        char *src = read_file(path, NULL);
        kiln_chat_template *t = NULL;
        if (!src || kiln_chat_template_create(src, kiln_jdoc_str(kiln_jdoc_get(&doc, c, "bos_token")),
                                              kiln_jdoc_str(kiln_jdoc_get(&doc, c, "eos_token")), &t) != KILN_OK) {
            CHECKF(false, "%s: %s", name, kiln_last_error());
            free(src);
            continue;
        }
        kiln_strbuf mjson = {0}, tjson = {0};
        const kiln_jnode *tools = kiln_jdoc_get(&doc, c, "tools");
        kiln_jdoc_write(&doc, kiln_jdoc_get(&doc, c, "messages"), &mjson);
        if (tools->type != KILN_JNODE_NULL) kiln_jdoc_write(&doc, tools, &tjson);
        bool agp = kiln_jdoc_get(&doc, c, "add_generation_prompt")->type == KILN_JNODE_TRUE;
        char *got = NULL;
        size_t n;
        kiln_status s = kiln_chat_template_apply_json(t, mjson.data, tjson.data, agp, &FIXED_NOW, &got, &n);
        const kiln_jnode *want = kiln_jdoc_get(&doc, c, "output");
        if (want) {
            CHECKF(s == KILN_OK && n == want->len && memcmp(got, want->str, n) == 0,
                   "%s / %s / agp=%d\n--- expected\n%s\n--- got\n%s\n---", name, conv, agp, want->str,
                   s == KILN_OK ? got : kiln_last_error());
        } else {
            const char *msg = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "error"));
            CHECKF(s == KILN_ERR_INVALID_ARGUMENT, "%s / %s: expected the error '%s', got %s", name, conv, msg,
                   kiln_status_name(s));
            if (strcmp(kiln_jdoc_str(kiln_jdoc_get(&doc, c, "kind")), "raise") == 0)
                CHECKF(strcmp(kiln_last_error(), msg) == 0, "%s / %s: '%s', expected '%s'", name, conv,
                       kiln_last_error(), msg);
        }
        free(got);
        kiln_strbuf_free(&mjson);
        kiln_strbuf_free(&tjson);
        kiln_chat_template_free(t);
        free(src);
    }

    /* the one-construct snippets */
    const kiln_jnode *smsgs = kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "snippet_messages");
    kiln_chat_message sm[4];
    int nsm = 0;
    for (const kiln_jnode *x = kiln_jdoc_first(&doc, smsgs); x && nsm < 4; x = kiln_jdoc_next(&doc, x), nsm++) {
        sm[nsm].role = kiln_jdoc_str(kiln_jdoc_get(&doc, x, "role"));
        sm[nsm].content = kiln_jdoc_str(kiln_jdoc_get(&doc, x, "content"));
    }
    int nsnippets = 0;
    const kiln_jnode *snippets = kiln_jdoc_get(&doc, kiln_jdoc_root(&doc), "snippets");
    for (const kiln_jnode *c = kiln_jdoc_first(&doc, snippets); c; c = kiln_jdoc_next(&doc, c), nsnippets++) {
        const char *source = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "template"));
        const kiln_jnode *want = kiln_jdoc_get(&doc, c, "output");
        char *got = NULL;
        kiln_status s = render(source, "<s>", "</s>", sm, nsm, true, &got);
        if (want) {
            CHECKF(s == KILN_OK && strlen(got) == want->len && memcmp(got, want->str, want->len) == 0,
                   "snippet %s\n--- expected\n%s\n--- got\n%s\n---", source, want->str,
                   s == KILN_OK ? got : kiln_last_error());
        } else {
            const char *msg = kiln_jdoc_str(kiln_jdoc_get(&doc, c, "error"));
            CHECKF(s == KILN_ERR_INVALID_ARGUMENT, "snippet %s: expected the error '%s', got %s", source, msg,
                   s == KILN_OK ? got : kiln_status_name(s));
            if (strcmp(kiln_jdoc_str(kiln_jdoc_get(&doc, c, "kind")), "raise") == 0)
                CHECKF(strcmp(kiln_last_error(), msg) == 0, "snippet %s: '%s', expected '%s'", source,
                       kiln_last_error(), msg);
        }
        free(got);
    }
    kiln_jdoc_free(&doc);
    free(text);
    printf("fixtures: %d cases (%d expected errors), %d with tools, %d snippets\n", ncases, nerrors, ntool,
           nsnippets);
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
    expect_output("[{{ nothing }}][{{ nothing | length }}][{% for x in nothing %}x{% endfor %}][{{ nothing is defined }}]",
                  "[][0][][False]");
    expect_output("{% if messages[0].missing is defined %}y{% else %}n{% endif %}{{ messages[0].missing }}", "n");
}

static void check_limits(void) {
    expect_render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                        "loop iterations");
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
    expect_render_error("{{ ('a' * 1000000) | replace('a', 'b' * 1000) }}", "too large");
    expect_render_error("{{ ('a\n' * 1000000) | indent('b' * 1000) }}", "too large");
    expect_render_error("{{ 9999999999 * 9999999999 }}", "integer overflow");
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
 * fails with a status (run under the sanitizers too). */
static void check_truncations(char **sources, int nsources) {
    kiln_chat_message m[] = {{"system", "sys"}, {"user", "hi"}, {"assistant", "<think>a</think>b"}, {"user", "q"}};
    int parsed = 0, total = 0;
    for (int i = 0; i < nsources; i++) {
        size_t len = strlen(sources[i]);
        char *buf = malloc(len + 1);
        for (size_t cut = 0; cut <= len; cut++) {
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

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : getenv("KILN_SOURCE_DIR") ? getenv("KILN_SOURCE_DIR") : ".";
    char *sources[64];
    int nsources = 0;
    if (check_fixtures(root, sources, &nsources) <= 0) failures++;
    check_chatml();
    check_errors();
    check_limits();
    check_truncations(sources, nsources);
    for (int i = 0; i < nsources; i++) free(sources[i]);
    return checks_report("test_chat_template");
}
