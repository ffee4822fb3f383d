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


def _zero_(self):
    F._check_inplace_leaf(self)
    self._data[...] = 0
    self._version_counter.value += 1
    return self


OPERATORS = {
    "__add__": F.add, "__radd__": F.add, "__sub__": F.sub, "__rsub__": F.rsub,
    "__mul__": F.mul, "__rmul__": F.mul, "__truediv__": F.div, "__rtruediv__": _swap(F.div),
    "__pow__": F.pow, "__rpow__": _swap(F.pow), "__neg__": F.neg, "__pos__": lambda self: self,
    "__floordiv__": F.floor_divide, "__rfloordiv__": _swap(F.floor_divide),
    "__mod__": F.remainder, "__rmod__": _swap(F.remainder),
    "__gt__": F.gt, "__lt__": F.lt, "__ge__": F.ge, "__le__": F.le, "__eq__": F.eq, "__ne__": F.ne,
    "__and__": F.logical_and, "__or__": F.logical_or, "__invert__": F.logical_not,
    "__getitem__": lambda self, idx: F.getitem(self, idx),
    "__setitem__": F.setitem,
}

METHODS = {
    "add": F.add, "sub": F.sub, "mul": F.mul, "div": F.div, "true_divide": F.div, "neg": F.neg,
    "negative": F.neg, "reciprocal": F.reciprocal, "pow": F.pow, "square": F.square,
    "exp": F.exp, "log": F.log, "log1p": F.log1p, "sin": F.sin, "cos": F.cos, "tanh": F.tanh, "sqrt": F.sqrt,
    "sum": F.sum, "mean": F.mean, "expand": F.expand, "expand_as": F.expand_as, "reshape": F.reshape,
    "view": F.view, "to": F.to, "clone": F.clone, "gt": F.gt, "lt": F.lt, "ge": F.ge, "le": F.le,
    "eq": F.eq, "ne": F.ne, "floor_divide": F.floor_divide, "remainder": F.remainder,
    "float": lambda self: F.to(self, "float32"), "double": lambda self: F.to(self, "float64"),
    "long": lambda self: F.to(self, "int64"), "int": lambda self: F.to(self, "int32"),
    "bool": lambda self: F.to(self, "bool"), "type_as": lambda self, other: F.to(self, other.dtype),
}

INPLACE = {"add_": F.add, "sub_": F.sub, "mul_": F.mul, "div_": F.div, "pow_": F.pow, "neg_": F.neg}
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
    Tensor.zero_ = _zero_
    Tensor.__hash__ = lambda self: id(self)
