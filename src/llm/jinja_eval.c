/* jinja_eval.c — the chat-template renderer (jinja.h): walks the AST, evaluating expressions into
 * values and writing text. Scopes as Jinja's: each loop iteration and each macro call has its own
 * (a `set` inside a loop does not outlive the iteration: namespaces carry values out), `if` blocks do
 * not. Attribute and item access follow Jinja's getattr/getitem (a missing key is Undefined, using
 * it fails). Limits: evaluation depth, the work budget (loop iterations included), output size, the
 * arena's bytes. */
#include "llm/jinja.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jframe {
    jdict *vars;
    struct jframe *parent;
} jframe;

typedef struct jmacro {
    const jnode *def;    /* MACRO, or CALL_BLOCK for a caller */
    jframe *scope;       /* where it was defined */
    struct jmacro *caller; /* the caller a macro call passes (NULL: none) */
} jmacro;

static jv eval(jctx *c, const jnode *n);
static void exec_body(jctx *c, jnode *const *body, int n);

static void enter(jctx *c, const jnode *at) {
    jwork(c, at, 1);
    if (++c->depth > JINJA_MAX_EVAL_DEPTH)
        jfail(c, at, "the template recurses deeper than %d levels", JINJA_MAX_EVAL_DEPTH);
}

static jframe *push_frame(jctx *c, jframe *parent) {
    jframe *f = jalloc(c, sizeof *f);
    f->vars = jdict_new(c, 4);
    f->parent = parent;
    return f;
}

static jv lookup(jctx *c, jstr name) {
    for (jframe *f = c->frame; f; f = f->parent) {
        jv *v = jdict_find(f->vars, name.p, name.len);
        if (v) return *v;
    }
    char *why = jalloc(c, name.len + 20);
    memcpy(why, "'", 1);
    memcpy(why + 1, name.p, name.len);
    memcpy(why + 1 + name.len, "' is undefined", 15);
    return jv_undef(why);
}

static void emit(jctx *c, const char *p, size_t n) {
    if (c->out->len + n > JINJA_MAX_OUTPUT) jfail(c, NULL, "the output exceeds %u MiB", JINJA_MAX_OUTPUT >> 20);
    jwork(c, NULL, n / JINJA_WORK_BYTES);
    kiln_strbuf_append(c->out, p, n);
    if (c->out->failed) jfail(c, NULL, "out of memory");
}

static void emit_value(jctx *c, jv v) {
    if (v.type == JV_STR) {
        emit(c, v.s.p, v.s.len);
        return;
    }
    jv s = jv_stringify(c, v);
    emit(c, s.s.p, s.s.len);
}

static _Noreturn void undefined_use(jctx *c, const jnode *at, jv v) {
    if (v.s.len) jfail(c, at, "%.*s", (int)v.s.len, v.s.p);
    jfail(c, at, "use of an undefined value");
}

/* An Undefined whose message is fmt with two strings (%.*s each). */
static jv undef_fmt(jctx *c, const char *fmt, jstr a, jstr b) {
    size_t cap = strlen(fmt) + a.len + b.len + 1;
    char *p = jalloc(c, cap);
    snprintf(p, cap, fmt, (int)a.len, a.p, (int)b.len, b.p);
    return jv_undef(p);
}

/* The loop variable's attributes. */
static jv loop_attr(jctx *c, const jloop *L, jstr name) {
    size_t n = L->items->n, i = L->index0;
    if (jstr_eq(name, "index")) return jv_int((int64_t)i + 1);
    if (jstr_eq(name, "index0")) return jv_int((int64_t)i);
    if (jstr_eq(name, "revindex")) return jv_int((int64_t)(n - i));
    if (jstr_eq(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
    if (jstr_eq(name, "first")) return jv_bool(i == 0);
    if (jstr_eq(name, "last")) return jv_bool(i + 1 == n);
    if (jstr_eq(name, "length")) return jv_int((int64_t)n);
    if (jstr_eq(name, "depth")) return jv_int(1);
    if (jstr_eq(name, "depth0")) return jv_int(0);
    if (jstr_eq(name, "previtem")) return i > 0 ? L->items->v[i - 1] : jv_undef("there is no previous item");
    if (jstr_eq(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : jv_undef("there is no next item");
    return undef_fmt(c, "'%.*s' object has no attribute '%.*s'", (jstr){11, "LoopContext"}, name);
}

/* Jinja's getattr (obj.name): a namespace's or dict's key, the loop's attributes; else Undefined. */
static jv get_attr(jctx *c, const jnode *at, jv obj, jstr name) {
    switch (obj.type) {
    case JV_UNDEF: undefined_use(c, at, obj);
    case JV_DICT:
    case JV_NS: {
        jv *v = jdict_find(obj.d, name.p, name.len);
        if (v) return *v;
        return undef_fmt(c, "'%.*s object' has no attribute '%.*s'", (jstr){4, "dict"}, name);
    }
    case JV_LOOP: return loop_attr(c, obj.loop, name);
    default: {
        const char *type = jv_type_name(obj);
        return undef_fmt(c, "'%.*s object' has no attribute '%.*s'", (jstr){strlen(type), type}, name);
    }
    }
}

/* Jinja's getitem (obj[key]). */
static jv get_item(jctx *c, const jnode *at, jv obj, jv key) {
    if (obj.type == JV_UNDEF) undefined_use(c, at, obj);
    if (obj.type == JV_LIST && obj.l->lazy) return jv_undef("'generator' object is not subscriptable");
    if ((obj.type == JV_LIST || obj.type == JV_STR) && (key.type == JV_INT || key.type == JV_BOOL)) {
        int64_t i = key.type == JV_BOOL ? key.b : key.i;
        jlist *items = obj.type == JV_LIST ? obj.l : jv_iterate(c, at, obj);
        int64_t n = (int64_t)items->n;
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items->v[i];
        char why[96];
        snprintf(why, sizeof why, "%s object has no element %lld", jv_type_name(obj),
                 (long long)(key.type == JV_BOOL ? key.b : key.i));
        return jv_undef(jv_str_copy(c, why, strlen(why)).s.p);
    }
    if (key.type == JV_STR) return get_attr(c, at, obj, key.s);
    if (obj.type == JV_DICT) {
        jv *v = jdict_get(obj.d, key);
        return v ? *v : jv_undef("dict object has no such key");
    }
    return jv_undef(NULL);
}

/* Evaluates a call's arguments. */
static void eval_args(jctx *c, const jnode *n, jv *vals) {
    for (int i = 0; i < n->nargs; i++) vals[i] = eval(c, n->args[i]);
}

static jv call_macro(jctx *c, const jnode *at, jmacro *m, const jv *args, const jstr *kw, int nargs) {
    const jnode *def = m->def;
    enter(c, at);
    jframe *saved = c->frame;
    jframe *f = push_frame(c, m->scope);
    int npos = 0;
    for (int i = 0; i < nargs; i++)
        if (!kw[i].p) npos++;
    if (npos > def->ntargets)
        jfail(c, at, "macro '%.*s' takes not more than %d argument(s)", (int)def->name.len, def->name.p,
              def->ntargets);
    for (int p = 0, i = 0; i < nargs; i++)
        if (!kw[i].p) jdict_set(c, f->vars, def->targets[p++], args[i]);
    for (int i = 0; i < nargs; i++) {
        if (!kw[i].p) continue;
        int k = 0;
        while (k < def->ntargets &&
               !(def->targets[k].len == kw[i].len && memcmp(def->targets[k].p, kw[i].p, kw[i].len) == 0))
            k++;
        if (k == def->ntargets)
            jfail(c, at, "macro '%.*s' has no parameter named '%.*s'", (int)def->name.len, def->name.p,
                  (int)kw[i].len, kw[i].p);
        jdict_set(c, f->vars, def->targets[k], args[i]);
    }
    c->frame = f;
    for (int k = 0; k < def->ntargets; k++) {
        if (jdict_find(f->vars, def->targets[k].p, def->targets[k].len)) continue;
        jv dflt = k < def->nargs && def->args[k] ? eval(c, def->args[k]) : jv_undef(NULL);
        if (dflt.type == JV_UNDEF) {
            char *why = jalloc(c, def->targets[k].len + 40);
            snprintf(why, def->targets[k].len + 40, "parameter '%.*s' was not provided", (int)def->targets[k].len,
                     def->targets[k].p);
            dflt = jv_undef(why);
        }
        jdict_set(c, f->vars, def->targets[k], dflt);
    }
    if (m->caller) jdict_set(c, f->vars, (jstr){6, "caller"}, (jv){.type = JV_MACRO, .m = m->caller});
    size_t start = c->out->len;
    exec_body(c, def->body, def->nbody);
    c->control = JC_NONE;
    jv result = jv_str_copy(c, c->out->data ? c->out->data + start : "", c->out->len - start);
    c->out->len = start;
    if (c->out->data) c->out->data[start] = 0;
    c->frame = saved;
    c->depth--;
    return result;
}

static jv eval_call(jctx *c, const jnode *n, jmacro *caller) {
    jv *args = jalloc(c, (size_t)(n->nargs + 1) * sizeof *args);
    const jnode *fn = n->a;
    if (fn->kind == JN_ATTR) { /* a method: "s".strip(), d.items(), ... or a namespace's macro */
        jv obj = eval(c, fn->a);
        if (obj.type == JV_UNDEF) undefined_use(c, fn, obj);
        if (obj.type == JV_STR || obj.type == JV_DICT || obj.type == JV_LIST) {
            eval_args(c, n, args);
            return jinja_method(c, n, obj, fn->name, args, n->kw, n->nargs);
        }
        if (obj.type == JV_LOOP && jstr_eq(fn->name, "cycle")) { /* loop.cycle(a, b, ...) */
            eval_args(c, n, args);
            if (n->nargs == 0) jfail(c, n, "no items for cycling given");
            return args[obj.loop->index0 % (size_t)n->nargs];
        }
        if (obj.type == JV_LOOP && jstr_eq(fn->name, "changed")) { /* loop.changed(x, ...) */
            jlist *now = jlist_new(c, (size_t)n->nargs);
            for (int i = 0; i < n->nargs; i++) jlist_push(c, now, eval(c, n->args[i]));
            jv value = {.type = JV_LIST, .l = now};
            bool changed = obj.loop->changed_last.type == JV_UNDEF || !jv_equal(obj.loop->changed_last, value);
            obj.loop->changed_last = value;
            return jv_bool(changed);
        }
    }
    jv callee = eval(c, fn);
    eval_args(c, n, args);
    if (callee.type == JV_MACRO) {
        if (caller) {
            jmacro *m = jalloc(c, sizeof *m);
            *m = *callee.m;
            m->caller = caller;
            return call_macro(c, n, m, args, n->kw, n->nargs);
        }
        return call_macro(c, n, callee.m, args, n->kw, n->nargs);
    }
    if (callee.type == JV_FUNC) return jinja_call_func(c, n, callee.fn, args, n->kw, n->nargs);
    if (callee.type == JV_UNDEF) undefined_use(c, fn, callee);
    jfail(c, n, "'%s' object is not callable", jv_type_name(callee));
}

static jv eval_filter(jctx *c, const jnode *n, jv value) {
    jv *args = jalloc(c, (size_t)(n->nargs + 1) * sizeof *args);
    eval_args(c, n, args);
    return jinja_filter(c, n, n->name, value, args, n->kw, n->nargs);
}

/* Whether n is made of literals only (a {{ }} of them Jinja evaluates at compile time). */
static bool is_constant(const jnode *n) {
    if (!n) return true;
    switch (n->kind) {
    case JN_LIT: return true;
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT:
    case JN_SLICE:
    case JN_ITEM:
    case JN_NEG:
    case JN_POS:
    case JN_NOT:
    case JN_AND:
    case JN_OR:
    case JN_BINARY:
    case JN_COND:
    case JN_ATTR:
    case JN_FILTER:
    case JN_TEST:
        /* filters that take Jinja's context are never evaluated at compile time */
        if (n->kind == JN_FILTER && (jstr_eq(n->name, "map") || jstr_eq(n->name, "select") ||
                                     jstr_eq(n->name, "reject") || jstr_eq(n->name, "selectattr") ||
                                     jstr_eq(n->name, "rejectattr")))
            return false;
        if (!is_constant(n->a) || !is_constant(n->b) || !is_constant(n->c)) return false;
        for (int i = 0; i < n->nargs; i++)
            if (!is_constant(n->args[i])) return false;
        return true;
    default: return false;
    }
}

static jv eval(jctx *c, const jnode *n) {
    enter(c, n);
    jv r;
    switch (n->kind) {
    case JN_LIT: r = n->lit; break;
    case JN_NAME: r = lookup(c, n->name); break;
    case JN_LIST:
    case JN_TUPLE: {
        jlist *l = jlist_new(c, (size_t)n->nargs);
        for (int i = 0; i < n->nargs; i++) jlist_push(c, l, eval(c, n->args[i]));
        l->tuple = n->kind == JN_TUPLE;
        r = (jv){.type = JV_LIST, .l = l};
        break;
    }
    case JN_DICT: {
        jdict *d = jdict_new(c, (size_t)n->nargs / 2);
        for (int i = 0; i < n->nargs; i += 2) {
            jv k = eval(c, n->args[i]);
            if (k.type != JV_STR && k.type != JV_INT && k.type != JV_FLOAT && k.type != JV_BOOL && k.type != JV_NONE)
                jfail(c, n->args[i], "unhashable type: '%s'", jv_type_name(k));
            jdict_put(c, d, k, eval(c, n->args[i + 1]));
        }
        r = (jv){.type = JV_DICT, .d = d};
        break;
    }
    case JN_ATTR: r = get_attr(c, n, eval(c, n->a), n->name); break;
    case JN_ITEM: {
        jv obj = eval(c, n->a);
        r = get_item(c, n, obj, eval(c, n->b));
        break;
    }
    case JN_SLICE: {
        jv obj = eval(c, n->a), parts[3];
        for (int i = 0; i < 3; i++) parts[i] = n->args[i] ? eval(c, n->args[i]) : jv_none();
        /* Jinja computes a {{ }} of literals at compile time, where slicing goes through its getitem
         * and gives Undefined where Python's own slicing (what runs otherwise) fails */
        if (obj.type != JV_LIST && obj.type != JV_STR && obj.type != JV_UNDEF && c->folding)
            r = jv_undef(NULL);
        else
            r = jinja_slice(c, n, obj, parts[0], parts[1], parts[2]);
        break;
    }
    case JN_CALL: r = eval_call(c, n, NULL); break;
    case JN_FILTER: r = eval_filter(c, n, eval(c, n->a)); break;
    case JN_TEST: {
        jv v = eval(c, n->a);
        jv *args = jalloc(c, (size_t)(n->nargs + 1) * sizeof *args);
        eval_args(c, n, args);
        r = jv_bool(jinja_test(c, n, n->name, v, args, n->nargs) != n->negate);
        break;
    }
    case JN_NEG:
    case JN_POS: {
        jv v = eval(c, n->a);
        if (v.type == JV_INT && n->kind == JN_NEG && v.i == INT64_MIN) jfail(c, n, "integer overflow");
        if (v.type == JV_INT) r = jv_int(n->kind == JN_NEG ? -v.i : v.i);
        else if (v.type == JV_BOOL) r = jv_int(n->kind == JN_NEG ? -(int64_t)v.b : v.b);
        else if (v.type == JV_FLOAT) r = jv_float(n->kind == JN_NEG ? -v.f : v.f);
        else if (v.type == JV_UNDEF) undefined_use(c, n, v);
        else jfail(c, n, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name(v));
        break;
    }
    case JN_NOT: r = jv_bool(!jv_truthy(eval(c, n->a))); break;
    case JN_AND: {
        jv a = eval(c, n->a);
        r = jv_truthy(a) ? eval(c, n->b) : a;
        break;
    }
    case JN_OR: {
        jv a = eval(c, n->a);
        r = jv_truthy(a) ? a : eval(c, n->b);
        break;
    }
    case JN_BINARY: {
        jv a = eval(c, n->a);
        r = jinja_binary(c, n, n->op, a, eval(c, n->b));
        break;
    }
    case JN_COND:
        if (jv_truthy(eval(c, n->b))) r = eval(c, n->a);
        else r = n->c ? eval(c, n->c) : jv_undef("the conditional expression has no else");
        break;
    default: jfail(c, n, "a statement where an expression belongs");
    }
    c->depth--;
    return r;
}

/* ---------------------------------------------------------------- statements */

static void assign(jctx *c, const jnode *at, const jstr *targets, int ntargets, jv value) {
    if (ntargets == 1) {
        jdict_set(c, c->frame->vars, targets[0], value);
        return;
    }
    jlist *items = jv_iterate(c, at, value);
    if ((int)items->n != ntargets)
        jfail(c, at, "cannot unpack %zu value(s) into %d name(s)", items->n, ntargets);
    for (int i = 0; i < ntargets; i++) jdict_set(c, c->frame->vars, targets[i], items->v[i]);
}

static void exec_for(jctx *c, const jnode *n) {
    jlist *all = jv_iterate(c, n->a, eval(c, n->a)), *items = all;
    jframe *saved = c->frame;
    jframe *f = push_frame(c, saved);
    if (n->b) { /* for x in y if cond: filter first, so loop.* count the kept items */
        items = jlist_new(c, all->n);
        c->frame = f;
        for (size_t i = 0; i < all->n; i++) {
            jwork(c, n, 1);
            f->vars->n = 0;
            assign(c, n, n->targets, n->ntargets, all->v[i]);
            if (jv_truthy(eval(c, n->b))) jlist_push(c, items, all->v[i]);
        }
        c->frame = saved;
    }
    jloop *L = jalloc(c, sizeof *L);
    L->items = items;
    bool completed = false;
    jstr loop_name = {4, "loop"};
    for (size_t i = 0; i < items->n; i++) {
        jwork(c, n, 1);
        L->index0 = i;
        f->vars->n = 0; /* a fresh scope per iteration */
        c->frame = f;
        jdict_set(c, f->vars, loop_name, (jv){.type = JV_LOOP, .loop = L});
        assign(c, n, n->targets, n->ntargets, items->v[i]);
        exec_body(c, n->body, n->nbody);
        c->frame = saved;
        if (c->control == JC_NONE) completed = true;
        if (c->control == JC_BREAK) {
            c->control = JC_NONE;
            break;
        }
        c->control = JC_NONE;
    }
    c->frame = saved;
    /* as Jinja's: the else runs unless some iteration ran to the end of the body (so also when every
     * iteration ended in continue, or the first one in break) */
    if (!completed) exec_body(c, n->orelse, n->norelse);
}

/* Renders body into a string instead of the output. */
static jv capture(jctx *c, jnode *const *body, int nbody) {
    size_t start = c->out->len;
    exec_body(c, body, nbody);
    jv s = jv_str_copy(c, c->out->data ? c->out->data + start : "", c->out->len - start);
    c->out->len = start;
    if (c->out->data) c->out->data[start] = 0;
    return s;
}

static void exec_stmt(jctx *c, const jnode *n) {
    enter(c, n);
    switch (n->kind) {
    case JN_TEXT: emit(c, n->lit.s.p, n->lit.s.len); break;
    case JN_OUTPUT:
        c->folding = is_constant(n->a);
        emit_value(c, eval(c, n->a));
        c->folding = false;
        break;
    case JN_IF:
        if (jv_truthy(eval(c, n->a))) exec_body(c, n->body, n->nbody);
        else exec_body(c, n->orelse, n->norelse);
        break;
    case JN_FOR: exec_for(c, n); break;
    case JN_SET:
        if (n->a) {
            jv ns = eval(c, n->a);
            if (ns.type != JV_NS) jfail(c, n, "cannot assign attribute on a non-namespace object");
            if (n->name.len && n->name.p[0] == '_') jfail(c, n, "namespace attributes cannot start with '_'");
            jdict_set(c, ns.d, n->name, eval(c, n->b));
        } else {
            assign(c, n, n->targets, n->ntargets, eval(c, n->b));
        }
        break;
    case JN_SET_BLOCK: assign(c, n, n->targets, 1, capture(c, n->body, n->nbody)); break;
    case JN_MACRO: {
        jmacro *m = jalloc(c, sizeof *m);
        m->def = n;
        m->scope = c->frame;
        jdict_set(c, c->frame->vars, n->name, (jv){.type = JV_MACRO, .m = m});
        break;
    }
    case JN_CALL_BLOCK: {
        jmacro *caller = jalloc(c, sizeof *caller);
        caller->def = n;
        caller->scope = c->frame;
        emit_value(c, eval_call(c, n->a, caller));
        break;
    }
    case JN_FILTER_BLOCK: {
        jv text = capture(c, n->body, n->nbody);
        const jnode *chain[JINJA_MAX_PARSE_DEPTH];
        int k = 0;
        for (const jnode *f = n->a; f && k < JINJA_MAX_PARSE_DEPTH; f = f->a) chain[k++] = f;
        while (k > 0) text = eval_filter(c, chain[--k], text);
        emit_value(c, text);
        break;
    }
    case JN_GENERATION: exec_body(c, n->body, n->nbody); break;
    case JN_WITH: {
        jv *values = jalloc(c, (size_t)(n->nargs + 1) * sizeof *values);
        eval_args(c, n, values);
        jframe *saved = c->frame;
        c->frame = push_frame(c, saved);
        for (int i = 0; i < n->ntargets; i++) jdict_set(c, c->frame->vars, n->targets[i], values[i]);
        exec_body(c, n->body, n->nbody);
        c->frame = saved;
        break;
    }
    case JN_BREAK: c->control = JC_BREAK; break;
    case JN_CONTINUE: c->control = JC_CONTINUE; break;
    default: jfail(c, n, "an expression where a statement belongs");
    }
    c->depth--;
}

static void exec_body(jctx *c, jnode *const *body, int n) {
    for (int i = 0; i < n && c->control == JC_NONE; i++) exec_stmt(c, body[i]);
}

/* The size of v for the work budget: its strings' bytes and its items, nested ones included (values
 * nested deeper than the evaluator goes are not counted). */
static unsigned long long input_size(jv v, int depth) {
    if (depth > JINJA_MAX_EVAL_DEPTH) return 0;
    unsigned long long n = 1;
    switch (v.type) {
    case JV_STR: n += v.s.len; break;
    case JV_LIST:
        for (size_t i = 0; i < v.l->n; i++) n += input_size(v.l->v[i], depth + 1);
        break;
    case JV_DICT:
    case JV_NS:
        for (size_t i = 0; i < v.d->n; i++) n += input_size(v.d->k[i], depth + 1) + input_size(v.d->v[i], depth + 1);
        break;
    default: break;
    }
    return n;
}

kiln_status jinja_render(const jtemplate *t, const jinja_var *vars, int nvars, const struct tm *now, jarena *arena,
                         kiln_strbuf *out) {
    jctx *c = calloc(1, sizeof *c);
    if (!c) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "chat template: out of memory");
    c->arena = arena;
    c->out = out;
    c->now = now;
    c->budget = JINJA_WORK_BASE;
    for (int i = 0; i < nvars; i++) c->budget += JINJA_WORK_PER_BYTE * input_size(vars[i].value, 0);
    kiln_status s = KILN_OK;
    if (setjmp(c->fail)) {
        s = c->status;
    } else {
        c->globals = c->frame = push_frame(c, NULL);
        static const struct {
            const char *name;
            jfunc fn;
        } funcs[] = {{"raise_exception", JF_RAISE_EXCEPTION}, {"strftime_now", JF_STRFTIME_NOW},
                     {"namespace", JF_NAMESPACE}, {"range", JF_RANGE}, {"dict", JF_DICT}};
        for (size_t i = 0; i < sizeof funcs / sizeof *funcs; i++)
            jdict_set(c, c->globals->vars, (jstr){strlen(funcs[i].name), funcs[i].name},
                      (jv){.type = JV_FUNC, .fn = funcs[i].fn});
        for (int i = 0; i < nvars; i++)
            jdict_set(c, c->globals->vars, (jstr){strlen(vars[i].name), vars[i].name}, vars[i].value);
        c->frame = push_frame(c, c->globals); /* the template's own variables shadow the globals */
        c->globals = c->frame;
        exec_body(c, t->body, t->nbody);
    }
    kiln_strbuf_free(&c->scratch);
    free(c);
    return s;
}
