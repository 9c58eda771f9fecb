
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tools/cmd_build.c" "CMakeFiles/kiln_cli.dir/tools/cmd_build.c.o" "gcc" "CMakeFiles/kiln_cli.dir/tools/cmd_build.c.o.d"
  "/work/main/tools/cmd_inspect.c" "CMakeFiles/kiln_cli.dir/tools/cmd_inspect.c.o" "gcc" "CMakeFiles/kiln_cli.dir/tools/cmd_inspect.c.o.d"
  "/work/main/tools/cmd_run.c" "CMakeFiles/kiln_cli.dir/tools/cmd_run.c.o" "gcc" "CMakeFiles/kiln_cli.dir/tools/cmd_run.c.o.d"
  "/work/main/tools/kiln.c" "CMakeFiles/kiln_cli.dir/tools/kiln.c.o" "gcc" "CMakeFiles/kiln_cli.dir/tools/kiln.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build/CMakeFiles/kiln.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
