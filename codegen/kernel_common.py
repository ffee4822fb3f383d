"""What the loop kernels (:mod:`codegen.numba_emit`) and the row kernels (:mod:`codegen.row_kernel`) share.

The printer of a kernel statement, the ``@njit`` line, how constants become kernel parameters,
how an op's arguments appear in a kernel comment, and :class:`NumbaEmitted`, what both emitters
return.  Numba itself is imported only when a kernel is compiled (or its namespace built).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from symgrad.ir.graph import Value, _arg_text
from symgrad.rules.printers import FUNCTION_NAMES

from .emit import _Printer

# Outer-loop chunks of a parallel kernel.  A fixed count (not the thread count) keeps parallel
# reductions deterministic: each chunk sums its rows in order, then the chunks are added in order.
PARALLEL_CHUNKS = 64

# Functions whose vector forms are exact only up to an argument size: a loop that calls them
# or-reduces ``sincos_out_of_range_<dtype>(argument)`` and, when any argument is out of range,
# the glue runs the loop again from its libm twin (``group_<k>_libm``, compiled only if needed).
RANGE_CHECKED = ("sin", "cos")
RANGE_CHECK = "sincos_out_of_range"


def scalar_namespace() -> dict:
    """The names generated glue and kernels call (:mod:`codegen.scalar_math`, which imports Numba:
    so only when code is emitted)."""
    from .scalar_math import SCALAR_NAMESPACE

    return dict(SCALAR_NAMESPACE)


def vector_imports(*extra: str) -> str:
    """The import lines of a ``math="vector"`` kernel: :data:`~codegen.scalar_math.VECTOR_IMPORT_LINES`,
    then each non-empty ``extra`` as a line."""
    from .scalar_math import VECTOR_IMPORT_LINES

    return VECTOR_IMPORT_LINES + "".join(e.rstrip("\n") + "\n" for e in extra if e)


class KernelPrinter(_Printer):
    """Prints a loop statement; under ``math="vector"`` the functions of ``vector`` become calls of
    their inline, dtype-specific versions (``exp(x)`` -> ``vexp_f64(x)``), and so does a power
    with a constant non-integer exponent (``x**1.5`` -> ``vpow_f64(x, 1.5)``) when ``pow`` is there."""

    def __init__(self, names: dict[str, str], vector: dict) -> None:
        super().__init__(names)
        self.vector = vector
        self.suffix = "f64"   # set per statement: the dtype the node computes in
        self.checks: list[str] = []   # range checks the statements printed so far need

    def _print(self, expr, **kwargs):
        if self.vector:
            if isinstance(expr, sympy.Function):
                name = FUNCTION_NAMES.get(type(expr).__name__, type(expr).__name__)
                base = self.vector.get(name)
                if base:
                    args = ', '.join(self._print(a) for a in expr.args)
                    if name in RANGE_CHECKED:
                        check = f"{RANGE_CHECK}_{self.suffix}({args})"
                        if check not in self.checks:
                            self.checks.append(check)
                    return f"{base}_{self.suffix}({args})"
            elif isinstance(expr, sympy.Pow) and "pow" in self.vector:
                e = expr.exp
                if e.is_Number and e.is_finite and not e.is_Integer and e not in (sympy.S.Half, -sympy.S.Half):
                    return f"{self.vector['pow']}_{self.suffix}({self._print(expr.base)}, {float(e)!r})"
        return super()._print(expr, **kwargs)


def compute_suffix(n) -> str:
    """``f32`` for a node computing in float32, else ``f64`` (a comparison computes in its inputs' dtype)."""
    o = n.outputs[0]
    dtype = o.dtype if o.dtype.is_floating_point else next(
        (v.dtype for v in n.inputs if v.dtype.is_floating_point), o.dtype)
    return "f32" if dtype.np == np.float32 else "f64"


def rounded_to_dtype(n, code: str) -> str:
    """``code`` rounded to float32 when the node's value is float32.  A loop computes in float64 where
    a constant or a libm call promotes; eager rounds every float32 result, so an unrounded value would
    differ from the one saved in the forward (``x == x.amax()`` false in every column, ``sign(x - max)``
    not 0 at the max): each float32 node is rounded where it is computed, as eager rounds it."""
    return f"np.float32({code})" if n.outputs[0].dtype.np == np.float32 else code


@dataclass
class NumbaEmitted:
    """The glue source, one decorated kernel source per group, and how to compile them."""

    name: str
    source: str
    kernels: list[str]
    namespace: dict = field(default_factory=dict)
    imports: str = ""          # import lines the kernels need beyond codegen.scalar_math.IMPORT_LINES
    math: str = "libm"

    @property
    def full_source(self) -> str:
        head = f"# math={self.math!r}" + (f"; {self.imports.strip()}" if self.imports else "")
        return "\n\n".join([head] + self.kernels + [self.source])

    def compile(self, cache: bool = True):
        """The glue function, calling kernels compiled by :mod:`codegen.jit` (from its disk cache
        with ``cache``).  The glue is plain Python: it is made by ``exec`` and never cached."""
        from . import jit

        kernels = jit.load_kernels(self.kernels, cache=cache, imports=self.imports)
        glb = dict(self.namespace)
        glb.update(kernels)
        exec(compile(self.source, f"<symgrad {self.name}>", "exec"), glb)
        fn = glb[self.name]
        fn.__source__ = self.full_source
        fn.kernels = list(kernels.values())
        return fn


def decorator(parallel: bool, fastmath: bool, vector: bool = False) -> str:
    """The ``@njit(...)`` line of a generated kernel (the disk cache adds ``cache=True``).

    Under ``math="vector"`` (``vector``), ``fastmath`` allows only FMA contraction
    (:data:`~codegen.scalar_math.VECTOR_FASTMATH`): fastmath flags reach the inlined elementary
    functions, whose range reductions and special values need IEEE arithmetic.

    >>> decorator(False, True, vector=True)
    "@njit(error_model='numpy', fastmath={'contract'})"
    """
    flags = ["error_model='numpy'"]
    if parallel:
        flags.append("parallel=PARALLEL_PRANGE_ONLY")
    if fastmath:
        from .scalar_math import VECTOR_FASTMATH

        flags.append(f"fastmath={set(sorted(VECTOR_FASTMATH))!r}" if vector else "fastmath=True")
    return f"@njit({', '.join(flags)})"


def lift_constants(expr: sympy.Expr, constants: list) -> sympy.Expr:
    """Replace non-integer numbers (outside exponents) by symbols ``k0, k1, ...``."""
    if isinstance(expr, sympy.Pow):
        return sympy.Pow(lift_constants(expr.base, constants), expr.exp, evaluate=False)
    if expr.is_Number:
        if expr.is_Integer or expr in (sympy.nan, sympy.oo, -sympy.oo, sympy.zoo):
            return expr
        for j, (_, value) in enumerate(constants):
            if value == expr:
                return sympy.Symbol(f"k{j}")
        constants.append((f"k{len(constants)}", expr))
        return sympy.Symbol(constants[-1][0])
    if not expr.args or isinstance(expr, (sympy.Symbol, sympy.logic.boolalg.BooleanAtom)):
        return expr
    args = [lift_constants(a, constants) if isinstance(a, sympy.Basic) else a for a in expr.args]
    if isinstance(expr, sympy.Piecewise):
        return sympy.Piecewise(*args, evaluate=False)
    # unevaluated: sympy folds x - x to 0, Ne(x, x) to False and Min(-1, Max(1, x)) to -1, which NaN contradicts
    keep_form = (sympy.Add, sympy.Mul, sympy.core.relational.Relational, sympy.Max, sympy.Min)
    return expr.func(*args, evaluate=False) if isinstance(expr, keep_form) else expr.func(*args)


def generic_arg(a, constants: list, code: str) -> str:
    """An op argument for a kernel comment, without anything that depends on sizes: the kernel's
    text (and so its cache key) must be the same for every size."""
    if isinstance(a, Value):
        return f"%{a.name}"
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        for name, value in constants:
            if float(value) == float(a):
                return name
        if isinstance(a, int) and str(a) in code:
            return str(a)
        return "…"
    return _arg_text(a) if isinstance(a, (bool, str, type(None))) else "…"
