"""Scalar statements for the ops tagged ``per_element``: elementwise ops without a sympy expression.

``where.self`` and dtype casts compute each output element from the same element of their
(broadcast) inputs, like the table's elementwise ops, but sympy has no expression for them.  The
rule table says so with the ``per_element`` tag (:mod:`symgrad.rules.facts`); this module holds, per
such op, the scalar statement a kernel computes one element with, and which nodes of the op it
covers.  Loop kernels (:mod:`codegen.fuse`, :mod:`codegen.numba_emit`) and row kernels
(:mod:`codegen.row_kernel`) both read it, so an op fuses in both as soon as it is tagged and
registered here.

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda c, x: symgrad.where(c, x, 0.0), np.ones(3, bool), np.ones(3))
>>> n = g.nodes[-1]
>>> lower = statement_for(n)
>>> from codegen.kernel_common import KernelPrinter
>>> lower(n, KernelPrinter({v.name: v.name.lower() for v in g.placeholders}, {}), [])
'where(c, x, k0)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import sympy

from symgrad.ir.graph import Node, Value

from . import op_facts
from .kernel_common import lift_constants

# ``code(node, printer, constants)``: the statement's right-hand side; ``printer`` prints a value's
# symbol by its kernel name, ``constants`` collects lifted constants (lift_constants)
Statement = Callable[[Node, object, list], str]


@dataclass(frozen=True)
class _Entry:
    code: Statement
    covers: Callable[[Node], bool]


_STATEMENTS: dict[str, _Entry] = {}


def per_element(op: str, covers: Callable[[Node], bool] = lambda n: True):
    """Register the scalar statement of ``op`` (which the table must tag ``per_element``) for the nodes
    ``covers`` accepts."""
    def deco(fn: Statement) -> Statement:
        _STATEMENTS[op] = _Entry(fn, covers)
        return fn
    return deco


def statement_for(node: Node) -> Statement | None:
    """The scalar statement computing ``node`` per element, or None if kernels cannot (no expression,
    not tagged ``per_element``, or arguments its registered statement does not cover)."""
    if node.expr is not None or len(node.outputs) != 1 or not op_facts.has(node.op, "per_element"):
        return None
    entry = _STATEMENTS.get(node.op)
    return entry.code if entry is not None and entry.covers(node) else None


def _operand(x, printer, constants: list) -> str:
    sym = sympy.Symbol(x.name) if isinstance(x, Value) else sympy.sympify(x)
    return printer.doprint(lift_constants(sym, constants))


def _float_result(n: Node) -> bool:
    return n.outputs[0].dtype.np in (np.float64, np.float32)


@per_element("_to_copy", covers=_float_result)
def _to_copy(n: Node, printer, constants: list) -> str:
    return f"np.{np.dtype(n.outputs[0].dtype.np).name}({_operand(n.args[0], printer, constants)})"


@per_element("where.self")
def _where(n: Node, printer, constants: list) -> str:
    c, a, b = (_operand(x, printer, constants) for x in n.args[:3])
    return f"where({c}, {a}, {b})"
