"""Shape, assembly and indexing functions: flip, roll, tile, pad, stacks, splits, take, ...

Each handler takes numpy's signature and runs the symgrad function of the same meaning
(:mod:`symgrad.ops.functional`), so the values match numpy and the graph is recorded.
"""

from __future__ import annotations

import numpy as np

from ...tensor import Tensor
from .. import functional as F
from ..numpy_dispatch import _NOT_GIVEN, _reject, numpy_functions, numpy_ufunc_method


def _int_axis(axis, ndim: int, name: str) -> int:
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"numpy.{name}: axis must be an integer, got {axis!r}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise np.exceptions.AxisError(f"numpy.{name}: axis {axis} is out of bounds for array of dimension {ndim}")
    return int(axis) % max(ndim, 1)


def _sequence(arrays, name: str) -> list:
    if isinstance(arrays, Tensor) and arrays.ndim >= 1:
        return list(F.unbind(arrays, 0))  # numpy iterates an array: its rows are the sequence
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(f"numpy.{name}: arrays to stack must be passed as a list or tuple of arrays "
                        f"(got {type(arrays).__name__})")
    return [F.as_tensor(a) for a in arrays]


@numpy_functions(np.flip)
def _flip(m, axis=None):
    t = F.as_tensor(m)
    if axis is None:
        return F.flip(t, tuple(range(t.ndim)))
    return F.flip(t, axis)


@numpy_functions(np.fliplr)
def _fliplr(m):
    t = F.as_tensor(m)
    if t.ndim < 2:
        raise ValueError("numpy.fliplr: Input must be >= 2-d.")
    return F.flip(t, (1,))


@numpy_functions(np.flipud)
def _flipud(m):
    t = F.as_tensor(m)
    if t.ndim < 1:
        raise ValueError("numpy.flipud: Input must be >= 1-d.")
    return F.flip(t, (0,))


@numpy_functions(np.roll)
def _roll(a, shift, axis=None):
    t = F.as_tensor(a)
    if axis is None:
        if not isinstance(shift, (int, np.integer)):
            shift = int(np.sum(shift))  # numpy: several shifts of the flattened array add up
        return F.roll(t, int(shift))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes, shifts = np.broadcast_arrays(np.asarray(axes), np.asarray(shifts))  # numpy broadcasts the two
    total: dict = {}
    for ax, s in zip(axes.reshape(-1).tolist(), shifts.reshape(-1).tolist()):
        ax = _int_axis(ax, t.ndim, "roll")
        total[ax] = total.get(ax, 0) + s
    return F.roll(t, tuple(total.values()), tuple(total)) if total else t


@numpy_functions(np.tile)
def _tile(A, reps):
    return F.tile(A, reps)


@numpy_functions(np.repeat)
def _repeat(a, repeats, axis=None):
    t = F.as_tensor(a)
    counts = F._static_values(repeats, "numpy.repeat's repeats")
    if axis is not None:
        axis = _int_axis(axis, t.ndim, "repeat")
    n = t.numel() if axis is None else t.shape[axis]
    if counts.ndim > 1 or (counts.ndim == 1 and counts.size not in (1, n)):
        raise ValueError(f"numpy.repeat: repeats of shape {counts.shape} do not fit {n} elements")
    return F.repeat_interleave(t, counts, axis)


@numpy_functions(np.pad)
def _pad(array, pad_width, mode="constant", **kwargs):
    if callable(mode):
        raise TypeError("numpy.pad with a function as mode is not supported on symgrad tensors")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"}, "symmetric": {"reflect_type"},
               "edge": set(), "wrap": set()}
    for key in kwargs:
        if key not in allowed.get(mode, {key}):
            raise ValueError(f"numpy.pad: unsupported keyword arguments for mode {mode!r}: {key!r}")
    return F._numpy_pad(array, pad_width, mode, **kwargs)


def _triangle(m, k, lower: bool):
    t = F.as_tensor(m)
    name = "tril" if lower else "triu"
    if t.ndim < 1:
        raise ValueError(f"numpy.{name}: input must be at least 1-d")
    return F._triangle(t, int(k), lower, f"numpy.{name}")


@numpy_functions(np.tril)
def _tril(m, k=0):
    return _triangle(m, k, True)


@numpy_functions(np.triu)
def _triu(m, k=0):
    return _triangle(m, k, False)


@numpy_functions(np.diag)
def _diag(v, k=0):
    t = F.as_tensor(v)
    if t.ndim not in (1, 2):
        raise ValueError("numpy.diag: Input must be 1- or 2-d.")
    return F.diag(t, int(k))


@numpy_functions(np.diagonal)
def _diagonal(a, offset=0, axis1=0, axis2=1):
    t = F.as_tensor(a)
    if t.ndim < 2:
        raise ValueError("numpy.diagonal: diag requires an array of at least two dimensions")
    return F.diagonal(t, int(offset), _int_axis(axis1, t.ndim, "diagonal"), _int_axis(axis2, t.ndim, "diagonal"))


@numpy_functions(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _reject("trace", out=out)
    d = _diagonal(a, offset, axis1, axis2)
    result = F.sum(d, -1) if d.ndim > 1 else F.sum(d)
    return result if dtype is None else F.to(result, dtype)


def _lift(fn):
    def handler(*arys):
        out = [fn(F.as_tensor(a)) for a in arys]
        return out[0] if len(out) == 1 else tuple(out)
    return handler


numpy_functions(np.atleast_1d)(_lift(F.atleast_1d))
numpy_functions(np.atleast_2d)(_lift(F.atleast_2d))
numpy_functions(np.atleast_3d)(_lift(F.atleast_3d))


def _stacker(name: str, fn):
    def handler(tup, *, dtype=None, casting="same_kind"):
        result = fn(_sequence(tup, name))
        return result if dtype is None else F.to(result, dtype)
    handler.__name__ = f"_{name}"
    return handler


numpy_functions(np.vstack)(_stacker("vstack", F.vstack))
if hasattr(np, "row_stack"):   # the old name of vstack (deprecated in numpy 2)
    numpy_functions(np.row_stack)(_stacker("vstack", F.vstack))
numpy_functions(np.hstack)(_stacker("hstack", F.hstack))
numpy_functions(np.dstack)(_stacker("dstack", F.dstack))


@numpy_functions(np.column_stack)
def _column_stack(tup):
    return F.column_stack(_sequence(tup, "column_stack"))


def _split_handler(name: str, fixed_axis=None, min_ndim: int = 1, equal: bool = True):
    def handler(ary, indices_or_sections, axis=0):
        t = F.as_tensor(ary)
        if t.ndim < min_ndim:
            raise ValueError(f"numpy.{name} only works on arrays of {min_ndim} or more dimensions")
        ax = fixed_axis(t) if fixed_axis is not None else _int_axis(axis, t.ndim, name)
        if isinstance(indices_or_sections, Tensor):
            indices_or_sections = F._static_values(indices_or_sections, f"numpy.{name}'s indices").tolist()
        if isinstance(indices_or_sections, (int, np.integer)):
            k = int(indices_or_sections)
            if k <= 0:
                raise ValueError(f"numpy.{name}: number sections must be larger than 0.")
            if equal and t.shape[ax] % k:
                raise ValueError(f"numpy.{name}: array split does not result in an equal division")
        return list(F.tensor_split(t, indices_or_sections, ax))
    handler.__name__ = f"_{name}"
    return handler


numpy_functions(np.split)(_split_handler("split"))
numpy_functions(np.array_split)(_split_handler("array_split", equal=False))
numpy_functions(np.hsplit)(_split_handler("hsplit", fixed_axis=lambda t: 1 if t.ndim > 1 else 0))
numpy_functions(np.vsplit)(_split_handler("vsplit", fixed_axis=lambda t: 0, min_ndim=2))
numpy_functions(np.dsplit)(_split_handler("dsplit", fixed_axis=lambda t: 2, min_ndim=3))


def _index_array(indices, name: str):
    """Integer indices as a numpy array or an integer tensor (a traced tensor stays a graph value)."""
    if isinstance(indices, Tensor):
        if indices._data.dtype.kind not in "iu":
            raise TypeError(f"numpy.{name}: indices must be integers, got {indices.dtype}")
        return indices
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu" and idx.size:
        raise TypeError(f"numpy.{name}: indices must be integers, got {idx.dtype}")
    return idx.astype(np.intp, copy=False)


@numpy_functions(np.take)
def _take(a, indices, axis=None, out=None, mode="raise"):
    _reject("take", out=out)
    t = F.as_tensor(a)
    idx = _index_array(indices, "take")
    if mode != "raise":
        if mode not in ("wrap", "clip"):
            raise ValueError(f"numpy.take: clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
        if isinstance(idx, Tensor):
            raise TypeError(f"numpy.take with mode={mode!r} and tensor indices is not supported on symgrad "
                            f"tensors (pass the indices as a numpy array)")
        n = t.numel() if axis is None else t.shape[_int_axis(axis, t.ndim, "take")]
        idx = idx % n if mode == "wrap" else np.clip(idx, 0, n - 1)
    if axis is None:
        t, ax = F.reshape(t, (-1,)), 0
    else:
        ax = _int_axis(axis, t.ndim, "take")
    if not isinstance(idx, Tensor) and idx.ndim == 0:
        return F.select(t, ax, int(idx))
    return F._call("index.Tensor", t, (slice(None),) * ax + (idx,) if ax else idx)


@numpy_functions(np.take_along_axis)
def _take_along_axis(arr, indices, axis=_NOT_GIVEN):
    if axis is _NOT_GIVEN:
        axis = -1
    t = F.as_tensor(arr)
    idx = _index_array(indices, "take_along_axis")
    if axis is None:
        if np.ndim(idx._data if isinstance(idx, Tensor) else idx) != 1:
            raise ValueError("numpy.take_along_axis: when axis=None, `indices` must have a single dimension.")
        return F.take_along_dim(t, idx, None)
    ndim_idx = idx.ndim
    if ndim_idx != t.ndim:
        raise ValueError("numpy.take_along_axis: `indices` and `arr` must have the same number of dimensions")
    return F.take_along_dim(t, idx, _int_axis(axis, t.ndim, "take_along_axis"))


@numpy_functions(np.moveaxis)
def _moveaxis(a, source, destination):
    t = F.as_tensor(a)
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise ValueError("numpy.moveaxis: `source` and `destination` arguments must have the same number of "
                         "elements")
    return F.movedim(t, tuple(_int_axis(s, t.ndim, "moveaxis") for s in src),
                     tuple(_int_axis(d, t.ndim, "moveaxis") for d in dst))


def _ufunc_at(name: str, negate: bool):
    def handler(a, indices, b=None):
        if b is None:
            raise TypeError(f"numpy.{name}.at: second operand needed for ufunc")
        if not isinstance(a, Tensor):
            raise TypeError(f"symgrad: numpy.{name}.at into a numpy array with tensor values can't record the "
                            f"gradient (the array can't hold the graph); accumulate into a tensor instead, "
                            f"e.g. out = symgrad.zeros(shape, dtype=...); numpy.{name}.at(out, indices, values)")
        values = F.neg(b) if negate and isinstance(b, Tensor) else (np.negative(b) if negate else b)
        key = F._index_key(indices)  # numpy: a list is one index array, not a tuple of per-axis indices
        # repeated indices accumulate, as numpy's unbuffered ufunc.at does
        F.inplace(a, lambda old, v: F._call("index_put", old, key, F._operand(v), True), values,
                  name=f"numpy.{name}.at")
        return None
    handler.__name__ = f"_{name}_at"
    return handler


numpy_ufunc_method(np.add, "at")(_ufunc_at("add", False))
numpy_ufunc_method(np.subtract, "at")(_ufunc_at("subtract", True))


@numpy_functions(np.meshgrid)
def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if sparse:
        raise TypeError("numpy.meshgrid with sparse=True is not supported on symgrad tensors (use sparse=False)")
    if indexing not in ("xy", "ij"):
        raise ValueError("numpy.meshgrid: Valid values for `indexing` are 'xy' and 'ij'.")
    grids = F.meshgrid(*[F.reshape(F.as_tensor(x), (-1,)) for x in xi], indexing=indexing)
    # numpy returns writeable copies by default; symgrad's broadcast grids are read-only views
    return tuple(F.clone(g) for g in grids) if copy else grids


@numpy_functions(np.rot90)
def _rot90(m, k=1, axes=(0, 1)):
    t = F.as_tensor(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("numpy.rot90: len(axes) must be 2.")
    a0, a1 = (_int_axis(a, t.ndim, "rot90") for a in axes)
    if a0 == a1:
        raise ValueError("numpy.rot90: Axes must be different.")
    return F.rot90(t, k, (a0, a1))


@numpy_functions(np.append)
def _append(arr, values, axis=None):
    a, v = F.as_tensor(arr), F.as_tensor(values)
    if axis is None:
        return F.cat([F.reshape(a, (-1,)), F.reshape(v, (-1,))], 0)
    return F.cat([a, v], _int_axis(axis, a.ndim, "append"))


@numpy_functions(np.diagflat)
def _diagflat(v, k=0):
    return F.diag(F.reshape(F.as_tensor(v), (-1,)), int(k))


def _rearranged(t: Tensor, rearrange) -> Tensor:
    """``rearrange`` (a numpy function that only moves, drops or repeats entries) applied to ``t``: run on
    the array of positions it says which entry each output entry copies, and a gather does the rest
    (exact; the gradient scatter-adds, so repeated entries accumulate)."""
    source = rearrange(np.arange(t.numel()).reshape(tuple(t.shape)))
    return F._call("index.Tensor", F.reshape(t, (-1,)), source)


@numpy_functions(np.delete)
def _delete(arr, obj, axis=None):
    t = F.as_tensor(arr)
    obj = F._static_values(obj, "numpy.delete's obj") if isinstance(obj, Tensor) else obj
    return _rearranged(t, lambda positions: np.delete(positions, obj, axis))


@numpy_functions(np.resize)
def _resize(a, new_shape):
    t = F.as_tensor(a)
    if t.numel() == 0:
        raise ValueError("numpy.resize of an empty tensor is not supported on symgrad tensors (its result "
                         "is zeros, with no entry of the input)")
    return _rearranged(t, lambda positions: np.resize(positions, new_shape))


@numpy_functions(np.rollaxis)
def _rollaxis(a, axis, start=0):
    t = F.as_tensor(a)
    n = t.ndim
    axis = _int_axis(axis, n, "rollaxis")
    start = start + n if start < 0 else start  # numpy: a negative start counts from n, not n + 1
    if not 0 <= start <= n:
        raise np.exceptions.AxisError(f"numpy.rollaxis: start is out of bounds for an array of dimension {n}")
    if axis < start:
        start -= 1
    if axis == start:
        return t
    order = [d for d in range(n) if d != axis]
    order.insert(start, axis)
    return F.permute(t, tuple(order))


@numpy_functions(np.insert)
def _insert(arr, obj, values, axis=None):
    t = F.as_tensor(arr)
    v = F.as_tensor(values)
    if v.dtype is not t.dtype:
        v = F.to(v, t.dtype)  # numpy casts the inserted values to the array's dtype
    obj = F._static_values(obj, "numpy.insert's obj") if isinstance(obj, Tensor) else obj
    positions = np.arange(t.numel()).reshape(tuple(t.shape))
    # numpy's insert run twice on positions: once to place the array's entries (inserted spots -1) and once
    # to place the values' entries (the array's spots -1), with the values' broadcasting and moves
    from_array = np.insert(positions, obj, -1, axis)
    from_values = np.insert(np.full(tuple(t.shape), -1), obj, np.arange(v.numel()).reshape(tuple(v.shape)), axis)
    inserted = from_values >= 0
    kept = F._call("index.Tensor", F.reshape(t, (-1,)), np.maximum(from_array, 0))
    if v.numel() == 0 or not inserted.any():
        return kept
    new = F._call("index.Tensor", F.reshape(v, (-1,)), np.maximum(from_values, 0))
    return F.where(inserted, new, kept)
