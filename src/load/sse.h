/* sse.h — an incremental parser for Server-Sent Events (the text/event-stream format OpenAI-style
 * servers stream completions in). Bytes are fed as they arrive, split anywhere; every complete event
 * (its `data:` lines joined with '\n') is handed to a callback. Lines may end in LF, CRLF or CR;
 * comment lines (':') and fields other than `data` are ignored, as the format says. */
#ifndef KILN_LOAD_SSE_H
#define KILN_LOAD_SSE_H

#include "kiln/kiln.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>

/* Longest line accepted; a longer one is an error (a server that never ends a line). */
#define KILN_SSE_MAX_LINE (16u << 20)

typedef struct kiln_sse {
    kiln_strbuf line;  /* the incomplete current line */
    kiln_strbuf data;  /* data of the event being assembled */
    bool has_data;     /* the event has at least one data line */
    bool after_cr;     /* the last byte was CR (a following LF belongs to it) */
} kiln_sse;

/* Called once per complete event with a data field; data is NUL-terminated. A non-OK return stops
 * the feed and is returned by kiln_sse_feed. */
typedef kiln_status (*kiln_sse_event_fn)(void *user, const char *data, size_t len);

/* An empty parser (also what zero-initialisation gives). */
void kiln_sse_init(kiln_sse *s);
/* Forgets any partial line or event, keeping the memory (for the next response). */
void kiln_sse_reset(kiln_sse *s);
/* Frees the buffers. */
void kiln_sse_free(kiln_sse *s);
/* Feeds n bytes. Errors: what `fn` returned; KILN_ERR_PARSE for a line over KILN_SSE_MAX_LINE;
 * KILN_ERR_OUT_OF_MEMORY. */
kiln_status kiln_sse_feed(kiln_sse *s, const char *buf, size_t n, kiln_sse_event_fn fn, void *user);
/* True when the stream ended inside an event (data seen but no blank line yet) or inside a line. */
bool kiln_sse_pending(const kiln_sse *s);

#endif
