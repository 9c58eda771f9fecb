/* test_core_limits.c — src/core at its edges: an error message wrapped in a new one through
 * kiln_last_error() (kiln_error and kiln_error_prefix reading their own buffer), a message that fills
 * the whole buffer, checked arithmetic (core/ckd.h) at the int64 and size_t limits, and tensors
 * beyond KILN_MAX_TENSOR_ELEMENTS. */
#include "check.h"
#include "core/ckd.h"
#include "core/status.h"
#include "core/tensor.h"

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

static void test_checked_arithmetic(void) {
    int64_t r;
    CHECK(kiln_mul_i64_ok(INT64_C(1) << 31, INT64_C(1) << 31, &r) && r == INT64_C(1) << 62);
    CHECK(!kiln_mul_i64_ok(INT64_C(1) << 41, INT64_C(1) << 41, &r)); /* Conv pads 2^40: 2^41 x 2^41 */
    CHECK(!kiln_mul_i64_ok(INT64_MIN, -1, &r));
    CHECK(!kiln_mul_i64_ok(4, INT64_MIN, &r)); /* Slice: stride 4 times step -2^63 */
    CHECK(kiln_mul_i64_ok(-1, INT64_MAX, &r) && r == -INT64_MAX);
    CHECK(kiln_add_i64_ok(INT64_MAX - 1, 1, &r) && r == INT64_MAX);
    CHECK(!kiln_add_i64_ok(INT64_MAX, 1, &r));
    CHECK(!kiln_add_i64_ok(INT64_MIN, -1, &r));
    CHECK(!kiln_sub_i64_ok(INT64_MIN, 1, &r));
    CHECK(kiln_sub_i64_ok(0, INT64_MAX, &r) && r == -INT64_MAX);
    size_t z;
    CHECK(!kiln_mul_size_ok(SIZE_MAX / 2 + 1, 2, &z));
    CHECK(kiln_mul_size_ok(SIZE_MAX / 2, 2, &z) && z == SIZE_MAX - 1);
    CHECK(!kiln_add_size_ok(SIZE_MAX, 1, &z));
    uint64_t u;
    CHECK(!kiln_mul_u64_ok(UINT64_C(0x200000) * 2 * 12, UINT64_C(1) << 60, &u)); /* a KV cache of 2^60 blocks */
    int64_t dims[] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    CHECK(!kiln_prod_i64_ok(3, dims, &r));
    CHECK(kiln_prod_i64_ok(2, dims + 1, &r) && r == INT64_C(1) << 42);
    CHECK(kiln_prod_i64_ok(0, dims, &r) && r == 1);
}

static void test_tensor_beyond_the_limit(void) {
    kiln_tensor t = {0};
    int64_t dims[] = {INT64_C(1) << 20, INT64_C(1) << 20, 2};
    CHECK(kiln_tensor_alloc(&t, KILN_F32, 3, dims) == KILN_ERR_OUT_OF_MEMORY);
    CHECKF(strstr(kiln_last_error(), "[1048576,1048576,2]") && strstr(kiln_last_error(), "2^40"), "got '%s'",
           kiln_last_error());
    int64_t wraps[] = {INT64_C(1) << 62, INT64_C(1) << 62, 0};
    CHECK_OK(kiln_tensor_alloc(&t, KILN_F32, 1, wraps + 2)); /* empty: [0] */
    CHECK(kiln_tensor_alloc(&t, KILN_F32, 2, wraps) == KILN_ERR_OUT_OF_MEMORY);
    kiln_tensor_release(&t);
}

int main(void) {
    test_error_wraps_its_own_message();
    test_error_of_full_length();
    test_checked_arithmetic();
    test_tensor_beyond_the_limit();
    return checks_report("test_core_limits");
}
