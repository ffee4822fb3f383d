"""Reductions, scans and sorting: cumsum, diff, sort, argmax, average, nan-reductions, ...

Each handler takes numpy's signature and defaults (``axis=None`` flattens a scan or sort,
``np.sort``'s ``axis=-1``, ``ufunc.reduce``'s ``axis=0``) and builds the value from symgrad ops that
have rules, so the graph records it eagerly and compiled.  Arguments symgrad cannot honour
(``out=``, ``where=``, ``order=``...) raise a TypeError naming the numpy function and the argument.

The ufunc methods ``reduce``, ``accumulate`` and ``outer`` of the arithmetic ufuncs are here too.
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from ...tensor import Tensor
from .. import functional as F
from ..numpy_dispatch import (
    _FUNCTIONS,
    _NOT_GIVEN,
    _UFUNCS,
    _axis,
    _float_for_mean,
    numpy_functions,
    numpy_ufunc_methods,
    numpy_ufuncs,
)

__all__: list[str] = []


def _refuse(name: str, **given) -> None:
    """TypeError for an argument symgrad cannot honour (any value other than "not given")."""
    for key, value in given.items():
        if value is not None and value is not _NOT_GIVEN:
            shown = f"<{type(value).__name__}>" if isinstance(value, (np.ndarray, Tensor, tuple)) else repr(value)
            raise TypeError(f"symgrad: numpy.{name} with {key}={shown} is not supported on symgrad tensors")


def _one_axis(name: str, axis, ndim: int) -> int:
    """An ``axis`` that must be one int, checked against ``ndim`` the way numpy does."""
    if isinstance(axis, (tuple, list)) or not isinstance(axis, (numbers.Integral,)):
        raise TypeError(f"numpy.{name}: axis must be an integer (got {axis!r})")
    bound = builtins.max(ndim, 1)
    if not -bound <= int(axis) < bound:
        raise np.exceptions.AxisError(int(axis), ndim, f"numpy.{name}")
    return int(axis) % bound


def _flat(t: Tensor) -> Tensor:
    return F.reshape(t, (-1,))


# --- scans ----------------------------------------------------------------------------------


def _scan(name: str, fn):
    def handler(a, axis=None, dtype=None, out=None):
        _refuse(name, out=out)
        t = F.as_tensor(a)
        if dtype is not None:
            t = F.to(t, dtype)
        if axis is None:  # numpy scans the flattened array
            t, axis = _flat(t), 0
        if t.ndim == 0:
            raise np.exceptions.AxisError(int(axis), 0, f"numpy.{name}")
        return fn(t, _one_axis(name, axis, t.ndim))

    handler.__name__ = f"_{name}"
    return handler


numpy_functions(np.cumsum)(_scan("cumsum", F.cumsum))
numpy_functions(np.cumprod)(_scan("cumprod", F.cumprod))


@numpy_functions(np.diff)
def _diff(a, n=1, axis=-1, prepend=_NOT_GIVEN, append=_NOT_GIVEN):
    t = F.as_tensor(a)
    if not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"numpy.diff: order must be non-negative but got {n!r}")
    if n == 0:
        return t
    if t.ndim == 0:
        raise ValueError("numpy.diff requires input that is at least one dimensional")
    axis = _one_axis("diff", axis, t.ndim)
    parts = []
    for extra in (prepend, append):
        if extra is _NOT_GIVEN:
            parts.append(None)
            continue
        e = F.as_tensor(extra)
        if e.ndim == 0:  # a scalar is broadcast to one slice along axis
            shape = list(t.shape)
            shape[axis] = 1
            e = F.expand(F.reshape(e, (1,) * t.ndim), tuple(shape))
        parts.append(e)
    return F.diff(t, int(n), axis, *parts)


# --- sorting and positions ------------------------------------------------------------------

_SORT_KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")


def _sort_input(name: str, a, axis, kind, order):
    if order is not None:
        raise TypeError(f"symgrad: numpy.{name} with order= (structured arrays) is not supported on symgrad tensors")
    if kind not in _SORT_KINDS:
        raise ValueError(f"numpy.{name}: sort kind must be one of {_SORT_KINDS[1:]} (got {kind!r})")
    t = F.as_tensor(a)
    if axis is None:
        return _flat(t), 0
    if t.ndim == 0:
        raise np.exceptions.AxisError(int(axis), 0, f"numpy.{name}")
    return t, _one_axis(name, axis, t.ndim)


@numpy_functions(np.sort)
def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    t, axis = _sort_input("sort", a, axis, kind, order)
    return F.sort(t, axis)[0]


@numpy_functions(np.argsort)
def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    t, axis = _sort_input("argsort", a, axis, kind, order)
    return F.argsort(t, axis)


def _arg_extremum(name: str, fn):
    def handler(a, axis=None, out=None, *, keepdims=False):
        _refuse(name, out=out)
        t = F.as_tensor(a)
        if t.numel() == 0:
            raise ValueError(f"attempt to get {name} of an empty sequence")
        if axis is None:
            result = fn(t)
            return F.reshape(result, (1,) * t.ndim) if keepdims else result
        return fn(t, _one_axis(name, axis, t.ndim), bool(keepdims))

    handler.__name__ = f"_{name}"
    return handler


numpy_functions(np.argmax)(_arg_extremum("argmax", F.argmax))
numpy_functions(np.argmin)(_arg_extremum("argmin", F.argmin))


@numpy_functions(np.median)
def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _refuse("median", out=out)
    t = F.as_tensor(a)
    if not t.is_floating_point():
        t = _float_for_mean(t)
    axes = _axis(axis)
    if axes is None:
        work, dim = _flat(t), 0
    elif isinstance(axes, tuple):
        # several axes: move them last, merge them into one
        dims = sorted({_one_axis("median", d, t.ndim) for d in axes})
        rest = [d for d in range(t.ndim) if d not in dims]
        work = F.permute(t, rest + dims)
        work = F.reshape(work, tuple(t.shape[d] for d in rest) + (-1,))
        dim = work.ndim - 1
    else:
        work, dim = t, _one_axis("median", axes, t.ndim)
    n = work.shape[dim]
    if n == 0:
        raise ValueError("numpy.median of an empty axis is not supported on symgrad tensors")
    ordered = F.sort(work, dim)[0]
    mid = F.select(ordered, dim, n // 2)
    if n % 2 == 0:
        mid = F.mul(F.add(F.select(ordered, dim, n // 2 - 1), mid), 0.5)
    # numpy: NaN anywhere in the slice makes its median NaN (sorting alone would move it to the end)
    has_nan = F.gt(F.sum(F.isnan(work), dim), 0)
    result = F.where(has_nan, float("nan"), mid)
    if keepdims:
        shape = [1 if (axes is None or d in _kept_axes(axes, t.ndim)) else s for d, s in enumerate(t.shape)]
        result = F.reshape(result, tuple(shape))
    return result


def _kept_axes(axes, ndim):
    return {_one_axis("median", d, ndim) for d in (axes if isinstance(axes, tuple) else (axes,))}


# --- reductions -----------------------------------------------------------------------------

# np.isnan as the recorded isnan op: a compiled graph tests each call's values (the nan-reductions use it)
numpy_ufuncs(np.isnan)(lambda x: F.isnan(x))
numpy_ufuncs(np.isinf)(lambda x: F.isinf(x))
numpy_ufuncs(np.isfinite)(lambda x: F.isfinite(x))



def _reduce_call(fn, t: Tensor, axis, keepdims: bool):
    if axis is None:
        return F.reshape(fn(t), (1,) * t.ndim) if keepdims else fn(t)
    return fn(t, axis, bool(keepdims))


@numpy_functions(np.ptp)
def _ptp(a, axis=None, out=None, keepdims=False):
    _refuse("ptp", out=out)
    t, axis = F.as_tensor(a), _axis(axis)
    if axis == ():
        return F.sub(t, t)
    dims = () if axis is None else axis
    return F.sub(F.amax(t, dims, bool(keepdims)), F.amin(t, dims, bool(keepdims)))


@numpy_functions(np.average)
def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    t = F.as_tensor(a)
    axis = _axis(axis)
    if weights is None:
        avg = _FUNCTIONS[np.mean](t, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        count = t.numel() if axis is None else int(np.prod([t.shape[d] for d in
                                                            ((axis,) if isinstance(axis, int) else axis)]))
        return avg, F.as_tensor(np.full(tuple(avg.shape), count, dtype=avg._data.dtype))
    w = weights if isinstance(weights, Tensor) else F.as_tensor(np.asarray(weights))
    if tuple(w.shape) != tuple(t.shape):
        if axis is None:
            raise TypeError("numpy.average: axis must be specified when shapes of a and weights differ.")
        axes = (axis,) if isinstance(axis, int) else axis
        axes = tuple(_one_axis("average", d, t.ndim) for d in axes)
        if tuple(w.shape) != tuple(t.shape[d] for d in axes):
            raise ValueError("numpy.average: shape of weights must be consistent with shape of a along "
                             "specified axis.")
        # weights along `axis`: place their dims there, ones elsewhere (axes in increasing order)
        order = sorted(range(len(axes)), key=lambda k: axes[k])
        w = F.permute(w, order) if w.ndim > 1 else w
        shape = [t.shape[d] if d in axes else 1 for d in range(t.ndim)]
        w = F.reshape(w, tuple(shape))
    if not t.is_floating_point() and not w.is_floating_point():
        t = _float_for_mean(t)
    weight_sum = _reduce_call(F.sum, F.expand(w, tuple(t.shape)) if w.shape != t.shape else w, axis, keepdims)
    if not _traced(weight_sum) and np.any(weight_sum._data == 0):
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    avg = F.div(_reduce_call(F.sum, F.mul(t, w), axis, keepdims), weight_sum)
    if returned:
        return avg, F.expand(weight_sum, tuple(avg.shape)) if weight_sum.shape != avg.shape else weight_sum
    return avg


def _traced(t: Tensor) -> bool:
    from .. import registry
    rec = registry._recorder
    return rec is not None and rec.is_traced(t)


@numpy_functions(np.nansum)
def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):
    _refuse("nansum", out=out, initial=initial, where=where)
    t, axis = F.as_tensor(a), _axis(axis)
    clean = F.where(F.isnan(t), 0, t) if t.is_floating_point() else t
    return _FUNCTIONS[np.sum](clean, axis=axis, dtype=dtype, keepdims=keepdims)


@numpy_functions(np.nanmean)
def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NOT_GIVEN):
    _refuse("nanmean", out=out, where=where)
    t = F.as_tensor(a)
    if not t.is_floating_point():  # no NaN in an integer array: the mean
        return _FUNCTIONS[np.mean](t, axis=axis, dtype=dtype, keepdims=keepdims)
    if dtype is not None:
        t = F.to(t, dtype)
    axis = _axis(axis)
    present = F.logical_not(F.isnan(t))
    total = _FUNCTIONS[np.sum](F.where(present, t, 0), axis=axis, keepdims=keepdims)
    count = _FUNCTIONS[np.sum](present, axis=axis, keepdims=keepdims)
    return F.div(total, F.to(count, t.dtype))


def _truth(name: str):
    def handler(a, axis=None, out=None, keepdims=False, *, where=_NOT_GIVEN):
        _refuse(name, out=out, where=where)
        t, axis = F.as_tensor(a), _axis(axis)
        if axis == ():
            return F.ne(t, 0) if t.dtype.name != "bool" else t
        nonzero = F.ne(t, 0) if t.dtype.name != "bool" else t
        if name == "any":
            return F.gt(_FUNCTIONS[np.sum](nonzero, axis=axis, keepdims=keepdims), 0)
        zeros = F.logical_not(nonzero)
        return F.eq(_FUNCTIONS[np.sum](zeros, axis=axis, keepdims=keepdims), 0)

    handler.__name__ = f"_{name}"
    return handler


numpy_functions(np.any)(_truth("any"))
numpy_functions(np.all)(_truth("all"))


@numpy_functions(np.count_nonzero)
def _count_nonzero(a, axis=None, *, keepdims=False):
    t, axis = F.as_tensor(a), _axis(axis)
    nonzero = F.ne(t, 0) if t.dtype.name != "bool" else t
    if axis == ():
        return F.to(nonzero, np.int64)
    return _FUNCTIONS[np.sum](nonzero, axis=axis, keepdims=keepdims)


@numpy_functions(np.bincount)
def _bincount(x, /, weights=None, minlength=0):
    t = F.as_tensor(x)
    if t.dtype.is_floating_point:
        raise TypeError("Cannot cast array data from dtype('float64') to dtype('int64') according to the rule 'safe'"
                        if t.dtype.name == "float64" else f"numpy.bincount: x must be integers (got {t.dtype})")
    if t.ndim != 1:
        raise ValueError("object too deep for desired array" if t.ndim > 1 else "object of too small depth for "
                         "desired array")
    if weights is None:
        return F.bincount(t, None, minlength)
    w = F.as_tensor(weights)
    # numpy counts weights in float64 whatever their dtype
    return F.bincount(t, F.to(w, np.float64), minlength)


# --- ufunc methods: reduce, accumulate, outer -----------------------------------------------


def _ufunc_reduce(ufunc, handler, accepts_dtype: bool):
    name = f"{ufunc.__name__}.reduce"

    def reduce(array, axis=0, dtype=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=True):
        _refuse(name, out=out, initial=initial, where=None if where is True else where)
        if dtype is not None and not accepts_dtype:
            _refuse(name, dtype=dtype)
        t = F.as_tensor(array)
        if axis is not None and not isinstance(axis, tuple) and t.ndim == 0:
            raise np.exceptions.AxisError(int(axis), 0, f"numpy.{name}")
        kwargs = {"dtype": dtype} if accepts_dtype else {}
        return handler(t, axis=axis, keepdims=keepdims, **kwargs)

    return reduce


def _ufunc_accumulate(ufunc, fn):
    name = f"{ufunc.__name__}.accumulate"

    def accumulate(array, axis=0, dtype=None, out=None):
        _refuse(name, out=out)
        t = F.as_tensor(array)
        if dtype is not None:
            t = F.to(t, dtype)
        if t.ndim == 0:
            raise TypeError(f"numpy.{name}: cannot accumulate on a scalar")
        if axis is None:
            raise TypeError(f"numpy.{name}: axis must be an integer (got None)")
        return fn(t, _one_axis(name, axis, t.ndim))

    return accumulate


def _outer_operand(x, trailing: int):
    """``x`` with ``trailing`` length-1 dims appended, so that broadcasting makes the outer product."""
    if isinstance(x, Tensor):
        return F.reshape(x, tuple(x.shape) + (1,) * trailing) if trailing else x
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    return np.reshape(x, np.shape(x) + (1,) * trailing) if trailing else x


def _ufunc_outer(ufunc):
    name = f"{ufunc.__name__}.outer"

    def outer(a, b, **kwargs):
        _refuse(name, **{k: v for k, v in kwargs.items() if not (k == "where" and v is True)})
        fn = _UFUNCS.get(ufunc)
        if fn is None:
            raise TypeError(f"symgrad: numpy.{name} is not supported on symgrad tensors (numpy.{ufunc.__name__} "
                            f"itself is not)")
        return fn(_outer_operand(a, np.ndim(b._data if isinstance(b, Tensor) else b)), b)

    return outer


def _product(t: Tensor, axis=None, keepdims=False, dtype=None) -> Tensor:
    """The product over ``axis`` as the last entry of a cumprod: its gradient is exact with zeros and, unlike
    prod's, also compiles."""
    if dtype is not None:
        t = F.to(t, dtype)
    axis = _axis(axis)
    if axis == () or t.ndim == 0:
        return t
    axes = sorted({_one_axis("multiply.reduce", d, t.ndim)
                   for d in (range(t.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis)})
    rest = [d for d in range(t.ndim) if d not in axes]
    work = F.permute(t, rest + axes) if rest + axes != list(range(t.ndim)) else t
    work = F.reshape(work, tuple(t.shape[d] for d in rest) + (-1,))
    if work.shape[-1] == 0:
        out = F.as_tensor(np.ones(work.shape[:-1], dtype=t._data.dtype))
    else:
        out = F.select(F.cumprod(work, -1), -1, work.shape[-1] - 1)
    if keepdims:
        out = F.reshape(out, tuple(1 if d in axes else s for d, s in enumerate(t.shape)))
    return out


for _ufunc, _handler, _dtype_ok in ((np.add, lambda t, **kw: _FUNCTIONS[np.sum](t, **kw), True),
                                    (np.multiply, _product, True),
                                    (np.maximum, lambda t, **kw: _FUNCTIONS[np.max](t, **kw), False),
                                    (np.minimum, lambda t, **kw: _FUNCTIONS[np.min](t, **kw), False)):
    numpy_ufunc_methods((_ufunc, "reduce"))(_ufunc_reduce(_ufunc, _handler, _dtype_ok))

numpy_ufunc_methods((np.add, "accumulate"))(_ufunc_accumulate(np.add, F.cumsum))
numpy_ufunc_methods((np.multiply, "accumulate"))(_ufunc_accumulate(np.multiply, F.cumprod))

for _ufunc in (np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum, np.power):
    numpy_ufunc_methods((_ufunc, "outer"))(_ufunc_outer(_ufunc))
