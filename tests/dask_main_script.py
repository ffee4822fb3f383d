"""Run as a script by tests/test_dask.py: losses defined in ``__main__``, a lambda, closures and a
redefinition, sent to a LocalCluster by value.  Prints one JSON object for the test to check.

    python tests/dask_main_script.py [processes]     # default: workers are threads of this process
"""

import json
import sys

import dask.array as da
import numpy as np

import symgrad
import symgrad.dask as sd

SCALE = 2.0


def loss(w, x):
    return (symgrad.tanh(x * w) ** 2).sum()


def scaled(w, x):
    return SCALE * (x * w).sum() + helper(x * w)


def helper(z):
    return (z * z).sum()


def make_closure(c):
    def shifted(w, x):
        return ((x - c) * w).sum()
    return shifted


def worst_error(got, want):
    """The largest difference of value and gradient, relative to their magnitudes."""
    (v, g), (v0, g0) = got, want
    return max(abs(v - v0) / max(abs(v0), 1e-300), float(np.max(np.abs(g - g0)) / np.max(np.abs(g0))))


def compiled_losses(client):
    """{name#digest: traces summed over the workers}, counting a shared table once (thread workers)."""
    per_worker = client.run(sd.worker_stats)
    tables = {json.dumps(t, sort_keys=True, default=str): t for t in per_worker.values()}
    out: dict = {}
    for table in tables.values():
        for name, stats in table.items():
            out[name] = out.get(name, 0) + stats["traces"]
    return out


if __name__ == "__main__":
    from distributed import Client, LocalCluster  # here: pytest's doctest collection imports this file

    processes = "processes" in sys.argv
    report: dict = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0",
                      silence_logs=50) as cluster, Client(cluster) as client:
        rng = np.random.default_rng(0)
        x_np = rng.standard_normal((200, 4))
        x = client.persist(da.from_array(x_np, chunks=(50, 4)))
        w = rng.standard_normal(4)

        def run(fn, **kw):
            vg = sd.value_and_grad(fn, **kw)
            return vg, worst_error(vg(w, x), symgrad.value_and_grad(fn)(w, x_np))

        vg, report["main_error"] = run(loss)
        report["main_kind"] = type(vg.loss_ref).__name__
        first_digest = vg.loss_ref.digest
        vg(w * 0.5, x)
        vg(w * 0.25, x)
        _, report["again_error"] = run(loss)          # a new value_and_grad of the same, unchanged loss
        report["after_unchanged"] = compiled_losses(client)

        def loss(w, x):  # noqa: F811 - redefined as in a notebook: the workers must compile the new one
            return (symgrad.tanh(x * w) ** 2).sum() * 3.0

        vg, report["redefined_error"] = run(loss)
        report["redefined_new_digest"] = vg.loss_ref.digest != first_digest
        report["after_redefinition"] = compiled_losses(client)

        # the same source defined twice (a notebook cell run again) has the same digest
        source = "def again(w, x):\n    return (x * w * w).sum()\n"
        digests = []
        for _ in range(2):
            exec(compile(source, "<cell>", "exec"), globals())
            vg, err = run(again)  # noqa: F821 - defined by exec
            digests.append(vg.loss_ref.digest)
            report["cell_error"] = err
        report["cell_same_digest"] = digests[0] == digests[1]

        # a global read by the loss, and a function of __main__ it calls, are part of its content
        vg = sd.value_and_grad(scaled)
        report["global_errors"] = [worst_error(vg(w, x), symgrad.value_and_grad(scaled)(w, x_np))]
        SCALE = 5.0
        report["global_errors"].append(worst_error(vg(w, x), symgrad.value_and_grad(scaled)(w, x_np)))
        report["global_value_5"] = vg(w, x)[0]
        report["global_expected_5"] = float(5.0 * (x_np * w).sum() + ((x_np * w) ** 2).sum())

        # a lambda, and closures over different constants
        _, report["lambda_error"] = run(lambda w, x: (symgrad.exp(x * w)).sum() / 100.0, reduction="sum")
        report["closure_errors"] = [run(make_closure(c))[1] for c in (0.5, -1.5)]
        report["final"] = compiled_losses(client)
    print(json.dumps(report))
