"""Elementwise ufuncs (numpy and scipy.special) and rounding.

The ufuncs map one to one onto rule-table ops, so a plain numpy or scipy.special expression records
the graph and compiles into the fused loops.  scipy's ufuncs are registered only when scipy imports:
scipy stays optional.
"""

from __future__ import annotations

import sys

import numpy as np

from .. import functional as F
from ..numpy_dispatch import _reject, late_ufuncs, numpy_functions, numpy_ufuncs

_SIMPLE = {
    np.arcsin: F.asin, np.arccos: F.acos, np.arcsinh: F.asinh, np.arccosh: F.acosh, np.arctanh: F.atanh,
    np.arctan2: F.atan2, np.hypot: F.hypot, np.logaddexp: F.logaddexp, np.logaddexp2: F.logaddexp2,
    np.log10: F.log10, np.cbrt: F.cbrt, np.deg2rad: F.deg2rad, np.radians: F.deg2rad, np.rad2deg: F.rad2deg,
    np.degrees: F.rad2deg, np.floor: F.floor, np.ceil: F.ceil, np.rint: F.rint, np.trunc: F.trunc,
    np.remainder: F.remainder, np.fmod: F.fmod, np.heaviside: F.heaviside,
}
for _ufunc, _fn in _SIMPLE.items():
    numpy_ufuncs(_ufunc)(_fn)


@numpy_ufuncs(np.fabs)
def _fabs(x):
    t = F.as_tensor(x)
    # numpy's fabs is a float function: integers come back as float64
    return F.abs(t if t.is_floating_point() else F.to(t, "float64"))


@numpy_functions(np.sinc)
def _sinc(x):
    return F.sinc(x)


@numpy_functions(np.fix)
def _fix(x, out=None):
    _reject("fix", out=out)
    return F.trunc(x)


@numpy_functions(np.round, np.around)
def _round(a, decimals=0, out=None):
    _reject("round", out=out)
    if not isinstance(decimals, (int, np.integer)) or isinstance(decimals, bool):
        raise TypeError(f"numpy.round: decimals must be an int, got {type(decimals).__name__}")
    return F.round(a, int(decimals))


def _register_scipy() -> None:
    # called on the first ufunc symgrad does not know: a scipy ufunc on a tensor means scipy is imported
    sc = sys.modules.get("scipy.special")
    if sc is None:
        return
    ufuncs = {"expit": F.sigmoid, "logit": F.logit, "erf": F.erf, "erfc": F.erfc, "gammaln": F.lgamma,
              "digamma": F.digamma, "xlogy": F.xlogy, "frac": F.frac, "xlog1py": F.xlog1py}
    for name, fn in ufuncs.items():
        ufunc = getattr(sc, name, None)
        # with SCIPY_ARRAY_API=1 scipy wraps each ufunc in a Python function dispatching on the namespace
        ufunc = getattr(ufunc, "__wrapped__", ufunc)
        if isinstance(ufunc, np.ufunc):
            numpy_ufuncs(ufunc)(fn)


late_ufuncs(_register_scipy)


def _attach_methods() -> None:
    """PyTorch's Tensor methods for these ops (``x.asin()``, ``x.floor()``, ``x.round(decimals=1)``)."""
    from ...tensor import Tensor

    methods = {
        "asin": F.asin, "arcsin": F.asin, "acos": F.acos, "arccos": F.acos, "asinh": F.asinh,
        "arcsinh": F.asinh, "acosh": F.acosh, "arccosh": F.acosh, "atanh": F.atanh, "arctanh": F.atanh,
        "atan2": F.atan2, "arctan2": F.atan2, "hypot": F.hypot, "logaddexp": F.logaddexp,
        "logaddexp2": F.logaddexp2, "log10": F.log10, "sinc": F.sinc, "deg2rad": F.deg2rad, "rad2deg": F.rad2deg,
        "floor": F.floor, "ceil": F.ceil, "round": F.round, "erfc": F.erfc, "logit": F.logit, "lgamma": F.lgamma,
        "digamma": F.digamma, "xlogy": F.xlogy, "frac": F.frac, "polygamma": lambda self, n: F.polygamma(n, self),
    }
    for name, fn in methods.items():
        if not hasattr(Tensor, name):       # the core's own methods win
            setattr(Tensor, name, fn)



# bitwise ufuncs: the ops behind &, |, ^, ~, <<, >> (integers and bools; numpy's TypeError on floats is
# torch's RuntimeError here, naming the op)
numpy_ufuncs(np.bitwise_and)(F.bitwise_and)
numpy_ufuncs(np.bitwise_or)(F.bitwise_or)
numpy_ufuncs(np.bitwise_xor)(F.bitwise_xor)
numpy_ufuncs(np.left_shift)(F.bitwise_left_shift)
numpy_ufuncs(np.right_shift)(F.bitwise_right_shift)
numpy_ufuncs(np.invert)(F.bitwise_not)

_attach_methods()
