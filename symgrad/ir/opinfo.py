"""What layers above the IR may ask about the op a node names: its rule and its numpy forward.

Code generators read op facts through here (and :mod:`symgrad.rules`), never through the eager
op dispatch, so that the eager core can change without touching a backend.  User-registered ops
are included: they are looked up when asked for.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ops import registry
from ..rules.table import Rule


def rule(op: str) -> Rule:
    """The rule-table entry of ``op`` (``"mul.Tensor"``)."""
    return registry.get(op).rule


def numpy_forward(op: str) -> Callable:
    """The numpy function computing ``op``'s outputs from numpy arrays (schema argument order)."""
    return registry.get(op).forward


def returns_sequence(op: str) -> bool:
    """Whether ``op`` returns a list of tensors (``unbind``, ``split``), even when it has one item."""
    return registry.get(op).rule.schema.returns.endswith("[]")
