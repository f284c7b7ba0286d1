"""One module per op; each defines ``run(node, *inputs)``. See ``..registry``."""
