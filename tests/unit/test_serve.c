/* test_serve.c — kiln serve's parts without HTTP (src/serve/): the Prometheus registry's text, API
 * keys and their token buckets, config.json and --config parsing (good and bad), and the dynamic
 * batcher on sample_cnn (concurrent requests joined into runs and split back exactly, a batch run
 * from the landing memory it was received into, the landing ring's reservations, shape checks,
 * a full queue, deadlines, instances on several devices sharing one queue, a client that leaves
 * while its request is queued or running), and the choice of an LLM request's device (the least
 * loaded). Runs in the sanitizer build too. */
#include "check.h"

#include "serve/auth.h"
#include "serve/batcher.h"
#include "serve/metrics.h"
#include "serve/repo.h"
#include "serve/serve.h"

#include "core/sha256.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_metrics(void) {
    serve_metrics *m = serve_metrics_create();
    char labels[128];
    serve_metrics_labels(labels, sizeof labels, "a\"b\\c\n", "1");
    CHECKF(!strcmp(labels, "model=\"a\\\"b\\\\c\\n\",version=\"1\""), "%s", labels);
    serve_metrics_labels(labels, sizeof labels, "cnn", "2");
    serve_metrics_add(m, "kiln_requests_total", "model=\"cnn\",version=\"2\",status=\"200\"", 1);
    serve_metrics_add(m, "kiln_requests_total", "model=\"cnn\",version=\"2\",status=\"200\"", 2);
    serve_metrics_add(m, "no_such_family", labels, 1);
    serve_metrics_observe(m, "kiln_batch_size", labels, 1);
    serve_metrics_observe(m, "kiln_batch_size", labels, 3);
    serve_metrics_observe(m, "kiln_batch_size", labels, 1e9);
    CHECK(serve_metrics_value(m, "kiln_requests_total", "model=\"cnn\",version=\"2\",status=\"200\"") == 3);
    uint64_t counts[32], count;
    double bounds[32], sum;
    int n = serve_metrics_histogram(m, "kiln_batch_size", labels, counts, bounds, 32, &sum, &count);
    CHECK(n == 11 && counts[0] == 1 && counts[2] == 1 && counts[10] == 1 && count == 3 && sum == 4 + 1e9);
    kiln_strbuf b = {0};
    serve_metrics_render(m, &b);
    CHECK(strstr(b.data, "# TYPE kiln_requests_total counter\n"));
    CHECK(strstr(b.data, "kiln_requests_total{model=\"cnn\",version=\"2\",status=\"200\"} 3\n"));
    CHECK(strstr(b.data, "kiln_batch_size_bucket{model=\"cnn\",version=\"2\",le=\"1\"} 1\n"));
    CHECK(strstr(b.data, "kiln_batch_size_bucket{model=\"cnn\",version=\"2\",le=\"4\"} 2\n")); /* cumulative */
    CHECK(strstr(b.data, "kiln_batch_size_bucket{model=\"cnn\",version=\"2\",le=\"+Inf\"} 3\n"));
    CHECK(strstr(b.data, "kiln_batch_size_count{model=\"cnn\",version=\"2\"} 3\n"));
    CHECK(!strstr(b.data, "no_such_family"));
    kiln_strbuf_free(&b);
    static const char *const stages[] = {"receive", "compute"};
    const double stage_us[] = {20, 3000};
    serve_metrics_record_stages(m, labels, stages, stage_us, 2);
    n = serve_metrics_histogram(m, "kiln_request_stage_duration_seconds", "model=\"cnn\",version=\"2\",stage=\"compute\"",
                                counts, bounds, 32, &sum, &count);
    CHECK(n > 0 && count == 1 && sum == 0.003);
    serve_metrics_render(m, &b);
    CHECK(strstr(b.data, "kiln_request_stage_duration_seconds_bucket{model=\"cnn\",version=\"2\",stage=\"receive\",le=\"2.5e-05\"} 1\n"));
    kiln_strbuf_free(&b);
    serve_metrics_free(m);
}

static void test_keys(void) {
    serve_auth a;
    serve_auth_init(&a);
    a.default_rps = 10, a.default_burst = 2;
    CHECK_OK(serve_auth_add_plain(&a, "plain"));
    CHECK(serve_auth_add_plain(&a, "") == KILN_ERR_INVALID_ARGUMENT);
    char path[] = "/tmp/kiln_test_keys_XXXXXX", hash[65], msg[256];
    int fd = mkstemp(path);
    kiln_sha256_hex("team", 4, hash);
    dprintf(fd, "# comment\n\n%s name=team models=cnn,llm tpm=60\n", hash);
    close(fd);
    CHECK_OK(serve_auth_load_file(&a, path));
    serve_key *k = NULL;
    CHECK(serve_auth_check(&a, NULL, &k, msg, sizeof msg) == 401 && strstr(msg, "missing"));
    CHECK(serve_auth_check(&a, "Bearer nope", &k, msg, sizeof msg) == 401 && strstr(msg, "invalid"));
    CHECK(serve_auth_check(&a, "Basic plain", &k, msg, sizeof msg) == 401);
    CHECK(serve_auth_check(&a, "Bearer plain", &k, msg, sizeof msg) == 200 && k && serve_auth_allows(k, "anything"));
    double retry = 0;
    CHECK(serve_auth_admit(&a, k, &retry, msg, sizeof msg) == 200);
    CHECK(serve_auth_admit(&a, k, &retry, msg, sizeof msg) == 200);
    CHECK(serve_auth_admit(&a, k, &retry, msg, sizeof msg) == 429 && retry > 0 && retry <= 0.1 + 1e-9);
    usleep(120000); /* 10/s refills one request in 100 ms */
    CHECK(serve_auth_admit(&a, k, &retry, msg, sizeof msg) == 200);
    CHECK(serve_auth_check(&a, "bearer team", &k, msg, sizeof msg) == 200 && !strcmp(k->name, "team"));
    CHECK(serve_auth_allows(k, "cnn") && serve_auth_allows(k, "llm") && !serve_auth_allows(k, "cn") && !serve_auth_allows(k, "cnn,llm"));
    CHECK(serve_auth_admit(&a, k, &retry, msg, sizeof msg) == 200);
    serve_auth_charge_tokens(&a, k, 61);
    CHECK(serve_auth_admit(&a, k, &retry, msg, sizeof msg) == 429 && strstr(msg, "tokens per minute") && retry > 0);
    static const char *const BAD[] = {"zz\n", "%s rps=-1\n", "%s colour=red\n", "%s rps\n"};
    for (int i = 0; i < 4; i++) {
        fd = open(path, O_WRONLY | O_TRUNC);
        dprintf(fd, BAD[i], hash);
        close(fd);
        CHECKF(serve_auth_load_file(&a, path) == KILN_ERR_PARSE && strstr(kiln_last_error(), ":1:"), "%s", BAD[i]);
    }
    unlink(path);
    CHECK(serve_auth_load_file(&a, path) == KILN_ERR_IO);
    serve_auth_free(&a);
}

/* "devices" (a list of GPUs) against "device" (one), and the target they apply to. */
static void test_device_configs(void) {
    serve_model_config c;
    CHECK_OK(serve_model_config_parse(NULL, 0, "none", &c));
    CHECK(c.n_devices == 1 && c.devices[0] == 0 && !c.devices_listed);
    const char *one = "{\"target\": \"cuda\", \"device\": 1, \"instances\": 2}";
    CHECK_OK(serve_model_config_parse(one, strlen(one), "one", &c));
    CHECK(c.n_devices == 1 && c.devices[0] == 1 && c.device == 1 && !c.devices_listed && c.batch.instances == 2);
    const char *two = "{\"target\": \"cuda\", \"devices\": [1, 0], \"instances\": 3}";
    CHECK_OK(serve_model_config_parse(two, strlen(two), "two", &c));
    CHECK(c.n_devices == 2 && c.devices[0] == 1 && c.devices[1] == 0 && c.device == 1 && c.devices_listed);
    CHECK(c.batch.instances == 3);
    static const struct { const char *json, *message; } BAD[] = {
        {"{\"devices\": [0, 1]}", "'devices' applies to target \"cuda\" (this model's target is \"cpu\")"},
        {"{\"target\": \"cpu\", \"devices\": [0]}", "'devices' applies to target \"cuda\""},
        {"{\"target\": \"cuda\", \"devices\": []}", "'devices' must be a list of 1 to 16 GPU ordinals"},
        {"{\"target\": \"cuda\", \"devices\": 1}", "'devices' must be a list"},
        {"{\"target\": \"cuda\", \"devices\": [0, \"1\"]}", "must be an integer in [0, 64]"},
        {"{\"target\": \"cuda\", \"devices\": [0, -1]}", "must be an integer in [0, 64]"},
        {"{\"target\": \"cuda\", \"devices\": [1, 0, 1]}", "'devices' names GPU 1 twice"},
        {"{\"target\": \"cuda\", \"device\": 0, \"devices\": [0, 1]}", "either 'device' (one GPU) or 'devices'"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        kiln_status st = serve_model_config_parse(BAD[i].json, strlen(BAD[i].json), "cfg", &c);
        CHECKF(st == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), BAD[i].message), "%s: %s", BAD[i].json,
               kiln_last_error());
    }
    /* speculative decoding for an LLM */
    const char *spec = "{\"spec\": \"ngram\", \"draft_tokens\": 6}";
    CHECK_OK(serve_model_config_parse(spec, strlen(spec), "spec", &c));
    CHECK(c.llm.spec && !strcmp(c.llm.spec, "ngram") && c.llm.draft_tokens == 6);
    const char *off = "{\"spec\": \"off\"}";
    CHECK_OK(serve_model_config_parse(off, strlen(off), "off", &c));
    CHECK(!c.llm.spec);
    const char *bad_spec = "{\"spec\": \"eagle\"}", *bad_k = "{\"draft_tokens\": 17}";
    CHECK(serve_model_config_parse(bad_spec, strlen(bad_spec), "cfg", &c) == KILN_ERR_INVALID_ARGUMENT &&
          strstr(kiln_last_error(), "'spec' must be"));
    CHECK(serve_model_config_parse(bad_k, strlen(bad_k), "cfg", &c) == KILN_ERR_INVALID_ARGUMENT &&
          strstr(kiln_last_error(), "draft_tokens"));
    /* a draft model: its path kept for the model's directory, spec "draft" */
    const char *draft = "{\"draft\": \"small\", \"spec\": \"draft\", \"draft_tokens\": 3}", *bad_draft = "{\"draft\": 7}";
    CHECK_OK(serve_model_config_parse(draft, strlen(draft), "draft", &c));
    CHECK(!strcmp(c.draft, "small") && c.llm.spec && !strcmp(c.llm.spec, "draft") && c.llm.draft_tokens == 3);
    CHECK(serve_model_config_parse(bad_draft, strlen(bad_draft), "cfg", &c) == KILN_ERR_INVALID_ARGUMENT &&
          strstr(kiln_last_error(), "'draft' must name"));
    /* the test hook: a cpu model takes a list (one instance set per entry, all on the CPU) */
    setenv("KILN_SERVE_CPU_DEVICES", "1", 1);
    CHECK_OK(serve_model_config_parse(BAD[0].json, strlen(BAD[0].json), "hook", &c));
    CHECK(c.n_devices == 2 && c.devices[1] == 1);
    unsetenv("KILN_SERVE_CPU_DEVICES");
}

static void test_configs(void) {
    serve_model_config c;
    CHECK_OK(serve_model_config_parse(NULL, 0, "none", &c));
    CHECK(c.batch.max_batch == 8 && c.version_latest == 1 && !strcmp(c.target, "cpu"));
    const char *good = "{\"max_batch\": 16, \"preferred_batch_sizes\": [4, 16], \"max_queue_delay_us\": 100, "
                       "\"version_policy\": {\"specific\": [3, 1]}, \"aliases\": [\"x\"], \"kv_cache_bytes\": 1048576, "
                       "\"max_waiting\": 4, \"target\": \"cuda\", \"device\": 1, \"io_format\": \"fp16\", "
                       "\"landing_batches\": 2, \"kv_cache_dtype\": \"fp8\", \"kv_calib_text\": \"calib.txt\"}";
    CHECK_OK(serve_model_config_parse(good, strlen(good), "good", &c));
    CHECK(c.batch.max_batch == 16 && c.batch.n_preferred == 2 && c.n_specific == 2 && c.version_specific[0] == 3);
    CHECK(c.n_aliases == 1 && c.llm.kv_cache_bytes == 1048576 && c.llm.max_waiting == 4 && c.device == 1 && c.io_fp16);
    CHECK(c.batch.landing_batches == 2 && !strcmp(c.llm.kv_cache_dtype, "fp8") && !strcmp(c.kv_calib_text, "calib.txt"));
    static const struct { const char *json, *message; } BAD[] = {
        {"[1]", "not a JSON object"},
        {"{\"max_bach\": 2}", "unknown key 'max_bach'"},
        {"{\"io_format\": \"int8\"}", "'io_format' must be \"fp32\" or \"fp16\""},
        {"{\"max_batch\": \"8\"}", "'max_batch' must be an integer"},
        {"{\"max_batch\": 2.5}", "'max_batch' must be an integer"},
        {"{\"instances\": 0}", "'instances' must be an integer in [1, 64]"},
        {"{\"max_batch\": 4, \"preferred_batch_sizes\": [8]}", "preferred batch size 8 is above max_batch 4"},
        {"{\"version_policy\": {\"latest\": 1, \"specific\": [1]}}", "'version_policy' must be"},
        {"{\"version_policy\": \"newest\"}", "'version_policy' must be"},
        {"{\"aliases\": [\"a/b\"]}", "without '/'"},
        {"{\"target\": \"tpu\"}", "'target' must be"},
        {"{\"chat_template\": \"../x\"}", "'chat_template'"},
        {"{\"kv_cache_dtype\": \"fp16\"}", "'kv_cache_dtype' must be \"auto\" or \"fp8\""},
        {"{\"kv_calib_text\": \"../x\"}", "'kv_calib_text'"},
        {"{\"traffic\": {\"one\": 5}}", "'traffic' must map versions"},
        {"{\"traffic\": {\"1\": -5}}", "'traffic' must map versions"},
        {"{\"traffic\": {\"1\": 5, \"1\": 5}}", "'traffic' names version \"1\" twice"},
        {"{\"max_batch\": 4, \"max_batch\": 8}", "key 'max_batch' is given twice"},
        /* a list key repeated until its entries outgrow the list (found by fuzz_serve_request) */
        {"{\"preferred_batch_sizes\": [1, 2, 3, 4], \"preferred_batch_sizes\": [1, 2, 3, 4], "
         "\"preferred_batch_sizes\": [1, 2, 3, 4]}", "key 'preferred_batch_sizes' is given twice"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        kiln_status st = serve_model_config_parse(BAD[i].json, strlen(BAD[i].json), "cfg", &c);
        CHECKF(st != KILN_OK && strstr(kiln_last_error(), BAD[i].message), "%s: %s", BAD[i].json, kiln_last_error());
    }
    test_device_configs();
    serve_settings s;
    const char *settings = "{\"max_body_bytes\": 4096, \"poll_repository_s\": 0.5}";
    CHECK_OK(serve_settings_parse(settings, strlen(settings), "--config", &s));
    CHECK(s.max_body_bytes == 4096 && s.poll_repository_s == 0.5 && s.connection_timeout_s == 30);
    CHECK(s.connection_memory_bytes == 256 << 10);
    settings = "{\"connection_memory_bytes\": 1048576}";
    CHECK_OK(serve_settings_parse(settings, strlen(settings), "--config", &s));
    CHECK(s.connection_memory_bytes == 1 << 20);
    CHECK(serve_settings_parse("{\"connection_memory_bytes\": 1000}", 33, "--config", &s) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(serve_settings_parse("{\"max_body_bytes\": 1}", 21, "--config", &s) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(serve_settings_parse("{\"x\": 1}", 8, "--config", &s) == KILN_ERR_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------------- the batcher on sample_cnn */

static const int ONE_DEVICE[1] = {0};

typedef struct job {
    serve_pool *pool;
    serve_infer r;
    serve_tensor in;
    float x[3 * 32 * 32];
} job;

static void job_init(job *j, serve_pool *p, int rows_seed) {
    memset(j, 0, sizeof *j);
    j->pool = p;
    for (int i = 0; i < 3 * 32 * 32; i++) j->x[i] = (float)((i * 7 + rows_seed * 13) % 17) / 17.0f;
    j->in = (serve_tensor){.name = "image", .dtype = KILN_F32, .ndim = 4, .dims = {1, 3, 32, 32}, .data = j->x,
                           .bytes = sizeof j->x};
    j->r.inputs = &j->in;
    j->r.n_inputs = 1;
}

static void *run_job(void *arg) {
    job *j = arg;
    if (serve_pool_check(j->pool, &j->r) == 0) serve_pool_infer(j->pool, &j->r);
    return NULL;
}

static void test_batcher(kiln_engine *e) {
    serve_batch_config cfg = {.max_batch = 4, .max_queue_delay_us = 200000, .instances = 2, .breaker_failures = 3};
    serve_pool *p;
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    /* references, one at a time (each waits out the delay alone) */
    enum { N = 8 };
    static job ref[N], jobs[N];
    for (int i = 0; i < 2; i++) {
        job_init(&ref[i], p, i);
        run_job(&ref[i]);
        CHECK(ref[i].r.http_status == 200 && ref[i].r.batch_rows == 1 && ref[i].r.n_outputs == 1);
        CHECK(ref[i].r.outputs[0].dims[0] == 1 && ref[i].r.outputs[0].dims[1] == 10);
    }
    float apart = 0; /* the two inputs' outputs differ, so a swapped row would show */
    for (int k = 0; k < 10; k++)
        apart = fmaxf(apart, fabsf(((float *)ref[0].r.outputs[0].data)[k] - ((float *)ref[1].r.outputs[0].data)[k]));
    CHECK(apart > 1e-3f);
    pthread_t t[N];
    for (int i = 0; i < N; i++) job_init(&jobs[i], p, i % 2), pthread_create(&t[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    int shared = 0;
    for (int i = 0; i < N; i++) {
        CHECK(jobs[i].r.http_status == 200 && jobs[i].r.outputs[0].bytes == 40);
        const float *got = jobs[i].r.outputs[0].data, *want = ref[i % 2].r.outputs[0].data;
        for (int k = 0; k < 10; k++) /* a batch of 4 may round differently from a batch of 1, not more */
            CHECKF(fabsf(got[k] - want[k]) <= 1e-5f, "request %d output %d: %g, alone %g", i, k, got[k], want[k]);
        shared += jobs[i].r.batch_rows > 1;
    }
    CHECKF(shared > 0, "8 concurrent requests never shared a run");
    serve_pool_stats st;
    serve_pool_get_stats(p, &st);
    CHECK(st.instances == 2 && st.instances_up == 2 && st.queue_depth == 0 && st.rows == 2 + N && st.runs < 2 + N);
    /* requests the engine cannot take are refused before queueing */
    job bad;
    job_init(&bad, p, 0);
    bad.in.dims[2] = 16;
    CHECK(serve_pool_check(p, &bad.r) == 400 && strstr(bad.r.message, "dimension 2 is 32"));
    job_init(&bad, p, 0);
    snprintf(bad.in.name, sizeof bad.in.name, "pixels");
    CHECK(serve_pool_check(p, &bad.r) == 400 && strstr(bad.r.message, "'image'"));
    job_init(&bad, p, 0);
    bad.in.dtype = KILN_I64;
    CHECK(serve_pool_check(p, &bad.r) == 400 && strstr(bad.r.message, "float32"));
    job_init(&bad, p, 0);
    bad.in.dims[0] = 5;
    CHECK(serve_pool_check(p, &bad.r) == 400 && strstr(bad.r.message, "1..4"));
    for (int i = 0; i < N; i++) serve_infer_clear(&jobs[i].r);
    for (int i = 0; i < 2; i++) serve_infer_clear(&ref[i].r);
    serve_pool_free(p);

    /* a queue of one: the second waiting request is refused; a short deadline expires in the queue */
    cfg = (serve_batch_config){.max_batch = 4, .max_queue_delay_us = 300000, .max_queue = 1, .instances = 1,
                               .breaker_failures = 1};
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    job_init(&jobs[0], p, 0);
    job_init(&jobs[1], p, 1);
    pthread_create(&t[0], NULL, run_job, &jobs[0]);
    usleep(50000);
    run_job(&jobs[1]);
    CHECK(jobs[1].r.http_status == 429 && strstr(jobs[1].r.message, "queue is full"));
    pthread_join(t[0], NULL);
    CHECK(jobs[0].r.http_status == 200);
    serve_infer_clear(&jobs[0].r);
    job_init(&jobs[2], p, 0);
    jobs[2].r.timeout_us = 50000;
    run_job(&jobs[2]);
    CHECK(jobs[2].r.http_status == 503 && strstr(jobs[2].r.message, "timeout of 50 ms"));
    serve_pool_free(p);

    /* priorities: B (level 1, a full batch) arrives after A (level 2, waiting for companions) and
     * runs first; A waits out its delay. Without the level, B would queue behind A. */
    cfg = (serve_batch_config){.max_batch = 2, .max_queue_delay_us = 300000, .instances = 1, .priority_levels = 2,
                               .breaker_failures = 1};
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    static float two_rows[2 * 3 * 32 * 32];
    job_init(&jobs[0], p, 0);
    job_init(&jobs[1], p, 1);
    jobs[1].in.dims[0] = 2;
    jobs[1].in.data = two_rows;
    jobs[1].in.bytes = sizeof two_rows;
    jobs[1].r.priority = 1;
    pthread_create(&t[0], NULL, run_job, &jobs[0]);
    usleep(50000);
    run_job(&jobs[1]);
    pthread_join(t[0], NULL);
    CHECK(jobs[0].r.http_status == 200 && jobs[1].r.http_status == 200);
    CHECKF(jobs[1].r.queue_us < 100000 && jobs[0].r.queue_us > 250000, "level 1 waited %.0f us, level 2 %.0f us",
           jobs[1].r.queue_us, jobs[0].r.queue_us);
    job_init(&bad, p, 0);
    bad.r.priority = 3;
    CHECK(serve_pool_check(p, &bad.r) == 400 && strstr(bad.r.message, "priority 3"));
    for (int i = 0; i < 2; i++) serve_infer_clear(&jobs[i].r);
    serve_pool_free(p);
}

/* One instance keeps two runs in flight: requests queued behind a running batch are enqueued on the
 * instance's second context before the first run is waited for, and every request still gets its
 * own rows back (compared with the same input run alone). */
static void test_runs_in_flight(kiln_engine *e) {
    serve_batch_config cfg = {.max_batch = 2, .max_queue_delay_us = 0, .instances = 1, .breaker_failures = 3};
    serve_pool *p;
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    enum { N = 16 };
    static job ref[2], jobs[N];
    for (int i = 0; i < 2; i++) job_init(&ref[i], p, i), run_job(&ref[i]);
    serve_pool_stats st = {0};
    for (int round = 0; round < 10 && !st.overlapped_runs; round++) { /* the threads' arrival is up to the scheduler */
        pthread_t t[N];
        for (int i = 0; i < N; i++) job_init(&jobs[i], p, i % 2), pthread_create(&t[i], NULL, run_job, &jobs[i]);
        for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < N; i++) {
            CHECK(jobs[i].r.http_status == 200 && jobs[i].r.n_outputs == 1);
            const float *got = jobs[i].r.outputs[0].data, *want = ref[i % 2].r.outputs[0].data;
            for (int k = 0; k < 10; k++)
                CHECKF(fabsf(got[k] - want[k]) <= 1e-5f, "request %d output %d: %g, alone %g", i, k, got[k], want[k]);
            serve_infer_clear(&jobs[i].r);
        }
        serve_pool_get_stats(p, &st);
    }
    CHECKF(st.overlapped_runs > 0, "no run was enqueued while another was in flight (%llu runs)", (unsigned long long)st.runs);
    for (int i = 0; i < 2; i++) serve_infer_clear(&ref[i].r);
    serve_pool_free(p);
}

/* Batches of a megabyte or more are joined by the requests' own threads: 4 requests of 64 rows
 * (768 KiB each) with room for two per run get their own rows back, computed as when they ran alone. */
static void test_parallel_join(kiln_engine *e) {
    enum { ROWS = 64, ROW = 3 * 32 * 32, N = 4 };
    serve_batch_config cfg = {.max_batch = 2 * ROWS, .max_queue_delay_us = 200000, .instances = 1, .breaker_failures = 3};
    serve_pool *p;
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    static float x[N][ROWS * ROW];
    static job ref[N], jobs[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < ROWS * ROW; k++) x[i][k] = (float)((k * 7 + i * 13) % 17) / 17.0f;
        for (job *j = &ref[i]; j; j = j == &ref[i] ? &jobs[i] : NULL) {
            job_init(j, p, i);
            j->in.dims[0] = ROWS;
            j->in.data = x[i];
            j->in.bytes = sizeof x[i];
        }
        run_job(&ref[i]);
        CHECK(ref[i].r.http_status == 200 && ref[i].r.batch_rows == ROWS);
    }
    pthread_t t[N];
    for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    int shared = 0;
    for (int i = 0; i < N; i++) {
        CHECK(jobs[i].r.http_status == 200 && jobs[i].r.outputs[0].dims[0] == ROWS);
        const float *got = jobs[i].r.outputs[0].data, *want = ref[i].r.outputs[0].data;
        float worst = 0;
        for (int k = 0; k < ROWS * 10; k++) worst = fmaxf(worst, fabsf(got[k] - want[k]));
        CHECKF(worst <= 1e-5f, "request %d: outputs differ from its run alone by %g", i, worst);
        const serve_infer *r = &jobs[i].r; /* the run's timeline: queued, taken, joined, ran, in order */
        CHECKF(r->arrival_us <= r->run_start_us && r->run_start_us <= r->inputs_joined_us &&
                   r->inputs_joined_us <= r->run_done_us && r->run_done_us - r->arrival_us <= r->queue_us + r->compute_us,
               "request %d: timeline %.0f %.0f %.0f %.0f", i, r->arrival_us, r->run_start_us, r->inputs_joined_us,
               r->run_done_us);
        shared += jobs[i].r.batch_rows == 2 * ROWS;
        serve_infer_clear(&jobs[i].r);
        serve_infer_clear(&ref[i].r);
    }
    CHECKF(shared >= 2, "no two requests of 768 KiB shared a run (%d did)", shared);
    serve_pool_free(p);
}

/* Lands LANDED one-row requests back to back in p's empty landing ring (at row), queues them in the order
 * `queued` gives (each waits until the previous one is queued), and checks that they ran as one
 * batch with their own rows back (against each run alone from its own memory). */
enum { LANDED = 4, LANDED_ROW = 3 * 32 * 32 * sizeof(float) };
static void run_landed(serve_pool *p, char *row, const int *queued) {
    static job ref[LANDED], jobs[LANDED];
    pthread_t t[LANDED];
    serve_pool_stats st;
    for (int k = 0; k < LANDED; k++) {
        job_init(&ref[k], p, k);
        job_init(&jobs[k], p, k);
        char *landed = serve_pool_landing_reserve(p, LANDED_ROW);
        CHECK(landed == row + (size_t)k * LANDED_ROW);
        memcpy(landed, jobs[k].x, LANDED_ROW);
        jobs[k].in.data = landed;
    }
    for (int q = 0; q < LANDED; q++) {
        pthread_create(&t[q], NULL, run_job, &jobs[queued[q]]);
        for (int wait = 0; wait < 2000 && q < LANDED - 1; wait++) {
            serve_pool_get_stats(p, &st);
            if (st.queue_depth == q + 1) break;
            usleep(1000);
        }
    }
    for (int q = 0; q < LANDED; q++) pthread_join(t[q], NULL);
    for (int k = 0; k < LANDED; k++) {
        run_job(&ref[k]);
        CHECK(jobs[k].r.http_status == 200 && jobs[k].r.batch_rows == LANDED);
        const float *got = jobs[k].r.outputs[0].data, *want = ref[k].r.outputs[0].data;
        for (int o = 0; o < 10; o++) CHECKF(fabsf(got[o] - want[o]) <= 1e-5f, "request %d output %d", k, o);
        serve_pool_landing_release(p, jobs[k].in.data);
        serve_infer_clear(&jobs[k].r);
        serve_infer_clear(&ref[k].r);
    }
}

/* Landing memory: reservations lie back to back in the order they are made and wrap around once
 * the oldest are released; a full ring refuses (a miss). A batch of requests that landed one after
 * another runs from there without a copy (direct_runs), also when they were queued in another order
 * (the queue puts a landed request before those that reserved after it). */
static void test_landing(kiln_engine *e) {
    enum { N = LANDED, ROW = LANDED_ROW };
    serve_batch_config cfg = {.max_batch = N, .preferred = {N}, .n_preferred = 1, .max_queue_delay_us = 2000000,
                              .instances = 1, .breaker_failures = 3, .landing_batches = 2};
    serve_pool *p;
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    char *at[2 * N];
    for (int k = 0; k < 2 * N; k++) {
        at[k] = serve_pool_landing_reserve(p, ROW);
        CHECKF(at[k] && (k == 0 || at[k] == at[k - 1] + ROW), "reservation %d", k);
    }
    CHECK(!serve_pool_landing_reserve(p, ROW)); /* full */
    serve_pool_landing_release(p, at[1]);          /* not the oldest: frees nothing yet */
    CHECK(!serve_pool_landing_reserve(p, ROW));
    serve_pool_landing_release(p, at[0]);          /* the two oldest: the ring wraps to its start */
    char *wrapped = serve_pool_landing_reserve(p, 2 * ROW);
    CHECK(wrapped == at[0]);
    serve_pool_landing_release(p, wrapped);
    for (int k = 2; k < 2 * N; k++) serve_pool_landing_release(p, at[k]);
    static const int in_order[LANDED] = {0, 1, 2, 3}, reversed[LANDED] = {3, 2, 1, 0};
    run_landed(p, at[0], in_order);
    run_landed(p, at[0], reversed);
    serve_pool_stats st;
    serve_pool_get_stats(p, &st);
    CHECKF(st.direct_runs == 2 && st.runs == 2 + 2 * N && st.landing_misses == 2, "%llu direct runs of %llu, %llu misses",
           (unsigned long long)st.direct_runs, (unsigned long long)st.runs, (unsigned long long)st.landing_misses);
    serve_pool_free(p);
}

/* Instances on several devices pull from one queue: 2 instances on each of two devices (fake
 * ordinals 3 and 5, each with its own engine) all run batches under concurrent load, every request
 * gets its own rows back, and the stats name each instance's device. */
static void test_devices(kiln_engine *e3, kiln_engine *e5) {
    kiln_engine *engines[2] = {e3, e5};
    const int devices[2] = {3, 5};
    serve_batch_config cfg = {.max_batch = 1, .max_queue_delay_us = 0, .instances = 2, .breaker_failures = 3};
    serve_pool *p;
    REQUIRE_OK(serve_pool_create(engines, devices, 2, &cfg, &p));
    serve_pool_stats st;
    serve_pool_get_stats(p, &st);
    CHECK(st.instances == 4 && st.instances_up == 4 && serve_pool_config(p)->instances == 2);
    int on3 = 0, on5 = 0;
    for (int k = 0; k < st.instances; k++) on3 += st.instance[k].device == 3, on5 += st.instance[k].device == 5;
    CHECK(on3 == 2 && on5 == 2);
    enum { N = 32 };
    static job ref[2], jobs[N];
    for (int i = 0; i < 2; i++) job_init(&ref[i], p, i), run_job(&ref[i]);
    uint64_t runs3 = 0, runs5 = 0;
    for (int round = 0; round < 20 && (!runs3 || !runs5); round++) { /* which thread wakes first is the scheduler's */
        pthread_t t[N];
        for (int i = 0; i < N; i++) job_init(&jobs[i], p, i % 2), pthread_create(&t[i], NULL, run_job, &jobs[i]);
        for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < N; i++) {
            CHECK(jobs[i].r.http_status == 200 && jobs[i].r.n_outputs == 1);
            const float *got = jobs[i].r.outputs[0].data, *want = ref[i % 2].r.outputs[0].data;
            for (int k = 0; k < 10; k++)
                CHECKF(fabsf(got[k] - want[k]) <= 1e-5f, "request %d output %d: %g, alone %g", i, k, got[k], want[k]);
            serve_infer_clear(&jobs[i].r);
        }
        serve_pool_get_stats(p, &st);
        runs3 = runs5 = 0;
        for (int k = 0; k < st.instances; k++) *(st.instance[k].device == 3 ? &runs3 : &runs5) += st.instance[k].runs;
    }
    CHECKF(runs3 > 0 && runs5 > 0, "one device took every run (device 3: %llu, device 5: %llu)",
           (unsigned long long)runs3, (unsigned long long)runs5);
    CHECK(runs3 + runs5 == st.runs && st.queue_depth == 0);
    for (int i = 0; i < 2; i++) serve_infer_clear(&ref[i].r);
    serve_pool_free(p);
    /* no device, or more instances than a pool holds */
    CHECK(serve_pool_create(engines, devices, 0, &cfg, &p) == KILN_ERR_INVALID_ARGUMENT && !p);
    cfg.instances = 600;
    CHECK(serve_pool_create(engines, devices, 2, &cfg, &p) == KILN_ERR_INVALID_ARGUMENT &&
          strstr(kiln_last_error(), "600 instances on each of 2 devices"));
}

static atomic_bool client_left;
static bool client_gone(void *arg) { return arg == &client_left && atomic_load(&client_left); }
/* A client that is found gone 100 ms after the first look, by when an idle instance has taken its request. */
static bool client_gone_late(void *arg) {
    (void)arg;
    usleep(100000);
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A request whose client leaves while it waits in the queue is taken out unrun (499, counted as
 * abandoned); one already in a run finishes and keeps its answer (the server drops it). */
static void test_client_gone(kiln_engine *e) {
    serve_batch_config cfg = {.max_batch = 4, .max_queue_delay_us = 400000, .instances = 1, .breaker_failures = 3};
    serve_pool *p;
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    static job waiting, other;
    job_init(&waiting, p, 0);
    waiting.r.client_gone = client_gone;
    waiting.r.client_arg = &client_left;
    job_init(&other, p, 1);
    atomic_store(&client_left, false);
    pthread_t t[2];
    pthread_create(&t[0], NULL, run_job, &waiting);
    usleep(30000);
    pthread_create(&t[1], NULL, run_job, &other); /* queued behind it, waiting for the same delay */
    usleep(30000);
    double t0 = now_s();
    atomic_store(&client_left, true);
    pthread_join(t[0], NULL);
    double left_after = now_s() - t0;
    CHECKF(waiting.r.http_status == 499 && strstr(waiting.r.message, "closed the connection while the request waited"),
           "%d %s", waiting.r.http_status, waiting.r.message);
    CHECKF(left_after < 0.2, "the request left the queue %.3f s after its client", left_after);
    CHECK(waiting.r.n_outputs == 0);
    pthread_join(t[1], NULL);
    CHECK(other.r.http_status == 200 && other.r.batch_rows == 1);
    serve_pool_stats st;
    serve_pool_get_stats(p, &st);
    CHECK(st.abandoned == 1 && st.runs == 1 && st.rows == 1 && st.queue_depth == 0);
    serve_infer_clear(&other.r);
    serve_pool_free(p);

    /* taken into a run before the client leaves: it runs to the end */
    cfg = (serve_batch_config){.max_batch = 2, .max_queue_delay_us = 0, .instances = 1, .breaker_failures = 3};
    REQUIRE_OK(serve_pool_create(&e, ONE_DEVICE, 1, &cfg, &p));
    static float rows[2 * 3 * 32 * 32];
    job_init(&waiting, p, 0);
    waiting.in.dims[0] = 2;
    waiting.in.data = rows;
    waiting.in.bytes = sizeof rows;
    waiting.r.client_gone = client_gone_late;
    run_job(&waiting);
    CHECK(waiting.r.http_status == 200 && waiting.r.n_outputs == 1);
    serve_pool_get_stats(p, &st);
    CHECK(st.abandoned == 0 && st.runs == 1);
    serve_infer_clear(&waiting.r);
    serve_pool_free(p);
}

/* An LLM request goes to the device with the fewest live sequences (the first of equals), and its
 * sequences count there until released. */
static void test_llm_balance(void) {
    static serve_version v;
    v.n_llms = 3;
    CHECK(serve_version_take_llm(&v, 2) == 0);  /* 0 0 0 -> the first */
    CHECK(serve_version_take_llm(&v, 1) == 1);  /* 2 0 0 */
    CHECK(serve_version_take_llm(&v, 1) == 2);  /* 2 1 0 */
    CHECK(serve_version_take_llm(&v, 4) == 1);  /* 2 1 1 -> the first of the least */
    serve_version_llm_done(&v, 0, 2);           /* 0 5 1 */
    CHECK(serve_version_take_llm(&v, 1) == 0);
    CHECK(serve_version_take_llm(&v, 1) == 0);  /* 1 5 1 -> 0 again (first of equals) */
    serve_version_llm_done(&v, 1, 5);           /* 2 0 1 */
    CHECK(serve_version_take_llm(&v, 1) == 1);
    CHECK(atomic_load(&v.llm_live[0]) == 2 && atomic_load(&v.llm_live[1]) == 1 && atomic_load(&v.llm_live[2]) == 1);
}

int main(void) {
    test_metrics();
    test_keys();
    test_configs();
    test_llm_balance();
    const char *root = getenv("KILN_SOURCE_DIR");
    char model[4096];
    snprintf(model, sizeof model, "%s/models/sample_cnn.onnx", root ? root : ".");
    kiln_engine *e;
    REQUIRE_OK(kiln_build_onnx(model, NULL, &e));
    test_batcher(e);
    test_runs_in_flight(e);
    test_parallel_join(e);
    test_landing(e);
    test_client_gone(e);
    kiln_engine *e5;
    REQUIRE_OK(kiln_build_onnx(model, NULL, &e5));
    test_devices(e, e5);
    kiln_engine_free(e5);
    kiln_engine_free(e);
    return checks_report("test_serve");
}
