"""The ops torch.nn.functional is built on: window gathering for convolution and pooling, dropout's
mask, the run-time range check of indices and probabilities, and the functions PyTorch records as one
node (losses, convolution, pooling, padding, embedding, layer norm).  Their rules are in
derivatives.yaml; ``symgrad.nn.functional`` calls and composes them.

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
from ..rules.vocab import negated, trailing_dims
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
    # an ignored target gets no gradient, as in PyTorch: not -0 * g, which is nan when every target is
    # ignored and the mean's g / 0 is inf
    with np.errstate(invalid="ignore"):
        picked = np.where(keep, -w * g, 0).astype(self.dtype, copy=False)
    np.put_along_axis(out, np.expand_dims(safe, class_dim), np.expand_dims(picked, class_dim), axis=class_dim)
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


# --- torch.nn.functional ops with a node of their own in PyTorch ----------------------------------
# ConvolutionBackward0, MaxPool2DWithIndicesBackward0, AvgPool2DBackward0, ConstantPadNdBackward0,
# EmbeddingBackward0, NativeLayerNormBackward0.  Eagerly each is one numpy forward (im2col + one BLAS
# matmul for convolution); a compiled graph records the compositions of symgrad.nn.functional
# instead (symgrad/ir/decompositions.py).  Their rules, and those of the backward ops below, are in
# derivatives.yaml.

def pool_geometry(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> tuple[int, int]:
    """Output length of a pooling along one dim, and the extra padding after the input that
    ``ceil_mode`` needs."""
    span = dilation * (kernel - 1) + 1
    room = size + 2 * pad - span
    if room < 0:
        return 0, 0
    count = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (count - 1) * stride >= size + pad:   # the last window must start inside the input
        count -= 1
    extra = max(0, (count - 1) * stride + span - (size + 2 * pad))
    return count, extra


def _spatial_2d(x: np.ndarray, spatial: int) -> np.ndarray:
    """An (N, C, L) array viewed as (N, C, 1, L); (N, C, H, W) as it is."""
    return x[:, :, None, :] if spatial == 1 else x


def _conv_geometry(spatial: int, stride, padding, dilation):
    """Stride, dilation and (before, after) padding pairs of the 2-d convolution that computes a
    ``spatial``-d one (``padding`` lists a pair per spatial dim, flattened)."""
    pads = [(int(padding[2 * i]), int(padding[2 * i + 1])) for i in range(spatial)]
    stride, dilation = tuple(stride), tuple(dilation)
    if spatial == 1:
        return (1,) + stride, (1,) + dilation, [(0, 0)] + pads
    return stride, dilation, pads


def _padded(x: np.ndarray, pads, value=0.0) -> np.ndarray:
    if any(b or a for b, a in pads):
        return np.pad(x, [(0, 0), (0, 0)] + list(pads), constant_values=value)
    return x


def _cropped(x: np.ndarray, pads) -> np.ndarray:
    return x[(slice(None), slice(None)) + tuple(slice(b, x.shape[2 + i] - a) for i, (b, a) in enumerate(pads))]


def _conv_columns(x: np.ndarray, kernel, stride, dilation, pads, groups: int) -> np.ndarray:
    """The windows of padded ``x`` as an (N, groups, taps, OH * OW) stack of matrices, and (N, OH, OW).
    Batch-major, so that the products with the weight come out in the NCHW layout, with no transposes."""
    cols = _im2col_fwd(_padded(x, pads), kernel, dilation, stride)    # (N, C, kh, kw, OH, OW)
    n, c, kh, kw, oh, ow = cols.shape
    return cols.reshape(n, groups, (c // groups) * kh * kw, oh * ow), (n, oh, ow)


@forward("convolution")
def _convolution_fwd(input, weight, bias, stride, padding, dilation, groups):
    spatial = input.ndim - 2
    stride, dilation, pads = _conv_geometry(spatial, stride, padding, dilation)
    w = _spatial_2d(weight, spatial)
    cols, (n, oh, ow) = _conv_columns(_spatial_2d(input, spatial), w.shape[2:], stride, dilation, pads, groups)
    out_channels = w.shape[0]
    out = np.matmul(w.reshape(groups, out_channels // groups, cols.shape[2]), cols)    # (N, G, O / G, OH * OW)
    out = out.reshape(n, out_channels, oh, ow)
    if isinstance(bias, np.ndarray):
        out += bias.reshape(out_channels, 1, 1)
    return out[:, :, 0, :] if spatial == 1 else out


@forward("convolution_backward_input")
def _convolution_backward_input_fwd(grad_output, weight, input_sizes, stride, padding, dilation, groups):
    spatial = len(input_sizes) - 2
    stride, dilation, pads = _conv_geometry(spatial, stride, padding, dilation)
    g, w = _spatial_2d(grad_output, spatial), _spatial_2d(weight, spatial)
    n, out_channels, oh, ow = g.shape
    kh, kw = w.shape[2:]
    taps = w.reshape(groups, out_channels // groups, -1)
    cols = np.matmul(taps.transpose(0, 2, 1), g.reshape(n, groups, out_channels // groups, oh * ow))
    sizes = list(input_sizes) if spatial == 2 else list(input_sizes[:2]) + [1, input_sizes[2]]
    padded = sizes[:2] + [sizes[2 + i] + b + a for i, (b, a) in enumerate(pads)]
    cols = cols.reshape(n, sizes[1], kh, kw, oh, ow)
    out = _cropped(_col2im_fwd(cols, padded, (kh, kw), dilation, stride), pads)
    return np.ascontiguousarray(out[:, :, 0, :] if spatial == 1 else out)


@forward("convolution_backward_weight")
def _convolution_backward_weight_fwd(grad_output, input, weight_sizes, stride, padding, dilation, groups):
    spatial = input.ndim - 2
    stride, dilation, pads = _conv_geometry(spatial, stride, padding, dilation)
    g = _spatial_2d(grad_output, spatial)
    kernel = tuple(weight_sizes[2:]) if spatial == 2 else (1, weight_sizes[2])
    cols, (n, oh, ow) = _conv_columns(_spatial_2d(input, spatial), kernel, stride, dilation, pads, groups)
    out_channels = g.shape[1]
    rows = g.reshape(n, groups, out_channels // groups, oh * ow)
    return np.matmul(rows, cols.transpose(0, 1, 3, 2)).sum(0).reshape(tuple(weight_sizes))


def convolution_op(input, weight, bias, stride, padding, dilation, groups):
    """ConvolutionBackward0's op; ``padding`` lists a (before, after) pair per spatial dim, flattened;
    ``bias`` may be None (or 0, as the rule table's formulas pass it)."""
    b = None if bias is None or (not isinstance(bias, F.Tensor) and bias == 0) else bias
    return F._call("convolution", input, weight, b, tuple(stride), tuple(padding), tuple(dilation), int(groups))


def convolution_backward_input_op(grad_output, weight, input_sizes, stride, padding, dilation, groups):
    return F._call("convolution_backward_input", F.as_tensor(grad_output), weight, tuple(input_sizes), tuple(stride),
                   tuple(padding), tuple(dilation), int(groups))


def convolution_backward_weight_op(grad_output, input, weight_sizes, stride, padding, dilation, groups):
    return F._call("convolution_backward_weight", F.as_tensor(grad_output), input, tuple(weight_sizes), tuple(stride),
                   tuple(padding), tuple(dilation), int(groups))


def _pool_taps(x: np.ndarray, kernel, stride, padding, dilation, ceil_mode, fill):
    """``x`` (N, C, H, W) padded with ``fill`` as pooling needs, its (before, after) pads, and for each
    window tap (i, j) in order the strided view of the element it reads in every window (N, C, OH, OW):
    a pooling is then kh * kw elementwise steps, with no window array."""
    pads, counts = [], []
    for i in range(2):
        count, extra = pool_geometry(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        pads.append((padding[i], padding[i] + extra))
        counts.append(count)
    xp = _padded(x, pads, fill)
    (oh, ow), (sh, sw), (dh, dw) = counts, stride, dilation
    taps = [xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kernel[0]) for j in range(kernel[1])]
    return xp, pads, taps


def _tap_slices(kernel, stride, dilation, counts):
    (oh, ow), (sh, sw), (dh, dw) = counts, stride, dilation
    return [(slice(None), slice(None), slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
             slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)) for i in range(kernel[0]) for j in range(kernel[1])]


def _batched4(x: np.ndarray) -> np.ndarray:
    return x[None] if x.ndim == 3 else x


@forward("max_pool2d")
def _max_pool2d_fwd(self, kernel_size, stride, padding, dilation, ceil_mode):
    _, _, taps = _pool_taps(_batched4(self), kernel_size, stride, padding, dilation, ceil_mode, -np.inf)
    out = taps[0].copy()
    for tap in taps[1:]:
        np.maximum(out, tap, out=out)      # nan wins, as in PyTorch
    return out[0] if self.ndim == 3 else out


def _window_argmax(self, kernel_size, stride, padding, dilation, ceil_mode):
    """Which tap of each window holds its first maximum (or its last nan, as in PyTorch), with the
    padded input and its pads."""
    xp, pads, taps = _pool_taps(_batched4(self), kernel_size, stride, padding, dilation, ceil_mode, -np.inf)
    index = np.min_scalar_type(len(taps))
    for nan_aware in (False, True):
        best, first = taps[0].copy(), np.zeros(taps[0].shape, dtype=index)
        for k, tap in enumerate(taps[1:], 1):
            better = tap > best
            if nan_aware:     # PyTorch's kernel moves to every nan it meets: the last one wins
                better |= np.isnan(tap)
            np.copyto(first, index.type(k), where=better)
            np.maximum(best, tap, out=best)
        if nan_aware or not np.isnan(best).any():    # maximum propagates nan: no nan in best, none in x
            return first, xp, pads


@forward("max_pool2d_with_indices_backward")
def _max_pool2d_with_indices_backward_fwd(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode):
    first, xp, pads = _window_argmax(self, kernel_size, stride, padding, dilation, ceil_mode)
    g = _batched4(grad_output)
    out = np.zeros(xp.shape, dtype=g.dtype)
    zero = np.zeros((), dtype=g.dtype)
    for k, where in enumerate(_tap_slices(kernel_size, stride, dilation, first.shape[2:])):
        out[where] += np.where(first == k, g, zero)
    out = np.ascontiguousarray(_cropped(out, pads))
    return out[0] if self.ndim == 3 else out


@forward("_max_pool2d_pick")
def _max_pool2d_pick_fwd(input, self, kernel_size, stride, padding, dilation, ceil_mode):
    first, _, _ = _window_argmax(self, kernel_size, stride, padding, dilation, ceil_mode)
    _, _, taps = _pool_taps(_batched4(input), kernel_size, stride, padding, dilation, ceil_mode, 0.0)
    out = np.zeros(first.shape, dtype=input.dtype)
    for k, tap in enumerate(taps):
        np.copyto(out, tap, where=first == k)
    return out[0] if self.ndim == 3 else out


def max_pool2d_op(input, kernel_size, stride, padding, dilation, ceil_mode):
    return F._call("max_pool2d", input, tuple(kernel_size), tuple(stride), tuple(padding), tuple(dilation),
                   bool(ceil_mode))


def max_pool2d_with_indices_backward_op(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode):
    return F._call("max_pool2d_with_indices_backward", F.as_tensor(grad_output), input, tuple(kernel_size),
                   tuple(stride), tuple(padding), tuple(dilation), bool(ceil_mode))


def _max_pool2d_pick_op(values, input, kernel_size, stride, padding, dilation, ceil_mode):
    return F._call("_max_pool2d_pick", F.as_tensor(values), input, tuple(kernel_size), tuple(stride), tuple(padding),
                   tuple(dilation), bool(ceil_mode))


def avg_pool_divisors(sizes, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override) -> np.ndarray:
    """(OH, OW) divisors of an average pooling: the window's size counting the padding
    (``count_include_pad``) but never positions that ``ceil_mode`` adds beyond it, as PyTorch's."""
    counts = []
    for i in range(2):
        size = sizes[i]
        count, _ = pool_geometry(size, kernel[i], stride[i], padding[i], 1, ceil_mode)
        start = np.arange(count) * stride[i] - padding[i]
        end = np.minimum(start + kernel[i], size + padding[i])
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        counts.append(end - start)
    if divisor_override is not None:
        return np.full((len(counts[0]), len(counts[1])), float(divisor_override))
    return np.outer(counts[0], counts[1]).astype(np.float64)


@forward("avg_pool2d")
def _avg_pool2d_fwd(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    x = _batched4(self)
    _, _, taps = _pool_taps(x, kernel_size, stride, padding, (1, 1), ceil_mode, 0.0)
    total = taps[0].copy()
    for tap in taps[1:]:
        total += tap
    divisors = avg_pool_divisors(x.shape[2:], kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override)
    out = total / divisors.astype(self.dtype)
    return out[0] if self.ndim == 3 else out


@forward("avg_pool2d_backward")
def _avg_pool2d_backward_fwd(grad_output, input_sizes, kernel_size, stride, padding, ceil_mode, count_include_pad,
                             divisor_override):
    sizes = tuple(input_sizes) if len(input_sizes) == 4 else (1,) + tuple(input_sizes)
    g = _batched4(grad_output)
    divisors = avg_pool_divisors(sizes[2:], kernel_size, stride, padding, ceil_mode, count_include_pad,
                                 divisor_override)
    share = g / divisors.astype(g.dtype)
    pads = []
    for i in range(2):
        _, extra = pool_geometry(sizes[2 + i], kernel_size[i], stride[i], padding[i], 1, ceil_mode)
        pads.append((padding[i], padding[i] + extra))
    out = np.zeros(tuple(sizes[:2]) + tuple(sizes[2 + i] + b + a for i, (b, a) in enumerate(pads)), dtype=g.dtype)
    for where in _tap_slices(kernel_size, stride, (1, 1), share.shape[2:]):
        out[where] += share
    out = np.ascontiguousarray(_cropped(out, pads))
    return out[0] if len(input_sizes) == 3 else out


def avg_pool2d_op(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return F._call("avg_pool2d", input, tuple(kernel_size), tuple(stride), tuple(padding), bool(ceil_mode),
                   bool(count_include_pad), None if divisor_override is None else int(divisor_override))


def avg_pool2d_backward_op(grad_output, input_sizes, kernel_size, stride, padding, ceil_mode, count_include_pad,
                           divisor_override):
    return F._call("avg_pool2d_backward", F.as_tensor(grad_output), tuple(input_sizes), tuple(kernel_size),
                   tuple(stride), tuple(padding), bool(ceil_mode), bool(count_include_pad),
                   None if divisor_override is None else int(divisor_override))


def pad_pairs(pad, ndim: int) -> list[tuple[int, int]]:
    """PyTorch's ``pad`` list (pairs from the last dim backwards) as one (before, after) pair per dim."""
    pairs = [(0, 0)] * ndim
    for k in range(len(pad) // 2):
        pairs[ndim - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    return pairs


@forward("constant_pad_nd")
def _constant_pad_nd_fwd(self, pad, value):
    pairs = pad_pairs(pad, self.ndim)
    kept = self[tuple(slice(max(-b, 0), self.shape[d] - max(-a, 0)) for d, (b, a) in enumerate(pairs))]
    return np.pad(kept, [(max(b, 0), max(a, 0)) for b, a in pairs], constant_values=value)


def constant_pad_nd_op(input, pad, value=0.0):
    """ConstantPadNdBackward0's op: negative widths crop."""
    return F._call("constant_pad_nd", F.as_tensor(input), tuple(int(p) for p in pad), float(value))


# reflection_pad{1,2,3}d and replication_pad{1,2,3}d: `mode` 0 reflects, 1 repeats the edge
_INDEX_PAD_MODES = ("reflect", "edge")


def _index_pad(self, padding, mode):
    return np.pad(self, pad_pairs(padding, self.ndim), mode=_INDEX_PAD_MODES[mode])


for _dims in (1, 2, 3):
    forward(f"reflection_pad{_dims}d")(lambda self, padding: _index_pad(self, padding, 0))
    forward(f"replication_pad{_dims}d")(lambda self, padding: _index_pad(self, padding, 1))
forward("_index_pad")(_index_pad)


@forward("_index_pad_backward")
def _index_pad_backward_fwd(grad_output, input_sizes, padding, mode):
    """Each padded position's gradient added to the input position it copies, one dim at a time."""
    out = grad_output
    for d, (before, after) in enumerate(pad_pairs(padding, len(input_sizes))):
        if before or after:
            source = np.pad(np.arange(input_sizes[d]), (before, after), mode=_INDEX_PAD_MODES[mode])
            moved = np.moveaxis(out, d, 0)
            total = np.zeros((input_sizes[d],) + moved.shape[1:], dtype=out.dtype)
            np.add.at(total, source, moved)
            out = np.moveaxis(total, 0, d)
    return np.array(out) if out is grad_output else np.ascontiguousarray(out)


def index_pad_op(input, padding, mode: str):
    """ReflectionPad{1,2,3}DBackward0's and ReplicationPad{1,2,3}DBackward0's ops, by the number of padded
    dims (``mode`` 'reflect' or 'replicate')."""
    name = "reflection_pad" if mode == "reflect" else "replication_pad"
    return F._call(f"{name}{len(padding) // 2}d", input, tuple(int(p) for p in padding))


def _index_pad_op(input, padding, mode):
    return F._call("_index_pad", F.as_tensor(input), tuple(padding), int(mode))


def _index_pad_backward_op(grad_output, input_sizes, padding, mode):
    return F._call("_index_pad_backward", F.as_tensor(grad_output), tuple(input_sizes), tuple(padding), int(mode))


@forward("embedding")
def _embedding_fwd(weight, indices, padding_idx):
    return weight[indices]


@forward("embedding_dense_backward")
def _embedding_dense_backward_fwd(grad_output, indices, weight_sizes, padding_idx):
    out = np.zeros(tuple(weight_sizes), dtype=grad_output.dtype)
    np.add.at(out, indices.reshape(-1), grad_output.reshape(-1, weight_sizes[1]))
    if padding_idx >= 0:
        out[padding_idx] = 0
    return out


def embedding_op(weight, indices, padding_idx=-1):
    """EmbeddingBackward0's op: rows of ``weight`` (checked indices); ``padding_idx`` -1 for none."""
    return F._call("embedding", weight, indices, int(padding_idx))


def embedding_dense_backward_op(grad_output, indices, weight_sizes, padding_idx):
    return F._call("embedding_dense_backward", F.as_tensor(grad_output), indices, tuple(weight_sizes),
                   int(padding_idx))


def _layer_norm_parts(input, normalized_shape, eps):
    dims = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    centred = input - input.mean(dims, keepdims=True)
    var = np.mean(centred * centred, dims, keepdims=True)
    return centred, 1.0 / np.sqrt(var + np.asarray(eps, dtype=input.dtype))


@forward("native_layer_norm")
def _native_layer_norm_fwd(input, normalized_shape, weight, bias, eps):
    centred, rstd = _layer_norm_parts(input, normalized_shape, eps)
    return (centred * rstd * weight + bias).astype(input.dtype, copy=False)


def native_layer_norm_op(input, normalized_shape, weight, bias, eps):
    """NativeLayerNormBackward0's op; ``weight`` and ``bias`` broadcast against the normalised dims."""
    return F._call("native_layer_norm", input, tuple(int(s) for s in normalized_shape), weight, bias, float(eps))


def _causal_keep(length: int, source: int) -> np.ndarray:
    """is_causal's mask: query i sees keys 0..i (the upper-left triangle, as PyTorch)."""
    return np.tril(np.ones((length, source), dtype=bool))


def _repeat_heads_np(x, like):
    return np.repeat(x, like.shape[-3] // x.shape[-3], axis=-3) if x.shape[-3] != like.shape[-3] else x


def repeat_heads(x, like):
    """``x``'s heads (dim -3) each repeated to ``like``'s head count (grouped-query attention; the identity
    when the counts agree)."""
    group = like.shape[-3] // x.shape[-3]
    return F.repeat_interleave(x, group, -3) if group != 1 else x


def _group_heads_sum_np(x, like):
    group = x.shape[-3] // like.shape[-3]
    if group == 1:
        return x
    return x.reshape(x.shape[:-3] + (like.shape[-3], group) + x.shape[-2:]).sum(-3)


def group_heads_sum(x, like):
    """The transpose of repeat_heads: each group of ``x``'s heads summed, down to ``like``'s head count."""
    group = x.shape[-3] // like.shape[-3]
    if group == 1:
        return x
    return F.sum(F.reshape(x, tuple(x.shape[:-3]) + (like.shape[-3], group) + tuple(x.shape[-2:])), -3)


def _attention_weights_np(query, key, attn_mask, is_causal, scale):
    key = _repeat_heads_np(key, query)
    scores = np.matmul(query, np.swapaxes(key, -2, -1)) * np.asarray(scale, dtype=query.dtype) + attn_mask
    if is_causal:
        scores = np.where(_causal_keep(scores.shape[-2], scores.shape[-1]), scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    empty = top == -np.inf
    # a query whose every key is masked attends to nothing: zeros (PyTorch's safe softmax), never 0/0
    e = np.exp(scores - np.where(empty, 0.0, top))
    total = e.sum(-1, keepdims=True)
    return np.where(empty, 0.0, e / np.where(empty, 1.0, total)).astype(query.dtype, copy=False)


def attention_weights(query, key, attn_mask, is_causal, scale):
    """``softmax(query @ key.T * scale + attn_mask)`` (``attn_mask`` additive, no gradient) over the keys, the
    upper-left triangle only when ``is_causal``, zeros for a query that sees no key: the attention weights
    that ScaledDotProductFlashAttentionForCpuBackward0's formulas recompute, composed of table ops so that
    they differentiate again."""
    scores = F.matmul(query, F.transpose(repeat_heads(key, query), -2, -1)) * scale + attn_mask.detach()
    if is_causal:
        scores = F.where(F.as_tensor(_causal_keep(scores.shape[-2], scores.shape[-1])), scores, -np.inf)
    empty = F.eq(F.amax(scores.detach(), -1, keepdim=True), -np.inf)
    return F.where(empty, 0.0, F.softmax(F.where(empty, 0.0, scores), -1))


@forward("_scaled_dot_product_flash_attention_for_cpu")
def _sdpa_flash_fwd(query, key, value, attn_mask, is_causal, scale):
    weights = _attention_weights_np(query, key, attn_mask, is_causal, scale)
    return np.matmul(weights, _repeat_heads_np(value, query)).astype(query.dtype, copy=False)


def sdpa_flash_op(query, key, value, attn_mask, is_causal: bool, scale: float):
    """ScaledDotProductFlashAttentionForCpuBackward0's op: 4-d ``query`` (B, H, L, E), ``key`` (B, K, S, E) and
    ``value`` (B, K, S, E), K dividing H (each key/value head serves H / K query heads); ``attn_mask``
    additive (0-d zero for none), broadcast against (B, H, L, S)."""
    return F._call("_scaled_dot_product_flash_attention_for_cpu", query, key, value, attn_mask, bool(is_causal),
                   float(scale))


for _name, _numpy_fn, _tensor_fn in [
        ("convolution", _convolution_fwd, convolution_op),
        ("convolution_backward_input", _convolution_backward_input_fwd, convolution_backward_input_op),
        ("convolution_backward_weight", _convolution_backward_weight_fwd, convolution_backward_weight_op),
        ("max_pool2d", _max_pool2d_fwd, max_pool2d_op),
        ("max_pool2d_with_indices_backward", _max_pool2d_with_indices_backward_fwd,
         max_pool2d_with_indices_backward_op),
        ("_max_pool2d_pick", _max_pool2d_pick_fwd, _max_pool2d_pick_op),
        ("avg_pool2d", _avg_pool2d_fwd, avg_pool2d_op),
        ("avg_pool2d_backward", _avg_pool2d_backward_fwd, avg_pool2d_backward_op),
        ("constant_pad_nd", _constant_pad_nd_fwd, constant_pad_nd_op),
        ("_index_pad", _index_pad, _index_pad_op),
        ("_index_pad_backward", _index_pad_backward_fwd, _index_pad_backward_op),
        ("embedding", _embedding_fwd, embedding_op),
        ("embedding_dense_backward", _embedding_dense_backward_fwd, embedding_dense_backward_op),
        ("native_layer_norm", _native_layer_norm_fwd, native_layer_norm_op),
        ("_scaled_dot_product_flash_attention_for_cpu", _sdpa_flash_fwd, sdpa_flash_op),
        ("attention_weights", _attention_weights_np, attention_weights),
        ("repeat_heads", _repeat_heads_np, repeat_heads),
        ("group_heads_sum", _group_heads_sum_np, group_heads_sum),
        ("matmul", np.matmul, F.matmul),
        ("trailing_dims", trailing_dims, trailing_dims),
        ("negated", negated, negated)]:
    formula_namespaces.register(_name, _numpy_fn, _tensor_fn)
