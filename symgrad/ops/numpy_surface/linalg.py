"""Linear algebra: einsum, tensordot, kron, inner, vdot and numpy.linalg.

Every handler builds on the ops of :mod:`symgrad.ops.functional` (the ``linalg_*`` rule-table entries
and the decompositions next to them). numpy's linalg works on floats: integer inputs become float64,
as numpy makes them. numpy's structured results (``EighResult``, ``SVDResult``...) are named tuples
here too, so both ``w, v = np.linalg.eigh(a)`` and ``np.linalg.eigh(a).eigenvalues`` work.
"""

from __future__ import annotations

import math
import numbers
from collections import namedtuple

import numpy as np

from ... import dtypes as _dt
from ...tensor import Tensor
from .. import functional as F
from ..numpy_dispatch import numpy_functions

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])


def _unsupported_arg(func: str, arg: str, value, hint: str = "") -> TypeError:
    return TypeError(f"symgrad: numpy.{func} with {arg}={value!r} is not supported on symgrad tensors"
                     f"{'; ' + hint if hint else ''}")


def _float(a) -> Tensor:
    """numpy's linalg computes in floating point: integers and bools become float64."""
    t = F.as_tensor(a)
    return t if t.dtype.is_floating_point else F.to(t, _dt.float64)


def _matrices(a, func: str, square: bool = True) -> Tensor:
    t = _float(a)
    if t.ndim < 2:
        raise np.linalg.LinAlgError(f"numpy.{func}: {t.ndim}-dimensional array given. Array must be at least "
                                    "two-dimensional")
    if square and t.shape[-1] != t.shape[-2]:
        raise np.linalg.LinAlgError(f"numpy.{func}: Last 2 dimensions of the array must be square")
    return t


# --- products -------------------------------------------------------------------------------


def _interleaved(operands) -> tuple[str, list]:
    """numpy's ``einsum(op0, sublist0, op1, sublist1, ..., [out])`` as a subscripts string."""
    ops, subs = list(operands[0::2]), list(operands[1::2])
    out = None
    if len(ops) > len(subs):   # a trailing output sublist
        out = ops.pop()

    def letters(sub) -> str:
        text = ""
        for s in sub:
            if s is Ellipsis:
                text += "..."
            elif isinstance(s, (int, np.integer)) and 0 <= s < 52:
                text += "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[s]
            else:
                raise ValueError(f"numpy.einsum: subscript {s!r} in a sublist must be an integer in [0, 52) or ...")
        return text

    eq = ",".join(letters(s) for s in subs)
    if out is not None:
        eq += "->" + letters(out)
    return eq, ops


@numpy_functions(np.einsum)
def _einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    if out is not None:
        raise _unsupported_arg("einsum", "out", "...", "writing into an array would drop the autograd graph")
    if order not in ("K", "A", "C"):
        raise _unsupported_arg("einsum", "order", order)
    # optimize only changes numpy's contraction order: symgrad always takes opt_einsum's path
    if isinstance(operands[0], str):
        eq, ops = operands[0], list(operands[1:])
    else:
        eq, ops = _interleaved(operands)
    ts = [F.as_tensor(o) for o in ops]
    if dtype is not None:
        ts = [F.to(t, dtype) for t in ts]
    return F.einsum(eq, *F.numpy_promoted(*ts))


@numpy_functions(np.tensordot)
def _tensordot(a, b, axes=2):
    return F.tensordot(*F.numpy_promoted(a, b), axes)


@numpy_functions(np.linalg.tensordot)
def _linalg_tensordot(x1, x2, /, *, axes=2):
    return F.tensordot(*F.numpy_promoted(x1, x2), axes)


@numpy_functions(np.kron)
def _kron(a, b):
    return F.kron(a, b)


@numpy_functions(np.inner)
def _inner(a, b):
    return F.inner(*F.numpy_promoted(a, b))


@numpy_functions(np.vdot)
def _vdot(a, b):
    return F.vdot(*F.numpy_promoted(a, b))


@numpy_functions(np.linalg.matmul)
def _linalg_matmul(x1, x2, /):
    return F.matmul(x1, x2)


@numpy_functions(np.linalg.outer)
def _linalg_outer(x1, x2, /):
    a, b = F.as_tensor(x1), F.as_tensor(x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"numpy.linalg.outer: Input arrays must be one-dimensional, but they are {a.ndim}-D and "
                         f"{b.ndim}-D")
    return F.outer(a, b)


@numpy_functions(np.linalg.vecdot)
def _linalg_vecdot(x1, x2, /, *, axis=-1):
    a, b = F.as_tensor(x1), F.as_tensor(x2)
    return F.sum(F.mul(a, b), int(axis))


@numpy_functions(np.linalg.matrix_transpose)
def _linalg_matrix_transpose(x, /):
    t = F.as_tensor(x)
    if t.ndim < 2:
        raise ValueError(f"numpy.linalg.matrix_transpose: Input array must be at least 2-dimensional, got {t.ndim}-D")
    return F.transpose(t, -2, -1)


@numpy_functions(np.linalg.trace)
def _linalg_trace(x, /, *, offset=0, dtype=None):
    if offset != 0:
        raise _unsupported_arg("linalg.trace", "offset", offset, "use numpy.trace")
    t = F.as_tensor(x) if dtype is None else F.to(F.as_tensor(x), dtype)
    return F.einsum("...ii->...", t)


@numpy_functions(np.linalg.diagonal)
def _linalg_diagonal(x, /, *, offset=0):
    if offset != 0:
        raise _unsupported_arg("linalg.diagonal", "offset", offset, "use numpy.diagonal")
    return F.einsum("...ii->...i", F.as_tensor(x))


@numpy_functions(np.linalg.multi_dot)
def _multi_dot(arrays, *, out=None):
    if out is not None:
        raise _unsupported_arg("linalg.multi_dot", "out", "...", "writing into an array would drop the autograd graph")
    ts = [F.as_tensor(a) for a in arrays]
    if len(ts) < 2:
        raise ValueError("numpy.linalg.multi_dot: Expecting at least two arrays.")
    if any(t.ndim not in (1, 2) for t in ts) or any(t.ndim != 2 for t in ts[1:-1]):
        raise ValueError("numpy.linalg.multi_dot: the first and last arrays must be 1-D or 2-D, the others 2-D")
    result = ts[0]
    for t in ts[1:]:
        result = F.matmul(result, t)
    return result


# --- numpy.linalg ---------------------------------------------------------------------------


@numpy_functions(np.linalg.inv)
def _inv(a):
    return F.linalg_inv(_matrices(a, "linalg.inv"))


@numpy_functions(np.linalg.det)
def _det(a):
    return F.linalg_det(_matrices(a, "linalg.det"))


@numpy_functions(np.linalg.slogdet)
def _slogdet(a):
    return SlogdetResult(*F.linalg_slogdet(_matrices(a, "linalg.slogdet")))


@numpy_functions(np.linalg.solve)
def _solve(a, b):
    A = _matrices(a, "linalg.solve")
    B = _float(b)
    if B.ndim == 0:
        raise ValueError("numpy.linalg.solve: b must be at least one-dimensional")
    return F.linalg_solve(A, B)


@numpy_functions(np.linalg.cholesky)
def _cholesky(a, /, *, upper=False):
    return F.linalg_cholesky(_matrices(a, "linalg.cholesky"), upper=bool(upper))


@numpy_functions(np.linalg.eigh)
def _eigh(a, UPLO="L"):
    if UPLO not in ("L", "U"):
        raise ValueError(f"numpy.linalg.eigh: UPLO argument must be 'L' or 'U', got {UPLO!r}")
    return EighResult(*F.linalg_eigh(_matrices(a, "linalg.eigh"), UPLO))


@numpy_functions(np.linalg.eigvalsh)
def _eigvalsh(a, UPLO="L"):
    return _eigh(a, UPLO)[0]


@numpy_functions(np.linalg.svd)
def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if hermitian:
        raise _unsupported_arg("linalg.svd", "hermitian", hermitian, "leave it False (the result is the same)")
    A = _matrices(a, "linalg.svd", square=False)
    U, S, Vh = F.linalg_svd(A)
    if not compute_uv:
        return S
    if full_matrices and A.shape[-1] != A.shape[-2]:
        raise _unsupported_arg("linalg.svd", "full_matrices", True,
                               "for a non-square matrix pass full_matrices=False (the reduced SVD), or "
                               "compute_uv=False")
    return SVDResult(U, S, Vh)


@numpy_functions(np.linalg.svdvals)
def _svdvals(x, /):
    return F.linalg_svd(_matrices(x, "linalg.svdvals", square=False))[1]


@numpy_functions(np.linalg.qr)
def _qr(a, mode="reduced"):
    A = _matrices(a, "linalg.qr", square=False)
    if mode == "complete" and A.shape[-2] <= A.shape[-1]:
        mode = "reduced"   # with no more rows than columns the complete and reduced QR agree
    if mode not in ("reduced", "r"):
        raise _unsupported_arg("linalg.qr", "mode", mode, "use mode='reduced' or mode='r'")
    Q, R = F.linalg_qr(A)
    return R if mode == "r" else QRResult(Q, R)


@numpy_functions(np.linalg.matrix_power)
def _matrix_power(a, n):
    return F.linalg_matrix_power(_matrices(a, "linalg.matrix_power"), n)


@numpy_functions(np.linalg.pinv)
def _pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    if hermitian:
        raise _unsupported_arg("linalg.pinv", "hermitian", hermitian, "leave it False (the result is the same)")
    A = _matrices(a, "linalg.pinv", square=False)
    if rcond is None:   # numpy's defaults
        rcond = 1e-15 if rtol is np._NoValue else (max(A.shape[-2:]) * np.finfo(A._data.dtype).eps
                                                    if rtol is None else rtol)
    elif rtol is not np._NoValue:
        raise ValueError("numpy.linalg.pinv: `rtol` and `rcond` can't be both set.")
    return F.linalg_pinv(A, rcond)


@numpy_functions(np.linalg.lstsq)
def _lstsq(a, b, rcond=None):
    """The minimum-norm least-squares solution from the SVD (numpy's gelsd): ``(x, residuals, rank, s)``.

    The rank and whether residuals exist depend on the values. Eagerly they follow numpy exactly; in a
    compiled function the rank is computed by ops and the residuals are the sum of squares whenever A has
    more rows than columns (numpy returns an empty array instead when such an A is rank-deficient)."""
    from ..registry import _recorder
    A = _float(a)
    if A.ndim != 2:
        raise np.linalg.LinAlgError(f"numpy.linalg.lstsq: {A.ndim}-dimensional array given. Array must be "
                                    "two-dimensional")
    B = _float(b)
    vector = B.ndim == 1
    if B.ndim not in (1, 2) or B.shape[0] != A.shape[0]:
        raise np.linalg.LinAlgError("numpy.linalg.lstsq: Incompatible dimensions")
    m, n = A.shape
    if rcond is None:
        rcond = np.finfo(A._data.dtype).eps * max(m, n)
    B2 = F.unsqueeze(B, 1) if vector else B
    x = F.matmul(F.linalg_pinv(A, rcond), B2)
    S = F.linalg_svd(A)[1]
    kept = F.gt(S, F.mul(F.amax(S, -1, True), float(rcond)))
    traced = _recorder is not None and _recorder.is_traced(A)
    rank = F.sum(F.to(kept, _dt.int64)) if traced else np.int32(np.count_nonzero(kept._data))
    if m > n and (traced or rank == n):
        r = F.sub(F.matmul(A, x), B2)
        residuals = F.sum(F.mul(r, r), 0)
    else:
        residuals = Tensor._wrap(np.empty((0,), dtype=np.result_type(A._data.dtype, B._data.dtype)))
    return F.squeeze(x, -1) if vector else x, residuals, rank, S


@numpy_functions(np.linalg.cond)
def _cond(x, p=None):
    A = _matrices(x, "linalg.cond", square=p not in (None, 2, -2))   # the SVD orders take any shape
    if p in (None, 2, -2):
        S = F.linalg_svd(A)[1]
        largest, smallest = F.select(S, -1, 0), F.select(S, -1, S.shape[-1] - 1)
        return F.div(smallest, largest) if p == -2 else F.div(largest, smallest)
    ord = _matrix_ord(p, "linalg.cond")
    return F.mul(F.linalg_matrix_norm(A, ord), F.linalg_matrix_norm(F.linalg_inv(A), ord))


# --- norms ----------------------------------------------------------------------------------

_VECTOR_ORDS = "None, inf, -inf, 0, or any other number"
_MATRIX_ORDS = "None, 'fro', 'nuc', inf, -inf, 1, -1, 2, -2"


def _vector_ord(ord, func: str):
    if ord is None:
        return 2
    if isinstance(ord, str) or not isinstance(ord, numbers.Real):
        raise ValueError(f"numpy.{func}: Invalid norm order {ord!r} for vectors (use {_VECTOR_ORDS})")
    return ord


def _matrix_ord(ord, func: str):
    if ord is None:
        return "fro"
    if ord in ("fro", "nuc") or (isinstance(ord, numbers.Real) and ord in (1, -1, 2, -2, math.inf, -math.inf)):
        return ord
    raise ValueError(f"numpy.{func}: Invalid norm order {ord!r} for matrices (use {_MATRIX_ORDS})")


@numpy_functions(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    t = _float(x)
    keepdims = bool(keepdims)
    if axis is None:
        if ord is None:   # the 2-norm of all the values, whatever the number of dimensions
            out = F.linalg_vector_norm(t, 2, None, keepdims)
            return F.reshape(out, (1,) * t.ndim) if keepdims else out
        if t.ndim == 1:
            return F.linalg_vector_norm(t, _vector_ord(ord, "linalg.norm"), 0, keepdims)
        if t.ndim == 2:
            return F.linalg_matrix_norm(t, _matrix_ord(ord, "linalg.norm"), (0, 1), keepdims)
        raise ValueError("numpy.linalg.norm: Improper number of dimensions to norm (give axis for an array of "
                         f"{t.ndim} dimensions)")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(axes) == 1:
        return F.linalg_vector_norm(t, _vector_ord(ord, "linalg.norm"), int(axes[0]), keepdims)
    if len(axes) == 2:
        return F.linalg_matrix_norm(t, _matrix_ord(ord, "linalg.norm"), tuple(int(a) for a in axes), keepdims)
    raise ValueError("numpy.linalg.norm: Improper number of dimensions to norm (axis names more than two axes)")


@numpy_functions(np.linalg.vector_norm)
def _vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    t = _float(x)
    ord = _vector_ord(ord, "linalg.vector_norm")
    out = F.linalg_vector_norm(t, ord, None if axis is None else axis, bool(keepdims))
    if axis is None and keepdims:
        return F.reshape(out, (1,) * t.ndim)
    return out


@numpy_functions(np.linalg.matrix_norm)
def _matrix_norm(x, /, *, keepdims=False, ord="fro"):
    t = _matrices(x, "linalg.matrix_norm", square=False)
    return F.linalg_matrix_norm(t, _matrix_ord(ord, "linalg.matrix_norm"), (-2, -1), bool(keepdims))
