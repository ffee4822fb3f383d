"""Benchmarks for symgrad (the workloads and peers of benchmarks/README.md).

- :mod:`benchmarks.workloads` - the workloads W1-W5 as data: seeded inputs, a numpy forward, a
  hand-written numpy gradient and a "torch-like" implementation written against a module ``T``
  (runs unchanged with ``T = symgrad`` and ``T = torch``).
- :mod:`benchmarks.timing` - interleaved, round-robin timing: medians of >= 7 samples of >= 20 ms.
- :mod:`benchmarks.eager` - ``python -m benchmarks.eager``: eager forward+backward per call,
  symgrad vs the numpy hand gradient vs torch eager.
- :mod:`benchmarks.compiled` - ``python -m benchmarks.compiled``: symgrad's compiled modes vs a hand
  Numba kernel; :mod:`benchmarks.trace_cost` - trace + autodiff cost of long chains.
- :mod:`benchmarks.suite` - ``python -m benchmarks.suite``: the suite against the peers users would
  otherwise pick (see ``benchmarks/README.md``), built from :mod:`benchmarks.peers` (one builder per
  tool), :mod:`benchmarks.kernels` (hand-written Numba kernels), :mod:`benchmarks.latency` (first-call
  latency and compile time, in subprocesses), :mod:`benchmarks.memory` (peak RSS, in subprocesses) and
  :mod:`benchmarks.plots` (PNG plots).

This package deliberately imports nothing at import time, so ``benchmarks.eager`` run as a script
can set the BLAS/OpenMP thread variables before numpy is first imported.

Steady-state timings must run the Numba kernels, so compiled functions build them in their first call
(``tiered=False``) unless ``SYMGRAD_TIERED`` is set; :mod:`benchmarks.latency` sets it for its children,
which measure first calls as a user's process runs them (tiered).
"""

import os as _os

_os.environ.setdefault("SYMGRAD_TIERED", "0")
