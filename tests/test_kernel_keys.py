"""codegen/kernel_key.py and its use by codegen/jit.py: each distinct kernel body compiles once.

Kernels that differ only in their names (kernel, parameters, locals), comments or the values of
their constant parameters share one Numba dispatcher in a process and one module in the disk
cache; each caller still gets its own values.  An RNN unrolled by a Python loop compiles one
kernel per distinct step body, not one per step, and a second function with the same bodies
loads them all from the disk cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import symgrad
from codegen import jit
from codegen.kernel_key import canonical_unit, units
from codegen.numba_emit import emit_numba

REPO = Path(__file__).resolve().parents[1]


# --- the canonical form ---------------------------------------------------------------------------

SCALED_SUM = '''@njit(error_model='numpy')
def {kernel}({x}, {out}, n0, k0):
    {acc} = 0.0
    for i0 in range(n0):
        # %{v}: f64[n0] = mul.Tensor(%{x}, k0)
        {v} = sin({x}[i0]) * k0
        {out}[i0] = {v}
        {acc} += {v}
    return ({out}, {acc})'''


def _scaled_sum(tag: str) -> str:
    return SCALED_SUM.format(kernel=f"group_{tag}", x=f"x_{tag}", out=f"out_mul_{tag}", acc=f"acc_{tag}",
                             v=f"mul_{tag}")


def test_kernels_differing_only_in_names_have_one_canonical_form():
    a, b = _scaled_sum("3"), _scaled_sum("17")
    assert a != b
    ca, cb = canonical_unit((a,)), canonical_unit((b,))
    assert ca.sources == cb.sources
    assert ca.names == {"group_3": "kernel"} and cb.names == {"group_17": "kernel"}
    assert "#" not in ca.text and "x_3" not in ca.text


@pytest.mark.parametrize("change", [
    ("sin(", "cos("),                        # another function
    ("* k0", "* 2"),                         # an integer literal stays in the key
    ("range(n0)", "range(1, n0)"),           # another loop
    ("error_model='numpy'", "error_model='numpy', fastmath=True"),   # another decorator
    ("{acc} += {v}", "{acc} += {x}[i0]"),    # another dataflow
])
def test_kernels_that_compute_differently_have_different_canonical_forms(change):
    old, new = change
    template = SCALED_SUM.replace(old, new)
    fields = dict(kernel="group_0", x="x", out="out_mul", acc="acc_0", v="mul")
    assert canonical_unit((SCALED_SUM.format(**fields),)).text != canonical_unit((template.format(**fields),)).text


def test_renaming_never_shadows_a_global():
    """A kernel reading a global that a canonical name would shadow keeps its own names."""
    src = "@njit()\ndef group_0(x, n0):\n    return x[0] * v0 + n0"
    unit = canonical_unit((src,))
    assert "v0" in unit.text and "def group_0(x, n0)" in unit.text and unit.names == {"group_0": "group_0"}


def test_a_local_read_before_it_is_written_is_renamed_consistently():
    src = textwrap.dedent("""\
        @njit()
        def group_0(x, n0):
            for i0 in range(n0):
                if i0 > 0:
                    y = last + x[i0]
                last = x[i0]
            return last""")
    canon = canonical_unit((src,)).sources[0]
    ns = {"njit": lambda **kw: (lambda f: f)}
    exec(src, ns)
    exec(canon, ns)
    assert ns["kernel"]([1.0, 2.0, 3.0], 3) == ns["group_0"]([1.0, 2.0, 3.0], 3) == 3.0


def test_kernels_that_call_each_other_form_one_unit():
    block = "@njit()\ndef row_block_0(x, lo, hi):\n    return x[lo] + x[hi - 1]"
    wrapper = "@njit(parallel=True)\ndef row_kernel_0(x, n0):\n    return row_block_0(x, 0, n0)"
    alone = "@njit()\ndef group_1(y):\n    return y"
    assert units([block, wrapper, alone]) == [(block, wrapper), (alone,)]
    unit = canonical_unit((block, wrapper))
    assert unit.names == {"row_block_0": "kernel_0", "row_kernel_0": "kernel_1"}
    assert "return kernel_0(a0, 0, a1)" in unit.sources[1]


def _code_lines(src: str) -> list[str]:
    """The lines of a generated kernel that are not only a comment, without their comments."""
    return [line.split("#", 1)[0].rstrip() for line in src.split("\n") if line.split("#", 1)[0].strip()]


def _lead(line: str) -> tuple[int, str]:
    """A line's indentation and its first word when that is a keyword or a decorator."""
    word = line.strip().split(" ", 1)[0].split("(", 1)[0]
    return len(line) - len(line.lstrip()), word if word in ("@njit", "def", "for", "if", "return") else ""


@pytest.mark.parametrize("math", ["vector", "libm"])
def test_the_canonical_text_is_the_readable_text_line_for_line(math):
    """What inspect shows (readable names, a comment per IR node) and what is compiled are the same
    statements in the same order: each canonical line is a readable code line, renamed."""
    x = np.linspace(-1, 1, 64)
    g = symgrad.trace(lambda x: (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x)).sum(), x)
    for src in emit_numba(g, "forward", math=math).kernels:
        assert src.count("# %") >= 3                                  # one comment per IR node
        canon = canonical_unit((src,)).sources[0].split("\n")
        assert [_lead(c) for c in canon] == [_lead(r) for r in _code_lines(src)]


# --- one dispatcher per canonical form ----------------------------------------------------------

@pytest.mark.parametrize("cache", [True, False])
def test_kernels_differing_in_names_and_constants_share_a_dispatcher(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path / "kc"))
    tag = f"shared{os.getpid()}{int(cache)}"          # a body of its own: not loaded by another test
    body = SCALED_SUM.replace("return (", f"{tag!r}\n    return (")
    a = body.format(kernel="group_2", x="x", out="out_mul_4", acc="acc_0", v="mul_4")
    b = body.format(kernel="group_9", x="inp", out="out_scaled", acc="acc_3", v="scaled")
    before = jit.kernel_counts()
    first = jit.load_kernels([a], cache=cache)
    second = jit.load_kernels([b], cache=cache)
    after = jit.kernel_counts()
    assert first["group_2"] is second["group_9"]
    assert (after["bodies"] - before["bodies"], after["shared"] - before["shared"]) == (1, 1)
    x = np.linspace(-2, 2, 40)
    out_a, sum_a = first["group_2"](x, np.empty(40), 40, 0.5)
    out_b, sum_b = second["group_9"](x[::-1].copy(), np.empty(40), 40, -3.0)
    np.testing.assert_allclose(out_a, np.sin(x) * 0.5, rtol=1e-15)
    np.testing.assert_allclose(out_b, np.sin(x[::-1]) * -3.0, rtol=1e-15)
    assert sum_a == pytest.approx(np.sum(np.sin(x) * 0.5), abs=1e-13)
    assert sum_b == pytest.approx(np.sum(np.sin(x[::-1]) * -3.0), abs=1e-13)
    d = first["group_2"]
    assert sum(d.stats.cache_misses.values()) + sum(d.stats.cache_hits.values()) == 1   # compiled once
    if cache:
        assert len(list((tmp_path / "kc").glob("symgrad_kernels_*.py"))) == 1


def test_compiled_functions_with_the_same_loops_share_kernels():
    """Two functions that differ in argument names and constants: one dispatcher each loop, each
    function its own values and gradients."""
    def first(x, y):
        return (symgrad.sin(x) * 0.5 + y * y).sum()

    def second(a, bias):
        return (symgrad.sin(a) * 0.25 + bias * bias).sum()

    r = np.random.default_rng(2)
    x, y = r.standard_normal(50), r.standard_normal(50)
    vg1 = symgrad.value_and_grad(first, argnums=(0, 1))
    vg2 = symgrad.value_and_grad(second, argnums=(0, 1))
    (v1, g1), (v2, g2) = vg1(x, y), vg2(x, y)
    k1 = vg1.compiled.kernels_for(x, y, wrt=[0, 1], joint_kernel=True).joint_fn.kernels
    k2 = vg2.compiled.kernels_for(x, y, wrt=[0, 1], joint_kernel=True).joint_fn.kernels
    assert {id(d) for d in k1} == {id(d) for d in k2}
    assert v1 == pytest.approx(np.sum(np.sin(x) * 0.5 + y * y), rel=1e-13)
    assert v2 == pytest.approx(np.sum(np.sin(x) * 0.25 + y * y), rel=1e-13)
    np.testing.assert_allclose(g1[0], 0.5 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(g2[0], 0.25 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(g1[1], 2 * y, rtol=1e-15)
    np.testing.assert_allclose(g2[1], 2 * y, rtol=1e-15)


# --- an RNN unrolled by a Python loop ---------------------------------------------------------------

def rnn_loss(steps: int):
    """``h = tanh(h @ W + x[t] @ U + b)`` over ``steps`` steps from ``h = 0``; the loss is ``sum(h**2)``."""
    def loss(U, W, b, x):
        h = symgrad.zeros(x.shape[1], W.shape[0], dtype=x.dtype)
        for t in range(steps):
            h = symgrad.tanh(h @ W + x[t] @ U + b)
        return (h * h).sum()
    return loss


def rnn_inputs(steps: int, batch: int = 6, features: int = 5, hidden: int = 7, seed: int = 0):
    r = np.random.default_rng(seed)
    return [0.4 * r.standard_normal((features, hidden)), 0.4 * r.standard_normal((hidden, hidden)),
            0.1 * r.standard_normal(hidden), r.standard_normal((steps, batch, features))]


def _eager_rnn(steps: int, arrays):
    leaves = [symgrad.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays)]
    out = rnn_loss(steps)(*leaves)
    out.backward()
    return out.item(), [leaves[i].grad.numpy() for i in range(3)]


def _distinct_units(kernels: list[str]) -> int:
    return len({canonical_unit(u).text for u in units(kernels)})


@pytest.mark.parametrize("steps", [6, 9])
def test_an_unrolled_rnn_compiles_each_distinct_body_once(steps, tmp_path, monkeypatch):
    # a cache of its own: another worker of the run may be writing the same bodies to the shared one
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path / "kc"))
    arrays = rnn_inputs(steps)
    vg = symgrad.value_and_grad(rnn_loss(steps), argnums=(0, 1, 2))
    value, grads = vg(*arrays)
    k = vg.compiled.kernels_for(*arrays, wrt=[0, 1, 2], joint_kernel=True)
    emitted = emit_numba(k.joint, "joint").kernels
    distinct = _distinct_units(emitted)
    assert len(emitted) >= 2 * steps and distinct <= 12 < len(emitted)
    stats = vg.compiled.stats()
    assert stats["kernels"] == distinct
    # each distinct body compiled at most once (kernels an earlier test of this process already
    # built are reused; a fresh process's exact count is checked by the disk-cache test below)
    assert stats["kernel_compiles"] <= distinct
    ref_value, ref_grads = _eager_rnn(steps, arrays)
    assert value == pytest.approx(ref_value, rel=1e-12)
    for g, ref in zip(grads, ref_grads):
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-13)


def test_the_unrolled_rnn_matches_torch():
    torch = pytest.importorskip("torch")
    steps = 5
    arrays = rnn_inputs(steps, seed=3)
    value, grads = symgrad.value_and_grad(rnn_loss(steps), argnums=(0, 1, 2))(*arrays)
    U, W, b, x = (torch.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays))
    h = torch.zeros(x.shape[1], W.shape[0], dtype=x.dtype)
    for t in range(steps):
        h = torch.tanh(h @ W + x[t] @ U + b)
    loss = (h * h).sum()
    loss.backward()
    assert value == pytest.approx(loss.item(), rel=1e-12)
    for g, ref in zip(grads, (U.grad, W.grad, b.grad)):
        np.testing.assert_allclose(g, ref.numpy(), rtol=1e-10, atol=1e-13)


# One RNN through value_and_grad in a fresh process; prints its stats and value as JSON.
RNN_PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import symgrad
    sys.path.insert(0, {tests!r})
    from test_kernel_keys import rnn_inputs, rnn_loss
    steps = int(sys.argv[1])
    vg = symgrad.value_and_grad(rnn_loss(steps), argnums=(0, 1, 2))
    value, grads = vg(*rnn_inputs(steps))
    s = vg.compiled.stats()
    print(json.dumps({{"compiles": s["kernel_compiles"], "loads": s["kernel_cache_loads"], "kernels": s["kernels"],
                      "build_cache_loads": s["build_cache_loads"], "value": value}}))
""")


def _rnn_process(cache: Path, steps: int) -> dict:
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    env.pop("NUMBA_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", RNN_PROBE.format(tests=str(REPO / "tests")), str(steps)],
                          env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
def test_a_second_function_with_the_same_bodies_loads_them_from_the_disk_cache(tmp_path):
    """RNNs of 4 and of 6 steps are different graphs (no build-cache hit), but every loop body of
    the 6-step one is among the 4-step one's: the second process compiles nothing."""
    cache = tmp_path / "cache"
    first = _rnn_process(cache, 4)
    assert first["compiles"] == first["kernels"] > 0 and first["loads"] == 0
    modules = sorted(p.name for p in cache.glob("symgrad_kernels_*.py"))
    assert len(modules) == first["kernels"]                  # one module per distinct body
    second = _rnn_process(cache, 6)
    assert second["build_cache_loads"] == 0
    assert second["compiles"] == 0 and second["loads"] == second["kernels"] > 0
    assert sorted(p.name for p in cache.glob("symgrad_kernels_*.py")) == modules
    ref_value, _ = _eager_rnn(6, rnn_inputs(6))
    assert second["value"] == pytest.approx(ref_value, rel=1e-12)


def test_inspect_shows_the_readable_kernels_of_a_shared_unit():
    """A parallel row kernel is two kernels, the wrapper calling the block; the module that inspect
    assembles holds both as generated (readable names, IR comments) under the names the glue calls."""
    from symgrad.compiler.autodiff import autodiff
    from symgrad.compiler.inspect_report import module_source

    def entropy(L):
        return symgrad.logsumexp(L, dim=1).mean()

    g = autodiff(symgrad.trace(entropy, np.ones((8, 5))), [0])
    e = emit_numba(g, "joint", parallel=True)
    assert [len(u) for u in units(e.kernels)] == [2]
    fn = e.compile(cache=False)                       # loaded, not called: nothing is compiled
    text = module_source(fn, "joint").text
    assert "def row_block_0(" in text and "def row_kernel_0(" in text and "row_block_0(" in text.split(
        "def row_kernel_0(", 1)[1]
    assert "# %" in text and "def kernel" not in text
    namespace: dict = {}
    exec(compile(text, "<inspected joint>", "exec"), namespace)
    assert callable(namespace["joint"]) and hasattr(namespace["row_kernel_0"], "py_func")
