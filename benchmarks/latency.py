"""First-call latency and compile time vs graph size, each measured in fresh subprocesses.

**First-call latency** (W1 on ``x[1000]``; with ``workloads``, also a logistic regression and the W3 MLP):
the time from *after the imports* to the first gradient in a new Python process: tracing,
differentiating, generating and compiling code, loading caches, and the first run.  symgrad runs as a
user's process does, tiered (its first calls run numpy code while the Numba kernels compile in the
background; the child also reports when the kernels were ready), and ``tiered=False``
(``sg-vg-blocking``: the first call compiles the kernels).  Each tool is run twice in fresh processes
that share one new temporary cache directory:

- *cold*: the directory is empty (``SYMGRAD_CACHE_DIR``, ``NUMBA_CACHE_DIR``, jax's persistent
  compilation cache, ``TORCHINDUCTOR_CACHE_DIR`` and PyTensor's ``base_compiledir`` all point into it);
- *warm*: a second process with the same directory, as a user's second run of a script sees it.

Tools: symgrad (``value_and_grad`` and the tensor API), a hand-written Numba kernel with
``cache=True`` in a module written to the temporary directory, ``jax.jit`` (persistent cache enabled),
``torch.compile`` and PyTensor's Numba mode (these two only in the full run: seconds to minutes).

**Compile time vs graph size**: one fresh process per tool compiles the gradient of chains of 10, 100
and 1000 elementwise ops (``benchmarks.trace_cost.make_chain``, summed) on ``x[64]`` with an empty cache,
after one untimed tiny compile that loads the tool's lazily imported parts; each chain's first gradient
is timed and checked against the numpy derivative.  For symgrad the stages (trace, autodiff, partition,
code generation) are reported; the rest of the time is Numba compiling the kernel and the first run.

A child process is ``python -m benchmarks.latency --child TOOL [--workload W | --cold-workload W | --chain SIZES]``; it
prints one line ``RESULT <json>``.  ``python -m benchmarks.latency --first-gradient`` prints the
first-gradient table of symgrad against jax.jit on W1, the logistic regression and the MLP.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
W1_N = 1000
CHAIN_X = 64

LATENCY_TOOLS = {  # key -> (display name, peers tool to check for, full run only)
    "sg-vg": ("symgrad value_and_grad", "symgrad", False),
    "sg-vg-blocking": ("symgrad value_and_grad, tiered=False", "symgrad", True),
    "sg-compile": ("symgrad compile + backward", "symgrad", False),
    "hand": ("hand Numba (cache=True)", "numba", False),
    "jax": ("jax.jit (persistent cache)", "jax", False),
    "torch-compile": ("torch.compile", "torch", True),
    "pytensor": ("PyTensor (Numba)", "pytensor", True),
}
CHAIN_TOOLS = {
    "sg-vg": ("symgrad value_and_grad", "symgrad", False),
    "jax": ("jax.jit", "jax", False),
    "torch-compile": ("torch.compile", "torch", True),
    "pytensor": ("PyTensor (Numba)", "pytensor", True),
}

HAND_W1_MODULE = '''\
import math
import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy")
def w1(x):
    grad = np.empty_like(x)
    total = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        s, c = math.sin(v), math.cos(v)
        e = math.exp(-v * v)
        l1 = math.log1p(v * v)
        th = math.tanh(v)
        total += s * e + l1 * th
        grad[i] = c * e - 2.0 * v * s * e + 2.0 * v / (1.0 + v * v) * th + l1 * (1.0 - th * th)
    return total, grad
'''


# --- the child side -------------------------------------------------------------------------------

def _w1_input():
    from . import workloads
    return workloads._w1_inputs(W1_N)()["x"]


# --- the first-gradient workloads: (arguments, differentiated positions, torch-like loss, numpy gradients)

def _logistic_inputs():
    import numpy as np
    r = np.random.default_rng(5)
    X = r.standard_normal((1000, 20))
    return [0.1 * r.standard_normal(20), X, (r.uniform(size=1000) < 0.5).astype(np.float64)]


def logistic_torch_like(T, w, X, y):
    z = X @ w
    return T.mean(T.logaddexp(z * 0.0, z) - y * z)


def _logistic_numpy_grads(w, X, y):
    import numpy as np
    s = 1.0 / (1.0 + np.exp(-(X @ w)))
    return [X.T @ (s - y) / len(y)]


def first_gradient_workload(name: str):
    """``(arguments, argnums, loss(T, *args), numpy gradients of argnums)`` of a first-gradient workload."""
    from . import workloads
    if name == "w1":
        return [_w1_input()], (0,), workloads.w1_torch_like, \
            lambda x: [workloads.w1_numpy_value_and_grad(x)[1]["x"]]
    if name == "logistic":
        return _logistic_inputs(), (0,), logistic_torch_like, _logistic_numpy_grads
    if name == "mlp":
        inputs = workloads._w3_inputs(__import__("numpy").float64)()
        names = ["X", "W1", "b1", "W2", "b2", "Y"]

        def grads(*args):
            g = workloads.w3_numpy_value_and_grad(*args)[1]
            return [g[k] for k in ("W1", "b1", "W2", "b2")]
        return [inputs[k] for k in names], (1, 2, 3, 4), workloads.w3_torch_like, grads
    raise KeyError(name)


def _setup_jax(cache: str | None):
    import jax
    jax.config.update("jax_enable_x64", True)
    if cache:
        jax.config.update("jax_compilation_cache_dir", os.path.join(cache, "jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import jax.numpy as jnp
    return jax, jnp


def _setup_torch():
    import torch
    torch.set_num_threads(1)
    return torch


def first_gradient(tool: str, cache: str, workload: str = "w1") -> dict:
    """In a fresh process: imports, then time the first gradient.  Returns seconds and a checksum
    (and, for tiered symgrad, ``kernels_ready_s``: when the background build was done)."""
    import numpy as np

    from . import workloads
    if workload != "w1":
        return _first_gradient_of(tool, workload, cache)
    x = _w1_input()
    seconds, extra = None, {}
    if tool in ("sg-vg", "sg-compile", "sg-vg-blocking"):
        import symgrad
        f = lambda t: workloads.w1_torch_like(symgrad, t)  # noqa: E731
        t0 = time.perf_counter()
        if tool in ("sg-vg", "sg-vg-blocking"):
            vg = symgrad.value_and_grad(symgrad.compile(f, tiered=tool == "sg-vg"))
            _, g = vg(x)
            compiled = vg.compiled
        else:
            t = symgrad.tensor(x, requires_grad=True)
            compiled = symgrad.compile(f)
            compiled(t).backward()
            g = t.grad.numpy()
        seconds = time.perf_counter() - t0
        extra = _tier_facts(compiled, t0)
    elif tool == "hand":
        sys.path.insert(0, cache)
        path = Path(cache) / "bench_hand_w1.py"
        if not path.exists():
            path.write_text(HAND_W1_MODULE)
        import bench_hand_w1  # noqa: I001 - the module written above
        t0 = time.perf_counter()
        _, g = bench_hand_w1.w1(x)
    elif tool == "jax":
        jax, jnp = _setup_jax(cache)
        t0 = time.perf_counter()
        _, g = jax.block_until_ready(jax.jit(jax.value_and_grad(lambda t: workloads.w1_torch_like(jnp, t)))(x))
    elif tool == "torch-compile":
        torch = _setup_torch()
        t0 = time.perf_counter()
        t = torch.tensor(x, requires_grad=True)
        torch.compile(lambda v: workloads.w1_torch_like(torch, v), dynamic=False)(t).backward()
        g = t.grad.numpy()
    elif tool == "pytensor":
        import pytensor
        import pytensor.tensor as pt
        t0 = time.perf_counter()
        xs = pt.tensor("x", dtype="float64", shape=x.shape)
        loss = workloads.w1_torch_like(pt, xs)
        fn = pytensor.function([xs], [loss, pytensor.grad(loss, xs)], mode="NUMBA")
        _, g = fn(x)
    else:
        raise KeyError(tool)
    if seconds is None:
        seconds = time.perf_counter() - t0
    _, ref = workloads.w1_numpy_value_and_grad(x)
    return {"seconds": seconds, "matches_numpy": bool(np.allclose(g, ref["x"], rtol=1e-6, atol=1e-9)), **extra}


def _tier_facts(compiled, t0: float) -> dict:
    """After a symgrad first call: whether it ran on the numpy tier, and when its kernels were ready."""
    stats = compiled.stats()
    tiered = stats["background_builds"] > 0
    ok = compiled.wait()
    return {"tiered": tiered, "kernels_ready_s": (time.perf_counter() - t0) if tiered and ok else None,
            "background_error": compiled.stats()["background_error"]}


def _first_gradient_of(tool: str, workload: str, cache: str) -> dict:
    """The first gradient of ``workload`` (:func:`first_gradient_workload`) with symgrad or jax.jit."""
    import numpy as np

    args, argnums, loss, numpy_grads = first_gradient_workload(workload)
    extra = {}
    if tool in ("sg-vg", "sg-vg-blocking"):
        import symgrad
        t0 = time.perf_counter()
        vg = symgrad.value_and_grad(symgrad.compile(lambda *a: loss(symgrad, *a), tiered=tool == "sg-vg"),
                                    argnums=argnums)
        _, g = vg(*args)
        seconds = time.perf_counter() - t0
        extra = _tier_facts(vg.compiled, t0)
    elif tool == "jax":
        jax, jnp = _setup_jax(cache)
        t0 = time.perf_counter()
        _, g = jax.block_until_ready(jax.jit(jax.value_and_grad(lambda *a: loss(jnp, *a), argnums=argnums))(*args))
        seconds = time.perf_counter() - t0
    else:
        raise KeyError(tool)
    ok = all(np.allclose(np.asarray(a), b, rtol=1e-6, atol=1e-9) for a, b in zip(g, numpy_grads(*args)))
    return {"seconds": seconds, "matches_numpy": bool(ok), **extra}


def first_gradient_of(tool: str, workload: str, cache: str) -> dict:
    """In a fresh process: time the first gradient of a named workload (``heldout.cold_workload``).

    ``sg-vg``: ``symgrad.value_and_grad(symgrad.compile(f, parallel=False), argnums)``; ``sg-compile``: the
    tensor API and ``.backward()``; ``jax``: ``jax.jit(jax.value_and_grad(f, argnums))`` (persistent cache in
    ``cache``); ``torch-compile``: ``torch.compile(f, dynamic=False)`` and ``.backward()``.  The timed span
    starts after the imports and the input arrays are made, and ends with the gradient in hand.
    """
    import numpy as np

    from . import heldout, peers

    w = heldout.cold_workload(workload)
    inputs = w.make_inputs()
    arrays = tuple(inputs.values())
    nums = peers.argnums(w, inputs)
    if tool in ("sg-vg", "sg-compile"):
        import symgrad
        f = peers.positional(w, inputs, symgrad)
        t0 = time.perf_counter()
        if tool == "sg-vg":
            value, grads = symgrad.value_and_grad(symgrad.compile(f, parallel=False), argnums=nums)(*arrays)
        else:
            value, grads = peers._leaf_results(w)(peers._tensor_api(w, inputs, symgrad.tensor,
                                                                   symgrad.compile(f, parallel=False)).call())
            grads = tuple(grads[n] for n in w.grad_inputs)
    elif tool == "jax":
        jax, _ = _setup_jax(cache)
        T = heldout.jax_namespace(jax)
        t0 = time.perf_counter()
        value, grads = jax.block_until_ready(
            jax.jit(jax.value_and_grad(peers.positional(w, inputs, T), argnums=nums))(*arrays))
    elif tool == "torch-compile":
        torch = _setup_torch()
        t0 = time.perf_counter()
        compiled = torch.compile(peers.positional(w, inputs, torch), dynamic=False)
        value, grads = peers._leaf_results(w)(peers._tensor_api(w, inputs, torch.tensor, compiled).call())
        grads = tuple(grads[n] for n in w.grad_inputs)
    else:
        raise KeyError(tool)
    seconds = time.perf_counter() - t0
    from .suite import verify
    ref_value, ref_grads = w.numpy_value_and_grad(**inputs)
    problems = verify(w, float(value), {n: np.asarray(g) for n, g in zip(w.grad_inputs, grads)},
                      ref_value, ref_grads, rtol=max(w.rtol, 1e-4 if w.dtype == "float32" else 0.0))
    return {"seconds": seconds, "matches_numpy": not problems, "problems": problems}


def compile_chains(tool: str, sizes: list[int], cache: str) -> dict:
    """In a fresh process: time the first gradient of chains of ``sizes`` ops (after a tiny warm-up)."""
    import numpy as np

    from .trace_cost import make_chain, numpy_value_and_grad

    x = np.random.default_rng(0).uniform(-2.0, 2.0, CHAIN_X)
    small = x[:8].copy()
    if tool == "sg-vg":
        import symgrad

        def first(n, arr):
            chain = make_chain(n, symgrad)
            vg = symgrad.value_and_grad(lambda t: chain(t).sum())
            t0 = time.perf_counter()
            v, g = vg(arr)
            dt = time.perf_counter() - t0
            st = vg.compiled.stats()
            stages = {k: st[k] for k in ("trace_s", "autodiff_s", "partition_s", "codegen_s")}
            stages["numba_compile_and_run_s"] = dt - sum(stages.values())
            return dt, v, g, stages
    elif tool == "jax":
        jax, jnp = _setup_jax(None)

        def first(n, arr):
            chain = make_chain(n, jnp)
            t0 = time.perf_counter()
            v, g = jax.block_until_ready(jax.jit(jax.value_and_grad(lambda t: chain(t).sum()))(arr))
            return time.perf_counter() - t0, v, g, None
    elif tool == "torch-compile":
        torch = _setup_torch()

        def first(n, arr):
            chain = make_chain(n, torch)
            t0 = time.perf_counter()
            t = torch.tensor(arr, requires_grad=True)
            loss = torch.compile(lambda v: chain(v).sum(), dynamic=False)(t)
            loss.backward()
            return time.perf_counter() - t0, loss.item(), t.grad.numpy(), None
    elif tool == "pytensor":
        import pytensor
        import pytensor.tensor as pt

        def first(n, arr):
            t0 = time.perf_counter()
            xs = pt.tensor("x", dtype="float64", shape=arr.shape)
            loss = make_chain(n, pt)(xs).sum()
            fn = pytensor.function([xs], [loss, pytensor.grad(loss, xs)], mode="NUMBA")
            v, g = fn(arr)
            return time.perf_counter() - t0, v, g, None
    else:
        raise KeyError(tool)

    first(2, small)  # untimed: loads whatever the tool imports lazily
    rows = []
    for n in sizes:
        try:
            dt, v, g, stages = first(n, x)
        except Exception as exc:  # noqa: BLE001 - e.g. PyTensor's RecursionError on long chains: report it
            msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            rows.append({"ops": n, "seconds": None, "matches_numpy": False, "stages": None,
                         "error": f"{type(exc).__name__}: {msg}"})
            continue
        want_v, want_g = numpy_value_and_grad(n, x, np.ones_like(x))
        ok = bool(np.allclose(float(v), want_v.sum(), rtol=1e-9) and np.allclose(g, want_g, rtol=1e-8, atol=1e-12))
        rows.append({"ops": n, "seconds": dt, "matches_numpy": ok, "stages": stages, "error": None})
    return {"chains": rows}


def _child_main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.latency")
    ap.add_argument("--child")
    ap.add_argument("--workload", default="w1", help="w1, logistic or mlp (first gradient)")
    ap.add_argument("--chain", help="comma-separated chain lengths (compile time vs graph size)")
    ap.add_argument("--cold-workload", help="the first gradient of this workload (benchmarks.heldout.cold_workload)")
    ap.add_argument("--first-gradient", action="store_true",
                    help="print the first-gradient table (symgrad tiered and blocking, jax.jit) and exit")
    ap.add_argument("--tools", default="sg-vg,sg-vg-blocking,jax")
    ap.add_argument("--workloads", default="w1,logistic,mlp")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)
    if args.first_gradient:
        rows = first_call_latency(args.tools.split(","), args.repeats, print, workloads=args.workloads.split(","))
        print(json.dumps(rows, indent=1))
        return 0
    cache = os.environ["BENCH_CACHE_DIR"]
    if args.cold_workload:
        out = first_gradient_of(args.child, args.cold_workload, cache)
    elif args.chain:
        out = compile_chains(args.child, [int(s) for s in args.chain.split(",")], cache)
    else:
        out = first_gradient(args.child, cache, args.workload)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


# --- the parent side ------------------------------------------------------------------------------

def child_env(cache: str, fresh_caches: bool = True) -> dict:
    """The environment of a child: this process's (thread variables included) and, with
    ``fresh_caches``, every tool's compilation cache under the directory ``cache``."""
    env = dict(os.environ)
    env["BENCH_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    if fresh_caches:
        env.update({
            "SYMGRAD_CACHE_DIR": os.path.join(cache, "symgrad"),
            "NUMBA_CACHE_DIR": os.path.join(cache, "numba"),
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"),
            "PYTENSOR_FLAGS": f"base_compiledir={os.path.join(cache, 'pytensor')}",
        })
    return env


def run_child(args: list[str], cache: str, timeout: float, extra_env: dict | None = None) -> dict:
    """Run ``python -m benchmarks.latency ARGS``; the RESULT dict plus ``process_s``, or ``error``."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.latency", *args],
                              env={**child_env(cache), **(extra_env or {})},
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]), process_s=wall)
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"exit code {proc.returncode}: {tail}"}


def first_call_latency(tools: list[str], repeats: int, log, timeout: float = 600.0,
                       workloads: tuple = ("w1",)) -> list[dict]:
    """Cold and warm first-gradient latency per workload and tool (median over ``repeats`` cold/warm
    pairs).  The tools of one workload run one after the other within each repeat, so their times
    come from the same stretch of machine load."""
    import statistics
    rows = []
    for workload in workloads:
        acc = {tool: {"cold": [], "warm": [], "ready": [], "errors": [], "ok": True} for tool in tools}
        for _ in range(repeats):
            for tool in tools:
                a = acc[tool]
                if a["errors"]:
                    continue
                cache = tempfile.mkdtemp(prefix="symgrad-bench-")
                try:
                    for kind in ("cold", "warm"):
                        # symgrad as a user's process runs it (benchmarks/__init__.py turns tiering off)
                        r = run_child(["--child", tool, "--workload", workload], cache, timeout,
                                      {"SYMGRAD_TIERED": "1"})
                        if "error" in r:
                            a["errors"].append(f"{kind}: {r['error']}")
                            break
                        a[kind].append(r["seconds"])
                        a["ok"] = a["ok"] and r["matches_numpy"]
                        if kind == "cold" and r.get("kernels_ready_s") is not None:
                            a["ready"].append(r["kernels_ready_s"])
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
        for tool in tools:
            a, name = acc[tool], LATENCY_TOOLS[tool][0]
            cold, warm, errors, ok = a["cold"], a["warm"], a["errors"], a["ok"]
            row = {"tool": tool, "name": name, "workload": workload,
                   "cold_s": statistics.median(cold) if cold else None,
                   "warm_s": statistics.median(warm) if warm else None, "cold_all_s": cold, "warm_all_s": warm,
                   "kernels_ready_s": statistics.median(a["ready"]) if a["ready"] else None,
                   "matches_numpy": ok and not errors, "error": "; ".join(errors) or None}
            rows.append(row)
            label = name if workload == "w1" else f"{name} [{workload}]"
            if errors:
                log(f"  first-call latency, {label}: FAILED ({row['error']})")
            else:
                ready = f", kernels ready after {row['kernels_ready_s']:.2f} s" if row["kernels_ready_s"] else ""
                log(f"  first-call latency, {label}: cold {row['cold_s']:.2f} s, warm {row['warm_s']:.2f} s"
                    + ready + ("" if ok else "  (gradient does NOT match numpy)"))
    return rows


COLD_TOOLS = {"sg-vg": "symgrad value_and_grad", "sg-compile": "symgrad compile + backward", "jax": "jax.jit",
              "torch-compile": "torch.compile"}


def cold_first_gradients(tools: list[str], workloads: list[str], repeats: int, log,
                         timeout: float = 600.0) -> list[dict]:
    """The first gradient of each workload in a fresh process with empty caches, per tool (median of
    ``repeats`` processes, each with its own new cache directory)."""
    import statistics
    rows = []
    for workload in workloads:
        for tool in tools:
            name = COLD_TOOLS[tool]
            times, errors, problems = [], [], []
            for _ in range(repeats):
                cache = tempfile.mkdtemp(prefix="symgrad-bench-")
                try:
                    # symgrad as a user's process runs it (benchmarks/__init__.py turns tiering off)
                    r = run_child(["--child", tool, "--cold-workload", workload], cache, timeout,
                                  {"SYMGRAD_TIERED": "1"})
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                if "error" in r:
                    errors.append(r["error"])
                    break
                times.append(r["seconds"])
                problems += r["problems"]
            row = {"workload": workload, "tool": tool, "name": name,
                   "cold_s": statistics.median(times) if times else None, "cold_all_s": times,
                   "matches_numpy": not problems and not errors, "problems": problems,
                   "error": "; ".join(errors) or None}
            rows.append(row)
            if errors:
                log(f"  cold first gradient, {workload}, {name}: FAILED ({row['error']})")
            else:
                log(f"  cold first gradient, {workload}, {name}: {row['cold_s']:.2f} s"
                    + ("" if not problems else f"  (does NOT match numpy: {problems[0]})"))
    return rows


def compile_scaling(tools: list[str], sizes: list[int], log, timeout: float = 900.0) -> list[dict]:
    """Compile time vs chain length, one fresh process (and empty cache) per tool."""
    rows = []
    for tool in tools:
        name = CHAIN_TOOLS[tool][0]
        cache = tempfile.mkdtemp(prefix="symgrad-bench-")
        try:
            r = run_child(["--child", tool, "--chain", ",".join(map(str, sizes))], cache, timeout)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        rows.append({"tool": tool, "name": name, "chains": r.get("chains", []), "error": r.get("error")})
        if "error" in r:
            log(f"  compile time vs ops, {name}: FAILED ({r['error']})")
        else:
            log(f"  compile time vs ops, {name}: " + ", ".join(
                f"{c['ops']} ops " + (f"FAILED ({c['error']})" if c["error"] else
                                      f"{c['seconds']:.2f} s" + ("" if c["matches_numpy"] else " (WRONG)"))
                for c in r["chains"]))
    return rows


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
