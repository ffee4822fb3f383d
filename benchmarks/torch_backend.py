"""torch.compile(backend="symgrad") beside backend="inductor" (and eager torch), one thread.

    python -m benchmarks.torch_backend [--out results.json]

Workloads: W1 (x of 1e6 float64) and a softmax cross-entropy (``F.cross_entropy`` on L[4096, 512]
float64, integer labels), each a forward and a backward with respect to its float input.

* **steady**: forward+backward per call once compiled (symgrad's Numba kernels built: the benchmark
  waits for tiered execution's background build), the backends interleaved in one process
  (benchmarks.timing: medians of at least 7 samples of at least 20 ms).
* **cold**: the first call (Dynamo's trace, the backend's compilation, one forward+backward), each
  in a fresh process with empty caches (its own ``SYMGRAD_CACHE_DIR``, ``NUMBA_CACHE_DIR`` and
  ``TORCHINDUCTOR_CACHE_DIR``), so neither backend reuses work of an earlier run.

Inductor needs a C++ compiler and takes about 15 s for its first call: run this once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
for _k, _v in ONE_THREAD.items():
    os.environ.setdefault(_k, _v)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.timing import format_seconds, interleaved  # noqa: E402

BACKENDS = ("symgrad", "inductor")


def w1(x):
    return (torch.sin(x) * torch.exp(-x * x) + torch.log1p(x * x) * torch.tanh(x)).sum()


def cross_entropy(L, labels):
    return torch.nn.functional.cross_entropy(L, labels)


def inputs(name: str):
    r = np.random.default_rng(1)
    if name == "W1":
        return w1, [torch.from_numpy(r.uniform(-3.0, 3.0, size=1_000_000)).requires_grad_()]
    L = torch.from_numpy(3.0 * r.standard_normal((4096, 512))).requires_grad_()
    return cross_entropy, [L, torch.from_numpy(r.integers(0, 512, size=4096))]


WORKLOADS = ("W1", "cross_entropy")


def step(fn, args):
    """One forward+backward: the call a training step pays."""
    for a in args:
        a.grad = None
    out = fn(*args)
    out.backward()
    return out


def backend_of(name: str):
    if name == "symgrad":
        import symgrad.torch_backend
        return symgrad.torch_backend.symgrad_backend
    return name


def cold(backend: str, workload: str) -> float:
    """Seconds for the first forward+backward of a freshly compiled function (this process)."""
    torch.set_num_threads(1)
    fn, args = inputs(workload)
    compiled = torch.compile(fn, backend=backend_of(backend))
    t0 = time.perf_counter()
    step(compiled, args)
    return time.perf_counter() - t0


def cold_in_fresh_process(backend: str, workload: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, **ONE_THREAD, SYMGRAD_CACHE_DIR=os.path.join(tmp, "symgrad"),
                   NUMBA_CACHE_DIR=os.path.join(tmp, "numba"), TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
        r = subprocess.run([sys.executable, "-m", "benchmarks.torch_backend", "--cold", backend, workload],
                           capture_output=True, text=True, env=env, check=True)
        return float(r.stdout.strip().splitlines()[-1])


def steady(workload: str) -> dict:
    torch.set_num_threads(1)
    fn, args = inputs(workload)
    impls = {"eager": fn}
    for b in BACKENDS:
        impls[b] = torch.compile(fn, backend=backend_of(b))
    want = step(fn, args).item(), [a.grad.clone() for a in args if a.requires_grad]
    for f in impls.values():                 # compile
        step(f, args)
    # steady means symgrad's Numba kernels: its first calls run numpy code while they build in the
    # background (tiered execution), for longer on a loaded machine
    from symgrad.compiler import tiers
    assert tiers.wait_all(600), "symgrad's background kernel build did not finish"
    for name, f in impls.items():            # warm up, and check every backend computes the same
        got = step(f, args).item(), [a.grad.clone() for a in args if a.requires_grad]
        assert abs(got[0] - want[0]) <= 1e-9 * abs(want[0]), (name, got[0], want[0])
        assert all(torch.allclose(g, w, rtol=1e-9, atol=1e-12) for g, w in zip(got[1], want[1])), name
    res = interleaved({name: (lambda f=f: step(f, args)) for name, f in impls.items()})
    return {name: t.median for name, t in res.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cold", nargs=2, metavar=("BACKEND", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--out", help="write the results as JSON here")
    a = p.parse_args()
    if a.cold:
        print(cold(*a.cold))
        return
    results = {"torch": torch.__version__, "threads": 1, "workloads": {}}
    for w in WORKLOADS:
        entry = {"steady_s": steady(w), "cold_s": {b: cold_in_fresh_process(b, w) for b in BACKENDS}}
        entry["steady_ratio"] = entry["steady_s"]["symgrad"] / entry["steady_s"]["inductor"]
        entry["cold_ratio"] = entry["cold_s"]["symgrad"] / entry["cold_s"]["inductor"]
        results["workloads"][w] = entry
        s, c = entry["steady_s"], entry["cold_s"]
        print(f"{w:14s} steady: symgrad {format_seconds(s['symgrad'])}, inductor {format_seconds(s['inductor'])}, "
              f"eager {format_seconds(s['eager'])} (symgrad/inductor {entry['steady_ratio']:.2f}x); "
              f"cold: symgrad {c['symgrad']:.2f} s, inductor {c['inductor']:.2f} s ({entry['cold_ratio']:.2f}x)",
              flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
