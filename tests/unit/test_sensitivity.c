/* test_sensitivity.c — the int8 sensitivity ranking (largest error first, ties in layer order, an
 * unknown (NaN) error ranked worst) and the keep rule of --keep-sensitive (the N worst, plus the first
 * and last layer unless the ends may quantize; N beyond the layer count keeps all; none with N 0 and
 * no ends). */
#include "check.h"

#include "quant/sensitivity.h"

#include <math.h>
#include <string.h>

static void test_rank(void) {
    const double e[6] = {0.1, 0.5, 0.1, 0.9, 0.0, 0.5};
    int order[6];
    kiln_quant_rank(6, e, order);
    const int want[6] = {3, 1, 5, 0, 2, 4};
    CHECK(!memcmp(order, want, sizeof want));
    const double nan_first[3] = {1.0, NAN, 2.0};
    kiln_quant_rank(3, nan_first, order);
    CHECK(order[0] == 1 && order[1] == 2 && order[2] == 0);
    kiln_quant_rank(0, e, order); /* nothing to rank: no access */
}

static int count(const bool *kept, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += kept[i];
    return c;
}

static void test_keep(void) {
    const double e[7] = {1e-6, 4e-6, 1e-6, 6e-6, 9e-6, 1.3e-5, 8e-5}; /* the ends are also among the worst */
    bool kept[7];
    CHECK(kiln_quant_keep_select(7, e, 2, true, kept) == 3); /* 6 and 5, plus the first (6 is the last) */
    CHECK(kept[0] && kept[5] && kept[6] && count(kept, 7) == 3);
    CHECK(kiln_quant_keep_select(7, e, 2, false, kept) == 2);
    CHECK(kept[5] && kept[6] && count(kept, 7) == 2);
    CHECK(kiln_quant_keep_select(7, e, 0, false, kept) == 0);
    CHECK(kiln_quant_keep_select(7, e, 0, true, kept) == 2 && kept[0] && kept[6]);
    CHECK(kiln_quant_keep_select(7, e, 100, false, kept) == 7);
    const double one = 0.5;
    CHECK(kiln_quant_keep_select(1, &one, 0, true, kept) == 1 && kept[0]);
    const double ties[4] = {0.2, 0.2, 0.2, 0.2};
    CHECK(kiln_quant_keep_select(4, ties, 1, false, kept) == 1 && kept[0]); /* ties: the earlier layer */
}

int main(void) {
    test_rank();
    test_keep();
    return checks_report("test_sensitivity");
}
