"""The numpy usage table, linear algebra: einsum, tensordot, kron, inner, vdot and numpy.linalg.

Each row runs eagerly and compiled, against numpy's value and finite-difference gradients (harness:
tests/numpy_usage.py). Matrices are well conditioned (a random matrix plus a multiple of the identity),
symmetric positive definite where the function needs it, and with distinct eigen/singular values where
the gradient needs it. Functions of the eigenvectors, singular vectors or Q are written sign-invariantly
(``v * v``, ``u @ diag(s) @ vh``...) when the row compares against finite differences, because a
perturbation may flip LAPACK's choice of sign; the values themselves are compared raw.
"""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from tests.numpy_usage import Usage, check, params


def M(r, *shape, shift=3.0):
    """A well-conditioned (stack of) square matrix: uniform values plus ``shift`` times the identity."""
    return r.uniform(-1, 1, shape) + shift * np.eye(shape[-1])


def R(r, *shape):
    return r.uniform(-1, 1, shape)


def SPD(r, *shape):
    """Symmetric positive definite, with well separated eigenvalues."""
    n = shape[-1]
    q, _ = np.linalg.qr(r.standard_normal(shape))
    w = np.arange(1.0, n + 1) + r.uniform(0, 0.3, shape[:-1])
    return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)


def SPD_lower(r, *shape):
    """SPD in its lower triangle, garbage in the upper one (numpy reads only the lower)."""
    a = SPD(r, *shape)
    return np.tril(a) + np.triu(r.uniform(-5, 5, shape), 1)


# HIPS autograd symmetrizes cholesky's gradient (a symmetric perturbation); numpy's function reads the lower
# triangle only, and finite differences of it agree with symgrad: those rows are not compared with autograd
CHOLESKY_VS_AUTOGRAD = "autograd's cholesky gradient assumes a symmetric perturbation; numpy reads one triangle"

ROWS = [
    # --- einsum ---------------------------------------------------------------------------------
    Usage("np.einsum('ij,jk->ik')", lambda a, b: np.einsum("ij,jk->ik", a, b),
          lambda r: (R(r, 3, 4), R(r, 4, 2)), wrt=(0, 1)),
    Usage("np.einsum('ij,jk') implicit", lambda a, b: np.einsum("ij,jk", a, b),
          lambda r: (R(r, 3, 4), R(r, 4, 2)), wrt=(0, 1)),
    Usage("np.einsum('ii') trace", lambda a: np.einsum("ii", a), lambda r: (R(r, 4, 4),)),
    Usage("np.einsum('ii->i') diagonal", lambda a: np.einsum("ii->i", a), lambda r: (R(r, 4, 4),)),
    Usage("np.einsum('ij->ji')", lambda a: np.einsum("ij->ji", a), lambda r: (R(r, 3, 4),)),
    Usage("np.einsum('ij->') sum", lambda a: np.einsum("ij->", a), lambda r: (R(r, 3, 4),)),
    Usage("np.einsum('ij->j') column sums", lambda a: np.einsum("ij->j", a), lambda r: (R(r, 3, 4),)),
    Usage("np.einsum('i,i->') dot", lambda a, b: np.einsum("i,i->", a, b), lambda r: (R(r, 5), R(r, 5)), wrt=(0, 1)),
    Usage("np.einsum('i,j->ij') outer", lambda a, b: np.einsum("i,j->ij", a, b),
          lambda r: (R(r, 3), R(r, 4)), wrt=(0, 1)),
    Usage("np.einsum('bij,bjk->bik') batched", lambda a, b: np.einsum("bij,bjk->bik", a, b),
          lambda r: (R(r, 2, 3, 4), R(r, 2, 4, 2)), wrt=(0, 1)),
    Usage("np.einsum('...ij,...jk->...ik') ellipsis", lambda a, b: np.einsum("...ij,...jk->...ik", a, b),
          lambda r: (R(r, 2, 3, 4), R(r, 4, 2)), wrt=(0, 1)),
    Usage("np.einsum('...ij,...jk') implicit ellipsis", lambda a, b: np.einsum("...ij,...jk", a, b),
          lambda r: (R(r, 2, 3, 4), R(r, 2, 4, 2)), wrt=(0, 1)),
    Usage("np.einsum('...i,...i->...') broadcast", lambda a, b: np.einsum("...i,...i->...", a, b),
          lambda r: (R(r, 2, 1, 3), R(r, 4, 3)), wrt=(0, 1)),
    Usage("np.einsum('ij,jk,kl->il') three operands", lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c),
          lambda r: (R(r, 2, 3), R(r, 3, 4), R(r, 4, 2)), wrt=(0, 1, 2)),
    Usage("np.einsum('ij,jk,kl->il', optimize=True)",
          lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c, optimize=True),
          lambda r: (R(r, 2, 3), R(r, 3, 4), R(r, 4, 2)), wrt=(0, 1, 2)),
    Usage("np.einsum('iij->j') repeated index", lambda a: np.einsum("iij->j", a), lambda r: (R(r, 3, 3, 2),)),
    Usage("np.einsum('bii->b') batched trace", lambda a: np.einsum("bii->b", a), lambda r: (R(r, 2, 3, 3),)),
    Usage("np.einsum('ijk,ikl->jl') two contracted", lambda a, b: np.einsum("ijk,ikl->jl", a, b),
          lambda r: (R(r, 2, 3, 4), R(r, 2, 4, 5)), wrt=(0, 1)),
    Usage("np.einsum('ij,ij->i') rowwise dot", lambda a, b: np.einsum("ij,ij->i", a, b),
          lambda r: (R(r, 3, 4), R(r, 3, 4)), wrt=(0, 1)),
    Usage("np.einsum('ij,ij,ij->') three-way", lambda a, b, c: np.einsum("ij,ij,ij->", a, b, c),
          lambda r: (R(r, 3, 4), R(r, 3, 4), R(r, 3, 4)), wrt=(0, 1, 2)),
    Usage("np.einsum('i,ij,j->') quadratic form", lambda x, A: np.einsum("i,ij,j->", x, A, x),
          lambda r: (R(r, 4), R(r, 4, 4)), wrt=(0, 1)),
    Usage("np.einsum interleaved sublists", lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]),
          lambda r: (R(r, 3, 4), R(r, 4, 2)), wrt=(0, 1)),
    Usage("np.einsum('ij,j->i') matrix-vector", lambda a, x: np.einsum("ij,j->i", a, x),
          lambda r: (R(r, 3, 4), R(r, 4)), wrt=(0, 1)),
    Usage("np.einsum('ijk->kji') permutation", lambda a: np.einsum("ijk->kji", a), lambda r: (R(r, 2, 3, 4),)),
    Usage("np.einsum('i,i->i') elementwise", lambda a, b: np.einsum("i,i->i", a, b), lambda r: (R(r, 4), R(r, 4)),
          wrt=(0, 1)),
    Usage("np.einsum('bn,anm,bm->ba') bilinear", lambda x, W, y: np.einsum("bn,anm,bm->ba", x, W, y),
          lambda r: (R(r, 2, 3), R(r, 4, 3, 5), R(r, 2, 5)), wrt=(0, 1, 2)),
    Usage("np.einsum with a constant array", lambda a: np.einsum("ij,jk->ik", a, np.arange(8.0).reshape(4, 2)),
          lambda r: (R(r, 3, 4),)),
    # --- tensordot, kron, inner, vdot, dot --------------------------------------------------------
    Usage("np.tensordot(a, b) axes=2", lambda a, b: np.tensordot(a, b), lambda r: (R(r, 2, 3, 4), R(r, 3, 4, 2)),
          wrt=(0, 1)),
    Usage("np.tensordot(a, b, axes=1)", lambda a, b: np.tensordot(a, b, axes=1),
          lambda r: (R(r, 2, 3), R(r, 3, 4)), wrt=(0, 1)),
    Usage("np.tensordot(a, b, axes=0) outer", lambda a, b: np.tensordot(a, b, axes=0),
          lambda r: (R(r, 2, 3), R(r, 2)), wrt=(0, 1)),
    Usage("np.tensordot(a, b, axes=([1, 0], [0, 1]))", lambda a, b: np.tensordot(a, b, axes=([1, 0], [0, 1])),
          lambda r: (R(r, 3, 4, 5), R(r, 4, 3, 2)), wrt=(0, 1)),
    Usage("np.tensordot(a, b, axes=(-1, 0))", lambda a, b: np.tensordot(a, b, axes=(-1, 0)),
          lambda r: (R(r, 2, 3), R(r, 3, 4)), wrt=(0, 1)),
    Usage("np.kron 2-D", lambda a, b: np.kron(a, b), lambda r: (R(r, 2, 3), R(r, 3, 2)), wrt=(0, 1)),
    Usage("np.kron 1-D", lambda a, b: np.kron(a, b), lambda r: (R(r, 3), R(r, 2)), wrt=(0, 1)),
    Usage("np.kron 1-D with 2-D", lambda a, b: np.kron(a, b), lambda r: (R(r, 2), R(r, 2, 3)), wrt=(0, 1)),
    Usage("np.inner 1-D", lambda a, b: np.inner(a, b), lambda r: (R(r, 4), R(r, 4)), wrt=(0, 1)),
    Usage("np.inner 2-D", lambda a, b: np.inner(a, b), lambda r: (R(r, 2, 4), R(r, 3, 4)), wrt=(0, 1)),
    Usage("np.vdot 2-D", lambda a, b: np.vdot(a, b), lambda r: (R(r, 2, 3), R(r, 2, 3)), wrt=(0, 1)),
    Usage("np.matmul stacks", lambda a, b: np.matmul(a, b), lambda r: (R(r, 2, 3, 4), R(r, 2, 4, 2)), wrt=(0, 1)),
    Usage("a @ b stacks broadcast", lambda a, b: a @ b, lambda r: (R(r, 2, 3, 4), R(r, 4, 2)), wrt=(0, 1)),
    Usage("np.linalg.multi_dot", lambda a, b, c: np.linalg.multi_dot([a, b, c]),
          lambda r: (R(r, 3), R(r, 3, 4), R(r, 4, 2)), wrt=(0, 1, 2)),
    Usage("np.linalg.vecdot", lambda a, b: np.linalg.vecdot(a, b), lambda r: (R(r, 3, 4), R(r, 3, 4)), wrt=(0, 1)),
    Usage("np.linalg.trace", lambda a: np.linalg.trace(a), lambda r: (R(r, 2, 3, 3),)),
    Usage("np.linalg.diagonal", lambda a: np.linalg.diagonal(a), lambda r: (R(r, 2, 3, 3),)),
    # --- inverse, determinants, solve ---------------------------------------------------------------
    Usage("np.linalg.inv", lambda a: np.linalg.inv(a), lambda r: (M(r, 4, 4),)),
    Usage("np.linalg.inv batched", lambda a: np.linalg.inv(a), lambda r: (M(r, 2, 3, 3),)),
    Usage("np.linalg.det", lambda a: np.linalg.det(a), lambda r: (M(r, 3, 3),)),
    # a singular A has no inverse: the gradient is the cofactor matrix, from the SVD (eager)
    Usage("np.linalg.det singular", lambda a: np.linalg.det(a),
          lambda r: (np.outer(R(r, 3), R(r, 3)) + np.outer(R(r, 3), R(r, 3)),), compiled=False),
    Usage("np.linalg.det batched", lambda a: np.linalg.det(a), lambda r: (M(r, 2, 3, 3),)),
    Usage("np.linalg.slogdet logabsdet", lambda a: np.linalg.slogdet(a)[1], lambda r: (M(r, 3, 3),)),
    Usage("np.linalg.slogdet sign * exp", lambda a: np.linalg.slogdet(a).sign * np.exp(np.linalg.slogdet(a).logabsdet),
          lambda r: (M(r, 3, 3, shift=-3.0),)),
    Usage("np.linalg.slogdet batched", lambda a: np.linalg.slogdet(a)[1], lambda r: (M(r, 2, 3, 3),)),
    Usage("np.linalg.solve vector b", lambda a, b: np.linalg.solve(a, b), lambda r: (M(r, 4, 4), R(r, 4)),
          wrt=(0, 1)),
    Usage("np.linalg.solve matrix b", lambda a, b: np.linalg.solve(a, b), lambda r: (M(r, 3, 3), R(r, 3, 2)),
          wrt=(0, 1)),
    Usage("np.linalg.solve batched", lambda a, b: np.linalg.solve(a, b), lambda r: (M(r, 2, 3, 3), R(r, 2, 3, 2)),
          wrt=(0, 1)),
    Usage("np.linalg.solve batched A, vector b", lambda a, b: np.linalg.solve(a, b),
          lambda r: (M(r, 2, 3, 3), R(r, 3)), wrt=(0, 1)),
    Usage("np.linalg.matrix_power(a, 3)", lambda a: np.linalg.matrix_power(a, 3), lambda r: (R(r, 3, 3),)),
    Usage("np.linalg.matrix_power(a, -2)", lambda a: np.linalg.matrix_power(a, -2), lambda r: (M(r, 3, 3),)),
    Usage("np.linalg.pinv tall", lambda a: np.linalg.pinv(a), lambda r: (R(r, 4, 3) + np.eye(4, 3) * 2,)),
    Usage("np.linalg.lstsq(X, y, rcond=None)[0]", lambda X, y: np.linalg.lstsq(X, y, rcond=None)[0],
          lambda r: (R(r, 5, 3), R(r, 5)), wrt=(0, 1)),
    Usage("np.linalg.lstsq matrix b", lambda X, Y: np.linalg.lstsq(X, Y)[0], lambda r: (R(r, 5, 3), R(r, 5, 2)),
          wrt=(0, 1)),
    Usage("np.linalg.lstsq residuals", lambda X, y: np.linalg.lstsq(X, y, rcond=None)[1],
          lambda r: (R(r, 5, 3), R(r, 5)), wrt=(0, 1)),
    Usage("np.linalg.lstsq singular values", lambda X, y: np.linalg.lstsq(X, y, rcond=None)[3],
          lambda r: (R(r, 5, 3), R(r, 5))),
    Usage("np.linalg.cond", lambda a: np.linalg.cond(a), lambda r: (R(r, 4, 3),)),
    Usage("np.linalg.cond(a, 'fro') batched", lambda a: np.linalg.cond(a, "fro"), lambda r: (M(r, 2, 3, 3),)),
    Usage("np.linalg.cond(a, -np.inf)", lambda a: np.linalg.cond(a, -np.inf), lambda r: (M(r, 3, 3),)),
    # --- factorizations -------------------------------------------------------------------------------
    Usage("np.linalg.cholesky", lambda a: np.linalg.cholesky(a), lambda r: (SPD(r, 4, 4),),
          autograd_differs=CHOLESKY_VS_AUTOGRAD),
    Usage("np.linalg.cholesky reads the lower triangle", lambda a: np.linalg.cholesky(a),
          lambda r: (SPD_lower(r, 3, 3),), autograd_differs=CHOLESKY_VS_AUTOGRAD),
    Usage("np.linalg.cholesky(upper=True)", lambda a: np.linalg.cholesky(a, upper=True),
          lambda r: (SPD(r, 3, 3),)),
    Usage("np.linalg.cholesky batched", lambda a: np.linalg.cholesky(a), lambda r: (SPD(r, 2, 3, 3),),
          autograd_differs=CHOLESKY_VS_AUTOGRAD),
    Usage("np.linalg.cholesky of x @ x.T", lambda x: np.linalg.cholesky(x @ x.T + 3 * np.eye(3)),
          lambda r: (R(r, 3, 3),)),
    Usage("np.linalg.eigh eigenvalues", lambda a: np.linalg.eigh(a)[0], lambda r: (SPD(r, 4, 4),)),
    Usage("np.linalg.eigh eigenvectors", lambda a: np.linalg.eigh(a).eigenvectors, lambda r: (SPD(r, 3, 3),),
          grad=False),
    Usage("np.linalg.eigh eigenvectors squared", lambda a: np.linalg.eigh(a)[1] ** 2, lambda r: (SPD(r, 3, 3),)),
    Usage("np.linalg.eigh V diag(w) V.T", lambda a: (lambda w, v: (v * w) @ v.T)(*np.linalg.eigh(a)),
          lambda r: (SPD(r, 3, 3),)),
    Usage("np.linalg.eigh(UPLO='U')", lambda a: np.linalg.eigh(a, UPLO="U")[0],
          lambda r: (np.triu(SPD(r, 3, 3)) + np.tril(R(r, 3, 3), -1),)),
    Usage("np.linalg.eigh batched", lambda a: np.linalg.eigh(a)[0], lambda r: (SPD(r, 2, 3, 3),)),
    Usage("np.linalg.eigvalsh", lambda a: np.linalg.eigvalsh(a), lambda r: (SPD_lower(r, 4, 4),)),
    Usage("np.linalg.svd singular values", lambda a: np.linalg.svd(a)[1], lambda r: (R(r, 3, 3),)),
    Usage("np.linalg.svd(compute_uv=False)", lambda a: np.linalg.svd(a, compute_uv=False), lambda r: (R(r, 4, 3),)),
    Usage("np.linalg.svd values of U and Vh", lambda a: np.linalg.svd(a, full_matrices=False)[0],
          lambda r: (R(r, 4, 3),), grad=False),
    Usage("np.linalg.svd reconstruct tall", lambda a: (lambda u, s, vh: (u * s) @ vh)(
          *np.linalg.svd(a, full_matrices=False)), lambda r: (R(r, 4, 3),)),
    Usage("np.linalg.svd U**2 and Vh**2 wide", lambda a: (lambda u, s, vh: np.sum(u ** 2 * np.arange(1.0, 3.0))
                                                         + np.sum(vh ** 2 * np.arange(4.0)))(
          *np.linalg.svd(a, full_matrices=False)), lambda r: (R(r, 2, 4),)),
    Usage("np.linalg.svd batched", lambda a: np.linalg.svd(a, full_matrices=False).S, lambda r: (R(r, 2, 3, 4),)),
    Usage("np.linalg.svdvals", lambda a: np.linalg.svdvals(a), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.qr R", lambda a: np.abs(np.linalg.qr(a)[1]), lambda r: (M(r, 3, 3),)),
    Usage("np.linalg.qr values", lambda a: np.linalg.qr(a)[0], lambda r: (R(r, 4, 3),), grad=False),
    Usage("np.linalg.qr Q R product", lambda a: (lambda q, r_: q @ (r_ * 2.0))(*np.linalg.qr(a)),
          lambda r: (R(r, 4, 3),)),
    Usage("np.linalg.qr Q**2 tall", lambda a: np.linalg.qr(a).Q ** 2, lambda r: (R(r, 4, 3),)),
    Usage("np.linalg.qr(mode='r')", lambda a: np.linalg.qr(a, mode="r") ** 2, lambda r: (R(r, 4, 3),)),
    Usage("np.linalg.qr batched", lambda a: np.linalg.qr(a)[1] ** 2, lambda r: (R(r, 2, 4, 3),)),
    # --- norms --------------------------------------------------------------------------------------
    Usage("np.linalg.norm(x)", lambda x: np.linalg.norm(x), lambda r: (R(r, 5),)),
    Usage("np.linalg.norm(x) 3-D", lambda x: np.linalg.norm(x), lambda r: (R(r, 2, 3, 4),)),
    Usage("np.linalg.norm(x, keepdims=True)", lambda x: np.linalg.norm(x, keepdims=True), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, 1)", lambda x: np.linalg.norm(x, 1), lambda r: (R(r, 5),)),
    Usage("np.linalg.norm(x, np.inf)", lambda x: np.linalg.norm(x, np.inf), lambda r: (R(r, 5),),
          autograd_differs="autograd applies its p-norm formula with p = inf: NaN everywhere"),
    Usage("np.linalg.norm(x, -np.inf)", lambda x: np.linalg.norm(x, -np.inf), lambda r: (R(r, 5),)),
    Usage("np.linalg.norm(x, 3)", lambda x: np.linalg.norm(x, 3), lambda r: (R(r, 5),)),
    Usage("np.linalg.norm(x, 0)", lambda x: np.linalg.norm(x, 0), lambda r: (R(r, 5),), grad=False),
    Usage("np.linalg.norm(x, axis=1)", lambda x: np.linalg.norm(x, axis=1), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, axis=-1, keepdims=True)", lambda x: np.linalg.norm(x, axis=-1, keepdims=True),
          lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, 1, axis=0)", lambda x: np.linalg.norm(x, 1, axis=0), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, 'fro')", lambda x: np.linalg.norm(x, "fro"), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, 'nuc')", lambda x: np.linalg.norm(x, "nuc"), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, 2) matrix", lambda x: np.linalg.norm(x, 2), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, -2) matrix", lambda x: np.linalg.norm(x, -2), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, 1) matrix", lambda x: np.linalg.norm(x, 1), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, np.inf) matrix", lambda x: np.linalg.norm(x, np.inf), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, -1) matrix", lambda x: np.linalg.norm(x, -1), lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.norm(x, axis=(1, 2))", lambda x: np.linalg.norm(x, axis=(1, 2)), lambda r: (R(r, 2, 3, 4),)),
    Usage("np.linalg.norm(x, 'nuc', axis=(0, 2), keepdims=True)",
          lambda x: np.linalg.norm(x, "nuc", axis=(0, 2), keepdims=True), lambda r: (R(r, 2, 3, 4),)),
    # at zero the 2-norm has gradient 0 (PyTorch's choice; central differences agree), not nan
    Usage("np.linalg.norm(x, axis=1) with a zero row", lambda x: np.linalg.norm(x, axis=1),
          lambda r: (np.vstack([R(r, 1, 4), np.zeros((1, 4))]),), second_order=False,
          autograd_differs="autograd divides by the zero norm: NaN on the zero row"),
    Usage("np.linalg.vector_norm(x, axis=0, ord=3)", lambda x: np.linalg.vector_norm(x, axis=0, ord=3),
          lambda r: (R(r, 3, 4),)),
    Usage("np.linalg.matrix_norm(x, ord=1) batched", lambda x: np.linalg.matrix_norm(x, ord=1),
          lambda r: (R(r, 2, 3, 4),)),
    # --- float32 keeps float32 ------------------------------------------------------------------------
    Usage("np.einsum float32", lambda a, b: np.einsum("ij,jk->ik", a, b),
          lambda r: (R(r, 3, 4).astype(np.float32), R(r, 4, 2).astype(np.float32)), grad=False, rtol=1e-5, atol=1e-6),
    Usage("np.linalg.inv float32", lambda a: np.linalg.inv(a), lambda r: (M(r, 3, 3).astype(np.float32),),
          grad=False, rtol=1e-5, atol=1e-6),
    Usage("np.linalg.eigh float32", lambda a: np.linalg.eigh(a)[0], lambda r: (SPD(r, 3, 3).astype(np.float32),),
          grad=False, rtol=1e-5, atol=1e-6),
    Usage("np.linalg.norm float32", lambda a: np.linalg.norm(a, axis=1), lambda r: (R(r, 3, 4).astype(np.float32),),
          grad=False, rtol=1e-5, atol=1e-6),
]


@params(ROWS)
def test_usage(usage):
    check(usage)


# --- against torch ------------------------------------------------------------------------------

def _leaf(lib, a):
    return lib.tensor(a, dtype=lib.float64, requires_grad=True)


TORCH_ROWS = {
    "einsum": (lambda L, a, b: L.einsum("bij,bjk->bik", a, b), lambda r: (R(r, 2, 3, 4), R(r, 2, 4, 2))),
    "einsum trace": (lambda L, a: L.einsum("ii", a), lambda r: (R(r, 3, 3),)),
    "tensordot": (lambda L, a, b: L.tensordot(a, b, dims=([1, 0], [0, 1])), lambda r: (R(r, 3, 4, 5), R(r, 4, 3, 2))),
    "kron": (lambda L, a, b: L.kron(a, b), lambda r: (R(r, 2, 3), R(r, 3, 2))),
    "inv": (lambda L, a: L.linalg.inv(a), lambda r: (M(r, 2, 3, 3),)),
    "det": (lambda L, a: L.linalg.det(a), lambda r: (M(r, 3, 3),)),
    "slogdet": (lambda L, a: L.linalg.slogdet(a)[1], lambda r: (M(r, 2, 3, 3),)),
    "solve": (lambda L, a, b: L.linalg.solve(a, b), lambda r: (M(r, 3, 3), R(r, 3, 2))),
    "solve vector": (lambda L, a, b: L.linalg.solve(a, b), lambda r: (M(r, 3, 3), R(r, 3))),
    "cholesky": (lambda L, x: L.linalg.cholesky(x @ x.mT + L.eye(3, dtype=L.float64)), lambda r: (R(r, 3, 3),)),
    "eigh": (lambda L, x: L.linalg.eigh(x @ x.mT)[0], lambda r: (R(r, 3, 3),)),
    "eigvalsh": (lambda L, x: L.linalg.eigvalsh(x @ x.mT), lambda r: (R(r, 3, 3),)),
    "svdvals": (lambda L, a: L.linalg.svdvals(a), lambda r: (R(r, 3, 4),)),
    "svd reconstruct": (lambda L, a: (lambda u, s, vh: (u * s.unsqueeze(-2)) @ vh)(
                        *L.linalg.svd(a, full_matrices=False)), lambda r: (R(r, 4, 3),)),
    "qr": (lambda L, a: L.linalg.qr(a)[1] ** 2, lambda r: (R(r, 4, 3),)),
    "norm": (lambda L, a: L.linalg.norm(a), lambda r: (R(r, 3, 4),)),
    "vector_norm": (lambda L, a: L.linalg.vector_norm(a, 3, dim=1), lambda r: (R(r, 3, 4),)),
    "matrix_norm nuc": (lambda L, a: L.linalg.matrix_norm(a, "nuc"), lambda r: (R(r, 3, 4),)),
    "matrix_norm 2": (lambda L, a: L.linalg.matrix_norm(a, 2), lambda r: (R(r, 3, 4),)),
    "matrix_power": (lambda L, a: L.linalg.matrix_power(a, 3), lambda r: (R(r, 3, 3),)),
}


@pytest.mark.parametrize("name", list(TORCH_ROWS))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    fn, build = TORCH_ROWS[name]
    args = build(np.random.default_rng(5))
    t_in = [_leaf(torch, a) for a in args]
    s_in = [_leaf(symgrad, a) for a in args]
    t_out, s_out = fn(torch, *t_in), fn(symgrad, *s_in)
    np.testing.assert_allclose(s_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    w = np.random.default_rng(6).standard_normal(tuple(t_out.shape))
    (t_out * torch.tensor(w)).sum().backward()
    (s_out * symgrad.tensor(w, dtype=symgrad.float64)).sum().backward()
    for t, s in zip(t_in, s_in):
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_eigenvectors_match_torch_up_to_sign():
    torch = pytest.importorskip("torch")
    a = SPD(np.random.default_rng(3), 4, 4)
    w, v = symgrad.linalg.eigh(symgrad.tensor(a))
    tw, tv = torch.linalg.eigh(torch.tensor(a))
    np.testing.assert_allclose(w.numpy(), tw.numpy(), rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(v.numpy() * tv.numpy(), axis=0)), np.ones(4), rtol=1e-10)


# --- errors ---------------------------------------------------------------------------------------

def test_unsupported_arguments_name_the_function():
    x = symgrad.tensor(np.random.default_rng(0).uniform(-1, 1, (3, 4)), requires_grad=True)
    with pytest.raises(TypeError, match=r"numpy.linalg.svd with full_matrices=True"):
        np.linalg.svd(x)
    with pytest.raises(TypeError, match=r"numpy.linalg.qr with mode='raw'"):
        np.linalg.qr(x, mode="raw")
    with pytest.raises(ValueError, match=r"numpy.linalg.norm: Invalid norm order 'fro' for vectors"):
        np.linalg.norm(x, "fro", axis=1)
    with pytest.raises(ValueError, match=r"numpy.linalg.norm: Invalid norm order 3 for matrices"):
        np.linalg.norm(x, 3)
    with pytest.raises(np.linalg.LinAlgError, match=r"numpy.linalg.inv: .* square"):
        np.linalg.inv(x)
    with pytest.raises(TypeError, match=r"numpy.einsum with out="):
        np.einsum("ij->ji", x, out=np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"einsum"):
        np.einsum("ij,jk->ik", x, x)


def test_wide_qr_gradient_is_refused():
    x = symgrad.tensor(np.random.default_rng(0).uniform(-1, 1, (2, 4)), requires_grad=True)
    q, r = np.linalg.qr(x)
    with pytest.raises(ValueError, match=r"numpy.linalg.qr: the gradient of the QR of a wide matrix"):
        (r ** 2).sum().backward()


def test_lstsq_rank_and_residuals_follow_numpy():
    X = np.random.default_rng(1).uniform(-1, 1, (5, 3))
    low = np.column_stack([X[:, 0], X[:, 1], X[:, 0] + X[:, 1]])    # rank 2
    y = np.random.default_rng(2).uniform(-1, 1, 5)
    for a in (X, low, X[:2]):
        want = np.linalg.lstsq(a, y[:a.shape[0]], rcond=None)
        got = np.linalg.lstsq(symgrad.tensor(a, requires_grad=True), y[:a.shape[0]], rcond=None)
        np.testing.assert_allclose(got[0].detach().numpy(), want[0], rtol=1e-10, atol=1e-12)
        assert got[1].shape == want[1].shape
        np.testing.assert_allclose(got[1].detach().numpy(), want[1], rtol=1e-10)
        assert got[2] == want[2]


def test_integer_input_computes_in_float64():
    a = symgrad.tensor(np.array([[2, 1], [1, 3]]))
    np.testing.assert_allclose(np.linalg.inv(a).numpy(), np.linalg.inv(np.array([[2, 1], [1, 3]])))
    assert np.linalg.det(a).numpy().dtype == np.float64


def test_compiled_pinv_decides_the_rank_for_each_input():
    """The singular values pinv drops depend on the input: a compiled function must not keep the first call's."""
    f = symgrad.compile(lambda a: np.linalg.pinv(a, rcond=0.1))
    full = np.diag([3.0, 2.0, 1.0])
    low = np.diag([3.0, 2.0, 0.01])
    for a in (full, low, full):
        np.testing.assert_allclose(np.asarray(f(a)), np.linalg.pinv(a, rcond=0.1), rtol=1e-12)
