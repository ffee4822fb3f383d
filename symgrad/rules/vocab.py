"""The formula vocabulary: functions a rule in ``derivatives.yaml`` may call.

Every name has two implementations with the same meaning:

* a numpy one, used by plain eager backward (fast, records nothing);
* a symgrad one, used when ``create_graph=True`` so that the backward pass is
  itself recorded and can be differentiated again.

Piecewise-constant functions (``sign``, ``heaviside``, comparisons) have zero
derivative almost everywhere, so their symgrad form returns a constant tensor.
"""

from __future__ import annotations

import math

import numpy as np

from . import special

# Names a formula may call besides the metadata readers shape/numel/dtype.  Every op in the
# rule table is callable too, by its base name with its schema's arguments (``select(grad, dim, index)``).
ELEMENTWISE = ("exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh", "atan", "sqrt", "abs",
               "sign", "erf", "log1p", "expm1", "log2", "exp2", "maximum", "minimum", "sigmoid",
               # numpy surface, elementwise family
               "asin", "acos", "asinh", "acosh", "atanh", "atan2", "hypot", "log10", "erfc", "lgamma", "digamma",
               "polygamma", "logaddexp", "logaddexp2", "cbrt", "sinc", "rint", "floor", "ceil", "xlogy", "xlog1py")
PIECEWISE_CONSTANT = ("heaviside", "eq", "ne", "logical_and", "logical_or", "logical_not")
HELPERS = ("where", "sum_to", "sum_backward", "reshape", "to_dtype", "index_zero", "unbind_backward",
           "prod_backward", "prod_backward_all", "amax_backward_all", "index_reduction_backward",
           "amax_backward", "var_backward", "cat_backward", "inverse_permutation",
           "cumprod_jvp", "cumprod_double_backward",  # numpy surface: reductions, scans and sorting
           "reduced_grad",  # losses: the gradient of a reduced loss, per element
           "mean", "trailing_dims", "negated",  # torch.nn.functional: layer_norm's statistics, pad's widths
           "matmul", "attention_weights", "repeat_heads", "group_heads_sum")  # scaled_dot_product_attention
# numpy surface: linear algebra. Backward helpers that are compositions of table ops (matmul, solve,
# inverse...): both implementations are registered by symgrad.ops.functional through
# symgrad.ops.formula_namespaces.register, the numpy one running the same composition on arrays.
LINALG_HELPERS = ("linalg_inv_backward", "linalg_det_backward", "linalg_slogdet_backward",
                  "linalg_solve_backward_A", "linalg_solve_backward_B", "linalg_cholesky_backward",
                  "linalg_eigh_backward", "linalg_svd_backward", "linalg_qr_backward")
# Function names whose symgrad implementation has another Python name (to avoid shadowing builtins).
TENSOR_ALIASES = {"slice": "slice_op", "outer": "_outer_op"}
FORMULA_FUNCTIONS = frozenset(ELEMENTWISE + PIECEWISE_CONSTANT + HELPERS + LINALG_HELPERS)


# --- numpy implementations ------------------------------------------------------------------

# Sums of float32 in float64 (float16 in float32), rounded once, where numpy would add sequentially: numpy
# sums pairwise only along the innermost memory axis, so a float32 sum over the 1e6 rows of a (1e6, 4)
# array drifts by ~3e-5 relative (torch's cascade sum: ~1e-7).  Pairwise cases keep numpy's speed.
_SUM_ACCUMULATOR = {np.dtype(np.float32): np.float64, np.dtype(np.float16): np.float32}


def _sums_pairwise(x: np.ndarray, axes: tuple) -> bool:
    n = 1
    for a in axes:
        n *= x.shape[a]
    if n <= 8:     # a handful of terms: the order of the additions hardly matters
        return True
    k = len(axes)
    return (x.flags.c_contiguous and axes == tuple(range(x.ndim - k, x.ndim))) or \
        (x.flags.f_contiguous and axes == tuple(range(k)))


def np_sum(x, axes: tuple, keepdims: bool = False):
    """``x.sum(axes)`` (``axes`` sorted, non-negative) as accurate as PyTorch's float32 sums."""
    x = np.asarray(x)
    wide = _SUM_ACCUMULATOR.get(x.dtype)
    if wide is None or _sums_pairwise(x, axes):
        return x.sum(axis=axes, keepdims=keepdims)
    return x.sum(axis=axes, keepdims=keepdims, dtype=wide).astype(x.dtype)


def np_mean(x, axes: tuple, keepdims: bool = False):
    """``x.mean(axes)``, accumulated as :func:`np_sum`."""
    x = np.asarray(x)
    wide = _SUM_ACCUMULATOR.get(x.dtype)
    if wide is None or _sums_pairwise(x, axes):
        return np.mean(x, axis=axes, keepdims=keepdims)
    return np.mean(x, axis=axes, keepdims=keepdims, dtype=wide).astype(x.dtype)


def sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast array back down to ``shape`` (the inverse of broadcasting)."""
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape)
                                      if n == 1 and x.shape[i + lead] != 1)
    out = np_sum(x, axes, keepdims=True) if axes else x
    if lead:
        out = out.reshape(out.shape[lead:])
    return out


def normalize_dims(dim, ndim: int) -> tuple[int, ...]:
    """``dim`` (None, int or sequence, negatives allowed) as sorted non-negative axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = (dim,)
    bound = max(ndim, 1)
    out = []
    for d in dim:
        if not -bound <= d < bound:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                             f"but got {d})")
        out.append(d % bound)
    # a 0-d tensor accepts dim 0 and -1, as in PyTorch: a reduction over no axis at all
    return tuple(sorted(set(out))) if ndim else ()


def _np_sum_backward(grad, shape, dim, keepdim):
    if not keepdim and len(shape):
        dims = normalize_dims(dim, len(shape))
        grad = np.expand_dims(grad, dims)
    return np.broadcast_to(grad, shape)


def _np_index_zero(grad, index, keep=False):
    if keep:
        return grad
    out = np.array(grad, copy=True)
    out[index] = 0
    return out


def reduced_grad(grad, numel, reduction):
    """A loss's gradient per element: ``grad`` itself (reduction 0 none, 2 sum: broadcast against the
    elementwise factor) or divided by the number of elements (1 mean).  Same code for arrays and Tensors."""
    return grad / numel if reduction == 1 else grad


def _np_erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is optional
        return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)
    return erf(x).astype(np.asarray(x).dtype, copy=False)


# --- numpy surface, elementwise family: scipy.special where installed, else a vectorised scalar form ----

def _scipy_special(name: str, scalar):
    """``scipy.special.<name>`` keeping the input's float dtype (scipy computes some in float64),
    or ``scalar`` vectorised when scipy is missing."""
    def fn(*args):
        dtype = np.asarray(args[-1]).dtype
        dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
        try:
            import scipy.special as sc
        except ImportError:  # pragma: no cover - scipy is optional
            return np.vectorize(scalar, otypes=[dtype])(*args)
        return np.asarray(getattr(sc, name)(*args)).astype(dtype, copy=False)

    fn.__name__ = name
    return fn


def _np_xlogy(x, y, log=np.log):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((x == 0) & ~np.isnan(y), np.zeros_like(x * y), x * log(y))


def _np_sigmoid(x):
    # exp(-|x|) never overflows; both branches agree with 1/(1+exp(-x)).
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _np_unbind_backward(grads, shape, dim):
    n = shape[dim]
    ref = next(g for g in grads if g is not None)
    parts = [grads[k] if k < len(grads) and grads[k] is not None else np.zeros_like(ref) for k in range(n)]
    return np.stack(parts, axis=dim)


def _exclusive_prod(x, axis):
    """Product of all other elements along ``axis`` (exact with zeros, no division)."""
    if x.shape[axis] == 0:
        return np.ones_like(x)
    ones = np.ones_like(np.take(x, [0], axis=axis))
    left = np.cumprod(np.concatenate([ones, np.take(x, np.arange(x.shape[axis] - 1), axis=axis)], axis), axis)
    flipped = np.flip(x, axis)
    right = np.cumprod(np.concatenate([ones, np.take(flipped, np.arange(x.shape[axis] - 1), axis=axis)], axis),
                       axis)
    return left * np.flip(right, axis)


def _np_prod_backward_all(grad, self):
    others = _exclusive_prod(self.reshape(-1), 0).reshape(self.shape) if self.size else self
    return np.broadcast_to(grad, self.shape) * others


def _np_prod_backward(grad, self, dim, keepdim):
    if np.ndim(self) == 0:  # a 0-d tensor reduced over dim 0 or -1 is itself: gradient 1
        return np.asarray(grad) * np.ones_like(self)
    if not keepdim:
        grad = np.expand_dims(grad, dim)
    return grad * _exclusive_prod(self, dim)


def _np_index_reduction_backward(grad, indices, shape, dim, keepdim):
    if len(shape) == 0:  # max/min over dim 0 of one value: all of the gradient to it
        return np.array(grad, copy=True).reshape(())
    if not keepdim:
        grad = np.expand_dims(grad, dim)
        indices = np.expand_dims(indices, dim)
    out = np.zeros(shape, dtype=grad.dtype)
    np.put_along_axis(out, indices, grad, axis=dim)
    return out


def _np_amax_backward(grad, self, result, dim, keepdim):
    axes = normalize_dims(dim if dim not in ((), []) else None, self.ndim)
    if not keepdim and self.ndim:
        grad = np.expand_dims(grad, axes)
        result = np.expand_dims(result, axes)
    mask = (self == result).astype(grad.dtype)
    count = mask.sum(axis=axes, keepdims=True)
    return grad * mask / count


def _np_var_backward(grad, self, dim, correction, keepdim):
    axes = normalize_dims(dim, self.ndim)
    n = 1
    for a in axes:
        n *= self.shape[a]
    c = 1 if correction is None else correction
    if not keepdim and self.ndim:
        grad = np.expand_dims(grad, axes)
    mean = self.mean(axis=axes, keepdims=True)
    # numpy's division: with no degrees of freedom left the gradient is nan (inf * 0), as PyTorch's
    return grad * (np.float64(2.0) / max(n - c, 0)) * (self - mean)


def _np_cat_backward(grad, dim, shapes):
    sizes = np.cumsum([s[dim] for s in shapes])[:-1]
    return tuple(np.split(grad, sizes, axis=dim))


# --- numpy surface: reductions, scans and sorting ---

# PyTorch's CPU scans accumulate float32 in double and float16 in float, then round once: a float32
# running sum of 1e6 elements drifts by ~1e-5 relative, torch's is exact to the last bit
_SCAN_ACCUMULATOR = {np.dtype(np.float32): np.float64, np.dtype(np.float16): np.float32}


def np_scan(scan, x, axis):
    """``scan(x, axis)`` (``np.cumsum`` or ``np.cumprod``) in PyTorch's accumulation type, rounded once."""
    wide = _SCAN_ACCUMULATOR.get(np.asarray(x).dtype)
    if wide is None:
        return scan(x, axis=axis)
    return scan(x, axis=axis, dtype=wide).astype(x.dtype)


def _np_reverse_cumsum(x, axis):
    """``out[j] = sum(x[j:])`` along ``axis``: the transpose of cumsum."""
    return np.ascontiguousarray(np.flip(np_scan(np.cumsum, np.flip(x, axis), axis), axis))


def _np_cumprod_backward(grad, self, dim, result):
    """Gradient of cumprod, exact where inputs are 0.

    d out[k] / d x[j] is the product of x[:k+1] without x[j].  Before the first zero of a row that is
    out[k] / x[j]; at the first zero z it is out[z-1] times the product of x[z+1:k+1]; after z it
    holds x[z] = 0.
    """
    if np.ndim(self) == 0:  # cumprod of one value is the value
        return np.array(grad, copy=True).reshape(())
    x, g, out = (np.moveaxis(np.asarray(a), dim, -1) for a in (self, grad, result))
    n = x.shape[-1]
    if n == 0:
        return np.zeros_like(self)
    zero = x == 0
    first_zero = np.where(zero.any(-1), zero.argmax(-1), n)[..., None]
    pos = np.arange(n)
    before = pos < first_zero
    tail = _np_reverse_cumsum(g * out, -1)
    gx = np.where(before, tail / np.where(before, x, 1), 0)
    partial = np_scan(np.cumprod, np.where(pos <= first_zero, 1, x), -1)  # prod of x[z+1:k+1] for k >= z
    at_zero = np.sum(np.where(pos >= first_zero, g * partial, 0), -1, keepdims=True)
    prev = np.take_along_axis(out, np.clip(first_zero - 1, 0, n - 1), -1)
    prev = np.where(first_zero == 0, 1, prev)
    gx = np.where(pos == first_zero, prev * at_zero, gx).astype(np.result_type(g, x), copy=False)
    return np.ascontiguousarray(np.moveaxis(gx, -1, dim))


def _np_cumprod_partials(x):
    """``D[..., j, k] = d cumprod(x)[k] / d x[j]`` along the last axis: the product of ``x[:k+1]`` without
    ``x[j]`` for ``k >= j``, else 0 (an n x n cumprod, no division: exact with zeros).  Also the
    n x n ``rows`` it is the cumprod of."""
    n = x.shape[-1]
    rows = np.where(np.eye(n, dtype=bool), np.ones((), x.dtype), x[..., None, :])
    return np.cumprod(rows, -1) * np.triu(np.ones((n, n), x.dtype)), rows


def _np_cumprod_jvp(t, self, dim):
    """``J t`` for ``J`` the Jacobian of cumprod along ``dim`` (cumprod_backward's gradient w.r.t. grad)."""
    if np.ndim(self) == 0:
        return np.array(t, copy=True)
    x, tt = np.moveaxis(self, dim, -1), np.moveaxis(np.broadcast_to(t, self.shape), dim, -1)
    partials, _ = _np_cumprod_partials(x)
    return np.ascontiguousarray(np.moveaxis((tt[..., :, None] * partials).sum(-2), -1, dim))


def _np_cumprod_double_backward(gg, grad, self, dim):
    """Gradient w.r.t. ``self`` of ``sum(gg * cumprod_backward(grad, self, dim))``: back through the
    n x n cumprod of :func:`_np_cumprod_partials`."""
    if np.ndim(self) == 0:
        return np.zeros_like(self)
    x = np.moveaxis(self, dim, -1)
    g2, g = (np.moveaxis(np.broadcast_to(a, self.shape), dim, -1) for a in (gg, grad))
    partials, rows = _np_cumprod_partials(x)
    n = x.shape[-1]
    weights = g2[..., :, None] * g[..., None, :] * np.triu(np.ones((n, n), x.dtype))
    d_rows = _np_cumprod_backward(weights, rows, -1, np.cumprod(rows, -1))
    d_x = np.where(np.eye(n, dtype=bool), np.zeros((), d_rows.dtype), d_rows).sum(-2)
    return np.ascontiguousarray(np.moveaxis(d_x, -1, dim))


def inverse_permutation(dims):
    """The permutation that undoes ``dims``."""
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d % len(dims)] = i
    return tuple(inv)


def trailing_dims(normalized_shape) -> tuple[int, ...]:
    """The dims a layer norm normalises: the last ``len(normalized_shape)``, counted from the end."""
    return tuple(range(-len(normalized_shape), 0))


def negated(values) -> tuple[int, ...]:
    """``values`` with each sign flipped (pad widths: what a pad adds, its gradient crops)."""
    return tuple(-int(v) for v in values)


NUMPY_FUNCTIONS = {
    "math": math,  # printed formulas spell infinities math.inf
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "sinh": np.sinh, "cosh": np.cosh, "atan": np.arctan, "sqrt": np.sqrt, "abs": np.abs,
    "sign": np.sign, "erf": _np_erf, "log1p": np.log1p, "expm1": np.expm1, "log2": np.log2,
    "exp2": np.exp2, "maximum": np.maximum, "minimum": np.minimum, "sigmoid": _np_sigmoid,
    "heaviside": np.heaviside, "eq": np.equal, "ne": np.not_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_not": np.logical_not,
    "reduced_grad": reduced_grad,
    "where": np.where, "expand": np.broadcast_to, "sum_to": sum_to, "sum_backward": _np_sum_backward,
    "reshape": np.reshape, "to_dtype": lambda x, d: x.astype(d.np, copy=False),
    "index_zero": _np_index_zero, "unbind_backward": _np_unbind_backward,
    "prod_backward": _np_prod_backward, "prod_backward_all": _np_prod_backward_all,
    "amax_backward_all": lambda grad, self, result: _np_amax_backward(grad, self, result, None, False),
    "sum": lambda x, dim, keepdim=False: np.sum(x, axis=normalize_dims(dim, np.ndim(x)), keepdims=keepdim),
    "mean": lambda x, dim, keepdim=False: np.mean(x, axis=normalize_dims(dim, np.ndim(x)), keepdims=keepdim),
    "index_reduction_backward": _np_index_reduction_backward,
    "amax_backward": _np_amax_backward, "var_backward": _np_var_backward, "cat_backward": _np_cat_backward,
    "inverse_permutation": inverse_permutation, "trailing_dims": trailing_dims, "negated": negated,
    # numpy surface: reductions, scans and sorting
    "cumprod_jvp": lambda t, self, dim: _np_cumprod_jvp(t, self, dim),
    "cumprod_double_backward": lambda gg, grad, self, dim: _np_cumprod_double_backward(gg, grad, self, dim),
    # numpy surface, elementwise family
    "asin": np.arcsin, "acos": np.arccos, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "atan2": np.arctan2, "hypot": np.hypot, "log10": np.log10, "logaddexp": np.logaddexp,
    "logaddexp2": np.logaddexp2, "cbrt": np.cbrt, "sinc": np.sinc, "rint": np.rint, "floor": np.floor,
    "ceil": np.ceil, "erfc": _scipy_special("erfc", math.erfc),
    "lgamma": _scipy_special("gammaln", special.lgamma_scalar),
    "digamma": _scipy_special("digamma", special.digamma_scalar),
    "polygamma": _scipy_special("polygamma", special.polygamma_scalar),
    "xlogy": _np_xlogy, "xlog1py": lambda x, y: _np_xlogy(x, y, np.log1p),
}
