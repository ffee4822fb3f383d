"""sympy printers that turn rule-table formulas into Python source.

:class:`FormulaPrinter` prints a formula as one Python expression over plain
names (``grad*cos(self)``).  Functions are printed as *vocabulary names*
(``cos``, ``where``, ``expand``), and the same source is evaluated against two
namespaces: numpy functions for plain eager backward, differentiable symgrad
functions when ``create_graph=True`` (see ``symgrad/ops/vocab.py``).  Operators
stay operators, so they work on numpy arrays and on Tensors alike.

Constant sub-expressions are folded to Python float literals: a numpy float64
scalar such as ``numpy.log(2)`` would widen a float32 gradient, a Python float
does not (NEP 50).

>>> import sympy
>>> x, g = sympy.symbols("self grad")
>>> FormulaPrinter().doprint(g * sympy.cos(x) / 2)
'(0.5)*grad*cos(self)'
"""

from __future__ import annotations

import sympy
from sympy.printing.pycode import PythonCodePrinter

# sympy function class name -> vocabulary name
FUNCTION_NAMES = {
    "exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
    "sinh": "sinh", "cosh": "cosh", "atan": "atan", "Abs": "abs", "sign": "sign", "erf": "erf",
    "log1p": "log1p", "expm1": "expm1", "log2": "log2", "exp2": "exp2", "Max": "maximum",
    "Min": "minimum",
    # numpy surface, elementwise family (the classes of symgrad.rules.special print as their own names)
    "asin": "asin", "acos": "acos", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "atan2": "atan2",
    "hypot": "hypot", "log10": "log10", "erfc": "erfc", "loggamma": "lgamma",
}


def _float_literal(value: float) -> str:
    """A float as source that Python and Numba both read back exactly (inf and nan included)."""
    if value != value:
        return "math.nan"
    if value in (float("inf"), float("-inf")):
        return "math.inf" if value > 0 else "(-math.inf)"
    return repr(value)


class FormulaPrinter(PythonCodePrinter):
    """Print a sympy formula as a Python expression over vocabulary names."""

    printmethod = "_symgrad_formula"

    def __init__(self, settings=None):
        super().__init__(dict(settings or {}, fully_qualified_modules=False))

    # constants ----------------------------------------------------------------------------
    def _print_Integer(self, expr):
        return str(int(expr))

    def _print_Rational(self, expr):
        return repr(float(expr))

    def _print_Float(self, expr):
        return _float_literal(float(expr))

    def _print_Infinity(self, expr):
        return "math.inf"

    def _print_NegativeInfinity(self, expr):
        return "(-math.inf)"

    def _print_NaN(self, expr):
        return "math.nan"

    def _print_ComplexInfinity(self, expr):
        # sympy's 1/0 (x / 0.0 in user code): IEEE's +inf for a division by +0.0, so that
        # x/0.0 == x*inf (+-inf, or nan at 0) as numpy computes it
        return "math.inf"

    def _print_NumberSymbol(self, expr):
        return _float_literal(float(expr))

    _print_Pi = _print_NumberSymbol
    _print_Exp1 = _print_NumberSymbol

    def _print_Half(self, expr):
        return "0.5"

    def doprint(self, expr, assign_to=None):
        return super().doprint(_fold_constants(expr), assign_to)

    # functions ------------------------------------------------------------------------------
    def _print_Function(self, expr):
        name = type(expr).__name__
        name = FUNCTION_NAMES.get(name, name)
        return f"{name}({', '.join(self._print(a) for a in expr.args)})"

    def _print_polygamma(self, expr):
        # sympy spells digamma polygamma(0, x); the vocabulary has digamma for it
        n, x = expr.args
        if n == 0:
            return f"digamma({self._print(x)})"
        return f"polygamma({self._print(n)}, {self._print(x)})"

    def _print_sign(self, expr):
        return f"sign({self._print(expr.args[0])})"

    def _print_Abs(self, expr):
        return f"abs({self._print(expr.args[0])})"

    def _nested(self, name, args):
        out = self._print(args[0])
        for a in args[1:]:
            out = f"{name}({out}, {self._print(a)})"
        return out

    def _print_Max(self, expr):
        # sympy sorts Max's arguments; keep symbols first so `maximum(self, 0)` reads naturally
        args = sorted(expr.args, key=lambda a: a.is_number)
        return self._nested("maximum", args)

    def _print_Min(self, expr):
        args = sorted(expr.args, key=lambda a: a.is_number)
        return self._nested("minimum", args)

    def _print_Heaviside(self, expr):
        x = self._print(expr.args[0])
        h0 = self._print(expr.args[1]) if len(expr.args) > 1 else "0.5"
        return f"heaviside({x}, {h0})"

    def _print_Piecewise(self, expr):
        *pairs, (last_value, last_cond) = expr.args
        if last_cond != sympy.true:
            raise ValueError(f"Piecewise needs a final (value, True) branch: {expr}")
        out = self._print(last_value)
        for value, cond in reversed(pairs):
            out = f"where({self._print(cond)}, {self._print(value)}, {out})"
        return out

    def _print_Relational(self, expr):
        names = {"==": "eq", "!=": "ne"}
        op = expr.rel_op
        if op in names:
            return f"{names[op]}({self._print(expr.lhs)}, {self._print(expr.rhs)})"
        return f"({self._print(expr.lhs)} {op} {self._print(expr.rhs)})"

    def _print_And(self, expr):
        out = self._print(expr.args[0])
        for a in expr.args[1:]:
            out = f"logical_and({out}, {self._print(a)})"
        return out

    def _print_Or(self, expr):
        out = self._print(expr.args[0])
        for a in expr.args[1:]:
            out = f"logical_or({out}, {self._print(a)})"
        return out

    def _print_Not(self, expr):
        return f"logical_not({self._print(expr.args[0])})"

    def _print_Pow(self, expr, rational=False):
        base, e = expr.args
        # x**0.5 is sqrt(x), as numpy computes it: C's pow gives +inf at -inf where numpy gives nan
        # (sympy's Float(0.5) does not compare equal to its Half)
        if e == sympy.S.Half or (e.is_Float and float(e) == 0.5):
            return f"sqrt({self._print(base)})"
        if e == -sympy.S.Half:
            return f"1/sqrt({self._print(base)})"
        if e == -1:
            return f"1/{self.parenthesize(base, sympy.printing.precedence.PRECEDENCE['Pow'])}"
        if e.is_Integer and e < 0:
            # x**-n as 1/x**n: a float raised to a negative integer power raises ZeroDivisionError at
            # 0.0 in Python and Numba, where numpy (and eager mode) give inf
            return f"1/{self.parenthesize(base, sympy.printing.precedence.PRECEDENCE['Pow'])}**{-int(e)}"
        return super()._print_Pow(expr, rational=rational)

    def _print_Symbol(self, expr):
        return expr.name


# rebuilt unevaluated too: sympy folds Ne(x, x) to False and Eq(x, x) to True, which NaN contradicts
_Relational = sympy.core.relational.Relational


def _fold_constants(expr):
    """Evaluate constant sub-expressions (``log(2)``, ``pi/2``) to floats."""
    if not isinstance(expr, sympy.Basic) or isinstance(expr, (sympy.Number, sympy.Symbol)):
        return expr
    if not expr.free_symbols and not expr.atoms(sympy.core.function.AppliedUndef) \
            and isinstance(expr, sympy.Expr) and expr.is_number:
        value = complex(expr.evalf())
        if value.imag == 0:
            return sympy.Float(value.real)
    if isinstance(expr, sympy.Piecewise):
        return sympy.Piecewise(*[(_fold_constants(v), c) for v, c in expr.args], evaluate=False)
    if isinstance(expr, (sympy.Max, sympy.Min)):
        # unevaluated: sympy orders Max/Min's arguments as reals (Min(-1, Max(1, x)) is -1), which a nan
        # contradicts and which drops x's shape
        return expr.func(*[_fold_constants(a) for a in expr.args], evaluate=False)
    if not expr.args:
        return expr
    return expr.func(*[_fold_constants(a) for a in expr.args], evaluate=False) \
        if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Pow, _Relational)) else expr.func(
            *[_fold_constants(a) for a in expr.args])


def formula_source(expr: sympy.Expr, params: tuple[str, ...], name: str = "formula") -> str:
    """Source of a Python function ``def name(params): return <expr>``.

    >>> import sympy
    >>> print(formula_source(sympy.Symbol("grad") * sympy.Symbol("other"), ("grad", "other")))
    def formula(grad, other):
        return grad*other
    """
    body = FormulaPrinter().doprint(expr)
    return f"def {name}({', '.join(params)}):\n    return {body}"


def compile_formula(expr: sympy.Expr, params: tuple[str, ...], namespace: dict, name: str = "formula"):
    """Compile a formula into a function evaluated against ``namespace``."""
    return compile_source(formula_source(expr, params, name), namespace, name)


def compile_source(src: str, namespace: dict, name: str):
    """The function ``name`` defined by ``src`` (from :func:`formula_source`), evaluated against ``namespace``."""
    glb = dict(namespace)
    exec(compile(src, f"<formula {name}>", "exec"), glb)
    fn = glb[name]
    fn.__source__ = src
    return fn
