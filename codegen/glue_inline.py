"""Statements the Numba backend's Python glue writes inline instead of calling an op's numpy forward.

The loops fuse elementwise work; matrix products and views stay in the glue.  On the small
arrays of a loop unrolled in Python (an RNN step is a few 64x64 products), each glue statement's
call overhead and the layout of the operands decide the time, so the glue

- calls ``np.matmul`` directly (no op wrapper, no ``asarray``: ``mm`` always makes a new 2-D array);
- computes a product whose inner dimension is 1 (``a[m,1] @ b[1,n]``, an outer product, as the
  backward of a ``[.., 1]`` readout makes) as a broadcast multiply: each element is one product,
  so the values are the same, without the BLAS call;
- makes a contiguous copy of a transpose that is the right operand of several small products
  (``grad @ W.t()`` once per unrolled step): BLAS's small-matrix kernels are slower on a
  transposed right operand than the copy, paid once, costs;
- takes ``select.int`` (``x[t]``) by indexing, ``view``/``_unsafe_view`` by ``np.reshape`` and
  ``t``/``transpose.int``/``permute`` by the ndarray's own view methods, as their forwards do,
  without the op wrapper's call and ``asarray`` (the result has at least one dimension, so it is an
  array).

>>> import numpy as np, symgrad
>>> def f(h, W):
...     Wt = W.t()
...     return ((h @ W) @ Wt).sum() + (h @ Wt).sum()
>>> g = symgrad.trace(f, np.ones((4, 3)), np.ones((3, 3)))
>>> [n.op for n in contiguous_transposes(g)]
['t']
"""

from __future__ import annotations

from symgrad.ir.graph import Graph, Node, Value

from .emit import _cast_line, node_comment
from .op_facts import register

# m*n*k of the products whose right operand is worth copying out of a transpose: OpenBLAS's
# small-matrix kernels (these sizes) are slower on it; above, its packing makes the layout free.
SMALL_PRODUCT = 1 << 18

# ``emit(node, names) -> lines or None`` per op
_INLINE: dict = {}


def _product_size(n: Node) -> int:
    (m, k), (_, cols) = n.args[0].shape, n.args[1].shape
    return int(m) * int(k) * int(cols)


def contiguous_transposes(graph: Graph) -> set[Node]:
    """The ``t`` nodes of 2-D values the glue computes as contiguous copies: the right operand of at
    least two small ``mm`` nodes, and not an output of the graph (outputs keep their view)."""
    users = graph.users()
    outputs = {v for v in graph.outputs if v is not None}
    found = set()
    for n in graph.nodes:
        if n.op != "t" or len(n.outputs) != 1 or len(n.outputs[0].shape) != 2 or n.outputs[0] in outputs:
            continue
        v = n.outputs[0]
        uses = users.get(v, [])
        small = [u for u in uses if u.op == "mm" and u.args[1] is v and u.args[0] is not v
                 and _product_size(u) <= SMALL_PRODUCT]
        if len(small) >= 2:
            found.add(n)
    return found


def transpose_statements(n: Node, names: dict) -> list[str]:
    """``t`` as a contiguous copy (for a node of :func:`contiguous_transposes`)."""
    src = names[n.args[0].name]
    return [f"    # {node_comment(n)}: a contiguous copy, the right operand of several small products",
            f"    {names[n.outputs[0].name]} = np.ascontiguousarray({src}.T)"]


def inline_statements(n: Node, names: dict, copied: set[Node]) -> list[str] | None:
    """The glue of node ``n`` written inline, or None to leave it to the op's numpy forward.
    ``copied``: the transposes to copy (:func:`contiguous_transposes` of the graph)."""
    if n in copied:
        return transpose_statements(n, names)
    emit = _INLINE.get(n.op)
    return None if emit is None else emit(n, names)


@register(_INLINE, "select.int")
def _select_statements(n: Node, names: dict) -> list[str] | None:
    x, dim, index = n.args[0], n.args[1], n.args[2]
    if not (isinstance(x, Value) and isinstance(dim, int) and isinstance(index, int) and len(n.outputs[0].shape)):
        return None
    key = ", ".join([":"] * (dim % len(x.shape)) + [repr(index)])
    return [f"    # {node_comment(n)}", f"    {names[n.outputs[0].name]} = {names[x.name]}[{key}]"]


def _between_arrays(n: Node) -> bool:
    """Whether view node ``n`` takes an array (not 0-d) to an array: then the glue may write it inline."""
    x = n.args[0]
    return isinstance(x, Value) and bool(len(x.shape)) and bool(len(n.outputs[0].shape))


@register(_INLINE, "view", "_unsafe_view")
def _view_statements(n: Node, names: dict) -> list[str] | None:
    if not _between_arrays(n):
        return None
    shape = tuple(int(s) for s in n.outputs[0].shape)
    source = names[n.args[0].name]
    return [f"    # {node_comment(n)}", f"    {names[n.outputs[0].name]} = np.reshape({source}, {shape!r})"]


def _array_method_view(n: Node, names: dict, call: str) -> list[str] | None:
    """A view taken by an ndarray method (see :func:`_between_arrays`)."""
    if not _between_arrays(n):
        return None
    return [f"    # {node_comment(n)}", f"    {names[n.outputs[0].name]} = {names[n.args[0].name]}.{call}"]


@register(_INLINE, "t")
def _t_statements(n: Node, names: dict) -> list[str] | None:
    return _array_method_view(n, names, "T")


@register(_INLINE, "transpose.int")
def _transpose_statements(n: Node, names: dict) -> list[str] | None:
    dim0, dim1 = n.args[1], n.args[2]
    if not (isinstance(dim0, int) and isinstance(dim1, int)):
        return None
    return _array_method_view(n, names, f"swapaxes({dim0}, {dim1})")


@register(_INLINE, "permute")
def _permute_statements(n: Node, names: dict) -> list[str] | None:
    dims = n.args[1]
    if not (isinstance(dims, (tuple, list)) and all(isinstance(d, int) for d in dims)):
        return None
    return _array_method_view(n, names, f"transpose({tuple(dims)!r})")


@register(_INLINE, "mm")
def _mm_statements(n: Node, names: dict) -> list[str] | None:
    a, b = n.args[0], n.args[1]
    if not (isinstance(a, Value) and isinstance(b, Value) and len(a.shape) == 2 and len(b.shape) == 2):
        return None
    lines = product_statements(n, names)
    _cast_line(lines, n, names, None)
    return lines


def product_statements(n: Node, names: dict, out: str | None = None) -> list[str]:
    """A matrix product (``mm``/``bmm``) as ``np.matmul``, or as a broadcast multiply when it is an
    ``mm`` whose inner dimension is 1; ``out``: the array to write it into."""
    a, b = n.args[0], n.args[1]
    outer = n.op == "mm" and a.shape[1] == 1
    call = "np.multiply" if outer else "np.matmul"
    into = "" if out is None else f", out={out}"
    return [f"    # {node_comment(n)}" + (": inner dimension 1, a broadcast product" if outer else ""),
            f"    {names[n.outputs[0].name]} = {call}({names[a.name]}, {names[b.name]}{into})"]
