/* http_responder.c — a minimal single-threaded epoll HTTP/1.1 server for benchmarking load
 * generators (bench/load_vs_wrk.sh): every request (headers up to the blank line; bodies are not
 * expected) gets "200 OK" with a 2-byte body on a kept-alive connection. Pipelined requests are
 * answered in order. Not part of kiln; a test helper only.
 *
 *   cc -O2 -o http_responder bench/http_responder.c && ./http_responder PORT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";

/* Per-connection input buffer: bytes of a request whose blank line has not arrived yet. */
typedef struct conn {
    int fd;
    char buf[8192];
    size_t len;
} conn;

/* Answers every complete request in c->buf; false when the connection must be closed. */
static bool serve(int fd, conn *c) {
    char out[sizeof RESPONSE * 64];
    size_t nout = 0, start = 0;
    for (;;) {
        char *end = memmem(c->buf + start, c->len - start, "\r\n\r\n", 4);
        if (!end) break;
        start = (size_t)(end - c->buf) + 4;
        if (nout + sizeof RESPONSE - 1 > sizeof out) {
            if (write(fd, out, nout) != (ssize_t)nout) return false;
            nout = 0;
        }
        memcpy(out + nout, RESPONSE, sizeof RESPONSE - 1);
        nout += sizeof RESPONSE - 1;
    }
    if (nout && write(fd, out, nout) != (ssize_t)nout) return false;
    memmove(c->buf, c->buf + start, c->len - start);
    c->len -= start;
    return c->len < sizeof c->buf; /* a request larger than the buffer: give up on it */
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8080;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 4096)) {
        perror("http_responder: bind/listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    fprintf(stderr, "http_responder: listening on 127.0.0.1:%d\n", port);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            if (!evs[i].data.ptr) { /* the listening socket */
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conn *c = calloc(1, sizeof *c);
                    if (!c) { close(fd); continue; }
                    c->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            conn *c = evs[i].data.ptr;
            int fd = c->fd;
            ssize_t r = read(fd, c->buf + c->len, sizeof c->buf - c->len);
            if ((r < 0 && errno == EAGAIN) || (r > 0 && (c->len += (size_t)r, serve(fd, c)))) continue;
            close(fd);
            free(c);
        }
    }
}
