/* jinja_parse.c — the chat-template parser (jinja.h): tokens -> AST by recursive descent with Jinja's
 * precedence (conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary < postfix
 * (. [] ()) and filters / tests). Statements: if/elif/else, for (targets, `if` filter, else), set
 * (name, tuple, namespace attribute, block), macro, call, filter, break/continue, generation.
 * Anything else is KILN_ERR_UNSUPPORTED, a malformed template KILN_ERR_PARSE, both at line:column. */
#include "llm/jinja.h"

#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct parser {
    jtoken *t;
    int n, pos, depth;
    jarena *arena;
    jmp_buf fail;
    kiln_status status;
} parser;

static _Noreturn void perr(parser *P, kiln_status s, const jtoken *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void perr(parser *P, kiln_status s, const jtoken *at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->status = kiln_error(s, "chat template: %s (at line %d:%d)", msg, at->line, at->col);
    longjmp(P->fail, 1);
}

static void *palloc(parser *P, size_t n) {
    void *p = jarena_alloc(P->arena, n);
    if (!p) {
        P->status = kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
        longjmp(P->fail, 1);
    }
    return p;
}

static jtoken *cur(parser *P) { return &P->t[P->pos]; }
static jtoken *next(parser *P) { return &P->t[P->pos < P->n - 1 ? P->pos++ : P->pos]; }
static bool is_op(const jtoken *t, const char *op) { return t->type == JT_OP && jstr_eq(t->text, op); }
static bool is_name(const jtoken *t, const char *name) { return t->type == JT_NAME && jstr_eq(t->text, name); }

static bool accept_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) return false;
    next(P);
    return true;
}
static bool accept_name(parser *P, const char *name) {
    if (!is_name(cur(P), name)) return false;
    next(P);
    return true;
}

static const char *tok_desc(const jtoken *t) {
    switch (t->type) {
    case JT_EOF: return "the end of the template";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_END: return "'%}'";
    default: return "this";
    }
}

static void expect_op(parser *P, const char *op) {
    if (!accept_op(P, op)) perr(P, KILN_ERR_PARSE, cur(P), "expected '%s', found %s", op, tok_desc(cur(P)));
}

static jstr expect_name(parser *P) {
    if (cur(P)->type != JT_NAME) perr(P, KILN_ERR_PARSE, cur(P), "expected a name, found %s", tok_desc(cur(P)));
    return next(P)->text;
}

static jnode *node(parser *P, jkind kind, const jtoken *at) {
    jnode *n = palloc(P, sizeof *n);
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable array of node pointers, copied into the arena when done. */
typedef struct nodes {
    jnode **v;
    jstr *kw;
    int n, cap;
} nodes;

static void nodes_push(parser *P, nodes *a, jnode *x, jstr kw) {
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 4;
        jnode **v = palloc(P, (size_t)cap * sizeof *v);
        jstr *k = palloc(P, (size_t)cap * sizeof *k);
        if (a->n) {
            memcpy(v, a->v, (size_t)a->n * sizeof *v);
            memcpy(k, a->kw, (size_t)a->n * sizeof *k);
        }
        a->v = v;
        a->kw = k;
        a->cap = cap;
    }
    a->kw[a->n] = kw;
    a->v[a->n++] = x;
}

static void enter(parser *P) {
    if (++P->depth > JINJA_MAX_PARSE_DEPTH)
        perr(P, KILN_ERR_PARSE, cur(P), "the template nests deeper than %d levels", JINJA_MAX_PARSE_DEPTH);
}

static jnode *parse_expr(parser *P);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

/* ( args ) with keyword arguments `name=value`. */
static void parse_call_args(parser *P, jnode *n) {
    nodes a = {0};
    expect_op(P, "(");
    while (!accept_op(P, ")")) {
        if (a.n) expect_op(P, ",");
        if (accept_op(P, ")")) break;
        jstr kw = {0};
        if (cur(P)->type == JT_NAME && is_op(&P->t[P->pos + 1], "=")) {
            kw = next(P)->text;
            next(P);
        } else if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            perr(P, KILN_ERR_UNSUPPORTED, cur(P), "*args / **kwargs in calls are not supported");
        }
        nodes_push(P, &a, parse_expr(P), kw);
    }
    n->args = a.v;
    n->kw = a.kw;
    n->nargs = a.n;
}

static jnode *parse_filter(parser *P, jnode *operand) {
    jtoken *at = cur(P);
    jnode *f = node(P, JN_FILTER, at);
    f->a = operand;
    f->name = expect_name(P);
    while (accept_op(P, ".")) { /* dotted filter names do not exist in chat templates */
        perr(P, KILN_ERR_UNSUPPORTED, at, "dotted filter names are not supported");
    }
    if (!jinja_has_filter(f->name))
        perr(P, KILN_ERR_UNSUPPORTED, at, "unknown filter '%.*s'", (int)f->name.len, f->name.p);
    if (is_op(cur(P), "(")) parse_call_args(P, f);
    return f;
}

static jnode *parse_test(parser *P, jnode *operand) {
    jtoken *at = cur(P);
    jnode *t = node(P, JN_TEST, at);
    t->a = operand;
    t->negate = accept_name(P, "not");
    jtoken *name_tok = cur(P);
    t->name = expect_name(P);
    if (!jinja_has_test(t->name))
        perr(P, KILN_ERR_UNSUPPORTED, name_tok, "unknown test '%.*s'", (int)t->name.len, t->name.p);
    jtoken *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT || c->type == JT_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and") && !is_name(c, "if") &&
               !is_name(c, "is")) {
        nodes a = {0};
        nodes_push(P, &a, parse_postfix(P, parse_primary(P)), (jstr){0});
        t->args = a.v;
        t->kw = a.kw;
        t->nargs = 1;
    }
    return t;
}

static jnode *parse_filters_and_tests(parser *P, jnode *n) {
    for (;;) {
        if (accept_op(P, "|")) n = parse_filter(P, n);
        else if (accept_name(P, "is")) n = parse_test(P, n);
        else return n;
    }
}

static jnode *parse_subscript(parser *P, jnode *obj, const jtoken *at) {
    jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (is_op(cur(P), ":")) {
            next(P);
            slice = true;
            if (++k > 2) perr(P, KILN_ERR_PARSE, cur(P), "too many ':' in a slice");
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[k]) perr(P, KILN_ERR_PARSE, cur(P), "expected ':' or ']'");
        parts[k] = parse_expr(P);
    }
    expect_op(P, "]");
    if (!slice) {
        if (!parts[0]) perr(P, KILN_ERR_PARSE, at, "empty subscript");
        jnode *n = node(P, JN_ITEM, at);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = node(P, JN_SLICE, at);
    n->a = obj;
    n->args = palloc(P, 3 * sizeof *n->args);
    memcpy(n->args, parts, sizeof parts);
    n->nargs = 3;
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        jtoken *at = cur(P);
        if (accept_op(P, ".")) {
            jnode *a = node(P, JN_ATTR, at);
            a->a = n;
            if (cur(P)->type == JT_INT) { /* x.0 is x[0] */
                a->kind = JN_ITEM;
                a->b = node(P, JN_LIT, cur(P));
                a->b->lit = jv_int(next(P)->i);
            } else {
                a->name = expect_name(P);
            }
            n = a;
        } else if (accept_op(P, "[")) {
            n = parse_subscript(P, n, at);
        } else if (is_op(at, "(")) {
            jnode *call = node(P, JN_CALL, at);
            call->a = n;
            parse_call_args(P, call);
            n = call;
        } else {
            return n;
        }
    }
}

static jnode *parse_sequence(parser *P, jkind kind, const char *close, const jtoken *at) {
    jnode *n = node(P, kind, at);
    nodes a = {0};
    while (!accept_op(P, close)) {
        if (a.n) {
            expect_op(P, ",");
            if (accept_op(P, close)) break;
        }
        jnode *k = parse_expr(P);
        nodes_push(P, &a, k, (jstr){0});
        if (kind == JN_DICT) {
            expect_op(P, ":");
            nodes_push(P, &a, parse_expr(P), (jstr){0});
        }
    }
    n->args = a.v;
    n->nargs = a.n;
    return n;
}

static jnode *parse_primary(parser *P) {
    enter(P);
    jtoken *t = cur(P);
    jnode *n;
    switch (t->type) {
    case JT_NAME:
        next(P);
        n = node(P, JN_LIT, t);
        if (jstr_eq(t->text, "true") || jstr_eq(t->text, "True")) n->lit = jv_bool(true);
        else if (jstr_eq(t->text, "false") || jstr_eq(t->text, "False")) n->lit = jv_bool(false);
        else if (jstr_eq(t->text, "none") || jstr_eq(t->text, "None")) n->lit = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = t->text;
        }
        break;
    case JT_STRING: {
        next(P);
        n = node(P, JN_LIT, t);
        jstr s = t->text;
        while (cur(P)->type == JT_STRING) { /* adjacent literals concatenate */
            jstr more = next(P)->text;
            char *p = palloc(P, s.len + more.len + 1);
            memcpy(p, s.p, s.len);
            memcpy(p + s.len, more.p, more.len);
            s = (jstr){s.len + more.len, p};
        }
        n->lit = jv_str(s.p, s.len);
        break;
    }
    case JT_INT: next(P); n = node(P, JN_LIT, t); n->lit = jv_int(t->i); break;
    case JT_FLOAT: next(P); n = node(P, JN_LIT, t); n->lit = jv_float(t->f); break;
    default:
        if (accept_op(P, "(")) {
            if (accept_op(P, ")")) {
                n = node(P, JN_TUPLE, t);
                break;
            }
            n = parse_expr(P);
            if (is_op(cur(P), ",")) {
                nodes a = {0};
                nodes_push(P, &a, n, (jstr){0});
                while (accept_op(P, ",") && !is_op(cur(P), ")")) nodes_push(P, &a, parse_expr(P), (jstr){0});
                n = node(P, JN_TUPLE, t);
                n->args = a.v;
                n->nargs = a.n;
            }
            expect_op(P, ")");
        } else if (accept_op(P, "[")) {
            n = parse_sequence(P, JN_LIST, "]", t);
        } else if (accept_op(P, "{")) {
            n = parse_sequence(P, JN_DICT, "}", t);
        } else {
            perr(P, KILN_ERR_PARSE, t, "expected an expression, found %s", tok_desc(t));
        }
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    enter(P);
    jtoken *t = cur(P);
    jnode *n;
    if (accept_op(P, "-") || accept_op(P, "+")) {
        n = node(P, is_op(t, "-") ? JN_NEG : JN_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filters_and_tests(P, n);
    P->depth--;
    return n;
}

static jnode *binary(parser *P, jop op, jnode *a, jnode *b, const jtoken *at) {
    jnode *n = node(P, JN_BINARY, at);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, true);
    jtoken *at;
    while (at = cur(P), accept_op(P, "**")) n = binary(P, JOP_POW, n, parse_unary(P, true), at);
    return n;
}

static jnode *parse_math2(parser *P) {
    jnode *n = parse_pow(P);
    for (;;) {
        jtoken *at = cur(P);
        jop op;
        if (accept_op(P, "*")) op = JOP_MUL;
        else if (accept_op(P, "/")) op = JOP_DIV;
        else if (accept_op(P, "//")) op = JOP_FLOORDIV;
        else if (accept_op(P, "%")) op = JOP_MOD;
        else return n;
        n = binary(P, op, n, parse_pow(P), at);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *n = parse_math2(P);
    jtoken *at;
    while (at = cur(P), accept_op(P, "~")) n = binary(P, JOP_CONCAT, n, parse_math2(P), at);
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *n = parse_concat(P);
    for (;;) {
        jtoken *at = cur(P);
        if (accept_op(P, "+")) n = binary(P, JOP_ADD, n, parse_concat(P), at);
        else if (accept_op(P, "-")) n = binary(P, JOP_SUB, n, parse_concat(P), at);
        else return n;
    }
}

static jnode *parse_compare(parser *P) {
    jnode *first = parse_math1(P), *result = NULL, *left = first;
    for (;;) {
        jtoken *at = cur(P);
        jop op;
        if (accept_op(P, "==")) op = JOP_EQ;
        else if (accept_op(P, "!=")) op = JOP_NE;
        else if (accept_op(P, "<")) op = JOP_LT;
        else if (accept_op(P, "<=")) op = JOP_LE;
        else if (accept_op(P, ">")) op = JOP_GT;
        else if (accept_op(P, ">=")) op = JOP_GE;
        else if (accept_name(P, "in")) op = JOP_IN;
        else if (is_name(at, "not") && is_name(&P->t[P->pos + 1], "in")) {
            next(P);
            next(P);
            op = JOP_NOT_IN;
        } else {
            return result ? result : first;
        }
        jnode *right = parse_math1(P), *cmp = binary(P, op, left, right, at);
        if (result) { /* a < b < c is a < b and b < c */
            jnode *both = node(P, JN_AND, at);
            both->a = result;
            both->b = cmp;
            result = both;
        } else {
            result = cmp;
        }
        left = right;
    }
}

static jnode *parse_not(parser *P) {
    jtoken *at = cur(P);
    if (accept_name(P, "not")) {
        enter(P);
        jnode *n = node(P, JN_NOT, at);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *n = parse_not(P);
    jtoken *at;
    while (at = cur(P), accept_name(P, "and")) {
        jnode *x = node(P, JN_AND, at);
        x->a = n;
        x->b = parse_not(P);
        n = x;
    }
    return n;
}

static jnode *parse_or(parser *P) {
    jnode *n = parse_and(P);
    jtoken *at;
    while (at = cur(P), accept_name(P, "or")) {
        jnode *x = node(P, JN_OR, at);
        x->a = n;
        x->b = parse_and(P);
        n = x;
    }
    return n;
}

/* The conditional expression without its own `if` (used by `for ... if cond`). */
static jnode *parse_expr_noif(parser *P) { return parse_or(P); }

static jnode *parse_expr(parser *P) {
    enter(P);
    jnode *n = parse_or(P);
    jtoken *at;
    while (at = cur(P), accept_name(P, "if")) {
        jnode *c = node(P, JN_COND, at);
        c->a = n;
        c->b = parse_or(P);
        if (accept_name(P, "else")) c->c = parse_expr(P);
        n = c;
    }
    P->depth--;
    return n;
}

/* ---------------------------------------------------------------- statements */

static void parse_body(parser *P, nodes *out, const char *const *ends, jtoken **end_at);

static void expect_block_end(parser *P) {
    if (cur(P)->type != JT_BLOCK_END)
        perr(P, KILN_ERR_PARSE, cur(P), "expected '%%}', found %s", tok_desc(cur(P)));
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
        if (k == 16) perr(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 16 loop targets");
        names[k++] = expect_name(P);
    } while (accept_op(P, ","));
    n->targets = palloc(P, (size_t)k * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    n->ntargets = k;
}

static jnode *parse_if(parser *P, jtoken *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = node(P, JN_IF, at);
    n->a = parse_expr(P);
    expect_block_end(P);
    jtoken *end = body_until(P, &n->body, &n->nbody, ends);
    if (jstr_eq(end->text, "elif")) {
        n->orelse = palloc(P, sizeof *n->orelse);
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
    jnode *n = node(P, JN_FOR, at);
    parse_targets(P, n);
    if (!accept_name(P, "in")) perr(P, KILN_ERR_PARSE, cur(P), "expected 'in' in a for loop");
    n->a = parse_expr_noif(P);
    if (accept_name(P, "if")) n->b = parse_expr_noif(P);
    if (is_name(cur(P), "recursive")) perr(P, KILN_ERR_UNSUPPORTED, cur(P), "recursive loops are not supported");
    expect_block_end(P);
    jtoken *end = body_until(P, &n->body, &n->nbody, ends);
    if (jstr_eq(end->text, "else")) {
        static const char *const endfor[] = {"endfor", NULL};
        expect_block_end(P);
        body_until(P, &n->orelse, &n->norelse, endfor);
    }
    expect_block_end(P);
    return n;
}

static jnode *parse_set(parser *P, jtoken *at) {
    jnode *n = node(P, JN_SET, at);
    jstr first = expect_name(P);
    if (accept_op(P, ".")) { /* {% set ns.attr = value %} */
        n->a = node(P, JN_NAME, at);
        n->a->name = first;
        n->name = expect_name(P);
    } else {
        jstr names[16];
        int k = 0;
        names[k++] = first;
        while (accept_op(P, ",")) {
            if (k == 16) perr(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 16 assignment targets");
            names[k++] = expect_name(P);
        }
        n->targets = palloc(P, (size_t)k * sizeof *n->targets);
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
    expect_op(P, "=");
    n->b = parse_expr(P);
    if (is_op(cur(P), ",")) { /* set a, b = x, y */
        nodes a = {0};
        nodes_push(P, &a, n->b, (jstr){0});
        while (accept_op(P, ",")) nodes_push(P, &a, parse_expr(P), (jstr){0});
        jnode *tuple = node(P, JN_TUPLE, at);
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
    expect_op(P, "(");
    while (!accept_op(P, ")")) {
        if (k) expect_op(P, ",");
        if (k == 32) perr(P, KILN_ERR_UNSUPPORTED, cur(P), "more than 32 macro parameters");
        names[k++] = expect_name(P);
        nodes_push(P, &defaults, accept_op(P, "=") ? parse_expr(P) : NULL, (jstr){0});
    }
    n->targets = palloc(P, (size_t)(k ? k : 1) * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    n->ntargets = k;
    n->args = defaults.v;
    n->nargs = defaults.n;
}

static jnode *parse_macro(parser *P, jtoken *at) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = node(P, JN_MACRO, at);
    n->name = expect_name(P);
    parse_params(P, n);
    expect_block_end(P);
    body_until(P, &n->body, &n->nbody, ends);
    expect_block_end(P);
    return n;
}

static jnode *parse_call_block(parser *P, jtoken *at) {
    static const char *const ends[] = {"endcall", NULL};
    jnode *n = node(P, JN_CALL_BLOCK, at);
    if (is_op(cur(P), "(")) parse_params(P, n); /* {% call(args) macro() %} */
    n->a = parse_expr(P);
    if (n->a->kind != JN_CALL) perr(P, KILN_ERR_PARSE, at, "a call block needs a call expression");
    expect_block_end(P);
    body_until(P, &n->body, &n->nbody, ends);
    expect_block_end(P);
    return n;
}

static jnode *parse_filter_block(parser *P, jtoken *at) {
    static const char *const ends[] = {"endfilter", NULL};
    jnode *n = node(P, JN_FILTER_BLOCK, at);
    n->a = parse_filter(P, NULL);
    while (accept_op(P, "|")) n->a = parse_filter(P, n->a);
    expect_block_end(P);
    body_until(P, &n->body, &n->nbody, ends);
    expect_block_end(P);
    return n;
}

static jnode *parse_statement(parser *P) {
    jtoken *at = cur(P);
    jstr kw = expect_name(P);
    if (jstr_eq(kw, "if")) return parse_if(P, at);
    if (jstr_eq(kw, "for")) return parse_for(P, at);
    if (jstr_eq(kw, "set")) return parse_set(P, at);
    if (jstr_eq(kw, "macro")) return parse_macro(P, at);
    if (jstr_eq(kw, "call")) return parse_call_block(P, at);
    if (jstr_eq(kw, "filter")) return parse_filter_block(P, at);
    if (jstr_eq(kw, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        jnode *n = node(P, JN_GENERATION, at);
        expect_block_end(P);
        body_until(P, &n->body, &n->nbody, ends);
        expect_block_end(P);
        return n;
    }
    if (jstr_eq(kw, "break") || jstr_eq(kw, "continue")) {
        jnode *n = node(P, jstr_eq(kw, "break") ? JN_BREAK : JN_CONTINUE, at);
        expect_block_end(P);
        return n;
    }
    static const char *const known[] = {"extends", "block", "include", "import", "from", "with", "autoescape",
                                        "do", "trans", NULL};
    for (int i = 0; known[i]; i++)
        if (jstr_eq(kw, known[i])) perr(P, KILN_ERR_UNSUPPORTED, at, "{%% %s %%} is not supported", known[i]);
    perr(P, KILN_ERR_PARSE, at, "unknown statement '%.*s'", (int)kw.len > 40 ? 40 : (int)kw.len, kw.p);
}

static void parse_body(parser *P, nodes *out, const char *const *ends, jtoken **end_at) {
    enter(P);
    for (;;) {
        jtoken *t = cur(P);
        if (t->type == JT_EOF) {
            if (ends) {
                const char *want = ends[0];
                for (int i = 0; ends[i]; i++) want = ends[i]; /* the closing tag is listed last */
                perr(P, KILN_ERR_PARSE, t, "missing {%% %s %%}", want);
            }
            break;
        }
        if (t->type == JT_TEXT) {
            jnode *n = node(P, JN_TEXT, t);
            n->lit = jv_str(t->text.p, t->text.len);
            nodes_push(P, out, n, (jstr){0});
            next(P);
        } else if (t->type == JT_VAR_BEGIN) {
            next(P);
            jnode *n = node(P, JN_OUTPUT, t);
            n->a = parse_expr(P);
            if (cur(P)->type != JT_VAR_END) perr(P, KILN_ERR_PARSE, cur(P), "expected '}}', found %s", tok_desc(cur(P)));
            next(P);
            nodes_push(P, out, n, (jstr){0});
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
                                          jstr_eq(name->text, "endgeneration")))
                perr(P, KILN_ERR_PARSE, name, "unexpected {%% %.*s %%}", (int)name->text.len, name->text.p);
            nodes_push(P, out, parse_statement(P), (jstr){0});
        } else {
            perr(P, KILN_ERR_PARSE, t, "unexpected %s", tok_desc(t));
        }
    }
    P->depth--;
}

kiln_status jinja_parse(const char *source, size_t len, jtemplate *t) {
    t->arena.cap = JINJA_MAX_ARENA;
    jtoken *toks;
    int ntoks;
    KILN_TRY(jinja_lex(source, len, &t->arena, &toks, &ntoks));
    parser P = {.t = toks, .n = ntoks, .arena = &t->arena};
    if (setjmp(P.fail)) return P.status;
    nodes body = {0};
    parse_body(&P, &body, NULL, NULL);
    t->body = body.v;
    t->nbody = body.n;
    return KILN_OK;
}

void jinja_template_free(jtemplate *t) {
    if (!t) return;
    jarena_free(&t->arena);
    t->body = NULL;
    t->nbody = 0;
}
