"""Row regions: the row-kernel parts of a graph that also does other things (matrix products, views).

A softmax between two matrix products (attention: ``softmax(Q @ K^T) @ V``) reduces each row of a
``[..., rows, cols]`` batch and uses the reduction again (its max, then the sum of its exponentials),
and so does its backward (a row sum of the gradient times the probabilities).  The loop fuser must end
a loop at each such reduction, so every step passes over the whole batch.  A row kernel
(:mod:`codegen.row_kernel`) makes one pass over the rows instead, each row's intermediate values in
L1; but it takes whole graphs.  This module finds the connected parts of a graph that a row kernel
can take, each part's values of shape ``(*lead, cols)``, ``(*lead, 1)`` or ``()``, and writes each as
a 2-D graph (``rows = prod(lead)``): the glue then calls the row kernel on reshaped arrays at the
place the part starts.

A region is grown in graph order, as the fuser grows a loop: a node joins the region of a value it
reads only if everything else it reads is ready before the region starts, so that the whole region
can run at its first node's place.  A region the row kernel declines (no row reduction used again,
or an op it does not take) is left to the fuser.

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda a, b: symgrad.softmax(a @ b, dim=-1), np.ones((2, 3, 4)), np.ones((2, 4, 5)))
>>> [(r.lead, r.cols, [n.op for n in r.nodes]) for r in row_regions(g)]      # doctest: +NORMALIZE_WHITESPACE
[((2, 3), 5, ['amax', 'detach', 'sub.Tensor', 'exp', 'sum.dim_IntList', 'reciprocal', 'mul.Tensor'])]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from symgrad.ir.graph import Graph, Node, Value

from . import op_facts
from .per_element import statement_for

ROW_REDUCTIONS = ("sum", "mean", "amax", "amin")
# ops over the last dim that the row kernel writes out as its steps (a max, a sum, ...): ``(x, dim, ...)``
ROW_OPS = ("_softmax", "_log_softmax")


@dataclass(eq=False)
class RowRegion:
    """Nodes (in graph order) over ``(*lead, cols)`` rows, run together at graph position ``start``."""

    lead: tuple[int, ...]
    start: int
    cols: int | None = None
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)    # values read from outside, in first-use order
    outputs: list[Value] = field(default_factory=list)   # values used outside (or returned)

    @property
    def rows(self) -> int:
        return int(np.prod(self.lead))

    def flat(self, shape: tuple) -> tuple:
        """The 2-D shape of a region value (``()`` stays a scalar)."""
        return () if not shape else (self.rows, int(shape[-1]))


def _last_dim_only(dims, rank: int) -> bool:
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return len(dims) == 1 and isinstance(dims[0], int) and -rank <= dims[0] < rank and dims[0] % rank == rank - 1


def _candidate(n: Node) -> tuple[tuple, int] | None:
    """``(lead, last dim)`` of a node a row region may hold, else None."""
    if len(n.outputs) != 1 or n.op == "constant":
        return None
    o = n.outputs[0]
    if len(o.shape) < 2 or o.dtype.np not in (np.float64, np.float32):
        return None
    lead, last = tuple(int(s) for s in o.shape[:-1]), int(o.shape[-1])
    kind = op_facts.reduction_kind(n.op)
    if kind is not None:
        # a row reduction keeping its dim, of a value with the same rows (no dtype argument)
        x = n.args[0]
        if kind not in ROW_REDUCTIONS or not op_facts.reduces_over_dim(n.op) or last != 1 or \
                not isinstance(x, Value) or tuple(x.shape[:-1]) != lead or not _last_dim_only(n.args[1], len(x.shape)) \
                or not bool(n.args[2]) or (kind in ("sum", "mean") and len(n.args) > 3 and n.args[3] is not None):
            return None
        return lead, last
    if n.op in ROW_OPS:
        x = n.args[0]
        if not isinstance(x, Value) or tuple(x.shape) != tuple(o.shape) or not _last_dim_only(n.args[1], len(o.shape)):
            return None
        return lead, last
    if op_facts.has(n.op, "broadcast"):
        # a row's one value spread along the row
        x = n.args[0]
        if not isinstance(x, Value) or tuple(x.shape) != (*lead, 1):
            return None
        return lead, last
    if op_facts.has(n.op, "same_values"):
        return (lead, last) if n.op == "detach" else None
    if not (n.is_elementwise or statement_for(n) is not None):
        return None
    for v in n.inputs:
        if v.shape != () and not (tuple(v.shape[:-1]) == lead and v.shape[-1] in (1, last)):
            return None   # broadcast over the leading dims (a mask, a bias): not row by row
    return lead, last


def row_regions(graph: Graph, exclude=frozenset()) -> list[RowRegion]:
    """The graph's candidate row regions (each with at least one row reduction), nodes in ``exclude``
    left out.  Whether a row kernel takes one is for :mod:`codegen.row_kernel` to say."""
    region_of: dict[Node, RowRegion] = {}
    ready: dict[Value, int] = {}
    regions: list[RowRegion] = []
    last_of_lead: dict[tuple, RowRegion] = {}
    for pos, n in enumerate(graph.nodes):
        spec = None if n in exclude else _candidate(n)
        if spec is None:
            for o in n.outputs:
                ready[o] = pos
            continue
        lead, last = spec
        chosen = None
        for v in n.inputs:
            r = region_of.get(v.producer) if v.producer is not None else None
            if r is None or r.lead != lead or (last != 1 and r.cols not in (None, last)):
                continue
            if all(region_of.get(u.producer) is r or ready.get(u, -1) < r.start for u in n.inputs):
                chosen = r
                break
        if chosen is None and last_of_lead.get(lead) is not None:
            # no producer's region: the latest region of these rows that starts after our inputs are
            # ready (a sibling reading the same values)
            r = last_of_lead[lead]
            if (last == 1 or r.cols in (None, last)) and r.start > max((ready.get(u, -1) for u in n.inputs),
                                                                        default=-1):
                chosen = r
        if chosen is None:
            chosen = RowRegion(lead, pos)
            regions.append(chosen)
            last_of_lead[lead] = chosen
        if last != 1:
            chosen.cols = last
        chosen.nodes.append(n)
        region_of[n] = chosen
        ready[n.outputs[0]] = chosen.start
    users = graph.users()
    returned = {v for v in graph.outputs if v is not None}
    found = []
    for r in regions:
        if r.cols is None or r.cols < 2 or r.rows == 0 or \
                not any(op_facts.reduction_kind(n.op) in ROW_REDUCTIONS or n.op in ROW_OPS for n in r.nodes):
            continue
        members = set(r.nodes)
        for n in r.nodes:
            for v in n.inputs:
                if v.producer not in members and v not in r.inputs:
                    r.inputs.append(v)
            o = n.outputs[0]
            if o in returned or any(u not in members for u in users.get(o, [])):
                r.outputs.append(o)
        found.append(r)
    return found


def region_graph(r: RowRegion) -> Graph:
    """The region as a graph of 2-D values (``rows x cols``) with the same value names, whose
    placeholders are the region's inputs and whose outputs are its outputs."""
    g = Graph()
    new: dict[Value, Value] = {}
    # the row kernel takes its rows and columns from the first 2-D input: a row vector's comes first
    for v in sorted(r.inputs, key=lambda v: len(v.shape) != 0 and v.shape[-1] == 1):
        nv = Value(v.name, v.dtype, r.flat(tuple(v.shape)))
        new[v] = nv
        g.placeholders.append(nv)
    for n in r.nodes:
        args = [new[a] if isinstance(a, Value) else a for a in n.args]
        if n.op in ROW_OPS:
            args[1] = 1
        elif op_facts.reduction_kind(n.op) is not None:
            args[1] = [1] if isinstance(args[1], (list, int)) else (1,)
        elif op_facts.has(n.op, "broadcast"):
            args[1] = (r.rows, r.cols)
        o = n.outputs[0]
        out = Value(o.name, o.dtype, r.flat(tuple(o.shape)))
        node = Node(n.op, tuple(args), [out], expr=n.expr if n.is_elementwise else None, meta=dict(n.meta))
        out.producer = node
        new[o] = out
        g.nodes.append(node)
    g.outputs = [new[v] for v in r.outputs]
    return g
