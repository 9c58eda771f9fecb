/* bench_env.c — the environment kiln bench records: CPU model and threads, host and OS, and for a GPU
 * its identity (bench_cuda.c) and, through NVML, the driver version, clocks, power, temperature,
 * throttle reasons and utilization. NVML is loaded at run time (dlopen("libnvidia-ml.so.1")), so kiln
 * runs where it is missing: every NVML field is then "absent" in the reports. */
#include "bench/bench.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

typedef struct nvml_util {
    unsigned gpu, memory;
} nvml_util;
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;

/* The NVML entry points kiln uses (signatures of nvml.h; a status of 0 is success). */
typedef struct nvml_api {
    bool loaded;
    char error[128];
    int (*init)(void);
    int (*by_pci)(const char *, void **);
    int (*by_index)(unsigned, void **);
    int (*name)(void *, char *, unsigned);
    int (*clock)(void *, int, unsigned *);
    int (*power)(void *, unsigned *);
    int (*temperature)(void *, int, unsigned *);
    int (*throttle)(void *, unsigned long long *);
    int (*util)(void *, nvml_util *);
    int (*memory)(void *, nvml_memory *);
    int (*driver)(char *, unsigned);
} nvml_api;

static nvml_api g_nvml; /* filled once (pthread_once): a table of library entry points, not state */
static pthread_once_t g_nvml_once = PTHREAD_ONCE_INIT;

static void nvml_load(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_nvml.error, sizeof g_nvml.error, "libnvidia-ml.so.1 not found");
        return;
    }
    g_nvml.init = (int (*)(void))dlsym(h, "nvmlInit_v2");
    g_nvml.by_pci = (int (*)(const char *, void **))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    g_nvml.by_index = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    g_nvml.name = (int (*)(void *, char *, unsigned))dlsym(h, "nvmlDeviceGetName");
    g_nvml.clock = (int (*)(void *, int, unsigned *))dlsym(h, "nvmlDeviceGetClockInfo");
    g_nvml.power = (int (*)(void *, unsigned *))dlsym(h, "nvmlDeviceGetPowerUsage");
    g_nvml.temperature = (int (*)(void *, int, unsigned *))dlsym(h, "nvmlDeviceGetTemperature");
    g_nvml.throttle = (int (*)(void *, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!g_nvml.throttle) g_nvml.throttle = (int (*)(void *, unsigned long long *))dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons");
    g_nvml.util = (int (*)(void *, nvml_util *))dlsym(h, "nvmlDeviceGetUtilizationRates");
    g_nvml.memory = (int (*)(void *, nvml_memory *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    g_nvml.driver = (int (*)(char *, unsigned))dlsym(h, "nvmlSystemGetDriverVersion");
    if (!g_nvml.init || !g_nvml.by_index || !g_nvml.clock || !g_nvml.util || !g_nvml.memory) {
        snprintf(g_nvml.error, sizeof g_nvml.error, "libnvidia-ml.so.1 lacks the NVML functions kiln needs");
        return;
    }
    int rc = g_nvml.init();
    if (rc != 0) {
        snprintf(g_nvml.error, sizeof g_nvml.error, "nvmlInit failed (NVML status %d)", rc);
        return;
    }
    g_nvml.loaded = true;
}

/* CPU model from /proc/cpuinfo ("model name"), else the machine name. */
static void cpu_model(char *buf, size_t cap) {
    struct utsname u;
    snprintf(buf, cap, "%s CPU", uname(&u) == 0 ? u.machine : "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(buf, cap, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

void kiln_bench_env_init(kiln_bench_env *env, const char *target, int device) {
    memset(env, 0, sizeof *env);
    cpu_model(env->cpu_model, sizeof env->cpu_model);
    env->cpu_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(env->host, sizeof env->host, "%.63s", u.nodename);
        snprintf(env->os, sizeof env->os, "%.40s %.80s", u.sysname, u.release);
    }
    env->util_mean_pct = env->util_max_pct = env->mem_used_peak_mb = -1;
    if (!target || strcmp(target, "cuda")) return;
    env->gpu = true;
    if (kiln_bench_cuda_info(device, env) != KILN_OK) return;
    pthread_once(&g_nvml_once, nvml_load);
    if (!g_nvml.loaded) {
        snprintf(env->nvml_error, sizeof env->nvml_error, "%s", g_nvml.error);
        return;
    }
    void *dev = NULL;
    int rc = env->gpu_pci[0] && g_nvml.by_pci ? g_nvml.by_pci(env->gpu_pci, &dev) : g_nvml.by_index((unsigned)device, &dev);
    if (rc != 0) {
        snprintf(env->nvml_error, sizeof env->nvml_error, "NVML found no handle for the GPU (status %d)", rc);
        return;
    }
    env->nvml = true;
    env->nvml_device = dev;
    if (g_nvml.driver) g_nvml.driver(env->driver, sizeof env->driver);
}

void kiln_bench_env_sample(const kiln_bench_env *env, kiln_gpu_sample *s) {
    memset(s, 0, sizeof *s);
    if (!env->nvml) return;
    void *d = env->nvml_device;
    unsigned v = 0;
    s->sm_mhz = s->mem_mhz = s->power_w = s->temp_c = s->util_pct = s->mem_used_mb = -1;
    if (g_nvml.clock(d, 1, &v) == 0) s->sm_mhz = v;
    if (g_nvml.clock(d, 2, &v) == 0) s->mem_mhz = v;
    if (g_nvml.power && g_nvml.power(d, &v) == 0) s->power_w = v / 1e3;
    if (g_nvml.temperature && g_nvml.temperature(d, 0, &v) == 0) s->temp_c = v;
    nvml_util u;
    if (g_nvml.util(d, &u) == 0) s->util_pct = u.gpu;
    nvml_memory m;
    if (g_nvml.memory(d, &m) == 0) s->mem_used_mb = (double)m.used / 1e6;
    if (g_nvml.throttle) g_nvml.throttle(d, &s->throttle);
    s->valid = true;
}

void kiln_bench_throttle_text(unsigned long long bits, char *buf, size_t cap) {
    static const char *const names[] = {"gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
                                        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake", "display_clocks"};
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < 9; i++)
        if ((bits >> i) & 1) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? ", " : "", names[i]);
    if (!bits) snprintf(buf, cap, "none");
}

struct kiln_bench_sampler {
    const kiln_bench_env *env;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stop;
    double util_sum, util_max, mem_max;
    int n;
};

static void *sampler_main(void *arg) {
    kiln_bench_sampler *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        pthread_mutex_unlock(&s->mu);
        kiln_gpu_sample g;
        kiln_bench_env_sample(s->env, &g);
        pthread_mutex_lock(&s->mu);
        if (g.util_pct >= 0) {
            s->util_sum += g.util_pct;
            s->util_max = g.util_pct > s->util_max ? g.util_pct : s->util_max;
            s->n++;
        }
        if (g.mem_used_mb > s->mem_max) s->mem_max = g.mem_used_mb;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (!s->stop) pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

kiln_bench_sampler *kiln_bench_sampler_start(const kiln_bench_env *env) {
    if (!env->nvml) return NULL;
    kiln_bench_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->env = env;
    s->mem_max = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

void kiln_bench_sampler_stop(kiln_bench_sampler *s, kiln_bench_env *env) {
    env->util_mean_pct = env->util_max_pct = env->mem_used_peak_mb = -1;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    if (s->n) {
        env->util_mean_pct = s->util_sum / s->n;
        env->util_max_pct = s->util_max;
    }
    env->mem_used_peak_mb = s->mem_max;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cond);
    free(s);
}
