/* jinja_parse.c — the chat-template parser's statements and entry point (jinja.h): tokens -> AST.
 * Statements: if / elif / else, for (targets, `if` filter, else), set (name, tuple, namespace
 * attribute, block), macro, call, filter, with, break / continue, generation; expressions are in
 * jinja_parse_expr.c. Anything else is KILN_ERR_UNSUPPORTED, a malformed template KILN_ERR_PARSE,
 * both at line:column. */
#include "llm/jinja_parser.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static void parse_body(parser *P, nodes *out, const char *const *ends, jtoken **end_at);

static void expect_block_end(parser *P) {
    if (cur(P)->type != JT_BLOCK_END)
        jp_fail(P, KILN_ERR_PARSE, cur(P), "expected '%%}', found %s", jp_desc(cur(P)));
    next(P);
}

/* Parses statements until a block tag whose name is in ends; returns which (its name token). */
static jtoken *body_until(parser *P, jnode ***v, int *n, const char *const *ends) {
    nodes body = {0};
    jtoken *end = NULL;
    parse_body(P, &body, ends, &end);
    *v = body.v;
    *n = body.n;
    return end;
}

static void parse_targets(parser *P, jnode *n) {
    jstr names[16];
    int k = 0;
    do {
        if (k == 16) jp_fail(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 16 loop targets");
        names[k++] = jp_expect_name(P);
    } while (accept_op(P, ","));
    n->targets = jp_alloc(P, (size_t)k * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    n->ntargets = k;
}

static jnode *parse_if(parser *P, jtoken *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = jp_node(P, JN_IF, at);
    n->a = jp_expr(P);
    expect_block_end(P);
    jtoken *end = body_until(P, &n->body, &n->nbody, ends);
    if (jstr_eq(end->text, "elif")) {
        n->orelse = jp_alloc(P, sizeof *n->orelse);
        n->orelse[0] = parse_if(P, end);
        n->norelse = 1;
        return n;
    }
    if (jstr_eq(end->text, "else")) {
        static const char *const endif[] = {"endif", NULL};
        expect_block_end(P);
        body_until(P, &n->orelse, &n->norelse, endif);
    }
    expect_block_end(P);
    return n;
}

static jnode *parse_for(parser *P, jtoken *at) {
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *n = jp_node(P, JN_FOR, at);
    parse_targets(P, n);
    if (!accept_name(P, "in")) jp_fail(P, KILN_ERR_PARSE, cur(P), "expected 'in' in a for loop");
    n->a = jp_expr_noif(P);
    if (accept_name(P, "if")) n->b = jp_expr_noif(P);
    if (is_name(cur(P), "recursive")) jp_fail(P, KILN_ERR_UNSUPPORTED, cur(P), "recursive loops are not supported");
    expect_block_end(P);
    P->loops++;
    jtoken *end = body_until(P, &n->body, &n->nbody, ends);
    P->loops--;
    if (jstr_eq(end->text, "else")) { /* outside the loop: no break there */
        static const char *const endfor[] = {"endfor", NULL};
        expect_block_end(P);
        body_until(P, &n->orelse, &n->norelse, endfor);
    }
    expect_block_end(P);
    return n;
}

static jnode *parse_set(parser *P, jtoken *at) {
    jnode *n = jp_node(P, JN_SET, at);
    jstr first = jp_expect_name(P);
    if (accept_op(P, ".")) { /* {% set ns.attr = value %} */
        n->a = jp_node(P, JN_NAME, at);
        n->a->name = first;
        n->name = jp_expect_name(P);
    } else {
        jstr names[16];
        int k = 0;
        names[k++] = first;
        while (accept_op(P, ",")) {
            if (k == 16) jp_fail(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 16 assignment targets");
            names[k++] = jp_expect_name(P);
        }
        n->targets = jp_alloc(P, (size_t)k * sizeof *n->targets);
        memcpy(n->targets, names, (size_t)k * sizeof *names);
        n->ntargets = k;
    }
    if (cur(P)->type == JT_BLOCK_END && !n->a && n->ntargets == 1) { /* {% set x %}...{% endset %} */
        static const char *const ends[] = {"endset", NULL};
        next(P);
        n->kind = JN_SET_BLOCK;
        body_until(P, &n->body, &n->nbody, ends);
        expect_block_end(P);
        return n;
    }
    jp_expect_op(P, "=");
    n->b = jp_expr(P);
    if (is_op(cur(P), ",")) { /* set a, b = x, y */
        nodes a = {0};
        jp_push(P, &a, n->b, (jstr){0});
        while (accept_op(P, ",")) jp_push(P, &a, jp_expr(P), (jstr){0});
        jnode *tuple = jp_node(P, JN_TUPLE, at);
        tuple->args = a.v;
        tuple->nargs = a.n;
        n->b = tuple;
    }
    expect_block_end(P);
    return n;
}

static void parse_params(parser *P, jnode *n) {
    nodes defaults = {0};
    jstr names[32];
    int k = 0;
    jp_expect_op(P, "(");
    while (!accept_op(P, ")")) {
        if (k) jp_expect_op(P, ",");
        if (k == 32) jp_fail(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 32 macro parameters");
        names[k++] = jp_expect_name(P);
        jp_push(P, &defaults, accept_op(P, "=") ? jp_expr(P) : NULL, (jstr){0});
    }
    n->targets = jp_alloc(P, (size_t)(k ? k : 1) * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    n->ntargets = k;
    n->args = defaults.v;
    n->nargs = defaults.n;
}

static jnode *parse_macro(parser *P, jtoken *at) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = jp_node(P, JN_MACRO, at);
    n->name = jp_expect_name(P);
    parse_params(P, n);
    expect_block_end(P);
    int loops = P->loops; /* a macro's body is outside any loop around its definition */
    P->loops = 0;
    body_until(P, &n->body, &n->nbody, ends);
    P->loops = loops;
    expect_block_end(P);
    return n;
}

static jnode *parse_call_block(parser *P, jtoken *at) {
    static const char *const ends[] = {"endcall", NULL};
    jnode *n = jp_node(P, JN_CALL_BLOCK, at);
    if (is_op(cur(P), "(")) parse_params(P, n); /* {% call(args) macro() %} */
    n->a = jp_expr(P);
    if (n->a->kind != JN_CALL) jp_fail(P, KILN_ERR_PARSE, at, "a call block needs a call expression");
    expect_block_end(P);
    int loops = P->loops; /* the caller's body runs as a macro: outside any loop */
    P->loops = 0;
    body_until(P, &n->body, &n->nbody, ends);
    P->loops = loops;
    expect_block_end(P);
    return n;
}

static jnode *parse_filter_block(parser *P, jtoken *at) {
    static const char *const ends[] = {"endfilter", NULL};
    jnode *n = jp_node(P, JN_FILTER_BLOCK, at);
    n->a = jp_filter(P, NULL);
    while (accept_op(P, "|")) n->a = jp_filter(P, n->a);
    expect_block_end(P);
    body_until(P, &n->body, &n->nbody, ends);
    expect_block_end(P);
    return n;
}

/* {% with a = x, b = y %} ... {% endwith %}: the values are evaluated outside, bound inside. */
static jnode *parse_with(parser *P, jtoken *at) {
    static const char *const ends[] = {"endwith", NULL};
    jnode *n = jp_node(P, JN_WITH, at);
    nodes values = {0};
    jstr names[32];
    int k = 0;
    while (cur(P)->type != JT_BLOCK_END) {
        if (k) jp_expect_op(P, ",");
        if (k == 32) jp_fail(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 32 names in a with statement");
        names[k++] = jp_expect_name(P);
        jp_expect_op(P, "=");
        jp_push(P, &values, jp_expr(P), (jstr){0});
    }
    n->targets = jp_alloc(P, (size_t)(k ? k : 1) * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    n->ntargets = k;
    n->args = values.v;
    n->nargs = values.n;
    expect_block_end(P);
    body_until(P, &n->body, &n->nbody, ends);
    expect_block_end(P);
    return n;
}

static jnode *parse_statement(parser *P) {
    jtoken *at = cur(P);
    jstr kw = jp_expect_name(P);
    if (jstr_eq(kw, "if")) return parse_if(P, at);
    if (jstr_eq(kw, "for")) return parse_for(P, at);
    if (jstr_eq(kw, "set")) return parse_set(P, at);
    if (jstr_eq(kw, "macro")) return parse_macro(P, at);
    if (jstr_eq(kw, "call")) return parse_call_block(P, at);
    if (jstr_eq(kw, "filter")) return parse_filter_block(P, at);
    if (jstr_eq(kw, "with")) return parse_with(P, at);
    if (jstr_eq(kw, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        jnode *n = jp_node(P, JN_GENERATION, at);
        expect_block_end(P);
        body_until(P, &n->body, &n->nbody, ends);
        expect_block_end(P);
        return n;
    }
    if (jstr_eq(kw, "break") || jstr_eq(kw, "continue")) {
        if (P->loops == 0) jp_fail(P, KILN_ERR_PARSE, at, "'%.*s' outside loop", (int)kw.len, kw.p);
        jnode *n = jp_node(P, jstr_eq(kw, "break") ? JN_BREAK : JN_CONTINUE, at);
        expect_block_end(P);
        return n;
    }
    static const char *const known[] = {"extends", "block", "include", "import", "from", "autoescape", "do",
                                        "trans", NULL};
    for (int i = 0; known[i]; i++)
        if (jstr_eq(kw, known[i])) jp_fail(P, KILN_ERR_UNSUPPORTED, at, "{%% %s %%} is not supported", known[i]);
    jp_fail(P, KILN_ERR_PARSE, at, "unknown statement '%.*s'", (int)kw.len > 40 ? 40 : (int)kw.len, kw.p);
}

static void parse_body(parser *P, nodes *out, const char *const *ends, jtoken **end_at) {
    jp_enter(P);
    for (;;) {
        jtoken *t = cur(P);
        if (t->type == JT_EOF) {
            if (ends) {
                const char *want = ends[0];
                for (int i = 0; ends[i]; i++) want = ends[i]; /* the closing tag is listed last */
                jp_fail(P, KILN_ERR_PARSE, t, "missing {%% %s %%}", want);
            }
            break;
        }
        if (t->type == JT_TEXT) {
            jnode *n = jp_node(P, JN_TEXT, t);
            n->lit = jv_str(t->text.p, t->text.len);
            jp_push(P, out, n, (jstr){0});
            next(P);
        } else if (t->type == JT_VAR_BEGIN) {
            next(P);
            jnode *n = jp_node(P, JN_OUTPUT, t);
            n->a = jp_expr(P);
            if (cur(P)->type != JT_VAR_END)
                jp_fail(P, KILN_ERR_PARSE, cur(P), "expected '}}', found %s", jp_desc(cur(P)));
            next(P);
            jp_push(P, out, n, (jstr){0});
        } else if (t->type == JT_BLOCK_BEGIN) {
            next(P);
            jtoken *name = cur(P);
            if (name->type == JT_NAME && ends) {
                for (int i = 0; ends[i]; i++)
                    if (jstr_eq(name->text, ends[i])) {
                        next(P);
                        *end_at = name;
                        P->depth--;
                        return;
                    }
            }
            if (name->type == JT_NAME && (jstr_eq(name->text, "endif") || jstr_eq(name->text, "endfor") ||
                                          jstr_eq(name->text, "else") || jstr_eq(name->text, "elif") ||
                                          jstr_eq(name->text, "endset") || jstr_eq(name->text, "endmacro") ||
                                          jstr_eq(name->text, "endcall") || jstr_eq(name->text, "endfilter") ||
                                          jstr_eq(name->text, "endgeneration") || jstr_eq(name->text, "endwith")))
                jp_fail(P, KILN_ERR_PARSE, name, "unexpected {%% %.*s %%}", (int)name->text.len, name->text.p);
            jp_push(P, out, parse_statement(P), (jstr){0});
        } else {
            jp_fail(P, KILN_ERR_PARSE, t, "unexpected %s", jp_desc(t));
        }
    }
    P->depth--;
}

kiln_status jinja_parse(const char *source, size_t len, jtemplate *t) {
    t->arena.cap = JINJA_MAX_ARENA;
    jtoken *toks;
    int ntoks;
    KILN_TRY(jinja_lex(source, len, &t->arena, &toks, &ntoks));
    /* on the heap: what longjmp returns to must not live in this frame's (indeterminate) locals */
    parser *P = calloc(1, sizeof *P);
    if (!P) {
        free(toks);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    }
    P->t = toks;
    P->n = ntoks;
    P->arena = &t->arena;
    kiln_status s = KILN_OK;
    if (setjmp(P->fail)) {
        s = P->status;
    } else {
        nodes body = {0};
        parse_body(P, &body, NULL, NULL);
        t->body = body.v;
        t->nbody = body.n;
    }
    free(P);
    free(toks);
    return s;
}

void jinja_template_free(jtemplate *t) {
    if (!t) return;
    jarena_free(&t->arena);
    t->body = NULL;
    t->nbody = 0;
}
