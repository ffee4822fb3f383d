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

from .autograd import engine
from .ir.graph import Graph
from .ir.interpreter import interpret, replay
from .ir.simplify import simplify as simplify_graph
from .ir.tracer import trace
from .tensor import Tensor


def autodiff(graph: Graph, wrt: Sequence[int] | None = None, *, simplify: bool = True) -> Graph:
    """The joint graph of ``graph``: its outputs, then the gradients with respect to ``wrt``.

    ``wrt`` lists placeholder positions (default: every floating-point input).
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
            grads = engine.grad([o for o, _ in pairs], targets, grad_outputs=[t for _, t in pairs],
                                create_graph=True, allow_unused=True)
        else:
            grads = (None,) * len(targets)
        return tuple(outs) + tuple(grads)

    names = [v.name for v in graph.placeholders] + [f"tangent_{k}" for k in range(len(tangents))]
    requires = [i in wrt for i in range(n)] + [False] * len(tangents)
    joint_graph = trace(joint, *graph.example_inputs, *tangents, names=names, requires_grad=requires)
    joint_graph.n_primals = n
    joint_graph.n_forward_outputs = len(graph.outputs)
    joint_graph.wrt = wrt
    joint_graph.diff_outputs = diff_outputs
    if simplify:
        simplify_graph(joint_graph)
    return joint_graph


def value_and_grad_graph(graph: Graph, wrt: Sequence[int] | None = None) -> Graph:
    """The joint graph with every tangent fixed to one (for scalar losses): inputs are the primals only."""
    joint = autodiff(graph, wrt, simplify=False)
    n = joint.n_primals
    ones = [np.ones(v.shape, v.dtype.np) for v in joint.placeholders[n:]]

    def fixed(*primals):
        return tuple(replay(joint, list(primals) + [Tensor._wrap(o) for o in ones]))

    out = trace(fixed, *graph.example_inputs, names=[v.name for v in graph.placeholders])
    out.n_primals, out.n_forward_outputs, out.wrt = n, joint.n_forward_outputs, joint.wrt
    return simplify_graph(out)
