"""Row kernels: one Numba loop over the rows of a batch, for graphs that reduce each row and use it again.

A softmax cross-entropy (W5) needs each row's max before its exponentials and the row's sum of them
before its gradient.  The loop fuser (:mod:`codegen.fuse`) must end a loop at each such row reduction,
so the joint graph passes over the whole batch three times (numpy's row max, exp with the sums, the
gradient), each pass reading or writing arrays far bigger than the caches.  A row kernel turns the
loop nest inside out: one outer loop over rows, and per row the same passes as inner loops over its
columns, with the row's intermediate values in small buffers that stay in L1.  The batch is then read
once and the gradient written once.

Graphs it takes (anything else returns None and the fuser's kernels run), with ``rows x cols`` the shape
of the 2-D placeholders:

* values of shape ``(rows, cols)`` (row vectors), ``(rows,)`` or ``(rows, 1)`` (one number per row)
  and ``()`` (scalars); floating-point values float64 or float32 (float32 ones computed as in the fused
  loops: the vector functions' float32 versions, float64 where a constant promotes, every node's value
  rounded to float32 as eager rounds it);
* elementwise ops, ``where``, ``detach``, views and broadcasts among them; row reductions
  (``sum``/``mean``/``amax``/``amin`` over dim 1); full ``sum``/``mean`` reductions as outputs;
* ``x[arange(rows), idx]`` on a 2-D input (one element per row) and its gradient, an
  ``index_put_add`` at those positions that one addition then merges into a row vector output;
* and at least one row reduction whose result is used by a later row-vector computation, or the row
  sum of a one-hot row (otherwise the fuser's single pass is already as good; for a one-hot's sum it
  would write the one-hot out as a dense array).

The order of operations within a row is that of the graph; sums over a row are reassociated (as in
every ``math="vector"`` loop), sums over rows are taken in row order.  A parallel row kernel (the loops'
``parallel`` option) runs fixed chunks of rows over Numba's threads, each chunk a call of the serial
kernel, and adds the chunks' partial sums in chunk order.

>>> import numpy as np, symgrad
>>> from symgrad.compiler.autodiff import autodiff
>>> g = autodiff(symgrad.trace(lambda L: symgrad.logsumexp(L, dim=1).mean(), np.ones((4, 3))), [0])
>>> e = emit_row_kernel(g, "joint", vector={"exp": "vexp", "log": "vlog"}, vector_import="")
>>> "for i in range(n0):" in e.kernels[0], e.source.count("row_kernel_0(")
(True, 1)
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import sympy

from symgrad.ir.graph import SHORT_DTYPES, Graph, IndexRef, Node, Value

from . import op_facts
from .emit import _ident
from .kernel_common import (
    PARALLEL_CHUNKS,
    RANGE_CHECKED,
    KernelPrinter,
    NumbaEmitted,
    compute_suffix,
    decorator,
    generic_arg,
    lift_constants,
    rounded_to_dtype,
    scalar_namespace,
    vector_imports,
)
from .per_element import statement_for

S, R, V, H = "scalar", "row", "vector", "one-hot"   # value kinds (H: index_put_add of one value per row)

# per reduction kind (symgrad.rules.facts): an accumulator's start and its step
_PAD = "        "   # a statement in the loop over rows
_INIT = {"sum": "0.0", "mean": "0.0", "amax": "-math.inf", "amin": "math.inf"}
_STEP = {"sum": "radd", "mean": "radd", "amax": "rmax", "amin": "rmin"}


def _full_reduction(op: str) -> str | None:
    """``"sum"`` or ``"mean"`` for a sum or mean (over all dims, or to a scalar over its dims), else None."""
    kind = op_facts.reduction_kind(op)
    return kind if kind in ("sum", "mean") else None


def _row_reduction(op: str) -> str | None:
    """The kind of a reduction over a ``dim`` argument (a row reduction when that is the last dim)."""
    return op_facts.reduction_kind(op) if op_facts.reduces_over_dim(op) else None


def _alias(op: str) -> bool:
    """An op whose output is its input's values (reshaped, broadcast, copied): no statement of its own."""
    return op_facts.has(op, "same_values")


class _Unsupported(Exception):
    """The graph has something a row kernel does not do."""


class _Segment:
    """One inner loop over the columns of a row."""

    def __init__(self) -> None:
        self.nodes: list = []          # row-vector nodes computed in the loop, in order
        self.reductions: list = []     # nodes reducing a row vector of this loop (row or full)


def _over_columns(n) -> bool:
    """Whether a reduction node of a 2-D value reduces exactly its last dim (``dim=1`` or ``-1``)."""
    dims = n.args[1]
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return [d % 2 for d in dims] == [1]


def _row_arange(part, rows: int) -> bool:
    return isinstance(part, np.ndarray) and part.ndim == 1 and part.shape[0] == rows and \
        np.array_equal(part, np.arange(rows))


def emit_row_kernel(graph: Graph, name: str, *, vector: dict, vector_import: str, fastmath: bool = False,
                    parallel: bool = False):
    """A :class:`~codegen.kernel_common.NumbaEmitted` computing ``graph`` row by row, or None when the
    graph is not one a row kernel takes (module docstring).  ``parallel``: the rows are split into
    :data:`~codegen.kernel_common.PARALLEL_CHUNKS` fixed chunks run over Numba's threads (sums over rows
    add the chunks' partial sums in chunk order, so they do not depend on the thread count)."""
    try:
        return _RowKernel(graph, name, vector, vector_import, fastmath, parallel).emit()
    except _Unsupported:
        return None


class RowRegionKernel:
    """A row kernel for a part of a graph (:mod:`codegen.row_regions`): its kernel sources and the glue
    statement calling it on arrays the caller names (the caller reshapes them to 2-D)."""

    def __init__(self, kernel: _RowKernel, kernels: list[str]) -> None:
        self.kernels = kernels
        self.scalars = {v.name: v.dtype.is_floating_point for v in kernel.graph.placeholders if kernel.kind[v] == S}
        self.params = [v.name for v in kernel.graph.placeholders]
        self.outputs = [v.name for v in kernel.out_params]
        self.rows, self.cols = kernel.rows, kernel.cols
        self.constants = [float(value) for _, value in kernel.constants]

    def call(self, index: int, args: dict[str, str], outs: dict[str, str]) -> tuple[list[str], str]:
        """``(kernel sources named for call ``index``, the glue statement)``: ``args`` maps each input's
        name to its 2-D array (or scalar) in the glue, ``outs`` each output's to the 2-D array to fill."""
        kernels = [re.sub(r"\brow_(kernel|block)_0\b", lambda m: f"row_{m.group(1)}_{index}", k) for k in self.kernels]
        sources = []
        for name in self.params:
            if name in self.scalars:
                sources.append(f"float({args[name]})" if self.scalars[name] else f"{args[name]}.item()")
            else:
                sources.append(args[name])
        sources += [outs[name] for name in self.outputs]
        sources += [str(self.rows), str(self.cols)] + [repr(c) for c in self.constants]
        # the kernel also returns its filled outputs and where an index was out of bounds (a region
        # has no indexing)
        results = ["_"] * (len(self.outputs) + 2)
        return kernels, f"    {', '.join(results)}, = row_kernel_{index}({', '.join(sources)})"


def emit_row_region(graph: Graph, *, vector: dict, vector_import: str, fastmath: bool = False,
                    parallel: bool = False) -> RowRegionKernel | None:
    """A :class:`RowRegionKernel` for the 2-D graph of a row region (:func:`codegen.row_regions.region_graph`),
    or None when a row kernel does not take it.  Its outputs must be row vectors or row values."""
    try:
        kernel = _RowKernel(graph, "row_region", vector, vector_import, fastmath, parallel)
        emitted = kernel.emit()
    except _Unsupported:
        return None
    if any(v not in kernel.out_params for v in graph.outputs):
        return None
    return RowRegionKernel(kernel, emitted.kernels)


class _RowKernel:
    def __init__(self, graph: Graph, name: str, vector: dict, vector_import: str, fastmath: bool,
                 parallel: bool = False) -> None:
        self.graph, self.name, self.fastmath, self.parallel = graph, name, fastmath, parallel
        # sin/cos need a range check and a libm rerun of the loop: they stay libm calls here
        self.vector = {k: v for k, v in vector.items() if k not in RANGE_CHECKED}
        self.vector_import = vector_import
        two_d = [p.shape for p in graph.placeholders if len(p.shape) == 2]
        if not two_d or two_d[0][1] < 2:
            raise _Unsupported
        self.rows, self.cols = two_d[0]
        self.nodes = _decompose_softmax(graph.nodes)
        # the graph's inputs: a placeholder may still name the node that computed it in another graph
        # (a forward's output the backward reads), so ``producer`` does not tell an input
        self.inputs = set(graph.placeholders)
        self.names = {v.name: _ident(v.name) for v in graph.placeholders}
        for n in self.nodes:
            for o in n.outputs:
                self.names[o.name] = _ident(o.name)
        self.kind: dict[Value, str] = {}
        self.users: dict[Value, list] = {}
        for n in self.nodes:
            for v in n.inputs:
                self.users.setdefault(v, []).append(n)

    # --- classification -----------------------------------------------------------------------
    def _shape_kind(self, v: Value) -> str:
        if v.dtype.is_floating_point and v.dtype.np not in (np.float64, np.float32):
            raise _Unsupported
        shape = tuple(v.shape)
        if shape == ():
            return S
        if shape in ((self.rows,), (self.rows, 1)):
            return R
        if shape == (self.rows, self.cols):
            return V
        raise _Unsupported

    def _index_of(self, ref) -> Value:
        """The per-row index Value of ``(arange(rows), idx)``."""
        if not isinstance(ref, IndexRef) or not isinstance(ref.parts, tuple) or len(ref.parts) != 2:
            raise _Unsupported
        first, idx = ref.parts
        if not _row_arange(first, self.rows) or not isinstance(idx, Value) or self.kind.get(idx) != R or \
                idx.dtype.is_floating_point or idx.dtype.np == np.bool_:
            raise _Unsupported
        return idx

    # --- planning -----------------------------------------------------------------------------
    def plan(self) -> None:
        """Assign every node to a step: ``("pre", n)`` before the row loop, ``("row", n)`` once per row,
        ``("loop", segment)`` an inner loop, ``("total", n)`` a sum over rows."""
        for p in self.graph.placeholders:
            self.kind[p] = self._shape_kind(p)
        self.steps: list = []
        self.pre: list = []               # scalar nodes (no row in them): computed once, before the rows
        self.post: list = []              # scalar nodes of sums over rows: computed once, after the rows
        self.after_rows: set[Value] = set()
        self.gathered: set[Value] = set()  # computed row vectors one element per row is picked from
        self.segments: list[_Segment] = []
        self.open_seg: _Segment | None = None
        self.open_pos = 0                 # where steps independent of the open loop go (before it)
        self.pending: set[Value] = set()  # row values the open loop's reductions produce
        self.seg_of: dict[Value, _Segment] = {}
        self.onehot: dict[Value, tuple] = {}          # H value -> (index Value, value Value)
        self.fixups: dict[Node, Value] = {}           # V add node -> the H value it merges
        self.onehot_sums: set[Value] = set()          # row sums of one-hot rows (their one value)
        # row values computed from the (rows,) inputs alone (labels, masks), and the sums over rows of
        # such values (a mean's count of labels not ignored): those sums run in a first, cheap loop
        # over the rows, so that the main loop may read them
        self.label_rows: set[Value] = set()
        self.pre_totals: list[Node] = []
        self.outputs = outputs = {v for v in self.graph.outputs if v is not None}
        for n in self.nodes:
            if len(n.outputs) != 1:
                raise _Unsupported
            if any(v in self.after_rows for v in n.inputs) and self._shape_kind(n.outputs[0]) != S:
                raise _Unsupported   # a row reads a sum over all rows
            step = self._classify(n)
            if step is not None:
                self._place(step, n.inputs)
        if not self.onehot_sums and not any(self._after_reduction(seg) for seg in self.segments):
            # one pass over the batch: the fuser's loops do the same (except for a one-hot's row sum,
            # for which they would write the one-hot out as a dense array)
            raise _Unsupported
        for o in outputs:
            if o in self.inputs:
                continue   # an input the graph returns (a forward saving it): the glue passes it on
            if self.kind.get(o) not in (S, R, V) or (self.kind[o] == V and self.seg_of.get(o) is None):
                raise _Unsupported

    def _classify(self, n):
        """Set the kind of ``n``'s output; put ``n`` in a loop, ``pre`` or ``post``, or return its
        per-row step (``("row", n)`` or ``("total", n)``) for :meth:`_place`."""
        o = n.outputs[0]
        kinds = [self.kind[v] for v in n.inputs]
        if n.op in _PLAN_STEPS:
            return _PLAN_STEPS[n.op](self, n)
        if _full_reduction(n.op) and o.shape == ():
            return self._plan_total(n, kinds)
        if _full_reduction(n.op) and _row_reduction(n.op) and kinds == [H]:
            # a one-hot row sums to its one value (zeros add exactly; that value is never -0.0)
            if not _over_columns(n) or n.args[-1] is not None or self._shape_kind(o) != R:
                raise _Unsupported
            self.kind[o] = R
            self.onehot_sums.add(o)
            return ("row", n)
        if _row_reduction(n.op):
            return self._plan_row_reduction(n, kinds)
        return self._plan_per_element(n, kinds)

    def _place(self, step, ins) -> None:
        """A per-row step: after the open loop if it needs that loop's reductions, else before it."""
        if self.open_seg is not None and any(v in self.pending for v in ins):
            self._close()
        if self.open_seg is not None:
            self.steps.insert(self.open_pos, step)
            self.open_pos += 1
        else:
            self.steps.append(step)

    def _close(self) -> None:
        self.open_seg, self.pending = None, set()

    def _plan_onehot(self, n):
        """``index_put_add`` of one value per row at the row's index (a one-hot row)."""
        o = n.outputs[0]
        self.kind[o] = H
        values, shape, ref = n.args[:3]
        if not isinstance(values, Value) or self.kind.get(values) != R or \
                tuple(shape) != (self.rows, self.cols) or len(values.shape) != 1:
            raise _Unsupported
        self.onehot[o] = (self._index_of(ref), values)
        if o in self.outputs:
            raise _Unsupported
        return ("row", n)

    def _plan_constant(self, n):
        """A number baked into the graph (a seed 1): a scalar of the kernel, passed as a constant."""
        o = n.outputs[0]
        if o.shape != () or o.dtype.np not in (np.float64, np.float32, np.int64, np.bool_):
            raise _Unsupported
        self.kind[o] = S
        self.pre.append(n)
        return None

    def _plan_total(self, n, kinds):
        """A sum or mean to a scalar: of row values, a sum over rows; of row vectors, also a loop's."""
        o = n.outputs[0]
        if n.args[-1] is not None or kinds[0] not in (R, V):
            raise _Unsupported
        self.kind[o] = S
        if n.inputs[0] in self.label_rows and not self.parallel:
            self.pre_totals.append(n)     # summed in the first loop over the rows: ready before the main one
            return None
        self.after_rows.add(o)
        if kinds[0] == V:
            self._loop_for(n).reductions.append(n)
            return None
        return ("total", n)

    def _plan_row_reduction(self, n, kinds):
        """A reduction of a row vector over its columns: an accumulator of the loop."""
        o = n.outputs[0]
        if kinds != [V] or not _over_columns(n) or (_full_reduction(n.op) and n.args[-1] is not None):
            raise _Unsupported
        self.kind[o] = R
        if self._shape_kind(o) != R:
            raise _Unsupported
        self._loop_for(n).reductions.append(n)
        self.pending.add(o)
        return None

    def _plan_per_element(self, n, kinds):
        """Elementwise ops, ``where``, casts, views and broadcasts, and the per-row gather."""
        o, ins = n.outputs[0], n.inputs
        ok = n.is_elementwise or statement_for(n) is not None or n.op == "index.Tensor" or _alias(n.op)
        if not ok or H in kinds and not self._merges_onehot(n, o, self.outputs):
            raise _Unsupported
        k = self._shape_kind(o)
        broadcast = op_facts.has(n.op, "broadcast")
        if n.op == "index.Tensor":
            x = n.args[0]
            if k != R or self.kind.get(x) != V:
                raise _Unsupported
            self._index_of(n.args[1])
            if x not in self.inputs and self.seg_of.get(x) is not None:
                self.gathered.add(x)          # read from its row buffer, after its loop
                if self.seg_of[x] is self.open_seg:
                    self._close()
        elif _alias(n.op) and not broadcast and kinds[0] != k:
            raise _Unsupported   # a view changing what a row holds
        elif broadcast and kinds[0] == R and ins[0].shape != (self.rows, 1) and k == V:
            raise _Unsupported   # (rows,) broadcast along the last dim: not per row
        for v, kv in zip(ins, kinds):
            if k == V and kv == R and v.shape != (self.rows, 1) and not broadcast:
                raise _Unsupported   # (rows,) against (rows, cols) pairs by column
            if k == R and kv == R and not _alias(n.op) and v.shape != o.shape:
                raise _Unsupported
        self.kind[o] = k
        if k == V and _alias(n.op) and kinds[0] != V:
            self.seg_of[o] = None   # a row value broadcast along the row: an alias, no loop
            return ("row", n)
        if k == V:
            seg = self._loop_for(n)
            seg.nodes.append(n)
            self.seg_of[o] = seg
            return None
        if k == S:
            if any(v in self.after_rows for v in ins):
                self.post.append(n)
                self.after_rows.add(o)
            else:
                self.pre.append(n)
            return None
        if n.op != "index.Tensor" and all(v in self.label_rows or (v in self.inputs and self.kind[v] == R)
                                          for v in ins):
            self.label_rows.add(o)
        return ("row", n)

    def _merges_onehot(self, n, o, outputs) -> bool:
        """``H + X`` or ``H - X`` with a row vector X, written only to an output: the loop writes
        ``0.0 +- X`` and the row's index then gets ``h + that`` (the same bits as eager's
        ``(0.0 + h) +- X``: the two differ only for ``h == -0.0``, which ``h = 0.0 + value`` never is)."""
        if n.op not in ("add.Tensor", "sub.Tensor") or not n.is_elementwise or o not in outputs or self.users.get(o):
            return False
        hs = [v for v in n.inputs if self.kind[v] == H]
        others = [v for v in n.inputs if self.kind[v] != H]
        e = n.expr
        if len(hs) != 1 or len(others) != 1 or self.kind[others[0]] != V or not isinstance(e, sympy.Add):
            return False
        h = sympy.Symbol(hs[0].name)
        if len(e.args) != 2 or h not in e.args or any(a.has(h) for a in e.args if a != h):
            return False
        self.fixups[n] = hs[0]
        return True

    def _loop_for(self, n) -> _Segment:
        """The loop a row-vector node (or a reduction of one) goes into: the open one unless it reads a
        row value that loop is still reducing."""
        if self.open_seg is not None and any(self._row_source(v) in self.pending for v in n.inputs):
            self._close()
        if self.open_seg is None:
            self.open_seg = _Segment()
            self.segments.append(self.open_seg)
            self.steps.append(("loop", self.open_seg))
            self.open_pos = len(self.steps) - 1
        return self.open_seg

    def _row_source(self, v: Value) -> Value:
        """A broadcast row vector's row value (what it reads), else ``v``."""
        while v not in self.inputs and self.kind.get(v) == V and self.seg_of.get(v, 1) is None:
            v = v.producer.inputs[0]
        return v

    def _after_reduction(self, seg: _Segment) -> bool:
        """Whether this loop reads a row value made by an earlier loop's reduction."""
        earlier = set()
        for s in self.segments:
            if s is seg:
                break
            earlier.update(r.outputs[0] for r in s.reductions)
        reads = set()
        for n in seg.nodes:
            reads.update(self._row_source(v) for v in n.inputs)
        return bool(reads & _row_closure(earlier, self.nodes))

    # --- code ---------------------------------------------------------------------------------
    def emit(self):
        """The kernels and glue, in named steps; each step appends the lines it writes, in order
        (constants get their names ``k0, k1, ...`` in the order statements are printed)."""
        self.plan()
        self._name_values()
        body = self._row_input_lines()
        pre = self._pre_total_lines(body)
        self._scalar_steps(self.pre, pre)
        for kind, item in self.steps:
            if kind == "row":
                self._row_step(item, body)
            elif kind == "total":
                self._total_step(item, body)
            else:
                self._loop_step(item, body)
        body += self._row_output_lines()
        after = self._after_rows_lines()
        kernels, results = self._kernels(body, pre, after)
        ns = scalar_namespace()
        ns.update({"np": np})
        imports = vector_imports("from codegen.scalar_math import rmax, rmin", self.vector_import)
        return NumbaEmitted(self.name, "\n".join(self._glue(results)), kernels, ns, imports, "vector")

    def _name_values(self) -> None:
        """The kernel's names: of values (``local``, updated as statements are written), row buffers
        (``later``), output parameters, sums over rows and column indices."""
        g, names = self.graph, self.names
        self.local = local = {v.name: names[v.name] for v in g.placeholders}
        for n in self.nodes:
            local[n.outputs[0].name] = names[n.outputs[0].name]
        self.constants: list = []
        self.printer = KernelPrinter(local, self.vector)
        outputs = [v for v in g.outputs if v is not None]
        # row vectors a later loop reads: kept in a row buffer
        self.later = later = {}
        for seg in self.segments:
            for n in seg.nodes + seg.reductions:
                for v in n.inputs:
                    if self.kind.get(v) == V and self.seg_of.get(v) not in (None, seg) and v not in self.inputs:
                        later[v] = f"row_{names[v.name]}"
        for v in self.gathered:
            later[v] = f"row_{names[v.name]}"
        self.params = [names[v.name] for v in g.placeholders]
        self.computed = [v for v in outputs if v not in self.inputs]
        self.out_params = {v: f"out_{names[v.name].rstrip('_')}" for v in self.computed if self.kind[v] in (R, V)}
        self.totals = {n.outputs[0]: f"total_{names[n.outputs[0].name].rstrip('_')}" for n in self.nodes
                       if _full_reduction(n.op) and n.outputs[0].shape == ()}
        self.index_vars: dict[Value, str] = {}

    def _code_of(self, n) -> str:
        self.printer.suffix = compute_suffix(n)
        if n.op == "constant":
            value = n.data.item()
            if isinstance(value, float):
                return rounded_to_dtype(n, self.printer.doprint(lift_constants(sympy.Float(value), self.constants)))
            return repr(value)
        lower = statement_for(n)
        if lower is not None:
            return rounded_to_dtype(n, lower(n, self.printer, self.constants))
        return rounded_to_dtype(n, self.printer.doprint(lift_constants(n.expr, self.constants)))

    def _comment(self, n) -> str:
        # sizes stay out of the kernel's text (and so out of its cache key): n0 rows, n1 columns
        o = n.outputs[0]
        short = SHORT_DTYPES.get(o.dtype.name, o.dtype.name)
        dims = {V: "n0, n1", R: "n0" if len(o.shape) == 1 else "n0, 1", S: ""}.get(self.kind.get(o), "n0, n1")
        args = ", ".join("(arange(n0), …)" if isinstance(a, IndexRef) else generic_arg(a, self.constants, "")
                         for a in n.args)
        return f"# %{o.name}: {short}[{dims}] = {n.op}({args})"

    def _index_lines(self, idx: Value, pad: str) -> list[str]:
        """A row's column index ``col_<idx>``, checked (once per row and index value)."""
        if idx in self.index_vars:
            return []
        var = self.index_vars[idx] = f"col_{self.names[idx.name].rstrip('_')}"
        read = self.local[idx.name]
        return [f"{pad}{var} = {read}",
                f"{pad}if {var} < 0:",
                f"{pad}    {var} += n1",
                f"{pad}if {var} < 0 or {var} >= n1:  # numpy raises IndexError: the glue does",
                f"{pad}    bad_row = i",
                f"{pad}    bad_index = {read}",
                f"{pad}    {var} = 0"]

    def _row_input_lines(self) -> list[str]:
        """Each row's one number of the ``(rows,)`` / ``(rows, 1)`` inputs."""
        g, names, lines = self.graph, self.names, []
        for v in sorted((v for v in g.placeholders if self.kind[v] == R), key=lambda v: g.placeholders.index(v)):
            read = f"{names[v.name]}[i, 0]" if len(v.shape) == 2 else f"{names[v.name]}[i]"
            self.local[v.name] = f"{names[v.name].rstrip('_')}_in"
            lines.append(f"{_PAD}{self.local[v.name]} = {read}")
        return lines

    def _pre_total_lines(self, input_lines: list[str]) -> list[str]:
        """The first loop over the rows, for the sums of :attr:`label_rows` values, and their values."""
        if not self.pre_totals:
            return []
        chain: set[Value] = set()
        todo = [n.inputs[0] for n in self.pre_totals]
        while todo:
            v = todo.pop()
            if v in self.label_rows and v not in chain:
                chain.add(v)
                todo += v.producer.inputs
        lines = ["    for i in range(n0):  # sums over the rows of what the labels alone decide"] + input_lines
        for n in self.nodes:
            o = n.outputs[0]
            if o not in chain:
                continue
            if _alias(n.op):
                self.local[o.name] = self.local[n.inputs[0].name]
                continue
            lines.append(f"{_PAD}{self._comment(n)}")
            lines.append(f"{_PAD}{self.local[o.name]} = {self._code_of(n)}")
        for n in self.pre_totals:
            lines.append(f"{_PAD}{self._comment(n)}")
            lines.append(f"{_PAD}{self.totals[n.outputs[0]]} += {self.local[n.inputs[0].name]}")
        for n in self.pre_totals:
            lines += self._total_value_lines(n)
        return lines

    def _total_value_lines(self, n) -> list[str]:
        """A sum (or mean) over rows, from its accumulator."""
        o = n.outputs[0]
        count = ("n0 * n1" if self.kind[n.inputs[0]] == V else "n0") if _full_reduction(n.op) == "mean" else None
        self.local[o.name] = self.names[o.name]
        total = self.totals[o]
        value = f"{total} / ({count})" if count else total
        return [f"    {self.local[o.name]} = {rounded_to_dtype(n, value)}"]

    def _scalar_steps(self, nodes: list, lines: list[str]) -> None:
        """Scalar nodes computed once (before or after the rows), as statements of the kernel."""
        for n in nodes:
            o = n.outputs[0]
            if _alias(n.op):
                self.local[o.name] = self.local[n.inputs[0].name]
                continue
            lines.append(f"    {self._comment(n)}")
            lines.append(f"    {self.local[o.name]} = {self._code_of(n)}")

    def _row_step(self, n, body: list[str]) -> None:
        """A node computed once per row (one number of it)."""
        o = n.outputs[0]
        if _alias(n.op):      # a view or broadcast of a row value: the same local
            self.local[o.name] = self.local[n.inputs[0].name]
            return
        body.append(f"{_PAD}{self._comment(n)}")
        step = _ROW_STEPS.get(n.op)
        if step is None and _full_reduction(n.op):
            step = _RowKernel._onehot_sum_step
        if step is not None:
            step(self, n, body)
        else:
            body.append(f"{_PAD}{self.local[o.name]} = {self._code_of(n)}")

    def _onehot_step(self, n, body: list[str]) -> None:
        idx, val = self.onehot[n.outputs[0]]
        body += self._index_lines(idx, _PAD)
        value = f"0.0 + {self.local[val.name]}  # its value at the row's index"
        body.append(f"{_PAD}{self.local[n.outputs[0].name]} = {value}")

    def _gather_step(self, n, body: list[str]) -> None:
        idx = self._index_of(n.args[1])
        body += self._index_lines(idx, _PAD)
        x, names, later = n.args[0], self.names, self.later
        src = f"{names[x.name]}[i, {self.index_vars[idx]}]" if x in self.inputs else \
            f"{later[x]}[{self.index_vars[idx]}]" if x in later else self.local[x.name]
        body.append(f"{_PAD}{self.local[n.outputs[0].name]} = {src}")

    def _onehot_sum_step(self, n, body: list[str]) -> None:
        # of a one-hot row: its one value
        h = self.local[n.inputs[0].name]
        body.append(f"{_PAD}{self.local[n.outputs[0].name]} = {h + ' / n1' if _full_reduction(n.op) == 'mean' else h}")

    def _total_step(self, n, body: list[str]) -> None:
        """A row value added to a sum over rows."""
        body.append(f"{_PAD}{self._comment(n)}")
        body.append(f"{_PAD}{self.totals[n.outputs[0]]} += {self.local[n.inputs[0].name]}")

    def _loop_step(self, seg: _Segment, body: list[str]) -> None:
        """An inner loop over the row's columns, and its reductions."""
        names, local, later, out_params = self.names, self.local, self.later, self.out_params
        pad, inner = _PAD, _PAD + "    "
        accs = []
        for r in seg.reductions:
            how = _row_reduction(r.op) or "sum" if r.outputs[0].shape != () else "sum"
            acc = f"acc_{names[r.outputs[0].name].rstrip('_')}"
            accs.append((r, acc, how))
            body.append(f"{pad}{acc} = {_INIT[how]}")
        body.append(f"{pad}for j in range(n1):")
        reads = []
        for n in seg.nodes + seg.reductions:
            for v in n.inputs:
                if self.kind.get(v) == V and v in self.inputs and v not in reads:
                    reads.append(v)
        for v in reads:
            local[v.name] = f"{names[v.name].rstrip('_')}_ij"
            body.append(f"{inner}{local[v.name]} = {names[v.name]}[i, j]")
        for v, buf in later.items():
            if self.seg_of.get(v) is not seg and any(v in n.inputs for n in seg.nodes + seg.reductions):
                local[v.name] = f"{names[v.name].rstrip('_')}_j"
                body.append(f"{inner}{local[v.name]} = {buf}[j]")
        for n in seg.nodes:
            o = n.outputs[0]
            body.append(f"{inner}{self._comment(n)}")
            if n in self.fixups:
                local[self.fixups[n].name] = "0.0"   # zero off the row's index; merged after the loop
            lhs = f"{names[o.name]}"
            local[o.name] = lhs
            body.append(f"{inner}{lhs} = {self._code_of(n) if not _alias(n.op) else local[n.inputs[0].name]}")
            if o in out_params:
                body.append(f"{inner}{out_params[o]}[i, j] = {lhs}")
            if o in later:
                body.append(f"{inner}{later[o]}[j] = {lhs}")
        for r, acc, how in accs:
            body.append(f"{inner}{acc} = {_STEP[how]}({acc}, {local[r.inputs[0].name]})")
        for r, acc, how in accs:
            o = r.outputs[0]
            if o.shape == ():
                body.append(f"{pad}{self.totals[o]} += {acc}")
                continue
            value = f"{acc} / n1" if how == "mean" else acc
            local[o.name] = names[o.name]
            body.append(f"{pad}{names[o.name]} = {rounded_to_dtype(r, value)}  # {r.op} of row i")
        for n, h in self.fixups.items():
            if n in seg.nodes:
                idx, _ = self.onehot[h]
                col = self.index_vars[idx]
                body.append(f"{pad}# %{n.outputs[0].name} at the row's index also gets %{h.name}'s one value")
                body.append(f"{pad}{out_params[n.outputs[0]]}[i, {col}] = {names[h.name]} + "
                            f"{out_params[n.outputs[0]]}[i, {col}]")

    def _row_output_lines(self) -> list[str]:
        """The row's one number of each ``(rows,)`` / ``(rows, 1)`` output."""
        lines = []
        for v, out in self.out_params.items():
            if self.kind[v] == R:
                at = "[i, 0]" if len(v.shape) == 2 else "[i]"
                lines.append(f"{_PAD}{out}{at} = {self.local[v.name]}")
        return lines

    def _after_rows_lines(self) -> list[str]:
        """After the rows: the sums over rows, and what is computed from them."""
        after = []
        for n in self.nodes:
            if n.outputs[0] in self.totals and n not in self.pre_totals:
                after += self._total_value_lines(n)
        self._scalar_steps(self.post, after)
        return after

    def _kernels(self, body: list[str], pre: list[str], after: list[str]) -> tuple[list[str], list[str]]:
        """The kernel sources (one serial function, or a chunk function and a parallel wrapper) and the
        names the kernel returns."""
        local, totals = self.local, self.totals
        scalar_outs = list(dict.fromkeys(local[v.name] for v in self.computed if self.kind[v] == S))
        const_params = [c for c, _ in self.constants]
        all_params = self.params + list(self.out_params.values()) + ["n0", "n1"] + const_params
        buffers = []
        for v, buf in sorted(self.later.items(), key=lambda item: item[1]):
            dtype = "" if v.dtype.np == np.float64 else ", np.bool_" if v.dtype.np == np.bool_ else \
                f", np.{np.dtype(v.dtype.np).name}"
            buffers.append(f"    {buf} = np.empty(n1{dtype})  # one row of a value a later loop reads (stays in L1)")

        def rows_function(fname: str, extra: list[str], rows: str) -> list[str]:
            return ([f"def {fname}({', '.join(all_params + extra)}):",
                     "    wide_vectors()  # vectorise with the widest vectors the CPU has",
                     "    distinct_arrays()  # the glue never passes overlapping arrays",
                     "    bad_row = -1  # a row whose index is out of bounds (IndexError in the glue)",
                     "    bad_index = 0"] + buffers + [f"    {t} = 0.0" for t in totals.values()] + pre
                    + [f"    for i in {rows}:"] + body)

        results = list(self.out_params.values()) + scalar_outs + ["bad_row", "bad_index"]
        if not self.parallel:
            kernel = "\n".join(rows_function("row_kernel_0", [], "range(n0)") + after
                               + [f"    return ({', '.join(results)},)"])
            return [decorator(False, self.fastmath, True) + "\n" + kernel], results
        # Each chunk of rows runs the serial function: called, not inlined into the parallel loop's
        # outlined body, it keeps its arrays' noalias promise (inside that body the arrays are loaded
        # from the gufunc's argument block, LLVM checks their overlap at run time, and the last bits of a
        # row's sum depended on where the chunk's row buffers were: on the thread count).
        chunks = PARALLEL_CHUNKS
        block_results = list(totals.values()) + ["bad_row", "bad_index"]
        block = rows_function("row_block_0", ["lo", "hi"], "range(lo, hi)") + \
            [f"    return ({', '.join(block_results)},)"]
        parts = [f"part_{t}" for t in totals.values()]
        wrapper = [f"def row_kernel_0({', '.join(all_params)}):"] + pre
        wrapper += [f"    {p} = np.zeros({chunks})" for p in parts]
        wrapper += [f"    bad_rows = np.full({chunks}, -1, np.int64)",
                    f"    bad_indices = np.zeros({chunks}, np.int64)",
                    f"    for c in prange({chunks}):  # fixed chunks of rows over Numba's threads",
                    f"        lo = c * n0 // {chunks}",
                    f"        hi = (c + 1) * n0 // {chunks}",
                    f"        chunk = row_block_0({', '.join(all_params)}, lo, hi)"]
        wrapper += [f"        {p}[c] = chunk[{k}]" for k, p in enumerate(parts)]
        wrapper += [f"        bad_rows[c] = chunk[{len(parts)}]",
                    f"        bad_indices[c] = chunk[{len(parts) + 1}]"]
        for t, p in zip(totals.values(), parts):
            # in chunk order (``.sum()`` in a parallel function became a parallel reduction: its last
            # bits depended on the thread count)
            wrapper += [f"    {t} = 0.0", f"    for c in range({chunks}):", f"        {t} += {p}[c]"]
        wrapper += ["    bad_row = -1", "    bad_index = 0", f"    for c in range({chunks}):",
                    "        if bad_row < 0 and bad_rows[c] >= 0:",
                    "            bad_row = bad_rows[c]", "            bad_index = bad_indices[c]"]
        wrapper += after + [f"    return ({', '.join(results)},)"]
        return [decorator(False, self.fastmath, True) + "\n" + "\n".join(block),
                decorator(True, self.fastmath, True) + "\n" + "\n".join(wrapper)], results

    def _glue(self, results: list[str]) -> list[str]:
        """The Python function that calls the kernel, raises its IndexError and returns the outputs."""
        g, names, out_params = self.graph, self.names, self.out_params
        glue = [f"def {self.name}({', '.join(self.params)}):"]
        args = []
        for v in g.placeholders:
            if self.kind[v] == S:
                args.append(f"float({names[v.name]})" if v.dtype.is_floating_point else f"{names[v.name]}.item()")
            else:
                args.append(names[v.name])
        for v in out_params:
            args.append(f"np.empty({tuple(int(s) for s in v.shape)!r}, dtype=np.{np.dtype(v.dtype.np).name})")
        args += [str(self.rows), str(self.cols)] + [repr(float(value)) for _, value in self.constants]
        glue.append(f"    # one loop over the {self.rows} rows; per row {len(self.segments)} loops over its "
                    f"{self.cols} columns (codegen/row_kernel.py)")
        glue.append(f"    {', '.join(results)}, = row_kernel_0({', '.join(args)})")
        glue.append("    if bad_row >= 0:")
        glue.append("        raise IndexError(f'index {bad_index} is out of bounds for axis 1 with size "
                    f"{self.cols} (row {{bad_row}})')")
        rets = []
        for v in g.outputs:
            if v is None or v in self.inputs or v in out_params:
                rets.append("None" if v is None else names[v.name] if v in self.inputs else out_params[v])
            elif v.dtype.np != np.float64:   # the kernel's scalars are float64: the output keeps its dtype
                rets.append(f"np.asarray({self.local[v.name]}, dtype={np.dtype(v.dtype.np).name!r})")
            else:
                rets.append(self.local[v.name])
        glue.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
        return glue


# How the planner takes the ops that are not elementwise, a view or a reduction: ``plan(kernel, node)``
# returns the node's per-row step (or None when it went into a loop).
_PLAN_STEPS: dict[str, Callable] = {
    "index_put_add": _RowKernel._plan_onehot,
    "constant": _RowKernel._plan_constant,
}

# Row steps of the ops that are not one scalar statement: ``step(kernel, node, body)``.
_ROW_STEPS: dict[str, Callable] = {
    "index_put_add": _RowKernel._onehot_step,   # one value per row, at the row's index
    "index.Tensor": _RowKernel._gather_step,    # x[arange(rows), idx]: one element per row
}


def _row_closure(values: set, nodes: list) -> set:
    """``values`` and the row values computed from them by per-row steps (aliases and elementwise)."""
    out = set(values)
    for n in nodes:
        if any(v in out for v in n.inputs) and n.outputs[0].shape != () and len(n.outputs[0].shape) <= 2:
            if tuple(n.outputs[0].shape[1:]) in ((), (1,)):
                out.update(n.outputs)
    return out


def _decompose_softmax(nodes: list) -> list:
    """The nodes with each ``_softmax``/``_log_softmax`` over the last dim of a 2-D value written out as
    the eager forward computes it (symgrad/ops/functional.py): ``m = amax(x)``, ``t = x - m``,
    ``e = exp(t)``, ``s = sum(e)``, then ``e / s`` or ``t - log(s)``, so that each step lands in the
    row kernel's loops."""
    out = []
    for n in nodes:
        x = n.args[0] if n.args else None
        if n.op not in ("_softmax", "_log_softmax") or not isinstance(x, Value) or len(x.shape) != 2 or \
                not isinstance(n.args[1], int) or n.args[1] % 2 != 1:
            out.append(n)
            continue
        o = n.outputs[0]
        rows = (x.shape[0], 1)

        def value(suffix, shape, o=o):
            return Value(f"{o.name}_{suffix}", o.dtype, shape)

        def sym(v):
            return sympy.Symbol(v.name)

        m, t, e, s = value("max", rows), value("shifted", x.shape), value("exp", x.shape), value("sum", rows)
        steps = [Node("amax", (x, (1,), True), [m]),
                 Node("sub.Tensor", (x, m), [t], expr=sym(x) - sym(m)),
                 Node("exp", (t,), [e], expr=sympy.exp(sym(t))),
                 Node("sum.dim_IntList", (e, (1,), True, None), [s])]
        if n.op == "_softmax":
            steps.append(Node("div.Tensor", (e, s), [o], expr=sym(e) / sym(s)))
        else:
            lg = value("log", rows)
            steps += [Node("log", (s,), [lg], expr=sympy.log(sym(s))),
                      Node("sub.Tensor", (t, lg), [o], expr=sym(t) - sym(lg))]
        for step in steps[:-1]:
            step.outputs[0].producer = step   # the new values are computed, not inputs (o keeps its node)
        out += steps
    return out
