"""symgrad.dask: compiled value-and-gradient over a real distributed.LocalCluster (issue 10).

The cluster (2 worker processes, one thread each) is started once for the module; its workers get
this folder on their PYTHONPATH (they import the losses from tests/dask_losses.py by name) and a
kernel cache of their own.  The argument checks run with scheduler="sync" and need no cluster.
"""

import json
import logging
import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

import symgrad  # noqa: E402
import symgrad.dask as sd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import dask_losses as L  # noqa: E402

# its tests share the LocalCluster and the data persisted on it (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_dask")

RTOL = 1e-12


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    # imported here: only the worker running this module's cluster tests needs distributed
    distributed = pytest.importorskip("distributed")
    cache = tmp_path_factory.mktemp("dask-worker-cache")
    path = os.pathsep.join(p for p in (HERE, os.path.dirname(HERE), os.environ.get("PYTHONPATH")) if p)
    env = {"SYMGRAD_CACHE_DIR": str(cache), "PYTHONPATH": path, "NUMBA_NUM_THREADS": "1"}
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, env=env,
                                  dashboard_address=":0", silence_logs=logging.CRITICAL) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def logistic_data(client):
    rng = da.random.default_rng(10)
    X = rng.standard_normal((1_000_000, 8), chunks=(100_000, 8))
    w_true = np.linspace(-1, 1, 8)
    noise = rng.logistic(size=1_000_000, chunks=100_000)
    y = ((X @ w_true + 0.5 + noise) > 0).astype(np.float64)
    X, y = client.persist([X, y])
    return X, y, *client.compute([X, y], sync=True)


@pytest.fixture(scope="module")
def w2_data(client):
    rng = np.random.default_rng(2)
    x = da.random.default_rng(20).standard_normal((3_000, 1000), chunks=(400, 1000))   # the last chunk: 200 rows
    return client.persist(x), x.compute(), rng.standard_normal(1000) * 0.1, rng.standard_normal(1000) * 0.1


def assert_same(got, want, rtol=RTOL):
    """Values within ``rtol``; each gradient within ``rtol`` of its largest entry (a component that
    nearly cancels, 2e-9 among entries of 1e-4, differs in its 12th digit by summation order alone)."""
    assert got[0] == pytest.approx(want[0], rel=rtol, abs=0)
    g, w = got[1], want[1]
    for a, b in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,)):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.max(np.abs(a - b)) <= rtol * np.max(np.abs(b))


# --- on the cluster ---------------------------------------------------------------------------------

def test_w2_matches_single_machine(client, w2_data):
    x, x_np, w, b = w2_data
    vg = sd.value_and_grad(L.w2, argnums=(1, 2), data_argnums=0, reduction="mean")
    got = vg(x, w, b)
    assert_same(got, symgrad.value_and_grad(L.w2, (1, 2))(x_np, w, b))
    assert isinstance(got[0], float) and isinstance(got[1], tuple) and got[1][0].shape == (1000,)


def test_logistic_1e6_rows_matches_single_machine(client, logistic_data):
    X, y, X_np, y_np = logistic_data
    theta = np.linspace(0.3, -0.2, 9)
    got = sd.value_and_grad(L.logistic, argnums=0, data_argnums=(1, 2))(theta, X, y)
    assert_same(got, symgrad.value_and_grad(L.logistic)(theta, X_np, y_np))
    # the same loss as a mean, compiled with options that travel with its name
    got = sd.value_and_grad(L.logistic_mean, 0, (1, 2), reduction="mean")(theta, X, y)
    assert_same(got, symgrad.value_and_grad(L.logistic_mean)(theta, X_np, y_np))


def test_lbfgs_fit_matches_single_machine(client, logistic_data):
    import scipy.optimize

    X, y, X_np, y_np = logistic_data
    opts = {"maxiter": 20}
    dist = scipy.optimize.minimize(sd.value_and_grad(L.logistic, 0, (1, 2)), np.zeros(9), args=(X, y),
                                   jac=True, method="L-BFGS-B", options=opts)
    local = scipy.optimize.minimize(symgrad.value_and_grad(L.logistic), np.zeros(9), args=(X_np, y_np),
                                    jac=True, method="L-BFGS-B", options=opts)
    assert dist.nit == local.nit and dist.nfev == local.nfev
    np.testing.assert_allclose(dist.x, local.x, rtol=1e-10, atol=1e-12)
    assert dist.fun == pytest.approx(local.fun, rel=1e-12)
    assert abs(dist.x[-1] - 0.5) < 0.05                    # the intercept the labels were drawn with


def test_each_worker_compiles_once(client, logistic_data):
    X, y, *_ = logistic_data
    vg = sd.value_and_grad(L.logistic, 0, (1, 2))
    for k in range(3):
        vg(np.full(9, 0.1 * k), X, y)
    stats = client.run(sd.worker_stats)
    assert len(stats) == 2
    for per_worker in stats.values():
        s = per_worker["dask_losses.logistic"]
        assert s["traces"] == 1                 # one chunk shape; every later call hits the guard
        assert s["calls"] > s["traces"]
        assert s["kernel_compiles"] + s["kernel_cache_loads"] <= 4


def test_loss_travels_by_reference():
    vg = sd.value_and_grad(L.logistic_mean, 0, (1, 2), reduction="mean")
    ref = vg.loss_ref
    assert (ref.module, ref.qualname) == ("dask_losses", "logistic_mean")
    blob = pickle.dumps(ref)
    assert len(blob) < 200 and b"numba" not in blob
    assert pickle.loads(blob).compiled() is L.logistic_mean     # the worker gets the module's own object
    assert L.logistic_mean.options["parallel"] is False


def test_worker_that_cannot_import_the_loss(client, tmp_path, monkeypatch):
    (tmp_path / "only_here.py").write_text("def loss(w, x):\n    return (x * w).sum()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import only_here

    x = da.ones((100, 3), chunks=(50, 3))
    with pytest.raises(ImportError, match=r"2 worker\(s\) cannot import the loss only_here.loss.*"
                                          r"sent by reference, so that module must be importable"):
        sd.value_and_grad(only_here.loss)(np.ones(3), x)


def test_worker_killed_mid_computation(client, logistic_data, tmp_path):
    X, y, X_np, y_np = logistic_data
    marker = tmp_path / "killed"
    X_k = X.map_blocks(L.kill_once, marker=str(marker), dtype=X.dtype)   # block 3 kills its worker once
    theta = np.linspace(-0.4, 0.4, 9)
    before = client.run(os.getpid)
    t0 = time.perf_counter()
    got = sd.value_and_grad(L.logistic, 0, (1, 2))(theta, X_k, y)
    assert marker.exists(), "no worker was killed"
    assert int(marker.read_text()) in before.values()
    assert_same(got, symgrad.value_and_grad(L.logistic)(theta, X_np, y_np))
    client.wait_for_workers(2, timeout=60)      # the nanny restarted the dead one
    after = client.run(os.getpid)
    assert len(after) == 2 and int(marker.read_text()) not in after.values()
    assert time.perf_counter() - t0 < 60


# --- argument checks (no cluster) -------------------------------------------------------------------

def sync(loss, *args, **kw):
    return sd.value_and_grad(loss, *args, scheduler="sync", **kw)


X_SMALL = da.from_array(np.random.default_rng(3).standard_normal((100, 7)), chunks=(30, 7))
W7 = np.random.default_rng(4).random(7)


@pytest.mark.parametrize("loss, match", [
    (L.centred, r"`%sub: f64\[8, 7\] = sub.Tensor\(%x, %mean\)` combines a reduction over the rows with the rows"),
    # a compiled graph holds softmax as its parts (symgrad.ir.decompositions): the shift by the max is where
    # the rows meet
    (L.row_softmax, r"sub.Tensor\(%mul, %detach\)` combines a reduction over the rows with the rows"),
    (L.differences, r"slice.Tensor\(%x, 0, 1, 8, 1\)` takes a slice of the rows"),
    (L.squared_sum, r"not a sum of per-row terms .* loss\(rows 0:8\) must equal loss\(rows 0:4\) \+ loss\(rows 4:8\)"),
    (L.plus_constant, r"not a sum of per-row terms"),
])
def test_rejects_losses_that_mix_rows(loss, match):
    with pytest.raises(sd.NotAdditiveError, match=match):
        sync(loss)(W7, X_SMALL)


def test_wrong_reduction_is_named():
    with pytest.raises(sd.NotAdditiveError, match=r"is a mean over the rows, not a sum: pass reduction='mean'"):
        sync(L.w2, (1, 2), 0)(X_SMALL, W7, W7)
    y = da.from_array(np.random.default_rng(5).random(100) < 0.5, chunks=30).astype(float)
    with pytest.raises(sd.NotAdditiveError, match=r"is a sum over the rows, not a mean: pass reduction='sum'"):
        sync(L.logistic, 0, (1, 2), reduction="mean")(np.ones(8) * 0.1, X_SMALL, y)


def test_additive_losses_pass_the_check():
    rng = np.random.default_rng(6)
    W = rng.standard_normal((7, 3))
    labels = da.from_array(rng.integers(0, 3, 100), chunks=30)
    X_np, l_np = X_SMALL.compute(), labels.compute()
    assert_same(sync(L.cross_entropy)(W, X_SMALL, labels), symgrad.value_and_grad(L.cross_entropy)(W, X_np, l_np))
    G = rng.standard_normal((7, 7))
    assert_same(sync(L.gram)(G, X_SMALL), symgrad.value_and_grad(L.gram)(G, X_np))
    # check=False skips the check: a centred loss then silently centres each chunk on its own
    assert sync(L.centred, check=False)(W7, X_SMALL)[0] != symgrad.value_and_grad(L.centred)(W7, X_np)[0]


def test_losses_not_importable_travel_by_value():
    ns = {"__name__": "__main__"}
    exec("def script_loss(w, x):\n    return (x * w).sum()\n", ns)

    def nested(w, x):
        return (x * w).sum()

    import functools
    for loss in (lambda w, x: (x * w).sum(), ns["script_loss"], nested, functools.partial(L.squared_sum)):
        ref = sd.value_and_grad(loss).loss_ref
        assert isinstance(ref, sd.LossByValue)
        back = pickle.loads(pickle.dumps(ref))
        assert back == ref and back.digest == ref.digest and back._fn is None      # unpickled lazily
        assert back.resolve()(W7, X_SMALL.compute()[:3]) == pytest.approx(loss(W7, X_SMALL.compute()[:3]))
    assert isinstance(sd.value_and_grad(L.logistic).loss_ref, sd.LossRef)          # importable: by reference
    assert sd.value_and_grad(ns["script_loss"]).loss_ref == sd.value_and_grad(ns["script_loss"]).loss_ref


def test_digest_covers_closures_globals_and_called_functions():
    def make(c):
        return lambda w, x: ((x - c) * w).sum()

    def digest(fn):
        return sd.LossByValue.of(fn, None).digest

    assert digest(make(1.0)) == digest(make(1.0)) != digest(make(2.0))
    ns = {"__name__": "__main__", "np": np}
    exec("W = np.ones(3)\ndef helper(x):\n    return x * 2\ndef loss(w, x):\n    return (helper(x) * w * W).sum()\n",
         ns)
    d0 = digest(ns["loss"])
    ns["W"][1] = 5.0                                                   # a captured array written in place
    d1 = digest(ns["loss"])
    exec("def helper(x):\n    return x * 3\n", ns)                   # a function it calls, redefined
    d2 = digest(ns["loss"])
    assert len({d0, d1, d2}) == 3
    assert sd.LossByValue.of(ns["loss"], None) != sd.LossByValue.of(ns["loss"], symgrad.compile(
        ns["loss"], math="libm").compile_options)                        # options are part of the identity


def test_large_captured_array_travels_once_per_call():
    big = np.linspace(0.5, 1.5, 200_000)                 # 1.6 MB in the loss's closure: a key of its own

    def loss(w, x):
        return (x * w * big[:7]).sum()

    vg = sync(loss)
    got = vg(W7, X_SMALL)
    assert len(vg.loss_ref.blob) > sd.INLINE_PARAMS_BYTES
    assert_same(got, symgrad.value_and_grad(loss)(W7, X_SMALL.compute()), rtol=1e-10)


def test_by_value_loss_that_cannot_be_pickled():
    import threading
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"cannot send the loss .*<lambda> to the workers by value: cloudpickle "
                                        r"fails"):
        sd.value_and_grad(lambda w, x: (x * w).sum() if lock else 0)


def test_closure_on_the_cluster_compiles_once_per_content(client):
    x_np = np.random.default_rng(7).standard_normal((400, 5))
    x = client.persist(da.from_array(x_np, chunks=(100, 5)))
    w = np.linspace(-1, 1, 5)

    def make(c):
        def shifted(w, x):
            return (symgrad.tanh((x - c) * w) ** 2).sum()
        return shifted

    for c in (0.5, 0.5, -2.0):
        fn = make(c)
        assert_same(sd.value_and_grad(fn)(w, x), symgrad.value_and_grad(fn)(w, x_np))
    names = {}
    for per_worker in client.run(sd.worker_stats).values():
        for n, s in per_worker.items():
            if "shifted" in n:
                names.setdefault(n, []).append(s["traces"])
    assert len(names) == 2 and all(t == [1, 1] for t in names.values())    # two contents, each traced once a worker


def _run_script(path, *args, timeout=240):
    pytest.importorskip("distributed")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(HERE),
                                                                    os.environ.get("PYTHONPATH")) if p),
               NUMBA_NUM_THREADS="1")
    r = subprocess.run([sys.executable, path, *args], capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=os.path.dirname(HERE))
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.heavy
def test_losses_defined_in_a_script_run_as_main():
    report = json.loads(_run_script(os.path.join(HERE, "dask_main_script.py")).strip().splitlines()[-1])
    errors = [report[k] for k in ("main_error", "again_error", "redefined_error", "cell_error", "lambda_error")]
    errors += report["global_errors"] + report["closure_errors"]
    assert max(errors) < 1e-12
    assert report["main_kind"] == "LossByValue"
    # unchanged: three calls and a second value_and_grad of the same loss compiled it once
    assert list(report["after_unchanged"].values()) == [1]
    # redefined in __main__: a new digest, compiled once more
    assert report["redefined_new_digest"] and len(report["after_redefinition"]) == 2
    assert set(report["after_unchanged"]) < set(report["after_redefinition"])
    assert report["cell_same_digest"]
    # a changed global gives a new digest and the new value
    assert report["global_value_5"] == pytest.approx(report["global_expected_5"], rel=1e-12)
    final = report["final"]
    assert sum(1 for n in final if n.startswith("__main__.scaled#")) == 2
    assert sum(1 for n in final if ".shifted#" in n) == 2 and sum(1 for n in final if "<lambda>#" in n) == 1
    assert all(traces == 1 for traces in final.values())


@pytest.mark.heavy
def test_docs_example_runs_as_a_plain_script():
    example = os.path.join(os.path.dirname(HERE), "examples", "dask_logistic.py")
    with open(os.path.join(os.path.dirname(HERE), "docs", "dask.md")) as f:
        docs = f.read()
    with open(example) as f:
        body = f.read().split('"""\n', 1)[1].strip()       # the code after the module docstring
    assert body in docs                                       # the docs show this file's code
    out = _run_script(example)                                # worker processes
    assert "loss sent by value" in out and "converged: True" in out
    intercept = float(out.split("intercept:")[1])
    assert abs(intercept - 0.5) < 0.05


def test_chunking_errors():
    y = da.ones(100, chunks=50)
    with pytest.raises(ValueError, match=r"data arguments 1 and 2 are not chunked alike along axis 0 "
                                         r"\(row chunks \(50, 50\) against \(30, 30, 30, 10\)\).*rechunk"):
        sync(L.logistic, 0, (1, 2))(np.zeros(8), X_SMALL, y)
    with pytest.raises(ValueError, match=r"99 rows against 100"):
        sync(L.logistic, 0, (1, 2))(np.zeros(8), X_SMALL, da.ones(99, chunks=30))
    with pytest.raises(ValueError, match=r"chunked along axis 1 too .*x.rechunk\(\{1: -1\}\)"):
        sync(L.centred)(W7, X_SMALL.rechunk((30, 4)))
    with pytest.raises(TypeError, match=r"data argument 1 is a ndarray, not a dask array"):
        sync(L.centred, 0, 1)(W7, X_SMALL.compute())
    with pytest.raises(TypeError, match=r"argument 0 is a dask array but not a data argument"):
        sync(L.centred, 0, 1)(da.ones(7, chunks=7), X_SMALL)
    with pytest.raises(ValueError, match=r"argument 1 is both differentiated .* and data"):
        sync(L.centred, (0, 1), 1)(W7, X_SMALL)
    with pytest.raises(ValueError, match=r"reduction must be 'sum' or 'mean'"):
        sd.value_and_grad(L.centred, reduction="max")
