"""The eager fallback: functions that cannot be traced (data-dependent ``if``/``while``, ``.item()``) are
differentiated eagerly by ``symgrad.grad`` / ``value_and_grad`` / ``compile``, with one warning per
function naming the line; ``strict=True`` raises the TraceError instead."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import symgrad
from symgrad.compiler.compile import EagerFallbackWarning
from symgrad.compiler.inspect_report import format_report, inspect_function, report


def sin_series(x):
    """sin by its Taylor series, summed until the terms are negligible (a data-dependent while)."""
    term, total, n = x, x, 1
    while abs(term).max() > 1e-16:  # SERIES-WHILE
        term = -term * x * x / ((2 * n) * (2 * n + 1))
        total = total + term
        n += 1
    return total.sum()


def sin_series_scalar(x):
    term, total, n = x, x, 1
    while abs(term) > 1e-16:
        term = -term * x * x / ((2 * n) * (2 * n + 1))
        total = total + term
        n += 1
    return total


def branch(x):
    if x.sum() > 0:  # BRANCH-IF
        return (x * x).sum()
    return np.sin(x).sum()


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if line.rstrip().endswith(marker))


def _fallback_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, EagerFallbackWarning)]


X = np.array([0.3, 1.2, -2.0, 2.9])


@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "compile"])
def test_taylor_series_gradient_is_cos_with_one_warning_naming_the_while(transform):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if transform == "grad":
            f = symgrad.grad(sin_series)
            results = [f(x) for x in (X, X / 2, X, X[:2])]
            for x, g in zip((X, X / 2, X, X[:2]), results):
                assert isinstance(g, np.ndarray)
                np.testing.assert_allclose(g, np.cos(x), rtol=1e-12, atol=1e-14)
        elif transform == "value_and_grad":
            f = symgrad.value_and_grad(sin_series)
            for x in (X, -X, X):
                value, g = f(x)
                assert isinstance(value, float)
                np.testing.assert_allclose(value, np.sin(x).sum(), rtol=1e-12)
                np.testing.assert_allclose(g, np.cos(x), rtol=1e-12, atol=1e-14)
        else:
            f = symgrad.compile(sin_series)
            for x in (X, -X, X):
                t = symgrad.tensor(x, requires_grad=True)
                y = f(t)
                assert type(y.grad_fn).__name__ == "SumBackward0"
                y.backward()
                np.testing.assert_allclose(y.item(), np.sin(x).sum(), rtol=1e-12)
                np.testing.assert_allclose(t.grad.numpy(), np.cos(x), rtol=1e-12, atol=1e-14)
    found = _fallback_warnings(record)
    assert len(found) == 1
    message = str(found[0].message)
    assert f"test_fallback.py:{_line('# SERIES-WHILE')} in sin_series" in message
    assert "bool(tensor)" in message and "strict=True" in message
    assert found[0].filename == __file__   # attributed to the caller's line, not symgrad's


@pytest.mark.parametrize("make", [
    lambda: symgrad.grad(sin_series, strict=True),
    lambda: symgrad.value_and_grad(sin_series, strict=True),
    lambda: symgrad.compile(sin_series, strict=True),
    lambda: symgrad.grad(symgrad.compile(sin_series, strict=True)),   # the compiled function's option
], ids=["grad", "value_and_grad", "compile", "grad-of-strict-compiled"])
def test_strict_keeps_the_trace_error(make, recwarn):
    f = make()
    with pytest.raises(symgrad.TraceError, match=r"bool\(tensor\).*test_fallback.py:\d+ in sin_series"):
        f(X)
    assert not _fallback_warnings(recwarn)


def test_setting_strict_after_a_fallback_raises_again(recwarn):
    f = symgrad.compile(branch)
    f(X)
    f.options["strict"] = True
    with pytest.raises(symgrad.TraceError, match="bool"):
        f(X)


def test_strict_false_overrides_a_strict_compiled_function():
    vg = symgrad.value_and_grad(symgrad.compile(sin_series, strict=True), strict=False)
    with pytest.warns(EagerFallbackWarning):
        np.testing.assert_allclose(vg(X)[1], np.cos(X), rtol=1e-12)


def test_stats_count_the_eager_calls_and_keep_the_reason_and_no_retrace_per_guard_key():
    calls = []

    def f(x):
        calls.append(1)
        return branch(x)

    vg = symgrad.value_and_grad(f)
    with pytest.warns(EagerFallbackWarning):
        vg(X)
    assert len(calls) == 2           # the trace that stopped, then the eager run
    vg(X + 1)
    vg(-X)
    assert len(calls) == 4           # same guard key: eager runs only, no new trace
    vg(X[:3])
    assert len(calls) == 6           # a new shape is a new guard key: tried once more
    s = vg.compiled.stats()
    assert s["calls"] == 4 and s["eager_fallbacks"] == 4 and s["traces"] == 0
    assert f"test_fallback.py:{_line('# BRANCH-IF')} in branch" in s["fallback_reason"]
    assert vg.compiled.fallback_for(X) is not None and vg.compiled.fallback_for(np.ones(7)) is None
    traced = symgrad.compile(lambda x: (x * x).sum())
    traced(X)
    assert traced.stats()["eager_fallbacks"] == 0 and traced.stats()["fallback_reason"] is None


@pytest.mark.parametrize("x", [[1.0, 2.0], [-1.0, -2.0], [3.0, -1.0], [-3.0, 0.5], [0.25, 0.5]])
def test_a_branch_takes_each_side_across_calls(x, recwarn):
    """The eager path re-runs the branch every call: no value of an earlier call is reused."""
    a = np.array(x)
    want_value = (a * a).sum() if a.sum() > 0 else np.sin(a).sum()
    want_grad = 2 * a if a.sum() > 0 else np.cos(a)
    value, g = VG_BRANCH(a)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(g, want_grad, rtol=1e-13)
    t = symgrad.tensor(a, requires_grad=True)
    y = COMPILED_BRANCH(t)
    y.backward()
    np.testing.assert_allclose(y.item(), want_value, rtol=1e-13)
    np.testing.assert_allclose(t.grad.numpy(), want_grad, rtol=1e-13)


with warnings.catch_warnings():
    warnings.simplefilter("ignore", EagerFallbackWarning)
    VG_BRANCH = symgrad.value_and_grad(branch)      # shared across the parametrised calls above
    COMPILED_BRANCH = symgrad.compile(branch)
    VG_BRANCH(X)
    COMPILED_BRANCH(symgrad.tensor(X, requires_grad=True))


def test_nested_grad_of_a_fallback_function(recwarn):
    d2 = symgrad.grad(symgrad.grad(sin_series_scalar))
    for x in (0.7, -1.3, 2.5):
        np.testing.assert_allclose(d2(np.array(x)), -np.sin(x), rtol=1e-11)
        np.testing.assert_allclose(d2(x), -np.sin(x), rtol=1e-11)
    d3 = symgrad.grad(symgrad.grad(symgrad.grad(sin_series_scalar)))
    np.testing.assert_allclose(d3(np.array(0.4)), -np.cos(0.4), rtol=1e-10)
    found = _fallback_warnings(recwarn)
    assert len(found) == 2   # one per transformed function that traced
    assert all("sin_series_scalar cannot be traced" in str(w.message) for w in found)


def test_eager_backward_through_a_fallback_compiled_call_of_tensors_matches_torch(recwarn):
    torch = pytest.importorskip("torch")

    def f(x, w):
        h = x @ w
        if h.max() > 1:             # data-dependent: rescale large activations
            h = h / h.max()
        return h.tanh(), (h * h).sum()

    x0 = np.random.default_rng(0).normal(size=(3, 4))
    w0 = np.random.default_rng(1).normal(size=(4, 2))
    cf = symgrad.compile(f)
    x, w = symgrad.tensor(x0, requires_grad=True), symgrad.tensor(w0, requires_grad=True)
    a, b = cf(x, w)
    assert a.grad_fn is not None and b.grad_fn is not None
    (a.sum() + b).backward()
    xt, wt = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    at, bt = f(xt, wt)
    (at.sum() + bt).backward()
    np.testing.assert_allclose(a.detach().numpy(), at.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-12)
    assert len(_fallback_warnings(recwarn)) == 1 and cf.stats()["eager_fallbacks"] == 1


def numpy_style(x, y):
    """numpy semantics throughout: ddof=0 var, axis= methods, .T, astype, np.* functions."""
    spread = x.var()
    if spread.item() > 0.5:
        z = np.tanh(x @ y.T) * x.max(axis=1, keepdims=True)
    else:
        z = np.exp(-x).astype(np.float64) + np.mean(y, axis=0)
    return np.sum(z ** 2) + x.std() + spread + x.size


def numpy_style_reference(x, y):
    """The same function run by numpy itself."""
    spread = x.var()
    if spread > 0.5:
        z = np.tanh(x @ y.T) * x.max(axis=1, keepdims=True)
    else:
        z = np.exp(-x) + np.mean(y, axis=0)
    return np.sum(z ** 2) + x.std() + spread + x.size


@pytest.mark.parametrize("scale", [2.0, 0.1])
def test_numpy_callers_get_numpy_semantics_in_the_eager_run(scale, recwarn):
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(3, 4)) * scale, rng.normal(size=(3, 4))
    x_before = x.copy()
    value, (gx, gy) = symgrad.value_and_grad(numpy_style, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(value, numpy_style_reference(x, y), rtol=1e-13)
    assert isinstance(value, float) and type(gx) is np.ndarray and type(gy) is np.ndarray
    eps = 1e-6
    for k in [(0, 0), (2, 3)]:
        d = np.zeros_like(x)
        d[k] = eps
        fd = (numpy_style_reference(x + d, y) - numpy_style_reference(x - d, y)) / (2 * eps)
        np.testing.assert_allclose(gx[k], fd, rtol=1e-6)
        fd = (numpy_style_reference(x, y + d) - numpy_style_reference(x, y - d)) / (2 * eps)
        np.testing.assert_allclose(gy[k], fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(x, x_before)          # the caller's array is not written
    out = symgrad.compile(numpy_style)(x, y)              # as a compiled call returns: a PyTorch-face Tensor
    assert type(out) is symgrad.Tensor and out.grad_fn is None
    np.testing.assert_allclose(out.item(), numpy_style_reference(x, y), rtol=1e-13)


def test_a_prod_gradient_through_zeros_falls_back_and_matches_torch(recwarn):
    torch = pytest.importorskip("torch")
    x0 = np.array([[0.0, 2.0, 3.0], [1.5, 0.0, 0.0]])
    g = symgrad.grad(lambda x: (x.prod(axis=1) * np.arange(1.0, 3.0)).sum())(x0)
    xt = torch.tensor(x0, requires_grad=True)
    (xt.prod(dim=1) * torch.arange(1.0, 3.0, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(g, xt.grad.numpy())
    assert len(_fallback_warnings(recwarn)) == 1


@pytest.mark.parametrize("fn,error,match", [
    (lambda x: {"loss": x.sum()}, symgrad.TraceError, "dict"),                               # not a Tensor
    (lambda x: x.add_(1.0).sum(), symgrad.TraceError, "in-place modification of the input"),
    (lambda x: (x @ np.ones((5, 2))).sum(), RuntimeError, "cannot be multiplied"),           # shape mismatch
    (lambda x: np.sum(x > 0), TypeError, "has no gradient"),                                  # not a float
])
def test_genuine_errors_still_raise_without_a_fallback(fn, error, match, recwarn):
    vg = symgrad.value_and_grad(fn)
    with pytest.raises(error, match=match):
        vg(X)
    assert not _fallback_warnings(recwarn) and vg.compiled.stats()["eager_fallbacks"] == 0


def test_an_error_after_the_branch_comes_from_the_eager_run(recwarn):
    def f(x):
        if x.sum() > 0:
            return (x @ np.ones((5, 2))).sum()   # a shape mismatch only the eager run reaches
        return x.sum()

    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        symgrad.grad(f)(X)
    np.testing.assert_allclose(symgrad.grad(f)(-X), np.ones(4))


def test_a_compiled_function_calling_a_fallback_function_falls_back_too(recwarn):
    inner = symgrad.compile(branch)
    outer = symgrad.compile(lambda x: inner(x) * 2)
    for x0 in ([1.0, 2.0], [-1.0, -2.0]):
        t = symgrad.tensor(x0, dtype=symgrad.float64, requires_grad=True)
        y = outer(t)
        y.backward()
        a = np.array(x0)
        np.testing.assert_allclose(t.grad.numpy(), 2 * (2 * a if a.sum() > 0 else np.cos(a)), rtol=1e-13)
    assert outer.stats()["eager_fallbacks"] == 2


def test_inspect_reports_the_fallback():
    compiled = symgrad.compile(branch)
    ins = inspect_function(compiled, (X,), name="branch")
    assert ins.kernels is None and ins.fallback.data_dependent
    data = report(ins)
    assert data["eager_fallback"]["location"].endswith(f"test_fallback.py:{_line('# BRANCH-IF')} in branch")
    assert data["inputs"] == [{"name": "x", "type": "f64[4]", "bytes": 32, "requires_grad": False}]
    text = format_report(ins)
    assert "=== eager fallback ===" in text and "run eagerly" in text
    with pytest.raises(symgrad.TraceError):
        inspect_function(symgrad.compile(branch, strict=True), (X,))


XS = np.array([1.5, -0.5, 2.0])


@pytest.mark.parametrize("fn,want", [
    (lambda x: x * x.sum().item(), XS * XS.sum()),                                # .item()
    (lambda x: x * float(x.max()), XS * XS.max()),                                # float(tensor)
    (lambda x: x[int(x[2])] * x, XS[2] * XS),                                     # int(tensor) as an index
    (lambda x: x * x.tolist()[0], XS * XS[0]),                                    # .tolist()
    (lambda x: x * np.asarray(x)[1], XS * XS[1]),                                 # np.asarray of a value
    (lambda x: x[x > 0].sum() * x, XS[XS > 0].sum() * XS),                        # a mask from the inputs
    (lambda x: np.repeat(x, np.array([1, 0, 2]) * (x > -9)).sum() * x, 5.5 * XS),  # counts from the inputs
], ids=["item", "float", "int-index", "tolist", "asarray", "mask", "repeat-counts"])
def test_every_data_dependent_refusal_falls_back_to_the_eager_value(fn, want, recwarn):
    f = symgrad.compile(fn)
    got = f(XS)
    assert type(got) is symgrad.Tensor
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
    assert f.stats()["eager_fallbacks"] == 1 and len(_fallback_warnings(recwarn)) == 1
    with pytest.raises(symgrad.TraceError):
        symgrad.compile(fn, strict=True)(XS)


def _sin_series_vector(x):
    """Elementwise sin by its series: a vector result for the Jacobian transforms."""
    term, total, n = x, x, 1
    while abs(term).max() > 1e-16:
        term = -term * x * x / ((2 * n) * (2 * n + 1))
        total = total + term
        n += 1
    return total


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian", "hvp", "jvp", "vjp", "elementwise_grad"])
def test_every_transform_falls_back_on_a_data_dependent_function(transform, recwarn):
    x = np.array([0.3, -1.1, 2.0])
    v = np.array([1.0, -2.0, 0.5])
    if transform == "jacrev":
        got, want = symgrad.jacrev(_sin_series_vector)(x), np.diag(np.cos(x))
    elif transform == "jacfwd":
        got, want = symgrad.jacfwd(_sin_series_vector)(x), np.diag(np.cos(x))
    elif transform == "hessian":
        got, want = symgrad.hessian(sin_series)(x), np.diag(-np.sin(x))
    elif transform == "hvp":
        got, want = symgrad.hvp(sin_series, (x,), (v,))[0], -np.sin(x) * v
    elif transform == "jvp":
        got, want = symgrad.jvp(_sin_series_vector, (x,), (v,))[1], np.cos(x) * v
    elif transform == "vjp":
        _, pullback = symgrad.vjp(_sin_series_vector, x)
        got, want = pullback(v)[0], np.cos(x) * v
    else:
        got, want = symgrad.elementwise_grad(_sin_series_vector)(x), np.cos(x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-14)
    assert _fallback_warnings(recwarn), "the eager fallback warns"


def test_the_fallback_warning_does_not_claim_a_result_it_did_not_check():
    """The eager run is not compared with anything: the warning says what happens, not that the
    result is correct."""
    with pytest.warns(EagerFallbackWarning) as record:
        symgrad.grad(sin_series)(np.array([0.3, 1.2]))
    message = str(record[0].message)
    assert "correct" not in message and "eager autograd" in message and "strict=True" in message
