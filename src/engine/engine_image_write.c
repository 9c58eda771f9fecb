/* engine_image_write.c — the bytes of an engine file around its sections' contents (layout:
 * docs/engine-format.md): the header with its section table and checksum, the zero padding to the
 * weights section at file offset 4096, the weights section assembled from tensor blocks with zeros
 * between them — written on a thread of its own, its checksum computed on the way, so that the
 * gigabytes of a large model go to the disk while the caller does other work — and the other
 * sections after the weights. Shared by the graph (kind 0) and LLM (kind 1) writers. */
#include "core/checksum.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/engine_format.h"
#include "engine/engine_layout.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t zeros[KILN_ENGINE_WEIGHTS_ALIGN];

/* Copies the NUL-terminated meta string s (at most cap bytes with its NUL) into the header field. */
static kiln_status put_header_str(uint8_t *h, int off, const char *s, size_t cap, const char *field) {
    size_t len = strnlen(s, cap);
    if (len == cap) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "engine metadata '%s' is not NUL-terminated within %zu bytes", field, cap);
    memcpy(h + off, s, len);
    return KILN_OK;
}

static void put_section(uint8_t *h, int index, uint32_t id, uint32_t crc, uint64_t offset, uint64_t bytes) {
    uint8_t *e = h + KILN_EH_SECTIONS + index * KILN_ES_SIZE;
    kiln_put_le32(e + KILN_ES_ID, id);
    kiln_put_le32(e + KILN_ES_CRC, crc);
    kiln_put_le64(e + KILN_ES_OFFSET, offset);
    kiln_put_le64(e + KILN_ES_BYTES, bytes);
}

static void seal_header(uint8_t *h) { kiln_put_le32(h + KILN_EH_HEADER_CRC, kiln_crc32c(h, KILN_EH_HEADER_CRC)); }

void kiln_engine_reseal(uint8_t *image, size_t size) {
    if (size < KILN_ENGINE_HEADER_SIZE) return;
    uint32_t count = kiln_le32(image + KILN_EH_SECTION_COUNT);
    for (uint32_t i = 0; i < count && i < KILN_ENGINE_MAX_SECTIONS; i++) {
        uint8_t *e = image + KILN_EH_SECTIONS + i * KILN_ES_SIZE;
        uint64_t off = kiln_le64(e + KILN_ES_OFFSET), bytes = kiln_le64(e + KILN_ES_BYTES);
        if (off <= size && bytes <= size - off) kiln_put_le32(e + KILN_ES_CRC, kiln_crc32c(image + off, bytes));
    }
    seal_header(image);
}

/* ---- the weights section, written on its own thread ---- */

struct kiln_engine_weights_write {
    kiln_file_out *f;
    const void **chunks; /* the tensors with the zeros between them */
    size_t *sizes;
    int nchunks;
    uint64_t bytes;
    bool started;
    pthread_t thread;
    uint32_t crc;
    kiln_status status;
    char message[512]; /* the thread's error message */
};

/* The thread: the checksum of the section (itself on several threads), then the bytes, then an fsync,
 * which takes the bulk of the file's write-back out of the commit's. */
static void *weights_write_run(void *arg) {
    kiln_engine_weights_write *w = arg;
    double t0 = kiln_log_now_ms();
    w->crc = kiln_crc32c_gather(w->chunks, w->sizes, w->nchunks);
    double t1 = kiln_log_now_ms();
    w->status = kiln_file_out_write_at(w->f, KILN_ENGINE_WEIGHTS_ALIGN, w->chunks, w->sizes, w->nchunks);
    double t2 = kiln_log_now_ms();
    if (w->status == KILN_OK) w->status = kiln_file_out_sync(w->f);
    if (w->status != KILN_OK) snprintf(w->message, sizeof w->message, "%s", kiln_last_error());
    else
        KILN_LOG(KILN_LOG_VERBOSE, "engine write: weights section (%.2f MB) checksum %.1f ms, written in %.1f ms, "
                 "fsync %.1f ms", w->bytes / 1e6, t1 - t0, t2 - t1, kiln_log_now_ms() - t2);
    return NULL;
}

kiln_status kiln_engine_weights_write_start(kiln_file_out *f, const void *const *tensor_data, const size_t *tensor_bytes,
                                            const uint64_t *tensor_offsets, uint32_t ntensors, uint64_t weights_size,
                                            kiln_engine_weights_write **out) {
    *out = NULL;
    kiln_engine_weights_write *w = calloc(1, sizeof *w);
    int cap = 1 + 2 * (int)ntensors;
    if (w) w->chunks = malloc((size_t)cap * sizeof *w->chunks), w->sizes = malloc((size_t)cap * sizeof *w->sizes);
    if (!w || !w->chunks || !w->sizes) {
        if (w) free(w->chunks), free(w->sizes);
        free(w);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the engine");
    }
    int c = 0;
    uint64_t at = 0;
    for (uint32_t i = 0; i < ntensors; i++) {
        KILN_ASSERT(tensor_offsets[i] >= at && tensor_offsets[i] - at < KILN_ENGINE_WEIGHTS_ALIGN);
        w->chunks[c] = zeros, w->sizes[c++] = (size_t)(tensor_offsets[i] - at);
        w->chunks[c] = tensor_data[i], w->sizes[c++] = tensor_bytes[i];
        at = tensor_offsets[i] + tensor_bytes[i];
    }
    KILN_ASSERT(at <= weights_size && weights_size - at < KILN_ENGINE_WEIGHTS_ALIGN);
    w->chunks[c] = zeros, w->sizes[c++] = (size_t)(weights_size - at);
    w->nchunks = c;
    w->f = f;
    w->bytes = weights_size;
    w->started = pthread_create(&w->thread, NULL, weights_write_run, w) == 0;
    if (!w->started) weights_write_run(w); /* no thread to be had: write it now */
    *out = w;
    return KILN_OK;
}

kiln_status kiln_engine_weights_write_wait(kiln_engine_weights_write *w, uint32_t *crc) {
    if (!w) return KILN_OK;
    if (w->started) pthread_join(w->thread, NULL);
    kiln_status s = w->status == KILN_OK ? KILN_OK : kiln_error(w->status, "%s", w->message);
    if (crc) *crc = w->crc;
    free(w->chunks);
    free(w->sizes);
    free(w);
    return s;
}

/* ---- the header and the sections after the weights ---- */

kiln_status kiln_engine_write_rest(kiln_file_out *f, const kiln_engine_meta *meta, uint32_t kind, const uint32_t *ids,
                                   const void *const *data, const size_t *bytes, int n, uint32_t weights_crc,
                                   uint64_t weights_size) {
    KILN_ASSERT(n >= 1 && n <= KILN_ENGINE_MAX_SECTIONS);
    uint8_t header[KILN_ENGINE_HEADER_SIZE];
    memset(header, 0, sizeof header);
    const char *version = meta->kiln_version[0] ? meta->kiln_version : KILN_VERSION_STRING;
    KILN_TRY(put_header_str(header, KILN_EH_KILN_VERSION, version, sizeof meta->kiln_version, "kiln_version"));
    KILN_TRY(put_header_str(header, KILN_EH_TARGET, meta->target, sizeof meta->target, "target"));
    KILN_TRY(put_header_str(header, KILN_EH_DEVICE, meta->device, sizeof meta->device, "device"));
    KILN_TRY(put_header_str(header, KILN_EH_BUILD_OPTIONS, meta->build_options, sizeof meta->build_options,
                            "build_options"));
    KILN_TRY(put_header_str(header, KILN_EH_SOURCE, meta->source, sizeof meta->source, "source"));
    if (!meta->target[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "engine metadata has no target");

    const void *chunks[KILN_ENGINE_MAX_SECTIONS + 1];
    size_t sizes[KILN_ENGINE_MAX_SECTIONS + 1];
    uint64_t rest_at = KILN_ENGINE_WEIGHTS_ALIGN + weights_size, end = rest_at;
    for (int i = 0; i + 1 < n; i++) {
        put_section(header, i, ids[i], kiln_crc32c(data[i], bytes[i]), end, bytes[i]);
        chunks[i] = data[i], sizes[i] = bytes[i];
        end += bytes[i];
    }
    memcpy(header + KILN_EH_MAGIC, KILN_ENGINE_MAGIC, 8);
    kiln_put_le32(header + KILN_EH_FORMAT_VERSION, KILN_ENGINE_FORMAT_VERSION);
    kiln_put_le32(header + KILN_EH_HEADER_SIZE, KILN_ENGINE_HEADER_SIZE);
    kiln_put_le64(header + KILN_EH_FILE_SIZE, end);
    kiln_put_le64(header + KILN_EH_CREATED, meta->created_unix);
    kiln_put_le32(header + KILN_EH_PRECISION, (uint32_t)meta->precision);
    kiln_put_le32(header + KILN_EH_KIND, kind);
    kiln_put_le32(header + KILN_EH_SECTION_COUNT, (uint32_t)n);
    put_section(header, n - 1, ids[n - 1], weights_crc, KILN_ENGINE_WEIGHTS_ALIGN, weights_size);
    seal_header(header);
    KILN_TRY(kiln_file_out_write_at(f, rest_at, chunks, sizes, n - 1));
    const void *head[2] = {header, zeros};
    const size_t head_sizes[2] = {sizeof header, KILN_ENGINE_WEIGHTS_ALIGN - sizeof header};
    return kiln_file_out_write_at(f, 0, head, head_sizes, 2);
}

kiln_status kiln_engine_write_image(const char *path, const kiln_engine_meta *meta, uint32_t kind,
                                    const uint32_t *ids, const void *const *data, const size_t *bytes, int n,
                                    const void *const *tensor_data, const size_t *tensor_bytes,
                                    const uint64_t *tensor_offsets, uint32_t ntensors, uint64_t weights_size) {
    kiln_file_out *f;
    KILN_TRY(kiln_file_out_open(path, &f));
    kiln_engine_weights_write *w;
    uint32_t crc = 0;
    kiln_status s = kiln_engine_weights_write_start(f, tensor_data, tensor_bytes, tensor_offsets, ntensors,
                                                    weights_size, &w);
    if (s == KILN_OK) s = kiln_engine_weights_write_wait(w, &crc);
    if (s == KILN_OK) s = kiln_engine_write_rest(f, meta, kind, ids, data, bytes, n, crc, weights_size);
    if (s != KILN_OK) {
        kiln_file_out_abort(f);
        return s;
    }
    return kiln_file_out_commit(f);
}
