"""Reductions, scans and sorting: cumsum, diff, sort, argmax, average, nan-reductions, ..."""
