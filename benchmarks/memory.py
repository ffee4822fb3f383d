"""Peak memory of one W1 forward+backward, each implementation in a fresh subprocess.

The child (``python -m benchmarks.memory --child KEY --n N``) builds the implementation ``KEY`` of
:mod:`benchmarks.peers` for W1 on ``x[N]`` and measures the resident set size (RSS, from
``/proc/self/status``):

1. ``base``: after the imports and creating the input;
2. one untimed call (compiles whatever the tool compiles), results dropped, ``gc.collect()``;
3. ``before``: RSS now; then the peak-RSS mark is reset (``echo 5 > /proc/self/clear_refs``);
4. one forward+backward, results kept; ``peak``: the high-water mark ``VmHWM``.

Reported: ``peak - base``, the memory the implementation needs above its inputs at the peak of a
call, made of ``before - base``, what it holds between calls (compiled code, caches, buffer pools,
allocator pools), and ``peak - before``, what one forward+backward allocates on top of that (the
returned gradient, ``8 N`` bytes, included).  Where the peak mark cannot be reset (not Linux), ``peak`` is the
process's lifetime high-water mark and the row says so.  RSS counts memory allocated by every
library (numpy, Numba, torch, XLA), unlike ``tracemalloc``.  The children run with
``MALLOC_MMAP_THRESHOLD_=1048576`` so that glibc returns freed large arrays to the system at once.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys

MIB = 1024.0 * 1024.0
MMAP_THRESHOLD = 1 << 20


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _rss_bytes() -> int:
    kib = _status_kib("VmRSS")
    if kib is not None:
        return kib * 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # best effort


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(key: str, n: int) -> dict:
    import numba

    from . import peers, workloads
    numba.set_num_threads(1)
    impl = peers.BY_KEY[key]
    mod, why = peers.load(impl.tool)
    if mod is None:
        return {"skipped": why}
    w = workloads.w1_sized(n)
    inputs = w.make_inputs()
    base = _rss_bytes()
    prepared = impl.build(w, inputs, mod)
    if impl.threads != 1:
        numba.set_num_threads(impl.threads)
    out = prepared.call()
    prepared.extract(out)  # converts (and so compiles/loads) whatever extracting needs
    del out
    gc.collect()
    before = _rss_bytes()
    reset = _reset_peak()
    out = prepared.call()
    peak = _peak_bytes()
    value, grads = prepared.extract(out)
    del out
    ref_value, ref = w.numpy_value_and_grad(**inputs)
    ok = workloads.compare("grad", grads["x"], ref["x"], w.rtol) is None
    return {"n": n, "base_mib": base / MIB, "before_mib": before / MIB, "peak_mib": peak / MIB,
            "call_peak_mib": (peak - before) / MIB, "retained_by_first_call_mib": (before - base) / MIB,
            "total_peak_mib": (peak - base) / MIB,
            "peak_reset": reset, "matches_numpy": bool(ok and abs(value - ref_value) <= 1e-6 * abs(ref_value)),
            "input_mib": inputs["x"].nbytes / MIB}


def run(keys: list[str], n: int, log, timeout: float = 900.0) -> list[dict]:
    """One subprocess per implementation key; returns one row each (with ``error`` or ``skipped``)."""
    import subprocess
    import tempfile

    from .latency import REPO, child_env
    rows = []
    for key in keys:
        from .peers import BY_KEY
        name = BY_KEY[key].name
        with tempfile.TemporaryDirectory(prefix="symgrad-bench-") as cache:
            env = child_env(cache, fresh_caches=False)  # compiling is not what is measured here
            # glibc: serve every large block with mmap, so freed arrays leave the resident set at once
            # (otherwise its dynamic threshold keeps blocks of up to 32 MiB on the heap after the first call)
            env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
            try:
                proc = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--child", key, "--n", str(n)],
                                      env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if lines:
                    r = json.loads(lines[-1][7:])
                else:
                    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                    r = {"error": f"exit code {proc.returncode}: {tail}"}
            except subprocess.TimeoutExpired:
                r = {"error": f"timed out after {timeout:.0f} s"}
        r.update(key=key, name=name)
        rows.append(r)
        if "error" in r:
            log(f"  peak memory, {name}: FAILED ({r['error']})")
        elif "skipped" in r:
            log(f"  peak memory, {name}: skipped ({r['skipped']})")
        else:
            log(f"  peak memory, {name}: {r['total_peak_mib']:.0f} MiB above the inputs = "
                f"{r['retained_by_first_call_mib']:.0f} MiB held between calls + {r['call_peak_mib']:.0f} MiB "
                f"during the call (input {r['input_mib']:.0f} MiB)"
                + ("" if r["matches_numpy"] else "  (gradient does NOT match numpy)"))
    return rows


def _child_main(argv) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    ap.add_argument("--child", required=True)
    ap.add_argument("--n", type=int, required=True)
    args = ap.parse_args(argv)
    print("RESULT " + json.dumps(measure(args.child, args.n)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
