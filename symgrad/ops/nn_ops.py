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
