"""``Adam`` and ``AdamW`` (Kingma and Ba, 2014; Loshchilov and Hutter, 2017), PyTorch's updates.

>>> import symgrad as torch
>>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
>>> opt = torch.optim.Adam([w], lr=0.1)
>>> (w * w).sum().backward(); opt.step()
>>> w
Parameter containing:
tensor([ 0.9000, -1.9000], requires_grad=True)
"""

from __future__ import annotations

import math

import numpy as np

from ..tensor import Tensor
from .optimizer import Optimizer


def _lerp_(start: np.ndarray, end: np.ndarray, weight: float) -> None:
    """``start += weight * (end - start)`` in place, in the form that is exact at either end."""
    if weight < 0.5:
        start += weight * (end - start)
    else:
        np.subtract(end, (end - start) * (1 - weight), out=start)


class Adam(Optimizer):
    """For each parameter, at step ``t``: ``g = grad + weight_decay * p`` (or, with
    ``decoupled_weight_decay``, ``p = p * (1 - lr * weight_decay)`` first, as AdamW);
    ``m = lerp(m, g, 1 - beta1)``; ``v = beta2 * v + (1 - beta2) * g * g``;
    ``denom = sqrt(v) / sqrt(1 - beta2**t) + eps`` (``v`` replaced by its running maximum with
    ``amsgrad``); ``p = p - lr / (1 - beta1**t) * m / denom``."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False, fused=None,
                 decoupled_weight_decay: bool = False) -> None:
        if isinstance(lr, Tensor):
            lr = float(lr)
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise NotImplementedError(f"{type(self).__name__}(differentiable=True) is not supported")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    def step(self, closure=None):
        loss = self._closure_loss(closure)
        for group in self.param_groups:
            lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
            weight_decay, amsgrad = group["weight_decay"], group["amsgrad"]
            for p, g in self._gradients(group):
                state = self.state.setdefault(p, {})
                if not state:
                    # the step count is a float32 scalar tensor, as in PyTorch's state_dict
                    state["step"] = Tensor._wrap(np.zeros((), np.float32))
                    state["exp_avg"] = Tensor._wrap(np.zeros_like(p._data))
                    state["exp_avg_sq"] = Tensor._wrap(np.zeros_like(p._data))
                    if amsgrad:
                        state["max_exp_avg_sq"] = Tensor._wrap(np.zeros_like(p._data))
                state["step"]._data += 1
                step = float(state["step"]._data)
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        p._data *= 1 - lr * weight_decay
                    else:
                        g = g + weight_decay * p._data
                m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
                _lerp_(m, g, 1 - beta1)
                v *= beta2
                v += (1 - beta2) * (g * g)
                step_size = lr / (1 - beta1 ** step)
                bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
                if amsgrad:
                    vmax = state["max_exp_avg_sq"]._data
                    np.maximum(vmax, v, out=vmax)
                    denom = np.sqrt(vmax) / bias_correction2_sqrt + eps
                else:
                    denom = np.sqrt(v) / bias_correction2_sqrt + eps
                self._write(p, p._data + (-step_size) * (m / denom))
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p = p * (1 - lr * weight_decay)`` before the Adam step
    (default ``weight_decay=0.01``)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False, foreach=None,
                 capturable: bool = False, differentiable: bool = False, fused=None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
