file(REMOVE_RECURSE
  "CMakeFiles/kiln_cli.dir/tools/cmd_build.c.o"
  "CMakeFiles/kiln_cli.dir/tools/cmd_build.c.o.d"
  "CMakeFiles/kiln_cli.dir/tools/cmd_inspect.c.o"
  "CMakeFiles/kiln_cli.dir/tools/cmd_inspect.c.o.d"
  "CMakeFiles/kiln_cli.dir/tools/cmd_run.c.o"
  "CMakeFiles/kiln_cli.dir/tools/cmd_run.c.o.d"
  "CMakeFiles/kiln_cli.dir/tools/kiln.c.o"
  "CMakeFiles/kiln_cli.dir/tools/kiln.c.o.d"
  "kiln"
  "kiln.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/kiln_cli.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
