"""``SGD`` with momentum, dampening, Nesterov momentum and weight decay (PyTorch's update).

>>> import symgrad as torch
>>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
>>> opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
>>> (w * w).sum().backward(); opt.step()
>>> w
Parameter containing:
tensor([ 0.8000, -1.6000], requires_grad=True)
"""

from __future__ import annotations

import numpy as np

from .optimizer import Optimizer, required


class SGD(Optimizer):
    """For each parameter: ``g = grad + weight_decay * p``; with momentum, ``b = g`` at the first
    step, then ``b = momentum * b + (1 - dampening) * g``, and ``g = g + momentum * b`` (Nesterov) or
    ``g = b``; finally ``p = p - lr * g`` (``+`` with ``maximize``)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False, foreach=None,
                 differentiable: bool = False, fused=None) -> None:
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if differentiable:
            raise NotImplementedError("SGD(differentiable=True) is not supported")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov = group["weight_decay"], group["nesterov"]
            for p, g in self._gradients(group):
                if weight_decay != 0:
                    g = g + weight_decay * p._data
                if momentum != 0:
                    state = self.state.setdefault(p, {})
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = _tensor(np.array(g, copy=True))
                    else:
                        b = buf._data
                        b *= momentum
                        b += (1 - dampening) * g
                    g = g + momentum * buf._data if nesterov else buf._data
                self._write(p, p._data - lr * g)
        return loss


def _tensor(array: np.ndarray):
    from ..tensor import Tensor

    return Tensor._wrap(array)
