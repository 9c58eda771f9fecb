/* llm_engine_weights.c — the engine names and shapes of a model's weight arrays (one list serves the
 * writer, which reads the arrays, and the reader, which fills them). */
#include "llm/llm_engine_internal.h"

#include <stdio.h>

typedef struct lister {
    kiln_llm_weight *out;
    int n;
} lister;

static void add(lister *l, const char *name, int64_t rows, int64_t cols, float **slot, kiln_llm_q8 *q8) {
    if (l->out) {
        kiln_llm_weight *w = &l->out[l->n];
        snprintf(w->name, sizeof w->name, "%s", name);
        w->ndim = cols ? 2 : 1;
        w->dims[0] = rows;
        w->dims[1] = cols;
        w->slot = slot;
        w->q8 = q8;
    }
    l->n++;
}

/* The arrays of layer i (y is NULL when only counting). */
static void add_layer(lister *l, const kiln_llm_config *c, int i, kiln_llm_layer *y, kiln_llm_q8_layer *q) {
    const bool gpt2 = c->arch == KILN_LLM_GPT2;
    const int64_t d = c->d_model, ff = c->d_ff, qd = (int64_t)c->n_head * c->head_dim,
                  kvd = (int64_t)c->n_kv_head * c->head_dim;
    char n[48];
#define ADD(suffix, rows, cols, field) \
    (snprintf(n, sizeof n, "layers.%d.%s", i, suffix), add(l, n, rows, cols, y ? &y->field : NULL, NULL))
#define ADD_MATRIX(suffix, rows, cols, field, qfield) \
    (snprintf(n, sizeof n, "layers.%d.%s", i, suffix), add(l, n, rows, cols, y ? &y->field : NULL, q ? &q->qfield : NULL))
    ADD("norm1.weight", d, 0, norm1_w);
    if (gpt2) ADD("norm1.bias", d, 0, norm1_b);
    ADD_MATRIX("qkv.weight", qd + 2 * kvd, d, qkv_w, qkv);
    if (gpt2 || c->qkv_bias) ADD("qkv.bias", qd + 2 * kvd, 0, qkv_b);
    ADD_MATRIX("o.weight", d, qd, o_w, o);
    if (gpt2) ADD("o.bias", d, 0, o_b);
    ADD("norm2.weight", d, 0, norm2_w);
    if (gpt2) ADD("norm2.bias", d, 0, norm2_b);
    ADD_MATRIX("up.weight", gpt2 ? ff : 2 * ff, d, up_w, up);
    if (gpt2) ADD("up.bias", ff, 0, up_b);
    ADD_MATRIX("down.weight", d, ff, down_w, down);
    if (gpt2) ADD("down.bias", d, 0, down_b);
#undef ADD
#undef ADD_MATRIX
}

int kiln_llm_weights_list(kiln_llm_model *m, kiln_llm_weight *out) {
    const kiln_llm_config *c = &m->cfg;
    const bool gpt2 = c->arch == KILN_LLM_GPT2;
    lister l = {out, 0};
    add(&l, "tok_emb", c->vocab, c->d_model, &m->tok_emb, &m->q8_tok_emb);
    if (gpt2) add(&l, "pos_emb", c->max_pos, c->d_model, &m->pos_emb, NULL);
    for (int i = 0; i < c->n_layer; i++)
        add_layer(&l, c, i, out ? &m->layers[i] : NULL, out && m->q8 ? &m->q8[i] : NULL);
    add(&l, "norm_f.weight", c->d_model, 0, &m->norm_f_w, NULL);
    if (gpt2) add(&l, "norm_f.bias", c->d_model, 0, &m->norm_f_b, NULL);
    if (!c->tied_embeddings) add(&l, "lm_head", c->vocab, c->d_model, &m->lm_head, &m->q8_lm_head);
    return l.n;
}
