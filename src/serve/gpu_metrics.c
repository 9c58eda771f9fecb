/* gpu_metrics.c — GPU gauges for /metrics through NVML, opened with dlopen at run time so that no
 * build of kiln links against the driver: on a machine without libnvidia-ml.so.1 (the CPU build,
 * CI) the section is simply absent. Names follow Triton's (nv_gpu_*), labelled by GPU index. */
#include "serve/http.h"

#include <dlfcn.h>
#include <pthread.h>

typedef int (*nvml_fn0)(void);
typedef int (*nvml_count_fn)(unsigned *);
typedef int (*nvml_handle_fn)(unsigned, void **);
typedef int (*nvml_util_fn)(void *, unsigned[2]);
typedef int (*nvml_mem_fn)(void *, unsigned long long[3]);
typedef int (*nvml_uint_fn)(void *, unsigned *);
typedef int (*nvml_temp_fn)(void *, int, unsigned *);

static struct {
    pthread_once_t once;
    bool ok;
    nvml_count_fn count;
    nvml_handle_fn handle;
    nvml_util_fn util;
    nvml_mem_fn mem;
    nvml_uint_fn power;
    nvml_temp_fn temp;
} nvml = {.once = PTHREAD_ONCE_INIT};

static void open_nvml(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    nvml_fn0 init = (nvml_fn0)dlsym(lib, "nvmlInit_v2");
    nvml.count = (nvml_count_fn)dlsym(lib, "nvmlDeviceGetCount_v2");
    nvml.handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml.util = (nvml_util_fn)dlsym(lib, "nvmlDeviceGetUtilizationRates");
    nvml.mem = (nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    nvml.power = (nvml_uint_fn)dlsym(lib, "nvmlDeviceGetPowerUsage");
    nvml.temp = (nvml_temp_fn)dlsym(lib, "nvmlDeviceGetTemperature");
    nvml.ok = init && nvml.count && nvml.handle && nvml.util && nvml.mem && nvml.power && nvml.temp && init() == 0;
}

void serve_gpu_metrics(kiln_strbuf *out) {
    pthread_once(&nvml.once, open_nvml);
    unsigned n = 0;
    if (!nvml.ok || nvml.count(&n) != 0 || n == 0) return;
    kiln_strbuf_puts(out, "# HELP nv_gpu_utilization GPU utilization (0..1).\n# TYPE nv_gpu_utilization gauge\n"
                          "# HELP nv_gpu_memory_used_bytes GPU memory in use.\n# TYPE nv_gpu_memory_used_bytes gauge\n"
                          "# HELP nv_gpu_memory_total_bytes GPU memory.\n# TYPE nv_gpu_memory_total_bytes gauge\n"
                          "# HELP nv_gpu_power_usage GPU power draw in watts.\n# TYPE nv_gpu_power_usage gauge\n"
                          "# HELP nv_gpu_temperature_celsius GPU temperature.\n# TYPE nv_gpu_temperature_celsius gauge\n");
    for (unsigned i = 0; i < n; i++) {
        void *h;
        unsigned util[2], mw, temp;
        unsigned long long mem[3]; /* total, free, used */
        if (nvml.handle(i, &h)) continue;
        if (!nvml.util(h, util)) kiln_strbuf_printf(out, "nv_gpu_utilization{gpu=\"%u\"} %.2f\n", i, util[0] / 100.0);
        if (!nvml.mem(h, mem))
            kiln_strbuf_printf(out, "nv_gpu_memory_used_bytes{gpu=\"%u\"} %llu\nnv_gpu_memory_total_bytes{gpu=\"%u\"} %llu\n",
                               i, mem[2], i, mem[0]);
        if (!nvml.power(h, &mw)) kiln_strbuf_printf(out, "nv_gpu_power_usage{gpu=\"%u\"} %.3f\n", i, mw / 1000.0);
        if (!nvml.temp(h, 0, &temp)) kiln_strbuf_printf(out, "nv_gpu_temperature_celsius{gpu=\"%u\"} %u\n", i, temp);
    }
}
