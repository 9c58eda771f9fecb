/* calib_io.h — the files of INT8 calibration: the batches of a calibration directory and the
 * calibration cache.
 *
 * Calibration data: a directory of .npy files or a .npz archive (np.savez) of arrays, either one per
 * input and batch named `<input>.<k>` (`<input>.<k>.npy`; k = 0, 1, ...; every input of the model for
 * each k), or — for a model with one input — any arrays, each one batch, taken in name order.
 *
 * Cache (text): "kiln-int8-calibration 1", "model-sha256 <digest of the model file>",
 * "calibrator <name>", then one "<threshold as a C99 hex float> <tensor name>" per line. A cache
 * whose digest is not the model's is refused: its thresholds belong to another model. */
#ifndef KILN_QUANT_CALIB_IO_H
#define KILN_QUANT_CALIB_IO_H

#include "core/file.h"
#include "core/npz.h"
#include "core/tensor.h"

#include <stdbool.h>

/* The batches found: paths[b * ninputs + i] is input i of batch b (a file path, or a member name of
 * the mapped archive npz). */
typedef struct kiln_calib_batches {
    int nbatches, ninputs;
    char **paths;
    kiln_file_map npz;         /* data NULL for a directory */
    kiln_npz_member *members;
    int nmembers;
} kiln_calib_batches;

/* Finds the batches in dir (a directory, or a file whose name ends in .npz) for inputs
 * names[0..ninputs) (at most max_batches when > 0). Fails with KILN_ERR_IO (unreadable), the .npz
 * reader's errors, or KILN_ERR_INVALID_ARGUMENT (no batches; an input missing from batch k), naming
 * what is wrong. The caller frees *out with kiln_calib_batches_free. */
kiln_status kiln_calib_batches_find(const char *dir, int ninputs, const char *const *names, int max_batches,
                                    kiln_calib_batches *out);
/* Reads input `input` of batch `batch` into a new owned tensor. */
kiln_status kiln_calib_batch_load(const kiln_calib_batches *b, int batch, int input, kiln_tensor *out);
void kiln_calib_batches_free(kiln_calib_batches *b);

/* The SHA-256 of the file at path as 64 hex digits (the model's identity in a cache). */
kiln_status kiln_calib_model_digest(const char *path, char out[65]);

/* Reads the thresholds of names[0..n) from the cache at path into thresholds[]; *found is false
 * when path does not exist (nothing read). Fails with KILN_ERR_INVALID_ARGUMENT when the file is not
 * a calibration cache, was made for another model (digest), or lacks one of the names — each message
 * names the file and says how to recalibrate. */
kiln_status kiln_calib_cache_read(const char *path, const char *digest, int n, const char *const *names,
                                  double *thresholds, bool *found);
/* Writes the cache (atomically). */
kiln_status kiln_calib_cache_write(const char *path, const char *digest, const char *calibrator, int n,
                                   const char *const *names, const double *thresholds);

#endif
