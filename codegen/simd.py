"""Which elementary functions numpy evaluates with SIMD on this CPU (so kernels hand them to numpy).

The pip builds of Numba/llvmlite have no vector math library: inside a Numba loop,
``math.exp`` or ``math.tanh`` is one scalar libm call per element and the loop does not
vectorise.  numpy's ufuncs dispatch at run time to SIMD implementations (its own AVX2/AVX-512
code, and Intel's SVML on AVX-512 machines).  Measured on this project's machine (Xeon with
AVX-512, numpy 2.4, 1e5 elements in cache, ns per element, numpy ufunc vs Numba scalar loop):

=========  ===================  ====================
function   float64              float32
=========  ===================  ====================
exp        0.66 vs 4.8  (7x)    0.38 vs 2.4  (6x)
log        0.85 vs 4.3  (5x)    0.35 vs 2.7  (8x)
log1p      1.04 vs 11.4 (11x)   0.41 vs 11.1 (27x)
expm1      1.06 vs 10.3 (10x)   0.28 vs 9.8  (35x)
tanh       1.29 vs 14.6 (11x)   0.26 vs 13.6 (52x)
sin, cos   7.8 vs 7.9   (1x)    0.47 vs 5.5  (12x)
sinh       1.08 vs 13.8 (13x)   0.34 vs 12.9 (38x)
cosh       0.85 vs 7.0  (8x)    0.32 vs 6.0  (18x)
atan       1.15 vs 9.2  (8x)    0.36 vs 9.4  (26x)
log2       0.89 vs 3.6  (4x)    0.23 vs 2.1  (10x)
exp2       0.58 vs 2.4  (4x)    0.22 vs 5.0  (23x)
erf        (scipy) ~ 1x         ~ 1x
=========  ===================  ====================

A round trip of an extra array through memory costs about 0.2-2 ns per element, so a node
computing such a function is run by numpy between two fused loops instead of inside one
(when the loop is big enough for a ufunc call's ~1 us overhead to vanish).  The table depends
only on numpy's CPU dispatch (``__cpu_features__``), so generated code is the same on every run.

>>> sorted(simd_functions("float64")) == sorted(simd_functions("float64"))
True
"""

from __future__ import annotations

import functools

import numpy as np

# Smallest loop (in elements) worth splitting around a numpy call.
MIN_ELEMENTS = 512


def _cpu_features() -> dict:
    try:
        return dict(np._core._multiarray_umath.__cpu_features__)
    except AttributeError:  # pragma: no cover - numpy < 2
        return dict(np.core._multiarray_umath.__cpu_features__)


@functools.cache
def simd_functions(dtype_name: str) -> frozenset[str]:
    """Names (as in IR sympy expressions) numpy runs vectorised for ``dtype_name`` here."""
    cpu = _cpu_features()
    if dtype_name not in ("float64", "float32"):
        return frozenset()
    # numpy's own universal-intrinsics code (AVX2 and up): exp/log, and float32 sin/cos.
    fast = set()
    if cpu.get("AVX2") and cpu.get("FMA3"):
        fast |= {"exp", "log"}
        if dtype_name == "float32":
            fast |= {"sin", "cos"}
    # SVML (AVX-512 Skylake-X and later): the hyperbolic and the +1/-1 variants as well.
    if cpu.get("AVX512_SKX"):
        fast |= {"log1p", "expm1", "tanh", "log2", "exp2", "sinh", "cosh", "atan"}
    return frozenset(fast)
