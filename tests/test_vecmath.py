"""codegen.vecmath: accuracy against mpmath, numpy's special values, and that inlined loops vectorise.

Run as a script (``NUMBA_NUM_THREADS=1 python tests/test_vecmath.py``) to print the accuracy and speed tables
that the module docstring quotes.
"""

from __future__ import annotations

import math
import re
import time
import zlib

import mpmath as mp
import numba
import numpy as np
import pytest

from codegen import vecmath

# its tests share the mpmath references (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_vecmath")

F64, F32 = np.float64, np.float32
DTYPES = {"f64": F64, "f32": F32}
MAX_ULP = 2.0


def _scipy_erf():
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is a test extra
        return None
    return erf


def _sigmoid_mp(x):
    return 1 / (1 + mp.exp(-x))


def _np_sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1, e) / (1 + e)


# name -> (mpmath function, numpy function, sweep segments per dtype).  A segment is ("lin", lo, hi) for uniform
# points or ("log", lo, hi) for points uniform in log|x| with lo < hi > 0, used with both signs where the
# function takes negative arguments (the "neg" flag).
SPECS: dict[str, dict] = {
    "exp": dict(
        mp=mp.exp,
        np=np.exp,
        f64=[("lin", -746.0, 710.0), ("lin", -1.0, 1.0), ("log", 1e-20, 1.0, "neg"), ("lin", -745.2, -700.0)],
        f32=[("lin", -104.0, 89.0), ("lin", -1.0, 1.0), ("log", 1e-10, 1.0, "neg"), ("lin", -104.0, -85.0)],
    ),
    "expm1": dict(
        mp=mp.expm1,
        np=np.expm1,
        f64=[("lin", -50.0, 710.0), ("lin", -1.0, 1.0), ("log", 1e-300, 1.0, "neg")],
        f32=[("lin", -20.0, 89.0), ("lin", -1.0, 1.0), ("log", 1e-38, 1.0, "neg")],
    ),
    "log": dict(
        mp=mp.log,
        np=np.log,
        f64=[("log", 5e-324, 1.7e308), ("lin", 0.5, 2.0), ("lin", 1 - 1e-6, 1 + 1e-6)],
        f32=[("log", 1e-45, 3.4e38), ("lin", 0.5, 2.0), ("lin", 1 - 1e-4, 1 + 1e-4)],
    ),
    "log1p": dict(
        mp=mp.log1p,
        np=np.log1p,
        f64=[("log", 1e-300, 1.7e308), ("log", 1e-300, 1.0, "neg"), ("lin", -1.0, 1.0), ("lin", -1.0, -0.999)],
        f32=[("log", 1e-38, 3.4e38), ("log", 1e-38, 1.0, "neg"), ("lin", -1.0, 1.0), ("lin", -1.0, -0.999)],
    ),
    "sin": dict(
        mp=mp.sin,
        np=np.sin,
        f64=[("lin", -10.0, 10.0), ("log", 1e-300, 1.4e14, "neg"), ("lin", -1e5, 1e5)],
        f32=[("lin", -10.0, 10.0), ("log", 1e-38, 1.4e14, "neg"), ("lin", -1e5, 1e5)],
    ),
    "cos": dict(
        mp=mp.cos,
        np=np.cos,
        f64=[("lin", -10.0, 10.0), ("log", 1e-300, 1.4e14, "neg"), ("lin", -1e5, 1e5)],
        f32=[("lin", -10.0, 10.0), ("log", 1e-38, 1.4e14, "neg"), ("lin", -1e5, 1e5)],
    ),
    "tanh": dict(
        mp=mp.tanh,
        np=np.tanh,
        f64=[("lin", -20.0, 20.0), ("lin", -1.0, 1.0), ("log", 1e-300, 1e3, "neg")],
        f32=[("lin", -10.0, 10.0), ("lin", -1.0, 1.0), ("log", 1e-38, 1e3, "neg")],
    ),
    "sigmoid": dict(
        mp=_sigmoid_mp,
        np=_np_sigmoid,
        f64=[("lin", -745.0, 40.0), ("lin", -5.0, 5.0), ("log", 1e-300, 1e3, "neg")],
        f32=[("lin", -104.0, 20.0), ("lin", -5.0, 5.0), ("log", 1e-38, 1e3, "neg")],
    ),
    "erf": dict(
        mp=mp.erf,
        np=_scipy_erf(),
        f64=[("lin", -7.0, 7.0), ("lin", -1.0, 1.0), ("log", 1e-300, 10.0, "neg")],
        f32=[("lin", -5.0, 5.0), ("lin", -1.0, 1.0), ("log", 1e-38, 10.0, "neg")],
    ),
}

N_MP = 2500  # mpmath reference points per (function, dtype)
N_DENSE = 1_000_000  # points of the numpy-vs-ours sweep


def _fn(name: str, dt: str):
    f = getattr(vecmath, f"v{name}_{dt}", None)
    if f is None:
        pytest.skip(f"v{name}_{dt} not implemented yet")
    return f


# The fastmath flags generated kernels use with these functions (FMA contraction only), and their request for
# 512-bit vectors (used by the timing tables only).
try:
    from codegen.scalar_math import VECTOR_FASTMATH, wide_vectors
except ImportError:  # pragma: no cover - before the emitter integration
    VECTOR_FASTMATH = {"contract"}
    wide_vectors = None


def _make_loop(f, fastmath=False):
    @numba.njit(error_model="numpy", fastmath=fastmath)
    def loop(x, out):
        for i in range(x.shape[0]):
            out[i] = f(x[i])

    return loop


_LOOPS: dict[tuple, object] = {}


def _loop(name: str, dt: str, fastmath=False):
    """The compiled elementwise loop for v<name>_<dt> (shared across tests: each compile costs ~1 s)."""
    key = (name, dt, bool(fastmath))
    if key not in _LOOPS:
        _LOOPS[key] = _make_loop(_fn(name, dt), fastmath)
    return _LOOPS[key]


def apply(name: str, dt: str, x, fastmath=False) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=DTYPES[dt])
    out = np.empty_like(x)
    _loop(name, dt, fastmath)(x, out)
    return out


def _points(segments, dtype, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    per = max(n // len(segments), 1)
    parts = []
    for seg in segments:
        kind, lo, hi = seg[:3]
        if kind == "lin":
            p = rng.uniform(lo, hi, per)
        else:
            p = np.exp(rng.uniform(np.log(lo), np.log(hi), per))
            if "neg" in seg:
                p = p * rng.choice([-1.0, 1.0], per)
        parts.append(p)
    x = np.concatenate(parts).astype(dtype)
    return x[np.isfinite(x)]


def _reference(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mpmath value of the function at x as a float64 pair hi + lo."""
    f = SPECS[name]["mp"]
    hi = np.empty(x.size)
    lo = np.empty(x.size)
    with mp.workdps(40):
        for i, v in enumerate(x.tolist()):
            r = f(mp.mpf(v))
            h = float(r)
            hi[i] = h
            lo[i] = float(r - h) if math.isfinite(h) else 0.0
    return hi, lo


def ulp_error(ours: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """|ours - (hi + lo)| in units of the last place of the exact value in ours' dtype (inf where they differ in
    an infinite value, 0 where both are the same infinity)."""
    dtype = ours.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = hi.astype(dtype)
        exact64 = hi.astype(F64)
        ulp = np.spacing(np.abs(rounded)).astype(F64)
        # Just below a power of two the exact value's ulp is half the rounded value's.
        m, _ = np.frexp(rounded.astype(F64))
        r64 = rounded.astype(F64)
        below = (np.abs(m) == 0.5) & (np.abs(rounded) > np.finfo(dtype).smallest_normal)
        below &= (exact64 - r64 + lo) * np.sign(r64) < 0
        ulp = np.where(below, ulp / 2, ulp)
        if dtype == F32:
            # float32 overflow of a finite value: measure against the largest float32's ulp.
            ulp = np.where(np.isinf(rounded) & np.isfinite(hi), np.spacing(np.finfo(F32).max).astype(F64), ulp)
        err = np.abs((ours.astype(F64) - hi) - lo) / ulp
    same_inf = np.isinf(rounded) & (ours == rounded)
    err = np.where(same_inf, 0.0, err)
    return np.where(np.isnan(err), np.inf, err)


@pytest.fixture(scope="module")
def mp_refs():
    """mpmath references, computed once per (function, dtype) on first use."""
    cache: dict[tuple[str, str], tuple] = {}

    def get(name: str, dt: str):
        if (name, dt) not in cache:
            x = _points(SPECS[name][dt], DTYPES[dt], N_MP, seed=zlib.crc32(f"{name}{dt}".encode()))
            cache[(name, dt)] = (x, *_reference(name, x))
        return cache[(name, dt)]

    return get


CASES = [(name, dt) for name in SPECS for dt in DTYPES]


@pytest.mark.parametrize("ldexp", [True, False], ids=["ldexp", "two-factors"])
def test_scaling_by_a_power_of_two_rounds_like_ldexp(ldexp, monkeypatch):
    """exp's final p * 2^k: llvm.ldexp (vscalefpd, chosen on AVX-512) or two exact-exponent factors (elsewhere),
    both equal to ldexp over the whole range, overflow and gradual underflow included (the factors may round
    subnormal results a second time: one step at most)."""
    monkeypatch.setattr(vecmath, "_SCALE_BY_LDEXP", ldexp)

    @numba.njit(cache=False, error_model="numpy")   # lowered now, with the path chosen above
    def scale(p, k, out):
        for i in range(p.shape[0]):
            out[i] = vecmath._scale2(p[i], k[i])

    r = np.random.default_rng(3)
    k = np.concatenate([np.arange(-1100, 1101), r.integers(-1100, 1101, 20_000)]).astype(np.int64)
    p = np.concatenate([np.full(2201, 1.0), r.uniform(0.5, 2.0, 20_000)])
    p[:5] = [np.nan, 0.5, 2.0, 1.9999999999999998, 0.7071067811865476]
    out = np.empty_like(p)
    scale(p, k, out)
    with np.errstate(over="ignore"):
        want = np.ldexp(p, k)
    normal = np.abs(want) >= np.finfo(F64).tiny
    np.testing.assert_array_equal(out[normal | np.isnan(want)], want[normal | np.isnan(want)])
    steps = np.abs(out[~normal].view(np.int64) - want[~normal].view(np.int64))
    assert steps.max() <= (0 if ldexp else 1)


@pytest.mark.parametrize("ldexp", [True, False], ids=["ldexp", "two-factors"])
@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh"])
def test_exp_special_values_on_both_scaling_paths(name, ldexp, monkeypatch):
    """exp has no final nan patch: a nan passes its clamp and must come out of either scaling as nan."""
    monkeypatch.setattr(vecmath, "_SCALE_BY_LDEXP", ldexp)
    loop = _make_loop(_fn(name, "f64"))   # lowered now, with the path chosen above
    x = np.array(SPECIAL[name] + [-_NAN, 709.0, -709.0, -740.0], dtype=F64)
    ours = np.empty_like(x)
    loop(x, ours)
    ref = _reference_special(name, x)
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    assert np.array_equal(np.signbit(ours[ref == 0]), np.signbit(ref[ref == 0]))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_max_ulp(ours[~np.isnan(ref)], ref[~np.isnan(ref)], maxulp=2)


@pytest.mark.parametrize("name,dt", CASES)
def test_max_ulp_vs_mpmath(name, dt, mp_refs):
    _fn(name, dt)
    x, hi, lo = mp_refs(name, dt)
    err = ulp_error(apply(name, dt, x), hi, lo)
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP, f"v{name}_{dt}({x[worst]!r}): {err[worst]:.2f} ulp"


@pytest.mark.parametrize("name", SPECS)
def test_max_ulp_under_kernel_fastmath(name, mp_refs):
    """Inlined into a loop compiled with the kernels' fastmath flags (float64; float32 inlines the same code)."""
    _fn(name, "f64")
    x, hi, lo = mp_refs(name, "f64")
    ours = apply(name, "f64", x, fastmath=VECTOR_FASTMATH)
    err = ulp_error(ours, hi, lo)
    assert err.max() <= MAX_ULP, (x[np.argmax(err)], err.max())
    # special values survive the flags too
    sx = np.array(SPECIAL[name], dtype=F64)
    np.testing.assert_array_equal(apply(name, "f64", sx, fastmath=VECTOR_FASTMATH), apply(name, "f64", sx))


def dense_max_ulp(name: str, dt: str, x: np.ndarray) -> tuple[float, int]:
    """Max ulp error vs mpmath over a dense sweep: numpy filters, mpmath decides.

    Points where ours and numpy agree within 1 ulp (of numpy's result) are within 1 + numpy's own error; numpy is
    within about 1 ulp of mpmath for float64 and 4 ulp for float32 (log), so the up to 3000 points that disagree
    most are recomputed with mpmath and the max over them is returned, with the number of points checked."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ref = SPECS[name]["np"](x)
    ours = apply(name, dt, x)
    same = (ours == ref) | (np.isnan(ours) & np.isnan(ref))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(ours.astype(F64) - ref.astype(F64)) / np.spacing(np.abs(ref)).astype(F64)
    diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))
    suspects = np.argsort(diff)[-3000:]
    suspects = suspects[diff[suspects] > 1.0]
    if suspects.size == 0:
        return float(diff.max()), 0
    hi, lo = _reference(name, x[suspects])
    return float(ulp_error(ours[suspects], hi, lo).max()), int(suspects.size)


@pytest.mark.parametrize("name,dt", [c for c in CASES if SPECS[c[0]]["np"] is not None])
def test_dense_sweep(name, dt):
    """1e6 points: ours vs numpy, and where they differ by more than 1 ulp, ours vs mpmath."""
    _fn(name, dt)
    x = _points(SPECS[name][dt], DTYPES[dt], N_DENSE, seed=7)
    worst, _ = dense_max_ulp(name, dt, x)
    assert worst <= MAX_ULP


# ---------------------------------------------------------------------------------------------------------------
# Special values: exactly numpy's (value and sign of zero).

_INF, _NAN = math.inf, math.nan
# Around the 1e-18 guard that keeps subnormal numbers out of the polynomials.
_TINY_ARGS = [1e-200, -1e-200, 1e-17, -1e-19, 2e-18]
SPECIAL = {
    "exp": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 709.782712893384, 709.7827128933841, -745.1332191019411,
            -745.1332191019412, -708.5, -744.0, 88.72283, 88.72284, -87.33655, -103.97207, -103.97208],
    "expm1": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 5e-324, -5e-324, 1e-20, -1e-20, 709.782712893384,
              709.7827128933841, -40.0, -800.0, 88.72283, 88.72284],
    "log": [_NAN, _INF, -_INF, 0.0, -0.0, -1.0, -1e-310, 5e-324, 1e-310, 1.0, 2.0, 1.7976931348623157e308, 1e-45],
    "log1p": [_NAN, _INF, -_INF, 0.0, -0.0, -1.0, -1.5, -1e-310, 1e-310, 5e-324, -5e-324, 1e-20, -1e-20,
              1.7976931348623157e308, -0.9999999999999999],
    "sin": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 5e-324, 1e-20, -1e-20, math.pi, -math.pi / 2],
    "cos": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 5e-324, 1e-20, math.pi, -math.pi / 2],
    "tanh": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 5e-324, 1e-20, -1e-20, 19.0, 20.0, -25.0, 800.0],
    "sigmoid": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 40.0, -745.0, -746.0, -800.0, 800.0, -104.0],
    "erf": [_NAN, _INF, -_INF, 0.0, -0.0, 1e-310, -1e-310, 5e-324, 1e-20, -1e-20, 6.0, -6.0, 27.0, -30.0],
}
for _name in ("exp", "expm1", "sin", "cos", "tanh", "sigmoid", "erf"):
    SPECIAL[_name] = SPECIAL[_name] + _TINY_ARGS


def _reference_special(name: str, x: np.ndarray) -> np.ndarray:
    if name == "erf":
        return np.array([math.erf(v) for v in x.tolist()], dtype=F64).astype(x.dtype)
    if name == "sigmoid":
        # exact special values; finite points are rounded from mpmath
        out = []
        for v in x.tolist():
            if math.isnan(v) or math.isinf(v):
                out.append(_NAN if math.isnan(v) else (1.0 if v > 0 else 0.0))
            else:
                with mp.workdps(40):
                    out.append(float(_sigmoid_mp(mp.mpf(v))))
        return np.array(out).astype(x.dtype)
    with np.errstate(all="ignore"):
        return SPECS[name]["np"](x)


@pytest.mark.parametrize("name,dt", CASES)
def test_special_values(name, dt):
    _fn(name, dt)
    with np.errstate(over="ignore"):
        x = np.array(SPECIAL[name], dtype=F64).astype(DTYPES[dt])
    ours = apply(name, dt, x)
    ref = _reference_special(name, x)
    exact = (ours == ref) & (np.signbit(ours) == np.signbit(ref))
    exact |= np.isnan(ours) & np.isnan(ref)
    # Finite non-zero values may differ by rounding (checked against mpmath elsewhere); all else must be exact.
    tight = np.isfinite(ref) & (ref != 0) & np.isfinite(ours) & (ours != 0)
    with np.errstate(invalid="ignore"):
        near = tight & (np.abs(ours.astype(F64) - ref) <= 2 * np.spacing(np.abs(ref)).astype(F64))
    bad = ~(exact | near)
    assert not bad.any(), [(x[i], ours[i], ref[i]) for i in np.flatnonzero(bad)]


def _correctly_rounded(name: str, x: np.ndarray) -> np.ndarray:
    hi, _ = _reference(name, x.astype(F64))
    with np.errstate(over="ignore"):
        return hi.astype(x.dtype)


@pytest.mark.parametrize("dt", DTYPES)
def test_exp_overflow_underflow_thresholds(dt):
    """Around the overflow and the underflow edge, inf/finite and zero/subnormal are those of correct rounding."""
    dtype = DTYPES[dt]
    info = np.finfo(dtype)
    edges = [math.log(float(info.max)), math.log(float(info.smallest_subnormal))]
    xs = []
    for e in edges:
        v = dtype(e)
        for _ in range(4):
            v = np.nextafter(v, dtype(-np.inf))
        for _ in range(9):
            xs.append(v)
            v = np.nextafter(v, dtype(np.inf))
    xs = np.array(xs, dtype=dtype)
    ours = apply("exp", dt, xs)
    want = _correctly_rounded("exp", xs)
    assert np.array_equal(np.isinf(ours), np.isinf(want)), (xs, ours, want)
    assert np.array_equal(ours == 0, want == 0), (xs, ours, want)
    fin = np.isfinite(want) & (want != 0)
    assert np.all(np.abs(ours[fin].astype(F64) - want[fin]) <= np.spacing(np.abs(want[fin])).astype(F64))


@pytest.mark.parametrize("name,dt", [(n, d) for n in ("sin", "cos") for d in DTYPES])
def test_huge_sin_cos_arguments_are_flagged(name, dt):
    """Beyond the limit the vector path is not exact: sincos_out_of_range_* says so, and the caller's libm rerun
    (documented in the module) gives numpy's values."""
    _fn(name, dt)
    dtype = DTYPES[dt]
    limit = vecmath.SIN_COS_LIMIT_F64 if dt == "f64" else vecmath.SIN_COS_LIMIT_F32
    flag = vecmath.sincos_out_of_range_f64 if dt == "f64" else vecmath.sincos_out_of_range_f32
    x = np.array([limit, -limit, np.nextafter(dtype(limit), dtype(np.inf)), 1e16, -3e17, 1e22, 3e38, np.inf, np.nan],
                 dtype=dtype)
    flags = np.array([flag(v) for v in x])
    assert flags.tolist() == [False, False, True, True, True, True, True, False, False]
    checked = _checked_loop(name, dt)
    out = np.empty_like(x)
    checked(x, out)
    with np.errstate(invalid="ignore"):
        ref = SPECS[name]["np"](x)
    assert np.array_equal(out, ref, equal_nan=True), (out, ref)


_CHECKED: dict = {}


def _checked_loop(name: str, dt: str):
    """The caller-level pattern: vector loop with an or-reduced range flag, libm rerun if any lane was out."""
    if (name, dt) in _CHECKED:
        return _CHECKED[(name, dt)]
    f = _fn(name, dt)
    flag = vecmath.sincos_out_of_range_f64 if dt == "f64" else vecmath.sincos_out_of_range_f32
    libm = math.sin if name == "sin" else math.cos

    @numba.njit(error_model="numpy")
    def checked(x, out):
        bad = False
        for i in range(x.shape[0]):
            out[i] = f(x[i])
            bad |= flag(x[i])
        if bad:
            for i in range(x.shape[0]):
                out[i] = libm(x[i])

    _CHECKED[(name, dt)] = checked
    return checked


@pytest.mark.parametrize("name,dt", [(n, d) for n in ("sin", "cos") for d in DTYPES])
def test_checked_sincos_loop_still_vectorises(name, dt):
    if not _host_has_avx2():
        pytest.skip("CPU lacks AVX2: no packed FMA to look for")
    checked = _checked_loop(name, dt)
    x = np.linspace(-3, 3, 64).astype(DTYPES[dt])
    checked(x, np.empty_like(x))
    body = _vector_body(checked.inspect_asm(checked.signatures[0]))
    assert body and "call" not in body


# ---------------------------------------------------------------------------------------------------------------
# pow with a constant exponent.

POW_EXPONENTS = [2.5, -1.7, 0.3, 3.0, 13.0, 100.5, -300.25, 1e-3, -7.0]
POW_SPECIAL_X = [-0.0, -math.inf, -4.0, 0.0, math.inf, math.nan, 2.0, -1.0, 1.0, 1e-310, -1e-310, -3.0, 0.5, -0.5,
                 1e300, -1e-300, 1.0000001, 0.9999999]
POW_SPECIAL_C = [0.5, 2.0, -1.0, 1.0, 3.0, -0.5, 0.0, -0.0, math.inf, -math.inf, math.nan, -2.0, 1.5, -3.0, 1e300,
                 -1e300, 7.0, 2.5, 9007199254740993.0, -9007199254740991.0, 1e-320, 1023.5, -1075.0, 16777217.0,
                 -16777215.0]
_POW_LOOPS: dict = {}


def _pow_loop(dt: str, fastmath=False):
    key = (dt, bool(fastmath))
    if key not in _POW_LOOPS:
        f = _fn("pow", dt)

        @numba.njit(error_model="numpy", fastmath=fastmath)
        def loop(x, c, out):
            for i in range(x.shape[0]):
                out[i] = f(x[i], c)

        _POW_LOOPS[key] = loop
    return _POW_LOOPS[key]


def apply_pow(dt: str, x, c, fastmath=False) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=DTYPES[dt])
    out = np.empty_like(x)
    _pow_loop(dt, fastmath)(x, DTYPES[dt](c), out)
    return out


def _pow_points(dt: str, c: float, n: int, seed: int) -> np.ndarray:
    """|x| log-uniform over the range where |x|**c is a normal number; negative x too for integer c."""
    info = np.finfo(DTYPES[dt])
    lim = min(math.log(float(info.max)), -math.log(float(info.smallest_normal))) / abs(c)
    lim = min(lim, math.log(float(info.max)) * 0.999)
    rng = np.random.default_rng(seed)
    x = np.exp(rng.uniform(-lim, lim, n))
    if c == int(c):
        x *= rng.choice([-1.0, 1.0], n)
    return x.astype(DTYPES[dt])


@pytest.fixture(scope="module")
def pow_refs():
    """(c, x, hi, lo) per exponent and dtype, from mpmath, computed once."""
    cache: dict[str, list] = {}

    def get(dt: str):
        if dt not in cache:
            rows = []
            for j, c in enumerate(POW_EXPONENTS):
                c = float(DTYPES[dt](c))
                x = _pow_points(dt, c, 120, seed=j)
                hi = np.empty(x.size)
                lo = np.empty(x.size)
                with mp.workdps(40):
                    for i, v in enumerate(x.tolist()):
                        r = mp.power(mp.mpf(v), mp.mpf(c))
                        hi[i] = float(r)
                        lo[i] = float(r - mp.mpf(hi[i]))
                rows.append((c, x, hi, lo))
            cache[dt] = rows
        return cache[dt]

    return get


@pytest.mark.parametrize("dt,fastmath", [("f64", False), ("f32", False), ("f64", True)])
def test_pow_max_ulp_vs_mpmath(dt, fastmath, pow_refs):
    _fn("pow", dt)
    flags = VECTOR_FASTMATH if fastmath else False
    worst = (0.0, None)
    for c, x, hi, lo in pow_refs(dt):
        err = ulp_error(apply_pow(dt, x, c, flags), hi, lo)
        i = int(np.argmax(err))
        if err[i] > worst[0]:
            worst = (float(err[i]), (x[i], c))
    assert worst[0] <= MAX_ULP, worst


@pytest.mark.parametrize("dt", DTYPES)
def test_pow_special_values(dt):
    """numpy's np.power(x, c) exactly for zeros, infinities, nan, negative bases, and its sqrt/square shortcuts."""
    _fn("pow", dt)
    dtype = DTYPES[dt]
    with np.errstate(all="ignore"):
        x = np.array(POW_SPECIAL_X, dtype=F64).astype(dtype)
        for c in POW_SPECIAL_C:
            c = dtype(c)
            ours = apply_pow(dt, x, c)
            ref = np.power(x, c)
            exact = ((ours == ref) & (np.signbit(ours) == np.signbit(ref))) | (np.isnan(ours) & np.isnan(ref))
            fin = np.isfinite(ref) & (ref != 0) & np.isfinite(ours)
            near = fin & (np.abs(ours.astype(F64) - ref) <= np.spacing(np.abs(ref)).astype(F64))
            assert (exact | near).all(), (c, x[~(exact | near)], ours[~(exact | near)], ref[~(exact | near)])


@pytest.mark.parametrize("dt", DTYPES)
def test_pow_loop_vectorises(dt):
    if not _host_has_avx2():
        pytest.skip("CPU lacks AVX2: no packed FMA to look for")
    loop = _pow_loop(dt)
    apply_pow(dt, np.linspace(0.5, 2, 64), 2.5)
    body = _vector_body(loop.inspect_asm(loop.signatures[0]))
    assert body and "call" not in body


# ---------------------------------------------------------------------------------------------------------------
# Vectorisation: the inlined loop's hot path uses packed FMA on ymm/zmm registers.


def _host_has_avx2() -> bool:
    try:
        from llvmlite import binding as llvm

        return "+avx2" in llvm.get_host_cpu_features().flatten()
    except Exception:  # pragma: no cover - llvmlite without feature query
        return False


def _vector_body(asm: str) -> str:
    """The basic block with the most packed FMAs (the vectorised loop body), or "" if there is none."""
    blocks = re.split(r"\n(?=\.LBB\w*:)", asm)
    scored = [(len(re.findall(r"^\s*vf\w*(?:pd|ps)\s+[^\n]*%[yz]mm", b, re.M)), b) for b in blocks]
    best = max(scored, key=lambda t: t[0], default=(0, ""))
    return best[1] if best[0] else ""


@pytest.mark.parametrize("name,dt", CASES)
def test_loop_vectorises(name, dt):
    if not _host_has_avx2():
        pytest.skip("CPU lacks AVX2: no packed FMA to look for")
    _fn(name, dt)
    loop = _loop(name, dt)
    apply(name, dt, np.linspace(-1, 1, 64))
    body = _vector_body(loop.inspect_asm(loop.signatures[0]))
    assert body, "no packed FMA on ymm/zmm registers"
    assert "call" not in body, "scalar call in the vector loop body"
    if dt == "f32":
        assert re.search(r"vcvtps2pd|ps\s", body)


# ---------------------------------------------------------------------------------------------------------------
# Tables for the module docstring.


def _libm_loop(f):
    @numba.njit(error_model="numpy")
    def loop(x, out):
        for i in range(x.shape[0]):
            out[i] = f(x[i])

    return loop


# Benchmark inputs: typical arguments (no subnormal intermediates, which cost a microcode assist per lane).
BENCH_RANGES = {"exp": (-50.0, 50.0), "expm1": (-5.0, 5.0), "log": (0.01, 100.0), "log1p": (-0.9, 100.0),
                "sin": (-100.0, 100.0), "cos": (-100.0, 100.0), "tanh": (-10.0, 10.0), "sigmoid": (-20.0, 20.0),
                "erf": (-5.0, 5.0), "pow": (0.01, 100.0)}


def _main(names: list[str]) -> None:  # pragma: no cover - manual measurement
    import os

    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    print(f"load average before: {os.getloadavg()}")
    for name in names or [*SPECS, "pow"]:
        for dt in DTYPES:
            if getattr(vecmath, f"v{name}_{dt}", None) is None:
                continue
            dtype = DTYPES[dt]
            lo, hi = BENCH_RANGES[name]
            dense = np.random.default_rng(5).uniform(lo, hi, N_DENSE).astype(dtype)
            out = np.empty_like(dense)
            times = {}
            if name == "pow":
                c = dtype(2.5)
                ours = _pow_loop(dt)
                ours(dense, c, out)
                times["ours"] = _median_time(ours, dense, c, out)
                if wide_vectors is not None:
                    wide = _wide_loop(_fn(name, dt), 2)
                    wide(dense, c, out)
                    times["ours512"] = _median_time(wide, dense, c, out)
                sl = _libm_pow_loop()
                sl(dense, c, out)
                times["libm"] = _median_time(sl, dense, c, out)
                times["numpy"] = _median_time(np.power, dense, c, out)
                err = "   -  "
            else:
                x = _points(SPECS[name][dt], dtype, 20_000, seed=3)
                ref_hi, ref_lo = _reference(name, x)
                err = f"{ulp_error(apply(name, dt, x), ref_hi, ref_lo).max():5.2f}"
                ours = _loop(name, dt)
                ours(dense, out)
                times["ours"] = _median_time(ours, dense, out)
                if wide_vectors is not None:
                    wide = _wide_loop(_fn(name, dt))
                    wide(dense, out)
                    times["ours512"] = _median_time(wide, dense, out)
                if name in _SCALAR:
                    sl = _libm_loop(_scalar(name))
                    sl(dense, out)
                    times["libm"] = _median_time(sl, dense, out)
                npf = SPECS[name]["np"]
                if npf is not None and name != "sigmoid":
                    times["numpy"] = _median_time(npf, dense, out)
            cells = "  ".join(f"{k} {v * 1e9 / dense.size:6.2f}" for k, v in times.items())
            print(f"{name:8s} {dt}  max ulp {err}  ns/elem: {cells}", flush=True)
    print(f"load average after: {os.getloadavg()}")


def _wide_loop(f, nargs: int = 1):
    """The elementwise loop as generated kernels compile it: fastmath contract, 512-bit vectors."""
    if nargs == 1:

        @numba.njit(error_model="numpy", fastmath=VECTOR_FASTMATH)
        def loop(x, out):
            wide_vectors()
            for i in range(x.shape[0]):
                out[i] = f(x[i])

    else:

        @numba.njit(error_model="numpy", fastmath=VECTOR_FASTMATH)
        def loop(x, c, out):
            wide_vectors()
            for i in range(x.shape[0]):
                out[i] = f(x[i], c)

    return loop


def _libm_pow_loop():
    @numba.njit(error_model="numpy")
    def loop(x, c, out):
        for i in range(x.shape[0]):
            out[i] = x[i] ** c

    return loop


_SCALAR = {"exp": math.exp, "expm1": math.expm1, "log": math.log, "log1p": math.log1p, "sin": math.sin,
           "cos": math.cos, "tanh": math.tanh, "erf": math.erf}


def _scalar(name: str):
    f = _SCALAR[name]

    @numba.njit(inline="always")
    def g(v):
        return f(v)

    return g


def _median_time(fn, *args, repeat: int = 21) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


if __name__ == "__main__":  # pragma: no cover
    import sys

    _main(sys.argv[1:])
