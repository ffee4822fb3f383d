"""Scatter loops: ``index_put(accumulate=True)``, ``np.add.at`` and the gradient of a gather as Numba loops.

A scatter-add (an op tagged ``scatter_add``: ``index_put_add``, ``index_put`` with ``accumulate``)
becomes one kernel that walks the positions of its integer index in order and adds each position's
row of values into the target row the index names, so repeated indices accumulate exactly as
``np.add.at`` does (same order, same rounding).  When the values are a gather (an op tagged
``gather``: ``x[idx]``) read by nothing else, the kernel reads ``x`` through the gather's index
instead of a materialised ``x[idx]``: an embedding bag's ``h[bag] += E[tok]`` and its gradient
``dE[tok] += dh[bag]`` are one pass each.

Every index is checked in the kernel (negative indices count from the end, as in numpy): the kernel
returns the first position out of bounds before touching memory there, and the glue raises numpy's
``IndexError``.  With ``parallel``, the positions are first sorted by target row (a stable counting
sort), then chunks of rows run over Numba's threads: no two threads add into one row, and each row
still adds its values in position order, so the result is the serial one, bit for bit.

Indices taken: one integer array, or several of one shape, after any number of full slices
(``x[idx]``, ``x[:, idx]``, ``x[:, :, i, j]``) and followed by nothing or by full slices; the values
must have the index's place in the target's shape (numpy's rule for adjacent index arrays: the
sliced dims, the index's dims, the remaining dims).  Anything else (masks, partial slices, broadcast
values) stays a numpy call.

>>> import numpy as np, symgrad
>>> def f(E):
...     h = symgrad.zeros((3, 2), dtype=symgrad.float64)
...     np.add.at(h, np.array([0, 2, 0]), E[np.array([1, 1, 0])])
...     return h
>>> g = symgrad.trace(f, np.ones((2, 2)))
>>> loops = scatter_loops(g, {})
>>> [(n.op, plan.gather is not None) for n, plan in loops.items()]
[('index_put', True)]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from symgrad.ir.graph import Graph, IndexRef, Node, Value

from . import op_facts
from .kernel_common import PARALLEL_CHUNKS, decorator

# How the arguments of each scatter-add op read: ``decode(node) -> (values, base or None, index)``
# (``base`` None: the target starts as zeros of the output's shape), or None when the node does not
# add (``index_put`` without ``accumulate``).
SCATTER_ARGS: dict[str, Callable] = {}
# How a gather op's arguments read: ``decode(node) -> (source, index)``.
GATHER_ARGS: dict[str, Callable] = {}


@op_facts.register(SCATTER_ARGS, "index_put_add")
def _index_put_add_args(n: Node):
    values, _, index = n.args[:3]
    return values, None, index


@op_facts.register(SCATTER_ARGS, "index_put")
def _index_put_args(n: Node):
    base, index, values = n.args[:3]
    accumulate = n.args[3] if len(n.args) > 3 else False
    return (values, base, index) if accumulate is True else None


@op_facts.register(GATHER_ARGS, "index.Tensor")
def _index_args(n: Node):
    return n.args[0], n.args[1]


# Index dtypes a kernel reads (as int64): unsigned 64-bit values may not fit
_INDEX_KINDS = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)}


def _full_slice(p) -> bool:
    return isinstance(p, slice) and p == slice(None)


def integer_index(ref, rank: int) -> tuple[int, list] | None:
    """``(lead, arrays)``: ``ref`` indexes a rank-``rank`` array by full slices over its first ``lead``
    dims, then by integer index arrays (Values or numpy arrays, all of one shape) over the next
    ``len(arrays)`` dims; None for any other index."""
    key = ref.parts if isinstance(ref, IndexRef) else ref
    parts = list(key) if isinstance(key, tuple) else [key]
    while parts and (parts[-1] is Ellipsis or _full_slice(parts[-1])):
        parts.pop()   # trailing full slices: the remaining dims are copied whole
    lead = 0
    while lead < len(parts) and _full_slice(parts[lead]):
        lead += 1     # leading full slices: the index arrays' dims come after these, as in numpy
    parts = parts[lead:]
    if not parts or lead + len(parts) > rank:
        return None
    for p in parts:
        dtype = p.dtype.np if isinstance(p, Value) else getattr(p, "dtype", None)
        if not isinstance(p, (Value, np.ndarray)) or dtype is None or np.dtype(dtype) not in _INDEX_KINDS:
            return None
    shapes = {tuple(p.shape) for p in parts}
    if len(shapes) > 1:
        if any(isinstance(p, Value) for p in parts):
            return None
        parts = list(np.broadcast_arrays(*parts))   # constant arrays: numpy broadcasts them together
    return lead, parts


@dataclass
class ScatterLoop:
    """One scatter kernel: ``out = base`` (zeros when None) ``+ values at index``."""

    node: Node                  # the node whose output the loop computes
    out: Value
    values: Value               # what is added; not materialised when ``gather`` reads it
    base: Value | None
    in_place: bool              # base is a fresh intermediate nobody else reads: add into it
    index: list                 # the scatter's index arrays
    lead: int = 0               # the target's dims before the indexed ones (full slices)
    gather: Node | None = None  # the gather computing ``values``, done inside the loop
    source: Value | None = None
    source_index: list | None = None

    @property
    def inputs(self) -> list[Value]:
        """The values the glue must have before the loop runs."""
        read = [self.source] if self.gather is not None else [self.values]
        index = self.index + (self.source_index or [])
        return read + ([self.base] if self.base is not None else []) + [p for p in index if isinstance(p, Value)]


def scatter_loops(graph: Graph, accumulations: dict, fresh: set | frozenset = frozenset()) -> dict[Node, ScatterLoop]:
    """The scatter kernels of ``graph``: ``{node: plan}`` for each scatter-add node it takes, and for
    each ``add`` of :func:`codegen.fuse.scatter_accumulations` (``accumulations``: ``{add: (scatter,
    other)}``), which adds into ``other`` instead of zeros (in place when ``other`` is in ``fresh``,
    the values the glue computes into new arrays, and nothing else reads it)."""
    users = graph.users()
    outputs = {v for v in graph.outputs if v is not None}
    folded = {put for put, _ in accumulations.values()}
    plans: dict[Node, ScatterLoop] = {}
    for n in graph.nodes:
        if n in accumulations:
            put, other = accumulations[n]
            decoded = SCATTER_ARGS[put.op](put) if put.op in SCATTER_ARGS else None
            if decoded is None or decoded[1] is not None:
                continue
            in_place = other in fresh and users.get(other) == [n] and other not in outputs
            plan = _plan(n, put.outputs[0], decoded[0], other, decoded[2], users, outputs, in_place)
        elif n not in folded and op_facts.has(n.op, "scatter_add") and n.op in SCATTER_ARGS:
            decoded = SCATTER_ARGS[n.op](n)
            if decoded is None:
                continue
            plan = _plan(n, n.outputs[0], decoded[0], decoded[1], decoded[2], users, outputs, False)
        else:
            continue
        if plan is not None:
            plans[n] = plan
    return plans


def _plan(n: Node, scattered: Value, values, base, ref, users: dict, outputs: set, in_place: bool):
    out = n.outputs[0]
    if len(n.outputs) != 1 or not isinstance(values, Value) or not out.shape:
        return None
    if base is not None and (not isinstance(base, Value) or tuple(base.shape) != tuple(out.shape)):
        return None
    if any(v.dtype is not out.dtype for v in (values, scattered) + ((base,) if base is not None else ())):
        return None
    indexed = integer_index(ref, len(out.shape))
    if indexed is None:
        return None
    lead, index = indexed
    k = len(index)
    shape = tuple(out.shape)
    if tuple(values.shape) != shape[:lead] + tuple(index[0].shape) + shape[lead + k:]:
        return None   # values broadcast to the index's shape: numpy's add.at does that
    data = getattr(base.producer, "data", None) if base is not None and base.producer is not None else None
    if isinstance(data, np.ndarray) and base.producer.op == "constant" and not data.any() and \
            not np.signbit(data).any():
        base = None   # a constant +0.0 base (``zeros`` then ``np.add.at``): start from fresh zeros
    plan = ScatterLoop(n, out, values, base, in_place and base is not None, index, lead)
    g = values.producer
    if g is not None and op_facts.has(g.op, "gather") and g.op in GATHER_ARGS and \
            users.get(values) == [_reader(n, scattered, users)] and values not in outputs:
        source, gref = GATHER_ARGS[g.op](g)
        if isinstance(source, Value) and source.dtype is values.dtype:
            gathered = integer_index(gref, len(source.shape))
            if gathered is not None and gathered[0] == lead:
                gindex = gathered[1]
                sshape = tuple(source.shape)
                if tuple(gindex[0].shape) == tuple(index[0].shape) and sshape[:lead] == shape[:lead] and \
                        sshape[lead + len(gindex):] == shape[lead + k:]:
                    plan.gather, plan.source, plan.source_index = g, source, gindex
    return plan


def _reader(n: Node, scattered: Value, users: dict) -> Node:
    """The node that reads a scatter's values: the scatter itself (folded into ``n`` or ``n``)."""
    return scattered.producer if scattered is not n.outputs[0] else n


def _size(shape) -> int:
    return int(np.prod([int(s) for s in shape], dtype=np.int64))


def scatter_kernel_source(k: int, k2: int, parallel: bool, name: str, lead: bool = False) -> str:
    """The kernel adding ``values`` (or ``source`` read at ``k2`` gather index arrays) into the rows of
    ``target`` named by ``k`` index arrays.  ``target`` and ``values`` are 2-D (the indexed dims
    flattened, then the rest), or with ``lead`` 3-D: first the dims before the indexed ones (``x[:, idx]``)
    flattened.

    Returns ``(first bad position, its index array)`` or ``(-1, 0)``: the kernel stops at an index
    out of bounds, before it reads or writes there.
    """
    sizes = [f"ts{a}" for a in range(k)] + [f"gs{b}" for b in range(k2)]
    idx = [f"i{a}" for a in range(k)] + [f"g{b}" for b in range(k2)]
    lines = [f"def {name}(target, values, {', '.join(sizes + idx)}):",
             "    positions = i0.shape[0]",
             f"    width = target.shape[{2 if lead else 1}]"]

    def checks(pad: str, fail: str) -> list[str]:
        out = []
        for j, (size, arr) in enumerate(zip(sizes, idx)):
            out += [f"{pad}a{j} = {arr}[t]",
                    f"{pad}if a{j} < 0:",
                    f"{pad}    a{j} += {size}",
                    f"{pad}if a{j} < 0 or a{j} >= {size}:",
                    f"{pad}    {fail.format(j=j)}"]
        row = "a0" + "".join(f" * {sizes[a]} + a{a}" for a in range(1, k))
        out.append(f"{pad}r = {row}")
        src = "t" if not k2 else f"a{k}" + "".join(f" * {sizes[k + b]} + a{k + b}" for b in range(1, k2))
        out.append(f"{pad}s = {src}")
        return out

    # the target row and source row of every position, checked once, for kernels that visit the
    # positions more than once or out of order
    rows_checked = (["    row_of = np.empty(positions, np.int64)",
                     "    src_of = np.empty(positions, np.int64)",
                     "    for t in range(positions):"]
                    + checks("        ", "return t, {j}")
                    + ["        row_of[t] = r",
                       "        src_of[t] = s"])

    if lead:
        # each leading slice ``b`` adds its values in position order (slices never share a row: they
        # run in any order, or on separate threads)
        lines += rows_checked + ["    slices = target.shape[0]"]
        add = ["for t in range(positions):",
               "    r = row_of[t]",
               "    s = src_of[t]",
               "    for j in range(width):",
               "        target[b, r, j] += values[b, s, j]"]
        if not parallel:
            lines.append("    for b in range(slices):")
            lines += ["        " + a for a in add]
        else:
            chunks = PARALLEL_CHUNKS
            lines += [f"    for c in prange({chunks}):",
                      f"        for b in range(c * slices // {chunks}, (c + 1) * slices // {chunks}):"]
            lines += ["            " + a for a in add]
        lines.append("    return -1, 0")
        return decorator(parallel, False) + "\n" + "\n".join(lines)

    add = ["for j in range(width):", "    target[r, j] += values[s, j]"]
    if not parallel:
        lines.append("    for t in range(positions):  # in order: repeated rows accumulate as np.add.at does")
        lines += checks("        ", "return t, {j}")
        lines += ["        " + a for a in add]
        lines.append("    return -1, 0")
        return decorator(False, False) + "\n" + "\n".join(lines)
    chunks = PARALLEL_CHUNKS
    lines += ["    rows = target.shape[0]"] + rows_checked
    lines += ["    # positions sorted by row, stably: each row's values keep their order",
              "    start = np.zeros(rows + 1, np.int64)",
              "    for t in range(positions):",
              "        start[row_of[t] + 1] += 1",
              "    for r in range(rows):",
              "        start[r + 1] += start[r]",
              "    fill = start[:rows].copy()",
              "    order = np.empty(positions, np.int64)",
              "    for t in range(positions):",
              "        order[fill[row_of[t]]] = t",
              "        fill[row_of[t]] += 1",
              f"    for c in prange({chunks}):  # each chunk owns its rows: no two threads add into one row",
              f"        lo = c * rows // {chunks}",
              f"        hi = (c + 1) * rows // {chunks}",
              "        for p in range(start[lo], start[hi]):",
              "            t = order[p]",
              "            r = row_of[t]",
              "            s = src_of[t]"]
    lines += ["            " + a for a in add]
    lines.append("    return -1, 0")
    return decorator(True, False) + "\n" + "\n".join(lines)


def raise_index_error(first: int, which: int, arrays: tuple, sizes: tuple, axes: tuple) -> None:
    """Raise numpy's IndexError for the out-of-bounds index a scatter kernel stopped at (the gather's
    index arrays are checked first, as the eager program reads them first)."""
    order = list(range(len(arrays)))
    order = [j for j in order if axes[j][0] == "gather"] + [j for j in order if axes[j][0] != "gather"]
    for j in order:
        a = np.asarray(arrays[j]).reshape(-1)
        bad = (a < -sizes[j]) | (a >= sizes[j])
        if bad.any():
            value = int(a[int(np.argmax(bad))])
            raise IndexError(f"index {value} is out of bounds for axis {axes[j][1]} with size {sizes[j]}")
    raise IndexError(f"index {int(np.asarray(arrays[which]).reshape(-1)[first])} is out of bounds for axis "
                     f"{axes[which][1]} with size {sizes[which]}")


def scatter_loop_lines(plan: ScatterLoop, kernel: str, names: dict, ns: dict, label: str) -> list[str]:
    """The glue around a scatter kernel: the target, the kernel's call and the IndexError."""
    out = plan.out
    shape = tuple(int(s) for s in out.shape)
    k, lead = len(plan.index), plan.lead
    before, rows, width = _size(shape[:lead]), shape[lead:lead + k], _size(shape[lead + k:])

    def shape_of(middle: int) -> tuple:
        """The kernel's view: (dims before the indexed ones, if any, indexed dims, the rest)."""
        return (before, middle, width) if lead else (middle, width)

    dtype = np.dtype(out.dtype.np).name
    target = names[out.name]
    lines = []
    if plan.base is None:
        lines.append(f"    {target} = np.zeros({shape!r}, dtype=np.{dtype})")
    elif plan.in_place:
        lines.append(f"    {target} = np.ascontiguousarray({names[plan.base.name]})  # added into in place: "
                     "nothing else reads it")
    else:
        lines.append(f"    {target} = np.array({names[plan.base.name]}, dtype=np.{dtype}, copy=True)")

    def index_arg(p, j: int) -> str:
        if isinstance(p, Value):
            return f"np.asarray({names[p.name]}, dtype=np.int64).reshape(-1)"
        key = f"{label}_scatter_index{j}"
        ns[key] = np.ascontiguousarray(p, dtype=np.int64).reshape(-1)
        return key

    index_args = [index_arg(p, j) for j, p in enumerate(plan.index + (plan.source_index or []))]
    sizes = list(rows)
    axes = [("scatter", lead + a) for a in range(k)]
    if plan.gather is not None:
        src = plan.source
        k2 = len(plan.source_index)
        sizes += [int(s) for s in src.shape[lead:lead + k2]]
        axes += [("gather", lead + b) for b in range(k2)]
        read = f"np.ascontiguousarray({names[src.name]}).reshape({shape_of(_size(src.shape[lead:lead + k2]))})"
    else:
        positions = _size(plan.index[0].shape)
        read = f"np.ascontiguousarray({names[plan.values.name]}).reshape({shape_of(positions)})"
    flat = f"{target}.reshape({shape_of(_size(rows))})"
    ns["raise_index_error"] = raise_index_error
    arrays = ", ".join(index_args)
    lines.append(f"    bad_, which_ = {kernel}({flat}, {read}, {', '.join(str(s) for s in sizes)}, {arrays})")
    lines.append("    if bad_ >= 0:")
    lines.append(f"        raise_index_error(bad_, which_, ({arrays},), {tuple(sizes)!r}, {tuple(axes)!r})")
    return lines


# --- gathers read inside elementwise loops ----------------------------------------------------------

@dataclass
class GatherRead:
    """A loop input ``v = source[index]`` that the loop reads through the index (never materialised).

    The loop runs over ``v``'s shape: the index arrays' dims, then ``source``'s dims after the indexed
    ones.  The glue checks the index arrays before the loop (numpy's IndexError), so the loop only
    wraps negative indices.
    """

    value: Value
    source: Value
    index: list
    lead: int = 0     # the source's dims before the indexed ones, read whole (full slices)

    def params(self, names: dict, kernel_name: Callable) -> list[tuple[str, str, object]]:
        """``(kernel parameter, glue argument, constant or None)`` for the source, then each index array
        (a constant array becomes a glue constant named after the value)."""
        out = [(kernel_name(names[self.source.name]), names[self.source.name], None)]
        for a, p in enumerate(self.index):
            if isinstance(p, Value):
                out.append((kernel_name(names[p.name]), names[p.name], None))
            else:
                label = kernel_name(names[self.value.name]).rstrip("_")
                out.append((f"{label}_at{a}", f"{label}_index{a}", np.ascontiguousarray(p, dtype=np.int64)))
        return out

    def read(self, params: list[str]) -> str:
        """The loop's read of one element (``params``: the kernel names of :meth:`params`)."""
        src, index = params[0], params[1:]
        lead, m = self.lead, len(self.index[0].shape)
        at = ", ".join(f"i{lead + d}" for d in range(m)) or "()"
        before = [f"i{d}" for d in range(lead)]
        rows = [f"{p}[{at}] + ({p}[{at}] < 0) * {src}.shape[{lead + a}]" for a, p in enumerate(index)]
        rest = [f"i{lead + m + d}" for d in range(len(self.source.shape) - lead - len(self.index))]
        return f"{src}[{', '.join(before + rows + rest)}]"

    def check_lines(self, args: list[str], names: dict) -> list[str]:
        """Glue lines raising numpy's IndexError for an index out of bounds, before the loop reads."""
        lines = []
        for a, arg in enumerate(args[1:], start=self.lead):
            n = int(self.source.shape[a])
            lines.append(f"    if not index_in_bounds({arg}, {n}):")
            lines.append(f"        raise_index_error(0, 0, ({arg},), ({n},), (('gather', {a}),))")
        return lines


def gather_read(v: Value, shape: tuple, known) -> GatherRead | None:
    """How a loop over ``shape`` reads ``v`` through a gather's index, or None (``v`` is not a gather
    the loops take: then it is an array, as any input).  ``known``: the names of the values of the
    graph being emitted; a gather whose source or index lives only in another graph (a value the
    forward saved for the backward) is read as the array it is."""
    g = v.producer
    if g is None or len(g.outputs) != 1 or not op_facts.has(g.op, "gather") or g.op not in GATHER_ARGS or \
            tuple(v.shape) != tuple(shape) or not shape:
        return None
    source, ref = GATHER_ARGS[g.op](g)
    if not isinstance(source, Value) or source.dtype is not v.dtype:
        return None
    indexed = integer_index(ref, len(source.shape))
    if indexed is None:
        return None
    lead, index = indexed
    if any(isinstance(p, Value) and p.shape == () for p in index):
        return None
    if any(isinstance(p, Value) and p.name not in known for p in [source, *index]):
        return None
    return GatherRead(v, source, index, lead)


def index_in_bounds(index, n: int) -> bool:
    """Whether every entry of an integer array is a valid index into a dim of size ``n`` (negative
    ones counting from the end)."""
    a = np.asarray(index)
    return a.size == 0 or bool(a.min() >= -n and a.max() < n)
