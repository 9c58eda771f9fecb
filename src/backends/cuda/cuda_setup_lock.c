/* cuda_setup_lock.c — the cuda backend's process-wide setup lock (cuda_internal.h says what it guards:
 * CUDA graph captures against calls from other threads that would break them). */
#include "backends/cuda/cuda_internal.h"

#include <pthread.h>

static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

void kiln_cuda_setup_lock(void) { pthread_mutex_lock(&setup_lock); }
void kiln_cuda_setup_unlock(void) { pthread_mutex_unlock(&setup_lock); }
