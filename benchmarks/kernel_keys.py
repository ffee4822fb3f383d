"""Cold first call of an RNN unrolled by a Python loop: how many Numba kernels it compiles, and how long.

``h = tanh(h @ W + x[t] @ U + b)`` over ``T`` steps from ``h = 0``, loss ``sum(h**2)``; U[16,32],
W[32,32], b[32], x[T,32,16].  Each run is a fresh process with an empty ``SYMGRAD_CACHE_DIR`` and
``NUMBA_NUM_THREADS=1``, then a second process on the cache the first one filled (warm):

    python -m benchmarks.kernel_keys                      # T = 10 and 12
    python -m benchmarks.kernel_keys --steps 10 --root /path/to/other/checkout   # another symgrad

Columns: the API (``value_and_grad`` with numpy arrays, or ``compile`` + ``backward()`` with Tensors),
the kernels in the generated code that ran, Numba compilations, disk-cache loads and the first call's
seconds (trace, autodiff, codegen and compilation included; import excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import symgrad
    steps, api = int(sys.argv[1]), sys.argv[2]
    r = np.random.default_rng(0)
    U, W, b = 0.3 * r.standard_normal((16, 32)), 0.3 * r.standard_normal((32, 32)), 0.1 * r.standard_normal(32)
    x = r.standard_normal((steps, 32, 16))

    def loss(U, W, b, x):
        h = symgrad.zeros(x.shape[1], W.shape[0], dtype=x.dtype)
        for t in range(steps):
            h = symgrad.tanh(h @ W + x[t] @ U + b)
        return (h * h).sum()

    t0 = time.perf_counter()
    if api == "value_and_grad":
        vg = symgrad.value_and_grad(loss, argnums=(0, 1, 2))
        value, grads = vg(U, W, b, x)
        f = vg.compiled
    else:
        f = symgrad.compile(loss)
        leaves = [symgrad.tensor(a, requires_grad=i < 3) for i, a in enumerate((U, W, b, x))]
        out = f(*leaves)
        out.backward()
        value = out.item()
    seconds = time.perf_counter() - t0
    s = f.stats()
    print(json.dumps({"seconds": seconds, "kernels": s["kernels"], "compiles": s["kernel_compiles"],
                      "loads": s["kernel_cache_loads"], "value": float(value)}))
""")


def run(steps: int, api: str, root: Path, cache: Path) -> dict:
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache), NUMBA_NUM_THREADS="1", PYTHONPATH=str(root))
    env.pop("NUMBA_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(steps), api], env=env, capture_output=True,
                          text=True, cwd=root, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 12])
    parser.add_argument("--api", nargs="+", default=["value_and_grad", "compile"])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the symgrad checkout to run (default: this one)")
    args = parser.parse_args(argv)
    print(f"{'T':>3} {'api':<15} {'run':<5} {'kernels':>7} {'compiles':>8} {'loads':>5} {'seconds':>8}")
    for steps in args.steps:
        for api in args.api:
            with tempfile.TemporaryDirectory() as tmp:
                cache = Path(tmp) / "cache"
                for label in ("cold", "warm"):
                    r = run(steps, api, args.root, cache)
                    print(f"{steps:>3} {api:<15} {label:<5} {r['kernels']:>7} {r['compiles']:>8} {r['loads']:>5} "
                          f"{r['seconds']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
