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

# Names a formula may call besides the metadata readers shape/numel/dtype.  Every op in the
# rule table is callable too, by its base name with its schema's arguments (``select(grad, dim, index)``).
ELEMENTWISE = ("exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh", "atan", "sqrt", "abs",
               "sign", "erf", "log1p", "expm1", "log2", "exp2", "maximum", "minimum", "sigmoid")
PIECEWISE_CONSTANT = ("heaviside", "eq", "ne", "logical_and", "logical_or", "logical_not")
HELPERS = ("where", "sum_to", "sum_backward", "reshape", "to_dtype", "index_zero", "unbind_backward")
# Function names whose symgrad implementation has another Python name (to avoid shadowing builtins).
TENSOR_ALIASES = {"slice": "slice_op"}
FORMULA_FUNCTIONS = frozenset(ELEMENTWISE + PIECEWISE_CONSTANT + HELPERS)


def known_functions() -> frozenset:
    """Vocabulary helpers plus every registered op's base name."""
    from . import registry

    return FORMULA_FUNCTIONS | {op.name for op in registry.all_ops().values()}


# --- numpy implementations ------------------------------------------------------------------

def sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast array back down to ``shape`` (the inverse of broadcasting)."""
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape)
                                      if n == 1 and x.shape[i + lead] != 1)
    out = x.sum(axis=axes, keepdims=True) if axes else x
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
        out.append(d % bound if ndim else 0)
    return tuple(sorted(set(out)))


def _np_sum_backward(grad, shape, dim, keepdim):
    if not keepdim and len(shape):
        dims = normalize_dims(dim, len(shape))
        grad = np.expand_dims(grad, dims)
    return np.broadcast_to(grad, shape)


def _np_index_zero(grad, index):
    out = np.array(grad, copy=True)
    out[index] = 0
    return out


def _np_erf(x):
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is optional
        return np.vectorize(math.erf, otypes=[np.asarray(x).dtype])(x)
    return erf(x).astype(np.asarray(x).dtype, copy=False)


def _np_sigmoid(x):
    # exp(-|x|) never overflows; both branches agree with 1/(1+exp(-x)).
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _np_unbind_backward(grads, shape, dim):
    n = shape[dim]
    ref = next(g for g in grads if g is not None)
    parts = [grads[k] if k < len(grads) and grads[k] is not None else np.zeros_like(ref) for k in range(n)]
    return np.stack(parts, axis=dim)


NUMPY_FUNCTIONS = {
    "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "sinh": np.sinh, "cosh": np.cosh, "atan": np.arctan, "sqrt": np.sqrt, "abs": np.abs,
    "sign": np.sign, "erf": _np_erf, "log1p": np.log1p, "expm1": np.expm1, "log2": np.log2,
    "exp2": np.exp2, "maximum": np.maximum, "minimum": np.minimum, "sigmoid": _np_sigmoid,
    "heaviside": np.heaviside, "eq": np.equal, "ne": np.not_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_not": np.logical_not,
    "where": np.where, "expand": np.broadcast_to, "sum_to": sum_to, "sum_backward": _np_sum_backward,
    "reshape": np.reshape, "to_dtype": lambda x, d: x.astype(d.np, copy=False),
    "index_zero": _np_index_zero, "unbind_backward": _np_unbind_backward,
}

_numpy_namespace: dict | None = None
_tensor_namespace: dict | None = None
_extra_numpy: dict = {}
_extra_tensor: dict = {}


def register(name: str, numpy_fn, tensor_fn) -> None:
    """Add a formula function (used by ops modules and user-registered ops)."""
    global _numpy_namespace, _tensor_namespace
    _extra_numpy[name] = numpy_fn
    _extra_tensor[name] = tensor_fn
    _numpy_namespace = _tensor_namespace = None


def numpy_namespace() -> dict:
    """Formula name -> numpy implementation (ops contribute their numpy forwards)."""
    global _numpy_namespace
    if _numpy_namespace is None:
        from . import registry

        ns = {op.name: op.forward for op in registry.all_ops().values() if op.forward is not None}
        ns.update(NUMPY_FUNCTIONS)
        ns.update(_extra_numpy)
        _numpy_namespace = ns
    return _numpy_namespace


def tensor_namespace() -> dict:
    """Formula name -> differentiable symgrad implementation (for create_graph=True)."""
    global _tensor_namespace
    if _tensor_namespace is None:
        from . import functional as F

        from . import registry

        ns = {}
        for name in FORMULA_FUNCTIONS | {op.name for op in registry.all_ops().values()}:
            fn = getattr(F, TENSOR_ALIASES.get(name, name), None)
            if fn is not None:
                ns[name] = fn
        for name in PIECEWISE_CONSTANT + ("sign",):
            ns[name] = F.constant_function(NUMPY_FUNCTIONS[name])
        ns.update(_extra_tensor)
        _tensor_namespace = ns
    return _tensor_namespace
