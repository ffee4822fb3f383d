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
with their own lower-degree fits (relative error ~1e-10) and round once at the end: the error is then 0.5 ulp of
float32 plus about 0.01, overflow and subnormal boundaries are those of correct rounding, and no float32-specific
special-value logic is needed.  (Native float32 arithmetic would give twice the lanes; it is not done.)

Accuracy, max error in ulp against mpmath (40 digits), every point of a 1e6-point sweep over the whole range of
each function (uniform, log-uniform in |x| over all magnitudes incl. subnormal, and the hard subranges: see
``SPECS`` in tests/test_vecmath.py); pow: 3e5 points each for c in {2.5, -300.25, 0.3} (float32: {2.5, -7, 0.3,
13}).  Special values (nan, +-inf, +-0, overflow/underflow thresholds) are exact; see the tests.

=========  =======  =======  ===================================================================
function   float64  float32  where the float64 maximum is / note
=========  =======  =======  ===================================================================
exp        1.00     0.50     0.93 above 1e-292 (0.72 for tanh's _exp64); below, one step from correct rounding (*)
expm1      1.19     0.51     x near +-ln2/2 (k = +-1)
log        1.18     0.50     x near 0.7
log1p      1.27     0.50     x near -0.32
sin        1.44     0.50     |x| <= SIN_COS_LIMIT_F64 = 2^47
cos        1.43     0.50     idem
tanh       1.46     0.51     |x| near 0.55 (where polynomial and exp formula meet)
sigmoid    1.42     0.51     x near -4.1 (exp's error passes through e / (1 + e))
erf        0.96     0.51     |x| near 3.8
pow        1.02     0.51     x**c
=========  =======  =======  ===================================================================

(*) For results below about 1e-292 the mpmath reference's low part underflows in the double-double the tests
compare against, so errors there are resolved only to the nearest half ulp; the values differ from the correctly
rounded ones by at most one step.  (On AVX-512 the final scaling by 2^k is ``llvm.ldexp``, one ``vscalefpd`` that
rounds once; elsewhere it is two exact-exponent factors 2^k1 * 2^k2, which round a second time for subnormal
results.)

Speed: ``python tests/test_vecmath.py`` prints ns per element of each function against the scalar libm
loop and numpy's ufuncs; a recorded table is in ``benchmarks/results/vecmath.md``.

Vector code (``inspect_asm`` of the loops, 512-bit): zmm ``vfmadd213pd``/``vfmadd231pd`` chains, ``vrndscalepd``
(llvm.rint), ``vscalefpd`` (llvm.ldexp: exp's 2^k), ``vpsllq``/``vpsraq``/``vpaddq`` on the exponent bits,
``vcmp*pd`` into mask registers with ``vblendmpd``/masked moves for the selects, ``vdivpd`` (log, log1p, tanh,
sigmoid), ``vgatherqpd`` (erf's and pow's tables), ``vcvtps2pd``/``vcvtpd2ps`` for float32. No calls in the loop
body.

Fastmath: the functions rely on IEEE semantics for nan/inf selects and on the order of a few operations
(TwoSum in expm1 and pow, ``(p * s1) * s2`` near the overflow and subnormal boundaries).  Inline them into code
compiled with at most FMA contraction (``{"contract"}``, tested); never ``nnan``/``ninf``/``reassoc``.

Subnormal numbers: arguments below 1e-18 in magnitude are replaced by 0 before any polynomial squares them (the
result is selected separately), because arithmetic on subnormals costs a microcode assist per lane.  Subnormal
*results* (exp below -708) are exact to 1 ulp and still take that slow path for the lanes concerned.

Huge sin/cos arguments: ``vsin``/``vcos`` reduce the argument with pi/2 split into three doubles and FMA, which
is accurate for ``|x| <= SIN_COS_LIMIT_F64`` (resp. ``_F32``).  Beyond that a lane would need an exact
(Payne-Hanek) reduction.  A libm fallback inside the function cannot work: LLVM's vectoriser speculates a
conditional ``sin`` call and performs it for every lane, so the fast path would lose its speed.  The check is
therefore the *caller's*: a loop using ``vsin``/``vcos`` also
or-reduces ``sincos_out_of_range_f64(arg)`` (vectorises) and, if any lane was out of range, the caller reruns
that loop with libm (``math.sin``).  For such lanes ``vsin``/``vcos`` return nan (loud if a caller forgets the
check; numpy gives nan for nan and +-inf, which are not flagged).

Compile cost: Numba inlines an ``inline="always"`` function by deep-copying its IR and re-running passes at each
call site, which dominated compile time; so the small helpers (float<->int, 2^k, TwoSum, Horner) are intrinsics
and the public float64 functions are the implementations themselves.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .simd import _cpu_features

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


# The small helpers below are intrinsics rather than inlined functions: Numba inlines an ``inline="always"``
# function by deep-copying and re-running passes over its IR at every call site, which made up most of the
# compile time of a loop using several of these functions.  An intrinsic emits its few LLVM instructions directly
# (and, having no fastmath flags of its own, keeps its exact arithmetic whatever flags the caller uses).
_I64 = ir.IntType(64)
_F64 = ir.DoubleType()


@intrinsic
def _float_to_int(typingctx, k):
    """int64 of an integer-valued float64 with |k| < 2**51 (never nan: callers replace nan first)."""
    if k == types.float64:

        def codegen(context, builder, sig, args):
            shifted = builder.fadd(args[0], ir.Constant(_F64, _SHIFTER))
            return builder.sub(builder.bitcast(shifted, _I64), ir.Constant(_I64, _SHIFTER_BITS))

        return types.int64(k), codegen
    return None


@intrinsic
def _round_scaled(typingctx, x, c):
    """(k, ki): x*c rounded to an integer (ties to even) as a float64 and as an int64, for |x*c| < 2**50.

    One FMA adds _SHIFTER to the exact product, which rounds it to an integer and leaves that integer in the
    low mantissa bits: k and ki are one subtraction each (instead of llvm.rint and the _float_to_int addition).
    Emitted here, without fastmath flags, so that no flag can fold ``(x*c + _SHIFTER) - _SHIFTER`` into x*c."""
    if x == types.float64 and c == types.float64:
        tup = types.Tuple((types.float64, types.int64))

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(_F64, [_F64] * 3)
            fma = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f64")
            shifted = builder.call(fma, [args[0], args[1], ir.Constant(_F64, _SHIFTER)])
            k = builder.fsub(shifted, ir.Constant(_F64, _SHIFTER))
            ki = builder.sub(builder.bitcast(shifted, _I64), ir.Constant(_I64, _SHIFTER_BITS))
            return context.make_tuple(builder, tup, (k, ki))

        return tup(x, c), codegen
    return None


@intrinsic
def _clamp(typingctx, x, lo, hi):
    """x limited to [lo, hi], with nan passed through (``lo if lo > x``, then ``hi if hi < x``: a nan fails both
    compares); one vmaxpd and one vminpd per vector."""
    if x == lo == hi == types.float64:

        def codegen(context, builder, sig, args):
            v, a, b = args
            v = builder.select(builder.fcmp_ordered(">", a, v), a, v)
            return builder.select(builder.fcmp_ordered("<", b, v), b, v)

        return x(x, lo, hi), codegen
    return None


@intrinsic
def _int_to_float(typingctx, e):
    """float64 of an int64 |e| < 2**51 (sitofp of a vector needs AVX-512DQ; this is two integer/float ops)."""
    if isinstance(e, types.Integer):

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], e, types.int64)
            biased = builder.bitcast(builder.add(v, ir.Constant(_I64, _SHIFTER_BITS)), _F64)
            return builder.fsub(biased, ir.Constant(_F64, _SHIFTER))

        return types.float64(e), codegen
    return None


def _pow2_ir(builder, e):
    """LLVM IR of the float64 2.0**e for an int64 value -1022 <= e <= 1023 (the exponent bits)."""
    return builder.bitcast(builder.shl(builder.add(e, ir.Constant(_I64, 1023)), ir.Constant(_I64, 52)), _F64)


@intrinsic
def _pow2(typingctx, k):
    """2.0**k for an int64 -1022 <= k <= 1023."""
    if isinstance(k, types.Integer):

        def codegen(context, builder, sig, args):
            return _pow2_ir(builder, context.cast(builder, args[0], k, types.int64))

        return types.float64(k), codegen
    return None


# llvm.ldexp becomes one ``vscalefpd`` per vector on AVX-512, which rounds once also for subnormal results;
# elsewhere LLVM calls libm's ldexp per lane, so the scaling stays integer arithmetic on the exponent bits.
# (numpy's view of the CPU, as the build cache's key records it.)
_SCALE_BY_LDEXP = bool(_cpu_features().get("AVX512F"))


@intrinsic
def _scale2(typingctx, p, k):
    """p * 2**k rounded once, for a float64 p in [0.5, 2] (or nan) and an int64 |k| <= 1100: inf above
    the overflow threshold and the correctly rounded subnormal below the normal range."""
    if p == types.float64 and isinstance(k, types.Integer):

        def codegen(context, builder, sig, args):
            x, kv = args[0], context.cast(builder, args[1], k, types.int64)
            if _SCALE_BY_LDEXP:
                fnty = ir.FunctionType(_F64, [_F64, ir.IntType(32)])
                fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.ldexp.f64.i32")
                return builder.call(fn, [x, builder.trunc(kv, ir.IntType(32))])
            # two factors 2^(k>>1) * 2^(k - k>>1): both normal over the whole range, the first product
            # exact, the second rounding once (but twice for subnormal results: within 1 ulp there)
            k1 = builder.ashr(kv, ir.Constant(_I64, 1))
            return builder.fmul(builder.fmul(x, _pow2_ir(builder, k1)), _pow2_ir(builder, builder.sub(kv, k1)))

        return types.float64(p, k), codegen
    return None


@intrinsic
def _two_sum(typingctx, a, b):
    """(s, t) with s = fl(a + b) and s + t = a + b exactly (no condition on |a|, |b|)."""
    if a == types.float64 and b == types.float64:
        tup = types.UniTuple(types.float64, 2)

        def codegen(context, builder, sig, args):
            x, y = args
            s = builder.fadd(x, y)
            bb = builder.fsub(s, x)
            t = builder.fadd(builder.fsub(x, builder.fsub(s, bb)), builder.fsub(y, bb))
            return context.make_tuple(builder, tup, (s, t))

        return tup(a, b), codegen
    return None


@intrinsic
def _horner(typingctx, x, coeffs):
    """c0 + x (c1 + x (c2 + ...)) by FMA, for a tuple of float64 coefficients (constant term first)."""
    if x == types.float64 and isinstance(coeffs, types.UniTuple) and coeffs.dtype == types.float64:
        n = coeffs.count

        def codegen(context, builder, sig, args):
            xv, cs = args
            fnty = ir.FunctionType(_F64, [_F64] * 3)
            fma = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f64")
            acc = builder.extract_value(cs, n - 1)
            for i in range(n - 2, -1, -1):
                acc = builder.call(fma, [xv, acc, builder.extract_value(cs, i)])
            return acc

        return types.float64(x, coeffs), codegen
    return None


# ---------------------------------------------------------------------------------------------------------------
# exp.  x = k*ln2 + r with |r| <= ln2/2 (k from one FMA with _SHIFTER, see _round_scaled; r by FMA with ln2 in two
# parts: the first product is exact, see below), then exp(r) = 1 + r + r^2 q(r) with q a degree-9 fit (relative
# error of q 2.3e-16, i.e. 1.4e-17 of the result), and the result times 2^k by _scale2, which rounds once: to inf
# above the overflow threshold and to the correctly placed subnormal below -708.4.

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


_EQ64 = (_EQ0, _EQ1, _EQ2, _EQ3, _EQ4, _EQ5, _EQ6, _EQ7, _EQ8, _EQ9)


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
    return r * r * _horner(r, _EQ64)


@_jit
def vexp_f64(x):
    """exp(x) for float64 (max error about 0.9 ulp; numpy's special values and boundaries)."""
    # Clamp so that k fits the exponent arithmetic; results beyond the clamp are inf or 0 anyway.  A nan passes
    # the clamp and stays nan through every step below (also through the scaling).
    # exp(x) rounds to 1 for |x| < 2^-54; computing with 0 there keeps subnormal numbers (a microcode assist per
    # lane, ~100x slower) out of r*r.  The same guard is in every function below whose polynomial squares x.
    xc = _clamp(x, -750.0, 720.0)
    xc = 0.0 if abs(x) < _TINY else xc
    k, ki = _round_scaled(xc, _LOG2E)
    r = _fma(-k, _LN2_HI, xc)  # exact (see _exp_reduce)
    r = _fma(-k, _LN2_LO, r)
    # exp(r) = 1 + r (1 + r q): the last FMA adds r times a factor near 1 to 1, so the rounding of that factor
    # counts only |r| <= 0.35 times (summing 1 + (r + r^2 q) instead adds up to about 1 ulp; rounding p once,
    # as _exp64 does, costs four more operations).
    p = _fma(r, _fma(r, _horner(r, _EQ64), 1.0), 1.0)
    return _scale2(p, ki)


@_jit
def _exp64(x):
    """exp(x) for float64 with max error about 0.73 ulp (vexp_f64's steps, with p rounded once): for tanh, whose
    formula passes exp's error on."""
    xc = _clamp(x, -750.0, 720.0)
    xc = 0.0 if abs(x) < _TINY else xc
    k, ki = _round_scaled(xc, _LOG2E)
    r_hi = _fma(-k, _LN2_HI, xc)  # exact (see _exp_reduce)
    r_lo = -k * _LN2_LO
    r = r_hi + r_lo
    # p = 1 + r_hi + (r_lo + r^2 q) with 1 + r_hi kept exactly as hi + lo: p is rounded once (max error 0.5 ulp
    # plus ~0.2, instead of about 1 when r and 1 + (r + r^2 q) were rounded separately).
    hi = 1.0 + r_hi
    lo = (1.0 - hi) + r_hi
    p = hi + (lo + (r_lo + _expm1_poly(r)))
    return _scale2(p, ki)


@_jit
def vexp_f32(x):
    """exp(x) for float32, computed in float64 (lower-degree fit) and rounded once."""
    return np.float32(_exp32(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# expm1.  Same reduction as exp, but r is kept as r_hi + r_lo (r_hi = x - k*LN2_HI is exact) and expm1(r) as
# u_hi + u_lo, so that expm1(x) = 2^k u + (2^k - 1) can be summed exactly (TwoSum) and rounded once: with u
# rounded first, the cancellation at k = +-1 (x in +-[0.35, 1.04]) and the inexact 2^k - 1 for k > 53 cost up
# to 2.3 ulp.  For k = 0 the result is u itself, so small |x| keep full relative accuracy.


@_jit
def vexpm1_f64(x):
    """expm1(x) = exp(x) - 1 for float64, accurate also for tiny |x|."""
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
    big = _scale2(1.0 + (u_hi + u_lo), ki)
    y = big if ki > 1022 else y
    # expm1(x) rounds to x for tiny |x| (and the reduction would turn -0.0 into +0.0); nan fails the clamps above.
    return x if (x != x) | (abs(x) <= _TINY) else y


_expm1_64 = vexpm1_f64  # the name the other functions here use


@_jit
def vexpm1_f32(x):
    """expm1(x) for float32, computed in float64 (lower-degree fit) and rounded once."""
    return np.float32(_expm1_32(np.float64(x)))


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
    R = _horner(z, (_LR0, _LR1, _LR2, _LR3, _LR4, _LR5, _LR6))
    hfsq = 0.5 * f * f
    return f - (hfsq - s * _fma(z, R, hfsq))


@_jit
def vlog_f64(x):
    """Natural logarithm for float64: log(0) = -inf, log(x < 0) = nan."""
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


_log64 = vlog_f64  # the name the other functions here use


@_jit
def vlog_f32(x):
    """Natural logarithm for float32, computed in float64 (lower-degree fit) and rounded once."""
    return np.float32(_log32(np.float64(x)))


@_jit
def vlog1p_f64(x):
    """log(1 + x) for float64, accurate also for tiny |x|."""
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


_log1p64 = vlog1p_f64  # the name the other functions here use


@_jit
def vlog1p_f32(x):
    """log(1 + x) for float32, computed in float64 (lower-degree fit) and rounded once."""
    return np.float32(_log1p32(np.float64(x)))


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


_S64 = (_S0, _S1, _S2, _S3, _S4, _S5)
_C64 = (_C0, _C1, _C2, _C3, _C4, _C5)


@_jit
def _sin_poly(r, z):
    return _fma(r * z, _horner(z, _S64), r)


@_jit
def _cos_poly(z):
    C = _horner(z, _C64)
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
def vsin_f64(x):
    """sin(x) for float64; exact reduction only for |x| <= SIN_COS_LIMIT_F64 (see the module docstring)."""
    r, q = _sincos_reduce(x)
    y = _sin_quadrant(r, q)
    y = x if abs(x) < 1e-9 else y  # sin(x) rounds to x there; keeps -0.0 and subnormals exact
    return y if abs(x) <= SIN_COS_LIMIT_F64 else math.nan


_sin64 = vsin_f64  # the name the other functions here use


@_jit
def vcos_f64(x):
    """cos(x) for float64; exact reduction only for |x| <= SIN_COS_LIMIT_F64 (see the module docstring)."""
    r, q = _sincos_reduce(x)
    y = _sin_quadrant(r, (q + 1) & 3)
    return y if abs(x) <= SIN_COS_LIMIT_F64 else math.nan


_cos64 = vcos_f64  # the name the other functions here use


@_jit
def vsin_f32(x):
    """sin(x) for float32 (computed in float64); |x| <= SIN_COS_LIMIT_F32 (see the module docstring)."""
    return np.float32(_sin32(np.float64(x)))


@_jit
def vcos_f32(x):
    """cos(x) for float32 (computed in float64); |x| <= SIN_COS_LIMIT_F32 (see the module docstring)."""
    return np.float32(_cos32(np.float64(x)))


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
def vtanh_f64(x):
    """tanh(x) for float64."""
    # |x| < 0.55: odd polynomial (keeps -0.0 and tiny x exact).  Beyond: 1 - 2/(exp(2|x|) + 1), where
    # 2/(e + 1) <= 1/2, so its rounding errors shrink in the subtraction instead of growing.
    xs = x if abs(x) > _TINY else 0.0  # no subnormal x*x
    z = xs * xs
    T = _horner(z, (_T0, _T1, _T2, _T3, _T4, _T5, _T6, _T7, _T8, _T9, _T10))
    small = _fma(xs * z, T, xs)
    a = abs(x)
    large = 1.0 - 2.0 / (_exp64(a + a) + 1.0)
    large = -large if x < 0.0 else large
    y = small if a < 0.55 else large
    return x if abs(x) <= _TINY else y  # also keeps -0.0 (fma(-0 * z, T, -0) is +0)


_tanh64 = vtanh_f64  # the name the other functions here use


@_jit
def vtanh_f32(x):
    """tanh(x) for float32, computed in float64 (lower-degree fits) and rounded once."""
    return np.float32(_tanh32(np.float64(x)))


@_jit
def vsigmoid_f64(x):
    """Logistic sigmoid 1 / (1 + exp(-x)) for float64."""
    # e = exp(-|x|) in (0, 1]: sigmoid = 1/(1 + e) for x >= 0 and e/(1 + e) for x < 0, never exp of a large
    # positive number (no spurious overflow) and one division either way.  (vexp_f64, not the more accurate
    # _exp64: the quotients below pass on at most exp's relative error, and the maximum stays where it was.)
    e = vexp_f64(-abs(x))
    num = 1.0 if x >= 0.0 else e
    # 1 + e as d_hi + d_lo (exact: 1 >= e), q ~ num / d_hi, then one Newton step on num / (d_hi + d_lo): the
    # rounding of 1 + e and of the quotient no longer add up.
    d_hi = 1.0 + e
    d_lo = (1.0 - d_hi) + e
    inv = 1.0 / d_hi
    q = num * inv
    res = _fma(-q, d_hi, num) - q * d_lo
    return _fma(res, inv, q)


_sigmoid64 = vsigmoid_f64  # the name the other functions here use


@_jit
def vsigmoid_f32(x):
    """Logistic sigmoid for float32, computed in float64 (lower-degree fit) and rounded once."""
    return np.float32(_sigmoid32(np.float64(x)))


# ---------------------------------------------------------------------------------------------------------------
# erf.  |x| < 1/2: x P(x^2) (degree-8 fit of erf(x)/x, relative error 1.4e-17).  1/2 <= |x| < 6: the interval of
# width 1/4 holding |x| is looked up in a table of degree-11 fits of erf(c + t), |t| <= 1/8 (absolute error
# below 5.1e-17, most of it the rounding of the constant term); the 12 coefficient loads become gathers in the
# vector loop, which dominate the cost.  |x| >= 6: erf rounds to +-1 (erf(5.93) already does in float64).
# float32 needs far less: degree 5 below 1/2 (1.2e-11) and a degree-6 table up to 4 (1.4e-10), 7 gathers.

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

# Row j (constant term first) fits erf on [0.5 + j/4, 0.75 + j/4] around its midpoint.
_ERF_TABLE = np.array([
    # erf(0.625 + t), |t| <= 1/8
    0.623240882188418, 0.7634995357606049, -0.4771872098503767, -0.0556718411492232,
    0.17645985364159866, -0.027413411060164712, -0.041344833395120836, 0.013910007502349206,
    0.006686134866334241, -0.0036332458188656643, -0.0007325746619785084, 0.0006726436441989587,
    # erf(0.875 + t), |t| <= 1/8
    0.7840750610598597, 0.5247450452901482, -0.45915191462888594, 0.09292360177012675,
    0.1123965624398771, -0.06721587738167634, -0.010367787025268, 0.01859572642999035,
    -0.0018459888165894573, -0.003256829750188865, 0.0008891502489825195, 0.0003884806605501727,
    # erf(1.125 + t), |t| <= 1/8
    0.8883882317017078, 0.3182739585007693, -0.35805820331337007, 0.16245233298477385,
    0.027973297137303864, -0.061323683608508504, 0.015536834508131857, 0.009606894793998332,
    -0.006031144605555231, -0.0003602478689067795, 0.001146647048564013, -0.00017428962319472287,
    # erf(1.375 + t), |t| <= 1/8
    0.9481700727820903, 0.1703597736875156, -0.23424468882033303, 0.15793770685613948,
    -0.030500610524165504, -0.030605976271332946, 0.022161235450273365, -0.001419061879327936,
    -0.0042610566484631305, 0.0015778638949408411, 0.000324918386661164, -0.000336845021613028,
    # erf(1.625 + t), |t| <= 1/8
    0.9784437332399837, 0.08047225902251116, -0.13076742091157778, 0.11484061964670812,
    -0.04971886316122847, -0.0021349248403649203, 0.014414781715131357, -0.006184261563290759,
    -0.0005765975652203595, 0.0014106897493676202, -0.00035187047617232065, -0.00012588995588801963,
    # erf(1.875 + t), |t| <= 1/8
    0.9919900576701199, 0.03354582842421608, -0.06289842829540396, 0.06744109256118179,
    -0.04225988151185773, 0.011462583366075184, 0.004105187374192551, -0.004928394147824926,
    0.0014304719428647385, 0.0003622800008416436, -0.0003884656356303117, 7.26069952859112e-05,
    # erf(2.125 + t), |t| <= 1/8
    0.9973459706405177, 0.012340820614333696, -0.026224243805459586, 0.033037405186288095,
    -0.026360828408251647, 0.012495482591925561, -0.0018214126919730807, -0.0018692573550226595,
    0.0013833578167694773, -0.00028977019900457835, -0.00012346799686435708, 9.439345483938294e-05,
    # erf(2.375 + t), |t| <= 1/8
    0.9992170617821089, 0.004006477861670219, -0.00951538492146745, 0.013730533505099372,
    -0.0131332135629763, 0.008357392833599674, -0.003114079181492098, 0.00012326966422719824,
    0.0005941283936774159, -0.0003375313701035536, 5.373326722509484e-05, 3.1777396704538743e-05,
    # erf(2.625 + t), |t| <= 1/8
    0.9997946242638588, 0.0011478751258826748, -0.003013172205442242, 0.00489042631756317,
    -0.005414293806489432, 0.004217880601477283, -0.0022468338895601653, 0.0006808681454172172,
    3.4650237805215524e-05, -0.00015260514810447537, 7.36417702331533e-05, -1.0101530336407514e-05,
    # erf(2.875 + t), |t| <= 1/8
    0.9999521451602562, 0.0002902282828624979, -0.0008344063132296164, 0.0015025360060695414,
    -0.0018817600710304267, 0.0017132632797387487, -0.0011400746108462762, 0.000528570055190565,
    -0.00013560966643972745, -1.6140413433983928e-05, 3.3482538018853396e-05, -1.4747338329179911e-05,
    # erf(3.125 + t), |t| <= 1/8
    0.9999901032653747, 6.4758683234713e-05, -0.00020237088510838904, 0.0004000197828977069,
    -0.0005575739491414115, 0.0005769615014979371, -0.00045231515945502076, 0.0002664810463697876,
    -0.0001112658826045762, 2.545112168726369e-05, 4.001192619368465e-06, -6.387736702218171e-06,
    # erf(3.375 + t), |t| <= 1/8
    0.9999981847185726, 1.2751740799765125e-05, -4.303712519917216e-05, 9.25829514315697e-05,
    -0.00014188802216728294, 0.00016377394448771767, -0.00014640887447569381, 0.00010218619135671297,
    -5.4847152506859346e-05, 2.1265689172910702e-05, -4.5534647477931505e-06, -6.798011697774456e-07,
    # erf(3.625 + t), |t| <= 1/8
    0.9999997048598075, 2.215920284633125e-06, -8.032711031792421e-06, 1.867374489860709e-05,
    -3.116859228677933e-05, 3.9592335352536745e-05, -3.9529113398834594e-05, 3.1514119667885386e-05,
    -2.008921362436534e-05, 1.0055357922249864e-05, -3.714907008887895e-06, 7.969988531816004e-07,
    # erf(3.875 + t), |t| <= 1/8
    0.999999957486056, 3.3982238178091577e-07, -1.3168117294054166e-06, 3.2884895070251777e-06,
    -5.932511173464623e-06, 8.208845472076074e-06, -9.021089979089454e-06, 8.033147279068467e-06,
    -5.848910797100962e-06, 3.474660969984505e-06, -1.6593089358320841e-06, 5.958286340749877e-07,
    # erf(4.125 + t), |t| <= 1/8
    0.9999999945765992, 4.598995828845885e-08, -1.8970857794276132e-07, 5.063686032412039e-07,
    -9.811490493959949e-07, 1.4669853528482532e-06, -1.7554656982802775e-06, 1.7196590426371633e-06,
    -1.3971550203734086e-06, 9.463895924843065e-07, -5.36492053833685e-07, 2.4556151498206813e-07,
    # erf(4.375 + t), |t| <= 1/8
    0.9999999993875167, 5.492717228852529e-09, -2.4030637877303634e-08, 6.82584547308725e-08,
    -1.413051562964857e-07, 2.2680648782059572e-07, -2.9307830520098686e-07, 3.1234619931370166e-07,
    -2.7879916049043303e-07, 2.103336492163622e-07, -1.3601342646057223e-07, 7.318831141655479e-08,
    # erf(4.625 + t), |t| <= 1/8
    0.9999999999387839, 5.78928136658434e-10, -2.6775426323374955e-09, 8.062780403752158e-09,
    -1.7752665254778616e-08, 3.0423596775011336e-08, -4.216906050094182e-08, 4.8479654823848666e-08,
    -4.701102659617009e-08, 3.8893358453300407e-08, -2.8036715615049036e-08, 1.707382811788451e-08,
    # erf(4.875 + t), |t| <= 1/8
    0.9999999999945866, 5.38487049209174e-11, -2.625124365517802e-10, 8.352158504067099e-10,
    -1.948334443347317e-09, 3.5486874437295293e-09, -5.2470739376322165e-09, 6.463492396858515e-09,
    -6.751442159563342e-09, 6.05786483649582e-09, -4.7952399763409624e-09, 3.232618171085197e-09,
    # erf(5.125 + t), |t| <= 1/8
    0.9999999999995766, 4.420170869323641e-12, -2.2653375716061693e-11, 7.592564339374216e-11,
    -1.8700832791441633e-10, 3.605893847840401e-10, -5.661401736406075e-10, 7.431353155486463e-10,
    -8.305554884732688e-10, 8.015066560041088e-10, -6.892960018294406e-10, 5.06956932074716e-10,
    # erf(5.375 + t), |t| <= 1/8
    0.9999999999999707, 3.201961038224167e-13, -1.7210540595886204e-12, 6.0603783437976406e-12,
    -1.571358096090503e-11, 3.196608632297356e-11, -5.308259736179606e-11, 7.390858978656321e-11,
    -8.790104775653063e-11, 9.063452036183885e-11, -8.401059072004286e-11, 6.671358756732e-11,
    # erf(5.625 + t), |t| <= 1/8
    0.9999999999999982, 2.0469452083932943e-14, -1.1514066815734875e-13, 4.249543546878925e-13,
    -1.1568037616297876e-12, 2.4753222449532407e-12, -4.3327859267695205e-12, 6.3740274362461834e-12,
    -8.030368109890908e-12, 8.800010864818824e-12, -8.737054550543612e-12, 7.432957737600566e-12,
    # erf(5.875 + t), |t| <= 1/8
    0.9999999999999999, 1.1548074643170182e-15, -6.7844938716685316e-15, 2.6187665155406732e-14,
    -7.466475440516913e-14, 1.6760588192497877e-13, -3.08321413588273e-13, 4.776317838116144e-13,
    -6.349803762445483e-13, 7.36269251590633e-13, -7.790972590171098e-13, 7.057234076572131e-13,
])

_ERF_TABLE32 = np.array([
    # erf(0.625 + t), |t| <= 1/8
    0.6232408821826118, 0.7634995415113962, -0.47718720039399687, -0.05567479014937986,
    0.17645729077197772, -0.027035137058485304, -0.041113834643463486,
    # erf(0.875 + t), |t| <= 1/8
    0.7840750610614416, 0.5247450530036011, -0.4591519172055197, 0.09291964883290231,
    0.11239726161214901, -0.06670922961753473, -0.010430992074030232,
    # erf(1.125 + t), |t| <= 1/8
    0.8883882317069384, 0.31827396250007195, -0.3580582118273228, 0.16245028388196192,
    0.027975604269224578, -0.06106124772843738, 0.015328817637567823,
    # erf(1.375 + t), |t| <= 1/8
    0.9481700727856818, 0.17035977312903058, -0.2342446947808014, 0.15793799739740072,
    -0.030498983605205057, -0.03064372865976648, 0.022014141334389746,
    # erf(1.625 + t), |t| <= 1/8
    0.9784437332404969, 0.08047225646174312, -0.13076742174695435, 0.11484193229134326,
    -0.049718637249377445, -0.002303233178590914, 0.0143945248614324,
    # erf(1.875 + t), |t| <= 1/8
    0.9919900576688834, 0.03354582637352842, -0.06289842628260042, 0.06744214308346602,
    -0.0422604271455345, 0.011328032154844524, 0.004154421241054298,
    # erf(2.125 + t), |t| <= 1/8
    0.9973459706393122, 0.012340819831570643, -0.0262242418444048, 0.03303780596304376,
    -0.0263613594832313, 0.012444221114535347, -0.0017735771224947658,
    # erf(2.375 + t), |t| <= 1/8
    0.9992170617816288, 0.00400647790599058, -0.009515384106913065, 0.01373050986594436,
    -0.013133438673228677, 0.008360538313712402, -0.0030935928124212215,
    # erf(2.625 + t), |t| <= 1/8
    0.9997946242638264, 0.0011478754078486121, -0.0030131721526824597, 0.004890281785215494,
    -0.005414308011133161, 0.004236412159184645, -0.0022455736150069306,
    # erf(2.875 + t), |t| <= 1/8
    0.9999521451603736, 0.00029022850311392196, -0.000834406504227773, 0.0015024232002668128,
    -0.0018817083023915059, 0.001727706719796805, -0.0011447448094759796,
    # erf(3.125 + t), |t| <= 1/8
    0.9999901032654719, 6.475879470452946e-05, -0.00020237104307715704, 0.0003999627176314538,
    -0.0005575311746660966, 0.0005842617557036974, -0.0004561669272693512,
    # erf(3.375 + t), |t| <= 1/8
    0.9999981847186207, 1.2751783690267537e-05, -4.3037203427054046e-05, 9.256100281415402e-05,
    -0.00014186685241501153, 0.00016657967512946474, -0.00014831315671634437,
    # erf(3.625 + t), |t| <= 1/8
    0.9999997048598251, 2.2159335562621156e-06, -8.032739797917254e-06, 1.8666955874346422e-05,
    -3.1160811671886475e-05, 4.0459548415546625e-05, -4.022836834323433e-05,
    # erf(3.875 + t), |t| <= 1/8
    0.9999999574860611, 3.398257763538729e-07, -1.3168201363897017e-06, 3.2867536933460744e-06,
    -5.930238361064946e-06, 8.430407312357395e-06, -9.225172954120168e-06,
])

_EQ32_0 = 1.1283791670820775
_EQ32_1 = -0.37612638519070424
_EQ32_2 = 0.11283773804082338
_EQ32_3 = -0.02686311973680076
_EQ32_4 = 0.005200307659789561
_EQ32_5 = -0.0007692842590206376


@_jit
def _erf_row(a, top):
    """(row index j, offset t) of |x| = a in the quarter-width tables: a in [0.5 + j/4, 0.75 + j/4], t from the
    row's midpoint; a is clamped into [0.5, top) (nan too; callers patch those lanes)."""
    ac = a if a < top else top
    ac = ac if ac > 0.5 else 0.5
    j = _float_to_int(_rint(4.0 * ac - 2.5))  # rounding at an interval's ends picks either row: both fit there
    t = ac - (0.25 * _int_to_float(j) + 0.625)
    return j, t


@_jit
def verf_f64(x):
    """Error function for float64."""
    a = abs(x)
    xs = x if a > _TINY else 0.0  # no subnormal x*x
    z = xs * xs
    P = _horner(z, (_EP1, _EP2, _EP3, _EP4, _EP5, _EP6, _EP7, _EP8))
    # x (c0 + z P) with c0 = 2/sqrt(pi) in two parts: x*c0 is the bulk and is rounded only once, in the FMA.
    small = _fma(xs, _EP0, _fma(xs, _EP0_LO, xs * z * P))
    j, t = _erf_row(a, 5.999)
    base = j * 12
    v = _ERF_TABLE[base + 11]
    for i in range(10, -1, -1):
        v = _fma(t, v, _ERF_TABLE[base + i])
    v = 1.0 if a >= 6.0 else v
    v = -v if x < 0.0 else v
    y = small if a < 0.5 else v
    # erf(x) = 2x/sqrt(pi) for tiny x: x*c0 rounded once (fma(-0, c, +0) would also turn -0.0 into +0.0).
    y = x * _EP0 if a <= _TINY else y
    return x if (x != x) | (x == 0.0) else y


_erf64 = verf_f64  # the name the other functions here use


@_jit
def _erf32(x):
    """erf for a float32 argument widened to float64, accurate to about 1e-10 (enough for float32 rounding)."""
    a = abs(x)
    xs = x if a > _TINY else 0.0
    z = xs * xs
    small = xs * _horner(z, (_EQ32_0, _EQ32_1, _EQ32_2, _EQ32_3, _EQ32_4, _EQ32_5))
    j, t = _erf_row(a, 3.999)
    base = j * 7
    v = _ERF_TABLE32[base + 6]
    for i in range(5, -1, -1):
        v = _fma(t, v, _ERF_TABLE32[base + i])
    v = 1.0 if a >= 4.0 else v  # erf(x) rounds to 1 in float32 from x = 3.92
    v = -v if x < 0.0 else v
    y = small if a < 0.5 else v
    y = x * _EP0 if a <= _TINY else y
    return x if (x != x) | (x == 0.0) else y


@_jit
def verf_f32(x):
    """Error function for float32, computed in float64 (lower-degree fits) and rounded once."""
    return np.float32(_erf32(np.float64(x)))


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
# (log1p(r) - r + r^2/2) / r^3 by its Taylor series (|r| < 0.0039: the next term is below 2^-70 of the result)
_LOG1P_TAYLOR = (1.0 / 3.0, -0.25, 1.0 / 5.0, -1.0 / 6.0, 1.0 / 7.0, -1.0 / 8.0, 1.0 / 9.0)
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
    P = _horner(r, _LOG1P_TAYLOR)
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
    y = _scale2(p, _float_to_int(k))
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
    the float32 cores' log and exp (relative error ~1e-10) are plenty -- no double-double needed."""
    ax = abs(x)
    c_int = _rint(c) == c
    neg = _as_int(x) < 0
    odd = _is_odd_integer(c)
    axs = ax if (ax > 0.0) & (ax < math.inf) else 1.0
    y = c * _log32_core(axs)  # |error| < 104 * 2e-11 where the result is a finite non-zero float32
    y = y if y < 200.0 else 200.0  # nothing above float32 range needs the exact value; keeps inf*0 out
    v = _exp32(y)
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
# float32 cores.  A float32 argument widened to float64 is computed with the float64 algorithms above but with
# polynomials of about half the degree (relative error ~1e-10, i.e. 0.002 ulp of float32 on top of the final
# rounding), and without the float64-only care: squares of float32 numbers are never subnormal in float64, and
# 2^k for the float32 range is one normal double.

# exp: q(r) = (exp(r) - 1 - r) / r^2 on [-0.35, 0.35], 6 terms (contributes 1.7e-10).
_EQ32 = (0.5000000014208257, 0.16666666523134385, 0.04166645729901071, 0.008333362111360923, 0.001393450376284884,
         0.00019857958701849747)
# log: R(z) as for float64, 4 terms (1.7e-11).
_LR32 = (0.6666666655374226, 0.40000122374850433, 0.28550765750232254, 0.23331863076019563)
# sin/cos: S(z), C(z) as for float64, 4 terms each (2.7e-11, 2.4e-12).
_S32 = (-0.1666666666264166, 0.00833333142981279, -0.00019839858779746234, 2.72217962262201e-06)
_C32 = (0.04166666666332612, -0.0013888887305419425, 2.480041197900624e-05, -2.7277664646463034e-07)
# tanh: T(z) for |x| < 0.55, 6 terms (1.2e-10).
_T32 = (-0.3333333329481949, 0.13333324158585505, -0.05396468766493171, 0.02181831417288295, -0.008525760550440707,
        0.0025255510375210804)


@_jit
def _expm1_poly32(r):
    return r * r * _horner(r, _EQ32)


@_jit
def _exp32_parts(x):
    """(s, u) with exp(x) = s (1 + u), s = 2^k, for a float32 x widened to float64 (u is nan for a nan x)."""
    xc = _clamp(x, -110.0, 100.0)  # float32 exp is 0 below -103.98 and inf above 88.73
    k, ki = _round_scaled(xc, _LOG2E)
    r = _fma(-k, _LN2_HI, xc)
    r = _fma(-k, _LN2_LO, r)
    return _pow2(ki), r + _expm1_poly32(r)


@_jit
def _exp32(x):
    s, u = _exp32_parts(x)
    return s + s * u  # a nan x passes the clamp and makes u nan


@_jit
def _expm1_32(x):
    xc = x if x > -30.0 else -30.0  # expm1 rounds to -1 in float32 below -17.3
    s, u = _exp32_parts(xc)
    y = _fma(s, u, s - 1.0)  # s - 1 exact for k <= 53; the cancellation near k = +-1 costs < 1e-15
    return x if (x != x) | (x == 0.0) else y


@_jit
def _log32_core(u):
    """log(u) for a positive normal finite double u (no subnormal scaling: float32 inputs are normal here)."""
    e, f = _log_mantissa(u)
    s = f / (2.0 + f)
    z = s * s
    R = _horner(z, _LR32)
    hfsq = 0.5 * f * f
    lm = f - (hfsq - s * _fma(z, R, hfsq))
    ef = _int_to_float(e)
    return _fma(ef, _LN2_HI, _fma(ef, _LN2_LO, lm))


@_jit
def _log32(x):
    u = x if (x > 0.0) & (x < math.inf) else 1.0
    y = _log32_core(u)
    y = -math.inf if x == 0.0 else y
    y = x if x == math.inf else y
    return math.nan if (x < 0.0) | (x != x) else y


@_jit
def _log1p32(x):
    # For a float32 x with |x| >= 1e-4 (up to 4.5e15), 1 + x is exact in float64; below, the series to x^4
    # (error x^5/5 < 2e-21 relative).
    u = 1.0 + x
    u = u if (u > 0.0) & (u < math.inf) else 1.0
    y = _log32_core(u)
    series = x * (1.0 + x * (-0.5 + x * (1.0 / 3.0 - 0.25 * x)))
    y = series if abs(x) < 1e-4 else y
    y = -math.inf if x == -1.0 else y
    y = x if (x == 0.0) | (x == math.inf) else y
    return math.nan if (x < -1.0) | (x != x) else y


@_jit
def _sin_quadrant32(r, q):
    z = r * r
    sn = _fma(r * z, _horner(z, _S32), r)
    C = _horner(z, _C32)
    cs = _fma(z * z, C, 1.0 - 0.5 * z)
    v = cs if (q & 1) == 1 else sn
    return -v if (q & 2) == 2 else v


@_jit
def _sin32(x):
    r, q = _sincos_reduce(x)
    y = _sin_quadrant32(r, q)
    y = x if abs(x) < 1e-9 else y
    return y if abs(x) <= SIN_COS_LIMIT_F32 else math.nan


@_jit
def _cos32(x):
    r, q = _sincos_reduce(x)
    y = _sin_quadrant32(r, (q + 1) & 3)
    return y if abs(x) <= SIN_COS_LIMIT_F32 else math.nan


@_jit
def _tanh32(x):
    z = x * x
    T = _horner(z, _T32)
    small = _fma(x * z, T, x)
    a = abs(x)
    ac = a if a < 10.0 else 10.0  # tanh rounds to 1 in float32 from 9.01
    s, u = _exp32_parts(ac + ac)
    large = 1.0 - 2.0 / (s + s * u + 1.0)
    large = -large if x < 0.0 else large
    y = small if a < 0.55 else large
    return x if (x != x) | (x == 0.0) else y


@_jit
def _sigmoid32(x):
    a = abs(x)
    ac = a if a < 120.0 else 120.0
    s, u = _exp32_parts(-ac)
    e = s + s * u
    y = (1.0 if x >= 0.0 else e) / (1.0 + e)
    return x if x != x else y


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
