"""Graph passes that never change numerics: CSE, dead-code elimination, constant folding,
and the grouping of elementwise nodes into regions whose expressions ``sympy.cse`` shares.

No pass calls ``sympy.simplify`` on user math: it is slow and may change rounding.

>>> import symgrad, numpy as np
>>> g = symgrad.trace(lambda x: symgrad.sin(x) + symgrad.sin(x), np.ones(2))
>>> len(g.nodes), len(cse(g).nodes)
(3, 2)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..dtypes import from_numpy_dtype
from ..ops import registry
from .graph import Graph, IndexRef, Node, Value, substitute


def _key_part(a, rename):
    if isinstance(a, Value):
        return ("v", id(rename.get(a, a)))
    if isinstance(a, list):
        return ("l",) + tuple(_key_part(x, rename) for x in a)
    if isinstance(a, IndexRef):
        return ("i", _index_key(a.parts, rename))
    if isinstance(a, np.ndarray):
        return ("a", a.dtype.str, a.shape, a.tobytes())
    if isinstance(a, float):
        return ("f", a.hex()) if a == a else ("f", "nan")
    return ("o", type(a).__name__, repr(a))


def _index_key(part, rename):
    if isinstance(part, tuple):
        return tuple(_index_key(p, rename) for p in part)
    return _key_part(part, rename)


def _rewrite(a, rename):
    if isinstance(a, Value):
        return rename.get(a, a)
    if isinstance(a, list):
        return [rename.get(x, x) if isinstance(x, Value) else x for x in a]
    if isinstance(a, IndexRef):
        return IndexRef(_rewrite_index(a.parts, rename))
    return a


def _rewrite_index(part, rename):
    if isinstance(part, Value):
        return rename.get(part, part)
    if isinstance(part, tuple):
        return tuple(_rewrite_index(p, rename) for p in part)
    return part


def _apply_renames(graph: Graph, rename: dict) -> None:
    for node in graph.nodes:
        node.args = tuple(_rewrite(a, rename) for a in node.args)
        if rename and node.expr_built:  # a lazy expression is built from the renamed args
            node.expr = substitute(node.expr, {old.symbol: new.symbol for old, new in rename.items()})
    graph.outputs = [None if v is None else rename.get(v, v) for v in graph.outputs]


def cse(graph: Graph) -> Graph:
    """Merge nodes that apply the same op to the same arguments (forward and backward alike)."""
    seen: dict[tuple, Node] = {}
    rename: dict[Value, Value] = {}
    kept = []
    for node in graph.nodes:
        if node.op == "constant":
            key = ("constant",) + _key_part(node.data, rename)
        else:
            key = (node.op, tuple(_key_part(a, rename) for a in node.args), bool(node.meta.get("no_grad")))
        other = seen.get(key)
        if other is not None and len(other.outputs) == len(node.outputs):
            for mine, theirs in zip(node.outputs, other.outputs):
                rename[mine] = theirs
            continue
        seen[key] = node
        kept.append(node)
    graph.nodes = kept
    _apply_renames(graph, rename)
    return graph


def dce(graph: Graph) -> Graph:
    """Drop nodes whose outputs nothing uses."""
    live = {v for v in graph.outputs if v is not None}
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    graph.nodes = kept[::-1]
    return graph


def fold_constants(graph: Graph) -> Graph:
    """Evaluate nodes whose inputs are all constants (for example the ones tensor of a tangent)."""
    const: dict[Value, np.ndarray] = {}
    for node in graph.nodes:
        if node.op == "constant":
            const[node.output] = node.data
            continue
        if node.op == "detach" or len(node.outputs) != 1:
            continue
        if not all(v in const for v in node.inputs):  # also folds ops on Python numbers only
            continue
        op = registry.get(node.op)
        from .interpreter import _resolve

        value = np.asarray(op.forward(*[_resolve(a, const) for a in node.args]))
        out = node.output
        if value.dtype != out.dtype.np:
            value = value.astype(out.dtype.np)
        node.op, node.args, node.expr, node.data = "constant", (), None, np.array(value, copy=True)
        node.meta = {}
        const[out] = node.data
    return graph


def _same_type(a, v: Value) -> bool:
    return isinstance(a, Value) and a.shape == v.shape and a.dtype is v.dtype


def peephole(graph: Graph) -> Graph:
    """Remove nodes that return one of their inputs unchanged (exact identities only).

    ``x**1``, ``x*1``, ``x+0``, ``where(True, a, b)`` with a known condition, and an ``expand`` or a
    ``view`` to the shape the value already has.  Formulas produce these when an argument is a known number
    (pow's rule ``exponent * self**(exponent - 1)`` at exponent 2).
    """
    const = {n.output: n.data for n in graph.nodes if n.op == "constant"}
    rename: dict[Value, Value] = {}
    for node in graph.nodes:
        if len(node.outputs) != 1:
            continue
        out, args = node.output, tuple(rename.get(a, a) if isinstance(a, Value) else a for a in node.args)
        keep = None
        if node.op == "pow.Tensor_Scalar" and args[1] == 1:
            keep = args[0]
        elif node.op == "mul.Tensor" and (args[1] == 1 or args[0] == 1):
            keep = args[0] if args[1] == 1 else args[1]
        elif node.op in ("add.Tensor", "sub.Tensor") and not isinstance(args[1], Value) and args[1] == 0:
            keep = args[0]
        elif node.op == "where.self" and isinstance(args[0], Value) and args[0] in const \
                and const[args[0]].size == 1:
            keep = args[1] if bool(const[args[0]].reshape(())) else args[2]
        elif node.op in ("expand", "view", "_unsafe_view") and isinstance(args[0], Value) and \
                tuple(args[0].shape) == tuple(out.shape):
            keep = args[0]
        if keep is not None and _same_type(keep, out) and not isinstance(keep, bool):
            rename[out] = keep
    if rename:
        _apply_renames(graph, rename)
    return graph


def _swaps_last_two(node: Node) -> bool:
    """Whether ``node`` transposes the last two dims of a matrix or a stack of matrices."""
    if node.op == "t":
        return len(node.output.shape) == 2
    if node.op != "transpose.int" or len(node.output.shape) < 2:
        return False
    rank = len(node.output.shape)
    return {node.args[1] % rank, node.args[2] % rank} == {rank - 2, rank - 1}


_PRODUCTS = ("mm", "bmm")
_RESHAPES = ("view", "_unsafe_view", "reshape")


def transposed_products(graph: Graph) -> Graph:
    """``(a @ b)^T`` as ``b^T @ a^T`` where the product is used only transposed.

    The gradient of ``b`` in ``a @ b^T`` (attention's ``Q @ K^T``) is the transpose of a product:
    the transposed view then reaches a reshape, which copies it element by element.  Elsewhere (a
    product reads a transposed operand as it is) the graph stays as it is.  Multiplied the
    other way round, the product comes out in the order it is read; BLAS takes the transposed operands
    as they are.  The same products are summed (the order of a BLAS sum may differ by rounding).
    """
    users = graph.users()
    outputs = {v for v in graph.outputs if v is not None}
    nodes = []
    for node in graph.nodes:
        x = node.args[0] if node.args else None
        prod = getattr(x, "producer", None)
        # only where a reshape copies the transposed view (products and other views take it as it is)
        if isinstance(x, Value) and _swaps_last_two(node) and prod is not None and prod.op in _PRODUCTS and \
                users.get(x) == [node] and x not in outputs and all(isinstance(a, Value) for a in prod.args[:2]) \
                and any(u.op in _RESHAPES for u in users.get(node.output, [])):
            flipped = []
            for operand in (prod.args[1], prod.args[0]):
                shape = (*operand.shape[:-2], operand.shape[-1], operand.shape[-2])
                op, args = ("t", (operand,)) if prod.op == "mm" else ("transpose.int", (operand, 1, 2))
                t = Node(op, args, [])
                t.outputs.append(Value(graph.fresh_name(op), operand.dtype, shape, t, 0))
                nodes.append(t)
                flipped.append(t.output)
            node.op, node.args, node.meta = prod.op, tuple(flipped), dict(prod.meta)
        nodes.append(node)
    graph.nodes = nodes
    return graph


def simplify(graph: Graph) -> Graph:
    """Constant folding, exact identities, CSE and DCE, in that order (each is safe for numerics), and
    the transposed products of :func:`transposed_products`."""
    return dce(transposed_products(dce(cse(peephole(fold_constants(graph))))))


@dataclass
class Region:
    """Connected elementwise nodes: their outputs as sympy expressions of the region's inputs."""

    nodes: list[Node]
    inputs: list[Value]
    outputs: list[Value]
    exprs: list[sympy.Expr]

    def cse(self):
        """``sympy.cse`` of the output expressions: (shared subexpressions, reduced outputs)."""
        return sympy.cse(self.exprs, symbols=sympy.numbered_symbols("t"))

    def op_count(self, exprs=None) -> int:
        return int(sum(sympy.count_ops(e) for e in (exprs if exprs is not None else self.exprs)))


def elementwise_regions(graph: Graph) -> list[Region]:
    """Group elementwise nodes joined by values of the same shape into regions (fusion candidates)."""
    users = graph.users()
    parent: dict[Node, Node] = {}

    def find(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in graph.nodes:
        if node.expr is None:
            continue
        parent[node] = node
        for v in node.inputs:  # join every region this node reads (union-find)
            p = v.producer
            if p is not None and p in parent and v.shape == node.output.shape:
                parent[find(p)] = find(node)
    by_root: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        if node in parent:
            by_root.setdefault(find(node), []).append(node)
    regions = list(by_root.values())
    out = []
    outputs_of_graph = {v for v in graph.outputs if v is not None}
    for nodes in regions:
        members = set(nodes)
        inner: dict[Value, sympy.Expr] = {}
        inputs: list[Value] = []
        for n in nodes:
            subs = {}
            for v in n.inputs:
                if v in inner:
                    subs[v.symbol] = inner[v]
                elif v not in inputs:
                    inputs.append(v)
            inner[n.output] = substitute(n.expr, subs) if subs else n.expr
        outputs = [n.output for n in nodes
                   if n.output in outputs_of_graph or any(u not in members for u in users.get(n.output, []))]
        out.append(Region(nodes, inputs, outputs, [inner[v] for v in outputs]))
    return out


def constant_node(graph: Graph, data: np.ndarray) -> Value:
    node = graph.add_node("constant", (), [(from_numpy_dtype(data.dtype), data.shape)], data=data, name="const")
    return node.output
