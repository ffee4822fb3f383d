"""Reverse mode over the IR: a forward Graph becomes a joint forward+backward Graph.

The backward is not written a second time: the forward graph is replayed as eager ops
on traced tensors and differentiated by the autograd engine with ``create_graph=True``,
so every gradient is built from the same ``derivatives.yaml`` formulas (AOTAutograd's
joint-graph idea).  The joint graph takes the primals and one tangent per differentiable
output (the incoming gradient, ``tangent_k``), and returns the outputs followed by one
gradient per requested input (None where an input is unused).  It is a Graph like any
other, so it can be differentiated again (Hessian-vector products).

>>> import symgrad, numpy as np
>>> g = symgrad.trace(lambda x: (symgrad.sin(x) * x).sum(), np.ones(3))
>>> j = autodiff(g)
>>> [v.name for v in j.placeholders]
['x', 'tangent_0']
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..autograd import anomaly, engine
from ..autograd.node import AccumulateGrad
from ..ir.graph import Graph, JointGraph
from ..ir.interpreter import interpret, replay
from ..ir.simplify import simplify as simplify_graph
from ..ir.tracer import trace
from ..ops import registry
from ..tensor import Tensor


def autodiff(graph: Graph, wrt: Sequence[int] | None = None, *, simplify: bool = True) -> JointGraph:
    """The joint graph of ``graph``: its outputs, then the gradients with respect to ``wrt``.

    ``wrt`` lists placeholder positions (default: every floating-point input).  The result's
    ``n_primals``, ``n_forward_outputs``, ``wrt`` and ``diff_outputs`` describe its layout
    (see :class:`~symgrad.ir.graph.JointGraph`).
    """
    n = len(graph.placeholders)
    if wrt is None:
        wrt = [i for i, v in enumerate(graph.placeholders) if v.dtype.is_floating_point]
    wrt = list(wrt)
    for i in wrt:
        if not graph.placeholders[i].dtype.is_floating_point:
            raise TypeError(f"autodiff: input {i} ({graph.placeholders[i].name}) has dtype "
                            f"{graph.placeholders[i].dtype.name}; only floating-point inputs have gradients")
    example_out = interpret(graph, *graph.example_inputs)
    diff_outputs = [k for k, (v, o) in enumerate(zip(graph.outputs, example_out))
                    if v is not None and v.dtype.is_floating_point]
    tangents = [np.ones_like(example_out[k]) for k in diff_outputs]

    def joint(*args):
        primals, tangent_args = list(args[:n]), list(args[n:])
        outs = replay(graph, primals)
        pairs = [(outs[k], t) for k, t in zip(diff_outputs, tangent_args) if outs[k].requires_grad]
        targets = [primals[i] for i in wrt]
        if pairs and targets:
            provenance = _Provenance([o for o, _ in pairs])
            # the example values are incidental: anomaly mode must not judge them (NaN checks)
            with anomaly.set_detect_anomaly(False):
                grads = engine.grad([o for o, _ in pairs], targets, grad_outputs=[t for _, t in pairs],
                                    create_graph=True, allow_unused=True)
            provenance.finish()
        else:
            grads = (None,) * len(targets)
        return tuple(outs) + tuple(grads)

    names = [v.name for v in graph.placeholders] + [f"tangent_{k}" for k in range(len(tangents))]
    requires = [i in wrt for i in range(n)] + [False] * len(tangents)
    traced = trace(joint, *graph.example_inputs, *tangents, names=names, requires_grad=requires,
                   numpy_face=False)
    joint_graph = JointGraph.of(traced, n_primals=n, n_forward_outputs=len(graph.outputs), wrt=wrt,
                                diff_outputs=diff_outputs)
    if simplify:
        simplify_graph(joint_graph)
    return joint_graph


class _Provenance:
    """Tags each backward IR node with the rule that produced it (for ``symgrad inspect``).

    While the engine runs the replayed graph's backward nodes, a pre-hook and a post-hook on each
    node delimit the IR nodes its formulas record; they get ``meta["grad_rule"]`` (the node class,
    ``MulBackward0``), ``meta["grad_key"]`` (the table entry, ``mul.Tensor``) and ``meta["grad_of"]``
    (the name of the forward value the node differentiates).  Nodes recorded between two backward
    nodes (summing the contributions of a value used twice, reducing a broadcast gradient) are
    tagged ``grad_rule="engine"``.  Tags are plain strings in ``Node.meta``; the graph is
    unchanged.
    """

    def __init__(self, outputs) -> None:
        tracer = registry._recorder
        self.nodes = tracer.graph.nodes if tracer is not None else None
        if self.nodes is None:
            return
        forward_of = {}
        for t, v in list(tracer._values.values()):
            fn = t._grad_fn
            if fn is not None and fn not in forward_of:
                forward_of[fn] = v.name
        self.mark = len(self.nodes)
        seen, stack = set(), [o._grad_fn for o in outputs if o._grad_fn is not None]
        while stack:
            node = stack.pop()
            if node in seen or isinstance(node, AccumulateGrad):
                continue
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions if n is not None)
            self._hook(node, forward_of.get(node))

    def _tag(self, start: int, end: int, **tags) -> None:
        for n in self.nodes[start:end]:
            if "grad_rule" not in n.meta:
                n.meta.update(tags)

    def _hook(self, node, forward_name) -> None:
        state = {}
        rule = getattr(node, "_rule", None)

        def pre(grad):
            if "start" not in state:
                self._tag(self.mark, len(self.nodes), grad_rule="engine", grad_key=None, grad_of=None)
                state["start"] = len(self.nodes)

        def post(grad_inputs, grad_outputs):
            self._tag(state.get("start", self.mark), len(self.nodes), grad_rule=type(node).__name__,
                      grad_key=rule.key if rule is not None else None, grad_of=forward_name)
            self.mark = len(self.nodes)

        for nr in range(max(node._n_outputs, 1)):
            node._add_tensor_hook(nr, pre)
        node.register_hook(post)

    def finish(self) -> None:
        if self.nodes is not None:
            self._tag(self.mark, len(self.nodes), grad_rule="engine", grad_key=None, grad_of=None)


def value_and_grad_graph(graph: Graph, wrt: Sequence[int] | None = None) -> JointGraph:
    """The joint graph with every tangent fixed to one (for scalar losses): inputs are the primals only."""
    joint = autodiff(graph, wrt, simplify=False)
    n = joint.n_primals
    ones = [np.ones(v.shape, v.dtype.np) for v in joint.placeholders[n:]]

    def fixed(*primals):
        return tuple(replay(joint, list(primals) + [Tensor._wrap(o) for o in ones]))

    traced = trace(fixed, *graph.example_inputs, names=[v.name for v in graph.placeholders], numpy_face=False)
    out = JointGraph.of(traced, n_primals=n, n_forward_outputs=joint.n_forward_outputs, wrt=joint.wrt,
                        diff_outputs=joint.diff_outputs)
    return simplify_graph(out)
