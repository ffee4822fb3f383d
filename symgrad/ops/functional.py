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
import math as _math
import numbers
import threading

import numpy as np

from .. import _device
from .. import dtypes as _dt
from ..autograd.grad_mode import ERR_INFERENCE_INPLACE, INFERENCE_COUNTER, STATE
from ..autograd.node import SavedVariable
from ..rules.vocab import (
    _np_cumprod_backward,
    _np_reverse_cumsum,
    normalize_dims,
    reduced_grad,  # noqa: F401  (a formula helper: same code on Tensors)
)
from ..rules.vocab import inverse_permutation as _inverse_permutation
from ..rules.vocab import np_mean as _np_mean
from ..rules.vocab import np_scan as _np_scan
from ..rules.vocab import np_sum as _np_sum
from ..tensor import Tensor, is_numpy_face
from . import registry, views
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
    if isinstance(e, Tensor) and not e.dtype.is_floating_point and (
            (isinstance(a, Tensor) and not a.dtype.is_floating_point) or (isinstance(a, int))):
        return _integer_pow(a, e)
    if not isinstance(a, Tensor):
        return _call("pow.Scalar", a, e)
    if isinstance(e, Tensor):
        return _call("pow.Tensor_Tensor", a, e)
    return _call("pow.Tensor_Scalar", a, e)


def _integer_pow(base, exponent: Tensor) -> Tensor:
    """Integer ``base ** exponent`` with PyTorch's answer for negative exponents (numpy refuses them): 1 for a base
    of 1, +-1 for -1 (by the exponent's parity), else 0.  Written with ops, so traces and kernels agree."""
    natural = exponent >= 0
    safe = where(natural, exponent, 0)
    powers = _call("pow.Tensor_Tensor", base, safe) if isinstance(base, Tensor) else _call("pow.Scalar", base, safe)
    parity = where(remainder(exponent, 2) != 0, -1, 1)
    if isinstance(base, Tensor):
        negative_powers = where(base == 1, 1, where(base == -1, parity, 0))
    else:
        negative_powers = {1: parity * 0 + 1, -1: parity}.get(builtins.int(base), parity * 0)
    return where(natural, powers, negative_powers).to(powers.dtype)


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
    if dtype is not None:   # summed in the requested dtype, as PyTorch does (not summed, then cast)
        return np.asarray(np.sum(self, dtype=dtype.np))
    # ufunc.reduce skips np.sum's Python dispatch layer (a few us per call on small tensors)
    # integers and bools sum in int64, as in PyTorch (numpy would pick uint64 for unsigned inputs)
    return _add_reduce(self, axis=None) if self.dtype.kind == "f" else np.sum(self, dtype=np.int64)


@forward("sum.dim_IntList")
def _sum_dim_fwd(self, dim, keepdim=False, dtype=None):
    if dtype is None and self.dtype.kind != "f":
        return np.sum(self, axis=normalize_dims(dim, self.ndim), keepdims=keepdim, dtype=np.int64)
    if dtype is None or dtype.np == self.dtype:
        return _np_sum(self, normalize_dims(dim, self.ndim), keepdim)
    return np.sum(self, axis=normalize_dims(dim, self.ndim), keepdims=keepdim, dtype=dtype.np)


@forward("mean", float_only=True)
def _mean_fwd(self, dtype=None):
    return np.mean(self)


@forward("mean.dim", float_only=True)
def _mean_dim_fwd(self, dim, keepdim=False, dtype=None):
    return _np_mean(self, normalize_dims(dim, self.ndim), keepdim)


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

        def __repr__(self) -> str:   # PyTorch's layout, so printed results read the same
            return f"symgrad.return_types.{type(self).__name__}(\nvalues={self[0]!r},\nindices={self[1]!r})"

        __str__ = __repr__

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


def view(input, *shape) -> Tensor:
    """PyTorch's ``view``: the same memory in another shape (ViewBackward0); an error when the strides do
    not allow it without a copy (``reshape`` copies then)."""
    t = as_tensor(input)
    size = _size_arg(shape)
    if not t._data.flags.c_contiguous and not _viewable(t._data, size):
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one "
                           "dimension spans across two contiguous subspaces). Use .reshape(...) instead.")
    return _call("view", t, size)


def _viewable(a: np.ndarray, size: tuple) -> builtins.bool:
    """Whether ``a`` can take shape ``size`` without a copy (an invalid size is the op's own error)."""
    known = builtins.int(np.prod([s for s in size if s != -1]))
    if size.count(-1) == 1 and known:
        size = tuple(a.size // known if s == -1 else s for s in size)
    if builtins.int(np.prod(size)) != a.size:
        return True
    probe = a.view()
    try:
        probe.shape = size
    except AttributeError:
        return False
    return True


@forward("_to_copy")
def _to_copy_fwd(self, dtype=None):
    return self.astype(dtype.np) if dtype is not None else self.copy()


def to(input, *args, dtype=None, device=None, copy: bool = False, non_blocking: bool = False,
       memory_format=None) -> Tensor:
    """Convert to a dtype (ToCopyBackward0); a no-op when the dtype already matches.

    Takes PyTorch's forms: ``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``;
    the device must be the CPU.
    """
    flags = [a for a in args if isinstance(a, builtins.bool)]   # to(dtype, non_blocking, copy)
    if len(flags) > 1:
        copy = flags[1]
    for a in args:
        if isinstance(a, builtins.bool):
            continue
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, _device.device) or (isinstance(a, str) and a.split(":")[0] in _device._KNOWN_TYPES):
            device = a
        elif isinstance(a, builtins.int):
            device = a   # a device ordinal: refused below
        elif a is not None:
            dtype = a
    if device is not None:
        _device.check_device(device, "Tensor.to() device")
    t = as_tensor(input)
    d = t.dtype if dtype is None else _dt.to_dtype(dtype)
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


# PyTorch's names of dtypes in its matrix-product errors: the C type, and the ScalarType
_C_TYPE = {"float32": "float", "float64": "double", "float16": "c10::Half", "int64": "long int", "int32": "int",
           "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "bool": "bool"}
_SCALAR_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long", "int32": "Int",
                "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}
_NO_PROMOTION = (". Matrix products do not promote dtypes, as in PyTorch: cast one operand to the other's "
                 "dtype first (b.to(a.dtype))")


def _c_type(t: Tensor) -> str:
    return _C_TYPE.get(t.dtype.name, t.dtype.name)


def _scalar_type(t: Tensor) -> str:
    return _SCALAR_TYPE.get(t.dtype.name, t.dtype.name)


def _same_dtype(op: str, a: Tensor, b: Tensor) -> None:
    """PyTorch's refusal of a matrix product of two dtypes (numpy would promote: a float32 @ float64 that
    promoted here gave float64 where PyTorch raises)."""
    if a.dtype is b.dtype:
        return
    if op == "mm":
        msg = f"expected m1 and m2 to have the same dtype, but got: {_c_type(a)} != {_c_type(b)}"
    elif op == "mv":
        # PyTorch names the vector, the matrix, the vector
        msg = (f"addmv input tensors must have the same dtype, but got {_scalar_type(b)}, {_scalar_type(a)}, and "
               f"{_scalar_type(b)}")
    elif op == "dot":
        msg = f"dot : expected both vectors to have same dtype, but found {_scalar_type(a)} and {_scalar_type(b)}"
    elif op == "bmm":
        msg = f"expected scalar type {_scalar_type(a)} but found {_scalar_type(b)}"
    else:
        msg = f"both inputs should have same dtype. Got {_scalar_type(a)} and {_scalar_type(b)}"
    raise RuntimeError(msg + _NO_PROMOTION)


def numpy_promoted(*operands) -> list:
    """Operands of a product called through numpy (``numpy.matmul``, ``numpy.einsum``...) as tensors of one
    dtype: numpy promotes where PyTorch's products raise."""
    ts = [as_tensor(o) for o in operands]
    if len({t.dtype for t in ts}) > 1:
        common = _dt.result_type(*ts)
        ts = [t if t.dtype is common else to(t, common) for t in ts]
    return ts


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
    _same_dtype("mm", a, b)
    return _call("mm", a, b)


def mv(input, vec) -> Tensor:
    """Matrix-vector product (MvBackward0)."""
    a, v = as_tensor(input), as_tensor(vec)
    if a.ndim != 2 or v.ndim != 1 or a.shape[1] != v.shape[0]:
        raise _shapes_error("mv", a, v, "expected a [n, m] matrix and an [m] vector")
    _same_dtype("mv", a, v)
    return _call("mv", a, v)


def dot(input, tensor) -> Tensor:
    """Inner product of two 1-D tensors (DotBackward0)."""
    a, b = as_tensor(input), as_tensor(tensor)
    if a.ndim != 1 or b.ndim != 1 or a.shape[0] != b.shape[0]:
        raise _shapes_error("dot", a, b, "expected two 1-D tensors of the same size")
    _same_dtype("dot", a, b)
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
    _same_dtype("bmm", a, b)
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
    if a.dtype is not b.dtype:
        # the product PyTorch's matmul reaches raises: dot, mv, mm (a batch folded into rows), or bmm
        if a.ndim == 1 and b.ndim == 1:
            _same_dtype("dot", a, b)
        if b.ndim == 1:
            _same_dtype("mv", a, b)
        _same_dtype("mm" if b.ndim == 2 else "bmm", a, b)
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
        if x.ndim != len(ref) or builtins.any(x.shape[i] != ref[i] for i in range(len(ref)) if i != d):
            raise RuntimeError(f"cat: sizes of tensors must match except in dimension {d}; tensor 0 has shape "
                               f"{ref} and tensor {k} has shape {list(x.shape)}")
    return _call("cat", ts, d)


concat = concatenate = cat


def contiguous(input, memory_format=None) -> Tensor:
    """The tensor itself when its elements are in row-major order, else a row-major copy (CloneBackward0),
    so that ``t.contiguous().is_contiguous()`` holds as in PyTorch."""
    t = as_tensor(input)
    return t if t.is_contiguous() else clone(t)


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


def _exclusive_prod_differentiable(x: Tensor, dim: int) -> Tensor:
    """The product of the other elements along ``dim``, as ops (so differentiable again): the cumulative
    products before and after each element, multiplied.  Exact with zeros: nothing divides by them."""
    dim = _check_dim(dim, x.ndim, "prod")
    n = x.shape[dim]
    if n <= 1:
        return Tensor._wrap(np.ones_like(x._data))
    ones = Tensor._wrap(np.ones(tuple(1 if d == dim else s for d, s in enumerate(x.shape)), x._data.dtype))
    before = cumprod(cat([ones, narrow(x, dim, 0, n - 1)], dim), dim)
    after = flip(cumprod(cat([ones, flip(narrow(x, dim, 1, n - 1), (dim,))], dim), dim), (dim,))
    return before * after


def prod_backward(grad: Tensor, self: Tensor, dim, keepdim) -> Tensor:
    if self.ndim == 0:  # a 0-d tensor reduced over dim 0 or -1 is itself: gradient 1
        return grad * Tensor._wrap(np.ones_like(self._data))
    _refuse_when_traced(self, "the gradient of prod")
    g = _unsqueeze_dims(grad, tuple(self.shape), dim, keepdim)
    if (self._data == 0).any():  # result / self would divide 0 by 0
        return g * _exclusive_prod_differentiable(self, dim)
    return g * prod(self, dim, keepdim=True) / self


def prod_backward_all(grad: Tensor, self: Tensor) -> Tensor:
    _refuse_when_traced(self, "the gradient of prod")
    if (self._data == 0).any():
        return expand(grad, tuple(self.shape)) * reshape(
            _exclusive_prod_differentiable(reshape(self, (-1,)), 0), tuple(self.shape))
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
    # the trailing Ellipsis keeps a 0-d result a view (a bare index would give numpy a scalar copy)
    return self[(builtins.slice(None),) * dim + (index, Ellipsis)]


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
    return tuple(self[(builtins.slice(None),) * dim + (k, Ellipsis)] for k in range(self.shape[dim]))


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
    if builtins.any(_is_advanced(i) for i in idx):
        if not is_numpy_face(t) and builtins.any(isinstance(i, builtins.slice) and i.step is not None and i.step < 0
                                        for i in idx):
            raise ValueError("step must be greater than zero")
        key = _index_key(idx if len(idx) > 1 else idx[0])
        try:
            np.empty(t.shape, dtype=np.bool_)[_index_arg(key)]
        except IndexError as exc:
            raise IndexError(f"index {idx!r} does not fit a tensor of shape {list(t.shape)}: {exc}") from None
        return _call("index.Tensor", t, key)
    numpy_face = is_numpy_face(t)  # numpy's negative-step slices; torch refuses them
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
            if step < 0:
                if not numpy_face:
                    raise ValueError("step must be greater than zero")
                out = _negative_step_slice(out, dim, start, stop, step)
            elif (start, stop, step) != (0, out.shape[dim], 1):
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


def _negative_step_slice(t: Tensor, dim: int, start: int, stop: int, step: int) -> Tensor:
    """numpy's ``t[start:stop:step]`` along ``dim`` with ``step < 0`` (``start``/``stop`` from
    ``slice.indices``): reverse the axis, then take an ordinary positive-step slice of the reversed axis."""
    n = t.shape[dim]
    count = len(range(start, stop, step))
    if count == 0:
        return slice_op(t, dim, 0, 0, 1)
    last = start + (count - 1) * step          # the smallest position taken
    rev = flip(t, (dim,))                      # position p of t is position n - 1 - p of rev
    lo, hi = n - 1 - start, n - last
    if (lo, hi, -step) == (0, n, 1):
        return rev
    return slice_op(rev, dim, lo, hi, -step)


# --- in-place ops ---------------------------------------------------------------------------

def _check_inplace_leaf(t: Tensor, recorded: builtins.bool | None = None) -> None:
    """PyTorch's refusals of an in-place op on ``t``; ``recorded``: whether autograd records it (None:
    whether ``t`` itself requires grad in grad mode)."""
    if t._vc is INFERENCE_COUNTER and not STATE.inference:
        raise RuntimeError(ERR_INFERENCE_INPLACE)
    if STATE.enabled and t._grad_fn is None and t._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    views.check_inplace(t, STATE.enabled and t.requires_grad if recorded is None else recorded)


def _records(t: Tensor, others) -> builtins.bool:
    """Whether autograd records an in-place op on ``t`` with the tensors ``others``."""
    return STATE.enabled and (t.requires_grad or builtins.any(isinstance(a, Tensor) and a.requires_grad
                                                              for a in others))


def _tracing() -> builtins.bool:
    rec = registry._recorder
    return rec is not None and rec.records_graph


def _write_inplace(t: Tensor, result: Tensor, op_name: str) -> Tensor:
    """Copy an out-of-place result into ``t`` and move ``t``'s history onto the result's.

    For a view, the root base is rebased instead (:mod:`symgrad.ops.views`) when autograd records the
    op or a trace follows it; the view then regenerates its ``grad_fn`` from the base's."""
    data = result._data
    if data.dtype != t._data.dtype and data.dtype.kind == "f" and t._data.dtype.kind != "f":
        raise RuntimeError(f"{op_name}: result type {_dt.from_numpy_dtype(data.dtype).name} can't be cast to "
                           f"the desired output type {t.dtype.name}")
    if data.shape != t._data.shape:
        raise RuntimeError(f"{op_name}: output with shape {list(t.shape)} doesn't match the broadcast shape "
                           f"{list(data.shape)}")
    info = t._view_info
    if info is not None and (result._grad_fn is not None or _tracing()):
        return _write_through_view(t, info, result)
    old_node, old_nr = t._grad_fn, t._output_nr
    np.copyto(t._data, data, casting="unsafe")
    t._version_counter.value += 1
    _saved_output_is(result, t)
    if registry._recorder is not None:
        registry._recorder.rebind(t, result)
    if result._grad_fn is not None:
        t._grad_fn = result._grad_fn
        t._output_nr = result._output_nr
        views.move_retained_grad(t, old_node, old_nr)
    if result._grad_fn is not None or _tracing():
        views.mark_stale(t, result._grad_fn is not None)
    return t


def _write_through_view(t: Tensor, info, result: Tensor) -> Tensor:
    """Write a view's new value into its base's memory and rebase the base onto ``CopySlices``."""
    base = info.base
    if result._data.dtype != t._data.dtype:
        result = to(result, t.dtype)
    new_base = _call("copy_slices", _alias_for_inplace(base, False), result, views.written_region(t))
    old_node, old_nr = base._grad_fn, base._output_nr
    np.copyto(t._data, result._data, casting="unsafe")
    t._version_counter.value += 1
    _saved_output_is(result, t)
    if registry._recorder is not None:
        registry._recorder.rebind(base, new_base)
    recorded = new_base._grad_fn is not None
    if recorded:
        base._grad_fn, base._output_nr = new_base._grad_fn, new_base._output_nr
        views.move_retained_grad(base, old_node, old_nr)
    old_view_node, old_view_nr = t._grad_fn, t._output_nr
    views.mark_stale(base, recorded)
    if recorded and t._retains_grad:
        views.regenerate(t)     # now, so that its retained gradient moves to the new node
        views.move_retained_grad(t, old_view_node, old_view_nr)
    return t


def _saved_output_is(result: Tensor, t: Tensor) -> None:
    """An op that saved its output (``exp_``, ``sigmoid_``) saved ``t`` itself, as in PyTorch: a later
    in-place change of ``t`` makes its backward raise the version error."""
    node = result._grad_fn
    saved = getattr(node, "_saved", None) if node is not None else None
    if not saved:
        return
    for sv in saved.values():
        if isinstance(sv, SavedVariable) and sv.is_output and sv.data is result._data:
            sv.counter, sv.data = t._version_counter, t._data
            sv.version = sv.counter.value


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
    recorded = _records(t, args)
    _check_inplace_leaf(t, recorded)
    # the old value is copied when a node may save it (the write would change it under the node)
    return _write_inplace(t, fn(_alias_for_inplace(t, recorded), *args), name)


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
    """``t[idx] = value``: CopySlices for basic indexing, IndexPutBackward0 for advanced indexing, as in
    PyTorch (on a view, the write rebases the view's base)."""
    idx = _index_key(idx)
    if not is_numpy_face(t) and builtins.any(isinstance(i, builtins.slice) and i.step is not None and i.step < 0
                                    for i in (idx if isinstance(idx, tuple) else (idx,))):
        raise ValueError("step must be greater than zero")  # PyTorch's refusal; numpy-face values write
    v = _operand(value)
    if isinstance(v, Tensor) and v._data.dtype != t._data.dtype:
        _check_index_put_dtype(t, idx, v)
        v = to(v, t.dtype)
    recorded = _records(t, (v,))
    _check_inplace_leaf(t, recorded)
    tracing = registry._recorder is not None
    mask = _whole_mask(t, idx)
    if tracing and mask is not None and t._data.dtype.kind == "f" and \
            (_is_number(v) or (isinstance(v, Tensor) and v.ndim == 0)):
        # t[mask] = v with a mask of t's own shape is where(mask, v, t): a trace can record it even when the
        # mask comes from the inputs (the gathered t[mask] would have a shape that depends on the values)
        _write_inplace(t, where(mask, v, _alias_for_inplace(t, False)), "setitem")
        return
    if tracing or recorded or (t._view_info is not None and _tracing()):
        advanced = builtins.any(_is_advanced(i) for i in (idx if isinstance(idx, tuple) else (idx,)))
        if advanced:  # PyTorch records IndexPutBackward0 here, CopySlices for basic indexing
            if is_numpy_face(t) and isinstance(v, Tensor):
                v = _last_writes_only(t, idx, v)
            result = _call("index_put", _alias_for_inplace(t, False), idx, v, False)
        else:
            result = _call("copy_slices", _alias_for_inplace(t, False), v, idx)
        _write_inplace(t, result, "setitem")
        return
    t._data[_index_arg(idx)] = v._data if isinstance(v, Tensor) else v
    t._version_counter.value += 1


def _check_index_put_dtype(t: Tensor, idx, v: Tensor) -> None:
    """PyTorch's ``t[idx] = v`` casts ``v`` when ``idx`` is basic (a copy into a view), but an advanced
    index is ``index_put_``, which refuses another dtype -- unless it is one bool mask and ``v`` one
    element (``masked_fill_``, which casts).  numpy-face values cast, as numpy."""
    if is_numpy_face(t):
        return
    items = idx if isinstance(idx, tuple) else (idx,)
    # a 0-d integer tensor (or array) indexes as an int; a 0-d bool tensor is still a mask
    tensors = [i for i in items if isinstance(i, (Tensor, np.ndarray, list))
               and (np.ndim(i._data if isinstance(i, Tensor) else i) > 0
                    or (i._data if isinstance(i, Tensor) else np.asarray(i)).dtype == np.bool_)]
    if not tensors:
        return
    one = tensors[0]
    one_dtype = (one._data if isinstance(one, Tensor) else np.asarray(one)).dtype
    if len(tensors) == 1 and one_dtype == np.bool_ and np.ndim(one._data if isinstance(one, Tensor) else one) > 0 \
            and v._data.size == 1:
        return
    raise RuntimeError(f"Index put requires the source and destination dtypes match, got {_scalar_type(t)} for the "
                       f"destination and {_scalar_type(v)} for the source. Cast the value to the destination's "
                       f"dtype first (x[idx] = y.to(x.dtype))")


def _whole_mask(t: Tensor, idx):
    """The bool tensor ``idx`` (alone, or alone in a tuple) when it has ``t``'s shape; else None."""
    if isinstance(idx, tuple) and len(idx) == 1:
        idx = idx[0]
    if isinstance(idx, Tensor) and idx._data.dtype == np.bool_ and idx._data.shape == t._data.shape:
        return idx
    return None


def _last_writes_only(t: Tensor, idx, v: Tensor) -> Tensor:
    """numpy's ``t[idx] = v``: of repeated positions the last write wins, so only its value may get a
    gradient (PyTorch's IndexPutBackward0 hands every duplicate the gradient)."""
    shape = np.empty(t.shape, dtype=np.bool_)[_index_arg(idx)].shape
    extra = v.ndim - len(shape)
    if extra > 0:
        if builtins.any(d != 1 for d in v.shape[:extra]):
            return v  # does not fit: index_put raises numpy's broadcasting error
        v = reshape(v, tuple(v.shape[extra:]))  # numpy drops the leading 1s of such values
    return _call("keep_last_writes", expand(v, shape) if tuple(v.shape) != shape else v, tuple(t.shape), idx)


def _index_key(idx):
    """An indexing key with lists made arrays but tensors kept (a tracer records them as values)."""
    if isinstance(idx, tuple):
        return tuple(_index_key(i) for i in idx)
    if isinstance(idx, list):
        if builtins.any(isinstance(i, Tensor) for i in idx):
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

# Structural functions with PyTorch's names and signatures.  flip is an op of its own; the rest are
# exact decompositions into ops that have rules (slice, cat, expand, reshape, index, where, ...), so
# they need no derivative of their own and compile through those ops' lowerings.

@forward("flip")
def _flip_fwd(self, dims):
    return np.flip(self, axis=tuple(dims)).copy() if len(dims) else np.array(self, copy=True)


def flip(input, dims) -> Tensor:
    """Reverse the order of elements along ``dims`` (FlipBackward0)."""
    t = as_tensor(input)
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    norm = tuple(_check_dim(int(d), t.ndim, "flip") for d in dims)
    if len(set(norm)) != len(norm):
        raise RuntimeError(f"flip: dims {list(dims)} has a repeated dim")
    return _call("flip", t, norm)


def fliplr(input) -> Tensor:
    t = as_tensor(input)
    if t.ndim < 2:
        raise RuntimeError("fliplr: input must be >= 2-d.")
    return flip(t, (1,))


def flipud(input) -> Tensor:
    t = as_tensor(input)
    if t.ndim < 1:
        raise RuntimeError("flipud: input must be >= 1-d.")
    return flip(t, (0,))


def _roll_one(t: Tensor, shift: int, dim: int) -> Tensor:
    n = t.shape[dim]
    s = shift % n if n else 0
    if s == 0:
        return t
    return cat([slice_op(t, dim, n - s, n, 1), slice_op(t, dim, 0, n - s, 1)], dim)


def roll(input, shifts, dims=None) -> Tensor:
    """Shift elements along ``dims`` cyclically (over the flattened tensor when ``dims`` is None)."""
    t = as_tensor(input)
    shifts = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: shifts {list(shifts)} needs dims of the same length")
        flat = reshape(t, (-1,))
        return reshape(_roll_one(flat, int(shifts[0]), 0), tuple(t.shape))
    dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if len(dims) != len(shifts):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(dims)}")
    for s, d in zip(shifts, dims):
        t = _roll_one(t, int(s), _check_dim(int(d), t.ndim, "roll"))
    return t


def tile(input, dims) -> Tensor:
    """Repeat the whole tensor ``dims[i]`` times along each dimension (numpy's and torch's tile)."""
    t = as_tensor(input)
    reps = (int(dims),) if isinstance(dims, (int, np.integer)) else tuple(int(r) for r in dims)
    if builtins.any(r < 0 for r in reps):
        raise RuntimeError(f"tile: repeats {list(reps)} must be non-negative")
    nd = builtins.max(len(reps), t.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    shape = (1,) * (nd - t.ndim) + tuple(t.shape)
    # (s0, s1) -> (1, s0, 1, s1) -> (r0, s0, r1, s1) -> (r0*s0, r1*s1): every copy is a broadcast read
    interleaved = tuple(x for s in shape for x in (1, s))
    wide = expand(reshape(t, interleaved), tuple(x for r, s in zip(reps, shape) for x in (r, s)))
    return reshape(wide, tuple(r * s for r, s in zip(reps, shape)))


def _static_values(x, what: str) -> np.ndarray:
    """The values of an argument that decides a result's shape (repeat counts, split points): a tensor
    traced as a compiled function's input can't be one, since the graph would bake in this call's values."""
    if isinstance(x, Tensor):
        rec = registry._recorder
        if rec is not None and rec.is_traced(x):
            rec.refuse(f"{what} given as a traced tensor is not supported in a compiled function: the "
                       f"result's shape depends on its values (pass a list or a numpy array)")
        return x._data
    return np.asarray(x)


def repeat_interleave(input, repeats, dim=None) -> Tensor:
    """Repeat each element ``repeats`` times (an int, or one count per element) along ``dim``."""
    t = as_tensor(input)
    if dim is None:
        t, dim = reshape(t, (-1,)), 0
    dim = _check_dim(int(dim), t.ndim, "repeat_interleave")
    n = t.shape[dim]
    counts = _static_values(repeats, "repeat_interleave's repeats")
    if counts.dtype.kind not in "iub":
        raise TypeError(f"repeat_interleave: repeats must be integers, got {counts.dtype}")
    if np.any(counts < 0):
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    if counts.ndim == 0 or counts.size == 1:
        r = int(counts.reshape(-1)[0]) if counts.size else 0
        shape = tuple(t.shape)
        # (.., n, ..) -> (.., n, 1, ..) -> (.., n, r, ..) -> (.., n*r, ..)
        wide = expand(unsqueeze(t, dim + 1), shape[:dim + 1] + (r,) + shape[dim + 1:])
        return reshape(wide, shape[:dim] + (n * r,) + shape[dim + 1:])
    if counts.shape != (n,):
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim ({n}), "
                           f"got {counts.shape[0]}")
    source = np.repeat(np.arange(n), counts)
    return _call("index.Tensor", t, (builtins.slice(None),) * dim + (source,) if dim else source)


def _pad_pairs(value, ndim: int, what: str) -> list[tuple]:
    """numpy's pad-width / constant-value broadcasting: scalar, (before, after), or one pair per axis."""
    arr = np.asarray(value, dtype=object)
    try:
        pairs = np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ValueError(f"numpy.pad: {what} {value!r} does not fit an array of {ndim} dimensions "
                         f"(give a scalar, a (before, after) pair, or one pair per axis)") from None
    return [tuple(p) for p in pairs.tolist()]


_PAD_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")


def _numpy_pad(input, pad_width, mode="constant", constant_values=0, reflect_type="even") -> Tensor:
    """numpy.pad for the modes whose result is a copy of input values: constant, edge, reflect,
    symmetric, wrap (axis by axis, as numpy does, so corners follow numpy)."""
    t = as_tensor(input)
    widths = _pad_pairs(pad_width, t.ndim, "pad_width")
    for b, a in widths:
        if int(b) != b or int(a) != a or b < 0 or a < 0:
            raise ValueError(f"numpy.pad: pad_width {pad_width!r} must be non-negative integers")
    if mode == "constant":
        values = _pad_pairs(constant_values, t.ndim, "constant_values")
        for d, ((b, a), (cb, ca)) in enumerate(zip(widths, values)):
            parts = []
            for width, c in ((int(b), cb), (0, None), (int(a), ca)):
                if c is None:
                    parts.append(t)
                elif width:
                    shape = tuple(t.shape[:d]) + (width,) + tuple(t.shape[d + 1:])
                    parts.append(as_tensor(np.full(shape, c, dtype=t._data.dtype)))
            t = cat(parts, d) if len(parts) > 1 else t
        return t
    if mode in _PAD_INDEX_MODES:
        if reflect_type != "even":
            raise ValueError(f"numpy.pad: reflect_type={reflect_type!r} is not supported on symgrad tensors "
                             f"(only 'even')")
        for d, (b, a) in enumerate(widths):
            if b == 0 and a == 0:
                continue
            if t.shape[d] == 0:
                raise ValueError(f"numpy.pad: can't extend empty axis {d} using mode {mode!r}")
            # which input position each output position copies: numpy's own pad of the positions
            source = np.pad(np.arange(t.shape[d]), (int(b), int(a)), mode=mode)
            t = _call("index.Tensor", t, (builtins.slice(None),) * d + (source,) if d else source)
        return t
    raise ValueError(f"numpy.pad: mode={mode!r} is not supported on symgrad tensors (supported: 'constant', "
                     f"{', '.join(repr(m) for m in _PAD_INDEX_MODES)})")


def _triangle(t: Tensor, k: int, lower: bool, op: str) -> Tensor:
    if t.ndim < 1:
        raise ValueError(f"{op}: input must be at least 1-d")
    rows, cols = (t.shape[-2], t.shape[-1]) if t.ndim >= 2 else (t.shape[-1], t.shape[-1])
    mask = np.tri(rows, cols, k, dtype=bool) if lower else ~np.tri(rows, cols, k - 1, dtype=bool)
    return where(mask, t, 0)


def tril(input, diagonal: int = 0) -> Tensor:
    """Zero the elements above the ``diagonal``-th diagonal of the last two dims."""
    t = as_tensor(input)
    if t.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return _triangle(t, int(diagonal), True, "tril")


def triu(input, diagonal: int = 0) -> Tensor:
    """Zero the elements below the ``diagonal``-th diagonal of the last two dims."""
    t = as_tensor(input)
    if t.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return _triangle(t, int(diagonal), False, "triu")


def _diagonal_positions(rows: int, cols: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    r = np.arange(builtins.max(0, -offset), rows)
    c = r + offset
    keep = (c >= 0) & (c < cols)
    return r[keep], c[keep]


def _writable_diagonal(a: np.ndarray, offset: int, dim1: int, dim2: int) -> np.ndarray:
    """``np.diagonal`` as a writable view of ``a`` (numpy's own is read-only)."""
    d = np.diagonal(a, offset, dim1, dim2)
    if d.size == 0:
        return np.zeros(d.shape, dtype=a.dtype)
    start = [builtins.slice(None)] * a.ndim
    start[dim1] = builtins.slice(builtins.max(-offset, 0), None)
    start[dim2] = builtins.slice(builtins.max(offset, 0), None)
    return np.lib.stride_tricks.as_strided(a[tuple(start)], d.shape, d.strides)


@forward("diagonal", view=True)
def _diagonal_fwd(self, offset=0, dim1=0, dim2=1):
    return _writable_diagonal(self, offset, dim1, dim2)


@forward("diagonal_backward")
def _diagonal_backward_fwd(grad_output, input_sizes, offset, dim1, dim2):
    out = np.zeros(input_sizes, dtype=grad_output.dtype)
    if out.size:
        _writable_diagonal(out, offset, dim1, dim2)[...] = grad_output
    return out


def diagonal(input, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The ``offset``-th diagonal of the ``dim1`` x ``dim2`` planes, as the last dimension (a view, as in
    PyTorch: writing into it writes into the input)."""
    t = as_tensor(input)
    if t.ndim < 2:
        raise RuntimeError(f"diagonal: input must be at least 2-d, got {t.ndim}-d")
    d1, d2 = _check_dim(int(dim1), t.ndim, "diagonal"), _check_dim(int(dim2), t.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return _call("diagonal", t, int(offset), d1, d2)


def diagonal_backward(grad, input_sizes, offset, dim1, dim2) -> Tensor:
    return _call("diagonal_backward", grad, tuple(input_sizes), offset, dim1, dim2)


def _storage_positions(a: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The offsets (in elements) of ``a``'s elements from the start of ``owner``'s memory."""
    item = a.itemsize
    pos = np.full(a.shape, (a.__array_interface__["data"][0] - owner.__array_interface__["data"][0]) // item,
                  dtype=np.intp)
    for d, (n, s) in enumerate(zip(a.shape, a.strides)):
        pos = pos + np.arange(n, dtype=np.intp).reshape((1,) * d + (n,) + (1,) * (a.ndim - d - 1)) * (s // item)
    return pos


def _memory_owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


@forward("as_strided", view=True)
def _as_strided_fwd(self, size, stride, storage_offset=None, positions=None):
    owner = _memory_owner(self)
    item = self.itemsize
    if storage_offset is None:
        storage_offset = (self.__array_interface__["data"][0] - owner.__array_interface__["data"][0]) // item
    memory = np.lib.stride_tricks.as_strided(owner, (owner.size,), (item,))
    return np.lib.stride_tricks.as_strided(memory[storage_offset:], tuple(size), tuple(s * item for s in stride))


def as_strided(input, size, stride, storage_offset=None) -> Tensor:
    """A view of ``input``'s memory with the given sizes and strides (in elements), from
    ``storage_offset`` (default: the input's own) -- PyTorch's ``as_strided`` (AsStridedBackward0).

    Its gradient adds each output element's gradient into the input element it reads, so every element
    it reads must be one of the input's (symgrad's memory is numpy's, not a separate storage)."""
    t = as_tensor(input)
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape: {len(stride)} strides for {len(size)} sizes")
    if builtins.any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: "
                           f"{list(stride)}")
    data = t._data
    owner = _memory_owner(data)
    if not (owner.flags.c_contiguous or owner.flags.f_contiguous):
        raise RuntimeError("as_strided of a tensor whose memory is not one contiguous block is not supported; "
                           "clone() it first")
    own = _storage_positions(data, owner)
    offset = int(own.min()) if storage_offset is None and data.size else int(storage_offset or 0)
    out_pos = np.full(size, offset, dtype=np.intp)
    for d, (n, s) in enumerate(zip(size, stride)):
        out_pos = out_pos + np.arange(n, dtype=np.intp).reshape((1,) * d + (n,) + (1,) * (len(size) - d - 1)) * s
    if out_pos.size and int(out_pos.max()) >= owner.size:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset} "
                           f"requiring a storage size of {int(out_pos.max()) + 1} are out of bounds for storage "
                           f"of size {owner.size}")
    flat_own = own.reshape(-1)
    order = np.argsort(flat_own, kind="stable")
    found = np.searchsorted(flat_own[order], out_pos.reshape(-1))
    found = np.minimum(found, builtins.max(flat_own.size - 1, 0))
    if out_pos.size and (flat_own.size == 0 or np.any(flat_own[order][found] != out_pos.reshape(-1))):
        raise RuntimeError(f"as_strided: the view (sizes {list(size)}, strides {list(stride)}, offset {offset}) "
                           f"reads memory outside the input of shape {list(t.shape)}; symgrad only views the "
                           "input's own elements")
    positions = np.unravel_index(order[found].reshape(size), data.shape) if data.ndim else ()
    return _call("as_strided", t, size, stride, offset, positions)


def unfold(input, dimension: int, size: int, step: int) -> Tensor:
    """``Tensor.unfold``: the slices of length ``size`` along ``dimension``, ``step`` apart, as a new last
    dimension (a view of the input)."""
    t = as_tensor(input)
    dim = _check_dim(int(dimension), builtins.max(t.ndim, 1), "unfold")
    n = t.shape[dim] if t.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {dim} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    strides = [s // t._data.itemsize for s in t._data.strides] if t.ndim else []
    shape = list(t.shape) if t.ndim else []
    count = (n - size) // step + 1
    if t.ndim:
        shape[dim], new_strides = count, strides[:]
        new_strides[dim] = strides[dim] * step
        shape.append(size)
        new_strides.append(strides[dim])
    else:
        shape, new_strides = [size], [1]
    return as_strided(t, shape, new_strides)


def diag(input, diagonal: int = 0) -> Tensor:
    """A 1-D input as the ``diagonal``-th diagonal of a square matrix; a 2-D input's diagonal."""
    t = as_tensor(input)
    k = int(diagonal)
    if t.ndim == 1:
        n = t.shape[0] + builtins.abs(k)
        r, c = _diagonal_positions(n, n, k)
        return _call("index_put_add", t, (n, n), (r, c))
    if t.ndim == 2:
        r, c = _diagonal_positions(t.shape[0], t.shape[1], k)
        return _call("index.Tensor", t, (r, c))
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {t.ndim}D")


def trace(input) -> Tensor:
    """Sum of the main diagonal of a matrix."""
    t = as_tensor(input)
    if t.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {t.ndim}")
    return sum(diagonal(t))


def atleast_1d(*tensors):
    ts = [as_tensor(x) for x in (tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                                 else tensors)]
    out = [reshape(x, (1,)) if x.ndim == 0 else x for x in ts]
    return out[0] if len(tensors) == 1 and not isinstance(tensors[0], (list, tuple)) else tuple(out)


def atleast_2d(*tensors):
    ts = [as_tensor(x) for x in (tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                                 else tensors)]
    out = [reshape(x, (1,) * (2 - x.ndim) + tuple(x.shape)) if x.ndim < 2 else x for x in ts]
    return out[0] if len(tensors) == 1 and not isinstance(tensors[0], (list, tuple)) else tuple(out)


def atleast_3d(*tensors):
    def lift(x):
        if x.ndim == 0:
            return reshape(x, (1, 1, 1))
        if x.ndim == 1:
            return reshape(x, (1, x.shape[0], 1))
        if x.ndim == 2:
            return reshape(x, tuple(x.shape) + (1,))
        return x
    ts = [as_tensor(x) for x in (tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                                 else tensors)]
    out = [lift(x) for x in ts]
    return out[0] if len(tensors) == 1 and not isinstance(tensors[0], (list, tuple)) else tuple(out)


def vstack(tensors) -> Tensor:
    """Concatenate along the first dimension, 1-D inputs as rows."""
    return cat([atleast_2d(x) for x in tensors], 0)


row_stack = vstack


def hstack(tensors) -> Tensor:
    """Concatenate along the second dimension (the first for 1-D inputs)."""
    ts = [atleast_1d(x) for x in tensors]
    return cat(ts, 0 if ts and ts[0].ndim == 1 else 1)


def dstack(tensors) -> Tensor:
    """Concatenate along the third dimension, lower-dimensional inputs lifted as numpy does."""
    return cat([atleast_3d(x) for x in tensors], 2)


def column_stack(tensors) -> Tensor:
    """1-D inputs as columns, 2-D inputs as they are, concatenated along the second dimension."""
    ts = [as_tensor(x) for x in tensors]
    return cat([reshape(x, (x.numel(), 1)) if x.ndim < 2 else x for x in ts], 1)


def _split_at(t: Tensor, bounds, dim: int) -> tuple:
    """Pieces ``t[b[i]:b[i+1]]`` along ``dim`` for the boundaries ``bounds`` (clipped as slices are)."""
    n = t.shape[dim]
    pieces = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        s, e, _ = builtins.slice(start, stop).indices(n)
        pieces.append(slice_op(t, dim, s, builtins.max(s, e), 1))
    return tuple(pieces)


def tensor_split(input, indices_or_sections, dim: int = 0) -> tuple:
    """Split into ``sections`` nearly equal parts (the first ``n % sections`` one longer), or at indices."""
    t = as_tensor(input)
    dim = _check_dim(int(dim), t.ndim, "tensor_split")
    n = t.shape[dim]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = _static_values(indices_or_sections, "tensor_split's indices_or_sections").tolist()
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got {k}")
        size, extra = divmod(n, k)
        bounds = [0]
        for i in range(k):
            bounds.append(bounds[-1] + size + (1 if i < extra else 0))
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    return _split_at(t, bounds, dim)


def split(tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """PyTorch's split: chunks of ``split_size`` (the last may be smaller), or of the listed sizes."""
    t = as_tensor(tensor)
    dim = _check_dim(int(dim), t.ndim, "split")
    n = t.shape[dim]
    if isinstance(split_size_or_sections, (int, np.integer)):
        size = int(split_size_or_sections)
        if size <= 0:
            raise RuntimeError(f"split: split_size must be positive, got {size}")
        bounds = list(range(0, n, size)) + [n] if n else [0, 0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if builtins.sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                               f"at dimension {dim}), but got split_sizes={sizes}")
        bounds = [0] + list(np.cumsum(sizes))
    pieces = _split_at(t, bounds, dim)
    views.mark_multi_output(pieces, "Split" if isinstance(split_size_or_sections, (int, np.integer))
                            else "SplitWithSizes")
    return pieces


def take(input, index) -> Tensor:
    """Elements of the flattened input at ``index`` (the result has ``index``'s shape)."""
    t = reshape(as_tensor(input), (-1,))
    idx = index if isinstance(index, Tensor) else np.asarray(index)
    return _call("index.Tensor", t, idx)


def _along_axis_index(shape: tuple, indices, dim: int) -> tuple:
    """The fancy index that picks ``indices`` along ``dim`` and matches positions on every other dim."""
    nd = len(shape)
    parts = []
    for d in range(nd):
        if d == dim:
            parts.append(indices)
        else:
            parts.append(np.arange(shape[d]).reshape((1,) * d + (-1,) + (1,) * (nd - d - 1)))
    return tuple(parts)


def take_along_dim(input, indices, dim=None) -> Tensor:
    """Values of ``input`` at ``indices`` along ``dim`` (over the flattened input when ``dim`` is None)."""
    t = as_tensor(input)
    idx_data = indices._data if isinstance(indices, Tensor) else np.asarray(indices)
    if idx_data.dtype.kind not in "iu":
        raise TypeError(f"take_along_dim: indices must be integers, got {idx_data.dtype}")
    if dim is None:
        return take(t, indices if isinstance(indices, Tensor) else idx_data.reshape(-1))
    dim = _check_dim(int(dim), t.ndim, "take_along_dim")
    if idx_data.ndim != t.ndim:
        raise RuntimeError(f"take_along_dim: input and indices should have the same number of dimensions, "
                           f"but got {t.ndim} and {idx_data.ndim}")
    shape = np.broadcast_shapes(tuple(t.shape[:dim]) + (1,) + tuple(t.shape[dim + 1:]),
                                idx_data.shape[:dim] + (1,) + idx_data.shape[dim + 1:])
    # broadcast both to a common shape outside dim (numpy's take_along_axis broadcasts the same way)
    t = expand(t, shape[:dim] + (t.shape[dim],) + shape[dim + 1:]) if tuple(t.shape[:dim] + t.shape[dim + 1:]) \
        != shape[:dim] + shape[dim + 1:] else t
    return _call("index.Tensor", t, _along_axis_index(tuple(t.shape), indices if isinstance(indices, Tensor)
                                                       else idx_data, dim))


def movedim(input, source, destination) -> Tensor:
    """Move dimensions ``source`` to positions ``destination``; the others keep their order."""
    t = as_tensor(input)
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} dims) should "
                           f"contain the same number of dims as destination ({list(dst)} dims)")
    src = tuple(_check_dim(int(d), t.ndim, "movedim") for d in src)
    dst = tuple(_check_dim(int(d), t.ndim, "movedim") for d in dst)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in source or destination")
    order = [d for d in range(t.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return t if order == list(range(t.ndim)) else permute(t, tuple(order))


moveaxis = movedim


def rot90(input, k: int = 1, dims=(0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane ``dims``, from the first axis towards the second."""
    t = as_tensor(input)
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected total rotation dims == 2, but got dims = {len(dims)}")
    if t.ndim < 2:
        raise RuntimeError(f"rot90: expected total dims >= 2, but got total dims = {t.ndim}")
    d0, d1 = _check_dim(int(dims[0]), t.ndim, "rot90"), _check_dim(int(dims[1]), t.ndim, "rot90")
    if d0 == d1:
        raise RuntimeError(f"rot90: expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k = int(k) % 4
    if k == 0:
        return t
    if k == 2:
        return flip(t, (d0, d1))
    # a quarter turn is a transpose of the plane and a flip: which axis flips gives the direction
    return transpose(flip(t, (d1,)), d0, d1) if k == 1 else flip(transpose(t, d0, d1), (d1,))


def meshgrid(*tensors, indexing: str = "ij") -> tuple:
    """Coordinate grids from 1-D tensors (``indexing="xy"`` swaps the first two output dims, as numpy's
    default does); each grid is its input broadcast, so its gradient sums over the other dims."""
    ts = [as_tensor(x) for x in (tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                                 else tensors)]
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if builtins.any(x.ndim > 1 for x in ts):
        raise RuntimeError("meshgrid: expects all tensors to be 0-d or 1-d")
    ts = [reshape(x, (-1,)) for x in ts]
    axes = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(ts)
    for x, ax in zip(ts, axes):
        shape[ax] = x.shape[0]
    grids = []
    for x, ax in zip(ts, axes):
        lifted = reshape(x, tuple(-1 if d == ax else 1 for d in range(len(ts))))
        grids.append(expand(lifted, tuple(shape)))
    return tuple(grids)


def _last_write_mask(input_sizes, indices, shape) -> np.ndarray:
    """Which entries of a write of ``shape`` through ``indices`` survive: numpy's own assignment of
    the entries' positions decides, so the mask agrees with ``out[indices] = values`` exactly."""
    positions = np.arange(int(np.prod(shape)), dtype=np.intp).reshape(shape)
    scratch = np.full(tuple(input_sizes), -1, dtype=np.intp)
    idx = _index_arg(indices)
    scratch[idx] = positions
    return scratch[idx] == positions


@forward("keep_last_writes")
def _keep_last_writes_fwd(values, input_sizes, indices):
    return np.where(_last_write_mask(input_sizes, indices, values.shape), values, np.zeros((), values.dtype))


def keep_last_writes(values, input_sizes, indices) -> Tensor:
    return _call("keep_last_writes", as_tensor(values), tuple(input_sizes), indices)



# === numpy surface: reductions, scans and sorting ===

# Scans, sorting, index results and counts with PyTorch's names and signatures; the numpy-shaped
# handlers in numpy_surface/reductions.py call these.

def _scan_fwd(scan):
    def fwd(self, dim):
        if self.ndim == 0:  # a scan of one value: the value (numpy's dtype rules still apply)
            return scan(self.reshape(1)).reshape(())
        return _np_scan(scan, self, dim)   # in PyTorch's accumulation type (float64 for float32)

    return fwd


forward("cumsum")(_scan_fwd(np.cumsum))
forward("cumprod")(_scan_fwd(np.cumprod))


@forward("cumsum_backward")
def _cumsum_backward_fwd(grad_output, dim):
    if grad_output.ndim == 0:
        return np.array(grad_output, copy=True)
    return _np_reverse_cumsum(grad_output, dim)


def _scan_input(input, dim, dtype, op: str) -> tuple[Tensor, int]:
    t = as_tensor(input)
    if dtype is not None:
        t = to(t, dtype)
    return t, _check_dim(dim, t.ndim, op)


def cumsum(input, dim: int, *, dtype=None) -> Tensor:
    """Cumulative sum along ``dim`` (CumsumBackward0)."""
    t, dim = _scan_input(input, dim, dtype, "cumsum")
    return _call("cumsum", t, dim)


def cumsum_backward(grad, dim: int) -> Tensor:
    """The reversed cumulative sum ``out[j] = sum(grad[j:])`` along ``dim``: cumsum's gradient."""
    return _call("cumsum_backward", as_tensor(grad), dim)


def cumprod(input, dim: int, *, dtype=None) -> Tensor:
    """Cumulative product along ``dim`` (CumprodBackward0); the gradient is exact with zeros."""
    t, dim = _scan_input(input, dim, dtype, "cumprod")
    return _call("cumprod", t, dim)


def _move_to_last(t: Tensor, dim: int) -> Tensor:
    dim = _check_dim(dim, t.ndim, "cumprod")
    if dim == t.ndim - 1:
        return t
    return permute(t, [d for d in range(t.ndim) if d != dim] + [dim])


def _move_from_last(t: Tensor, dim: int) -> Tensor:
    dim = _check_dim(dim, t.ndim, "cumprod")
    if dim == t.ndim - 1:
        return t
    order = list(range(t.ndim - 1))
    order.insert(dim, t.ndim - 1)
    return permute(t, order)


@forward("cumprod_backward")
def _cumprod_backward_fwd(grad_output, self, dim):
    grad_output = np.broadcast_to(grad_output, self.shape)
    return _np_cumprod_backward(grad_output, self, dim, _scan_fwd(np.cumprod)(self, dim))


def cumprod_backward(grad, self, dim: int) -> Tensor:
    """cumprod's gradient along ``dim`` (an O(n) scan, exact where inputs are 0)."""
    return _call("cumprod_backward", as_tensor(grad), as_tensor(self), dim)


def _cumprod_partials(x: Tensor) -> Tensor:
    """Differentiable ``D[..., j, k] = d cumprod(x)[k] / d x[j]`` along the last dim: the cumprod of ``x``
    with ``x[j]`` replaced by 1, kept for ``k >= j`` (no division, so exact with zeros)."""
    n = x.shape[-1]
    rows = where(Tensor._wrap(np.eye(n, dtype=bool)), 1.0, unsqueeze(x, -2))
    return cumprod(rows, -1) * Tensor._wrap(np.triu(np.ones((n, n), dtype=x._data.dtype))), rows


def cumprod_jvp(t: Tensor, self: Tensor, dim: int) -> Tensor:
    """``J t`` for ``J`` the Jacobian of cumprod along ``dim`` (differentiable; n x n per row)."""
    if self.ndim == 0:
        return t * 1.0
    t = expand(t, tuple(self.shape)) if tuple(t.shape) != tuple(self.shape) else t
    partials, _ = _cumprod_partials(_move_to_last(self, dim))
    return _move_from_last(sum(unsqueeze(_move_to_last(t, dim), -1) * partials, -2), dim)


def cumprod_double_backward(gg: Tensor, grad: Tensor, self: Tensor, dim: int) -> Tensor:
    """Gradient w.r.t. ``self`` of ``sum(gg * cumprod_backward(grad, self, dim))`` (differentiable)."""
    if self.ndim == 0:
        return gg * 0.0
    n = self.shape[dim]
    x = _move_to_last(self, dim)
    g2, g = (_move_to_last(expand(a, tuple(self.shape)) if tuple(a.shape) != tuple(self.shape) else a, dim)
             for a in (gg, grad))
    _, rows = _cumprod_partials(x)
    upper = Tensor._wrap(np.triu(np.ones((n, n), dtype=self._data.dtype)))
    d_rows = cumprod_backward(unsqueeze(g2, -1) * unsqueeze(g, -2) * upper, rows, -1)
    off_diagonal = Tensor._wrap(1.0 - np.eye(n, dtype=self._data.dtype))
    return _move_from_last(sum(d_rows * off_diagonal, -2), dim)


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:
    """``n``-th forward difference along ``dim``, after putting ``prepend``/``append`` around ``input``;
    on bool tensors the difference is "not equal", as in PyTorch and numpy."""
    t = as_tensor(input)
    if t.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    dim = _check_dim(dim, t.ndim, "diff")
    pieces = [as_tensor(p) for p in (prepend, None, append) if p is not None]
    if pieces:
        pieces.insert(0 if prepend is None else 1, t)
        t = cat(pieces, dim)
    for _ in range(n):
        length = t.shape[dim]
        if length == 0:
            break
        later, earlier = slice_op(t, dim, 1, length, 1), slice_op(t, dim, 0, length - 1, 1)
        t = ne(later, earlier) if t.dtype.name == "bool" else sub(later, earlier)
    return t


@forward("argsort")
def _argsort_fwd(self, dim=-1, descending=False):
    if self.ndim == 0:
        return np.zeros((), np.int64)
    if not descending:
        return np.argsort(self, axis=dim, kind="stable").astype(np.int64, copy=False)
    # stable descending (ties in their original order): sort the reversed array, map the positions back
    n = self.shape[dim]
    flipped = np.argsort(np.flip(self, dim), axis=dim, kind="stable")
    return np.ascontiguousarray(np.flip(n - 1 - flipped, dim)).astype(np.int64, copy=False)


def _arg_extremum_fwd(np_fn):
    def fwd(self, dim=None, keepdim=False):
        if self.ndim == 0:
            return np.zeros((), np.int64)
        return np.asarray(np_fn(self, axis=dim, keepdims=keepdim), dtype=np.int64)

    return fwd


forward("argmax")(_arg_extremum_fwd(np.argmax))
forward("argmin")(_arg_extremum_fwd(np.argmin))


def argsort(input, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Tensor:
    """Indices that sort ``input`` along ``dim`` (always a stable sort); no gradient."""
    t = as_tensor(input)
    return _call("argsort", t, _check_dim(dim, t.ndim, "argsort"), bool(descending))


def argmax(input, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the largest element (flattened when ``dim`` is None); no gradient."""
    t = as_tensor(input)
    return _call("argmax", t, None if dim is None else _check_dim(dim, t.ndim, "argmax"), bool(keepdim))


def argmin(input, dim=None, keepdim: bool = False) -> Tensor:
    """Index of the smallest element (flattened when ``dim`` is None); no gradient."""
    t = as_tensor(input)
    return _call("argmin", t, None if dim is None else _check_dim(dim, t.ndim, "argmin"), bool(keepdim))


return_types.sort = type("sort", (return_types._ValuesIndices,), {})


@forward("bincount")
def _bincount_fwd(self, weights=None, minlength=0):
    if self.ndim != 1:
        raise RuntimeError(f"bincount only supports 1-d non-negative integral inputs (got {self.ndim} dimensions)")
    out = np.bincount(self, weights, minlength)
    return out.astype(np.int64 if weights is None else weights.dtype, copy=False)


def bincount(input, weights=None, minlength: int = 0) -> Tensor:
    """Count of each value of a 1-d integer tensor (weighted: the sum of the weights); the gradient
    w.r.t. ``weights`` is the incoming gradient at each weight's bin."""
    t = as_tensor(input)
    if t.dtype.is_floating_point or t.dtype.name == "bool":
        raise RuntimeError(f"bincount only supports 1-d non-negative integral inputs (got {t.dtype})")
    w = None if weights is None else as_tensor(weights)
    rec = registry._recorder
    if rec is not None and (rec.is_traced(t) or (w is not None and rec.is_traced(w))):
        # the graph's shapes are fixed: the length seen now must be the length of every later call
        length = builtins.max(int(minlength), int(t._data.max()) + 1 if t._data.size else 0)
        return _call("_bincount_fixed", t, w, int(minlength), length)
    return _call("bincount", t, w, int(minlength))


@forward("_bincount_fixed")
def _bincount_fixed_fwd(self, weights, minlength, length):
    out = _bincount_fwd(self, weights, minlength)
    if out.shape[0] != length:
        raise ValueError(f"bincount in a compiled function: this call's result has {out.shape[0]} bins, the traced "
                         f"one had {length}; pass minlength= at least the largest value + 1 so that the "
                         "length is fixed")
    return out


@forward("isnan")
def _isnan_fwd(self):
    return np.isnan(self) if self.dtype.kind in "fc" else np.zeros(self.shape, dtype=bool)


def isnan(input) -> Tensor:
    """Where ``input`` is NaN (a bool tensor, no gradient); recorded, so a compiled graph tests each call."""
    return _call("isnan", as_tensor(input))


@forward("isinf")
def _isinf_fwd(self):
    return np.isinf(self) if self.dtype.kind in "fc" else np.zeros(self.shape, dtype=bool)


def isinf(input) -> Tensor:
    """Where ``input`` is +-inf (a bool tensor, no gradient); recorded, so a compiled graph tests each call."""
    return _call("isinf", as_tensor(input))


@forward("isfinite")
def _isfinite_fwd(self):
    return np.isfinite(self) if self.dtype.kind in "fc" else np.ones(self.shape, dtype=bool)


def isfinite(input) -> Tensor:
    """Where ``input`` is neither inf nor NaN (a bool tensor, no gradient); recorded like :func:`isnan`."""
    return _call("isfinite", as_tensor(input))


def _isnan(t: Tensor) -> Tensor:
    return isnan(t) if t.dtype.is_floating_point else Tensor._wrap(np.zeros(t.shape, dtype=bool))


def nansum(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum treating NaN as 0; NaN positions get gradient 0."""
    t = as_tensor(input)
    clean = where(_isnan(t), 0, t) if t.dtype.is_floating_point else t
    return sum(clean, dim, keepdim, dtype=dtype) if dim is not None or keepdim else sum(clean, dtype=dtype)


def nanmean(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Mean of the non-NaN elements; NaN positions get gradient 0."""
    t = as_tensor(input) if dtype is None else to(input, dtype)
    if not t.dtype.is_floating_point:
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got {t.dtype}")
    count = sum(logical_not(_isnan(t)), dim, keepdim) if dim is not None or keepdim else sum(logical_not(_isnan(t)))
    return div(nansum(t, dim, keepdim), to(count, t.dtype))


def count_nonzero(input, dim=None) -> Tensor:
    """Number of non-zero elements (over ``dim``), as int64; no gradient."""
    t = as_tensor(input)
    nonzero = ne(t, 0) if t.dtype.name != "bool" else t
    return sum(nonzero, dim) if dim is not None else sum(nonzero)



# === numpy surface: linear algebra ===

# Real linear algebra (symgrad.linalg.* and numpy.linalg.* build on these), einsum, tensordot, kron.

@forward("linalg_inv")
def _linalg_inv_fwd(A):
    return np.linalg.inv(A)


@forward("linalg_det")
def _linalg_det_fwd(A):
    return np.asarray(np.linalg.det(A))


@forward("linalg_slogdet")
def _linalg_slogdet_fwd(A):
    sign, logabsdet = np.linalg.slogdet(A)
    return np.asarray(sign), np.asarray(logabsdet)


@forward("linalg_solve", dtype_rule="promote")
def _linalg_solve_fwd(A, B):
    return np.linalg.solve(A, B)


@forward("linalg_cholesky")
def _linalg_cholesky_fwd(A, upper=False):
    return np.linalg.cholesky(A, upper=upper)


@forward("linalg_eigh")
def _linalg_eigh_fwd(A, UPLO="L"):
    w, v = np.linalg.eigh(A, UPLO=UPLO)
    return w, v


@forward("linalg_svd")
def _linalg_svd_fwd(A):
    u, s, vh = np.linalg.svd(A, full_matrices=False)
    return u, s, vh


@forward("linalg_qr")
def _linalg_qr_fwd(A):
    q, r = np.linalg.qr(A, mode="reduced")
    return q, r


def _linalg_operand(x, op: str, square: bool = True) -> Tensor:
    """A floating tensor of at least 2 dims (square when the op needs it), or PyTorch's error."""
    t = as_tensor(x)
    if not t.dtype.is_floating_point:
        raise RuntimeError(f"{op}: Expected a floating point tensor as input. Got {t.dtype.name}")
    if t.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor A must have at least 2 dimensions.")
    if square and t.shape[-1] != t.shape[-2]:
        raise RuntimeError(f"{op}: A must be batches of square matrices, but they are "
                           f"{t.shape[-2]} by {t.shape[-1]} matrices")
    return t


def linalg_inv(A) -> Tensor:
    """Inverse of a square matrix or a stack of them."""
    return _call("linalg_inv", _linalg_operand(A, "linalg.inv"))


def linalg_det(A) -> Tensor:
    """Determinant of a square matrix or a stack of them."""
    return _call("linalg_det", _linalg_operand(A, "linalg.det"))


def linalg_slogdet(A) -> tuple:
    """``(sign, log|det|)``; the sign is piecewise constant (gradient zero)."""
    return _call("linalg_slogdet", _linalg_operand(A, "linalg.slogdet"))


def linalg_solve(A, B) -> Tensor:
    """``X`` with ``A @ X = B``; a 1-D ``B`` is a vector (as in numpy 2 and PyTorch)."""
    a = _linalg_operand(A, "linalg.solve")
    b = as_tensor(B)
    if b.ndim == 1:
        if b.shape[0] != a.shape[-1]:
            raise RuntimeError(f"linalg.solve: incompatible shapes of A {list(a.shape)} and B {list(b.shape)}")
        return squeeze(_call("linalg_solve", a, unsqueeze(b, 1)), -1)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise RuntimeError(f"linalg.solve: incompatible shapes of A {list(a.shape)} and B {list(b.shape)}")
    return _call("linalg_solve", a, b)


def linalg_cholesky(A, *, upper: bool = False) -> Tensor:
    """Cholesky factor of a symmetric positive-definite matrix (reads the lower triangle, or the upper)."""
    return _call("linalg_cholesky", _linalg_operand(A, "linalg.cholesky"), bool(upper))


def linalg_eigh(A, UPLO: str = "L") -> tuple:
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix (reads the ``UPLO`` triangle)."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return _call("linalg_eigh", _linalg_operand(A, "linalg.eigh"), UPLO)


def linalg_svd(A) -> tuple:
    """The reduced SVD ``(U, S, Vh)`` of a matrix or a stack of them."""
    return _call("linalg_svd", _linalg_operand(A, "linalg.svd", square=False))


def linalg_qr(A) -> tuple:
    """The reduced QR ``(Q, R)`` of a matrix or a stack of them."""
    return _call("linalg_qr", _linalg_operand(A, "linalg.qr", square=False))


def _mT(x: Tensor) -> Tensor:
    return transpose(x, -2, -1)


def _const_like(arr: np.ndarray, like: Tensor) -> Tensor:
    return Tensor._wrap(np.asarray(arr, dtype=like._data.dtype))


def _eye_like(n: int, like: Tensor) -> Tensor:
    return _const_like(np.eye(n), like)


def _diag_embed(v: Tensor) -> Tensor:
    return unsqueeze(v, -1) * _eye_like(v.shape[-1], v)


def _read_triangle_grad(G: Tensor, upper: bool) -> Tensor:
    """The gradient w.r.t. A of a function of the symmetric matrix built from one triangle of A.

    ``G`` gives the derivative along symmetric directions; an entry off the diagonal of the read
    triangle stands for two mirrored entries (so both of G's add up), the other triangle is never read."""
    n = G.shape[-1]
    strict = np.triu(np.ones((n, n)), 1) if upper else np.tril(np.ones((n, n)), -1)
    return (G + _mT(G)) * _const_like(strict, G) + G * _eye_like(n, G)


def linalg_inv_backward(grad: Tensor, result: Tensor) -> Tensor:
    Rt = _mT(result)
    return neg(matmul(matmul(Rt, grad), Rt))


def linalg_det_backward(grad: Tensor, A: Tensor, result: Tensor) -> Tensor:
    # a recorder that builds no graph (numpy_face_eager's) runs eagerly: the values may be read
    if not getattr(registry._recorder, "records_graph", False) and _has_singular(A):
        return _det_backward_singular(grad, A)
    # Jacobi's formula; in a traced (compiled) function always this one, since the test above reads values
    scale = unsqueeze(unsqueeze(grad * result, -1), -1)
    return scale * _mT(linalg_inv(A))


def _has_singular(A: Tensor) -> bool:
    s = np.linalg.svd(A._data, compute_uv=False)
    n = A.shape[-1]
    return builtins.bool(np.any(s[..., -1] <= s[..., 0] * n * np.finfo(s.dtype).eps)) if n else False


def _det_backward_singular(grad: Tensor, A: Tensor) -> Tensor:
    """The cofactor matrix from the SVD (PyTorch's way for a singular A, where A^-1 does not exist):
    d det / dA = det(U) det(Vh) U diag(prod of the other singular values) Vh."""
    U, S, Vh = linalg_svd(A)
    k = S.shape[-1]
    eye = _const_like(np.eye(k, dtype=builtins.bool), S)
    others = prod(where(eye, 1.0, unsqueeze(S, -2)), -1)      # row i: every s_j but s_i
    # det(U) det(Vh) is +-1, constant where the decomposition is
    orientation = _const_like(np.linalg.det(U._data) * np.linalg.det(Vh._data), S)
    scale = unsqueeze(unsqueeze(grad * orientation, -1), -1)
    return scale * matmul(U * unsqueeze(others, -2), Vh)


def linalg_slogdet_backward(grads, A: Tensor) -> Tensor:
    g = grads[1] if len(grads) > 1 else None
    if g is None:
        return A * 0.0
    return unsqueeze(unsqueeze(g, -1), -1) * _mT(linalg_inv(A))


def linalg_solve_backward_B(grad: Tensor, A: Tensor) -> Tensor:
    return _call("linalg_solve", _mT(A), grad)


def linalg_solve_backward_A(grad: Tensor, A: Tensor, result: Tensor) -> Tensor:
    return neg(matmul(linalg_solve_backward_B(grad, A), _mT(result)))


def linalg_cholesky_backward(grad: Tensor, result: Tensor, upper: bool) -> Tensor:
    # PyTorch's cholesky_backward: gA = L^-T phi(L^T gL) L^-1, symmetrised; phi takes the lower
    # triangle with the diagonal halved
    L, gL = (_mT(result), _mT(grad)) if upper else (result, grad)
    n = L.shape[-1]
    phi = matmul(_mT(L), gL) * _const_like(np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n), L)
    left = _call("linalg_solve", _mT(L), phi)                       # L^-T phi
    gA = _mT(_call("linalg_solve", _mT(L), _mT(left)))              # (L^-T phi) L^-1
    return _read_triangle_grad((gA + _mT(gA)) * 0.5, upper)


def linalg_eigh_backward(grads, eigenvalues: Tensor, eigenvectors: Tensor, UPLO: str) -> Tensor:
    gL = grads[0]
    gV = grads[1] if len(grads) > 1 else None
    L, V = eigenvalues, eigenvectors
    n = L.shape[-1]
    inner = None
    if gL is not None:
        inner = _diag_embed(gL)
    if gV is not None:
        # F_ij = 1 / (L_j - L_i) off the diagonal, 0 on it (distinct eigenvalues)
        eye = _eye_like(n, L)
        F = _const_like(1.0 - np.eye(n), L) / (unsqueeze(L, -2) - unsqueeze(L, -1) + eye)
        term = F * matmul(_mT(V), gV)
        inner = term if inner is None else inner + term
    if inner is None:
        return V * 0.0
    return _read_triangle_grad(matmul(matmul(V, inner), _mT(V)), UPLO == "U")


def linalg_svd_backward(grads, U: Tensor, S: Tensor, Vh: Tensor) -> Tensor:
    gU, gS, gVh = (list(grads) + [None] * 3)[:3]
    m, n, k = U.shape[-2], Vh.shape[-1], S.shape[-1]
    core = None
    if gS is not None:
        core = _diag_embed(gS)
    S_row, S_col = unsqueeze(S, -2), unsqueeze(S, -1)
    gV = None if gVh is None else _mT(gVh)
    if gU is not None or gVh is not None:
        # the rotations of U and V: skew parts over E_ij = s_j^2 - s_i^2 (distinct singular values)
        S2 = S * S
        E = unsqueeze(S2, -2) - unsqueeze(S2, -1) + _eye_like(k, S)
        term = None
        if gU is not None:
            UtgU = matmul(_mT(U), gU)
            term = (UtgU - _mT(UtgU)) * S_row
        if gV is not None:
            VtgV = matmul(Vh, gV)
            t2 = S_col * (VtgV - _mT(VtgV))
            term = t2 if term is None else term + t2
        term = term / E
        core = term if core is None else core + term
    gA = matmul(matmul(U, core), Vh) if core is not None else None
    if gU is not None and m > k:   # the part of gU outside U's columns
        gUS = gU / S_row
        extra = matmul(gUS - matmul(U, matmul(_mT(U), gUS)), Vh)
        gA = extra if gA is None else gA + extra
    if gV is not None and n > k:   # the part of gV outside V's columns
        gVS = gV / S_row
        extra = matmul(U, _mT(gVS - matmul(_mT(Vh), matmul(Vh, gVS))))
        gA = extra if gA is None else gA + extra
    return gA if gA is not None else matmul(U, Vh) * 0.0


def linalg_qr_backward(grads, Q: Tensor, R: Tensor) -> Tensor:
    gQ = grads[0]
    gR = grads[1] if len(grads) > 1 else None
    m, n = Q.shape[-2], R.shape[-1]
    if m < n:
        raise ValueError(f"numpy.linalg.qr: the gradient of the QR of a wide matrix ({m} x {n}, fewer rows than "
                         "columns) is not supported")
    M = None
    if gR is not None:
        M = matmul(R, _mT(gR))
    if gQ is not None:
        M = neg(matmul(_mT(gQ), Q)) if M is None else M - matmul(_mT(gQ), Q)
    if M is None:
        return matmul(Q, R) * 0.0
    k = M.shape[-1]
    lower = M * _const_like(np.tril(np.ones((k, k)), -1), M)
    sym = lower + _mT(lower) + M * _eye_like(k, M)       # the lower triangle copied to the upper
    B = matmul(Q, sym)
    if gQ is not None:
        B = B + gQ
    return _mT(_call("linalg_solve", R, _mT(B)))             # B R^-T


def _array_args(fn):
    """The numpy form of a backward helper: the same composition of ops, run on arrays."""
    def wrap(v):
        if isinstance(v, np.ndarray) or isinstance(v, np.generic) or (isinstance(v, float) and
                                                                         not isinstance(v, builtins.bool)):
            return Tensor._wrap(np.asarray(v))
        if isinstance(v, (list, tuple)):
            return [wrap(x) for x in v]
        return v

    def run(*args):
        from ..autograd.grad_mode import no_grad
        with no_grad():
            out = fn(*[wrap(a) for a in args])
        return out._data if isinstance(out, Tensor) else out

    run.__name__ = fn.__name__
    return run


def _register_linalg_helpers() -> None:
    from . import formula_namespaces
    for helper in (linalg_inv_backward, linalg_det_backward, linalg_slogdet_backward, linalg_solve_backward_A,
                   linalg_solve_backward_B, linalg_cholesky_backward, linalg_eigh_backward, linalg_svd_backward,
                   linalg_qr_backward):
        formula_namespaces.register(helper.__name__, _array_args(helper), helper)


_register_linalg_helpers()


def _einsum_diagonal(t: Tensor, s: str) -> tuple[Tensor, str]:
    """Take the diagonal over every letter repeated within one operand (``ii``, ``bii``), moved back to the
    letter's first position (as PyTorch: a permute after ``diagonal``, which puts it last)."""
    while len(set(s)) < len(s):
        c = next(x for x in s if s.count(x) > 1)
        p, q = [i for i, x in enumerate(s) if x == c][:2]
        if t.shape[p] != t.shape[q]:
            raise ValueError(f"einsum: subscript {c!r} is repeated for dimensions of different sizes "
                             f"{sorted({t.shape[p], t.shape[q]})}")
        t = diagonal(t, 0, p, q)
        rest = [i for i in range(t.ndim - 1)]
        t = permute(t, rest[:p] + [t.ndim - 1] + rest[p:])
        s = "".join(x for i, x in enumerate(s) if i != q)
    return t, s


def _einsum_pair(a: Tensor, has_a: set, b: Tensor, has_b: set, order: list, keep: set) -> tuple[Tensor, set]:
    """Contract two aligned einsum operands (every letter of ``order`` a dim, size 1 where the operand lacks
    it; ``has_*`` the letters it has): a product where no letter is summed, else one batched matrix product
    between a permute and a view of each operand, viewed and permuted back to ``order``."""
    for t_has, other in ((has_a, has_b), (has_b, has_a)):
        lonely = [order.index(c) for c in order if c in t_has and c not in other and c not in keep]
        if lonely:   # a letter this operand alone has and nothing after needs: sum it first (dims kept)
            if t_has is has_a:
                a = sum(a, tuple(lonely), True)
            else:
                b = sum(b, tuple(lonely), True)
            t_has -= {order[i] for i in lonely}
    summed = [c for c in order if c in has_a and c in has_b and c not in keep]
    has = has_a | has_b
    if not summed:
        return a * b, has
    batch = [c for c in order if c in has_a and c in has_b and c in keep]
    only_a = [c for c in order if c in has_a and c not in has_b]
    only_b = [c for c in order if c in has_b and c not in has_a]
    ones = [c for c in order if c not in has]
    size = {c: a.shape[i] if c in has_a else b.shape[i] for i, c in enumerate(order)}

    def n(letters):
        return int(np.prod([size[c] for c in letters], dtype=np.int64))

    left_order = batch + only_a + summed + ones + only_b
    right_order = batch + summed + only_b + ones + only_a
    left = reshape(permute(a, [order.index(c) for c in left_order]), (n(batch), n(only_a), n(summed)))
    right = reshape(permute(b, [order.index(c) for c in right_order]), (n(batch), n(summed), n(only_b)))
    out_order = batch + only_a + summed + ones + only_b
    out = reshape(bmm(left, right), tuple(1 if c in summed or c in ones else size[c] for c in out_order))
    return permute(out, [out_order.index(c) for c in order]), has - set(summed)


def einsum(equation, *operands) -> Tensor:
    """Einstein summation, any subscripts numpy accepts (implicit output, ``...``, repeated indices).

    Built from the ops PyTorch's einsum records, in its order: each operand's repeated letters as diagonals,
    the operand unsqueezed and permuted to one letter order (the output's letters, then the summed ones),
    then products in ``opt_einsum``'s contraction order (a broadcast product where nothing is summed, else a
    batched matrix product between permutes and views) or, for one operand, a sum; a view drops the summed
    dims at the end.

    >>> import symgrad
    >>> a, b = symgrad.ones(2, 3, requires_grad=True), symgrad.ones(3, 4)
    >>> symgrad.einsum("ij,jk->ik", a, b).grad_fn.name()
    'ViewBackward0'
    >>> symgrad.einsum("ij->", a).grad_fn.name()
    'SumBackward1'
    """
    import opt_einsum
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ts = [as_tensor(o) for o in operands]
    if not ts:
        raise ValueError("einsum(): must provide at least one operand")
    shapes = [tuple(t.shape) for t in ts]
    try:
        inputs, output, _ = opt_einsum.parser.parse_einsum_input([equation.replace(" ", ""), *shapes], shapes=True)
    except ValueError as exc:
        raise ValueError(f"einsum: {exc}") from None
    subs = inputs.split(",")
    if len(subs) != len(ts):
        raise ValueError(f"einsum: {len(subs)} subscripts for {len(ts)} operands")
    size: dict[str, int] = {}
    for t, s in zip(ts, subs):
        if len(s) != t.ndim:
            raise ValueError(f"einsum: operand has {t.ndim} dimensions but subscripts {s!r} name {len(s)}")
        for c, d in zip(s, t.shape):
            if size.get(c, 1) not in (1, d) and d != 1:
                raise ValueError(f"einsum: subscript {c!r} has sizes {size[c]} and {d}, which do not broadcast")
            if size.get(c, 1) == 1:     # a size-1 dim broadcasts (to 0 too)
                size[c] = d
    # broadcast size-1 dimensions (numpy allows it under the ellipsis)
    ts = [expand(t, tuple(size[c] for c in s)) if tuple(t.shape) != tuple(size[c] for c in s) else t
          for t, s in zip(ts, subs)]
    for t in ts[1:]:   # PyTorch's einsum does not promote (numpy.einsum's face promotes before calling)
        if t.dtype is not ts[0].dtype:
            _same_dtype("bmm", ts[0], t)
    order = list(output) + [c for c in dict.fromkeys("".join(subs)) if c not in output]
    aligned = []
    for t, s in zip(ts, subs):
        t, s = _einsum_diagonal(t, s)
        has = set(s)
        for c in order:
            if c not in has:
                t, s = unsqueeze(t, t.ndim), s + c
        aligned.append((permute(t, [s.index(c) for c in order]), has))
    if len(aligned) == 1:
        t, _ = aligned[0]
        return sum(t, tuple(range(len(output), len(order)))) if len(order) > len(output) else t
    path, _ = opt_einsum.contract_path(",".join(subs) + "->" + output, *shapes, shapes=True, optimize="auto")
    for pair in path:
        picked = [aligned[i] for i in pair]
        aligned = [o for i, o in enumerate(aligned) if i not in pair]
        keep = set(output).union(*(h for _, h in aligned))
        t, has = picked[0]
        for t2, has2 in picked[1:]:
            t, has = _einsum_pair(t, set(has), t2, set(has2), order, keep)
        aligned.append((t, has))
    t, _ = aligned[0]
    return reshape(t, tuple(size[c] for c in output)) if len(order) > len(output) else t


def tensordot(a, b, dims=2) -> Tensor:
    """Sum products over the last ``dims`` axes of ``a`` and the first of ``b``, or over the axes
    given as a pair of lists; one matrix product after permute/reshape."""
    x, y = as_tensor(a), as_tensor(b)
    if isinstance(dims, (int, np.integer)):
        if dims < 0 or dims > builtins.min(x.ndim, y.ndim):
            raise ValueError(f"tensordot: cannot contract {dims} axes of arrays of {x.ndim} and {y.ndim} dimensions")
        axes_a, axes_b = list(range(x.ndim - dims, x.ndim)), list(range(dims))
    else:
        try:
            axes_a, axes_b = dims
        except (TypeError, ValueError):
            raise TypeError("tensordot: axes must be an int or a pair of axis sequences") from None
        axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
        if len(axes_a) != len(axes_b):
            raise ValueError("tensordot: shape-mismatch for sum (the two axis lists differ in length)")
        axes_a = [_check_dim(int(d), x.ndim, "tensordot") for d in axes_a]
        axes_b = [_check_dim(int(d), y.ndim, "tensordot") for d in axes_b]
    for i, j in zip(axes_a, axes_b):
        if x.shape[i] != y.shape[j]:
            raise ValueError(f"tensordot: shape-mismatch for sum (axis {i} of size {x.shape[i]} and axis {j} "
                             f"of size {y.shape[j]})")
    if x.dtype is not y.dtype:
        raise RuntimeError(f"both inputs should have same dtype. Got {_scalar_type(x)} and {_scalar_type(y)}"
                           + _NO_PROMOTION)
    free_a = [i for i in range(x.ndim) if i not in axes_a]
    free_b = [j for j in range(y.ndim) if j not in axes_b]
    k = int(np.prod([x.shape[i] for i in axes_a], dtype=np.int64))
    left = reshape(permute(x, free_a + axes_a) if x.ndim else x, (-1, k))
    right = reshape(permute(y, axes_b + free_b) if y.ndim else y, (k, -1))
    return reshape(matmul(left, right), tuple(x.shape[i] for i in free_a) + tuple(y.shape[j] for j in free_b))


def kron(input, other) -> Tensor:
    """Kronecker product (numpy's: the shorter shape is padded with leading ones)."""
    a, b = as_tensor(input), as_tensor(other)
    nd = builtins.max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + tuple(a.shape)
    sb = (1,) * (nd - b.ndim) + tuple(b.shape)
    a2 = reshape(a, tuple(v for d in sa for v in (d, 1)))
    b2 = reshape(b, tuple(v for d in sb for v in (1, d)))
    return reshape(a2 * b2, tuple(p * q for p, q in zip(sa, sb)))


def inner(input, other) -> Tensor:
    """Sum of products over the last axes (a number operand multiplies)."""
    a, b = as_tensor(input), as_tensor(other)
    if a.ndim == 0 or b.ndim == 0:
        return mul(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inner: last dimensions differ ({a.shape[-1]} and {b.shape[-1]})")
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def vdot(input, other) -> Tensor:
    """Dot product of the flattened operands (real: no conjugation)."""
    a, b = reshape(as_tensor(input), (-1,)), reshape(as_tensor(other), (-1,))
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"vdot: operands have {a.shape[0]} and {b.shape[0]} elements")
    return dot(a, b)


def linalg_matrix_power(A, n: int) -> Tensor:
    """``A`` multiplied by itself ``n`` times (a negative ``n`` powers the inverse)."""
    t = _linalg_operand(A, "linalg.matrix_power")
    if not isinstance(n, (int, np.integer)) or isinstance(n, builtins.bool):
        raise TypeError(f"linalg.matrix_power: the exponent must be an integer, got {type(n).__name__}")
    n = int(n)
    if n == 0:   # the identity, still a function of A (with gradient zero)
        return t * 0.0 + _eye_like(t.shape[-1], t)
    base = linalg_inv(t) if n < 0 else t
    result, n = None, builtins.abs(n)
    while n:   # binary powering: O(log n) products
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def linalg_vector_norm(x, ord=2, dim=None, keepdim: bool = False) -> Tensor:
    """The ``ord``-norm over ``dim`` (all dims by default) of the flattened values."""
    t = as_tensor(x)
    dims = tuple(range(t.ndim)) if dim is None else _dims_arg(dim, t.ndim, "linalg.vector_norm")
    if isinstance(ord, str):
        raise ValueError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    ord = float(ord)
    if t.dtype.is_floating_point:
        overload = "linalg_vector_norm.inf" if builtins.abs(ord) == _math.inf else \
            "linalg_vector_norm.zero" if ord == 0 else "linalg_vector_norm"
        return _call(overload, t, ord, dims, builtins.bool(keepdim))
    return _linalg_vector_norm_composite(t, ord, dims, keepdim)


@forward("linalg_vector_norm")
@forward("linalg_vector_norm.inf")
@forward("linalg_vector_norm.zero")
def _linalg_vector_norm_fwd(self, ord, dim, keepdim):
    axes = tuple(range(self.ndim)) if dim is None else tuple(dim)
    if ord == 2:
        return np.sqrt(np.sum(self * self, axes, keepdims=keepdim))
    if builtins.abs(ord) == _math.inf:
        a = np.abs(self)
        return np.max(a, axes, keepdims=keepdim) if ord > 0 else np.min(a, axes, keepdims=keepdim)
    if ord == 1:
        return np.sum(np.abs(self), axes, keepdims=keepdim)
    if ord == 0:
        return np.sum(self != 0, axes, keepdims=keepdim).astype(self.dtype)
    with np.errstate(divide="ignore"):    # a zero entry and a negative ord: an infinite sum, the norm 0
        return np.power(np.sum(np.power(np.abs(self), ord), axes, keepdims=keepdim), 1.0 / ord).astype(self.dtype)


def _linalg_vector_norm_composite(t: Tensor, ord, dims, keepdim) -> Tensor:
    """linalg_vector_norm as elementwise ops and reductions (what a compiled graph records)."""
    dims = tuple(range(t.ndim)) if dims is None else tuple(dims)
    ord = float(ord)
    if ord == 2:
        return _root_of_nonnegative(sum(t * t, dims, keepdim), 2.0)
    if ord == _math.inf:
        return amax(abs(t), dims, keepdim)
    if ord == -_math.inf:
        return amin(abs(t), dims, keepdim)
    if ord == 1:
        return sum(abs(t), dims, keepdim)
    if ord == 0:   # the number of nonzero entries: no gradient
        return sum(to(ne(t, 0.0), t.dtype), dims, keepdim)
    if ord < 0:   # a zero entry makes the sum infinite and the norm 0, as in numpy
        return pow(sum(pow(abs(t), ord), dims, keepdim), 1.0 / ord)
    return _root_of_nonnegative(sum(pow(abs(t), ord), dims, keepdim), ord)


def _root_of_nonnegative(s: Tensor, p: float) -> Tensor:
    """``s ** (1/p)`` for ``s >= 0``, with gradient 0 (PyTorch's choice for a norm) where ``s`` is 0 instead of
    the 0 * inf = nan of the root's derivative."""
    nonzero = ne(s, 0.0)
    safe = where(nonzero, s, 1.0)
    root = sqrt(safe) if p == 2.0 else pow(safe, 1.0 / p)
    return where(nonzero, root, 0.0)


def linalg_svdvals(A) -> Tensor:
    """Singular values, descending."""
    return linalg_svd(A)[1]


def linalg_matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False) -> Tensor:
    """Matrix norms over the two axes ``dim``: 'fro', 'nuc', 1, -1, 2, -2, inf, -inf."""
    t = as_tensor(A)
    if len(dim) != 2:
        raise ValueError(f"linalg.matrix_norm: dim must name two axes, got {dim!r}")
    r, c = (_check_dim(int(d), t.ndim, "linalg.matrix_norm") for d in dim)
    if r == c:
        raise ValueError("linalg.matrix_norm: the two axes must differ")
    if ord == "fro":
        return _root_of_nonnegative(sum(t * t, (r, c), keepdim), 2.0)
    if ord in (1, -1, _math.inf, -_math.inf):
        # 1: the largest column sum of |A|, inf: the largest row sum
        summed, over = (r, c) if ord in (1, -1) else (c, r)
        reduce = amax if ord > 0 else amin
        out = reduce(sum(abs(t), summed, True), over, True)
        return out if keepdim else squeeze(out, (r, c))
    if ord in ("nuc", 2, -2):
        rest = [i for i in range(t.ndim) if i not in (r, c)]
        s = linalg_svdvals(permute(t, rest + [r, c]))
        out = sum(s, -1) if ord == "nuc" else (amax if ord == 2 else amin)(s, -1)
        if keepdim:
            for d in sorted((r, c)):
                out = unsqueeze(out, d)
        return out
    raise ValueError(f"linalg.matrix_norm: invalid norm order {ord!r} for matrices")


def linalg_pinv(A, rcond) -> Tensor:
    """Moore-Penrose pseudo-inverse from the reduced SVD, dropping singular values at or below
    ``rcond`` times the largest (``rcond`` a number or an array over the batch)."""
    U, S, Vh = linalg_svd(A)
    # the comparison is an op (no gradient), so that a compiled function decides it afresh for each input
    cutoff = mul(amax(S, -1, True), as_tensor(np.asarray(rcond, dtype=S._data.dtype)[..., None]))
    kept = gt(S, cutoff)
    s_inv = where(kept, reciprocal(where(kept, S, 1.0)), 0.0)
    return matmul(transpose(Vh, -2, -1) * unsqueeze(s_inv, -2), transpose(U, -2, -1))


# the torch.nn.functional primitives, here so that the rule table's formulas find them by name
from .nn_ops import _check_range, _col2im, _dropout_mask, _im2col  # noqa: E402,F401

# === torch surface: sorting, selection, repetition, tests of values ===
# PyTorch's names, signatures and node names (SortBackward0, TopkBackward0, GatherBackward0,
# RepeatBackward0) for ops the numpy surface also reaches through other routes.

def _sort_fwd(self, dim=-1, descending=False):
    if self.ndim == 0:
        return self.copy(), np.zeros((), np.int64)
    indices = _argsort_fwd(self, dim, descending)
    return np.take_along_axis(self, indices, axis=dim), indices


forward("sort")(_sort_fwd)


@forward("sort.stable")
def _sort_stable_fwd(self, stable=None, dim=-1, descending=False):
    return _sort_fwd(self, dim, descending)


@forward("topk")
def _topk_fwd(self, k, dim=-1, largest=True, sorted=True):
    if self.ndim == 0:
        if k > 1:
            raise RuntimeError("selected index k out of range")
        return self.copy(), np.zeros((), np.int64)
    n = self.shape[dim]
    if not 0 <= k <= n:
        raise RuntimeError(f"topk(): selected index k={k} out of range for dimension {dim} of size {n}")
    order = _argsort_fwd(self, dim, largest)   # stable: among equal values the first position wins
    indices = np.take(order, np.arange(k), axis=dim)
    return np.take_along_axis(self, indices, axis=dim), indices


def _along_key(indices: np.ndarray, dim: int) -> tuple:
    """The advanced index that reads positions ``indices`` along ``dim`` (other dims: their own position)."""
    dim = dim % indices.ndim
    return tuple(indices if d == dim else np.arange(n).reshape([-1 if k == d else 1 for k in range(indices.ndim)])
                 for d, n in enumerate(indices.shape))


@forward("gather")
def _gather_fwd(self, dim, index):
    if self.ndim == 0:
        return self.reshape(1)[index.reshape(-1)].reshape(index.shape)
    if index.ndim != self.ndim:
        raise RuntimeError(f"gather(): Index tensor must have the same number of dimensions as input tensor "
                           f"({index.ndim} vs {self.ndim})")
    for d in range(self.ndim):
        if d != dim and index.shape[d] > self.shape[d]:
            raise RuntimeError(f"gather(): Size does not match at dimension {d} expected index {list(index.shape)} "
                               f"to be smaller than self {list(self.shape)} apart from dimension {dim}")
    if index.size and (index.min() < -self.shape[dim] or index.max() >= self.shape[dim]):
        raise RuntimeError(f"gather(): index out of bounds for dimension {dim} with size {self.shape[dim]}")
    return self[_along_key(index, dim)]


@forward("value_selecting_reduction_backward")
def _value_selecting_backward_fwd(grad, dim, indices, sizes):
    out = np.zeros(tuple(sizes), dtype=grad.dtype)
    if len(sizes) == 0:
        out[...] = grad.sum()
        return out
    np.add.at(out, _along_key(indices, dim), np.broadcast_to(grad, indices.shape))
    return out


def value_selecting_reduction_backward(grad, dim: int, indices, sizes) -> Tensor:
    """Scatter-add ``grad`` into zeros of shape ``sizes`` at ``indices`` along ``dim``: the gradient of
    every op that picks values by position (sort, topk, gather)."""
    return _call("value_selecting_reduction_backward", as_tensor(grad), dim, as_tensor(indices), tuple(sizes))


return_types.topk = type("topk", (return_types._ValuesIndices,), {})


def sort(input, dim: int = -1, descending: bool = False, *, stable: bool | None = None):
    """``(values, indices)`` sorted along ``dim`` (SortBackward0; SortBackward1 with ``stable=``); the sort
    is always stable, ties keep their order."""
    t = as_tensor(input)
    dim = _check_dim(dim, t.ndim, "sort")
    if stable is None:
        values, indices = _call("sort", t, dim, bool(descending))
    else:
        values, indices = _call("sort.stable", t, bool(stable), dim, bool(descending))
    return return_types.sort(values, indices)


def topk(input, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The ``k`` largest (or smallest) values along ``dim`` and their indices (TopkBackward0)."""
    t = as_tensor(input)
    values, indices = _call("topk", t, int(k), _check_dim(dim, t.ndim, "topk"), bool(largest), bool(sorted))
    return return_types.topk(values, indices)


def gather(input, dim: int, index, *, sparse_grad: bool = False) -> Tensor:
    """``out[i][j] = input[index[i][j]][j]`` for ``dim=0`` (and so on): values at ``index`` along ``dim``
    (GatherBackward0)."""
    t = as_tensor(input)
    idx = as_tensor(index)
    if idx.dtype is not _dt.int64:
        raise RuntimeError(f"gather(): Expected dtype int64 for index, got {idx.dtype.name}")
    return _call("gather", t, _check_dim(dim, t.ndim, "gather"), idx)


@forward("repeat")
def _repeat_fwd(self, repeats):
    if len(repeats) < self.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    return np.tile(self, tuple(repeats))


@forward("repeat_backward")
def _repeat_backward_fwd(grad, repeats, input_shape):
    shape = (1,) * (len(repeats) - len(input_shape)) + tuple(input_shape)
    # (r0*s0, r1*s1) -> (r0, s0, r1, s1): the copies of each element sit along the even axes
    split = grad.reshape(tuple(x for r, s in zip(repeats, shape) for x in (r, s)))
    return split.sum(axis=tuple(range(0, 2 * len(shape), 2))).reshape(tuple(input_shape))


def repeat(input, *repeats) -> Tensor:
    """The tensor tiled ``repeats[i]`` times along each dimension (RepeatBackward0); ``len(repeats)`` may
    exceed the tensor's dimensions (new leading ones)."""
    t = as_tensor(input)
    return _call("repeat", t, _size_arg(repeats))


def repeat_backward(grad, repeats, input_shape) -> Tensor:
    """The sum of the copies ``repeat`` made: its gradient."""
    return _call("repeat_backward", as_tensor(grad), tuple(repeats), tuple(input_shape))


def _reduce_dims(t: Tensor, dim, op: str):
    if dim is None:
        return None
    return _dims_arg(dim, t.ndim, op)


def any(input, dim=None, keepdim: bool = False) -> Tensor:
    """Whether any element (along ``dim``) is non-zero: a bool tensor (uint8 for uint8 input, as in PyTorch)."""
    t = as_tensor(input)
    nonzero = t if t.dtype is _dt.bool_ else ne(t, 0)
    dims = _reduce_dims(t, dim, "any")
    count = sum(nonzero) if dims is None and not keepdim else sum(nonzero, dims, keepdim)
    out = gt(count, 0)
    return to(out, _dt.uint8) if t.dtype is _dt.uint8 else out


def all(input, dim=None, keepdim: bool = False) -> Tensor:
    """Whether every element (along ``dim``) is non-zero: a bool tensor (uint8 for uint8 input)."""
    t = as_tensor(input)
    zero = logical_not(t) if t.dtype is _dt.bool_ else eq(t, 0)
    dims = _reduce_dims(t, dim, "all")
    count = sum(zero) if dims is None and not keepdim else sum(zero, dims, keepdim)
    out = eq(count, 0)
    return to(out, _dt.uint8) if t.dtype is _dt.uint8 else out


def isclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """``|input - other| <= atol + rtol * |other|`` elementwise, equal infinities close (bool)."""
    a, b = as_tensor(input), as_tensor(other)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{a.dtype.name} did not match {b.dtype.name}")
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"rtol and atol must be non-negative, got rtol={rtol} and atol={atol}")
    if a.dtype is _dt.bool_:
        return eq(a, b)
    close = logical_or(eq(a, b), le(abs(sub(a, b)), atol + rtol * abs(b)))
    if a.dtype.is_floating_point:
        # an infinity is close only to itself (inf - inf is nan; inf <= inf would pass the bound)
        close = logical_and(close, logical_or(eq(a, b), logical_and(isfinite(a), isfinite(b))))
        if equal_nan:
            close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def allclose(input, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> builtins.bool:
    """Whether :func:`isclose` holds everywhere (a Python bool)."""
    return builtins.bool(all(isclose(input, other, rtol, atol, equal_nan)).item())


def equal(input, other) -> builtins.bool:
    """Whether the two tensors have the same shape and the same values (a Python bool)."""
    a, b = as_tensor(input), as_tensor(other)
    if a.shape != b.shape:
        return False
    return builtins.bool(all(eq(a, b)).item())


# --- numpy's keyword names ------------------------------------------------------------------
# PyTorch's argument parser accepts numpy's spellings `axis=` for `dim=` and `keepdims=` for
# `keepdim=` on every function and method; these take them too.

def _accept_numpy_keywords(fn):
    def wrapper(*args, **kwargs):
        if kwargs and ("axis" in kwargs or "keepdims" in kwargs):
            for numpy_name, torch_name in (("axis", "dim"), ("keepdims", "keepdim")):
                if numpy_name in kwargs:
                    if torch_name in kwargs:
                        raise TypeError(f"{fn.__name__}() got both {torch_name}= and its alias {numpy_name}=")
                    kwargs[torch_name] = kwargs.pop(numpy_name)
        return fn(*args, **kwargs)

    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    wrapper.__wrapped__ = fn
    return wrapper


NUMPY_KEYWORD_FUNCTIONS = ("sum", "mean", "prod", "max", "min", "amax", "amin", "var", "std", "logsumexp",
                           "argmax", "argmin", "all", "any", "cumsum", "cumprod", "softmax", "log_softmax", "sort",
                           "argsort", "topk", "nansum", "nanmean", "squeeze", "unsqueeze", "cat", "stack",
                           "count_nonzero", "diff", "gather", "unbind", "select", "take_along_dim")
for _name in NUMPY_KEYWORD_FUNCTIONS:
    globals()[_name] = _accept_numpy_keywords(globals()[_name])
del _name


# --- torch surface: fills, copies and factories from a tensor ------------------------------

def _records_inplace(t: Tensor, *others) -> builtins.bool:
    recorded = _records(t, others)
    _check_inplace_leaf(t, recorded)
    return recorded


def _overwrite(t: Tensor, values: np.ndarray, name: str) -> Tensor:
    """Replace ``t``'s values in place with new constants (no gradient flows to the old values)."""
    traced = registry._recorder is not None and registry._recorder.is_traced(t)
    if _records_inplace(t) or traced:
        # a non-leaf in a graph: its new values do not depend on the old ones
        return inplace(t, lambda x: add(_call("zero_", x), Tensor._wrap(values)), name=name)
    t._data[...] = values
    t._version_counter.value += 1
    return t


def _refuse_random_in_trace(op: str) -> None:
    rec = registry._recorder
    if rec is not None and rec.thread == threading.get_ident():
        rec.refuse(f"Tensor.{op} inside a compiled function would be a constant of the trace (the same numbers "
                   "on every call); draw the random numbers outside the function and pass them in")


def fill_(t: Tensor, value) -> Tensor:
    """Fill with ``value`` in place."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} "
                               "dimensions.")
        value = value.item()
    return _overwrite(t, np.full(t._data.shape, value, dtype=t._data.dtype), "fill_")


def copy_(t: Tensor, src, non_blocking: builtins.bool = False) -> Tensor:
    """Copy ``src`` (broadcast, cast to this dtype) into this tensor in place; the gradient reaches ``src``."""
    s = as_tensor(src)
    if _records_inplace(t, s) or (registry._recorder is not None and
                                  (registry._recorder.is_traced(t) or registry._recorder.is_traced(s))):
        return inplace(t, lambda x, v: add(_call("zero_", x), to(v, x.dtype)), s, name="copy_")
    np.copyto(t._data, np.broadcast_to(s._data, t._data.shape), casting="unsafe")
    t._version_counter.value += 1
    return t


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, *, generator=None) -> Tensor:
    """Fill in place with samples of a normal distribution (from ``symgrad.manual_seed``'s generator)."""
    _refuse_random_in_trace("normal_")
    rng = _device.generator_rng(generator)
    return _overwrite(t, rng.normal(mean, std, t._data.shape).astype(t._data.dtype), "normal_")


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, *, generator=None, **kwargs) -> Tensor:
    """Fill in place with samples of the uniform distribution on ``[a, b)`` (``from``/``to`` as keywords)."""
    _refuse_random_in_trace("uniform_")
    a, b = kwargs.pop("from", a), kwargs.pop("to", b)
    if kwargs:
        raise TypeError(f"uniform_() got an unexpected keyword argument {sorted(kwargs)[0]!r}")
    rng = _device.generator_rng(generator)
    return _overwrite(t, rng.uniform(a, b, t._data.shape).astype(t._data.dtype), "uniform_")


def masked_fill(input, mask, value) -> Tensor:
    """``value`` where ``mask`` is True, ``input`` elsewhere (the gradient reaches the kept entries)."""
    t, m = as_tensor(input), as_tensor(mask)
    if m.dtype is not _dt.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {m.dtype.name}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    if isinstance(value, Tensor):
        if not t.dtype.is_floating_point:
            return where(m, to(value, t.dtype), t)
        return _call("masked_fill.Tensor", t, m, value if value.dtype is t.dtype else to(value, t.dtype))
    if not t.dtype.is_floating_point:   # the number takes the tensor's dtype (PyTorch does not promote here)
        return where(m, Tensor._wrap(np.asarray(value).astype(t._data.dtype)), t)
    return _call("masked_fill.Scalar", t, m, value)


@forward("masked_fill.Tensor")
def _masked_fill_tensor_fwd(self, mask, value):
    return np.where(mask, value.astype(self.dtype, copy=False), self)


def _masked_fill_tensor_composite(self, mask, value):
    return where(mask, value, self)


@forward("masked_fill.Scalar")
def _masked_fill_fwd(self, mask, value):
    return np.where(mask, np.asarray(value, dtype=self.dtype), self)


def norm(input, p="fro", dim=None, keepdim: builtins.bool = False, dtype=None) -> Tensor:
    """The vector ``p``-norm over ``dim`` (all elements by default); ``"fro"`` is the 2-norm."""
    t = as_tensor(input) if dtype is None else to(input, dtype)
    if p == "fro":
        p = 2
    if isinstance(p, str):
        raise RuntimeError(f"norm: p={p!r} is not supported; use symgrad.linalg.matrix_norm for matrix norms")
    return linalg_vector_norm(t, p, dim, keepdim)


def new_factory(t: Tensor, kind: str, args: tuple, kwargs: dict) -> Tensor:
    """``t.new_zeros(size)`` and friends: a new tensor with ``t``'s dtype unless ``dtype=`` is given."""
    from .. import creation

    kwargs = dict(kwargs)
    kwargs.setdefault("dtype", t.dtype)
    if kind == "tensor":
        return creation.tensor(args[0], **kwargs)
    if kind == "full":
        return creation.full(*args, **kwargs)
    return getattr(creation, kind)(*args, **kwargs)


# --- torch surface: small queries and splits ------------------------------------------------

def is_tensor(obj) -> builtins.bool:
    """Whether ``obj`` is a symgrad Tensor."""
    return isinstance(obj, Tensor)


def numel(input) -> builtins.int:
    return as_tensor(input).numel()


def is_floating_point(input) -> builtins.bool:
    return as_tensor(input).is_floating_point()


def result_type(tensor1, tensor2) -> _dt.dtype:
    """The dtype an op on the two operands (tensors or Python numbers) gives, by PyTorch's promotion."""
    return _dt.result_type(tensor1, tensor2)


def narrow(input, dim: builtins.int, start: builtins.int, length: builtins.int) -> Tensor:
    """The slice ``start:start+length`` along ``dim`` (a view, as in PyTorch)."""
    t = as_tensor(input)
    dim = _check_dim(dim, t.ndim, "narrow")
    n = t.shape[dim]
    start = start + n if start < 0 else start
    if not (0 <= start and length >= 0 and start + length <= n):
        raise IndexError(f"narrow(): start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return slice_op(t, dim, start, start + length, 1)


def chunk(input, chunks: builtins.int, dim: builtins.int = 0) -> tuple:
    """Split into ``chunks`` pieces of ``ceil(size / chunks)`` along ``dim`` (the last may be smaller,
    and there may be fewer pieces, as in PyTorch)."""
    t = as_tensor(input)
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    dim = _check_dim(dim, t.ndim, "chunk")
    n = t.shape[dim]
    step = -(-n // chunks) if n else 1
    pieces = tuple(slice_op(t, dim, s, builtins.min(s + step, n), 1) for s in range(0, builtins.max(n, 1), step)
                   if s < n or n == 0)
    views.mark_multi_output(pieces, "Split")
    return pieces


def unflatten(input, dim: builtins.int, sizes) -> Tensor:
    """Split dimension ``dim`` into ``sizes`` (one may be -1): a view."""
    t = as_tensor(input)
    d = _check_dim(dim, t.ndim, "unflatten")
    sizes = tuple(builtins.int(s) for s in sizes)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    return view(t, tuple(t.shape[:d]) + sizes + tuple(t.shape[d + 1:]))


def nonzero(input, *, as_tuple: builtins.bool = False):
    """Indices of the non-zero elements: an ``(n, ndim)`` int64 tensor, or one tensor per dim."""
    t = as_tensor(input)
    rec = registry._recorder
    if rec is not None and rec.is_traced(t):
        rec.refuse("nonzero inside a compiled function: its result's shape depends on the values; use a mask "
                   "(torch.where) instead")
    found = np.nonzero(t._data) if t.ndim else np.nonzero(t._data.reshape(1))
    if as_tuple:
        return tuple(Tensor._wrap(np.asarray(i, dtype=np.int64)) for i in found)
    return Tensor._wrap(np.stack(found, axis=1).astype(np.int64) if t.ndim else
                        np.zeros((len(found[0]), 0), dtype=np.int64))
