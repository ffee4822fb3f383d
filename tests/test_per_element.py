"""codegen/per_element.py: ``where`` and dtype casts (ops tagged ``per_element``) inside fused loops.

The loop fuser used to leave every node without a sympy expression to numpy, so a ``where`` between
two loops (ReLU's backward, a masked gradient) split them and wrote its operands out.  Each graph here
is compiled with the Numba backend and compared, value for value, with the numpy interpreter of the
same graph (the reference every backend is tested against); the generated code must compute the
``where``/cast inside a loop, not as a numpy call.
"""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from codegen.numba_emit import emit_numba
from codegen.per_element import statement_for
from symgrad.ir.interpreter import interpret
from symgrad.rules import facts

RTOL = {np.float64: 1e-12, np.float32: 2e-6}


def _compiled(graph, math="vector"):
    e = emit_numba(graph, "f", math=math)
    return e.compile(cache=False), e.full_source


def _check(fn, *args, math="vector"):
    graph = symgrad.trace(fn, *args)
    compiled, source = _compiled(graph, math)
    got, want = compiled(*args), interpret(graph, *args)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype
        if w.dtype.kind == "f":      # vector math and reassociated sums round the last bits differently
            np.testing.assert_allclose(g, w, rtol=RTOL[w.dtype.type], atol=RTOL[w.dtype.type])
        else:
            np.testing.assert_array_equal(g, w)
    return source


def _rng():
    return np.random.default_rng(4)


def test_where_and_to_copy_are_tagged_per_element():
    assert facts.has("where.self", "per_element") and facts.has("_to_copy", "per_element")
    assert not facts.has("mul.Tensor", "per_element")    # it has an expression: printed from it


@pytest.mark.parametrize("math", ["vector", "libm"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_relu_backward_shape_where_joins_the_loop(dtype, math):
    r = _rng()
    x, g = r.standard_normal((37, 19)).astype(dtype), r.standard_normal((37, 19)).astype(dtype)

    def f(x, g):                      # threshold_backward, then more elementwise work and a row sum
        y = symgrad.where(x <= 0.0, 0.0, g) * symgrad.tanh(x)
        return (y + 1.5).sum(dim=1)

    source = _check(f, x, g, math=math)
    assert "where(" in source and "op_where_self" not in source


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_where_broadcasts_its_operands_and_scalar(dtype):
    r = _rng()
    x = r.standard_normal((6, 5)).astype(dtype)
    mask = r.random(5) > 0.4                                # a row of conditions, broadcast over rows
    s = np.asarray(-2.5, dtype=dtype)                       # a 0-d operand

    def f(x, mask, s):
        return (symgrad.where(mask, x * 2.0, s) - x,)

    source = _check(f, x, mask, s)
    assert "op_where_self" not in source


def test_where_of_integers_and_booleans():
    r = _rng()
    labels = r.integers(-3, 7, size=50)
    x = r.standard_normal(50)

    def f(labels, x):
        valid = labels >= 0
        safe = symgrad.where(valid, labels, 0)              # an integer where
        keep = symgrad.where(valid, x > 0.0, False)         # a boolean where
        return safe * 2, keep, symgrad.where(keep, x, -1.0) + safe

    _check(f, labels, x)


@pytest.mark.parametrize("target", [symgrad.float64, symgrad.float32])
def test_cast_to_float_joins_the_loop(target):
    r = _rng()
    x = r.standard_normal(40)
    flags = r.random(40) > 0.5

    def f(x, flags):
        return ((flags.to(target) * 3.0 + x.to(target)).sum(),)

    source = _check(f, x, flags)
    assert "op__to_copy" not in source


def test_cast_to_an_integer_is_left_to_numpy():
    x = np.linspace(-3.0, 3.0, 11)
    graph = symgrad.trace(lambda x: (x * 2.0).to(symgrad.int64) + 1, x)
    cast = next(n for n in graph.nodes if n.op == "_to_copy")
    assert statement_for(cast) is None                      # numpy's float -> int conversion, not a kernel's
    compiled, _ = _compiled(graph)
    np.testing.assert_array_equal(compiled(x)[0], interpret(graph, x)[0])
