/* file.c — mmap-based file reading and atomic file writing. */
#include "core/file.h"

#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status kiln_file_map_open(const char *path, kiln_file_map *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kiln_error(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return kiln_error(KILN_ERR_IO, "'%s' is a directory, not a file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kiln_error(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(e));
        }
        out->data = p;
        out->size = (size_t)st.st_size;
    }
    close(fd);
    return KILN_OK;
}

void kiln_file_unmap(kiln_file_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

kiln_status kiln_file_map_new(const char *path, kiln_file_map **out) {
    kiln_file_map *m = malloc(sizeof *m);
    if (!m) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = kiln_file_map_open(path, m);
    if (s != KILN_OK) {
        free(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

void kiln_file_map_free(void *p) {
    if (!p) return;
    kiln_file_unmap(p);
    free(p);
}

kiln_status kiln_file_write_atomic(const char *path, const void *const *chunks, const size_t *sizes, int nchunks) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(tmp, n + 16, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kiln_status s = kiln_error(KILN_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    bool ok = true;
    for (int i = 0; i < nchunks && ok; i++)
        if (sizes[i] && fwrite(chunks[i], 1, sizes[i], f) != sizes[i]) ok = false;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = false;
    int e = errno;
    if (fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        unlink(tmp);
        free(tmp);
        return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    free(tmp);
    return KILN_OK;
}
