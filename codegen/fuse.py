"""Fusion groups: elementwise nodes of one output shape, plus the reductions they feed.

A group becomes one loop nest (see :mod:`codegen.numba_emit`): every elementwise node is a
scalar statement in the loop body, inputs of smaller shape are read with broadcast indexing,
and a ``sum``/``mean`` of a group value (over all dims, or over some dims) becomes an
accumulator, so the group's intermediate arrays are never written to memory.

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda x: (symgrad.sin(x) * symgrad.exp(-x * x)).sum(), np.ones(8))
>>> [len(grp.nodes) for grp in fusion_groups(g)], [grp.reductions[0].op for grp in fusion_groups(g)]
([5], ['sum'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy

from symgrad.ir.graph import Graph, Node, Value

from . import op_facts
from .per_element import statement_for
from .simd import MIN_ELEMENTS, simd_functions

# Reductions a loop carries as accumulators.
FUSABLE_REDUCTION_KINDS = ("sum", "mean")


def reduction_dims(node: Node, rank: int) -> tuple[tuple[int, ...], bool] | None:
    """(reduced dims, keepdim) of a fusable reduction node, or None if it cannot be fused.

    >>> import numpy as np, symgrad
    >>> g = symgrad.trace(lambda x: x.sum(dim=-1, keepdim=True), np.ones((2, 3)))
    >>> reduction_dims(g.nodes[0], 2)
    ((1,), True)
    """
    if op_facts.reduction_kind(node.op) not in FUSABLE_REDUCTION_KINDS or node.args[-1] is not None:
        return None   # (an explicit dtype: leave it to numpy)
    if not op_facts.reduces_over_dim(node.op):
        return tuple(range(rank)), False
    dims, keepdim = node.args[1], bool(node.args[2])
    if dims is None or dims == [] or dims == ():
        return tuple(range(rank)), keepdim
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(d, int) and -rank <= d < max(rank, 1) for d in dims):
        return None
    return tuple(sorted({d % rank for d in dims})) if rank else (), keepdim


@dataclass
class Group:
    """One future loop nest."""

    shape: tuple[int, ...]
    nodes: list[Node] = field(default_factory=list)        # elementwise, in graph order
    reductions: list[Node] = field(default_factory=list)   # full sum/mean of a group value
    inputs: list[Value] = field(default_factory=list)      # values read from outside the group
    outputs: list[Value] = field(default_factory=list)     # group values used outside (written to arrays)
    start: int = 0                                          # graph position where the loop runs


def vectorised_by_numpy(node: Node, inline: dict | None = None) -> bool:
    """True for an elementwise node that numpy computes much faster than a scalar loop can
    (a SIMD elementary function, see :mod:`codegen.simd`), on an array big enough to split for.

    ``inline``: per dtype name, function names (as in IR sympy expressions) the loops compute with
    vectorised inline code themselves (``math="vector"``, :mod:`codegen.vecmath`); they need no numpy.
    """
    if node.expr is None or len(node.outputs) != 1:
        return False
    out = node.outputs[0]
    n = 1
    for s in out.shape:
        n *= s
    if n < MIN_ELEMENTS:
        return False
    fast = simd_functions(out.dtype.name) - (inline or {}).get(out.dtype.name, frozenset())
    return any(type(f).__name__ in fast for f in node.expr.atoms(sympy.Function))


def scatter_accumulations(graph: Graph) -> dict[Node, tuple[Node, Value]]:
    """``add(index_put_add(v, shape, idx), y)`` nodes that can add ``v`` into ``y`` at ``idx``.

    The backward of indexing (``x[rows, labels]``) is a dense array of zeros with a few values
    scattered in; added to another gradient, it is cheaper to scatter into that gradient than
    to write and read the dense zeros.  Returns ``{add node: (index_put_add node, y)}``.
    """
    users = graph.users()
    found: dict[Node, tuple[Node, Value]] = {}
    for node in graph.nodes:
        if node.op != "add.Tensor" or len(node.args) != 2:
            continue
        out = node.outputs[0]
        for scattered, other in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            p = getattr(scattered, "producer", None)
            if p is None or p.op != "index_put_add" or users.get(scattered) != [node] or \
                    scattered is other or not isinstance(other, Value):
                continue
            if tuple(other.shape) == tuple(out.shape) == tuple(scattered.shape) and \
                    other.dtype is out.dtype is scattered.dtype:
                found[node] = (p, other)
                break
    return found


def _fusable(node: Node, offload: bool, inline: dict | None) -> bool:
    if node.expr is None:
        return statement_for(node) is not None    # where, casts: a registered scalar statement
    if len(node.outputs) != 1:
        return False
    # bool-valued comparisons are fine as loop temporaries; SIMD-able functions go to numpy
    return not (offload and vectorised_by_numpy(node, inline))


def fusion_groups(graph: Graph, offload: bool = True, inline: dict | None = None,
                  exclude=frozenset()) -> list[Group]:
    """Group the graph's elementwise nodes (joined by same-shape values) into loop nests.

    With ``offload``, nodes that numpy vectorises (:func:`vectorised_by_numpy`) stay outside
    the loops and run as numpy calls between them, unless all their SIMD functions are among
    ``inline[dtype name]`` (computed by vectorised code inside the loop).

    Nodes in ``exclude`` (run by other kernels) join no group.

    A node joins the group of a same-shape producer only if everything else it reads is ready
    before that group starts: the group then runs at its first node's position, all at once.
    """
    groups: list[Group] = []
    member: dict[Node, Group] = {}
    scatters = scatter_accumulations(graph)
    ready_at: dict[Value, int] = {}   # position after which a value exists
    start: dict[int, int] = {}        # id(group) -> position of its first node
    last_of_shape: dict[tuple, Group] = {}
    for pos, node in enumerate(graph.nodes):
        chosen = None
        if node not in scatters and node not in exclude and _fusable(node, offload, inline):
            shape = tuple(node.output.shape)
            for v in node.inputs:
                p = v.producer
                grp = member.get(p) if p is not None else None
                if grp is None or grp.shape != shape:
                    continue
                s0 = start[id(grp)]
                if all(member.get(u.producer) is grp or ready_at.get(u, -1) < s0 for u in node.inputs):
                    chosen = grp
                    break
            if chosen is None:
                # No producer's group: the latest same-shape group whose start already has our inputs.
                # Groups start in creation order, so it is the last one of this shape, if it starts
                # after every input is ready (an earlier one would have to hold an input: a
                # producer's group, refused above).
                grp = last_of_shape.get(shape)
                if grp is not None and start[id(grp)] > max((ready_at.get(u, -1) for u in node.inputs),
                                                            default=-1):
                    chosen = grp
            if chosen is None:
                chosen = Group(shape)
                groups.append(chosen)
                last_of_shape[shape] = chosen
                start[id(chosen)] = pos
            chosen.nodes.append(node)
            member[node] = chosen
        for o in node.outputs:
            if chosen is not None:
                ready_at[o] = start[id(chosen)]
            elif node.op == "constant":
                ready_at[o] = -1    # data baked in at trace time: the glue assigns constants first
            elif op_facts.has(node.op, "broadcast") and isinstance(node.args[0], Value):
                # loops read an expand's source with broadcast indexing: ready when the source is
                ready_at[o] = ready_at.get(node.args[0], -1)
            else:
                ready_at[o] = pos

    users = graph.users()
    graph_outputs = {v for v in graph.outputs if v is not None}
    for grp in groups:
        grp.start = start[id(grp)]
        inside = {n.output for n in grp.nodes}
        seen_inputs: set[Value] = set()
        for n in grp.nodes:
            for v in n.inputs:
                if v not in inside and v not in seen_inputs:
                    seen_inputs.add(v)
                    grp.inputs.append(v)
        # reductions of a group value become accumulators of the loop
        reductions: set[Node] = set()
        for n in grp.nodes:
            v = n.output
            for u in users.get(v, []):
                if u not in reductions and u not in exclude and u.args[0] is v and \
                        reduction_dims(u, len(grp.shape)) is not None:
                    reductions.add(u)
                    grp.reductions.append(u)
        reduced = {r.args[0] for r in grp.reductions}
        members = set(grp.nodes)
        for n in grp.nodes:
            v = n.output
            outside = [u for u in users.get(v, []) if u not in members and u not in reductions]
            if v in graph_outputs or outside or (v not in reduced and not users.get(v)):
                grp.outputs.append(v)
    return groups
