"""The eager dispatch of ``symgrad/ops/registry.py``: one generated call per op and entry.

:func:`registry.apply` (arguments as one tuple) and :func:`registry.fast_call` (arguments
positionally) are generated from the same definition; these tests check that both entries agree
for simple ops, for ops with tensor-list inputs and for ops with several outputs, and that the
per-op options (float-only, forward replaced) reach both.
"""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from symgrad.autograd import anomaly
from symgrad.ops import registry
from symgrad.rules import table


def _leaves():
    rng = np.random.default_rng(0)
    return [symgrad.tensor(rng.standard_normal((2, 3)), requires_grad=True) for _ in range(3)]


def _describe(out):
    if isinstance(out, tuple):
        return tuple(_describe(o) for o in out)
    node = out.grad_fn
    return (out.tolist(), out.dtype, out._output_nr, type(node).__name__,
            None if node is None else (len(node._next), sorted(node._saved), node.__dict__.get("_edges")))


@pytest.mark.parametrize("key, args", [
    ("mul.Tensor", lambda a, b, c: (a, b)),
    ("mul.Tensor", lambda a, b, c: (a, 2)),
    ("add.Tensor", lambda a, b, c: (a, b.detach().to(symgrad.float32))),
    ("sin", lambda a, b, c: (a,)),
    ("max.dim", lambda a, b, c: (a, 1, False)),
    ("unbind.int", lambda a, b, c: (a, 0)),
    ("cat", lambda a, b, c: ([a, b, c.detach()], 0)),
    ("stack", lambda a, b, c: ([a, b], 1)),
])
def test_apply_and_fast_call_agree(key, args):
    op = registry.get(key)
    via_apply = registry.apply(op, args(*_leaves()))
    via_call = registry.fast_call(op)(*args(*_leaves()))
    assert _describe(via_apply) == _describe(via_call)


def test_list_op_records_one_edge_per_element():
    a, b, c = _leaves()
    y = registry.apply(registry.get("cat"), ([a, c.detach(), b], 0))
    assert y.grad_fn._edges == ((0, 0), (0, 1), (0, 2))
    assert [n is None for n, _ in y.grad_fn._next] == [False, True, False]
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))


def test_simple_op_saves_only_what_a_needed_gradient_reads():
    a, _, c = _leaves()
    c = c.detach()
    y = a * c  # d/da reads c; d/dc (not needed) would read a
    assert sorted(y.grad_fn._saved) == ["other"]
    c.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_anomaly_trace_ends_at_the_caller_for_both_entries():
    a, b, _ = _leaves()
    op = registry.get("mul.Tensor")
    with anomaly.detect_anomaly():
        y1 = registry.apply(op, (a, b))
        y2 = registry.fast_call(op)(a, b)
    for y in (y1, y2):  # the dispatch's own frames are left out
        last = y.grad_fn._trace[-1]
        assert __file__ in last and "test_anomaly_trace_ends_at_the_caller" in last


def _private_op(key: str, fn, **opts):
    """A fresh OpDef of the shipped rule ``key`` with its own forward (not registered)."""
    op = registry._build(table.load_rules()[key])
    registry._set_forward(op, fn, {"dtype_rule": "keep", "float_only": False, "view": False, **opts})
    return op


def test_float_only_checks_every_tensor_input_in_both_entries():
    op = _private_op("mul.Tensor", np.multiply, dtype_rule="float", float_only=True)
    x, i = symgrad.tensor([1.0, 2.0]), symgrad.tensor([1, 2])
    for call in (lambda *a: registry.apply(op, a), registry.fast_call(op)):
        with pytest.raises(RuntimeError, match=r"could not infer output dtype.*Got: int64"):
            call(x, i)
        assert call(x, x).tolist() == [1.0, 4.0]


def test_replacing_the_forward_regenerates_the_calls():
    op = _private_op("sin", np.sin)
    x = symgrad.tensor([0.5], dtype=symgrad.float64)
    registry.apply(op, (x,))
    registry.fast_call(op)(x)
    registry._set_forward(op, np.cos, {"dtype_rule": "keep", "float_only": False, "view": False})
    assert registry.apply(op, (x,)).tolist() == [np.cos(0.5)]
    assert registry.fast_call(op)(x).tolist() == [np.cos(0.5)]


def test_shape_errors_are_translated_by_both_entries():
    op = registry.get("add.Tensor")
    a, b = symgrad.tensor(np.ones(3)), symgrad.tensor(np.ones(4))
    for call in (lambda *x: registry.apply(op, x), registry.fast_call(op)):
        with pytest.raises(RuntimeError, match=r"add: the shapes \[3\] and \[4\] cannot be broadcast"):
            call(a, b)
