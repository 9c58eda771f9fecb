/* jinja_parse_expr.c — the chat-template parser's expressions (jinja_parser.h), by recursive
 * descent with Jinja's precedence: conditional < or < and < not < comparison (chained) < + - < ~ <
 * * / // % < ** < unary < postfix (. [] ()) and filters / tests. Literals: strings (adjacent ones
 * concatenate), ints, floats, true / false / none, lists, tuples, dicts. */
#include "llm/jinja_parser.h"

#include "core/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void jp_fail(parser *P, kiln_status s, const jtoken *at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->status = kiln_error(s, "chat template: %s (at line %d:%d)", msg, at->line, at->col);
    longjmp(P->fail, 1);
}

void *jp_alloc(parser *P, size_t n) {
    void *p = jarena_alloc(P->arena, n);
    if (!p) {
        P->status = kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
        longjmp(P->fail, 1);
    }
    return p;
}

const char *jp_desc(const jtoken *t) {
    switch (t->type) {
    case JT_EOF: return "the end of the template";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_END: return "'%}'";
    default: return "this";
    }
}

void jp_expect_op(parser *P, const char *op) {
    if (!accept_op(P, op)) jp_fail(P, KILN_ERR_PARSE, cur(P), "expected '%s', found %s", op, jp_desc(cur(P)));
}

jstr jp_expect_name(parser *P) {
    if (cur(P)->type != JT_NAME) jp_fail(P, KILN_ERR_PARSE, cur(P), "expected a name, found %s", jp_desc(cur(P)));
    return next(P)->text;
}

jnode *jp_node(parser *P, jkind kind, const jtoken *at) {
    jnode *n = jp_alloc(P, sizeof *n);
    n->kind = kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}


void jp_push(parser *P, nodes *a, jnode *x, jstr kw) {
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 4;
        jnode **v = jp_alloc(P, (size_t)cap * sizeof *v);
        jstr *k = jp_alloc(P, (size_t)cap * sizeof *k);
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

void jp_enter(parser *P) {
    if (++P->depth > JINJA_MAX_PARSE_DEPTH)
        jp_fail(P, KILN_ERR_PARSE, cur(P), "the template nests deeper than %d levels", JINJA_MAX_PARSE_DEPTH);
}

static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

/* ( args ) with keyword arguments `name=value`. */
static void parse_call_args(parser *P, jnode *n) {
    nodes a = {0};
    jp_expect_op(P, "(");
    while (!accept_op(P, ")")) {
        if (a.n) jp_expect_op(P, ",");
        if (accept_op(P, ")")) break;
        jstr kw = {0};
        if (cur(P)->type == JT_NAME && is_op(&P->t[P->pos + 1], "=")) {
            kw = next(P)->text;
            next(P);
        } else if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            jp_fail(P, KILN_ERR_UNSUPPORTED, cur(P), "*args / **kwargs in calls are not supported");
        }
        jp_push(P, &a, jp_expr(P), kw);
    }
    n->args = a.v;
    n->kw = a.kw;
    n->nargs = a.n;
}

jnode *jp_filter(parser *P, jnode *operand) {
    jtoken *at = cur(P);
    jnode *f = jp_node(P, JN_FILTER, at);
    f->a = operand;
    f->name = jp_expect_name(P);
    while (accept_op(P, ".")) { /* dotted filter names do not exist in chat templates */
        jp_fail(P, KILN_ERR_UNSUPPORTED, at, "dotted filter names are not supported");
    }
    if (!jinja_has_filter(f->name))
        jp_fail(P, KILN_ERR_UNSUPPORTED, at, "unknown filter '%.*s'", (int)f->name.len, f->name.p);
    if (is_op(cur(P), "(")) parse_call_args(P, f);
    return f;
}

static jnode *parse_test(parser *P, jnode *operand) {
    jtoken *at = cur(P);
    jnode *t = jp_node(P, JN_TEST, at);
    t->a = operand;
    t->negate = accept_name(P, "not");
    jtoken *name_tok = cur(P);
    t->name = jp_expect_name(P);
    if (!jinja_has_test(t->name))
        jp_fail(P, KILN_ERR_UNSUPPORTED, name_tok, "unknown test '%.*s'", (int)t->name.len, t->name.p);
    jtoken *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT || c->type == JT_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and") && !is_name(c, "if") &&
               !is_name(c, "is")) {
        nodes a = {0};
        jp_push(P, &a, parse_postfix(P, parse_primary(P)), (jstr){0});
        t->args = a.v;
        t->kw = a.kw;
        t->nargs = 1;
    }
    return t;
}

static jnode *parse_filters_and_tests(parser *P, jnode *n) {
    for (;;) {
        if (accept_op(P, "|")) n = jp_filter(P, n);
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
            if (++k > 2) jp_fail(P, KILN_ERR_PARSE, cur(P), "too many ':' in a slice");
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[k]) jp_fail(P, KILN_ERR_PARSE, cur(P), "expected ':' or ']'");
        parts[k] = jp_expr(P);
    }
    jp_expect_op(P, "]");
    if (!slice) {
        if (!parts[0]) jp_fail(P, KILN_ERR_PARSE, at, "empty subscript");
        jnode *n = jp_node(P, JN_ITEM, at);
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = jp_node(P, JN_SLICE, at);
    n->a = obj;
    n->args = jp_alloc(P, 3 * sizeof *n->args);
    memcpy(n->args, parts, sizeof parts);
    n->nargs = 3;
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (;;) {
        jtoken *at = cur(P);
        if (accept_op(P, ".")) {
            jnode *a = jp_node(P, JN_ATTR, at);
            a->a = n;
            if (cur(P)->type == JT_INT) { /* x.0 is x[0] */
                a->kind = JN_ITEM;
                a->b = jp_node(P, JN_LIT, cur(P));
                a->b->lit = jv_int(next(P)->i);
            } else {
                a->name = jp_expect_name(P);
            }
            n = a;
        } else if (accept_op(P, "[")) {
            n = parse_subscript(P, n, at);
        } else if (is_op(at, "(")) {
            jnode *call = jp_node(P, JN_CALL, at);
            call->a = n;
            parse_call_args(P, call);
            n = call;
        } else {
            return n;
        }
    }
}

static jnode *parse_sequence(parser *P, jkind kind, const char *close, const jtoken *at) {
    jnode *n = jp_node(P, kind, at);
    nodes a = {0};
    while (!accept_op(P, close)) {
        if (a.n) {
            jp_expect_op(P, ",");
            if (accept_op(P, close)) break;
        }
        jnode *k = jp_expr(P);
        jp_push(P, &a, k, (jstr){0});
        if (kind == JN_DICT) {
            jp_expect_op(P, ":");
            jp_push(P, &a, jp_expr(P), (jstr){0});
        }
    }
    n->args = a.v;
    n->nargs = a.n;
    return n;
}

static jnode *parse_primary(parser *P) {
    jp_enter(P);
    jtoken *t = cur(P);
    jnode *n;
    switch (t->type) {
    case JT_NAME:
        next(P);
        n = jp_node(P, JN_LIT, t);
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
        n = jp_node(P, JN_LIT, t);
        jstr s = t->text;
        while (cur(P)->type == JT_STRING) { /* adjacent literals concatenate */
            jstr more = next(P)->text;
            char *p = jp_alloc(P, s.len + more.len + 1);
            memcpy(p, s.p, s.len);
            memcpy(p + s.len, more.p, more.len);
            s = (jstr){s.len + more.len, p};
        }
        n->lit = jv_str(s.p, s.len);
        break;
    }
    case JT_INT: next(P); n = jp_node(P, JN_LIT, t); n->lit = jv_int(t->i); break;
    case JT_FLOAT: next(P); n = jp_node(P, JN_LIT, t); n->lit = jv_float(t->f); break;
    default:
        if (accept_op(P, "(")) {
            if (accept_op(P, ")")) {
                n = jp_node(P, JN_TUPLE, t);
                break;
            }
            n = jp_expr(P);
            if (is_op(cur(P), ",")) {
                nodes a = {0};
                jp_push(P, &a, n, (jstr){0});
                while (accept_op(P, ",") && !is_op(cur(P), ")")) jp_push(P, &a, jp_expr(P), (jstr){0});
                n = jp_node(P, JN_TUPLE, t);
                n->args = a.v;
                n->nargs = a.n;
            }
            jp_expect_op(P, ")");
        } else if (accept_op(P, "[")) {
            n = parse_sequence(P, JN_LIST, "]", t);
        } else if (accept_op(P, "{")) {
            n = parse_sequence(P, JN_DICT, "}", t);
        } else {
            jp_fail(P, KILN_ERR_PARSE, t, "expected an expression, found %s", jp_desc(t));
        }
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    jp_enter(P);
    jtoken *t = cur(P);
    jnode *n;
    if (accept_op(P, "-") || accept_op(P, "+")) {
        n = jp_node(P, is_op(t, "-") ? JN_NEG : JN_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filters_and_tests(P, n);
    P->depth--;
    return n;
}

static jnode *binary(parser *P, jop op, jnode *a, jnode *b, const jtoken *at) {
    jnode *n = jp_node(P, JN_BINARY, at);
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
            jnode *both = jp_node(P, JN_AND, at);
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
        jp_enter(P);
        jnode *n = jp_node(P, JN_NOT, at);
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
        jnode *x = jp_node(P, JN_AND, at);
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
        jnode *x = jp_node(P, JN_OR, at);
        x->a = n;
        x->b = parse_and(P);
        n = x;
    }
    return n;
}

/* The conditional expression without its own `if` (used by `for ... if cond`). */
jnode *jp_expr_noif(parser *P) { return parse_or(P); }

jnode *jp_expr(parser *P) {
    jp_enter(P);
    jnode *n = parse_or(P);
    jtoken *at;
    while (at = cur(P), accept_name(P, "if")) {
        jnode *c = jp_node(P, JN_COND, at);
        c->a = n;
        c->b = parse_or(P);
        if (accept_name(P, "else")) c->c = jp_expr(P);
        n = c;
    }
    P->depth--;
    return n;
}
