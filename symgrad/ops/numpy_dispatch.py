"""numpy's override protocols on Tensor: ``__array_ufunc__`` (NEP 13) and ``__array_function__`` (NEP 18).

With them, a function written in plain numpy runs on symgrad tensors and records
the autograd graph: every supported ufunc or function is routed to the symgrad op
that computes the same value, so ``backward`` sees it.  Anything symgrad cannot
record raises ``TypeError`` naming the numpy function instead of quietly handing
back an ndarray with the graph dropped.

>>> import numpy as np
>>> import symgrad
>>> x = symgrad.tensor([0.5, 1.0], dtype=symgrad.float64, requires_grad=True)
>>> y = np.sum(np.tanh(x) * np.array([2.0, 3.0]))
>>> type(y.grad_fn).__name__
'SumBackward0'
>>> y.backward(); x.grad
tensor([1.5729, 1.2599], dtype=symgrad.float64)

On Tensors dtypes follow PyTorch: ``np.float64(2.0) * float32_tensor`` stays float32.  Values traced
for a function given numpy arrays follow numpy instead (:mod:`symgrad.ops.numpy_surface.face`).
"""

from __future__ import annotations

import builtins
import difflib
import numbers
import sys

import numpy as np

from .. import dtypes as _dt
from ..tensor import Tensor, is_numpy_face
from . import functional as F
from . import registry

__all__ = ["array_ufunc", "array_function", "array_namespace", "install", "supported_ufuncs", "supported_functions"]

# numpy omits arguments the caller did not pass; this marks "not given" in our numpy-shaped handlers.
_NOT_GIVEN = object()

# Operand types a ufunc call may mix with Tensors; anything else (another duck array) gets NotImplemented
# so that its own __array_ufunc__ can have a go, as NEP 13 asks.
_OPERAND_TYPES = (Tensor, np.ndarray, np.generic, numbers.Number, list, tuple)


def _public_module(mod: str) -> str:
    """``numpy._core.fromnumeric`` -> ``numpy``, ``scipy.special._logsumexp`` -> ``scipy.special``:
    the module a user imports the function from, not the private one that defines it."""
    parts = []
    for part in mod.split("."):
        if part.startswith("_"):
            break
        parts.append(part)
    return ".".join(parts) or mod


def _numpy_name(func) -> str:
    """``numpy.sum``, ``numpy.linalg.norm``, ``scipy.special.expit``: the public name, module included."""
    name = getattr(func, "__name__", None) or type(func).__name__
    if isinstance(func, np.ufunc):
        # ufuncs carry no __module__: find the public module that exports this very object
        if getattr(np, name, None) is func:
            return f"numpy.{name}"
        for mod in ("scipy.special",):
            module = sys.modules.get(mod)
            if module is not None and getattr(module, name, None) is func:
                return f"{mod}.{name}"
        return f"the ufunc {name}"
    mod = getattr(func, "__module__", None) or "numpy"
    return f"{_public_module(mod)}.{name}"


# numpy names whose symgrad (PyTorch) function of the same name does something else: never suggested
_OTHER_MEANING_IN_SYMGRAD = frozenset({"select", "repeat", "sort", "split", "max", "min", "flip", "diag"})


def _suggestions(name: str) -> str:
    """What exists instead of the unsupported ``name`` (``numpy.cumsum``): the symgrad function of that
    name when there is one, and supported numpy functions with similar names; empty when neither."""
    bare = name.rsplit(".", 1)[-1]
    hints = []
    op = getattr(F, bare, None)
    if callable(op) and not bare.startswith("_") and bare not in _OTHER_MEANING_IN_SYMGRAD and \
            getattr(op, "__module__", "").startswith("symgrad"):
        hints.append(f"symgrad.{bare} computes it with a gradient (PyTorch's arguments: dim rather than axis)")
    supported = {}
    for f in (*_FUNCTIONS, *_UFUNCS):
        full = _numpy_name(f)
        supported.setdefault(full.rsplit(".", 1)[-1], full)
    supported.pop(bare, None)
    close = difflib.get_close_matches(bare, sorted(supported), n=3, cutoff=0.75)
    if close:
        hints.append("supported with similar names: " + ", ".join(supported[c] for c in close))
    return "; ".join(hints)


def _unsupported(what: str, why: str = "", suggest: bool = False) -> TypeError:
    hint = _suggestions(what) if suggest else ""
    return TypeError(f"symgrad: {what} is not supported on symgrad tensors{why}; "
                     + (f"{hint}; or use " if hint else "use ")
                     + "t.detach().numpy() if no gradient is needed")


# --- ufuncs ---------------------------------------------------------------------------------


def _bool_from_data(np_ufunc):
    # isnan & co. only inspect values: their result is a bool tensor, nothing to differentiate.
    def handler(x):
        t = F.as_tensor(x)
        rec = registry._recorder
        if rec is not None and rec.is_traced(t):
            # computed from the data, the result would be a constant of the trace: a compiled function
            # would answer for the example inputs on every later call
            rec.refuse(f"numpy.{np_ufunc.__name__} of a traced value is not supported in a compiled function "
                       "(symgrad has no op for it yet); compute it outside the function and pass the mask "
                       "as an argument")
        return Tensor._wrap(np.asarray(np_ufunc(t._data)))

    return handler


def _symmetric(fn):
    # F.maximum makes its first operand a tensor, which would round a Python float to float32; the op is
    # symmetric (ties split the gradient evenly), so put the tensor first.
    return lambda a, b: fn(b, a) if isinstance(b, Tensor) and not isinstance(a, Tensor) else fn(a, b)


_UFUNCS = {
    np.add: F.add, np.subtract: F.sub, np.multiply: F.mul, np.divide: F.div,
    np.negative: F.neg, np.positive: lambda x: F.as_tensor(x), np.power: F.pow,
    np.exp: F.exp, np.log: F.log, np.log1p: F.log1p, np.expm1: F.expm1, np.exp2: F.exp2, np.log2: F.log2,
    np.sin: F.sin, np.cos: F.cos, np.tan: F.tan, np.tanh: F.tanh, np.sinh: F.sinh, np.cosh: F.cosh,
    np.arctan: F.atan, np.sqrt: F.sqrt, np.square: F.square, np.absolute: F.abs, np.sign: F.sign,
    np.reciprocal: F.reciprocal, np.maximum: _symmetric(F.maximum), np.minimum: _symmetric(F.minimum),
    np.greater: F.gt, np.less: F.lt, np.greater_equal: F.ge, np.less_equal: F.le, np.equal: F.eq,
    np.not_equal: F.ne, np.logical_and: F.logical_and, np.logical_or: F.logical_or,
    np.logical_not: F.logical_not, np.floor_divide: F.floor_divide,
    np.matmul: lambda a, b: F.matmul(*F.numpy_promoted(a, b)),
    np.isnan: _bool_from_data(np.isnan), np.isinf: _bool_from_data(np.isinf),
    np.isfinite: _bool_from_data(np.isfinite),
}
if getattr(np, "true_divide", np.divide) is not np.divide:  # an alias in numpy 2, its own ufunc before
    _UFUNCS[np.true_divide] = F.div

# ufunc methods and the supported call that computes the same thing (for the error message)
_UFUNC_METHOD_EQUIVALENTS = {
    ("add", "reduce"): "numpy.sum(x, axis=0)", ("multiply", "reduce"): "numpy.prod(x, axis=0)",
    ("maximum", "reduce"): "numpy.max(x, axis=0)", ("minimum", "reduce"): "numpy.min(x, axis=0)",
    ("add", "outer"): "x[:, None] + y[None, :]", ("multiply", "outer"): "x[:, None] * y[None, :]",
    ("subtract", "outer"): "x[:, None] - y[None, :]",
}

# Keyword arguments that change nothing when they have numpy's default value.
_UFUNC_DEFAULTS = {"casting": "same_kind", "order": "K", "subok": True, "dtype": None, "signature": None}


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """``Tensor.__array_ufunc__``: run a numpy ufunc as the matching symgrad op.

    Operands keep their order, so ``arr - t`` is ``arr - t``; numpy arrays and
    numbers are wrapped as constants.

    >>> import numpy as np, symgrad
    >>> t = symgrad.tensor([1.0, 2.0], requires_grad=True)
    >>> np.array([10.0, 10.0], dtype=np.float32) - t
    tensor([9., 8.], grad_fn=<SubBackward0>)
    >>> np.float64(2.0) * t          # a float32 tensor stays float32, as in PyTorch
    tensor([2., 4.], grad_fn=<MulBackward0>)
    """
    name = _numpy_name(ufunc)
    if not all(isinstance(x, _OPERAND_TYPES) for x in inputs):
        return NotImplemented
    if method == "at" and _index_only(inputs):
        # np.add.at(array, index_tensor, values): integer/bool index tensors carry no graph, so unwrap them
        return getattr(ufunc, method)(inputs[0], _unwrap_index(inputs[1]), *inputs[2:], **kwargs)
    if method != "__call__":
        # np.add.at, np.maximum.reduce, np.add.outer, ...: registered by the numpy_surface families
        handler = _UFUNC_METHODS.get((ufunc, method))
        if handler is None:
            instead = _UFUNC_METHOD_EQUIVALENTS.get((ufunc.__name__, method))
            raise _unsupported(f"{name}.{method}", f" (ufunc methods that are: {_ufunc_method_names()}" +
                               (f"; {instead} computes the same with a gradient)" if instead else ")"))
        return handler(*inputs, **kwargs)
    out = kwargs.pop("out", None)
    if out is not None and any(o is not None for o in (out if isinstance(out, tuple) else (out,))):
        raise _unsupported(f"{name} with out=", " (writing into an array would drop the autograd graph)")
    where = kwargs.pop("where", True)
    if where is not True:
        raise _unsupported(f"{name} with where=", " (masked ufunc calls leave other elements undefined)")
    for key, value in kwargs.items():
        if key not in _UFUNC_DEFAULTS or not _same(value, _UFUNC_DEFAULTS[key]):
            raise _unsupported(f"{name} with {key}={value!r}")
    fn = _UFUNCS.get(ufunc)
    if fn is None and _LATE_UFUNCS:
        for register in _LATE_UFUNCS:
            register()
        fn = _UFUNCS.get(ufunc)
    if fn is None:
        raise _unsupported(name, suggest=True)
    out_dtype = None
    if any(is_numpy_face(x) for x in inputs):  # numpy's promotion for numpy-face values (NEP 50)
        from .numpy_surface.face import promote_operands
        inputs, out_dtype = promote_operands(ufunc, inputs)
    result = fn(*(_nested(x) if isinstance(x, (list, tuple)) and _has_tensor(x) else x for x in inputs))
    if out_dtype is not None and isinstance(result, Tensor) and result._data.dtype != out_dtype:
        result = F.to(result, _dt.from_numpy_dtype(out_dtype))
    return result


def _has_tensor(seq) -> bool:
    return any(isinstance(e, Tensor) or (isinstance(e, (list, tuple)) and _has_tensor(e)) for e in seq)


def _nested(seq) -> Tensor:
    # [t1, t2] as an operand: stack, so the elements stay in the graph (building a tensor from it would not)
    return F.stack([_nested(e) if isinstance(e, (list, tuple)) else F.as_tensor(e) for e in seq])


def _index_only(inputs) -> bool:
    """``ufunc.at`` into a plain array where tensors appear only in the index, as integer or bool tensors."""
    target, idx, rest = inputs[0], inputs[1] if len(inputs) > 1 else None, inputs[2:]
    if isinstance(target, Tensor) or any(isinstance(r, Tensor) for r in rest):
        return False
    parts = idx if isinstance(idx, tuple) else (idx,)
    return all(p._data.dtype.kind in "iub" for p in parts if isinstance(p, Tensor))


def _unwrap_index(idx):
    if isinstance(idx, tuple):
        return tuple(i._data if isinstance(i, Tensor) else i for i in idx)
    return idx._data if isinstance(idx, Tensor) else idx


def _same(value, default) -> bool:
    return value is default or (isinstance(value, str) and value == default)


# --- functions ------------------------------------------------------------------------------


def _reject(name: str, **given) -> None:
    """Raise for arguments that symgrad cannot honour (``out=``, ``where=``, ``initial=``...)."""
    for key, value in given.items():
        if value is not None and value is not _NOT_GIVEN:
            raise _unsupported(f"numpy.{name} with {key}=")


def _axis(axis):
    """numpy's ``axis`` as symgrad's ``dim``: None stays None, a list becomes a tuple."""
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return tuple(int(a) for a in axis)
    return int(axis)


def _dtype_arg(dtype, t):
    """A numpy function's ``dtype=`` as numpy reads it on a numpy-face value (``float`` is float64, not
    PyTorch's default dtype); unchanged otherwise."""
    if dtype is None or isinstance(dtype, _dt.dtype) or not is_numpy_face(t):
        return dtype
    return _dt.from_numpy_dtype(np.dtype(dtype))


def _float_for_mean(t: Tensor) -> Tensor:
    # numpy averages integers into floats; symgrad (like PyTorch) refuses, so cast: to float64 on a
    # numpy-face value (numpy's own result), to the default float dtype on a PyTorch-face one.
    if t.is_floating_point():
        return t
    return F.to(t, _dt.float64 if is_numpy_face(t) else _dt.get_default_dtype())


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):
    _reject("sum", out=out, initial=initial, where=where)
    t, axis = F.as_tensor(a), _axis(axis)
    dtype = _dtype_arg(dtype, t)
    if dtype is not None:
        # numpy accumulates in dtype (float32 summed with dtype=float64 sums float64 values); symgrad's
        # sum(dtype=) rounds the float32 sum and then casts, so cast first
        t = F.to(t, dtype)
    if axis == ():  # numpy: reduce over no axis at all
        return t
    if axis is None and not keepdims:
        return F.sum(t)
    return F.sum(t, axis, bool(keepdims))


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NOT_GIVEN):
    _reject("mean", out=out, where=where)
    t, axis = F.as_tensor(a), _axis(axis)
    dtype = _dtype_arg(dtype, t)
    t = F.to(t, dtype) if dtype is not None else _float_for_mean(t)
    if axis == ():
        return t
    if axis is None and not keepdims:
        return F.mean(t)
    return F.mean(t, axis, bool(keepdims))


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):
    _reject("prod", out=out, initial=initial, where=where)
    t, axis = F.as_tensor(a), _axis(axis)
    dtype = _dtype_arg(dtype, t)
    if dtype is not None:
        t = F.to(t, dtype)
    if axis is None:
        out = F.prod(t)
        return F.reshape(out, (1,) * t.ndim) if keepdims else out
    axes = sorted({F._check_dim(d, t.ndim, "prod") for d in ((axis,) if isinstance(axis, int) else axis)})
    # symgrad's prod takes one dim; reducing the highest first keeps the remaining indices valid
    for d in reversed(axes):
        t = F.prod(t, d, bool(keepdims))
    return t


def _extremum(name: str):
    fn = F.amax if name == "max" else F.amin

    def handler(a, axis=None, out=None, keepdims=False, initial=_NOT_GIVEN, where=_NOT_GIVEN):
        _reject(name, out=out, initial=initial, where=where)
        t, axis = F.as_tensor(a), _axis(axis)
        if axis == ():
            return t
        return fn(t, () if axis is None else axis, bool(keepdims))

    handler.__name__ = f"_{name}"
    return handler


def _spread(name: str):
    fn = F.var if name == "var" else F.std

    def handler(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_NOT_GIVEN,
                mean=_NOT_GIVEN, correction=_NOT_GIVEN):
        _reject(name, out=out, where=where, mean=mean)
        if correction is not _NOT_GIVEN and ddof != 0:
            raise ValueError(f"numpy.{name}: ddof and correction can't be provided simultaneously.")
        correction = ddof if correction is _NOT_GIVEN else correction
        t = F.as_tensor(a)
        dtype = _dtype_arg(dtype, t)
        t = F.to(t, dtype) if dtype is not None else _float_for_mean(t)
        return fn(t, _axis(axis), keepdim=bool(keepdims), correction=correction)

    handler.__name__ = f"_{name}"
    return handler


def _dot(a, b, out=None):
    _reject("dot", out=out)
    if np.ndim(a) == 0 or np.ndim(b) == 0:  # numpy: dot with a scalar is multiplication
        return F.mul(a, b)
    x, y = F.numpy_promoted(a, b)
    if x.ndim >= 2 and y.ndim >= 3:  # the one case where numpy's dot is not matmul
        raise _unsupported("numpy.dot of a >=2-D and a >=3-D array", " (use numpy.matmul or tensordot semantics)")
    return F.matmul(x, y)


def _where(condition, x=_NOT_GIVEN, y=_NOT_GIVEN):
    if x is _NOT_GIVEN and y is _NOT_GIVEN:
        return _nonzero(condition)
    if x is _NOT_GIVEN or y is _NOT_GIVEN:
        raise ValueError("either both or neither of x and y should be given")
    if is_numpy_face(condition) or is_numpy_face(x) or is_numpy_face(y):  # numpy's promotion of x and y
        from .numpy_surface.face import cast_to, result_dtype
        dtype = result_dtype(x, y)
        x, y = cast_to(x, dtype), cast_to(y, dtype)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        x = F.as_tensor(x)  # only the condition was a tensor
    return F.where(condition, x, y)


def _nonzero(a):
    return tuple(Tensor._wrap(i.astype(np.int64)) for i in np.nonzero(F.as_tensor(a)._data))


def _clip(a, a_min=_NOT_GIVEN, a_max=_NOT_GIVEN, out=None, *, min=_NOT_GIVEN, max=_NOT_GIVEN, **kwargs):
    _reject("clip", out=out, **kwargs)
    lo = min if a_min is _NOT_GIVEN else a_min
    hi = max if a_max is _NOT_GIVEN else a_max
    lo, hi = (None if v is _NOT_GIVEN or v is None else v if F._is_number(v) else F.as_tensor(v) for v in (lo, hi))
    if lo is None and hi is None:
        return F.as_tensor(a)  # numpy 2.1+: clip with no bounds is the identity
    if is_numpy_face(a) or is_numpy_face(lo) or is_numpy_face(hi):  # numpy's promotion (int array, float bound)
        from .numpy_surface.face import cast_to, result_dtype
        dtype = result_dtype(a, lo, hi)
        a, lo, hi = cast_to(a, dtype), cast_to(lo, dtype), cast_to(hi, dtype)
    return F.clamp(a, lo, hi)


def _reshape(a, shape=_NOT_GIVEN, order="C", *, newshape=_NOT_GIVEN, copy=None):
    if order != "C":
        raise _unsupported(f"numpy.reshape with order={order!r}")
    shape = newshape if shape is _NOT_GIVEN else shape
    if shape is _NOT_GIVEN:
        raise TypeError("reshape() missing required argument 'shape'")
    return F.reshape(a, (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape))


def _ravel(a, order="C"):
    return _reshape(a, -1, order)


def _transpose(a, axes=None):
    t = F.as_tensor(a)
    axes = tuple(reversed(range(t.ndim))) if axes is None else tuple(axes)
    return F.permute(t, axes) if t.ndim else t


def _swapaxes(a, axis1, axis2):
    return F.transpose(a, axis1, axis2)


def _expand_dims(a, axis):
    t = F.as_tensor(a)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    ndim = t.ndim + len(axes)
    norm = sorted(F._check_dim(int(d), ndim, "expand_dims") for d in axes)
    if len(set(norm)) != len(norm):
        raise ValueError("repeated axis")
    for d in norm:  # ascending: each insertion lands where the final shape wants it
        t = F.unsqueeze(t, d)
    return t


def _squeeze(a, axis=None):
    t = F.as_tensor(a)
    if axis is None:
        return F.squeeze(t)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(F._check_dim(int(d), t.ndim, "squeeze") for d in axes)
    if any(t.shape[d] != 1 for d in axes):  # numpy refuses; torch would silently skip
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return F.squeeze(t, axes) if axes else t


def _sequence_items(arrays, name: str) -> list[Tensor]:
    """The elements of the sequence given to numpy.concatenate / numpy.stack, as tensors (each stays
    in the graph).  Next to a numpy-face value, numbers and lists become arrays as numpy makes them
    (``[1.0]`` is float64), not as PyTorch's default dtype would."""
    if isinstance(arrays, Tensor):
        items = list(arrays)   # numpy iterates an array over its first axis
    else:
        try:
            items = list(arrays)
        except TypeError:
            raise TypeError(f"numpy.{name}: expected a sequence of arrays, got {type(arrays).__name__}") from None
    if not items:
        raise ValueError(f"numpy.{name}: need at least one array to {name}")
    face = any(is_numpy_face(x) for x in items)
    return [x if isinstance(x, Tensor) else F.as_tensor(np.asarray(x) if face else x) for x in items]


def _concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    _reject("concatenate", out=out)
    ts = _sequence_items(arrays, "concatenate")
    if axis is not None and any(t.ndim == 0 for t in ts):
        raise ValueError("numpy.concatenate: zero-dimensional arrays cannot be concatenated; "
                         "use numpy.stack to join scalars into an array")
    if axis is None:
        ts, axis = [F.reshape(x, (-1,)) for x in ts], 0
    result = F.cat(ts, axis)
    return result if dtype is None else F.to(result, _dtype_arg(dtype, result))


def _stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    _reject("stack", out=out)
    items = _sequence_items(arrays, "stack")
    if len({tuple(t.shape) for t in items}) > 1:
        raise ValueError(f"numpy.stack: all input arrays must have the same shape, got "
                         f"{[tuple(t.shape) for t in items]}; numpy.concatenate joins arrays of different lengths")
    result = F.stack(items, axis)
    return result if dtype is None else F.to(result, _dtype_arg(dtype, result))


def _broadcast_to(array, shape, subok=False):
    return F.broadcast_to(F.as_tensor(array), (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape))


def _outer(a, b, out=None):
    _reject("outer", out=out)
    return F.outer(F.reshape(a, (-1,)), F.reshape(b, (-1,)))


def _copy(a, order="K", subok=False):
    return F.clone(a)


def _shape(a):
    return tuple(F.as_tensor(a).shape)


def _ndim(a):
    return F.as_tensor(a).ndim


def _size(a, axis=None):
    t = F.as_tensor(a)
    return t.numel() if axis is None else t.shape[axis]


def _constant_like(fill):
    # the result depends on the input's shape and dtype only, so it is a fresh leaf
    def handler(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
        t = F.as_tensor(a)
        d = t._data.dtype if dtype is None else np.dtype(dtype) if is_numpy_face(t) else _dt.to_dtype(dtype).np
        return _same_face(Tensor._wrap(np.full(t.shape if shape is None else shape, fill, dtype=d)), t)

    return handler


def _same_face(result: Tensor, like) -> Tensor:
    """``result`` (made from data, not by an op) on the face of ``like``: np.zeros_like of a numpy-face
    value promotes as numpy does afterwards."""
    if is_numpy_face(like):
        from .numpy_surface.face import make_numpy_face
        make_numpy_face(result)
    return result


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return _constant_like(fill_value)(a, dtype, order, subok, shape)


def _data(x):
    return x._data if isinstance(x, Tensor) else x


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return builtins.bool(np.allclose(_data(a), _data(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return Tensor._wrap(np.asarray(np.isclose(_data(a), _data(b), rtol=rtol, atol=atol, equal_nan=equal_nan)))


def _array_equal(a1, a2, equal_nan=False):
    return builtins.bool(np.array_equal(_data(a1), _data(a2), equal_nan=equal_nan))


_FUNCTIONS = {
    np.sum: _sum, np.mean: _mean, np.prod: _prod,
    np.max: _extremum("max"), np.amax: _extremum("max"), np.min: _extremum("min"), np.amin: _extremum("min"),
    np.var: _spread("var"), np.std: _spread("std"), np.dot: _dot, np.where: _where, np.nonzero: _nonzero,
    np.clip: _clip, np.reshape: _reshape, np.ravel: _ravel, np.transpose: _transpose, np.swapaxes: _swapaxes,
    np.expand_dims: _expand_dims, np.squeeze: _squeeze, np.concatenate: _concatenate, np.stack: _stack,
    np.broadcast_to: _broadcast_to, np.outer: _outer, np.copy: _copy,
    np.shape: _shape, np.ndim: _ndim, np.size: _size,
    np.zeros_like: _constant_like(0), np.ones_like: _constant_like(1), np.full_like: _full_like,
    np.allclose: _allclose, np.isclose: _isclose, np.array_equal: _array_equal,
}


def _registering_in(table: dict):
    """A decorator factory: ``@factory(*keys)`` puts the decorated handler in ``table`` under each key."""
    def factory(*keys):
        def register(handler):
            for key in keys:
                table[key] = handler
            return handler
        return register
    return factory


def numpy_functions(*funcs):
    """Decorator: ``handler`` runs the numpy functions ``funcs`` on tensors (numpy's signature).

    The handlers of the numpy surface live in :mod:`symgrad.ops.numpy_surface`, one module per family."""
    return _registering_in(_FUNCTIONS)(*funcs)


# Registrations of ufuncs from optional modules (scipy.special), run when an unknown ufunc first arrives,
# so that importing symgrad does not import them.
_LATE_UFUNCS: list = []


def late_ufuncs(register):
    """Decorator: ``register()`` registers ufuncs of an optional module; run on the first unknown ufunc."""
    _LATE_UFUNCS.append(register)
    return register


def numpy_ufuncs(*ufuncs):
    """Decorator: ``handler`` runs the ufuncs (or scipy.special ufuncs) ``ufuncs`` on tensors."""
    return _registering_in(_UFUNCS)(*ufuncs)


# (ufunc, method name) -> handler of ``ufunc.method(*inputs, **kwargs)`` on tensors, e.g. (np.add, "at").
_UFUNC_METHODS: dict = {}


def numpy_ufunc_methods(*pairs):
    """Decorator: ``handler`` runs the ufunc methods ``(ufunc, "reduce")``... on tensors."""
    return _registering_in(_UFUNC_METHODS)(*pairs)


def numpy_ufunc_method(ufunc, method: str):
    """Decorator: ``handler`` runs ``ufunc.method(...)`` (``np.add.at``, ``np.maximum.reduce``) on tensors."""
    return numpy_ufunc_methods((ufunc, method))


def _ufunc_method_names() -> str:
    return ", ".join(sorted(f"numpy.{u.__name__}.{m}" for u, m in _UFUNC_METHODS))


def array_function(self, func, types, args, kwargs):
    """``Tensor.__array_function__``: run a numpy function as the matching symgrad op(s).

    >>> import numpy as np, symgrad
    >>> t = symgrad.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> np.mean(t, axis=0)
    tensor([2., 3.], grad_fn=<MeanBackward1>)
    """
    if not all(issubclass(t, (Tensor, np.ndarray)) for t in types):
        return NotImplemented
    handler = _FUNCTIONS.get(func)
    if handler is None:
        raise _unsupported(_numpy_name(func), suggest=True)
    return handler(*args, **kwargs)


def supported_ufuncs() -> list[str]:
    """Names of the numpy ufuncs that run on tensors.

    >>> "tanh" in supported_ufuncs()
    True
    """
    return sorted({u.__name__ for u in _UFUNCS})


def supported_functions() -> list[str]:
    """Names of the numpy functions that run on tensors.

    >>> "mean" in supported_functions()
    True
    """
    return sorted({f.__name__ for f in _FUNCTIONS})


def install(cls=Tensor) -> None:
    """Put the two protocol methods on ``cls`` (done by ``symgrad.ops.methods.attach``)."""
    from . import numpy_surface  # noqa: F401 - registers the handlers of each family
    cls.__array_ufunc__ = array_ufunc
    cls.__array_function__ = array_function
    cls.__array_namespace__ = array_namespace


def array_namespace(self, *, api_version=None):
    """``Tensor.__array_namespace__``: the array API namespace of tensors
    (:mod:`symgrad.ops.numpy_surface.array_api`), numpy's functions on tensors."""
    from .numpy_surface import array_api
    return array_api.namespace_of(self, api_version)
