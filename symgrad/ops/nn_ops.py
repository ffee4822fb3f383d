"""The primitives torch.nn.functional is built on: window gathering for convolution and pooling,
dropout's mask, and the run-time range check of indices and probabilities.  Their rules are in
derivatives.yaml; ``symgrad.nn.functional`` composes them.

>>> import numpy as np, symgrad
>>> from symgrad.ops.nn_ops import _im2col
>>> x = symgrad.tensor(np.arange(9.0).reshape(1, 1, 3, 3))
>>> _im2col(x, (2, 2), (1, 1), (1, 1)).shape     # (N, C, kh, kw, OH, OW)
symgrad.Size([1, 1, 2, 2, 2, 2])
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import _device
from . import formula_namespaces
from . import functional as F
from .registry import forward


def window_count(size: int, kernel: int, dilation: int, stride: int) -> int:
    """How many windows of ``kernel`` taps fit in ``size`` (0 when none does)."""
    span = dilation * (kernel - 1) + 1
    return 0 if size < span else (size - span) // stride + 1


# the axes of a window array, in the order the primitives name them
CANONICAL = (0, 1, 2, 3, 4, 5)          # (N, C, kh, kw, OH, OW)
CONV_ORDER = (1, 2, 3, 0, 4, 5)         # (C, kh, kw, N, OH, OW): reshaped, the (K, N*L) matrix of a matmul
POOL_ORDER = (0, 1, 4, 5, 2, 3)         # (N, C, OH, OW, kh, kw): the window last, for a reduction


@forward("_im2col")
def _im2col_fwd(self, kernel_size, dilation, stride, order=CANONICAL):
    n, c, h, w = self.shape
    (kh, kw), (dh, dw), (sh, sw) = kernel_size, dilation, stride
    oh, ow = window_count(h, kh, dh, sh), window_count(w, kw, dw, sw)
    s = self.strides
    shape = (n, c, kh, kw, oh, ow)
    strides = (s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw)
    windows = np.lib.stride_tricks.as_strided(self, shape=tuple(shape[a] for a in order),
                                              strides=tuple(strides[a] for a in order), writeable=False)
    return np.ascontiguousarray(windows)


@forward("_col2im")
def _col2im_fwd(cols, input_sizes, kernel_size, dilation, stride, order=CANONICAL):
    (kh, kw), (dh, dw), (sh, sw) = kernel_size, dilation, stride
    cols = np.transpose(cols, np.argsort(order))        # a view with the axes (N, C, kh, kw, OH, OW)
    out = np.zeros(tuple(input_sizes), dtype=cols.dtype)
    oh, ow = cols.shape[-2:]
    if oh == 0 or ow == 0:
        return out
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += cols[:, :, i, j]
    return out


@forward("_dropout_mask")
def _dropout_mask_fwd(self, p, draw):
    if p >= 1:
        return np.zeros(self.shape, dtype=self.dtype)
    keep = _device.generator_rng(None).random(self.shape) >= p
    return (keep * (1.0 / (1.0 - p))).astype(self.dtype)


def _im2col(input, kernel_size, dilation, stride, order=CANONICAL):
    """Windows of an NCHW tensor, axes (N, C, kh, kw, OH, OW) permuted by ``order`` (Im2ColBackward0)."""
    return F._call("_im2col", F.as_tensor(input), tuple(kernel_size), tuple(dilation), tuple(stride), tuple(order))


def _col2im(cols, input_sizes, kernel_size, dilation, stride, order=CANONICAL):
    """Sum windows (axes as :func:`_im2col` lays them out) back into an ``input_sizes`` NCHW tensor
    (Col2ImBackward0)."""
    return F._call("_col2im", F.as_tensor(cols), tuple(int(s) for s in input_sizes), tuple(kernel_size),
                   tuple(dilation), tuple(stride), tuple(order))


_ERRORS = {"IndexError": IndexError, "RuntimeError": RuntimeError, "ValueError": ValueError}


def check_range(values: np.ndarray, low: float, high: float, skip: float | None, error: str, message: str) -> None:
    """Raise ``error(message)`` unless every element of ``values`` other than ``skip`` lies in
    [``low``, ``high``] (nan does not); ``{value}`` in ``message`` names the first element that does not.

    >>> check_range(np.array([0, 3, -100]), 0, 3, -100, "IndexError", "Target {value} is out of bounds.")
    >>> check_range(np.array([0, 4]), 0, 3, -100, "IndexError", "Target {value} is out of bounds.")
    Traceback (most recent call last):
    IndexError: Target 4 is out of bounds.
    """
    if values.size == 0:
        return
    if values.dtype.kind == "i" and low == 0:
        # read as unsigned, a negative index is huge: one reduction checks both ends
        if values.view(np.dtype(f"u{values.dtype.itemsize}")).max() <= high:
            return
    elif values.min() >= low and values.max() <= high:
        return      # the common case: reductions only, no temporary arrays
    bad = ~((values >= low) & (values <= high))      # nan is out of every range, as in PyTorch
    if skip is not None:
        bad &= values != skip
    if bad.any():
        first = values[bad].flat[0]
        shown = int(first) if values.dtype.kind in "iub" else float(first)
        raise _ERRORS[error](message.format(value=shown))


@forward("_check_range", view=True)
def _check_range_fwd(self, low, high, skip, error, message):
    check_range(self, low, high, skip, error, message)
    return self.view()


def _check_range(input, low: float, high: float, skip: float | None, error: str, message: str):
    """``input`` itself once its values are checked (see :func:`check_range`); recorded as an op, so a
    compiled function checks each call's values when it runs."""
    if error not in _ERRORS:
        raise ValueError(f"_check_range: error must be one of {sorted(_ERRORS)}, got {error!r}")
    return F._call("_check_range", F.as_tensor(input), float(low), float(high),
                   None if skip is None else float(skip), error, message)


_draws = itertools.count()


def _dropout_mask(input, p, draw=None):
    """A fresh keep-mask for ``input``, 0 or ``1 / (1 - p)`` per element (no gradient)."""
    return F._call("_dropout_mask", F.as_tensor(input), float(p), next(_draws) if draw is None else int(draw))


@forward("addmm", dtype_rule="promote")
def _addmm_fwd(self, mat1, mat2):
    return np.matmul(mat1, mat2) + self


# --- losses with a node of their own in PyTorch (MseLossBackward0, NllLossBackward0...) ----------
# ``reduction`` is PyTorch's enum: 0 none, 1 mean, 2 sum.  symgrad.nn.functional calls these with
# tensors of one shape; a compiled graph records them as the compositions of
# symgrad.nn.functional (symgrad/ir/decompositions.py), which fuse with their neighbours.

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _reduced(loss: np.ndarray, reduction: int) -> np.ndarray:
    if reduction == 1:
        return np.asarray(loss.mean(), dtype=loss.dtype)
    if reduction == 2:
        return np.asarray(loss.sum(), dtype=loss.dtype)
    return loss


def _softplus_neg(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(-x)) = -log(sigmoid(x))`` without overflow."""
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)


@forward("mse_loss")
def _mse_loss_fwd(self, target, reduction):
    d = self - target
    return _reduced(d * d, reduction)


@forward("smooth_l1_loss")
def _smooth_l1_loss_fwd(self, target, reduction, beta):
    d = np.abs(self - target)
    return _reduced(np.where(d < beta, (0.5 / beta) * d * d, d - 0.5 * beta).astype(self.dtype, copy=False),
                    reduction)


@forward("huber_loss")
def _huber_loss_fwd(self, target, reduction, delta):
    d = np.abs(self - target)
    return _reduced(np.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)).astype(self.dtype, copy=False),
                    reduction)


@forward("binary_cross_entropy")
def _binary_cross_entropy_fwd(self, target, weight, reduction):
    with np.errstate(divide="ignore"):
        log_x, log_1mx = np.maximum(np.log(self), -100), np.maximum(np.log1p(-self), -100)
    return _reduced((-weight * (target * log_x + (1 - target) * log_1mx)).astype(self.dtype, copy=False), reduction)


@forward("binary_cross_entropy_with_logits")
def _binary_cross_entropy_with_logits_fwd(self, target, weight, pos_weight, reduction):
    log_weight = 1 + (pos_weight - 1) * target
    loss = weight * ((1 - target) * self + log_weight * _softplus_neg(self))
    return _reduced(loss.astype(self.dtype, copy=False), reduction)


def _nll_picked(self, target, weight, ignore_index):
    """Per-sample ``-weight[t] * self[t]`` and ``weight[t]`` (0 where the target is ignored)."""
    class_dim = 0 if self.ndim == 1 else 1
    keep = target != ignore_index
    safe = np.where(keep, target, 0)
    picked = np.take_along_axis(self, np.expand_dims(safe, class_dim), axis=class_dim).squeeze(class_dim)
    w = np.where(keep, weight[safe], 0).astype(self.dtype, copy=False)
    return -picked * w, w


@forward("nll_loss2d")
@forward("nll_loss")
def _nll_loss_fwd(self, target, weight, reduction, ignore_index):
    loss, w = _nll_picked(self, target, weight, ignore_index)
    if reduction == 1:
        with np.errstate(invalid="ignore", divide="ignore"):   # every target ignored: nan, as PyTorch
            return np.asarray(loss.sum() / w.sum(), dtype=self.dtype)
    return _reduced(loss, reduction)


@forward("nll_loss_backward")
def _nll_loss_backward_fwd(grad_output, self, target, weight, reduction, ignore_index):
    class_dim = 0 if self.ndim == 1 else 1
    keep = target != ignore_index
    safe = np.where(keep, target, 0)
    w = np.where(keep, weight[safe], 0).astype(self.dtype, copy=False)
    g = np.asarray(grad_output, dtype=self.dtype)
    if reduction == 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            g = g / w.sum()
    out = np.zeros(self.shape, dtype=self.dtype)
    np.put_along_axis(out, np.expand_dims(safe, class_dim), np.expand_dims(-w * g, class_dim), axis=class_dim)
    return out


def nll_loss_op(input, target, weight, reduction: int, ignore_index: int):
    """NllLossBackward0's op: ``weight`` a (C,) tensor, ``reduction`` PyTorch's enum."""
    return F._call("nll_loss", input, target, weight, int(reduction), int(ignore_index))


def nll_loss2d_op(input, target, weight, reduction: int, ignore_index: int):
    """NllLoss2DBackward0's op, for (N, C, H, W) inputs."""
    return F._call("nll_loss2d", input, target, weight, int(reduction), int(ignore_index))


def nll_loss_backward_op(grad_output, input, target, weight, reduction: int, ignore_index: int):
    return F._call("nll_loss_backward", F.as_tensor(grad_output), input, target, weight, int(reduction),
                   int(ignore_index))


# the formulas call each by its op name (with create_graph=True, differentiably)
formula_namespaces.register("nll_loss", _nll_loss_fwd, nll_loss_op)
formula_namespaces.register("nll_loss_backward", _nll_loss_backward_fwd, nll_loss_backward_op)
