"""``scipy.special`` on symgrad tensors: ``logsumexp``, ``softmax``, ``log_softmax`` and the ufuncs.

Same names, arguments and results as scipy's (scipy's dtypes: integers compute in float64, float32
stays float32).  On tensors the result is a tensor in the graph; on plain arrays, numpy values.

``logsumexp``, ``softmax`` and ``log_softmax`` are compositions of rule-table ops.  The maximum that keeps
``exp`` from overflowing is taken from the values without a gradient: the functions do not depend on
that shift, so their derivatives (of any order) are exact, including where maxima tie.

>>> import numpy as np, symgrad
>>> from symgrad.scipy.special import logsumexp
>>> logsumexp(np.array([1.0, 2.0, 3.0]))          # plain arrays: a numpy value
np.float64(3.40760596444438)
>>> x = symgrad.tensor([1.0, 2.0, 3.0], dtype=symgrad.float64, requires_grad=True)
>>> logsumexp(x).backward(); x.grad                 # the gradient is softmax(x)
tensor([0.0900, 0.2447, 0.6652], dtype=symgrad.float64)

The ufuncs (``expit``, ``logit``, ``erf``, ``erfc``, ``gammaln``, ``digamma``/``psi``, ``xlogy``,
``xlog1py``) are scipy's own, which reach symgrad through ``__array_ufunc__``; they need scipy.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..ops import functional as F
from ..tensor import Tensor

__all__ = ["logsumexp", "softmax", "log_softmax", "expit", "logit", "erf", "erfc", "gammaln", "digamma", "psi",
           "xlogy", "xlog1py"]

_UFUNCS = ("expit", "logit", "erf", "erfc", "gammaln", "digamma", "psi", "xlogy", "xlog1py")


# --- arguments ----------------------------------------------------------------------------------

def _dtype(x) -> np.dtype:
    return x._data.dtype if isinstance(x, Tensor) else np.asarray(x).dtype


def _operand(x, dtype: np.dtype) -> Tensor:
    """``x`` as a tensor of ``dtype`` (a cast is recorded; arrays become constants)."""
    if isinstance(x, Tensor):
        return x if x._data.dtype == dtype else F.to(x, _dt.from_numpy_dtype(dtype))
    return Tensor._wrap(np.asarray(x, dtype=dtype))


def _axes(axis, ndim: int, name: str) -> tuple:
    """numpy's axis argument as a sorted tuple of non-negative axes (None: all of them)."""
    if axis is None:
        return tuple(range(ndim))
    items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{name}: axis must be an int, a tuple of ints or None, got {type(a).__name__}")
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(int(a), ndim)
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: repeated axis")
    return tuple(sorted(out))


def _amax_kept(t: Tensor, axes: tuple) -> Tensor:
    """The maximum over ``axes`` with those axes kept, from the values only (no gradient)."""
    v = t.detach()
    return v if not axes else F.amax(v, axes, keepdim=True)


def _sum_kept(t: Tensor, axes: tuple) -> Tensor:
    return t if not axes else F.sum(t, axes, keepdim=True)


def _finish(out: Tensor, axes: tuple, keepdims: bool, plain: bool):
    if not keepdims and axes:
        out = F.squeeze(out, axes)
    if plain:   # plain arrays in, numpy out (a numpy scalar for 0-d, as scipy returns)
        return out._data[()]
    return out


# --- logsumexp, softmax, log_softmax ------------------------------------------------------------

def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a), axis))`` computed stably: scipy's ``logsumexp``, with a gradient.

    Weights ``b`` may be negative (``return_sign=True`` gives the sign of the sum; without it a negative sum
    is NaN, as in scipy); where ``b`` is 0 the element adds nothing, even if it is inf or NaN.

    >>> import numpy as np
    >>> from symgrad.scipy.special import logsumexp
    >>> logsumexp(np.array([1.0, 2.0]), b=np.array([1.0, -1.0]), return_sign=True)
    (np.float64(1.5413248546129181), np.float64(-1.0))
    """
    plain = not isinstance(a, Tensor) and not isinstance(b, Tensor)
    dtype = np.result_type(_dtype(a), *(() if b is None else (_dtype(b),)), 1.0)
    t = _operand(a, dtype)
    w = None if b is None else _operand(b, dtype)
    if w is not None and tuple(w.shape) != tuple(t.shape):
        shape = np.broadcast_shapes(tuple(t.shape), tuple(w.shape))
        t, w = F.broadcast_to(t, shape), F.broadcast_to(w, shape)
    if t.ndim == 0:   # scipy works on at least 1-d arrays (so keepdims of a scalar gives shape (1,))
        t = F.reshape(t, (1,))
        w = None if w is None else F.reshape(w, (1,))
    axes = _axes(axis, t.ndim, "logsumexp")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if t.numel() == 0:
            e = F.exp(t) if w is None else w * F.exp(t)
            out = F.log(F.abs(_sum_kept(e, axes)))        # -inf: the sum of nothing is 0
            sign = Tensor._wrap(np.full(out.shape, -1.0, dtype=dtype))   # scipy's sign of an empty sum
        else:
            out, sign = _logsumexp(t, w, axes)
            if not return_sign:
                out = F.where(F.lt(sign, 0), float("nan"), out)   # the log of a negative sum
    out = _finish(out, axes, keepdims, plain)
    return (out, _finish(sign, axes, keepdims, plain)) if return_sign else out


def _logsumexp(t: Tensor, w: Tensor | None, axes: tuple) -> tuple[Tensor, Tensor]:
    """``(log|sum(w * exp(t))|, sign of the sum)`` over ``axes`` (kept), for a non-empty ``t``.

    As scipy does, the terms at the maximum are summed apart from the others (``c``), so that the result
    is ``log1p(rest / c) + log|c| + max``: precise when the rest is tiny.  Both sums carry their
    gradient (the maximum itself carries none), so every element, tied maxima included, gets
    ``w * exp(t - result)``."""
    if w is not None:
        t = F.where(F.eq(w, 0), float("-inf"), t)   # zero weight: the element does not count
    top = _amax_kept(t, axes)
    shift = F.where(F.isfinite(top), top, 0.0)
    e = F.exp(t - shift)
    if w is not None:
        e = w * e
    at_top = F.eq(t.detach(), top)
    c = _sum_kept(F.where(at_top, e, 0.0), axes)
    rest = _sum_kept(F.where(at_top, 0.0, e), axes)
    q = F.where(F.eq(rest, 0), rest, rest / c)
    sign = F.sign(q + 1.0) * F.sign(c)
    q = F.where(F.lt(q, -1.0), -q - 2.0, q)          # |1 + q| = 1 + q, so that log1p applies
    return F.log1p(q) + F.log(F.abs(c)) + shift, sign


def _float_like_exp(x) -> np.dtype:
    """The dtype numpy's ``exp`` gives for ``x`` (float64 for integers, float32 for float32)."""
    return np.exp(np.empty(0, dtype=_dtype(x))).dtype


def softmax(x, axis=None):
    """``exp(x) / sum(exp(x), axis)`` computed stably: scipy's ``softmax``, with a gradient.

    >>> softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    plain = not isinstance(x, Tensor)
    t = _operand(x, _float_like_exp(x))
    axes = _axes(axis, t.ndim, "softmax")
    e = F.exp(t - _amax_kept(t, axes))
    out = e / _sum_kept(e, axes)
    return out._data[()] if plain else out


def log_softmax(x, axis=None):
    """``x - logsumexp(x, axis, keepdims=True)``: scipy's ``log_softmax``, with a gradient.

    >>> log_softmax(np.array([1000.0, 1.0]))
    array([   0., -999.])
    """
    plain = not isinstance(x, Tensor)
    t = _operand(x, _float_like_exp(x))
    axes = _axes(axis, t.ndim, "log_softmax")
    top = _amax_kept(t, axes)
    shifted = t - F.where(F.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = shifted - F.log(_sum_kept(F.exp(shifted), axes))
    return out._data[()] if plain else out


# --- scipy's ufuncs -----------------------------------------------------------------------------

def _scipy_ufunc(name: str) -> np.ufunc:
    try:
        import scipy.special as sc
    except ImportError:
        raise ImportError(f"symgrad.scipy.special.{name} is scipy's ufunc and needs scipy (pip install scipy)") \
            from None
    f = getattr(sc, name)
    # with SCIPY_ARRAY_API=1 scipy wraps each ufunc in a Python function that dispatches on the namespace
    return f if isinstance(f, np.ufunc) else f.__wrapped__


def _ufunc(name: str):
    def fn(*args, **kwargs):
        return _scipy_ufunc(name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``scipy.special.{name}``: on tensors through ``__array_ufunc__`` (recorded, with its gradient)."
    return fn


expit, logit, erf, erfc, gammaln, digamma, psi, xlogy, xlog1py = (_ufunc(n) for n in _UFUNCS)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"symgrad.scipy.special has no {name!r}: it has {', '.join(__all__)} "
                         "(scipy.special's other functions have no gradient in symgrad)")
