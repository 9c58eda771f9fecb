CMakeFiles/kiln_cli.dir/tools/kiln.c.o: /work/main/tools/kiln.c \
 /usr/include/stdc-predef.h
