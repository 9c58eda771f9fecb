/* timing_cache.c — reading, looking up and writing the timing cache of auto-tuning (layout: the
 * "Timing cache" part of docs/cuda.md): a 32-byte header (magic, format version, record count,
 * payload size, CRC-32C of the payload), then the records, each a key and a tactic. Every field is
 * little-endian and written explicitly. The reader accepts a file only when all of it checks out, so
 * a cut or corrupted cache is ignored as a whole: tuning then times what it needs again. */
#include "engine/timing_cache.h"

#include "core/checksum.h"
#include "core/file.h"
#include "core/log.h"
#include "core/status.h"
#include "engine/engine_layout.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Header fields. */
enum {
    TC_MAGIC = 0,    /* u8[8] */
    TC_VERSION = 8,  /* u32 */
    TC_COUNT = 12,   /* u32 records */
    TC_PAYLOAD = 16, /* u64 bytes after the header */
    TC_CRC = 24,     /* u32 CRC-32C of the payload */
    TC_ZERO = 28,    /* u32 zero */
};

/* A record's tactic: kind, algo, math, heuristic index, time, heuristic time (u32 each), blob. */
enum { TC_TACTIC_BYTES = 6 * 4 + 64 };

static kiln_status bad(const char *what, const char *why) {
    return kiln_error(KILN_ERR_PARSE, "timing cache %s is corrupted: %s", what, why);
}

void kiln_timing_cache_free(kiln_timing_cache *c) {
    for (int i = 0; i < c->n; i++) free(c->recs[i].key);
    free(c->recs);
    memset(c, 0, sizeof *c);
}

static int find_index(const kiln_timing_cache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->recs[i].key, key)) return i;
    return -1;
}

const kiln_tactic *kiln_timing_cache_find(const kiln_timing_cache *c, const char *key) {
    int i = find_index(c, key);
    return i < 0 ? NULL : &c->recs[i].tactic;
}

/* Adds or replaces key's record without counting it as new. */
static kiln_status put(kiln_timing_cache *c, const char *key, size_t len, const kiln_tactic *t) {
    if (len > KILN_TIMING_CACHE_MAX_KEY)
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "timing cache key of %zu bytes (at most %d)", len, KILN_TIMING_CACHE_MAX_KEY);
    char *copy = malloc(len + 1);
    if (!copy) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in the timing cache");
    memcpy(copy, key, len);
    copy[len] = 0;
    int i = find_index(c, copy);
    if (i >= 0) {
        free(c->recs[i].key);
    } else {
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 64;
            kiln_timing_record *r = realloc(c->recs, (size_t)cap * sizeof *r);
            if (!r) {
                free(copy);
                return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory in the timing cache");
            }
            c->recs = r;
            c->cap = cap;
        }
        i = c->n++;
    }
    c->recs[i].key = copy;
    c->recs[i].tactic = *t;
    return KILN_OK;
}

kiln_status kiln_timing_cache_put(kiln_timing_cache *c, const char *key, const kiln_tactic *t) {
    KILN_TRY(put(c, key, strlen(key), t));
    c->added++;
    return KILN_OK;
}

static void get_tactic(const uint8_t *p, kiln_tactic *t) {
    uint32_t f[6];
    for (int j = 0; j < 6; j++) f[j] = kiln_le32(p + 4 * j);
    memset(t, 0, sizeof *t);
    t->kind = f[0];
    t->algo = (int32_t)f[1];
    t->math = (int32_t)f[2];
    t->heuristic_index = (int32_t)f[3];
    memcpy(&t->time_ms, &f[4], 4);
    memcpy(&t->heuristic_ms, &f[5], 4);
    memcpy(t->blob, p + 24, sizeof t->blob);
}

static void put_tactic(uint8_t *p, const kiln_tactic *t) {
    uint32_t f[6] = {t->kind, (uint32_t)t->algo, (uint32_t)t->math, (uint32_t)t->heuristic_index, 0, 0};
    memcpy(&f[4], &t->time_ms, 4);
    memcpy(&f[5], &t->heuristic_ms, 4);
    for (int j = 0; j < 6; j++) kiln_put_le32(p + 4 * j, f[j]);
    memcpy(p + 24, t->blob, sizeof t->blob);
}

/* The records of a payload whose checksum matched: count records, consuming it exactly. */
static kiln_status parse_records(kiln_timing_cache *c, const uint8_t *p, size_t size, uint32_t count, const char *what) {
    size_t pos = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (size - pos < 4) return bad(what, "a record is cut");
        uint32_t len = kiln_le32(p + pos);
        pos += 4;
        if (len == 0 || len > KILN_TIMING_CACHE_MAX_KEY || size - pos < (size_t)len + TC_TACTIC_BYTES)
            return bad(what, "a record's key length is out of range");
        const char *key = (const char *)p + pos;
        if (memchr(key, 0, len)) return bad(what, "a key holds a NUL byte");
        kiln_tactic t;
        get_tactic(p + pos + len, &t);
        if (t.kind != KILN_TACTIC_CUBLASLT && t.kind != KILN_TACTIC_CUDNN && t.kind != KILN_TACTIC_LLM_GEMV &&
            t.kind != KILN_TACTIC_PATH)
            return bad(what, "a record has an unknown tactic kind");
        KILN_TRY(put(c, key, len, &t));
        pos += (size_t)len + TC_TACTIC_BYTES;
    }
    if (pos != size) return bad(what, "bytes follow the last record");
    return KILN_OK;
}

kiln_status kiln_timing_cache_parse(kiln_timing_cache *c, const void *data, size_t size, const char *what) {
    const uint8_t *d = data;
    if (size < 8 || memcmp(d, KILN_TIMING_CACHE_MAGIC, 8) != 0)
        return kiln_error(KILN_ERR_PARSE, "%s is not a kiln timing cache (no \"%s\" at its start)", what, KILN_TIMING_CACHE_MAGIC);
    if (size < KILN_TIMING_CACHE_HEADER) return bad(what, "the header is cut");
    uint32_t version = kiln_le32(d + TC_VERSION);
    if (version != KILN_TIMING_CACHE_VERSION)
        return kiln_error(KILN_ERR_ENGINE_MISMATCH, "timing cache %s has format version %u, this kiln reads %d", what, version,
                          KILN_TIMING_CACHE_VERSION);
    uint64_t payload = kiln_le64(d + TC_PAYLOAD);
    if (payload != size - KILN_TIMING_CACHE_HEADER) return bad(what, "its size is not the one recorded");
    if (kiln_le32(d + TC_ZERO) != 0) return bad(what, "reserved header bytes are not zero");
    if (kiln_crc32c(d + KILN_TIMING_CACHE_HEADER, (size_t)payload) != kiln_le32(d + TC_CRC))
        return bad(what, "the checksum does not match");
    kiln_status s = parse_records(c, d + KILN_TIMING_CACHE_HEADER, (size_t)payload, kiln_le32(d + TC_COUNT), what);
    if (s != KILN_OK) kiln_timing_cache_free(c);
    return s;
}

kiln_status kiln_timing_cache_load(kiln_timing_cache *c, const char *path) {
    kiln_timing_cache_free(c);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        KILN_LOG(KILN_LOG_VERBOSE, "timing cache %s does not exist yet: it will be written after tuning", path);
        return KILN_OK;
    }
    kiln_file_map m;
    kiln_status s = kiln_file_map_open_for_update(path, &m);
    if (s == KILN_OK) {
        s = kiln_timing_cache_parse(c, m.data, m.size, path);
        kiln_file_unmap(&m);
    }
    if (s == KILN_ERR_OUT_OF_MEMORY) return s;
    if (s != KILN_OK) KILN_LOG(KILN_LOG_WARN, "%s: ignoring the timing cache (it will be rewritten)", kiln_last_error());
    else KILN_LOG(KILN_LOG_VERBOSE, "timing cache %s: %d records", path, c->n);
    return KILN_OK;
}

kiln_status kiln_timing_cache_save(const kiln_timing_cache *c, const char *path) {
    size_t payload = 0;
    for (int i = 0; i < c->n; i++) payload += 4 + strlen(c->recs[i].key) + TC_TACTIC_BYTES;
    uint8_t *buf = calloc(1, KILN_TIMING_CACHE_HEADER + payload);
    if (!buf) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory writing the timing cache");
    uint8_t *p = buf + KILN_TIMING_CACHE_HEADER;
    for (int i = 0; i < c->n; i++) {
        size_t len = strlen(c->recs[i].key);
        kiln_put_le32(p, (uint32_t)len);
        memcpy(p + 4, c->recs[i].key, len);
        put_tactic(p + 4 + len, &c->recs[i].tactic);
        p += 4 + len + TC_TACTIC_BYTES;
    }
    memcpy(buf + TC_MAGIC, KILN_TIMING_CACHE_MAGIC, 8);
    kiln_put_le32(buf + TC_VERSION, KILN_TIMING_CACHE_VERSION);
    kiln_put_le32(buf + TC_COUNT, (uint32_t)c->n);
    kiln_put_le64(buf + TC_PAYLOAD, payload);
    kiln_put_le32(buf + TC_CRC, kiln_crc32c(buf + KILN_TIMING_CACHE_HEADER, payload));
    const void *chunks[1] = {buf};
    size_t sizes[1] = {KILN_TIMING_CACHE_HEADER + payload};
    kiln_status s = kiln_file_write_atomic(path, chunks, sizes, 1);
    free(buf);
    return s == KILN_OK ? s : kiln_error_prefix(s, "cannot write the timing cache");
}
