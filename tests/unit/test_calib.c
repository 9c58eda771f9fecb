/* test_calib.c — INT8 calibration math on synthetic distributions with known answers (min-max is the
 * exact largest |x|; a percentile lands at its quantile and clips outliers; the entropy threshold of
 * a Gaussian with far outliers lands a few sigma out, far below the outliers, and a uniform
 * distribution is hardly clipped; ReLU's spike of zeros does not drag it to 0), the calibrator
 * names, the cache (round trip, a foreign model's cache refused, a missing tensor refused, an absent
 * file not an error), the discovery of calibration batches in a directory, and the .npz member
 * listing (a stored member found; every truncation and bit flip refused or kept inside the image;
 * a compressed member refused). */
#include "check.h"

#include "core/npy.h"
#include "core/npz.h"
#include "quant/calib_hist.h"
#include "quant/calib_io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t g_state = 88172645463325252ull;
static double uniform01(void) {
    g_state ^= g_state << 13, g_state ^= g_state >> 7, g_state ^= g_state << 17;
    return ((double)(g_state >> 11) + 0.5) / 9007199254740992.0;
}
static float gaussian(void) { return (float)(sqrt(-2.0 * log(uniform01())) * cos(2.0 * M_PI * uniform01())); }

static const kiln_calib_method entropy = {KILN_CALIB_ENTROPY, 0};

/* A histogram over [0, max |x|] of x[0..n), as the calibration fills it. */
static void hist_of(kiln_calib_hist *h, const float *x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    kiln_calib_hist_init(h, amax);
    kiln_calib_hist_add(h, x, n);
}

static void test_methods(void) {
    kiln_calib_method m;
    CHECK_OK(kiln_calib_method_parse("percentile:99.9", &m));
    CHECK(m.kind == KILN_CALIB_PERCENTILE && m.percentile == 99.9);
    CHECK_OK(kiln_calib_method_parse(NULL, &m));
    CHECK(m.kind == KILN_CALIB_ENTROPY);
    CHECK(kiln_calib_method_parse("percentile:0", &m) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_calib_method_parse("kl", &m) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "'kl'") != NULL);
    char name[32];
    kiln_calib_method_name(&(kiln_calib_method){KILN_CALIB_PERCENTILE, 99.99}, name, sizeof name);
    CHECK(!strcmp(name, "percentile:99.99"));
}

static kiln_calib_hist h; /* 16 KiB: static, not on the stack */

static void test_thresholds(void) {
    enum { N = 200000 };
    static float x[N + 40];
    /* min-max: exactly the largest |x| */
    float few[3] = {-3.0f, 1.0f, 2.5f};
    hist_of(&h, few, 3);
    CHECK_NEAR(kiln_calib_threshold(&h, &(kiln_calib_method){KILN_CALIB_MINMAX, 0}), 3.0, 0);
    /* uniform [0, 1) plus 5 outliers at 100: the 99.99th percentile is ~1 (bins are 100/2048 wide),
     * the 50th ~0.5; min-max takes the outliers */
    for (int i = 0; i < N; i++) x[i] = (float)((i + 0.5) / N);
    for (int i = 0; i < 5; i++) x[N + i] = 100.0f;
    hist_of(&h, x, N + 5);
    double w = 100.0 / KILN_CALIB_BINS;
    double p9999 = kiln_calib_threshold(&h, &(kiln_calib_method){KILN_CALIB_PERCENTILE, 99.99});
    CHECKF(p9999 >= 1.0 - w && p9999 <= 1.0 + w, "percentile 99.99 of uniform + outliers: %g", p9999);
    double p50 = kiln_calib_threshold(&h, &(kiln_calib_method){KILN_CALIB_PERCENTILE, 50});
    CHECKF(fabs(p50 - 0.5) <= w, "percentile 50: %g", p50);
    CHECK_NEAR(kiln_calib_threshold(&h, &(kiln_calib_method){KILN_CALIB_MINMAX, 0}), 100.0, 0);
    /* entropy: a Gaussian (sigma 1) with 40 outliers at +-50 clips a few sigma out */
    for (int i = 0; i < N; i++) x[i] = gaussian();
    for (int i = 0; i < 40; i++) x[N + i] = i % 2 ? 50.0f : -50.0f;
    hist_of(&h, x, N + 40);
    double te = kiln_calib_threshold(&h, &entropy);
    CHECKF(te >= 2.5 && te <= 6.0, "entropy threshold of N(0,1) + outliers at 50: %g", te);
    /* entropy on a uniform distribution keeps (almost) the whole range */
    for (int i = 0; i < N; i++) x[i] = (float)uniform01();
    hist_of(&h, x, N);
    double tu = kiln_calib_threshold(&h, &entropy);
    CHECKF(tu >= 0.9 && tu <= 1.0, "entropy threshold of U(0, 1): %g", tu);
    /* a ReLU output: half exact zeros, half |N(0,1)|: the zeros do not drag the threshold to 0 */
    for (int i = 0; i < N; i++) x[i] = i % 2 ? 0.0f : fabsf(gaussian());
    hist_of(&h, x, N);
    double tr = kiln_calib_threshold(&h, &entropy);
    CHECKF(tr >= 2.5, "entropy threshold of ReLU(N(0,1)): %g", tr);
    /* an all-zero tensor still gets a positive threshold */
    memset(x, 0, 16 * sizeof *x);
    hist_of(&h, x, 16);
    CHECK(kiln_calib_threshold(&h, &entropy) > 0.0);
    CHECK(kiln_calib_threshold(&h, &(kiln_calib_method){KILN_CALIB_MINMAX, 0}) > 0.0);
}

static void test_cache(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/calib.cache", dir);
    unlink(path);
    const char *names[3] = {"input", "a b/c", "z"};
    const double t[3] = {3.1415926535, 1e-7, 123.0};
    const char *digest = "00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff";
    double got[3] = {0};
    bool found = true;
    CHECK_OK(kiln_calib_cache_read(path, digest, 3, names, got, &found));
    CHECK(!found); /* no file yet: nothing read, no error */
    CHECK_OK(kiln_calib_cache_write(path, digest, "entropy", 3, names, t));
    CHECK_OK(kiln_calib_cache_read(path, digest, 3, names, got, &found));
    CHECK(found && got[0] == t[0] && got[1] == t[1] && got[2] == t[2]); /* hex floats: exact */
    const char *other = "11ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff00ff";
    CHECK(kiln_calib_cache_read(path, other, 3, names, got, &found) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "another model") != NULL, "%s", kiln_last_error());
    const char *more[4] = {"input", "a b/c", "z", "missing"};
    double got4[4];
    CHECK(kiln_calib_cache_read(path, digest, 4, more, got4, &found) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "'missing'") != NULL, "%s", kiln_last_error());
    unlink(path);
}

static void save(const char *dir, const char *file) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    kiln_tensor t = {0};
    int64_t d = 2;
    REQUIRE_OK(kiln_tensor_alloc(&t, KILN_F32, 1, &d));
    REQUIRE_OK(kiln_npy_write(path, &t));
    kiln_tensor_release(&t);
}

static void test_batches(const char *dir) {
    char sub[600];
    snprintf(sub, sizeof sub, "%s/calib_batches", dir);
    REQUIRE_OK(mkdir(sub, 0700) == 0 || access(sub, F_OK) == 0 ? KILN_OK : KILN_ERR_IO);
    save(sub, "x.0.npy"), save(sub, "x.1.npy"), save(sub, "y.0.npy"), save(sub, "y.1.npy"), save(sub, "x.2.npy");
    const char *xy[2] = {"x", "y"};
    kiln_calib_batches b;
    /* x has batch 2, y does not */
    CHECK(kiln_calib_batches_find(sub, 2, xy, 0, &b) == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "y.2.npy") != NULL, "%s", kiln_last_error());
    CHECK_OK(kiln_calib_batches_find(sub, 2, xy, 2, &b)); /* --calib-batches 2 */
    CHECK(b.nbatches == 2 && strstr(b.paths[1 * 2 + 1], "/y.1.npy"));
    kiln_calib_batches_free(&b);
    /* one input: every .npy file is a batch when none is named after the input */
    const char *other[1] = {"input"};
    CHECK_OK(kiln_calib_batches_find(sub, 1, other, 0, &b));
    CHECK(b.nbatches == 5 && strstr(b.paths[0], "/x.0.npy"));
    kiln_calib_batches_free(&b);
    CHECK(kiln_calib_batches_find("/nonexistent-kiln-dir", 1, other, 0, &b) == KILN_ERR_IO);
    const char *files[] = {"x.0.npy", "x.1.npy", "x.2.npy", "y.0.npy", "y.1.npy"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", sub, files[i]);
        unlink(path);
    }
    rmdir(sub);
}

/* ------------------------------------------------------------------ .npz archives */

static void put16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { put16(p, v & 0xFFFF), put16(p + 2, v >> 16); }

/* A ZIP image of one stored member `name` holding data[0..n) (the layout np.savez writes, without
 * ZIP64 fields) into buf; returns its size. method: 0 stored, 8 deflated (only the header says so). */
static size_t make_zip(unsigned char *buf, const char *name, const void *data, size_t n, unsigned method) {
    size_t nl = strlen(name), at = 0;
    memset(buf, 0, 30 + nl + n + 46 + nl + 22);
    put32(buf, 0x04034b50), put16(buf + 8, method), put32(buf + 18, (uint32_t)n), put32(buf + 22, (uint32_t)n);
    put16(buf + 26, (unsigned)nl);
    memcpy(buf + 30, name, nl), memcpy(buf + 30 + nl, data, n);
    at = 30 + nl + n;
    unsigned char *cd = buf + at;
    put32(cd, 0x02014b50), put16(cd + 10, method), put32(cd + 20, (uint32_t)n), put32(cd + 24, (uint32_t)n);
    put16(cd + 28, (unsigned)nl), put32(cd + 42, 0), memcpy(cd + 46, name, nl);
    unsigned char *eocd = cd + 46 + nl;
    put32(eocd, 0x06054b50), put16(eocd + 8, 1), put16(eocd + 10, 1), put32(eocd + 12, (uint32_t)(46 + nl));
    put32(eocd + 16, (uint32_t)at);
    return at + 46 + nl + 22;
}

static void test_npz(void) {
    static unsigned char zip[512], cut[512];
    const char payload[] = "not really npy";
    size_t n = make_zip(zip, "x.0.npy", payload, sizeof payload, 0);
    kiln_npz_member *m;
    int count;
    CHECK_OK(kiln_npz_members(zip, n, "t.npz", &m, &count));
    CHECK(count == 1 && !strcmp(m[0].name, "x.0.npy") && m[0].size == sizeof payload &&
          !memcmp(m[0].data, payload, sizeof payload));
    kiln_npz_members_free(m, count);
    /* every truncation and every single-bit flip: an error or a member inside the image, never a crash */
    for (size_t len = 0; len < n; len++) {
        memcpy(cut, zip, len);
        if (kiln_npz_members(cut, len, "cut.npz", &m, &count) == KILN_OK) {
            for (int i = 0; i < count; i++) CHECK(m[i].data >= cut && m[i].data + m[i].size <= cut + len);
            kiln_npz_members_free(m, count);
        }
    }
    for (size_t bit = 0; bit < 8 * n; bit++) {
        memcpy(cut, zip, n);
        cut[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        if (kiln_npz_members(cut, n, "flip.npz", &m, &count) == KILN_OK) {
            for (int i = 0; i < count; i++) CHECK(m[i].data >= cut && m[i].data + m[i].size <= cut + n);
            kiln_npz_members_free(m, count);
        }
    }
    n = make_zip(zip, "x.npy", payload, sizeof payload, 8);
    CHECK(kiln_npz_members(zip, n, "packed.npz", &m, &count) == KILN_ERR_UNSUPPORTED);
    CHECKF(strstr(kiln_last_error(), "np.savez_compressed") != NULL, "%s", kiln_last_error());
}

int main(void) {
    char dir[] = "/tmp/kiln_test_calib_XXXXXX";
    REQUIRE_OK(mkdtemp(dir) ? KILN_OK : KILN_ERR_IO);
    test_methods();
    test_thresholds();
    test_cache(dir);
    test_batches(dir);
    test_npz();
    rmdir(dir);
    return checks_report("test_calib");
}
