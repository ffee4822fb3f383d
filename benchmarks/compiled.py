"""Compiled-mode benchmark (a benchmark, not a test): ``python -m benchmarks.compiled [--quick] [--json F]``.

Forward+backward per call, one thread, implementations interleaved, medians (benchmarks/timing.py):

* ``symgrad value_and_grad`` — the functional fast lane: one fused joint kernel, numpy in/out;
* ``symgrad compile + backward`` — the tensor API: compiled call returning a Tensor, then ``.backward()``;
* ``hand numba (fused, libm)`` — a hand-written single-loop forward+backward Numba kernel with scalar libm math;
* ``numpy hand grad`` — the hand-written numpy gradient of benchmarks/workloads.py.

Every implementation is checked against the numpy reference before it is timed.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

import symgrad  # noqa: E402

from . import timing, workloads  # noqa: E402


@numba.njit(error_model="numpy")
def _hand_w1(x, grad):
    total = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        s, c = math.sin(v), math.cos(v)
        e = math.exp(-v * v)
        l1 = math.log1p(v * v)
        th = math.tanh(v)
        total += s * e + l1 * th
        grad[i] = c * e - 2.0 * v * s * e + 2.0 * v / (1.0 + v * v) * th + l1 * (1.0 - th * th)
    return total


@numba.njit(error_model="numpy")
def _hand_w2(x, w, b, gx, gw, gb):
    n, m = x.shape
    total = 0.0
    gw[:] = 0.0
    gb[:] = 0.0
    scale = 1.0 / (n * m)
    for i in range(n):
        for j in range(m):
            t = math.tanh(x[i, j] * w[j] + b[j])
            total += t * t
            d = 2.0 * t * (1.0 - t * t) * scale
            gx[i, j] = d * w[j]
            gw[j] += d * x[i, j]
            gb[j] += d
    return total * scale


def _w1_case(n):
    x = workloads._w1_inputs(n)()["x"]
    grad = np.empty_like(x)

    def w1(t):
        return workloads.w1_torch_like(symgrad, t)

    vg = symgrad.value_and_grad(w1)
    compiled = symgrad.compile(w1)

    def tensor_api():
        t = symgrad.tensor(x, dtype=symgrad.float64, requires_grad=True)
        compiled(t).backward()
        return t.grad.numpy()

    impls = {
        "symgrad value_and_grad": lambda: vg(x),
        "symgrad compile + backward": tensor_api,
        "hand numba (fused, libm)": lambda: (_hand_w1(x, grad), grad),
        "numpy hand grad": lambda: workloads.w1_numpy_value_and_grad(x),
    }
    ref_value, ref_grads = workloads.w1_numpy_value_and_grad(x)
    checks = {
        "symgrad value_and_grad": lambda: vg(x)[1],
        "symgrad compile + backward": tensor_api,
        "hand numba (fused, libm)": lambda: (_hand_w1(x, grad), grad.copy())[1],
    }
    return impls, checks, ref_grads["x"]


def _w2_case():
    inp = workloads._w2_inputs()
    x, w, b = inp["x"], inp["w"], inp["b"]
    gx, gw, gb = np.empty_like(x), np.empty_like(w), np.empty_like(b)

    def w2(x_, w_, b_):
        return workloads.w2_torch_like(symgrad, x_, w_, b_)

    vg = symgrad.value_and_grad(w2, argnums=(0, 1, 2))
    compiled = symgrad.compile(w2)

    def tensor_api():
        ts = [symgrad.tensor(a, dtype=symgrad.float64, requires_grad=True) for a in (x, w, b)]
        compiled(*ts).backward()
        return ts[0].grad.numpy()

    impls = {
        "symgrad value_and_grad": lambda: vg(x, w, b),
        "symgrad compile + backward": tensor_api,
        "hand numba (fused, libm)": lambda: _hand_w2(x, w, b, gx, gw, gb),
        "numpy hand grad": lambda: workloads.w2_numpy_value_and_grad(x, w, b),
    }
    _, ref = workloads.w2_numpy_value_and_grad(x, w, b)
    checks = {
        "symgrad value_and_grad": lambda: vg(x, w, b)[1][0],
        "symgrad compile + backward": tensor_api,
        "hand numba (fused, libm)": lambda: (_hand_w2(x, w, b, gx, gw, gb), gx.copy())[1],
    }
    return impls, checks, ref["x"]


def _first_call_latency() -> dict:
    """Seconds from an empty kernel cache to the first W1 gradient (in this process, after imports)."""
    x = workloads._w1_inputs(1000)()["x"]

    def w1(t):
        return (symgrad.sin(t) * symgrad.exp(-t * t) + symgrad.log1p(t * t) * symgrad.tanh(t)).sum()

    t0 = time.perf_counter()
    symgrad.value_and_grad(w1)(x)
    return {"w1_first_gradient_s": time.perf_counter() - t0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    samples, min_time = (7, 0.02) if args.quick else (15, 0.05)
    latency = _first_call_latency()
    cases = {"W1 1e6": _w1_case(1_000_000), "W1 1e3": _w1_case(1000), "W2": _w2_case()}
    print("# symgrad compiled benchmark (one thread)")
    print(f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}")
    print(f"first call after imports (trace + autodiff + codegen + Numba compile), W1: "
          f"{latency['w1_first_gradient_s']:.2f} s\n")
    print("| workload | implementation | median per call | vs hand numba | vs numpy hand grad |")
    print("|---|---|---|---|---|")
    out = {"latency": latency, "workloads": {}}
    for name, (impls, checks, ref) in cases.items():
        for impl, fn in checks.items():
            got = fn()
            if not np.allclose(got, ref, rtol=1e-9, atol=1e-12):
                raise SystemExit(f"{name}: {impl} disagrees with the numpy reference")
        res = timing.interleaved(impls, samples=samples, min_sample_time=min_time)
        hand, ref_np = res["hand numba (fused, libm)"].median, res["numpy hand grad"].median
        out["workloads"][name] = {k: v.as_dict() for k, v in res.items()}
        for impl, t in res.items():
            print(f"| {name} | {impl} | {timing.format_seconds(t.median)} | {t.median / hand:.2f}x | "
                  f"{t.median / ref_np:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
