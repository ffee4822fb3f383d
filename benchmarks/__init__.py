"""Benchmarks for symgrad (DESIGN.md section 6).

- :mod:`benchmarks.workloads` - the workloads W1-W5 as data: seeded inputs, a numpy forward, a
  hand-written numpy gradient and a "torch-like" implementation written against a module ``T``
  (runs unchanged with ``T = symgrad`` and ``T = torch``).
- :mod:`benchmarks.timing` - interleaved, round-robin timing: medians of >= 7 samples of >= 20 ms.
- :mod:`benchmarks.eager` - ``python -m benchmarks.eager``: eager forward+backward per call,
  symgrad vs the numpy hand gradient vs torch eager.

This package deliberately imports nothing at import time, so ``benchmarks.eager`` run as a script
can set the BLAS/OpenMP thread variables before numpy is first imported.
"""
