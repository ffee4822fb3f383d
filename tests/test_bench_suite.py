"""benchmarks/suite.py: a tiny run end to end (JSON schema, every timed implementation verified), and the
checking rules (a wrong or failing implementation is excluded, a missing peer skipped).  No wall-clock
time is asserted anywhere: the machine's speed is not under test."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import peers, suite
from benchmarks.workloads import sized

# its tests share the tiny benchmark run (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_bench_suite")

REPO = Path(__file__).resolve().parents[1]
IMPLS = "hand,numpy,sg-vg,sg-compile,sg-eager,autograd"  # autograd: an optional peer (may be absent)
STATUSES = {"ok", "skipped", "mismatch", "error"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    env = dict(os.environ, PYTHONPATH=str(REPO), SYMGRAD_CACHE_DIR=str(out / "cache"))
    cmd = [sys.executable, "-m", "benchmarks.suite", "--quick", "--size-scale", "0.001", "--only", "W1,W4",
           "--impls", IMPLS, "--parts", "table,scaling", "--min-sample-time", "0.002",
           "--json", str(out / "r.json")]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads((out / "r.json").read_text()), out


@pytest.mark.heavy
def test_tiny_run_prints_the_table(tiny_run):
    stdout, _, _ = tiny_run
    assert "| implementation | W1 1e6 | W1 1e3 | W4 |" in stdout
    assert "| hand Numba |" in stdout
    assert "| symgrad value_and_grad |" in stdout


@pytest.mark.heavy
def test_json_schema(tiny_run):
    _, doc, _ = tiny_run
    assert doc["benchmark"] == "suite" and doc["schema_version"] == suite.SCHEMA_VERSION
    for key in ("date", "command", "machine", "versions", "threads", "settings", "baseline", "implementations",
                "workloads", "scaling", "latency", "compile_scaling", "memory", "elapsed_s"):
        assert key in doc, key
    assert doc["baseline"] == peers.BASELINE
    assert doc["settings"]["quick"] is True and doc["settings"]["size_scale"] == 0.001
    for key in ("python", "numpy", "numba", "symgrad"):
        assert doc["versions"][key]
    assert {i["key"] for i in doc["implementations"]} == set(peers.BY_KEY)
    assert [r["workload"] for r in doc["workloads"]] == ["W1 1e6", "W1 1e3", "W4"]
    assert doc["workloads"][0]["inputs"] == {"x": {"shape": [1000], "dtype": "float64"}}
    assert doc["latency"] is None and doc["memory"] is None  # not among --parts


@pytest.mark.heavy
def test_every_implementation_verified_before_timing(tiny_run):
    _, doc, _ = tiny_run
    selected = [peers.BY_KEY[k].name for k in IMPLS.split(",")]
    records = doc["workloads"] + [p for p in doc["scaling"]["points"] if p["source"] != "table"]
    for rec in records:
        assert rec["reference_problems"] == []
        assert set(rec["results"]) == set(selected), rec["workload"]
        for name, e in rec["results"].items():
            assert e["status"] in STATUSES
            if e["status"] == "skipped":
                assert e["reason"] and name == "HIPS autograd"  # only the optional peer may be missing
                continue
            assert e["status"] == "ok", (rec["workload"], name, e.get("problems"))
            assert e["verified"] is True
            t = e["timing"]
            assert t["samples"] >= 7 and len(t["per_call_s"]) == t["samples"]
            assert t["median_s"] > 0 and e["ratio_to_baseline"] > 0
        assert rec["results"][peers.BASELINE]["ratio_to_baseline"] == pytest.approx(1.0)


@pytest.mark.heavy
def test_scaling_points(tiny_run):
    _, doc, _ = tiny_run
    pts = doc["scaling"]["points"]
    assert [p["n"] for p in pts] == [1, 100, 1000]  # 1e3, 1e5, 1e6 scaled by 0.001
    assert [p["source"] for p in pts] == ["table", "scaling run", "table"]


@pytest.mark.heavy
def test_plots_from_the_json(tiny_run):
    pytest.importorskip("matplotlib")
    from benchmarks import plots
    _, doc, out = tiny_run
    written = plots.write_all(doc, str(out / "plots"))
    assert sorted(os.path.basename(p) for p in written) == ["ratios.png", "w1_scaling.png"]
    for p in written:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- the checking rules, in this process -----------------------------------------------------------------

def _fake(key, build):
    return peers.Impl(key, f"fake {key}", "peer", 1, "numpy", build)


def _wrong_grad(w, inputs, _np):
    def call():
        value, grads = w.numpy_value_and_grad(**inputs)
        return value, {"x": grads["x"] * (1 + 1e-3)}
    return peers.Prepared(call, lambda out: out)


def _raises(w, inputs, _np):
    def call():
        raise NotImplementedError("op not supported")
    return peers.Prepared(call, lambda out: out)


def test_mismatch_and_error_are_excluded_not_timed():
    w = sized("W1 1e3", 0.01)
    impls = [peers.BY_KEY["numpy"], _fake("wrong", _wrong_grad), _fake("raises", _raises)]
    lines = []
    rec = suite.run_workload(w, impls, samples=7, min_sample_time=0.001, log=lines.append)
    res = rec["results"]
    assert res["numpy hand grad"]["status"] == "ok" and "timing" in res["numpy hand grad"]
    assert res["fake wrong"]["status"] == "mismatch" and res["fake wrong"]["verified"] is False
    assert "grad of x" in res["fake wrong"]["problems"][0] and "timing" not in res["fake wrong"]
    assert res["fake raises"]["status"] == "error" and "NotImplementedError" in res["fake raises"]["problems"][0]
    assert "timing" not in res["fake raises"]
    assert any("fake wrong does not match the numpy reference, EXCLUDED" in ln for ln in lines)


def test_missing_peer_is_skipped_with_a_reason(monkeypatch):
    def missing():
        raise ImportError("No module named 'nosuchpeer'")

    monkeypatch.setitem(peers._LOADERS, "nosuchpeer", missing)
    monkeypatch.setattr(peers, "_loaded", dict(peers._loaded))
    impl = peers.Impl("nosuch", "no such peer", "peer", 1, "nosuchpeer", peers.build_numpy)
    rec = suite.run_workload(sized("W1 1e3", 0.01), [impl], samples=7, min_sample_time=0.001, log=lambda s: None)
    e = rec["results"]["no such peer"]
    assert e["status"] == "skipped" and "import failed" in e["reason"] and "nosuchpeer" in e["reason"]


def test_float32_reference_is_float64():
    w = sized("W3 f32", 0.05)
    rec = suite.run_workload(w, [peers.BY_KEY["numpy"]], samples=7, min_sample_time=0.001, log=lambda s: None)
    assert rec["rtol"] == suite.F32_RTOL
    assert rec["results"]["numpy hand grad"]["status"] == "ok"


def test_verify_reports_each_gradient():
    w = sized("W2", 0.01)
    inputs = w.make_inputs()
    value, grads = w.numpy_value_and_grad(**inputs)
    assert suite.verify(w, value, grads, value, grads) == []
    bad = dict(grads, w=grads["w"] + 1.0, b=None)
    problems = suite.verify(w, value + 1.0, bad, value, grads)
    assert len(problems) == 3
    assert problems[0].startswith("loss") and "grad of w" in problems[1] and "grad of b: missing" in problems[2]
    assert np.isfinite(value)


# --- the held-out workloads (issue 21): gradients only, nothing timed ----------------------------------

HELDOUT_NAMES = ("heat", "tv", "rowpen", "embbag", "rnn", "attention", "logreg")


@pytest.mark.parametrize("name", HELDOUT_NAMES)
def test_heldout_hand_gradient_matches_finite_differences(name):
    from benchmarks import heldout
    from benchmarks.workloads import check_hand_gradient

    w = heldout.make_workload(name, **heldout.SMALL_SIZES[name])
    assert check_hand_gradient(w) == []


@pytest.mark.parametrize("name", ["heat", "rnn"])
def test_heldout_finite_difference_check_catches_a_wrong_gradient(name):
    from dataclasses import replace

    from benchmarks import heldout
    from benchmarks.workloads import check_hand_gradient

    w = heldout.make_workload(name, **heldout.SMALL_SIZES[name])

    def off(**inputs):
        value, grads = w.numpy_value_and_grad(**inputs)
        first = w.grad_inputs[0]
        return value, dict(grads, **{first: grads[first] * 1.01})

    problems = check_hand_gradient(replace(w, numpy_value_and_grad=off))
    assert len(problems) == 1 and f"d/d{w.grad_inputs[0]}" in problems[0]


@pytest.mark.parametrize("name", HELDOUT_NAMES)
def test_heldout_symgrad_matches_the_hand_gradient(name):
    import symgrad
    from benchmarks import heldout

    w = heldout.make_workload(name, **heldout.SMALL_SIZES[name])
    inputs = w.make_inputs()
    f = peers.positional(w, inputs, symgrad)
    vg = symgrad.value_and_grad(symgrad.compile(f, backend="numpy"), argnums=peers.argnums(w, inputs))
    value, grads = vg(*inputs.values())
    ref_value, ref_grads = w.numpy_value_and_grad(**{k: a.copy() for k, a in inputs.items()})
    assert suite.verify(w, value, dict(zip(w.grad_inputs, grads)), ref_value, ref_grads, rtol=1e-9) == []


def test_heldout_jax_namespace_matches_the_hand_gradient():
    jax = pytest.importorskip("jax")
    from benchmarks import heldout

    jax.config.update("jax_enable_x64", True)
    T = heldout.jax_namespace(jax)
    for name in HELDOUT_NAMES:
        w = heldout.make_workload(name, **heldout.SMALL_SIZES[name])
        inputs = w.make_inputs()
        # jitted, as the benchmark's jax.jit peer runs it (benchmarks/peers.py)
        value, grads = jax.jit(jax.value_and_grad(peers.positional(w, inputs, T), argnums=peers.argnums(w, inputs)))(
            *inputs.values())
        ref_value, ref_grads = w.numpy_value_and_grad(**inputs)
        grads = {n: np.asarray(g) for n, g in zip(w.grad_inputs, grads)}
        assert suite.verify(w, float(value), grads, ref_value, ref_grads, rtol=1e-9) == [], name


def test_heldout_tables_report_ratios_to_jax_and_exclusions():
    from benchmarks import heldout

    def ok(median):
        return {"status": "ok", "timing": {"median_s": median}}

    records = [{"workload": "heat", "results": {"jax.jit": ok(2e-3), "symgrad value_and_grad": ok(1e-3),
                                                "torch eager": {"status": "mismatch"}}},
               {"workload": "tv", "results": {"jax.jit": ok(1e-3), "symgrad value_and_grad": ok(3e-2),
                                              "torch eager": {"status": "skipped"}}}]
    for rec in records:
        base = rec["results"]["jax.jit"]["timing"]["median_s"]
        for e in rec["results"].values():
            e["ratio_to_jax"] = e["timing"]["median_s"] / base if "timing" in e else None
    table = heldout.ratio_table(records, ["jax.jit", "symgrad value_and_grad", "torch eager"])
    assert "| jax.jit | 2 ms | 1 ms |" in table
    assert "| symgrad value_and_grad | 0.50 | 30.0 |" in table
    assert "| torch eager | WRONG | skip |" in table

    cold = [{"workload": "rnn", "tool": "sg-vg", "name": "symgrad value_and_grad", "cold_s": 3.0,
             "matches_numpy": True, "error": None},
            {"workload": "rnn", "tool": "jax", "name": "jax.jit", "cold_s": 1.5, "matches_numpy": True,
             "error": None},
            {"workload": "logreg", "tool": "sg-vg", "name": "symgrad value_and_grad", "cold_s": 1.0,
             "matches_numpy": False, "error": None},
            {"workload": "logreg", "tool": "jax", "name": "jax.jit", "cold_s": None, "matches_numpy": False,
             "error": "timed out"}]
    table = heldout.cold_table(cold)
    assert "| symgrad value_and_grad | 3.00 s | 1.00 s WRONG |" in table
    assert "| jax.jit | 1.50 s | failed |" in table
    assert "| symgrad / jax.jit | 2.00x | - |" in table
