/* infer_nn.c — shape and type inference for the nn op family. */
#include "ir/op_schema.h"

const kiln_op_schema kiln_schemas_nn[] = {
    {0},
};
