"""Ops the tracer records as the primitives they are made of (AOTAutograd's decompositions).

Eager mode keeps these ops whole (one node, PyTorch's ``LogsumexpBackward0``).  In a compiled
graph their parts are better: the compiler can fuse them with their neighbours and, above all,
the backward can reuse the forward's intermediate values.  ``logsumexp``'s gradient is
``softmax = exp(x - max) / sum``: decomposed, the joint graph computes ``exp(x - max)`` once for
the value and for the gradient, instead of a second pass of ``exp(x - result)``.

A decomposition takes the op's arguments (tracer-bound Tensors) and returns a Tensor computed
with symgrad ops, or None to record the op whole.  Every decomposition is checked against the op
it replaces by ``tests/test_tracer.py`` (values and gradients).

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda x: symgrad.logsumexp(x, dim=1), np.ones((2, 3)))
>>> " ".join(n.op for n in g.nodes)
'amax detach abs eq.Tensor where.self sub.Tensor exp sum.dim_IntList log add.Tensor view'
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..nn import functional as NNF
from ..ops import functional as F


def _logsumexp(self, dim, keepdim=False):
    if self._data.size == 0 or self.ndim == 0:  # nothing to stabilise: record the op whole
        return None
    m = F.amax(self, dim, keepdim=True).detach()          # max's gradient cancels out: leave it out
    m = F.where(F.abs(m) == math.inf, 0.0, m)      # rows of -inf stay -inf (as PyTorch)
    out = F.log(F.sum(F.exp(self - m), dim, keepdim=True)) + m
    if keepdim:
        return out
    dims = {d % self.ndim for d in ([dim] if isinstance(dim, int) else dim)}
    return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims))


def _softmax(self, dim, half_to_float=False):
    if self._data.size == 0 or self.ndim == 0:  # nothing to stabilise: record the op whole
        return None
    # the shift by the row's max cancels in the quotient, so its gradient is left out; a row of
    # -inf (or one holding +inf) gives nan, as PyTorch's softmax does
    # times the reciprocal (one division per row): the backward then sums grad * e over each row in the loop
    # that scales grad, instead of a further pass dividing by the squared sum
    e = F.exp(self - F.amax(self, dim, keepdim=True).detach())
    return e * F.reciprocal(F.sum(e, dim, keepdim=True))


# torch.nn.functional's losses: one node each eagerly (MseLossBackward0...), their elementwise parts
# and reductions in a compiled graph
def _addmm(self, mat1, mat2):
    return F.mm(mat1, mat2) + self


def _as_strided(self, size, stride, storage_offset=None, positions=()):
    # the view reads memory beyond its input's shape; a graph passes values, not memory: a gather of the
    # same elements (in-place writes through views are out-of-place in a graph)
    return F._call("index.Tensor", self, positions) if self.ndim else F.expand(self, tuple(size))


DECOMPOSITIONS: dict[str, Callable] = {
    "logsumexp": _logsumexp,
    "as_strided": _as_strided,
    "_softmax": _softmax,
    "addmm": _addmm,
    "mse_loss": NNF._mse_loss_composite,
    "smooth_l1_loss": NNF._smooth_l1_loss_composite,
    "huber_loss": NNF._huber_loss_composite,
    "binary_cross_entropy": NNF._binary_cross_entropy_composite,
    "binary_cross_entropy_with_logits": NNF._binary_cross_entropy_with_logits_composite,
    "nll_loss": NNF._nll_loss_composite,
    "nll_loss2d": NNF._nll_loss_composite,
    # torch.nn.functional with PyTorch's nodes (ConvolutionBackward0...): im2col, matmul, reductions
    "convolution": NNF._convolution_composite,
    "max_pool2d": NNF._max_pool2d_composite,
    "avg_pool2d": NNF._avg_pool2d_composite,
    "constant_pad_nd": NNF._constant_pad_nd_composite,
    **{f"reflection_pad{d}d": NNF._reflection_pad_composite for d in (1, 2, 3)},
    **{f"replication_pad{d}d": NNF._replication_pad_composite for d in (1, 2, 3)},
    "embedding": NNF._embedding_composite,
    "native_layer_norm": NNF._native_layer_norm_composite,
    "masked_fill.Tensor": F._masked_fill_tensor_composite,
    "_scaled_dot_product_flash_attention_for_cpu": NNF._sdpa_flash_composite,
    "linalg_vector_norm": F._linalg_vector_norm_composite,
    "linalg_vector_norm.inf": F._linalg_vector_norm_composite,
    "linalg_vector_norm.zero": F._linalg_vector_norm_composite,
}
