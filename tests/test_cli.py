"""The `symgrad` command, run as a real process (`python -m symgrad.cli`) for every subcommand.

The processes are forked by one that has imported numpy, Numba and symgrad (tests/forkserver.py: each
runs as `python -m symgrad.cli ARGS` would); they are started together, once per module (see `runs`),
and the tests read their results.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from forkserver import ForkServer

import symgrad

# its tests share the CLI runs (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_cli")

REPO = Path(__file__).resolve().parents[1]
LOSSES = "examples/losses.py"
W2_ARGS = ["--arg", "x=f64[1000,1000]", "--arg", "w=f64[1000]", "--arg", "b=f64[1000]"]
W3_ARGS = ["--arg", "X=f64[256,64]", "--arg", "W1=f64[64,128]", "--arg", "b1=f64[128]", "--arg", "W2=f64[128,1]",
           "--arg", "b2=f64[1]", "--arg", "Y=f64[256,1]"]
SECTION_TITLES = ["=== forward IR ===", "=== joint forward+backward graph ===",
                  "=== gradients and the rules applied ===",
                  "=== partition: saved by the forward vs recomputed by the backward ===",
                  "=== generated source (the modules that run) ===", "=== timings and cache ==="]

BAD_USER_FILE = '''
import numpy as np
import symgrad

def unsupported(x):
    return np.fft.fft(x)

def branchy(x):
    if x.sum() > 0:
        return x.sum()
    return (-x).sum()
'''


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


class Result:
    def __init__(self, done: subprocess.CompletedProcess) -> None:
        self.returncode, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr

    def __repr__(self) -> str:
        return f"<rc={self.returncode}\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}>"


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    x = np.random.default_rng(3).uniform(-2, 2, 257)
    np.save(d / "x.npy", x)
    (d / "bad.py").write_text(BAD_USER_FILE)
    (d / "imports_missing.py").write_text("import no_such_module_anywhere\n")
    return {"dir": d, "x": x, "x_npy": str(d / "x.npy"), "out": str(d / "kernels"), "bad": str(d / "bad.py"),
            "imports_missing": str(d / "imports_missing.py")}


@pytest.fixture(scope="module")
def runs(paths):
    """The commands run as processes, all started at once; name -> Result (waited for on first use)."""
    cmds = {
        "help": ["inspect", "--help"],
        "demo": ["demo", "--size", "2000", "--repeat", "1"],
        "w1": ["inspect", f"{LOSSES}:w1", "--arg", f"x={paths['x_npy']}", "--out", paths["out"]],
        "w2": ["inspect", f"{LOSSES}:w2", *W2_ARGS, "--json"],
        "w3": ["inspect", f"{LOSSES}:w3", *W3_ARGS, "--wrt", "W1,b1,W2,b2"],
        "graph": ["graph", f"{LOSSES}:w2", "--arg", "x=f64[4,3]", "--arg", "w=f64[3]", "--arg", "b=f64[3]"],
        # mistakes, one or more per subcommand: one clear line on stderr, status 2, no traceback
        "bad_arg": ["inspect", f"{LOSSES}:w1", "--arg", "x=f64[10"],
        "unsupported_op": ["inspect", f"{paths['bad']}:unsupported", "--arg", "x=f64[4]"],
        "trace_error_verbose": ["inspect", f"{paths['bad']}:branchy", "--arg", "x=f64[4]", "--strict",
                                "--verbose"],
        "unknown_fn": ["graph", f"{LOSSES}:w9", "--arg", "x=f64[3]"],
        "unknown_op": ["rules", "tanhh"],
        "bad_demo_size": ["demo", "--size", "many"],
        "bench": ["bench", "--only", "W4", "--impls", "sg-vg", "--parts", "table", "--samples", "7",
                  "--min-sample-time", "0.001", "--json", str(paths["dir"] / "bench.json")],
    }
    # `python -m symgrad.cli ARGS`, forked by a process that has imported symgrad (tests/forkserver.py)
    server = ForkServer("import numpy, numba, symgrad", cwd=REPO, env=_env())
    procs = {name: server.start("-m", "symgrad.cli", args, cwd=REPO) for name, args in cmds.items()}

    class Lazy(dict):
        def __missing__(self, name):
            self[name] = Result(server.wait(procs.pop(name), timeout=300))
            return self[name]

    yield Lazy()
    server.close()      # kills the processes no test read (a -k selection)


def run_main(capsys, *argv) -> Result:
    """The same command in this process (``symgrad.cli.main``), for the cases that need no new process."""
    from symgrad.cli import main

    r = Result.__new__(Result)
    r.returncode = main(list(argv))
    captured = capsys.readouterr()
    r.stdout, r.stderr = captured.out, captured.err
    return r


# --- help ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["demo", "inspect", "rules", "graph"])
def test_help_documents_every_option_with_an_example(command):
    from symgrad.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    text = sub.format_help()
    assert "examples:" in text and f"symgrad {command}" in text
    for action in sub._actions:
        if action.dest == "help":
            continue
        name = action.option_strings[-1] if action.option_strings else action.metavar or action.dest
        assert action.help and "example" in action.help, f"{command} {name}: no example in its help"
        assert name in text


def test_help_runs_as_a_process(runs):
    r = runs["help"]
    assert r.returncode == 0, r
    for option in ("--arg", "--wrt", "--section", "--json", "--out", "--no-cache", "--seed", "--verbose"):
        assert option in r.stdout
    assert "examples/losses.py:w1 --arg x=f64[1000]" in r.stdout


# --- demo ------------------------------------------------------------------------------------------

def test_demo_compiles_checks_and_times(runs):
    r = runs["demo"]
    assert r.returncode == 0, r
    out = r.stdout
    for text in ("SumBackward0", "forward IR:", "def forward(", "def backward(", "compiled vs eager", "-> OK",
                 "finite differences", "symgrad eager", "symgrad.compile + backward", "numpy, hand-written"):
        assert text in out, text
    assert "MISMATCH" not in out
    assert r.stderr == ""  # progress goes to a terminal only


# --- inspect ---------------------------------------------------------------------------------------

def _import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.heavy
def test_inspect_w1_prints_every_section_and_the_source_that_runs(runs, paths):
    r = runs["w1"]
    assert r.returncode == 0, r
    for title in SECTION_TITLES:
        assert title in r.stdout, title
    assert "SinBackward0  <- sin" in r.stdout and "self: grad * cos(self)" in r.stdout
    assert "saved by the forward for the backward" in r.stdout and "recomputed in the backward" in r.stdout
    assert "Numba cache:" in r.stdout and "trace" in r.stdout
    out = Path(paths["out"])
    fwd_text, bwd_text = (out / "forward.py").read_text(), (out / "backward.py").read_text()
    # the printed modules are the written ones
    assert fwd_text.rstrip() in r.stdout and bwd_text.rstrip() in r.stdout

    fwd = _import_file(str(out / "forward.py"), "symgrad_test_out_forward")
    bwd = _import_file(str(out / "backward.py"), "symgrad_test_out_backward")
    x = paths["x"]
    result = fwd.forward(x)
    loss, saved = result[0], result[1:]
    (grad,) = bwd.backward(*saved, np.ones(()))

    losses = _import_file(str(REPO / LOSSES), "symgrad_test_losses")
    compiled = symgrad.compile(losses.w1)
    xt = symgrad.tensor(x, dtype=symgrad.float64, requires_grad=True)
    expected = compiled(xt)
    expected.backward()
    np.testing.assert_allclose(loss, expected.item(), rtol=1e-13)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-13)


def test_inspect_out_modules_of_a_function_with_np_max_import_and_run(tmp_path, capsys):
    src = tmp_path / "centre.py"
    src.write_text("import numpy as np\n\ndef f(v):\n    return np.sum(np.exp(v - np.max(v)))\n")
    out = tmp_path / "out"
    r = run_main(capsys, "inspect", f"{src}:f", "--arg", "v=f64[16]", "--section", "source", "--out", str(out))
    assert r.returncode == 0, r.stderr
    fwd = _import_file(str(out / "forward.py"), "symgrad_test_max_forward")
    bwd = _import_file(str(out / "backward.py"), "symgrad_test_max_backward")
    v = np.random.default_rng(0).standard_normal(16)
    result = fwd.forward(v)
    (grad,) = bwd.backward(*result[1:], np.ones(()))
    value, want = symgrad.value_and_grad(lambda v: np.sum(np.exp(v - np.max(v))))(v)
    np.testing.assert_allclose(result[0], value, rtol=1e-13)
    np.testing.assert_allclose(grad, want, rtol=1e-13)


def test_inspect_w2_json_report(runs):
    r = runs["w2"]
    assert r.returncode == 0, r
    report = json.loads(r.stdout)
    assert report["function"] == "w2" and report["wrt"] == ["x", "w", "b"]
    assert [i["type"] for i in report["inputs"]] == ["f64[1000, 1000]", "f64[1000]", "f64[1000]"]
    for key in ("ir", "joint", "rules", "partition", "source", "timings", "cache"):
        assert report[key], key
    grads = {g["input"]: g for g in report["rules"]}
    assert set(grads) == {"x", "w", "b"}
    nodes = [s["node"] for s in grads["w"]["steps"]]
    assert nodes == ["MeanBackward0", "PowBackward0", "TanhBackward0", "AddBackward0", "MulBackward0"]
    mul = grads["w"]["steps"][-1]
    assert mul["formulas"] == {"other": "grad * self"} and mul["produced"]
    assert grads["w"]["engine"]  # the broadcast gradient is summed over the rows
    part = report["partition"]
    assert part["saved_bytes"] == sum(s["bytes"] for s in part["saved"]) > 0
    assert set(report["source"]) == {"forward", "backward", "joint"}   # joint: what a scalar loss runs
    assert "def backward(" in report["source"]["backward"]["text"]
    assert report["timings"]["trace_s"] > 0 and "numba_compile_or_load_s" in report["timings"]
    assert {m["kernel"] for m in report["cache"]["kernel_modules"]} == {"forward", "backward", "joint"}


def test_inspect_w3_mlp(runs):
    r = runs["w3"]
    assert r.returncode == 0, r
    for title in SECTION_TITLES:
        assert title in r.stdout, title
    assert "X: f64[256, 64], W1: f64[64, 128] (requires grad)" in r.stdout
    for g in ("W1", "b1", "W2", "b2"):
        assert f"gradient of {g} = %" in r.stdout
    assert "gradient of X" not in r.stdout and "gradient of Y" not in r.stdout
    assert "MmBackward0  <- mm" in r.stdout and "mat2: mm(t(self), grad)" in r.stdout


def test_inspect_section_choice(capsys):
    r = run_main(capsys, "inspect", f"{REPO / LOSSES}:w1", "--arg", "x=f32[16]", "--section", "rules",
                 "--section", "partition,ir", "--json")
    assert r.returncode == 0, r
    report = json.loads(r.stdout)
    assert {"ir", "rules", "partition"} <= set(report)
    assert not {"joint", "source", "timings"} & set(report)


COMPILED_USER_FILE = '''
import symgrad


@symgrad.compile(math="libm", scalar_loss="split")
def loss(x):
    return symgrad.exp(x).sum()
'''


def test_inspect_no_cache_keeps_a_compiled_functions_options(capsys, tmp_path, monkeypatch):
    from symgrad.compiler import inspect_report

    inspected = []
    real = inspect_report.inspect_function

    def spy(compiled, *args, **kwargs):
        inspected.append(compiled.compile_options)
        return real(compiled, *args, **kwargs)

    monkeypatch.setattr(inspect_report, "inspect_function", spy)
    (tmp_path / "compiled_loss.py").write_text(COMPILED_USER_FILE)
    for extra in ([], ["--no-cache"]):
        r = run_main(capsys, "inspect", f"{tmp_path / 'compiled_loss.py'}:loss", "--arg", "x=f64[600]",
                     "--section", "ir", *extra)
        assert r.returncode == 0, r
    assert [(o.math, o.scalar_loss, o.cache) for o in inspected] == [("libm", "split", True),
                                                                     ("libm", "split", False)]


@pytest.mark.parametrize("json_out", [False, True])
def test_inspect_shows_the_eager_fallback_of_a_function_that_cannot_be_traced(capsys, paths, json_out):
    import json

    r = run_main(capsys, "inspect", f"{paths['bad']}:branchy", "--arg", "x=f64[4]",
                 *(["--json"] if json_out else []))
    assert r.returncode == 0, r
    if json_out:
        fallback = json.loads(r.stdout)["eager_fallback"]
        assert fallback["location"].startswith(f"{paths['bad']}:9 in branchy")
        assert fallback["reason"].startswith("bool(tensor)")
    else:
        assert "=== eager fallback ===" in r.stdout and f"{paths['bad']}:9 in branchy" in r.stdout
        assert "run eagerly" in r.stdout and "x: f64[4]" in r.stdout


# --- rules -----------------------------------------------------------------------------------------

def test_rules(capsys):
    r = run_main(capsys, "rules", "tanh")
    assert r.returncode == 0, r
    assert r.stdout.splitlines()[0] == "tanh(Tensor self) -> Tensor"
    assert "node: TanhBackward0" in r.stdout and "self: grad * (1 - result**2)" in r.stdout
    everything = run_main(capsys, "rules")
    assert everything.returncode == 0
    assert everything.stdout.count("    node: ") >= 80
    assert "mul.Tensor(Tensor self, Tensor other) -> Tensor" in everything.stdout


# --- graph -----------------------------------------------------------------------------------------

def test_graph_dot(runs, paths):
    r = runs["graph"]
    assert r.returncode == 0, r
    dot = r.stdout
    assert dot.startswith("digraph") and "cluster_grad_fn" in dot and "cluster_ir" in dot
    for text in ("MulBackward0", "TanhBackward0", "MeanBackward0", 'label="x\\nf64[4, 3]"', 'label="w\\nf64[3]"',
                 'label="saved\\nf64[4, 3]"', "mul.Tensor  # w*x"):
        assert text in dot, text


def test_graph_joint_to_a_file(capsys, tmp_path):
    r = run_main(capsys, "graph", f"{REPO / LOSSES}:w1", "--arg", "x=f64[5]", "--kind", "joint", "-o",
                 str(tmp_path / "j.dot"))
    assert r.returncode == 0, r
    joint = (tmp_path / "j.dot").read_text()
    assert joint.startswith("digraph joint") and "tangent_0" in joint and "<- SinBackward0 of %sin" in joint
    assert "wrote" in r.stderr


def test_graph_without_the_dot_program(capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    r = run_main(capsys, "graph", f"{REPO / LOSSES}:w1", "--arg", "x=f64[5]", "--format", "svg")
    assert r.returncode == 1, r
    assert "`dot` program is not installed" in r.stderr and "--format dot" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(shutil.which("dot") is None, reason="the Graphviz `dot` program is not installed")
def test_graph_svg(capsys, tmp_path):
    r = run_main(capsys, "graph", f"{REPO / LOSSES}:w1", "--arg", "x=f64[5]", "-o", str(tmp_path / "w1.svg"))
    assert r.returncode == 0, r
    assert "<svg" in (tmp_path / "w1.svg").read_text()


# --- mistakes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, message", [
    ("bad_arg", "bad --arg 'x=f64[10': expected NAME=DTYPE[SHAPE]"),
    ("unsupported_op", "numpy.fft.fft is not supported"),
    ("unknown_fn", "has no function 'w9' (functions defined there: w1, w2, w3)"),
    ("unknown_op", "no op named 'tanhh' in the rule table; did you mean tanh"),
    ("bad_demo_size", "invalid int value: 'many'"),
])
def test_mistakes_are_one_message_and_status_2(runs, name, message):
    r = runs[name]
    assert r.returncode == 2, r
    assert message in r.stderr, r
    assert "Traceback" not in r.stderr
    if name != "bad_demo_size":  # argparse's own errors print the usage first
        assert len(r.stderr.strip().splitlines()) == 1, r
    assert r.stdout == ""


@pytest.mark.parametrize("argv, message", [
    (["inspect", "LOSSES:w1", "--arg", "x=q7[10]"], "unknown dtype 'q7'"),
    (["inspect", "no/such/file.py:f", "--arg", "x=f64[3]"], "cannot import no/such/file.py: no such file"),
    (["inspect", "IMPORTS_MISSING:f", "--arg", "x=f64[3]"],
     "ModuleNotFoundError: No module named 'no_such_module_anywhere'"),
    (["inspect", "LOSSES", "--arg", "x=f64[3]"], "expected FILE.py:FUNCTION"),
    (["inspect", "LOSSES:w2", "--arg", "x=f64[3,2]"], "missing --arg for parameter 'w' of w2"),
    (["inspect", "LOSSES:w1", "--arg", "y=f64[3]"], "the function has no parameter 'y' (its parameters: x)"),
    (["inspect", "LOSSES:w1", "--arg", "x=f64[3]", "--wrt", "z"], "--wrt z: the function has no parameter"),
    (["inspect", "LOSSES:w1", "--arg", "x=f64[3]", "--section", "everything"], "unknown --section 'everything'"),
    (["graph", "BAD:branchy", "--arg", "x=f64[4]", "--kind", "ir"], "TraceError: bool(tensor)"),
    (["graph", "LOSSES:w1", "--arg", "x=i64[4]", "--kind", "joint"], "needs an input that requires grad"),
])
def test_more_mistakes_in_process(capsys, paths, argv, message):
    subst = {"LOSSES": str(REPO / LOSSES), "BAD": paths["bad"], "IMPORTS_MISSING": paths["imports_missing"]}
    argv = [subst.get(a.split(":")[0], a.split(":")[0]) + (":" + a.split(":")[1] if ":" in a else "")
            if a.split(":")[0] in subst else a for a in argv]
    r = run_main(capsys, *argv)
    assert r.returncode == 2, r
    assert message in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_verbose_adds_the_traceback(runs, paths):
    r = runs["trace_error_verbose"]
    assert r.returncode == 2, r
    assert "Traceback" in r.stderr and "TraceError" in r.stderr
    assert f"{paths['bad']}:9" in r.stderr  # the user's line


def test_bench_runs_the_benchmark_suite(runs, paths):
    import json

    r = runs["bench"]
    assert r.returncode == 0, r
    assert "symgrad value_and_grad" in r.stdout
    result = json.loads((paths["dir"] / "bench.json").read_text())
    assert "W4" in json.dumps(result["workloads"]) and result["implementations"]
