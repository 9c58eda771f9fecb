/* test_core_limits.c — src/core at its edges: an error message wrapped in a new one through
 * kiln_last_error() (kiln_error and kiln_error_prefix reading their own buffer), and the message of a
 * message that fills the whole buffer. */
#include "check.h"
#include "core/status.h"

#include <string.h>

static void test_error_wraps_its_own_message(void) {
    kiln_error(KILN_ERR_IO, "GET %s: %s", "http://127.0.0.1:9/v1/models", "Connection refused");
    kiln_status s = kiln_error(KILN_ERR_INVALID_ARGUMENT, "no --model given (%s): pass --model NAME", kiln_last_error());
    CHECK(s == KILN_ERR_INVALID_ARGUMENT);
    const char *want = "no --model given (GET http://127.0.0.1:9/v1/models: Connection refused): pass --model NAME";
    CHECKF(!strcmp(kiln_last_error(), want), "got '%s'", kiln_last_error());

    kiln_error(KILN_ERR_PARSE, "bad byte");
    kiln_error_prefix(KILN_ERR_PARSE, "%s", kiln_last_error());
    CHECKF(!strcmp(kiln_last_error(), "bad byte: bad byte"), "got '%s'", kiln_last_error());
}

static void test_error_of_full_length(void) {
    char long_text[4096];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    kiln_error(KILN_ERR_PARSE, "%s", long_text);
    size_t n = strlen(kiln_last_error());
    CHECKF(n > 1000 && n < sizeof long_text, "message of %zu bytes", n);
    kiln_error(KILN_ERR_PARSE, "outer: %s", kiln_last_error());
    CHECK(!strncmp(kiln_last_error(), "outer: xxx", 10));
    CHECK(strlen(kiln_last_error()) == n);
}

int main(void) {
    test_error_wraps_its_own_message();
    test_error_of_full_length();
    return checks_report("test_core_limits");
}
