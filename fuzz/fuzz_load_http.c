/* fuzz_load_http.c — libFuzzer target for the HTTP/1.1 response parser of `kiln load`
 * (load/http1.c), which reads whatever the server under test sends back. The first input byte
 * chooses a HEAD request (bit 0) and how the rest is split; the rest is a stream of responses on one
 * keep-alive connection, fed as conn.c feeds it: response after response (reset between them) until
 * an error, then end of stream. Everything runs twice — the bytes in one piece, then in small pieces
 * of varying sizes — and both runs must agree on every status, body byte, framing decision and
 * result (the parser promises that bytes may be split anywhere). Seeds: fuzz/corpus/fuzz_load_http/
 * (responses of Content-Length, chunked, close-delimited, 1xx, HEAD, KServe binary and SSE kinds). */
#include "fuzz_util.h"
#include "load/http1.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void on_body(void *user, const char *data, size_t n) {
    uint64_t *h = user;
    *h = fuzz_hash(*h, data, n);
}

/* Feeds data[0..size) (in pieces as `pattern` says, or whole when pattern is 0) and returns a
 * fingerprint of everything the parser reported. */
static uint64_t run(const uint8_t *data, size_t size, bool head, uint8_t pattern) {
    kiln_http1_parser p = {0};
    kiln_http1_reset(&p, head);
    uint64_t h = FUZZ_HASH_SEED, body = FUZZ_HASH_SEED;
    size_t pos = 0, piece = 0;
    kiln_http1_result r = KILN_HTTP1_MORE;
    while (pos < size && r != KILN_HTTP1_ERROR) {
        size_t n = pattern ? fuzz_piece_size(pattern, piece++) : size - pos;
        if (n > size - pos) n = size - pos;
        size_t off = 0;
        while (off < n && r != KILN_HTTP1_ERROR) { /* one read may finish a response and start the next */
            size_t used = 0;
            r = kiln_http1_feed(&p, (const char *)data + pos + off, n - off, &used, on_body, &body);
            if (used > n - off) abort();
            off += used;
            if (r == KILN_HTTP1_DONE) {
                int64_t rec[4] = {p.status, p.keep_alive, p.infer_header_len, (int64_t)body};
                h = fuzz_hash(h, rec, sizeof rec);
                body = FUZZ_HASH_SEED;
                kiln_http1_reset(&p, head);
            } else if (r == KILN_HTTP1_MORE && off < n) {
                abort(); /* MORE means every byte was consumed */
            }
        }
        pos += n;
    }
    if (r != KILN_HTTP1_ERROR && !kiln_http1_untouched(&p)) r = kiln_http1_eof(&p);
    int64_t fin[3] = {r, p.status, (int64_t)body};
    h = fuzz_hash(h, fin, sizeof fin);
    kiln_http1_free(&p);
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool head = data[0] & 1;
    uint8_t pattern = (uint8_t)(data[0] | 2); /* never 0: 0 means whole */
    if (run(data + 1, size - 1, head, 0) != run(data + 1, size - 1, head, pattern)) abort();
    return 0;
}
