"""Compile-time cost of the compiler's front half: tracing and autodiff of long elementwise chains.

    python -m benchmarks.trace_cost                 # chains of 10, 100 and 1000 ops
    python -m benchmarks.trace_cost --json FILE     # also write the results as JSON
    python -m benchmarks.trace_cost --repeats 3 --sizes 10 100 1000 3000

The traced function is a chain of ``n`` elementwise ops on ``x[64]`` (float64) that cycles through
``sin``, ``tanh``, multiply by a constant and add a constant, so every op is one IR node.  For each
``n`` we time

- **trace**: ``symgrad.trace(chain, x)`` (eager forward of every op plus recording);
- **autodiff**: ``symgrad.compiler.autodiff.autodiff(graph)`` on that graph, which replays it under the autograd
  engine, traces the backward with ``create_graph=True`` into a joint graph and simplifies it
  (fold_constants, cse, dce);

as the median of ``--repeats`` runs (the minimum and maximum are in the JSON), and count the nodes of
the forward and of the simplified joint graph.  The joint graph is checked against the numpy
derivative of the chain once per size before anything is timed.  Whether the 1000-op chain
(trace + autodiff) finishes under 10 s is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

BUDGET_S = 10.0          # the 1000-op chain should trace and differentiate well within this
SIZE = 64
DEFAULT_SIZES = (10, 100, 1000)
MUL_C, ADD_C = 0.9, 0.1  # keep values bounded: |sin|, |tanh| <= 1, then *0.9, +0.1


def make_chain(n: int, T):
    """``x -> op_n(...op_1(x))`` cycling sin, tanh, *0.9, +0.1, written against module ``T``."""

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
    """The chain's value and its vector-Jacobian product with ``tangent``, by hand."""
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


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(n: int, repeats: int, x: np.ndarray) -> dict:
    import symgrad
    from symgrad.compiler.autodiff import autodiff
    from symgrad.ir import interpret

    chain = make_chain(n, symgrad)
    # check once, untimed: the joint graph computes the chain and its vector-Jacobian product
    graph = symgrad.trace(chain, x)
    joint = autodiff(graph)
    tangent = np.linspace(0.5, 1.5, x.size)
    value, grad = interpret(joint, x, tangent)
    want_value, want_grad = numpy_value_and_grad(n, x, tangent)
    ok = bool(np.allclose(value, want_value, rtol=1e-12, atol=0)
              and np.allclose(grad, want_grad, rtol=1e-10, atol=1e-300))

    trace_s, autodiff_s = [], []
    for _ in range(repeats):
        t, graph = _timed(lambda: symgrad.trace(chain, x))
        trace_s.append(t)
        t, joint = _timed(lambda g=graph: autodiff(g))
        autodiff_s.append(t)
    return {
        "ops": n,
        "forward_nodes": len(graph.nodes),
        "joint_nodes": len(joint.nodes),
        "trace_s": statistics.median(trace_s),
        "autodiff_s": statistics.median(autodiff_s),
        "trace_s_all": trace_s,
        "autodiff_s_all": autodiff_s,
        "total_s": statistics.median(trace_s) + statistics.median(autodiff_s),
        "matches_numpy": ok,
    }


def _fmt_s(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def markdown_table(rows: list[dict]) -> str:
    lines = ["| ops | forward nodes | joint nodes | trace (median) | autodiff (median) | trace per op | "
             "autodiff per op | joint == numpy |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in rows:
        lines.append(f"| {r['ops']} | {r['forward_nodes']} | {r['joint_nodes']} | {_fmt_s(r['trace_s'])} | "
                     f"{_fmt_s(r['autodiff_s'])} | {_fmt_s(r['trace_s'] / r['ops'])} | "
                     f"{_fmt_s(r['autodiff_s'] / r['ops'])} | {'yes' if r['matches_numpy'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.trace_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per chain length (default 5; median)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES),
                    help="chain lengths (default: 10 100 1000)")
    args = ap.parse_args(argv)

    import symgrad

    log = lambda s: print(s, flush=True)  # noqa: E731
    log("# symgrad trace + autodiff cost: chains of elementwise ops (sin, tanh, *0.9, +0.1) on x[64], float64")
    log(f"python {platform.python_version()}, numpy {np.__version__}, symgrad {symgrad.__version__}; "
        f"median of {args.repeats} runs per length, after one untimed run that checks the joint graph")
    log("")
    x = np.random.default_rng(0).uniform(-2.0, 2.0, SIZE)
    rows = []
    for n in args.sizes:
        rows.append(measure(n, args.repeats, x))
        r = rows[-1]
        log(f"  {n:5d} ops: trace {_fmt_s(r['trace_s'])}, autodiff {_fmt_s(r['autodiff_s'])}", )
    log("")
    log(markdown_table(rows))
    log("")
    big = [r for r in rows if r["ops"] == 1000]
    if big:
        r = big[0]
        verdict = "yes" if r["total_s"] < BUDGET_S else "NO"
        log(f"1000-op chain traced and differentiated under {BUDGET_S:.0f} s: {verdict} "
            f"({_fmt_s(r['trace_s'])} trace + {_fmt_s(r['autodiff_s'])} autodiff = {_fmt_s(r['total_s'])})")
    bad = [r["ops"] for r in rows if not r["matches_numpy"]]
    if bad:
        log(f"WARNING: the joint graph disagrees with the numpy derivative for chains of {bad} ops")

    if args.json:
        doc = {"benchmark": "trace_cost",
               "versions": {"python": platform.python_version(), "numpy": np.__version__,
                            "symgrad": symgrad.__version__},
               "input": f"float64[{SIZE}]", "repeats": args.repeats, "budget_s_1000_ops": BUDGET_S,
               "results": rows}
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
