"""numpy usage table, scipy family: ``symgrad.scipy.special`` and scipy's own functions on tensors.

* The rows run ``symgrad.scipy.special`` (``logsumexp``, ``softmax``, ``log_softmax`` and the ufuncs) through
  the usage harness (eager and compiled, against its numpy values and finite differences); a second test
  checks that those numpy values are scipy's, dtype included.
* ``scipy.special.logsumexp``/``softmax``/``log_softmax`` themselves run on tensors when ``SCIPY_ARRAY_API=1``
  is set before scipy is imported (symgrad's array API namespace): tested in a subprocess, since the
  variable must be set before the first import of scipy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import symgrad
from symgrad.scipy import special as ss
from tests.numpy_usage import Usage, check, params

sc = pytest.importorskip("scipy.special")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def N(*shape, scale=1.0, dtype=np.float64):
    return lambda r: ((r.standard_normal(shape) * scale).astype(dtype),)


def U(lo, hi, *shape):
    return lambda r: (r.uniform(lo, hi, shape),)


def with_weights(shape_a, shape_b, lo=0.2, hi=2.0):
    return lambda r: (r.standard_normal(shape_a), r.uniform(lo, hi, shape_b))


def tied(r):
    """Maxima tied within each row, with different weights: the gradient must follow the weights."""
    a = np.array([[0.0, 0.0, -1.0, -0.5], [1.0, 0.2, 1.0, 1.0]])
    return a, r.uniform(0.5, 2.0, a.shape)


def mixed_signs(r):
    """Weights of both signs whose sums keep away from 0 (the first term dominates each row)."""
    a, b = r.uniform(-1, 1, (3, 4)), r.uniform(0.2, 1.0, (3, 4))
    a[:, 0] += 3.0
    b[:, 0] *= np.array([-1.0, 1.0, -1.0])
    return a, b


# float32 arguments: first derivatives only (finite differences of float32 are too coarse for gradgradcheck)
F32 = dict(second_order=False, rtol=2e-6, atol=1e-6)

# (name, call(module, *args), arguments, differentiated positions[, Usage options]): module is scipy.special
# for the reference and symgrad.scipy.special for the row
CALLS = [
    ("logsumexp(a)", lambda m, a: m.logsumexp(a), N(3, 4), (0,)),
    ("logsumexp(a) 1-D", lambda m, a: m.logsumexp(a), N(6), (0,)),
    ("logsumexp(a) 0-d", lambda m, a: m.logsumexp(a), lambda r: (np.array(r.standard_normal()),), (0,)),
    ("logsumexp(a, axis=1)", lambda m, a: m.logsumexp(a, axis=1), N(3, 4), (0,)),
    ("logsumexp(a, axis=0)", lambda m, a: m.logsumexp(a, axis=0), N(3, 4), (0,)),
    ("logsumexp(a, axis=-1, keepdims=True)", lambda m, a: m.logsumexp(a, axis=-1, keepdims=True), N(2, 3, 4), (0,)),
    ("logsumexp(a, axis=(0, 2))", lambda m, a: m.logsumexp(a, axis=(0, 2)), N(2, 3, 4), (0,)),
    ("logsumexp(a, keepdims=True)", lambda m, a: m.logsumexp(a, keepdims=True), N(3, 4), (0,)),
    ("logsumexp(a) large", lambda m, a: m.logsumexp(a, axis=1), U(700, 720, 3, 4), (0,)),
    ("logsumexp(a) float32", lambda m, a: m.logsumexp(a, axis=0), N(3, 4, dtype=np.float32), (0,), F32),
    ("logsumexp(a, b=w)", lambda m, a, b: m.logsumexp(a, b=b), with_weights((3, 4), (3, 4)), (0, 1)),
    ("logsumexp(a, axis=1, b=w) broadcast", lambda m, a, b: m.logsumexp(a, axis=1, b=b),
     with_weights((3, 4), (4,)), (0, 1)),
    ("logsumexp(a, b=w) tied maxima", lambda m, a, b: m.logsumexp(a, axis=1, b=b), tied, (0, 1)),
    ("logsumexp(a, b=w, return_sign=True)[0]", lambda m, a, b: m.logsumexp(a, axis=1, b=b, return_sign=True)[0],
     mixed_signs, (0, 1)),
    ("logsumexp(a, b=w, return_sign=True)[1]", lambda m, a, b: m.logsumexp(a, axis=1, b=b, return_sign=True)[1],
     mixed_signs, ()),
    ("softmax(x)", lambda m, x: m.softmax(x), N(3, 4), (0,)),
    ("softmax(x, axis=1)", lambda m, x: m.softmax(x, axis=1), N(3, 4), (0,)),
    ("softmax(x, axis=(0, 1))", lambda m, x: m.softmax(x, axis=(0, 1)), N(2, 3, 2), (0,)),
    ("softmax(x, axis=0) large", lambda m, x: m.softmax(x, axis=0), U(700, 720, 4, 3), (0,)),
    ("softmax(x, axis=-1) float32", lambda m, x: m.softmax(x, axis=-1), N(3, 4, dtype=np.float32), (0,), F32),
    ("log_softmax(x)", lambda m, x: m.log_softmax(x), N(3, 4), (0,)),
    ("log_softmax(x, axis=0)", lambda m, x: m.log_softmax(x, axis=0), N(3, 4), (0,)),
    ("log_softmax(x, axis=-1) large", lambda m, x: m.log_softmax(x, axis=-1), U(700, 720, 3, 4), (0,)),
    ("log_softmax(x) 0-d", lambda m, x: m.log_softmax(x), lambda r: (np.array(r.standard_normal()),), (0,)),
    ("expit(x)", lambda m, x: m.expit(x), N(3, 4, scale=2.0), (0,)),
    ("logit(p)", lambda m, p: m.logit(p), U(0.1, 0.9, 3, 4), (0,)),
    ("erf(x)", lambda m, x: m.erf(x), N(3, 4), (0,)),
    ("erfc(x)", lambda m, x: m.erfc(x), N(3, 4), (0,)),
    ("gammaln(x)", lambda m, x: m.gammaln(x), U(0.5, 5, 3, 4), (0,)),
    ("digamma(x)", lambda m, x: m.digamma(x), U(0.5, 5, 3, 4), (0,)),
    ("psi(x)", lambda m, x: m.psi(x), U(0.5, 5, 5), (0,)),
    ("xlogy(x, y)", lambda m, x, y: m.xlogy(x, y), lambda r: (r.uniform(0.1, 2, (3, 4)), r.uniform(0.5, 2, (3, 4))),
     (0, 1)),
    ("xlog1py(x, y)", lambda m, x, y: m.xlog1py(x, y),
     lambda r: (r.uniform(0.1, 2, (3, 4)), r.uniform(-0.5, 2, (3, 4))), (0, 1)),
    ("cross-entropy with log_softmax", lambda m, z, y: -np.mean(np.sum(y * m.log_softmax(z, axis=1), axis=1)),
     lambda r: (r.standard_normal((4, 3)), np.eye(3)[[0, 2, 1, 2]]), (0,)),
]


def _usage(name, call, args, wrt, options=None) -> Usage:
    return Usage(name, lambda *a: call(ss, *a), args, wrt=wrt, grad=bool(wrt), **(options or {}))


ROWS = [_usage(*c) for c in CALLS]


@params(ROWS)
def test_usage(usage):
    check(usage)


@pytest.mark.parametrize("name,call,args", [c[:3] for c in CALLS], ids=[c[0] for c in CALLS])
def test_numpy_values_are_scipys(name, call, args):
    a = args(np.random.default_rng(0))
    got, want = call(ss, *a), call(sc, *a)
    assert type(got) is type(want), f"{name}: {type(got).__name__}, scipy {type(want).__name__}"
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


inf, nan = np.inf, np.nan
EDGES = [
    (np.array([0.0, -40.0]), {}),                                          # log1p precision: 4.2e-18, not 0
    (np.array([1.0, 2.0, 3.0]), dict(b=np.array([1.0, 1.0, -5.0]))),      # a negative sum: NaN
    (np.array([1.0, 2.0, 3.0]), dict(b=np.array([1.0, 1.0, -5.0]), return_sign=True)),
    (np.array([-inf, -inf]), {}), (np.array([-inf, -inf]), dict(return_sign=True)),
    (np.array([inf, 1.0]), {}), (np.array([inf, -inf]), dict(return_sign=True)),
    (np.array([nan, 1.0]), dict(return_sign=True)),
    (np.array([inf, 1.0]), dict(b=np.array([0.0, 1.0]))),                 # a zero weight hides inf and NaN
    (np.array([nan, 1.0]), dict(b=np.array([0.0, 2.0]))),
    (np.array([inf, 1.0]), dict(b=np.array([-1.0, 1.0]), return_sign=True)),
    (np.array([inf, 1.0]), dict(b=np.array([-1.0, 1.0]))),
    (np.array([1.0, 2.0]), dict(b=np.array([0.0, 0.0]), return_sign=True)),
    (np.array([1e-20, 0.0]), dict(b=np.array([1.0, -1.0]), return_sign=True)),
    (np.array(3.0), dict(keepdims=True)),
    (np.zeros((0, 3)), dict(axis=0)), (np.zeros((0, 3)), dict(axis=0, return_sign=True)),
    (np.zeros((2, 0)), dict(axis=0)),
    (np.arange(6), dict(axis=0)),
    ([1, 2], dict(b=[1, -1], return_sign=True)),
]


@pytest.mark.parametrize("a,kwargs", EDGES, ids=[f"{np.asarray(a).tolist()}-{sorted(k)}" for a, k in EDGES])
def test_logsumexp_edge_values_match_scipy_eagerly_and_compiled(a, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = sc.logsumexp(a, **kwargs)
    wants = want if isinstance(want, tuple) else (want,)
    got = ss.logsumexp(a, **kwargs)
    for g, w in zip(got if isinstance(got, tuple) else (got,), wants):
        assert type(g) is type(w) and np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-15, atol=0)
    arr = np.asarray(a, dtype=np.float64)
    tensor = ss.logsumexp(symgrad.tensor(arr), **kwargs)
    compiled = symgrad.compile(lambda x: ss.logsumexp(x, **kwargs), backend="numpy")(arr)
    for result in (tensor, compiled):
        for g, w in zip(result if isinstance(result, tuple) else (result,), wants):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-15, atol=0)


def test_logsumexp_gradient_at_tied_maxima_follows_the_weights():
    a = symgrad.tensor(np.zeros(2), requires_grad=True)
    b = np.array([1.0, 3.0])
    ss.logsumexp(a, b=b).backward()
    np.testing.assert_allclose(a.grad.numpy(), [0.25, 0.75], rtol=1e-15)
    _, g = symgrad.value_and_grad(lambda x: ss.logsumexp(x, b=b))(np.zeros(2))
    np.testing.assert_allclose(g, [0.25, 0.75], rtol=1e-15)


def test_gradients_are_finite_where_exp_overflows():
    x = np.array([1000.0, 1001.0, 999.0])
    _, g = symgrad.value_and_grad(lambda a: ss.logsumexp(a))(x)
    np.testing.assert_allclose(g, sc.softmax(x), rtol=1e-14)


def test_without_a_tensor_the_functions_return_numpy_values():
    x = np.array([[1.0, 2.0], [0.5, -1.0]])
    assert isinstance(ss.softmax(x, axis=1), np.ndarray)
    assert isinstance(ss.expit(x), np.ndarray)
    assert isinstance(ss.logsumexp(x), np.float64)


def test_unknown_names_say_what_exists():
    with pytest.raises(AttributeError, match=r"symgrad\.scipy\.special has no 'gamma': it has logsumexp"):
        ss.gamma   # noqa: B018


def test_traced_mask_assignment_with_a_scalar_compiles():
    """``y[mask] = 0`` with a mask computed from the inputs: recorded as where(mask, 0, y), so it compiles."""
    def f(x):
        y = x * 2.0
        y[y < 0] = 0.0
        return np.sum(y * y)

    x = np.array([[-1.0, 0.5], [2.0, -0.3]])
    for arg in (x, -x):
        value, grad = symgrad.value_and_grad(f)(arg)
        np.testing.assert_allclose(value, f(arg.copy()))
        np.testing.assert_allclose(grad, np.where(arg > 0, 8.0 * arg, 0.0))


# --- the array API namespace ----------------------------------------------------------------------

def test_namespace_functions_and_dtypes():
    x = symgrad.tensor(np.array([[1.0, -2.0], [3.0, 0.5]]))
    xp = x.__array_namespace__()
    assert xp.float64 is x.dtype and xp.isdtype(x.dtype, "real floating") and not xp.isdtype(x.dtype, "integral")
    assert xp.result_type(symgrad.tensor(np.ones(2, np.float32)), 1.0) is symgrad.float32
    assert xp.result_type(xp.int64, 1.0) is symgrad.float64
    np.testing.assert_array_equal(xp.max(x, axis=1, keepdims=True).numpy(), [[1.0], [3.0]])
    np.testing.assert_array_equal(xp.isfinite(xp.asarray([1.0, np.inf, np.nan])).numpy(), [True, False, False])
    np.testing.assert_allclose(xp.sum(xp.exp(x), axis=0).numpy(), np.exp(x.numpy()).sum(axis=0))
    with pytest.raises(AttributeError, match=r"array API namespace .* has no 'fft'"):
        xp.fft   # noqa: B018
    with pytest.raises(ValueError, match=r"implements versions"):
        x.__array_namespace__(api_version="2099.12")


# --- scipy's own functions with SCIPY_ARRAY_API=1 (a fresh interpreter) ---------------------------

_SCRIPT = textwrap.dedent('''
    import json, os, warnings
    assert os.environ["SCIPY_ARRAY_API"] == "1"
    import numpy as np, scipy.special as sc, symgrad
    from symgrad.scipy import special as ss
    report = {}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)); x[1, 2] = x[1, 0]                # a tie, b=None: exact
    CASES = {
        "logsumexp": lambda m, a: m.logsumexp(a),
        "logsumexp axis=1": lambda m, a: m.logsumexp(a, axis=1),
        "logsumexp axis=0 keepdims": lambda m, a: m.logsumexp(a, axis=0, keepdims=True),
        "logsumexp axis=(0, 1)": lambda m, a: m.logsumexp(a, axis=(0, 1)),
        "softmax": lambda m, a: m.softmax(a),
        "softmax axis=1": lambda m, a: m.softmax(a, axis=1),
        "log_softmax axis=0": lambda m, a: m.log_softmax(a, axis=0),
        "log_softmax": lambda m, a: m.log_softmax(a),
        "expit": lambda m, a: m.expit(a),
        "xlogy": lambda m, a: m.xlogy(a * a, a * a + 1.0),
    }
    # every case compiles with the numpy backend; these also with Numba (the long profile: all four)
    NUMBA = ("logsumexp axis=1", "softmax axis=1", "log_softmax axis=0", "expit") if os.environ.get(
        "SYMGRAD_FUZZ") == "long" else ("logsumexp axis=1", "expit")
    for name, call in CASES.items():
        for dtype in (np.float64, np.float32):
            a = x.astype(dtype)
            want = np.asarray(call(sc, a))                             # numpy's values (scipy on arrays)
            w = rng.standard_normal(want.shape).astype(dtype)
            loss = lambda t: np.sum(call(sc, t) * w)
            ref = symgrad.tensor(a, requires_grad=True)                # symgrad.scipy.special's own gradient
            (call(ss, ref) * symgrad.tensor(w)).sum().backward()
            want_grad = ref.grad.numpy()
            leaf = symgrad.tensor(a, requires_grad=True)               # eager, a PyTorch-face tensor
            out = call(sc, leaf)
            assert isinstance(out, symgrad.Tensor) and out.detach().numpy().dtype == want.dtype, (name, type(out))
            (out * symgrad.tensor(w)).sum().backward()
            results = {"eager": (out.detach().numpy(), leaf.grad.numpy())}
            # Numba compiles cost about a second each: the numpy backend for every case, Numba for float64 ones
            for backend in ("numpy", "numba") if dtype == np.float64 and name in NUMBA else ("numpy",):
                value, grad = symgrad.value_and_grad(symgrad.compile(loss, backend=backend))(a)
                results[backend] = (value, grad)
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(results["eager"][0], want, rtol=tol, atol=tol, err_msg=name)
            for kind, (value, grad) in results.items():
                if kind != "eager":
                    np.testing.assert_allclose(value, np.sum(want * w), rtol=tol, atol=tol, err_msg=name)
                assert grad.dtype == want.dtype, (name, kind, grad.dtype)
                np.testing.assert_allclose(grad, want_grad, rtol=tol, atol=tol, err_msg=f"{name} {kind}")
            report[f"{name} {np.dtype(dtype).name}"] = "ok"

    def refusal(fn, *args):
        try:
            fn(*args)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "no error"

    b = np.array([1.0, 3.0])
    report["b= traced"] = refusal(symgrad.grad(lambda a, b: sc.logsumexp(a, b=b)), np.zeros(2), b)
    report["b= eager requires_grad"] = refusal(lambda a, b: sc.logsumexp(a, b=b),
                                                symgrad.tensor(np.zeros(2), requires_grad=True), symgrad.tensor(b))
    report["b= no gradient"] = float(sc.logsumexp(symgrad.tensor(np.zeros(2)), b=symgrad.tensor(b)))
    report["log_softmax 0-d strict"] = refusal(symgrad.grad(lambda a: sc.log_softmax(a), strict=True), np.array(2.0))
    with warnings.catch_warnings():   # scipy branches on the value: the call falls back to eager mode
        warnings.simplefilter("ignore", symgrad.EagerFallbackWarning)
        report["log_softmax 0-d"] = float(symgrad.grad(lambda a: sc.log_softmax(a))(np.array(2.0)))
    report["gamma"] = refusal(symgrad.grad(lambda a: sc.gamma(a).sum()), np.array([1.5, 2.5]))
    print(json.dumps(report))
''')


def test_scipy_functions_with_scipy_array_api_in_a_subprocess():
    env = {**os.environ, "SCIPY_ARRAY_API": "1", "PYTHONPATH": os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sum(v == "ok" for v in report.values()) == 20
    for key in ("b= traced", "b= eager requires_grad"):
        assert report[key].startswith("TypeError: symgrad: scipy.special.logsumexp with b= on a tensor"), report[key]
        assert "symgrad.scipy.special.logsumexp" in report[key]
    np.testing.assert_allclose(report["b= no gradient"], np.log(4.0), rtol=1e-15)
    assert report["log_softmax 0-d strict"].startswith("TraceError: bool(tensor)"), report["log_softmax 0-d strict"]
    assert report["log_softmax 0-d"] == 0.0   # log_softmax of one element is 0 for every input
    assert report["gamma"].startswith("TypeError: symgrad: scipy.special.gamma is not supported"), report["gamma"]


def test_the_harness_compares_gradients_with_hips_autograd():
    """The comparison is live: a row autograd runs is compared, and a wrong gradient would fail it."""
    pytest.importorskip("autograd")
    from tests.numpy_usage import _compare_with_autograd, autograd_gradients

    usage = ROWS[[c[0] for c in CALLS].index("logsumexp(a, axis=1)")]
    args = usage.args(np.random.default_rng(0))
    weights = np.arange(3.0)
    grads, outcome = autograd_gradients(usage, args, weights, float(np.sum(usage.fn(*args) * weights)))
    assert outcome == "compared" and set(grads) == {0}
    want = sc.softmax(args[0], axis=1) * weights[:, None]
    _compare_with_autograd(usage, grads, {0: want}, "exact")
    with pytest.raises(AssertionError, match="vs HIPS autograd"):
        _compare_with_autograd(usage, grads, {0: want * (1 + 1e-7)}, "perturbed")
    assert np is usage.fn.__globals__["np"]   # the module's numpy is restored
