"""Pictures of graphs: the eager ``grad_fn`` graph (like torchviz) and the compiler's IR.

:func:`make_dot` follows torchviz's ``make_dot``: backward nodes by class name, leaves (light blue)
with the names given in ``params``, saved tensors (orange) with their shapes, the output (green).
It returns a ``graphviz.Digraph`` (``pip install "symgrad[viz]"``), so ``.render("graph", format="png")``
works as in torchviz; :func:`to_dot` returns the same graph as DOT text and needs nothing installed.
:func:`ir_to_dot` draws a traced :class:`~symgrad.ir.graph.Graph`, and :func:`print_graph` prints the
``grad_fn`` tree as text.

>>> import symgrad
>>> x = symgrad.tensor([2.0], requires_grad=True)
>>> z = x ** 2 + 3
>>> print_graph(z)                                              # doctest: +ELLIPSIS
<AddBackward0 object at 0x...>
  <PowBackward0 object at 0x...>
    <AccumulateGrad object at 0x...>
>>> print(to_dot(z, params={"x": x}))                           # doctest: +NORMALIZE_WHITESPACE
digraph grad_fn {
    graph [size="12,12"]
    node [style=filled shape=box align=left fontsize="10" ranksep="0.1" height="0.2" fontname=monospace]
    edge [fontname=monospace fontsize="9"]
    o0 [label="output\\nf32[1]" fillcolor=darkolivegreen1]
    n1 [label="AddBackward0"]
    n2 [label="PowBackward0"]
    n3 [label="x\\nf32[1]" fillcolor=lightblue]
    n3 -> n2
    n3 -> n2 [dir=none style=dashed label=self]
    n2 -> n1
    n1 -> o0
}
<BLANKLINE>
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping

import numpy as np

from .ir.graph import SHORT_DTYPES, Graph, Value

NODE_ATTR = {"style": "filled", "shape": "box", "align": "left", "fontsize": "10", "ranksep": "0.1",
             "height": "0.2", "fontname": "monospace"}
GRAPH_ATTR = {"size": "12,12"}
EDGE_ATTR = {"fontname": "monospace", "fontsize": "9"}


def _type_str(array) -> str:
    dt = np.dtype(array.dtype).name
    return f"{SHORT_DTYPES.get(dt, dt)}[{', '.join(map(str, np.shape(array)))}]"


def _quote(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class DotGraph:
    """A graph's nodes and edges in insertion order: ``.source()`` is DOT text, ``.digraph()`` a
    ``graphviz.Digraph`` (which needs the graphviz package)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[tuple[str, str, dict]] = []
        self.edges: list[tuple[str, str, dict]] = []
        self._ids: set[str] = set()
        self._keys: dict = {}

    def key(self, prefix: str, obj) -> str:
        """A short stable identifier for ``obj`` (``n0``, ``n1``...), the same each time it is asked."""
        k = (prefix, id(obj))
        if k not in self._keys:
            self._keys[k] = f"{prefix}{len(self._keys)}"
        return self._keys[k]

    def node(self, ident: str, label: str, **attrs) -> None:
        if ident not in self._ids:
            self._ids.add(ident)
            self.nodes.append((ident, label, attrs))

    def edge(self, tail: str, head: str, **attrs) -> None:
        self.edges.append((tail, head, attrs))

    def __contains__(self, ident: str) -> bool:
        return ident in self._ids

    @staticmethod
    def _attrs(attrs: dict) -> str:
        return " ".join(f"{k}={_quote(v) if not str(v).isidentifier() else v}" for k, v in attrs.items())

    def body(self) -> list[str]:
        lines = []
        for ident, label, attrs in self.nodes:
            extra = self._attrs(attrs)
            lines.append(f"\t{ident} [label={_quote(label)}{' ' + extra if extra else ''}]")
        for tail, head, attrs in self.edges:
            extra = self._attrs(attrs)
            lines.append(f"\t{tail} -> {head}{' [' + extra + ']' if extra else ''}")
        return lines

    def source(self) -> str:
        head = [f"digraph {self.name} {{",
                f"\tgraph [{self._attrs(GRAPH_ATTR)}]",
                f"\tnode [{self._attrs(NODE_ATTR)}]",
                f"\tedge [{self._attrs(EDGE_ATTR)}]"]
        return "\n".join(head + self.body() + ["}"]) + "\n"

    def digraph(self):
        graphviz = _import_graphviz()
        dot = graphviz.Digraph(self.name, node_attr=dict(NODE_ATTR), graph_attr=dict(GRAPH_ATTR),
                               edge_attr=dict(EDGE_ATTR))
        for ident, label, attrs in self.nodes:
            dot.node(ident, label, **attrs)
        for tail, head, attrs in self.edges:
            dot.edge(tail, head, **attrs)
        return dot


def _import_graphviz():
    try:
        import graphviz
    except ImportError:
        raise ImportError("symgrad.viz.make_dot needs the 'graphviz' Python package: pip install graphviz "
                          "(or pip install \"symgrad[viz]\"); rendering also needs the Graphviz `dot` program. "
                          "symgrad.viz.to_dot(tensor, params) gives the DOT text without it.") from None
    return graphviz


# --- the eager grad_fn graph ----------------------------------------------------------------

def _saved_items(fn) -> list[tuple[str, object]]:
    """(name, array or value) for each value ``fn`` saved for backward (empty once released)."""
    saved = getattr(fn, "_saved", None)
    if not isinstance(saved, dict):
        return []
    out = []
    for name, v in saved.items():
        if hasattr(v, "_data"):                       # a Tensor
            out.append((name, v._data))
        elif hasattr(v, "unpack_array"):              # a SavedVariable
            out.append((name, v.unpack_array()))
        elif isinstance(v, list) and v and all(hasattr(x, "unpack_array") for x in v):
            out.extend((f"{name}[{i}]", x.unpack_array()) for i, x in enumerate(v))
        else:
            out.append((name, v))
    return out


def grad_fn_graph(var, params: Mapping | None = None, show_attrs: bool = False, show_saved: bool = True,
                  max_attr_chars: int = 50, name: str = "grad_fn") -> DotGraph:
    """The :class:`DotGraph` behind :func:`to_dot` and :func:`make_dot`."""
    param_names = {id(t): n for n, t in (params or {}).items()}
    dot = DotGraph(name)
    leaf_arrays: dict[int, str] = {}   # id(array) -> node id, so a saved leaf points at its leaf node

    def short(v) -> str:
        s = repr(v)
        return s if len(s) <= max_attr_chars else s[:max_attr_chars - 3] + "..."

    def add_fn(fn) -> str:
        ident = dot.key("n", fn)
        if ident in dot:
            return ident
        if hasattr(fn, "variable"):                  # AccumulateGrad: draw the leaf itself
            t = fn.variable
            label = f"{param_names.get(id(t), '')}\n{_type_str(t._data)}".lstrip("\n")
            dot.node(ident, label, fillcolor="lightblue")
            leaf_arrays[id(t._data)] = ident
            return ident
        label = type(fn).__name__
        items = _saved_items(fn) if (show_saved or show_attrs) else []
        if show_attrs:
            attrs = [f"{k}: {short(v)}" for k, v in items if not isinstance(v, np.ndarray)]
            if attrs:
                label += "\n" + "\n".join(attrs)
        dot.node(ident, label)
        for child, _ in fn.next_functions:
            if child is not None:
                dot.edge(add_fn(child), ident)
        if show_saved:
            for key, v in items:
                if not isinstance(v, np.ndarray):
                    continue
                # a dashed edge named like the slot, from the leaf itself or from an orange box
                sid = leaf_arrays.get(id(v))
                if sid is None:
                    sid = dot.key("s", v)
                    dot.node(sid, f"saved\n{_type_str(v)}", fillcolor="orange")
                dot.edge(sid, ident, dir="none", style="dashed", label=key)
        return ident

    outputs = var if isinstance(var, (tuple, list)) else (var,)
    for k, t in enumerate(outputs):
        ident = dot.key("o", t)
        label = param_names.get(id(t), f"output{'' if len(outputs) == 1 else ' ' + str(k)}")
        dot.node(ident, f"{label}\n{_type_str(t._data)}", fillcolor="darkolivegreen1")
        if t.grad_fn is not None:
            dot.edge(add_fn(t.grad_fn), ident)
        elif t.requires_grad:
            dot.edge(add_fn(_accumulate(t)), ident)
    return dot


def _accumulate(t):
    from .tensor import _accumulate_node

    return _accumulate_node(t)


def to_dot(var, params: Mapping | None = None, show_attrs: bool = False, show_saved: bool = True,
           max_attr_chars: int = 50) -> str:
    """The ``grad_fn`` graph that produced ``var`` (a Tensor or a tuple of them) as DOT text.

    Arguments are those of :func:`make_dot`.
    """
    return grad_fn_graph(var, params, show_attrs, show_saved, max_attr_chars).source()


def make_dot(var, params: Mapping | None = None, show_attrs: bool = False, show_saved: bool = True,
             max_attr_chars: int = 50):
    """The ``grad_fn`` graph that produced ``var`` as a ``graphviz.Digraph`` (as torchviz's ``make_dot``).

    ``params`` maps names to tensors (``{"x": x}``, or ``dict(model.named_parameters())``-like); named
    leaves are labelled with their names.  ``show_saved`` (default True, unlike torchviz) draws the
    tensors each node saved for backward, with their shapes; ``show_attrs`` adds the other saved
    values (exponents, shapes) to the node labels.  Saved values are gone after ``backward()``
    unless it ran with ``retain_graph=True``.

    Needs the ``graphviz`` Python package (``pip install "symgrad[viz]"``); ``.render(path, format="png")``
    also needs the Graphviz ``dot`` program.
    """
    return grad_fn_graph(var, params, show_attrs, show_saved, max_attr_chars).digraph()


# --- the IR ------------------------------------------------------------------------------------

def ir_graph(graph: Graph, name: str = "ir", prefix: str = "") -> DotGraph:
    """The :class:`DotGraph` of an IR graph (see :func:`ir_to_dot`); ``prefix`` keeps node ids apart
    when several graphs share one picture."""
    dot = DotGraph(name)

    ids: dict[str, str] = {}     # value name -> the box that produces it (multi-output nodes share one)

    def vid(v: Value) -> str:
        return ids.get(v.name) or f"{prefix}v_{v.name}"

    tangent_start = getattr(graph, "n_primals", len(graph.placeholders))
    for i, v in enumerate(graph.placeholders):
        color = "lightblue" if i < tangent_start else "orange"
        dot.node(vid(v), f"{v.name}\n{v.type_str}", fillcolor=color)
    for n in graph.nodes:
        ident = vid(n.outputs[0])
        for o in n.outputs:
            ids[o.name] = ident
        outs = ", ".join(f"%{o.name}: {o.type_str}" for o in n.outputs)
        label = f"{outs}\n{n.op}"
        if n.expr is not None:
            label += f"  # {n.expr}"
        rule = n.meta.get("grad_rule")
        if rule:
            label += f"\n<- {rule}" + (f" of %{n.meta['grad_of']}" if n.meta.get("grad_of") else "")
        attrs = {"fillcolor": "lightgrey" if n.op == "constant" else ("lightyellow" if rule else "white")}
        dot.node(ident, label, **attrs)
        for u in dict.fromkeys(n.inputs):
            dot.edge(vid(u), ident)
    for k, v in enumerate(graph.outputs):
        ident = f"{prefix}out_{k}"
        dot.node(ident, f"output {k}" if v is not None else f"output {k}: None", fillcolor="darkolivegreen1")
        if v is not None:
            dot.edge(vid(v), ident)
    return dot


def ir_to_dot(graph: Graph, name: str = "ir") -> str:
    """A traced IR graph (forward or joint) as DOT text: inputs light blue, tangents orange, nodes
    labelled with their IR line and, in a joint graph, the backward rule each came from."""
    return ir_graph(graph, name).source()


def combined_dot(parts: list[tuple[str, str, DotGraph]], name: str = "symgrad") -> str:
    """Several graphs as clusters of one DOT graph: ``parts`` is [(cluster name, title, builder)]."""
    lines = [f"digraph {name} {{", f"\tgraph [{DotGraph._attrs(GRAPH_ATTR)}]",
             f"\tnode [{DotGraph._attrs(NODE_ATTR)}]", f"\tedge [{DotGraph._attrs(EDGE_ATTR)}]"]
    for cluster, title, b in parts:
        lines.append(f"\tsubgraph cluster_{cluster} {{")
        lines.append(f"\t\tlabel={_quote(title)} fontname=monospace fontsize=12")
        lines += ["\t" + line for line in b.body()]
        lines.append("\t}")
    return "\n".join(lines + ["}"]) + "\n"


# --- rendering --------------------------------------------------------------------------------

class DotNotFound(RuntimeError):
    """The Graphviz ``dot`` program is not installed."""


def render(dot_source: str, fmt: str) -> bytes:
    """Render DOT text to ``fmt`` (svg, png, pdf...) with the Graphviz ``dot`` program."""
    exe = shutil.which("dot")
    if exe is None:
        raise DotNotFound("the Graphviz `dot` program is not installed, so the graph cannot be rendered as "
                          f"{fmt}: install Graphviz (apt install graphviz, brew install graphviz, conda install "
                          "graphviz) or write DOT text with --format dot")
    proc = subprocess.run([exe, f"-T{fmt}"], input=dot_source.encode(), capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"dot -T{fmt} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


# --- text -------------------------------------------------------------------------------------

def graph_lines(node, *, show_rules: bool = False, params: Mapping | None = None, _depth: int = 0,
                _seen: set | None = None) -> list[str]:
    """The ``grad_fn`` tree below ``node`` as indented lines (a node reached twice is expanded once).

    With ``show_rules`` each node shows its table entry and each leaf its name and shape.
    """
    seen = set() if _seen is None else _seen
    names = {id(t): n for n, t in (params or {}).items()}
    label = repr(node)
    if show_rules:
        rule = getattr(node, "_rule", None)
        label = type(node).__name__ + (f"   <- {rule.schema.key}" if rule is not None else "")
        if hasattr(node, "variable"):
            t = node.variable
            who = f"{names[id(t)]}: " if id(t) in names else ""
            label += f"   (leaf {who}{_type_str(t._data)})"
    if node in seen:
        return ["  " * _depth + label + "   (shown above)"]
    seen.add(node)
    lines = ["  " * _depth + label]
    for child, _ in node.next_functions:
        if child is not None:
            lines += graph_lines(child, show_rules=show_rules, params=params, _depth=_depth + 1, _seen=seen)
    return lines


def print_graph(tensor, *, show_rules: bool = False, params: Mapping | None = None, file=None) -> None:
    """Print the ``grad_fn`` tree of ``tensor`` (or of a node), one node a line, children indented."""
    node = getattr(tensor, "grad_fn", tensor)
    if node is None:
        print(f"{tensor!r} has no grad_fn (a leaf, or computed without gradient)", file=file or sys.stdout)
        return
    print("\n".join(graph_lines(node, show_rules=show_rules, params=params)), file=file or sys.stdout)
