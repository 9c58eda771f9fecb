/* cpu_scratch.c — kiln_cpu_scratch (cpu_scratch.h): one pthread key per slot, each buffer freed
 * when its thread exits. */
#include "backends/cpu/cpu_scratch.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct scratch {
    size_t cap;
    float data[];
} scratch;

static pthread_key_t g_keys[KILN_SCRATCH_SLOTS];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void keys_make(void) {
    for (int i = 0; i < KILN_SCRATCH_SLOTS; i++) pthread_key_create(&g_keys[i], free);
}

float *kiln_cpu_scratch(kiln_cpu_scratch_slot slot, size_t count) {
    pthread_once(&g_once, keys_make);
    scratch *s = pthread_getspecific(g_keys[slot]);
    if (s && s->cap >= count) return s->data;
    free(s);
    s = malloc(sizeof *s + count * sizeof(float));
    pthread_setspecific(g_keys[slot], s);
    if (!s) return NULL;
    s->cap = count;
    return s->data;
}
