"""Throughput of ``symgrad.dask.value_and_grad`` (a benchmark, not a test).

``python -m benchmarks.dask_throughput [--quick] [--json F]``

For two data-parallel losses (logistic regression over X[R, 8], cheap per row; W2 over x[R, 1000],
a thousand ``tanh`` per row), value and gradient per call, in rows per second:

* ``local, 1 thread`` / ``local, 2 threads``: :func:`symgrad.value_and_grad` on the whole numpy
  array in this process (Numba's threads set with ``numba.set_num_threads``; ``parallel="auto"``
  kernels run on them above their size threshold; one BLAS thread);
* ``local, chunked``: the same, one thread, called chunk by chunk in a Python loop and summed (what
  a worker does, without Dask: it separates the effect of chunking from that of distribution);
* ``dask, 1 worker`` / ``dask, 2 workers``: :func:`symgrad.dask.value_and_grad` on a
  ``distributed.LocalCluster`` of worker processes with one thread each (``NUMBA_NUM_THREADS=1``),
  the data persisted on the workers, in ``--chunks`` chunks (default 20 resp. 16).

Then the fixed cost of a call and the cost of one more chunk, on the 2-worker cluster: a call on 16
rows in one chunk, and on 64 chunks of 16 rows: ``(t64 - t1) / 63`` per chunk.

Implementations are interleaved and medians reported (benchmarks/timing.py).  The losses come from
tests/dask_losses.py (the workers import them by name).
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "2")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    # one BLAS thread, as in the Dask workers (distributed sets these there): with two OpenBLAS threads
    # on this loaded 2-vCPU machine, X @ w on 1e5 x 8 took 24 ms instead of 1.2 ms
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

import symgrad  # noqa: E402

from .timing import format_seconds, interleaved  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


def _cluster(n_workers: int, cache: str):
    import distributed

    env = {"SYMGRAD_CACHE_DIR": cache, "NUMBA_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (TESTS, ROOT, os.environ.get("PYTHONPATH")) if p)}
    cluster = distributed.LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, env=env,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
    return cluster, distributed.Client(cluster, set_as_default=False)


def _local(vg, threads: int, args):
    def call():
        numba.set_num_threads(threads)
        return vg(*args)
    return call


def _local_chunked(vg, args, data_pos, chunk: int, mean: bool):
    """What the workers do, in one process and thread: the loss chunk by chunk, partial results added."""
    rows = args[data_pos[0]].shape[0]

    def call():
        numba.set_num_threads(1)
        value, grads = 0.0, None
        for s in range(0, rows, chunk):
            v, g = vg(*[a[s:s + chunk] if i in data_pos else a for i, a in enumerate(args)])
            g = g if isinstance(g, tuple) else (g,)
            n = min(chunk, rows - s) if mean else 1
            value += v * n
            grads = [x * n for x in g] if grads is None else [acc + x * n for acc, x in zip(grads, g)]
        return (value / rows, [x / rows for x in grads]) if mean else (value, grads)
    return call


def run(quick: bool = False, samples: int = 7, chunks: int | None = None) -> dict:
    import dask.array as da
    import dask_losses as L

    import symgrad.dask as sd

    cache = tempfile.mkdtemp(prefix="symgrad-dask-bench-")
    os.environ.setdefault("SYMGRAD_CACHE_DIR", cache)
    rng = np.random.default_rng(0)
    rows_lr = 200_000 if quick else 2_000_000
    rows_w2 = 2_000 if quick else 16_000
    drng = da.random.default_rng(1)     # the data is made by the workers (the same on both clusters)
    workloads = {
        "logistic X[R, 8]": dict(loss=L.logistic, rows=rows_lr, chunk=rows_lr // (chunks or 20), reduction="sum",
                                 make=lambda r, c: (drng.standard_normal((r, 8), chunks=(c, 8)),
                                                    (drng.random(r, chunks=c) < 0.5).astype(np.float64)),
                                 params=(np.linspace(-0.3, 0.3, 9),), argnums=0),
        "W2 x[R, 1000]": dict(loss=L.w2, rows=rows_w2, chunk=rows_w2 // (chunks or 16), reduction="mean",
                              make=lambda r, c: (drng.standard_normal((r, 1000), chunks=(c, 1000)),),
                              params=(rng.standard_normal(1000) * 0.1, rng.standard_normal(1000) * 0.1),
                              argnums=(1, 2)),
    }
    clusters = {n: _cluster(n, cache) for n in (1, 2)}
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
                 "loadavg_before": os.getloadavg(), "quick": quick, "workloads": {}}
    try:
        import dask
        import distributed
        out.update(dask=dask.__version__, distributed=distributed.__version__)
        for name, w in workloads.items():
            data_da = w["make"](w["rows"], w["chunk"])
            data_np = clusters[2][1].compute(data_da, sync=True)
            data_first = name.startswith("W2")          # w2(x, w, b) takes its data first
            local_args = (*data_np, *w["params"]) if data_first else (*w["params"], *data_np)
            vg_local = symgrad.value_and_grad(w["loss"], w["argnums"])
            data_pos = tuple(range(len(data_np))) if data_first else \
                tuple(range(len(w["params"]), len(w["params"]) + len(data_np)))
            impls = {"local, 1 thread": _local(vg_local, 1, local_args),
                     "local, 2 threads": _local(vg_local, 2, local_args),
                     "local, chunked": _local_chunked(vg_local, local_args, data_pos, w["chunk"],
                                                      w["reduction"] == "mean")}
            want = vg_local(*local_args)[0]
            assert abs(impls["local, chunked"]()[0] - want) <= 1e-10 * abs(want)
            for n, (_, client) in clusters.items():
                dd = client.persist(data_da)
                args = (*dd, *w["params"]) if data_first else (*w["params"], *dd)
                vg = sd.value_and_grad(w["loss"], w["argnums"], data_pos, w["reduction"], scheduler=client)
                got = vg(*args)[0]
                assert abs(got - want) <= 1e-10 * abs(want), (name, n, got, want)
                impls[f"dask, {n} worker{'s' if n > 1 else ''}"] = (lambda vg=vg, args=args: vg(*args))
            res = interleaved(impls, samples=samples, min_sample_time=0.2)
            out["workloads"][name] = {"rows": w["rows"], "chunk_rows": w["chunk"],
                                      "chunks": -(-w["rows"] // w["chunk"]),
                                      "bytes": int(sum(a.nbytes for a in data_np)),
                                      "results": {k: {**t.as_dict(), "rows_per_s": w["rows"] / t.median}
                                                  for k, t in res.items()}}
        # the fixed cost of a call and the cost of one more chunk
        client = clusters[2][1]
        small = rng.standard_normal((16 * 64, 8)), (rng.random(16 * 64) < 0.5) * 1.0
        theta = np.linspace(-0.3, 0.3, 9)
        vg = sd.value_and_grad(L.logistic, 0, (1, 2), scheduler=client)
        one = [client.persist(da.from_array(a[:16], chunks=16)) for a in small]
        many = [client.persist(da.from_array(a, chunks=16)) for a in small]
        vg(theta, *one), vg(theta, *many)
        res = interleaved({"1 chunk of 16 rows": lambda: vg(theta, *one),
                           "64 chunks of 16 rows": lambda: vg(theta, *many)}, samples=samples, min_sample_time=0.2)
        t1, t64 = res["1 chunk of 16 rows"].median, res["64 chunks of 16 rows"].median
        out["overhead"] = {"call_s": t1, "per_chunk_s": (t64 - t1) / 63,
                           "results": {k: t.as_dict() for k, t in res.items()}}
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    out["loadavg_after"] = os.getloadavg()
    return out


def report(out: dict) -> str:
    lines = [f"symgrad.dask throughput ({out['date']}, {out['cpus']} CPUs, load average before "
             f"{out['loadavg_before'][0]:.1f}, after {out['loadavg_after'][0]:.1f})", ""]
    for name, w in out["workloads"].items():
        lines.append(f"{name}: {w['rows']:,} rows, {w['chunks']} chunks of {w['chunk_rows']:,} rows, "
                     f"{w['bytes'] / 2**20:.0f} MiB")
        base = w["results"]["local, 1 thread"]["median_s"]
        for k, r in w["results"].items():
            lines.append(f"  {k:<17} {format_seconds(r['median_s']):>10}  {r['rows_per_s'] / 1e6:8.2f} M rows/s  "
                         f"({base / r['median_s']:.2f}x local 1 thread)")
    o = out["overhead"]
    lines += ["", f"per call (16 rows, one chunk, 2 workers): {format_seconds(o['call_s'])}; "
                  f"per extra chunk: {format_seconds(o['per_chunk_s'])}"]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small data, for a smoke run")
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--chunks", type=int, default=None, help="chunks per data set (default: 20 for logistic "
                   "regression, 16 for W2)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    out = run(a.quick, a.samples, a.chunks)
    print(report(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
