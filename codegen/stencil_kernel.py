"""Stencil kernels: graphs of slices, flips, concatenations, pads and their gradients as shifted reads in loops.

The loop fuser (:mod:`codegen.fuse`) fuses nodes of one shape; a slice changes the shape, so a stencil
loss such as a heat-equation residual ``(u[2:] - 2*u[1:-1] + u[:-2]) / dx**2 - f[1:-1]`` falls apart
into loops joined by slices made as arrays, and its gradient into zero-padded ``slice_backward`` arrays
that the next loop adds.  Here a graph of elementwise nodes, ops tagged ``shifted_read`` (whose index
maps :mod:`codegen.shifted_reads` registers) and ``sum``/``mean`` reductions becomes one loop nest per
output shape: each output is computed where it is written, reading the placeholders at shifted
positions and recomputing the elementwise values it needs there (as XLA's loop fusion does).  A
``slice_backward`` is then no array but a choice at each position of the gradient: the element of the
slice's gradient that lands there, or nothing.  A reduction over all dims is one number the loop
returns; one over the trailing dims (a row sum) is an accumulator started before the loops over
those dims and written to its array after them; one over other dims (a broadcast's gradient) adds
each element into its place of a zeroed array.  Later loops read those arrays as any array.

The positions where such a choice changes are known when the kernel is written.  Each loop is split
at them: long runs of positions get a body of their own in which every choice is made already (so it
vectorises like any loop), the few positions near the edges share one body that tests each choice.

A heat residual's value and gradient are then two loops, one over the residual, one over the gradient:

>>> import numpy as np, symgrad
>>> from symgrad.compiler.autodiff import autodiff
>>> f = lambda u: (((u[2:] - 2 * u[1:-1] + u[:-2]) * 4.0) ** 2).sum()
>>> e = emit_stencil_kernel(autodiff(symgrad.trace(f, np.ones(100)), [0]), "joint", vector={})
>>> len(e.kernels), "slice_backward(" in e.source
(2, False)
"""

from __future__ import annotations

import math

import numpy as np
import sympy

from symgrad.ir.graph import Graph, Node, Value

from . import op_facts
from .emit import _ident, node_statements
from .fuse import reduction_dims
from .kernel_common import (
    RANGE_CHECKED,
    KernelPrinter,
    NumbaEmitted,
    compute_suffix,
    decorator,
    lift_constants,
    rounded_to_dtype,
    scalar_namespace,
    vector_imports,
)
from .partition import CHEAP_FUNCTIONS
from .shifted_reads import IN_PLACE_READS, READ_MAPS, Guard, Idx, NotShifted, broadcast_position, pieces

# A run of positions of a loop dim at least this long gets a body of its own, with every choice
# between the pieces of a shifted read made; shorter runs (the edges) share a body that tests them.
MIN_RUN = 16
# At most this many such runs per dim (a cat of many parts): the others share the testing body.
MAX_RUNS = 4
# A kernel beyond this many statements (many values recomputed at many shifts) is not written: the
# loop fuser's kernels run instead (Numba's compile time grows with a kernel's length).
MAX_STATEMENTS = 1500


class _Unsupported(Exception):
    """The graph has something a stencil kernel does not compute (the loop fuser's kernels run)."""


# what a node is to a stencil kernel
_LEAF, _ELEMENTWISE, _SHIFTED, _SAME, _REDUCTION = "leaf", "elementwise", "shifted", "same", "reduction"


def _kind(node: Node) -> str:
    if node.op == "constant":
        return _LEAF
    if node.is_elementwise and len(node.outputs) == 1:
        return _ELEMENTWISE
    if op_facts.has(node.op, "shifted_read") and node.op in READ_MAPS:
        return _SHIFTED
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if out is not None and op_facts.has(node.op, "same_values") and node.inputs and \
            tuple(node.inputs[0].shape) == tuple(out.shape) and node.inputs[0].dtype is out.dtype:
        return _SAME
    if out is not None and node.inputs and out.dtype.is_floating_point and _reduction_form(node) is not None:
        return _REDUCTION
    raise _Unsupported(node.op)


# how a loop computes a sum/mean: one number (over all dims), a row accumulator (over the trailing
# dims), or adds into an array (over other dims)
_ALL, _ROWS, _SPREAD = "all", "rows", "spread"


def _reduction_form(node: Node) -> tuple[str, tuple[int, ...]] | None:
    """``(form, reduced dims)`` of a ``sum``/``mean`` a stencil loop computes, else None (kept per node in
    :attr:`_Plan.forms`)."""
    src = node.args[0] if node.args else None
    dims = reduction_dims(node, len(src.shape)) if isinstance(src, Value) else None
    if dims is None:
        return None
    rank, reduced = len(src.shape), dims[0]
    if reduced == tuple(range(rank)):
        return _ALL, reduced
    if not reduced:
        return None
    return (_ROWS if reduced == tuple(range(reduced[0], rank)) else _SPREAD), reduced


def _reduced_count(r: Node, reduced: tuple[int, ...]) -> int:
    """How many elements each result of reduction ``r`` over dims ``reduced`` sums (a mean's divisor)."""
    return int(np.prod([int(r.args[0].shape[d]) for d in reduced]))


def _zero(v: Value) -> str:
    """The literal zero of ``v``'s dtype (what a gradient is where no slice lands)."""
    dtype = v.dtype.np
    if dtype == np.bool_:
        return "False"
    if np.issubdtype(dtype, np.integer):
        return "0"
    return "0.0" if dtype == np.float64 else f"np.{np.dtype(dtype).name}(0.0)"


def _literal(value, v: Value) -> str:
    """A uniform constant's value as an atom of kernel source."""
    dtype = np.dtype(v.dtype.np)
    if dtype == np.bool_:
        return repr(bool(value))
    if np.issubdtype(dtype, np.integer):
        return f"({int(value)})"
    x = float(value)
    text = "np.nan" if math.isnan(x) else ("np.inf" if x == math.inf else ("(-np.inf)" if x == -math.inf
                                                                          else f"({x!r})"))
    return text if dtype == np.float64 else f"np.{dtype.name}({text})"


def _run_of(g: Guard, n: int) -> tuple[int, int]:
    """The loop positions ``[a, b)`` (within ``[0, n)``) where ``g``'s range holds (its step aside)."""
    c, off, lo, hi = g.at.coef, g.at.off, g.lo * g.at.div, g.hi * g.at.div   # floor(x / d) >= lo iff x >= lo * d
    if c > 0:
        a, b = -((off - lo) // c), -((off - hi) // c)      # ceil((lo - off) / c), ceil((hi - off) / c)
    else:
        c = -c
        a, b = (off - hi) // c + 1, (off - lo) // c + 1
    return min(max(a, 0), n), min(max(b, 0), n)


class _Kernel:
    """One loop nest: its roots (outputs written, reductions accumulated) over one domain."""

    def __init__(self, plan: _Plan, k: int, shape: tuple, vector: dict, vectorise: bool) -> None:
        self.plan, self.k, self.shape = plan, k, shape
        self.rank = len(shape)
        self.arrays: list[Value] = []       # outputs written
        self.reductions: list[Node] = []    # reductions accumulated (``acc_<j>``)
        self.params: dict[Value, str] = {}  # values read -> parameter name
        self.numbers: set[Value] = set()    # those passed as one number
        self.positions: dict[Value, set] = {}   # elementwise values -> positions computed at
        self.constants: list = []
        self.lifted: dict[Node, sympy.Expr] = {}
        self.printer = KernelPrinter({}, vector)
        self.vectorise = vectorise
        self.guards: set[Guard] = set()
        self.count = 0
        self.statements = 0

    def fresh(self, v: Value) -> str:
        self.count += 1
        return f"{self.plan.names[v.name].rstrip('_')}_v{self.count}"

    def param(self, v: Value) -> str:
        if v not in self.params:
            self.params[v] = "in_" + self.plan.names[v.name].rstrip("_")
        return self.params[v]

    def expression(self, node: Node) -> sympy.Expr:
        if node not in self.lifted:
            self.lifted[node] = lift_constants(node.expr, self.constants)
        return self.lifted[node]

    def out(self, v: Value) -> str:
        return "out_" + self.plan.names[v.name].rstrip("_")

    def form(self, r: Node) -> str:
        return self.plan.forms[r][0]

    def in_arrays(self) -> list[Node]:
        """The reductions this loop writes to arrays it is passed, in parameter order: row sums, then
        the others over some dims."""
        return [r for form in (_ROWS, _SPREAD) for r in self.reductions if self.form(r) == form]

    def partial_starts(self, depth: int) -> list[int]:
        """The row sums over the dims from ``depth`` on (their accumulators start at that loop)."""
        return [j for j, r in enumerate(self.reductions)
                if self.form(r) == _ROWS and self.plan.forms[r][1][0] == depth]

    def spread_at(self, r: Node) -> str:
        """Where an element of ``r``'s input lands in ``r``'s array (the kept dims; reduced ones kept as 0)."""
        reduced, keep = self.plan.forms[r][1], len(r.outputs[0].shape) == len(r.args[0].shape)
        at = [f"i{d}" if d not in reduced else "0" for d in range(len(r.args[0].shape))
              if d not in reduced or keep]
        return ", ".join(at)

    def partial_store(self, j: int, indent: str) -> str:
        """The statement writing row sum ``acc_<j>`` (a mean divided by its count) to its array."""
        r = self.reductions[j]
        k, out = self.plan.forms[r][1][0], r.outputs[0]
        at = [f"i{d}" for d in range(k)] + ["0"] * (len(out.shape) - k)   # kept dims: index 0
        value = f"acc_{j}"
        if op_facts.reduction_kind(r.op) == "mean":
            count = _reduced_count(r, self.plan.forms[r][1])
            value = f"acc_{j} / {count}" if count else "np.nan"
        return f"{indent}{self.out(out)}[{', '.join(at)}] = {value}"

    # --- the loop nest ----------------------------------------------------------------------

    def source(self) -> str:
        from .numba_emit import MAX_VECTOR_CALLS  # (numba_emit imports this module)

        text = self._source()
        vector = self.printer.vector
        calls = sum(text.count(f"{base}_{suffix}(") for base in vector.values() for suffix in ("f64", "f32"))
        if calls > MAX_VECTOR_CALLS:   # as the fuser's loops: many inline functions keep libm calls
            self.printer = KernelPrinter({}, {})
            self.count = self.statements = 0
            text = self._source()
        return text

    def _source(self) -> str:
        identity = tuple(Idx(d, 1, 0) for d in range(self.rank))
        # a first body that tests every choice: it finds the guards, hence where the loops split
        _Body(self, [None] * self.rank, "").roots(identity)
        self.statements = 0
        runs, edges = [], []
        for d, n in enumerate(self.shape):
            cuts = {0, n}
            for g in self.guards:
                if g.at.var == d:
                    cuts.update(_run_of(g, n))
            points = sorted(cuts)
            segments = [(a, b) for a, b in zip(points, points[1:]) if b > a]
            long = [s for s in segments if s[1] - s[0] >= MIN_RUN or len(segments) == 1][:MAX_RUNS]
            short: list[list[int]] = []
            for s in segments:
                if s in long:
                    continue
                if short and short[-1][1] == s[0]:
                    short[-1][1] = s[1]
                else:
                    short.append(list(s))
            runs.append(long)
            edges.append([tuple(s) for s in short])
        lines = self._nest(0, [], "    ", runs, edges, identity)
        outs = [self.out(v) for v in self.arrays if v.shape != ()]
        outs += [self.out(r.outputs[0]) for r in self.in_arrays()]
        params = list(self.params.values()) + outs + [c for c, _ in self.constants]
        head = [f"def stencil_{self.k}({', '.join(params)}):"]
        if self.vectorise and self.rank:
            head.append("    wide_vectors()  # vectorise with the widest vectors the CPU has")
            head.append("    distinct_arrays()  # the glue never passes overlapping arrays")
        full = [j for j, r in enumerate(self.reductions) if self.form(r) == _ALL]
        head += [f"    acc_{j} = 0.0" for j in full]
        head += [f"    {self.out(v)} = {_zero(v)}" for v in self.arrays if v.shape == ()]
        results = [self.out(v) for v in self.arrays] + [f"acc_{j}" for j in full]
        tail = [f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})"]
        if self.statements > MAX_STATEMENTS:
            raise _Unsupported(f"{self.statements} statements")
        return "\n".join(head + lines + tail)

    def _nest(self, d: int, ranges: list, indent: str, runs: list, edges: list, identity) -> list[str]:
        if d == self.rank:
            body = _Body(self, ranges, indent)
            body.roots(identity)
            return body.lines
        # row sums over the dims from ``d`` on start here and are written once those loops end
        starts = self.partial_starts(d)
        lines = [f"{indent}acc_{j} = 0.0" for j in starts]
        for a, b in runs[d]:
            lines.append(f"{indent}for i{d} in range({a}, {b}):")
            inner = self._nest(d + 1, ranges + [(a, b)], indent + "    ", runs, edges, identity)
            lines += inner or [f"{indent}    pass  # an inner dim of size 0"]
        if edges[d]:
            inner = indent + "    "
            if len(edges[d]) == 1:
                (a, b), = edges[d]
                lines.append(f"{indent}for i{d} in range({a}, {b}):")
            else:
                lines.append(f"{indent}for lo{d}, hi{d} in {tuple(edges[d])!r}:")
                lines.append(f"{inner}for i{d} in range(lo{d}, hi{d}):")
                inner += "    "
            closing: list[str] = []
            for e in range(d + 1, self.rank):   # every choice tested inside
                lines += [f"{inner}acc_{j} = 0.0" for j in self.partial_starts(e)]
                closing = [self.partial_store(j, inner) for j in self.partial_starts(e)] + closing
                lines.append(f"{inner}for i{e} in range({self.shape[e]}):")
                inner += "    "
            body = _Body(self, ranges + [None] * (self.rank - d), inner)
            body.roots(identity)
            lines += body.lines + closing
        return lines + [self.partial_store(j, indent) for j in starts]


class _Body:
    """The statements of one loop body: each value at each position it is read, computed once."""

    def __init__(self, kernel: _Kernel, ranges: list, indent: str) -> None:
        self.kernel, self.ranges, self.indent = kernel, ranges, indent
        self.lines: list[str] = []
        self.memo: dict = {}

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)
        self.kernel.statements += 1

    def roots(self, identity) -> None:
        kernel = self.kernel
        for v in kernel.arrays:
            code = self.value(v, identity)
            self.emit(f"{kernel.out(v)}[{', '.join(f'i{d}' for d in range(kernel.rank))}] = {code}"
                      if v.shape != () else f"{kernel.out(v)} = {code}")
        for j, r in enumerate(kernel.reductions):
            code = self.value(r.args[0], identity)
            if kernel.form(r) == _SPREAD:
                self.emit(f"{kernel.out(r.outputs[0])}[{kernel.spread_at(r)}] += {code}")
            else:
                self.emit(f"acc_{j} = radd(acc_{j}, {code})" if kernel.vectorise else f"acc_{j} += {code}")

    def holds(self, g: Guard) -> bool | None:
        """Whether ``g`` holds everywhere in this body (True), nowhere (False) or must be tested (None).

        A strided position (``div`` > 1) is exact wherever it is read (the guard of the strided slice's
        gradient it comes from holds there); its floor at the run's ends bounds it at those places.
        """
        at = g.at
        if at.var is None:
            v = at.off // at.div
            return g.lo <= v < g.hi and (v - g.lo) % g.step == 0
        self.kernel.guards.add(g)
        run = self.ranges[at.var]
        if run is None:
            return None
        a, b = run
        ends = ((at.off + at.coef * a) // at.div, (at.off + at.coef * (b - 1)) // at.div)
        if max(ends) < g.lo or min(ends) >= g.hi:
            return False
        every_step = g.step == 1 or (at.div == 1 and at.coef % g.step == 0 and (at.off - g.lo) % g.step == 0)
        if min(ends) >= g.lo and max(ends) < g.hi and every_step:
            return True
        return None

    def value(self, v: Value, at: tuple) -> str:
        key = (v, at)
        if key in self.memo:
            return self.memo[key]
        code = self._compute(v, at)
        self.memo[key] = code
        return code

    def _compute(self, v: Value, at: tuple) -> str:
        kernel, plan = self.kernel, self.kernel.plan
        node = None if v in plan.inputs else v.producer
        kind = plan.kinds.get(node) if node is not None else _LEAF
        if node is not None and node in plan.uniform:
            return plan.uniform[node]
        if v in plan.materialised and v not in kernel.arrays:   # another loop wrote it: read there
            kind = _LEAF
        if kind in (_LEAF, _REDUCTION):
            param = kernel.param(v)
            full = kind == _REDUCTION and plan.forms[node][0] == _ALL
            if v.shape == () or full:   # a full reduction is one number, wherever it is read
                kernel.numbers.add(v)
                return param
            local = kernel.fresh(v)
            self.emit(f"{local} = {param}[{', '.join(i.text() for i in at)}]")
            return local
        if kind == _SAME:
            return self.value(node.inputs[0], at)
        if kind == _ELEMENTWISE:
            kernel.positions.setdefault(v, set()).add(at)
            names = {w.name: self.value(w, broadcast_position(tuple(w.shape), tuple(v.shape), at))
                     for w in node.inputs}
            printer = kernel.printer
            printer._names = names
            printer.suffix = compute_suffix(node)
            code = printer.doprint(kernel.expression(node))
            local = kernel.fresh(v)
            self.emit(f"{local} = {rounded_to_dtype(node, code)}  # {node.op}")
            return local
        try:
            found = pieces(node, at)
        except NotShifted as exc:
            raise _Unsupported(str(exc)) from None
        choices = []
        for guards, src, pos in found:
            states = [self.holds(g) for g in guards]
            if False in states:
                continue
            tests = [g for g, s in zip(guards, states) if s is None]
            choices.append((tests, src, pos))
            if not tests:
                break    # this piece holds everywhere here: later pieces never do
        if not choices:
            return _zero(v)
        if not choices[0][0]:
            return self._cast(v, choices[0][1], self.value(choices[0][1], choices[0][2]))
        local = kernel.fresh(v)
        for j, (tests, src, pos) in enumerate(choices):
            if tests:
                cond = " and ".join(g.text() for g in tests)
                self.emit(f"{'if' if j == 0 else 'elif'} {cond}:")
            else:
                self.emit("else:")
            saved, indent = dict(self.memo), self.indent
            self.indent += "    "
            self.emit(f"{local} = {self._cast(v, src, self.value(src, pos))}")
            self.memo, self.indent = saved, indent
        if choices[-1][0]:
            self.emit("else:")
            self.emit(f"    {local} = {_zero(v)}")
        return local

    def _cast(self, v: Value, src: Value, code: str) -> str:
        return code if src.dtype is v.dtype else f"np.{np.dtype(v.dtype.np).name}({code})"


class _Plan:
    """Which nodes a stencil kernel computes, the loop nests and the order they run in."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        # a graph's inputs may have producers (in the joint graph a backward graph was cut from)
        self.inputs = set(graph.placeholders)
        self.names: dict[str, str] = {v.name: _ident(v.name) for v in graph.placeholders}
        for n in graph.nodes:
            for o in n.outputs:
                self.names[o.name] = _ident(o.name)
        needed = self._needed()
        self.kinds = {n: _kind(n) for n in graph.nodes if n in needed}
        self.forms = {n: _reduction_form(n) for n, k in self.kinds.items() if k == _REDUCTION}
        if not any(k == _SHIFTED and n.op not in IN_PLACE_READS for n, k in self.kinds.items()):
            raise _Unsupported("no shifted read")   # the loop fuser's kernels are as good
        # constants of one value (a pad's fill) are literals of the kernels
        self.uniform: dict[Node, str] = {}
        for n in self.kinds:
            if n.op == "constant" and n.data is not None and np.size(n.data) and \
                    n.data.dtype.kind in "biuf" and np.all(n.data == n.data.flat[0]):   # (never for nan)
                self.uniform[n] = _literal(n.data.flat[0], n.outputs[0])
        self.level: dict[Node, int] = {}
        self._deps: dict[Value, frozenset] = {}
        self.materialised: set[Value] = set()   # values one loop writes to an array that others read
        self.position = {o: j for j, n in enumerate(graph.nodes) for o in n.outputs}
        self._reads: dict[tuple, bool] = {}

    def reads(self, v: Value, u: Value, top: bool = False) -> bool:
        """Whether computing ``v`` in a loop reads the array of ``u`` (``top``: ``v`` is computed there,
        even if it is shared)."""
        if v is u and not top:
            return True
        key = (v, u, top)
        if key not in self._reads:
            n = None if v in self.inputs else v.producer
            kind = self.kinds.get(n) if n is not None else _LEAF
            self._reads[key] = kind not in (_LEAF, _REDUCTION) and n not in self.uniform and \
                (top or v not in self.materialised) and any(self.reads(w, u) for w in n.inputs)
        return self._reads[key]

    def _needed(self) -> set[Node]:
        needed: set[Node] = set()
        stack = [v for v in self.graph.outputs if v is not None]
        while stack:
            v = stack.pop()
            n = v.producer
            if n is None or n in needed or v in self.inputs:
                continue
            needed.add(n)
            stack.extend(n.inputs)
        return needed

    def reductions_read(self, v: Value) -> frozenset:
        """The reductions whose results computing ``v`` in a loop reads."""
        if v in self._deps:
            return self._deps[v]
        n = None if v in self.inputs else v.producer
        kind = self.kinds.get(n) if n is not None else _LEAF
        if kind == _LEAF or n in self.uniform:
            found = frozenset()
        elif kind == _REDUCTION:
            found = frozenset([n])
        else:
            found = frozenset().union(*(self.reductions_read(u) for u in n.inputs))
        self._deps[v] = found
        return found

    def level_of(self, v: Value) -> int:
        """The loop round in which ``v`` can be computed: after the reductions it reads."""
        return max((self.reduction_level(r) + 1 for r in self.reductions_read(v)), default=0)

    def reduction_level(self, r: Node) -> int:
        if r not in self.level:
            self.level[r] = self.level_of(r.args[0])
        return self.level[r]


def emit_stencil_kernel(graph: Graph, name: str, *, vector: dict, vector_import: str = "",
                        vectorise: bool = False, fastmath: bool = False, math: str = "libm") -> NumbaEmitted | None:
    """Loop nests with shifted reads for ``graph``, or None when it is not a stencil graph (no slice,
    flip, cat, pad or their gradients; or an op other than elementwise ones, those and full sums/means).

    ``vector``: the inline vector functions the loops may call (:func:`codegen.numba_emit.vector_functions`;
    sin and cos stay libm calls here); ``vectorise``: ask for wide vectors and reassociable sums.
    """
    vector = {k: v for k, v in vector.items() if k not in RANGE_CHECKED}
    try:
        plan = _Plan(graph)
        return _emit(plan, name, vector, vector_import, vectorise, fastmath, math)
    except _Unsupported:
        return None


def _kernels(plan: _Plan, vector: dict, vectorise: bool) -> list[_Kernel]:
    """The loop nests, in the order they run: one per (round, shape), a round after the reductions its
    loops read, and a loop after those whose arrays (:attr:`_Plan.materialised`) it reads."""
    kernels: dict[tuple, _Kernel] = {}

    def kernel_for(level: int, shape: tuple) -> _Kernel:
        key = (level, tuple(int(s) for s in shape))
        if key not in kernels:
            kernels[key] = _Kernel(plan, len(kernels), key[1], vector, vectorise)
        return kernels[key]

    for n, kind in plan.kinds.items():
        if kind == _REDUCTION:
            kernel_for(plan.reduction_level(n), n.args[0].shape).reductions.append(n)
    arrays = [v for v in plan.graph.outputs if v is not None and v not in plan.inputs and v.producer is not None
              and plan.kinds[v.producer] in (_ELEMENTWISE, _SHIFTED, _SAME) and v.producer not in plan.uniform]
    for v in dict.fromkeys(arrays + sorted(plan.materialised, key=lambda v: plan.position[v])):
        kernel_for(plan.level_of(v), v.shape).arrays.append(v)
    # which loop writes each shared array; a loop runs after the loops whose arrays it reads
    writer = {v: k for k in kernels.values() for v in k.arrays if v in plan.materialised}
    after = {k: {writer[u] for u in plan.materialised if writer[u] is not k and
                 (any(plan.reads(v, u, top=True) for v in k.arrays) or
                  any(plan.reads(r.args[0], u) for r in k.reductions))}
             for k in kernels.values()}
    order: list[_Kernel] = []
    pending = sorted(kernels.values(), key=lambda k: (min(key[0] for key, kk in kernels.items() if kk is k), k.k))
    while pending:
        ready = next((k for k in pending if after[k] <= set(order)), None)
        if ready is None:
            raise _Unsupported("loops that read each other's arrays")
        order.append(ready)
        pending.remove(ready)
    return order


def _expensive(node: Node) -> bool:
    """More than cheap arithmetic per element: a division, a root, a libm function."""
    e = node.expr
    if e is None:
        return False
    return any(type(f).__name__ not in CHEAP_FUNCTIONS for f in e.atoms(sympy.Function)) or \
        any(not (p.exp.is_Integer and p.exp > 0) for p in e.atoms(sympy.Pow))


def _shared_values(plan: _Plan, kernels: list[_Kernel]) -> set[Value]:
    """Values worth one array: a loop reads them at several positions and each is a division, a root
    or a libm call, which recomputing would repeat (a total variation's ``1 / sqrt``, read at three
    neighbours).  Of a chain of such values only the last one is kept."""
    for k in kernels:
        k.source()                     # (records where each value is read)
    read_at: dict[Value, set] = {}
    for k in kernels:
        for v, places in k.positions.items():
            read_at.setdefault(v, set()).update(places)
    candidates = {v for v, places in read_at.items() if len(places) > 1 and _expensive(v.producer)}
    users = plan.graph.users()
    # a value whose every user (reductions aside: they run in its loop) is itself shared is not
    return {v for v in candidates if not all(u.outputs[0] in candidates for u in users.get(v, [])
                                             if plan.kinds.get(u) != _REDUCTION)}


def _emit(plan: _Plan, name: str, vector: dict, vector_import: str, vectorise: bool, fastmath: bool,
          math: str) -> NumbaEmitted:
    graph, names = plan.graph, plan.names
    order = _kernels(plan, vector, vectorise)
    shared = _shared_values(plan, order)
    while shared:
        plan.materialised = shared
        try:
            order = _kernels(plan, vector, vectorise)
        except _Unsupported:   # two loops would each need the other's array first
            shared = set()
        else:
            for k in order:
                k.source()     # (records what each loop reads)
            read = {v for v in shared if any(v in k.params for k in order)}
            if read == shared:
                break
            shared = read
    if not shared and plan.materialised:
        plan.materialised = set()
        order = _kernels(plan, vector, vectorise)
    outputs_done = {v for k in order for v in k.arrays}
    # shared arrays live in buffers reused across calls (a fresh array costs a page fault per 4 KiB)
    returned = set(graph.outputs)
    pooled = [v for k in order for v in k.arrays if v in plan.materialised and v not in returned and v.shape != ()]
    ns = scalar_namespace()
    ns.update({"np": np, "asarray": np.asarray})
    sources, body = [], []
    for n in graph.nodes:   # constants the kernels read as arrays
        if n.op == "constant" and n in plan.kinds and n not in plan.uniform:
            body += node_statements(n, names, ns)
    for j, kernel in enumerate(order):
        kernel.k = j
        text = kernel.source()
        sources.append(decorator(False, fastmath, vectorise) + "\n" + text)
        args = []
        for v in kernel.params:
            src = names[v.name]
            if v not in kernel.numbers:
                args.append(src)
            else:
                args.append(f"float({src})" if v.dtype.is_floating_point else f"{src}.item()")
        for v in kernel.arrays:
            if v in pooled:
                body.append(f"    {names[v.name]} = buf_[{pooled.index(v)}]")
                args.append(names[v.name])
            elif v.shape != ():
                body.append(f"    {names[v.name]} = np.empty({tuple(int(s) for s in v.shape)!r}, "
                            f"dtype=np.{np.dtype(v.dtype.np).name})")
                args.append(names[v.name])
        for r in kernel.in_arrays():
            v, shape = r.outputs[0], tuple(int(s) for s in r.outputs[0].shape)
            if kernel.form(r) == _SPREAD:   # added into from zero in float64 (a float32 result: rounded once, after)
                body.append(f"    {names[v.name]} = np.zeros({shape!r})")
            else:
                body.append(f"    {names[v.name]} = np.empty({shape!r}, dtype=np.{np.dtype(v.dtype.np).name})")
            args.append(names[v.name])
        spread = [r for r in kernel.reductions if kernel.form(r) == _SPREAD]
        args += [repr(float(value)) for _, value in kernel.constants]
        full = [r for r in kernel.reductions if kernel.form(r) == _ALL]
        results = [names[v.name] for v in kernel.arrays] + [names[r.outputs[0].name] for r in full]
        body.append(f"    # stencil loop {j}: over {list(kernel.shape)}, {len(kernel.arrays)} output(s), "
                    f"{len(kernel.reductions)} reduction(s)")
        call = f"stencil_{j}({', '.join(args)})"
        returned = f"{', '.join(results)}{',' if len(results) == 1 else ''} = " if results else ""
        body.append(f"    {returned}{call}")
        for v in kernel.arrays:
            if v.shape == ():
                body.append(f"    {names[v.name]} = np.asarray({names[v.name]}, dtype={np.dtype(v.dtype.np).name!r})")
        for r in full + spread:
            out = names[r.outputs[0].name]
            if op_facts.reduction_kind(r.op) == "mean":
                count = _reduced_count(r, plan.forms[r][1])
                body.append(f"    {out} = {out} / {count}" if count else f"    {out} = {out} * np.nan")
            if r.outputs[0].dtype.np != np.float64:
                body.append(f"    {out} = np.asarray({out}, dtype={np.dtype(r.outputs[0].dtype.np).name!r})")
    for v in graph.outputs:   # outputs that are uniform constants
        if v is not None and v.producer in plan.uniform and v not in outputs_done:
            body += node_statements(v.producer, names, ns)
            outputs_done.add(v)
    for v in graph.outputs:   # a reduction that keeps its dims (one number in the glue)
        if v is not None and v.shape != () and plan.kinds.get(v.producer) == _REDUCTION and v not in plan.inputs \
                and plan.forms[v.producer][0] == _ALL:
            body.append(f"    {names[v.name]} = np.asarray({names[v.name]}, "
                        f"dtype={np.dtype(v.dtype.np).name!r}).reshape({tuple(int(s) for s in v.shape)!r})")
    glue = [f"def {name}({', '.join(names[v.name] for v in graph.placeholders)}):"] + body
    if pooled:
        glue[0] = glue[0][:-2] + ", pool_=[]):"
        made = ", ".join(f"np.empty({tuple(int(d) for d in v.shape)!r}, dtype=np.{np.dtype(v.dtype.np).name})"
                         for v in pooled)
        glue.insert(1, f"    buf_ = pool_.pop() if pool_ else ({made},)")
        glue.append("    pool_.append(buf_)")
    rets = [("None" if v is None else names[v.name]) for v in graph.outputs]
    glue.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
    imports = vector_imports(vector_import) if vectorise else ""
    return NumbaEmitted(name, "\n".join(glue), sources, ns, imports, math)
