/* infer_elementwise.c — shape and type inference for the elementwise op family. */
#include "ir/op_schema.h"

const kiln_op_schema kiln_schemas_elementwise[] = {
    {0},
};
