/* env_overrides.c — applies the test-only environment variables to build and context options. */
#include "runtime/env_overrides.h"

#include "core/log.h"

#include <stdlib.h>
#include <string.h>

/* ON for "1", OFF for "0", else unchanged. */
static kiln_switch switch_from(const char *name, kiln_switch current) {
    const char *v = getenv(name);
    if (v && !strcmp(v, "1")) return KILN_SWITCH_ON;
    if (v && !strcmp(v, "0")) return KILN_SWITCH_OFF;
    return current;
}

void kiln_build_options_apply_env(kiln_build_options *o) {
    o->channels_last = switch_from("KILN_CHANNELS_LAST", o->channels_last);
    o->cpu_packed_weights = switch_from("KILN_CPU_PACKED_WEIGHTS", o->cpu_packed_weights);
    const char *views = getenv("KILN_CUDA_VIEWS");
    if (views && !strcmp(views, "0")) o->cuda_views = KILN_SWITCH_OFF;
    const char *fusion = getenv("KILN_CUDA_FUSION");
    if (fusion && *fusion && o->target && !strcmp(o->target, "cuda")) {
        if (!strcmp(fusion, "0") || !strcmp(fusion, "off")) o->fusion = KILN_SWITCH_OFF;
        else if (!strcmp(fusion, "1") || !strcmp(fusion, "all")) o->fusion = KILN_SWITCH_ON;
        else o->unfused_ops = fusion;
    }
    const char *ws = getenv("KILN_CUDA_WORKSPACE_MB");
    if (ws && *ws) {
        char *end = NULL;
        long mb = strtol(ws, &end, 10);
        if (end && !*end && mb >= 1 && mb <= 65536) o->cuda_workspace_mb = (int)mb;
        else KILN_LOG(KILN_LOG_WARN, "KILN_CUDA_WORKSPACE_MB='%s' is not a number of MiB in 1..65536: ignored", ws);
    }
}

void kiln_context_options_apply_env(kiln_context_options *o) {
    const char *graphs = getenv("KILN_CUDA_GRAPHS");
    if (graphs && !strcmp(graphs, "0")) o->cuda_graphs = KILN_SWITCH_OFF;
}
