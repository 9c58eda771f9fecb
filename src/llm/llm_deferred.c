/* llm_deferred.c — the address-space reservation and the pieces of a deferred model (llm_deferred.h),
 * and kiln_llm_model_read16, which reads any weight range of any model in 16 bits. */
#include "llm/llm_deferred.h"

#include "core/file.h"
#include "core/half.h"
#include "core/status.h"
#include "llm/llm_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SLOT_ALIGN 16 /* floats: 64 bytes */
#define READ_MAX_THREADS 16
#define READ_MIN_PART ((size_t)1 << 20) /* values per thread, at least */

/* One checkpoint tensor placed in the layout: slots [dst, dst + rows * cols) hold it. */
typedef struct piece {
    const float *dst;
    int64_t rows, cols;         /* the layout's [rows, cols]; t's shape, or its transpose */
    const unsigned char *data;  /* the tensor's bytes in the mapping */
    kiln_dtype dtype;
    bool transpose;             /* slot (r, c) holds t's element (c, r) */
} piece;

struct llm_deferred {
    kiln_hf_checkpoint *ck;     /* the checkpoint, or ... */
    void *map;                  /* ... the engine's kiln_file_map the pieces point into */
    char *base;                 /* the reservation */
    size_t floats, used;
    piece *pieces;              /* sorted by dst, not overlapping */
    int n, cap;
};

/* The reservation for `values` values of `tensors` tensors, owning ck or map (also on failure). */
static kiln_status create(kiln_hf_checkpoint *ck, void *map, size_t values, int tensors, llm_deferred **out) {
    *out = NULL;
    llm_deferred *d = calloc(1, sizeof *d);
    if (!d) {
        kiln_hf_checkpoint_free(ck);
        kiln_file_map_free(map);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    d->ck = ck;
    d->map = map;
    d->floats = values + (size_t)tensors * SLOT_ALIGN + SLOT_ALIGN;
    void *p = mmap(NULL, d->floats * sizeof(float), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        const size_t floats = d->floats;
        llm_deferred_free(d);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "cannot reserve address space for %zu weights", floats);
    }
    d->base = p;
    *out = d;
    return KILN_OK;
}

kiln_status llm_deferred_create(kiln_hf_checkpoint *ck, llm_deferred **out) {
    int64_t values;
    int tensors;
    kiln_hf_checkpoint_extent(ck, &values, &tensors);
    return create(ck, NULL, (size_t)values, tensors, out);
}

kiln_status llm_deferred_create_mapped(void *map, size_t values, int tensors, llm_deferred **out) {
    return create(NULL, map, values, tensors, out);
}

const kiln_hf_checkpoint *llm_deferred_checkpoint(const llm_deferred *d) { return d->ck; }

void llm_deferred_free(llm_deferred *d) {
    if (!d) return;
    if (d->base) munmap(d->base, d->floats * sizeof(float));
    kiln_hf_checkpoint_free(d->ck);
    kiln_file_map_free(d->map);
    free(d->pieces);
    free(d);
}

kiln_status llm_deferred_reserve(llm_deferred *d, size_t n, float **out) {
    size_t take = (n + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    if (take > d->floats - d->used)
        return kiln_error(KILN_ERR_INTERNAL, "deferred weights: the reservation of %zu values is exhausted", d->floats);
    *out = (float *)(void *)d->base + d->used;
    d->used += take;
    return KILN_OK;
}

bool llm_deferred_owns(const llm_deferred *d, const float *p) {
    return d && (const char *)p >= d->base && (const char *)p < d->base + d->floats * sizeof(float);
}

kiln_status llm_deferred_place(llm_deferred *d, float *dst, const kiln_st_tensor *t, bool transpose) {
    if (t->dtype != KILN_F32 && t->dtype != KILN_F16 && t->dtype != KILN_BF16)
        return kiln_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has dtype %s; weights must be F32, F16 or BF16", t->name,
                          kiln_dtype_name(t->dtype));
    const int64_t r = t->dims[0], c = t->ndim == 2 ? t->dims[1] : 1;
    piece p = {.dst = dst, .rows = transpose ? c : r, .cols = transpose ? r : c, .data = t->data, .dtype = t->dtype,
               .transpose = transpose};
    const size_t numel = (size_t)(r * c);
    if (!llm_deferred_owns(d, dst) || !llm_deferred_owns(d, dst + numel - 1))
        return kiln_error(KILN_ERR_INTERNAL, "deferred weights: tensor '%s' placed outside the reservation", t->name);
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 256;
        piece *np = realloc(d->pieces, (size_t)cap * sizeof *np);
        if (!np) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        d->pieces = np;
        d->cap = cap;
    }
    int at = d->n; /* loaders place in layout order, so this rarely moves anything */
    while (at > 0 && d->pieces[at - 1].dst > dst) at--;
    const piece *prev = at > 0 ? &d->pieces[at - 1] : NULL, *next = at < d->n ? &d->pieces[at] : NULL;
    if ((prev && prev->dst + prev->rows * prev->cols > dst) || (next && dst + numel > next->dst))
        return kiln_error(KILN_ERR_INTERNAL, "deferred weights: tensor '%s' overlaps another in the layout", t->name);
    memmove(d->pieces + at + 1, d->pieces + at, (size_t)(d->n - at) * sizeof *d->pieces);
    d->pieces[at] = p;
    d->n++;
    return KILN_OK;
}

/* Element k of piece p's source in FP32. */
static float source_f32(const piece *p, size_t k) {
    if (p->dtype == KILN_F32) {
        float f;
        memcpy(&f, p->data + 4 * k, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p->data + 2 * k, 2);
    return p->dtype == KILN_F16 ? kiln_f16_to_f32(h) : kiln_bf16_to_f32(h);
}

static uint16_t to16(float f, kiln_dtype dtype) { return dtype == KILN_F16 ? kiln_f32_to_f16(f) : kiln_f32_to_bf16(f); }

/* n slots of p from slot offset `from` on, in dtype. */
static void read_piece(const piece *p, size_t from, size_t n, kiln_dtype dtype, uint16_t *dst) {
    if (!p->transpose && p->dtype == dtype) {
        memcpy(dst, p->data + 2 * from, 2 * n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        size_t k = from + i;
        if (p->transpose) k = (k % (size_t)p->cols) * (size_t)p->rows + k / (size_t)p->cols;
        dst[i] = to16(source_f32(p, k), dtype);
    }
}

/* The first piece whose slots end after p (d->n when none). */
static int piece_after(const llm_deferred *d, const float *p) {
    int lo = 0, hi = d->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        const piece *q = &d->pieces[mid];
        if (q->dst + q->rows * q->cols <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

kiln_status kiln_llm_model_read16(const kiln_llm_model *m, const float *src, size_t n, kiln_dtype dtype, uint16_t *dst) {
    if (dtype != KILN_F16 && dtype != KILN_BF16)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "kiln_llm_model_read16: dtype %s (F16 or BF16)", kiln_dtype_name(dtype));
    const llm_deferred *d = m->deferred;
    if (!llm_deferred_owns(d, src)) {
        for (size_t i = 0; i < n; i++) dst[i] = to16(src[i], dtype);
        return KILN_OK;
    }
    size_t done = 0;
    for (int i = piece_after(d, src); done < n; i++) {
        const piece *p = i < d->n ? &d->pieces[i] : NULL;
        const float *at = src + done;
        if (!p || p->dst > at)
            return kiln_error(KILN_ERR_INTERNAL, "deferred weights: no tensor was placed at slot %zu of the layout",
                              (size_t)(at - (const float *)(const void *)d->base));
        size_t from = (size_t)(at - p->dst), left = (size_t)(p->rows * p->cols) - from;
        size_t k = left < n - done ? left : n - done;
        read_piece(p, from, k, dtype, dst + done);
        done += k;
    }
    return KILN_OK;
}

/* One thread's share of kiln_llm_model_read16_threads. */
typedef struct read_part {
    const kiln_llm_model *m;
    const float *src;
    size_t n;
    kiln_dtype dtype;
    uint16_t *dst;
    kiln_status st;
} read_part;

static void *read_part_run(void *arg) {
    read_part *p = arg;
    p->st = kiln_llm_model_read16(p->m, p->src, p->n, p->dtype, p->dst);
    return NULL;
}

kiln_status kiln_llm_model_read16_threads(const kiln_llm_model *m, const float *src, size_t n, kiln_dtype dtype,
                                          uint16_t *dst, int threads) {
    if (threads > READ_MAX_THREADS) threads = READ_MAX_THREADS;
    if (threads < 1) threads = 1;
    size_t per = (n + (size_t)threads - 1) / (size_t)threads;
    if (per < READ_MIN_PART) per = READ_MIN_PART;
    read_part parts[READ_MAX_THREADS];
    pthread_t tid[READ_MAX_THREADS];
    bool started[READ_MAX_THREADS] = {false};
    int np = 0;
    for (size_t off = 0; off < n; off += per, np++)
        parts[np] = (read_part){m, src + off, n - off < per ? n - off : per, dtype, dst + off, KILN_OK};
    for (int i = 1; i < np; i++) started[i] = pthread_create(&tid[i], NULL, read_part_run, &parts[i]) == 0;
    for (int i = 0; i < np; i++)
        if (!started[i]) read_part_run(&parts[i]); /* part 0, and any part whose thread did not start */
    for (int i = 1; i < np; i++)
        if (started[i]) pthread_join(tid[i], NULL);
    for (int i = 0; i < np; i++) {
        if (parts[i].st == KILN_OK) continue;
        if (started[i]) read_part_run(&parts[i]); /* a worker's message stays in its thread: read it again here */
        return parts[i].st;
    }
    return KILN_OK;
}

kiln_dtype kiln_llm_model_stored_dtype(const kiln_llm_model *m) {
    const llm_deferred *d = m->deferred;
    for (int i = 0; d && i < d->n; i++)
        if (d->pieces[i].dst == m->tok_emb) return d->pieces[i].dtype;
    return KILN_F32;
}
