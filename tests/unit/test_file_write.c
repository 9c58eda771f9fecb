/* test_file_write.c — tests of kiln's output rules and atomic writer (src/core/file_write.c, the input
 * set of src/core/file.c): a file read as an input is never replaced, whatever path names it (itself,
 * a symbolic link, a hard link, `..`, a whole checkpoint directory); directories, FIFOs, devices and
 * sockets are refused without blocking; a symbolic link is written through and stays a link; permission
 * bits survive a rewrite; what the process wrote itself is not an input; temporaries of dead processes
 * are removed; SIGTERM mid-write removes the temporary; a large gather list lands byte for byte and
 * maps back the same, populated. */
#include "check.h"
#include "core/file.h"
#include "core/strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[64];

/* g_dir/name in buf (static, rotating among 4 so a call can take several). */
static const char *at(const char *name) {
    static char bufs[4][256];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 256, "%s/%s", g_dir, name);
    return b;
}

static kiln_status write_text(const char *path, const char *text) {
    const void *chunks[1] = {text};
    size_t sizes[1] = {strlen(text)};
    return kiln_file_write_atomic(path, chunks, sizes, 1);
}

/* Creates path holding text as a user would (not through kiln, which would make it its own output). */
static void make_user_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    CHECKF(f && fputs(text, f) >= 0, "%s", path);
    if (f) fclose(f);
}

/* True when path holds exactly text. */
static bool holds(const char *path, const char *text) {
    char buf[256] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(buf, text, n);
}

/* Number of entries of g_dir whose name contains ".kiln.tmp". */
static int count_temporaries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".kiln.tmp") != NULL;
    if (d) closedir(d);
    return n;
}

/* A new file and a rewrite: the contents land, no temporary is left, permission bits are kept; a file
 * this process wrote stays writable after it is read back. */
static void test_write_and_rewrite(void) {
    CHECK_OK(write_text(at("plain.txt"), "one"));
    CHECK(holds(at("plain.txt"), "one"));
    CHECK(chmod(at("plain.txt"), 0640) == 0);
    CHECK_OK(write_text(at("plain.txt"), "two"));
    CHECK(holds(at("plain.txt"), "two"));
    kiln_file_map m;
    REQUIRE_OK(kiln_file_map_open(at("plain.txt"), &m));
    kiln_file_unmap(&m);
    CHECK(!kiln_file_is_input(at("plain.txt"), NULL, 0));
    struct stat st;
    CHECK(stat(at("plain.txt"), &st) == 0 && (st.st_mode & 0777) == 0640);
    CHECK(count_temporaries() == 0);
    kiln_strbuf b = {0};
    kiln_strbuf_printf(&b, "three");
    CHECK_OK(kiln_strbuf_write_file(&b, at("plain.txt")));
    kiln_strbuf_free(&b);
    CHECK(holds(at("plain.txt"), "three"));
    CHECK(kiln_file_write_atomic("", NULL, NULL, 0) == KILN_ERR_INVALID_ARGUMENT);
}

/* A recorded input is refused under every name: itself, `..`, a symbolic link, a hard link; a mapped
 * file is an input, a file mapped for update is not. Nothing is written and no temporary is left. */
static void test_inputs_refused(void) {
    make_user_file(at("model.onnx"), "model");
    CHECK(kiln_file_check_output(at("model.onnx")) == KILN_OK);
    kiln_file_map m;
    REQUIRE_OK(kiln_file_map_open(at("model.onnx"), &m));
    kiln_file_unmap(&m);
    char dotdot[256];
    snprintf(dotdot, sizeof dotdot, "%s/../%s/model.onnx", g_dir, strrchr(g_dir, '/') + 1);
    CHECK(symlink("model.onnx", at("link.kiln")) == 0);
    CHECK(link(at("model.onnx"), at("hard.kiln")) == 0);
    const char *names[] = {at("model.onnx"), dotdot, at("link.kiln"), at("hard.kiln")};
    for (int i = 0; i < 4; i++) {
        CHECKF(write_text(names[i], "engine") == KILN_ERR_INVALID_ARGUMENT, "%s", names[i]);
        CHECKF(strstr(kiln_last_error(), "input file"), "%s", kiln_last_error());
        CHECK(kiln_file_check_output(names[i]) == KILN_ERR_INVALID_ARGUMENT);
    }
    CHECK(holds(at("model.onnx"), "model"));
    struct stat st;
    CHECK(lstat(at("link.kiln"), &st) == 0 && S_ISLNK(st.st_mode));
    char name[256];
    CHECK(kiln_file_is_input(at("hard.kiln"), name, sizeof name) && !strcmp(name, at("model.onnx")));

    CHECK_OK(write_text(at("cache.bin"), "cache"));
    REQUIRE_OK(kiln_file_map_open_for_update(at("cache.bin"), &m));
    kiln_file_unmap(&m);
    CHECK_OK(write_text(at("cache.bin"), "cache 2"));
    CHECK(holds(at("cache.bin"), "cache 2"));
    CHECK(count_temporaries() == 0);
}

/* Every regular file of a checkpoint directory is an input; a new name in it is not. */
static void test_checkpoint_dir(void) {
    CHECK(mkdir(at("ckpt"), 0777) == 0);
    make_user_file(at("ckpt/config.json"), "{}");
    make_user_file(at("ckpt/model.safetensors"), "weights");
    make_user_file(at("ckpt/vocab.json"), "{}");
    CHECK_OK(kiln_file_note_inputs_in_dir(at("ckpt")));
    CHECK(write_text(at("ckpt/config.json"), "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(write_text(at("ckpt/model.safetensors"), "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(write_text(at("ckpt/vocab.json"), "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECK(holds(at("ckpt/model.safetensors"), "weights"));
    CHECK_OK(write_text(at("ckpt/engine.kiln"), "engine"));
    CHECK_OK(kiln_file_note_inputs_in_dir(at("no-such-dir")));
}

/* Directories, FIFOs, character devices and sockets are refused (the FIFO without blocking: nothing
 * opens it), and stay what they were. */
static void test_non_regular_refused(void) {
    CHECK(mkfifo(at("fifo"), 0666) == 0);
    CHECK(write_text(at("fifo"), "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "FIFO"), "%s", kiln_last_error());
    CHECK(write_text(g_dir, "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "directory"), "%s", kiln_last_error());
    CHECK(write_text("/dev/null", "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "character device"), "%s", kiln_last_error());
    CHECK(symlink("/dev/null", at("null-link")) == 0);
    CHECK(write_text(at("null-link"), "x") == KILN_ERR_INVALID_ARGUMENT);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", at("sock"));
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CHECK(write_text(at("sock"), "x") == KILN_ERR_INVALID_ARGUMENT);
    CHECKF(strstr(kiln_last_error(), "socket"), "%s", kiln_last_error());
    if (fd >= 0) close(fd);
    struct stat st;
    CHECK(stat(at("fifo"), &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(count_temporaries() == 0);
}

/* A symbolic link (relative, and a chain of two) is written through: the target changes, the links
 * stay links. A dangling link creates its target. */
static void test_symlink_written_through(void) {
    CHECK(mkdir(at("engines"), 0777) == 0);
    CHECK_OK(write_text(at("engines/v1.kiln"), "old"));
    CHECK(symlink("engines/v1.kiln", at("current.kiln")) == 0);
    CHECK(symlink("current.kiln", at("latest.kiln")) == 0);
    CHECK_OK(write_text(at("latest.kiln"), "new"));
    CHECK(holds(at("engines/v1.kiln"), "new"));
    struct stat st;
    CHECK(lstat(at("current.kiln"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(lstat(at("latest.kiln"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(symlink("engines/v2.kiln", at("next.kiln")) == 0);
    CHECK_OK(write_text(at("next.kiln"), "v2"));
    CHECK(holds(at("engines/v2.kiln"), "v2"));
    CHECK(lstat(at("next.kiln"), &st) == 0 && S_ISLNK(st.st_mode));
}

/* The pid of a process that has exited and been reaped. */
static pid_t dead_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

/* A temporary of a dead process is removed by the next write of its target; one of a live process
 * (this one's parent), one of another target and a non-numeric one stay. */
static void test_stale_temporaries(void) {
    char dead[256], live[256], other[256], odd[256];
    snprintf(dead, sizeof dead, "%s.kiln.tmp%d", at("out.kiln"), (int)dead_pid());
    snprintf(live, sizeof live, "%s.kiln.tmp%d", at("out.kiln"), (int)getppid());
    snprintf(other, sizeof other, "%s.kiln.tmp%d", at("other.kiln"), (int)dead_pid());
    snprintf(odd, sizeof odd, "%s.kiln.tmp12x", at("out.kiln"));
    const char *all[] = {dead, live, other, odd};
    for (int i = 0; i < 4; i++) CHECK_OK(write_text(all[i], "partial"));
    CHECK_OK(write_text(at("out.kiln"), "engine"));
    CHECK(access(dead, F_OK) != 0);
    CHECK(access(live, F_OK) == 0 && access(other, F_OK) == 0 && access(odd, F_OK) == 0);
    for (int i = 1; i < 4; i++) unlink(all[i]);
}

/* SIGTERM while a child writes a large file: the child ends by the signal, and neither the temporary
 * nor the target exists. */
static void test_signal_removes_temporary(void) {
    const size_t size = 64u << 20;
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGTERM, SIG_DFL); /* in case the test runs with it ignored */
        char *big = calloc(1, size);
        const void *chunks[4] = {big, big, big, big};
        size_t sizes[4] = {size, size, size, size};
        _exit(big && kiln_file_write_atomic(at("big.kiln"), chunks, sizes, 4) == KILN_OK ? 0 : 3);
    }
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s.kiln.tmp%d", at("big.kiln"), (int)pid);
    bool seen = false;
    for (int i = 0; i < 200000 && !seen; i++) {
        seen = access(tmp, F_OK) == 0;
        if (!seen) nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    CHECKF(seen, "the child never created %s", tmp);
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "child status 0x%x", status);
    CHECK(access(tmp, F_OK) != 0);
    CHECK(access(at("big.kiln"), F_OK) != 0);
}

/* A large file of many odd-sized chunks (more than one pwritev takes, empty ones among them) lands
 * byte for byte, written in parts on threads. */
static void test_large_gather_write(void) {
    const size_t size = (136u << 20) + 7;
    unsigned char *src = malloc(size);
    enum { NCHUNKS = 3001 };
    const void **chunks = malloc(NCHUNKS * sizeof *chunks);
    size_t *sizes = malloc(NCHUNKS * sizeof *sizes);
    CHECK(src && chunks && sizes);
    if (!src || !chunks || !sizes) goto done;
    uint32_t x = 7;
    for (size_t i = 0; i < size; i++) src[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 24);
    size_t at_byte = 0;
    for (int i = 0; i < NCHUNKS; i++) {
        size_t want = i == NCHUNKS - 1 ? size - at_byte : (i % 7 == 3 ? 0 : (size_t)(i * 7919) % (size / 1500));
        if (want > size - at_byte) want = size - at_byte;
        chunks[i] = want ? src + at_byte : NULL;
        sizes[i] = want;
        at_byte += want;
    }
    CHECK_OK(kiln_file_write_atomic(at("large.kiln"), chunks, sizes, NCHUNKS));
    FILE *f = fopen(at("large.kiln"), "rb");
    unsigned char *back = malloc(size + 1);
    size_t got = f && back ? fread(back, 1, size + 1, f) : 0;
    CHECKF(got == size && !memcmp(back, src, size), "read back %zu of %zu bytes", got, size);
    if (f) fclose(f);
    free(back);
    CHECK(count_temporaries() == 0);
    /* mapped populated (as external data and engines are), it reads the same */
    kiln_file_map *m = NULL;
    CHECK_OK(kiln_file_map_new_populated(at("large.kiln"), &m));
    CHECK(m && m->size == size && !memcmp(m->data, src, size));
    kiln_file_map_free(m);
done:
    free(src);
    free(chunks);
    free(sizes);
}

/* An open write: ranges written out of order (the tail first) land at their offsets; the target is
 * untouched until commit; a second open of the same target is refused while another target's write
 * (a whole-file write in between) succeeds; an aborted write leaves the target as it was and no
 * temporary; an input is refused at open. */
static void test_open_write(void) {
    make_user_file(at("open.kiln"), "old");
    kiln_file_out *f = NULL, *again = NULL;
    REQUIRE_OK(kiln_file_out_open(at("open.kiln"), &f));
    const void *tail[2] = {"wor", "ld"};
    size_t tail_sizes[2] = {3, 2};
    CHECK_OK(kiln_file_out_write_at(f, 6, tail, tail_sizes, 2));
    CHECK(kiln_file_out_open(at("open.kiln"), &again) == KILN_ERR_IO && !again);
    CHECKF(strstr(kiln_last_error(), "writing it already"), "%s", kiln_last_error());
    CHECK_OK(write_text(at("between.txt"), "between"));
    CHECK(holds(at("between.txt"), "between"));
    CHECK(holds(at("open.kiln"), "old") && count_temporaries() == 1);
    const void *head[1] = {"hello "};
    size_t head_size[1] = {6};
    CHECK_OK(kiln_file_out_write_at(f, 0, head, head_size, 1));
    CHECK_OK(kiln_file_out_commit(f));
    CHECK(holds(at("open.kiln"), "hello world") && count_temporaries() == 0);

    REQUIRE_OK(kiln_file_out_open(at("open.kiln"), &f));
    CHECK_OK(kiln_file_out_write_at(f, 0, head, head_size, 1));
    kiln_file_out_abort(f);
    kiln_file_out_abort(NULL);
    CHECK(holds(at("open.kiln"), "hello world") && count_temporaries() == 0);

    make_user_file(at("open-input.onnx"), "model");
    kiln_file_map m;
    REQUIRE_OK(kiln_file_map_open(at("open-input.onnx"), &m));
    kiln_file_unmap(&m);
    CHECK(kiln_file_out_open(at("open-input.onnx"), &f) == KILN_ERR_INVALID_ARGUMENT && !f);
    CHECK(holds(at("open-input.onnx"), "model") && count_temporaries() == 0);
}

/* An output directory is made when missing and refused when it is a file. */
static void test_output_dir(void) {
    CHECK_OK(kiln_file_output_dir(at("outputs")));
    CHECK_OK(kiln_file_output_dir(at("outputs")));
    struct stat st;
    CHECK(stat(at("outputs"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(kiln_file_output_dir(at("plain.txt")) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(kiln_file_output_dir(at("no/such/parent")) == KILN_ERR_IO);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kiln-file-write-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_write_and_rewrite();
    test_inputs_refused();
    test_checkpoint_dir();
    test_non_regular_refused();
    test_symlink_written_through();
    test_stale_temporaries();
    test_signal_removes_temporary();
    test_large_gather_write();
    test_open_write();
    test_output_dir();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return checks_report("test_file_write");
}
