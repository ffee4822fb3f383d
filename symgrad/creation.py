"""Tensor factories: ``tensor``, ``zeros``, ``ones``, ``arange``, ``linspace`` ...

>>> import symgrad
>>> symgrad.arange(4)
tensor([0, 1, 2, 3])
>>> symgrad.linspace(0, 1, 5).dtype
symgrad.float32
"""

from __future__ import annotations

import threading

import numpy as np

from . import _device
from . import dtypes as _dt
from ._device import Generator, manual_seed  # noqa: F401 - the random factories draw from their streams
from .autograd.grad_mode import INFERENCE_COUNTER, STATE
from .ops import registry as _registry
from .tensor import Tensor


def _leaf(arr: np.ndarray, requires_grad: bool, device=None) -> Tensor:
    _device.check_device(device)
    t = Tensor._wrap(arr)
    if STATE.inference:
        t._vc = INFERENCE_COUNTER
    if requires_grad:
        t.requires_grad_(True)
    return t


def _check_layout(layout, pin_memory: bool = False) -> None:
    if layout is not None and layout is not strided:
        raise RuntimeError(f"symgrad has dense (strided) tensors only, got layout={layout!r}; sparse layouts are "
                           "not supported: build a dense tensor instead")
    if pin_memory:
        raise _device.cpu_only_error("pinned memory (pin_memory=True, a CUDA transfer buffer)")


class _Layout:
    """A tensor memory layout; symgrad has only ``strided`` (dense) tensors."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"symgrad.{self.name}"


strided = _Layout("strided")


def _dtype_np(dtype, default=None):
    if dtype is None:
        return (default or _dt.get_default_dtype()).np
    return _dt.to_dtype(dtype).np


def _size(size, keyword=None) -> tuple[int, ...]:
    if keyword is not None:
        if size:
            raise TypeError("the size was given both positionally and as size=")
        size = (keyword,)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def tensor(data, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (Python floats become float32, ints int64).

    >>> symgrad.tensor([2.0], requires_grad=True)
    tensor([2.], requires_grad=True)
    """
    _device.check_device(device)
    _check_layout(None, pin_memory)
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like :func:`tensor` but shares memory with numpy arrays of the right dtype."""
    _device.check_device(device)
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


def zeros(*size, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
          pin_memory: bool = False, **kwargs) -> Tensor:
    """A tensor of zeros of the given size (``zeros(2, 3)``, ``zeros((2, 3))`` or ``zeros(size=(2, 3))``)."""
    return _filled(np.zeros, size, kwargs, out, dtype, layout, device, requires_grad, pin_memory)


def ones(*size, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
         pin_memory: bool = False, **kwargs) -> Tensor:
    return _filled(np.ones, size, kwargs, out, dtype, layout, device, requires_grad, pin_memory)


def empty(*size, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
          pin_memory: bool = False, memory_format=None, **kwargs) -> Tensor:
    return _filled(np.empty, size, kwargs, out, dtype, layout, device, requires_grad, pin_memory)


def _filled(make, size, kwargs, out, dtype, layout, device, requires_grad, pin_memory) -> Tensor:
    extra = set(kwargs) - {"size"}
    if extra:
        raise TypeError(f"{make.__name__}() got an unexpected keyword argument {sorted(extra)[0]!r}")
    if out is not None:
        raise TypeError(f"{make.__name__}(): out= is not supported by symgrad; assign the result instead")
    _check_layout(layout, pin_memory)
    return _leaf(make(_size(size, kwargs.get("size")), dtype=_dtype_np(dtype)), requires_grad, device)


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
         pin_memory: bool = False) -> Tensor:
    _check_layout(layout, pin_memory)
    if dtype is None:
        dtype = _dt.bool_ if isinstance(fill_value, bool) else _dt.int64 if isinstance(fill_value, int) else None
    size = (size,) if isinstance(size, (int, np.integer)) else tuple(size)
    return _leaf(np.full(size, fill_value, dtype=_dtype_np(dtype)), requires_grad, device)


def _like(input, dtype):
    if not isinstance(input, Tensor):
        raise TypeError(f"expected a Tensor as input, got {type(input).__name__}")
    return input.shape, _dtype_np(dtype, input.dtype)


def zeros_like(input: Tensor, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    _check_layout(layout)
    shape, np_dtype = _like(input, dtype)
    return _leaf(np.zeros(shape, dtype=np_dtype), requires_grad, device)


def ones_like(input: Tensor, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
              memory_format=None) -> Tensor:
    _check_layout(layout)
    shape, np_dtype = _like(input, dtype)
    return _leaf(np.ones(shape, dtype=np_dtype), requires_grad, device)


def empty_like(input: Tensor, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    _check_layout(layout)
    shape, np_dtype = _like(input, dtype)
    return _leaf(np.empty(shape, dtype=np_dtype), requires_grad, device)


def full_like(input: Tensor, fill_value, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
              memory_format=None) -> Tensor:
    _check_layout(layout)
    shape, np_dtype = _like(input, dtype)
    return _leaf(np.full(shape, fill_value, dtype=np_dtype), requires_grad, device)


def rand_like(input: Tensor, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
              memory_format=None) -> Tensor:
    shape, _ = _like(input, dtype)
    return rand(shape, dtype=dtype or input.dtype, layout=layout, device=device, requires_grad=requires_grad)


def randn_like(input: Tensor, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
               memory_format=None) -> Tensor:
    shape, _ = _like(input, dtype)
    return randn(shape, dtype=dtype or input.dtype, layout=layout, device=device, requires_grad=requires_grad)


def arange(start, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
           requires_grad: bool = False) -> Tensor:
    """Values from ``start`` to ``end`` (exclusive); int64 for integer arguments, else float32."""
    _check_layout(layout)
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, end, step))
        dtype = _dt.int64 if ints else _dt.get_default_dtype()
    d = _dt.to_dtype(dtype)
    return _leaf(np.arange(start, end, step, dtype=np.float64).astype(d.np), requires_grad, device)


def linspace(start, end, steps: int, *, out=None, dtype=None, layout=None, device=None,
             requires_grad: bool = False) -> Tensor:
    _check_layout(layout)
    return _leaf(np.linspace(start, end, int(steps)).astype(_dtype_np(dtype)), requires_grad, device)


def eye(n: int, m: int | None = None, *, out=None, dtype=None, layout=None, device=None,
        requires_grad: bool = False) -> Tensor:
    _check_layout(layout)
    return _leaf(np.eye(n, m, dtype=_dtype_np(dtype)), requires_grad, device)


def rand(*size, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
         pin_memory: bool = False, **kwargs) -> Tensor:
    """Uniform samples from ``[0, 1)``; ``manual_seed`` or ``generator=`` make them reproducible."""
    _check_layout(layout, pin_memory)
    np_dtype = _random_float_dtype(dtype, "rand")
    rng = _device.generator_rng(generator)
    return _leaf(rng.random(_size(size, _size_keyword(kwargs, "rand"))).astype(np_dtype), requires_grad, device)


def randn(*size, generator=None, out=None, dtype=None, layout=None, device=None, requires_grad: bool = False,
          pin_memory: bool = False, **kwargs) -> Tensor:
    """Standard normal samples; ``manual_seed`` or ``generator=`` make them reproducible."""
    _check_layout(layout, pin_memory)
    np_dtype = _random_float_dtype(dtype, "randn")
    rng = _device.generator_rng(generator)
    return _leaf(rng.standard_normal(_size(size, _size_keyword(kwargs, "randn"))).astype(np_dtype), requires_grad,
                 device)


def _refuse_in_trace(op: str) -> None:
    """A random draw inside a function being compiled would become a constant of the graph: the same
    numbers on every call, where PyTorch draws new ones."""
    rec = _registry._recorder
    if rec is not None and rec.thread == threading.get_ident():
        rec.refuse(f"symgrad.{op} inside a compiled function would be a constant of the trace (the same numbers "
                   "on every call); draw the random numbers outside the function and pass them in")


def _random_float_dtype(dtype, op: str):
    _refuse_in_trace(op)
    np_dtype = _dtype_np(dtype)
    if np_dtype.kind != "f":
        raise RuntimeError(f"\"{op}\" not implemented for '{_dt.from_numpy_dtype(np_dtype).name}': {op} draws "
                           "floating-point samples; use randint for integers")
    return np_dtype


def randint(low, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None, device=None,
            requires_grad: bool = False) -> Tensor:
    """Integers from ``[low, high)``: ``randint(high, size)`` or ``randint(low, high, size)`` (int64 unless
    ``dtype`` says otherwise; only a floating ``dtype`` may require grad, as in PyTorch)."""
    _check_layout(layout)
    _refuse_in_trace("randint")
    if size is None:
        if high is None or not isinstance(high, (tuple, list)):
            raise TypeError("randint() missing the size argument: randint(high, size) or randint(low, high, size)")
        low, high, size = 0, low, high
    rng = _device.generator_rng(generator)
    arr = rng.integers(int(low), int(high), size=_size((size,)))
    return _leaf(arr.astype(_dtype_np(dtype, _dt.int64)), requires_grad, device)


def randperm(n: int, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64)."""
    _check_layout(layout)
    _refuse_in_trace("randperm")
    rng = _device.generator_rng(generator)
    return _leaf(rng.permutation(int(n)).astype(_dtype_np(dtype, _dt.int64)), requires_grad, device)


def _size_keyword(kwargs: dict, op: str):
    extra = set(kwargs) - {"size"}
    if extra:
        raise TypeError(f"{op}() got an unexpected keyword argument {sorted(extra)[0]!r}")
    return kwargs.get("size")
