"""Tests of ``symgrad.trace``: what it refuses (with the user's file:line) and what it records.

Every error case checks that ``symgrad.TraceError`` is raised and that its message names this
file and the exact line of the offending statement; the expected line is found in the traced
function's own source (``_line_of``), so editing this file does not break the tests.
"""

from __future__ import annotations

import functools
import inspect
import os
import re

import numpy as np
import pytest

import symgrad
from benchmarks import workloads as W
from symgrad.compiler.autodiff import autodiff
from symgrad.ir import interpret

X0 = np.array([-1.5, -0.25, 0.5, 2.0])


def _line_of(fn, marker: str) -> int:
    """The line number (in this file) of the one line of ``fn``'s source that contains ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + k for k, line in enumerate(lines) if marker in line]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {fn.__name__}"
    return hits[0]


def _assert_names_line(message: str, line: int) -> None:
    locations = re.findall(r"([^\s()]+\.py):(\d+)", message)
    assert locations, f"the message names no file:line: {message!r}"
    here = os.path.abspath(__file__)
    ours = [int(n) for path, n in locations if os.path.exists(path) and os.path.samefile(path, here)]
    assert ours, f"the message does not name {os.path.basename(here)}: {message!r}"
    assert ours == [line], f"expected {os.path.basename(here)}:{line} in {message!r}"


# --------------------------------------------------------------------------- trace errors

def if_on_data(x):
    if (x > 0).sum():                                # <- offending
        return x
    return -x


def while_on_data(x):
    while x.sum() > 0:                               # <- offending
        x = x - 1.0
    return x


def float_of_data(x):
    return x * float(x.sum())                        # <- offending


def item_of_data(x):
    s = x.sum()
    return x * s.item()                              # <- offending


def numpy_of_data(x):
    a = x.numpy()                                    # <- offending
    return symgrad.tensor(a)


def mask_from_input(x):
    return x[x > 0]                                  # <- offending


def returns_dict(x):
    y = symgrad.sin(x)
    return {"y": y}                                  # <- offending


def returns_number(x):
    y = symgrad.sin(x)  # noqa: F841
    return 3.0                                       # <- offending


def returns_tuple_with_number(x):
    y = symgrad.sin(x)
    return (y, 3.0)                                  # <- offending


ERROR_CASES = [if_on_data, while_on_data, float_of_data, item_of_data, numpy_of_data, mask_from_input,
               returns_dict, returns_number, returns_tuple_with_number]


@pytest.mark.parametrize("fn", ERROR_CASES, ids=[f.__name__ for f in ERROR_CASES])
def test_trace_error_names_the_line(fn):
    with pytest.raises(symgrad.TraceError) as info:
        symgrad.trace(fn, X0)
    _assert_names_line(str(info.value), _line_of(fn, "# <- offending"))


def test_trace_error_is_a_runtime_error():
    assert issubclass(symgrad.TraceError, RuntimeError)
    assert symgrad.TraceError is symgrad.ir.TraceError


def test_trace_error_on_requires_grad_inputs_too():
    # autodiff traces with requires_grad inputs: the same checks must hold there
    with pytest.raises(symgrad.TraceError) as info:
        symgrad.trace(if_on_data, X0, requires_grad=[True])
    _assert_names_line(str(info.value), _line_of(if_on_data, "# <- offending"))


def mask_in_tuple(x):
    return x[x[:, 0] > 0, :]                         # <- offending


def test_mask_inside_a_tuple_key():
    with pytest.raises(symgrad.TraceError) as info:
        symgrad.trace(mask_in_tuple, np.arange(6.0).reshape(3, 2) - 2.0)
    _assert_names_line(str(info.value), _line_of(mask_in_tuple, "# <- offending"))


def test_tracing_leaves_no_recorder_behind_after_an_error():
    with pytest.raises(symgrad.TraceError):
        symgrad.trace(item_of_data, X0)
    t = symgrad.tensor([1.0, 2.0])
    assert (t * 2).sum().item() == 6.0          # eager reads work again


# --------------------------------------------------------------------------- what traces fine

def _ops(g) -> list[str]:
    return [n.op for n in g.nodes]


def test_python_control_flow_on_shapes_and_constants():
    def f(x, n_layers):
        y = x
        for _ in range(n_layers):                       # a Python number: unrolled
            y = symgrad.tanh(y)
        if x.ndim == 2 and x.shape[1] > 1:              # shapes are static
            y = y.sum(1)
        if len(x) > 100:
            y = y * 0.0
        return y

    x0 = np.arange(6.0).reshape(2, 3) / 6
    g = symgrad.trace(f, x0, 3)
    assert _ops(g) == ["tanh", "tanh", "tanh", "sum.dim_IntList"]
    assert [v.name for v in g.placeholders] == ["x"]
    x1 = np.linspace(-1, 1, 6).reshape(2, 3)
    np.testing.assert_allclose(interpret(g, x1)[0], np.tanh(np.tanh(np.tanh(x1))).sum(1))


def np_loss(x, w):
    return np.sum(np.sin(x) * np.exp(-x), axis=1) + np.tanh(x @ w)


def sg_loss(x, w):
    return symgrad.sum(symgrad.sin(x) * symgrad.exp(-x), dim=1) + symgrad.tanh(x @ w)


def test_plain_numpy_traces_like_symgrad():
    x0, w0 = np.linspace(-1, 1, 12).reshape(4, 3), np.array([0.5, -1.0, 2.0])
    g_np = symgrad.trace(np_loss, x0, w0)
    g_sg = symgrad.trace(sg_loss, x0, w0)
    assert _ops(g_np) == _ops(g_sg)
    assert str(g_np) == str(g_sg)
    assert "sum.dim_IntList" in _ops(g_np) and "mv" in _ops(g_np)
    x1, w1 = np.cos(x0), w0[::-1].copy()
    np.testing.assert_allclose(interpret(g_np, x1, w1)[0], np_loss(x1, w1))


def test_constants_made_inside_become_constant_nodes():
    def f(x):
        c = symgrad.tensor([1.0, 2.0, 3.0], dtype=symgrad.float64)
        return x * c + np.arange(3.0)

    g = symgrad.trace(f, np.ones((2, 3)))
    consts = [n for n in g.nodes if n.op == "constant"]
    assert len(consts) == 2
    np.testing.assert_array_equal(consts[0].data, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(consts[1].data, [0.0, 1.0, 2.0])
    assert "constant([1.0, 2.0, 3.0])" in str(g)
    assert len(g.placeholders) == 1
    x1 = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(interpret(g, x1)[0], x1 * [1, 2, 3] + [0, 1, 2])


def test_captured_tensors_become_constants():
    c = symgrad.tensor([0.5, 0.25], dtype=symgrad.float64)
    g = symgrad.trace(lambda x: x * c, np.ones(2))
    assert _ops(g) == ["constant", "mul.Tensor"]
    np.testing.assert_allclose(interpret(g, np.array([2.0, 4.0]))[0], [1.0, 1.0])


def test_python_number_arguments_are_baked_in():
    def f(x, a):
        return x * a + a

    g = symgrad.trace(f, np.ones(3), 2.5)
    assert [v.name for v in g.placeholders] == ["x"]
    assert g.nodes[0].args[1] == 2.5
    assert "mul.Tensor(%x, 2.5)" in str(g)
    np.testing.assert_allclose(interpret(g, np.arange(3.0))[0], np.arange(3.0) * 2.5 + 2.5)
    g2 = symgrad.trace(f, np.ones(3), 4.0)
    np.testing.assert_allclose(interpret(g2, np.arange(3.0))[0], np.arange(3.0) * 4.0 + 4.0)


def inplace_fn(x):
    y = x * 1
    y += 1
    y[0] = 0
    return y


def inplace_method(x):
    y = x.sin()        # SinBackward0 saves x, not y: modifying y in place is allowed
    y.mul_(x)
    return y


@pytest.mark.parametrize("fn", [inplace_fn, inplace_method])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
def test_inplace_ops_trace_correctly(fn, requires_grad):
    x0 = np.arange(6.0).reshape(2, 3) - 1.5
    g = symgrad.trace(fn, x0, requires_grad=[requires_grad])
    assert not any(n.op == "constant" for n in g.nodes), f"a value was baked in as a constant:\n{g}"
    x1 = x0 * 3 + 10
    want = fn(symgrad.tensor(x1)).numpy()
    np.testing.assert_array_equal(interpret(g, x1)[0], want, err_msg=str(g))


def test_inplace_gradient_through_autodiff():
    x0 = np.arange(6.0).reshape(2, 3) - 1.5

    def f(x):
        return inplace_fn(x).sum() + inplace_method(x).sum()

    joint = autodiff(symgrad.trace(f, x0))
    x1 = x0 / 2
    xt = symgrad.tensor(x1, requires_grad=True)
    f(xt).backward()
    value, grad = interpret(joint, x1, np.ones(()))
    np.testing.assert_allclose(value, f(symgrad.tensor(x1)).item())
    np.testing.assert_allclose(grad, xt.grad.numpy(), err_msg=str(joint))


def test_detach_is_a_node_with_no_gradient():
    def f(x):
        return (x.detach() * x).sum()

    g = symgrad.trace(f, X0)
    assert _ops(g) == ["detach", "mul.Tensor", "sum"]
    assert "detach(%x)" in str(g)
    joint = autodiff(g)
    value, grad = interpret(joint, X0, np.ones(()))
    np.testing.assert_allclose(value, np.sum(X0 * X0))
    np.testing.assert_allclose(grad, X0)           # d/dx of stop(x) * x, not 2x


def test_detach_only_path_gives_no_gradient():
    joint = autodiff(symgrad.trace(lambda x: symgrad.sin(x.detach()).sum(), X0))
    assert joint.outputs[1] is None
    assert str(joint).split("\n")[-2] == "  return (%sum, None)"
    value, grad = interpret(joint, X0, np.ones(()))
    assert grad is None
    np.testing.assert_allclose(value, np.sin(X0).sum())


def _w5_inputs(seed):
    r = np.random.default_rng(seed)
    return 3.0 * r.standard_normal((6, 5)), r.integers(0, 5, size=6, dtype=np.int64)


def test_integer_labels_stay_graph_inputs():
    L0, labels0 = _w5_inputs(0)
    g = symgrad.trace(functools.partial(W.w5_torch_like, symgrad), L0, labels0)
    assert [v.name for v in g.placeholders] == ["L", "labels"]
    assert g.placeholders[1].type_str == "i64[6]"
    index = next(n for n in g.nodes if n.op == "index.Tensor")
    assert g.placeholders[1] in index.inputs
    L1, labels1 = _w5_inputs(1)
    assert not np.array_equal(labels0, labels1)
    np.testing.assert_allclose(interpret(g, L1, labels1)[0], W.w5_numpy_forward(L1, labels1), rtol=1e-12)
    # the joint graph too: new labels move the -1/n entries of the gradient
    joint = autodiff(g)
    assert joint.wrt == [0]
    value, grad = interpret(joint, L1, labels1, np.ones(()))
    want_value, want = W.w5_numpy_value_and_grad(L1.copy(), labels1)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want["L"], rtol=1e-10, atol=1e-14)


def test_trace_does_not_touch_the_callers_arrays():
    x0 = X0.copy()
    g = symgrad.trace(inplace_fn, x0)
    np.testing.assert_array_equal(x0, X0)
    assert g.example_inputs[0] is not x0


# --- decompositions -----------------------------------------------------------------------------

@pytest.mark.parametrize("dim,keepdim", [(1, False), (0, True), ((0, 1), False), (-1, True)])
def test_logsumexp_decomposition_matches_the_op(dim, keepdim):
    from symgrad.ir import interpret

    x = np.array([[1.0, 2.0, -np.inf], [-np.inf, -np.inf, -np.inf], [3.0, 0.5, 700.0]])
    g = symgrad.trace(lambda t: symgrad.logsumexp(t, dim=dim, keepdim=keepdim), x)
    assert "logsumexp" not in [n.op for n in g.nodes]
    want = symgrad.logsumexp(symgrad.tensor(x), dim=dim, keepdim=keepdim).numpy()
    np.testing.assert_array_equal(np.isinf(interpret(g, x)[0]), np.isinf(want))
    np.testing.assert_allclose(interpret(g, x)[0], want, rtol=1e-15)
    # gradients of the decomposed graph (compiled) equal the op's own rule (eager)
    finite = np.array([[1.0, 2.0, -3.0], [0.5, -1.0, 4.0]])
    f = symgrad.compile(lambda t: (symgrad.logsumexp(t, dim=dim, keepdim=keepdim) ** 2).sum())
    a, b = symgrad.tensor(finite, requires_grad=True), symgrad.tensor(finite, requires_grad=True)
    f(a).backward()
    (symgrad.logsumexp(b, dim=dim, keepdim=keepdim) ** 2).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-13)


SOFTMAX_INPUTS = {
    "3-d": np.random.default_rng(21).standard_normal((2, 3, 5)) * 4.0,
    "large and -inf": np.array([[[700.0, 699.0, -np.inf], [1.0, -np.inf, 2.0]],
                                [[-3.0, 0.5, 0.25], [-800.0, -799.5, -801.0]]]),
}


@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("case", sorted(SOFTMAX_INPUTS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_softmax_decomposition_matches_torch(case, dim, dtype):
    torch = pytest.importorskip("torch")
    x = SOFTMAX_INPUTS[case].astype(dtype)
    g = symgrad.trace(lambda t: symgrad.softmax(t, dim=dim), x)
    assert "_softmax" not in [n.op for n in g.nodes]
    weights = np.linspace(-1.0, 2.0, x.size).reshape(x.shape).astype(dtype)

    def loss(T, t):
        return (T.softmax(t, dim=dim) ** 2 * T.tensor(weights)).sum()

    xt = torch.tensor(x, requires_grad=True)
    want = loss(torch, xt)
    want.backward()
    rtol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(interpret(g, x)[0], torch.softmax(torch.tensor(x), dim=dim).numpy(), rtol=rtol,
                               atol=1e-300 if dtype == "float64" else 1e-38)
    value, grad = symgrad.value_and_grad(lambda t: loss(symgrad, t))(x)
    assert grad.dtype == np.dtype(dtype)
    np.testing.assert_allclose(value, want.item(), rtol=rtol)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=rtol, atol=1e-6 if dtype == "float32" else 1e-13)


def test_softmax_decomposition_gives_nan_for_a_row_of_minus_inf_as_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0], [np.inf, 0.0]])
    got = symgrad.compile(lambda t: symgrad.softmax(t, dim=1))(symgrad.tensor(x)).numpy()
    want = torch.softmax(torch.tensor(x), dim=1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-15)


def test_attention_gradients_match_torch():
    """Scaled dot-product attention: softmax over the last dim of a batch of matrices, between matmuls."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(5)
    X, Wq, Wk, Wv = r.standard_normal((3, 7, 4)), *(r.standard_normal((4, 4)) for _ in range(3))

    def attention(T, X, Wq, Wk, Wv):
        Q, K, V = X @ Wq, X @ Wk, X @ Wv
        return T.sum((T.softmax(Q @ K.mT * 0.5, dim=-1) @ V) ** 2)

    value, grads = symgrad.value_and_grad(lambda *a: attention(symgrad, *a), argnums=(1, 2, 3))(X, Wq, Wk, Wv)
    ts = [torch.tensor(a, requires_grad=i > 0) for i, a in enumerate((X, Wq, Wk, Wv))]
    want = attention(torch, *ts)
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-12)
    for got, t in zip(grads, ts[1:]):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("folder", ["symgrad_demo", "numpy", "symgrad"])
def test_trace_errors_name_a_user_file_in_a_folder_named_like_a_library(tmp_path, folder, monkeypatch):
    src = tmp_path / folder / "user_loss.py"
    src.parent.mkdir()
    src.write_text("def f(x):\n    return x if x.sum().item() > 0 else -x\n")
    monkeypatch.syspath_prepend(str(src.parent))
    import importlib

    module = importlib.import_module("user_loss")
    try:
        with pytest.raises(symgrad.TraceError, match=f"{folder}.user_loss.py:2 in f"):
            symgrad.compile(module.f, strict=True)(symgrad.ones(2))
    finally:
        import sys

        sys.modules.pop("user_loss", None)
