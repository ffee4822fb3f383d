"""What a transform costs next to one ``value_and_grad`` call, in the same run (issue 19).

The Hessian-vector product of W1 (``sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x))``, x of 1e6 float64)
by ``symgrad.hvp`` against ``symgrad.value_and_grad`` of the same function, interleaved
(:mod:`benchmarks.timing`), and the ratio of the medians.  The target is at most 4x.  Run on one
thread, as the figures in the docs are:

    NUMBA_NUM_THREADS=1 python -m benchmarks.transforms_cost [--n 1000000]

Also times ``jvp`` and ``vjp``'s pullback of the same function (forward mode is the transpose of
reverse mode here, see docs/transforms.md).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import symgrad
from benchmarks.timing import interleaved
from benchmarks.workloads import WORKLOADS


def w1(x):
    return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="elements of x (default 1e6)")
    parser.add_argument("--samples", type=int, default=7)
    args = parser.parse_args(argv)
    x = WORKLOADS["W1 1e6"].make_inputs()["x"][: args.n] if args.n <= 1_000_000 else \
        np.random.default_rng(0).uniform(-3.0, 3.0, args.n)
    v = np.random.default_rng(1).standard_normal(x.shape)

    vg = symgrad.value_and_grad(w1)
    hvp = symgrad.hvp
    _, pull = symgrad.vjp(w1, x)
    one = np.float64(1.0)
    calls = {
        "value_and_grad": lambda: vg(x),
        "hvp": lambda: hvp(w1, (x,), (v,)),
        "jvp": lambda: symgrad.jvp(w1, (x,), (v,)),
        "vjp pullback": lambda: pull(np.asarray(one)),
    }
    # correctness first: the HVP against a central difference of the gradient
    eps = 1e-6
    fd = (vg(x + eps * v)[1] - vg(x - eps * v)[1]) / (2 * eps)
    err = np.max(np.abs(hvp(w1, (x,), (v,))[0] - fd)) / max(1.0, np.max(np.abs(fd)))
    results = interleaved(calls, samples=args.samples)
    base = results["value_and_grad"].median
    threads = os.environ.get("NUMBA_NUM_THREADS", "(Numba default)")
    print(f"W1, x[{args.n}] float64, NUMBA_NUM_THREADS={threads}; HVP vs central difference: rel. error {err:.1e}")
    for name, res in results.items():
        print(f"  {name:16s} {res.median * 1e3:9.3f} ms   {res.median / base:5.2f}x value_and_grad")
    return {name: res.median / base for name, res in results.items()}


if __name__ == "__main__":
    main()
