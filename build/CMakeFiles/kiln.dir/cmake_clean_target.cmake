file(REMOVE_RECURSE
  "libkiln.a"
)
