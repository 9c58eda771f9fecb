/* checksum.h — CRC-32C (Castagnoli), the checksum of engine files and anything else kiln writes that
 * must detect corruption. Parameters: reflected polynomial 0x82F63B78, initial value 0xFFFFFFFF,
 * final xor 0xFFFFFFFF (the CRC of iSCSI, ext4 and SSE4.2's crc32 instruction); the check value
 * kiln_crc32c("123456789", 9) is 0xE3069283. Uses the SSE4.2 instruction where the CPU has it. */
#ifndef KILN_CORE_CHECKSUM_H
#define KILN_CORE_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of data[0..size). data may be NULL when size is 0 (the CRC of nothing is 0). */
uint32_t kiln_crc32c(const void *data, size_t size);
/* Extends a finished CRC with more bytes: kiln_crc32c_update(kiln_crc32c(a), b) is the CRC of a
 * followed by b, and kiln_crc32c_update(0, b) == kiln_crc32c(b). */
uint32_t kiln_crc32c_update(uint32_t crc, const void *data, size_t size);
/* The CRC of a followed by b from crc_a = kiln_crc32c(a), crc_b = kiln_crc32c(b) and b's length,
 * without reading either (O(log size_b)). */
uint32_t kiln_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b);
/* The CRC of chunks[0] .. chunks[n-1] concatenated (sizes[i] bytes each; a chunk of 0 bytes may be
 * NULL). Above 64 MB it reads the bytes on several threads at once (at most 16, at most one per CPU);
 * a thread that cannot start leaves its share to the caller's. */
uint32_t kiln_crc32c_gather(const void *const *chunks, const size_t *sizes, int n);

#endif
