/* checkpoint.c — opening a Hugging Face checkpoint directory (config.json, model.safetensors or an
 * index and its shards), name lookup with the hub's prefix variants, and FP32 conversion. */
#include "hf/checkpoint.h"

#include "core/file.h"
#include "core/half.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kiln_hf_checkpoint {
    char *dir;
    kiln_jdoc config;
    kiln_safetensors *shards;
    int n_shards;
};

static const char *const g_prefixes[] = {"transformer.", "model."};

/* malloc'd "dir/name", or NULL when out of memory. */
static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

kiln_status kiln_hf_read_json(const char *path, const char *role, kiln_jdoc *doc) {
    memset(doc, 0, sizeof *doc);
    if (access(path, F_OK) != 0) return kiln_error(KILN_ERR_IO, "%s: no such file (%s)", path, role);
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    kiln_status s = kiln_jdoc_parse((const char *)m.data, m.size, path, doc);
    kiln_file_unmap(&m);
    if (s == KILN_OK && kiln_jdoc_root(doc)->type != KILN_JNODE_OBJECT)
        s = kiln_error(KILN_ERR_PARSE, "%s: not a JSON object", path);
    return s;
}

/* Opens dir/file as the next shard (file must be a plain name, not a path). */
static kiln_status add_shard(kiln_hf_checkpoint *ck, const char *file) {
    if (strchr(file, '/') || !strcmp(file, "..") || !strcmp(file, "."))
        return kiln_error(KILN_ERR_PARSE, "%s: shard name '%s' is not a file name in the checkpoint directory", ck->dir,
                          file);
    char *path = join(ck->dir, file);
    if (!path) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = kiln_safetensors_open(path, &ck->shards[ck->n_shards]);
    free(path);
    if (s == KILN_OK) ck->n_shards++;
    return s;
}

/* The shard opened from dir/file, or NULL. */
static const kiln_safetensors *shard_named(const kiln_hf_checkpoint *ck, const char *file) {
    for (int i = 0; i < ck->n_shards; i++) {
        const char *base = strrchr(ck->shards[i].path, '/');
        if (!strcmp(base ? base + 1 : ck->shards[i].path, file)) return &ck->shards[i];
    }
    return NULL;
}

/* Opens every shard the index's weight_map names and checks each named tensor is in its shard. */
static kiln_status open_sharded(kiln_hf_checkpoint *ck, const char *index_path) {
    kiln_jdoc idx;
    kiln_status s = kiln_hf_read_json(index_path, "shard index", &idx);
    const kiln_jnode *wm = s == KILN_OK ? kiln_jdoc_get(&idx, kiln_jdoc_root(&idx), "weight_map") : NULL;
    if (s == KILN_OK && (!wm || wm->type != KILN_JNODE_OBJECT))
        s = kiln_error(KILN_ERR_PARSE, "%s: missing or non-object \"weight_map\"", index_path);
    if (s == KILN_OK && !(ck->shards = calloc((size_t)wm->count + 1, sizeof *ck->shards)))
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (const kiln_jnode *e = s == KILN_OK ? kiln_jdoc_first(&idx, wm) : NULL; e && s == KILN_OK;
         e = kiln_jdoc_next(&idx, e)) {
        const char *file = kiln_jdoc_str(e);
        if (!file) {
            s = kiln_error(KILN_ERR_PARSE, "%s: weight_map entry '%s' is not a file name", index_path, e->key);
            break;
        }
        if (!shard_named(ck, file)) s = add_shard(ck, file);
        if (s == KILN_OK && !kiln_safetensors_find(shard_named(ck, file), e->key))
            s = kiln_error(KILN_ERR_PARSE, "%s: weight_map puts tensor '%s' in %s, which does not hold it", index_path,
                           e->key, file);
    }
    kiln_jdoc_free(&idx);
    return s;
}

static kiln_status open_weights(kiln_hf_checkpoint *ck) {
    char *single = join(ck->dir, "model.safetensors"), *index = join(ck->dir, "model.safetensors.index.json"),
         *bin = join(ck->dir, "pytorch_model.bin");
    kiln_status s = KILN_OK;
    if (!single || !index || !bin) {
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    } else if (access(single, F_OK) == 0) {
        ck->shards = calloc(1, sizeof *ck->shards);
        s = ck->shards ? add_shard(ck, "model.safetensors") : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    } else if (access(index, F_OK) == 0) {
        s = open_sharded(ck, index);
    } else if (access(bin, F_OK) == 0) {
        s = kiln_error(KILN_ERR_UNSUPPORTED,
                       "%s: only pytorch_model.bin found; kiln reads safetensors weights (convert the checkpoint)",
                       ck->dir);
    } else {
        s = kiln_error(KILN_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", ck->dir);
    }
    free(single);
    free(index);
    free(bin);
    return s;
}

kiln_status kiln_hf_checkpoint_open(const char *dir, kiln_hf_checkpoint **out) {
    *out = NULL;
    kiln_hf_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = strdup(dir))) {
        free(ck);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    char *cfg = join(dir, "config.json");
    kiln_status s = kiln_file_note_inputs_in_dir(dir); /* the whole directory is the user's checkpoint */
    if (s == KILN_OK) s = cfg ? kiln_hf_read_json(cfg, "the model's config.json", &ck->config)
                        : kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    free(cfg);
    if (s == KILN_OK) s = open_weights(ck);
    if (s != KILN_OK) {
        kiln_hf_checkpoint_free(ck);
        return s;
    }
    *out = ck;
    return KILN_OK;
}

void kiln_hf_checkpoint_free(kiln_hf_checkpoint *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_shards; i++) kiln_safetensors_close(&ck->shards[i]);
    free(ck->shards);
    kiln_jdoc_free(&ck->config);
    free(ck->dir);
    free(ck);
}

const kiln_jdoc *kiln_hf_checkpoint_config(const kiln_hf_checkpoint *ck) { return &ck->config; }

const char *kiln_hf_checkpoint_dir(const kiln_hf_checkpoint *ck) { return ck->dir; }

/* The exact name in any shard, or NULL. */
static const kiln_st_tensor *find_exact(const kiln_hf_checkpoint *ck, const char *name) {
    for (int i = 0; i < ck->n_shards; i++) {
        const kiln_st_tensor *t = kiln_safetensors_find(&ck->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

const kiln_st_tensor *kiln_hf_checkpoint_find(const kiln_hf_checkpoint *ck, const char *name) {
    const kiln_st_tensor *t = find_exact(ck, name);
    const size_t np = sizeof g_prefixes / sizeof *g_prefixes;
    for (size_t i = 0; i < np && !t; i++) {
        size_t n = strlen(g_prefixes[i]);
        if (!strncmp(name, g_prefixes[i], n)) t = find_exact(ck, name + n);
    }
    for (size_t i = 0; i < np && !t; i++) {
        char buf[512];
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", g_prefixes[i], name) < sizeof buf) t = find_exact(ck, buf);
    }
    return t;
}

void kiln_hf_checkpoint_extent(const kiln_hf_checkpoint *ck, int64_t *values, int *tensors) {
    *values = 0;
    *tensors = 0;
    for (int i = 0; i < ck->n_shards; i++)
        for (int j = 0; j < ck->shards[i].n_tensors; j++) {
            const kiln_st_tensor *t = &ck->shards[i].tensors[j];
            *values += (int64_t)(t->nbytes / kiln_dtype_size(t->dtype));
            ++*tensors;
        }
}

kiln_status kiln_hf_tensor_to_f32(const kiln_st_tensor *t, float *dst) {
    const unsigned char *src = t->data;
    size_t n = t->nbytes / kiln_dtype_size(t->dtype);
    if (t->dtype == KILN_F32) {
        memcpy(dst, src, t->nbytes);
    } else if (t->dtype == KILN_F16 || t->dtype == KILN_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t->dtype == KILN_F16 ? kiln_f16_to_f32(h) : kiln_bf16_to_f32(h);
        }
    } else {
        return kiln_error(KILN_ERR_UNSUPPORTED, "tensor '%s' has dtype %s; weights must be F32, F16 or BF16", t->name,
                          kiln_dtype_name(t->dtype));
    }
    return KILN_OK;
}
