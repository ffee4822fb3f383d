"""Eager forward+backward per call: symgrad vs the numpy hand gradient vs torch eager.

    python -m benchmarks.eager            # W4 and W1 at 1e6 elements (the eager targets)
    python -m benchmarks.eager --all      # also W1 1e3, W2, W3 f32/f64, W5
    python -m benchmarks.eager --quick    # 7 samples of >= 20 ms (default: 21 of >= 50 ms)
    python -m benchmarks.eager --json results.json

Implementations, each one call = one forward+backward:

- ``symgrad eager``: ``x = symgrad.tensor(arr, requires_grad=True); loss = f(x); loss.backward()``
  (creating the leaves is part of the call), ``f`` the workload's torch-like code with ``T = symgrad``;
- ``numpy hand grad``: the workload's hand-written numpy value and gradient;
- ``torch eager``: the same code as symgrad with ``T = torch`` (``torch.tensor(arr, requires_grad=True)``),
  when ``import torch`` works.

Before anything is timed the hand gradients are checked against finite differences, and every
implementation's loss and gradients against the numpy reference (rtol 1e-6 in float64): a mismatch
aborts the run.  An implementation that raises (an op symgrad does not have yet) is skipped for that
workload with a line saying why.  One thread everywhere (numpy/BLAS via the environment variables
below, set before numpy is imported; torch via ``set_num_threads(1)``).  Timings are reported,
never asserted.  Targets: W4 symgrad <= 1.0x torch eager; W1 1e6 symgrad <= 1.3x numpy hand grad.
"""

import os
import sys

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")
_NUMPY_PREIMPORTED = "numpy" in sys.modules
if __name__ == "__main__":
    for _var in THREAD_VARS:
        os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from . import timing  # noqa: E402
from .workloads import WORKLOADS, Workload, check_hand_gradient, compare  # noqa: E402

DEFAULT_WORKLOADS = ("W4", "W1 1e6")
ALL_WORKLOADS = ("W4", "W1 1e6", "W1 1e3", "W2", "W3 f32", "W3 f64", "W5")
HAND, SYMGRAD, TORCH = "numpy hand grad", "symgrad eager", "torch eager"
TARGETS = (  # (workload, implementation, baseline, bound)
    ("W4", SYMGRAD, TORCH, 1.0),
    ("W1 1e6", SYMGRAD, HAND, 1.3),
)


class Mismatch(Exception):
    """An implementation's loss or gradient differs from the numpy reference."""


def load_torch():
    """``(torch, None)`` with torch set to one thread, or ``(None, reason)``."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip torch"
        return None, f"{type(exc).__name__}: {exc}"
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set, or inter-op work already started: intra-op threads are what matter here
    return torch, None


def eager_call(T, w: Workload, inputs: dict[str, np.ndarray]) -> Callable[[], tuple]:
    """One eager forward+backward through module ``T``; returns ``(loss, {name: leaf})``."""
    spec = [(name, arr, name in w.grad_inputs) for name, arr in inputs.items()]
    make, f = T.tensor, w.torch_like

    def call():
        leaves = {name: make(arr, requires_grad=rg) for name, arr, rg in spec}
        loss = f(T, **leaves)
        loss.backward()
        return loss, leaves

    return call


def eager_results(w: Workload, out) -> tuple[float, dict[str, np.ndarray]]:
    loss, leaves = out
    grads = {}
    for name in w.grad_inputs:
        g = leaves[name].grad
        grads[name] = None if g is None else np.array(g.detach().numpy())
    return float(loss.item()), grads


def check(impl: str, w: Workload, value: float, grads: dict, ref_value: float, ref_grads: dict) -> None:
    problems = []
    p = compare("loss", value, ref_value, w.rtol)
    if p:
        problems.append(p)
    for name in w.grad_inputs:
        if grads.get(name) is None:
            problems.append(f"grad of {name}: None (no gradient reached the leaf)")
            continue
        p = compare(f"grad of {name}", grads[name], ref_grads[name], w.rtol)
        if p:
            problems.append(p)
    if problems:
        raise Mismatch(f"{impl} on {w.name} ({w.description}) does not match the numpy reference:\n  "
                       + "\n  ".join(problems))


def _describe(exc: BaseException) -> str:
    """``Type: message (at file:line in func)``, the innermost frame of the traceback."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = ""
    if tb:
        fr = tb[-1]
        where = f" (at {os.path.relpath(fr.filename)}:{fr.lineno} in {fr.name})"
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}{where}"


def run_workload(w: Workload, modules: dict, samples: int, min_sample_time: float, log) -> dict:
    """Check then time every implementation of ``w``; returns a JSON-able record."""
    problems = check_hand_gradient(w)
    if problems:
        raise Mismatch("the numpy hand gradient itself is wrong:\n  " + "\n  ".join(problems))
    inputs = w.make_inputs()
    ref_value = w.numpy_forward(**inputs)
    hv, ref_grads = w.numpy_value_and_grad(**inputs)
    check(HAND, w, hv, ref_grads, ref_value, ref_grads)  # value vs the plain forward

    impls: dict[str, Callable[[], object]] = {HAND: lambda: w.numpy_value_and_grad(**inputs)}
    skipped = {}
    for impl, T in modules.items():
        try:
            call = eager_call(T, w, inputs)
            value, grads = eager_results(w, call())
        except Exception as exc:  # noqa: BLE001 - an op T lacks: skip, say why
            skipped[impl] = _describe(exc)
            log(f"skipped {impl} on {w.name}: {skipped[impl]}")
            continue
        check(impl, w, value, grads, ref_value, ref_grads)
        impls[impl] = call
    log(f"{w.name}: checked {', '.join(impls)} against the numpy reference (rtol {w.rtol:g}); timing ...")
    res = timing.interleaved(impls, samples=samples, min_sample_time=min_sample_time)
    return {"workload": w.name, "description": w.description, "dtype": w.dtype, "timings": res,
            "skipped": skipped}


def markdown_table(records: list[dict]) -> str:
    rows = ["| workload | implementation | median per call | vs numpy hand grad | vs torch eager "
            "| IQR/median |", "|---|---|---|---|---|---|"]
    for rec in records:
        t = rec["timings"]
        for impl in (SYMGRAD, HAND, TORCH):
            if impl in t:
                rows.append(f"| {rec['workload']} | {impl} | {timing.format_seconds(t[impl].median)} | "
                            f"{timing.format_ratio(timing.ratio(t[impl], t.get(HAND)))} | "
                            f"{timing.format_ratio(timing.ratio(t[impl], t.get(TORCH)))} | "
                            f"{100 * t[impl].spread:.1f}% |")
            elif impl in rec["skipped"]:
                rows.append(f"| {rec['workload']} | {impl} | skipped | - | - | - |")
    return "\n".join(rows)


def target_lines(records: list[dict]) -> list[dict]:
    by_name = {rec["workload"]: rec["timings"] for rec in records}
    out = []
    for wname, impl, base, bound in TARGETS:
        if wname not in by_name:
            continue
        r = timing.ratio(by_name[wname].get(impl), by_name[wname].get(base))
        status = "not measured" if r is None else ("met" if r <= bound else "NOT met")
        out.append({"workload": wname, "implementation": impl, "baseline": base, "bound": bound,
                    "ratio": r, "status": status})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.eager", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="7 samples of >= 20 ms (default: 21 of >= 50 ms)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument("--all", action="store_true", help="all workloads, not only W4 and W1 1e6")
    args = ap.parse_args(argv)
    samples, min_sample_time = (7, 0.020) if args.quick else (21, 0.050)
    names = ALL_WORKLOADS if args.all else DEFAULT_WORKLOADS

    log = lambda s: print(s, flush=True)  # noqa: E731
    import symgrad

    torch, torch_missing = load_torch()
    modules = {SYMGRAD: symgrad}
    if torch is not None:
        modules[TORCH] = torch

    env = {v: os.environ.get(v) for v in THREAD_VARS}
    log("# symgrad eager benchmark: forward+backward per call")
    log(f"python {platform.python_version()}, numpy {np.__version__}, symgrad {symgrad.__version__}, "
        f"torch {torch.__version__ if torch is not None else 'not available'}; {platform.machine()}, "
        f"{os.cpu_count()} logical CPUs")
    forced = not _NUMPY_PREIMPORTED and all(v == "1" for v in env.values())
    log(("threads: 1 - " if forced else "threads: numpy/BLAS NOT forced to 1 - ")
        + ", ".join(f"{k}={v}" for k, v in env.items())
        + (f", torch.set_num_threads(1) (torch.get_num_threads() = {torch.get_num_threads()})"
           if torch is not None else ""))
    if not forced:
        log("WARNING: numpy was imported before the thread variables were set (or they are not 1): "
            "BLAS may use more than one thread; run as `python -m benchmarks.eager`.")
    if torch is None:
        log(f"torch eager: skipped (import torch failed: {torch_missing})")
    log(f"timing: {samples} samples per implementation, each >= {min_sample_time * 1e3:.0f} ms, "
        "interleaved round-robin after warm-up; median per call; gc enabled")
    log("")

    records = []
    try:
        for name in names:
            records.append(run_workload(WORKLOADS[name], modules, samples, min_sample_time, log))
    except Mismatch as exc:
        print(f"\nABORTED: {exc}", file=sys.stderr, flush=True)
        return 1

    log("")
    log(markdown_table(records))
    log("")
    targets = target_lines(records)
    log("targets:")
    for t in targets:
        r = "n/a" if t["ratio"] is None else f"{t['ratio']:.3f}x"
        log(f"- {t['workload']}: {t['implementation']} / {t['baseline']} = {r} "
            f"(target <= {t['bound']:.1f}x): {t['status']}")
    skipped = [(rec["workload"], impl, why) for rec in records for impl, why in rec["skipped"].items()]
    if skipped:
        log("skipped:")
        for wname, impl, why in skipped:
            log(f"- {impl} on {wname}: {why}")

    if args.json:
        doc = {
            "benchmark": "eager",
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "symgrad": symgrad.__version__, "torch": torch.__version__ if torch else None},
            "threads": {"env": env, "torch": torch.get_num_threads() if torch else None},
            "torch_skipped": torch_missing,
            "samples": samples, "min_sample_s": min_sample_time,
            "workloads": [
                {"workload": rec["workload"], "description": rec["description"], "dtype": rec["dtype"],
                 "skipped": rec["skipped"],
                 "timings": {impl: dict(t.as_dict(),
                                        ratio_to_numpy_hand=timing.ratio(t, rec["timings"].get(HAND)),
                                        ratio_to_torch_eager=timing.ratio(t, rec["timings"].get(TORCH)))
                             for impl, t in rec["timings"].items()}}
                for rec in records
            ],
            "targets": targets,
        }
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
