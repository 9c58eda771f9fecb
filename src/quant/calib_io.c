/* calib_io.c — calibration batches from a directory of .npy files or a .npz archive, and the
 * calibration cache (calib_io.h). */
#include "quant/calib_io.h"

#include "core/file.h"
#include "core/npy.h"
#include "core/npz.h"
#include "core/sha256.h"
#include "core/status.h"
#include "core/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAGIC "kiln-int8-calibration 1"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The sorted .npy names in dir (caller frees each and the array). */
static kiln_status list_npy(const char *dir, char ***names, int *count) {
    *names = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return kiln_error(KILN_ERR_IO, "calibration directory '%s': %s", dir, strerror(errno));
    int cap = 0;
    kiln_status s = KILN_OK;
    for (struct dirent *e; s == KILN_OK && (e = readdir(d));) {
        if (!ends_with(e->d_name, ".npy")) continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(*names, (size_t)cap * sizeof *grown);
            if (!grown) {
                s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory listing '%s'", dir);
                break;
            }
            *names = grown;
        }
        if (!((*names)[*count] = strdup(e->d_name))) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        else ++*count;
    }
    closedir(d);
    if (*count > 1) qsort(*names, (size_t)*count, sizeof **names, cmp_str);
    return s;
}

/* The sorted .npy member names of the mapped archive b->npz (caller frees each and the array). */
static kiln_status list_npz(const char *path, kiln_calib_batches *b, char ***names, int *count) {
    *names = NULL;
    *count = 0;
    KILN_TRY(kiln_file_map_open(path, &b->npz));
    KILN_TRY(kiln_npz_members(b->npz.data, b->npz.size, path, &b->members, &b->nmembers));
    if (!(*names = calloc((size_t)b->nmembers + 1, sizeof **names))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < b->nmembers; i++) {
        if (!ends_with(b->members[i].name, ".npy")) continue;
        if (!((*names)[*count] = strdup(b->members[i].name))) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        ++*count;
    }
    if (*count > 1) qsort(*names, (size_t)*count, sizeof **names, cmp_str);
    return KILN_OK;
}

/* k when file is "<input>.<k>.npy" for this input (k decimal), else -1. */
static long batch_index(const char *file, const char *input) {
    size_t n = strlen(input);
    if (strncmp(file, input, n) || file[n] != '.') return -1;
    const char *p = file + n + 1;
    char *end;
    long k = strtol(p, &end, 10);
    return end != p && *p >= '0' && *p <= '9' && !strcmp(end, ".npy") && k < 1000000 ? k : -1;
}

static char *join(const char *dir, const char *file) {
    char *p = malloc(strlen(dir) + strlen(file) + 2);
    if (p) sprintf(p, "%s/%s", dir, file);
    return p;
}

void kiln_calib_batches_free(kiln_calib_batches *b) {
    if (b->paths)
        for (int i = 0; i < b->nbatches * b->ninputs; i++) free(b->paths[i]);
    free(b->paths);
    kiln_npz_members_free(b->members, b->nmembers);
    kiln_file_unmap(&b->npz);
    memset(b, 0, sizeof *b);
}

kiln_status kiln_calib_batches_find(const char *dir, int ninputs, const char *const *names, int max_batches,
                                    kiln_calib_batches *out) {
    memset(out, 0, sizeof *out);
    char **files = NULL;
    int nfiles = 0;
    bool npz = ends_with(dir, ".npz");
    kiln_status s = npz ? list_npz(dir, out, &files, &nfiles) : list_npy(dir, &files, &nfiles);
    const char *kind = npz ? "calibration archive" : "calibration directory";
    /* batches named per input: the largest k + 1 of input 0 */
    long nb = 0;
    for (int f = 0; s == KILN_OK && f < nfiles; f++) {
        long k = batch_index(files[f], names[0]);
        if (k + 1 > nb) nb = k + 1;
    }
    bool per_input = nb > 0;
    if (!per_input) {
        if (ninputs != 1 && s == KILN_OK)
            s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s' has no '%s.0.npy': a model with %d inputs needs "
                           "<input>.<k>.npy for each input", kind, dir, names[0], ninputs);
        nb = nfiles;
    }
    if (s == KILN_OK && nb == 0) s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s' has no .npy arrays", kind, dir);
    if (max_batches > 0 && nb > max_batches) nb = max_batches;
    if (s == KILN_OK && !(out->paths = calloc((size_t)(nb * ninputs) + 1, sizeof *out->paths)))
        s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK) {
        out->nbatches = (int)nb;
        out->ninputs = ninputs;
    }
    for (int f = 0; s == KILN_OK && f < nfiles; f++)
        for (int i = 0; i < ninputs; i++) {
            long k = per_input ? batch_index(files[f], names[i]) : f;
            if (k < 0 || k >= nb || out->paths[k * ninputs + i]) continue;
            out->paths[k * ninputs + i] = npz ? strdup(files[f]) : join(dir, files[f]);
            if (!out->paths[k * ninputs + i]) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        }
    for (long k = 0; s == KILN_OK && k < nb; k++)
        for (int i = 0; i < ninputs; i++)
            if (!out->paths[k * ninputs + i])
                s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "%s '%s' has no '%s.%ld.npy' for batch %ld", kind, dir,
                               names[i], k, k);
    for (int f = 0; f < nfiles; f++) free(files[f]);
    free(files);
    if (s != KILN_OK) kiln_calib_batches_free(out);
    return s;
}

kiln_status kiln_calib_batch_load(const kiln_calib_batches *b, int batch, int input, kiln_tensor *out) {
    const char *name = b->paths[batch * b->ninputs + input];
    if (!b->npz.data) return kiln_npy_read(name, out);
    for (int i = 0; i < b->nmembers; i++)
        if (!strcmp(b->members[i].name, name)) return kiln_npy_parse(b->members[i].data, b->members[i].size, name, out);
    return kiln_error(KILN_ERR_INTERNAL, "calibration archive member '%s' vanished", name);
}

kiln_status kiln_calib_model_digest(const char *path, char out[65]) {
    kiln_file_map m;
    KILN_TRY(kiln_file_map_open(path, &m));
    kiln_sha256_hex(m.data, m.size, out);
    kiln_file_unmap(&m);
    return KILN_OK;
}

/* Reads the next line of f into *line (without the newline); false at the end. */
static bool next_line(FILE *f, char **line, size_t *cap) {
    ssize_t n = getline(line, cap, f);
    if (n < 0) return false;
    if (n > 0 && (*line)[n - 1] == '\n') (*line)[n - 1] = '\0';
    return true;
}

kiln_status kiln_calib_cache_read(const char *path, const char *digest, int n, const char *const *names,
                                  double *thresholds, bool *found) {
    *found = false;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return KILN_OK;
        return kiln_error(KILN_ERR_IO, "calibration cache '%s': %s", path, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    kiln_status s = KILN_OK;
    bool *have = calloc((size_t)n + 1, sizeof *have);
    if (!have) s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK && (!next_line(f, &line, &cap) || strcmp(line, CACHE_MAGIC)))
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is not a kiln calibration cache (first line '%s' expected)", path,
                       CACHE_MAGIC);
    if (s == KILN_OK && (!next_line(f, &line, &cap) || strncmp(line, "model-sha256 ", 13)))
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "calibration cache '%s' has no model-sha256 line", path);
    if (s == KILN_OK && strcmp(line + 13, digest))
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "calibration cache '%s' was made for another model (sha256 %.12s..., "
                       "this model %.12s...): its scales do not apply; remove it or pass --calib DIR to recalibrate",
                       path, line + 13, digest);
    if (s == KILN_OK && (!next_line(f, &line, &cap) || strncmp(line, "calibrator ", 11)))
        s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "calibration cache '%s' has no calibrator line", path);
    while (s == KILN_OK && next_line(f, &line, &cap)) {
        char *sp = strchr(line, ' '), *end;
        double t = sp ? strtod(line, &end) : 0.0;
        if (!sp || end != sp || !(t > 0.0) || !isfinite(t)) {
            s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "calibration cache '%s': bad line '%.80s'", path, line);
            break;
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(sp + 1, names[i])) {
                thresholds[i] = t;
                have[i] = true;
            }
    }
    for (int i = 0; s == KILN_OK && i < n; i++)
        if (!have[i])
            s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "calibration cache '%s' has no threshold for tensor '%s': remove it "
                           "or pass --calib DIR to recalibrate", path, names[i]);
    free(have);
    free(line);
    fclose(f);
    *found = s == KILN_OK;
    return s;
}

kiln_status kiln_calib_cache_write(const char *path, const char *digest, const char *calibrator, int n,
                                   const char *const *names, const double *thresholds) {
    kiln_strbuf b;
    kiln_strbuf_init(&b);
    kiln_strbuf_printf(&b, "%s\nmodel-sha256 %s\ncalibrator %s\n", CACHE_MAGIC, digest, calibrator);
    for (int i = 0; i < n; i++) kiln_strbuf_printf(&b, "%a %s\n", thresholds[i], names[i]);
    kiln_status s = kiln_strbuf_status(&b);
    if (s == KILN_OK) s = kiln_strbuf_write_file(&b, path);
    kiln_strbuf_free(&b);
    return s == KILN_OK ? s : kiln_error_prefix(s, "calibration cache '%s'", path);
}
