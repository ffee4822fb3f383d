"""Tensor factories: ``tensor``, ``zeros``, ``ones``, ``arange``, ``linspace`` ...

>>> import symgrad
>>> symgrad.arange(4)
tensor([0, 1, 2, 3])
>>> symgrad.linspace(0, 1, 5).dtype
symgrad.float32
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dt
from .autograd.grad_mode import INFERENCE_COUNTER, STATE
from .tensor import Tensor


def _leaf(arr: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._wrap(arr)
    if STATE.inference:
        t._vc = INFERENCE_COUNTER
    if requires_grad:
        t.requires_grad_(True)
    return t


def _dtype_np(dtype, default=None):
    if dtype is None:
        return (default or _dt.get_default_dtype()).np
    return _dt.to_dtype(dtype).np


def _size(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (Python floats become float32, ints int64).

    >>> symgrad.tensor([2.0], requires_grad=True)
    tensor([2.], requires_grad=True)
    """
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor` but shares memory with numpy arrays of the right dtype."""
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, np.ndarray) and (dtype is None or _dt.to_dtype(dtype).np == data.dtype):
        return from_numpy(data)
    return tensor(data, dtype=dtype)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array`` (its dtype is kept)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    _dt.from_numpy_dtype(array.dtype)
    return _leaf(array, False)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.zeros(_size(size), dtype=_dtype_np(dtype)), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.ones(_size(size), dtype=_dtype_np(dtype)), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.empty(_size(size), dtype=_dtype_np(dtype)), requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = _dt.bool_ if isinstance(fill_value, bool) else _dt.int64 if isinstance(fill_value, int) else None
    return _leaf(np.full(tuple(size), fill_value, dtype=_dtype_np(dtype)), requires_grad)


def zeros_like(input: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.zeros(input.shape, dtype=_dtype_np(dtype, input.dtype)), requires_grad)


def ones_like(input: Tensor, dtype=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.ones(input.shape, dtype=_dtype_np(dtype, input.dtype)), requires_grad)


def full_like(input: Tensor, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.full(input.shape, fill_value, dtype=_dtype_np(dtype, input.dtype)), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Values from ``start`` to ``end`` (exclusive); int64 for integer arguments, else float32."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, end, step))
        dtype = _dt.int64 if ints else _dt.get_default_dtype()
    d = _dt.to_dtype(dtype)
    return _leaf(np.arange(start, end, step, dtype=np.float64).astype(d.np), requires_grad)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.linspace(start, end, int(steps)).astype(_dtype_np(dtype)), requires_grad)


def eye(n: int, m: int | None = None, dtype=None, requires_grad: bool = False) -> Tensor:
    return _leaf(np.eye(n, m, dtype=_dtype_np(dtype)), requires_grad)


_rng = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed symgrad's random factories (``rand``, ``randn``, ``randint``)."""
    global _rng
    _rng = np.random.default_rng(seed)


def rand(*size, dtype=None, requires_grad: bool = False) -> Tensor:
    return _leaf(_rng.random(_size(size)).astype(_dtype_np(dtype)), requires_grad)


def randn(*size, dtype=None, requires_grad: bool = False) -> Tensor:
    return _leaf(_rng.standard_normal(_size(size)).astype(_dtype_np(dtype)), requires_grad)


def randint(low, high=None, size=(), dtype=None) -> Tensor:
    if high is None:
        low, high = 0, low
    return _leaf(_rng.integers(low, high, size=tuple(size)).astype(_dtype_np(dtype, _dt.int64)), False)
