"""Partition a joint forward+backward graph into a forward and a backward graph.

The forward computes the outputs plus the values the backward needs ("saved"); the backward
takes the saved values and the tangents and returns the gradients.  Which values to save is a
minimum cut, in the spirit of AOTAutograd's min-cut rematerialization partitioner: every value
costs its size in bytes to save; cheap values (elementwise arithmetic, views) may instead be
recomputed inside the backward's fused loops, while transcendental functions (a scalar libm call
per element on the CPU: slower to redo than to read back), matmuls, reductions and
indexing are never recomputed.

>>> import numpy as np, symgrad
>>> from symgrad.compiler.autodiff import autodiff
>>> g = symgrad.trace(lambda x: (symgrad.sin(x) * x * x).sum(), np.ones(1000))
>>> p = partition(autodiff(g))
>>> [v.name for v in p.saved]          # x and sin(x); the products are recomputed, cos(x) made there
['x', 'sin']
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import sympy

from symgrad.ir.graph import Graph, Node, Value

from . import op_facts

INF = float("inf")

# Elementwise functions that are cheap to evaluate again (everything else, exp/sin/tanh/log1p...,
# is a libm call per element on the CPU: reading a saved array back is cheaper than recomputing it).
CHEAP_FUNCTIONS = {"Abs", "sign", "Max", "Min", "Heaviside", "Piecewise"}


def recomputable(node: Node) -> bool:
    """Cheap elementwise arithmetic and views are redone in the backward; transcendental functions,
    matmul, reductions and indexing are saved instead."""
    if node.expr is not None:
        return all(type(f).__name__ in CHEAP_FUNCTIONS for f in node.expr.atoms(sympy.Function))
    return op_facts.has(node.op, "recomputable")   # views, broadcasts, copies


def value_bytes(v: Value) -> int:
    n = 1
    for s in v.shape:
        n *= s
    return max(n, 1) * v.dtype.itemsize


@dataclass
class Partition:
    """The result: both graphs and the decision, for inspection (``symgrad inspect``)."""

    forward: Graph
    backward: Graph
    saved: list[Value]
    recomputed: list[Value]
    n_forward_outputs: int
    saved_bytes: int = 0
    notes: dict = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"saved ({self.saved_bytes} bytes):"]
        lines += [f"  %{v.name}: {v.type_str}  {value_bytes(v)} B" for v in self.saved]
        lines.append(f"recomputed in backward ({len(self.recomputed)} values):")
        lines += [f"  %{v.name}: {v.type_str}" for v in self.recomputed]
        return "\n".join(lines)


# --- max-flow (Dinic: BFS levels, then blocking flows along them, on adjacency dicts) -----------
# The cut it finds is the set reachable from the source in the final residual graph, which is the
# same for every maximum flow, so the algorithm only changes how long the search takes.  Each BFS
# phase augments every shortest path at once: a chain of n saved values costs a few phases, not
# n searches of the whole graph.

class _Flow:
    def __init__(self) -> None:
        self.cap: dict = {}
        self.adj: dict = {}

    def add(self, u, v, c) -> None:
        self.adj.setdefault(u, set()).add(v)
        self.adj.setdefault(v, set()).add(u)
        self.cap[(u, v)] = self.cap.get((u, v), 0) + c
        self.cap.setdefault((v, u), 0)

    def _levels(self, s, t) -> dict | None:
        level = {s: 0}
        q = deque([s])
        while q:
            u = q.popleft()
            for v in self.adj.get(u, ()):
                if v not in level and self.cap[(u, v)] > 0:
                    level[v] = level[u] + 1
                    q.append(v)
        return level if t in level else None

    def max_flow(self, s, t) -> float:
        total = 0.0
        cap = self.cap
        while True:
            level = self._levels(s, t)
            if level is None:
                return total
            # the arcs of the level graph still worth trying, per vertex (a dead end is dropped)
            arcs = {u: [v for v in self.adj.get(u, ()) if level.get(v) == lu + 1] for u, lu in level.items()}
            path = [s]                      # vertices from s; each step follows arcs[path[-1]][-1]
            while path:
                u = path[-1]
                if u == t:
                    edges = list(zip(path, path[1:]))
                    push = min(cap[e] for e in edges)
                    if push == INF:
                        raise ValueError("partition: an infinite-capacity path from inputs to backward (a bug)")
                    for a, b in edges:
                        cap[(a, b)] -= push
                        cap[(b, a)] += push
                    total += push
                    # back up to the tail of the first saturated edge
                    cut = next(i for i, e in enumerate(edges) if cap[e] == 0)
                    del path[cut + 1:]
                    arcs[path[-1]].pop()
                    continue
                out = arcs[u]
                while out and cap[(u, out[-1])] <= 0:
                    out.pop()
                if out:
                    path.append(out[-1])
                else:                       # no way to t from u in this phase
                    path.pop()
                    if path:
                        arcs[path[-1]].pop()

    def reachable(self, s) -> set:
        seen = {s}
        q = deque([s])
        while q:
            u = q.popleft()
            for v in self.adj.get(u, ()):
                if v not in seen and self.cap[(u, v)] > 0:
                    seen.add(v)
                    q.append(v)
        return seen


def partition(joint: Graph) -> Partition:
    """Split a joint graph (from :func:`symgrad.compiler.autodiff.autodiff`) at a minimum-bytes cut."""
    n_primals = joint.n_primals
    n_fwd_out = joint.n_forward_outputs
    primals = joint.placeholders[:n_primals]
    tangents = joint.placeholders[n_primals:]
    fwd_outputs = [v for v in joint.outputs[:n_fwd_out]]
    grad_outputs = [v for v in joint.outputs[n_fwd_out:]]

    # Values downstream of a tangent can only exist in the backward.
    tangent_side: set[Value] = set(tangents)
    for node in joint.nodes:
        if any(v in tangent_side for v in node.inputs):
            tangent_side.update(node.outputs)

    # Values the backward reads that the forward could provide: the candidates to save or recompute.
    needed_by_bw: set[Value] = set()
    stack = [v for v in grad_outputs if v is not None]
    seen: set[Value] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in tangent_side:
            if v.producer is not None:
                stack.extend(v.producer.inputs)
        else:
            needed_by_bw.add(v)
            if v.producer is not None and recomputable(v.producer):
                stack.extend(v.producer.inputs)

    # Values the forward computes anyway (ancestors of its outputs): an expensive one among them is
    # never computed a second time; an expensive value only the backward needs is computed there once.
    in_forward: set[Value] = set()
    stack = [v for v in fwd_outputs if v is not None]
    while stack:
        v = stack.pop()
        if v in in_forward:
            continue
        in_forward.add(v)
        if v.producer is not None:
            stack.extend(v.producer.inputs)

    flow = _Flow()
    source, sink = ("source",), ("sink",)
    for v in primals:
        flow.add(source, ("in", v), INF)
    for node in joint.nodes:
        for v in node.outputs:
            if v in tangent_side:
                continue
            flow.add(("in", v), ("out", v), value_bytes(v))
            if not recomputable(node) and v in in_forward:  # computed once, in the forward; may be saved
                flow.add(source, ("in", v), INF)
            for u in node.inputs:
                if u not in tangent_side:
                    flow.add(("out", u), ("in", v), INF)
    for v in primals:
        flow.add(("in", v), ("out", v), value_bytes(v))
    # A value the backward reads directly must reach it: saved, or recomputed from saved values.
    for node in joint.nodes:
        if not any(v in tangent_side for v in node.outputs):
            continue
        for u in node.inputs:
            if u not in tangent_side:
                flow.add(("out", u), sink, INF)
    # So must a gradient that does not depend on the tangents (a zero gradient through masks, or a
    # constant): the backward returns it, so it is saved or recomputed like any other value it reads.
    for v in grad_outputs:
        if v is not None and v not in tangent_side:
            flow.add(("out", v), sink, INF)
    flow.max_flow(source, sink)
    side = flow.reachable(source)
    saved = [v for v in list(primals) + [o for n in joint.nodes for o in n.outputs]
             if ("in", v) in side and ("out", v) not in side and ("out", v) in flow.adj]

    forward = _subgraph(joint, primals, fwd_outputs + saved, "forward")
    bw_inputs = saved + list(tangents)
    backward = _subgraph(joint, bw_inputs, grad_outputs, "backward")
    fwd_values = {o for n in forward.nodes for o in n.outputs}
    recomputed = [o for n in backward.nodes for o in n.outputs if o in fwd_values or
                  (o not in tangent_side and o in needed_by_bw)]
    return Partition(forward, backward, saved, recomputed, n_fwd_out,
                     saved_bytes=sum(value_bytes(v) for v in saved))


def _subgraph(joint: Graph, inputs: list[Value], outputs: list[Value | None], kind: str) -> Graph:
    """The nodes of ``joint`` needed to compute ``outputs`` from ``inputs`` (which become placeholders)."""
    inputs_set = set(inputs)
    needed: set[Node] = set()
    stack = [v for v in outputs if v is not None and v not in inputs_set]
    while stack:
        v = stack.pop()
        node = v.producer
        if node is None:
            raise ValueError(f"partition: the {kind} graph needs %{v.name}, which is not one of its inputs")
        if node in needed:
            continue
        needed.add(node)
        stack.extend(u for u in node.inputs if u not in inputs_set)
    g = Graph()
    g.placeholders = list(inputs)
    g.nodes = [n for n in joint.nodes if n in needed]
    g.outputs = list(outputs)
    g._used = {v.name for v in inputs} | {o.name for n in g.nodes for o in n.outputs}
    return g
