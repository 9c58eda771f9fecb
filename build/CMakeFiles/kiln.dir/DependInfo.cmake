
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/backends/cpu/cpu_dispatch.c" "CMakeFiles/kiln.dir/src/backends/cpu/cpu_dispatch.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/cpu_dispatch.c.o.d"
  "/work/main/src/backends/cpu/elementwise.c" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/elementwise.c.o.d"
  "/work/main/src/backends/cpu/nn.c" "CMakeFiles/kiln.dir/src/backends/cpu/nn.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/nn.c.o.d"
  "/work/main/src/backends/cpu/reduce.c" "CMakeFiles/kiln.dir/src/backends/cpu/reduce.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/reduce.c.o.d"
  "/work/main/src/backends/cpu/shape.c" "CMakeFiles/kiln.dir/src/backends/cpu/shape.c.o" "gcc" "CMakeFiles/kiln.dir/src/backends/cpu/shape.c.o.d"
  "/work/main/src/core/arena.c" "CMakeFiles/kiln.dir/src/core/arena.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/arena.c.o.d"
  "/work/main/src/core/dtype.c" "CMakeFiles/kiln.dir/src/core/dtype.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/dtype.c.o.d"
  "/work/main/src/core/file.c" "CMakeFiles/kiln.dir/src/core/file.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/file.c.o.d"
  "/work/main/src/core/log.c" "CMakeFiles/kiln.dir/src/core/log.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/log.c.o.d"
  "/work/main/src/core/status.c" "CMakeFiles/kiln.dir/src/core/status.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/status.c.o.d"
  "/work/main/src/core/tensor.c" "CMakeFiles/kiln.dir/src/core/tensor.c.o" "gcc" "CMakeFiles/kiln.dir/src/core/tensor.c.o.d"
  "/work/main/src/ir/graph.c" "CMakeFiles/kiln.dir/src/ir/graph.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/graph.c.o.d"
  "/work/main/src/ir/graph_passes.c" "CMakeFiles/kiln.dir/src/ir/graph_passes.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/graph_passes.c.o.d"
  "/work/main/src/ir/infer_elementwise.c" "CMakeFiles/kiln.dir/src/ir/infer_elementwise.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_elementwise.c.o.d"
  "/work/main/src/ir/infer_nn.c" "CMakeFiles/kiln.dir/src/ir/infer_nn.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_nn.c.o.d"
  "/work/main/src/ir/infer_reduce.c" "CMakeFiles/kiln.dir/src/ir/infer_reduce.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_reduce.c.o.d"
  "/work/main/src/ir/infer_shape.c" "CMakeFiles/kiln.dir/src/ir/infer_shape.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/infer_shape.c.o.d"
  "/work/main/src/ir/op_schema.c" "CMakeFiles/kiln.dir/src/ir/op_schema.c.o" "gcc" "CMakeFiles/kiln.dir/src/ir/op_schema.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
