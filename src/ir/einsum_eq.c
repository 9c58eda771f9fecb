/* einsum_eq.c — the Einsum equation parser and the label plan of one call (see einsum_eq.h). */
#include "ir/einsum_eq.h"

#include "core/status.h"
#include "core/tensor.h"

#include <stdio.h>
#include <string.h>

#define EQ_MAX_LEN 512

/* One term of the equation: its letters in order and where the ellipsis sits among them. */
typedef struct eq_term {
    int nletters;
    int letters[KILN_MAX_DIMS];
    int ell_pos; /* number of letters before "...", or -1 when the term has none */
} eq_term;

static int letter_id(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
    return -1;
}

/* Parses s[0..len) (spaces already removed) as one term. */
static kiln_status parse_term(const char *s, int len, eq_term *t) {
    t->nletters = 0;
    t->ell_pos = -1;
    for (int i = 0; i < len; i++) {
        if (s[i] == '.') {
            if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: '.' must be part of an ellipsis '...'");
            if (t->ell_pos >= 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: a term has two ellipses");
            t->ell_pos = t->nletters;
            i += 2;
            continue;
        }
        int id = letter_id(s[i]);
        if (id < 0) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: unexpected character '%c' in the equation", s[i]);
        if (t->nletters == KILN_MAX_DIMS)
            return kiln_error(KILN_ERR_UNSUPPORTED, "Einsum: a term has more than %d labels", KILN_MAX_DIMS);
        t->letters[t->nletters++] = id;
    }
    return KILN_OK;
}

const char *kiln_einsum_label_name(int l, char buf[16]) {
    if (l < KILN_EINSUM_LETTERS) snprintf(buf, 16, "%c", l < 26 ? 'A' + l : 'a' + (l - 26));
    else snprintf(buf, 16, "...#%d", l - KILN_EINSUM_LETTERS);
    return buf;
}

kiln_status kiln_einsum_parse(const char *equation, int ninputs, const int *ranks, kiln_einsum_eq *eq) {
    memset(eq, 0, sizeof *eq);
    if (ninputs < 1 || ninputs > KILN_EINSUM_MAX_INPUTS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Einsum: %d operands (1 to %d are supported)", ninputs,
                          KILN_EINSUM_MAX_INPUTS);
    char buf[EQ_MAX_LEN];
    int len = 0;
    for (const char *p = equation; *p; p++) {
        if (*p == ' ') continue;
        if (len == EQ_MAX_LEN - 1) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: the equation is too long");
        buf[len++] = *p;
    }
    buf[len] = 0;
    const char *arrow = strstr(buf, "->");
    int lhs_len = arrow ? (int)(arrow - buf) : len;
    for (int i = 0; i < len; i++)
        if ((buf[i] == '-' || buf[i] == '>') && !(arrow && (buf + i == arrow || buf + i == arrow + 1)))
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: misplaced '%c' in equation \"%s\"", buf[i], equation);

    /* input terms */
    eq_term terms[KILN_EINSUM_MAX_INPUTS];
    int nterms = 0, start = 0;
    for (int i = 0; i <= lhs_len; i++) {
        if (i < lhs_len && buf[i] != ',') continue;
        if (nterms == ninputs)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: equation \"%s\" has more terms than the %d inputs",
                              equation, ninputs);
        KILN_TRY(parse_term(buf + start, i - start, &terms[nterms++]));
        start = i + 1;
    }
    if (nterms != ninputs)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: equation \"%s\" has %d terms for %d inputs", equation,
                          nterms, ninputs);

    /* ranks and ellipsis widths */
    int ell[KILN_EINSUM_MAX_INPUTS], count[KILN_EINSUM_LETTERS] = {0};
    bool unknown = false;
    eq->ninputs = ninputs;
    for (int k = 0; k < ninputs; k++) {
        const eq_term *t = &terms[k];
        for (int j = 0; j < t->nletters; j++) count[t->letters[j]]++;
        int r = ranks[k];
        ell[k] = 0;
        if (r < 0) {
            if (t->ell_pos >= 0) unknown = true;
            eq->in_rank[k] = t->ell_pos >= 0 ? -1 : t->nletters;
            continue;
        }
        if (t->ell_pos < 0 ? r != t->nletters : r < t->nletters)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: term %d of \"%s\" has %d labels for an input of rank %d",
                              k, equation, t->nletters, r);
        ell[k] = r - t->nletters;
        if (ell[k] > eq->nell) eq->nell = ell[k];
        eq->in_rank[k] = r;
    }
    for (int k = 0; k < ninputs; k++) {
        const eq_term *t = &terms[k];
        if (eq->in_rank[k] < 0) continue;
        int d = 0;
        for (int j = 0; j < t->nletters; j++) {
            if (j == t->ell_pos)
                for (int e = 0; e < ell[k]; e++) eq->in_label[k][d++] = KILN_EINSUM_LETTERS + eq->nell - ell[k] + e;
            eq->in_label[k][d++] = t->letters[j];
        }
        if (t->ell_pos == t->nletters)
            for (int e = 0; e < ell[k]; e++) eq->in_label[k][d++] = KILN_EINSUM_LETTERS + eq->nell - ell[k] + e;
    }

    /* output */
    eq_term out;
    if (arrow) {
        KILN_TRY(parse_term(arrow + 2, len - lhs_len - 2, &out));
        bool seen[KILN_EINSUM_LETTERS] = {false};
        for (int j = 0; j < out.nletters; j++) {
            int id = out.letters[j];
            char name[16];
            if (!count[id])
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: output label '%s' does not appear in any input",
                                  kiln_einsum_label_name(id, name));
            if (seen[id])
                return kiln_error(KILN_ERR_INVALID_ARGUMENT, "Einsum: output label '%s' appears twice",
                                  kiln_einsum_label_name(id, name));
            seen[id] = true;
        }
        if (out.ell_pos < 0 && eq->nell > 0)
            return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                              "Einsum: inputs have ellipsis dimensions but the output term of \"%s\" has no '...'",
                              equation);
    } else { /* implicit: ellipsis dims, then the labels used exactly once, in ASCII order */
        out.nletters = 0;
        out.ell_pos = 0;
        for (int id = 0; id < KILN_EINSUM_LETTERS; id++) {
            if (count[id] != 1) continue;
            if (out.nletters == KILN_MAX_DIMS)
                return kiln_error(KILN_ERR_UNSUPPORTED, "Einsum: the output has more than %d dims", KILN_MAX_DIMS);
            out.letters[out.nletters++] = id;
        }
    }
    if (unknown) {
        eq->out_rank = -1;
        return KILN_OK;
    }
    int nout = out.nletters + (out.ell_pos >= 0 ? eq->nell : 0);
    if (nout > KILN_MAX_DIMS)
        return kiln_error(KILN_ERR_UNSUPPORTED, "Einsum: the output has %d dims (at most %d)", nout, KILN_MAX_DIMS);
    int d = 0;
    for (int j = 0; j <= out.nletters; j++) {
        if (j == out.ell_pos)
            for (int e = 0; e < eq->nell; e++) eq->out_label[d++] = KILN_EINSUM_LETTERS + e;
        if (j < out.nletters) eq->out_label[d++] = out.letters[j];
    }
    eq->out_rank = d;
    return KILN_OK;
}

kiln_status kiln_einsum_plan_build(const char *op, const kiln_einsum_eq *eq, const int64_t *const *dims, kiln_einsum_plan *p) {
    int64_t size[KILN_EINSUM_MAX_LABELS];
    for (int l = 0; l < KILN_EINSUM_MAX_LABELS; l++) size[l] = -1;
    for (int k = 0; k < eq->ninputs; k++)
        for (int d = 0; d < eq->in_rank[k]; d++) {
            int l = eq->in_label[k][d];
            int64_t s = dims[k][d];
            if (size[l] < 0 || size[l] == 1) size[l] = s;
            else if (s != 1 && s != size[l]) {
                char name[16];
                return kiln_error(KILN_ERR_SHAPE, "%s: label '%s' has size %lld in one place and %lld in another",
                                  op, kiln_einsum_label_name(l, name), (long long)size[l], (long long)s);
            }
        }
    bool in_out[KILN_EINSUM_MAX_LABELS] = {false};
    int con_label[KILN_EINSUM_MAX_LABELS];
    p->nin = eq->ninputs;
    p->nout = eq->out_rank;
    p->ncon = 0;
    for (int d = 0; d < eq->out_rank; d++) {
        in_out[eq->out_label[d]] = true;
        p->out_size[d] = size[eq->out_label[d]];
    }
    for (int l = 0; l < KILN_EINSUM_MAX_LABELS; l++)
        if (size[l] >= 0 && !in_out[l]) {
            con_label[p->ncon] = l;
            p->con_size[p->ncon++] = size[l];
        }
    for (int k = 0; k < eq->ninputs; k++) {
        int64_t st[KILN_MAX_DIMS], lst[KILN_EINSUM_MAX_LABELS] = {0};
        kiln_strides(eq->in_rank[k], dims[k], st);
        for (int d = 0; d < eq->in_rank[k]; d++)
            if (dims[k][d] != 1) lst[eq->in_label[k][d]] += st[d];
        for (int d = 0; d < p->nout; d++) p->out_stride[k][d] = lst[eq->out_label[d]];
        for (int c = 0; c < p->ncon; c++) p->con_stride[k][c] = lst[con_label[c]];
    }
    return KILN_OK;
}

