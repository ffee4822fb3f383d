"""The compiler's IR: a small typed graph of rule-table ops.

A :class:`Graph` has placeholders (inputs), :class:`Node` s in execution order and
outputs.  Every node applies one op of the rule table (``mul.Tensor``, ``sum.dim_IntList``,
``mm``...) to :class:`Value` s and Python constants; elementwise nodes also carry their
sympy scalar expression (``x*x``, ``sin(v3)``), which the code generator fuses.
Besides table ops there are ``constant`` (a numpy array baked at trace time) and
``detach`` (identity whose gradient is zero).

>>> import symgrad, numpy as np
>>> g = symgrad.trace(lambda x: (x * x).sum(), np.ones(3))
>>> print(g)                                                   # doctest: +NORMALIZE_WHITESPACE
graph(x: f64[3]) {
  %mul: f64[3] = mul.Tensor(%x, %x)    # x**2
  %sum: f64[] = sum(%mul, None)
  return (%sum,)
}
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from ..dtypes import dtype as Dtype

SHORT_DTYPES = {"float64": "f64", "float32": "f32", "float16": "f16", "int64": "i64", "int32": "i32",
                "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}


@dataclass(eq=False)
class Value:
    """A tensor in the graph: produced by one node (or an input), with a dtype and a shape."""

    name: str
    dtype: Dtype
    shape: tuple[int, ...]
    producer: Node | None = None
    index: int = 0

    @property
    def type_str(self) -> str:
        return f"{SHORT_DTYPES.get(self.dtype.name, self.dtype.name)}[{', '.join(map(str, self.shape))}]"

    @property
    def symbol(self) -> sympy.Symbol:
        return sympy.Symbol(self.name)

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class IndexRef:
    """An indexing key in an op's arguments whose tensor parts are graph values."""

    parts: Any  # the key with Values where the traced program used tensors

    def resolve(self, lookup) -> Any:
        return _map_index(self.parts, lookup)

    def values(self) -> list[Value]:
        out: list[Value] = []
        _map_index(self.parts, lambda v: out.append(v) or v)
        return out

    def __repr__(self) -> str:
        return _index_text(self.parts)


def _map_index(part, fn):
    if isinstance(part, Value):
        return fn(part)
    if isinstance(part, tuple):
        return tuple(_map_index(p, fn) for p in part)
    return part


def _index_text(part) -> str:
    if isinstance(part, Value):
        return repr(part)
    if isinstance(part, tuple):
        return "(" + ", ".join(_index_text(p) for p in part) + ("," if len(part) == 1 else "") + ")"
    if isinstance(part, slice):
        return ":".join("" if v is None else str(v) for v in (part.start, part.stop, part.step)).rstrip(":") or ":"
    if isinstance(part, np.ndarray):
        return f"array{part.tolist()}" if part.size <= 8 else f"array<{part.dtype}{list(part.shape)}>"
    return repr(part)


class Node:
    """One op applied to values and constants (arguments in the op's schema order).

    ``expr`` (elementwise nodes): the output as a sympy scalar expression of the inputs.  The
    tracer passes the op's rule instead and the expression is built on first use, so that
    tracing itself needs no sympy (a build found in the disk cache never builds one).
    """

    def __init__(self, op: str, args: tuple, outputs: list[Value], expr: sympy.Expr | None = None,
                 data: np.ndarray | None = None, meta: dict | None = None, rule: Any = None) -> None:
        self.op = op
        self.args = args
        self.outputs = outputs
        self.data = data                      # constant nodes
        self.meta = {} if meta is None else meta
        self._expr = expr
        self._rule = rule if expr is None else None

    @property
    def expr(self) -> sympy.Expr | None:
        if self._rule is not None:
            rule, self._rule = self._rule, None
            # a Python bool operand is the number 0 or 1 (sympy would make it a logical constant)
            subs = {sympy.Symbol(spec.name): a.symbol if isinstance(a, Value) else
                    sympy.sympify(int(a) if isinstance(a, (bool, np.bool_)) else a)
                    for a, spec in zip(self.args, rule.schema.args)}
            self._expr = substitute(rule.elementwise, subs)
        return self._expr

    @expr.setter
    def expr(self, value: sympy.Expr | None) -> None:
        self._expr, self._rule = value, None

    @property
    def is_elementwise(self) -> bool:
        """Whether the node has a scalar expression (without building it)."""
        return self._rule is not None or self._expr is not None

    @property
    def expr_built(self) -> bool:
        return self._expr is not None

    def __repr__(self) -> str:
        return f"Node({self.op}, {', '.join(map(repr, self.outputs))})"

    @property
    def inputs(self) -> list[Value]:
        """The Values this node reads (tensor arguments, tensor lists and index parts)."""
        out: list[Value] = []
        for a in self.args:
            if isinstance(a, Value):
                out.append(a)
            elif isinstance(a, list):
                out.extend(x for x in a if isinstance(x, Value))
            elif isinstance(a, IndexRef):
                out.extend(a.values())
        return out

    @property
    def output(self) -> Value:
        return self.outputs[0]


class Graph:
    """Placeholders, nodes in execution order, outputs (a Value or None per output)."""

    def __init__(self) -> None:
        self.placeholders: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value | None] = []
        self.example_inputs: list[np.ndarray] = []
        self.output_kind = "tuple"   # how the traced function returned: "single" (a Tensor) or "tuple"
        # arrays outside the arguments that became constants, with a sample of their values when
        # traced (see symgrad.ir.tracer.CapturedArray): a later write into one makes the graph stale
        self.captured: list = []
        self._names: dict[str, itertools.count] = {}
        self._used: set[str] = set()

    # --- construction -----------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        """A unique, readable name: ``mul``, ``mul_1``, ``mul_2``... (never a Python keyword)."""
        base = base.split(".")[0].lstrip("_") or "v"
        if not base.isidentifier() or base in _RESERVED:
            base = base + "_"
        counter = self._names.setdefault(base, itertools.count())
        while True:
            k = next(counter)
            name = base if k == 0 else f"{base}_{k}"
            if name not in self._used:
                self._used.add(name)
                return name

    def add_placeholder(self, name: str, dtype: Dtype, shape: tuple[int, ...]) -> Value:
        v = Value(self.fresh_name(name), dtype, tuple(shape))
        self.placeholders.append(v)
        return v

    def add_node(self, op: str, args: tuple, out_specs: list[tuple[Dtype, tuple]], expr=None, data=None,
                 name: str | None = None, rule=None) -> Node:
        """Append a node; ``rule``: an elementwise rule whose expression is built on first use."""
        node = Node(op, tuple(args), [], expr, data, rule=rule)
        for k, (dt, shape) in enumerate(out_specs):
            node.outputs.append(Value(self.fresh_name(name or op), dt, tuple(shape), node, k))
        self.nodes.append(node)
        return node

    # --- queries ----------------------------------------------------------------------------
    def users(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def __len__(self) -> int:
        return len(self.nodes)

    # --- printing ---------------------------------------------------------------------------
    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph: {len(self.placeholders)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"


class JointGraph(Graph):
    """A forward+backward graph (made by ``symgrad.compiler.autodiff``).

    Its placeholders are the forward graph's inputs (the first ``n_primals``), then one tangent per
    differentiable output; its outputs are the forward graph's outputs (the first
    ``n_forward_outputs``), then one gradient per input listed in ``wrt``.  ``diff_outputs`` are
    the positions of the forward outputs that have tangents (the floating-point ones).
    """

    def __init__(self, n_primals: int, n_forward_outputs: int, wrt: list[int], diff_outputs: list[int]) -> None:
        super().__init__()
        self.n_primals = n_primals
        self.n_forward_outputs = n_forward_outputs
        self.wrt = wrt
        self.diff_outputs = diff_outputs

    @classmethod
    def of(cls, graph: Graph, n_primals: int, n_forward_outputs: int, wrt: list[int],
           diff_outputs: list[int]) -> JointGraph:
        """The joint graph whose placeholders, nodes and outputs are those of ``graph`` (a traced
        joint function; ``graph`` should not be used afterwards, as they are shared)."""
        joint = cls(n_primals, n_forward_outputs, wrt, diff_outputs)
        for name in _GRAPH_STATE:
            setattr(joint, name, getattr(graph, name))
        return joint


_GRAPH_STATE = tuple(vars(Graph()))   # what a JointGraph takes over from a traced Graph

_RESERVED = {"lambda", "def", "return", "for", "in", "if", "else", "not", "and", "or", "is", "None", "True",
             "False", "class", "from", "import", "with", "as", "pass", "global", "yield", "del", "try", "while"}


def substitute(expr: sympy.Expr, mapping: dict) -> sympy.Expr:
    """``expr.xreplace(mapping)`` that never lets sympy fold a value away.

    sympy evaluates ``x*0.0``, ``x - x`` and ``0.0/x`` to ``0``; numpy gives NaN there when ``x``
    is NaN or infinite, so a folded expression would change results.  When a symbol that should
    appear in the result has vanished, the expression is rebuilt without evaluation instead.

    >>> x, other = sympy.symbols("x other")
    >>> substitute(x * other, {other: sympy.Float(0.0)})
    0.0*x
    >>> substitute(x * other, {other: sympy.Integer(2)})
    2*x
    """
    out = expr.xreplace(mapping)
    expected = set()
    for s in expr.free_symbols:
        expected |= mapping[s].free_symbols if s in mapping else {s}
    if expected <= out.free_symbols:
        return out
    with sympy.evaluate(False):
        return expr.xreplace(mapping)


def _arg_text(a) -> str:
    if isinstance(a, Value):
        return repr(a)
    if isinstance(a, list):
        return "[" + ", ".join(_arg_text(x) for x in a) + "]"
    if isinstance(a, Dtype):
        return SHORT_DTYPES.get(a.name, a.name)
    if isinstance(a, float):
        return repr(a)
    return repr(a)


def format_graph(graph: Graph, *, show_expr: bool = True) -> str:
    """The one-line-per-node listing (``print(graph)``), in the spirit of torch.fx and jaxprs."""
    params = ", ".join(f"{v.name}: {v.type_str}" for v in graph.placeholders)
    lines = [f"graph({params}) {{"]
    for n in graph.nodes:
        outs = ", ".join(f"%{v.name}: {v.type_str}" for v in n.outputs)
        if n.op == "constant":
            body = f"constant({_const_text(n.data)})"
        else:
            body = f"{n.op}({', '.join(_arg_text(a) for a in n.args)})"
        line = f"  {outs} = {body}"
        if show_expr and n.expr is not None:
            line = f"{line:<60}  # {n.expr}"
        lines.append(line)
    rets = ", ".join("None" if v is None else repr(v) for v in graph.outputs)
    lines.append(f"  return ({rets}{',' if len(graph.outputs) == 1 else ''})")
    lines.append("}")
    return "\n".join(lines)


def _const_text(data: np.ndarray) -> str:
    if data.size <= 4:
        return repr(data.tolist())
    return f"<{data.dtype}{list(data.shape)}>"
