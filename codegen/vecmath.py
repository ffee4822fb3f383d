"""Elementary functions in plain float arithmetic that LLVM vectorises when Numba inlines them into a loop.

The pip builds of Numba/llvmlite have no vector math library, so ``math.exp`` inside a Numba loop is one scalar
libm call per element and the loop does not vectorise (see ``codegen/simd.py``).  The functions here are written
so that, once inlined (``inline="always"`` inlines at Numba-IR level, before LLVM sees the loop), the loop body is
straight-line code: range reduction, a polynomial evaluated with FMA, and the exponent handled by integer
arithmetic on the bit pattern.  Every if/else is a select, so special values (nan, +-inf, +-0, overflow,
subnormal results) cost a few compares and blends per vector instead of a branch.  Polynomial coefficients are
our own least-squares/Remez-style fits, derived with mpmath at development time.

Names: ``v<name>_f64`` takes and returns float64, ``v<name>_f32`` float32, for exp, expm1, log, log1p, sin, cos,
tanh, sigmoid, erf, and ``vpow_*(x, c)`` (x**c for a constant exponent c).  ``VECTOR_FUNCTIONS`` maps the
emitter's names to the base names; ``IMPORT_LINE`` imports all of them.  The float32 variants compute in float64
and round once at the end: the error is then 0.5 ulp of float32 plus a few 2^-29 ulp, overflow and subnormal
boundaries are those of correct rounding, and no float32-specific special-value logic is needed.  (Native float32
arithmetic would give twice the lanes; it is not done yet.)

Accuracy, max error in ulp against mpmath (40 digits).  "dense": 1e6 points over the whole range of each
function (uniform, log-uniform in |x| over all magnitudes incl. subnormal, and the hard subranges), every point
against mpmath; pow: 3e5 points for c in {2.5, -300.25, 0.3}, float32 {2.5, -7}.  Special values (nan, +-inf,
+-0, thresholds) are exact; see tests/test_vecmath.py.

=========  ==============  ==============  =============================================================
function   float64         float32         where the float64 maximum is / note
=========  ==============  ==============  =============================================================
exp        1.00            0.50            subnormal results (p * 2^k1 * 2^k2 rounds twice); else 0.5x
expm1      1.19            0.50            x near +-ln2/2 (k = +-1)
log        1.18            0.50            x near 0.7
log1p      1.27            0.50            x near -0.32
sin        1.44            0.50            |x| <= SIN_COS_LIMIT_F64 = 2^47
cos        1.43            0.50            idem
tanh       1.39            0.50            |x| near 0.55 (where polynomial and exp formula meet)
sigmoid    1.44            0.50            x near -4.5 (exp error passes through e / (1 + e))
erf        1.07            0.50            |x| near 0.51
pow        1.02            0.50            x**c, 9 exponents in the tests (max 0.97 there)
=========  ==============  ==============  =============================================================

Speed, ns per element over 1e6 elements, one thread (``NUMBA_NUM_THREADS=1``), median of 21 runs, typical
arguments (tests/test_vecmath.py ``BENCH_RANGES``; run ``python tests/test_vecmath.py``).  Measured on this
project's 2-vCPU AVX-512 Xeon while a fuzz run and another session's tests kept the load average at 4.5-5, so
absolute numbers are inflated and noisy; ratios within a row come from the same run.  "ours": loop compiled with
the generated kernels' flags (FMA contraction, 512-bit vectors via ``scalar_math.wide_vectors``); "ymm": plain
``@njit`` loop, LLVM's default 256-bit vectors; "libm": Numba loop calling ``math.<f>`` (``x ** c`` for pow);
"numpy": the ufunc (its SVML/AVX-512 code; scipy.special.erf for erf; for pow ``np.power(x, 2.5)``).

=========  ====================================  ====================================
function   float64: ours / ymm / libm / numpy    float32: ours / ymm / libm / numpy
=========  ====================================  ====================================
exp        0.93 / 1.60 /  9.2 / 0.78             0.94 / 1.05 /  2.4 / 0.52
expm1      2.06 / 4.37 / 17.9 / 1.20             1.75 / 1.88 / 15.1 / 0.41
log        1.25 / 1.62 /  8.0 / 1.13             1.17 / 1.19 /  2.9 / 0.48
log1p      1.68 / 1.95 / 14.3 / 1.29             1.54 / 1.57 / 14.6 / 0.58
sin        1.22 / 1.79 / 25.6 / 25.0             1.18 / 1.28 / 12.6 / 0.60
cos        1.26 / 1.89 / 26.7 / 25.3             1.22 / 1.30 / 12.9 / 0.70
tanh       2.03 / 3.39 / 24.9 / 1.61             1.91 / 2.03 / 23.1 / 0.38
sigmoid    1.55 / 2.06 /   -  /  -               1.49 / 1.59 /   -  /  -
erf        8.94 / 10.9 / 25.0 / 22.9             9.26 / 10.9 / 24.8 / 23.6
pow        8.14 / 10.7 / 14.9 / 2.65             3.14 / 3.32 /  9.1 / 0.99
=========  ====================================  ====================================

Vector code (``inspect_asm`` of the loops, 512-bit): zmm ``vfmadd213pd``/``vfmadd231pd`` chains,
``vrndscalepd`` (llvm.rint), ``vpsllq``/``vpsraq``/``vpaddq`` on the exponent bits, ``vcmp*pd`` into mask
registers with ``vblendmpd``/masked moves for the selects, ``vdivpd`` (log, log1p, tanh, sigmoid), ``vgatherqpd``
(erf's and pow's tables), ``vcvtps2pd``/``vcvtpd2ps`` for float32.  No calls in the loop body.

Fastmath: the functions rely on IEEE semantics for nan/inf selects and on the order of a few operations
(TwoSum in expm1 and pow, ``(p * s1) * s2`` near the overflow and subnormal boundaries).  Inline them into code
compiled with at most FMA contraction (``{"contract"}``, tested); never ``nnan``/``ninf``/``reassoc``.

Subnormal numbers: arguments below 1e-18 in magnitude are replaced by 0 before any polynomial squares them (the
result is selected separately), because arithmetic on subnormals costs a microcode assist per lane.  Subnormal
*results* (exp below -708) are exact to 1 ulp and still take that slow path for the lanes concerned.

Huge sin/cos arguments: ``vsin``/``vcos`` reduce the argument with pi/2 split into three doubles and FMA, which
is accurate for ``|x| <= SIN_COS_LIMIT_F64`` (resp. ``_F32``).  Beyond that a lane would need an exact
(Payne-Hanek) reduction.  A libm fallback inside the function cannot work: LLVM's vectoriser speculates a
conditional ``sin`` call and performs it for every lane (measured: four scalar calls per vector of four), so the
fast path would lose its speed.  The check is therefore the *caller's*: a loop using ``vsin``/``vcos`` also
or-reduces ``sincos_out_of_range_f64(arg)`` (vectorises) and, if any lane was out of range, the caller reruns
that loop with libm (``math.sin``).  For such lanes ``vsin``/``vcos`` return nan (loud if a caller forgets the
check; numpy gives nan for nan and +-inf, which are not flagged).

Compile cost: each function inlined into a loop adds roughly 0.1-0.3 s of Numba/LLVM time (pow about 0.7 s).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = [
    "IMPORT_LINE",
    "SIN_COS_LIMIT_F32",
    "SIN_COS_LIMIT_F64",
    "VECTOR_FUNCTIONS",
    "sincos_out_of_range_f32",
    "sincos_out_of_range_f64",
    "vcos_f32",
    "vcos_f64",
    "verf_f32",
    "verf_f64",
    "vexp_f32",
    "vexp_f64",
    "vexpm1_f32",
    "vexpm1_f64",
    "vlog_f32",
    "vlog_f64",
    "vlog1p_f32",
    "vlog1p_f64",
    "vpow_f32",
    "vpow_f64",
    "vsigmoid_f32",
    "vsigmoid_f64",
    "vsin_f32",
    "vsin_f64",
    "vtanh_f32",
    "vtanh_f64",
]

# ---------------------------------------------------------------------------------------------------------------
# LLVM intrinsics with vector forms.  Numba has no scalar fma/rint/bit-cast that LLVM keeps as one instruction,
# so they are declared here.  The function type is always given explicitly (llvmlite's declare_intrinsic guesses a
# wrong signature for some of them, e.g. llvm.copysign).


def _call_llvm(builder, name: str, ty, args):
    fnty = ir.FunctionType(ty, [ty] * len(args))
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, args)


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma; vfmadd on x86)."""
    if isinstance(a, types.Float) and a == b == c:

        def codegen(context, builder, sig, args):
            return _call_llvm(builder, f"llvm.fma.f{a.bitwidth}", args[0].type, args)

        return a(a, b, c), codegen
    return None


@intrinsic
def _rint(typingctx, a):
    """Round to nearest integer, ties to even, as a float (llvm.rint; vroundpd/vrndscalepd)."""
    if isinstance(a, types.Float):

        def codegen(context, builder, sig, args):
            return _call_llvm(builder, f"llvm.rint.f{a.bitwidth}", args[0].type, args)

        return a(a), codegen
    return None


@intrinsic
def _as_int(typingctx, a):
    """Bit pattern of a float64 (float32) as int64 (int32)."""
    if isinstance(a, types.Float):
        ity = types.int64 if a.bitwidth == 64 else types.int32

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(a.bitwidth))

        return ity(a), codegen
    return None


@intrinsic
def _as_float(typingctx, a):
    """Float64 (float32) whose bit pattern is the int64 (int32) ``a``."""
    if isinstance(a, types.Integer) and a.bitwidth in (32, 64):
        fty = types.float64 if a.bitwidth == 64 else types.float32

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.DoubleType() if a.bitwidth == 64 else ir.FloatType())

        return fty(a), codegen
    return None


_jit = numba.njit(inline="always", cache=True, error_model="numpy")

# 1.5 * 2**52: adding it to an integer-valued double |k| < 2**51 puts k in the low mantissa bits, so the int64
# of k is one bit-cast and one subtraction away.  (fptosi of a vector of doubles needs AVX-512DQ; this works on
# AVX2 too.)  k is already an integer (llvm.rint), so no fastmath flag can fold the addition away.
_SHIFTER = 6755399441055744.0
_SHIFTER_BITS = 0x4338000000000000


@_jit
def _float_to_int(k):
    """int64 of an integer-valued float64 with |k| < 2**51 (never nan: callers replace nan first)."""
    return _as_int(k + _SHIFTER) - _SHIFTER_BITS


@_jit
def _pow2(k):
    """2.0**k for an int64 -1022 <= k <= 1023."""
    return _as_float((k + 1023) << 52)


# ---------------------------------------------------------------------------------------------------------------
# exp.  x = k*ln2 + r with |r| <= ln2/2 (FMA with ln2 in two parts: the first product is exact, see below), then
# exp(r) = 1 + r + r^2 q(r) with q a degree-9 fit (relative error of q 2.3e-16, i.e. 1.4e-17 of the result), and
# the result times 2^k.  2^k is applied as two factors 2^(k>>1) * 2^(k - k>>1): both are normal doubles over the
# whole clamped range, the first product is exact, and the second rounds once, to inf above the overflow
# threshold and to the correctly placed subnormal below -708.4.

_LOG2E = 1.4426950408889634
_TINY = 1e-18  # below this, f(x) rounds to f(0) or to x for every function here that squares x
_LN2_HI = 0.6931471805599453
_LN2_LO = 2.3190468138462996e-17

# q(r) = (exp(r) - 1 - r) / r^2 on [-ln2/2, ln2/2], least squares on Chebyshev nodes with Remez-like reweighting
# (derived at development time with mpmath).
_EQ0 = 0.5000000000000001
_EQ1 = 0.16666666666666644
_EQ2 = 0.041666666666624344
_EQ3 = 0.008333333333356195
_EQ4 = 0.0013888888917121323
_EQ5 = 0.00019841269784662448
_EQ6 = 2.4801521422836652e-05
_EQ7 = 2.755735553358328e-06
_EQ8 = 2.7620034047290677e-07
_EQ9 = 2.5068150786058597e-08


@_jit
def _exp_reduce(x):
    """(k, r) with x = k*ln2 + r, |r| <= ln2/2 + tiny; x must be finite with |x| < 2**40."""
    k = _rint(x * _LOG2E)
    # x - k*LN2_HI is exact: both are multiples of 2**-53 (for |x| >= 1) and the difference is below 1.
    r = _fma(-k, _LN2_HI, x)
    r = _fma(-k, _LN2_LO, r)
    return k, r


@_jit
def _expm1_poly(r):
    """exp(r) - 1 - r for |r| <= ln2/2 (so exp(r) = 1 + (r + this))."""
    q = _fma(r, _EQ9, _EQ8)
    q = _fma(r, q, _EQ7)
    q = _fma(r, q, _EQ6)
    q = _fma(r, q, _EQ5)
    q = _fma(r, q, _EQ4)
    q = _fma(r, q, _EQ3)
    q = _fma(r, q, _EQ2)
    q = _fma(r, q, _EQ1)
    q = _fma(r, q, _EQ0)
    return r * r * q


@_jit
def _exp64(x):
    # Clamp so that k fits the exponent arithmetic; results beyond the clamp are inf or 0 anyway.
    # Written as selects (nan fails both compares and is patched at the end).
    xc = x if x > -750.0 else -750.0
    xc = xc if xc < 720.0 else 720.0
    # exp(x) rounds to 1 for |x| < 2^-54; computing with 0 there keeps subnormal numbers (a microcode assist per
    # lane, ~100x slower) out of r*r.  The same guard is in every function below whose polynomial squares x.
    xc = xc if abs(x) > _TINY else 0.0
    k, r = _exp_reduce(xc)
    p = 1.0 + (r + _expm1_poly(r))
    ki = _float_to_int(k)
    k1 = ki >> 1
    y = (p * _pow2(k1)) * _pow2(ki - k1)
    return x if x != x else y


@_jit
def vexp_f64(x):
    """exp(x) for float64 (max error about 0.5 ulp; numpy's special values and boundaries)."""
    return _exp64(x)


@_jit
def vexp_f32(x):
    """exp(x) for float32, computed in float64 and rounded once."""
    return np.float32(_exp64(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# expm1.  Same reduction as exp, but r is kept as r_hi + r_lo (r_hi = x - k*LN2_HI is exact) and expm1(r) as
# u_hi + u_lo, so that expm1(x) = 2^k u + (2^k - 1) can be summed exactly (TwoSum) and rounded once: with u
# rounded first, the cancellation at k = +-1 (x in +-[0.35, 1.04]) and the inexact 2^k - 1 for k > 53 cost up
# to 2.3 ulp.  For k = 0 the result is u itself, so small |x| keep full relative accuracy.


@_jit
def _two_sum(a, b):
    """(s, t) with s = fl(a + b) and s + t = a + b exactly (no condition on |a|, |b|)."""
    s = a + b
    bb = s - a
    t = (a - (s - bb)) + (b - bb)
    return s, t


@_jit
def _expm1_64(x):
    xc = x if x > -60.0 else -60.0  # expm1(x) rounds to -1 below about -37.4
    xc = xc if xc < 720.0 else 720.0
    xc = xc if abs(x) > _TINY else 0.0
    k = _rint(xc * _LOG2E)
    r_hi = _fma(-k, _LN2_HI, xc)
    r_lo = -k * _LN2_LO
    r = r_hi + r_lo
    u_hi, u_lo = _two_sum(r_hi, r_lo + _expm1_poly(r))
    ki = _float_to_int(k)
    kn = ki if ki < 1023 else 1022
    s = _pow2(kn)
    h, l = _two_sum(s * u_hi, s)  # s * u_hi is exact (a power of two)
    tail = s * u_lo
    # k <= 1: h - 1 is exact (h < 2.9), sum the small parts first.  k >= 2: h >> 1, fold -1 into the small parts.
    y = h + ((l - 1.0) + tail) if ki >= 2 else (h - 1.0) + (l + tail)
    # exp(x) near the overflow threshold: 2^k itself may not be representable; -1 no longer matters there.
    k1 = ki >> 1
    big = ((1.0 + (u_hi + u_lo)) * _pow2(k1)) * _pow2(ki - k1)
    y = big if ki > 1022 else y
    # expm1(x) rounds to x for tiny |x| (and the reduction would turn -0.0 into +0.0); nan fails the clamps above.
    return x if (x != x) | (abs(x) <= _TINY) else y


@_jit
def vexpm1_f64(x):
    """expm1(x) = exp(x) - 1 for float64, accurate also for tiny |x|."""
    return _expm1_64(x)


@_jit
def vexpm1_f32(x):
    """expm1(x) for float32, computed in float64 and rounded once."""
    return np.float32(_expm1_64(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# log and log1p.  u = 2^e m with m in [sqrt(1/2), sqrt(2)) (integer arithmetic on the bit pattern), f = m - 1,
# s = f / (2 + f) (|s| <= 0.1716), and log(m) = 2 atanh(s) = f - f^2/2 + s (f^2/2 + z R(z)) with z = s^2:
# f - f^2/2 carries most of the value exactly enough, the polynomial only its ~1% tail.  log1p additionally
# corrects for the rounding of u = 1 + x by (1 + x - u) / u, the first-order term of log((1 + x) / u).

# R(z) = (2 atanh(s)/s - 2) / z on [0, 0.0295]; relative error 4.7e-16 (times z/3 <= 1% of the result).
_LR0 = 0.666666666666667
_LR1 = 0.39999999999898567
_LR2 = 0.2857142862638144
_LR3 = 0.22222211070902115
_LR4 = 0.18182893642829256
_LR5 = 0.15331575182305712
_LR6 = 0.14618220778686222

_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bit pattern of sqrt(1/2)
_SMALLEST_NORMAL = 2.2250738585072014e-308
_TWO54 = 18014398509481984.0


@_jit
def _log_mantissa(u):
    """(e, f) with u = 2^e (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), for a positive normal finite u; e is int64."""
    bits = _as_int(u)
    e = (bits - _SQRT_HALF_BITS) >> 52
    m = _as_float(bits - (e << 52))
    return e, m - 1.0


@_jit
def _log1p_reduced(f):
    """log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]."""
    s = f / (2.0 + f)
    z = s * s
    R = _fma(z, _LR6, _LR5)
    R = _fma(z, R, _LR4)
    R = _fma(z, R, _LR3)
    R = _fma(z, R, _LR2)
    R = _fma(z, R, _LR1)
    R = _fma(z, R, _LR0)
    hfsq = 0.5 * f * f
    return f - (hfsq - s * _fma(z, R, hfsq))


@_jit
def _int_to_float(e):
    """float64 of an int64 |e| < 2**51 (sitofp of a vector needs AVX-512DQ; this is two integer/float ops)."""
    return _as_float(e + _SHIFTER_BITS) - _SHIFTER


@_jit
def _log64(x):
    # Subnormal x: scale into the normal range first (a select, so the vector path stays straight).
    sub = x < _SMALLEST_NORMAL
    u = x * _TWO54 if sub else x
    u = u if u > 0.0 else 1.0  # keep the bit arithmetic on a sane value; the result is patched below
    u = u if u < math.inf else 1.0
    e, f = _log_mantissa(u)
    e = e - 54 if sub else e
    ef = _int_to_float(e)
    y = _fma(ef, _LN2_HI, _fma(ef, _LN2_LO, _log1p_reduced(f)))
    y = -math.inf if x == 0.0 else y
    y = x if x == math.inf else y
    return math.nan if (x < 0.0) | (x != x) else y


@_jit
def vlog_f64(x):
    """Natural logarithm for float64: log(0) = -inf, log(x < 0) = nan."""
    return _log64(x)


@_jit
def vlog_f32(x):
    """Natural logarithm for float32, computed in float64 and rounded once."""
    return np.float32(_log64(np.float64(x)))


@_jit
def _log1p64(x):
    u = 1.0 + x
    # (1 + x) - u exactly, divided by u: the rounding of u, as a relative correction.
    c = (1.0 - (u - x)) if u >= 2.0 else (x - (u - 1.0))
    c = c / u
    uu = u if u > 0.0 else 1.0
    uu = uu if uu < math.inf else 1.0
    e, f = _log_mantissa(uu)
    ef = _int_to_float(e)
    y = _fma(ef, _LN2_HI, _fma(ef, _LN2_LO, _log1p_reduced(f) + c))
    # Tiny |x|: u = 1 + x keeps almost none of x, and the correction c carries it with 1.4 ulp error; the series
    # x - x^2/2 is exact to 1e-18 relative there (and x itself below 1e-18, with no subnormal x*x).
    xs = x if abs(x) > _TINY else 0.0
    y = _fma(-0.5 * xs, xs, x) if abs(x) < 1e-9 else y
    y = -math.inf if x == -1.0 else y
    y = x if (abs(x) <= _TINY) | (x == math.inf) else y  # keeps the sign of -0.0
    return math.nan if (x < -1.0) | (x != x) else y


@_jit
def vlog1p_f64(x):
    """log(1 + x) for float64, accurate also for tiny |x|."""
    return _log1p64(x)


@_jit
def vlog1p_f32(x):
    """log(1 + x) for float32, computed in float64 and rounded once."""
    return np.float32(_log1p64(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# sin and cos.  k = rint(x * 2/pi), r = x - k pi/2 with pi/2 in three doubles and FMA (the first step is exact:
# x and k*P1 are multiples of 2^-52 and their difference is below 1), then sin or cos of r by odd/even
# polynomials, picked and signed by k mod 4.  Valid for |x| <= SIN_COS_LIMIT_F64: up to there
# fl(x * 2/pi) is within 2^-7 of x * 2/pi, so |r| <= pi/4 + 0.013, inside the polynomials' fitted range.

SIN_COS_LIMIT_F64 = 2.0**47  # 1.4e14
SIN_COS_LIMIT_F32 = 2.0**47

_TWO_OVER_PI = 0.6366197723675814
_PIO2_1 = 1.5707963267948966
_PIO2_2 = 6.123233995736766e-17
_PIO2_3 = -1.4973849048591698e-33

# S(z) = (sin(r) - r) / r^3 and C(z) = (cos(r) - 1 + z/2) / z^2, z = r^2 in [0, 0.672] (|r| <= 0.82); relative
# errors 2.3e-16 and 5.6e-17 (times at most z/6 and z^2/24/cos(r) of the result).
_S0 = -0.16666666666666663
_S1 = 0.008333333333329626
_S2 = -0.00019841269834857
_S3 = 2.755731516362838e-06
_S4 = -2.5050945286812903e-08
_S5 = 1.5905299369935456e-10
_C0 = 0.041666666666666664
_C1 = -0.0013888888888886578
_C2 = 2.4801587297586504e-05
_C3 = -2.7557316688671403e-07
_C4 = 2.0876030291611518e-09
_C5 = -1.1374649558469198e-11


@_jit
def _sincos_reduce(x):
    """(r, q): x = q pi/2 + r (q mod 4 as int64 in 0..3); r = x, q = 0 for out-of-range, inf and nan x."""
    x = x if abs(x) > _TINY else 0.0  # no subnormal r*r (the callers select x or 1 there)
    k = _rint(x * _TWO_OVER_PI)
    k = k if abs(x) <= SIN_COS_LIMIT_F64 else 0.0
    r = _fma(-k, _PIO2_1, x)
    r = _fma(-k, _PIO2_2, r)
    r = _fma(-k, _PIO2_3, r)
    # k mod 4 without converting a large k: k - 4 rint(k/4) is exact and in -2..2.
    m = k - 4.0 * _rint(0.25 * k)
    q = _float_to_int(m) & 3
    return r, q


@_jit
def _sin_poly(r, z):
    S = _fma(z, _S5, _S4)
    S = _fma(z, S, _S3)
    S = _fma(z, S, _S2)
    S = _fma(z, S, _S1)
    S = _fma(z, S, _S0)
    return _fma(r * z, S, r)


@_jit
def _cos_poly(z):
    C = _fma(z, _C5, _C4)
    C = _fma(z, C, _C3)
    C = _fma(z, C, _C2)
    C = _fma(z, C, _C1)
    C = _fma(z, C, _C0)
    hz = 0.5 * z
    w = 1.0 - hz
    # 1 - hz rounded, plus what that rounding lost, plus the tail.
    return w + (((1.0 - w) - hz) + z * z * C)


@_jit
def _sin_quadrant(r, q):
    """sin(r + q pi/2) for q in 0..3."""
    z = r * r
    v = _cos_poly(z) if (q & 1) == 1 else _sin_poly(r, z)
    return -v if (q & 2) == 2 else v


@_jit
def _sin64(x):
    r, q = _sincos_reduce(x)
    y = _sin_quadrant(r, q)
    y = x if abs(x) < 1e-9 else y  # sin(x) rounds to x there; keeps -0.0 and subnormals exact
    return y if abs(x) <= SIN_COS_LIMIT_F64 else math.nan


@_jit
def _cos64(x):
    r, q = _sincos_reduce(x)
    y = _sin_quadrant(r, (q + 1) & 3)
    return y if abs(x) <= SIN_COS_LIMIT_F64 else math.nan


@_jit
def vsin_f64(x):
    """sin(x) for float64; exact reduction only for |x| <= SIN_COS_LIMIT_F64 (see the module docstring)."""
    return _sin64(x)


@_jit
def vsin_f32(x):
    """sin(x) for float32 (computed in float64); |x| <= SIN_COS_LIMIT_F32 (see the module docstring)."""
    return np.float32(_sin64(np.float64(x)))


@_jit
def vcos_f64(x):
    """cos(x) for float64; exact reduction only for |x| <= SIN_COS_LIMIT_F64 (see the module docstring)."""
    return _cos64(x)


@_jit
def vcos_f32(x):
    """cos(x) for float32 (computed in float64); |x| <= SIN_COS_LIMIT_F32 (see the module docstring)."""
    return np.float32(_cos64(np.float64(x)))


@_jit
def sincos_out_of_range_f64(x):
    """True where vsin_f64/vcos_f64 are not exact (finite |x| > SIN_COS_LIMIT_F64): or-reduce it in the loop
    and rerun the loop with libm if any lane was out of range."""
    return (abs(x) > SIN_COS_LIMIT_F64) & (abs(x) < math.inf)


@_jit
def sincos_out_of_range_f32(x):
    """True where vsin_f32/vcos_f32 are not exact (see sincos_out_of_range_f64)."""
    a = np.float64(abs(x))
    return (a > SIN_COS_LIMIT_F32) & (a < math.inf)


# ---------------------------------------------------------------------------------------------------------------
# tanh and sigmoid.


# T(z) = (tanh(x) - x) / x^3, z = x^2 in [0, 0.3025] (|x| <= 0.55); relative error 6e-17.
_T0 = -0.3333333333333333
_T1 = 0.1333333333333271
_T2 = -0.053968253967427215
_T3 = 0.021869488493356095
_T4 = -0.008863234390638568
_T5 = 0.0035921102840109674
_T6 = -0.0014556610728770891
_T7 = 0.0005889323178877164
_T8 = -0.00023462365047695544
_T9 = 8.509495439591745e-05
_T10 = -2.0590130307946973e-05


@_jit
def _tanh64(x):
    # |x| < 0.55: odd polynomial (keeps -0.0 and tiny x exact).  Beyond: 1 - 2/(exp(2|x|) + 1), where
    # 2/(e + 1) <= 1/2, so its rounding errors shrink in the subtraction instead of growing.
    xs = x if abs(x) > _TINY else 0.0  # no subnormal x*x
    z = xs * xs
    T = _fma(z, _T10, _T9)
    T = _fma(z, T, _T8)
    T = _fma(z, T, _T7)
    T = _fma(z, T, _T6)
    T = _fma(z, T, _T5)
    T = _fma(z, T, _T4)
    T = _fma(z, T, _T3)
    T = _fma(z, T, _T2)
    T = _fma(z, T, _T1)
    T = _fma(z, T, _T0)
    small = _fma(xs * z, T, xs)
    a = abs(x)
    large = 1.0 - 2.0 / (_exp64(a + a) + 1.0)
    large = -large if x < 0.0 else large
    y = small if a < 0.55 else large
    return x if abs(x) <= _TINY else y  # also keeps -0.0 (fma(-0 * z, T, -0) is +0)


@_jit
def vtanh_f64(x):
    """tanh(x) for float64."""
    return _tanh64(x)


@_jit
def vtanh_f32(x):
    """tanh(x) for float32, computed in float64 and rounded once."""
    return np.float32(_tanh64(np.float64(x)))


@_jit
def _sigmoid64(x):
    # e = exp(-|x|) in (0, 1]: sigmoid = 1/(1 + e) for x >= 0 and e/(1 + e) for x < 0, never exp of a large
    # positive number (no spurious overflow) and one division either way.
    e = _exp64(-abs(x))
    num = 1.0 if x >= 0.0 else e
    # 1 + e as d_hi + d_lo (exact: 1 >= e), q ~ num / d_hi, then one Newton step on num / (d_hi + d_lo): the
    # rounding of 1 + e and of the quotient no longer add up (2.03 ulp before, measured).
    d_hi = 1.0 + e
    d_lo = (1.0 - d_hi) + e
    inv = 1.0 / d_hi
    q = num * inv
    res = _fma(-q, d_hi, num) - q * d_lo
    return _fma(res, inv, q)


@_jit
def vsigmoid_f64(x):
    """Logistic sigmoid 1 / (1 + exp(-x)) for float64."""
    return _sigmoid64(x)


@_jit
def vsigmoid_f32(x):
    """Logistic sigmoid for float32, computed in float64 and rounded once."""
    return np.float32(_sigmoid64(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# erf.  |x| < 1/2: x P(x^2) (degree-8 fit of erf(x)/x, relative error 1.4e-17).  1/2 <= |x| < 6: the interval of
# width 1/2 holding |x| is looked up in a table of degree-14 fits of erf(c + t), |t| <= 1/4 (absolute error
# below 6e-17, most of it the rounding of the constant term); the 15 coefficient loads become gathers in the
# vector loop.  |x| >= 6: erf rounds to +-1 (erf(5.93) already does in float64).

_EP0 = 1.1283791670955126
_EP0_LO = 1.533545961316588e-17
_EP1 = -0.37612638903183465
_EP2 = 0.1128379167092481
_EP3 = -0.026866170632715007
_EP4 = 0.005223977370314227
_EP5 = -0.0008548297523372905
_EP6 = 0.00012053324265920323
_EP7 = -1.4845582576974313e-05
_EP8 = 1.4723203861464604e-06

# Row j (15 coefficients, constant term first) fits erf on [0.5 (j + 1), 0.5 (j + 2)] around its midpoint.
_ERF_TABLE = np.array([
    # erf(0.75 + t), |t| <= 1/4
    0.7111556336535151, 0.6429310691952074, -0.48219830189640556,
    0.02678879454978599, 0.15068696934264994, -0.05324272916525126,
    -0.026872509535493486, 0.018435234988978526, 0.0023017884626427313,
    -0.0039682530466955005, 0.00018602720031589388, 0.0006238283737271495,
    -0.00010609464432392, -7.408307836838063e-05, 2.1276257795533057e-05,
    # erf(1.25 + t), |t| <= 1/4
    0.9229001282564583, 0.23652112244729076, -0.29565140305911347,
    0.16753579506684377, -0.006159404230407759, -0.0471810364070629,
    0.021301272964582542, 0.00362598277819543, -0.005697678122960133,
    0.0008776295664987204, 0.0007935135841175464, -0.00032381800886443384,
    -5.277517643931728e-05, 5.434283124840206e-05, -2.6667948964288563e-06,
    # erf(1.75 + t), |t| <= 1/4
    0.9866716712191824, 0.052774995930150385, -0.09235624287776316,
    0.09015728471400039, -0.04810220983216717, 0.006624361469440526,
    0.00896304509859288, -0.006058751556185927, 0.0007300512549966364,
    0.0008941851061619094, -0.0004427507511707844, -5.516059637104672e-06,
    6.86762056037968e-05, -1.6964193295453603e-05, -4.668639869661648e-06,
    # erf(2.25 + t), |t| <= 1/4
    0.9985372834133188, 0.007142319022017981, -0.016070217799540466,
    0.02172455369197305, -0.019083383636953114, 0.010657679165375937,
    -0.00290435707120182, -0.0006704559476984863, 0.0009994937206907581,
    -0.0003693812903152425, -1.1466839980552679e-05, 6.515329487368133e-05,
    -2.2683695538885374e-05, -1.5293590305749293e-06, 3.3779848402857785e-06,
    # erf(2.75 + t), |t| <= 1/4
    0.9998993780778803, 0.0005862772470937923, -0.001612262429507927,
    0.0027603887050666135, -0.003258113659631214, 0.002755808414072285,
    -0.0016573274035906003, 0.0006460409567797768, -8.901157581939506e-05,
    -7.12231187482781e-05, 5.4997145397985564e-05, -1.5843731618760055e-05,
    -1.0739516640602895e-06, 2.687088413906291e-06, -8.875100814792923e-07,
    # erf(3.25 + t), |t| <= 1/4
    0.9999956972205363, 2.918902538358193e-05, -9.486433249664119e-05,
    0.0001958097119480573, -0.0002865693377500697, 0.0003137972255144976,
    -0.0002635285042383421, 0.0001699914127131206, -8.164762917610942e-05,
    2.5913917306522693e-05, -2.328909357821672e-06, -2.865770621146952e-06,
    1.9051204271694069e-06, -5.325761762800527e-07, -3.729401915687358e-09,
    # erf(3.75 + t), |t| <= 1/4
    0.9999998862727434, 8.814321912317563e-07, -3.305370717119227e-06,
    7.96961606241606e-06, -1.3841239877948344e-05, 1.837097499326132e-05,
    -1.9272721445611362e-05, 1.6275303116932463e-05, -1.1128227516653625e-05,
    6.108865956667232e-06, -2.6033064519770965e-06, 7.756569138144962e-07,
    -9.019676520143123e-08, -6.063406218665457e-08, 4.3025758776673355e-08,
    # erf(4.25 + t), |t| <= 1/4
    0.9999999981494259, 1.6143993719505844e-08, -6.861197330789232e-08,
    1.890192598001693e-07, -3.7879526930837407e-07, 5.872461797154768e-07,
    -7.309200158403966e-07, 7.477252273948577e-07, -6.378323525599605e-07,
    4.570057026698086e-07, -2.750619098313488e-07, 1.3777561865866208e-07,
    -5.592433134724139e-08, 1.702368631267816e-08, -2.87369032075723e-09,
    # erf(4.75 + t), |t| <= 1/4
    0.9999999999815149, 1.793435703443071e-10, -8.518819591326816e-10,
    2.6378450132670216e-09, -5.980921254287736e-09, 1.0572396972130212e-08,
    -1.514471611079766e-08, 1.8036298840136672e-08, -1.8172813881085422e-08,
    1.5675633269330484e-08, -1.1660964311038442e-08, 7.499935393545831e-09,
    -4.173485658550644e-09, 2.0539511215194335e-09, -8.176008149711219e-10,
    # erf(5.25 + t), |t| <= 1/4
    0.9999999999998869, 1.2084074716657885e-12, -6.3441392260906554e-12,
    2.1801684761251563e-11, -5.5114709468250345e-11, 1.0920039127476613e-10,
    -1.764034237605339e-10, 2.3860452334063483e-10, -2.753679889899986e-10,
    2.748876190797994e-10, -2.3966894913923145e-10, 1.8336858782623075e-10,
    -1.2428312582108408e-10, 7.905072526469397e-11, -4.156798481504373e-11,
    # erf(5.75 + t), |t| <= 1/4
    0.9999999999999996, 4.938485142611816e-15, -2.839628956655678e-14,
    1.0720628061858593e-13, -2.987526279279361e-13, 6.549693335847309e-13,
    -1.175690409668081e-12, 1.7755331009443613e-12, -2.3004013843173464e-12,
    2.5946752856106538e-12, -2.574728398262545e-12, 2.256377348197017e-12,
    -1.775419574214852e-12, 1.3674917072407358e-12, -8.612341527155245e-13,
])


@_jit
def _erf64(x):
    a = abs(x)
    xs = x if a > _TINY else 0.0  # no subnormal x*x
    z = xs * xs
    P = _fma(z, _EP8, _EP7)
    P = _fma(z, P, _EP6)
    P = _fma(z, P, _EP5)
    P = _fma(z, P, _EP4)
    P = _fma(z, P, _EP3)
    P = _fma(z, P, _EP2)
    P = _fma(z, P, _EP1)
    # x (c0 + z P) with c0 = 2/sqrt(pi) in two parts: x*c0 is the bulk and is rounded only once, in the FMA.
    small = _fma(xs, _EP0, _fma(xs, _EP0_LO, xs * z * P))
    ac = a if a < 5.999 else 5.999  # also maps nan to a valid row; patched below
    ac = ac if ac > 0.5 else 0.5
    j = _float_to_int(_rint(2.0 * ac - 1.5))  # interval [0.5 (j + 1), 0.5 (j + 2)], rounding at its ends is fine
    t = ac - (0.5 * _int_to_float(j) + 0.75)
    base = j * 15
    v = _ERF_TABLE[base + 14]
    for i in range(13, -1, -1):
        v = _fma(t, v, _ERF_TABLE[base + i])
    v = 1.0 if a >= 6.0 else v
    v = -v if x < 0.0 else v
    y = small if a < 0.5 else v
    # erf(x) = 2x/sqrt(pi) for tiny x: x*c0 rounded once (fma(-0, c, +0) would also turn -0.0 into +0.0).
    small_x = x * _EP0
    y = small_x if a <= _TINY else y
    return x if (x != x) | (x == 0.0) else y


@_jit
def verf_f64(x):
    """Error function for float64."""
    return _erf64(x)


@_jit
def verf_f32(x):
    """Error function for float32, computed in float64 and rounded once."""
    return np.float32(_erf64(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# pow with a constant exponent.  x**c = exp(c log|x|) needs log|x| to about 2^-66 relative (|c log x| reaches 745,
# and an absolute error of 2^-54 there is already 0.1 ulp of the result), so log|x| is computed as a double-double:
# |x| = 2^e m with m in [sqrt(1/2), sqrt(2)), m*invc = 1 + r with invc from a 128-entry table indexed by the top
# mantissa bits (|r| < 0.0039; three gathers), log|x| = e ln2 + log(1/invc) + log1p(r), summed with TwoSum.
# Then y = c log|x| as y_hi + y_lo, and exp(y_hi + y_lo) with y_lo added to the reduced argument.  The exponents
# numpy special-cases (0, 1, -1, 2, 0.5 -> sqrt) are selects that LLVM folds away when c is a constant.


def _pow_log_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """invc, log(1/invc) as hi + lo, for the 128 subintervals of [sqrt(1/2), sqrt(2)) in bit-pattern order."""
    import mpmath as mp

    bits = _SQRT_HALF_BITS + (np.arange(129, dtype=np.int64) << 45)
    edges = bits.view(np.float64)
    invc = np.empty(128)
    hi = np.empty(128)
    lo = np.empty(128)
    with mp.workdps(40):
        for i in range(128):
            a, b = float(edges[i]), float(edges[i + 1])
            # 1/midpoint to float32 precision is plenty (r is not required to be exact); exactly 1 around m = 1,
            # so that x near 1 has log1p(r) only.
            c = 1.0 if a <= 1.0 < b else float(np.float32(2.0 / (a + b)))
            v = -mp.log(mp.mpf(c))
            invc[i] = c
            hi[i] = float(v)
            lo[i] = float(v - mp.mpf(hi[i]))
    return invc, hi, lo


_POW_INVC, _POW_LOGC_HI, _POW_LOGC_LO = _pow_log_table()
_LN2_HI42 = 0.6931471805598903  # ln2 with 42 significant bits: e * _LN2_HI42 is exact for |e| < 2^11
_LN2_LO42 = 5.497923018708371e-14


@_jit
def _log_dd(ax):
    """log(ax) as (hi, lo) with |error| < 2^-66 |log(ax)|, for a finite ax > 0."""
    sub = ax < _SMALLEST_NORMAL
    u = ax * _TWO54 if sub else ax
    bits = _as_int(u)
    t = bits - _SQRT_HALF_BITS
    e = t >> 52
    i = (t >> 45) & 127
    m = _as_float(bits - (e << 52))
    e = e - 54 if sub else e
    ef = _int_to_float(e)
    invc = _POW_INVC[i]
    # p = fl(m * invc) as an FMA with +0: under fastmath "contract" a plain product would be fused into p - 1
    # below, and r + p_lo would count the rounding twice.  (fma(a, b, +0) cannot fold back to a product: sign of
    # zero.)
    p = _fma(m, invc, 0.0)
    p_lo = _fma(m, invc, -p)  # m*invc = p + p_lo exactly
    r = p - 1.0  # exact (p in [0.99, 1.01])
    # log1p(r + p_lo) = r - r^2/2 + r^3 (1/3 - r/4 + ...) + p_lo (1 - r) + O(p_lo^2)
    P = _fma(r, 1.0 / 9.0, -1.0 / 8.0)
    P = _fma(r, P, 1.0 / 7.0)
    P = _fma(r, P, -1.0 / 6.0)
    P = _fma(r, P, 1.0 / 5.0)
    P = _fma(r, P, -0.25)
    P = _fma(r, P, 1.0 / 3.0)
    rr = r * r
    h_hi = -0.5 * rr
    h_lo = -0.5 * _fma(r, r, -rr)
    s1, e1 = _two_sum(ef * _LN2_HI42, _POW_LOGC_HI[i])
    s2, e2 = _two_sum(s1, r)
    s3, e3 = _two_sum(s2, h_hi)
    tail = (e1 + e2 + e3) + (h_lo + _fma(ef, _LN2_LO42, _POW_LOGC_LO[i])) + (rr * r * P + p_lo * (1.0 - r))
    return s3, tail


@_jit
def _exp_dd(y_hi, y_lo):
    """exp(y_hi + y_lo) for |y_lo| <= 2^-40 |y_hi| (nan/inf y_hi give nan/inf/0 as exp)."""
    xc = y_hi if y_hi > -750.0 else -750.0
    xc = xc if xc < 720.0 else 720.0
    lo = y_lo if xc == y_hi else 0.0  # a clamped y_hi is far out of range; its y_lo may be huge
    k = _rint(xc * _LOG2E)
    r = _fma(-k, _LN2_HI, xc)  # exact, as in _exp_reduce
    r = r + _fma(-k, _LN2_LO, lo)
    p = 1.0 + (r + _expm1_poly(r))
    ki = _float_to_int(k)
    k1 = ki >> 1
    y = (p * _pow2(k1)) * _pow2(ki - k1)
    return y_hi if y_hi != y_hi else y


@_jit
def _is_odd_integer(c):
    # Doubles of magnitude >= 2^53 are all even.
    return (_rint(c) == c) & (_rint(0.5 * c) != 0.5 * c)


@_jit
def _pow64(x, c):
    ax = abs(x)
    c_int = _rint(c) == c
    neg = _as_int(x) < 0  # sign bit, so that -0.0 counts as negative
    odd = _is_odd_integer(c)
    axs = ax if (ax > 0.0) & (ax < math.inf) else 1.0
    l_hi, l_lo = _log_dd(axs)
    y_hi = c * l_hi
    y_lo = _fma(c, l_hi, -y_hi) + c * l_lo
    v = _exp_dd(y_hi, y_lo)
    # |x| = 0 or inf, and c = +-inf: the limits.
    v = (math.inf if c < 0.0 else 0.0) if ax == 0.0 else v
    v = (0.0 if c < 0.0 else math.inf) if ax == math.inf else v
    inf_c = abs(c) == math.inf
    v = ((math.inf if (ax < 1.0) == (c < 0.0) else 0.0) if ax != 1.0 else 1.0) if inf_c else v
    v = -v if neg & odd else v
    v = math.nan if (x < 0.0) & (x > -math.inf) & (~c_int) & (~inf_c) else v
    v = math.nan if (x != x) | (c != c) else v
    # numpy's exact special exponents (and C99's pow(1, c) = pow(x, 0) = 1, even for nan).
    v = x * x if c == 2.0 else v
    v = math.sqrt(x) if c == 0.5 else v
    v = 1.0 / x if c == -1.0 else v
    v = x if c == 1.0 else v
    v = 1.0 if (c == 0.0) | (x == 1.0) else v
    return v


@_jit
def vpow_f64(x, c):
    """x ** c for float64 x and a (constant) float exponent c, with numpy's special values."""
    return _pow64(x, np.float64(c))


@_jit
def _pow32(x, c):
    """x ** c for float32 arguments widened to float64: |c log|x|| < 104 (or the result is 0/inf in float32), so
    double log and exp (relative error 2^-52) put the exponent within 2^-45 -- no double-double needed."""
    ax = abs(x)
    c_int = _rint(c) == c
    neg = _as_int(x) < 0
    odd = _is_odd_integer(c)
    axs = ax if (ax > 0.0) & (ax < math.inf) else 1.0
    y = c * _log64(axs)
    y = y if y < 200.0 else 200.0  # nothing above float32 range needs the exact value; keeps inf*0 out
    v = _exp64(y)
    v = (math.inf if c < 0.0 else 0.0) if ax == 0.0 else v
    v = (0.0 if c < 0.0 else math.inf) if ax == math.inf else v
    inf_c = abs(c) == math.inf
    v = ((math.inf if (ax < 1.0) == (c < 0.0) else 0.0) if ax != 1.0 else 1.0) if inf_c else v
    v = -v if neg & odd else v
    v = math.nan if (x < 0.0) & (x > -math.inf) & (~c_int) & (~inf_c) else v
    v = math.nan if (x != x) | (c != c) else v
    v = x * x if c == 2.0 else v
    v = math.sqrt(x) if c == 0.5 else v
    v = 1.0 / x if c == -1.0 else v
    v = x if c == 1.0 else v
    v = 1.0 if (c == 0.0) | (x == 1.0) else v
    return v


@_jit
def vpow_f32(x, c):
    """x ** c for float32 x (c is rounded to float32 as numpy does), computed in float64 and rounded once."""
    return np.float32(_pow32(np.float64(x), np.float64(np.float32(c))))


# ---------------------------------------------------------------------------------------------------------------
# What the emitter may use: vocabulary name -> base name (append "_f64"/"_f32").  A function is listed only once
# it is implemented and meets the accuracy target (2 ulp vs mpmath in both dtypes).

VECTOR_FUNCTIONS: dict[str, str] = {
    "exp": "vexp",
    "expm1": "vexpm1",
    "log": "vlog",
    "log1p": "vlog1p",
    "sin": "vsin",
    "cos": "vcos",
    "tanh": "vtanh",
    "sigmoid": "vsigmoid",
    "erf": "verf",
}


def _import_line(functions: dict[str, str]) -> str:
    names = sorted(f"{base}_{suffix}" for base in functions.values() for suffix in ("f64", "f32"))
    return f"from codegen.vecmath import ({', '.join(names)})"


IMPORT_LINE: str = _import_line(VECTOR_FUNCTIONS)
