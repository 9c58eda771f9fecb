/* file.c — mmap-based file reading, and the set of files this process has read as inputs (by device and
 * inode), which the atomic writer (file_write.c) refuses to replace. Files the process wrote itself
 * stay its own: reading one back (an engine saved, then loaded) does not make it an input. */
#include "core/file.h"

#include "core/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* One recorded file: its identity, the name it was first seen under (for messages), and whether this
 * process wrote it (then it is not an input) with its status-change time then: a file found later at
 * the same inode with another time is someone else's (changed since, or a new file reusing the inode). */
typedef struct input_file {
    dev_t dev;
    ino_t ino;
    char *name;
    bool written;
    struct timespec written_ctime;
} input_file;

static struct {
    pthread_mutex_t lock;
    input_file *files;
    size_t n, cap;
} g_inputs = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Index of (dev, ino) in g_inputs, or -1. Called with the lock held. */
static ptrdiff_t find_input(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < g_inputs.n; i++)
        if (g_inputs.files[i].dev == dev && g_inputs.files[i].ino == ino) return (ptrdiff_t)i;
    return -1;
}

/* Records the file st describes under path, as written by this process or (unless it was) as an
 * input; KILN_ERR_OUT_OF_MEMORY is the only failure. */
static kiln_status note_stat(const char *path, const struct stat *st, bool written) {
    kiln_status s = KILN_OK;
    pthread_mutex_lock(&g_inputs.lock);
    ptrdiff_t i = find_input(st->st_dev, st->st_ino);
    if (i >= 0) {
        input_file *f = &g_inputs.files[i];
        bool same = f->written && f->written_ctime.tv_sec == st->st_ctim.tv_sec &&
                    f->written_ctime.tv_nsec == st->st_ctim.tv_nsec;
        if (written || (f->written && !same)) { /* just written here, or no longer what was written */
            char *name = strdup(path);
            if (name) free(f->name), f->name = name;
            f->written = written;
            f->written_ctime = st->st_ctim;
        }
    } else {
        if (g_inputs.n == g_inputs.cap) {
            size_t cap = g_inputs.cap ? 2 * g_inputs.cap : 16;
            input_file *grown = realloc(g_inputs.files, cap * sizeof *grown);
            if (grown) g_inputs.files = grown, g_inputs.cap = cap;
        }
        char *name = g_inputs.n < g_inputs.cap ? strdup(path) : NULL;
        if (name) g_inputs.files[g_inputs.n++] = (input_file){st->st_dev, st->st_ino, name, written, st->st_ctim};
        else s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory recording the input '%s'", path);
    }
    pthread_mutex_unlock(&g_inputs.lock);
    return s;
}

kiln_status kiln_file_note_input(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? note_stat(path, &st, false) : KILN_OK;
}

kiln_status kiln_file_note_output(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? note_stat(path, &st, true) : KILN_OK;
}

kiln_status kiln_file_note_inputs_in_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return KILN_OK; /* the reader that needs the directory reports why it cannot open it */
    kiln_status s = KILN_OK;
    size_t n = strlen(dir);
    for (struct dirent *e; s == KILN_OK && (e = readdir(d));) {
        char *path = malloc(n + strlen(e->d_name) + 2);
        if (!path) {
            s = kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
            break;
        }
        sprintf(path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) s = note_stat(path, &st, false);
        free(path);
    }
    closedir(d);
    return s;
}

bool kiln_file_is_input(const char *path, char *name, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    pthread_mutex_lock(&g_inputs.lock);
    ptrdiff_t i = find_input(st.st_dev, st.st_ino);
    bool input = i >= 0 && !g_inputs.files[i].written;
    if (input && cap) snprintf(name, cap, "%s", g_inputs.files[i].name);
    pthread_mutex_unlock(&g_inputs.lock);
    return input;
}

/* Maps path; records it as an input when note is set; populates the mapping when populate is set. */
static kiln_status map_file(const char *path, bool note, bool populate, kiln_file_map *out) {
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
    kiln_status s = note ? note_stat(path, &st, false) : KILN_OK;
    if (s != KILN_OK) {
        close(fd);
        return s;
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
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

kiln_status kiln_file_map_open(const char *path, kiln_file_map *out) {
    return map_file(path, true, false, out);
}

kiln_status kiln_file_map_open_for_update(const char *path, kiln_file_map *out) {
    return map_file(path, false, false, out);
}

void kiln_file_unmap(kiln_file_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

/* kiln_file_map_new, populated or not. */
static kiln_status map_new(const char *path, bool populate, kiln_file_map **out) {
    kiln_file_map *m = malloc(sizeof *m);
    if (!m) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = map_file(path, true, populate, m);
    if (s != KILN_OK) {
        free(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_file_map_new(const char *path, kiln_file_map **out) { return map_new(path, false, out); }

kiln_status kiln_file_map_new_populated(const char *path, kiln_file_map **out) { return map_new(path, true, out); }

void kiln_file_map_free(void *p) {
    if (!p) return;
    kiln_file_unmap(p);
    free(p);
}
