"""The numpy face: values traced for a function that was given numpy arrays behave as numpy arrays.

A function handed to ``symgrad.value_and_grad``, ``symgrad.grad`` or ``symgrad.compile`` and called
with ndarrays was written for numpy, so its traced values follow numpy: method signatures and
defaults (``x.var()`` is ``ddof=0``, ``x.max(axis=1, keepdims=True)``, ``x.size`` is an int,
``x.transpose(0, 2, 1)``, ``x.astype(float)``), and numpy's type promotion (NEP 50: an int array
times ``0.5`` is float64, ``np.mean`` of bools is float64).  Tensors the user makes
(``symgrad.tensor``) keep PyTorch's semantics.

The face is a subclass, :class:`NumpyFaceTensor`, rather than a flag tested in every method: the
PyTorch-face hot path stays exactly as it was (no extra test per op), and Python's operator rules
give the subclass's reflected operators priority, so ``torch_face + numpy_face`` follows numpy.
Only the tracer makes such values (placeholders of ndarray arguments, and every op result with a
numpy-face input), so they never appear in plain eager code.  Methods delegate to the numpy
function (``x.var(...)`` is ``np.var(x, ...)`` through ``__array_function__``): every numpy
function the surface supports works as a method too, with numpy's own argument handling.  A call with
PyTorch's keywords (``dim=``, ``keepdim=``, ``unbiased=``), which numpy's methods do not take, runs the
PyTorch method instead, so PyTorch-style code called with arrays keeps working.  Library code must call
``symgrad.ops.functional`` functions rather than methods on values it did not create: on a numpy-face
value, ``x.max(1)`` is numpy's (values only), not PyTorch's ``(values, indices)``.
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from ... import dtypes as _dt
from ...tensor import Tensor
from .. import functional as F
from ..numpy_dispatch import numpy_functions

__all__ = ["NumpyFaceTensor", "make_numpy_face", "promote_operands", "result_dtype", "cast_to"]


# Keywords only PyTorch's methods take: code written for PyTorch (``x.sum(dim=1, keepdim=True)``) and
# called with numpy arrays keeps working, with PyTorch's meaning (``x.std(dim=0)`` is unbiased).
_TORCH_KEYWORDS = frozenset({"dim", "keepdim", "unbiased"})


def _torch_style(args, kwargs) -> bool:
    # a bool second argument is PyTorch's keepdim/unbiased (numpy has dtype or out there, never a bool)
    return not _TORCH_KEYWORDS.isdisjoint(kwargs) or (len(args) > 1 and isinstance(args[1], bool))


def _delegate(np_func, doc_name: str):
    def method(self, *args, **kwargs):
        if _torch_style(args, kwargs) and hasattr(Tensor, doc_name):
            return getattr(Tensor, doc_name)(self, *args, **kwargs)
        return np_func(self, *args, **kwargs)

    method.__name__ = doc_name
    method.__doc__ = (f"numpy's ``ndarray.{doc_name}``: ``numpy.{np_func.__name__}(self, ...)`` (PyTorch's "
                      f"method when called with ``dim=``/``keepdim=``/``unbiased=``).")
    return method


class _NumpySize(int):
    """numpy's ``x.size``, an int, that PyTorch-style code may still call: ``x.size()``, ``x.size(0)``."""

    def __call__(self, dim=None):
        from ...tensor import Size
        return Size(self.shape) if dim is None else self.shape[dim]


def _operator(ufunc, fallback, reflected: bool = False):
    """A binary operator with numpy's promotion: operands are cast to the loop numpy would run,
    then the symgrad op computes it (``fallback``), so operators work even for ufuncs the numpy
    surface does not route (``%``) and the result dtype is numpy's."""
    def method(self, other):
        if not isinstance(other, (Tensor, np.ndarray, np.generic, numbers.Number, list, tuple)):
            return NotImplemented
        operands = (other, self) if reflected else (self, other)
        cast, out_dtype = promote_operands(ufunc, operands)
        result = fallback(*cast)
        return _cast_result(result, out_dtype)

    method.__name__ = f"__{'r' if reflected else ''}{ufunc.__name__}__"
    return method


class NumpyFaceTensor(Tensor):
    """A traced value with numpy's methods and promotion (see the module docstring)."""

    _numpy_face = True

    # --- attributes ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """numpy's ``size``: the number of elements, an int (callable as PyTorch's ``size()`` too)."""
        size = _NumpySize(self._data.size)
        size.shape = self._data.shape
        return size

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape)

    @property
    def itemsize(self) -> int:
        return int(self._data.itemsize)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    # --- methods: numpy's signatures, by the numpy function -------------------------------------
    sum = _delegate(np.sum, "sum")
    mean = _delegate(np.mean, "mean")
    prod = _delegate(np.prod, "prod")
    max = _delegate(np.max, "max")
    min = _delegate(np.min, "min")
    var = _delegate(np.var, "var")
    std = _delegate(np.std, "std")
    argmax = _delegate(np.argmax, "argmax")
    argmin = _delegate(np.argmin, "argmin")
    cumsum = _delegate(np.cumsum, "cumsum")
    cumprod = _delegate(np.cumprod, "cumprod")
    ptp = _delegate(np.ptp, "ptp")     # gone from ndarray in numpy 2, but numpy 1 code calls it
    clip = _delegate(np.clip, "clip")
    round = _delegate(np.round, "round")
    all = _delegate(np.all, "all")
    any = _delegate(np.any, "any")
    dot = _delegate(np.dot, "dot")
    squeeze = _delegate(np.squeeze, "squeeze")   # squeeze(dim=0): PyTorch's
    swapaxes = _delegate(np.swapaxes, "swapaxes")
    repeat = _delegate(np.repeat, "repeat")   # numpy's repeat, not PyTorch's (which is np.tile)
    diagonal = _delegate(np.diagonal, "diagonal")
    trace = _delegate(np.trace, "trace")
    nonzero = _delegate(np.nonzero, "nonzero")
    take = _delegate(np.take, "take")

    def transpose(self, *axes):
        """``x.transpose()``, ``x.transpose(0, 2, 1)`` or ``x.transpose((0, 2, 1))``; two axes of an array
        that is not 2-D (an error in numpy) swap them, as PyTorch's ``transpose(dim0, dim1)``."""
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        if axes is not None and len(axes) == 2 and self.ndim != 2:
            return F.transpose(self, *axes)
        return np.transpose(self, axes if axes else None)

    def reshape(self, *shape, order="C"):
        """``x.reshape(2, -1)`` or ``x.reshape((2, -1))``."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return np.reshape(self, tuple(shape), order=order)

    def ravel(self, order="C"):
        return np.ravel(self, order)

    def flatten(self, order="C", *args, **kwargs):
        if not isinstance(order, str) or args or kwargs:   # PyTorch's flatten(start_dim, end_dim)
            return F.flatten(self, *(() if isinstance(order, str) else (order,)), *args, **kwargs)
        return np.ravel(self, order)

    def copy(self, order="C"):
        return F.clone(self)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        """numpy's ``astype``: ``float`` means float64 here, as in numpy (PyTorch's default dtype is not used)."""
        target = dtype if isinstance(dtype, _dt.dtype) else _dt.from_numpy_dtype(np.dtype(dtype))
        return F.to(self, target)

    # --- operators: numpy's promotion -----------------------------------------------------------
    __add__ = _operator(np.add, F.add)
    __radd__ = _operator(np.add, F.add, reflected=True)
    __sub__ = _operator(np.subtract, F.sub)
    __rsub__ = _operator(np.subtract, F.sub, reflected=True)
    __mul__ = _operator(np.multiply, F.mul)
    __rmul__ = _operator(np.multiply, F.mul, reflected=True)
    __truediv__ = _operator(np.divide, F.div)
    __rtruediv__ = _operator(np.divide, F.div, reflected=True)
    __floordiv__ = _operator(np.floor_divide, F.floor_divide)
    __rfloordiv__ = _operator(np.floor_divide, F.floor_divide, reflected=True)
    __mod__ = _operator(np.remainder, F.remainder)
    __rmod__ = _operator(np.remainder, F.remainder, reflected=True)
    __pow__ = _operator(np.power, F.pow)
    __rpow__ = _operator(np.power, F.pow, reflected=True)
    __matmul__ = _operator(np.matmul, F.matmul)
    __rmatmul__ = _operator(np.matmul, F.matmul, reflected=True)
    __gt__ = _operator(np.greater, F.gt)
    __lt__ = _operator(np.less, F.lt)
    __ge__ = _operator(np.greater_equal, F.ge)
    __le__ = _operator(np.less_equal, F.le)
    __eq__ = _operator(np.equal, F.eq)
    __ne__ = _operator(np.not_equal, F.ne)
    __hash__ = Tensor.__hash__


def make_numpy_face(t: Tensor) -> Tensor:
    """Give ``t`` the numpy face (in place: the tracer has already bound this very object)."""
    if t.__class__ is Tensor:
        t.__class__ = NumpyFaceTensor
    return t


def _weak_or_dtype(x):
    """What ``ufunc.resolve_dtypes`` takes for an operand: a dtype, or ``float``/``int`` for a Python
    number (NEP 50: Python numbers are "weak" and take the array's precision)."""
    if isinstance(x, Tensor):
        return x._data.dtype
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, int):
        return int
    if isinstance(x, float):
        return float
    if isinstance(x, (list, tuple)) and _holds_tensor(x):
        raise TypeError("a nested sequence of tensors: left to the op's own promotion")
    return np.asarray(x).dtype


def _holds_tensor(seq) -> bool:
    return any(isinstance(e, Tensor) or (isinstance(e, (list, tuple)) and _holds_tensor(e)) for e in seq)


def promote_operands(ufunc, operands) -> tuple[tuple, np.dtype | None]:
    """``operands`` cast to the dtypes of the loop numpy would run ``ufunc`` with, and the result
    dtype numpy gives; unchanged (and ``None``) where numpy's resolution does not apply."""
    try:
        loop = ufunc.resolve_dtypes(tuple(_weak_or_dtype(x) for x in operands) + (None,) * ufunc.nout)
    except (TypeError, ValueError, AttributeError):
        return tuple(operands), None
    cast = []
    for x, want in zip(operands, loop[:ufunc.nin]):
        if isinstance(x, Tensor) and x._data.dtype != want:
            x = F.to(x, _dt.from_numpy_dtype(want))
        elif isinstance(x, (list, tuple)) or (isinstance(x, (np.ndarray, np.generic)) and x.dtype != want):
            x = np.asarray(x, dtype=want)   # a list as numpy reads it (float64), not as PyTorch's default
        cast.append(x)
    return tuple(cast), loop[ufunc.nin] if ufunc.nout == 1 else None


def result_dtype(*operands) -> np.dtype | None:
    """numpy's result dtype of combining ``operands`` (``np.where``, ``np.clip``): Python numbers weak."""
    try:
        return np.result_type(*[x._data.dtype if isinstance(x, Tensor) else
                                x if isinstance(x, (numbers.Number, np.ndarray, np.generic)) else
                                np.asarray(x).dtype for x in operands if x is not None])
    except (TypeError, ValueError):
        return None


def cast_to(x, dtype):
    """A tensor or array operand in ``dtype`` (numbers and None pass through)."""
    if dtype is None:
        return x
    if isinstance(x, Tensor):
        return x if x._data.dtype == dtype else F.to(x, _dt.from_numpy_dtype(dtype))
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        return np.asarray(x, dtype=dtype)
    return x


def _cast_result(result, out_dtype):
    if out_dtype is not None and isinstance(result, Tensor) and result._data.dtype != out_dtype:
        return F.to(result, _dt.from_numpy_dtype(out_dtype))
    return result



# --- numpy.all / numpy.any: the truth reductions behind x.all() / x.any() -------------------------
# No gradient (a bool result), but recorded from ops the graph has (a count of nonzero elements
# compared with the number reduced), so a compiled function computes them from its inputs.

def _truth_reduction(name: str):
    def handler(a, axis=None, out=None, keepdims=False, *, where=None):
        if out is not None or where is not None:
            raise TypeError(f"symgrad: numpy.{name} with {'out' if out is not None else 'where'}= is not "
                            "supported on symgrad tensors")
        t = F.as_tensor(a)
        if axis is None:
            axes = tuple(range(t.ndim))
        else:
            axes = tuple(F._check_dim(int(d), builtins.max(t.ndim, 1), name)
                         for d in (axis if isinstance(axis, (tuple, list)) else (axis,)))
        nonzero = F.to(F.ne(t, 0), _dt.int64)
        counts = F.sum(nonzero, axes, bool(keepdims)) if axes else nonzero
        if name == "any":
            return F.gt(counts, 0)
        reduced = 1
        for d in axes:
            reduced *= t.shape[d]
        return F.eq(counts, reduced)

    handler.__name__ = f"_{name}"
    return handler


numpy_functions(np.all)(_truth_reduction("all"))
numpy_functions(np.any)(_truth_reduction("any"))
