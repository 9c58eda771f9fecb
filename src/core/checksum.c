/* checksum.c — CRC-32C: the SSE4.2 crc32 instruction on x86-64 CPUs that have it (about 8 bytes a
 * cycle), otherwise a portable slicing-by-8 table walk. Both give identical results; the choice is
 * made once per process. Gigabytes (an engine's weights) are split over threads whose CRCs are then
 * joined: appending n bytes multiplies a CRC by x^(8n) modulo the polynomial. */
#include "core/checksum.h"

#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KILN_CRC_HW 1
#endif

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */

static uint32_t crc_table[8][256]; /* crc_table[k][b]: byte b followed by k zero bytes */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_use_hw;
static uint32_t crc_x2k[64]; /* crc_x2k[k]: x^(2^k) modulo the polynomial, reflected */

/* a * b modulo the polynomial, both reflected (bit 31 is the coefficient of x^0). */
static uint32_t gf_mul(uint32_t a, uint32_t b) {
    uint32_t p = 0;
    for (int i = 0; i < 32; i++) {
        if (a & (0x80000000u >> i)) p ^= b;
        b = (b >> 1) ^ (CRC32C_POLY & (0u - (b & 1u)));
    }
    return p;
}

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xFF];
    crc_x2k[0] = 0x40000000u; /* x^1 */
    for (int k = 1; k < 64; k++) crc_x2k[k] = gf_mul(crc_x2k[k - 1], crc_x2k[k - 1]);
#ifdef KILN_CRC_HW
    __builtin_cpu_init();
    crc_use_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* Raw (un-inverted) CRC state over p[0..n), 8 bytes at a time through the tables. */
static uint32_t crc_sw(uint32_t c, const unsigned char *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
            crc_table[0][p[7]];
    }
    for (; n; n--, p++) c = (c >> 8) ^ crc_table[0][(c ^ *p) & 0xFF];
    return c;
}

#ifdef KILN_CRC_HW
/* Raw CRC state over p[0..n) with the SSE4.2 instruction (x86 is little-endian, so an 8-byte load
 * is the bytes in stream order). */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        __builtin_memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
    for (; n; n--, p++) c = _mm_crc32_u8(c, *p);
    return c;
}
#endif

uint32_t kiln_crc32c_update(uint32_t crc, const void *data, size_t size) {
    pthread_once(&crc_once, crc_init);
    if (size == 0) return crc;
    uint32_t c = ~crc;
#ifdef KILN_CRC_HW
    if (crc_use_hw) return ~crc_hw(c, data, size);
#endif
    return ~crc_sw(c, data, size);
}

uint32_t kiln_crc32c(const void *data, size_t size) { return kiln_crc32c_update(0, data, size); }

uint32_t kiln_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
    pthread_once(&crc_once, crc_init);
    uint32_t shifted = crc_a;
    for (int k = 3; size_b && k < 64; k++, size_b >>= 1) /* x^(8 size_b) = product of x^(2^k), k = bit + 3 */
        if (size_b & 1) shifted = gf_mul(crc_x2k[k], shifted);
    return shifted ^ crc_b;
}

/* ---- the CRC of a gather list, on threads when it is large ---- */

#define GATHER_MAX_THREADS 16
#define GATHER_MIN_PER_THREAD ((uint64_t)64 << 20)

typedef struct gather_part {
    const void *const *chunks;
    const size_t *sizes;
    int n;
    uint64_t begin, end; /* the bytes of the concatenation this part covers */
    uint32_t crc;
} gather_part;

/* The CRC of bytes [begin, end) of the concatenation of the chunks. */
static void *gather_part_run(void *arg) {
    gather_part *p = arg;
    uint32_t crc = 0;
    uint64_t at = 0;
    for (int i = 0; i < p->n && at < p->end; at += p->sizes[i++]) {
        uint64_t lo = p->begin > at ? p->begin : at, hi = at + p->sizes[i] < p->end ? at + p->sizes[i] : p->end;
        if (lo < hi) crc = kiln_crc32c_update(crc, (const unsigned char *)p->chunks[i] + (lo - at), (size_t)(hi - lo));
    }
    p->crc = crc;
    return NULL;
}

uint32_t kiln_crc32c_gather(const void *const *chunks, const size_t *sizes, int n) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t parts = total / GATHER_MIN_PER_THREAD;
    if (parts > GATHER_MAX_THREADS) parts = GATHER_MAX_THREADS;
    if (cpus > 0 && parts > (uint64_t)cpus) parts = (uint64_t)cpus;
    if (parts < 1) parts = 1;
    gather_part part[GATHER_MAX_THREADS];
    pthread_t th[GATHER_MAX_THREADS];
    bool started[GATHER_MAX_THREADS] = {false};
    for (uint64_t k = 0; k < parts; k++) {
        part[k] = (gather_part){chunks, sizes, n, total / parts * k, k + 1 == parts ? total : total / parts * (k + 1), 0};
        if (k > 0) started[k] = pthread_create(&th[k], NULL, gather_part_run, &part[k]) == 0;
    }
    for (uint64_t k = 0; k < parts; k++) /* part 0, and any whose thread did not start, on this thread */
        if (!started[k]) gather_part_run(&part[k]);
    uint32_t crc = 0;
    for (uint64_t k = 0; k < parts; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        crc = kiln_crc32c_combine(crc, part[k].crc, part[k].end - part[k].begin);
    }
    return crc;
}
