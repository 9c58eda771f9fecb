/* file_write.c — the one way kiln writes a file: the output rules (never an input of this process,
 * never a device, FIFO, socket or directory, symbolic links written through), a temporary file next to
 * the target renamed over it, stale temporaries of dead processes removed, and the temporary removed
 * when SIGINT, SIGTERM or SIGHUP ends the process mid-write. A write may stay open while its bytes are
 * produced, written in ranges at any offset (kiln_file_out). A large range (an engine's gigabytes of
 * weights) is written with few pwritev calls, in contiguous parts on a few threads at once. */
#include "core/file.h"

#include "core/log.h"
#include "core/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define TMP_SUFFIX ".kiln.tmp"
#define MAX_LINK_HOPS 40

/* "a directory", "a FIFO", ... for a file type that is not a regular file. */
static const char *kind_name(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

/* malloc'd path of what `link` (read from the symbolic link at `at`) names: itself when absolute,
 * else relative to at's directory. NULL when out of memory. */
static char *link_target(const char *at, const char *link) {
    if (link[0] == '/') return strdup(link);
    const char *slash = strrchr(at, '/');
    size_t dir = slash ? (size_t)(slash - at) + 1 : 0;
    char *p = malloc(dir + strlen(link) + 1);
    if (p) {
        memcpy(p, at, dir);
        strcpy(p + dir, link);
    }
    return p;
}

/* The file an output at path writes: path, or the end of the chain of symbolic links starting there
 * (which may not exist yet). *target is malloc'd; *exists and *st say whether and what it is. */
static kiln_status resolve_output(const char *path, char **target, bool *exists, struct stat *st) {
    char *cur = strdup(path);
    if (!cur) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int hops = 0;; hops++) {
        if (lstat(cur, st) != 0) {
            int e = errno;
            if (e == ENOENT) {
                *target = cur;
                *exists = false;
                return KILN_OK;
            }
            free(cur);
            return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(e));
        }
        if (!S_ISLNK(st->st_mode)) break;
        if (hops == MAX_LINK_HOPS) {
            free(cur);
            return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(ELOOP));
        }
        char link[PATH_MAX];
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) {
            int e = errno;
            free(cur);
            return kiln_error(KILN_ERR_IO, "cannot read the symbolic link '%s': %s", path, strerror(e));
        }
        link[n] = '\0';
        char *next = link_target(cur, link);
        free(cur);
        if (!(cur = next)) return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *target = cur;
    *exists = true;
    return KILN_OK;
}

/* The output rules on a resolved target (see kiln_file_check_output). */
static kiln_status check_target(const char *path, const char *target, bool exists, const struct stat *st) {
    if (!exists) return KILN_OK;
    const char *via = strcmp(path, target) ? " (through a symbolic link)" : "";
    if (!S_ISREG(st->st_mode))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "refusing to write '%s'%s: it is %s, not a regular file", path,
                          via, kind_name(st->st_mode));
    char input[PATH_MAX];
    if (kiln_file_is_input(target, input, sizeof input))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT,
                          "refusing to write '%s'%s: it is the input file '%s'; choose another output file", path,
                          via, input);
    return KILN_OK;
}

/* Resolves path (resolve_output) and applies the output rules; on success *target is malloc'd. */
static kiln_status prepare_output(const char *path, char **target, bool *exists, struct stat *st) {
    if (!path[0]) return kiln_error(KILN_ERR_INVALID_ARGUMENT, "an output file name is empty");
    KILN_TRY(resolve_output(path, target, exists, st));
    kiln_status s = check_target(path, *target, *exists, st);
    if (s != KILN_OK) free(*target);
    return s;
}

kiln_status kiln_file_check_output(const char *path) {
    char *target = NULL;
    bool exists;
    struct stat st;
    KILN_TRY(prepare_output(path, &target, &exists, &st));
    free(target);
    return KILN_OK;
}

/* Removes "BASE.kiln.tmpPID" files in target's directory whose process is gone (or is this one: a
 * name this write is about to use). Best effort: what cannot be removed stays. */
static void remove_stale_temporaries(const char *target) {
    const char *slash = strrchr(target, '/');
    const char *base = slash ? slash + 1 : target;
    char dir[PATH_MAX], prefix[NAME_MAX + 1];
    if (snprintf(prefix, sizeof prefix, "%s%s", base, TMP_SUFFIX) >= (int)sizeof prefix) return;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == target) snprintf(dir, sizeof dir, "/");
    else if (snprintf(dir, sizeof dir, "%.*s", (int)(slash - target), target) >= (int)sizeof dir) return;
    DIR *d = opendir(dir);
    if (!d) return;
    size_t plen = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, plen)) continue;
        const char *digits = e->d_name + plen;
        char *end;
        long pid = strtol(digits, &end, 10);
        if (digits[0] < '1' || digits[0] > '9' || *end || pid > INT_MAX) continue;
        if (pid != getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)) continue; /* alive */
        char stale[PATH_MAX];
        if (snprintf(stale, sizeof stale, "%s/%s", dir, e->d_name) < (int)sizeof stale) unlink(stale);
    }
    closedir(d);
}

/* The temporaries being written, for the signal handler: a slot's path may be read by the handler
 * only while its `active` flag is set. g_slots_lock guards taking and giving back slots and the
 * handlers' installation (installed while any slot is active); the writes themselves run unlocked, so
 * one write may stay open while others start and finish (an engine file written during a build that
 * also writes a timing cache). */
#define MAX_OPEN_WRITES 8
typedef struct tmp_slot {
    char path[PATH_MAX];
    volatile sig_atomic_t active;
} tmp_slot;
static pthread_mutex_t g_slots_lock = PTHREAD_MUTEX_INITIALIZER;
static tmp_slot g_slots[MAX_OPEN_WRITES];
static int g_open_writes;
static const int g_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSIGNALS ((int)(sizeof g_signals / sizeof g_signals[0]))
static struct sigaction g_saved[NSIGNALS];
static bool g_installed[NSIGNALS];

/* Async-signal-safe: removes the temporaries, restores the signal's default action and raises it
 * again (delivered when this handler returns), so the process ends as it would have. */
static void on_fatal_signal(int sig) {
    int saved_errno = errno;
    for (int i = 0; i < MAX_OPEN_WRITES; i++) {
        if (g_slots[i].active) unlink(g_slots[i].path);
        g_slots[i].active = 0;
    }
    for (int i = 0; i < NSIGNALS; i++)
        if (g_signals[i] == sig) sigaction(sig, &g_saved[i], NULL);
    raise(sig);
    errno = saved_errno;
}

/* Installs on_fatal_signal for each signal whose action is the default one (a program that ignores
 * or handles a signal itself keeps doing so). */
static void install_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < NSIGNALS; i++) {
        g_installed[i] = false;
        if (sigaction(g_signals[i], NULL, &g_saved[i]) != 0 || g_saved[i].sa_handler != SIG_DFL) continue;
        g_installed[i] = sigaction(g_signals[i], &sa, NULL) == 0;
    }
}

static void restore_handlers(void) {
    for (int i = 0; i < NSIGNALS; i++)
        if (g_installed[i]) sigaction(g_signals[i], &g_saved[i], NULL);
}

#define WRITE_MAX_THREADS 4
#define WRITE_MIN_PER_THREAD ((uint64_t)64 << 20)
#define WRITE_MAX_IOV 1024

/* Bytes [begin, end) of the concatenated chunks, written from file offset base + begin. */
typedef struct write_part {
    int fd;
    uint64_t base;
    const void *const *chunks;
    const size_t *sizes;
    int nchunks;
    uint64_t begin, end;
    int err; /* 0, or the errno of the failure */
} write_part;

/* Writes the part with pwritev calls of up to WRITE_MAX_IOV chunks each, retrying short writes and
 * EINTR. */
static void *write_part_run(void *arg) {
    write_part *p = arg;
    struct iovec iov[WRITE_MAX_IOV];
    for (uint64_t pos = p->begin; pos < p->end;) {
        int niov = 0;
        uint64_t at = 0;
        for (int i = 0; i < p->nchunks && at < p->end && niov < WRITE_MAX_IOV; at += p->sizes[i++]) {
            uint64_t lo = pos > at ? pos : at, hi = at + p->sizes[i] < p->end ? at + p->sizes[i] : p->end;
            if (lo < hi) iov[niov++] = (struct iovec){(char *)p->chunks[i] + (lo - at), (size_t)(hi - lo)};
        }
        ssize_t n = pwritev(p->fd, iov, niov, (off_t)(p->base + pos));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            p->err = n == 0 ? EIO : errno;
            return NULL;
        }
        pos += (uint64_t)n;
    }
    return NULL;
}

/* Writes every chunk to fd from offset base, a large range in contiguous parts on up to
 * WRITE_MAX_THREADS threads at once (a thread that cannot start leaves its part to this one); false
 * with errno set on failure. */
static bool write_all(int fd, uint64_t base, const void *const *chunks, const size_t *sizes, int nchunks) {
    uint64_t total = 0;
    for (int i = 0; i < nchunks; i++) total += sizes[i];
    uint64_t parts = total / WRITE_MIN_PER_THREAD;
    if (parts > WRITE_MAX_THREADS) parts = WRITE_MAX_THREADS;
    if (parts < 1) parts = 1;
    write_part part[WRITE_MAX_THREADS];
    pthread_t th[WRITE_MAX_THREADS];
    bool started[WRITE_MAX_THREADS] = {false};
    for (uint64_t k = 0; k < parts; k++) {
        part[k] = (write_part){fd, base, chunks, sizes, nchunks, total / parts * k,
                               k + 1 == parts ? total : total / parts * (k + 1), 0};
        if (k > 0) started[k] = pthread_create(&th[k], NULL, write_part_run, &part[k]) == 0;
    }
    for (uint64_t k = 0; k < parts; k++)
        if (!started[k]) write_part_run(&part[k]);
    int err = 0;
    for (uint64_t k = 0; k < parts; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        if (!err) err = part[k].err;
    }
    errno = err;
    return err == 0;
}

struct kiln_file_out {
    char *path;   /* as the caller named it, for messages */
    char *target; /* the resolved file the rename replaces */
    int slot;     /* in g_slots: the temporary's name */
    int fd;
    double write_ms;
    uint64_t written;
};

/* Gives back f's slot (removing the temporary first unless keep) and frees f. */
static void out_release(kiln_file_out *f, bool remove_tmp) {
    pthread_mutex_lock(&g_slots_lock);
    if (remove_tmp) unlink(g_slots[f->slot].path);
    g_slots[f->slot].active = 0;
    if (--g_open_writes == 0) restore_handlers();
    pthread_mutex_unlock(&g_slots_lock);
    free(f->path);
    free(f->target);
    free(f);
}

/* Takes a free slot for the temporary of target, removing stale temporaries of target first:
 * the slot index, or -1 with *err set (EBUSY: this process writes target already). */
static int take_slot(const char *target, int *err) {
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s%s%d", target, TMP_SUFFIX, (int)getpid()) >= sizeof tmp) {
        *err = ENAMETOOLONG;
        return -1;
    }
    pthread_mutex_lock(&g_slots_lock);
    int slot = -1;
    for (int i = 0; i < MAX_OPEN_WRITES; i++) {
        if (g_slots[i].active && !strcmp(g_slots[i].path, tmp)) {
            pthread_mutex_unlock(&g_slots_lock);
            *err = EBUSY;
            return -1;
        }
        if (!g_slots[i].active && slot < 0) slot = i;
    }
    if (slot < 0) {
        pthread_mutex_unlock(&g_slots_lock);
        *err = EMFILE;
        return -1;
    }
    remove_stale_temporaries(target);
    memcpy(g_slots[slot].path, tmp, sizeof tmp);
    atomic_signal_fence(memory_order_seq_cst); /* the handler sees the name whole once it sees the flag */
    g_slots[slot].active = 1;
    if (g_open_writes++ == 0) install_handlers();
    pthread_mutex_unlock(&g_slots_lock);
    return slot;
}

kiln_status kiln_file_out_open(const char *path, kiln_file_out **out) {
    *out = NULL;
    char *target = NULL;
    bool exists;
    struct stat st;
    KILN_TRY(prepare_output(path, &target, &exists, &st));
    kiln_file_out *f = calloc(1, sizeof *f);
    char *name = strdup(path);
    if (!f || !name) {
        free(f), free(name), free(target);
        return kiln_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    *f = (kiln_file_out){.path = name, .target = target, .fd = -1};
    int err = 0;
    if ((f->slot = take_slot(target, &err)) < 0) {
        kiln_status s = err == EBUSY ? kiln_error(KILN_ERR_IO, "cannot write '%s': this process is writing it already", path)
                                     : kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(err));
        free(f->path), free(f->target), free(f);
        return s;
    }
    const char *tmp = g_slots[f->slot].path;
    f->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (f->fd < 0 || (exists && fchmod(f->fd, st.st_mode & 07777) != 0)) {
        kiln_status s = kiln_error(KILN_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        if (f->fd >= 0) close(f->fd);
        out_release(f, f->fd >= 0);
        return s;
    }
    *out = f;
    return KILN_OK;
}

kiln_status kiln_file_out_write_at(kiln_file_out *f, uint64_t offset, const void *const *chunks, const size_t *sizes,
                                   int nchunks) {
    double t0 = kiln_log_now_ms();
    if (!write_all(f->fd, offset, chunks, sizes, nchunks))
        return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", f->path, strerror(errno));
    double ms = kiln_log_now_ms() - t0;
    uint64_t n = 0;
    for (int i = 0; i < nchunks; i++) n += sizes[i];
    pthread_mutex_lock(&g_slots_lock);
    f->write_ms += ms;
    f->written += n;
    pthread_mutex_unlock(&g_slots_lock);
    return KILN_OK;
}

kiln_status kiln_file_out_sync(kiln_file_out *f) {
    if (fsync(f->fd) != 0) return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", f->path, strerror(errno));
    return KILN_OK;
}

kiln_status kiln_file_out_commit(kiln_file_out *f) {
    double t0 = kiln_log_now_ms();
    /* one fsync at the end: starting write-back per written range (sync_file_range) is a full-file fsync
     * under gVisor, where the GPU host runs, and on a Firecracker VM it made 1-2 GB writes slower */
    bool ok = fsync(f->fd) == 0;
    int err = errno;
    const char *what = "cannot write";
    if (ok) KILN_LOG(KILN_LOG_VERBOSE, "file write: '%s' %.2f MB written in %.1f ms, fsync %.1f ms", f->target,
                     f->written / 1e6, f->write_ms, kiln_log_now_ms() - t0);
    if (close(f->fd) != 0 && ok) ok = false, err = errno;
    if (ok && rename(g_slots[f->slot].path, f->target) != 0) ok = false, err = errno, what = "cannot rename onto";
    kiln_status s = ok ? kiln_file_note_output(f->target) : kiln_error(KILN_ERR_IO, "%s '%s': %s", what, f->path, strerror(err));
    out_release(f, !ok);
    return s;
}

void kiln_file_out_abort(kiln_file_out *f) {
    if (!f) return;
    close(f->fd);
    out_release(f, true);
}

kiln_status kiln_file_write_atomic(const char *path, const void *const *chunks, const size_t *sizes, int nchunks) {
    kiln_file_out *f;
    KILN_TRY(kiln_file_out_open(path, &f));
    kiln_status s = kiln_file_out_write_at(f, 0, chunks, sizes, nchunks);
    if (s != KILN_OK) {
        kiln_file_out_abort(f);
        return s;
    }
    return kiln_file_out_commit(f);
}

kiln_status kiln_file_output_dir(const char *dir) {
    struct stat st;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return kiln_error(KILN_ERR_IO, "cannot create the directory '%s': %s", dir, strerror(errno));
    if (stat(dir, &st) != 0) return kiln_error(KILN_ERR_IO, "cannot examine '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return kiln_error(KILN_ERR_INVALID_ARGUMENT, "'%s' is %s, not a directory for the output files", dir,
                          S_ISREG(st.st_mode) ? "a file" : kind_name(st.st_mode));
    return KILN_OK;
}
