/* fuzz_load_prometheus.c — libFuzzer target for the Prometheus text-format scanner of `kiln load
 * --metrics-url` (load/scrape.c, load_prometheus_scan), which reads the /metrics page of the server
 * under test. The first input line is the --metrics-match substring (an empty line: the default GPU
 * utilization match); the rest is the page. It is scanned with that match and with the default, from
 * a buffer that holds exactly the page (no terminating NUL to lean on). A scan that counts samples
 * must report finite values with mean <= max unless the sum overflowed. Seeds:
 * fuzz/corpus/fuzz_load_prometheus/ (DCGM, nvidia-smi exporter and kiln-style pages, labels with
 * quotes and braces, comments, NaN / Inf samples). */
#include "fuzz_util.h"
#include "load/load_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void scan(const char *page, size_t n, const char *match) {
    double mean = NAN, max = NAN;
    int count = load_prometheus_scan(page, n, match, &mean, &max);
    if (count < 0) abort();
    if (count > 0 && (isnan(mean) || isnan(max) || !isfinite(max) || (isfinite(mean) && mean - max > fabs(max) * 1e-12)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    const uint8_t *nl = memchr(data, '\n', size);
    size_t mlen = nl ? (size_t)(nl - data) : 0, start = nl ? mlen + 1 : 0;
    if (mlen > 64 || memchr(data, 0, mlen)) return 0;
    char match[65];
    memcpy(match, data, mlen);
    match[mlen] = '\0';
    size_t n = size - start;
    char *page = malloc(n ? n : 1); /* exactly the page's bytes: ASan sees any read past them */
    if (!page) return 0;
    memcpy(page, data + start, n);
    scan(page, n, mlen ? match : NULL);
    scan(page, n, NULL);
    free(page);
    return 0;
}
