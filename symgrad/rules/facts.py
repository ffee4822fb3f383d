"""Op facts: what code generators may assume about an op, declared once under ``tags:`` in the table.

Every backend reads these instead of keeping its own list of op names.  The tags (validated by
:mod:`symgrad.rules.table`, listed in :data:`~symgrad.rules.table.TAGS`):

``view``
    The output may share input 0's memory (a numpy view of it): the Numba glue's buffer pool keeps
    a buffer live while a view of it is read.
``fresh_result``
    The output is always a new array, never a view of an input: a pooled buffer may feed it.  An
    input read by an op tagged neither ``view`` nor ``fresh_result`` is never pooled, so an untagged
    op that does return a view (``select.int``, ``slice.Tensor``) is safe.
``same_values``
    The output holds input 0's values in order, reshaped, broadcast or copied, with no arithmetic:
    a kernel may use input 0's value in its place (row kernels).  ``unsqueeze`` and the ``squeeze``
    overloads would qualify; they are untagged, so row kernels decline graphs with them.
``broadcast``
    The output is input 0 broadcast to the output's shape: loops read input 0 with broadcast
    indexing instead of a materialised array.
``shifted_read``
    Each output element is an input element at a position affine in the output's position, or zero
    where none lands (a slice, flip or select, their gradients, a cat): a stencil loop reads the inputs
    there instead of making the output (the index maps are in :mod:`codegen.shifted_reads`).
``recomputable``
    Cheap to compute again (no arithmetic): the partitioner may redo it in the backward instead of
    saving its output (elementwise nodes are judged by their expression instead).
``reduce_sum``, ``reduce_mean``, ``reduce_amax``, ``reduce_amin``
    The output is that reduction of input 0, over all dims or, when the schema has a ``dim``
    argument, over those dims (with ``keepdim``).  At most one per entry.
``gather``
    The output is input 0 read at the integer index arrays of the ``indices`` argument
    (``index.Tensor``): a scatter loop may read input 0 through the index (:mod:`codegen.scatter`).
``scatter_add``
    The output is a base (zeros of ``input_sizes``, or ``self`` when ``accumulate``) with ``values``
    added at ``indices``, repeated indices accumulating in order: a Numba loop may do the adding.
``per_element``
    Elementwise -- each output element comes from the same element of the (broadcast) inputs -- but
    without an ``elementwise:`` expression (``where.self``, ``_to_copy``): loop and row kernels compute
    it per element with the statement :mod:`codegen.per_element` registers for the op.
``shape_from_values``
    The output's shape depends on the values of the inputs, not only on their shapes (``bincount``):
    a graph, whose shapes are fixed when traced, cannot hold it, so the tracer refuses it.

Besides the table's ops the IR has two nodes of its own (``detach``, ``constant``); their facts are
:data:`IR_NODE_TAGS`.  User-registered ops may carry ``tags:`` in their YAML; pass ``lookup`` (an op's
rule by its key, e.g. ``symgrad.ir.opinfo.rule``) to see them.

>>> sorted(ops_tagged("broadcast")), reduction_kind("mean.dim"), reduces_over_dim("mean.dim")
(['expand'], 'mean', True)
>>> has("detach", "view"), has("mul.Tensor", "view"), reduction_kind("sum")
(True, False, 'sum')
"""

from __future__ import annotations

from collections.abc import Callable

from .table import TAGS, Rule, load_rules

__all__ = ["IR_NODE_TAGS", "TAGS", "has", "ops_tagged", "reduction_kind", "reduces_over_dim", "tags"]

# The IR's own nodes, which have no table entry: ``detach`` (identity) and ``constant`` (baked array).
IR_NODE_TAGS: dict[str, frozenset[str]] = {
    "detach": frozenset({"view", "same_values", "recomputable"}),
    "constant": frozenset({"recomputable"}),
}

_REDUCTIONS = {"reduce_sum": "sum", "reduce_mean": "mean", "reduce_amax": "amax", "reduce_amin": "amin"}

Lookup = Callable[[str], Rule]


def _rule(op: str, lookup: Lookup | None) -> Rule | None:
    if lookup is None:
        return load_rules().get(op)
    try:
        return lookup(op)
    except KeyError:
        return None


def tags(op: str, lookup: Lookup | None = None) -> frozenset[str]:
    """The tags of ``op`` (an IR node's ``op``): from :data:`IR_NODE_TAGS`, else from its rule
    (``lookup(op)``, or the shipped table's entry); empty for an op that has none."""
    if op in IR_NODE_TAGS:
        return IR_NODE_TAGS[op]
    rule = _rule(op, lookup)
    return rule.tags if rule is not None else frozenset()


def has(op: str, tag: str, lookup: Lookup | None = None) -> bool:
    """Whether ``op`` carries ``tag``."""
    if tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r} (tags: {', '.join(TAGS)})")
    return tag in tags(op, lookup)


def ops_tagged(tag: str) -> frozenset[str]:
    """The shipped table's ops and the IR's own nodes that carry ``tag``."""
    if tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r} (tags: {', '.join(TAGS)})")
    found = {op for op, t in IR_NODE_TAGS.items() if tag in t}
    return frozenset(found | {key for key, rule in load_rules().items() if tag in rule.tags})


def reduction_kind(op: str, lookup: Lookup | None = None) -> str | None:
    """``"sum"``, ``"mean"``, ``"amax"`` or ``"amin"`` for a reduction (its ``reduce_*`` tag), else None."""
    for t in tags(op, lookup):
        if t in _REDUCTIONS:
            return _REDUCTIONS[t]
    return None


def reduces_over_dim(op: str, lookup: Lookup | None = None) -> bool:
    """Whether a reduction takes a ``dim`` argument (else it reduces over all dims)."""
    rule = _rule(op, lookup)
    return reduction_kind(op, lookup) is not None and rule is not None and \
        any(a.name == "dim" for a in rule.schema.args)
