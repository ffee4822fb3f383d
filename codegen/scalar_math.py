"""Scalar helpers that generated loop kernels call (the formula vocabulary in scalar form).

They live in a real module, compiled with ``cache=True``, so that kernels written to the disk
cache can import them and a second process loads everything from Numba's cache.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_jit = numba.njit(cache=True, inline="always")


@_jit
def where(c, a, b):
    return a if c else b


@_jit
def heaviside(x, h0):
    return 0.0 if x < 0 else (1.0 if x > 0 else h0)


@_jit
def sign(x):
    return (x > 0) - (x < 0)


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
    return a if a >= b else b


@_jit
def minimum(a, b):
    return a if a <= b else b


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
    "math": math, "PARALLEL_PRANGE_ONLY": PARALLEL_PRANGE_ONLY,
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
)
