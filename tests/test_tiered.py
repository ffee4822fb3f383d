"""Tiered execution (symgrad/compiler/tiers.py): numpy code first, Numba kernels once built in the background.

The suite runs with tiering off by default (conftest.py sets SYMGRAD_TIERED=0); these tests ask for it.
Most use ``cache=False`` so that no build cache entry of an earlier test skips the numpy tier, and a
``gate`` that holds the background worker, so that which tier a call runs is deterministic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import symgrad
from symgrad.compiler import tiers
from symgrad.compiler.compile import CompiledFunctionBackward
from symgrad.compiler.inspect_report import inspect_function

REPO = Path(__file__).resolve().parents[1]

# The documented agreement of the two tiers (docs/compiling.md, "Tiered execution"): relative to the
# largest magnitude of the compared value.
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-5}


def assert_tiers_agree(numba_value, numpy_value, dtype=np.float64):
    a, b = np.asarray(numba_value, dtype=np.float64), np.asarray(numpy_value, dtype=np.float64)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b), initial=0.0)), np.finfo(dtype).tiny)
    assert float(np.max(np.abs(a - b), initial=0.0)) <= TOLERANCE[dtype] * scale


def is_numba(fn) -> bool:
    """Whether a kernel function of ``Kernels`` is the Numba tier (its glue carries the dispatchers)."""
    return hasattr(fn, "kernels")


@pytest.fixture
def gate(monkeypatch):
    """Background builds wait until ``gate.set()`` (the fixture lets them go at the end)."""
    event = threading.Event()
    run = tiers.BackgroundBuild.run

    def held(self):
        event.wait(120)
        run(self)

    monkeypatch.setattr(tiers.BackgroundBuild, "run", held)
    yield event
    event.set()
    tiers.wait_all(120)


# --- functions: elementwise, a logistic regression, an MLP, float32 --------------------------------

def w1(x):
    return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()


def logistic(w, X, y):
    z = X @ w
    return (symgrad.logaddexp(symgrad.zeros_like(z), z) - y * z).mean()


def mlp(W1, b1, W2, X, Y):
    h = symgrad.tanh(X @ W1 + b1)
    return ((h @ W2 - Y) ** 2).mean()


def _inputs(name, dtype=np.float64):
    r = np.random.default_rng(7)
    if name == "w1":
        return w1, [r.uniform(-3, 3, 500).astype(dtype)], 1
    if name == "logistic":
        X = r.standard_normal((64, 8)).astype(dtype)
        return logistic, [r.standard_normal(8).astype(dtype), X, (r.uniform(size=64) < 0.5).astype(dtype)], 1
    X = r.standard_normal((32, 6)).astype(dtype)
    args = [r.standard_normal((6, 16)).astype(dtype) * 0.3, r.standard_normal(16).astype(dtype),
            r.standard_normal((16, 2)).astype(dtype) * 0.3, X, r.standard_normal((32, 2)).astype(dtype)]
    return mlp, args, 3


CASES = [("w1", np.float64), ("logistic", np.float64), ("mlp", np.float64), ("mlp", np.float32)]


@pytest.mark.parametrize("name,dtype", CASES)
def test_value_and_grad_runs_numpy_first_then_switches_and_agrees(gate, name, dtype):
    fn, args, n_wrt = _inputs(name, dtype)
    vg = symgrad.value_and_grad(symgrad.compile(fn, cache=False, tiered=True), argnums=tuple(range(n_wrt)))
    v0, g0 = vg(*args)                          # built now: the numpy tier
    (k,) = vg.compiled._kernels.values()
    assert not is_numba(k.joint_fn) and k.background.state == "queued"
    assert not vg.compiled.kernels_ready() and vg.compiled.stats()["kernels"] == 0
    v1, g1 = vg(*args)                          # still numpy: the worker is held
    assert v1 == v0
    gate.set()
    assert vg.compiled.wait(120) is True
    assert is_numba(k.joint_fn) and vg.compiled.kernels_ready()
    compiles = vg.compiled.stats()["kernel_compiles"]
    v2, g2 = vg(*args)                          # the Numba tier
    assert vg.compiled.stats()["kernel_compiles"] == compiles   # compiled in the background, for these arguments
    assert_tiers_agree(v2, v0, dtype)
    for a, b in zip(g2, g0):
        assert a.dtype == b.dtype == dtype
        assert_tiers_agree(a, b, dtype)
    # and both agree with eager mode's gradient
    leaves = [symgrad.tensor(a, requires_grad=i < n_wrt) for i, a in enumerate(args)]
    fn(*leaves).backward()
    for t, a in zip(leaves, g2):
        assert_tiers_agree(a, t.grad.numpy(), dtype)


def test_value_and_grad_fast_path_reads_the_current_tier(gate):
    fn, args, _ = _inputs("w1")
    vg = symgrad.value_and_grad(symgrad.compile(fn, cache=False, tiered=True))
    vg(*args)
    vg(*args)        # the per-(dtype, shape) fast path is set up on the numpy tier
    gate.set()
    assert vg.compiled.wait(120)
    (k,) = vg.compiled._kernels.values()
    calls = []
    numba_fn = k.joint_fn

    def spy(*a):
        calls.append(1)
        return numba_fn(*a)

    k.joint_fn = spy
    vg(*args)
    assert calls == [1]


@pytest.mark.parametrize("scalar_loss", ["joint", "split"])
def test_compile_and_backward_agree_across_tiers(gate, scalar_loss):
    fn, args, _ = _inputs("w1")
    f = symgrad.compile(fn, cache=False, tiered=True, scalar_loss=scalar_loss)
    x0 = symgrad.tensor(args[0], requires_grad=True)
    y0 = f(x0)
    y0.backward()
    gate.set()
    assert f.wait(120)
    x1 = symgrad.tensor(args[0], requires_grad=True)
    y1 = f(x1)
    y1.backward()
    (k,) = f._kernels.values()
    assert is_numba(k.joint_fn if scalar_loss == "joint" else k.forward)
    assert_tiers_agree(y1.item(), y0.item())
    assert_tiers_agree(x1.grad.numpy(), x0.grad.numpy())


def test_backward_runs_in_the_tier_of_its_forward(gate):
    """A forward on the numpy tier, a switch, then the backward: the numpy backward gets the values the
    numpy forward saved; the next call runs both Numba functions."""
    f = symgrad.compile(lambda x: symgrad.sin(x) * symgrad.exp(x), cache=False, tiered=True)
    a = np.linspace(-1.0, 1.0, 7)
    x0 = symgrad.tensor(a, requires_grad=True)
    y0 = f(x0)                                  # non-scalar output: split forward and backward
    gate.set()
    assert f.wait(120)
    (k,) = f._kernels.values()
    assert is_numba(k.forward) and is_numba(k.backward)
    node = y0.grad_fn
    assert isinstance(node, CompiledFunctionBackward) and not is_numba(node._backward)
    y0.backward(symgrad.ones(7, dtype=symgrad.float64))
    x1 = symgrad.tensor(a, requires_grad=True)
    y1 = f(x1)
    assert is_numba(y1.grad_fn._backward)
    y1.backward(symgrad.ones(7, dtype=symgrad.float64))
    want = np.cos(a) * np.exp(a) + np.sin(a) * np.exp(a)
    assert_tiers_agree(x0.grad.numpy(), want)
    assert_tiers_agree(x1.grad.numpy(), want)
    assert_tiers_agree(y1.detach().numpy(), y0.detach().numpy())


@pytest.mark.parametrize("layout", ["C", "F", "strided", "readonly"])
def test_background_build_compiles_the_signatures_the_calls_pass(layout):
    base = np.random.default_rng(3).standard_normal((6, 5))
    x = {"C": base, "F": np.asfortranarray(base), "strided": base[:, ::2], "readonly": base.copy()}[layout]
    if layout == "readonly":
        x.flags.writeable = False
    vg = symgrad.value_and_grad(symgrad.compile(lambda t: (symgrad.tanh(t) * t).sum(), cache=False, tiered=True))
    v0, g0 = vg(x)
    assert vg.compiled.wait(120)
    compiles = vg.compiled.stats()["kernel_compiles"]
    v1, g1 = vg(x)
    assert vg.compiled.stats()["kernel_compiles"] == compiles
    assert_tiers_agree(v1, v0)
    assert_tiers_agree(g1, g0)


@pytest.mark.parametrize("where", ["emit", "compile"])
def test_failed_background_build_warns_and_keeps_numpy_values(gate, monkeypatch, where):
    import codegen.numba_emit

    def boom(*args, **kwargs):
        raise RuntimeError("injected failure")

    if where == "emit":     # generating the Numba code fails
        monkeypatch.setattr(codegen.numba_emit, "emit_numba", boom)
    else:                   # Numba fails while compiling a kernel
        monkeypatch.setattr(tiers.BackgroundBuild, "_compile", boom)
    fn, args, _ = _inputs("w1")

    def my_loss(x):
        return fn(x)

    vg = symgrad.value_and_grad(symgrad.compile(my_loss, cache=False, tiered=True))
    v0, g0 = vg(*args)
    gate.set()
    tiers.wait_all(120)
    assert symgrad.KernelBuildWarning is tiers.KernelBuildWarning
    with pytest.warns(tiers.KernelBuildWarning, match=r"my_loss.*RuntimeError: injected failure") as record:
        v1, g1 = vg(*args)
    assert record[0].filename == __file__    # names the caller's line
    ref_v, ref_g = _numpy_w1(args[0])
    for v, g in ((v0, g0), (v1, g1)):
        assert_tiers_agree(v, ref_v)
        assert_tiers_agree(g, ref_g)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # once: later calls do not warn again
        v2, _ = vg(*args)
    assert v2 == v1
    s = vg.compiled.stats()
    assert s["background_failures"] == 1 and not s["kernels_ready"]
    assert s["background_error"] == "RuntimeError: injected failure"
    assert vg.compiled.wait(1) is False
    (k,) = vg.compiled._kernels.values()
    assert not is_numba(k.joint_fn)
    with pytest.warns(tiers.KernelBuildWarning):    # inspect builds the split kernels: they fail too
        report = inspect_function(vg.compiled, tuple(args))
    assert "failed (RuntimeError: injected failure)" in report.cache["background_build"]


def test_failed_build_warns_at_wait(gate, monkeypatch):
    monkeypatch.setattr(tiers.BackgroundBuild, "_compile", lambda self, built: 1 / 0)
    f = symgrad.compile(lambda x: (x * 3.0).sum(), cache=False, tiered=True)
    assert f(np.ones(4)).item() == 12.0
    gate.set()
    with pytest.warns(tiers.KernelBuildWarning, match="ZeroDivisionError"):
        assert f.wait(120) is False
    assert f(np.ones(4)).item() == 12.0


def _numpy_w1(x):
    from benchmarks.workloads import w1_numpy_value_and_grad

    v, g = w1_numpy_value_and_grad(x)
    return v, g["x"]


def test_tiered_false_builds_the_kernels_in_the_call():
    fn, args, _ = _inputs("w1")
    vg = symgrad.value_and_grad(symgrad.compile(fn, cache=False, tiered=False))
    vg(*args)
    (k,) = vg.compiled._kernels.values()
    assert k.background is None and is_numba(k.joint_fn)
    s = vg.compiled.stats()
    assert s["kernels"] >= 1 and s["background_builds"] == 0 and s["kernels_ready"]


def test_options_default_and_validation():
    assert symgrad.compile(w1, tiered=True).options["tiered"] is True
    with pytest.raises(ValueError, match="tiered must be True or False"):
        symgrad.compile(w1, tiered="yes")


def test_numpy_backend_and_float16_have_no_background_build():
    f = symgrad.compile(lambda x: (x * x).sum(), backend="numpy", tiered=True, cache=False)
    f(np.ones(3))
    h = symgrad.compile(lambda x: (x * x).sum(), tiered=True, cache=False)
    assert h(np.ones(3, dtype=np.float16)).item() == 3.0
    assert f.stats()["background_builds"] == h.stats()["background_builds"] == 0


def test_compiled_module_switches(gate):
    nn = symgrad.nn
    symgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    cm = symgrad.compile(model, cache=False, tiered=True)
    x = symgrad.tensor(np.random.default_rng(1).standard_normal((5, 4)), dtype=symgrad.float32)
    cm(x).sum().backward()
    first = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    gate.set()
    assert cm.wait(120)
    cm(x).sum().backward()
    for p, g in zip(model.parameters(), first):
        assert_tiers_agree(p.grad.numpy(), g, np.float32)


def test_torch_compile_backend_switches(monkeypatch):
    torch = pytest.importorskip("torch")
    from symgrad.compiler import options

    builds = []
    submit = tiers.submit
    monkeypatch.setattr(options, "DEFAULT_TIERED", True)   # what a process without SYMGRAD_TIERED=0 runs
    monkeypatch.setattr(tiers, "submit", lambda b: (builds.append(b), submit(b)))

    def f(x):
        return x * x + 2.0 * x

    g = torch.compile(f, backend="symgrad", dynamic=False)
    x = torch.linspace(-1, 1, 9, dtype=torch.float64)
    first = g(x)
    assert builds and all(b.wait(120) for b in builds)
    assert all(is_numba(b.kernels.forward) for b in builds)
    second = g(x)
    assert_tiers_agree(second.numpy(), first.numpy())
    assert_tiers_agree(second.numpy(), f(x).numpy())


def test_argument_copies_keep_layout_and_values():
    a = np.arange(12.0).reshape(3, 4)
    ro = a.copy()
    ro.flags.writeable = False
    for x in (a, np.asfortranarray(a), a[:, ::2], ro, np.float64(2.0) * np.ones(()), np.zeros((0, 3))):
        (c,) = tiers.argument_copies([x])
        assert c is not x and not np.shares_memory(c, x)
        np.testing.assert_array_equal(c, x)
        assert (c.flags.c_contiguous, c.flags.f_contiguous, c.flags.writeable) == \
            (x.flags.c_contiguous, x.flags.f_contiguous, x.flags.writeable)


DISK_SCRIPT = """
import json, sys
import numpy as np
if sys.argv[1] == "numba":
    import numba  # noqa: F401 - a process that has Numba loaded already
import symgrad

def loss(x):
    return (x * x * 3.0 - x).sum()

vg = symgrad.value_and_grad(loss)
x = np.linspace(-2.0, 3.0, 301)
v, g = vg(x)
(k,) = vg.compiled._kernels.values()
first = {"numba_first": hasattr(k.joint_fn, "kernels"), "background": k.background is not None}
ready = vg.compiled.wait(120)
v2, g2 = vg(x)
s = vg.compiled.stats()
print(json.dumps({**first, "ready": ready, "numba_after": hasattr(k.joint_fn, "kernels"),
                  "compiles": s["kernel_compiles"], "loads": s["kernel_cache_loads"], "value": v, "value2": v2,
                  "grad": g.tolist(), "grad2": g2.tolist()}))
"""


def _disk_runs(tmp_path, modes):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(tmp_path / "cache"), SYMGRAD_TIERED="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    runs = []
    for mode in modes:
        r = subprocess.run([sys.executable, "-c", DISK_SCRIPT, mode], env=env, capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return runs


def test_kernels_in_the_disk_cache_run_from_the_first_call_once_numba_is_loaded(tmp_path):
    """The first process runs numpy code and exits without waiting: the interpreter finishes the build
    at exit, so a second process that has Numba loaded runs the cached kernels at its first call."""
    cold, warm = _disk_runs(tmp_path, ["plain", "numba"])
    assert not cold["numba_first"] and cold["background"]
    assert warm["numba_first"] and not warm["background"]
    assert warm["compiles"] == 0 and warm["loads"] >= 1
    assert_tiers_agree(warm["value"], cold["value"])


def test_cached_kernels_load_in_the_background_of_a_process_without_numba(tmp_path):
    """A new process that has not imported Numba starts on the cached numpy tier (importing Numba and
    loading the kernels takes longer) and then runs the cached kernels, compiling nothing."""
    cold, warm = _disk_runs(tmp_path, ["plain", "plain"])
    assert not cold["numba_first"] and cold["background"] and cold["ready"]
    assert not warm["numba_first"] and warm["background"]
    assert warm["ready"] and warm["numba_after"]
    assert warm["compiles"] == 0 and warm["loads"] >= 1
    assert warm["value"] == cold["value"] and warm["grad"] == cold["grad"]    # the same numpy code
    assert_tiers_agree(warm["value2"], warm["value"])
    assert_tiers_agree(warm["grad2"], warm["grad"])
    assert_tiers_agree(warm["value2"], cold["value2"])


def test_wait_times_out_while_the_build_is_held(gate):
    f = symgrad.compile(lambda x: (x * 2.0).sum(), cache=False, tiered=True)
    assert f(np.ones(3)).item() == 6.0
    assert f.wait(0.05) is False and not f.kernels_ready()
    gate.set()
    assert f.wait(120) is True


def test_calls_from_several_threads_across_the_switch():
    """Calls from four threads while the kernels build and switch: every result within the tolerance."""
    fn, args, _ = _inputs("w1")
    ref_v, ref_g = _numpy_w1(args[0])
    vg = symgrad.value_and_grad(symgrad.compile(fn, cache=False, tiered=True))
    vg(*args)
    results, errors = [], []

    def work():
        try:
            for _ in range(40):
                results.append(vg(*args))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    assert vg.compiled.wait(120)
    for t in threads:
        t.join()
    results.append(vg(*args))
    assert not errors and len(results) == 161
    for v, g in results:
        assert_tiers_agree(v, ref_v)
        assert_tiers_agree(g, ref_g)


def test_background_build_does_not_draw_from_the_users_random_stream():
    """Compiling by a run in the background must not advance the default generator: a dropout mask
    drawn there comes from a throwaway stream, so seeded programs draw the same numbers, tiered or not."""
    def f(x):
        return (symgrad.nn.functional.dropout(x, 0.5, training=True) * x).sum()

    seen = []
    for tiered in (False, True):
        symgrad.manual_seed(0)
        g = symgrad.compile(f, cache=False, tiered=tiered)
        y = g(symgrad.tensor(np.linspace(1.0, 2.0, 64))).item()
        assert g.wait(120)
        seen.append((y, symgrad.rand(4).numpy()))
    assert seen[0][0] == pytest.approx(seen[1][0], rel=1e-12)
    np.testing.assert_array_equal(seen[0][1], seen[1][1])


def test_values_the_numpy_code_refuses_too_do_not_fail_the_build(gate):
    """The run that compiles the kernels raises an input error (a class index out of range) that the
    numpy code raises as well: the Numba code is not at fault, so calls still switch to it."""
    F = symgrad.nn.functional
    f = symgrad.compile(lambda L, t: F.cross_entropy(L, t), cache=False, tiered=True)
    L = symgrad.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    good = symgrad.tensor([0, 1, 2, 2])
    first = f(L, good)
    first.backward()
    g0 = L.grad.numpy().copy()
    (k,) = f._kernels.values()
    k.background.inputs[1][2] = 7      # what the background run sees: out of range for 3 classes
    gate.set()
    assert f.wait(120)
    assert is_numba(k.joint_fn) and f.stats()["background_failures"] == 0
    L.grad = None
    second = f(L, good)
    second.backward()
    assert_tiers_agree(second.item(), first.item())
    assert_tiers_agree(L.grad.numpy(), g0)
    with pytest.raises(IndexError, match="out of bounds"):
        f(L, symgrad.tensor([0, 1, 7, 2]))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dying_worker_does_not_stall_the_queue(monkeypatch):
    run = tiers.BackgroundBuild.run
    died = []

    def dies_once(self):
        if not died:
            died.append(self)
            raise SystemExit   # ends the worker thread
        run(self)

    monkeypatch.setattr(tiers.BackgroundBuild, "run", dies_once)
    f = symgrad.compile(lambda x: (x * 4.0).sum(), cache=False, tiered=True)
    g = symgrad.compile(lambda x: (x * 5.0).sum(), cache=False, tiered=True)
    assert f(np.ones(2)).item() == 8.0
    assert g(np.ones(2)).item() == 10.0
    assert g.wait(120) is True
    assert f.wait(0.01) is False and f(np.ones(2)).item() == 8.0   # its build never ran: numpy code


def _forked_child(queue):
    h = symgrad.value_and_grad(symgrad.compile(lambda x: (x * x * 2.0).sum(), cache=False, tiered=True))
    v = h(np.ones(3))[0]
    queue.put((v, h.compiled.wait(120), h(np.ones(3))[0]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_fork_waits_for_the_running_build_and_the_child_builds_its_own():
    import multiprocessing

    vg = symgrad.value_and_grad(symgrad.compile(lambda x: (x * x * 3.0).sum(), cache=False, tiered=True))
    assert vg(np.ones(3))[0] == 9.0      # its build is queued or running: the fork waits for it
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_forked_child, args=(queue,))
    child.start()
    assert queue.get(timeout=200) == (6.0, True, 6.0)
    child.join(60)
    assert child.exitcode == 0
    assert vg.compiled.wait(120) and vg(np.ones(3))[0] == 9.0


@pytest.mark.heavy
def test_an_unusable_cached_kernel_entry_is_never_trusted_and_is_built_again(tmp_path):
    """A build-cache entry whose Numba part cannot be decoded (well-formed, checksum right) leaves the
    process on the numpy tier with a warning, is removed, and the next process builds it again."""
    from symgrad.compiler import build_cache
    from symgrad.rules import diskcache

    (cold,) = _disk_runs(tmp_path, ["plain"])
    (entry,) = (tmp_path / "cache").glob(f"{build_cache.BUILD_PREFIX}*.json")
    payload = diskcache.read_json(entry)
    payload["emitted"]["joint"]["class"] = ["codegen.numba_emit", "NoSuchEmitter"]
    diskcache.write_json(entry, payload)
    (broken,) = _disk_runs(tmp_path, ["plain"])
    assert not broken["numba_first"] and broken["background"]
    assert not broken["ready"] and not broken["numba_after"]                    # stays on numpy code
    assert broken["value"] == cold["value"] and broken["value2"] == cold["value"]
    assert not entry.exists()
    (again,) = _disk_runs(tmp_path, ["plain"])
    assert not again["numba_first"] and again["background"] and again["ready"] and again["numba_after"]
    assert diskcache.read_json(entry) is not None
