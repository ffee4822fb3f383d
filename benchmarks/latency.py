"""First-call latency and compile time vs graph size, each measured in fresh subprocesses.

**First-call latency** (W1 on ``x[1000]``): the time from *after the imports* to the first gradient in a
new Python process: tracing, differentiating, generating and compiling code, loading caches, and the
first run.  Each tool is run twice in fresh processes that share one new temporary cache directory:

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

A child process is ``python -m benchmarks.latency --child TOOL [--chain SIZES]``; it prints one line
``RESULT <json>``.
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


def first_gradient(tool: str, cache: str) -> dict:
    """In a fresh process: imports, then time the first W1 gradient.  Returns seconds and a checksum."""
    import numpy as np

    from . import workloads
    x = _w1_input()
    if tool in ("sg-vg", "sg-compile"):
        import symgrad
        f = lambda t: workloads.w1_torch_like(symgrad, t)  # noqa: E731
        t0 = time.perf_counter()
        if tool == "sg-vg":
            _, g = symgrad.value_and_grad(f)(x)
        else:
            t = symgrad.tensor(x, requires_grad=True)
            symgrad.compile(f)(t).backward()
            g = t.grad.numpy()
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
    seconds = time.perf_counter() - t0
    _, ref = workloads.w1_numpy_value_and_grad(x)
    return {"seconds": seconds, "matches_numpy": bool(np.allclose(g, ref["x"], rtol=1e-6, atol=1e-9))}


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
    ap.add_argument("--child", required=True)
    ap.add_argument("--chain", help="comma-separated chain lengths (compile time vs graph size)")
    ap.add_argument("--workload", help="the first gradient of this workload (benchmarks.heldout.cold_workload)")
    args = ap.parse_args(argv)
    cache = os.environ["BENCH_CACHE_DIR"]
    if args.workload:
        out = first_gradient_of(args.child, args.workload, cache)
    elif args.chain:
        out = compile_chains(args.child, [int(s) for s in args.chain.split(",")], cache)
    else:
        out = first_gradient(args.child, cache)
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


def run_child(args: list[str], cache: str, timeout: float) -> dict:
    """Run ``python -m benchmarks.latency ARGS``; the RESULT dict plus ``process_s``, or ``error``."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.latency", *args], env=child_env(cache),
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return dict(json.loads(line[7:]), process_s=wall)
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"exit code {proc.returncode}: {tail}"}


def first_call_latency(tools: list[str], repeats: int, log, timeout: float = 600.0) -> list[dict]:
    """Cold and warm first-gradient latency per tool (median over ``repeats`` cold/warm pairs)."""
    import statistics
    rows = []
    for tool in tools:
        name = LATENCY_TOOLS[tool][0]
        cold, warm, errors, ok = [], [], [], True
        for _ in range(repeats):
            cache = tempfile.mkdtemp(prefix="symgrad-bench-")
            try:
                for kind, acc in (("cold", cold), ("warm", warm)):
                    r = run_child(["--child", tool], cache, timeout)
                    if "error" in r:
                        errors.append(f"{kind}: {r['error']}")
                        break
                    acc.append(r["seconds"])
                    ok = ok and r["matches_numpy"]
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            if errors:
                break
        row = {"tool": tool, "name": name, "cold_s": statistics.median(cold) if cold else None,
               "warm_s": statistics.median(warm) if warm else None, "cold_all_s": cold, "warm_all_s": warm,
               "matches_numpy": ok and not errors, "error": "; ".join(errors) or None}
        rows.append(row)
        if errors:
            log(f"  first-call latency, {name}: FAILED ({row['error']})")
        else:
            log(f"  first-call latency, {name}: cold {row['cold_s']:.2f} s, warm {row['warm_s']:.2f} s"
                + ("" if ok else "  (gradient does NOT match numpy)"))
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
                    r = run_child(["--child", tool, "--workload", workload], cache, timeout)
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
