/* infer_shape.c — shape and type inference for the shape op family. */
#include "ir/op_schema.h"

const kiln_op_schema kiln_schemas_shape[] = {
    {0},
};
