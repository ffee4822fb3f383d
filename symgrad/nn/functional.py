"""``symgrad.nn.functional`` — MINIMAL VERSION for the nn-modules branch.

This file only holds what the module classes of :mod:`symgrad.nn.modules` and their tests need,
composed of existing symgrad ops (so gradients come from the rule table). The full
``torch.nn.functional`` (issue 20, functional helper) replaces it when the branches merge.

>>> import symgrad as torch
>>> torch.nn.functional.relu(torch.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""

from __future__ import annotations

import math

from .. import creation
from ..autograd.grad_mode import STATE
from ..ops import functional as ops
from ..ops import registry
from ..tensor import Tensor


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


# --- activations ---------------------------------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    out = ops.matmul(input, ops.t(weight) if weight.ndim == 2 else weight)
    return out if bias is None else out + bias


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return ops.relu(input)


def tanh(input: Tensor) -> Tensor:
    return ops.tanh(input)


def sigmoid(input: Tensor) -> Tensor:
    return ops.sigmoid(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (input + 0.044715 * input ** 3)
        return 0.5 * input * (1.0 + ops.tanh(inner))
    if approximate != "none":
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return 0.5 * input * (1.0 + ops.erf(input * (1.0 / math.sqrt(2.0))))


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return input * ops.sigmoid(input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    scaled = input * beta
    # the linear branch above the threshold avoids exp overflow (PyTorch's formula)
    safe = ops.where(scaled > threshold, scaled * 0, scaled)
    return ops.where(scaled > threshold, input, ops.log1p(ops.exp(safe)) / beta)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    negative = ops.where(input > 0, input * 0, input)
    return ops.where(input > 0, input, alpha * ops.expm1(negative))


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return ops.where(input > 0, input, input * negative_slope)


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return ops.softmax(input if dtype is None else input.to(dtype), dim)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return ops.log_softmax(input if dtype is None else input.to(dtype), dim)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if registry._recorder is not None:
        # a mask drawn while tracing would be a constant of the compiled graph: the same units
        # dropped at every call
        registry._recorder.refuse("dropout in training mode inside a compiled function: its random mask would be "
                                  "a constant of the trace; call model.eval(), or run the model eagerly")
    if p == 1.0:
        return input * 0.0
    keep = creation.rand(*input.shape, dtype=input.dtype) >= p
    return ops.where(keep, input * (1.0 / (1.0 - p)), input * 0.0)


# --- losses --------------------------------------------------------------------------------------
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce((input - target) ** 2, reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce(ops.abs(input - target), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    diff = input - target
    size = ops.abs(diff)
    return _reduce(ops.where(size < delta, 0.5 * diff * diff, delta * (size - 0.5 * delta)), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    diff = input - target
    size = ops.abs(diff)
    if beta == 0.0:
        return _reduce(size, reduction)
    return _reduce(ops.where(size < beta, 0.5 * diff * diff / beta, size - 0.5 * beta), reduction)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    if target.dtype.is_floating_point:
        raise RuntimeError("nll_loss expects class indices (an integer target)")
    dim = 1 if input.ndim > 1 else 0
    index = ops.where(target == ignore_index, target * 0, target)
    picked = ops.take_along_dim(input, ops.unsqueeze(index, dim), dim).squeeze(dim)
    w = ops.where(target == ignore_index, creation.zeros((), dtype=input.dtype),
                  creation.ones((), dtype=input.dtype) if weight is None else weight[index])
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    dim = 1 if input.ndim > 1 else 0
    logp = ops.log_softmax(input, dim)
    if target.dtype.is_floating_point:   # class probabilities
        if weight is not None:
            logp = logp * weight.reshape([-1] + [1] * (input.ndim - dim - 1))
        classes = input.shape[dim]
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / classes
        loss = -(logp * target).sum(dim)
        if reduction == "mean":
            return loss.sum() / loss.numel()
        return _reduce(loss, reduction)
    if label_smoothing:
        raise NotImplementedError("cross_entropy: label_smoothing with class indices needs the full "
                                  "symgrad.nn.functional")
    return nll_loss(logp, target, weight, ignore_index, reduction)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    # PyTorch clamps the logs at -100 so that a saturated probability gives a finite loss
    log_p = ops.clamp_min(ops.log(input), -100.0)
    log_q = ops.clamp_min(ops.log(1.0 - input), -100.0)
    loss = -(target * log_p + (1.0 - target) * log_q)
    return _reduce(loss if weight is None else loss * weight, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    # log(1 + exp(-|x|)) keeps it finite for large logits
    log_sig_neg = ops.clamp_min(-input, 0.0) + ops.log1p(ops.exp(-ops.abs(input)))  # -log sigmoid(x)
    if pos_weight is None:
        loss = (1.0 - target) * input + log_sig_neg
    else:
        loss = (1.0 - target) * input + (1.0 + (pos_weight - 1.0) * target) * log_sig_neg
    return _reduce(loss if weight is None else loss * weight, reduction)


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        safe = ops.where(target > 0, target, target * 0 + 1)
        loss = ops.where(target > 0, target * (ops.log(safe) - input), target * 0)
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)


# --- layers --------------------------------------------------------------------------------------
def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    dims = list(range(-len(tuple(normalized_shape)), 0))
    mean = input.mean(dims, keepdim=True)
    centered = input - mean
    var = (centered * centered).mean(dims, keepdim=True)
    out = centered * ops.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse need the full "
                                  "symgrad.nn.functional")
    rows = weight[input]
    if padding_idx is not None and STATE.enabled and weight.requires_grad:
        # the padding row gets no gradient
        pad = ops.unsqueeze(input == (padding_idx % weight.shape[0]), -1)
        rows = ops.where(pad, rows.detach(), rows)
    return rows


def _unavailable(name: str):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"symgrad.nn.functional.{name} is provided by the full symgrad.nn.functional "
                                  "(this branch has the minimal version)")

    fn.__name__ = name
    return fn


conv1d = _unavailable("conv1d")
conv2d = _unavailable("conv2d")
max_pool2d = _unavailable("max_pool2d")
avg_pool2d = _unavailable("avg_pool2d")

__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "math", "creation", "ops",
                                                                     "registry", "STATE", "Tensor")]
