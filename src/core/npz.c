/* npz.c — listing the stored members of a .npz archive through the ZIP central directory (npz.h). */
#include "core/npz.h"

#include "core/status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EOCD_SIG 0x06054b50u
#define CDIR_SIG 0x02014b50u
#define LOCAL_SIG 0x04034b50u
#define ZIP64_EXTRA 0x0001u

static uint32_t u16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t u32(const unsigned char *p) { return u16(p) | u16(p + 2) << 16; }
static uint64_t u64(const unsigned char *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

void kiln_npz_members_free(kiln_npz_member *m, int count) {
    for (int i = 0; m && i < count; i++) free(m[i].name);
    free(m);
}

/* Replaces the 0xFFFFFFFF fields among *usize, *csize, *offset by the ZIP64 extra field's values (in
 * that order, only those present). False when the extra field is missing or short. */
static bool zip64_fields(const unsigned char *extra, size_t len, uint64_t *usize, uint64_t *csize, uint64_t *offset) {
    for (size_t p = 0; p + 4 <= len;) {
        uint32_t id = u16(extra + p), n = u16(extra + p + 2);
        if (p + 4 + n > len) return false;
        if (id == ZIP64_EXTRA) {
            const unsigned char *f = extra + p + 4;
            size_t at = 0;
            uint64_t *fields[3] = {usize, csize, offset};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xFFFFFFFFu) continue;
                if (at + 8 > n) return false;
                *fields[i] = u64(f + at);
                at += 8;
            }
            return true;
        }
        p += 4 + n;
    }
    return *usize != 0xFFFFFFFFu && *csize != 0xFFFFFFFFu && *offset != 0xFFFFFFFFu;
}

kiln_status kiln_npz_members(const unsigned char *zip, size_t size, const char *what, kiln_npz_member **out,
                             int *count) {
    *out = NULL;
    *count = 0;
    /* the end-of-central-directory record: 22 bytes plus a comment of at most 65535 */
    size_t eocd = SIZE_MAX;
    for (size_t back = 22; back <= size && back <= 22 + 65535; back++)
        if (u32(zip + size - back) == EOCD_SIG) {
            eocd = size - back;
            break;
        }
    if (eocd == SIZE_MAX) return kiln_error(KILN_ERR_PARSE, "%s: not a .npz (ZIP) archive", what);
    uint32_t entries = u16(zip + eocd + 10);
    uint64_t cd_off = u32(zip + eocd + 16);
    if (entries == 0xFFFF || cd_off == 0xFFFFFFFFu)
        return kiln_error(KILN_ERR_UNSUPPORTED, "%s: ZIP64 archives of over 65535 members or 4 GiB are not supported", what);
    kiln_npz_member *m = calloc(entries + 1, sizeof *m);
    if (!m) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    kiln_status s = KILN_OK;
    size_t p = cd_off;
    int n = 0;
    for (uint32_t e = 0; s == KILN_OK && e < entries; e++) {
        if (p > size || size - p < 46 || u32(zip + p) != CDIR_SIG) {
            s = kiln_error(KILN_ERR_PARSE, "%s: central directory entry %u is truncated or corrupt", what, e);
            break;
        }
        uint32_t method = u16(zip + p + 10), nlen = u16(zip + p + 28), xlen = u16(zip + p + 30), clen = u16(zip + p + 32);
        uint64_t csize = u32(zip + p + 20), usize = u32(zip + p + 24), local = u32(zip + p + 42);
        if (size - p - 46 < (size_t)nlen + xlen + clen) {
            s = kiln_error(KILN_ERR_PARSE, "%s: central directory entry %u is truncated", what, e);
            break;
        }
        const char *name = (const char *)zip + p + 46;
        if (!zip64_fields(zip + p + 46 + nlen, xlen, &usize, &csize, &local)) {
            s = kiln_error(KILN_ERR_PARSE, "%s: member '%.*s' has a bad ZIP64 field", what, (int)nlen, name);
            break;
        }
        if (method != 0) {
            s = kiln_error(KILN_ERR_UNSUPPORTED, "%s: member '%.*s' is compressed (np.savez_compressed); save the batches "
                           "with np.savez", what, (int)nlen, name);
            break;
        }
        if (local > size || size - local < 30 || u32(zip + local) != LOCAL_SIG) {
            s = kiln_error(KILN_ERR_PARSE, "%s: member '%.*s' points outside the file", what, (int)nlen, name);
            break;
        }
        uint64_t data = local + 30 + u16(zip + local + 26) + u16(zip + local + 28);
        if (data > size || size - data < csize || csize != usize) {
            s = kiln_error(KILN_ERR_PARSE, "%s: member '%.*s' is truncated", what, (int)nlen, name);
            break;
        }
        if (!(m[n].name = strndup(name, nlen))) {
            s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
            break;
        }
        m[n].data = zip + data;
        m[n++].size = (size_t)csize;
        p += 46 + (size_t)nlen + xlen + clen;
    }
    if (s != KILN_OK) {
        kiln_npz_members_free(m, n);
        return s;
    }
    *out = m;
    *count = n;
    return KILN_OK;
}
