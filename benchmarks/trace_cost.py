"""Compile-time cost of everything before Numba, phase by phase, on long chains, beside jax.jit.

    python -m benchmarks.trace_cost                          # chains of 10, 100, 1000 and 3000 ops
    python -m benchmarks.trace_cost --shapes elementwise --sizes 10 100 1000 --repeats 3
    python -m benchmarks.trace_cost --no-jax --json FILE      # also write the results as JSON
    python -m benchmarks.trace_cost --first-call 1000         # + full first calls (Numba included)

Three chain shapes, each ending in ``.sum()`` so that ``value_and_grad`` applies:

- ``elementwise``: ``x[64]`` through ``n`` ops cycling ``sin``, ``tanh``, ``*0.9``, ``+0.1``;
- ``reduce``: ``x[16, 8]`` through ``n`` ops cycling ``a - a.mean(1, keepdims=True)``, ``tanh``,
  ``a + a.sum(0) * 0.01`` (a reduction broadcast back) and ``*0.9``;
- ``matmul``: ``x[4, 8]`` through ``n`` ops alternating ``a @ W`` (``W[8, 8]`` a captured constant)
  and ``tanh``.

For each shape and ``n`` the phases of a ``value_and_grad`` build are timed one by one (median of
``--repeats`` runs, with the garbage collector paused as the build pauses it):

- **trace**: ``symgrad.trace(f, x)``;
- **key**: the build-cache key of the traced graph (:func:`symgrad.compiler.build_cache.build_key`);
- **autodiff**: the joint graph, without simplification;
- **simplify**: fold_constants, peephole, cse, dce of the joint graph;
- **partition**: the forward/backward min cut (``compile()``'s split kernels; ``value_and_grad``
  runs the joint kernel and skips it);
- **codegen**: the Numba source of the joint kernel (fusion, naming, printing), not compiled.

``front`` is trace + key + autodiff + simplify + codegen: everything ``value_and_grad`` does before
Numba.  Beside it, **jax** is ``jax.jit(jax.value_and_grad(f))``'s first call (tracing and XLA
compilation, x64 enabled), in a subprocess with a time limit (``--jax-timeout``); and with
``--first-call N`` the full first call of ``symgrad.value_and_grad(f)`` for chains of ``N`` ops,
Numba included, in a fresh process with an empty cache.  The joint graph is checked against
the eager gradient once per shape and size before anything is timed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SHAPES = ("elementwise", "reduce", "matmul")
DEFAULT_SIZES = (10, 100, 1000, 3000)
INPUT_SHAPES = {"elementwise": (64,), "reduce": (16, 8), "matmul": (4, 8)}
MUL_C, ADD_C = 0.9, 0.1   # keep values bounded: |sin|, |tanh| <= 1, then *0.9, +0.1
W = np.random.default_rng(1).normal(size=(8, 8)) / 3
PHASES = ("trace", "key", "autodiff", "simplify", "partition", "codegen")
FRONT = ("trace", "key", "autodiff", "simplify", "codegen")


def make_chain(n: int, T):
    """``x -> op_n(...op_1(x))`` cycling sin, tanh, *0.9, +0.1, written against module ``T`` (unsummed:
    :mod:`benchmarks.latency` times it in every tool)."""

    def chain(x):
        a = x
        for k in range(n):
            r = k % 4
            if r == 0:
                a = T.sin(a)
            elif r == 1:
                a = T.tanh(a)
            elif r == 2:
                a = a * MUL_C
            else:
                a = a + ADD_C
        return a

    chain.__name__ = f"chain_{n}"
    return chain


def numpy_value_and_grad(n: int, x: np.ndarray, tangent: np.ndarray):
    """:func:`make_chain`'s value and its vector-Jacobian product with ``tangent``, by hand."""
    a, derivs = x, []
    for k in range(n):
        r = k % 4
        if r == 0:
            derivs.append(np.cos(a))
            a = np.sin(a)
        elif r == 1:
            a = np.tanh(a)
            derivs.append(1.0 - a * a)
        elif r == 2:
            derivs.append(MUL_C)
            a = a * MUL_C
        else:
            derivs.append(1.0)
            a = a + ADD_C
    g = tangent
    for d in reversed(derivs):
        g = g * d
    return a, g


def make_loss(shape: str, n: int, T):
    """The scalar loss ``f(x)`` of chain ``shape`` with ``n`` ops, written against module ``T``
    (``symgrad`` or ``jax.numpy``)."""

    chain = make_chain(n, T)

    def elementwise(x):
        return chain(x).sum()

    def reduce(x):
        a = x
        for k in range(n):
            r = k % 4
            if r == 0:
                a = a - a.mean(1, keepdims=True)
            elif r == 1:
                a = T.tanh(a)
            elif r == 2:
                a = a + a.sum(0) * 0.01
            else:
                a = a * MUL_C
        return a.sum()

    def matmul(x):
        a = x
        for k in range(n):
            a = a @ W if k % 2 == 0 else T.tanh(a)
        return a.sum()

    fn = {"elementwise": elementwise, "reduce": reduce, "matmul": matmul}[shape]
    fn.__name__ = f"{shape}_{n}"
    return fn


def example_input(shape: str) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1.0, 1.0, INPUT_SHAPES[shape])


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def build_phases(shape: str, n: int) -> tuple[dict, dict]:
    """One build's phases: ``(seconds per phase, sizes)``, with the garbage collector paused."""
    import symgrad
    from codegen.numba_emit import emit_numba
    from codegen.partition import partition
    from symgrad.compiler import build_cache
    from symgrad.compiler.autodiff import autodiff
    from symgrad.ir.simplify import simplify

    f, x = make_loss(shape, n, symgrad), example_input(shape)
    t: dict = {}
    enabled = gc.isenabled()
    gc.disable()
    try:
        t["trace"], graph = _timed(lambda: symgrad.trace(f, x))
        t["key"], _ = _timed(lambda: build_cache.build_key(graph, wrt=[0], joint_kernel=True, options={}))
        t["autodiff"], joint = _timed(lambda: autodiff(graph, [0], simplify=False))
        t["simplify"], _ = _timed(lambda: simplify(joint))
        t["partition"], _ = _timed(lambda: partition(joint))
        t["codegen"], emitted = _timed(lambda: emit_numba(joint, "joint"))
    finally:
        if enabled:
            gc.enable()
    sizes = {"forward_nodes": len(graph.nodes), "joint_nodes": len(joint.nodes),
             "kernels": len(getattr(emitted, "kernels", []))}
    return t, sizes


def joint_matches_eager(shape: str, n: int) -> bool:
    """The joint graph's value and gradient equal eager autograd's (run once, untimed)."""
    import symgrad
    from symgrad.compiler.autodiff import autodiff
    from symgrad.ir import interpret

    f, x = make_loss(shape, n, symgrad), example_input(shape)
    value, grad = interpret(autodiff(symgrad.trace(f, x), [0]), x, np.ones(()))
    xt = symgrad.tensor(x, requires_grad=True)
    loss = f(xt)
    loss.backward()
    return bool(np.allclose(value, loss.detach().numpy(), rtol=1e-10, atol=1e-12)
                and np.allclose(grad, xt.grad.numpy(), rtol=1e-10, atol=1e-12))


_JAX_SCRIPT = """
import sys, time
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
from benchmarks.trace_cost import example_input, make_loss
shape, n = sys.argv[1], int(sys.argv[2])
g = jax.jit(jax.value_and_grad(make_loss(shape, n, jnp)))
x = example_input(shape)
t0 = time.perf_counter()
value, grad = g(x)
jax.block_until_ready(grad)
print(time.perf_counter() - t0)
"""

_FIRST_CALL_SCRIPT = """
import sys, time
import numpy as np
t0 = time.perf_counter()
import symgrad
from benchmarks.trace_cost import example_input, make_loss
shape, n = sys.argv[1], int(sys.argv[2])
vg = symgrad.value_and_grad(make_loss(shape, n, symgrad))
x = example_input(shape)
t1 = time.perf_counter()
vg(x)
t2 = time.perf_counter()
vg(x)
t3 = time.perf_counter()
stats = vg.compiled.stats()
print(t2 - t1, t1 - t0, t3 - t2, stats.get("trace_s", 0.0), stats.get("autodiff_s", 0.0), stats.get("codegen_s", 0.0))
"""


def _subprocess(script: str, args: list[str], timeout: float, env: dict | None = None) -> str | None:
    """The last line a fresh Python prints running ``script`` (None on a timeout or an error)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return done.stdout.strip().splitlines()[-1]


def jax_first_call(shape: str, n: int, timeout: float) -> float | None:
    """Seconds of ``jax.jit(jax.value_and_grad(f))``'s first call, or None (timeout, no jax)."""
    out = _subprocess(_JAX_SCRIPT, [shape, str(n)], timeout)
    return None if out is None else float(out)


def symgrad_first_call(shape: str, n: int, timeout: float) -> dict | None:
    """``symgrad.value_and_grad(f)``'s first call in a fresh process with an empty cache."""
    with tempfile.TemporaryDirectory(prefix="symgrad_first_call_") as cache:
        env = dict(os.environ, SYMGRAD_CACHE_DIR=cache)
        out = _subprocess(_FIRST_CALL_SCRIPT, [shape, str(n)], timeout, env)
    if out is None:
        return None
    first, imports, second, trace_s, autodiff_s, codegen_s = map(float, out.split())
    return {"first_call_s": first, "import_s": imports, "second_call_s": second, "trace_s": trace_s,
            "autodiff_s": autodiff_s, "codegen_and_numba_s": codegen_s}


def measure(shape: str, n: int, repeats: int) -> dict:
    runs = [build_phases(shape, n) for _ in range(repeats)]
    row = {"shape": shape, "ops": n, **runs[0][1]}
    for p in PHASES:
        row[f"{p}_s"] = statistics.median(t[p] for t, _ in runs)
        row[f"{p}_s_all"] = [t[p] for t, _ in runs]
    row["front_s"] = statistics.median(sum(t[p] for p in FRONT) for t, _ in runs)
    return row


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def markdown_table(rows: list[dict]) -> str:
    head = ["shape", "ops", "joint nodes", "kernels"] + list(PHASES) + ["front", "front / op", "jax.jit 1st call",
                                                                         "front ÷ jax", "joint == eager"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 3) + [":---:"]) + "|"]
    for r in rows:
        jax_s = r.get("jax_s")
        ratio = f"{r['front_s'] / jax_s:.2f}" if jax_s else ("timeout" if r.get("jax_timed_out") else "—")
        cells = [r["shape"], str(r["ops"]), str(r["joint_nodes"]), str(r["kernels"])]
        cells += [_fmt_s(r[f"{p}_s"]) for p in PHASES]
        cells += [_fmt_s(r["front_s"]), _fmt_s(r["front_s"] / r["ops"]),
                  _fmt_s(jax_s) if jax_s else ("> timeout" if r.get("jax_timed_out") else "—"), ratio,
                  {True: "yes", False: "NO", None: "—"}[r.get("matches_eager")]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.trace_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument("--repeats", type=int, default=3, help="timed builds per chain (default 3; median)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                    help="chain lengths (default: 10 100 1000 3000)")
    ap.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES), help="chain shapes (default: all)")
    ap.add_argument("--no-jax", action="store_true", help="skip jax.jit's first calls")
    ap.add_argument("--jax-timeout", type=float, default=300.0, help="seconds per jax first call (default 300)")
    ap.add_argument("--first-call", type=int, nargs="*", default=[], metavar="N",
                    help="also time symgrad.value_and_grad's full first call (Numba included, empty cache) "
                         "for chains of N ops")
    ap.add_argument("--first-call-timeout", type=float, default=1800.0)
    args = ap.parse_args(argv)

    import symgrad

    log = lambda s: print(s, flush=True)  # noqa: E731
    log("# symgrad value_and_grad build before Numba, by phase, beside jax.jit's first call")
    log(f"python {platform.python_version()}, numpy {np.__version__}, symgrad {symgrad.__version__}; "
        f"median of {args.repeats} builds per chain, after one untimed build that checks the joint graph")
    log("")
    for shape in args.shapes:   # the first build of a process pays for imports and rule tables
        build_phases(shape, 10)
    rows = []
    for shape in args.shapes:
        for n in args.sizes:
            ok = joint_matches_eager(shape, n)
            r = measure(shape, n, args.repeats)
            r["matches_eager"] = ok
            if not args.no_jax:
                r["jax_s"] = jax_first_call(shape, n, args.jax_timeout)
                r["jax_timed_out"] = r["jax_s"] is None
            rows.append(r)
            log(f"  {shape:11s} {n:5d} ops: " + ", ".join(f"{p} {_fmt_s(r[p + '_s'])}" for p in PHASES)
                + f"; front {_fmt_s(r['front_s'])}; jax {_fmt_s(r.get('jax_s'))}")
    log("")
    log(markdown_table(rows))
    first_calls = []
    for n in args.first_call:
        for shape in args.shapes:
            fc = symgrad_first_call(shape, n, args.first_call_timeout)
            first_calls.append({"shape": shape, "ops": n, **(fc or {"timed_out": True})})
            log(f"  first call, {shape} {n} ops: " + (", ".join(f"{k} {_fmt_s(v)}" for k, v in fc.items())
                                                       if fc else "failed or timed out"))
    bad = [(r["shape"], r["ops"]) for r in rows if not r["matches_eager"]]
    if bad:
        log(f"WARNING: the joint graph disagrees with eager autograd for {bad}")
    if args.json:
        doc = {"benchmark": "trace_cost",
               "versions": {"python": platform.python_version(), "numpy": np.__version__,
                            "symgrad": symgrad.__version__},
               "inputs": {s: f"float64{list(INPUT_SHAPES[s])}" for s in args.shapes}, "repeats": args.repeats,
               "results": rows, "first_calls": first_calls}
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
