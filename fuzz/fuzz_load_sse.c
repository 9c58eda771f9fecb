/* fuzz_load_sse.c — libFuzzer target for the Server-Sent Events parser of `kiln load`
 * (load/sse.c), which reads the streamed completions of the OpenAI-style server under test. The
 * first input byte chooses how the rest is split; the rest is the event stream. It is fed twice —
 * whole, then in small pieces of varying sizes — and both runs must hand out the same events (data
 * and length) and end in the same state (the parser promises that bytes may be split anywhere). An
 * event whose data is "[STOP]" makes the callback fail, as a response handler does on bad JSON, and
 * that error must end the feed. Seeds: fuzz/corpus/fuzz_load_sse/ (OpenAI-style streams with CRLF,
 * CR and LF line ends, comments, multi-line data, other fields). */
#include "core/status.h"
#include "fuzz_util.h"
#include "load/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
    uint64_t hash;
    int events;
} seen;

static kiln_status on_event(void *user, const char *data, size_t len) {
    seen *s = user;
    if (data[len] != '\0') abort(); /* promised NUL-terminated */
    s->hash = fuzz_hash(fuzz_hash(s->hash, &len, sizeof len), data, len);
    s->events++;
    if (len == 6 && !memcmp(data, "[STOP]", 6)) return kiln_error(KILN_ERR_PARSE, "stop event");
    return KILN_OK;
}

/* Feeds data[0..size) (in pieces as `pattern` says, or whole when pattern is 0); a fingerprint of the
 * events and the end state. */
static uint64_t run(const uint8_t *data, size_t size, uint8_t pattern) {
    kiln_sse sse;
    kiln_sse_init(&sse);
    seen s = {FUZZ_HASH_SEED, 0};
    kiln_status st = KILN_OK;
    size_t pos = 0, piece = 0;
    while (pos < size && st == KILN_OK) {
        size_t n = pattern ? fuzz_piece_size(pattern, piece++) : size - pos;
        if (n > size - pos) n = size - pos;
        int before = s.events;
        st = kiln_sse_feed(&sse, (const char *)data + pos, n, on_event, &s);
        if (st != KILN_OK && s.events == before) abort(); /* only the callback fails (lines are short) */
        pos += n;
    }
    int64_t fin[3] = {st, s.events, st == KILN_OK && kiln_sse_pending(&sse)};
    kiln_sse_free(&sse);
    return fuzz_hash(s.hash, fin, sizeof fin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    fuzz_silence_log();
    uint8_t pattern = (uint8_t)(data[0] | 1);
    if (run(data + 1, size - 1, 0) != run(data + 1, size - 1, pattern)) abort();
    return 0;
}
