"""``nn.Parameter``: a leaf tensor that a :class:`~symgrad.nn.Module` registers as one of its parameters.

>>> import symgrad as torch
>>> torch.nn.Parameter(torch.tensor([1.0, 2.0]))
Parameter containing:
tensor([1., 2.], requires_grad=True)
"""

from __future__ import annotations

import numpy as np

from ..dtypes import get_default_dtype
from ..tensor import Tensor


class Parameter(Tensor):
    """A Tensor that requires grad by default and shares memory with the tensor it wraps.

    Operations on a Parameter return plain Tensors, as in PyTorch.
    """

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        if data is None:
            array = np.empty((0,), dtype=get_default_dtype().np)
        elif isinstance(data, Tensor):
            array = data._data
        else:
            raise TypeError(f"Parameter: data must be a Tensor, got {type(data).__name__}")
        self._data = array
        if isinstance(data, Tensor):
            self._vc = data._version_counter   # shares storage, so shares the version counter
        self._requires_grad = False
        self._grad_fn = None
        self._output_nr = 0
        self._grad = None
        self._accumulate = None
        self._retains_grad = False
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo: dict) -> Parameter:
        if id(self) in memo:
            return memo[id(self)]
        copy = Parameter(Tensor._wrap(np.array(self._data, copy=True)), self._requires_grad)
        if self._grad is not None:
            copy._grad = Tensor._wrap(np.array(self._grad._data, copy=True))
        memo[id(self)] = copy
        return copy

    def __reduce__(self):
        return (_rebuild_parameter, (self._data, self._requires_grad))


def _rebuild_parameter(data: np.ndarray, requires_grad: bool) -> Parameter:
    return Parameter(Tensor._wrap(data), requires_grad)
