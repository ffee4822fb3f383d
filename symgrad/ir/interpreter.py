"""Evaluating a Graph: with numpy (the reference every backend is tested against) or by
replaying it as eager symgrad ops (so that the autograd engine can differentiate it).

>>> import symgrad, numpy as np
>>> g = symgrad.trace(lambda x: (x * x).sum(), np.ones(3))
>>> interpret(g, np.arange(3.0))
[array(5.)]
"""

from __future__ import annotations

import numpy as np

from ..autograd.grad_mode import no_grad
from ..ops import registry
from ..tensor import Tensor
from .graph import Graph, IndexRef, Value


def _resolve(a, env):
    if isinstance(a, Value):
        return env[a]
    if isinstance(a, list):
        return [env[x] if isinstance(x, Value) else x for x in a]
    if isinstance(a, IndexRef):
        return a.resolve(env.__getitem__)
    return a


def interpret(graph: Graph, *inputs) -> list:
    """Run ``graph`` on numpy arrays; returns one array (or None) per graph output."""
    if len(inputs) != len(graph.placeholders):
        raise TypeError(f"graph takes {len(graph.placeholders)} inputs, got {len(inputs)}")
    env: dict[Value, np.ndarray] = {}
    for v, a in zip(graph.placeholders, inputs):
        arr = np.asarray(a._data if isinstance(a, Tensor) else a)
        if arr.dtype != v.dtype.np:
            arr = arr.astype(v.dtype.np)
        env[v] = arr
    for node in graph.nodes:
        if node.op == "constant":
            env[node.output] = node.data
            continue
        if node.op == "detach":
            env[node.output] = env[node.args[0]]
            continue
        op = registry.get(node.op)
        out = op.forward(*[_resolve(a, env) for a in node.args])
        outs = out if isinstance(out, tuple) else (out,)
        for v, o in zip(node.outputs, outs):
            arr = np.asarray(o)
            if arr.dtype != v.dtype.np:  # numpy promotes differently from PyTorch in places
                arr = arr.astype(v.dtype.np)
            env[v] = arr
    return [None if v is None else env[v] for v in graph.outputs]


def first_nan(graph: Graph, *inputs) -> str | None:
    """Run ``graph`` like :func:`interpret` and describe the first node that makes a NaN from
    NaN-free inputs (anomaly mode's answer to "which op?" for compiled code), or None."""
    env: dict[Value, np.ndarray] = {}
    for v, a in zip(graph.placeholders, inputs):
        env[v] = np.asarray(a._data if isinstance(a, Tensor) else a, dtype=v.dtype.np)
    has_nan = {v: v.dtype.np.kind == "f" and bool(np.isnan(a).any()) for v, a in env.items()}
    for node in graph.nodes:
        if node.op in ("constant", "detach"):
            outs = (node.data if node.op == "constant" else env[node.args[0]],)
        else:
            with np.errstate(all="ignore"):
                out = registry.get(node.op).forward(*[_resolve(a, env) for a in node.args])
            outs = out if isinstance(out, tuple) else (out,)
        clean = not any(has_nan.get(v, False) for v in node.inputs)
        for v, o in zip(node.outputs, outs):
            env[v] = arr = np.asarray(o)
            has_nan[v] = arr.dtype.kind == "f" and bool(np.isnan(arr).any())
            if has_nan[v] and clean:
                args = ", ".join(f"%{a.name}" if isinstance(a, Value) else repr(a) for a in node.args)
                text = f"%{v.name} = {node.op}({args})"
                rule, of = node.meta.get("grad_rule"), node.meta.get("grad_of")
                if rule and rule != "engine":
                    text += f", made by the rule {rule}" + (f" for the gradient of %{of}" if of else "")
                elif rule == "engine":
                    text += ", made by the engine while summing gradients"
                else:
                    text += ", a forward value"
                return text
    return None


def replay(graph: Graph, inputs: list[Tensor]) -> list:
    """Run ``graph`` as eager symgrad ops on Tensors (recorded by autograd, and by a tracer if active)."""
    env: dict[Value, Tensor] = dict(zip(graph.placeholders, inputs))
    for node in graph.nodes:
        if node.op == "constant":
            env[node.output] = Tensor._wrap(node.data)
            continue
        if node.op == "detach":
            env[node.output] = env[node.args[0]].detach()
            continue
        op = registry.get(node.op)
        args = tuple(_resolve(a, env) for a in node.args)
        if node.meta.get("no_grad"):
            with no_grad():
                out = registry.apply(op, args)
        else:
            out = registry.apply(op, args)
        outs = out if isinstance(out, tuple) else (out,)
        for v, o in zip(node.outputs, outs):
            env[v] = o
    return [None if v is None else env[v] for v in graph.outputs]
