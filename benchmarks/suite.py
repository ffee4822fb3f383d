"""The benchmark suite: symgrad against the tools users would otherwise pick (benchmarks/README.md).

    python -m benchmarks.suite                     # the full run (about 10 minutes on 2 vCPUs)
    python -m benchmarks.suite --quick             # under 2 minutes: one thread, fewer samples, smaller extras
    python -m benchmarks.suite --json F --plot DIR # also write the results as JSON and PNG plots
    python -m benchmarks.suite --only W1,W2 --impls hand,numpy,sg-vg,jax --size-scale 0.1

Parts (``--parts``; the W1-based extras run when W1 is among the workloads):

- ``table``: W1 (1e3, 1e6 and, in the full run, 1e7 elements), W2, W3 f32/f64, W4, W5; one
  forward+backward per call for every implementation of :mod:`benchmarks.peers`, checked against the
  numpy reference first (loss and every gradient; a mismatch or an error is reported and that
  implementation excluded), then timed interleaved in this process after warm-up
  (:mod:`benchmarks.timing`: medians of >= 7 samples of >= 20 ms), as ratios to the hand-written
  one-thread Numba kernel;
- ``scaling``: W1 time per call for N = 1e3 ... 1e7 (the table's W1 runs plus 1e4 and 1e5);
- ``latency``: first-call latency, cold and warm cache, in fresh subprocesses (:mod:`benchmarks.latency`);
- ``compile``: compile time vs graph size, chains of 10, 100, 1000 ops (:mod:`benchmarks.latency`);
- ``memory``: peak RSS of one W1 forward+backward at 1e7 elements in subprocesses (:mod:`benchmarks.memory`);
- ``heldout`` (only when asked for): the held-out workloads of :mod:`benchmarks.heldout` (heat stencil, TV
  denoise, embedding bag, unrolled RNN, attention), checked then timed the same way, as ratios to jax.jit.

Threads: numpy/BLAS, torch and XLA run one thread; Numba's pool has two threads and every
implementation runs with ``numba.set_num_threads(1)`` except the two marked "2 thr" (the parallel hand
kernel and ``symgrad.compile(..., parallel=True)``).  ``--size-scale S`` multiplies the batch dimension
of every workload (W4 excepted) and the N of the extras.  Missing optional peers (``pip install
".[bench]"``; torch: ``pip install torch==2.13.0``) are skipped with a line saying so.  Timings are
reported, never asserted.
"""

from __future__ import annotations

import os
import sys

THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "VECLIB_MAXIMUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "2",  # the pool size; set_num_threads(1) except for the "2 thr" rows
              "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}
_PINNED = __name__ == "__main__" and "numpy" not in sys.modules
if _PINNED:
    os.environ.update(THREAD_ENV)

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from . import latency, memory, peers, timing  # noqa: E402
from .workloads import WORKLOADS, Workload, check_hand_gradient, compare, sized, w1_sized  # noqa: E402

SCHEMA_VERSION = 1
TABLE_WORKLOADS = ("W1 1e6", "W1 1e3", "W1 1e7", "W2", "W3 f32", "W3 f64", "W4", "W5")
QUICK_SKIPS_WORKLOADS = ("W1 1e7",)
PARTS = ("table", "scaling", "latency", "compile", "memory", "heldout")
DEFAULT_PARTS = ("table", "scaling", "latency", "compile", "memory")
SCALING_N = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
QUICK_SCALING_N = (1_000, 100_000, 1_000_000)
F32_RTOL = 5e-4
CHAIN_OPS = (10, 100, 1000)
MEMORY_N = 10_000_000
MEMORY_IMPLS = ("numpy", "hand", "sg-eager", "sg-vg", "sg-compile", "torch", "torch-compile", "jax",
                "autograd", "pytensor")
QUICK_MEMORY_IMPLS = ("sg-eager", "sg-vg", "sg-compile", "torch")
QUICK_LATENCY_TOOLS = ("sg-vg", "hand", "jax")


# --- checking and timing one workload --------------------------------------------------------------

def _describe(exc: BaseException) -> str:
    """``Type: first line of the message (at file:line in func)``, innermost frame."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno} in {tb[-1].name})" if tb else ""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg[:300]}{where}"


def verify(w: Workload, value: float, grads: dict, ref_value: float, ref_grads: dict,
           rtol: float | None = None) -> list[str]:
    """Problems of ``(value, grads)`` against the numpy reference (empty when it matches)."""
    rtol = w.rtol if rtol is None else rtol
    problems = []
    p = compare("loss", value, ref_value, rtol)
    if p:
        problems.append(p)
    for name in w.grad_inputs:
        g = grads.get(name)
        if g is None:
            problems.append(f"grad of {name}: missing (no gradient reached the input)")
            continue
        p = compare(f"grad of {name}", g, ref_grads[name], rtol)
        if p:
            problems.append(p)
    return problems


def with_threads(fn: Callable[[], object], n: int) -> Callable[[], object]:
    """``fn`` run with ``n`` Numba threads (the suite's default is one)."""
    if n == 1:
        return fn
    import numba

    def call():
        numba.set_num_threads(n)
        try:
            return fn()
        finally:
            numba.set_num_threads(1)

    return call


def numba_threads(impl: peers.Impl) -> int:
    import numba
    return min(impl.threads, numba.config.NUMBA_NUM_THREADS)


def run_workload(w: Workload, impls: list[peers.Impl], samples: int, min_sample_time: float, log,
                 skipped: dict[str, str] | None = None) -> dict:
    """Check, then time, every implementation of ``w``; a JSON-able record.

    ``skipped`` maps implementation names to the reason they are not run at all (a missing tool, or
    ``--quick``).  An implementation whose loss or gradients differ from the numpy reference, or that
    raises, is reported (``status`` "mismatch" / "error") and not timed.
    """
    inputs = w.make_inputs()
    rec = {"workload": w.name, "description": w.description, "dtype": w.dtype,
           "inputs": {k: {"shape": list(a.shape), "dtype": str(a.dtype)} for k, a in inputs.items()},
           "rtol": w.rtol, "reference_problems": check_hand_gradient(w), "results": {}}
    results = rec["results"]
    for name, why in (skipped or {}).items():
        results[name] = {"status": "skipped", "verified": False, "reason": why}
    if rec["reference_problems"]:
        log(f"{w.name}: the numpy hand gradient fails its finite-difference check; not timing: "
            + "; ".join(rec["reference_problems"]))
        return rec
    rtol = w.rtol
    if w.dtype == "float32":
        # The float32 numpy hand gradient is itself up to ~1.2e-4 off (W3): the reference is the same
        # computation in float64 on the same (float32) inputs, and the tolerance is F32_RTOL.
        ref_inputs = {k: (a.astype(np.float64) if a.dtype == np.float32 else a) for k, a in inputs.items()}
        rtol = max(rtol, F32_RTOL)
    else:
        ref_inputs = inputs
    rec["rtol"] = rtol
    ref_value = w.numpy_forward(**ref_inputs)
    _, ref_grads = w.numpy_value_and_grad(**ref_inputs)

    timed: dict[str, Callable[[], object]] = {}
    for impl in impls:
        mod, why = peers.load(impl.tool)
        entry = {"key": impl.key, "threads": numba_threads(impl) if impl.threads > 1 else 1}
        results[impl.name] = entry
        if mod is None:
            entry.update(status="skipped", verified=False, reason=why)
            continue
        try:
            t0 = time.perf_counter()
            prepared = impl.build(w, inputs, mod)
            call = with_threads(prepared.call, entry["threads"])
            value, grads = prepared.extract(call())
            entry["first_call_s"] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - e.g. an op the tool lacks: report, exclude
            entry.update(status="error", verified=False, problems=[_describe(exc)])
            log(f"{w.name}: {impl.name} raised, EXCLUDED: {entry['problems'][0]}")
            continue
        problems = verify(w, value, grads, ref_value, ref_grads, rtol)
        if problems:
            entry.update(status="mismatch", verified=False, problems=problems)
            log(f"{w.name}: {impl.name} does not match the numpy reference, EXCLUDED:\n    "
                + "\n    ".join(problems))
            continue
        entry.update(status="ok", verified=True)
        timed[impl.name] = call
    log(f"{w.name}: {len(timed)} implementations verified against the numpy reference "
        f"(rtol {rtol:g}); timing ...")
    res = timing.interleaved(timed, samples=samples, min_sample_time=min_sample_time) if timed else {}
    base = res.get(peers.BASELINE)
    for name, t in res.items():
        results[name]["timing"] = t.as_dict()
        results[name]["ratio_to_baseline"] = timing.ratio(t, base)
    del timed, res
    gc.collect()
    return rec


# --- tables -------------------------------------------------------------------------------------

def _cell(entry: dict | None, absolute: bool) -> str:
    if entry is None:
        return ""
    status = entry["status"]
    if status == "ok":
        if absolute:
            return timing.format_seconds(entry["timing"]["median_s"])
        r = entry.get("ratio_to_baseline")
        return "-" if r is None else (f"{r:.2f}" if r < 10 else f"{r:.1f}")
    return {"skipped": "skip", "mismatch": "WRONG", "error": "error"}[status]


def ratio_table(records: list[dict], impls: list[str]) -> str:
    """Rows: implementations; columns: workloads; the baseline row in absolute time, others as ratios."""
    head = "| implementation | " + " | ".join(r["workload"] for r in records) + " |"
    lines = [head, "|---|" + "---:|" * len(records)]
    for name in impls:
        cells = [_cell(r["results"].get(name), absolute=name == peers.BASELINE) for r in records]
        if any(cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def absolute_table(records: list[dict], impls: list[str]) -> str:
    head = "| implementation | " + " | ".join(r["workload"] for r in records) + " |"
    lines = [head, "|---|" + "---:|" * len(records)]
    for name in impls:
        cells = [_cell(r["results"].get(name), absolute=True) for r in records]
        if any(cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scaling_table(points: list[dict], impls: list[str]) -> str:
    head = "| implementation | " + " | ".join(f"N={p['n']:.0e}".replace("e+0", "e") for p in points) + " |"
    lines = [head, "|---|" + "---:|" * len(points)]
    for name in impls:
        cells = []
        for p in points:
            e = p["results"].get(name)
            if e is None or e["status"] != "ok":
                cells.append(_cell(e, True))
            else:
                r = e.get("ratio_to_baseline")
                cells.append(timing.format_seconds(e["timing"]["median_s"])
                             + ("" if r is None or name == peers.BASELINE else f" ({r:.2f})"))
        if any(cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def latency_table(rows: list[dict]) -> str:
    lines = ["| tool | cold cache | warm cache | runs |", "|---|---:|---:|---:|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['name']} | failed | failed | {r['error'][:60]} |")
        else:
            lines.append(f"| {r['name']} | {r['cold_s']:.2f} s | {r['warm_s']:.2f} s | {len(r['cold_all_s'])} |")
    return "\n".join(lines)


def compile_table(rows: list[dict]) -> str:
    ops = sorted({c["ops"] for r in rows for c in r["chains"]})
    lines = ["| tool | " + " | ".join(f"{n} ops" for n in ops) + " |", "|---|" + "---:|" * len(ops)]
    for r in rows:
        by = {c["ops"]: c for c in r["chains"]}
        cells = []
        for n in ops:
            c = by.get(n)
            if c is None or c.get("error"):
                cells.append("failed" + (f" ({c['error'].split(':')[0]})" if c else ""))
            else:
                cells.append(f"{c['seconds']:.2f} s" + ("" if c["matches_numpy"] else " WRONG"))
        if r.get("error"):
            cells = [f"failed ({r['error'][:40]})"] * len(ops)
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(rows: list[dict]) -> str:
    lines = ["| implementation | peak RSS above the inputs | x input size | held between calls | "
             "added during one call |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r or "skipped" in r:
            lines.append(f"| {r['name']} | {'failed' if 'error' in r else 'skip'} | | | |")
            continue
        total = r.get("total_peak_mib", r["call_peak_mib"] + r["retained_by_first_call_mib"])
        lines.append(f"| {r['name']} | {total:.0f} MiB | {total / r['input_mib']:.1f} | "
                     f"{r['retained_by_first_call_mib']:.0f} MiB | {r['call_peak_mib']:.0f} MiB |")
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------------------------

def _lscpu() -> dict:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    keep = ("Architecture", "Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket",
            "Hypervisor vendor", "L1d cache", "L2 cache", "L3 cache")
    info = {}
    for line in out.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in keep:
            info[key.strip()] = val.strip()
    return info


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def git_info() -> dict:
    """The commit measured and the files that differ from it (symgrad is imported from the work tree)."""
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=latency.REPO, capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""
    status = git("status", "--porcelain", "--", "symgrad", "codegen", "benchmarks/*.py")
    changed = [ln[3:] for ln in status.splitlines() if len(ln) > 3]
    return {"commit": git("rev-parse", "HEAD").strip() or None, "uncommitted_changes": changed}


def machine_info() -> dict:
    return {"platform": platform.platform(), "machine": platform.machine(), "logical_cpus": os.cpu_count(),
            "memory_gib": _mem_total_gib(), "lscpu": _lscpu()}


def versions() -> dict:
    import llvmlite
    import numba
    out = {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
           "llvmlite": llvmlite.__version__}
    mod, _ = peers.load("symgrad")
    out["symgrad"] = getattr(mod, "__version__", None)
    for tool in ("torch", "jax", "autograd", "pytensor"):
        out[tool] = peers.version(tool) if tool in peers._loaded else None
    try:
        import matplotlib
        out["matplotlib"] = matplotlib.__version__
    except ImportError:
        out["matplotlib"] = None
    return out


def select_workloads(only: str | None, quick: bool) -> list[str]:
    if not only:
        return [n for n in TABLE_WORKLOADS if not (quick and n in QUICK_SKIPS_WORKLOADS)]
    chosen = []
    for tok in (t.strip() for t in only.split(",")):
        if not tok:
            continue
        if tok in WORKLOADS:
            matches = [tok]
        else:
            matches = [n for n in TABLE_WORKLOADS if n.split()[0] == tok
                       and not (quick and n in QUICK_SKIPS_WORKLOADS)]
        if not matches:
            raise SystemExit(f"--only: unknown workload {tok!r} (known: {', '.join(TABLE_WORKLOADS)})")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def select_impls(keys: str | None, quick: bool) -> tuple[list[peers.Impl], dict[str, str]]:
    """The implementations to run, and ``{name: reason}`` for those left out before running."""
    if keys:
        wanted = [k.strip() for k in keys.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in peers.BY_KEY]
        if unknown:
            raise SystemExit(f"--impls: unknown {unknown} (known: {', '.join(peers.BY_KEY)})")
        return [peers.BY_KEY[k] for k in wanted], {}
    chosen, left_out = [], {}
    for impl in peers.IMPLS:
        if quick and impl.full_only:
            left_out[impl.name] = ("not in --quick (" + ("the 2-thread rows are in the full run" if impl.threads > 1
                                   else "compiling costs seconds per workload") + "); run without --quick")
        else:
            chosen.append(impl)
    return chosen, left_out


def _impl_info(impl: peers.Impl, selected: list[peers.Impl], left_out: dict[str, str]) -> dict:
    if impl.name in left_out:
        available, reason = False, left_out[impl.name]
    elif impl not in selected:
        available, reason = False, "not selected (--impls)"
    else:
        mod, reason = peers.load(impl.tool)
        available = mod is not None
    return {"key": impl.key, "name": impl.name, "kind": impl.kind, "threads": impl.threads, "tool": impl.tool,
            "note": impl.note, "available": available, "skipped_reason": reason}


def _scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def _reexec(argv: list[str]) -> int:
    """Run the suite in a fresh interpreter with the thread variables set before numpy loads."""
    env = dict(os.environ, **THREAD_ENV)
    env["PYTHONPATH"] = os.pathsep.join([latency.REPO.as_posix()] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.call([sys.executable, "-m", "benchmarks.suite", *argv], env=env, cwd=latency.REPO)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="7 samples of >= 20 ms; no W1 1e7, torch.compile or 2-thread rows; smaller extras "
                         "(< 2 minutes)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--plot", metavar="DIR", help="write PNG plots to DIR (needs matplotlib)")
    ap.add_argument("--only", metavar="W1,W2", help="workloads: W1..W5 (a family) or exact names like 'W1 1e6'")
    ap.add_argument("--impls", metavar="KEYS", help=f"implementations (default: all): {','.join(peers.BY_KEY)}")
    ap.add_argument("--parts", metavar="P", help=f"comma-separated subset of {','.join(PARTS)} "
                    f"(default: {','.join(DEFAULT_PARTS)})")
    ap.add_argument("--size-scale", type=float, default=1.0, metavar="S",
                    help="multiply every workload's batch dimension (W4 excepted) and the extras' N by S")
    ap.add_argument("--samples", type=int, help="samples per implementation, >= 7 (default 11, --quick 7)")
    ap.add_argument("--min-sample-time", type=float, metavar="SECONDS",
                    help="minimum length of a sample (default 0.05, --quick 0.02)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not _PINNED and os.environ.get("SYMGRAD_BENCH_REEXEC") != "1":
        # numpy (and maybe BLAS threads) were set up before we could pin them: start afresh.
        os.environ["SYMGRAD_BENCH_REEXEC"] = "1"
        try:
            return _reexec(argv)
        finally:
            del os.environ["SYMGRAD_BENCH_REEXEC"]
    args = build_parser().parse_args(argv)
    if args.size_scale <= 0:
        raise SystemExit("--size-scale must be positive")
    if args.samples is not None and args.samples < timing.MIN_SAMPLES:
        raise SystemExit(f"--samples: at least {timing.MIN_SAMPLES} (medians of fewer samples are not reported)")
    started = time.perf_counter()
    log = lambda s="": print(s, flush=True)  # noqa: E731
    samples = args.samples or (7 if args.quick else 11)
    min_time = args.min_sample_time or (0.020 if args.quick else 0.050)
    names = select_workloads(args.only, args.quick)
    impls, left_out = select_impls(args.impls, args.quick)
    w1_selected = any(n.startswith("W1") for n in names)
    parts = ([p.strip() for p in args.parts.split(",") if p.strip()] if args.parts
             else list(DEFAULT_PARTS) if w1_selected else ["table"])
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise SystemExit(f"--parts: unknown {bad} (known: {', '.join(PARTS)})")
    if "scaling" in parts and not w1_selected:
        parts.remove("scaling")

    import numba
    numba.set_num_threads(1)

    log("# symgrad benchmark suite: one forward+backward per call")
    log(f"date {datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} logical CPUs "
        f"({_lscpu().get('Model name', 'unknown CPU')}); python {platform.python_version()}, "
        f"numpy {np.__version__}, numba {numba.__version__}")
    log(f"threads: {', '.join(f'{k}={os.environ.get(k)}' for k in THREAD_ENV)}; numba.set_num_threads(1) "
        "except the '2 thr' rows; torch.set_num_threads(1)")
    log(f"timing: {samples} samples of >= {min_time * 1e3:.0f} ms per implementation, interleaved "
        f"round-robin after warm-up, median per call; size scale {args.size_scale:g}; parts: {', '.join(parts)}")
    for impl in impls:  # import the tools up front, so a missing one is reported once
        mod, why = peers.load(impl.tool)
        if mod is None:
            log(f"{impl.name}: skipped, {why}")
    for name, why in left_out.items():
        log(f"{name}: skipped, {why}")
    log("")

    doc: dict = {
        "benchmark": "suite", "schema_version": SCHEMA_VERSION,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": "python -m benchmarks.suite " + shlex.join(argv),
        "machine": machine_info(), "versions": versions(), "git": git_info(),
        "threads": {"env": {k: os.environ.get(k) for k in THREAD_ENV},
                    "numba_pool": numba.config.NUMBA_NUM_THREADS, "numba_threading_layer": None},
        "settings": {"quick": args.quick, "samples": samples, "min_sample_s": min_time,
                     "size_scale": args.size_scale, "parts": parts, "workloads": names},
        "baseline": peers.BASELINE,
        "implementations": [_impl_info(i, impls, left_out) for i in peers.IMPLS],
        "workloads": [], "scaling": None, "latency": None, "compile_scaling": None, "memory": None,
        "heldout": None,
    }
    impl_names = [i.name for i in impls] + [n for n in left_out]
    order = [i.name for i in peers.IMPLS if i.name in impl_names]

    records = doc["workloads"]
    part_started: dict[str, float] = {"setup": started}  # imports, checks of the tools, versions
    part_started["table"] = time.perf_counter()
    if "table" in parts:
        log("## runtime table")
        for name in names:
            records.append(run_workload(sized(name, args.size_scale), impls, samples, min_time, log, left_out))
        try:
            doc["threads"]["numba_threading_layer"] = numba.threading_layer()
        except ValueError:
            pass  # no parallel kernel has run
        log("")
        log(f"### time per forward+backward relative to {peers.BASELINE} (1 thread; its row is absolute); "
            "lower is faster")
        if args.size_scale != 1:
            log(f"(sizes scaled by {args.size_scale:g}: " + ", ".join(
                f"{r['workload']} " + " ".join(f"{k}{v['shape']}" for k, v in r["inputs"].items())
                for r in records if r["workload"] != "W4") + ")")
        log(ratio_table(records, order))
        log("")
        log("### median time per forward+backward")
        log(absolute_table(records, order))
        log("")

    part_started["scaling"] = time.perf_counter()
    if "scaling" in parts:
        log("## W1 runtime vs N")
        sizes = QUICK_SCALING_N if args.quick else SCALING_N
        points = []
        table_w1 = {r["inputs"]["x"]["shape"][0]: r for r in records if r["workload"].startswith("W1")}
        for n in sizes:
            n_eff = _scaled(n, args.size_scale)
            rec = table_w1.get(n_eff)
            source = "table"
            if rec is None:
                rec = run_workload(w1_sized(n_eff), impls, samples, min_time, log, left_out)
                source = "scaling run"
            points.append(dict(rec, n=n_eff, source=source))
        doc["scaling"] = {"workload": "W1", "points": points}
        log("")
        log("### W1: median time per call (ratio to the hand Numba kernel)")
        log(scaling_table(points, order))
        log("")

    def tools_of(table: dict) -> list[str]:
        """The subprocess tools to run: available, selected by --impls, and not full-run-only in --quick."""
        keys = [i.key for i in impls]
        out = []
        for key, (name, tool, full_only) in table.items():
            if key not in keys or (args.quick and full_only):
                continue
            if peers.load(tool)[0] is None:
                log(f"{name}: skipped, {peers.load(tool)[1]}")
                continue
            out.append(key)
        return out

    part_started["latency"] = time.perf_counter()
    if "latency" in parts:
        log("## first-call latency (fresh processes: cold = empty caches, warm = second process)")
        tools = [t for t in tools_of(latency.LATENCY_TOOLS) if not args.quick or t in QUICK_LATENCY_TOOLS]
        doc["latency"] = latency.first_call_latency(tools, repeats=1 if args.quick else 3, log=log)
        log("")
        log(f"### time from after the imports to the first W1 gradient (x[{latency.W1_N}])")
        log(latency_table(doc["latency"]))
        log("")

    part_started["compile"] = time.perf_counter()
    if "compile" in parts:
        log("## compile time vs graph size (chains of elementwise ops on x[64], empty caches)")
        ops = [n for n in CHAIN_OPS if not (args.quick and n > 100)]
        tools = tools_of(latency.CHAIN_TOOLS)
        doc["compile_scaling"] = latency.compile_scaling(tools, ops, log=log)
        log("")
        log("### time to the first gradient of a chain of N ops")
        log(compile_table(doc["compile_scaling"]))
        log("")

    part_started["memory"] = time.perf_counter()
    if "memory" in parts:
        n = _scaled(MEMORY_N // (10 if args.quick else 1), args.size_scale)
        log(f"## peak memory of one W1 forward+backward, x[{n}] (subprocess per implementation)")
        keys = [k for k in (QUICK_MEMORY_IMPLS if args.quick else MEMORY_IMPLS)
                if any(i.key == k for i in impls)]
        doc["memory"] = {"n": n, "rows": memory.run(keys, n, log)}
        log("")
        log(f"### resident memory above the inputs at the peak of a W1 forward+backward, x[{n}]")
        log(memory_table(doc["memory"]["rows"]))
        log("")

    part_started["heldout"] = time.perf_counter()
    if "heldout" in parts:
        from . import heldout
        log("## held-out workloads (ratios to jax.jit)")
        keys = [i.key for i in impls if i.key in heldout.DEFAULT_KEYS + ("sg-compile", "sg-eager")]
        doc["heldout"] = heldout.run_table(heldout.TABLE_NAMES, keys, samples, min_time, log, left_out)
        log("")
        log(f"### time per forward+backward relative to {heldout.BASELINE} (its row is absolute); lower is faster")
        log(heldout.ratio_table(doc["heldout"], [heldout.BASELINE] + [
            i.name for i in peers.IMPLS if i.name in impl_names and i.name != heldout.BASELINE]))
        log("")

    part_started["end"] = time.perf_counter()
    marks = list(part_started.items())
    doc["part_seconds"] = {name: round(marks[i + 1][1] - t, 2) for i, (name, t) in enumerate(marks[:-1])
                           if name in parts or name == "setup"}
    excluded = [(r["workload"], name, e) for r in records + [p for p in (doc["scaling"] or {}).get("points", [])
                                                           if p["source"] != "table"]
                for name, e in r["results"].items() if e["status"] in ("mismatch", "error")]
    if excluded:
        log("excluded (did not match the numpy reference, or raised):")
        for wname, name, e in excluded:
            log(f"- {name} on {wname}: {e['problems'][0]}")
    doc["elapsed_s"] = time.perf_counter() - started
    log(f"total {doc['elapsed_s']:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in doc["part_seconds"].items())
        + ")")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
        log(f"wrote {args.json}")
    if args.plot:
        try:
            from . import plots
            written = plots.write_all(doc, args.plot)
            log(f"wrote {', '.join(written)}")
        except ImportError as exc:
            log(f"plots skipped: {exc} (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
