"""Tests of the compiler's IR: golden listings of the DESIGN section 6 workloads, printer
invariants, and the simplification passes (cse, dce, fold_constants, elementwise regions).

Golden files
------------
``tests/golden/<workload>_forward.txt`` holds ``str(graph)`` of the traced forward graph and
``tests/golden/<workload>_joint.txt`` that of the simplified joint graph from ``autodiff``.
The tests compare the text exactly.  After an intended change to the tracer, the printer,
autodiff or the rule table, regenerate them with

    SYMGRAD_UPDATE_GOLDEN=1 python -m pytest tests/test_ir.py

and review the diff of ``tests/golden/`` like code (a changed listing is a changed compiler).
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from pathlib import Path

import numpy as np
import pytest
import sympy

import symgrad
from benchmarks import workloads as W
from symgrad.compiler.autodiff import autodiff
from symgrad.ir import cse, dce, elementwise_regions, fold_constants, interpret, simplify
from symgrad.ir.graph import SHORT_DTYPES

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SYMGRAD_UPDATE_GOLDEN") == "1"


# --------------------------------------------------------------------------- the workloads, small

def _inputs(name: str) -> list[np.ndarray]:
    r = np.random.default_rng({"w1": 1, "w2": 2, "w3": 3, "w4": 4, "w5": 5}[name])
    if name == "w1":
        return [r.uniform(-3.0, 3.0, 8)]
    if name == "w2":
        return [r.standard_normal((4, 3)), r.standard_normal(3), r.standard_normal(3)]
    if name == "w3":
        return [r.standard_normal((5, 4)), r.standard_normal((4, 3)), r.standard_normal(3),
                r.standard_normal((3, 1)), r.standard_normal(1), r.standard_normal((5, 1))]
    if name == "w4":
        return [r.uniform(-1.0, 1.0, 10)]
    if name == "w5":
        return [3.0 * r.standard_normal((6, 5)), r.integers(0, 5, size=6, dtype=np.int64)]
    raise KeyError(name)


TORCH_LIKE = {"w1": W.w1_torch_like, "w2": W.w2_torch_like, "w3": W.w3_torch_like,
              "w4": W.w4_torch_like, "w5": W.w5_torch_like}
HAND_GRAD = {"w1": W.w1_numpy_value_and_grad, "w2": W.w2_numpy_value_and_grad,
             "w3": W.w3_numpy_value_and_grad, "w4": W.w4_numpy_value_and_grad,
             "w5": W.w5_numpy_value_and_grad}
NAMES = list(TORCH_LIKE)


def _fn(name: str):
    # a partial keeps the workload's parameter names (x, w, b, X, W1...) as placeholder names
    return functools.partial(TORCH_LIKE[name], symgrad)


def _forward(name: str):
    return symgrad.trace(_fn(name), *_inputs(name))


def _joint(name: str):
    return autodiff(symgrad.trace(_fn(name), *_inputs(name)))


def _check_golden(file_name: str, text: str) -> None:
    path = GOLDEN_DIR / file_name
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text + "\n")
        return
    assert path.exists(), f"{path} is missing: run SYMGRAD_UPDATE_GOLDEN=1 python -m pytest {__file__}"
    expected = path.read_text()
    assert text + "\n" == expected, (
        f"printed IR differs from {path} (if the change is intended, regenerate with "
        f"SYMGRAD_UPDATE_GOLDEN=1 and review the diff)")


# --------------------------------------------------------------------------- golden listings

@pytest.mark.parametrize("name", NAMES)
def test_golden_forward(name):
    _check_golden(f"{name}_forward.txt", str(_forward(name)))


@pytest.mark.parametrize("name", NAMES)
def test_golden_joint(name):
    _check_golden(f"{name}_joint.txt", str(_joint(name)))


def test_placeholder_names_are_the_workload_parameters():
    assert [v.name for v in _forward("w3").placeholders] == ["X", "W1", "b1", "W2", "b2", "Y"]
    assert [v.name for v in _forward("w5").placeholders] == ["L", "labels"]
    assert [v.name for v in _joint("w2").placeholders] == ["x", "w", "b", "tangent_0"]


# --------------------------------------------------------------------------- printer invariants

def _graph(name: str, kind: str):
    return _forward(name) if kind == "forward" else _joint(name)


GRAPH_CASES = [(name, kind) for name in NAMES for kind in ("forward", "joint")]
GRAPH_IDS = [f"{name}_{kind}" for name, kind in GRAPH_CASES]

_NODE_LINE = re.compile(r"^  (%\w+: \w+\[[\d, ]*\](?:, %\w+: \w+\[[\d, ]*\])*) = (\w[\w.]*)\((.*?)\)(?:\s+# (.*))?$")


@pytest.mark.parametrize("name,kind", GRAPH_CASES, ids=GRAPH_IDS)
def test_names_are_unique_and_readable(name, kind):
    g = _graph(name, kind)
    names = [v.name for v in g.placeholders] + [v.name for n in g.nodes for v in n.outputs]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    for n in names:
        assert n.isidentifier() and len(n) <= 20, n


@pytest.mark.parametrize("name,kind", GRAPH_CASES, ids=GRAPH_IDS)
def test_one_line_per_node(name, kind):
    g = _graph(name, kind)
    lines = str(g).split("\n")
    assert lines[0].startswith("graph(") and lines[0].endswith(") {")
    assert lines[-1] == "}"
    assert lines[-2].startswith("  return (")
    body = lines[1:-2]
    assert len(body) == len(g.nodes)
    for node, line in zip(g.nodes, body):
        m = _NODE_LINE.match(line)
        assert m, f"not a node line: {line!r}"
        assert m.group(2) == node.op
        outs = ", ".join(f"%{v.name}: {v.type_str}" for v in node.outputs)
        assert m.group(1) == outs
        # elementwise nodes show their sympy expression, the others none
        if node.expr is not None:
            assert m.group(4) == str(node.expr), line
        else:
            assert m.group(4) is None, line


def test_elementwise_nodes_carry_sympy_expressions():
    g = _forward("w1")
    exprs = {n.output.name: n.expr for n in g.nodes}
    x = sympy.Symbol("x")
    assert exprs["sin"] == sympy.sin(x)
    assert exprs["tanh"] == sympy.tanh(x)
    assert exprs["mul_2"] == x * x                      # x * x
    assert exprs["neg"] == -x
    assert exprs["sum"] is None                         # a reduction is not elementwise
    for n in g.nodes:
        if n.op != "sum":
            assert isinstance(n.expr, sympy.Expr), n.op
            # the expression reads exactly the node's inputs
            assert n.expr.free_symbols <= {v.symbol for v in n.inputs}, (n.op, n.expr)


def _type_of(arr: np.ndarray) -> str:
    arr = np.asarray(arr)
    return f"{SHORT_DTYPES.get(arr.dtype.name, arr.dtype.name)}[{', '.join(map(str, arr.shape))}]"


@pytest.mark.parametrize("name,kind", GRAPH_CASES, ids=GRAPH_IDS)
def test_printed_types_match_interpreter(name, kind):
    g = _graph(name, kind)
    text = str(g)
    values = list(g.placeholders) + [v for n in g.nodes for v in n.outputs]
    for v in values:
        assert f"{'%' if v.producer is not None else ''}{v.name}: {v.type_str}" in text
    # interpret with every value as an output, so each one's array can be compared with its type
    g.outputs = values
    arrays = interpret(g, *g.example_inputs)
    for v, a in zip(values, arrays):
        assert _type_of(a) == v.type_str, f"%{v.name} is printed {v.type_str} but evaluates to {_type_of(a)}"


# --------------------------------------------------------------------------- joint graphs

@pytest.mark.parametrize("name", NAMES)
def test_joint_returns_outputs_then_gradients(name):
    fwd = _forward(name)
    joint = _joint(name)
    n = len(fwd.placeholders)
    assert [v.name for v in joint.placeholders[:n]] == [v.name for v in fwd.placeholders]
    assert [v.name for v in joint.placeholders[n:]] == ["tangent_0"]
    assert joint.placeholders[n].type_str == fwd.outputs[0].type_str
    float_inputs = [i for i, v in enumerate(fwd.placeholders) if v.dtype.is_floating_point]
    assert joint.wrt == float_inputs
    assert len(joint.outputs) == len(fwd.outputs) + len(float_inputs)
    # the first output is the forward output (same name, as the forward graph is replayed first)
    assert joint.outputs[0].name == fwd.outputs[0].name
    # then one gradient per differentiated input, typed like that input
    for i, grad in zip(float_inputs, joint.outputs[len(fwd.outputs):]):
        assert grad is not None
        assert grad.type_str == fwd.placeholders[i].type_str


@pytest.mark.parametrize("name", NAMES)
def test_joint_values_match_hand_gradients(name):
    inputs = _inputs(name)
    fwd = _forward(name)
    joint = _joint(name)
    names = [v.name for v in fwd.placeholders]
    value, grads = HAND_GRAD[name](*[a.copy() for a in inputs])
    out = interpret(joint, *inputs, np.ones(()))
    np.testing.assert_allclose(out[0], value, rtol=1e-12)
    np.testing.assert_allclose(interpret(fwd, *inputs)[0], value, rtol=1e-12)
    got = dict(zip([names[i] for i in joint.wrt], out[1:]))
    for k, want in grads.items():
        np.testing.assert_allclose(got[k], want, rtol=1e-10, atol=1e-12, err_msg=f"{name} d/d{k}")


def test_simplify_folds_nodes_without_graph_inputs():
    """After ``simplify`` no node other than a constant should compute from constants alone.

    The pow rule's ``Piecewise((0, Eq(exponent, 0)), ...)`` with a Python exponent gives a node
    ``eq.Tensor(0, 2)`` whose arguments are all numbers; ``fold_constants`` skips it (it only
    folds nodes with at least one tensor input), so ``where(False, 0, g)`` survives too.
    """
    joint = _joint("w2")
    leftovers = [f"%{n.output.name} = {n.op}{n.args}" for n in joint.nodes
                 if n.op != "constant" and not n.inputs]
    assert not leftovers, f"nodes computed from constants only survive simplify: {leftovers}"


# --------------------------------------------------------------------------- simplify passes

def test_products_used_transposed_are_taken_with_transposed_operands():
    """``(a @ b)^T`` reaching a reshape becomes ``b^T @ a^T`` (no transposing copy), same values; a
    transposed product that only products read stays as it is."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(8)
    X, Wq, Wk = r.standard_normal((3, 5, 4)), r.standard_normal((4, 4)), r.standard_normal((4, 4))

    def f(T, X, Wq, Wk):
        Q, K = X @ Wq, X @ Wk
        return (T.tanh(Q @ K.mT) ** 2).sum()

    def reshaped_transposes(graph):
        return [n for n in graph.nodes if n.op == "view" and getattr(n.args[0].producer, "op", None) == "transpose.int"]

    g = symgrad.trace(lambda *a: f(symgrad, *a), X, Wq, Wk)
    joint = autodiff(g, [1, 2])
    assert reshaped_transposes(autodiff(g, [1, 2], simplify=False))   # the gradient of K, before simplify
    assert not reshaped_transposes(joint)
    ts = [torch.tensor(a, requires_grad=i > 0) for i, a in enumerate((X, Wq, Wk))]
    want = f(torch, *ts)
    want.backward()
    got = interpret(joint, X, Wq, Wk, np.array(1.0))
    np.testing.assert_allclose(got[0], want.item(), rtol=1e-13)
    for value, t in zip(got[1:], ts[1:]):
        np.testing.assert_allclose(value, t.grad.numpy(), rtol=1e-12, atol=1e-13)
    value, grads = symgrad.value_and_grad(lambda *a: f(symgrad, *a), argnums=(1, 2))(X, Wq, Wk)
    for value, t in zip(grads, ts[1:]):
        np.testing.assert_allclose(value, t.grad.numpy(), rtol=1e-12, atol=1e-13)
    # 2-D: no reshape of a transposed product, nothing to change
    g2 = symgrad.trace(lambda *a: f(symgrad, *a), X[0], Wq, Wk)
    passes = importlib.import_module("symgrad.ir.simplify")
    without = dce(cse(passes.peephole(fold_constants(autodiff(g2, [1, 2], simplify=False)))))
    assert str(autodiff(g2, [1, 2])) == str(without)


def test_cse_merges_duplicate_nodes():
    x0 = np.linspace(-1.0, 1.0, 5)
    g = symgrad.trace(lambda x: symgrad.sin(x) + symgrad.sin(x), x0)
    assert [n.op for n in g.nodes] == ["sin", "sin", "add.Tensor"]
    cse(g)
    assert [n.op for n in g.nodes] == ["sin", "add.Tensor"]
    add = g.nodes[1]
    assert add.args[0] is add.args[1] is g.nodes[0].output
    assert add.expr == 2 * g.nodes[0].output.symbol   # the expression was renamed too
    np.testing.assert_allclose(interpret(g, x0)[0], 2 * np.sin(x0))


def test_cse_keeps_different_constants_apart():
    x0 = np.linspace(-1.0, 1.0, 5)
    g = cse(symgrad.trace(lambda x: (x * 2.0) + (x * 3.0) + (x * 2.0), x0))
    assert [n.op for n in g.nodes].count("mul.Tensor") == 2
    np.testing.assert_allclose(interpret(g, x0)[0], 7.0 * x0)


def test_dce_drops_unused_nodes():
    x0 = np.linspace(-1.0, 1.0, 5)

    def f(x):
        unused = symgrad.cos(x) * 3.0   # noqa: F841 - dead code on purpose
        return symgrad.tanh(x)

    g = symgrad.trace(f, x0)
    assert [n.op for n in g.nodes] == ["cos", "mul.Tensor", "tanh"]
    dce(g)
    assert [n.op for n in g.nodes] == ["tanh"]
    np.testing.assert_allclose(interpret(g, x0)[0], np.tanh(x0))


def test_fold_constants_folds_an_op_on_constants():
    x0 = np.linspace(-1.0, 1.0, 3)

    def f(x):
        c = symgrad.tensor([0.5, 1.0, 2.0], dtype=symgrad.float64)
        return x * symgrad.exp(c)

    g = symgrad.trace(f, x0)
    assert [n.op for n in g.nodes] == ["constant", "exp", "mul.Tensor"]
    fold_constants(g)
    assert [n.op for n in g.nodes] == ["constant", "constant", "mul.Tensor"]
    np.testing.assert_array_equal(g.nodes[1].data, np.exp([0.5, 1.0, 2.0]))
    assert g.nodes[1].expr is None
    assert "constant([" in str(g).split("\n")[2]
    dce(g)
    assert [n.op for n in g.nodes] == ["constant", "mul.Tensor"]
    np.testing.assert_allclose(interpret(g, x0)[0], x0 * np.exp([0.5, 1.0, 2.0]))


def test_simplify_keeps_numerics():
    for name in NAMES:
        inputs = _inputs(name)
        raw = autodiff(_forward(name), simplify=False)
        tangent = [np.ones(())]
        want = interpret(raw, *inputs, *tangent)
        simplify(raw)
        got = interpret(raw, *inputs, *tangent)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_elementwise_regions_group_w1():
    g = _forward("w1")
    regions = elementwise_regions(g)
    # all ten elementwise nodes have shape [8] and are connected by producer->user edges
    # (mul_1 reads sin and exp, add reads mul_1 and mul_3...), so they are one fusion candidate:
    # a node that reads from two regions must merge them
    assert len(regions) == 1, [[n.output.name for n in r.nodes] for r in regions]
    (region,) = regions
    elementwise = [n for n in g.nodes if n.expr is not None]
    assert region.nodes == elementwise and len(elementwise) == 10
    assert [v.name for v in region.inputs] == ["x"]
    assert [v.name for v in region.outputs] == ["add"]       # only the sum reads out of the region
    x = sympy.Symbol("x")
    want = sympy.sin(x) * sympy.exp(-x * x) + sympy.log(1 + x * x) * sympy.tanh(x)
    (expr,) = region.exprs
    fx = sympy.lambdify(x, expr, "mpmath")
    fw = sympy.lambdify(x, want, "mpmath")
    for v in (-2.5, -0.3, 0.7, 1.9):
        assert abs(complex(fx(v)) - complex(fw(v))) < 1e-12


def test_region_cse_shares_repeated_subexpressions():
    x0 = np.linspace(-1.0, 1.0, 4)

    def f(x):
        a = symgrad.sin(x * x + 1.0)
        return a * a + symgrad.tanh(a) * symgrad.exp(a)

    g = symgrad.trace(f, x0)
    (region,) = elementwise_regions(g)
    replacements, reduced = region.cse()
    assert replacements, "sympy.cse found nothing to share"
    shared_ops = region.op_count([e for _, e in replacements] + list(reduced))
    unshared_ops = region.op_count()
    assert shared_ops < unshared_ops, (shared_ops, unshared_ops)
    # and the shared form computes the same thing
    env = {}
    for sym, e in replacements:
        env[sym] = e.xreplace(env)
    rebuilt = reduced[0].xreplace(env)
    assert sympy.simplify(rebuilt - region.exprs[0]) == 0

