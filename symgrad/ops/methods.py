"""Tensor methods and operators, attached once from the functional forms.

Kept apart from ``tensor.py`` so the Tensor class does not import the op library.
"""

from __future__ import annotations

from ..tensor import Tensor
from . import functional as F


def _swap(fn):
    return lambda self, other: fn(other, self)


def _inplace_method(fn, name):
    def method(self, *args, **kwargs):
        return F.inplace(self, lambda t, *a: fn(t, *a, **kwargs), *args, name=name)

    method.__name__ = name
    method.__doc__ = f"In-place ``{name[:-1]}``: modifies the tensor and bumps its version."
    return method


OPERATORS = {
    "__add__": F.add, "__radd__": F.add, "__sub__": F.sub, "__rsub__": F.rsub,
    "__mul__": F.mul, "__rmul__": F.mul, "__truediv__": F.div, "__rtruediv__": _swap(F.div),
    "__pow__": F.pow, "__rpow__": _swap(F.pow), "__neg__": F.neg, "__pos__": lambda self: self,
    "__floordiv__": F.floor_divide, "__rfloordiv__": _swap(F.floor_divide),
    "__mod__": F.remainder, "__rmod__": _swap(F.remainder),
    "__gt__": F.gt, "__lt__": F.lt, "__ge__": F.ge, "__le__": F.le, "__eq__": F.eq, "__ne__": F.ne,
    "__and__": F.bitwise_and, "__or__": F.bitwise_or, "__xor__": F.bitwise_xor, "__invert__": F.bitwise_not,
    "__rand__": _swap(F.bitwise_and), "__ror__": _swap(F.bitwise_or), "__rxor__": _swap(F.bitwise_xor),
    "__lshift__": F.bitwise_left_shift, "__rshift__": F.bitwise_right_shift,
    "__rlshift__": _swap(F.bitwise_left_shift), "__rrshift__": _swap(F.bitwise_right_shift),
    "__getitem__": lambda self, idx: F.getitem(self, idx),
    "__matmul__": F.matmul, "__rmatmul__": _swap(F.matmul), "__abs__": F.abs,
    "__setitem__": F.setitem,
}

METHODS = {
    "add": F.add, "sub": F.sub, "mul": F.mul, "div": F.div, "true_divide": F.div, "neg": F.neg,
    "negative": F.neg, "reciprocal": F.reciprocal, "pow": F.pow, "square": F.square,
    "exp": F.exp, "log": F.log, "log1p": F.log1p, "sin": F.sin, "cos": F.cos, "tanh": F.tanh, "sqrt": F.sqrt,
    "sum": F.sum, "mean": F.mean, "expand": F.expand, "expand_as": F.expand_as, "reshape": F.reshape,
    "view": F.view, "to": F.to, "clone": F.clone, "gt": F.gt, "lt": F.lt, "ge": F.ge, "le": F.le,
    "eq": F.eq, "ne": F.ne, "floor_divide": F.floor_divide, "remainder": F.remainder, "fmod": F.fmod,
    "trunc": F.trunc, "fix": F.trunc, "bitwise_and": F.bitwise_and, "bitwise_or": F.bitwise_or,
    "bitwise_xor": F.bitwise_xor, "bitwise_not": F.bitwise_not, "logical_and": F.logical_and,
    "logical_or": F.logical_or, "logical_not": F.logical_not,
    "float": lambda self: F.to(self, "float32"), "double": lambda self: F.to(self, "float64"),
    "long": lambda self: F.to(self, "int64"), "int": lambda self: F.to(self, "int32"),
    "bool": lambda self: F.to(self, "bool"), "type_as": lambda self, other: F.to(self, other.dtype),
    "sigmoid": F.sigmoid, "relu": F.relu, "abs": F.abs, "sign": F.sign, "expm1": F.expm1, "log2": F.log2,
    "exp2": F.exp2, "rsqrt": F.rsqrt, "erf": F.erf, "sinh": F.sinh, "cosh": F.cosh, "tan": F.tan,
    "atan": F.atan, "arctan": F.atan, "clamp": F.clamp, "clip": F.clamp, "clamp_min": F.clamp_min,
    "clamp_max": F.clamp_max, "maximum": F.maximum, "minimum": F.minimum, "prod": F.prod, "max": F.max,
    "min": F.min, "amax": F.amax, "amin": F.amin, "var": F.var, "std": F.std, "logsumexp": F.logsumexp,
    "softmax": F.softmax, "log_softmax": F.log_softmax, "matmul": F.matmul, "mm": F.mm, "mv": F.mv,
    "dot": F.dot, "outer": F.outer, "bmm": F.bmm, "t": F.t, "transpose": F.transpose, "permute": F.permute,
    "squeeze": F.squeeze, "unsqueeze": F.unsqueeze, "flatten": F.flatten, "contiguous": F.contiguous,
    "unbind": F.unbind, "select": F.select, "where": lambda self, cond, other: F.where(cond, self, other),
    "broadcast_to": F.broadcast_to, "swapaxes": F.transpose, "index_select": None,
}
del METHODS["index_select"]
# numpy surface: shape, assembly and indexing (PyTorch's method forms)
METHODS.update({
    "flip": lambda self, *dims: F.flip(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims),
    "fliplr": F.fliplr, "flipud": F.flipud, "roll": F.roll,
    "tile": lambda self, *dims: F.tile(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims),
    "repeat_interleave": F.repeat_interleave, "tril": F.tril, "triu": F.triu, "diag": F.diag,
    "diagonal": F.diagonal, "trace": F.trace, "split": F.split, "tensor_split": F.tensor_split, "take": F.take,
    "take_along_dim": F.take_along_dim, "movedim": F.movedim, "moveaxis": F.movedim,
})

# torch surface: tests of values, sorting, selection and repetition
METHODS.update({
    "all": F.all, "any": F.any, "repeat": F.repeat, "topk": F.topk, "sort": F.sort, "argsort": F.argsort,
    "argmax": F.argmax, "argmin": F.argmin, "cumsum": F.cumsum, "cumprod": F.cumprod, "isnan": F.isnan,
    "isinf": F.isinf, "isfinite": F.isfinite, "isclose": F.isclose, "allclose": F.allclose, "equal": F.equal,
    "round": F.round, "gather": F.gather, "nansum": F.nansum, "nanmean": F.nanmean,
    "masked_fill": F.masked_fill, "norm": F.norm,
    "new_zeros": lambda self, *size, **kw: F.new_factory(self, "zeros", size, kw),
    "new_ones": lambda self, *size, **kw: F.new_factory(self, "ones", size, kw),
    "new_empty": lambda self, *size, **kw: F.new_factory(self, "empty", size, kw),
    "new_full": lambda self, size, fill_value, **kw: F.new_factory(self, "full", (size, fill_value), kw),
    "new_tensor": lambda self, data, **kw: F.new_factory(self, "tensor", (data,), kw),
})

# torch surface: small queries and splits
METHODS.update({
    "chunk": F.chunk, "narrow": F.narrow, "nonzero": F.nonzero, "ndimension": lambda self: self.ndim,
    "nelement": lambda self: self.numel(), "element_size": lambda self: self._data.itemsize,
    "view_as": lambda self, other: F.view(self, tuple(other.shape)),
    "reshape_as": lambda self, other: F.reshape(self, tuple(other.shape)),
    "stride": lambda self, dim=None: (tuple(s // self._data.itemsize for s in self._data.strides) if dim is None
                                      else self._data.strides[dim] // self._data.itemsize),
    "is_pinned": lambda self: False,
})

# views, as PyTorch documents them (for real tensors the adjoints are transposes)
METHODS.update({
    "as_strided": F.as_strided, "unfold": F.unfold, "swapdims": F.transpose, "unflatten": F.unflatten,
    "adjoint": lambda self: F.transpose(self, -2, -1),
})

PROPERTIES = {
    "T": lambda self: F.permute(self, tuple(reversed(range(self.ndim)))),
    "mT": lambda self: F.transpose(self, -2, -1),
    "H": lambda self: F.permute(self, tuple(reversed(range(self.ndim)))),
    "mH": lambda self: F.transpose(self, -2, -1),
}

INPLACE = {"add_": F.add, "sub_": F.sub, "mul_": F.mul, "div_": F.div, "pow_": F.pow, "neg_": F.neg,
           "clamp_": F.clamp, "clamp_min_": F.clamp_min, "clamp_max_": F.clamp_max, "relu_": F.relu,
           "exp_": F.exp, "sigmoid_": F.sigmoid, "tanh_": F.tanh,
           # torch surface: the in-place forms of the elementwise functions
           "cos_": F.cos, "sin_": F.sin, "tan_": F.tan, "log_": F.log, "log1p_": F.log1p, "log2_": F.log2,
           "expm1_": F.expm1, "exp2_": F.exp2, "sqrt_": F.sqrt, "rsqrt_": F.rsqrt, "abs_": F.abs, "sign_": F.sign,
           "sinh_": F.sinh, "cosh_": F.cosh, "atan_": F.atan, "erf_": F.erf, "reciprocal_": F.reciprocal,
           "square_": F.square, "round_": F.round, "trunc_": F.trunc, "floor_divide_": F.floor_divide,
           "remainder_": F.remainder, "fmod_": F.fmod, "masked_fill_": F.masked_fill}
for _name in ("asin", "acos", "asinh", "acosh", "atanh", "floor", "ceil", "log10", "frac", "lerp", "hypot",
              "atan2", "maximum", "minimum"):
    if hasattr(F, _name):
        INPLACE[_name + "_"] = getattr(F, _name)
del _name
AUGMENTED = {"__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_", "__itruediv__": "div_",
             "__ipow__": "pow_"}


def attach(extra_methods: dict | None = None, extra_inplace: dict | None = None) -> None:
    """Install operators and methods on Tensor (idempotent; op modules call it with their additions)."""
    for name, fn in OPERATORS.items():
        setattr(Tensor, name, fn)
    for name, fn in {**METHODS, **(extra_methods or {})}.items():
        setattr(Tensor, name, fn)
    for name, fn in {**INPLACE, **(extra_inplace or {})}.items():
        setattr(Tensor, name, _inplace_method(fn, name))
    for dunder, name in AUGMENTED.items():
        setattr(Tensor, dunder, getattr(Tensor, name))
    for name, fn in PROPERTIES.items():
        setattr(Tensor, name, property(fn))
    Tensor.zero_ = F.zero_
    Tensor.fill_ = F.fill_
    Tensor.copy_ = F.copy_
    Tensor.normal_ = F.normal_
    Tensor.uniform_ = F.uniform_
    Tensor.__hash__ = lambda self: id(self)
    from . import numpy_dispatch  # NEP 13/18: numpy code on tensors records the graph
    numpy_dispatch.install(Tensor)
