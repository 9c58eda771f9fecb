/* sha256.h — SHA-256 (FIPS 180-4), for hashed API keys (`kiln serve --keys`): small and unhurried,
 * not for bulk data. kiln_sha256_hex("abc") is ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad. */
#ifndef KILN_CORE_SHA256_H
#define KILN_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define KILN_SHA256_BYTES 32

/* The digest of data[0..size) into out. data may be NULL when size is 0. */
void kiln_sha256(const void *data, size_t size, uint8_t out[KILN_SHA256_BYTES]);
/* The digest as 64 lowercase hex digits and a NUL. */
void kiln_sha256_hex(const void *data, size_t size, char out[2 * KILN_SHA256_BYTES + 1]);

#endif
