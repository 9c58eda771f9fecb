/* fuzz_npz.c — libFuzzer target for the .npz member listing (core/npz.c: `kiln build --int8 --calib
 * FILE.npz`). Every input is listed as a ZIP archive; each member found must lie inside the input,
 * and is then parsed as a .npy image (core/npy.c), as the calibration does. Seeds:
 * fuzz/corpus/fuzz_npz/ (archives np.savez wrote: one and several members, ZIP64 fields). */
#include "core/npy.h"
#include "core/npz.h"
#include "fuzz_util.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    kiln_npz_member *m;
    int count;
    if (kiln_npz_members(data, size, "fuzz", &m, &count) != KILN_OK) return 0;
    for (int i = 0; i < count; i++) {
        if (m[i].data < data || m[i].size > size || m[i].data - data > (ptrdiff_t)(size - m[i].size)) abort();
        kiln_tensor t;
        if (kiln_npy_parse(m[i].data, m[i].size, m[i].name, &t) == KILN_OK) kiln_tensor_release(&t);
    }
    kiln_npz_members_free(m, count);
    return 0;
}
