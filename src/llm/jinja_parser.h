/* jinja_parser.h — the chat-template parser's shared state and helpers, for its two files:
 * jinja_parse_expr.c (expressions) and jinja_parse.c (statements and the entry point). Errors unwind
 * with longjmp to jinja_parse (P->fail) with the thread's message set. */
#ifndef KILN_LLM_JINJA_PARSER_H
#define KILN_LLM_JINJA_PARSER_H

#include "llm/jinja.h"

#include <setjmp.h>

typedef struct parser {
    jtoken *t;
    int n, pos, depth;
    int loops; /* for bodies around the statement being parsed (break / continue need one) */
    jarena *arena;
    jmp_buf fail;
    kiln_status status;
} parser;

/* A growable array of node pointers, copied into the arena when done. */
typedef struct nodes {
    jnode **v;
    jstr *kw;
    int n, cap;
} nodes;

/* Sets the error (s, naming at's line:column) and unwinds. */
_Noreturn void jp_fail(parser *P, kiln_status s, const jtoken *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *jp_alloc(parser *P, size_t n);                     /* arena memory, or unwinds */
const char *jp_desc(const jtoken *t);                     /* "'%}'", "the end of the template", ... */
void jp_expect_op(parser *P, const char *op);
jstr jp_expect_name(parser *P);
jnode *jp_node(parser *P, jkind kind, const jtoken *at);  /* a node at at's position */
void jp_push(parser *P, nodes *a, jnode *x, jstr kw);     /* appends x (keyword kw, or {0}) */
void jp_enter(parser *P);                                 /* one level deeper; fails past the limit */
jnode *jp_expr(parser *P);                                /* an expression, conditional included */
jnode *jp_expr_noif(parser *P);                           /* one without its own `if` (for loops) */
jnode *jp_filter(parser *P, jnode *operand);              /* `name(args)` after a `|` */

static inline jtoken *cur(parser *P) { return &P->t[P->pos]; }
static inline jtoken *next(parser *P) { return &P->t[P->pos < P->n - 1 ? P->pos++ : P->pos]; }
static inline bool is_op(const jtoken *t, const char *op) { return t->type == JT_OP && jstr_eq(t->text, op); }
static inline bool is_name(const jtoken *t, const char *name) { return t->type == JT_NAME && jstr_eq(t->text, name); }

static inline bool accept_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) return false;
    next(P);
    return true;
}
static inline bool accept_name(parser *P, const char *name) {
    if (!is_name(cur(P), name)) return false;
    next(P);
    return true;
}

#endif
