
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/backends/cpu/conv.c" "CMakeFiles/kiln.dir/src/backends/cpu/conv.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/conv.c.o.d"
  "/work/main/src/backends/cpu/cpu_backend.c" "CMakeFiles/kiln.dir/src/backends/cpu/cpu_backend.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/cpu_backend.c.o.d"
  "/work/main/src/backends/cpu/cpu_dispatch.c" "CMakeFiles/kiln.dir/src/backends/cpu/cpu_dispatch.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/cpu_dispatch.c.o.d"
  "/work/main/src/backends/cpu/einsum.c" "CMakeFiles/kiln.dir/src/backends/cpu/einsum.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/einsum.c.o.d"
  "/work/main/src/backends/cpu/elementwise.c" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise.c.o.d"
  "/work/main/src/backends/cpu/elementwise_binary.c" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise_binary.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise_binary.c.o.d"
  "/work/main/src/backends/cpu/elementwise_cast.c" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise_cast.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise_cast.c.o.d"
  "/work/main/src/backends/cpu/elementwise_unary.c" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise_unary.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise_unary.c.o.d"
  "/work/main/src/backends/cpu/gather.c" "CMakeFiles/kiln.dir/src/backends/cpu/gather.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/gather.c.o.d"
  "/work/main/src/backends/cpu/gemm.c" "CMakeFiles/kiln.dir/src/backends/cpu/gemm.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/gemm.c.o.d"
  "/work/main/src/backends/cpu/generate.c" "CMakeFiles/kiln.dir/src/backends/cpu/generate.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/generate.c.o.d"
  "/work/main/src/backends/cpu/nn.c" "CMakeFiles/kiln.dir/src/backends/cpu/nn.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/nn.c.o.d"
  "/work/main/src/backends/cpu/norm.c" "CMakeFiles/kiln.dir/src/backends/cpu/norm.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/norm.c.o.d"
  "/work/main/src/backends/cpu/pool.c" "CMakeFiles/kiln.dir/src/backends/cpu/pool.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/pool.c.o.d"
  "/work/main/src/backends/cpu/reduce.c" "CMakeFiles/kiln.dir/src/backends/cpu/reduce.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/reduce.c.o.d"
  "/work/main/src/backends/cpu/reduce_index.c" "CMakeFiles/kiln.dir/src/backends/cpu/reduce_index.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/reduce_index.c.o.d"
  "/work/main/src/backends/cpu/reduce_util.c" "CMakeFiles/kiln.dir/src/backends/cpu/reduce_util.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/reduce_util.c.o.d"
  "/work/main/src/backends/cpu/resize.c" "CMakeFiles/kiln.dir/src/backends/cpu/resize.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/resize.c.o.d"
  "/work/main/src/backends/cpu/shape.c" "CMakeFiles/kiln.dir/src/backends/cpu/shape.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/shape.c.o.d"
  "/work/main/src/backends/cpu/slice.c" "CMakeFiles/kiln.dir/src/backends/cpu/slice.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/slice.c.o.d"
  "/work/main/src/backends/cpu/transpose.c" "CMakeFiles/kiln.dir/src/backends/cpu/transpose.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/transpose.c.o.d"
  "/work/main/src/builder.c" "CMakeFiles/kiln.dir/src/builder.c.o" "gcc" "CMakeFiles/kiln.dir/src/builder.c.o.d"
  "/work/main/src/core/arena.c" "CMakeFiles/kiln.dir/src/core/arena.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/arena.c.o.d"
  "/work/main/src/core/checksum.c" "CMakeFiles/kiln.dir/src/core/checksum.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/checksum.c.o.d"
  "/work/main/src/core/dtype.c" "CMakeFiles/kiln.dir/src/core/dtype.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/dtype.c.o.d"
  "/work/main/src/core/file.c" "CMakeFiles/kiln.dir/src/core/file.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/file.c.o.d"
  "/work/main/src/core/log.c" "CMakeFiles/kiln.dir/src/core/log.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/log.c.o.d"
  "/work/main/src/core/npy.c" "CMakeFiles/kiln.dir/src/core/npy.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/npy.c.o.d"
  "/work/main/src/core/status.c" "CMakeFiles/kiln.dir/src/core/status.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/status.c.o.d"
  "/work/main/src/core/tensor.c" "CMakeFiles/kiln.dir/src/core/tensor.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/tensor.c.o.d"
  "/work/main/src/engine/engine_read.c" "CMakeFiles/kiln.dir/src/engine/engine_read.c.o" "gcc" "CMakeFiles/kiln.dir/src/engine/engine_read.c.o.d"
  "/work/main/src/engine/engine_write.c" "CMakeFiles/kiln.dir/src/engine/engine_write.c.o" "gcc" "CMakeFiles/kiln.dir/src/engine/engine_write.c.o.d"
  "/work/main/src/frontends/onnx/onnx_common.c" "CMakeFiles/kiln.dir/src/frontends/onnx/onnx_common.c.o" "gcc" "CMakeFiles/kiln.dir/src/frontends/onnx/onnx_common.c.o.d"
  "/work/main/src/frontends/onnx/onnx_import.c" "CMakeFiles/kiln.dir/src/frontends/onnx/onnx_import.c.o" "gcc" "CMakeFiles/kiln.dir/src/frontends/onnx/onnx_import.c.o.d"
  "/work/main/src/frontends/onnx/onnx_tensor.c" "CMakeFiles/kiln.dir/src/frontends/onnx/onnx_tensor.c.o" "gcc" "CMakeFiles/kiln.dir/src/frontends/onnx/onnx_tensor.c.o.d"
  "/work/main/src/frontends/onnx/protobuf.c" "CMakeFiles/kiln.dir/src/frontends/onnx/protobuf.c.o" "gcc" "CMakeFiles/kiln.dir/src/frontends/onnx/protobuf.c.o.d"
  "/work/main/src/ir/einsum_eq.c" "CMakeFiles/kiln.dir/src/ir/einsum_eq.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/einsum_eq.c.o.d"
  "/work/main/src/ir/graph.c" "CMakeFiles/kiln.dir/src/ir/graph.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/graph.c.o.d"
  "/work/main/src/ir/graph_passes.c" "CMakeFiles/kiln.dir/src/ir/graph_passes.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/graph_passes.c.o.d"
  "/work/main/src/ir/infer_elementwise.c" "CMakeFiles/kiln.dir/src/ir/infer_elementwise.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_elementwise.c.o.d"
  "/work/main/src/ir/infer_nn.c" "CMakeFiles/kiln.dir/src/ir/infer_nn.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_nn.c.o.d"
  "/work/main/src/ir/infer_reduce.c" "CMakeFiles/kiln.dir/src/ir/infer_reduce.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_reduce.c.o.d"
  "/work/main/src/ir/infer_shape.c" "CMakeFiles/kiln.dir/src/ir/infer_shape.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_shape.c.o.d"
  "/work/main/src/ir/infer_shape_index.c" "CMakeFiles/kiln.dir/src/ir/infer_shape_index.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_shape_index.c.o.d"
  "/work/main/src/ir/nn_window.c" "CMakeFiles/kiln.dir/src/ir/nn_window.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/nn_window.c.o.d"
  "/work/main/src/ir/op_schema.c" "CMakeFiles/kiln.dir/src/ir/op_schema.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/op_schema.c.o.d"
  "/work/main/src/ir/shape_calc.c" "CMakeFiles/kiln.dir/src/ir/shape_calc.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/shape_calc.c.o.d"
  "/work/main/src/ir/shape_value.c" "CMakeFiles/kiln.dir/src/ir/shape_value.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/shape_value.c.o.d"
  "/work/main/src/passes/fold_constants.c" "CMakeFiles/kiln.dir/src/passes/fold_constants.c.o" "gcc" "CMakeFiles/kiln.dir/src/passes/fold_constants.c.o.d"
  "/work/main/src/passes/remove_dead.c" "CMakeFiles/kiln.dir/src/passes/remove_dead.c.o" "gcc" "CMakeFiles/kiln.dir/src/passes/remove_dead.c.o.d"
  "/work/main/src/plan/plan.c" "CMakeFiles/kiln.dir/src/plan/plan.c.o" "gcc" "CMakeFiles/kiln.dir/src/plan/plan.c.o.d"
  "/work/main/src/runtime/context.c" "CMakeFiles/kiln.dir/src/runtime/context.c.o" "gcc" "CMakeFiles/kiln.dir/src/runtime/context.c.o.d"
  "/work/main/src/runtime/engine.c" "CMakeFiles/kiln.dir/src/runtime/engine.c.o" "gcc" "CMakeFiles/kiln.dir/src/runtime/engine.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
