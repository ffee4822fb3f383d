"""Emit a graph as fused Numba loop nests plus a little Python glue.

Each fusion group (:mod:`codegen.fuse`) becomes one ``@numba.njit`` function: a loop nest over
the group's shape whose body has one scalar statement per IR node (printed from the node's
sympy expression, with the IR node as a comment).  Inputs of smaller shape are read with
broadcast indexing, and full ``sum``/``mean`` reductions become accumulators.  Everything else
(matmul, reductions over dims, indexing, views) stays a numpy call in the glue function.

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda x: (symgrad.sin(x) * x).sum(), np.ones(4))
>>> e = emit_numba(g, "forward")
>>> print(e.kernels[0])                                        # doctest: +NORMALIZE_WHITESPACE
def group_0(x):
    acc_0 = 0.0
    for i0 in range(4):
        x_ = x[i0]
        # %sin: f64[4] = sin(%x)
        sin_ = sin(x_)
        # %mul: f64[4] = mul.Tensor(%sin, %x)
        mul = sin_*x_
        acc_0 += mul
    return (acc_0,)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from symgrad.ir.graph import Graph, Value, _arg_text

from .emit import _ident, _Printer, node_statements
from .fuse import Group, fusion_groups


def _scalar_namespace():
    from .scalar_math import SCALAR_NAMESPACE

    return dict(SCALAR_NAMESPACE)


@dataclass
class NumbaEmitted:
    """The glue source, one kernel source per group, and the compiled glue function."""

    name: str
    source: str
    kernels: list[str]
    namespace: dict = field(default_factory=dict)

    @property
    def full_source(self) -> str:
        return "\n\n".join(["@njit\n" + k for k in self.kernels] + [self.source])

    def compile(self, cache: bool = True):
        """The glue function; with ``cache``, from a module in the kernel cache (see codegen.jit)."""
        import numba

        if cache:
            from . import jit

            try:
                fn = jit.load(self.kernels, self.source, self.namespace, self.namespace.get("__ops__", {}),
                              self.name)
            except Exception as exc:  # never let the cache break compilation
                import warnings

                warnings.warn(f"symgrad: kernel cache unavailable ({exc}); compiling in memory", stacklevel=2)
                fn = None
            if fn is not None:
                fn.__source__ = self.full_source
                return fn
        glb = dict(self.namespace)
        for src in self.kernels:
            local: dict = {}
            exec(compile(src, f"<symgrad {self.name} kernel>", "exec"), glb, local)
            (name, fn), = local.items()
            glb[name] = numba.njit(error_model="numpy")(fn)
        exec(compile(self.source, f"<symgrad {self.name}>", "exec"), glb)
        fn = glb[self.name]
        fn.__source__ = self.full_source
        return fn


def _broadcast_read(src: str, shape: tuple, out_shape: tuple) -> str:
    rank = len(out_shape)
    if not shape:
        return src  # 0-d inputs are passed as scalars
    idx = []
    for j, n in enumerate(shape):
        d = rank - len(shape) + j
        idx.append("0" if n == 1 and out_shape[d] != 1 else f"i{d}")
    return f"{src}[{', '.join(idx)}]"


def emit_numba(graph: Graph, name: str) -> NumbaEmitted:
    """Fused loop kernels for the elementwise parts of ``graph`` and Python glue for the rest."""
    names: dict[str, str] = {v.name: _ident(v.name) for v in graph.placeholders}
    for n in graph.nodes:
        for o in n.outputs:
            names[o.name] = _ident(o.name)
    groups = fusion_groups(graph)
    group_of = {n: g for g in groups for n in g.nodes}
    fused_reduction = {r: g for g in groups for r in g.reductions}
    ns = _scalar_namespace()
    ns.update({"asarray": np.asarray, "np": np})
    kernels: list[str] = []
    glue = [f"def {name}({', '.join(names[v.name] for v in graph.placeholders)}):"]

    def source_of(v: Value) -> Value:
        p = v.producer
        while p is not None and p.op == "expand" and isinstance(p.args[0], Value):
            v, p = p.args[0], p.args[0].producer
        return v

    # Values the glue must compute: outputs, and what glue nodes and loops read (loops read an
    # expand's source, so a broadcast that only feeds loops is never materialised).
    needed: set[Value] = {v for v in graph.outputs if v is not None}
    for n in reversed(graph.nodes):
        if n in group_of:
            grp = group_of[n]
            needed.update(source_of(v) for v in grp.inputs)
        elif n in fused_reduction:
            continue
        elif any(o in needed for o in n.outputs):
            needed.update(n.inputs)

    emitted_groups: set[int] = set()
    for n in graph.nodes:
        grp = group_of.get(n)
        if grp is not None:
            if id(grp) in emitted_groups:
                continue
            emitted_groups.add(id(grp))
            k = len(kernels)
            kernels.append(_kernel_source(grp, k, names))
            args = []
            for v in grp.inputs:
                src = source_of(v)
                args.append(f"{names[src.name]}.item()" if src.shape == () else names[src.name])
            results = [names[v.name] for v in grp.outputs] + [names[r.output.name] for r in grp.reductions]
            target = ", ".join(results) + ("," if len(results) == 1 else "")
            glue.append(f"    # fused loop {k}: {len(grp.nodes)} elementwise nodes over {list(grp.shape)}"
                        + (f", {len(grp.reductions)} reduction(s)" if grp.reductions else ""))
            glue.append(f"    {target} = group_{k}({', '.join(args)})")
            size = int(np.prod(grp.shape)) if grp.shape else 1
            for r in grp.reductions:
                out = names[r.output.name]
                if r.op == "mean":
                    glue.append(f"    {out} = {out} / {size}")
                glue.append(f"    {out} = np.asarray({out}, dtype={r.output.dtype.np.name!r})")
            continue
        if n in fused_reduction or not any(o in needed for o in n.outputs):
            continue
        glue += node_statements(n, names, ns)
    rets = [("None" if v is None else names[v.name]) for v in graph.outputs]
    glue.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")
    return NumbaEmitted(name, "\n".join(glue), kernels, ns)


def _kernel_source(grp: Group, k: int, names: dict) -> str:
    shape = grp.shape
    params = []
    local: dict[str, str] = {}
    reads = []
    for v in grp.inputs:
        src = v
        p = v.producer
        while p is not None and p.op == "expand" and isinstance(p.args[0], Value):
            src, p = p.args[0], p.args[0].producer
        param = names[src.name]
        if param not in params:
            params.append(param)
        local[v.name] = param + "_"
        reads.append((param + "_", _broadcast_read(param, tuple(src.shape), shape)))
    for n in grp.nodes:
        local[n.output.name] = names[n.output.name]
    printer = _Printer(local)
    lines = [f"def group_{k}({', '.join(params)}):"]
    for v in grp.outputs:
        lines.append(f"    out_{names[v.name]} = np.empty({shape!r}, dtype=np.{v.dtype.np.name})")
    for j, _r in enumerate(grp.reductions):
        lines.append(f"    acc_{j} = 0.0")
    indent = "    "
    for d, n in enumerate(shape):
        lines.append(f"{indent}for i{d} in range({n}):")
        indent += "    "
    for local_name, read in reads:
        lines.append(f"{indent}{local_name} = {read}")
    reduced = {r.args[0].name: j for j, r in enumerate(grp.reductions)}
    out_names = {v.name for v in grp.outputs}
    idx = ", ".join(f"i{d}" for d in range(len(shape)))
    for n in grp.nodes:
        o = n.output
        lines.append(f"{indent}# %{o.name}: {o.type_str} = {n.op}({', '.join(_arg_text(a) for a in n.args)})")
        lines.append(f"{indent}{local[o.name]} = {printer.doprint(n.expr)}")
        if o.name in out_names:
            lines.append(f"{indent}out_{names[o.name]}[{idx if idx else '()'}] = {local[o.name]}")
        if o.name in reduced:
            lines.append(f"{indent}acc_{reduced[o.name]} += {local[o.name]}")
    results = [f"out_{names[v.name]}" for v in grp.outputs] + [f"acc_{j}" for j in range(len(grp.reductions))]
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    return "\n".join(lines)
