/* report_csv.c — the CSV writer of report.h (RFC 4180 quoting). */
#include "stats/report.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void kiln_csv_init(kiln_csv *c, kiln_strbuf *out) {
    c->out = out;
    c->col = 0;
}

/* The separator before a cell that is not the first of its row. */
static void csv_separator(kiln_csv *c) {
    if (c->col++ > 0) kiln_strbuf_putc(c->out, ',');
}

void kiln_csv_string(kiln_csv *c, const char *s) {
    csv_separator(c);
    if (!s || !*s) return;
    size_t n = strlen(s);
    bool quote = strpbrk(s, ",\"\r\n") || s[0] == ' ' || s[n - 1] == ' ';
    if (!quote) {
        kiln_strbuf_append(c->out, s, n);
        return;
    }
    kiln_strbuf_putc(c->out, '"');
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"') kiln_strbuf_putc(c->out, '"');
        kiln_strbuf_putc(c->out, s[i]);
    }
    kiln_strbuf_putc(c->out, '"');
}

void kiln_csv_number(kiln_csv *c, double v) {
    csv_separator(c);
    char buf[32];
    if (isfinite(v)) kiln_strbuf_puts(c->out, kiln_format_double(buf, v));
}

void kiln_csv_int(kiln_csv *c, int64_t v) {
    csv_separator(c);
    kiln_strbuf_printf(c->out, "%" PRId64, v);
}

void kiln_csv_end_row(kiln_csv *c) {
    kiln_strbuf_putc(c->out, '\n');
    c->col = 0;
}

void kiln_csv_row(kiln_csv *c, const char *const *cells, int n) {
    for (int i = 0; i < n; i++) kiln_csv_string(c, cells[i]);
    kiln_csv_end_row(c);
}
