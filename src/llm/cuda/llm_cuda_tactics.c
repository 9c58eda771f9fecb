/* llm_cuda_tactics.c — the LLM runtime's tactics in the timing cache that kiln build --timing-cache
 * keeps (engine/timing_cache.h): the cuBLASLt algorithm and the GEMV configuration chosen per product
 * shape, keyed by the GPU and library versions as the tensor engine's records are, so that a model
 * created again with the same file times nothing it has timed before. */
#include "llm/cuda/llm_cuda_internal.h"

#include "core/log.h"
#include "core/status.h"
#include "engine/timing_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status llmc_tactics_open(kiln_llm_cuda *g) {
    if (!g->opt.timing_cache) return KILN_OK;
    KILN_TRY(kiln_cuda_env_key(g->opt.device, g->env, sizeof g->env));
    g->tcache_path = strdup(g->opt.timing_cache);
    g->tcache = calloc(1, sizeof *g->tcache);
    if (!g->tcache_path || !g->tcache) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    return kiln_timing_cache_load(g->tcache, g->tcache_path);
}

void llmc_tactics_close(kiln_llm_cuda *g) {
    if (g->tcache) kiln_timing_cache_free(g->tcache);
    free(g->tcache);
    free(g->tcache_path);
    g->tcache = NULL;
    g->tcache_path = NULL;
}

/* The key of (what, shape) into buf; false when it does not fit. */
static bool make_key(const kiln_llm_cuda *g, const char *what, const char *shape, char *buf, size_t cap) {
    const int len = snprintf(buf, cap, "%s | %s | %s", g->env, what, shape);
    return len > 0 && (size_t)len < cap;
}

const kiln_tactic *llmc_tactic_find(const kiln_llm_cuda *g, const char *what, const char *shape) {
    char key[1024];
    if (!g->tcache || !make_key(g, what, shape, key, sizeof key)) return NULL;
    return kiln_timing_cache_find(g->tcache, key);
}

void llmc_tactic_put(kiln_llm_cuda *g, const char *what, const char *shape, const kiln_tactic *t) {
    char key[1024];
    if (!g->tcache) return;
    if (!make_key(g, what, shape, key, sizeof key) || kiln_timing_cache_put(g->tcache, key, t) != KILN_OK)
        KILN_LOG(KILN_LOG_WARN, "llm cuda: the %s tactic of %s is not kept in the timing cache", what, shape);
}

void llmc_tactics_save(kiln_llm_cuda *g) {
    if (!g->tcache || g->tcache->added == g->tcache_saved) return;
    g->tcache_saved = g->tcache->added;
    if (kiln_timing_cache_save(g->tcache, g->tcache_path) != KILN_OK)
        KILN_LOG(KILN_LOG_WARN, "%s (the model is not affected)", kiln_last_error());
}
