/* file_write.c — the one way kiln writes a file: the output rules (never an input of this process,
 * never a device, FIFO, socket or directory, symbolic links written through), a temporary file next to
 * the target renamed over it, stale temporaries of dead processes removed, and the temporary removed
 * when SIGINT, SIGTERM or SIGHUP ends the process mid-write. A large file (an engine's gigabytes of
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

/* The temporary being written, for the signal handler: only it may read these, and only while
 * g_tmp_active is set. One write at a time (g_write_lock) keeps them single. */
static pthread_mutex_t g_write_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_tmp_path[PATH_MAX];
static volatile sig_atomic_t g_tmp_active;
static const int g_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSIGNALS ((int)(sizeof g_signals / sizeof g_signals[0]))
static struct sigaction g_saved[NSIGNALS];
static bool g_installed[NSIGNALS];

/* Async-signal-safe: removes the temporary, restores the signal's default action and raises it again
 * (delivered when this handler returns), so the process ends as it would have. */
static void on_fatal_signal(int sig) {
    int saved_errno = errno;
    if (g_tmp_active) unlink(g_tmp_path);
    g_tmp_active = 0;
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

/* Bytes [begin, end) of the concatenated chunks, written at those file offsets. */
typedef struct write_part {
    int fd;
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
        ssize_t n = pwritev(p->fd, iov, niov, (off_t)pos);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            p->err = n == 0 ? EIO : errno;
            return NULL;
        }
        pos += (uint64_t)n;
    }
    return NULL;
}

/* Writes every chunk to fd from offset 0, a large file in contiguous parts on up to
 * WRITE_MAX_THREADS threads at once (a thread that cannot start leaves its part to this one); false
 * with errno set on failure. */
static bool write_all(int fd, const void *const *chunks, const size_t *sizes, int nchunks) {
    uint64_t total = 0;
    for (int i = 0; i < nchunks; i++) total += sizes[i];
    uint64_t parts = total / WRITE_MIN_PER_THREAD;
    if (parts > WRITE_MAX_THREADS) parts = WRITE_MAX_THREADS;
    if (parts < 1) parts = 1;
    write_part part[WRITE_MAX_THREADS];
    pthread_t th[WRITE_MAX_THREADS];
    bool started[WRITE_MAX_THREADS] = {false};
    for (uint64_t k = 0; k < parts; k++) {
        part[k] = (write_part){fd, chunks, sizes, nchunks, total / parts * k,
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

/* Writes the chunks to g_tmp_path and renames it over target; errno-style failure in *err with the
 * step that failed in *what. */
static bool write_and_rename(const char *target, bool exists, const struct stat *st, const void *const *chunks,
                             const size_t *sizes, int nchunks, int *err, const char **what) {
    g_tmp_active = 1;
    int fd = open(g_tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        *err = errno, *what = "cannot create";
        g_tmp_active = 0;
        return false;
    }
    double t0 = kiln_log_now_ms();
    bool ok = (!exists || fchmod(fd, st->st_mode & 07777) == 0) && write_all(fd, chunks, sizes, nchunks);
    double t1 = kiln_log_now_ms();
    /* one fsync at the end: starting write-back per written range (sync_file_range) is a full-file fsync
     * under gVisor, where the GPU host runs, and on a Firecracker VM it made 1-2 GB writes slower */
    ok = ok && fsync(fd) == 0;
    if (!ok) *err = errno, *what = "cannot write";
    if (ok) KILN_LOG(KILN_LOG_VERBOSE, "file write: '%s' written in %.1f ms, fsync %.1f ms", target, t1 - t0,
                     kiln_log_now_ms() - t1);
    if (close(fd) != 0 && ok) ok = false, *err = errno, *what = "cannot write";
    if (ok && rename(g_tmp_path, target) != 0) ok = false, *err = errno, *what = "cannot rename onto";
    if (!ok) unlink(g_tmp_path);
    g_tmp_active = 0;
    return ok;
}

kiln_status kiln_file_write_atomic(const char *path, const void *const *chunks, const size_t *sizes, int nchunks) {
    char *target = NULL;
    bool exists;
    struct stat st;
    KILN_TRY(prepare_output(path, &target, &exists, &st));
    if ((size_t)snprintf(NULL, 0, "%s%s%d", target, TMP_SUFFIX, (int)getpid()) >= sizeof g_tmp_path) {
        free(target);
        return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(ENAMETOOLONG));
    }
    pthread_mutex_lock(&g_write_lock);
    remove_stale_temporaries(target);
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s%s%d", target, TMP_SUFFIX, (int)getpid());
    install_handlers();
    int err = 0;
    const char *what = "";
    bool ok = write_and_rename(target, exists, &st, chunks, sizes, nchunks, &err, &what);
    restore_handlers();
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", g_tmp_path);
    pthread_mutex_unlock(&g_write_lock);
    kiln_status s = ok ? kiln_file_note_output(target)
                       : kiln_error(KILN_ERR_IO, "%s '%s': %s", what, strcmp(what, "cannot create") ? path : tmp,
                                    strerror(err));
    free(target);
    return s;
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
