"""The facts (:mod:`symgrad.rules.facts`) of the op an IR node names, user-registered ops included.

>>> has("expand", "broadcast"), reduction_kind("amax"), reduces_over_dim("sum")
(True, 'amax', False)
"""

from __future__ import annotations

from symgrad.ir import opinfo
from symgrad.rules import facts


def has(op: str, tag: str) -> bool:
    """Whether ``op`` carries ``tag`` (:mod:`symgrad.rules.facts` lists them)."""
    return facts.has(op, tag, opinfo.rule)


def reduction_kind(op: str) -> str | None:
    """``"sum"``, ``"mean"``, ``"amax"``, ``"amin"`` for a reduction op, else None."""
    return facts.reduction_kind(op, opinfo.rule)


def reduces_over_dim(op: str) -> bool:
    """Whether a reduction op takes a ``dim`` argument (else it reduces over all dims)."""
    return facts.reduces_over_dim(op, opinfo.rule)


def register(table: dict, *ops: str):
    """A decorator storing its function in ``table`` under each of ``ops`` (per-op lowerings, index
    maps, argument readers: data keyed by op, never ``if`` chains over op names)."""
    def deco(fn):
        for op in ops:
            table[op] = fn
        return fn
    return deco
