"""Emit a graph as fused Numba loop nests plus a little Python glue.

Each fusion group (:mod:`codegen.fuse`) becomes one ``@numba.njit`` function: a loop nest over
the group's shape whose body has one scalar statement per IR node (printed from the node's
sympy expression, with the IR node as a comment).  Inputs of smaller shape are read with
broadcast indexing, and ``sum``/``mean`` reductions of loop values become accumulators.
Everything else (matmul, indexing, views) stays a numpy call in the glue function.

Kernels are *size-generic*: loop bounds (``n0, n1, ...``) and non-integer constants
(``k0, k1, ...``: a mean's ``1/N``, the user's ``0.5``) are parameters that the glue passes,
so a new input size of the same rank, or another constant, runs the same compiled kernel.
Integer constants and exponents stay literal (``x**2`` must stay a multiplication).

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda x: (symgrad.sin(x) * x).sum(), np.ones(4))
>>> e = emit_numba(g, "forward", math="libm")
>>> print(e.kernels[0])                                        # doctest: +NORMALIZE_WHITESPACE
@njit(error_model='numpy')
def group_0(x, n0):
    acc_0 = 0.0
    for i0 in range(n0):
        x_in = x[i0]
        # %sin: f64[n0] = sin(%x)
        sin_ = sin(x_in)
        # %mul: f64[n0] = mul.Tensor(%sin, %x)
        mul = sin_*x_in
        acc_0 += mul
    return (acc_0,)
>>> print(e.source)                                            # doctest: +NORMALIZE_WHITESPACE
def forward(x):
    # fused loop 0: 2 elementwise nodes over [4], 1 reduction(s)
    sum_, = group_0(x, 4)
    return (sum_,)

Under ``math="vector"`` (the default) the elementary functions of :mod:`codegen.vecmath` are
called in their inline forms (``vexp_f64``, ...), and a sum the loop carries is added with
:func:`~codegen.scalar_math.radd`, which LLVM may reassociate, so that the loop vectorises:

>>> g = symgrad.trace(lambda x: (x * x).sum(), np.ones(4))
>>> print(emit_numba(g, "forward").kernels[0])                 # doctest: +NORMALIZE_WHITESPACE
@njit(error_model='numpy')
def group_0(x, n0):
    wide_vectors()  # vectorise with the widest vectors the CPU has
    distinct_arrays()  # the glue never passes overlapping arrays
    acc_0 = 0.0
    for i0 in range(n0):
        x_in = x[i0]
        # %mul: f64[n0] = mul.Tensor(%x, %x)
        mul = x_in**2
        acc_0 = radd(acc_0, mul)
    return (acc_0,)
"""

from __future__ import annotations

import heapq

import numpy as np
import sympy

from symgrad.ir.graph import SHORT_DTYPES, Graph, Value
from symgrad.rules.printers import FUNCTION_NAMES

from . import op_facts
from .emit import _ident, arg_source, node_comment, node_statements
from .fuse import Group, fusion_groups, reduction_dims, scatter_accumulations
from .glue_inline import contiguous_transposes, inline_statements, product_statements
from .kernel_common import (
    PARALLEL_CHUNKS,
    RANGE_CHECK,
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
from .row_kernel import emit_row_kernel, emit_row_region
from .row_regions import region_graph, row_regions
from .scatter import (
    gather_read,
    index_in_bounds,
    raise_index_error,
    scatter_kernel_source,
    scatter_loop_lines,
    scatter_loops,
)
from .stencil_kernel import emit_stencil_kernel

MATH_MODES = ("vector", "libm")

# Under parallel="auto", loops of at least this many elements run on Numba's threads (when it
# has more than one): below it, waking the thread pool costs more than it saves (the threshold
# comes from the parallel rows of the benchmark suite).
PARALLEL_MIN_ELEMENTS = 1 << 22

# At most this many inlined vector elementary functions per kernel; a loop with more keeps libm
# calls.  Numba inlines each call site separately and its compile time and memory grow faster than
# linearly with their number (a chain of hundreds of ops would exhaust memory); W1's joint kernel
# has 9.
MAX_VECTOR_CALLS = 16


def _threads_pay(elements: int) -> bool:
    """``parallel="auto"``: whether work over this many elements runs on Numba's threads."""
    import numba

    return numba.config.NUMBA_NUM_THREADS > 1 and elements >= PARALLEL_MIN_ELEMENTS


def _parallel_loop(grp: Group, option) -> bool:
    if option != "auto":
        return bool(option) and len(grp.shape) > 0
    return _threads_pay(int(np.prod(grp.shape)))


def _row_kernel_mode(graph: Graph, parallel) -> str:
    """How a row kernel (:mod:`codegen.row_kernel`) would run this graph: ``"parallel"`` (its rows in
    chunks over Numba's threads, as ``parallel`` asks for the loops) or ``"serial"``."""
    if parallel == "auto":
        parallel = _threads_pay(max((int(np.prod(v.shape)) for v in graph.placeholders), default=0))
    return "parallel" if parallel is True else "serial"


def vector_functions(math: str = "vector") -> tuple[dict, str]:
    """``({vocabulary name: base name}, import line)`` of the inline vector elementary functions
    kernels call under ``math`` (:mod:`codegen.vecmath`; empty for ``"libm"``, or when that
    library is not there: every function then stays a libm call).

    >>> vector_functions("libm")
    ({}, '')
    """
    if math not in MATH_MODES:
        raise ValueError(f"math must be one of {MATH_MODES}, not {math!r}")
    if math == "libm":
        return {}, ""
    try:
        from . import vecmath
    except ImportError:
        return {}, ""
    table = dict(getattr(vecmath, "VECTOR_FUNCTIONS", None) or {})
    line = getattr(vecmath, "IMPORT_LINE", "")
    if not table or not line:
        return {}, ""
    # vsin/vcos are accurate up to an argument size; a loop using them checks its arguments (RANGE_CHECK)
    if any(f in table for f in RANGE_CHECKED):
        checks = [f"{RANGE_CHECK}_{s}" for s in ("f64", "f32")]
        if all(hasattr(vecmath, c) for c in checks):
            line = line.rstrip("\n") + f"\nfrom codegen.vecmath import {', '.join(checks)}"
        else:   # no check to go with them: they stay libm calls
            table = {k: v for k, v in table.items() if k not in RANGE_CHECKED}
    return table, line


_SYMPY_NAMES = {vocab: name for name, vocab in FUNCTION_NAMES.items()}


def _broadcast_read(src: str, shape: tuple, out_shape: tuple) -> str:
    rank = len(out_shape)
    if not shape:
        return src  # 0-d inputs are passed as scalars
    idx = []
    for j, n in enumerate(shape):
        d = rank - len(shape) + j
        idx.append("0" if n == 1 and out_shape[d] != 1 else f"i{d}")
    return f"{src}[{', '.join(idx)}]"


def emit_numba(graph: Graph, name: str, *, parallel: bool | str = False, fastmath: bool = False,
               offload: bool = True, math: str = "vector") -> NumbaEmitted:
    """Fused loop kernels for the elementwise parts of ``graph`` and Python glue for the rest.

    ``parallel``: True, False, or ``"auto"`` (per loop: at least :data:`PARALLEL_MIN_ELEMENTS`
    elements and more than one Numba thread).  ``offload``: elementary functions that numpy
    vectorises on this CPU run as numpy calls between the loops (:mod:`codegen.simd`) instead
    of as scalar libm calls inside them.  ``math="vector"``: the functions :mod:`codegen.vecmath`
    provides are inlined into the loops as branch-free code LLVM vectorises (float64 ones are then
    never offloaded; float32 ones only where numpy has no SIMD code for them), and loop reductions
    may be reassociated (:func:`~codegen.scalar_math.radd`), so whole loops vectorise; ``"libm"``:
    scalar libm calls and in-order sums, as before.
    """
    vector, vector_import = vector_functions(math)
    vectorise = math == "vector"
    row_mode = _row_kernel_mode(graph, parallel) if vectorise else None
    if row_mode is not None:
        rows = emit_row_kernel(graph, name, vector=vector, vector_import=vector_import, fastmath=fastmath,
                               parallel=row_mode == "parallel")
        if rows is not None:   # a batch whose rows are reduced and used again: one loop over the rows
            return rows
    if parallel is not True and not (parallel == "auto" and _row_kernel_mode(graph, parallel) == "parallel"):
        # slices, pads, concatenations and their gradients: shifted reads in serial loops
        stencil = emit_stencil_kernel(graph, name, vector=vector, vector_import=vector_import,
                                      vectorise=vectorise, fastmath=fastmath, math=math)
        if stencil is not None:
            return stencil
    names = _value_names(graph)
    # float32 functions stay offloaded where numpy has SIMD code for them: numpy's are native float32
    # (16 lanes; SVML on AVX-512), while codegen.vecmath's float32 variants compute in float64 and are
    # slower than numpy's
    # rows reduced and used again between matrix products (a softmax): row kernels, the rest fused loops
    scatters = scatter_accumulations(graph)
    # (an add that scatters into its other operand stays with the glue's scatter)
    regions = _row_region_kernels(graph, vector, vector_import, fastmath, parallel, set(scatters)) \
        if vectorise else []
    in_region = {n: r for r in regions for n in r[0].nodes}
    groups = fusion_groups(graph, offload, {"float64": frozenset(_SYMPY_NAMES.get(f, f) for f in vector)},
                           exclude=set(in_region))
    scattered = {p for p, _ in scatters.values()}
    # scatter-adds (and the gathers feeding them) that run as Numba loops (codegen/scatter.py)
    scatter_plans = scatter_loops(graph, scatters, {v for g in groups for v in g.outputs})
    group_of = {n: g for g in groups for n in g.nodes}
    fused_reduction = {r: g for g in groups for r in g.reductions}
    ns = scalar_namespace()
    ns.update({"asarray": np.asarray, "np": np})
    kernels: list[str] = []
    needed = _needed_values(graph, group_of, fused_reduction, scatters, scatter_plans)
    block = None if parallel is True else _block_plan(graph, groups, group_of, fused_reduction, scatters, needed)
    # the glue's names: inside a block loop, a 1-D input is read through its block ``<name>_b``
    glue_names = names if block is None else {**names, **block.block_names}
    pool = _BufferPool(graph, scatters, group_of, block, {n: r[0].start for n, r in in_region.items()})
    # constants first: a loop may read one recorded after its first node (fuse.py counts them as ready)
    hoisted = [n for n in graph.nodes if n.op == "constant" and any(o in needed for o in n.outputs)]
    copied_transposes = contiguous_transposes(graph)
    body: list[str] = [line for n in hoisted for line in node_statements(n, glue_names, ns)]
    emitted_groups: set[int] = set()
    for n in graph.nodes:
        if n.op == "constant":
            continue
        if n in in_region:
            region, kernel = in_region[n]
            if id(region) not in emitted_groups:
                emitted_groups.add(id(region))
                sources, lines = _row_region_lines(region, kernel, len(kernels), glue_names, pool)
                kernels += sources
                body += lines
            continue
        grp = group_of.get(n)
        if grp is not None:
            if id(grp) in emitted_groups:
                continue
            emitted_groups.add(id(grp))
            if not any(v in needed for v in grp.outputs) and \
                    not any(o in needed for r in grp.reductions for o in r.outputs):
                continue   # nothing the loop computes is used (a value computed and then dropped)
            k = len(kernels)
            in_parallel = _parallel_loop(grp, parallel) if block is None else False
            # a loop with many elementary functions keeps libm calls (bounded compile time and memory)
            grp_vector = vector if _vector_calls(grp, vector) <= MAX_VECTOR_CALLS else {}
            source, constants, checked = _kernel_source(grp, k, names, needed, in_parallel, grp_vector, vectorise)
            kernels.append(decorator(in_parallel, fastmath, vectorise) + "\n" + source)
            if checked:   # the same loop with libm sin/cos, for arguments beyond the vector range
                twin, _, _ = _kernel_source(grp, f"{k}_libm", names, needed, in_parallel)
                kernels.append(decorator(in_parallel, fastmath) + "\n" + twin)
            body += _loop_call_lines(grp, k, glue_names, needed, pool, block, constants, checked, ns)
            continue
        if n in fused_reduction or n in scattered or not any(o in needed for o in n.outputs):
            continue
        if n in scatter_plans:
            kernel = f"scatter_{len(kernels)}"
            plan = scatter_plans[n]
            threads = bool(parallel) if parallel != "auto" else _threads_pay(int(np.prod(plan.values.shape)))
            kernels.append(scatter_kernel_source(len(plan.index), len(plan.source_index or ()), threads, kernel,
                                                  lead=plan.lead > 0))
            body += [f"    # {node_comment(m)}" for m in (plan.gather, n) if m is not None]
            body += scatter_loop_lines(plan, kernel, glue_names, ns, glue_names[n.outputs[0].name])
            continue
        if n in scatters:
            body += _scatter_statements(n, *scatters[n], glue_names, ns, graph, group_of)
            continue
        if block is None and _pooled_product(n) and pool.poolable(n.outputs[0]):
            # a fresh result array per call costs a page fault per 4 KiB whenever malloc has handed
            # the freed one back to the system; a pooled buffer is already mapped
            body += product_statements(n, glue_names, out=pool.array(n.outputs[0]))
            continue
        ufunc = _plain_ufunc(n)
        if ufunc is not None and pool.poolable(n.outputs[0]):
            (arg,) = n.inputs
            out = n.outputs[0]
            if arg in pool.slot and pool.users.get(arg) == [n]:
                pool.slot[out] = pool.slot[arg]   # the input dies here: compute in place, as numpy code would
            body.append(f"    # {node_comment(n)}")
            body.append(f"    {glue_names[out.name]} = np.{ufunc}({glue_names[arg.name]}, out={pool.array(out)})")
            continue
        inline = inline_statements(n, glue_names, copied_transposes)
        body += inline if inline is not None else node_statements(n, glue_names, ns)
    if block is not None:
        body = block.wrap(body, names)
    glue = [f"def {name}({', '.join(names[v.name] for v in graph.placeholders)}):"] + body
    rets = [("None" if v is None else names[v.name]) for v in graph.outputs]
    if pool.shapes:
        # Intermediate arrays come from a pool of buffers reused across calls (the default list
        # ``pool_``; a call takes a set, so concurrent calls never share one): a fresh multi-MB
        # array costs a page fault per 4 KiB on first touch, more than the loop that fills it.
        glue[0] = glue[0][:-2] + ", pool_=[]):"
        made = ", ".join(f"np.empty({shape!r}, dtype=np.{dtype})" for shape, dtype in pool.shapes)
        glue.insert(1, f"    buf_ = pool_.pop() if pool_ else ({made},)")
        glue.append("    pool_.append(buf_)")
    glue.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
    extra = "from codegen.scalar_math import rmax, rmin" if regions else ""
    imports = vector_imports(extra, vector_import) if vectorise else ""
    return NumbaEmitted(name, "\n".join(glue), kernels, ns, imports, math)


def _row_region_kernels(graph: Graph, vector: dict, vector_import: str, fastmath: bool, parallel,
                        exclude: set) -> list:
    """``[(region, row kernel)]`` of the graph's row regions (:mod:`codegen.row_regions`) a row kernel
    takes, without the nodes in ``exclude``."""
    found = []
    for region in row_regions(graph, exclude):
        threads = parallel is True or (parallel == "auto" and _threads_pay(region.rows * region.cols))
        kernel = emit_row_region(region_graph(region), vector=vector, vector_import=vector_import,
                                 fastmath=fastmath, parallel=threads)
        if kernel is not None:
            found.append((region, kernel))
    return found


def _row_region_lines(region, kernel, index: int, names: dict, pool) -> tuple[list[str], list[str]]:
    """The region's kernel sources and the glue running it: its outputs' arrays (pooled where they may
    be), then the kernel on 2-D views of its inputs and outputs."""
    def flat(v: Value, src: str) -> str:
        shape = region.flat(tuple(v.shape))
        return src if len(v.shape) == len(shape) else f"{src}.reshape({shape!r})"

    lines = [f"    # row kernel {index}: {len(region.nodes)} nodes over {region.rows} rows of {region.cols} "
             "(codegen/row_regions.py)"]
    lines += [f"    # {node_comment(n)}" for n in region.nodes]
    outs = {}
    for v in region.outputs:
        lines.append(f"    {names[v.name]} = {pool.array(v)}")
        outs[v.name] = flat(v, names[v.name])
    args = {v.name: (names[v.name] if v.shape == () else flat(v, names[v.name])) for v in region.inputs}
    sources, call = kernel.call(index, args, outs)
    return sources, lines + [call]


def _value_names(graph: Graph) -> dict[str, str]:
    """Each value's Python name (:func:`~codegen.emit._ident`)."""
    names: dict[str, str] = {v.name: _ident(v.name) for v in graph.placeholders}
    for n in graph.nodes:
        for o in n.outputs:
            names[o.name] = _ident(o.name)
    return names


def _broadcast_source(v: Value) -> Value:
    """What a loop reads for ``v``: the source of a chain of broadcasts, else ``v``."""
    p = v.producer
    while p is not None and op_facts.has(p.op, "broadcast") and isinstance(p.args[0], Value):
        v, p = p.args[0], p.args[0].producer
    return v


def _needed_values(graph: Graph, group_of: dict, fused_reduction: dict, scatters: dict,
                   scatter_plans: dict) -> set[Value]:
    """Values the glue must compute: outputs, and what glue nodes and loops read (loops read an
    expand's source, so a broadcast that only feeds loops is never materialised; a scatter loop reads
    a gather's source, so the gather is not materialised either)."""
    needed: set[Value] = {v for v in graph.outputs if v is not None}
    known = {v.name for v in graph.placeholders} | {o.name for n in graph.nodes for o in n.outputs}
    for n in reversed(graph.nodes):
        if n in scatter_plans:
            if n.outputs[0] in needed:
                needed.update(scatter_plans[n].inputs)
        elif n in group_of:
            grp = group_of[n]
            for v in grp.inputs:
                gathered = gather_read(v, grp.shape, known)
                needed.update([gathered.source] + [p for p in gathered.index if isinstance(p, Value)]
                              if gathered is not None else [_broadcast_source(v)])
        elif n in fused_reduction:
            continue
        elif n in scatters and n.outputs[0] in needed:
            p, other = scatters[n]
            needed.update(p.inputs)
            needed.add(other)
        elif any(o in needed for o in n.outputs):
            needed.update(n.inputs)
    return needed


def _loop_call_lines(grp: Group, k: int, names: dict, needed: set, pool, block, constants: list,
                     checked: bool, ns: dict) -> list[str]:
    """The glue's call of loop kernel ``group_<k>`` (and its libm twin when an argument is out of the
    vector functions' range), then what its reductions still need: a mean's division, the dtype, the shape."""
    args, checks = [], []
    for v in grp.inputs:
        gathered = gather_read(v, grp.shape, names)
        if gathered is not None:   # the source and the index arrays; the indices checked first
            read = gathered.params(names, _kernel_name)
            for _, arg, constant in read:
                if constant is not None:
                    ns[arg] = constant
                if arg not in args:
                    args.append(arg)
            checks += gathered.check_lines([arg for _, arg, _ in read], names)
            continue
        src = _broadcast_source(v)
        arg = f"float({names[src.name]})" if src.shape == () and src.dtype.is_floating_point else (
            f"{names[src.name]}.item()" if src.shape == () else names[src.name])
        if arg not in args:
            args.append(arg)
    # the arrays the loop writes are named here and passed; the kernel returns only its reductions
    # (boxing an array it was given into a new Python object costs more than the name does)
    written = [v for v in grp.outputs if v in needed]
    bound = [f"    {names[v.name]} = {pool.array(v)}" for v in written]
    args += [names[v.name] for v in written]
    args += ["m_"] if block is not None else [str(int(s)) for s in grp.shape]
    args += [repr(float(value)) for _, value in constants]
    results = [names[r.output.name] for r in grp.reductions]
    target = ", ".join(results) + ("," if len(results) == 1 else "")
    if checks:
        ns.update(index_in_bounds=index_in_bounds, raise_index_error=raise_index_error)
    lines = checks + [f"    # fused loop {k}: {len(grp.nodes)} elementwise nodes over {list(grp.shape)}"
                      + (f", {len(grp.reductions)} reduction(s)" if grp.reductions else "")] + bound
    call = f"group_{k}({', '.join(args)})"
    if checked:
        flagged = (target + (" " if len(results) == 1 else ", ") if results else "") + "out_of_range_" + \
            ("" if results else ",")
        lines.append(f"    {flagged} = {call}")
        lines.append("    if out_of_range_:  # a sin/cos argument too large for the vector functions: use libm")
        lines.append(f"        {target + ' = ' if results else ''}group_{k}_libm({', '.join(args)})")
    else:
        lines.append(f"    {target + ' = ' if results else ''}{call}")
    for r in grp.reductions:
        out = names[r.output.name]
        if block is not None:  # a partial sum of this block
            lines.append(f"    total_{out} += {out}")
            continue
        dims, keepdim = reduction_dims(r, len(grp.shape))
        count = int(np.prod([grp.shape[d] for d in dims])) if dims else 1
        if op_facts.reduction_kind(r.op) == "mean":
            # the mean of nothing is nan, as numpy's (Python's float division would raise)
            lines.append(f"    {out} = {out} / {count}" if count else f"    {out} = {out} * np.nan")
        shape = tuple(int(s) for s in r.output.shape)
        if keepdim and len(dims) < len(grp.shape) and r.output.dtype.np == np.float64:
            continue   # the float64 accumulator array already has the kept dims' shape
        if shape:
            lines.append(f"    {out} = np.asarray({out}, dtype={r.output.dtype.np.name!r}).reshape({shape!r})")
        elif r.output.dtype.np != np.float64:  # accumulators are float64: a Python float already is
            lines.append(f"    {out} = np.asarray({out}, dtype={r.output.dtype.np.name!r})")
    return lines


# Blocked execution: a 1-D graph of loops, SIMD ufuncs and full reductions runs block by block,
# so its intermediates stay in the L2 cache (and the buffer pool holds blocks, not arrays).
BLOCK_ELEMENTS = 16384


class _BlockPlan:
    """How the glue of a blockable graph is wrapped in ``for lo_ in range(0, n, BLOCK)``."""

    def __init__(self, graph: Graph, n: int, outputs: set, reductions: list, names: dict) -> None:
        self.graph, self.n, self.size = graph, n, BLOCK_ELEMENTS
        self.outputs, self.reductions, self.names = outputs, reductions, names

    @property
    def block_names(self) -> dict[str, str]:
        """The glue's name for each 1-D input inside the block loop: its block ``<name>_b``."""
        return {v.name: f"{self.names[v.name]}_b" for v in self.graph.placeholders if len(v.shape) == 1}

    def wrap(self, body: list[str], names: dict) -> list[str]:
        """``body`` (glue written with :attr:`block_names`) inside the loop over blocks."""
        lines = [f"    # run in blocks of {self.size} elements: the intermediates stay in cache"]
        for v in self.outputs:
            lines.append(f"    {names[v.name]}_all = np.empty(({self.n},), dtype=np.{v.dtype.np.name})")
        for r in self.reductions:
            lines.append(f"    total_{names[r.output.name]} = 0.0")
        lines.append(f"    for lo_ in range(0, {self.n}, {self.size}):")
        lines.append(f"        hi_ = min(lo_ + {self.size}, {self.n})")
        lines.append("        m_ = hi_ - lo_")
        for v in self.graph.placeholders:
            if len(v.shape) == 1:
                lines.append(f"        {names[v.name]}_b = {names[v.name]}[lo_:hi_]")
        lines += ["    " + line for line in body]
        for r in self.reductions:
            out = names[r.output.name]
            total = f"total_{out}" + (f" / {self.n}" if op_facts.reduction_kind(r.op) == "mean" else "")
            lines.append(f"    {out} = {total}")
            if r.output.dtype.np != np.float64:
                lines.append(f"    {out} = np.asarray({out}, dtype={r.output.dtype.np.name!r})")
        for v in self.outputs:
            lines.append(f"    {names[v.name]} = {names[v.name]}_all")
        return lines


def _block_plan(graph: Graph, groups, group_of: dict, fused_reduction: dict, scatters: dict,
                needed: set) -> _BlockPlan | None:
    """A plan when every step is elementwise over one 1-D shape (or a full reduction of it)."""
    known = {v.name for v in graph.placeholders} | {o.name for n in graph.nodes for o in n.outputs}
    if scatters or not groups or any(gather_read(v, g.shape, known) for g in groups for v in g.inputs):
        return None   # (a block of a gather's source is not the rows its index names)
    shape = groups[0].shape
    if len(shape) != 1 or shape[0] < 2 * BLOCK_ELEMENTS:
        return None
    if any(tuple(v.shape) not in (shape, ()) for v in graph.placeholders):
        return None
    for grp in groups:
        if grp.shape != shape or any(reduction_dims(r, 1)[0] != (0,) or tuple(r.output.shape) != ()
                                     for r in grp.reductions):
            return None
    steps = 0   # numpy ufuncs between the loops
    for n in graph.nodes:
        if n in group_of or n in fused_reduction or not any(o in needed for o in n.outputs):
            continue
        if op_facts.has(n.op, "broadcast") and _broadcast_source(n.outputs[0]).shape == ():
            continue
        if _plain_ufunc(n) is None or tuple(n.outputs[0].shape) != shape:
            return None
        steps += 1
    if steps + len(groups) < 2:
        return None   # one loop and nothing else: no intermediate array to keep in cache
    outputs = set()
    for v in graph.outputs:
        if v is None or v.producer is None:
            return None
        if v.producer in fused_reduction:
            continue
        if tuple(v.shape) != shape or v.producer not in group_of:
            return None
        outputs.add(v)
    reductions = [r for grp in groups for r in grp.reductions]
    names = {v.name: _ident(v.name) for v in graph.placeholders}
    for n in graph.nodes:
        for o in n.outputs:
            names[o.name] = _ident(o.name)
    return _BlockPlan(graph, shape[0], outputs, reductions, names)


# numpy ufuncs for IR functions (sympy names) that an offloaded node may call with ``out=``.
_UFUNCS = {"exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "tanh": "tanh", "sin": "sin",
           "cos": "cos", "sinh": "sinh", "cosh": "cosh", "atan": "arctan", "log2": "log2", "exp2": "exp2"}

def _plain_ufunc(n) -> str | None:
    """The numpy ufunc of a node that is exactly ``f(value)`` of its one same-dtype input."""
    e = n.expr
    if e is None or len(n.outputs) != 1 or len(n.inputs) != 1 or len(e.args) != 1 or not e.args[0].is_Symbol:
        return None
    if n.inputs[0].dtype is not n.outputs[0].dtype or tuple(n.inputs[0].shape) != tuple(n.outputs[0].shape):
        return None
    return _UFUNCS.get(type(e).__name__)


# Matrix products the glue computes with ``np.matmul(a, b, out=buffer)`` (their numpy forward is
# ``np.matmul``): the operands' dtype is the result's, so numpy computes exactly what the forward would.
_POOLED_PRODUCTS = ("mm", "bmm")


def _pooled_product(n) -> bool:
    """Whether ``n`` is a floating-point matrix product whose result may go into a pooled buffer."""
    if n.op not in _POOLED_PRODUCTS or len(n.args) != 2 or len(n.outputs) != 1:
        return False
    out = n.outputs[0]
    return out.dtype.is_floating_point and all(isinstance(v, Value) and v.dtype is out.dtype and len(v.shape) ==
                                               len(out.shape) for v in n.args)


class _BufferPool:
    """Which intermediate arrays may live in reused buffers, and their slots in ``buf_``.

    A slot is shared by values whose lifetimes do not overlap (a linear scan over the glue's
    order), so the pool holds about as much as the graph's live intermediates at their peak.
    """

    def __init__(self, graph: Graph, scatters: dict, group_of: dict, block=None, starts: dict | None = None) -> None:
        self.block = block
        self.users = graph.users()
        self.outputs = {v for v in graph.outputs if v is not None}
        self.scatter_nodes = set(scatters)
        self.shapes: list[tuple] = []
        self.slot: dict = {}
        self.owner: list = []               # slot -> the value in it now
        self._last_use: dict = {}           # the graph and ``at`` are fixed: each value's is computed once
        self._generation: list[int] = []    # slot -> how many values it has held
        self._busy: dict = {}               # (shape, dtype) -> heap of (last use, slot, generation)
        self._free: dict = {}               # (shape, dtype) -> heap of (slot, generation) free since then
        self._now = -1                      # the latest place a slot was asked for
        # where each node's work happens: a loop runs all its nodes at its first node's place
        self.at = {n: (group_of[n].start if n in group_of else i) for i, n in enumerate(graph.nodes)}
        self.at.update(starts or {})   # a row region runs all its nodes at its first node's place
        # an index_put_add folded into a scatter runs where its add is: its values stay live until then
        for add, (put, _) in scatters.items():
            self.at[put] = max(self.at[put], self.at[add])

    def poolable(self, v: Value) -> bool:
        """True if no array the function returns can be ``v`` or a view of it."""
        if v in self.outputs:
            return False
        for u in self.users.get(v, []):
            if u in self.scatter_nodes:
                return False                  # adds into ``v`` in place and returns it
            if (u.expr is not None and not u.expr.is_Symbol) or op_facts.has(u.op, "fresh_result"):
                continue                      # reads v, makes a new array (loops, ufuncs, matmul...)
            if op_facts.has(u.op, "view") and all(self.poolable(o) for o in u.outputs):
                continue                      # a view, used only by readers
            return False
        return True

    def _own(self, slot: int, v: Value) -> None:
        """``v`` is now in ``slot``: the slot becomes free after ``v``'s last use."""
        if self.owner[slot] is v:
            return
        self.owner[slot] = v
        self._generation[slot] += 1
        heapq.heappush(self._busy.setdefault(self.shapes[slot], []), (self.last_use(v), slot, self._generation[slot]))

    def _free_slot(self, spec: tuple, now: int) -> int | None:
        """The lowest slot of this shape and dtype whose value is no longer read at ``now``.

        Loops and ufuncs ask in glue order, so ``now`` does not decrease and a slot found free stays
        free until it is taken: slots move from a heap ordered by release time to a heap of free slot
        numbers, each once per value held.  Entries of a slot that changed owner since are stale
        (their generation is old) and skipped.  Should ``now`` ever go back, every slot is checked.
        """
        if now < self._now:
            free = [i for i, (owner, s) in enumerate(zip(self.owner, self.shapes))
                    if s == spec and self.last_use(owner) < now]
            return free[0] if free else None
        self._now = now
        busy, free = self._busy.get(spec, []), self._free.setdefault(spec, [])
        while busy and busy[0][0] < now:
            _, slot, generation = heapq.heappop(busy)
            if generation == self._generation[slot]:
                heapq.heappush(free, (slot, generation))
        while free:
            slot, generation = heapq.heappop(free)
            if generation == self._generation[slot]:
                return slot
        return None

    def last_use(self, v: Value) -> int:
        """The last place ``v`` (or a view of it) is read."""
        last = self._last_use.get(v)
        if last is None:
            last = self.at[v.producer] if v.producer is not None else -1
            for u in self.users.get(v, []):
                last = max(last, self.at[u])
                if op_facts.has(u.op, "view"):
                    last = max([last] + [self.last_use(o) for o in u.outputs])
            self._last_use[v] = last
        return last

    def array(self, v: Value) -> str:
        """Source for the array a loop or ufunc writes ``v`` into."""
        shape, dtype = tuple(int(d) for d in v.shape), v.dtype.np.name
        if self.block is not None:
            if v in self.block.outputs:
                return f"{self.block.names[v.name]}_all[lo_:hi_]"   # this block's part of the result
            shape = (self.block.size,)
        if not self.poolable(v):
            return f"np.empty({shape!r}, dtype=np.{dtype})"
        if v not in self.slot:
            now = self.at[v.producer]
            spec = (shape, dtype)
            free = self._free_slot(spec, now)
            if free is not None:
                self.slot[v] = free
            else:
                self.slot[v] = len(self.shapes)
                self.shapes.append(spec)
                self.owner.append(None)
                self._generation.append(0)
        self._own(self.slot[v], v)
        return f"buf_[{self.slot[v]}]" + ("[:m_]" if self.block is not None else "")


def _scatter_into(target, indices, values):
    np.add.at(target, indices, values)  # repeated indices accumulate, as in index_put_add
    return target


def _scatter_statements(n, scatter, other: Value, names: dict, ns: dict, graph: Graph, group_of: dict) -> list:
    """``out = other + index_put_add(values, shape, idx)`` as a scatter into ``other`` (in place
    when ``other`` is a loop's fresh output that nothing else reads)."""
    values, _, index = scatter.args
    users = graph.users()
    fresh = other.producer in group_of and users.get(other) == [n] and other not in graph.outputs
    ns["scatter_into"] = _scatter_into
    src = names[other.name] if fresh else f"{names[other.name]}.copy()"
    return [f"    # {node_comment(scatter)}",
            f"    # {node_comment(n)}: scattered into %{other.name}" + (" in place" if fresh else ""),
            f"    {names[n.outputs[0].name]} = scatter_into({src}, "
            f"{arg_source(index, names[n.outputs[0].name], names, ns)}, {names[values.name]})"]


def _kernel_name(name: str) -> str:
    """A kernel parameter's name: no trailing underscore (``exp_`` -> ``exp_arr``), because Numba's
    parfor lowering renames ``a_`` to ``a__``, which can collide with another variable."""
    return name.rstrip("_") + "_arr" if name.endswith("_") else name


def _vector_calls(grp: Group, vector: dict) -> int:
    """How many calls of inlined vector functions the loop of ``grp`` would make."""
    if not vector:
        return 0
    return sum(1 for n in grp.nodes if n.expr is not None for f in n.expr.atoms(sympy.Function)
               if FUNCTION_NAMES.get(type(f).__name__, type(f).__name__) in vector)


def _pair_sin_cos(nodes: list) -> list:
    """The loop's nodes with each sin/cos of an argument moved next to the first sin/cos of that
    argument (when its inputs are ready there).

    sin and cos share their range reduction; side by side, LLVM computes it once for both, while
    twenty nodes apart it does not.
    """
    def sincos_args(n) -> set:
        e = n.expr
        return {f.args[0] for f in e.atoms(sympy.sin, sympy.cos)} if e is not None else set()

    order = list(nodes)
    ready: set = set()            # values computed by the nodes placed so far
    produced = {n.output for n in nodes}
    i = 0
    while i < len(order):
        n = order[i]
        ready.add(n.output)
        args = sincos_args(n)
        j = i + 1
        while args and j < len(order):
            m = order[j]
            if sincos_args(m) & args and all(v in ready or v not in produced for v in m.inputs):
                order.insert(i + 1, order.pop(j))
                i += 1
                ready.add(m.output)
            j += 1
        i += 1
    return order


def _kernel_source(grp: Group, k: int | str, names: dict, needed: set, parallel: bool, vector: dict | None = None,
                   vectorise: bool = False) -> tuple[str, list, bool]:
    """One loop-nest kernel: its source, the constants it takes as ``k0, k1, ...``, and whether it
    also returns ``out_of_range`` (an argument of a vector sin/cos beyond its accurate range).

    With ``vectorise`` the kernel asks for wide vectors (:func:`~codegen.scalar_math.wide_vectors`)
    and every sum carried by the innermost loop (a full reduction, or one over the last dim) adds
    with :func:`~codegen.scalar_math.radd`, which LLVM may reassociate: an in-order sum is a
    dependence from one iteration to the next that keeps the whole loop scalar.
    """
    kernel = _LoopKernel(grp, k, names, needed, parallel, vector, vectorise)
    return kernel.source(), kernel.constants, kernel.checked


class _LoopKernel:
    """The text of one loop-nest kernel, written in steps (:meth:`source`)."""

    def __init__(self, grp: Group, k: int | str, names: dict, needed: set, parallel: bool, vector: dict | None,
                 vectorise: bool) -> None:
        self.grp, self.k, self.names = grp, k, names
        self.rank = rank = len(grp.shape)
        self.params: list[str] = []
        self.local: dict[str, str] = {}
        self.reads: list[tuple[str, str]] = []
        for v in grp.inputs:
            gathered = gather_read(v, grp.shape, names)
            if gathered is not None:   # read through the gather's index (codegen/scatter.py)
                params = [param for param, _, _ in gathered.params(names, _kernel_name)]
                self.params += [p for p in params if p not in self.params]
                self.local[v.name] = _kernel_name(names[v.name]).rstrip("_") + "_in"
                read = (self.local[v.name], gathered.read(params))
                if read not in self.reads:
                    self.reads.append(read)
                continue
            src = _broadcast_source(v)
            param = _kernel_name(names[src.name])
            if param not in self.params:
                self.params.append(param)
            # never a name with a double underscore: Numba's parfor lowering renames `a_` to `a__`
            self.local[v.name] = param.rstrip("_") + "_in"
            read = (self.local[v.name], _broadcast_read(param, tuple(src.shape), grp.shape))
            if read not in self.reads:
                self.reads.append(read)
        self.nodes = nodes = _pair_sin_cos(grp.nodes) if vector else grp.nodes
        for n in nodes:
            self.local[n.output.name] = names[n.output.name]
        self.sizes = [f"n{d}" for d in range(rank)]
        self.constants: list = []
        self.printer = KernelPrinter(self.local, vector or {})
        # an op without an expression (where, a cast) is printed by its per-element statement, here:
        # the constants it lifts are kernel parameters, named before the signature is written
        self.bodies = [lift_constants(n.expr, self.constants) if n.expr is not None
                       else statement_for(n)(n, self.printer, self.constants) for n in nodes]
        self.written = [v for v in grp.outputs if v in needed]
        self.dims_of = dims_of = [reduction_dims(r, rank)[0] for r in grp.reductions]
        self.vectorise = vectorise = vectorise and rank > 0
        # reductions over the last dim (not all dims) sum each inner loop into a scalar `inner_j`,
        # added to the accumulator after that loop
        self.inner = {j for j, dims in enumerate(dims_of) if vectorise and len(dims) < rank and rank - 1 in dims}
        # A parallel kernel splits the outer loop into chunks; a reduction over dim 0 then sums into
        # a per-chunk row (no two threads write the same element), added up after the loop.
        self.chunked = parallel and rank > 0
        self.checked = bool(vector) and any(
            FUNCTION_NAMES.get(type(f).__name__, type(f).__name__) in RANGE_CHECKED
            and FUNCTION_NAMES.get(type(f).__name__, type(f).__name__) in vector
            for n in nodes if n.expr is not None for f in n.expr.atoms(sympy.Function))
        self.flag = "range_c" if self.chunked else "out_of_range"

    def source(self) -> str:
        lines = [self._signature()] + self._setup_lines()
        indent, inner_indent, loops = self._loop_lines()
        lines += loops
        lines += [f"{indent}{local_name} = {read}" for local_name, read in self.reads]
        body, after_inner = self._statement_lines(indent, inner_indent)
        lines += body + after_inner
        lines += self._closing_lines()
        return "\n".join(lines)

    def _out(self, v: Value) -> str:
        return f"out_{_kernel_name(self.names[v.name])}"

    def _signature(self) -> str:
        outs = [self._out(v) for v in self.written]
        return f"def group_{self.k}({', '.join(self.params + outs + self.sizes + [c for c, _ in self.constants])}):"

    def _setup_lines(self) -> list[str]:
        """Hints, the range-check flag and the accumulators, before the loops."""
        lines, rank, chunked = [], self.rank, self.chunked
        if self.vectorise and not chunked:
            lines.append("    wide_vectors()  # vectorise with the widest vectors the CPU has")
            # no run-time overlap checks: with them a sum's order depended on where the arrays were
            lines.append("    distinct_arrays()  # the glue never passes overlapping arrays")
        if self.checked:
            start = f"np.zeros({PARALLEL_CHUNKS}, np.bool_)" if chunked else "False"
            lines.append(f"    out_of_range = {start}  # any sin/cos argument beyond the vector functions' range?")
        for j, dims in enumerate(self.dims_of):
            if len(dims) == rank:  # a full reduction: a scalar accumulator
                if chunked:
                    lines.append(f"    part_{j} = np.zeros({PARALLEL_CHUNKS})")
                else:
                    lines.append(f"    acc_{j} = 0.0")
                continue
            kept = [("1" if d in dims else self.sizes[d]) for d in range(rank)]
            if chunked and 0 in dims:
                kept = [str(PARALLEL_CHUNKS)] + kept
            lines.append(f"    acc_{j} = np.zeros(({', '.join(kept)},))")
        return lines

    def _loop_lines(self) -> tuple[str, str, list[str]]:
        """The loop headers (chunks of the outer loop when parallel): the body's indent, the
        innermost loop's indent and the lines."""
        lines, rank, indent = [], self.rank, "    "
        if self.chunked:
            lines.append(f"    for c in prange({PARALLEL_CHUNKS}):")
            indent = "        "
            if self.vectorise:  # the loop body is outlined into its own function: the hint goes there
                lines.append(f"{indent}wide_vectors()")
            lines.append(f"{indent}lo = c * n0 // {PARALLEL_CHUNKS}")
            lines.append(f"{indent}hi = (c + 1) * n0 // {PARALLEL_CHUNKS}")
            for j, dims in enumerate(self.dims_of):
                if len(dims) == rank:
                    lines.append(f"{indent}chunk_{j} = 0.0")
            if self.checked:
                lines.append(f"{indent}range_c = False")
            lines.append(f"{indent}for i0 in range(lo, hi):")
            indent += "    "
            start = 1
        else:
            start = 0
        inner_indent = indent   # where the innermost loop starts (only used when rank > 1)
        for d in range(start, rank):
            if d == rank - 1:
                lines += [f"{indent}inner_{j} = 0.0" for j in sorted(self.inner)]
                inner_indent = indent
            lines.append(f"{indent}for i{d} in range(n{d}):")
            indent += "    "
        return indent, inner_indent, lines

    def _accumulate(self, target: str, value: str) -> str:
        return f"{target} = radd({target}, {value})" if self.vectorise else f"{target} += {value}"

    def _statement_lines(self, indent: str, inner_indent: str) -> tuple[list[str], list[str]]:
        """One statement per node (with its IR line as a comment), its store and its reductions; and
        the lines after the innermost loop (its sums added to their accumulators)."""
        rank, chunked, local, printer = self.rank, self.chunked, self.local, self.printer
        reduced: dict[str, list[int]] = {}
        for j, r in enumerate(self.grp.reductions):
            reduced.setdefault(r.args[0].name, []).append(j)
        out_names = {v.name for v in self.written}
        idx = ", ".join(f"i{d}" for d in range(rank))
        lines, after_inner = [], []
        for n, body in zip(self.nodes, self.bodies):
            o = n.output
            printer.suffix = compute_suffix(n)
            seen = len(printer.checks)
            code = body if isinstance(body, str) else printer.doprint(body)
            args = ", ".join(generic_arg(a, self.constants, code) for a in n.args)
            short = SHORT_DTYPES.get(o.dtype.name, o.dtype.name)
            lines.append(f"{indent}# %{o.name}: {short}[{', '.join(self.sizes)}] = {n.op}({args})")
            lines.append(f"{indent}{local[o.name]} = {rounded_to_dtype(n, code)}")
            for check in printer.checks[seen:]:
                lines.append(f"{indent}{self.flag} = {self.flag} | {check}")
            if o.name in out_names:
                lines.append(f"{indent}{self._out(o)}[{idx if idx else '()'}] = {local[o.name]}")
            for j in reduced.get(o.name, []):
                dims = self.dims_of[j]
                if len(dims) == rank:
                    acc = f"{'chunk' if chunked else 'acc'}_{j}"
                    lines.append(f"{indent}{self._accumulate(acc, local[o.name])}")
                    continue
                at = ["0" if d in dims else f"i{d}" for d in range(rank)]
                if chunked and 0 in dims:
                    at = ["c"] + at
                if j in self.inner:
                    lines.append(f"{indent}{self._accumulate(f'inner_{j}', local[o.name])}")
                    after_inner.append(f"{inner_indent}acc_{j}[{', '.join(at)}] += inner_{j}")
                    continue
                lines.append(f"{indent}acc_{j}[{', '.join(at)}] += {local[o.name]}")
        return lines, after_inner

    def _closing_lines(self) -> list[str]:
        """After the loops: the chunks' partial results added up, and the return."""
        lines, rank, chunked = [], self.rank, self.chunked
        if chunked:
            for j, dims in enumerate(self.dims_of):
                if len(dims) == rank:
                    lines.append(f"        part_{j}[c] = chunk_{j}")
            if self.checked:
                lines.append("        out_of_range[c] = range_c")
            for j, dims in enumerate(self.dims_of):
                if len(dims) == rank:
                    lines.append(f"    total_{j} = part_{j}.sum()")
                elif 0 in dims:
                    lines.append(f"    total_{j} = acc_{j}.sum(axis=0)")
        totals = [f"total_{j}" if chunked and (len(dims) == rank or 0 in dims) else f"acc_{j}"
                  for j, dims in enumerate(self.dims_of)]
        results = totals   # the written arrays are the caller's: not returned
        if self.checked:
            results.append("out_of_range.any()" if chunked else "out_of_range")
        if results:
            lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
        return lines
