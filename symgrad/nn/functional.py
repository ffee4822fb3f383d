"""``torch.nn.functional``: activations, losses, normalisation, convolution, pooling and attention.

Every function here is a symgrad op with a rule in the rule table or a composition of such ops, so its
gradients (of every order) come from ``derivatives.yaml`` like any other op's.  The functions PyTorch
records as one node (``MseLossBackward0``, ``NllLossBackward0``, ``ConvolutionBackward0``,
``MaxPool2DWithIndicesBackward0``, ``NativeLayerNormBackward0``...) are such ops themselves; a compiled graph
records their compositions (``_*_composite`` below) instead.  Those compositions of convolution and pooling
gather windows with the ``_im2col`` primitive and then use one matmul (BLAS) or one reduction; its
transpose ``_col2im`` is the gradient.  The signatures are PyTorch 2.x's.

>>> import symgrad as torch
>>> import symgrad.nn.functional as F
>>> x = torch.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
>>> loss = F.cross_entropy(x, torch.tensor([2]))
>>> loss.backward()
>>> round(loss.item(), 4), x.grad
(0.1328, tensor([[ 0.1185,  0.0059, -0.1244]]))
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ..ops import functional as T
from ..ops import registry
from ..ops.nn_ops import (
    CONV_ORDER,
    POOL_ORDER,
    REDUCTIONS,
    _check_range,
    _dropout_mask,
    _im2col,
    avg_pool2d_op,
    avg_pool_divisors,
    check_range,
    constant_pad_nd_op,
    convolution_op,
    embedding_op,
    index_pad_op,
    max_pool2d_op,
    native_layer_norm_op,
    nll_loss2d_op,
    nll_loss_op,
    pad_pairs,
    pool_geometry,
    repeat_heads,
    sdpa_flash_op,
    window_count,
)
from ..tensor import Tensor

__all__ = [
    "relu", "relu_", "gelu", "silu", "softplus", "elu", "leaky_relu", "hardtanh", "relu6", "sigmoid", "tanh",
    "logsigmoid", "softmax", "log_softmax", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy",
    "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "linear", "dropout",
    "layer_norm", "normalize", "one_hot", "embedding", "pad", "conv1d", "conv2d", "max_pool2d", "avg_pool2d",
    "scaled_dot_product_attention", "batch_norm", "group_norm", "max_pool1d", "avg_pool1d", "adaptive_avg_pool2d",
    "unfold", "cosine_similarity", "softmin", "softsign", "mish", "selu", "celu", "hardsigmoid", "hardswish",
    "threshold", "tanhshrink",
]


def _tensor(x, name: str, op: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (np.ndarray, numbers.Number, list, tuple)):
        return T.as_tensor(x)
    raise TypeError(f"{op}(): argument '{name}' must be a Tensor, not {type(x).__name__}")


def _tracing() -> bool:
    """Whether ops are being recorded for a compiled graph (values are then not ours to inspect)."""
    return registry._recorder is not None


def _float(x: Tensor, op: str) -> Tensor:
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating-point input, got {x.dtype}")
    return x


def _checked(x: Tensor, low: float, high: float, skip, error: str, message: str) -> Tensor:
    """``x``, its values checked to lie in [``low``, ``high``] (``skip`` exempt): now when eager; in a
    compiled function by a ``_check_range`` op on the data path, when each call runs."""
    if _tracing():
        return _check_range(x, low, high, skip, error, message)
    check_range(x._data, low, high, skip, error, message)
    return x


def _maybe_inplace(input: Tensor, inplace: bool, fn, *args) -> Tensor:
    if inplace:
        return T.inplace(input, fn, *args, name=fn.__name__)
    return fn(input, *args)


def _const(array, like: Tensor) -> Tensor:
    return T.as_tensor(np.asarray(array, dtype=like._data.dtype))


# --- activations ------------------------------------------------------------------------------

def relu(input, inplace: bool = False) -> Tensor:
    """``max(x, 0)`` (ReluBackward0); no gradient at 0, as PyTorch."""
    return _maybe_inplace(_tensor(input, "input", "relu"), inplace, T.relu)


def relu_(input) -> Tensor:
    return relu(input, inplace=True)


def gelu(input, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``; ``approximate='tanh'`` uses the tanh approximation."""
    if approximate == "none":
        return T._call("gelu", _float(_tensor(input, "input", "gelu"), "gelu"))
    if approximate == "tanh":
        return T._call("gelu_tanh", _float(_tensor(input, "input", "gelu"), "gelu"))
    raise RuntimeError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _silu(x):
    return T._call("silu", _float(x, "silu"))


def silu(input, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)``."""
    return _maybe_inplace(_tensor(input, "input", "silu"), inplace, _silu)


def _softplus_unit(z: Tensor) -> Tensor:
    """``log(1 + exp(z))`` without overflow, with the exact gradient ``sigmoid(z)`` everywhere (also at 0,
    where ``max(z, 0) + log1p(exp(-|z|))`` would give 0): each branch only ever sees its own half-line."""
    positive = T.gt(z, 0.0)
    upper = T.where(positive, z, 0.0)
    lower = T.where(positive, 0.0, z)
    return T.where(positive, upper + T.log1p(T.exp(-upper)), T.log1p(T.exp(lower)))


def softplus(input, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``."""
    return T._call("softplus", _float(_tensor(input, "input", "softplus"), "softplus"), float(beta), float(threshold))


def logsigmoid(input) -> Tensor:
    """``log(sigmoid(x))``, computed without overflow (LogSigmoidBackward0)."""
    return T._call("log_sigmoid", _float(_tensor(input, "input", "logsigmoid"), "logsigmoid"))


def _elu(x, alpha):
    return T._call("elu", _float(x, "elu"), float(alpha))


def elu(input, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise (gradient ``alpha`` at 0, as PyTorch)."""
    return _maybe_inplace(_tensor(input, "input", "elu"), inplace, _elu, alpha)


def _leaky_relu(x, negative_slope):
    return T._call("leaky_relu", _float(x, "leaky_relu"), float(negative_slope))


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` for ``x > 0``, ``negative_slope * x`` otherwise."""
    return _maybe_inplace(_tensor(input, "input", "leaky_relu"), inplace, _leaky_relu, negative_slope)


def _hardtanh(x, min_val, max_val):
    return T._call("hardtanh", x, float(min_val), float(max_val))


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` clipped to ``[min_val, max_val]``; gradient 1 strictly inside, 0 elsewhere."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _maybe_inplace(_tensor(input, "input", "hardtanh"), inplace, _hardtanh, min_val, max_val)


def relu6(input, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def selu(input, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return _maybe_inplace(_tensor(input, "input", "selu"), inplace, _selu)


def _selu(x):
    return T._call("selu", _float(x, "selu"))


def celu(input, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    return _maybe_inplace(_tensor(input, "input", "celu"), inplace, _celu, alpha)


def _celu(x, alpha):
    return T._call("celu", _float(x, "celu"), float(alpha))


def softsign(input) -> Tensor:
    x = _tensor(input, "input", "softsign")
    return x / (1.0 + T.abs(x))


def mish(input, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``."""
    return _maybe_inplace(_tensor(input, "input", "mish"), inplace, _mish)


def _mish(x):
    return T._call("mish", _float(x, "mish"))


def hardsigmoid(input, inplace: bool = False) -> Tensor:
    """``relu6(x + 3) / 6``; gradient 1/6 strictly inside (-3, 3)."""
    return _maybe_inplace(_tensor(input, "input", "hardsigmoid"), inplace, _hardsigmoid)


def _hardsigmoid(x):
    return T._call("hardsigmoid", _float(x, "hardsigmoid"))


def hardswish(input, inplace: bool = False) -> Tensor:
    """``x * relu6(x + 3) / 6``."""
    return _maybe_inplace(_tensor(input, "input", "hardswish"), inplace, _hardswish)


def _hardswish(x):
    return T._call("hardswish", _float(x, "hardswish"))


def threshold(input, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold``, else ``value``."""
    return _maybe_inplace(_tensor(input, "input", "threshold"), inplace, _threshold, threshold, value)


def _threshold(x, threshold, value):
    return T._call("threshold", x, float(threshold), float(value))


def tanhshrink(input) -> Tensor:
    x = _tensor(input, "input", "tanhshrink")
    return x - T.tanh(x)


def sigmoid(input) -> Tensor:
    return T.sigmoid(_tensor(input, "input", "sigmoid"))


def tanh(input) -> Tensor:
    return T.tanh(_tensor(input, "input", "tanh"))


def _softmax_dim(ndim: int, name: str) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  f"as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``exp(x) / sum(exp(x), dim)`` (SoftmaxBackward0)."""
    x = _tensor(input, "input", "softmax")
    return T.softmax(x, _softmax_dim(x.ndim, "softmax") if dim is None else dim, dtype=dtype)


def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``x - logsumexp(x, dim)`` (LogSoftmaxBackward0)."""
    x = _tensor(input, "input", "log_softmax")
    return T.log_softmax(x, _softmax_dim(x.ndim, "log_softmax") if dim is None else dim, dtype=dtype)


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``softmax(-x, dim)``."""
    x = _tensor(input, "input", "softmin")
    return T.softmax(-x, _softmax_dim(x.ndim, "softmin") if dim is None else dim, dtype=dtype)


# --- losses -----------------------------------------------------------------------------------

def _reduction(size_average, reduce, reduction: str) -> str:
    """The ``reduction`` string, from the deprecated ``size_average``/``reduce`` pair when one is given."""
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        return "mean" if size_average and reduce else "sum" if reduce else "none"
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


_REDUCTION_NAMES = {code: name for name, code in REDUCTIONS.items()}


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return T.mean(loss)
    if reduction == "sum":
        return T.sum(loss)
    return loss


def _pointwise_inputs(input, target, op: str) -> tuple[Tensor, Tensor]:
    x, t = _tensor(input, "input", op), _tensor(target, "target", op)
    if tuple(x.shape) != tuple(t.shape):
        warnings.warn(f"Using a target size ({t.shape}) that is different to the input size ({x.shape}). This will "
                      f"likely lead to incorrect results due to broadcasting. Please ensure they have the same size.",
                      UserWarning, stacklevel=3)
    return x, t


def _common_dtype(x: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """Input and target in their promoted dtype (a loss op computes in its input's dtype)."""
    common = T.result_type(x, t)
    return (x if x.dtype == common else T.to(x, common)), (t if t.dtype == common else T.to(t, common))


def _same_shape(x: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """Input and target in one dtype, broadcast to one shape (the loss ops take equal shapes, as PyTorch
    expands them)."""
    x, t = _common_dtype(x, t)
    if tuple(x.shape) == tuple(t.shape):
        return x, t
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(t.shape)))
    return T.expand(x, shape), T.expand(t, shape)


def _constant_weight(weight, name: str, op: str) -> Tensor:
    """A loss's weight, which gets no gradient in PyTorch: one that asks for one is refused, not dropped."""
    w = _tensor(weight, name, op)
    if w.requires_grad and is_grad_enabled():
        raise RuntimeError(f"The function '{op}' is not differentiable with respect to argument '{name}'. This input "
                           f"cannot have requires_grad True.")
    return w


def _weighted(loss: Tensor, weight) -> Tensor:
    return loss if weight is None else loss * _tensor(weight, "weight", "loss")


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None) -> Tensor:
    """Mean squared error ``(x - y) ** 2``, optionally weighted per element."""
    reduction = _reduction(size_average, reduce, reduction)
    x, t = _pointwise_inputs(input, target, "mse_loss")
    if weight is not None:
        d = x - t
        return _reduce(_weighted(d * d, weight), reduction)
    return T._call("mse_loss", *_same_shape(x, t), REDUCTIONS[reduction])


def _mse_loss_composite(x: Tensor, t: Tensor, reduction: int) -> Tensor:
    d = x - t
    return _reduce(d * d, _REDUCTION_NAMES[reduction])


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None) -> Tensor:
    """Mean absolute error ``|x - y|`` (gradient 0 where ``x == y``)."""
    reduction = _reduction(size_average, reduce, reduction)
    x, t = _pointwise_inputs(input, target, "l1_loss")
    return _reduce(_weighted(T.abs(x - t), weight), reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """``0.5 d**2 / beta`` for ``|d| < beta``, ``|d| - 0.5 beta`` beyond (``beta = 0``: the L1 loss)."""
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, t = _pointwise_inputs(input, target, "smooth_l1_loss")
    if beta == 0:
        return _reduce(T.abs(x - t), reduction)
    return T._call("smooth_l1_loss", *_same_shape(x, t), REDUCTIONS[reduction], float(beta))


def _smooth_l1_loss_composite(x: Tensor, t: Tensor, reduction: int, beta: float) -> Tensor:
    return _reduce(T._call("_smooth_l1", x - t, float(beta)), _REDUCTION_NAMES[reduction])


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None) -> Tensor:
    """``0.5 d**2`` for ``|d| < delta``, ``delta * (|d| - 0.5 delta)`` beyond."""
    reduction = _reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, t = _pointwise_inputs(input, target, "huber_loss")
    if weight is None:
        return T._call("huber_loss", *_same_shape(x, t), REDUCTIONS[reduction], float(delta))
    return _reduce(_weighted(T._call("_huber", x - t, float(delta)), weight), reduction)


def _huber_loss_composite(x: Tensor, t: Tensor, reduction: int, delta: float) -> Tensor:
    return _reduce(T._call("_huber", x - t, float(delta)), _REDUCTION_NAMES[reduction])


def _class_layout(input: Tensor, target: Tensor, op: str) -> tuple[Tensor, Tensor, bool]:
    """Input as (N, C, d...) and target as (N, d...); ``True`` when a batch dim was added."""
    if input.ndim == 0:
        raise ValueError(f"{op}: input must have at least 1 dimension (the classes), got a 0-d tensor")
    if input.ndim == 1:
        return T.unsqueeze(input, 0), T.unsqueeze(target, 0), True
    return input, target, False


def _checked_targets(target: Tensor, classes: int, ignore_index: int, op: str) -> Tensor:
    """Class indices outside [0, classes) other than ``ignore_index`` raise, as PyTorch's do (a mask
    that matches no class would silently contribute 0 to the loss)."""
    return _checked(target, 0, classes - 1, ignore_index, "IndexError", f"{op}: Target {{value}} is out of bounds.")


def _class_mask(target: Tensor, classes: int, class_dim: int) -> Tensor:
    """Bool (N, C, d...): True at each sample's target class (a comparison: no index tensor to check)."""
    shape = [1] * (target.ndim + 1)
    shape[class_dim] = classes
    return T.eq(T.unsqueeze(target, class_dim), T.as_tensor(np.arange(classes).reshape(shape)))


def _class_weights(weight, classes: int, ndim: int, like: Tensor) -> Tensor | None:
    """``weight`` shaped (C, 1, ...) to broadcast along the class dim 1 of an ``ndim`` tensor."""
    if weight is None:
        return None
    w = _tensor(weight, "weight", "loss")
    if w.ndim != 1 or w.shape[0] != classes:
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but got "
                           f"weight tensor of shape: {list(w.shape)}")
    return T.reshape(w, (classes,) + (1,) * (ndim - 2))


def _nll_parts(logp: Tensor, target: Tensor, weight, ignore_index: int, op: str, check: bool = True):
    """Per-sample losses (N, d...) and the per-sample weights the mean divides by (``check=False``: the
    targets were range-checked already)."""
    if target.dtype not in (_dt.int64, _dt.int32, _dt.int16, _dt.int8, _dt.uint8):
        raise RuntimeError(f"{op}: expected target of an integer dtype (class indices), got {target.dtype}")
    classes = logp.shape[1]
    if tuple(target.shape) != (logp.shape[0],) + tuple(logp.shape[2:]):
        raise ValueError(f"{op}: expected target of shape {[logp.shape[0]] + list(logp.shape[2:])}, got "
                         f"{list(target.shape)}")
    if check:
        target = _checked_targets(target, classes, ignore_index, op)
    keep = T.ne(target, ignore_index)
    w = _class_weights(weight, classes, logp.ndim, logp)
    if logp.ndim == 2 and classes:
        # (N, C): gather each row's class, O(N) (ignored rows read class 0, zeroed below); the
        # targets are checked, so no index wraps or misses
        index = T.where(keep, target, _const(0, target))
        picked = logp[T.as_tensor(np.arange(logp.shape[0])), index]
        class_w = None if w is None else T.reshape(w, (classes,))[index]
    else:
        mask = _class_mask(target, classes, 1)
        picked = T.sum(T.where(mask, logp, 0.0), 1)
        class_w = None if w is None else T.sum(T.where(mask, w, 0.0), 1)
    sample_w = T.to(keep, logp.dtype) if w is None else T.where(keep, class_w, 0.0)
    loss = T.where(keep, -picked * sample_w, 0.0)
    return loss, sample_w


def _nll(logp: Tensor, target: Tensor, weight, ignore_index: int, reduction: str, op: str) -> Tensor:
    """The NllLossBackward0 op on log-probabilities (N, C, d...) or (C,), after PyTorch's checks."""
    if target.dtype not in (_dt.int64, _dt.int32, _dt.int16, _dt.int8, _dt.uint8):
        raise RuntimeError(f"{op}: expected target of an integer dtype (class indices), got {target.dtype}")
    batched = logp.ndim > 1
    classes = logp.shape[1] if batched else logp.shape[0]
    want = ((logp.shape[0],) + tuple(logp.shape[2:])) if batched else ()
    if tuple(target.shape) != want:
        raise ValueError(f"{op}: expected target of shape {list(want)}, got {list(target.shape)}")
    target = _checked_targets(target, classes, ignore_index, op)
    if weight is None:
        w = T.as_tensor(np.ones(classes, dtype=logp._data.dtype))
    else:
        w = _constant_weight(weight, "weight", op)
        if w.ndim != 1 or w.shape[0] != classes:
            raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but "
                               f"got weight tensor of shape: {list(w.shape)}")
    if logp.ndim <= 2:
        return nll_loss_op(logp, target, w, REDUCTIONS[reduction], ignore_index)
    if logp.ndim == 4:
        return nll_loss2d_op(logp, target, w, REDUCTIONS[reduction], ignore_index)
    # PyTorch views other spatial layouts as (N, C, H, W), and its unreduced loss back
    n, c = logp.shape[:2]
    loss = nll_loss2d_op(T.reshape(logp, (n, c, logp.shape[2], -1)), T.reshape(target, (n, target.shape[1], -1)), w,
                         REDUCTIONS[reduction], ignore_index)
    return T.reshape(loss, tuple(target.shape)) if reduction == "none" else loss


def _nll_loss_composite(logp: Tensor, target: Tensor, weight: Tensor, reduction: int, ignore_index: int) -> Tensor:
    unbatched = logp.ndim == 1
    if unbatched:
        logp, target = T.unsqueeze(logp, 0), T.unsqueeze(target, 0)
    # the table op's target went through _checked_targets in _nll
    loss, sample_w = _nll_parts(logp, target, weight, ignore_index, "nll_loss", check=False)
    if reduction == 1:
        return T.sum(loss) / T.sum(sample_w)
    if reduction == 2:
        return T.sum(loss)
    return T.squeeze(loss, 0) if unbatched else loss


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices, given log-probabilities of shape (N, C, d...) or (C,)."""
    reduction = _reduction(size_average, reduce, reduction)
    x, t = _tensor(input, "input", "nll_loss"), _tensor(target, "target", "nll_loss")
    if x.ndim == 0:
        raise ValueError("nll_loss: input must have at least 1 dimension (the classes), got a 0-d tensor")
    return _nll(x, t, weight, ignore_index, reduction, "nll_loss")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """``nll_loss(log_softmax(input, 1), target)`` for class indices; for class probabilities (a float
    target of the input's shape) ``-sum(target * log_softmax(input, 1), 1)``; both with ``label_smoothing``."""
    reduction = _reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    x, t, unbatched = _class_layout(_tensor(input, "input", "cross_entropy"),
                                    _tensor(target, "target", "cross_entropy"), "cross_entropy")
    classes = x.shape[1]
    logp = T.log_softmax(x, 1)
    w = _class_weights(weight, classes, x.ndim, x)
    if t.dtype.is_floating_point:
        if ignore_index != -100:
            raise RuntimeError("ignore_index is not supported for floating point target")
        if tuple(t.shape) != tuple(x.shape):
            raise RuntimeError(f"cross_entropy: a target of class probabilities must have the input's shape "
                               f"{list(x.shape)}, got {list(t.shape)}")
        if label_smoothing > 0:
            t = t * (1.0 - label_smoothing) + label_smoothing / classes
        terms = logp * t if w is None else logp * t * w
        loss = -T.sum(terms, 1)
        if reduction == "mean":
            return T.mean(loss)
        if reduction == "sum":
            return T.sum(loss)
        return T.squeeze(loss, 0) if unbatched else loss

    if label_smoothing == 0:
        return _nll(T.squeeze(logp, 0) if unbatched else logp, T.squeeze(t, 0) if unbatched else t, weight,
                    ignore_index, reduction, "cross_entropy")
    loss, sample_w = _nll_parts(logp, t, weight, ignore_index, "cross_entropy")
    keep = T.ne(t, ignore_index)
    smooth = -T.sum(logp if w is None else logp * w, 1)
    smooth = T.where(keep, smooth, 0.0)
    if reduction == "mean":
        nll, smooth = T.sum(loss) / T.sum(sample_w), T.sum(smooth) / T.sum(sample_w)
    elif reduction == "sum":
        nll, smooth = T.sum(loss), T.sum(smooth)
    else:
        nll = loss
    out = (1.0 - label_smoothing) * nll + (label_smoothing / classes) * smooth
    return T.squeeze(out, 0) if unbatched and reduction == "none" else out


def _floored_log(x: Tensor) -> Tensor:
    """``log(x)`` floored at -100 (PyTorch's binary_cross_entropy), with no nan gradient at 0."""
    positive = T.gt(x, 0.0)
    return T.clamp_min(T.where(positive, T.log(T.where(positive, x, 1.0)), -100.0), -100.0)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """``-(y log x + (1 - y) log(1 - x))`` for probabilities ``x``, each log floored at -100."""
    reduction = _reduction(size_average, reduce, reduction)
    x, t = _tensor(input, "input", "binary_cross_entropy"), _tensor(target, "target", "binary_cross_entropy")
    if tuple(x.shape) != tuple(t.shape):
        raise ValueError(f"Using a target size ({t.shape}) that is different to the input size ({x.shape}) is "
                         f"deprecated. Please ensure they have the same size.")
    x = _checked(x, 0.0, 1.0, None, "RuntimeError",
                 "binary_cross_entropy: all elements of input should be between 0 and 1 (found {value})")
    x, t = _common_dtype(x, t)
    w = _const(1.0, x) if weight is None else _constant_weight(weight, "weight", "binary_cross_entropy")
    return T._call("binary_cross_entropy", x, t, w, REDUCTIONS[reduction])


def _binary_cross_entropy_composite(x: Tensor, t: Tensor, weight: Tensor, reduction: int) -> Tensor:
    loss = -(t * _floored_log(x) + (1.0 - t) * _floored_log(1.0 - x))
    return _reduce(loss * weight, _REDUCTION_NAMES[reduction])


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None) -> Tensor:
    """``binary_cross_entropy(sigmoid(x), y)`` computed stably from the logits ``x``; ``pos_weight``
    weighs the positive term (broadcast along the last dim, the classes)."""
    reduction = _reduction(size_average, reduce, reduction)
    x = _tensor(input, "input", "binary_cross_entropy_with_logits")
    t = _tensor(target, "target", "binary_cross_entropy_with_logits")
    if tuple(x.shape) != tuple(t.shape):
        raise ValueError(f"Target size ({t.shape}) must be the same as input size ({x.shape})")
    op = "binary_cross_entropy_with_logits"
    x, t = _common_dtype(x, t)
    w = _const(1.0, x) if weight is None else _constant_weight(weight, "weight", op)
    pw = _const(1.0, x) if pos_weight is None else _constant_weight(pos_weight, "pos_weight", op)
    return T._call(op, x, t, w, pw, REDUCTIONS[reduction])


def _binary_cross_entropy_with_logits_composite(x: Tensor, t: Tensor, weight: Tensor, pos_weight: Tensor,
                                                reduction: int) -> Tensor:
    softplus_neg = _softplus_unit(-x)          # -log(sigmoid(x))
    loss = (1.0 - t) * x + (1.0 + (pos_weight - 1.0) * t) * softplus_neg
    return _reduce(loss * weight, _REDUCTION_NAMES[reduction])


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Pointwise KL divergence ``y * (log y - x)`` for log-probabilities ``x`` (``log_target``: ``y`` given as a
    log too); ``reduction='batchmean'`` divides the sum by the batch size, the mathematically right mean."""
    if reduction == "batchmean":
        batchmean, reduction = True, "sum"
    else:
        batchmean = False
    reduction = _reduction(size_average, reduce, reduction)
    if reduction == "mean" and not batchmean and size_average is None and reduce is None:
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    x, t = _tensor(input, "input", "kl_div"), _tensor(target, "target", "kl_div")
    if log_target:
        loss = T.exp(t) * (t - x)
    else:
        loss = T.xlogy(t, t) - t * x
    out = _reduce(loss, reduction)
    if batchmean and x.ndim:
        out = out / x.shape[0]
    return out


# --- linear, dropout, normalisation, embeddings -----------------------------------------------

def linear(input, weight, bias=None) -> Tensor:
    """``input @ weight.T + bias``; with a bias, one addmm over the rows (AddmmBackward0), the other
    shapes viewed as 2-d around it as PyTorch does."""
    x, w = _tensor(input, "input", "linear"), _tensor(weight, "weight", "linear")
    if bias is None or w.ndim != 2 or x.ndim == 0:
        out = T.matmul(x, T.t(w)) if w.ndim == 2 else T.matmul(x, w)
        return out if bias is None else out + _tensor(bias, "bias", "linear")
    b = _tensor(bias, "bias", "linear")
    # PyTorch's addmm refuses mixed dtypes (a promoted float64 result would be a silent difference)
    if x.dtype is not w.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {T._scalar_type(x)} and "
                           f"{T._scalar_type(w)}" + T._NO_PROMOTION)
    if b.dtype is not w.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {T._scalar_type(b)} and "
                           f"{T._scalar_type(w)}" + T._NO_PROMOTION)
    if x.shape[-1] != w.shape[1]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({math.prod(x.shape[:-1])}x{x.shape[-1]} "
                           f"and {w.shape[1]}x{w.shape[0]})")
    if x.ndim == 2:
        return T._call("addmm", b, x, T.t(w))
    if not (x.is_contiguous() and b.is_contiguous()):   # PyTorch folds only contiguous tensors
        return T.matmul(x, T.t(w)) + b
    rows = T.reshape(x, (-1, x.shape[-1]))
    return T.reshape(T._call("addmm", b, rows, T.t(w)), tuple(x.shape[:-1]) + (w.shape[0],))


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim`` (broadcasting)."""
    a, b = _tensor(x1, "x1", "cosine_similarity"), _tensor(x2, "x2", "cosine_similarity")
    na = T.clamp_min(T.linalg_vector_norm(a, 2, dim, keepdim=False), eps)
    nb = T.clamp_min(T.linalg_vector_norm(b, 2, dim, keepdim=False), eps)
    return T.sum(a * b, dim) / (na * nb)


def _dropout(x, p):
    return x * _dropout_mask(x, p)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``; the identity when not
    ``training``.  The mask comes from symgrad's generator (``symgrad.manual_seed``), freshly drawn at every call,
    also inside a compiled function."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    x = _tensor(input, "input", "dropout")
    if not training or p == 0.0:
        return x
    return _maybe_inplace(x, inplace, _dropout, p)


def _normalized_dims(input: Tensor, normalized_shape, op: str) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k:]) != tuple(int(s) for s in shape):
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape [*, "
                           f"{', '.join(str(s) for s in shape)}], but got input of size{list(input.shape)}")
    return tuple(range(input.ndim - k, input.ndim))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims (biased variance), then scale and shift
    (NativeLayerNormBackward0)."""
    x = _float(_tensor(input, "input", "layer_norm"), "layer_norm")
    dims = _normalized_dims(x, normalized_shape, "layer_norm")
    shape = tuple(x.shape[d] for d in dims)
    w = _const(1.0, x) if weight is None else _tensor(weight, "weight", "layer_norm")
    b = _const(0.0, x) if bias is None else _tensor(bias, "bias", "layer_norm")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise RuntimeError(f"layer_norm: expected {name} of shape {list(shape)} (normalized_shape), got "
                               f"{list(t.shape)}")
    return native_layer_norm_op(x, shape, w, b, eps)


def _native_layer_norm_composite(x: Tensor, normalized_shape, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    centred = x - T.mean(x, dims, keepdim=True)
    var = T.mean(centred * centred, dims, keepdim=True)
    return centred * T.rsqrt(var + eps) * weight + bias


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) by the batch statistics (``training``) or by the running ones.

    In training mode the running statistics are updated in place, as PyTorch does: ``running_mean``
    with the batch mean and ``running_var`` with the unbiased batch variance, by ``momentum`` (``None``:
    the cumulative average is not supported)."""
    x = _tensor(input, "input", "batch_norm")
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected an input of at least 2 dims (N, C, ...), got {x.ndim}-d")
    channels = x.shape[1]
    dims = (0,) + tuple(range(2, x.ndim))
    shape = (1, channels) + (1,) * (x.ndim - 2)
    if training:
        count = x.shape[0] * int(np.prod(x.shape[2:], dtype=np.int64))
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(x.shape)}")
        mean = T.mean(x, dims, keepdim=True)
        centred = x - mean
        var = T.mean(centred * centred, dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            _update_running_stats(running_mean, running_var, mean, var, count, momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var must be given when training=False")
        centred = x - T.reshape(running_mean, shape)
        var = T.reshape(running_var, shape)
    out = centred * T.rsqrt(var + eps)
    if weight is not None:
        out = out * T.reshape(_tensor(weight, "weight", "batch_norm"), shape)
    if bias is not None:
        out = out + T.reshape(_tensor(bias, "bias", "batch_norm"), shape)
    return out


def _update_running_stats(running_mean, running_var, mean, var, count, momentum) -> None:
    if momentum is None:
        raise NotImplementedError("batch_norm: momentum=None (a cumulative moving average) is not supported; "
                                  "pass a number")
    if _tracing():
        raise NotImplementedError("batch_norm: updating running_mean/running_var in place inside a compiled "
                                  "function is not supported; compile the model in eval mode, or pass "
                                  "running_mean=None and running_var=None")
    from ..autograd.grad_mode import no_grad
    with no_grad():
        if running_mean is not None:
            new = (1.0 - momentum) * running_mean._data + momentum * mean._data.reshape(-1)
            running_mean._data[...] = new
            running_mean._version_counter.value += 1
        if running_var is not None:
            unbiased = var._data.reshape(-1) * (count / (count - 1))
            running_var._data[...] = (1.0 - momentum) * running_var._data + momentum * unbiased
            running_var._version_counter.value += 1


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    """Normalise each group of ``C / num_groups`` channels of each sample, then scale and shift per channel."""
    x = _tensor(input, "input", "group_norm")
    if x.ndim < 2:
        raise RuntimeError(f"group_norm: expected an input of at least 2 dims (N, C, ...), got {x.ndim}-d")
    n, channels = x.shape[0], x.shape[1]
    if channels % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(x.shape)} and num_groups={num_groups}")
    grouped = T.reshape(x, (n, num_groups, -1))
    centred = grouped - T.mean(grouped, 2, keepdim=True)
    var = T.mean(centred * centred, 2, keepdim=True)
    out = T.reshape(centred * T.rsqrt(var + eps), tuple(x.shape))
    shape = (1, channels) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * T.reshape(_tensor(weight, "weight", "group_norm"), shape)
    if bias is not None:
        out = out + T.reshape(_tensor(bias, "bias", "group_norm"), shape)
    return out


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """``x / max(||x||_p, eps)`` along ``dim``."""
    if out is not None:
        raise NotImplementedError("normalize: the out= argument is not supported; use the returned tensor")
    x = _tensor(input, "input", "normalize")
    norm = T.linalg_vector_norm(x, p, dim, keepdim=True)
    return x / T.expand(T.clamp_min(norm, eps), tuple(x.shape))     # PyTorch's graph: an ExpandBackward0


def one_hot(tensor, num_classes: int = -1) -> Tensor:
    """int64 tensor with a trailing dim of ``num_classes``, 1 at each value's position."""
    t = _tensor(tensor, "tensor", "one_hot")
    if t.dtype is not _dt.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if _tracing():
            raise NotImplementedError("one_hot: num_classes=-1 reads the data to size the result, which a compiled "
                                      "function cannot do; pass num_classes explicitly")
        num_classes = int(t._data.max()) + 1 if t._data.size else 0
    # a value outside [0, num_classes) would give a row of zeros
    t = _checked(t, 0, num_classes - 1, None, "RuntimeError",
                 f"one_hot: Class values must be non-negative and smaller than num_classes ({num_classes}); "
                 f"found {{value}}.")
    return T.to(_class_mask(t, num_classes, t.ndim), _dt.int64)


def embedding(input, weight, padding_idx: int | None = None, max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` at the indices ``input``; the row ``padding_idx`` gets no gradient."""
    if max_norm is not None:
        raise NotImplementedError("embedding: max_norm (renormalising weight rows in place) is not supported; "
                                  "leave max_norm=None")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq=True is not supported")
    if sparse:
        raise NotImplementedError("embedding: sparse=True is not supported (symgrad has no sparse gradients)")
    idx, w = _tensor(input, "input", "embedding"), _tensor(weight, "weight", "embedding")
    if idx.dtype.is_floating_point:
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {idx.dtype} instead")
    rows = w.shape[0]
    idx = _checked(idx, 0, rows - 1, None, "IndexError",
                   f"embedding: index out of range in self (index {{value}}, num_embeddings {rows})")
    if w.ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got a weight of size {list(w.shape)}")
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx %= rows
    return embedding_op(w, idx, -1 if padding_idx is None else padding_idx)


def _embedding_composite(weight: Tensor, indices: Tensor, padding_idx: int) -> Tensor:
    out = weight[indices]
    if padding_idx >= 0:
        out = T.where(T.unsqueeze(T.eq(indices, padding_idx), -1), out.detach(), out)
    return out


# --- padding ------------------------------------------------------------------------------------

_PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(input, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad (or, with negative widths in constant mode, crop) the last ``len(pad) // 2`` dims; ``pad`` lists
    ``(left, right)`` pairs starting from the last dim."""
    x = _tensor(input, "input", "pad")
    widths = [int(p) for p in pad]
    if len(widths) % 2:
        raise ValueError("Padding length must be divisible by 2")
    if len(widths) // 2 > x.ndim:
        raise ValueError("Padding length should be less than or equal to two times the input dimension but got "
                         f"padding length {len(widths)} and input of dimension {x.ndim}")
    pairs = [(0, 0)] * x.ndim
    for k in range(len(widths) // 2):
        pairs[x.ndim - 1 - k] = (widths[2 * k], widths[2 * k + 1])
    if mode == "constant":
        for d, (before, after) in enumerate(pairs):
            if x.shape[d] + before + after < 0:
                raise RuntimeError(f"The input size {x.shape[d]}, plus negative padding {before} and {after} "
                                   f"resulted in a negative output size, which is invalid. Check dimension {d} of "
                                   f"your input.")
        return constant_pad_nd_op(x, widths, 0.0 if value is None else value)
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad: mode={mode!r} is not supported (supported: 'constant', 'reflect', "
                                  f"'replicate', 'circular')")
    if value is not None and value != 0:
        raise ValueError(f"Padding mode \"{mode}\" doesn't take in value argument.")
    padded_dims = len(widths) // 2
    if not (padded_dims + 1 <= x.ndim <= padded_dims + 2) or padded_dims > 3:
        raise NotImplementedError(f"pad: mode={mode!r} pads the last 1 to 3 dims of a tensor with one or two more "
                                  f"leading dims (batch, channels); got {len(widths)} pad values for a {x.ndim}-d "
                                  f"input")
    for d, (before, after) in enumerate(pairs):
        if before < 0 or after < 0:
            raise NotImplementedError(f"pad: negative padding is only supported in mode 'constant', got {widths}")
        limit = x.shape[d] - 1 if mode == "reflect" else x.shape[d]
        if before > limit or after > limit:
            raise RuntimeError(f"pad: padding ({before}, {after}) of dim {d} must be at most {limit} in mode "
                               f"{mode!r} (the dim has size {x.shape[d]})")
    if mode == "circular":
        return T._numpy_pad(x, pairs, _PAD_MODES[mode])
    return index_pad_op(x, widths, mode)


def _index_pad_composite(x: Tensor, padding, mode: str) -> Tensor:
    return T._numpy_pad(x, pad_pairs(padding, x.ndim), _PAD_MODES[mode])


def _reflection_pad_composite(x: Tensor, padding) -> Tensor:
    return _index_pad_composite(x, padding, "reflect")


def _replication_pad_composite(x: Tensor, padding) -> Tensor:
    return _index_pad_composite(x, padding, "replicate")



# --- convolution and pooling --------------------------------------------------------------------

def _constant_pad_nd_composite(x: Tensor, pad, value: float) -> Tensor:
    pairs = pad_pairs(pad, x.ndim)
    for d, (before, after) in enumerate(pairs):     # negative widths crop
        if before < 0 or after < 0:
            x = T.slice_op(x, d, -before if before < 0 else 0, x.shape[d] + after if after < 0 else x.shape[d])
    positive = [(max(b, 0), max(a, 0)) for b, a in pairs]
    if not any(b or a for b, a in positive):
        return T.clone(x)
    return T._numpy_pad(x, positive, "constant", value)


def _tuple(value, n: int, name: str, op: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{op}: {name} must be an int or a tuple of {n} ints, got {value}")
    return value


def _batched(x: Tensor, spatial: int, op: str) -> tuple[Tensor, bool]:
    if x.ndim == spatial + 1:
        return T.unsqueeze(x, 0), True
    if x.ndim != spatial + 2:
        raise RuntimeError(f"{op}: expected a {spatial + 1}-d (unbatched) or {spatial + 2}-d (batched) input, got "
                           f"input of size: {list(x.shape)}")
    return x, False


def _conv(input, weight, bias, stride, padding, dilation, groups, spatial: int, op: str) -> Tensor:
    x = _tensor(input, "input", op)
    w = _tensor(weight, "weight", op)
    x, unbatched = _batched(x, spatial, op)
    if w.ndim != spatial + 2:
        raise RuntimeError(f"{op}: expected a {spatial + 2}-d weight, got weight of size {list(w.shape)}")
    if x.dtype is not w.dtype:
        raise RuntimeError(f"{op}: input ({x.dtype}) and weight ({w.dtype}) must have the same dtype")
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise RuntimeError(f"{op}: non-positive groups is not supported, got groups={groups}")
    stride = _tuple(stride, spatial, "stride", op)
    dilation = _tuple(dilation, spatial, "dilation", op)
    kernel = tuple(w.shape[2:])
    out_channels, in_per_group = w.shape[0], w.shape[1]
    if x.shape[1] != in_per_group * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(w.shape)}, expected input{list(x.shape)} to "
                           f"have {in_per_group * groups} channels, but got {x.shape[1]} channels instead")
    if out_channels % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size {list(w.shape)} instead")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise RuntimeError(f"{op}: stride {stride} and dilation {dilation} must be positive")
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * spatial
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
            pads = [(t // 2, t - t // 2) for t in totals]   # the odd one out goes after, as PyTorch
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    else:
        pads = [(p, p) for p in _tuple(padding, spatial, "padding", op)]
        if any(p < 0 for p, _ in pads):
            raise RuntimeError(f"{op}: negative padding is not supported, got padding={padding}")
    sizes = [x.shape[2 + i] + pads[i][0] + pads[i][1] for i in range(spatial)]
    if any(window_count(sizes[i], kernel[i], dilation[i], stride[i]) == 0 for i in range(spatial)):
        raise RuntimeError(f"{op}: Calculated padded input size per channel: ({' x '.join(map(str, sizes))}). "
                           f"Kernel size: ({' x '.join(map(str, kernel))}). Kernel size can't be greater than actual "
                           f"input size")
    b = None if bias is None else _tensor(bias, "bias", op)
    if b is not None and tuple(b.shape) != (out_channels,):
        raise RuntimeError(f"Given weight of size {list(w.shape)}, expected bias to be 1-dimensional with "
                           f"{out_channels} elements, but got bias of size {list(b.shape)} instead")
    if any(a != b for b, a in pads):    # 'same' with an even span: the extra column goes after, padded first
        x = constant_pad_nd_op(x, [width for b, a in reversed(pads) for width in (0, a - b)], 0.0)
        pads = [(b, b) for b, _ in pads]
    out = convolution_op(x, w, b, stride, [p for pair in pads for p in pair], dilation, groups)
    return T.squeeze(out, 0) if unbatched else out


def _convolution_composite(x: Tensor, w: Tensor, bias, stride, padding, dilation, groups: int) -> Tensor:
    spatial = x.ndim - 2
    kernel = tuple(w.shape[2:])
    out_channels = w.shape[0]
    pads = [(padding[2 * i], padding[2 * i + 1]) for i in range(spatial)]
    stride, dilation = tuple(stride), tuple(dilation)
    if spatial == 1:      # a 1-d convolution is a 2-d one over a height of 1
        x, w = T.unsqueeze(x, 2), T.unsqueeze(w, 2)
        kernel, stride, dilation, pads = (1,) + kernel, (1,) + stride, (1,) + dilation, [(0, 0)] + pads
    if any(b or a for b, a in pads):
        x = T._numpy_pad(x, [(0, 0), (0, 0)] + pads, "constant", 0.0)
    cols = _im2col(x, kernel, dilation, stride, CONV_ORDER)          # (C, kh, kw, N, OH, OW)
    c, kh, kw, n, oh, ow = cols.shape
    taps = (c // groups) * kh * kw
    if groups == 1:     # one (O, K) @ (K, N*OH*OW) matmul
        out = T.mm(T.reshape(w, (out_channels, taps)), T.reshape(cols, (taps, n * oh * ow)))
    else:
        out = T.bmm(T.reshape(w, (groups, out_channels // groups, taps)), T.reshape(cols, (groups, taps, n * oh * ow)))
    if bias is not None:
        out = T.reshape(out, (out_channels, n * oh * ow)) + T.reshape(bias, (out_channels, 1))
    out = T.permute(T.reshape(out, (out_channels, n, oh, ow)), (1, 0, 2, 3))
    return T.squeeze(out, 2) if spatial == 1 else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """1-d cross-correlation of (N, C, L) with (O, C / groups, k); ``padding`` may be 'same' or 'valid'."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1) -> Tensor:
    """2-d cross-correlation of (N, C, H, W) with (O, C / groups, kh, kw): windows gathered by ``_im2col``,
    then one matmul; ``padding`` may be 'same' or 'valid'."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def _pool_args(input, kernel_size, stride, padding, dilation, ceil_mode, op):
    x = _tensor(input, "input", op)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"{op}: expected a 3-d (unbatched) or 4-d (batched) input, got input of size: "
                           f"{list(x.shape)}")
    kernel = _tuple(kernel_size, 2, "kernel_size", op)
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else \
        _tuple(stride, 2, "stride", op)
    padding = _tuple(padding, 2, "padding", op)
    dilation = _tuple(dilation, 2, "dilation", op)
    if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise RuntimeError(f"{op}: kernel_size {kernel}, stride {stride} and dilation {dilation} must be positive")
    geometry = [pool_geometry(x.shape[-2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
                for i in range(2)]
    if any(count <= 0 for count, _ in geometry):
        raise RuntimeError(f"{op}: Given input size: ({'x'.join(map(str, x.shape[-3:]))}). Calculated output size: "
                           f"({x.shape[-3]}x{geometry[0][0]}x{geometry[1][0]}). Output size is too small")
    return x, kernel, stride, padding, dilation, geometry


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Maximum over each window; the gradient goes to the first maximal element of a window (as PyTorch's)."""
    x, kernel, stride, padding, dilation, geometry = _pool_args(
        input, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    for i in range(2):
        if padding[i] > (dilation[i] * (kernel[i] - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={padding[i]}, "
                               f"kernel_size={kernel[i]} and dilation={dilation[i]}")
    values = max_pool2d_op(x, kernel, stride, padding, dilation, ceil_mode)
    if not return_indices:
        return values
    with no_grad():   # the positions of the maxima: the composition's, without a gradient
        _, indices = _max_pool2d_parts(x, kernel, stride, padding, dilation, ceil_mode, True)
    return values, indices


def _max_pool2d_composite(x: Tensor, kernel, stride, padding, dilation, ceil_mode: bool) -> Tensor:
    return _max_pool2d_parts(x, kernel, stride, padding, dilation, ceil_mode, False)


def _max_pool2d_parts(x: Tensor, kernel, stride, padding, dilation, ceil_mode: bool, return_indices: bool):
    unbatched = x.ndim == 3
    if unbatched:
        x = T.unsqueeze(x, 0)
    geometry = [pool_geometry(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
                for i in range(2)]
    pads = [(0, 0), (0, 0)] + [(padding[i], padding[i] + geometry[i][1]) for i in range(2)]
    if any(b or a for b, a in pads):
        x_padded = T._numpy_pad(x, pads, "constant", -math.inf)
    else:
        x_padded = x
    cols = _im2col(x_padded, kernel, dilation, stride, POOL_ORDER)     # (N, C, OH, OW, kh, kw)
    n, c, oh, ow, kh, kw = cols.shape
    values, positions = T.max(T.reshape(cols, (n, c, oh, ow, kh * kw)), -1)
    if return_indices:
        # flat position in the unpadded input's H x W plane of each window's maximum
        rows = _const(np.arange(oh).reshape(oh, 1) * stride[0] - padding[0], positions)
        cols_ = _const(np.arange(ow).reshape(1, ow) * stride[1] - padding[1], positions)
        i = T.floor_divide(positions, kw)
        j = positions - i * kw
        indices = (rows + i * dilation[0]) * x.shape[3] + cols_ + j * dilation[1]
        if unbatched:
            return T.squeeze(values, 0), T.squeeze(indices, 0)
        return values, indices
    return T.squeeze(values, 0) if unbatched else values


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override=None) -> Tensor:
    """Mean over each window; the divisor counts the padding (``count_include_pad``) but never positions that
    ``ceil_mode`` adds beyond it, as PyTorch's."""
    x, kernel, stride, padding, _, geometry = _pool_args(
        input, kernel_size, stride, padding, 1, ceil_mode, "avg_pool2d")
    for i in range(2):
        if padding[i] > kernel[i] // 2:
            raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got "
                               f"padW = {padding[1]}, padH = {padding[0]}, kW = {kernel[1]}, kH = {kernel[0]}")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    return avg_pool2d_op(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _avg_pool2d_composite(x: Tensor, kernel, stride, padding, ceil_mode: bool, count_include_pad: bool,
                          divisor_override) -> Tensor:
    unbatched = x.ndim == 3
    if unbatched:
        x = T.unsqueeze(x, 0)
    geometry = [pool_geometry(x.shape[2 + i], kernel[i], stride[i], padding[i], 1, ceil_mode) for i in range(2)]
    pads = [(0, 0), (0, 0)] + [(padding[i], padding[i] + geometry[i][1]) for i in range(2)]
    x_padded = T._numpy_pad(x, pads, "constant", 0.0) if any(b or a for b, a in pads) else x
    cols = _im2col(x_padded, kernel, (1, 1), stride, POOL_ORDER)
    sums = T.sum(cols, (4, 5))
    if divisor_override is not None:
        out = sums / float(divisor_override)
    else:
        out = sums / _const(avg_pool_divisors(x.shape[2:], kernel, stride, padding, ceil_mode, count_include_pad,
                                              None), sums)
    return T.squeeze(out, 0) if unbatched else out


def _as_2d_pool(input, op):
    x = _tensor(input, "input", op)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"{op}: expected a 2-d (unbatched) or 3-d (batched) input, got input of size: "
                           f"{list(x.shape)}")
    return T.unsqueeze(x, -2)


def _first(value):
    return value if value is None or isinstance(value, (int, np.integer)) else tuple(value)[0]


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """:func:`max_pool2d` over a height of 1."""
    x = _as_2d_pool(input, "max_pool1d")
    stride = _first(stride)
    if stride is not None and not isinstance(stride, (int, np.integer)):
        stride = None
    out = max_pool2d(x, (1, _first(kernel_size)), None if stride is None else (1, stride), (0, _first(padding)),
                     (1, _first(dilation)), ceil_mode, return_indices)
    if return_indices:
        return T.squeeze(out[0], -2), T.squeeze(out[1], -2)
    return T.squeeze(out, -2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """:func:`avg_pool2d` over a height of 1."""
    x = _as_2d_pool(input, "avg_pool1d")
    stride = _first(stride)
    out = avg_pool2d(x, (1, _first(kernel_size)), None if stride is None else (1, stride), (0, _first(padding)),
                     ceil_mode, count_include_pad)
    return T.squeeze(out, -2)


def adaptive_avg_pool2d(input, output_size) -> Tensor:
    """Mean over ``output_size`` windows that tile the input, window ``i`` spanning
    ``[floor(i * H / OH), ceil((i + 1) * H / OH))`` (PyTorch's bins; they may overlap)."""
    x, unbatched = _batched(_tensor(input, "input", "adaptive_avg_pool2d"), 2, "adaptive_avg_pool2d")
    sizes = (output_size,) * 2 if isinstance(output_size, (int, np.integer)) or output_size is None else \
        tuple(output_size)
    sizes = tuple(x.shape[2 + i] if s is None else int(s) for i, s in enumerate(sizes))
    if any(s <= 0 for s in sizes):
        raise RuntimeError(f"adaptive_avg_pool2d: output_size must be positive, got {sizes}")
    out = x
    for axis, (size, bins) in enumerate(zip(x.shape[2:], sizes)):
        dim = 2 + axis
        if size % bins == 0:      # equal windows: one reshape and a mean
            shape = list(out.shape)
            shape[dim:dim + 1] = [bins, size // bins]
            out = T.mean(T.reshape(out, tuple(shape)), dim + 1)
            continue
        # uneven windows: a (bins, size) averaging matrix along this dim (a matmul, differentiable)
        weights = np.zeros((size, bins))
        for i in range(bins):
            start, end = (i * size) // bins, -(-((i + 1) * size) // bins)
            weights[start:end, i] = 1.0 / (end - start)
        moved = T.movedim(out, dim, -1)
        out = T.movedim(T.matmul(moved, _const(weights, out)), -1, dim)
    return T.squeeze(out, 0) if unbatched else out


def unfold(input, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding windows of an (N, C, H, W) input as (N, C * kh * kw, L), PyTorch's im2col layout."""
    x, unbatched = _batched(_tensor(input, "input", "unfold"), 2, "unfold")
    kernel = _tuple(kernel_size, 2, "kernel_size", "unfold")
    dilation = _tuple(dilation, 2, "dilation", "unfold")
    padding = _tuple(padding, 2, "padding", "unfold")
    stride = _tuple(stride, 2, "stride", "unfold")
    if any(padding):
        x = T._numpy_pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding], "constant", 0.0)
    if any(window_count(x.shape[2 + i], kernel[i], dilation[i], stride[i]) == 0 for i in range(2)):
        raise RuntimeError(f"unfold: the kernel {kernel} with dilation {dilation} does not fit the padded input "
                           f"{list(x.shape[2:])}")
    cols = _im2col(x, kernel, dilation, stride)           # (N, C, kh, kw, OH, OW)
    n, c, kh, kw, oh, ow = cols.shape
    out = T.reshape(cols, (n, c * kh * kw, oh * ow))
    return T.squeeze(out, 0) if unbatched else out


# --- attention --------------------------------------------------------------------------------

def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """``softmax(q @ k.T * scale + mask) @ v`` over the last two dims; a bool mask keeps the True positions,
    a float mask is added; ``is_causal`` keeps the lower triangle.  A query whose every key is masked gets
    zeros (as PyTorch's CPU kernels).  Where PyTorch's CPU dispatch takes its fused kernel (see
    ``_takes_cpu_kernel``) the result is one node, ScaledDotProductFlashAttentionForCpuBackward0; otherwise
    the composition PyTorch's math fallback also records (matmul, softmax, matmul)."""
    op = "scaled_dot_product_attention"
    q, k, v = _tensor(query, "query", op), _tensor(key, "key", op), _tensor(value, "value", op)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise RuntimeError(f"{op}: query, key and value must have at least 2 dims")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    mask = None if attn_mask is None else _tensor(attn_mask, "attn_mask", op)
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] and q.shape[-3] % k.shape[-3]:
        raise RuntimeError(f"{op}: with enable_gqa, the query heads ({q.shape[-3]}) must be a multiple of the "
                           f"key/value heads ({k.shape[-3]})")
    if _takes_cpu_kernel(q, k, v, mask, dropout_p, enable_gqa):
        if mask is None:
            additive = T.as_tensor(0.0).to(q.dtype)
        else:
            # a 0-d mask as (1, 1): the op reads a 0-d mask as "none" when it is decomposed
            additive = mask.detach() if mask.ndim else T.reshape(mask.detach(), (1, 1))
            additive = T.where(additive, 0.0, -math.inf) if mask.dtype is _dt.bool_ else additive
            additive = additive.to(q.dtype)
        return sdpa_flash_op(q, k, v, additive, is_causal, factor)
    if enable_gqa and q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k, v = T.repeat_interleave(k, repeat, -3), T.repeat_interleave(v, repeat, -3)
    return _attention_composite(q, k, v, mask, is_causal, factor, dropout_p)


def _takes_cpu_kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                      enable_gqa: bool = False) -> bool:
    """Whether PyTorch's CPU dispatch runs its fused attention kernel for these inputs: 4-d query, key and
    value of one batch and head count (no broadcasting; with ``enable_gqa`` key and value may have fewer
    heads) and one head size, nonempty sequences, unit stride in the last dim, no dropout, and a mask (if
    any) that needs no gradient and broadcasts to the scores."""
    if not (q.ndim == k.ndim == v.ndim == 4) or dropout_p > 0.0:
        return False
    heads_agree = q.shape[1] == k.shape[1] or (enable_gqa and k.shape[1] > 0 and q.shape[1] % k.shape[1] == 0)
    if not (heads_agree and q.shape[0] == k.shape[0] == v.shape[0] and k.shape[1] == v.shape[1]
            and q.shape[-1] == k.shape[-1] == v.shape[-1]
            and k.shape[-2] == v.shape[-2] and q.shape[-2] > 0 and k.shape[-2] > 0):
        return False
    if any(t._data.strides[-1] != t._data.itemsize and t.shape[-1] > 1 for t in (q, k, v)):
        return False
    if mask is None:
        return True
    if mask.requires_grad or mask.ndim > 4:
        return False
    scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    try:
        return np.broadcast_shapes(tuple(mask.shape), scores) == scores
    except ValueError:
        return False


def _attention_composite(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, factor: float,
                         dropout_p: float = 0.0) -> Tensor:
    length, source = q.shape[-2], k.shape[-2]
    scores = T.matmul(q, T.transpose(k, -2, -1)) * factor
    if is_causal:
        scores = T.where(T.as_tensor(np.tril(np.ones((length, source), dtype=bool))), scores, -math.inf)
    elif mask is not None:
        scores = T.where(mask, scores, -math.inf) if mask.dtype is _dt.bool_ else scores + mask
    if is_causal or mask is not None:
        # a row that masks every key attends to nothing: zeros, as PyTorch (not softmax's 0/0), and
        # its scores are replaced before the softmax so that no nan reaches a gradient either
        empty = T.eq(T.amax(scores.detach(), -1, keepdim=True), -math.inf)
        weights = T.where(empty, 0.0, T.softmax(T.where(empty, 0.0, scores), -1))
    else:
        weights = T.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return T.matmul(weights, v)


def _sdpa_flash_composite(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor, is_causal: bool,
                          scale: float) -> Tensor:
    # the mask an additive constant made by scaled_dot_product_attention: a 0-d zero when there was none
    mask = None if attn_mask.ndim == 0 else attn_mask
    return _attention_composite(q, repeat_heads(k, q), repeat_heads(v, q), mask, is_causal, scale)
