/* npz.h — the members of a NumPy .npz archive (a ZIP file of .npy files, as np.savez writes it): found
 * through the ZIP central directory (ZIP64 sizes and offsets included), stored members only —
 * np.savez_compressed's deflated members are refused with a message saying so. */
#ifndef KILN_CORE_NPZ_H
#define KILN_CORE_NPZ_H

#include "kiln/kiln.h"

#include <stddef.h>

typedef struct kiln_npz_member {
    char *name;                /* as stored, e.g. "input.npy" (owned) */
    const unsigned char *data; /* the .npy image inside the archive (borrowed from it) */
    size_t size;
} kiln_npz_member;

/* Lists the members of the .npz image zip[0..size) (what names it in messages). Fails with
 * KILN_ERR_PARSE (not a ZIP, truncated, a member outside the file) or KILN_ERR_UNSUPPORTED (a
 * compressed member), naming what and the member. The caller frees with kiln_npz_members_free. */
kiln_status kiln_npz_members(const unsigned char *zip, size_t size, const char *what, kiln_npz_member **out,
                             int *count);
void kiln_npz_members_free(kiln_npz_member *m, int count);

#endif
