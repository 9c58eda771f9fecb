/* infer_reduce.c — shape and type inference for the reduce op family. */
#include "ir/op_schema.h"

const kiln_op_schema kiln_schemas_reduce[] = {
    {0},
};
