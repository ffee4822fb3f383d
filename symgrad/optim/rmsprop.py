"""``RMSprop`` (Hinton's lecture notes; Graves, 2013 for ``centered``), PyTorch's update.

>>> import symgrad as torch
>>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
>>> opt = torch.optim.RMSprop([w], lr=0.01)
>>> (w * w).sum().backward(); opt.step()
>>> w
Parameter containing:
tensor([ 0.9000, -1.9000], requires_grad=True)
"""

from __future__ import annotations

import numpy as np

from ..tensor import Tensor
from .adam import _lerp_
from .optimizer import Optimizer


class RMSprop(Optimizer):
    """For each parameter: ``g = grad + weight_decay * p``; ``s = alpha * s + (1 - alpha) * g * g``;
    ``avg = sqrt(s) + eps`` (with ``centered``, ``sqrt(s - m * m) + eps`` where ``m = lerp(m, g, 1 - alpha)``);
    with momentum, ``b = momentum * b + g / avg`` and ``p = p - lr * b``, else ``p = p - lr * g / avg``."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        if differentiable:
            raise NotImplementedError("RMSprop(differentiable=True) is not supported")
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
            weight_decay, momentum, centered = group["weight_decay"], group["momentum"], group["centered"]
            for p, g in self._gradients(group):
                state = self.state.setdefault(p, {})
                if not state:
                    state["step"] = Tensor._wrap(np.zeros((), np.float32))
                    state["square_avg"] = Tensor._wrap(np.zeros_like(p._data))
                    if momentum > 0:
                        state["momentum_buffer"] = Tensor._wrap(np.zeros_like(p._data))
                    if centered:
                        state["grad_avg"] = Tensor._wrap(np.zeros_like(p._data))
                state["step"]._data += 1
                if weight_decay != 0:
                    g = g + weight_decay * p._data
                square_avg = state["square_avg"]._data
                square_avg *= alpha
                square_avg += (1 - alpha) * (g * g)
                if centered:
                    grad_avg = state["grad_avg"]._data
                    _lerp_(grad_avg, g, 1 - alpha)
                    avg = np.sqrt(square_avg - grad_avg * grad_avg)
                else:
                    avg = np.sqrt(square_avg)
                avg += eps
                if momentum > 0:
                    buf = state["momentum_buffer"]._data
                    buf *= momentum
                    buf += g / avg
                    self._write(p, p._data + (-lr) * buf)
                else:
                    self._write(p, p._data + (-lr) * (g / avg))
        return loss
