"""The namespaces the rule table's formulas run in: numpy for plain backward, symgrad ops for
``create_graph=True``.

The vocabulary itself (names and numpy helpers) is data of the rules layer
(:mod:`symgrad.rules.vocab`); this module adds the eager layer's implementations: every op's
numpy forward and its differentiable symgrad function.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from ..rules.vocab import FORMULA_FUNCTIONS, NUMPY_FUNCTIONS, TENSOR_ALIASES
from . import registry


def known_functions() -> frozenset:
    """Vocabulary helpers plus every registered op's base name."""
    return FORMULA_FUNCTIONS | {op.name for op in registry.all_ops().values()}


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
        # An op name stands for its forward only when the name has one overload; names with several
        # (sum, mean, ...) that formulas use have an explicit entry in NUMPY_FUNCTIONS.
        by_name: dict = {}
        for op in registry.all_ops().values():
            by_name.setdefault(op.name, []).append(op)
        ns = {name: ops[0].forward for name, ops in by_name.items() if len(ops) == 1 and ops[0].forward}
        ns.update(NUMPY_FUNCTIONS)
        ns.update(_extra_numpy)
        _numpy_namespace = ns
    return _numpy_namespace


def tensor_namespace() -> dict:
    """Formula name -> differentiable symgrad implementation (for create_graph=True)."""
    global _tensor_namespace
    if _tensor_namespace is None:
        from . import functional as F
        ns = {"math": math}
        for name in FORMULA_FUNCTIONS | {op.name for op in registry.all_ops().values()}:
            fn = getattr(F, TENSOR_ALIASES.get(name, name), None)
            if fn is not None:
                ns[name] = fn
        ns["where"] = _where_known_condition(ns["where"], F)
        ns["eq"], ns["ne"] = _compare_numbers(ns["eq"], operator.eq), _compare_numbers(ns["ne"], operator.ne)
        ns["keep_graph"] = _keep_graph
        ns.update(_extra_tensor)
        _tensor_namespace = ns
    return _tensor_namespace


def _where_known_condition(where, F):
    """``where`` for differentiable formulas: a condition on Scalar arguments (``Eq(exponent, 0)``)
    is a Python bool, and then only the chosen branch may carry a graph.  Otherwise the other
    branch's backward would multiply a zero by its own infinities (``x ** -1`` at 0) and a
    second derivative would be nan, where PyTorch's is 0."""

    def where_(cond, a, b):
        if isinstance(cond, (bool, np.bool_)):
            chosen, other = (a, b) if cond else (b, a)
            if not isinstance(chosen, numbers.Number):
                if isinstance(other, numbers.Number) or other.shape == chosen.shape:
                    return chosen
                return F.expand(chosen, np.broadcast_shapes(tuple(chosen.shape), tuple(other.shape)))
            if not isinstance(other, numbers.Number):      # a number: its value, in the other's shape
                return type(other)._wrap(np.full(other._data.shape, chosen, dtype=other._data.dtype))
        return where(cond, a, b)

    return where_


def _compare_numbers(compare, python_op):
    """``eq``/``ne`` for differentiable formulas: on two numbers (Scalar arguments) a Python bool,
    so that ``where`` can pick its branch once."""

    def compare_(a, b):
        if isinstance(a, numbers.Number) and isinstance(b, numbers.Number):
            return python_op(a, b)
        return compare(a, b)

    return compare_


def _keep_graph(read, g):
    """``g`` as a value in ``read``'s graph with a zero derivative towards it (a ``where`` whose condition
    is all true: the value is ``g`` bit for bit), when ``g`` has no graph of its own but ``read`` has
    (the gradients of ops tagged ``mask_backward``).  Not while tracing: a compiled graph has no use
    for a zero edge."""
    if g._grad_fn is not None or g._requires_grad or not getattr(read, "requires_grad", False) or \
            registry._recorder is not None:
        return g
    everywhere = type(g)._wrap(np.ones(g._data.shape, dtype=bool))
    return tensor_namespace()["where"](everywhere, g, read)
