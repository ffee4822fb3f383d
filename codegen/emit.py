"""Emit Python source for a Graph: one statement per IR node, with the node as a comment.

This is the numpy emitter: elementwise nodes are printed from their sympy expression by the
same :class:`~symgrad.rules.printers.FormulaPrinter` that prints the rule table's formulas, and
structural nodes call their op's numpy forward.  The result is readable and is the source
that actually runs (``symgrad.compile(backend="numpy")``).  The Numba emitter
(:mod:`codegen.numba_emit`) takes the same graphs and reuses these statements for its glue.

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda x: (symgrad.sin(x) * x).sum(), np.ones(3))
>>> print(emit_numpy(g, "forward").source)                       # doctest: +NORMALIZE_WHITESPACE
def forward(x):
    # %sin: f64[3] = sin(%x)
    sin_ = sin(x)
    # %mul: f64[3] = mul.Tensor(%sin, %x)
    mul = sin_*x
    # %sum: f64[] = sum(%mul, None)
    sum_ = asarray(op_sum(mul, None))
    return (sum_,)
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy

from symgrad.ir import opinfo
from symgrad.ir.graph import Graph, IndexRef, Value, _arg_text
from symgrad.rules import vocab
from symgrad.rules.printers import FormulaPrinter

from .op_facts import register


@dataclass
class Emitted:
    """Generated source plus the names it refers to (constants, op forwards)."""

    name: str
    source: str
    namespace: dict = field(default_factory=dict)

    def compile(self):
        """Exec the source in its namespace and return the function."""
        glb = dict(self.namespace)
        exec(compile(self.source, f"<symgrad {self.name}>", "exec"), glb)
        fn = glb[self.name]
        fn.__source__ = self.source
        return fn


def _ident(name: str) -> str:
    """A value's Python name; one that would hide a function the source calls gets a trailing ``_``."""
    name = name.replace(".", "_")
    if keyword.iskeyword(name) or name in _SHADOWED or name in vocab.NUMPY_FUNCTIONS:
        name += "_"
    return name


_SHADOWED = {"sum", "min", "max", "abs", "slice", "index", "where", "exp", "log", "sin", "cos", "tanh", "sqrt",
             "sign", "erf", "pow", "round", "all", "any", "len", "range", "list", "tuple", "dict", "asarray"}


class _Printer(FormulaPrinter):
    """Prints value symbols by their Python identifiers and functions from the numpy namespace."""

    def __init__(self, names: dict[str, str]) -> None:
        super().__init__()
        self._names = names

    def _print_Symbol(self, expr):
        return self._names.get(expr.name, expr.name)


def emit_numpy(graph: Graph, name: str) -> Emitted:
    """A Python function ``name(*placeholders)`` returning a tuple of the graph's outputs."""
    names: dict[str, str] = {}
    for v in graph.placeholders:
        names[v.name] = _ident(v.name)
    for n in graph.nodes:
        for o in n.outputs:
            names[o.name] = _ident(o.name)
    ns: dict = {"asarray": np.asarray, "np": np}
    ns.update(vocab.NUMPY_FUNCTIONS)
    printer = _Printer(names)
    lines = [f"def {name}({', '.join(names[v.name] for v in graph.placeholders)}):"]

    for n in graph.nodes:
        if n.expr is not None and not isinstance(n.expr, sympy.logic.boolalg.BooleanAtom) and \
                n.op not in LOWERINGS:
            lines.append(f"    # {node_comment(n)}")
            target = ", ".join(names[o.name] for o in n.outputs)
            src = printer.doprint(n.expr)
            # sympy may fold the expression (x - x is 0, y + 0*x is y): numpy would then compute a
            # Python number, or a smaller shape than the node's, so broadcast it back
            shapes = [v.shape for v in n.inputs if v.symbol in n.expr.free_symbols]
            if len(n.outputs) == 1 and (not shapes or np.broadcast_shapes(*shapes) != tuple(n.output.shape)):
                src = f"np.broadcast_to({src}, {tuple(n.output.shape)!r}).astype({n.output.dtype.np.name!r})"
            lines.append(f"    {target} = {src}")
            _cast_line(lines, n, names, graph)
        else:
            lines += node_statements(n, names, ns)
    rets = [("None" if v is None else names[v.name]) for v in graph.outputs]
    lines.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
    return Emitted(name, "\n".join(lines), ns)


def node_comment(n) -> str:
    """The IR line a generated statement comes from (``%mul: f64[3] = mul.Tensor(%x, %x)``)."""
    outs = ", ".join(f"%{o.name}: {o.type_str}" for o in n.outputs)
    if n.op == "constant":
        return f"{outs} = constant"
    return f"{outs} = {n.op}({', '.join(_arg_text(a) for a in n.args)})"


# Statements of the nodes that are not a call of their op's numpy forward, by op:
# ``lower(node, target, label, names, ns) -> lines``.
LOWERINGS: dict[str, Callable] = {}


def lowering(*ops: str):
    """Register the glue statements of ``ops`` (decorator)."""
    return register(LOWERINGS, *ops)


@lowering("constant")
def _constant(n, target: str, label: str, names: dict, ns: dict) -> list[str]:
    ns[f"const_{label}"] = n.data
    return [f"    {target} = const_{label}"]


@lowering("detach")
def _detach(n, target: str, label: str, names: dict, ns: dict) -> list[str]:
    return [f"    {target} = {names[n.args[0].name]}"]


@lowering("_check_range")
def _check_range(n, target: str, label: str, names: dict, ns: dict) -> list[str]:
    """The common case inline, reductions only; when they see a value out of range (or ``skip``), the
    op's forward looks closer and raises its error."""
    x, low, high = n.args[0], n.args[1], n.args[2]
    src = names[x.name]
    if x.shape == () or not (math.isfinite(low) and math.isfinite(high)):
        return _forward_call(n, target, label, names, ns, False)
    dtype = np.dtype(x.dtype.np)
    if dtype.kind == "i" and low == 0:
        # read as unsigned, a negative value is huge: one reduction checks both ends
        ok = f"{src}.view(np.uint{8 * dtype.itemsize}).max() <= {high!r}"
    else:
        ok = f"{src}.min() >= {low!r} and {src}.max() <= {high!r}"   # False for nan
    return ([f"    if {src}.size and not ({ok}):"]
            + ["    " + line for line in _forward_call(n, target, label, names, ns, False)]
            + [f"    {target} = {src}"])


def _forward_call(n, target: str, label: str, names: dict, ns: dict, seq: bool) -> list[str]:
    """A call of the op's numpy forward, cast where numpy's dtype differs from the IR's."""
    key = "op_" + _ident(n.op).rstrip("_")
    ns[key] = opinfo.numpy_forward(n.op)
    ns.setdefault("__ops__", {})[key] = n.op  # lets codegen.jit write `op_x = _op("x").forward`
    call = f"{key}({', '.join(arg_source(a, label, names, ns) for a in n.args)})"
    lines = [f"    {target} = {call if seq else f'asarray({call})'}"]
    _cast_line(lines, n, names, None)
    return lines


def node_statements(n, names: dict, ns: dict) -> list[str]:
    """Glue statements for a node run by its op's numpy forward (or by its :data:`LOWERINGS`)."""
    lower = LOWERINGS.get(n.op)
    # unbind over a dim of size 1 has one output, still returned in a sequence
    seq = len(n.outputs) > 1 or (lower is None and opinfo.returns_sequence(n.op))
    target = ", ".join(names[o.name] for o in n.outputs) + ("," if seq else "")
    label = names[n.outputs[0].name]
    body = lower(n, target, label, names, ns) if lower is not None else _forward_call(n, target, label, names, ns, seq)
    return [f"    # {node_comment(n)}"] + body


def arg_source(a, label: str, names: dict, ns: dict) -> str:
    """Python source for one op argument: a value's name, a literal, or a namespace constant."""

    def const(value):
        key = f"{label}_const{len(ns)}"
        ns[key] = value
        return key

    def index_src(part):
        if isinstance(part, Value):
            return names[part.name]
        if isinstance(part, tuple):
            return "(" + ", ".join(index_src(p) for p in part) + ("," if len(part) == 1 else "") + ")"
        if isinstance(part, slice):
            return f"slice({part.start!r}, {part.stop!r}, {part.step!r})"
        if part is Ellipsis:
            return "..."
        if part is None or isinstance(part, (int, bool)):
            return repr(part)
        return const(part)

    if isinstance(a, Value):
        # a 0-d float may be a Python float in Numba glue (a fused reduction's result): numpy
        # forwards need an array
        return f"asarray({names[a.name]})" if a.shape == () and a.dtype.is_floating_point else names[a.name]
    if isinstance(a, list):
        return "[" + ", ".join(arg_source(x, label, names, ns) for x in a) + "]"
    if isinstance(a, IndexRef):
        return index_src(a.parts)
    if isinstance(a, tuple) and all(isinstance(x, (int, float, bool, type(None))) for x in a):
        return repr(a)
    if isinstance(a, float) and not math.isfinite(a):  # repr gives `nan` / `inf`, not names in the glue
        return const(a)
    if isinstance(a, (int, float, bool, str, type(None))):
        return repr(a)
    return const(a)


def _cast_line(lines: list, node, names, graph) -> None:
    """numpy promotes some mixed dtypes differently from PyTorch: cast where the IR says so
    (wherever the output's dtype is not simply the floating dtype of its inputs, and every
    narrower-than-float64 output: a 0-d float64 array or a numpy float64 constant widens a
    float32 result in numpy, where PyTorch keeps float32)."""
    for o in node.outputs:
        ins = [v for v in node.inputs if v.dtype.is_floating_point] or node.inputs
        natural = ins[0].dtype if ins else None
        if natural is not o.dtype or o.dtype.name != "float64" or any(v.dtype is not o.dtype for v in ins):
            lines.append(f"    {names[o.name]} = asarray({names[o.name]}).astype({o.dtype.np.name!r}, copy=False)")
