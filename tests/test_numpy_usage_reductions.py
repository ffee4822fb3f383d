"""The numpy usage table, reductions family: scans, diff, sorting, positions, nan-reductions, counts and
the ufunc methods reduce / accumulate / outer, each run eagerly and compiled against numpy's values and
finite-difference gradients (see tests/numpy_usage.py)."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from tests.numpy_usage import Usage, check, params


def n(*shape):
    return lambda r: (r.standard_normal(shape),)


def pos(*shape):
    return lambda r: (r.uniform(0.5, 1.5, shape),)


def f32(*shape):
    return lambda r: (r.standard_normal(shape).astype(np.float32),)


def with_zeros(*shape):
    def build(r):
        x = r.uniform(0.5, 1.5, shape)
        x.reshape(-1)[[1, 4]] = 0.0  # two zeros: one row gets a zero, one row maybe two
        return (x,)
    return build


def with_nans(*shape):
    def build(r):
        x = r.standard_normal(shape)
        x.reshape(-1)[[0, 3]] = np.nan
        return (x,)
    return build


F32 = dict(rtol=1e-5, atol=1e-6, second_order=False)

ROWS = [
    # cumsum / cumprod: axis None flattens, negative axes, float32 stays float32
    Usage("np.cumsum(x)", lambda x: np.cumsum(x), n(3, 4)),
    Usage("np.cumsum(x, axis=0)", lambda x: np.cumsum(x, axis=0), n(3, 4)),
    Usage("np.cumsum(x, axis=-1)", lambda x: np.cumsum(x, axis=-1), n(2, 3, 4)),
    Usage("np.cumsum(v) 1-D", lambda x: np.cumsum(x), n(5)),
    Usage("np.cumsum(x, axis=1) float32", lambda x: np.cumsum(x, axis=1), f32(3, 4), **F32),
    Usage("np.cumprod(x)", lambda x: np.cumprod(x), pos(2, 3)),
    Usage("np.cumprod(x, axis=1)", lambda x: np.cumprod(x, axis=1), pos(3, 4)),
    Usage("np.cumprod(x, axis=0) with zeros", lambda x: np.cumprod(x, axis=0), with_zeros(3, 4)),
    Usage("np.cumprod(x, axis=1) with zeros", lambda x: np.cumprod(x, axis=1), with_zeros(2, 5)),
    Usage("np.cumprod(x, axis=-1) float32", lambda x: np.cumprod(x, axis=-1), f32(2, 3), **F32),
    # diff: order, axis, prepend/append
    Usage("np.diff(v)", lambda x: np.diff(x), n(6)),
    Usage("np.diff(x, axis=0)", lambda x: np.diff(x, axis=0), n(4, 3)),
    Usage("np.diff(x, n=2)", lambda x: np.diff(x, n=2), n(3, 5)),
    Usage("np.diff(x, n=2, axis=-2)", lambda x: np.diff(x, n=2, axis=-2), n(5, 3)),
    Usage("np.diff(v, prepend=0.0)", lambda x: np.diff(x, prepend=0.0), n(5)),
    Usage("np.diff(x, append=array)", lambda x: np.diff(x, axis=1, append=np.ones((3, 1))), n(3, 4)),
    Usage("np.diff(x, prepend=x[:, :1])", lambda x: np.diff(x, prepend=x[:, :1]), n(3, 4)),
    # sort: the gradient goes back through the permutation
    Usage("np.sort(v)", lambda x: np.sort(x), n(6)),
    Usage("np.sort(x) last axis", lambda x: np.sort(x), n(3, 4)),
    Usage("np.sort(x, axis=0)", lambda x: np.sort(x, axis=0), n(4, 3)),
    Usage("np.sort(x, axis=None)", lambda x: np.sort(x, axis=None), n(3, 4)),
    Usage("np.sort(x, kind='stable')[..., ::-1] top", lambda x: np.sort(x, kind="stable")[:, -2:], n(3, 5)),
    Usage("np.sort(x) float32", lambda x: np.sort(x, axis=1), f32(3, 4), **F32),
    # positions: integer results, no gradient, usable as indices
    Usage("np.argsort(v)", lambda x: np.argsort(x), n(6), grad=False),
    Usage("np.argsort(x, axis=0)", lambda x: np.argsort(x, axis=0), n(4, 3), grad=False),
    Usage("np.argsort(x, axis=None)", lambda x: np.argsort(x, axis=None), n(3, 4), grad=False),
    Usage("np.argmax(x)", lambda x: np.argmax(x), n(3, 4), grad=False),
    Usage("np.argmax(x, axis=1)", lambda x: np.argmax(x, axis=1), n(3, 4), grad=False),
    Usage("np.argmax(x, axis=0, keepdims=True)", lambda x: np.argmax(x, axis=0, keepdims=True), n(3, 4),
          grad=False),
    Usage("np.argmin(x, axis=-1)", lambda x: np.argmin(x, axis=-1), n(2, 3, 4), grad=False),
    Usage("np.argmin(v)", lambda x: np.argmin(x), n(7), grad=False),
    Usage("x[np.argmax(v)] picks the largest", lambda x: x[np.argmax(x)], n(6)),
    Usage("np.take_along_axis by argsort", lambda x: x[np.arange(3)[:, None], np.argsort(x, axis=1)], n(3, 4)),
    # median (via sort), ptp, average
    Usage("np.median(v) odd", lambda x: np.median(x), n(7)),
    Usage("np.median(v) even", lambda x: np.median(x), n(6)),
    Usage("np.median(x, axis=0)", lambda x: np.median(x, axis=0), n(4, 3)),
    Usage("np.median(x, axis=1, keepdims=True)", lambda x: np.median(x, axis=1, keepdims=True), n(3, 5)),
    Usage("np.ptp(x)", lambda x: np.ptp(x), n(3, 4)),
    Usage("np.ptp(x, axis=1)", lambda x: np.ptp(x, axis=1), n(3, 4)),
    Usage("np.ptp(x, axis=0, keepdims=True)", lambda x: np.ptp(x, axis=0, keepdims=True), n(3, 4)),
    Usage("np.average(x)", lambda x: np.average(x), n(3, 4)),
    Usage("np.average(x, axis=0)", lambda x: np.average(x, axis=0), n(3, 4)),
    Usage("np.average(x, weights=w) same shape", lambda x, w: np.average(x, weights=w),
          lambda r: (r.standard_normal((3, 4)), r.uniform(0.5, 1.5, (3, 4))), wrt=(0, 1)),
    Usage("np.average(x, axis=1, weights=w) 1-D weights", lambda x, w: np.average(x, axis=1, weights=w),
          lambda r: (r.standard_normal((3, 4)), r.uniform(0.5, 1.5, 4)), wrt=(0, 1)),
    Usage("np.average(x, axis=0, weights=w, keepdims=True)",
          lambda x, w: np.average(x, axis=0, weights=w, keepdims=True),
          lambda r: (r.standard_normal((3, 4)), r.uniform(0.5, 1.5, 3)), wrt=(0, 1)),
    Usage("np.average(x, axis=1, weights=w, returned=True)[0]",
          lambda x, w: np.average(x, axis=1, weights=w, returned=True)[0],
          lambda r: (r.standard_normal((3, 4)), r.uniform(0.5, 1.5, (3, 4))), wrt=(0, 1)),
    Usage("np.average(x, axis=1, weights=w, returned=True)[1]",
          lambda x, w: np.average(x, axis=1, weights=w, returned=True)[1],
          lambda r: (r.standard_normal((3, 4)), r.uniform(0.5, 1.5, (3, 4))), wrt=(1,)),
    Usage("np.median(x, axis=(0, 2)) 3-D", lambda x: np.median(x, axis=(0, 2)), n(2, 3, 3)),
    Usage("np.median(x) float32", lambda x: np.median(x, axis=0), f32(5, 3), **F32),
    Usage("np.median(x) with NaN", lambda x: np.median(x, axis=1), with_nans(2, 5), grad=False),
    Usage("np.diff(x, axis=1) 3-D float32", lambda x: np.diff(x, axis=1), f32(2, 4, 3), **F32),
    Usage("np.average(x, axis=-1, weights=w) float32", lambda x, w: np.average(x, axis=-1, weights=w),
          lambda r: (r.standard_normal((3, 4)).astype(np.float32), r.uniform(0.5, 1.5, 4).astype(np.float32)),
          wrt=(0, 1), **F32),
    # nan-reductions: NaN positions get gradient 0
    Usage("np.nansum(x)", lambda x: np.nansum(x), with_nans(3, 4)),
    Usage("np.nansum(x, axis=1)", lambda x: np.nansum(x, axis=1), with_nans(3, 4)),
    Usage("np.nansum(x, axis=0, keepdims=True)", lambda x: np.nansum(x, axis=0, keepdims=True), with_nans(3, 4)),
    Usage("np.nanmean(x)", lambda x: np.nanmean(x), with_nans(3, 4)),
    Usage("np.nanmean(x, axis=-1)", lambda x: np.nanmean(x, axis=-1), with_nans(3, 4)),
    Usage("np.nanmean(x, axis=0) no NaN", lambda x: np.nanmean(x, axis=0), n(3, 4)),
    Usage("np.nansum(x) float32", lambda x: np.nansum(x, axis=1), f32(3, 4), **F32),
    # truth and counts
    Usage("np.any(x > 1)", lambda x: np.any(x > 1), n(3, 4), grad=False),
    Usage("np.any(x > 1, axis=1)", lambda x: np.any(x > 1, axis=1), n(3, 4), grad=False),
    Usage("np.all(x > -1, axis=0)", lambda x: np.all(x > -1, axis=0), n(3, 4), grad=False),
    Usage("np.all(x, axis=1, keepdims=True)", lambda x: np.all(x, axis=1, keepdims=True),
          lambda r: (np.round(r.uniform(0, 2, (3, 4))),), grad=False),
    Usage("np.count_nonzero(x > 0)", lambda x: np.count_nonzero(x > 0), n(3, 4), grad=False),
    Usage("np.count_nonzero(x, axis=0)", lambda x: np.count_nonzero(x, axis=0),
          lambda r: (np.round(r.uniform(0, 2, (3, 4))),), grad=False),
    Usage("np.bincount(i)", lambda i: np.bincount(i), lambda r: (r.integers(0, 5, 10),), grad=False),
    Usage("np.bincount(i, minlength=8)", lambda i: np.bincount(i, minlength=8),
          lambda r: (r.integers(0, 5, 10),), grad=False),
    Usage("np.bincount(i, weights=w)", lambda i, w: np.bincount(i, weights=w),
          lambda r: (r.integers(0, 4, 8), r.standard_normal(8)), wrt=(1,)),
    # integer and bool inputs: numpy's integer results
    Usage("np.cumsum(int array, axis=1)", lambda i: np.cumsum(i, axis=1),
          lambda r: (r.integers(-5, 5, (3, 4)),), grad=False),
    Usage("np.cumprod(int array)", lambda i: np.cumprod(i), lambda r: (r.integers(-3, 4, (2, 3)),), grad=False),
    Usage("np.cumsum(bool array)", lambda x: np.cumsum(x > 0), n(6), grad=False),
    Usage("np.diff(int array)", lambda i: np.diff(i), lambda r: (r.integers(-5, 5, (3, 4)),), grad=False),
    Usage("np.diff(bool array)", lambda x: np.diff(x > 0), n(6), grad=False),
    Usage("np.sort(int array, axis=0)", lambda i: np.sort(i, axis=0), lambda r: (r.integers(-9, 9, (4, 3)),),
          grad=False),
    Usage("np.isnan(x) in a compiled where", lambda x: np.where(np.isnan(x), 0.0, x), with_nans(3, 4)),
    # ufunc methods
    Usage("np.add.reduce(x)", lambda x: np.add.reduce(x), n(3, 4)),
    Usage("np.add.reduce(x, axis=1, keepdims=True)", lambda x: np.add.reduce(x, axis=1, keepdims=True), n(3, 4)),
    Usage("np.add.reduce(x, axis=None)", lambda x: np.add.reduce(x, axis=None), n(3, 4)),
    Usage("np.multiply.reduce(x, axis=1)", lambda x: np.multiply.reduce(x, axis=1), pos(3, 4)),
    Usage("np.multiply.reduce(x, axis=0) with zeros", lambda x: np.multiply.reduce(x, axis=0), with_zeros(3, 4)),
    Usage("np.multiply.reduce(x, axis=None)", lambda x: np.multiply.reduce(x, axis=None), pos(2, 3)),
    Usage("np.maximum.reduce(x)", lambda x: np.maximum.reduce(x), n(3, 4)),
    Usage("np.maximum.reduce(x, axis=1)", lambda x: np.maximum.reduce(x, axis=1), n(3, 4)),
    Usage("np.minimum.reduce(x, axis=-1)", lambda x: np.minimum.reduce(x, axis=-1), n(2, 3, 4)),
    Usage("np.maximum.reduce(x, axis=(0, 2), keepdims=True)",
          lambda x: np.maximum.reduce(x, axis=(0, 2), keepdims=True), n(2, 3, 4)),
    Usage("np.add.reduce(x, dtype=float64) of float32", lambda x: np.add.reduce(x, axis=0, dtype=np.float64),
          f32(3, 4), **F32),
    Usage("np.add.accumulate(x)", lambda x: np.add.accumulate(x), n(3, 4)),
    Usage("np.add.accumulate(x, axis=1)", lambda x: np.add.accumulate(x, axis=1), n(3, 4)),
    Usage("np.multiply.accumulate(v)", lambda x: np.multiply.accumulate(x), pos(5)),
    Usage("np.add.outer(u, v)", lambda u, v: np.add.outer(u, v), lambda r: (r.standard_normal(3),
                                                                            r.standard_normal(4)), wrt=(0, 1)),
    Usage("np.subtract.outer(u, v)", lambda u, v: np.subtract.outer(u, v),
          lambda r: (r.standard_normal(3), r.standard_normal(4)), wrt=(0, 1)),
    Usage("np.multiply.outer(x, v) 2-D by 1-D", lambda u, v: np.multiply.outer(u, v),
          lambda r: (r.standard_normal((2, 3)), r.standard_normal(4)), wrt=(0, 1)),
    Usage("np.subtract.outer(v, const)", lambda u: np.subtract.outer(u, np.arange(3.0)), n(4)),
]


@params(ROWS)
def test_usage(usage):
    check(usage)


# --- beyond the table: torch agreement, compiled re-runs, refusals -----------------------------

torch = pytest.importorskip("torch")


def _pair(a, requires_grad=True):
    return (symgrad.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad))


@pytest.mark.parametrize("name,call", [
    ("cumsum", lambda L, x: L.cumsum(x, 1)),
    ("cumprod", lambda L, x: L.cumprod(x, 0)),
    ("sort values", lambda L, x: L.sort(x, 1)[0]),
    ("sort descending", lambda L, x: L.sort(x, 0, descending=True)[0]),
    ("diff", lambda L, x: L.diff(x, 2, 0)),
    ("diff prepend/append", lambda L, x: L.diff(x, dim=1, prepend=x[:, :1] * 2, append=x[:, -1:])),
    ("nansum", lambda L, x: L.nansum(x, 1)),
    ("nanmean", lambda L, x: L.nanmean(x, 0)),
])
def test_public_functions_match_torch(name, call):
    a = np.random.default_rng(1).standard_normal((3, 4))
    a[0, 1] = 0.0
    if name.startswith("nan"):
        a[1, 2] = np.nan
    x, tx = _pair(a)
    out, tout = call(symgrad, x), call(torch, tx)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = np.random.default_rng(2).standard_normal(tuple(tout.shape))
    out.backward(symgrad.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_integer_results_match_torch():
    a = np.random.default_rng(3).standard_normal((4, 5))
    x, tx = _pair(a, requires_grad=False)
    for fn in (lambda L, t: L.argsort(t, 1), lambda L, t: L.argsort(t, 0, descending=True),
               lambda L, t: L.argmax(t), lambda L, t: L.argmin(t, 1, keepdim=True),
               lambda L, t: L.sort(t, 1)[1], lambda L, t: L.count_nonzero(t > 0, 0)):
        np.testing.assert_array_equal(fn(symgrad, x).numpy(), fn(torch, tx).numpy())
    idx = np.array([0, 3, 3, 1, 0, 3])
    w = np.random.default_rng(4).standard_normal(6)
    np.testing.assert_array_equal(symgrad.bincount(symgrad.tensor(idx), minlength=6).numpy(),
                                  torch.bincount(torch.tensor(idx), minlength=6).numpy())
    np.testing.assert_allclose(symgrad.bincount(symgrad.tensor(idx), symgrad.tensor(w)).numpy(),
                               torch.bincount(torch.tensor(idx), torch.tensor(w)).numpy(), rtol=1e-12)


def test_cumprod_second_order_with_zeros_matches_torch():
    a = np.array([[1.5, 0.0, 2.0, 0.0, -1.0], [0.0, 0.5, -2.0, 1.0, 3.0]])
    g = np.random.default_rng(5).standard_normal(a.shape)
    x, tx = _pair(a)
    (gx,) = symgrad.autograd.grad(symgrad.cumprod(x, 1), x, symgrad.tensor(g), create_graph=True)
    (tgx,) = torch.autograd.grad(torch.cumprod(tx, 1), tx, torch.tensor(g), create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), tgx.detach().numpy(), rtol=1e-12, atol=1e-12)
    (gx ** 2).sum().backward()
    (tgx ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_compiled_nan_positions_are_tested_on_every_call():
    f = symgrad.value_and_grad(lambda x: np.nanmean(x * 2.0))
    a = np.array([1.0, np.nan, 3.0, 4.0])
    b = np.array([np.nan, 2.0, np.nan, 4.0])
    for arr in (a, b):
        value, grad = f(arr)
        assert value == pytest.approx(np.nanmean(arr * 2.0))
        np.testing.assert_allclose(grad, np.where(np.isnan(arr), 0.0, 2.0 / np.sum(~np.isnan(arr))))


def test_compiled_isnan_is_tested_on_every_call():
    f = symgrad.compile(lambda x: np.where(np.isnan(x), 0.0, x) * 2.0)
    for arr in (np.array([1.0, np.nan, 2.0]), np.array([np.nan, 1.0, 2.0])):
        np.testing.assert_array_equal(np.asarray(f(arr)), np.where(np.isnan(arr), 0.0, arr) * 2.0)


def test_compiled_bincount_refuses_a_different_length():
    f = symgrad.compile(lambda i: np.bincount(i))
    np.testing.assert_array_equal(np.asarray(f(np.array([0, 2, 2]))), [1, 0, 2])
    np.testing.assert_array_equal(np.asarray(f(np.array([1, 1, 2]))), [0, 2, 1])
    with pytest.raises(ValueError, match="bincount in a compiled function"):
        f(np.array([0, 5, 1]))
    with pytest.raises(ValueError, match="bincount in a compiled function"):
        f(np.array([0, 1, 1]))


def test_float32_stays_float32_compiled():
    x = np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)
    for fn in (lambda x: np.sum(np.cumsum(x, axis=1) ** 2), lambda x: np.sum(np.sort(x, axis=0) * x),
               lambda x: np.sum(np.cumprod(x, axis=1)), lambda x: np.nansum(x) + np.median(x)):
        value, grad = symgrad.value_and_grad(fn)(x)
        assert grad.dtype == np.float32


@pytest.mark.parametrize("call,words", [
    (lambda x: np.cumsum(x, out=np.empty(12)), ("numpy.cumsum", "out")),
    (lambda x: np.cumsum(x, axis=(0, 1)), ("numpy.cumsum", "axis")),
    (lambda x: np.sort(x, order="f"), ("numpy.sort", "order")),
    (lambda x: np.nansum(x, where=np.ones((3, 4), bool)), ("numpy.nansum", "where")),
    (lambda x: np.add.reduce(x, initial=1.0), ("numpy.add.reduce", "initial")),
    (lambda x: np.maximum.reduce(x, dtype=np.float32), ("numpy.maximum.reduce", "dtype")),
    (lambda x: np.logical_and.reduce(x), ("numpy.logical_and.reduce",)),
    (lambda x: np.add.reduceat(x, [0, 2]), ("numpy.add.reduceat",)),
    (lambda x: np.argmax(x, axis=(0, 1)), ("numpy.argmax", "axis")),
])
def test_unsupported_arguments_name_the_function(call, words):
    x = symgrad.tensor(np.ones((3, 4)), requires_grad=True)
    with pytest.raises(TypeError) as info:
        call(x)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_compiled_self_comparison_is_not_folded(backend):
    # x != x is numpy's NaN test; sympy would fold Ne(x, x) to False when printing a kernel
    f = symgrad.compile(lambda x: np.where(x != x, 0.0, x) + np.where(x == x, 1.0, -1.0), backend=backend)
    arr = np.array([1.0, np.nan, 2.0])
    np.testing.assert_array_equal(np.asarray(f(arr)), [2.0, -1.0, 3.0])
