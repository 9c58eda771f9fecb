# Empty dependencies file for kiln.
# This may be replaced when dependencies are built.
