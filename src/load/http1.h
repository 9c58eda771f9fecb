/* http1.h — an incremental HTTP/1.1 response parser for kiln load's native transport: bytes are fed
 * as they arrive, split anywhere; the status and the headers kiln load needs are taken from the
 * header block, then the body is decoded (Content-Length, chunked, or until the connection closes)
 * and handed to a callback piece by piece, so streamed responses (SSE) are seen as they arrive.
 * Interim 1xx responses are skipped. Strict: anything that is not a well-formed response is an
 * error, with a message. */
#ifndef KILN_LOAD_HTTP1_H
#define KILN_LOAD_HTTP1_H

#include "kiln/kiln.h"
#include "core/strbuf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_HTTP1_MAX_HEAD (64u << 10) /* a larger header block is an error */

typedef enum kiln_http1_result {
    KILN_HTTP1_MORE,  /* every byte consumed; the response is not complete */
    KILN_HTTP1_DONE,  /* the response is complete; *consumed says how many bytes belonged to it */
    KILN_HTTP1_ERROR, /* malformed; kiln_http1_parser.error says why */
} kiln_http1_result;

typedef struct kiln_http1_parser {
    int state;                /* internal */
    kiln_strbuf head;         /* the header block so far */
    int status;               /* status code once the headers are parsed, else 0 */
    bool keep_alive;          /* the connection may carry another request after this response */
    int64_t infer_header_len; /* KServe Inference-Header-Content-Length, or -1 */
    int64_t remaining;        /* bytes left in the body (Content-Length) or current chunk */
    char line[40];            /* the start of a chunk-size or trailer line being assembled */
    size_t linelen;           /* the bytes of that line so far (possibly more than line holds) */
    char line_last;           /* its last byte so far (CR when a complete line ends in CRLF) */
    bool head_request;        /* the request was HEAD: no body follows */
    uint64_t seen;            /* bytes fed so far */
    char error[120];
} kiln_http1_parser;

/* Called with each piece of decoded body. */
typedef void (*kiln_http1_body_fn)(void *user, const char *data, size_t n);

/* Prepares p for the next response (keeps its memory). */
void kiln_http1_reset(kiln_http1_parser *p, bool head_request);
void kiln_http1_free(kiln_http1_parser *p);
/* Feeds n bytes; see kiln_http1_result. Bytes after a complete response are not consumed. */
kiln_http1_result kiln_http1_feed(kiln_http1_parser *p, const char *buf, size_t n, size_t *consumed,
                                  kiln_http1_body_fn fn, void *user);
/* The connection closed: DONE when the body was delimited by the close, else ERROR (truncated). */
kiln_http1_result kiln_http1_eof(kiln_http1_parser *p);
/* True when no byte of the response has arrived yet. */
bool kiln_http1_untouched(const kiln_http1_parser *p);

#endif
