"""Canonical kernel keys: kernels whose bodies differ only in names compile once.

A generated kernel is named after its place in a function (``group_3``) and its parameters and
locals after IR values (``mm_5``, ``tanh_2``, ``out_rsub_7``), with one comment per IR node.  The
same loop body emitted at another place (each step of a Python loop unrolled by the trace, or
another function with the same loops) therefore has another text.  What :mod:`codegen.jit`
compiles and caches is each kernel's *canonical form*, the same for all of them:

* the readable text parsed and printed back (``ast.unparse``): comments and layout are gone;
* the kernel renamed ``kernel`` (``kernel_0``, ``kernel_1``, ... for kernels that call each other,
  in their order in the list), and every call of it renamed alike;
* every parameter renamed ``a0, a1, ...`` and every other local ``v0, v1, ...``, in the order they
  are first written; the names of globals (``np``, ``radd``, ``vtanh_f64``, ...) are kept;
* the two operands of each ``+`` and ``*`` in the order of their canonical text (sympy prints the
  operands of a product in the order of their readable names, so ``tangent_in*y_in`` in one kernel
  is ``bias_in*tangent_in`` in another).

Neither step changes what a kernel computes: renaming a function's own names consistently does not,
and one binary ``+`` or ``*`` gives the same result, bit for bit, with its operands swapped (nothing
is reassociated).  So one compiled dispatcher serves every kernel with the same canonical form: the
glue calls it by the readable name, positionally.  Constants are already out of the text where that is free: sizes and
non-integer constants are parameters (``n0``, ``k0``) that the glue passes, so they do not split
keys.  Integer literals and exponents stay in the key: ``x**2`` must stay a multiplication,
``2*x`` an exact small-integer product, ``acc[0, i1]`` an index, and an integer passed at run time
would change the types Numba infers.

The readable text stays what users see (``fn.__source__``, ``symgrad inspect``): it and the
canonical text are the same statements in the same order, one canonical line per readable line that
is not only a comment, renamed (and a sum's or product's two operands perhaps swapped);
:func:`canonical_unit` turns one into the other.

>>> src = '''@njit(error_model='numpy')
... def group_3(mm_5, b, out_tanh_2, n0, k0):
...     for i0 in range(n0):
...         # %tanh_2: f64[n0] = tanh(%add_4)
...         tanh_2 = tanh(mm_5[i0] + b[i0] * k0)
...         out_tanh_2[i0] = tanh_2
...     return (out_tanh_2,)'''
>>> unit = canonical_unit((src,))
>>> print(unit.sources[0])
@njit(error_model='numpy')
def kernel(a0, a1, a2, a3, a4):
    for v0 in range(a3):
        v1 = tanh(a0[v0] + a1[v0] * a4)
        a2[v0] = v1
    return (a2,)
>>> unit.names
{'group_3': 'kernel'}
>>> other = src.replace("group_3", "group_9").replace("mm_5", "mm_17").replace("tanh_2", "tanh_8")
>>> canonical_unit((other,)).sources == unit.sources
True
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

# Names the canonical form gives; a global with such a name would be shadowed, so such a kernel
# keeps its own names (see canonical_unit).
_CANONICAL_NAME = re.compile(r"^(a\d+|v\d+|kernel(_\d+)?)$")
# Constructs with a scope of their own: renaming across them could turn a global into a local.
_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
                  ast.DictComp, ast.GeneratorExp, ast.Global, ast.Nonlocal)


@dataclass(frozen=True)
class CanonicalUnit:
    """Kernels that call each other (or one kernel), in canonical form.

    ``sources``: one canonical source per kernel (decorator included), in the given order;
    ``names``: readable kernel name -> its canonical name.
    """

    sources: tuple[str, ...]
    names: dict

    @property
    def text(self) -> str:
        return "\n\n".join(self.sources)


def kernel_name(src: str) -> str:
    """The name of the function a kernel source defines.

    >>> kernel_name("@njit()\\ndef group_0(x):\\n    return x")
    'group_0'
    """
    return src.split("def ", 1)[1].split("(", 1)[0].strip()


def units(kernels: list[str]) -> list[tuple[str, ...]]:
    """The kernel sources grouped into units that must be compiled together: a kernel and those it
    calls by name (a parallel row kernel calls its serial block), in the list's order.

    >>> a = "@njit()\\ndef block(x):\\n    return x"
    >>> b = "@njit()\\ndef wrapper(x):\\n    return block(x)"
    >>> c = "@njit()\\ndef other(x):\\n    return x"
    >>> [len(u) for u in units([a, b, c])]
    [2, 1]
    """
    names = [kernel_name(src) for src in kernels]
    group = list(range(len(kernels)))        # union-find over the list's positions

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    if len(kernels) > 1:
        calls = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\(")
        position = {name: i for i, name in enumerate(names)}
        for i, src in enumerate(kernels):
            for name in calls.findall(src[src.index("def "):].split("\n", 1)[-1]):   # the body, after `def`
                j = position[name]
                if j != i:   # a mention in a comment only joins units that needed not be: harmless
                    group[root(j)] = root(i)
    out: dict[int, list[str]] = {}
    for i, src in enumerate(kernels):
        out.setdefault(root(i), []).append(src)
    return [tuple(u) for u in out.values()]


@functools.lru_cache(maxsize=4096)
def canonical_unit(sources: tuple[str, ...]) -> CanonicalUnit:
    """The canonical form of a unit of kernel sources (see the module docstring).

    A kernel the renaming cannot be proven safe for (a nested scope, a global that a canonical name
    would shadow) keeps its readable text, only its comments are dropped: it is then its own key.
    """
    trees = [ast.parse(src).body[0] for src in sources]
    if not all(isinstance(t, ast.FunctionDef) for t in trees) or len(trees) != len(sources):
        raise ValueError("a kernel source must define exactly one function")
    if len(trees) == 1:
        functions = {trees[0].name: "kernel"}
    else:
        functions = {t.name: f"kernel_{j}" for j, t in enumerate(trees)}
    if not all(_renamable(t, functions) for t in trees):
        return CanonicalUnit(tuple(ast.unparse(t) for t in trees), {t.name: t.name for t in trees})
    return CanonicalUnit(tuple(ast.unparse(_renamed(t, functions)) for t in trees), functions)


def _renamable(fn: ast.FunctionDef, functions: dict[str, str]) -> bool:
    """Whether renaming ``fn``'s name, parameters and locals provably keeps what it computes."""
    nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
    if any(isinstance(n, _NESTED_SCOPES) for n in nodes):
        return False
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or a.kw_defaults:
        return False
    local = {p.arg for p in a.args} | {n.id for n in nodes
                                       if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    if local & set(functions):
        return False
    # no global it reads (nor its decorator) may be shadowed by a canonical name
    outside = [n for d in fn.decorator_list for n in ast.walk(d)]
    return not any(isinstance(n, ast.Name) and n.id not in local and n.id not in functions
                   and _CANONICAL_NAME.match(n.id) for n in nodes + outside)


def _renamed(fn: ast.FunctionDef, functions: dict[str, str]) -> ast.FunctionDef:
    """``fn`` (changed in place) with its name, parameters and locals renamed, and the two operands
    of each ``+`` and ``*`` in a canonical order."""
    mapping = dict(functions)
    for j, p in enumerate(fn.args.args):
        mapping[p.arg] = f"a{j}"
        p.arg = f"a{j}"
    fn.name = functions[fn.name]
    # locals are numbered where they are first written, in statement order: that order is the
    # graph's, while the order of operands in an expression follows sympy's sorting of the names
    count = 0
    for n in _in_source_order(fn.body):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and n.id not in mapping:
            mapping[n.id] = f"v{count}"
            count += 1
    for stmt in fn.body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name):
                n.id = mapping.get(n.id, n.id)
    _Commute().visit(fn)
    return fn


class _Commute(ast.NodeTransformer):
    """Puts the operands of each binary ``+`` and ``*`` in the order of their text.

    IEEE addition and multiplication of two numbers are commutative, exactly (signed zeros and
    infinities included), and so are those of integers and of arrays elementwise: swapping the
    two operands of one operation, without reassociating anything, changes no result.  Kernels
    never add or repeat sequences; a tuple or list literal operand is left in place all the same.
    """

    def visit_BinOp(self, node: ast.BinOp) -> ast.BinOp:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Add, ast.Mult)) and not any(
                isinstance(x, (ast.Tuple, ast.List)) or isinstance(x, ast.Constant) and isinstance(x.value, str)
                for x in (node.left, node.right)):
            if ast.unparse(node.right) < ast.unparse(node.left):
                node.left, node.right = node.right, node.left
        return node


def _in_source_order(stmts: list[ast.stmt]):
    """The nodes under ``stmts``, depth first in field order (for an assignment: the value before
    the target, as Python evaluates it)."""
    stack = list(reversed(stmts))
    while stack:
        node = stack.pop()
        yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            children = [node.value] + [c for c in children if c is not node.value]
        stack.extend(reversed(children))
