"""dtype objects and PyTorch's type-promotion rules.

symgrad tensors store numpy arrays; a :class:`dtype` pairs a torch-style name
(``symgrad.float32``) with its numpy dtype.  Promotion follows PyTorch, not
numpy: ``int64 tensor * 2.5`` is float32 (the default dtype), and a 0-d tensor
or a Python number never widens the dtype of a dimensioned tensor of the same
category.

>>> import symgrad
>>> symgrad.tensor([1, 2]) / 2
tensor([0.5000, 1.0000])
"""

from __future__ import annotations

import builtins

import numpy as np

__all__ = [
    "dtype", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool_",
    "get_default_dtype", "set_default_dtype", "from_numpy_dtype", "to_dtype", "result_type",
]


class dtype:
    """A tensor element type: ``symgrad.float32``, ``symgrad.int64``, ``symgrad.bool`` ..."""

    __slots__ = ("name", "np", "is_floating_point", "is_signed", "itemsize", "_category")

    def __init__(self, name: str, np_dtype) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = self.np.kind == "f"
        self.is_signed = self.np.kind in "if"
        self.itemsize = self.np.itemsize
        # bool < integer < floating: the order PyTorch promotes across categories.
        self._category = {"b": 0, "u": 1, "i": 1, "f": 2}[self.np.kind]

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype, which numpy reads from any object's ``.dtype``: so numpy takes a symgrad dtype
        wherever it takes a dtype (``np.zeros(3, dtype=x.dtype)``, ``np.finfo(x.dtype)``)."""
        return self.np

    def __eq__(self, other) -> bool:
        """Identity among symgrad dtypes; equal to the numpy dtype it stands for (``x.dtype == np.float32``,
        ``x.dtype == "float32"``), as numpy code compares an array's dtype."""
        if isinstance(other, dtype):
            return self is other
        if other is None or isinstance(other, (int, float)) or other is builtins.float or other is builtins.int:
            return False   # np.dtype(None) and np.dtype(float) would read these as float64
        try:
            return self.np == np.dtype(other)
        except (TypeError, ValueError):
            return NotImplemented

    def __ne__(self, other) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return "symgrad." + self.name

    def __reduce__(self):
        return (to_dtype, (self.name,))


float16 = dtype("float16", np.float16)
float32 = dtype("float32", np.float32)
float64 = dtype("float64", np.float64)
int8 = dtype("int8", np.int8)
int16 = dtype("int16", np.int16)
int32 = dtype("int32", np.int32)
int64 = dtype("int64", np.int64)
uint8 = dtype("uint8", np.uint8)
bool_ = dtype("bool", np.bool_)

_ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool_)
_BY_NUMPY = {d.np: d for d in _ALL}
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
                 "short": int16})

_default = float32


def get_default_dtype() -> dtype:
    """The dtype Python floats become (float32 unless changed)."""
    return _default


def set_default_dtype(d: dtype) -> None:
    """Set the dtype Python floats become; only float32 and float64 are allowed."""
    global _default
    d = to_dtype(d)
    if d not in (float32, float64):
        raise TypeError(f"set_default_dtype: only floating dtypes are supported, got {d}")
    _default = d


def from_numpy_dtype(np_dtype) -> dtype:
    """The symgrad dtype of a numpy dtype; raises TypeError for unsupported ones."""
    try:
        return _BY_NUMPY[np.dtype(np_dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"symgrad does not support the numpy dtype {np_dtype!r}; "
                        f"supported: {', '.join(d.name for d in _ALL)}") from None


def to_dtype(spec) -> dtype:
    """Accept a symgrad dtype, its name, a numpy dtype or a Python type and return a symgrad dtype."""
    if isinstance(spec, dtype):
        return spec
    if isinstance(spec, str) and spec in _BY_NAME:
        return _BY_NAME[spec]
    if spec is builtins.float:
        return _default
    if spec is builtins.int:
        return int64
    if spec is builtins.bool:
        return bool_
    try:
        return from_numpy_dtype(spec)
    except TypeError:
        raise TypeError(f"unknown dtype {spec!r}; use one of symgrad.float32, symgrad.float64, "
                        f"symgrad.int64, symgrad.int32, symgrad.bool") from None


def _scalar_category(value) -> int:
    if isinstance(value, builtins.bool) or isinstance(value, np.bool_):
        return 0
    if isinstance(value, (builtins.int, np.integer)):
        return 1
    return 2


_CATEGORY_DEFAULT = {0: bool_, 1: int64}


def result_type(*operands) -> dtype:
    """PyTorch's promotion of tensors and Python numbers.

    Operands are Tensors (anything with ``.dtype`` and ``.ndim``) or Python numbers.
    Dimensioned tensors outrank 0-d tensors, which outrank numbers; a lower-ranked
    operand only matters when its category (bool < int < float) is higher.
    """
    groups: list[list[dtype]] = [[], [], []]  # dimensioned, 0-d, numbers
    for op in operands:
        d = getattr(op, "dtype", None)
        if isinstance(d, dtype):
            groups[0 if op.ndim else 1].append(d)
        else:
            groups[2].append(op)
    category = -1
    for g in groups[:2]:
        for d in g:
            category = max(category, d._category)
    for v in groups[2]:
        category = max(category, _scalar_category(v))
    for g in groups[:2]:
        same = [d for d in g if d._category == category]
        if same:
            best = same[0]
            for d in same[1:]:
                if d is not best:
                    best = _BY_NUMPY[np.promote_types(best.np, d.np)]
            return best
    return _default if category == 2 else _CATEGORY_DEFAULT[category]


class finfo:
    """Limits of a floating dtype (``torch.finfo``): ``bits``, ``eps``, ``max``, ``min``, ``tiny``,
    ``smallest_normal``, ``resolution``.

    >>> finfo(float32).eps
    1.1920928955078125e-07
    """

    def __init__(self, type=None) -> None:
        d = _default if type is None else to_dtype(type)
        if not d.is_floating_point:
            raise TypeError(f"torch.finfo() requires a floating point input type, got {d.name}; use iinfo for "
                            "integer types")
        info = np.finfo(d.np)
        self.bits, self.dtype = info.bits, d.name
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = float(info.resolution)

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype (``torch.iinfo``): ``bits``, ``max``, ``min``.

    >>> iinfo(uint8).max
    255
    """

    def __init__(self, type) -> None:
        d = to_dtype(type)
        if d.is_floating_point or d is bool_:
            raise TypeError(f"torch.iinfo() requires an integer input type, got {d.name}; use finfo for floating "
                            "point types")
        info = np.iinfo(d.np)
        self.bits, self.max, self.min, self.dtype = info.bits, int(info.max), int(info.min), d.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


def promote_types(type1, type2) -> dtype:
    """The dtype PyTorch promotes two dtypes to (``promote_types(int8, uint8)`` is int16)."""
    a, b = to_dtype(type1), to_dtype(type2)
    if a._category != b._category:
        return a if a._category > b._category else b
    return _BY_NUMPY[np.promote_types(a.np, b.np)]
