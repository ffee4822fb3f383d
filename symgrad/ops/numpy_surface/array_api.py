"""The array API namespace of symgrad tensors: what ``t.__array_namespace__()`` returns.

Libraries written against the `array API standard <https://data-apis.org/array-api/>`_ (scipy with
``SCIPY_ARRAY_API=1`` set before it is imported, and anything built on ``array_api_compat``) ask an
argument for its namespace and call that namespace's functions instead of numpy's.  Each function here
is the numpy function of the same meaning applied to the tensors, through the numpy surface
(``xp.sum(x, axis=1)`` is ``np.sum(x, axis=1)``): numpy's argument handling and promotion, the graph
recorded, gradients from the rule table.  Dtypes are symgrad's (``xp.float64 is symgrad.float64``), since
that is what a tensor's ``.dtype`` is.

A name the namespace does not define raises :class:`AttributeError` saying so, so a library that takes a
path symgrad cannot follow stops with that message rather than computing something else.

>>> import symgrad
>>> x = symgrad.tensor([1.0, 2.0, 3.0], dtype=symgrad.float64)
>>> xp = x.__array_namespace__()
>>> xp.sum(xp.exp(x - xp.max(x, axis=0, keepdims=True)), axis=0)
tensor(1.5032, dtype=symgrad.float64)
>>> xp.float64 is x.dtype
True
"""

from __future__ import annotations

import builtins
import math
import sys

import numpy as np

from ... import dtypes as _dt
from ...tensor import Tensor
from .. import functional as F
from .. import registry as _registry

__array_api_version__ = "2023.12"

_VERSIONS = ("2021.12", "2022.12", "2023.12")

# --- dtypes and constants --------------------------------------------------------------------
bool = _dt.bool_  # noqa: A001 - the standard's name
int8, int16, int32, int64, uint8 = _dt.int8, _dt.int16, _dt.int32, _dt.int64, _dt.uint8
float16, float32, float64 = _dt.float16, _dt.float32, _dt.float64

e, pi, inf, nan = math.e, math.pi, math.inf, math.nan
newaxis = None


def _np_dtype(dtype):
    """A dtype argument (symgrad's, numpy's, ``float``...) as a numpy dtype; None stays None."""
    if dtype is None:
        return None
    if isinstance(dtype, _dt.dtype):
        return dtype.np
    return np.dtype(dtype)


def _sg_dtype(dtype) -> _dt.dtype:
    np_dtype = _np_dtype(dtype)
    try:
        return _dt.from_numpy_dtype(np_dtype)
    except (TypeError, ValueError, KeyError):
        raise TypeError(f"symgrad's array API namespace: dtype {np_dtype} is not supported (symgrad has bool, "
                        "int8/16/32/64, uint8 and float16/32/64; no complex dtypes)") from None


def _dtype_of(x):
    if isinstance(x, Tensor):
        return x._data.dtype
    if isinstance(x, (_dt.dtype, np.dtype, type)):
        return _np_dtype(x)
    return x   # a Python scalar: weak, as NEP 50 and the standard promote it


def _check_device(device) -> None:
    if device not in (None, "cpu"):
        raise ValueError(f"symgrad's array API namespace: device {device!r} is not supported (only 'cpu')")


def _tensor(x) -> Tensor:
    """``x`` as a tensor: tensors as they are, anything else as numpy reads it (``[1.0]`` is float64)."""
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))


def _result(value):
    """A namespace function's result stays in the namespace: a tensor, even for non-tensor inputs."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, tuple):
        return tuple(_result(v) for v in value)
    return Tensor._wrap(np.asarray(value))


# --- data types ---------------------------------------------------------------------------------
_KINDS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
          "real floating": "f", "complex floating": "c", "numeric": "iufc"}


def isdtype(dtype, kind) -> builtins.bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name (``"real floating"``) or a tuple of them."""
    np_dtype = _np_dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r}")
        return np_dtype.kind in _KINDS[kind]
    return np_dtype == _np_dtype(kind)


def result_type(*arrays_and_dtypes) -> _dt.dtype:
    """numpy's promotion of tensors, dtypes and (weak) Python scalars, as a symgrad dtype."""
    return _sg_dtype(np.result_type(*[_dtype_of(x) for x in arrays_and_dtypes]))


def can_cast(from_, to, /) -> builtins.bool:
    return builtins.bool(np.can_cast(_dtype_of(from_) if isinstance(from_, Tensor) else _np_dtype(from_),
                                     _np_dtype(to)))


def finfo(type, /):  # noqa: A002 - the standard's name
    return np.finfo(_dtype_of(type) if isinstance(type, Tensor) else _np_dtype(type))


def iinfo(type, /):  # noqa: A002
    return np.iinfo(_dtype_of(type) if isinstance(type, Tensor) else _np_dtype(type))


def astype(x, dtype, /, *, copy: builtins.bool = True, device=None):
    _check_device(device)
    t, want = _tensor(x), _sg_dtype(dtype)
    if t._data.dtype != want.np:
        return F.to(t, want)
    return F.clone(t) if copy else t


# --- creation -----------------------------------------------------------------------------------

def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """``obj`` as a tensor: a tensor is returned as it is (cast to ``dtype``, or copied with
    ``copy=True``, recorded); anything else is read as numpy reads it."""
    _check_device(device)
    if isinstance(obj, Tensor):
        if dtype is not None and obj._data.dtype != _np_dtype(dtype):
            if copy is False:
                raise ValueError("asarray: casting to another dtype needs a copy, and copy=False was given")
            return F.to(obj, _sg_dtype(dtype))
        return F.clone(obj) if copy else obj
    if isinstance(obj, (list, tuple)) and _holds_tensor(obj):
        # keep the elements in the graph: stacked, not converted
        return asarray(np.stack([asarray(o) for o in obj]), dtype=dtype, copy=False)
    if copy is False:
        arr = np.asarray(obj, dtype=_np_dtype(dtype))
        if isinstance(obj, np.ndarray) and not np.shares_memory(arr, obj):
            raise ValueError("asarray: copy=False, but converting the array needs a copy")
    elif copy:
        arr = np.array(obj, dtype=_np_dtype(dtype), copy=True)
    else:
        arr = np.asarray(obj, dtype=_np_dtype(dtype))
    _sg_dtype(arr.dtype)
    return Tensor._wrap(arr)


def _holds_tensor(seq) -> builtins.bool:
    return builtins.any(isinstance(e, Tensor) or (isinstance(e, (list, tuple)) and _holds_tensor(e)) for e in seq)


def _creator(np_func):
    def create(*args, dtype=None, device=None, **kwargs):
        _check_device(device)
        return _result(np_func(*args, dtype=_np_dtype(dtype), **kwargs))

    create.__name__ = np_func.__name__
    return create


zeros, ones, empty, full, arange, linspace, eye = (
    _creator(np.zeros), _creator(np.ones), _creator(np.zeros), _creator(np.full), _creator(np.arange),
    _creator(np.linspace), _creator(np.eye))


def _like(np_func, name):
    def create(x, /, *args, dtype=None, device=None):
        _check_device(device)
        return _result(np_func(x, *args, dtype=_np_dtype(dtype)))

    create.__name__ = name
    return create


zeros_like = _like(np.zeros_like, "zeros_like")
ones_like = _like(np.ones_like, "ones_like")
empty_like = _like(np.zeros_like, "empty_like")
full_like = _like(np.full_like, "full_like")


# --- element-wise functions ---------------------------------------------------------------------

def _elementwise(np_func, name):
    def fn(*args):
        return _result(np_func(*args))

    fn.__name__ = name
    fn.__doc__ = f"``numpy.{np_func.__name__}`` on tensors."
    return fn


_ELEMENTWISE = {
    "abs": np.absolute, "acos": np.arccos, "acosh": np.arccosh, "add": np.add, "asin": np.arcsin,
    "asinh": np.arcsinh, "atan": np.arctan, "atan2": np.arctan2, "atanh": np.arctanh,
    "bitwise_and": np.bitwise_and, "bitwise_invert": np.invert, "bitwise_left_shift": np.left_shift,
    "bitwise_or": np.bitwise_or, "bitwise_right_shift": np.right_shift, "bitwise_xor": np.bitwise_xor,
    "ceil": np.ceil, "cos": np.cos, "cosh": np.cosh, "divide": np.divide, "equal": np.equal, "exp": np.exp,
    "expm1": np.expm1, "floor": np.floor, "floor_divide": np.floor_divide, "greater": np.greater,
    "greater_equal": np.greater_equal, "hypot": np.hypot, "isfinite": np.isfinite, "isinf": np.isinf,
    "isnan": np.isnan, "less": np.less, "less_equal": np.less_equal, "log": np.log, "log1p": np.log1p,
    "log2": np.log2, "log10": np.log10, "logaddexp": np.logaddexp, "logical_and": np.logical_and,
    "logical_not": np.logical_not, "logical_or": np.logical_or, "maximum": np.maximum, "minimum": np.minimum,
    "multiply": np.multiply, "negative": np.negative, "not_equal": np.not_equal, "positive": np.positive,
    "pow": np.power, "reciprocal": np.reciprocal, "remainder": np.remainder, "round": np.round,
    "sign": np.sign, "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "square": np.square,
    "subtract": np.subtract, "tan": np.tan, "tanh": np.tanh, "trunc": np.trunc,
}
globals().update({name: _elementwise(f, name) for name, f in _ELEMENTWISE.items()})


def _real_only(name: str, x) -> Tensor:
    t = _tensor(x)
    if t._data.dtype.kind == "c":  # symgrad makes no complex tensors; an ndarray could still be one
        raise TypeError(f"symgrad's array API namespace: {name} of a complex array is not supported")
    return t


def real(x, /):
    """The real part: the array itself (symgrad's dtypes are real)."""
    return _real_only("real", x)


def conj(x, /):
    return _real_only("conj", x)


def imag(x, /):
    """The imaginary part of a real array: zeros."""
    return zeros_like(_real_only("imag", x))


def clip(x, /, min=None, max=None):  # noqa: A002 - the standard's names
    if min is None and max is None:
        return _tensor(x)
    return _result(np.clip(x, min, max))


# --- statistical and utility functions ----------------------------------------------------------

def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def sum(x, /, *, axis=None, dtype=None, keepdims: builtins.bool = False):  # noqa: A001
    return _result(np.sum(x, axis=_axis(axis), dtype=_np_dtype(dtype), keepdims=keepdims))


def prod(x, /, *, axis=None, dtype=None, keepdims: builtins.bool = False):
    return _result(np.prod(x, axis=_axis(axis), dtype=_np_dtype(dtype), keepdims=keepdims))


def mean(x, /, *, axis=None, keepdims: builtins.bool = False):
    return _result(np.mean(x, axis=_axis(axis), keepdims=keepdims))


def max(x, /, *, axis=None, keepdims: builtins.bool = False):  # noqa: A001
    # a copy: callers update the result in place (``xpx.at(x_max, ...).set(0)``), and the max's own
    # backward still needs the value it returned
    return F.clone(_result(np.max(x, axis=_axis(axis), keepdims=keepdims)))


def min(x, /, *, axis=None, keepdims: builtins.bool = False):  # noqa: A001
    return F.clone(_result(np.min(x, axis=_axis(axis), keepdims=keepdims)))


def var(x, /, *, axis=None, correction=0.0, keepdims: builtins.bool = False):
    return _result(np.var(x, axis=_axis(axis), ddof=correction, keepdims=keepdims))


def std(x, /, *, axis=None, correction=0.0, keepdims: builtins.bool = False):
    return _result(np.std(x, axis=_axis(axis), ddof=correction, keepdims=keepdims))


def all(x, /, *, axis=None, keepdims: builtins.bool = False):  # noqa: A001
    return _result(np.all(x, axis=_axis(axis), keepdims=keepdims))


def any(x, /, *, axis=None, keepdims: builtins.bool = False):  # noqa: A001
    return _result(np.any(x, axis=_axis(axis), keepdims=keepdims))


def argmax(x, /, *, axis=None, keepdims: builtins.bool = False):
    return _result(np.argmax(x, axis=axis, keepdims=keepdims))


def argmin(x, /, *, axis=None, keepdims: builtins.bool = False):
    return _result(np.argmin(x, axis=axis, keepdims=keepdims))


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: builtins.bool = False):
    if include_initial:
        raise TypeError("symgrad's array API namespace: cumulative_sum with include_initial=True is not supported")
    t = _tensor(x)
    if axis is None:
        if t.ndim > 1:
            raise ValueError("cumulative_sum: axis must be given for arrays of more than one dimension")
        axis = 0
    return _result(np.cumsum(t, axis=axis, dtype=_np_dtype(dtype)))


def where(condition, x1, x2, /):
    return _result(np.where(condition, x1, x2))


# --- manipulation -------------------------------------------------------------------------------

def reshape(x, /, shape, *, copy=None):
    if copy is False:
        raise ValueError("symgrad's array API namespace: reshape with copy=False is not supported")
    return _result(np.reshape(x, tuple(shape)))


def broadcast_to(x, /, shape):
    return _result(np.broadcast_to(x, tuple(shape)))


def broadcast_arrays(*arrays):
    shape = np.broadcast_shapes(*[np.shape(a) if not isinstance(a, Tensor) else tuple(a.shape) for a in arrays])
    return [broadcast_to(a, shape) for a in arrays]


def expand_dims(x, /, *, axis=0):
    return _result(np.expand_dims(x, axis))


def squeeze(x, /, axis):
    return _result(np.squeeze(x, axis=_axis(axis)))


def permute_dims(x, /, axes):
    return _result(np.transpose(x, tuple(axes)))


def matrix_transpose(x, /):
    return _result(np.swapaxes(x, -1, -2))


def moveaxis(x, source, destination, /):
    return _result(np.moveaxis(x, source, destination))


def flip(x, /, *, axis=None):
    return _result(np.flip(x, axis=_axis(axis)))


def roll(x, /, shift, *, axis=None):
    return _result(np.roll(x, shift, axis=_axis(axis)))


def concat(arrays, /, *, axis=0):
    return _result(np.concatenate(list(arrays), axis=axis))


def stack(arrays, /, *, axis=0):
    return _result(np.stack(list(arrays), axis=axis))


def tile(x, repetitions, /):
    return _result(np.tile(x, tuple(repetitions)))


def matmul(x1, x2, /):
    return _result(np.matmul(x1, x2))


def tensordot(x1, x2, /, *, axes=2):
    return _result(np.tensordot(x1, x2, axes=axes))


def vecdot(x1, x2, /, *, axis=-1):
    return sum(_result(np.multiply(x1, x2)), axis=axis)


def sort(x, /, *, axis=-1, descending: builtins.bool = False, stable: builtins.bool = True):
    out = np.sort(x, axis=axis)
    return _result(np.flip(out, axis=axis) if descending else out)


def argsort(x, /, *, axis=-1, descending: builtins.bool = False, stable: builtins.bool = True):
    if descending:
        raise TypeError("symgrad's array API namespace: argsort with descending=True is not supported")
    return _result(np.argsort(x, axis=axis))


# scipy.special's functions (expit, erf, xlogy, ...) look for a ``special`` attribute of the namespace
def __getattr__(name: str):
    if name == "special":
        from ...scipy import special
        return special
    if name.startswith("__"):   # Python's own probes (__path__, __wrapped__...)
        raise AttributeError(name)
    raise AttributeError(f"symgrad's array API namespace (symgrad.ops.numpy_surface.array_api) has no {name!r}: "
                         "the library called a function symgrad does not implement on tensors; compute "
                         "this step on t.detach().numpy() if no gradient is needed")


def namespace_of(t: Tensor, api_version: str | None = None):
    """``Tensor.__array_namespace__``: this module (it implements the versions in ``_VERSIONS``)."""
    if api_version is not None and api_version not in _VERSIONS:
        raise ValueError(f"symgrad's array API namespace implements versions {', '.join(_VERSIONS)}, "
                         f"not {api_version!r}")
    _refuse_weighted_scipy_logsumexp()
    return sys.modules[__name__]


def _refuse_weighted_scipy_logsumexp() -> None:
    """scipy's ``logsumexp(a, b=...)`` separates the largest terms of ``a`` and sends their gradient
    through ``max(a)``, which shares it evenly between tied maxima, while the true gradient weights each
    by its ``b``: a tie (``a`` all zeros, say) would give a wrong gradient for ``a``.  Refused when that
    gradient may be asked for; symgrad.scipy.special.logsumexp computes it exactly."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return
        if frame.f_code.co_name == "logsumexp" and frame.f_globals.get("__name__") == "scipy.special._logsumexp":
            a, b = frame.f_locals.get("a"), frame.f_locals.get("b")
            rec = _registry._recorder
            if b is not None and isinstance(a, Tensor) and (a.requires_grad or (rec is not None and rec.is_traced(a))):
                raise TypeError("symgrad: scipy.special.logsumexp with b= on a tensor that may need a gradient is "
                                "not supported through the array API (scipy routes the gradient of the largest "
                                "terms through max(a), which is wrong where maxima tie with different weights); "
                                "use symgrad.scipy.special.logsumexp(a, axis, b=b), which takes the same arguments")
            return
        frame = frame.f_back
