"""Shape, assembly and indexing functions: flip, roll, tile, pad, stacks, splits, take, ..."""
