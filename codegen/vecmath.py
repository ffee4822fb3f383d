"""Elementary functions in plain float arithmetic that LLVM vectorises when Numba inlines them into a loop.

The pip builds of Numba/llvmlite have no vector math library, so ``math.exp`` inside a Numba loop is one scalar
libm call per element and the loop does not vectorise (see ``codegen/simd.py``).  The functions here are written
so that, once inlined (``inline="always"`` inlines at Numba-IR level, before LLVM sees the loop), the loop body is
straight-line code: range reduction, a polynomial evaluated with FMA, and the exponent handled by integer
arithmetic on the bit pattern.  Every if/else is a select, so special values (nan, +-inf, +-0, overflow,
subnormal results) cost a few compares and blends per vector instead of a branch.

Names: ``v<name>_f64`` takes and returns float64, ``v<name>_f32`` float32.  The float32 variants compute in
float64 (polynomials of lower degree where that is enough) and round once at the end: the error is then at most
0.5 ulp of float32 plus a few 2^-29 ulp, overflow and subnormal boundaries are those of correct rounding, and no
float32-specific special-value logic is needed.

Fastmath: the functions rely on IEEE semantics for nan/inf selects and on the order of a few operations
(e.g. ``(p * s1) * s2`` for results near the overflow and subnormal boundaries).  Inline them into code compiled
*without* ``nnan``/``ninf``/``reassoc``; a reduction that needs reassociation to vectorise should accumulate into a
small array of partial sums instead (issue 6).

Huge sin/cos arguments: ``vsin``/``vcos`` reduce the argument with pi/2 split into three doubles and FMA, which
is accurate for ``|x| <= SIN_COS_LIMIT_F64`` (resp. ``_F32``).  Beyond that a lane would need an exact
(Payne-Hanek) reduction.  A libm fallback inside the function cannot work: LLVM's vectoriser speculates a
conditional ``sin`` call and performs it for every lane (measured: four scalar calls per vector of four), so the
fast path would lose its speed.  The check is therefore the *caller's*: a loop using ``vsin``/``vcos`` also
or-reduces ``sincos_out_of_range_f64(arg)`` (vectorises) and, if any lane was out of range, the caller reruns
that loop with libm (``math.sin``).  For such lanes ``vsin``/``vcos`` return an inaccurate finite value (nan for
nan and inf arguments, as numpy).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = [
    "IMPORT_LINE",
    "VECTOR_FUNCTIONS",
    "vexp_f32",
    "vexp_f64",
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
# What the emitter may use: vocabulary name -> base name (append "_f64"/"_f32").  A function is listed only once
# it is implemented and meets the accuracy target (2 ulp vs mpmath in both dtypes).

VECTOR_FUNCTIONS: dict[str, str] = {
    "exp": "vexp",
}


def _import_line(functions: dict[str, str]) -> str:
    names = sorted(f"{base}_{suffix}" for base in functions.values() for suffix in ("f64", "f32"))
    return f"from codegen.vecmath import ({', '.join(names)})"


IMPORT_LINE: str = _import_line(VECTOR_FUNCTIONS)
