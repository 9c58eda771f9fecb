/* file.h — kiln's file I/O rules: read-only mapping of whole files (models, engines, weights), which
 * records each mapped file as an input of this process, and the one atomic writer every output goes
 * through, which never replaces an input, a device, a FIFO, a socket or a directory. */
#ifndef KILN_CORE_FILE_H
#define KILN_CORE_FILE_H

#include "kiln/kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_file_map {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
} kiln_file_map;

/* Maps path read-only and records it as an input of this process (kiln_file_note_input). Fails with
 * KILN_ERR_IO naming the path and the OS reason. On success the caller owns *out and releases it with
 * kiln_file_unmap. */
kiln_status kiln_file_map_open(const char *path, kiln_file_map *out);
/* Maps path as kiln_file_map_open does without recording it as an input: for the files kiln reads
 * and then rewrites itself (a timing cache, the ceilings file). */
kiln_status kiln_file_map_open_for_update(const char *path, kiln_file_map *out);
void kiln_file_unmap(kiln_file_map *m); /* accepts an already-unmapped / zeroed map */
/* Heap-allocated copy of kiln_file_map for kiln_graph_keep_alive (release with kiln_file_map_free). */
kiln_status kiln_file_map_new(const char *path, kiln_file_map **out);
/* kiln_file_map_new for a file that is about to be read whole (an ONNX model's external data, an
 * engine whose checksums read every byte): the pages are read in when it is mapped (MAP_POPULATE),
 * in one call rather than one page fault per page, which a hypervisor such as gVisor makes costly. */
kiln_status kiln_file_map_new_populated(const char *path, kiln_file_map **out);
void kiln_file_map_free(void *m);

/* Records the file path names (its device and inode, so every link and spelling of it counts) as an
 * input of this process: kiln_file_write_atomic refuses to replace it from then on. A missing file, and
 * one this process wrote itself, are not recorded. Thread-safe. KILN_ERR_OUT_OF_MEMORY is the only
 * failure. */
kiln_status kiln_file_note_input(const char *path);
/* Records the file path names as one this process wrote (kiln_file_write_atomic does): reading it
 * back later does not make it an input. */
kiln_status kiln_file_note_output(const char *path);
/* Records every regular file directly inside dir as an input (a checkpoint directory: config.json,
 * the safetensors shards, the tokenizer files and whatever else the user keeps there). */
kiln_status kiln_file_note_inputs_in_dir(const char *dir);
/* When the file path names (device and inode) is a recorded input: copies the name it was recorded
 * under into name (cap bytes) and returns true. */
bool kiln_file_is_input(const char *path, char *name, size_t cap);

/* Checks that path may be written as an output, without writing anything: KILN_ERR_INVALID_ARGUMENT
 * when path is or resolves to (through symbolic or hard links, `..`) a recorded input, or names
 * something other than a regular file (a directory, a device, a FIFO, a socket); KILN_ERR_IO when it
 * cannot be examined. A missing file, or a symbolic link to one, may be written. */
kiln_status kiln_file_check_output(const char *path);
/* Writes the chunks to path atomically, under the rules of kiln_file_check_output: to a temporary file
 * "TARGET.kiln.tmpPID" next to the target (path itself, or the file a symbolic link at path leads to,
 * the link staying in place), fsync, rename over the target; an existing target keeps its permission
 * bits. Temporaries of TARGET left by dead processes are removed first. SIGINT, SIGTERM and SIGHUP
 * (those not ignored or handled by the program) remove the temporary before they end the process.
 * KILN_ERR_IO on failure, with nothing left behind. */
kiln_status kiln_file_write_atomic(const char *path, const void *const *chunks, const size_t *sizes, int nchunks);
/* An atomic write kept open while its bytes are produced (an engine's weights written while the build
 * goes on): kiln_file_out_open checks path as kiln_file_check_output does and creates the temporary
 * "TARGET.kiln.tmpPID" (an existing target's permission bits, stale temporaries removed, the signal
 * cleanup of kiln_file_write_atomic), kiln_file_out_write_at writes ranges of it in any order,
 * kiln_file_out_commit fsyncs it and renames it over the target, kiln_file_out_abort removes it.
 * Up to 8 writes may be open at once in a process, one per target (a second open of the same target
 * fails with KILN_ERR_IO). Failures are KILN_ERR_IO naming path and the OS reason. */
typedef struct kiln_file_out kiln_file_out;
kiln_status kiln_file_out_open(const char *path, kiln_file_out **out);
/* Writes the chunks, concatenated, at file offset offset (a large range on several threads). Calls for
 * disjoint ranges may run at once from several threads; on failure the write stays open (abort it). */
kiln_status kiln_file_out_write_at(kiln_file_out *f, uint64_t offset, const void *const *chunks, const size_t *sizes,
                                   int nchunks);
/* Flushes what f has written so far to the disk (fsync), so that the commit's own fsync has less to
 * do; may run on another thread than the writes' when they are done. */
kiln_status kiln_file_out_sync(kiln_file_out *f);
/* Finishes the write: fsync, close, rename over the target. Frees f whether it succeeds or not (on
 * failure nothing is left behind and the target is untouched). */
kiln_status kiln_file_out_commit(kiln_file_out *f);
/* Gives up the write: removes the temporary and frees f; the target is untouched. Accepts NULL. */
void kiln_file_out_abort(kiln_file_out *f);
/* Makes dir a directory for output files: creates it (one level) when missing; KILN_ERR_INVALID_ARGUMENT
 * when it exists and is not a directory, KILN_ERR_IO when it cannot be created. */
kiln_status kiln_file_output_dir(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
