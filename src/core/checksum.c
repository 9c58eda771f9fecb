/* checksum.c — CRC-32C: the SSE4.2 crc32 instruction on x86-64 CPUs that have it (about 8 bytes a
 * cycle), otherwise a portable slicing-by-8 table walk. Both give identical results; the choice is
 * made once per process. */
#include "core/checksum.h"

#include <pthread.h>
#include <stdbool.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define KILN_CRC_HW 1
#endif

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */

static uint32_t crc_table[8][256]; /* crc_table[k][b]: byte b followed by k zero bytes */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_use_hw;

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc_table[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xFF];
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
