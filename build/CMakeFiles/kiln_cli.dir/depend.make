# Empty dependencies file for kiln_cli.
# This may be replaced when dependencies are built.
