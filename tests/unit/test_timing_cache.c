/* test_timing_cache.c — tests of the files auto-tuning writes, without a GPU: the timing cache
 * (src/engine/timing_cache.c) round-trips its records, misses keys of another GPU or library version,
 * is ignored (not an error) when it is cut at any length, has any byte flipped, is of another format
 * version or is not a cache at all, and is updated atomically; the engine's tactics table
 * (engine_write.c / engine_read.c) round-trips and refuses a bad record.
 * usage: test_timing_cache REPO_DIR */
#include "check.h"
#include "core/status.h"
#include "engine/engine_format.h"
#include "engine/engine_layout.h"
#include "engine/timing_cache.h"
#include "frontends/onnx/onnx_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENV_A "NVIDIA H200 sm_90, driver 12080, runtime 13000, cublasLt 130000, cudnn 91900"
#define ENV_B "NVIDIA H100 80GB HBM3 sm_90, driver 12080, runtime 13000, cublasLt 130000, cudnn 91900"
#define LAYER_MM " | MatMul level 2 float16[8x128x768] const float16[768x768] float16[8x128x768]"
#define LAYER_CONV " | Conv level 2 float16[1x3x32x32] const float16[16x3x3x3] float16[1x16x32x32] pads=1,1,1,1"
#define LLM_GEMV " | llm.gemv | float16 N 2304 K 768 n 3 out float16"

static kiln_tactic make_tactic(uint32_t kind, int algo, float ms, int seed) {
    kiln_tactic t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    t.algo = algo;
    t.math = kind == KILN_TACTIC_CUDNN ? 1 : 0;
    t.heuristic_index = seed % 5;
    t.time_ms = ms;
    t.heuristic_ms = ms * 1.25f;
    for (size_t i = 0; kind == KILN_TACTIC_CUBLASLT && i < sizeof t.blob; i++) t.blob[i] = (uint8_t)(seed * 31 + i * 7);
    return t;
}

static bool same_tactic(const kiln_tactic *a, const kiln_tactic *b) { return a && b && !memcmp(a, b, sizeof *a); }

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void write_all(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* Four records (the LLM runtime's GEMV configuration among them) saved and loaded back; keys of another
 * GPU miss. */
static void test_round_trip(const char *path) {
    kiln_timing_cache c = {0};
    kiln_tactic mm = make_tactic(KILN_TACTIC_CUBLASLT, 23, 0.0123f, 1), mm_b = make_tactic(KILN_TACTIC_CUBLASLT, 6, 0.02f, 2);
    kiln_tactic conv = make_tactic(KILN_TACTIC_CUDNN, 1, 0.5f, 3), gemv = make_tactic(KILN_TACTIC_LLM_GEMV, 5, 0.004f, 4);
    REQUIRE_OK(kiln_timing_cache_put(&c, ENV_A LAYER_MM, &mm));
    REQUIRE_OK(kiln_timing_cache_put(&c, ENV_B LAYER_MM, &mm_b));
    REQUIRE_OK(kiln_timing_cache_put(&c, ENV_A LAYER_CONV, &conv));
    REQUIRE_OK(kiln_timing_cache_put(&c, ENV_A LAYER_CONV, &conv)); /* replaces */
    REQUIRE_OK(kiln_timing_cache_put(&c, ENV_A LLM_GEMV, &gemv));
    CHECK(c.n == 4);
    REQUIRE_OK(kiln_timing_cache_save(&c, path));
    kiln_timing_cache_free(&c);

    kiln_timing_cache r = {0};
    REQUIRE_OK(kiln_timing_cache_load(&r, path));
    CHECK(r.n == 4 && r.added == 0);
    CHECK(same_tactic(kiln_timing_cache_find(&r, ENV_A LAYER_MM), &mm));
    CHECK(same_tactic(kiln_timing_cache_find(&r, ENV_B LAYER_MM), &mm_b));
    CHECK(same_tactic(kiln_timing_cache_find(&r, ENV_A LAYER_CONV), &conv));
    CHECK(same_tactic(kiln_timing_cache_find(&r, ENV_A LLM_GEMV), &gemv));
    /* another GPU, another library version, another tuning level: misses */
    CHECK(!kiln_timing_cache_find(&r, ENV_B LAYER_CONV));
    CHECK(!kiln_timing_cache_find(&r, "NVIDIA H200 sm_90, driver 12080, runtime 13000, cublasLt 130100, cudnn 91900" LAYER_MM));
    CHECK(!kiln_timing_cache_find(&r, ENV_A " | MatMul level 3 float16[8x128x768] const float16[768x768] float16[8x128x768]"));
    kiln_timing_cache_free(&r);

    char long_key[KILN_TIMING_CACHE_MAX_KEY + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = 0;
    CHECK(kiln_timing_cache_put(&r, long_key, &mm) == KILN_ERR_INVALID_ARGUMENT);
    kiln_timing_cache_free(&r);
}

/* Every prefix of the file, and every single-byte change of it, is refused by the parser and ignored
 * (empty cache, KILN_OK) by the loader. */
static void test_damage(const char *path, const char *scratch) {
    size_t size;
    unsigned char *img = read_all(path, &size);
    CHECK(img != NULL && size > KILN_TIMING_CACHE_HEADER);
    if (!img) return;
    int accepted = 0;
    for (size_t len = 0; len < size; len++) {
        kiln_timing_cache c = {0};
        if (kiln_timing_cache_parse(&c, img, len, "cut") == KILN_OK || c.n) accepted++;
        kiln_timing_cache_free(&c);
        if (len % 37 == 0 || len + 1 == size) { /* through the loader too */
            write_all(scratch, img, len);
            kiln_timing_cache l = {0};
            CHECK(kiln_timing_cache_load(&l, scratch) == KILN_OK && l.n == 0);
            kiln_timing_cache_free(&l);
        }
    }
    CHECK(accepted == 0);
    accepted = 0;
    for (size_t i = 0; i < size; i++) {
        img[i] ^= 0x41;
        kiln_timing_cache c = {0};
        if (kiln_timing_cache_parse(&c, img, size, "flipped") == KILN_OK || c.n) accepted++;
        kiln_timing_cache_free(&c);
        img[i] ^= 0x41;
    }
    CHECK(accepted == 0);
    kiln_timing_cache c = {0};
    CHECK(kiln_timing_cache_parse(&c, img, size, "intact") == KILN_OK && c.n == 4);
    kiln_timing_cache_free(&c);

    kiln_put_le32(img + 8, KILN_TIMING_CACHE_VERSION + 1); /* a foreign format version */
    CHECK(kiln_timing_cache_parse(&c, img, size, "future") == KILN_ERR_ENGINE_MISMATCH && c.n == 0);
    CHECK(strstr(kiln_last_error(), "format version") != NULL);
    write_all(scratch, img, size);
    CHECK(kiln_timing_cache_load(&c, scratch) == KILN_OK && c.n == 0);
    write_all(scratch, "{\"not\": \"a cache\"}", 18);
    CHECK(kiln_timing_cache_load(&c, scratch) == KILN_OK && c.n == 0);
    CHECK(kiln_timing_cache_load(&c, "/nonexistent/dir/cache.bin") == KILN_OK && c.n == 0);
    kiln_timing_cache_free(&c);
    free(img);
}

/* A load, one more record, a save: the file then holds all five, written through a temporary file
 * renamed over it (none is left behind); a save that cannot write leaves the old file as it was. */
static void test_atomic_update(const char *path, const char *dir) {
    kiln_timing_cache c = {0};
    REQUIRE_OK(kiln_timing_cache_load(&c, path));
    CHECK(c.n == 4);
    kiln_tactic t = make_tactic(KILN_TACTIC_CUBLASLT, 11, 0.3f, 4);
    REQUIRE_OK(kiln_timing_cache_put(&c, ENV_B LAYER_CONV, &t));
    CHECK(c.added == 1);
    REQUIRE_OK(kiln_timing_cache_save(&c, path));
    kiln_timing_cache_free(&c);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.kiln.tmp%d", path, (int)getpid());
    CHECK(access(tmp, F_OK) != 0);
    REQUIRE_OK(kiln_timing_cache_load(&c, path));
    CHECK(c.n == 5 && same_tactic(kiln_timing_cache_find(&c, ENV_B LAYER_CONV), &t));
    size_t before_size, after_size;
    unsigned char *before = read_all(path, &before_size);
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/no-such-dir/cache.bin", dir);
    CHECK(kiln_timing_cache_save(&c, bad) == KILN_ERR_IO);
    unsigned char *after = read_all(path, &after_size);
    CHECK(before && after && before_size == after_size && !memcmp(before, after, before_size));
    free(before);
    free(after);
    kiln_timing_cache_free(&c);
}

/* An engine written with tactics on two nodes reads them back; one without reads back none; a tactic
 * of an unknown kind is refused; an engine of two profiles keeps a tactic set for each. */
static void test_engine_tactics(const char *repo, const char *dir) {
    char model[4200], path[4200];
    snprintf(model, sizeof model, "%s/models/sample_cnn.onnx", repo);
    snprintf(path, sizeof path, "%s/tactics.kiln", dir);
    kiln_graph *g;
    REQUIRE_OK(kiln_onnx_import(model, &g));
    CHECK(g->nnodes >= 3);
    kiln_engine_meta meta;
    memset(&meta, 0, sizeof meta);
    snprintf(meta.target, sizeof meta.target, "cuda");
    snprintf(meta.device, sizeof meta.device, "NVIDIA H200");
    kiln_tactic *t = calloc((size_t)g->nnodes, sizeof *t);
    t[0] = make_tactic(KILN_TACTIC_CUDNN, 1, 0.25f, 1);
    t[g->nnodes - 1] = make_tactic(KILN_TACTIC_CUBLASLT, 23, 0.01f, 2);
    meta.tactics = t;
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path));
    kiln_graph *r;
    kiln_engine_meta rm;
    REQUIRE_OK(kiln_engine_file_read(path, "cuda", &r, &rm));
    CHECK(rm.tactics != NULL && r->nnodes == g->nnodes);
    for (int i = 0; rm.tactics && i < g->nnodes; i++) CHECK(same_tactic(&rm.tactics[i], &t[i]));
    kiln_graph_free(r);

    size_t size;
    unsigned char *img = read_all(path, &size);
    /* the last record's kind: the graph section ends with it (kind at record byte 8, blob last) */
    kiln_engine_meta m2;
    uint64_t gend = kiln_le64(img + KILN_EH_SECTIONS + KILN_ES_OFFSET) + kiln_le64(img + KILN_EH_SECTIONS + KILN_ES_BYTES);
    size_t kind_at = (size_t)gend - KILN_TACTIC_RECORD_BYTES + 8;
    CHECK(kiln_le32(img + kind_at) == KILN_TACTIC_CUBLASLT);
    kiln_put_le32(img + kind_at, 7);
    kiln_engine_reseal(img, size);
    kiln_graph *bad = NULL;
    kiln_status s = kiln_engine_buffer_read(img, size, NULL, &bad, &m2);
    CHECK(s == KILN_ERR_PARSE && strstr(kiln_last_error(), "tactic kind") != NULL);
    kiln_graph_free(bad);
    free(img);

    meta.tactics = NULL;
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path));
    REQUIRE_OK(kiln_engine_file_read(path, NULL, &r, &rm));
    CHECK(rm.tactics == NULL);
    kiln_graph_free(r);

    /* two profiles (the input unconstrained in both), a tactic set each: node 0 in profile 1 only */
    kiln_profile_range ranges[2];
    memset(ranges, 0, sizeof ranges);
    ranges[0].ndim = ranges[1].ndim = -1;
    CHECK(g->ninputs == 1);
    meta.nprofiles = 2;
    meta.profiles = ranges;
    kiln_tactic *t2 = calloc(2 * (size_t)g->nnodes, sizeof *t2);
    t2[g->nnodes - 1] = make_tactic(KILN_TACTIC_CUBLASLT, 23, 0.01f, 2);
    t2[g->nnodes] = make_tactic(KILN_TACTIC_CUDNN, 6, 0.5f, 3);
    meta.tactics = t2;
    REQUIRE_OK(kiln_engine_file_write(g, &meta, path));
    REQUIRE_OK(kiln_engine_file_read(path, NULL, &r, &rm));
    CHECK(rm.nprofiles == 2 && rm.tactics != NULL);
    for (int i = 0; rm.tactics && i < 2 * g->nnodes; i++) CHECK(same_tactic(&rm.tactics[i], &t2[i]));
    kiln_graph_free(r);
    free(t2);
    unlink(path);
    free(t);
    kiln_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_timing_cache REPO_DIR\n");
        return 2;
    }
    kiln_log_set_level(KILN_LOG_ERROR); /* the ignored caches warn on purpose */
    char dir[] = "/tmp/kiln-timing-cache-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[4200], scratch[4200];
    snprintf(path, sizeof path, "%s/cache.bin", dir);
    snprintf(scratch, sizeof scratch, "%s/scratch.bin", dir);
    test_round_trip(path);
    test_damage(path, scratch);
    test_atomic_update(path, dir);
    test_engine_tactics(argv[1], dir);
    unlink(path);
    unlink(scratch);
    rmdir(dir);
    return checks_report("test_timing_cache");
}
