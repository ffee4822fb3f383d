"""Scalar helpers that generated loop kernels call (the formula vocabulary in scalar form).

They live in a real module, compiled with ``cache=True``, so that kernels written to the disk
cache can import them and a second process loads everything from Numba's cache.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from symgrad.rules import special

_jit = numba.njit(cache=True, inline="always")


@_jit
def where(c, a, b):
    return a if c else b


@_jit
def heaviside(x, h0):
    # numpy.heaviside: nan stays nan (a nan is neither below, above nor at 0)
    return 0.0 if x < 0 else (1.0 if x > 0 else (h0 if x == 0 else x))


@_jit
def sign(x):
    return (x > 0) - (x < 0) if x == x else x   # nan stays nan, as numpy.sign


@_jit
def sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@_jit
def exp2(x):
    return 2.0 ** x


@_jit
def eq(a, b):
    return a == b


@_jit
def ne(a, b):
    return a != b


@_jit
def logical_and(a, b):
    return a and b


@_jit
def logical_or(a, b):
    return a or b


@_jit
def logical_not(a):
    return not a


@_jit
def maximum(a, b):
    return a if (a >= b or a != a) else b   # a nan on either side is the result, as numpy.maximum


@_jit
def minimum(a, b):
    return a if (a <= b or a != a) else b


# --- numpy surface, elementwise family: numpy's rounding and special functions in scalar form ----------

@_jit
def floor(x):
    return np.floor(x)          # math.floor would give an int (and fail on inf and nan)


@_jit
def ceil(x):
    return np.ceil(x)


@_jit
def rint(x):
    return np.rint(x)           # half to even, as numpy.rint and torch.round


@_jit
def cbrt(x):
    return np.cbrt(x)


@_jit
def sinc(x):
    y = math.pi * (1.0e-20 if x == 0 else x)   # numpy.sinc's own guard at 0
    return math.sin(y) / y


_LOG2E = 1.4426950408889634


@_jit
def logaddexp(a, b):
    # numpy's npy_logaddexp: exact at a == b (also both infinite), no overflow elsewhere
    if a == b:
        return a + 0.6931471805599453
    d = a - b
    if d > 0:
        return a + math.log1p(math.exp(-d))
    if d <= 0:
        return b + math.log1p(math.exp(d))
    return d


@_jit
def logaddexp2(a, b):
    if a == b:
        return a + 1.0
    d = a - b
    if d > 0:
        return a + _LOG2E * math.log1p(2.0 ** -d)
    if d <= 0:
        return b + _LOG2E * math.log1p(2.0 ** d)
    return d


@_jit
def xlogy(x, y):
    return 0.0 if x == 0 and y == y else x * math.log(y) if y > 0 else x * (-math.inf if y == 0 else math.nan)


@_jit
def xlog1py(x, y):
    return 0.0 if x == 0 and y == y else x * math.log1p(y) if y > -1 else x * (-math.inf if y == -1 else math.nan)


@_jit
def lgamma(x):
    return x if x == -math.inf else math.lgamma(x)   # scipy.special.gammaln(-inf) is -inf; math's is inf


digamma = _jit(special.digamma_scalar)
polygamma = _jit(special.polygamma_scalar)


# --- helpers of vectorised kernels (``math="vector"``) ------------------------------------------

@intrinsic
def radd(typingctx, acc, value):
    """``acc + value`` in float64 that LLVM may reassociate: the one add of a loop's reduction.

    A loop that sums into a scalar carries a dependence from one iteration to the next, and
    without permission to reorder that add LLVM will not vectorise the loop at all.  Flagging
    only this add (``reassoc``) lets the vectoriser keep several partial sums (one per vector
    lane and interleaved copy) and add them up after the loop, while every other operation of
    the kernel, and of the inlined elementary functions, keeps IEEE order.  The summation order
    is fixed by the compiled code (kernels also declare their arrays distinct,
    :func:`distinct_arrays`, so no run-time overlap check picks another path): the same on every
    call and thread count on one machine for arrays of the same layout; a non-contiguous argument
    (another Numba specialisation, or LLVM's scalar path for a stride it did not vectorise for) or
    a CPU with other vector widths may round the last bits differently.

    >>> @numba.njit
    ... def total(a):
    ...     acc = 0.0
    ...     for i in range(a.size):
    ...         acc = radd(acc, a[i])
    ...     return acc
    >>> total(np.arange(5, dtype=np.float32))
    10.0
    """
    return _reduction_step(acc, value, lambda builder, a, b: builder.fadd(a, b, flags=("reassoc", "nsz")))


def _reduction_step(acc, value, combine):
    """Signature and codegen of one step ``acc = combine(acc, value)`` of a loop's float64 reduction."""
    if not isinstance(acc, types.Float) or not isinstance(value, (types.Float, types.Integer, types.Boolean)):
        return None
    sig = types.float64(acc, value)

    def codegen(context, builder, signature, args):
        a = context.cast(builder, args[0], signature.args[0], types.float64)
        b = context.cast(builder, args[1], signature.args[1], types.float64)
        return combine(builder, a, b)

    return sig, codegen


def _nan_propagating(name: str, acc, value):
    """A reduction step calling ``llvm.<name>.f64(acc, value)`` (``maximum``/``minimum``: nan wins)."""
    def combine(builder, a, b):
        fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * 2)
        return builder.call(builder.module.declare_intrinsic(f"llvm.{name}.f64", fnty=fnty), [a, b])

    return _reduction_step(acc, value, combine)


@intrinsic
def rmax(typingctx, acc, value):
    """``max(acc, value)`` in float64, nan if either is nan (numpy's ``amax``): the one step of a loop's max
    reduction, which LLVM vectorises (``llvm.maximum``: ``vmaxpd`` plus nan fix-ups).

    >>> @numba.njit
    ... def biggest(a):
    ...     acc = -np.inf
    ...     for i in range(a.size):
    ...         acc = rmax(acc, a[i])
    ...     return acc
    >>> biggest(np.array([1.0, 3.0, 2.0])), biggest(np.array([1.0, np.nan, 2.0]))
    (3.0, nan)
    """
    return _nan_propagating("maximum", acc, value)


@intrinsic
def rmin(typingctx, acc, value):
    """``min(acc, value)`` in float64, nan if either is nan (numpy's ``amin``); see :func:`rmax`."""
    return _nan_propagating("minimum", acc, value)


# Width LLVM should vectorise generated kernels to.  LLVM's tuning for recent Intel cores
# prefers 256-bit vectors (fewer frequency drops on old Skylake-X parts); for loops made of
# inlined elementary functions, 512-bit vectors are faster.
# On a CPU without AVX-512 the hint is ignored.
PREFERRED_VECTOR_BITS = 512


@intrinsic
def wide_vectors(typingctx):
    """Ask LLVM to vectorise the calling kernel with :data:`PREFERRED_VECTOR_BITS`-bit vectors.

    Emits no code: it sets the ``"prefer-vector-width"`` attribute of the LLVM function being
    compiled (llvmlite's attribute set only knows enum attributes, so the string attribute is
    added to the underlying set; a llvmlite without that layout just keeps LLVM's default).

    >>> @numba.njit
    ... def doubled(a):
    ...     wide_vectors()
    ...     for i in range(a.size):
    ...         a[i] *= 2.0
    ...     return a
    >>> doubled(np.ones(3))
    array([2., 2., 2.])
    """
    def codegen(context, builder, signature, args):
        try:
            set.add(builder.function.attributes, f'"prefer-vector-width"="{PREFERRED_VECTOR_BITS}"')
        except TypeError:  # pragma: no cover - another llvmlite layout
            pass
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def distinct_arrays(typingctx):
    """Promise LLVM that no two array arguments of the calling kernel overlap (``noalias``).

    The glue never passes overlapping arrays to a kernel (outputs are fresh or pooled buffers
    whose slot is free of every input the loop reads).  Without the promise, LLVM guards each
    vectorised loop with run-time checks of how close its arrays lie and runs a scalar copy of
    the loop when they are close, so the order of a reassociated sum (:func:`radd`), and with it
    the last bits, depended on where the arrays happened to be in memory.  Emits no code: it marks
    the pointer arguments of the LLVM function being compiled.

    >>> @numba.njit
    ... def scaled(x, out):
    ...     distinct_arrays()
    ...     for i in range(x.size):
    ...         out[i] = 2.0 * x[i]
    ...     return out
    >>> scaled(np.ones(3), np.empty(3))
    array([2., 2., 2.])
    """
    def codegen(context, builder, signature, args):
        for arg in builder.function.args:
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("noalias")
        return context.get_dummy_value()

    return types.none(), codegen


# fastmath flags generated kernels get for ``fastmath=True`` under ``math="vector"``: the inlined
# elementary functions need IEEE semantics (``reassoc`` would undo their exact range reduction,
# ``nnan``/``ninf`` their special-value handling), and their reductions vectorise without it
# (:func:`radd`), so only FMA contraction is allowed.
VECTOR_FASTMATH = {"contract"}


# Numba's parallel options for generated kernels: only the explicit ``prange`` loop runs in
# parallel.  Turning numpy calls into parallel loops as well would give a kernel several parfors,
# and Numba 0.68 fails to lower several parfors sharing variables ("key already in dictionary").
PARALLEL_PRANGE_ONLY = {"prange": True, "numpy": False, "reduction": False, "setitem": False,
                        "comprehension": False, "stencil": False, "fusion": False}

SCALAR_NAMESPACE = {
    "exp": math.exp, "log": math.log, "sin": math.sin, "cos": math.cos, "tan": math.tan, "tanh": math.tanh,
    "sinh": math.sinh, "cosh": math.cosh, "atan": math.atan, "sqrt": math.sqrt, "abs": abs, "erf": math.erf,
    "log1p": math.log1p, "expm1": math.expm1, "log2": math.log2, "exp2": exp2, "where": where,
    "heaviside": heaviside, "sign": sign, "sigmoid": sigmoid, "eq": eq, "ne": ne, "logical_and": logical_and,
    "logical_or": logical_or, "logical_not": logical_not, "maximum": maximum, "minimum": minimum, "np": np,
    "math": math, "PARALLEL_PRANGE_ONLY": PARALLEL_PRANGE_ONLY, "radd": radd, "wide_vectors": wide_vectors,
    "distinct_arrays": distinct_arrays, "VECTOR_FASTMATH": VECTOR_FASTMATH, "rmax": rmax, "rmin": rmin,
    # numpy surface, elementwise family
    "asin": math.asin, "acos": math.acos, "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh,
    "atan2": math.atan2, "hypot": math.hypot, "log10": math.log10, "erfc": math.erfc, "lgamma": lgamma,
    "floor": floor, "ceil": ceil, "rint": rint, "cbrt": cbrt, "sinc": sinc, "logaddexp": logaddexp,
    "logaddexp2": logaddexp2, "xlogy": xlogy, "xlog1py": xlog1py, "digamma": digamma, "polygamma": polygamma,
}

# How a generated module imports each name above.
IMPORT_LINES = (
    "import math\n"
    "import numpy as np\n"
    "from numba import njit, prange\n"
    "from codegen.scalar_math import PARALLEL_PRANGE_ONLY\n"
    "from math import exp, log, sin, cos, tan, tanh, sinh, cosh, atan, sqrt, erf, log1p, expm1, log2\n"
    "from codegen.scalar_math import (where, heaviside, sign, sigmoid, exp2, eq, ne, logical_and, logical_or,\n"
    "                                 logical_not, maximum, minimum)\n"
    # numpy surface, elementwise family
    "from math import asin, acos, asinh, acosh, atanh, atan2, hypot, log10, erfc\n"
    "from codegen.scalar_math import (floor, ceil, rint, cbrt, sinc, logaddexp, logaddexp2, xlogy, xlog1py,\n"
    "                                 lgamma, digamma, polygamma)\n"
)

# What a module of ``math="vector"`` kernels imports besides :data:`IMPORT_LINES` (the vector
# elementary functions come from :mod:`codegen.vecmath`'s own import line).
VECTOR_IMPORT_LINES = "from codegen.scalar_math import radd, wide_vectors, distinct_arrays\n"
