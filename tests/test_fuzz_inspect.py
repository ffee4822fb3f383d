"""``symgrad inspect`` must work wherever the compiled function runs: the fuzzer's random programs
(tests/test_fuzz.py) through the command itself.

Each program is written to a file with its inputs as ``.npy`` files (values in the generator's domain) and
``symgrad.cli.main(["inspect", "prog.py:program", "--arg", ..., "--out", DIR])`` runs in this process, with
and without ``--no-cache``, text or ``--json``: it must exit with 0, print every section, and the modules
it writes to DIR (forward.py, backward.py and joint.py, with their .npz constants) must import on their
own and compute eager autograd's value and gradients (the report runs the backward with a cotangent of
ones, the modules are run likewise).

The CI profile inspects a sample of programs; ``SYMGRAD_FUZZ=long`` inspects many more.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np
import pytest
from fuzz_profile import dtype_names, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import _BASE, LONG, LONG_EXAMPLES, Program, assert_close, programs

import symgrad
from symgrad.cli import main

DEFAULT_EXAMPLES = 4


def _import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def _write_program(prog: Program, dtype_name: str, directory, weights, arrays, extra):
    """prog.py (the program, W and D defined at module level) and one .npy per input; the --arg list."""
    src = prog.source(dtype_name)
    head = ["import numpy as np", "import symgrad",
            f"W = symgrad.tensor(np.load({str(directory / 'W.npy')!r}), dtype=symgrad.{dtype_name})"]
    (directory / "prog.py").write_text("\n".join(head) + "\n" + src + "\n")
    np.save(directory / "W.npy", weights)
    args = []
    for k, a in enumerate(arrays):
        np.save(directory / f"v{k}.npy", a)
        args += ["--arg", f"v{k}={directory / f'v{k}.npy'}"]
    if extra:
        args += ["--arg", f"s={extra[0]!r}"]
    return str(directory / "prog.py"), args


def _eager(prog, dtype, weights, arrays, extra):
    ns = {"symgrad": symgrad, "W": symgrad.tensor(weights, dtype=dtype)}
    exec(compile(prog.source(dtype.name), "<fuzz program>", "exec"), ns)
    leaves = [symgrad.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
    out = ns["program"](*leaves, *extra)
    out.backward(symgrad.ones(out.shape, dtype=out.dtype))
    return out.detach().numpy(), [np.zeros(a.shape) if t.grad is None else t.grad.numpy()
                                  for t, a in zip(leaves, arrays)]


def run_inspect(prog: Program, dtype_name: str, tmp_path, capsys, no_cache: bool, as_json: bool):
    dtype = getattr(symgrad, dtype_name)
    rtol = 1e-9 if dtype_name == "float64" else 2e-4
    if dtype_name == "float64" and any(".to(OTHER)" in ln for ln in prog.lines):
        rtol = 1e-6
    rng = np.random.default_rng(prog.seed)
    arrays = [np.asarray(rng.uniform(0.5, 1.5, s), dtype=dtype.np) for s in prog.shapes]
    extra = [float(rng.choice([0.5, 0.75, 1.25, 2.0]))] if prog.python_arg else []
    with np.errstate(all="ignore"):
        probe = prog.function(symgrad.float64, np.ones(()))(
            *[symgrad.tensor(a.astype(np.float64)) for a in arrays], *extra)
    weights = rng.standard_normal(tuple(probe.shape))
    path, args = _write_program(prog, dtype_name, tmp_path, weights, arrays, extra)
    out_dir = tmp_path / "kernels"
    argv = ["inspect", f"{path}:program", *args, "--out", str(out_dir)]
    argv += ["--no-cache"] if no_cache else []
    argv += ["--json"] if as_json else []
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    where = f"symgrad {' '.join(argv)}\n{prog.source(dtype_name)}"
    assert code == 0, f"{where}\nexit status {code}: {captured.err[-3000:]}"
    if as_json:
        report = json.loads(captured.out)
        for key in ("ir", "joint", "rules", "partition", "source", "timings"):
            assert key in report, f"{where}: no {key!r} in the JSON report"
    else:
        for title in ("forward IR", "joint forward+backward graph", "gradients and the rules applied",
                      "generated source"):
            assert f"=== {title}" in captured.out, f"{where}: no section {title!r}"

    # the report describes the inputs as given (a 0-d .npy stays 0-d)
    short = {"float64": "f64", "float32": "f32"}[dtype_name]
    types = [f"{short}[{', '.join(str(d) for d in a.shape)}]" for a in arrays]
    if as_json:
        got_types = [i["type"] for i in report["inputs"]]
        assert got_types == types, f"{where}\ninput types {got_types}, the inputs are {types}"
    else:
        header = captured.out.split("\n", 1)[0]
        for k, t in enumerate(types):
            assert f"v{k}: {t}" in header, f"{where}\nreport header {header!r}, the inputs are {types}"

    # the written modules run on their own and compute eager's value and gradients
    want, want_grads = _eager(prog, dtype, weights, arrays, extra)
    files = sorted(os.listdir(out_dir))
    tag = f"symgrad_fuzz_inspect_{abs(hash((prog.seed, dtype_name, no_cache)))}"
    if "forward.py" in files:
        fwd = _import_file(str(out_dir / "forward.py"), tag + "_forward")
        result = fwd.forward(*arrays)
        value, saved = result[0], list(result[1:])
        assert_close(value, want, rtol, f"{where}\n--out forward.py value vs eager")
        if "backward.py" in files:
            bwd = _import_file(str(out_dir / "backward.py"), tag + "_backward")
            grads = bwd.backward(*saved, np.ones(np.shape(value), dtype=dtype.np))
            for k, g in enumerate(grads):
                assert_close(np.zeros(want_grads[k].shape) if g is None else g, want_grads[k], rtol,
                             f"{where}\n--out backward.py gradient of v{k} vs eager")
    if "joint.py" in files:
        joint = _import_file(str(out_dir / "joint.py"), tag + "_joint")
        result = joint.joint(*arrays, np.ones(np.shape(want), dtype=dtype.np))
        assert_close(result[0], want, rtol, f"{where}\n--out joint.py value vs eager")
        for k, g in enumerate(result[len(result) - len(arrays):]):
            assert_close(np.zeros(want_grads[k].shape) if g is None else g, want_grads[k], rtol,
                         f"{where}\n--out joint.py gradient of v{k} vs eager")


def _profile(default):
    base = dict(_BASE, suppress_health_check=[*_BASE["suppress_health_check"], HealthCheck.function_scoped_fixture])
    return settings(max_examples=LONG_EXAMPLES if LONG else default, **base)


def _slow_when_long(test):
    return pytest.mark.slow(test) if LONG else test


@_slow_when_long
@_profile(DEFAULT_EXAMPLES)
@given(prog=programs(max_steps=6), dtype_name=dtype_names("float64", "float64", "float32"),
       no_cache=st.booleans(), as_json=st.booleans())
@pytest.mark.heavy
def test_inspect_works_on_random_programs(prog, dtype_name, no_cache, as_json, tmp_path_factory, capsys):
    run_inspect(prog, dtype_name, tmp_path_factory.mktemp("inspect"), capsys, no_cache, as_json)
    record("inspect", dtype_name)


INSPECT_KNOWN = {
    # name: (input shapes, lines); each becomes a Program of the fuzzer
    "np_max": (((16,),), ("v1 = v0 - symgrad.amax(v0, 0, keepdim=True)",)),
    "max_all": (((3, 4),), ("v1 = v0 - v0.max()", "v2 = symgrad.exp(v1)")),
    "index_put_where": (((3, 4), (4,)), ("v2 = symgrad.where(v0 > 1.0, v0, v1)", "v3 = v2[[0, 2, 2]]")),
}


# each program with the kernel cache; --no-cache (the same kernels, built in memory) for one of them in
# the CI profile, for each under SYMGRAD_FUZZ=long
@pytest.mark.parametrize("name, no_cache", [
    pytest.param(name, no_cache, id=f"{'no-cache' if no_cache else 'cache'}-{name}")
    for no_cache in (False, True) for name in INSPECT_KNOWN if not no_cache or LONG or name == "index_put_where"])
@pytest.mark.heavy
def test_inspect_works_on_programs_with_max_and_masks(name, no_cache, tmp_path, capsys):
    shapes, lines = INSPECT_KNOWN[name]
    prog = Program(shapes, lines, "loss", "joint", "numba", False, True, 3)
    run_inspect(prog, "float64", tmp_path, capsys, no_cache, False)
