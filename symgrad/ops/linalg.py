"""``symgrad.linalg``: the torch.linalg functions (real inputs), on the rule-table ops of
:mod:`symgrad.ops.functional`; ``numpy.linalg`` on tensors runs the same ops
(:mod:`symgrad.ops.numpy_surface.linalg`).

Gradients, and what they assume:

* ``eigh``/``eigvalsh`` and ``cholesky`` read one triangle of ``A`` (the lower one, or the upper with
  ``UPLO='U'`` / ``upper=True``), as LAPACK does. Their gradient is that of the function actually
  computed: zero on the triangle never read, and an off-diagonal entry of the read triangle gets the
  derivative for both mirrored entries of the symmetric matrix. Along symmetric directions this agrees
  with PyTorch's gradient (which is not masked).
* ``eigh``'s eigenvector gradient and ``svd``'s U/Vh gradients need distinct eigen/singular values
  (the formulas divide by their differences), as in PyTorch; eigenvalues and singular values alone
  need nothing.
* ``svd`` is the reduced SVD; ``full_matrices=True`` is accepted for square matrices only.
* ``qr`` is the reduced QR; its gradient needs at least as many rows as columns.
* ``det`` of a singular matrix: eagerly the cofactor matrix from the SVD; in a compiled function
  Jacobi's formula (an exactly singular matrix there raises numpy's LinAlgError).

>>> import symgrad
>>> A = symgrad.tensor([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
>>> symgrad.linalg.det(A)
tensor(5., grad_fn=<LinalgDetBackward0>)
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from .functional import (
    linalg_cholesky,
    linalg_det,
    linalg_eigh,
    linalg_inv,
    linalg_matrix_norm,
    linalg_matrix_power,
    linalg_pinv,
    linalg_qr,
    linalg_slogdet,
    linalg_solve,
    linalg_svd,
    linalg_svdvals,
    linalg_vector_norm,
)
from .functional import matmul as _matmul

__all__ = ["inv", "det", "slogdet", "solve", "cholesky", "eigh", "eigvalsh", "svd", "svdvals", "qr", "norm",
           "vector_norm", "matrix_norm", "matrix_power", "matmul", "multi_dot", "pinv"]

_eigh_result = namedtuple("torch_return_types_linalg_eigh", ["eigenvalues", "eigenvectors"])
_svd_result = namedtuple("torch_return_types_linalg_svd", ["U", "S", "Vh"])
_qr_result = namedtuple("torch_return_types_linalg_qr", ["Q", "R"])
_slogdet_result = namedtuple("torch_return_types_linalg_slogdet", ["sign", "logabsdet"])

inv = linalg_inv
det = linalg_det
cholesky = linalg_cholesky
svdvals = linalg_svdvals
matrix_power = linalg_matrix_power
vector_norm = linalg_vector_norm
matmul = _matmul


def slogdet(A):
    return _slogdet_result(*linalg_slogdet(A))


def eigh(A, UPLO: str = "L"):
    return _eigh_result(*linalg_eigh(A, UPLO))


def eigvalsh(A, UPLO: str = "L"):
    return linalg_eigh(A, UPLO)[0]


def svd(A, full_matrices: bool = True):
    """The SVD; ``full_matrices=True`` (PyTorch's default) is supported for square matrices, whose full and
    reduced SVDs agree."""
    U, S, Vh = linalg_svd(A)
    if full_matrices and A.shape[-1] != A.shape[-2]:
        raise ValueError("symgrad.linalg.svd: full_matrices=True for a non-square matrix is not supported; "
                         "pass full_matrices=False (the reduced SVD)")
    return _svd_result(U, S, Vh)


def qr(A, mode: str = "reduced"):
    """The reduced QR; ``mode='r'`` gives an empty Q, as PyTorch does."""
    if mode not in ("reduced", "r"):
        raise ValueError(f"symgrad.linalg.qr: mode={mode!r} is not supported; use 'reduced' or 'r'")
    Q, R = linalg_qr(A)
    if mode == "r":
        from ..tensor import Tensor
        Q = Tensor._wrap(np.zeros((0,), dtype=R._data.dtype))
    return _qr_result(Q, R)


def solve(A, B, *, left: bool = True):
    """``X`` with ``A @ X = B`` (``left=False``: ``X @ A = B``)."""
    if left:
        return linalg_solve(A, B)
    from .functional import as_tensor, transpose
    b = as_tensor(B)
    if b.ndim < 2:
        raise RuntimeError("linalg.solve: with left=False, B must be a matrix or a stack of matrices")
    return transpose(linalg_solve(transpose(as_tensor(A), -2, -1), transpose(b, -2, -1)), -2, -1)


def multi_dot(tensors):
    """The product of a chain of matrices (the first and last may be vectors)."""
    if len(tensors) < 2:
        raise RuntimeError("multi_dot(): expected at least 2 tensors but got " + str(len(tensors)))
    out = tensors[0]
    for t in tensors[1:]:
        out = _matmul(out, t)
    return out


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False):
    """Pseudo-inverse (relative tolerance ``rtol``; by default ``max(m, n) * eps``, as in PyTorch)."""
    import numpy as _np
    if atol is not None or hermitian:
        raise ValueError("symgrad.linalg.pinv: atol= and hermitian=True are not supported; use rtol=")
    from .functional import as_tensor
    a = as_tensor(A)
    if rtol is None:
        rtol = max(a.shape[-2:]) * _np.finfo(a._data.dtype).eps
    return linalg_pinv(a, rtol)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False):
    return linalg_matrix_norm(A, ord, dim, keepdim)


def norm(A, ord=None, dim=None, keepdim: bool = False):
    """torch.linalg.norm: a vector norm for one dim (or a 1-D input), a matrix norm for two dims
    (or a 2-D input); with ``ord=None`` and no dim, the 2-norm of all the values."""
    from .functional import as_tensor, reshape
    t = as_tensor(A)
    if isinstance(dim, int):
        dim = (dim,)
    if dim is None:
        if ord is None:
            out = linalg_vector_norm(t, 2, None, keepdim)
            return reshape(out, (1,) * t.ndim) if keepdim else out
        if t.ndim == 1:
            dim = (0,)
        elif t.ndim == 2:
            dim = (0, 1)
        else:
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                               f"Got {t.ndim}D.")
    if len(dim) == 1:
        return linalg_vector_norm(t, 2 if ord is None else ord, dim, keepdim)
    return linalg_matrix_norm(t, "fro" if ord is None else ord, tuple(dim), keepdim)
