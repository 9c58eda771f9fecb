/* jinja.h — kiln's Jinja engine for chat templates (internal): the subset of Jinja2 that Hugging Face
 * chat templates use, rendered as transformers renders them (trim_blocks and lstrip_blocks on,
 * autoescape off, the loopcontrols extension, raise_exception / strftime_now / namespace globals,
 * transformers' tojson).
 *
 * Pipeline: jinja_lex (template text -> tokens, whitespace control applied to the text between tags)
 * -> jinja_parse (tokens -> AST) -> jinja_render (AST + variables -> text). Values (jv) are small
 * structs passed by value; strings, lists and dicts live in a capped arena (jarena) that is freed at
 * once: the template's arena holds the AST, each render has its own.
 *
 * Errors unwind with longjmp to the entry point (jinja_parse, jinja_render), which returns a
 * kiln_status with the thread's message set; everything allocated before is arena memory, so nothing
 * leaks. Limits against hostile templates: JINJA_MAX_* and the work budget (JINJA_WORK_*) below. */
#ifndef KILN_LLM_JINJA_H
#define KILN_LLM_JINJA_H

#include "kiln/kiln.h"
#include "core/strbuf.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define JINJA_MAX_PARSE_DEPTH 200        /* nested expressions and blocks */
#define JINJA_MAX_EVAL_DEPTH 400         /* nested evaluation, macro calls included */
#define JINJA_MAX_OUTPUT (16u << 20)     /* rendered bytes (and the text of one value) */
#define JINJA_MAX_ARENA (256u << 20)     /* bytes of values one render may allocate */
#define JINJA_MAX_RANGE 100000           /* items of one range() (as Jinja's sandbox) */
/* The work budget of one render: evaluated nodes, loop iterations, items and bytes scanned, and one
 * unit per JINJA_WORK_BYTES bytes allocated or written. A render may take JINJA_WORK_BASE units plus
 * JINJA_WORK_PER_BYTE for every byte (and item) of the variables it is given (the messages, the
 * tools): enough for any real template over any conversation, while a hostile template over a short
 * one ends in milliseconds. */
#define JINJA_WORK_BASE 250000ull
#define JINJA_WORK_PER_BYTE 64ull
#define JINJA_WORK_BYTES 16

/* ---------------------------------------------------------------- arena */

typedef struct jarena {
    struct jchunk *chunks;
    size_t used, cap; /* bytes handed out / the most that may be */
} jarena;

/* Zeroed, 16-byte aligned memory, or NULL when the cap is reached or malloc fails. */
void *jarena_alloc(jarena *a, size_t n);
void jarena_free(jarena *a);

/* ---------------------------------------------------------------- values */

typedef enum jtype {
    JV_UNDEF, /* Jinja's Undefined: prints "", falsy, iterates empty; most operations fail */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* also tuples (jlist.tuple) */
    JV_DICT,
    JV_NS,    /* namespace(): a dict whose attributes may be assigned */
    JV_MACRO, /* a macro, or the caller of a {% call %} block */
    JV_FUNC,  /* a global function (jfunc) */
    JV_LOOP,  /* the loop variable of a for loop */
} jtype;

typedef struct jstr {
    size_t len;
    const char *p; /* not NUL-terminated in general */
} jstr;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;

typedef enum jfunc { JF_RAISE_EXCEPTION, JF_STRFTIME_NOW, JF_NAMESPACE, JF_RANGE, JF_DICT } jfunc;

struct jv {
    jtype type;
    bool safe; /* STR: a Markup (from |safe): `markup + str` HTML-escapes the str, as Python's Markup does */
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;                  /* STR; UNDEF: the message an operation on it fails with (may be empty) */
        jlist *l;
        jdict *d;                /* DICT, NS */
        struct jmacro *m;
        jfunc fn;
        struct jloop *loop;
    };
};

struct jlist {
    size_t n, cap;
    jv *v;
    bool tuple;
    bool lazy; /* what Jinja returns as a generator or iterator (map, select..., items, unique, reverse):
                * always true, no len(), no indexing, not JSON: templates that rely on it fail as there */
};

struct jdict {
    size_t n, cap;
    jv *k; /* keys in insertion order: strings, or (in dict literals) numbers, booleans, none */
    jv *v;
};

/* The state behind `loop`: one per for statement, updated in place each iteration (as Jinja's). */
typedef struct jloop {
    jlist *items;
    size_t index0;
    jv changed_last; /* loop.changed()'s previous arguments (UNDEF before the first call) */
} jloop;

/* ---------------------------------------------------------------- AST */

typedef enum jkind {
    /* expressions */
    JN_LIT, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BINARY, JN_COND,
    /* statements */
    JN_TEXT, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK, JN_FILTER_BLOCK,
    JN_BREAK, JN_CONTINUE, JN_GENERATION, JN_WITH,
} jkind;

typedef enum jop {
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOT_IN,
} jop;

typedef struct jnode jnode;
struct jnode {
    jkind kind;
    jop op;                /* BINARY */
    int line, col;         /* where the construct starts (1-based) */
    jv lit;                /* LIT; TEXT (a string) */
    jstr name;             /* NAME, ATTR, FILTER, TEST, MACRO; SET of a namespace attribute: the attribute */
    jnode *a, *b, *c;      /* ATTR / FILTER / TEST / CALL / SLICE: the object a; ITEM: a[b]; NEG / POS / NOT:
                            * a; AND / OR / BINARY: a op b; COND: a if b else c (c may be NULL); OUTPUT and
                            * IF: a; FOR: iterable a, filter b (may be NULL); SET: value b, and the
                            * namespace a for `set ns.attr`; CALL_BLOCK: the call a; FILTER_BLOCK: the
                            * filter chain a (each FILTER's a is the previous, the first's NULL) */
    jnode **args;          /* call / filter / test arguments; LIST / TUPLE items; DICT key, value pairs;
                            * SLICE start, stop, step (NULL when omitted); MACRO / CALL_BLOCK parameter
                            * defaults (NULL when none) */
    jstr *kw;              /* kw[i].p != NULL: args[i] is the keyword argument kw[i] */
    int nargs;
    jstr *targets;         /* FOR / SET / SET_BLOCK / MACRO / CALL_BLOCK / WITH: the names bound (WITH: to
                            * the values args[i]) */
    int ntargets;
    jnode **body;          /* IF / FOR / SET_BLOCK / MACRO / CALL_BLOCK / FILTER_BLOCK / GENERATION / WITH */
    int nbody;
    jnode **orelse;        /* IF: elif/else; FOR: else */
    int norelse;
    bool negate;           /* TEST: `is not` */
};

/* A parsed template: the statements and the arena that holds them. */
typedef struct jtemplate {
    jarena arena;
    jnode **body;
    int nbody;
} jtemplate;

/* ---------------------------------------------------------------- lexer */

typedef enum jtok {
    JT_TEXT, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END, JT_NAME, JT_INT, JT_FLOAT, JT_STRING,
    JT_OP, JT_EOF,
} jtok;

typedef struct jtoken {
    jtok type;
    int line, col;
    jstr text;  /* TEXT: the text after whitespace control; NAME/OP: the name or operator; STRING: decoded */
    int64_t i;  /* INT */
    double f;   /* FLOAT */
} jtoken;

/* Turns source into tokens (JT_EOF last; the array is malloc'd, the caller frees it, their text lives in
 * arena). KILN_ERR_PARSE naming line:column. */
kiln_status jinja_lex(const char *source, size_t len, jarena *arena, jtoken **tokens, int *ntokens);

/* ---------------------------------------------------------------- parser and renderer */

/* Parses source into *t (caller-zeroed; jinja_template_free releases it, also after a failure).
 * KILN_ERR_PARSE for a syntax error, KILN_ERR_UNSUPPORTED for Jinja that kiln does not implement
 * (extends, include, import, raw, recursive loops...), both naming line:column. */
kiln_status jinja_parse(const char *source, size_t len, jtemplate *t);
void jinja_template_free(jtemplate *t);

/* One variable the template sees. */
typedef struct jinja_var {
    const char *name;
    jv value;
} jinja_var;

/* Renders t with vars into out (appended). now is what strftime_now formats. Runtime errors and
 * raise_exception: KILN_ERR_INVALID_ARGUMENT with the message (runtime errors name line:column);
 * a limit reached: KILN_ERR_INVALID_ARGUMENT naming it. vars' values may point into arena (the
 * render's own arena, which the caller frees after). */
kiln_status jinja_render(const jtemplate *t, const jinja_var *vars, int nvars, const struct tm *now, jarena *arena,
                         kiln_strbuf *out);

/* ---------------------------------------------------------------- shared by the renderer's files */

/* The render's state. */
typedef struct jctx {
    jarena *arena;
    kiln_strbuf *out;
    struct jframe *frame;    /* innermost scope */
    struct jframe *globals;  /* the template's top-level scope */
    const struct tm *now;
    int depth;
    unsigned long long work, budget; /* steps so far, and the most this render may take (jwork) */
    enum { JC_NONE, JC_BREAK, JC_CONTINUE } control;
    bool folding;            /* evaluating a {{ }} of literals only, which Jinja computes at compile time */
    kiln_strbuf scratch;     /* a temporary text buffer (freed when the render ends, also on failure) */
    jmp_buf fail;
    kiln_status status;
} jctx;

/* Sets the thread's error (KILN_ERR_INVALID_ARGUMENT) naming n's position, and unwinds. */
_Noreturn void jfail(jctx *c, const jnode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Unwinds with exactly this message (raise_exception). */
_Noreturn void jraise(jctx *c, const char *msg, size_t len);

void *jalloc(jctx *c, size_t n); /* arena memory, or fails the render */
/* Charges units of work (evaluated nodes, iterations, items or bytes scanned); fails past the render's
 * budget (JINJA_WORK_BASE...), so that no template runs for long. */
void jwork(jctx *c, const jnode *at, size_t units);
jv jv_undef(const char *why);
jv jv_none(void);
jv jv_bool(bool b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_str(const char *p, size_t len); /* borrows p */
jv jv_strz(const char *p);
jv jv_str_copy(jctx *c, const char *p, size_t len);
jlist *jlist_new(jctx *c, size_t cap);
void jlist_push(jctx *c, jlist *l, jv v);
jdict *jdict_new(jctx *c, size_t cap);
void jdict_set(jctx *c, jdict *d, jstr key, jv v);   /* a string key */
void jdict_put(jctx *c, jdict *d, jv key, jv v);     /* any hashable key */
jv *jdict_find(const jdict *d, const char *key, size_t len); /* the value of a string key, or NULL */
jv *jdict_get(const jdict *d, jv key);                /* the value of key (Python's 1 == 1.0 == True), or NULL */
/* The offset of the first sub in s at or after from (linear time), or SIZE_MAX when there is none. */
size_t jstr_find(jstr s, size_t from, jstr sub);

bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
const char *jv_type_name(jv v);
/* Whether s is z (inline: with a literal z the length is known at compile time, and the parser asks
 * this for every keyword at every token). */
static inline bool jstr_eq(jstr s, const char *z) {
    size_t n = strlen(z);
    return s.len == n && memcmp(s.p, z, n) == 0;
}
/* Python's str(v) appended to b (Undefined as ""). */
void jv_to_str(jctx *c, jv v, kiln_strbuf *b);
/* Python's repr(v) appended to b. */
void jv_to_repr(jctx *c, jv v, kiln_strbuf *b);
/* str(v) as a value (strings as they are). */
jv jv_stringify(jctx *c, jv v);
/* json.dumps(v, ensure_ascii, indent (NULL: none), separators, sort_keys) appended to b. */
void jv_to_json(jctx *c, const jnode *at, jv v, bool ensure_ascii, const jstr *indent, jstr item_sep, jstr key_sep,
                bool sort_keys, kiln_strbuf *b);
/* Python's float repr ("1.0", "1e+20", "inf") into buf (at least 32 bytes). */
void jfloat_repr(double f, char *buf, size_t cap);
/* Items of an iterable (list, tuple, dict keys, string characters, Undefined as empty); fails otherwise. */
jlist *jv_iterate(jctx *c, const jnode *at, jv v);
/* Whether code point cp is whitespace by Python's str.isspace. */
bool junicode_space(uint32_t cp);
/* The number of code points in s. */
size_t jstr_codepoints(jstr s);

/* Filters, tests, methods and global functions (jinja_builtins.c). args are evaluated; kw[i].p set
 * for keyword arguments. */
jv jinja_filter(jctx *c, const jnode *at, jstr name, jv value, const jv *args, const jstr *kw, int nargs);
bool jinja_test(jctx *c, const jnode *at, jstr name, jv value, const jv *args, int nargs);
jv jinja_method(jctx *c, const jnode *at, jv obj, jstr name, const jv *args, const jstr *kw, int nargs); /* strings.c */
jv jinja_call_func(jctx *c, const jnode *at, jfunc fn, const jv *args, const jstr *kw, int nargs);
/* v as a string / an int (a bool counts), or fails naming `what`. */
jstr jv_need_str(jctx *c, const jnode *at, jv v, const char *what);
int64_t jv_need_int(jctx *c, const jnode *at, jv v, const char *what);
/* String helpers (jinja_strings.c). jstr_strip: Python's strip / lstrip / rstrip (chars NULL:
 * whitespace), a view into s. jstr_map_case: upper, lower, capitalize, str.title and Jinja's title
 * filter. jstr_replace: Python's replace (count < 0: all). jstr_indent: Jinja's indent filter. */
typedef enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA } case_map;
jv jstr_strip(jstr s, const jstr *chars, bool left, bool right);
jv jstr_map_case(jctx *c, jstr s, case_map how);
jv jstr_replace(jctx *c, jstr s, jstr old, jstr new, int64_t count);
jv jstr_indent(jctx *c, jstr s, jstr ind, bool first, bool blank);
/* Argument pos (or keyword name) of a call: true and *out when given. */
bool jinja_arg(const jv *args, const jstr *kw, int nargs, int pos, const char *name, jv *out);
/* item's attribute as map / selectattr / sort see it: a dotted path of keys and list indices
 * ("function.name", "0"); Undefined when a step is missing. */
jv jinja_attribute(jctx *c, jv item, jstr attr);
/* The ordering filters (jinja_sort.c): sort, dictsort, reverse, sum, min, max, round. False when
 * name is none of them. */
bool jinja_list_filter(jctx *c, const jnode *at, jstr name, jv value, const jv *args, const jstr *kw, int nargs,
                       jv *out);
/* Whether a filter / test of that name exists (the parser checks names up front). */
bool jinja_has_filter(jstr name);
bool jinja_has_test(jstr name);
/* Applies a binary operator (jinja_ops.c). */
jv jinja_binary(jctx *c, const jnode *at, jop op, jv a, jv b);
/* Python's ordering of a and b (<0, 0, >0); fails for types Python does not order. */
int jinja_compare(jctx *c, const jnode *at, jv a, jv b);
/* Python's printf-style formatting, fmt % args (jinja_format.c): %s %r %a %d %i %u %f %F %e %E %g %G
 * %x %X %o %c %%, with flags, width, precision and %(key)s. */
jv jinja_percent_format(jctx *c, const jnode *at, jstr fmt, jv args);
/* Python-style slicing of a list or string by code point; start/stop/step may be NONE. */
jv jinja_slice(jctx *c, const jnode *at, jv obj, jv start, jv stop, jv step);

#endif
