"""numpy usage table, elementwise family: numpy ufuncs, scipy.special ufuncs and rounding.

Each row is plain numpy (or scipy.special) code, run eagerly on tensors and compiled, against numpy's
values and finite-difference gradients (see :mod:`tests.numpy_usage`).  Arguments stay inside each
function's domain and away from kinks; rounding rows keep values away from the jumps, where their
gradient (0, as PyTorch's) is what finite differences see too.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import symgrad
from tests.numpy_usage import Usage, check, params

sc = pytest.importorskip("scipy.special")


def U(lo, hi, *shape):
    return lambda r: (r.uniform(lo, hi, shape),)


def U2(lo, hi, shape_a, shape_b, lo_b=None, hi_b=None):
    lo_b = lo if lo_b is None else lo_b
    hi_b = hi if hi_b is None else hi_b
    return lambda r: (r.uniform(lo, hi, shape_a), r.uniform(lo_b, hi_b, shape_b))


def away_from_integers(scale, *shape):
    """Values whose fractional part is in [0.15, 0.35] or [0.65, 0.85]: far from every rounding jump."""
    def build(r):
        whole = r.integers(-3, 4, shape).astype(np.float64)
        frac = r.choice([0.25, 0.75], size=shape) + r.uniform(-0.1, 0.1, shape)
        return ((whole + frac) * scale,)
    return build


def signed(lo, hi, *shape):
    """|x| in [lo, hi], either sign."""
    return lambda r: (r.choice([-1.0, 1.0], size=shape) * r.uniform(lo, hi, shape),)


ROWS = [
    # inverse trigonometric and hyperbolic functions
    Usage("np.arcsin(x) 1-D", lambda x: np.arcsin(x), U(-0.9, 0.9, 5)),
    Usage("np.arcsin(x) 2-D", lambda x: np.arcsin(x), U(-0.9, 0.9, 3, 4)),
    Usage("np.arccos(x)", lambda x: np.arccos(x), U(-0.9, 0.9, 3, 4)),
    Usage("np.arctan(x)", lambda x: np.arctan(x), U(-3, 3, 3, 4)),
    Usage("np.arcsinh(x)", lambda x: np.arcsinh(x), U(-3, 3, 3, 4)),
    Usage("np.arccosh(x)", lambda x: np.arccosh(x), U(1.2, 4, 3, 4)),
    Usage("np.arctanh(x)", lambda x: np.arctanh(x), U(-0.9, 0.9, 3, 4)),
    Usage("np.arctan2(y, x)", lambda y, x: np.arctan2(y, x), U2(-2, 2, (3, 4), (3, 4), 0.3, 2), wrt=(0, 1)),
    Usage("np.arctan2(y, x) broadcast", lambda y, x: np.arctan2(y, x), U2(-2, 2, (3, 1), (4,), 0.3, 2),
          wrt=(0, 1)),
    Usage("np.arctan2(y, 1.5)", lambda y: np.arctan2(y, 1.5), U(-2, 2, 5)),
    Usage("np.hypot(a, b)", lambda a, b: np.hypot(a, b), U2(0.3, 2, (3, 4), (3, 4), -2, -0.3), wrt=(0, 1)),
    Usage("np.hypot(a, 2.0)", lambda a: np.hypot(a, 2.0), U(-2, 2, 6)),
    Usage("np.deg2rad(x)", lambda x: np.deg2rad(x), U(-180, 180, 3, 4)),
    Usage("np.radians(x)", lambda x: np.radians(x), U(-180, 180, 5)),
    Usage("np.rad2deg(x)", lambda x: np.rad2deg(x), U(-3, 3, 3, 4)),
    Usage("np.degrees(x)", lambda x: np.degrees(x), U(-3, 3, 5)),
    # logarithms, exponentials, powers
    Usage("np.log10(x)", lambda x: np.log10(x), U(0.2, 5, 3, 4)),
    Usage("np.log2(x)", lambda x: np.log2(x), U(0.2, 5, 3, 4)),
    Usage("np.exp2(x)", lambda x: np.exp2(x), U(-3, 3, 3, 4)),
    Usage("np.logaddexp(a, b)", lambda a, b: np.logaddexp(a, b), U2(-3, 3, (3, 4), (3, 4)), wrt=(0, 1)),
    Usage("np.logaddexp(a, b) broadcast", lambda a, b: np.logaddexp(a, b), U2(-3, 3, (3, 1), (1, 4)),
          wrt=(0, 1)),
    Usage("np.logaddexp(a, b) large", lambda a, b: np.logaddexp(a, b), U2(700, 720, (4,), (4,)), wrt=(0, 1)),
    Usage("np.logaddexp2(a, b)", lambda a, b: np.logaddexp2(a, b), U2(-3, 3, (3, 4), (3, 4)), wrt=(0, 1)),
    Usage("np.logaddexp.reduce-free sum", lambda a: np.logaddexp(a, 0.0).sum(), U(-3, 3, 5)),
    Usage("np.cbrt(x)", lambda x: np.cbrt(x), signed(0.3, 3, 3, 4)),
    Usage("np.square(x)", lambda x: np.square(x), U(-2, 2, 3, 4)),
    Usage("np.reciprocal(x)", lambda x: np.reciprocal(x), signed(0.5, 2, 3, 4)),
    Usage("np.sign(x)", lambda x: np.sign(x) * x, signed(0.5, 2, 3, 4)),
    Usage("np.sinc(x)", lambda x: np.sinc(x), signed(0.1, 2.9, 3, 4)),
    Usage("np.sinc(x) 1-D", lambda x: np.sinc(x), signed(0.1, 2.9, 6)),
    Usage("np.fabs(x)", lambda x: np.fabs(x), signed(0.3, 2, 5)),
    Usage("np.fabs(k) integers", lambda k: np.fabs(k), lambda r: (r.integers(-9, 9, 5),), grad=False),
    # remainders and steps
    Usage("np.mod(x, 1.5)", lambda x: np.mod(x, 1.5), lambda r: (np.array([-2.9, -1.2, 0.4, 1.1, 2.2, 4.0]),)),
    Usage("np.remainder(x, y)", lambda x, y: np.remainder(x, y),
          lambda r: (np.array([[-2.9, 1.1, 2.2], [4.0, -0.4, 3.3]]), np.array([1.3, -0.7, 2.1])), wrt=(0, 1)),
    Usage("x % y", lambda x, y: x % y,
          lambda r: (np.array([-2.9, 1.1, 2.2, 4.0]), np.array([1.3, -0.7, 2.1, 0.9])), wrt=(0, 1)),
    Usage("np.fmod(x, 1.5)", lambda x: np.fmod(x, 1.5), lambda r: (np.array([-2.9, -1.2, 0.4, 1.1, 2.2, 4.0]),)),
    Usage("np.fmod(x, y)", lambda x, y: np.fmod(x, y),
          lambda r: (np.array([[-2.9, 1.1, 2.2], [4.0, -0.4, 3.3]]), np.array([1.3, -0.7, 2.1])), wrt=(0, 1)),
    Usage("np.heaviside(x, 0.5)", lambda x: np.heaviside(x, 0.5), signed(0.2, 2, 3, 4), grad=False),
    # rounding: gradient 0 away from the jumps
    Usage("np.floor(x)", lambda x: np.floor(x), away_from_integers(1.0, 3, 4)),
    Usage("np.ceil(x)", lambda x: np.ceil(x), away_from_integers(1.0, 3, 4)),
    Usage("np.rint(x)", lambda x: np.rint(x), away_from_integers(1.0, 3, 4)),
    Usage("np.trunc(x)", lambda x: np.trunc(x), away_from_integers(1.0, 3, 4)),
    Usage("np.fix(x)", lambda x: np.fix(x), away_from_integers(1.0, 5)),
    Usage("np.round(x)", lambda x: np.round(x), away_from_integers(1.0, 3, 4)),
    Usage("np.round(x, 2)", lambda x: np.round(x, 2), away_from_integers(0.01, 3, 4)),
    Usage("np.round(x, decimals=-1)", lambda x: np.round(x, decimals=-1), away_from_integers(10.0, 5)),
    Usage("np.around(x, 1)", lambda x: np.around(x, 1), away_from_integers(0.1, 5)),
    Usage("np.floor(k) integers", lambda k: np.floor(k), lambda r: (r.integers(-9, 9, (3, 4)),), grad=False),
    Usage("np.ceil(k) integers", lambda k: np.ceil(k), lambda r: (r.integers(-9, 9, 5),), grad=False),
    Usage("np.round(k, -1) integers", lambda k: np.round(k, -1), lambda r: (np.array([15, 25, -35, 44, 7]),),
          grad=False),
    Usage("np.round(x) halves to even", lambda x: np.round(x), lambda r: (np.array([0.5, 1.5, 2.5, -0.5, -1.5]),),
          grad=False),
    Usage("x - np.floor(x)", lambda x: x - np.floor(x), away_from_integers(1.0, 3, 4)),
    Usage("x * np.round(x)", lambda x: x * np.round(x), away_from_integers(1.0, 3, 4)),
    # scipy.special ufuncs
    Usage("sc.expit(x)", lambda x: sc.expit(x), U(-4, 4, 3, 4)),
    Usage("sc.logit(p)", lambda p: sc.logit(p), U(0.05, 0.95, 3, 4)),
    Usage("sc.logit(sc.expit(x))", lambda x: sc.logit(sc.expit(x)), U(-3, 3, 5)),
    Usage("sc.erf(x)", lambda x: sc.erf(x), U(-2, 2, 3, 4)),
    Usage("sc.erfc(x)", lambda x: sc.erfc(x), U(-2, 2, 3, 4)),
    Usage("sc.gammaln(x)", lambda x: sc.gammaln(x), U(0.2, 8, 3, 4)),
    Usage("sc.gammaln(x) negative", lambda x: sc.gammaln(x), lambda r: (r.uniform(0.2, 0.8, 5) - 2.0,)),
    Usage("sc.digamma(x)", lambda x: sc.digamma(x), U(0.3, 12, 3, 4)),
    Usage("sc.psi(x) negative", lambda x: sc.psi(x), lambda r: (r.uniform(0.2, 0.8, 5) - 3.0,)),
    Usage("sc.xlogy(x, y)", lambda x, y: sc.xlogy(x, y), U2(-2, 2, (3, 4), (3, 4), 0.3, 3), wrt=(0, 1)),
    Usage("sc.xlogy(p, p) entropy", lambda p: -np.sum(sc.xlogy(p, p), axis=-1), U(0.05, 1, 3, 4)),
    Usage("sc.xlog1py(x, y)", lambda x, y: sc.xlog1py(x, y), U2(-2, 2, (3, 4), (3, 4), -0.5, 3), wrt=(0, 1)),
    # float32 arguments stay float32 (first derivatives only: finite differences of float32 are too coarse
    # for gradgradcheck)
    *[Usage(f"{name} float32", fn, (lambda b: lambda r: tuple(a.astype(np.float32) for a in b(r)))(build),
            wrt=wrt, second_order=False, rtol=2e-6, atol=1e-6)
      for name, fn, build, wrt in [
          ("np.arcsin(x)", lambda x: np.arcsin(x), U(-0.9, 0.9, 3, 4), (0,)),
          ("np.logaddexp(a, b)", lambda a, b: np.logaddexp(a, b), U2(-3, 3, (3, 4), (3, 4)), (0, 1)),
          ("np.hypot(a, b)", lambda a, b: np.hypot(a, b), U2(0.3, 2, (3, 4), (4,)), (0, 1)),
          ("np.cbrt(x)", lambda x: np.cbrt(x), signed(0.3, 3, 5), (0,)),
          ("np.round(x, 1)", lambda x: np.round(x, 1), away_from_integers(0.1, 5), (0,)),
          ("sc.gammaln(x)", lambda x: sc.gammaln(x), U(0.2, 8, 3, 4), (0,)),
          ("sc.digamma(x)", lambda x: sc.digamma(x), U(0.3, 12, 3, 4), (0,)),
          ("sc.xlogy(x, y)", lambda x, y: sc.xlogy(x, y), U2(-2, 2, (3, 4), (3, 4), 0.3, 3), (0, 1)),
      ]],
    # several ufuncs together, as a loss would use them
    Usage("log-cosh via logaddexp", lambda x: np.mean(np.logaddexp(x, -x) - np.log(2.0)), U(-3, 3, 8)),
    Usage("softplus via logaddexp(0, x)", lambda x: np.logaddexp(0.0, x), U(-5, 5, 3, 4)),
    Usage("angle loss arctan2", lambda y, x: np.sum(np.square(np.arctan2(y, x) - 0.3)),
          U2(-2, 2, (6,), (6,), 0.5, 2), wrt=(0, 1)),
    Usage("binary cross-entropy with xlogy", lambda p, t: -np.mean(sc.xlogy(t, p) + sc.xlog1py(1 - t, -p)),
          lambda r: (r.uniform(0.1, 0.9, (4, 3)), (r.random((4, 3)) < 0.5).astype(np.float64))),
]


@params(ROWS)
def test_usage(usage):
    check(usage)


# --- compiled: both math modes, float64 and float32 ------------------------------------------

# (name, function, argument builder): plain numpy/scipy code, one loss per row
COMPILED = [
    ("arcsin", lambda x, y: np.arcsin(x * 0.9), None),
    ("arccos", lambda x, y: np.arccos(x * 0.9), None),
    ("arcsinh", lambda x, y: np.arcsinh(3 * x), None),
    ("arccosh", lambda x, y: np.arccosh(y + 1.0), None),
    ("arctanh", lambda x, y: np.arctanh(x * 0.9), None),
    ("arctan2", lambda x, y: np.arctan2(x, y), None),
    ("hypot", lambda x, y: np.hypot(x, y), None),
    ("log10", lambda x, y: np.log10(y), None),
    ("logaddexp", lambda x, y: np.logaddexp(x, y), None),
    ("logaddexp2", lambda x, y: np.logaddexp2(x, y), None),
    ("cbrt", lambda x, y: np.cbrt(x), None),
    ("sinc", lambda x, y: np.sinc(x + 1.05), None),
    ("deg2rad", lambda x, y: np.deg2rad(100 * x), None),
    ("rad2deg", lambda x, y: np.rad2deg(x), None),
    ("floor", lambda x, y: x * np.floor(4 * x), None),
    ("ceil", lambda x, y: x * np.ceil(4 * x), None),
    ("rint", lambda x, y: x * np.rint(4 * x), None),
    ("erfc", lambda x, y: sc.erfc(x), None),
    ("logit", lambda x, y: sc.logit(y / 2.5), None),
    ("gammaln", lambda x, y: sc.gammaln(y), None),
    ("digamma", lambda x, y: sc.digamma(y), None),
    ("xlogy", lambda x, y: sc.xlogy(x, y), None),
    ("xlog1py", lambda x, y: sc.xlog1py(x, y), None),
]


def _compiled_args(dtype):
    r = np.random.default_rng(3)
    # x in (-1, 1) away from 0 and from the rounding jumps of 4x; y in (0.3, 2.2)
    x = (r.choice([-1.0, 1.0], 16) * (np.floor(r.uniform(0, 4, 16)) + r.uniform(0.2, 0.8, 16)) / 4.2)
    y = r.uniform(0.3, 2.2, 16)
    return x.astype(dtype), y.astype(dtype)


def _fd_grads(f, x, y, eps=1e-6):
    loss = lambda a, b: float(np.sum(f(a, b)))
    out = []
    for k in range(2):
        args = [x.astype(np.float64), y.astype(np.float64)]
        g = np.zeros_like(args[k])
        for j in range(g.size):
            plus, minus = [a.copy() for a in args], [a.copy() for a in args]
            plus[k][j] += eps
            minus[k][j] -= eps
            g[j] = (loss(*plus) - loss(*minus)) / (2 * eps)
        out.append(g)
    return out


def _compile_rows(fns, math_mode):
    """One value_and_grad of ``sum_i sum(fn_i(x_i, y_i))`` over its own copies of the arguments per row,
    and one compiled function returning every row's elementwise values: two Numba builds for the whole
    table instead of two per row (each build costs a fraction of a second)."""
    def total(*xy):
        return sum(np.sum(fn(xy[2 * i], xy[2 * i + 1])) for i, fn in enumerate(fns))

    def values(*xy):
        return tuple(fn(xy[2 * i], xy[2 * i + 1]) for i, fn in enumerate(fns))

    return (symgrad.value_and_grad(total, argnums=tuple(range(2 * len(fns))), math=math_mode),
            symgrad.compile(values, math=math_mode))


@pytest.fixture(scope="module")
def compiled_table():
    """{(dtype, math): (per-row values, per-row (gx, gy), total value)} of the whole COMPILED table, or
    the exception the batch raised (each row then compiles alone, so a failure names its row)."""
    made = {}

    def get(dtype, math_mode):
        if (dtype, math_mode) not in made:
            x, y = _compiled_args(dtype)
            try:
                vg, vals = _compile_rows([fn for _, fn, _ in COMPILED], math_mode)
                args = [a.copy() for _ in COMPILED for a in (x, y)]
                value, grads = vg(*args)
                got = [g.detach().numpy() if isinstance(g, symgrad.Tensor) else np.asarray(g) for g in vals(*args)]
                made[dtype, math_mode] = (got, [grads[2 * i: 2 * i + 2] for i in range(len(COMPILED))], value)
            except Exception as exc:  # noqa: BLE001 - reported by rerunning each row alone
                made[dtype, math_mode] = exc
        return made[dtype, math_mode]

    return get


# float32 with math="libm" (Numba's float32 libm calls): under SYMGRAD_FUZZ=long; the CI profile checks
# the three other pairs
MODES = [(np.float64, "vector"), (np.float64, "libm"), (np.float32, "vector")] + \
    ([(np.float32, "libm")] if os.environ.get("SYMGRAD_FUZZ") == "long" else [])


# the rows of one (dtype, math) share its batch: one xdist worker builds it
@pytest.mark.parametrize("dtype,math_mode", [
    pytest.param(d, m, id=f"{np.dtype(d).name}-{m}", marks=pytest.mark.xdist_group(f"compiled-{np.dtype(d).name}-{m}"))
    for d, m in MODES])
@pytest.mark.parametrize("name,fn,_", COMPILED, ids=[c[0] for c in COMPILED])
def test_compiled_math_modes(compiled_table, name, fn, _, dtype, math_mode):
    x, y = _compiled_args(dtype)
    loss = lambda a, b: np.sum(fn(a, b))
    want = loss(x, y)
    assert np.asarray(want).dtype == dtype
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-6, atol=1e-5)
    table = compiled_table(dtype, math_mode)
    if isinstance(table, Exception):
        # the batch failed: this row alone, so that the failing row is the one that reports
        vg, vals = _compile_rows([fn], math_mode)
        value, (gx, gy) = vg(x, y)
        got = vals(x, y)[0]
        got = got.detach().numpy() if isinstance(got, symgrad.Tensor) else np.asarray(got)
        np.testing.assert_allclose(value, want, **tol, err_msg=f"{name}: compiled value ({math_mode})")
    else:
        row = [c[0] for c in COMPILED].index(name)
        got, (gx, gy) = table[0][row], table[1][row]
        total = sum(np.sum(f(x, y)) for _, f, _ in COMPILED)
        np.testing.assert_allclose(table[2], total, **tol, err_msg=f"compiled value of the whole table ({math_mode})")
    assert gx.dtype == dtype and gy.dtype == dtype, f"{name}: gradient dtypes {gx.dtype}, {gy.dtype}"
    fx, fy = _fd_grads(fn, x, y)
    gtol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float64 else dict(rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gx, fx, **gtol, err_msg=f"{name}: compiled gradient of x ({math_mode})")
    np.testing.assert_allclose(gy, fy, **gtol, err_msg=f"{name}: compiled gradient of y ({math_mode})")
    # elementwise values themselves, from the compiled function (not only their sum)
    assert got.dtype == dtype
    vtol = dict(rtol=1e-13, atol=1e-15) if dtype == np.float64 else dict(rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got, fn(x, y), **vtol, err_msg=f"{name}: compiled elementwise values")


# --- special functions against scipy ------------------------------------------------------------

def test_scalar_digamma_and_polygamma_match_scipy():
    from codegen import scalar_math

    xs = np.concatenate([np.linspace(0.01, 60, 3001), np.logspace(-6, 12, 400),
                         -np.linspace(0.013, 40.7, 700)])
    got = np.array([scalar_math.digamma(v) for v in xs])
    want = sc.digamma(xs)
    # relative error, measured against max(|psi|, 1): psi has a root near 1.46 where any rounding of
    # the inputs of a cancellation is relatively large
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)) < 1e-13
    for n in (1, 2, 3, 6):
        pos = xs[xs > 0]
        got = np.array([scalar_math.polygamma(n, v) for v in pos])
        np.testing.assert_allclose(got, sc.polygamma(n, pos), rtol=1e-13, err_msg=f"polygamma({n})")
    assert np.isnan(scalar_math.digamma(-2.0)) and scalar_math.digamma(0.0) == -np.inf
    assert np.isnan(scalar_math.polygamma(1, -3.0))
    # poles and beyond: every float below -2**52 is an integer, and -inf is no number to reflect
    for v in (-np.inf, -1e300, -2.0 ** 53):
        assert np.isnan(scalar_math.digamma(v)) and np.isnan(sc.digamma(v))
        assert np.isnan(scalar_math.polygamma(1, v)) and np.isnan(scalar_math.polygamma(2, v))


def test_special_functions_without_scipy_match_scipy(monkeypatch):
    """The eager fallbacks (scipy missing) give scipy's values, poles and infinities included."""
    import builtins

    from symgrad.rules import vocab

    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    x = np.array([-np.inf, -2.5, -1.0, -0.0, 0.0, 0.3, 1.0, 4.5, 30.0, np.inf, np.nan])
    want = {name: getattr(sc, name)(x) for name in ("gammaln", "digamma", "erfc")}
    want_poly = sc.polygamma(2, x[x > 0])
    monkeypatch.setattr(builtins, "__import__", no_scipy)
    np.testing.assert_allclose(vocab.NUMPY_FUNCTIONS["lgamma"](x), want["gammaln"], rtol=1e-14)
    np.testing.assert_allclose(vocab.NUMPY_FUNCTIONS["erfc"](x), want["erfc"], rtol=1e-14)
    got = vocab.NUMPY_FUNCTIONS["digamma"](x)
    assert np.max(np.abs(got - want["digamma"])[np.isfinite(got)]
                  / np.maximum(np.abs(want["digamma"][np.isfinite(got)]), 1)) < 1e-13
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want["digamma"]))
    np.testing.assert_allclose(vocab.NUMPY_FUNCTIONS["polygamma"](2, x[x > 0]), want_poly, rtol=1e-13)


def test_polygamma_on_negative_arguments_matches_torch():
    torch = pytest.importorskip("torch")
    from codegen import scalar_math

    xs = np.concatenate([-np.linspace(0.013, 20.7, 300), -np.logspace(2, 6, 30) - 0.37])
    for n in (1, 2, 3):
        want = torch.polygamma(n, torch.tensor(xs)).numpy()
        got = np.array([scalar_math.polygamma(n, v) for v in xs])
        np.testing.assert_allclose(got, want, rtol=1e-8, err_msg=f"polygamma({n}) below 0")


def test_digamma_second_order_and_polygamma_against_torch():
    torch = pytest.importorskip("torch")
    x = np.array([0.4, 1.3, 2.7, 7.5])
    t = torch.tensor(x, requires_grad=True)
    s = symgrad.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.digamma(t).sum(), t, create_graph=True)
    (sg,) = symgrad.autograd.grad(symgrad.digamma(s).sum(), s, create_graph=True)
    # torch's trigamma is good to about 1e-9 relative (scipy's, which symgrad's eager path uses, to 1e-15)
    np.testing.assert_allclose(sg.detach().numpy(), tg.detach().numpy(), rtol=1e-8)
    np.testing.assert_allclose(sg.detach().numpy(), sc.polygamma(1, x), rtol=1e-14)
    (tgg,) = torch.autograd.grad(tg.sum(), t)
    (sgg,) = symgrad.autograd.grad(sg.sum(), s)
    np.testing.assert_allclose(sgg.numpy(), tgg.numpy(), rtol=1e-8)
    np.testing.assert_allclose(sgg.numpy(), sc.polygamma(2, x), rtol=1e-14)
    np.testing.assert_allclose(symgrad.polygamma(2, s).detach().numpy(),
                               torch.polygamma(2, t).detach().numpy(), rtol=1e-12)


# --- errors -------------------------------------------------------------------------------------

@pytest.mark.skipif(bool(os.environ.get("SCIPY_ARRAY_API")), reason="with SCIPY_ARRAY_API set scipy computes these "
                    "with symgrad's array API namespace (tests/test_numpy_usage_scipy.py)")
@pytest.mark.parametrize("fn,use", [(lambda t: sc.logsumexp(t), "symgrad.scipy.special.logsumexp"),
                                    (lambda t: sc.softmax(t), "symgrad.scipy.special.softmax"),
                                    (lambda t: sc.log_softmax(t, axis=0), "symgrad.scipy.special.log_softmax")])
def test_scipy_python_functions_name_themselves_and_both_ways_out(fn, use):
    t = symgrad.tensor(np.array([0.5, 1.5]), requires_grad=True)
    both = use.replace(".", r"\.") + r" \(a drop-in.*SCIPY_ARRAY_API=1 before scipy is first imported"
    with pytest.raises(TypeError, match=r"scipy\.special\.\w+ is not supported.*" + both):
        fn(t)
    with pytest.raises(TypeError, match=both):
        symgrad.grad(lambda a: fn(a))(np.array([0.5, 1.5]))


def test_unregistered_scipy_ufunc_is_named_with_its_module():
    t = symgrad.tensor(np.array([0.5, 1.5]), requires_grad=True)
    with pytest.raises(TypeError, match=r"scipy\.special\.gamma is not supported"):
        sc.gamma(t)


def test_round_decimals_must_be_an_int():
    t = symgrad.tensor(np.array([0.51, 1.5]), requires_grad=True)
    with pytest.raises(TypeError, match=r"numpy\.round: decimals must be an int"):
        np.round(t, 1.5)
    with pytest.raises(TypeError, match=r"numpy\.round with out="):
        np.round(t, 1, out=np.empty(2))


def test_ufunc_out_argument_is_refused():
    t = symgrad.tensor(np.array([0.5, 0.25]), requires_grad=True)
    with pytest.raises(TypeError, match=r"numpy\.arcsin with out="):
        np.arcsin(t, out=np.empty(2))


def test_frac_and_round_decimals_match_torch():
    torch = pytest.importorskip("torch")
    x = np.array([-2.3, -0.7, 0.45, 1.26, 3.85])
    t = torch.tensor(x, requires_grad=True)
    s = symgrad.tensor(x, requires_grad=True)
    for f in (lambda L, v: L.frac(v), lambda L, v: L.round(v, decimals=1), lambda L, v: L.round(10 * v, decimals=-1)):
        want, got = f(torch, t), f(symgrad, s)
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
        (tg,) = torch.autograd.grad(want.sum(), t)
        (sg,) = symgrad.autograd.grad(got.sum(), s)
        np.testing.assert_array_equal(sg.numpy(), tg.numpy())


def test_torch_names_and_numpy_aliases():
    x = symgrad.tensor(np.array([0.25, -0.5]))
    for torch_name, numpy_name in [("asin", "arcsin"), ("acos", "arccos"), ("asinh", "arcsinh"),
                                   ("acosh", "arccosh"), ("atanh", "arctanh"), ("atan2", "arctan2"),
                                   ("lgamma", "gammaln"), ("deg2rad", "radians"), ("rad2deg", "degrees")]:
        assert getattr(symgrad, torch_name) is getattr(symgrad, numpy_name)
    np.testing.assert_array_equal(symgrad.round(x * 3, 1).numpy(), np.round(x.numpy() * 3, 1))
