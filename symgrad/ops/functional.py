"""The public op functions (``symgrad.exp``, ``symgrad.matmul``...) and their numpy forwards.

Each function picks the rule-table overload PyTorch would pick and hands the
arguments to :func:`registry.apply`.  Elementwise forwards come from the table
itself; the forwards registered here are for structural ops.

>>> import symgrad
>>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
>>> type(symgrad.exp(x).grad_fn).__name__
'ExpBackward0'
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import STATE
from ..rules.vocab import _exclusive_prod, _np_prod_backward_all, normalize_dims
from ..rules.vocab import inverse_permutation as _inverse_permutation
from ..tensor import Tensor
from . import registry
from .registry import apply, forward, get

_Number = (numbers.Number, np.generic)


def _is_number(x) -> bool:
    return isinstance(x, _Number) and not isinstance(x, np.ndarray)


_ops = registry._REGISTRY
_FAST_OPERANDS = frozenset({Tensor, float, int})


_apply_simple = registry._apply_simple


_fast: dict = {}  # op key -> generated fast call (registry.fast_call), for ops on the simple path


class _OpCell:
    """Holds the function that runs one op; the first call swaps in the generated fast call.

    The hottest public functions call ``CELL.fn(...)`` directly, one attribute load instead of
    a dictionary lookup and an extra Python frame per op.
    """

    __slots__ = ("key", "fn")

    def __init__(self, key: str) -> None:
        self.key = key
        self.fn = self._first

    def _first(self, *args):
        op = get(self.key)
        self.fn = registry.fast_call(op) if op.simple else (lambda *a: apply(op, a))
        return self.fn(*args)


_ADD, _SUB, _MUL, _DIV = (_OpCell(k) for k in ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor"))


def _call(key: str, *args):
    fn = _fast.get(key)
    if fn is not None:
        return fn(*args)
    op = _ops.get(key)
    if op is None:
        op = get(key)
    if op.simple:
        fn = _fast[key] = registry.fast_call(op)
        return fn(*args)
    return apply(op, args)


def as_tensor(x, dtype=None) -> Tensor:
    """``x`` as a Tensor (numbers and arrays are wrapped without recording anything)."""
    if isinstance(x, Tensor):
        return x if dtype is None or x.dtype is _dt.to_dtype(dtype) else to(x, dtype)
    t = Tensor(x, dtype=dtype)
    if registry._recorder is not None and isinstance(x, np.ndarray):
        registry._recorder.note_source(t, x)   # the array the tensor copies, watched by a compiled graph
    return t


def _operand(x):
    """Binary-op operand: Tensors and Python numbers pass through; arrays and lists become Tensors."""
    cls = x.__class__
    if cls is Tensor or cls is float or cls is int:
        return x
    if isinstance(x, Tensor) or _is_number(x):
        return x.item() if isinstance(x, np.generic) else x
    return as_tensor(x)


# --- arithmetic -----------------------------------------------------------------------------

def add(input, other) -> Tensor:
    """``input + other`` with broadcasting (AddBackward0)."""
    if input.__class__ is Tensor and other.__class__ in _FAST_OPERANDS:  # the common case, kept short
        return _ADD.fn(input, other)
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        a, b = b, a  # 3 + x records like x + 3, as in PyTorch
    return _call("add.Tensor", a, b)


def sub(input, other) -> Tensor:
    """``input - other`` (SubBackward0; ``3 - x`` is RsubBackward1)."""
    if input.__class__ is Tensor and other.__class__ in _FAST_OPERANDS:
        return _SUB.fn(input, other)
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        return _call("rsub.Scalar", b, a)
    return _call("sub.Tensor", a, b)


def rsub(input, other) -> Tensor:
    """``other - input``."""
    a, b = _operand(input), _operand(other)
    if isinstance(b, Tensor):
        return _call("rsub.Tensor", a, b)
    return _call("rsub.Scalar", a, b)


def mul(input, other) -> Tensor:
    """``input * other`` with broadcasting (MulBackward0)."""
    if input.__class__ is Tensor and other.__class__ in _FAST_OPERANDS:  # the common case, kept short
        return _MUL.fn(input, other)
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        a, b = b, a
    return _call("mul.Tensor", a, b)


def div(input, other) -> Tensor:
    """True division (DivBackward0); ``1 / x`` is ``reciprocal(x) * 1`` as in PyTorch."""
    if input.__class__ is Tensor and other.__class__ in _FAST_OPERANDS:
        return _DIV.fn(input, other)
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        return mul(reciprocal(b), a)
    return _call("div.Tensor", a, b)


true_divide = divide = div
multiply = mul
subtract = sub


def neg(input) -> Tensor:
    return _call("neg", _operand(input))


negative = neg


def reciprocal(input) -> Tensor:
    return _call("reciprocal", _operand(input))


def pow(input, exponent) -> Tensor:
    """``input ** exponent``: PowBackward0 (number exponent), 1 (tensor), 2 (number base)."""
    a, e = _operand(input), _operand(exponent)
    if not isinstance(a, Tensor):
        return _call("pow.Scalar", a, e)
    if isinstance(e, Tensor):
        return _call("pow.Tensor_Tensor", a, e)
    return _call("pow.Tensor_Scalar", a, e)


def square(input) -> Tensor:
    return pow(input, 2)


def _unary(name: str):
    cell = _OpCell(name)

    def fn(input) -> Tensor:
        return cell.fn(input if input.__class__ is Tensor else _operand(input))

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` (rule: derivatives.yaml entry ``{name}``)."
    return fn


exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
sin = _unary("sin")
cos = _unary("cos")
tanh = _unary("tanh")
sqrt = _unary("sqrt")


sigmoid = _unary("sigmoid")
relu = _unary("relu")
abs = _unary("abs")
absolute = abs
sign = _unary("sign")
expm1 = _unary("expm1")
log2 = _unary("log2")
exp2 = _unary("exp2")
rsqrt = _unary("rsqrt")
erf = _unary("erf")
sinh = _unary("sinh")
cosh = _unary("cosh")
tan = _unary("tan")
atan = arctan = _unary("atan")


@forward("sigmoid", dtype_rule="float")
def _sigmoid_fwd(self):
    # exp(-|x|) never overflows, unlike the table's 1/(1+exp(-x)) printed literally
    e = np.exp(-np.abs(self))
    return np.where(self >= 0, 1 / (1 + e), e / (1 + e))


def _bound(value, data: np.ndarray, upper: bool):
    if value is not None:
        return _operand(value)
    if data.dtype.kind in "iu":
        info = np.iinfo(data.dtype)
        return int(info.max if upper else info.min)
    return float("inf") if upper else float("-inf")


def clamp(input, min=None, max=None) -> Tensor:
    """Limit values to ``[min, max]`` (ClampBackward1; tensor bounds: ClampBackward0).

    The gradient passes at the bounds themselves, as in PyTorch.
    """
    t = as_tensor(input)
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    lo, hi = _bound(min, t._data, False), _bound(max, t._data, True)
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        return _call("clamp.Tensor", t, lo, hi)
    return _call("clamp", t, lo, hi)


clip = clamp


def clamp_min(input, min) -> Tensor:
    return _call("clamp_min", as_tensor(input), _operand(min))


def clamp_max(input, max) -> Tensor:
    return _call("clamp_max", as_tensor(input), _operand(max))


def maximum(input, other) -> Tensor:
    """Elementwise maximum; a tie sends half the gradient to each side (MaximumBackward0)."""
    return _call("maximum", as_tensor(input), _operand(other))


def minimum(input, other) -> Tensor:
    """Elementwise minimum; a tie sends half the gradient to each side (MinimumBackward0)."""
    return _call("minimum", as_tensor(input), _operand(other))


# --- comparisons and other non-differentiable elementwise ops ------------------------------

_SWAPPED = {"gt": "lt", "lt": "gt", "ge": "le", "le": "ge", "eq": "eq", "ne": "ne"}


def _compare(name: str, key: str):
    def fn(input, other) -> Tensor:
        a, b = _operand(input), _operand(other)
        if not isinstance(a, Tensor):  # 3 < x is x > 3
            if name in _SWAPPED:
                return _call(_SWAPPED[name] + ".Tensor", b, a)
            a = as_tensor(a)
        return _call(key, a, b)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}``: a bool tensor (not differentiable)."
    return fn


gt = greater = _compare("gt", "gt.Tensor")
lt = less = _compare("lt", "lt.Tensor")
ge = greater_equal = _compare("ge", "ge.Tensor")
le = less_equal = _compare("le", "le.Tensor")
eq = _compare("eq", "eq.Tensor")
ne = not_equal = _compare("ne", "ne.Tensor")
logical_and = _compare("logical_and", "logical_and")
logical_or = _compare("logical_or", "logical_or")


def logical_not(input) -> Tensor:
    return _call("logical_not", as_tensor(input))


def heaviside(input, values) -> Tensor:
    """Step function: 0 below zero, 1 above, ``values`` at zero (not differentiable)."""
    return _call("heaviside", as_tensor(input), _operand(values))


def _dividend_first(key: str, scalar_key: str | None, input, other) -> Tensor:
    """``key(input, other)`` with a number on either side (a number dividend becomes a 0-d tensor)."""
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        a = as_tensor(a)
        if isinstance(b, Tensor) and b.dtype.is_floating_point and not a.dtype.is_floating_point:
            a = to(a, b.dtype)
    if scalar_key is not None and not isinstance(b, Tensor):
        return _call(scalar_key, a, b)
    return _call(key, a, b)


@forward("floor_divide", dtype_rule="promote")
def _floor_divide_fwd(self, other):
    return np.floor_divide(self, other)


def floor_divide(input, other) -> Tensor:
    """Floor division ``input // other`` (not differentiable: a step function)."""
    return _dividend_first("floor_divide", None, input, other)


def _remainder_fwd(self, other):
    return np.remainder(self, other)


def _fmod_fwd(self, other):
    return np.fmod(self, other)


for _key in ("remainder.Scalar", "remainder.Tensor"):
    forward(_key, dtype_rule="promote")(_remainder_fwd)
for _key in ("fmod.Scalar", "fmod.Tensor"):
    forward(_key, dtype_rule="promote")(_fmod_fwd)


def remainder(input, other) -> Tensor:
    """``input % other`` with the divisor's sign, as Python's (RemainderBackward0/1)."""
    return _dividend_first("remainder.Tensor", "remainder.Scalar", input, other)


def fmod(input, other) -> Tensor:
    """C's remainder, with the dividend's sign (FmodBackward0/1)."""
    return _dividend_first("fmod.Tensor", "fmod.Scalar", input, other)


@forward("trunc")
def _trunc_fwd(self):
    return np.trunc(self)


def trunc(input) -> Tensor:
    """Round towards zero (TruncBackward0; gradient 0)."""
    return _call("trunc", as_tensor(input))


fix = trunc


def _bitwise(name: str, numpy_fn, logical=None):
    key = f"{name}.Tensor"
    forward(key, dtype_rule="promote")(lambda self, other: numpy_fn(self, other))

    def fn(input, other) -> Tensor:
        a, b = _operand(input), _operand(other)
        if not isinstance(a, Tensor):
            a = as_tensor(a)
        for x in (a, b):
            if (isinstance(x, Tensor) and x.dtype.is_floating_point) or isinstance(x, float):
                raise RuntimeError(f'"{name}_cpu" not implemented for \'Float\': bitwise operators take '
                                   "integer or bool tensors")
        if logical is not None and a.dtype.name == "bool" and isinstance(b, Tensor) and b.dtype.name == "bool":
            return logical(a, b)   # on bools the bitwise and logical ops agree; the logical one fuses
        return _call(key, a, b)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of integer or bool tensors (not differentiable)."
    return fn


bitwise_and = _bitwise("bitwise_and", np.bitwise_and, logical_and)
bitwise_or = _bitwise("bitwise_or", np.bitwise_or, logical_or)
bitwise_xor = _bitwise("bitwise_xor", np.bitwise_xor)
bitwise_left_shift = _bitwise("bitwise_left_shift", np.left_shift)
bitwise_right_shift = _bitwise("bitwise_right_shift", np.right_shift)


@forward("bitwise_not")
def _bitwise_not_fwd(self):
    return np.invert(self)


def bitwise_not(input) -> Tensor:
    """``~input``: bitwise not of an integer tensor, logical not of a bool tensor."""
    t = as_tensor(input)
    if t.dtype.is_floating_point:
        raise RuntimeError("\"bitwise_not_cpu\" not implemented for 'Float': ~ takes integer or bool tensors")
    if t.dtype.name == "bool":
        return logical_not(t)
    return _call("bitwise_not", t)


# --- reductions -----------------------------------------------------------------------------

_add_reduce = np.add.reduce


@forward("sum")
def _sum_fwd(self, dtype=None):
    # ufunc.reduce skips np.sum's Python dispatch layer (a few us per call on small tensors)
    out = _add_reduce(self, axis=None) if self.dtype.kind == "f" else np.sum(self)
    return out if dtype is None else np.asarray(out).astype(dtype.np)


@forward("sum.dim_IntList")
def _sum_dim_fwd(self, dim, keepdim=False, dtype=None):
    out = np.sum(self, axis=normalize_dims(dim, self.ndim), keepdims=keepdim)
    return out if dtype is None else np.asarray(out).astype(dtype.np)


@forward("mean", float_only=True)
def _mean_fwd(self, dtype=None):
    return np.mean(self)


@forward("mean.dim", float_only=True)
def _mean_dim_fwd(self, dim, keepdim=False, dtype=None):
    return np.mean(self, axis=normalize_dims(dim, self.ndim), keepdims=keepdim)


@forward("prod")
def _prod_fwd(self, dtype=None):
    return np.prod(self)


@forward("prod.dim_int")
def _prod_dim_fwd(self, dim, keepdim=False, dtype=None):
    return np.prod(self, axis=dim, keepdims=keepdim)


@forward("max.dim")
def _max_dim_fwd(self, dim, keepdim=False):
    if self.ndim == 0:  # dim 0 of one value: the value, at index 0
        return self.copy(), np.zeros((), np.int64)
    idx = np.argmax(self, axis=dim, keepdims=True)
    vals = np.take_along_axis(self, idx, axis=dim)
    if not keepdim:
        vals, idx = np.squeeze(vals, dim), np.squeeze(idx, dim)
    return vals, idx.astype(np.int64)


@forward("min.dim")
def _min_dim_fwd(self, dim, keepdim=False):
    if self.ndim == 0:  # dim 0 of one value: the value, at index 0
        return self.copy(), np.zeros((), np.int64)
    idx = np.argmin(self, axis=dim, keepdims=True)
    vals = np.take_along_axis(self, idx, axis=dim)
    if not keepdim:
        vals, idx = np.squeeze(vals, dim), np.squeeze(idx, dim)
    return vals, idx.astype(np.int64)


def _nonempty(op):
    def fwd(self, *args):
        if self.size == 0:
            raise RuntimeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        return (np.max if op == "max" else np.min)(self, *args)

    return fwd


forward("max")(_nonempty("max"))
forward("min")(_nonempty("min"))


@forward("amax")
def _amax_fwd(self, dim=(), keepdim=False):
    return np.amax(self, axis=normalize_dims(dim or None, self.ndim), keepdims=keepdim)


@forward("amin")
def _amin_fwd(self, dim=(), keepdim=False):
    return np.amin(self, axis=normalize_dims(dim or None, self.ndim), keepdims=keepdim)


@forward("var.correction", float_only=True)
def _var_fwd(self, dim=None, correction=None, keepdim=False):
    return np.var(self, axis=normalize_dims(dim, self.ndim), ddof=1 if correction is None else correction,
                  keepdims=keepdim)


@forward("std.correction", float_only=True)
def _std_fwd(self, dim=None, correction=None, keepdim=False):
    return np.std(self, axis=normalize_dims(dim, self.ndim), ddof=1 if correction is None else correction,
                  keepdims=keepdim)


@forward("logsumexp", float_only=True)
def _logsumexp_fwd(self, dim, keepdim=False):
    if self.ndim == 0:  # one value over dim 0 or -1: itself, as in PyTorch
        return self.copy()
    axes = normalize_dims(dim, self.ndim)
    m = np.amax(self, axis=axes, keepdims=True) if self.size else np.zeros((1,) * self.ndim, self.dtype)
    m = np.where(np.isfinite(m), m, 0)  # all -inf rows stay -inf instead of becoming nan
    out = np.log(np.sum(np.exp(self - m), axis=axes, keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axes)


@forward("_softmax", float_only=True)
def _softmax_fwd(self, dim, half_to_float=False):
    if self.ndim == 0 or self.size == 0:   # one value (softmax 1) or nothing
        return np.ones_like(self)
    e = np.exp(self - np.amax(self, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


@forward("_log_softmax", float_only=True)
def _log_softmax_fwd(self, dim, half_to_float=False):
    if self.ndim == 0 or self.size == 0:
        return np.zeros_like(self)
    shifted = self - np.amax(self, axis=dim, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


class return_types:
    """Named (values, indices) results of max/min with a dim, like torch.return_types."""

    class _ValuesIndices(tuple):
        def __new__(cls, values, indices):
            return super().__new__(cls, (values, indices))

        values = property(lambda self: self[0])
        indices = property(lambda self: self[1])

    class max(_ValuesIndices):
        pass

    class min(_ValuesIndices):
        pass


def prod(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Product of all elements (ProdBackward0) or along ``dim`` (ProdBackward1); exact with zeros."""
    t = as_tensor(input)
    if dim is None:
        return _call("prod", t, None)
    return _call("prod.dim_int", t, _check_dim(dim, t.ndim, "prod"), keepdim, None)


def _max_min(name: str, input, dim, keepdim, other):
    t = as_tensor(input)
    if other is not None or isinstance(dim, Tensor):
        return (maximum if name == "max" else minimum)(t, dim if other is None else other)
    if dim is None:
        return _call(name, t)
    values, indices = _call(f"{name}.dim", t, _check_dim(dim, t.ndim, name), keepdim)
    return getattr(return_types, name)(values, indices)


def max(input, dim=None, keepdim: bool = False, *, other=None):
    """Largest element (MaxBackward1), or ``(values, indices)`` along ``dim`` (MaxBackward0)."""
    return _max_min("max", input, dim, keepdim, other)


def min(input, dim=None, keepdim: bool = False, *, other=None):
    """Smallest element (MinBackward1), or ``(values, indices)`` along ``dim`` (MinBackward0)."""
    return _max_min("min", input, dim, keepdim, other)


def amax(input, dim=(), keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (all dims by default); ties share the gradient evenly."""
    t = as_tensor(input)
    dims = _dims_arg(None if dim in ((), []) else dim, t.ndim, "amax")
    return _call("amax", t, dims or (), keepdim)


def amin(input, dim=(), keepdim: bool = False) -> Tensor:
    t = as_tensor(input)
    dims = _dims_arg(None if dim in ((), []) else dim, t.ndim, "amin")
    return _call("amin", t, dims or (), keepdim)


def var(input, dim=None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Variance (VarBackward0); unbiased (correction 1) by default, as in PyTorch."""
    t = as_tensor(input)
    if isinstance(dim, bool):  # var(x, False): the old positional unbiased flag
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    return _call("var.correction", t, _dims_arg(dim, t.ndim, "var"), correction, keepdim)


def std(input, dim=None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None) -> Tensor:
    """Standard deviation (StdBackward0); unbiased by default."""
    t = as_tensor(input)
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased in (None, True) else 0
    return _call("std.correction", t, _dims_arg(dim, t.ndim, "std"), correction, keepdim)


def logsumexp(input, dim, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x), dim))`` computed stably (LogsumexpBackward0)."""
    t = as_tensor(input)
    return _call("logsumexp", t, _dims_arg(dim, t.ndim, "logsumexp"), keepdim)


def softmax(input, dim: int, dtype=None) -> Tensor:
    """Stable softmax along ``dim`` (SoftmaxBackward0)."""
    t = as_tensor(input) if dtype is None else to(input, dtype)
    return _call("_softmax", t, _check_dim(dim, t.ndim, "softmax"), False)


def log_softmax(input, dim: int, dtype=None) -> Tensor:
    """Stable log-softmax along ``dim`` (LogSoftmaxBackward0)."""
    t = as_tensor(input) if dtype is None else to(input, dtype)
    return _call("_log_softmax", t, _check_dim(dim, t.ndim, "log_softmax"), False)


class _NoDim:
    """Default of ``dim``: distinguishes ``x.sum()`` (SumBackward0) from ``x.sum(dim=None)`` (SumBackward1)."""

    def __repr__(self) -> str:
        return "<all dims>"


_ALL = _NoDim()


def _is_all_dims(dim) -> bool:
    return dim is _ALL


def sum(input, dim=_ALL, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum of all elements (SumBackward0) or over ``dim`` (SumBackward1)."""
    t = as_tensor(input)
    d = None if dtype is None else _dt.to_dtype(dtype)
    if _is_all_dims(dim):
        if keepdim:
            return _call("sum.dim_IntList", t, tuple(range(t.ndim)), True, d)
        return _call("sum", t, d)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return _call("sum.dim_IntList", t, _dims_arg(dim, t.ndim, "sum"), keepdim, d)


def mean(input, dim=_ALL, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Mean of all elements (MeanBackward0) or over ``dim`` (MeanBackward1)."""
    t = as_tensor(input)
    d = None if dtype is None else _dt.to_dtype(dtype)
    if d is not None:
        t = to(t, d)
    if _is_all_dims(dim):
        if keepdim:
            return _call("mean.dim", t, tuple(range(t.ndim)), True, None)
        return _call("mean", t, None)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return _call("mean.dim", t, _dims_arg(dim, t.ndim, "mean"), keepdim, None)


def _dims_arg(dim, ndim: int, op: str):
    try:
        normalize_dims(dim, ndim)
    except IndexError as exc:
        raise IndexError(f"{op}(): {exc} for a tensor of {ndim} dimensions") from None
    if dim is None:
        return None
    return (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)


# --- shape ----------------------------------------------------------------------------------

def _size_arg(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(int(s) for s in size)


@forward("expand", view=True)
def _expand_fwd(self, size, implicit=False):
    size = tuple(self.shape[i - (len(size) - self.ndim)] if s == -1 else s for i, s in enumerate(size))
    return np.broadcast_to(self, size)


def expand(input, *size) -> Tensor:
    """Broadcast to a larger shape without copying (ExpandBackward0)."""
    return _call("expand", as_tensor(input), _size_arg(size), False)


def broadcast_to(input, size) -> Tensor:
    return expand(input, tuple(size))


def expand_as(input, other) -> Tensor:
    return expand(input, tuple(as_tensor(other).shape))


@forward("view", view="maybe")
def _view_fwd(self, size):
    try:
        return np.reshape(self, size)
    except ValueError:
        raise RuntimeError(f"shape '{list(size)}' is invalid for input of size {self.size}") from None


def reshape(input, *shape) -> Tensor:
    """Reshape (ViewBackward0); ``-1`` infers one dimension."""
    return _call("view", as_tensor(input), _size_arg(shape))


view = reshape


@forward("_to_copy")
def _to_copy_fwd(self, dtype=None):
    return self.astype(dtype.np) if dtype is not None else self.copy()


def to(input, *args, dtype=None, copy: bool = False) -> Tensor:
    """Convert to a dtype (ToCopyBackward0); a no-op when the dtype already matches."""
    for a in args:
        if isinstance(a, (_dt.dtype, type, np.dtype)) or (isinstance(a, str) and a != "cpu"):
            dtype = a
    t = as_tensor(input)
    if dtype is None:
        return t
    d = _dt.to_dtype(dtype)
    if d.np == t._data.dtype and not copy:
        return t
    return _call("_to_copy", t, d)


@forward("clone")
def _clone_fwd(self):
    return np.array(self, copy=True)


def clone(input) -> Tensor:
    """A copy that stays in the graph (CloneBackward0)."""
    return _call("clone", as_tensor(input))


def to_dtype(input, d) -> Tensor:
    """Formula vocabulary: cast to ``d`` (used by ToCopyBackward0)."""
    return to(input, d)


# --- linear algebra -------------------------------------------------------------------------

@forward("mm", dtype_rule="promote")
def _mm_fwd(self, mat2):
    return np.matmul(self, mat2)


forward("mv", dtype_rule="promote")(_mm_fwd)
forward("bmm", dtype_rule="promote")(_mm_fwd)
forward("dot", dtype_rule="promote")(lambda self, tensor: np.dot(self, tensor))
forward("outer", dtype_rule="promote")(lambda self, vec2: np.outer(self, vec2))


def _shapes_error(op: str, a: Tensor, b: Tensor, detail: str):
    return RuntimeError(f"{op}: {detail} (got shapes {list(a.shape)} and {list(b.shape)})")


def mm(input, mat2) -> Tensor:
    """Matrix product of two 2-D tensors (MmBackward0)."""
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise _shapes_error("mm", a, b, "both arguments must be 2-D")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    return _call("mm", a, b)


def mv(input, vec) -> Tensor:
    """Matrix-vector product (MvBackward0)."""
    a, v = as_tensor(input), as_tensor(vec)
    if a.ndim != 2 or v.ndim != 1 or a.shape[1] != v.shape[0]:
        raise _shapes_error("mv", a, v, "expected a [n, m] matrix and an [m] vector")
    return _call("mv", a, v)


def dot(input, tensor) -> Tensor:
    """Inner product of two 1-D tensors (DotBackward0)."""
    a, b = as_tensor(input), as_tensor(tensor)
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != b.shape[0]:
        raise _shapes_error("dot", a, b, "expected two 1-D tensors of the same size")
    return _call("dot", a, b)


def outer(input, vec2) -> Tensor:
    """Outer product; like PyTorch it is a broadcast multiply (MulBackward0)."""
    a, b = as_tensor(input), as_tensor(vec2)
    if a.ndim != 1 or b.ndim != 1:
        raise _shapes_error("outer", a, b, "expected two 1-D tensors")
    return mul(reshape(a, (-1, 1)), b)


def _outer_op(input, vec2) -> Tensor:
    """The ``outer`` op of the rule table (used by mv's backward under create_graph)."""
    return _call("outer", as_tensor(input), as_tensor(vec2))


ger = outer


def bmm(input, mat2) -> Tensor:
    """Batched matrix product of 3-D tensors (BmmBackward0)."""
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise _shapes_error("bmm", a, b, "expected [b, n, k] and [b, k, m]")
    return _call("bmm", a, b)


def _unsafe_view(input, shape) -> Tensor:
    return _call("_unsafe_view", input, tuple(shape))


def matmul(input, other) -> Tensor:
    """``input @ other`` with PyTorch's dispatch: dot, mv, mm, or batched bmm with broadcasting."""
    a, b = as_tensor(input), as_tensor(other)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both arguments need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise RuntimeError(f"matmul: shapes {list(a.shape)} and {list(b.shape)} cannot be multiplied "
                           f"(inner dimensions {k_a} and {k_b} differ)")
    if a.ndim == 1 and b.ndim == 1:
        return dot(a, b)
    if a.ndim == 2 and b.ndim == 1:
        return mv(a, b)
    if a.ndim == 1 and b.ndim == 2:
        return _call("squeeze_.dim", mm(unsqueeze(a, 0), b), 0)
    if a.ndim == 2 and b.ndim == 2:
        return mm(a, b)
    if a.ndim >= 3 and b.ndim <= 2:  # fold the batch into the rows, as PyTorch does
        folded = reshape(a, (-1, k_a))
        out = mv(folded, b) if b.ndim == 1 else mm(folded, b)
        return _unsafe_view(out, tuple(a.shape[:-1]) + (() if b.ndim == 1 else (b.shape[-1],)))
    a3 = unsqueeze(a, 0) if a.ndim == 1 else a
    b3 = unsqueeze(b, -1) if b.ndim == 1 else b
    batch = np.broadcast_shapes(tuple(a3.shape[:-2]), tuple(b3.shape[:-2]))
    n, m = a3.shape[-2], b3.shape[-1]
    A = reshape(expand(a3, batch + tuple(a3.shape[-2:])), (-1, n, k_a))
    B = reshape(expand(b3, batch + tuple(b3.shape[-2:])), (-1, k_a, m))
    final = batch + ((n,) if a.ndim > 1 else ()) + ((m,) if b.ndim > 1 else ())
    return _unsafe_view(bmm(A, B), final)


@forward("_unsafe_view", view="maybe")
def _unsafe_view_fwd(self, size):
    return np.reshape(self, size)


@forward("t", view=True)
def _t_fwd(self):
    return self.T


@forward("transpose.int", view=True)
def _transpose_fwd(self, dim0, dim1):
    return np.swapaxes(self, dim0, dim1)


@forward("permute", view=True)
def _permute_fwd(self, dims):
    return np.transpose(self, dims)


def _squeeze_fwd(self, dim=None):
    if dim is None:
        return np.squeeze(self)
    dims = tuple(d for d in normalize_dims(dim, self.ndim) if self.shape[d] == 1) if self.ndim else ()
    return np.squeeze(self, dims) if dims else self


for _key in ("squeeze", "squeeze.dim", "squeeze.dims", "squeeze_", "squeeze_.dim"):
    forward(_key, view=True)(_squeeze_fwd)


@forward("cat", dtype_rule="promote")
def _cat_fwd(tensors, dim=0):
    return np.concatenate(tensors, axis=dim)


def t(input) -> Tensor:
    """Transpose of a tensor of at most 2 dimensions (TBackward0)."""
    x = as_tensor(input)
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return _call("t", x)


def transpose(input, dim0: int, dim1: int) -> Tensor:
    """Swap two dimensions (TransposeBackward0)."""
    x = as_tensor(input)
    return _call("transpose.int", x, _check_dim(dim0, x.ndim, "transpose"), _check_dim(dim1, x.ndim, "transpose"))


swapaxes = transpose


def permute(input, *dims) -> Tensor:
    """Reorder dimensions (PermuteBackward0)."""
    x = as_tensor(input)
    dims = _size_arg(dims)
    if sorted(d % builtins.max(x.ndim, 1) for d in dims) != list(range(x.ndim)):
        raise RuntimeError(f"permute: dims {list(dims)} are not a permutation of the {x.ndim} dimensions")
    return _call("permute", x, tuple(d % builtins.max(x.ndim, 1) for d in dims))


def squeeze(input, dim=None) -> Tensor:
    """Drop dimensions of size one (all, or those in ``dim``)."""
    x = as_tensor(input)
    if dim is None:
        return _call("squeeze", x)
    if isinstance(dim, (tuple, list)):
        return _call("squeeze.dims", x, tuple(_check_dim(d, x.ndim, "squeeze") for d in dim))
    return _call("squeeze.dim", x, _check_dim(dim, x.ndim, "squeeze"))


def flatten(input, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim..end_dim`` into one (a view: ViewBackward0)."""
    x = as_tensor(input)
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = _check_dim(start_dim, x.ndim, "flatten"), _check_dim(end_dim, x.ndim, "flatten")
    if s == e:
        return x
    shape = tuple(x.shape[:s]) + (-1,) + tuple(x.shape[e + 1:])
    return reshape(x, shape)


def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenate along an existing dimension (CatBackward0)."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise RuntimeError("cat expects a non-empty TensorList")
    d = _check_dim(dim, ts[0].ndim, "cat")
    ref = list(ts[0].shape)
    for k, x in enumerate(ts):
        if x.ndim != len(ref) or any(x.shape[i] != ref[i] for i in range(len(ref)) if i != d):
            raise RuntimeError(f"cat: sizes of tensors must match except in dimension {d}; tensor 0 has shape "
                               f"{ref} and tensor {k} has shape {list(x.shape)}")
    return _call("cat", ts, d)


concat = concatenate = cat


def contiguous(input) -> Tensor:
    """The tensor itself (numpy-backed tensors need no re-layout for correctness)."""
    return as_tensor(input)


# --- formula vocabulary in its differentiable form (create_graph=True) ---------------------

def sum_to(x: Tensor, shape) -> Tensor:
    """Sum a broadcast tensor back to ``shape`` (differentiable)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and x.shape[i + lead] != 1)
    out = sum(x, axes, keepdim=True) if axes else x
    return reshape(out, shape) if lead else out


def sum_backward(grad: Tensor, shape, dim, keepdim) -> Tensor:
    """Gradient of a sum over ``dim``: put back the reduced dims, then broadcast."""
    if not keepdim and len(shape):
        dims = normalize_dims(dim, len(shape))
        kept = list(grad.shape)
        for d in dims:
            kept.insert(d, 1)
        grad = reshape(grad, tuple(kept))
    return expand(grad, tuple(shape))


def index(x: Tensor, idx) -> Tensor:
    return _call("index.Tensor", x, idx)


def cat_backward(grad: Tensor, dim: int, shapes) -> tuple:
    out, start = [], 0
    for shp in shapes:
        out.append(slice_op(grad, dim, start, start + shp[dim], 1))
        start += shp[dim]
    return tuple(out)


def inverse_permutation(dims):
    return _inverse_permutation(dims)


def _unsqueeze_dims(grad: Tensor, shape, dim, keepdim) -> Tensor:
    if keepdim or not len(shape):
        return grad
    kept = list(grad.shape)
    for d in normalize_dims(dim, len(shape)):
        kept.insert(d, 1)
    return reshape(grad, tuple(kept))


def var_backward(grad: Tensor, self: Tensor, dim, correction, keepdim) -> Tensor:
    axes = normalize_dims(dim, self.ndim)
    n = 1
    for a in axes:
        n *= self.shape[a]
    c = 1 if correction is None else correction
    g = _unsqueeze_dims(grad, tuple(self.shape), dim, keepdim)
    return g * (np.float64(2.0) / builtins.max(n - c, 0)) * (self - mean(self, axes, keepdim=True))


def amax_backward(grad: Tensor, self: Tensor, result: Tensor, dim, keepdim) -> Tensor:
    """Gradient of amax/amin/max(): split evenly among the elements equal to the result."""
    dims = None if dim in ((), [], None) else dim
    shape = tuple(self.shape)
    g = _unsqueeze_dims(grad, shape, dims, keepdim)
    r = _unsqueeze_dims(result, shape, dims, keepdim)
    mask = to(eq(self, r), grad.dtype)
    axes = normalize_dims(dims, self.ndim)
    count = sum(mask, axes, keepdim=True) if axes else mask
    return g * mask / count


def amax_backward_all(grad: Tensor, self: Tensor, result: Tensor) -> Tensor:
    return amax_backward(grad, self, result, None, False)


def index_reduction_backward(grad: Tensor, indices, shape, dim, keepdim) -> Tensor:
    """Gradient of max/min along a dim: all of it to the returned index."""
    if len(shape) == 0:
        return grad * 1.0
    idx = indices if isinstance(indices, Tensor) else Tensor._wrap(np.asarray(indices))
    idx = _unsqueeze_dims(idx, tuple(shape), dim, keepdim)
    positions = np.arange(shape[dim]).reshape([-1 if d == dim else 1 for d in range(len(shape))])
    mask = to(eq(idx, Tensor._wrap(positions)), grad.dtype)
    g = _unsqueeze_dims(grad, tuple(shape), dim, keepdim)
    return expand(g, tuple(shape)) * mask


def _refuse_when_traced(t: Tensor, what: str) -> None:
    rec = registry._recorder
    if rec is not None and rec.is_traced(t):
        rec.refuse(f"{what} is not supported in a traced (compiled) function: its gradient depends on "
                   "where the zeros are")


def prod_backward(grad: Tensor, self: Tensor, dim, keepdim) -> Tensor:
    if self.ndim == 0:  # a 0-d tensor reduced over dim 0 or -1 is itself: gradient 1
        return grad * Tensor._wrap(np.ones_like(self._data))
    _refuse_when_traced(self, "the gradient of prod")
    g = _unsqueeze_dims(grad, tuple(self.shape), dim, keepdim)
    if (self._data == 0).any():  # second order through zeros is not differentiated further
        return g * Tensor._wrap(_exclusive_prod(self._data, dim))
    return g * prod(self, dim, keepdim=True) / self


def prod_backward_all(grad: Tensor, self: Tensor) -> Tensor:
    _refuse_when_traced(self, "the gradient of prod")
    if (self._data == 0).any():
        return grad * Tensor._wrap(_np_prod_backward_all(np.ones((), self._data.dtype), self._data))
    return expand(grad, tuple(self.shape)) * prod(self) / self


def index_zero(x: Tensor, idx, keep: bool = False) -> Tensor:
    """``x`` with ``x[idx]`` set to zero (differentiable); ``keep=True`` returns ``x`` unchanged."""
    if keep:
        return x
    # index_put keeps the index symbolic, so a traced (compiled) index stays a graph value
    return _call("index_put", x, _index_key(idx), 0.0, False)


@forward("where.self", dtype_rule="promote")
def _where_fwd(condition, self, other):
    return np.where(condition, self, other)


def where(condition, input, other) -> Tensor:
    """Pick ``input`` where ``condition`` holds, else ``other`` (WhereBackward0)."""
    c = condition if isinstance(condition, Tensor) else as_tensor(np.asarray(condition, dtype=bool))
    if c._data.dtype != np.bool_:
        c = Tensor._wrap(c._data.astype(bool))
    return _call("where.self", c, _operand(input), _operand(other))


# --- indexing -------------------------------------------------------------------------------

@forward("select.int", view=True)
def _select_fwd(self, dim, index):
    return self[(builtins.slice(None),) * dim + (index,)]


@forward("select_backward")
def _select_backward_fwd(grad_output, input_sizes, dim, index):
    out = np.zeros(input_sizes, dtype=grad_output.dtype)
    out[(builtins.slice(None),) * dim + (index,)] = grad_output
    return out


@forward("slice.Tensor", view=True)
def _slice_fwd(self, dim=0, start=None, end=None, step=1):
    return self[(builtins.slice(None),) * dim + (builtins.slice(start, end, step),)]


@forward("slice_backward")
def _slice_backward_fwd(grad_output, input_sizes, dim, start, end, step):
    out = np.zeros(input_sizes, dtype=grad_output.dtype)
    out[(builtins.slice(None),) * dim + (builtins.slice(start, end, step),)] = grad_output
    return out


@forward("unsqueeze", view=True)
def _unsqueeze_fwd(self, dim):
    return np.expand_dims(self, dim)


@forward("index.Tensor")
def _index_fwd(self, indices):
    return self[_index_arg(indices)]


@forward("index_put_add")
def _index_put_add_fwd(values, input_sizes, indices):
    out = np.zeros(input_sizes, dtype=values.dtype)
    np.add.at(out, _index_arg(indices), values)  # repeated indices accumulate
    return out


@forward("unbind.int", view=True)
def _unbind_fwd(self, dim=0):
    return tuple(self[(builtins.slice(None),) * dim + (k,)] for k in range(self.shape[dim]))


@forward("stack", dtype_rule="promote")
def _stack_fwd(tensors, dim=0):
    return np.stack(tensors, axis=dim)


def _check_dim(dim: int, ndim: int, op: str) -> int:
    bound = builtins.max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                         f"but got {dim})")
    return dim % bound


def select(input, dim: int, index: int) -> Tensor:
    """``input`` at position ``index`` along ``dim`` (SelectBackward0)."""
    t = as_tensor(input)
    dim = _check_dim(dim, t.ndim, "select")
    size = t.shape[dim]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} is out of bounds for dimension {dim} with size {size}")
    return _call("select.int", t, dim, index % size)


def select_backward(grad, input_sizes, dim, index) -> Tensor:
    return _call("select_backward", grad, tuple(input_sizes), dim, index)


def slice_op(input, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:
    """``input[start:end:step]`` along ``dim`` (SliceBackward0)."""
    if step is not None and step <= 0:
        raise ValueError("slice step must be positive")
    return _call("slice.Tensor", as_tensor(input), dim, start, end, 1 if step is None else step)


def slice_backward(grad, input_sizes, dim, start, end, step) -> Tensor:
    return _call("slice_backward", grad, tuple(input_sizes), dim, start, end, step)


def unsqueeze(input, dim: int) -> Tensor:
    """Insert a dimension of size one at ``dim`` (UnsqueezeBackward0)."""
    t = as_tensor(input)
    dim = _check_dim(dim, t.ndim + 1, "unsqueeze")
    return _call("unsqueeze", t, dim)


def index_put_add(values, input_sizes, indices) -> Tensor:
    return _call("index_put_add", values, tuple(input_sizes), indices)


def unbind(input, dim: int = 0) -> tuple:
    """Split along ``dim`` into a tuple of tensors (UnbindBackward0; each is output ``k``)."""
    t = as_tensor(input)
    return _call("unbind.int", t, _check_dim(dim, t.ndim, "unbind"))


def unbind_backward(grads, shape, dim) -> Tensor:
    ref = next(g for g in grads if g is not None)
    parts = [grads[k] if k < len(grads) and grads[k] is not None else Tensor._wrap(np.zeros_like(ref._data))
             for k in range(shape[dim])]
    return stack(parts, dim)


def stack(tensors, dim: int = 0) -> Tensor:
    """Stack tensors of one shape along a new dimension (StackBackward0)."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise RuntimeError("stack expects a non-empty TensorList")
    shapes = {tuple(t.shape) for t in ts}
    if len(shapes) > 1:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got {[list(t.shape) for t in ts]}")
    return _call("stack", ts, _check_dim(dim, ts[0].ndim + 1, "stack"))


def _is_advanced(item) -> bool:
    return isinstance(item, (list, np.ndarray, Tensor)) or isinstance(item, (bool, np.bool_))


def getitem(t: Tensor, idx) -> Tensor:
    """``t[idx]``: ints select, slices slice, None unsqueezes; arrays and masks gather (IndexBackward0)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if any(_is_advanced(i) for i in idx):
        key = _index_key(idx if len(idx) > 1 else idx[0])
        try:
            np.empty(t.shape, dtype=np.bool_)[_index_arg(key)]
        except IndexError as exc:
            raise IndexError(f"index {idx!r} does not fit a tensor of shape {list(t.shape)}: {exc}") from None
        return _call("index.Tensor", t, key)
    n_real = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > t.ndim:
        raise IndexError(f"too many indices for tensor of dimension {t.ndim} (got {n_real})")
    out, dim = t, 0
    for item in idx:
        if item is Ellipsis:
            dim += t.ndim - n_real
        elif item is None:
            out = unsqueeze(out, dim)
            dim += 1
        elif isinstance(item, builtins.slice):
            start, stop, step = item.indices(out.shape[dim])
            if (start, stop, step) != (0, out.shape[dim], 1):
                if step < 0:
                    raise ValueError("step must be greater than zero")
                out = slice_op(out, dim, start, builtins.max(stop, start), step)
            dim += 1
        elif isinstance(item, (int, np.integer)):
            out = select(out, dim, int(item))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors are "
                             f"valid indices (got {type(item).__name__})")
    if out is t:  # x[:] is a view in PyTorch; keep it in the graph
        out = _call("slice.Tensor", t, 0, 0, t.shape[0], 1) if t.ndim else t
    return out


# --- in-place ops ---------------------------------------------------------------------------

def _check_inplace_leaf(t: Tensor) -> None:
    if STATE.enabled and t._grad_fn is None and t._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


def _write_inplace(t: Tensor, result: Tensor, op_name: str) -> Tensor:
    """Copy an out-of-place result into ``t`` and move ``t`` onto the result's node."""
    data = result._data
    if data.dtype != t._data.dtype and data.dtype.kind == "f" and t._data.dtype.kind != "f":
        raise RuntimeError(f"{op_name}: result type {_dt.from_numpy_dtype(data.dtype).name} can't be cast to "
                           f"the desired output type {t.dtype.name}")
    if data.shape != t._data.shape:
        raise RuntimeError(f"{op_name}: output with shape {list(t.shape)} doesn't match the broadcast shape "
                           f"{list(data.shape)}")
    np.copyto(t._data, data, casting="unsafe")
    t._version_counter.value += 1
    if registry._recorder is not None:
        registry._recorder.rebind(t, result)
    if result._grad_fn is not None:
        t._grad_fn = result._grad_fn
        t._output_nr = result._output_nr
    return t


def _alias_for_inplace(t: Tensor, needs_old_value: bool) -> Tensor:
    """A stand-in for ``t`` before the in-place op: same graph position, a copy of the data if saved."""
    old = Tensor._wrap(np.array(t._data, copy=True) if needs_old_value else t._data)
    old._grad_fn, old._output_nr, old._requires_grad = t._grad_fn, t._output_nr, t._requires_grad
    old._accumulate = t._accumulate
    if registry._recorder is not None:
        registry._recorder.same_value(old, t)
    return old


def inplace(t: Tensor, fn, *args, name: str = "inplace") -> Tensor:
    """Run ``fn(t, *args)`` out of place and write the result back into ``t`` (``add_`` and friends)."""
    _check_inplace_leaf(t)
    if not STATE.enabled or not (t.requires_grad or any(isinstance(a, Tensor) and a.requires_grad
                                                         for a in args)):
        # nothing to record: the op runs on t itself (no copy of the old value is needed)
        return _write_inplace(t, fn(_alias_for_inplace(t, False), *args), name)
    result = fn(_alias_for_inplace(t, True), *args)
    return _write_inplace(t, result, name)


@forward("zero_")
def _zero_fwd(self):
    return np.zeros_like(self)


def zero_(t: Tensor) -> Tensor:
    """Fill with zeros in place (ZeroBackward0 on a non-leaf)."""
    return inplace(t, lambda x: _call("zero_", x), name="zero_")


@forward("index_put")
def _index_put_fwd(self, indices, values, accumulate=False):
    indices = _index_arg(indices)
    out = np.array(self, copy=True)
    if accumulate:
        np.add.at(out, indices, values)
    else:
        out[indices] = values
    return out


def index_put(input, indices, values, accumulate: bool = False) -> Tensor:
    """A copy of ``input`` with ``values`` written (or added) at ``indices`` (IndexPutBackward0)."""
    t = as_tensor(input)
    idx = _index_key(tuple(indices) if isinstance(indices, list) else indices)  # tensors stay graph values
    if isinstance(idx, tuple) and len(idx) == 1:
        idx = idx[0]
    return _call("index_put", t, idx, _operand(values), accumulate)


@forward("copy_slices")
def _copy_slices_fwd(self, src, indices):
    indices = _index_arg(indices)
    out = np.array(self, copy=True)
    out[indices] = src
    return out


def setitem(t: Tensor, idx, value) -> None:
    """``t[idx] = value``; on a non-leaf this records a CopySlices node."""
    idx = _index_key(idx)
    _check_inplace_leaf(t)
    v = _operand(value)
    if isinstance(v, Tensor) and v._data.dtype != t._data.dtype:
        v = to(v, t.dtype)
    tracing = registry._recorder is not None
    if tracing or (STATE.enabled and (t.requires_grad or (isinstance(v, Tensor) and v.requires_grad))):
        advanced = any(_is_advanced(i) for i in (idx if isinstance(idx, tuple) else (idx,)))
        if advanced:  # PyTorch records IndexPutBackward0 here, CopySlices for basic indexing
            result = _call("index_put", _alias_for_inplace(t, False), idx, v, False)
        else:
            result = _call("copy_slices", _alias_for_inplace(t, False), v, idx)
        _write_inplace(t, result, "setitem")
        return
    t._data[_index_arg(idx)] = v._data if isinstance(v, Tensor) else v
    t._version_counter.value += 1


def _index_key(idx):
    """An indexing key with lists made arrays but tensors kept (a tracer records them as values)."""
    if isinstance(idx, tuple):
        return tuple(_index_key(i) for i in idx)
    if isinstance(idx, list):
        if any(isinstance(i, Tensor) for i in idx):
            return np.asarray([i.item() if isinstance(i, Tensor) else i for i in idx])
        return np.asarray(idx)
    return idx


def _index_arg(idx):
    if isinstance(idx, Tensor):
        return idx._data
    if isinstance(idx, tuple):
        return tuple(i._data if isinstance(i, Tensor) else i for i in idx)
    if isinstance(idx, list):
        return np.asarray([i.item() if isinstance(i, Tensor) else i for i in idx])
    return idx


# === numpy surface: elementwise (ufuncs, scipy.special, rounding) ===
# PyTorch's names first, then numpy's and scipy's spellings of the same functions.

asin = arcsin = _unary("asin")
acos = arccos = _unary("acos")
asinh = arcsinh = _unary("asinh")
acosh = arccosh = _unary("acosh")
atanh = arctanh = _unary("atanh")
log10 = _unary("log10")
cbrt = _unary("cbrt")
sinc = _unary("sinc")
deg2rad = radians = _unary("deg2rad")
rad2deg = degrees = _unary("rad2deg")
floor = _unary("floor")
ceil = _unary("ceil")
rint = _unary("round")
erfc = _unary("erfc")
logit = _unary("logit")
lgamma = gammaln = _unary("lgamma")
digamma = psi = _unary("digamma")
expit = sigmoid


def _binary_elementwise(key: str, name: str):
    def fn(input, other) -> Tensor:
        a, b = _operand(input), _operand(other)
        if not isinstance(a, Tensor):   # a number first: a 0-d tensor of the other's float dtype
            a = as_tensor(a, b.dtype if isinstance(b, Tensor) and b.dtype.is_floating_point else None)
        return _call(key, a, b)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` with broadcasting (rule: derivatives.yaml entry ``{key}``)."
    return fn


atan2 = arctan2 = _binary_elementwise("atan2", "atan2")
hypot = _binary_elementwise("hypot", "hypot")
logaddexp = _binary_elementwise("logaddexp", "logaddexp")
logaddexp2 = _binary_elementwise("logaddexp2", "logaddexp2")
xlogy = _binary_elementwise("xlogy.Tensor", "xlogy")
xlog1py = _binary_elementwise("special_xlog1py", "xlog1py")


@forward("round.decimals")
def _round_decimals_fwd(self, decimals):
    return np.round(self, decimals)


def round(input, decimals: int = 0) -> Tensor:
    """Round half to even (RoundBackward0), to ``decimals`` places as numpy.round (RoundBackward1).
    The gradient is 0."""
    if not isinstance(decimals, (int, np.integer)) or isinstance(decimals, bool):
        raise TypeError(f"round: decimals must be an int, got {type(decimals).__name__}")
    t = as_tensor(input)
    if decimals == 0:
        return _call("round", t)
    return _call("round.decimals", t, int(decimals))


around = round


def frac(input) -> Tensor:
    """The fractional part ``input - trunc(input)``, with the input's sign (gradient 1, as PyTorch's)."""
    t = as_tensor(input)
    return sub(t, trunc(t))


def polygamma(n: int, input) -> Tensor:
    """The ``n``-th derivative of digamma (PolygammaBackward0); ``n = 0`` is digamma."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ValueError(f"polygamma: n must be a non-negative int, got {n!r}")
    if n == 0:
        return digamma(input)
    return _call("polygamma", int(n), input if isinstance(input, Tensor) else as_tensor(input))



# === numpy surface: shape, assembly and indexing ===


# === numpy surface: reductions, scans and sorting ===


# === numpy surface: linear algebra ===
