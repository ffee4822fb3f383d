"""Which elementary functions numpy evaluates with SIMD on this CPU (so kernels hand them to numpy).

The pip builds of Numba/llvmlite have no vector math library: inside a Numba loop,
``math.exp`` or ``math.tanh`` is one scalar libm call per element and the loop does not
vectorise.  numpy's ufuncs dispatch at run time to SIMD implementations (its own AVX2/AVX-512
code, and Intel's SVML on AVX-512 machines), several times faster than the scalar loop for most
of these functions (``benchmarks/results/vecmath.md`` has the figures).

An extra array's round trip through memory costs less than the scalar call, so a node
computing such a function is run by numpy between two fused loops instead of inside one
(when the loop is big enough for a ufunc call's fixed overhead to vanish).  Which functions qualify
depends only on numpy's CPU dispatch (``__cpu_features__``), so generated code is the same on every run.

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
