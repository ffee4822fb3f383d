"""Load and validate the rule table (``derivatives.yaml``).

Each YAML entry becomes a :class:`Rule`: the parsed schema, the forward's sympy
expression for elementwise ops, and one :class:`Formula` per differentiable input.
Everything is checked at load time; a bad entry raises :class:`RuleTableError`
naming the entry and its line.

>>> rules = load_rules()
>>> rules["mul.Tensor"].node_name
'MulBackward0'
>>> str(rules["tanh"].formulas["self"].expr)
'grad*(1 - result**2)'
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sympy
import yaml
from sympy.codegen.cfunctions import exp2, expm1, hypot, log1p, log2, log10

from . import special, vocab

TABLE_PATH = Path(__file__).resolve().parent / "derivatives.yaml"

RESERVED_KEYS = {"name", "elementwise", "node", "output_differentiability", "tags"}

# The op facts an entry may declare under ``tags:`` (read through :mod:`symgrad.rules.facts`).
TAGS = {
    "view": "the output may share input 0's memory (a numpy view of it)",
    "fresh_result": "the output is always a new array, never a view of an input",
    "same_values": "the output holds input 0's values in order, reshaped, broadcast or copied: no arithmetic",
    "broadcast": "the output is input 0 broadcast to the output's shape",
    "shifted_read": "each output element is an input element at a position affine in its own (or zero): "
                    "loops read the inputs there (codegen.shifted_reads has the index maps)",
    "recomputable": "cheap to compute again (no arithmetic): the backward may redo it instead of saving it",
    "reduce_sum": "the output sums input 0 over all dims, or over its `dim` argument",
    "reduce_mean": "the output is the mean of input 0 over all dims, or over its `dim` argument",
    "reduce_amax": "the output is the maximum of input 0 over all dims, or over its `dim` argument",
    "reduce_amin": "the output is the minimum of input 0 over all dims, or over its `dim` argument",
    "shape_from_values": "the output's shape depends on input values, not only shapes: a trace cannot record it",
    "gather": "the output is input 0 read at the integer index arrays of its `indices` argument",
    "scatter_add": "the output is a base (zeros, or `self` when `accumulate`) with `values` added at `indices`",
    "per_element": "elementwise without a sympy expression (where, casts): kernels compute it per element",
    "mask_backward": "PyTorch's gradient is a backward op reading `self`/`result`: under create_graph it is "
                     "in that value's graph, with a zero derivative through the mask",
}
METADATA_FUNCS = ("shape", "numel", "dtype")


class RuleTableError(ValueError):
    """A rule-table entry is malformed (the message names the entry and its line)."""


@dataclass(frozen=True)
class Arg:
    name: str
    type: str
    default: str | None
    kwarg_only: bool

    @property
    def is_tensor(self) -> bool:
        return self.type.startswith("Tensor") and not self.is_tensor_list

    @property
    def is_tensor_list(self) -> bool:
        return self.type.startswith("Tensor[]") or self.type.startswith("Tensor?[]")

    @property
    def optional(self) -> bool:
        return self.type.endswith("?")


@dataclass(frozen=True)
class Schema:
    text: str
    name: str
    overload: str
    args: tuple[Arg, ...]
    returns: str

    @property
    def key(self) -> str:
        return f"{self.name}.{self.overload}" if self.overload else self.name

    @property
    def num_outputs(self) -> int:
        r = self.returns.strip()
        if r.startswith("("):
            return len(_split_top(r[1:-1]))
        return 1


class Formula:
    """One input's vector-Jacobian product.

    The sympy forms are built on first use: building all of the table's expressions costs
    about 0.3 s, and a program uses a handful of ops.  ``params`` (the names the compiled
    formula takes) is read from the formula's syntax tree, without sympy.
    """

    __slots__ = ("input", "text", "params", "_parse", "_exprs")

    def __init__(self, input: str, text: str, params: tuple[str, ...], parse) -> None:
        self.input, self.text, self.params = input, text, params
        self._parse = parse        # () -> (expr, code_expr); raises RuleTableError on a bad formula
        self._exprs = None

    def _parsed(self):
        if self._exprs is None:
            self._exprs = self._parse()
        return self._exprs

    @property
    def expr(self) -> sympy.Expr:
        """The formula as written, with shape(x)/numel(x)/dtype(x) calls."""
        return self._parsed()[0]

    @property
    def code_expr(self) -> sympy.Expr:
        """The formula with metadata calls replaced by symbols such as ``self__shape``."""
        return self._parsed()[1]

    @property
    def is_bare_name(self) -> bool:
        """True when the formula is just a name (``self: other``): its value is saved memory."""
        return self.text.strip().isidentifier()

    def __repr__(self) -> str:
        return f"Formula({self.input}: {self.text})"


@dataclass
class Rule:
    schema: Schema
    line: int
    node_name: str
    elementwise_text: str | None       # the forward of an elementwise op, in sympy syntax
    formulas: dict[str, Formula]
    non_differentiable: tuple[str, ...]
    output_differentiability: tuple[bool, ...]
    saved: dict[str, str] = field(default_factory=dict)  # saved name -> kind (tensor/value/meta)
    tags: frozenset[str] = frozenset()   # op facts (TAGS)
    _parse_elementwise: Any = field(default=None, repr=False, compare=False)
    _elementwise: Any = field(default=None, repr=False, compare=False)

    @property
    def elementwise(self) -> sympy.Expr | None:
        """The elementwise forward as a sympy expression of the schema's arguments (built on first use)."""
        if self._elementwise is None and self.elementwise_text is not None:
            self._elementwise = self._parse_elementwise()
        return self._elementwise

    @property
    def key(self) -> str:
        return self.schema.key

    @property
    def differentiable(self) -> bool:
        return bool(self.formulas)


# --- schema parsing -------------------------------------------------------------------------

_SCHEMA_RE = re.compile(r"^\s*([A-Za-z_][\w]*)(?:\.([\w]+))?\s*\((.*)\)\s*->\s*(.+?)\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets or parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def parse_schema(text: str) -> Schema:
    """Parse ``op.overload(Type name=default, *, ...) -> Return``."""
    m = _SCHEMA_RE.match(text)
    if not m:
        raise ValueError(f"cannot parse schema {text!r}: expected 'op.overload(args) -> Return'")
    name, overload, arg_text, returns = m.group(1), m.group(2) or "", m.group(3), m.group(4)
    args, kwarg_only = [], False
    for part in _split_top(arg_text):
        if part == "*":
            kwarg_only = True
            continue
        default = None
        if "=" in part:
            part, default = (s.strip() for s in part.split("=", 1))
        pieces = part.rsplit(None, 1)
        if len(pieces) != 2:
            raise ValueError(f"cannot parse argument {part!r} in schema {text!r}")
        args.append(Arg(name=pieces[1], type=pieces[0], default=default, kwarg_only=kwarg_only))
    return Schema(text=text.strip(), name=name, overload=overload, args=tuple(args), returns=returns)


def node_prefix(op_name: str) -> str:
    """PyTorch's node-name prefix: ``log_softmax`` -> ``LogSoftmax``, ``log1p`` -> ``Log1P``."""
    return "".join(part.title() for part in op_name.split("_") if part)


# --- formula parsing ------------------------------------------------------------------------

def _piecewise(*pairs) -> sympy.Piecewise:
    """A ``Piecewise`` kept as written.  sympy's own simplifies the conditions as in an ordered field
    (after ``x <= a`` fails, ``x > a`` holds), which a nan contradicts: every comparison with it is
    false, so each branch's condition is what decides where a nan goes."""
    return sympy.Piecewise(*pairs, evaluate=False)


# sympy functions a formula may use; each maps to a vocabulary entry of the same meaning.
SYMPY_FUNCTIONS: dict[str, Any] = {
    "exp": sympy.exp, "log": sympy.log, "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan,
    "tanh": sympy.tanh, "sinh": sympy.sinh, "cosh": sympy.cosh, "atan": sympy.atan,
    "sqrt": sympy.sqrt, "Abs": sympy.Abs, "sign": sympy.sign, "Heaviside": sympy.Heaviside,
    "Piecewise": _piecewise, "Eq": sympy.Eq, "Ne": sympy.Ne, "erf": sympy.erf,
    "log1p": log1p, "expm1": expm1, "log2": log2, "exp2": exp2, "Max": sympy.Max, "Min": sympy.Min,
    "pi": sympy.pi, "E": sympy.E, "nan": sympy.nan, "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not,
    # numpy surface, elementwise family: inverse trigonometric and special functions, rounding
    "asin": sympy.asin, "acos": sympy.acos, "asinh": sympy.asinh, "acosh": sympy.acosh, "atanh": sympy.atanh,
    "atan2": sympy.atan2, "hypot": hypot, "log10": log10, "erfc": sympy.erfc, "loggamma": sympy.loggamma,
    "digamma": sympy.digamma, "polygamma": sympy.polygamma, **special.SYMPY_CLASSES,
}


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _parse_expr(text: str, names: set[str], functions=frozenset()) -> sympy.Expr:
    text = str(text)
    # undefined functions only for the names the text uses: making sympy's function classes is slow
    # the first time (the first formula of a process would make all eighty)
    used = set(_IDENTIFIER.findall(text))
    local = dict(SYMPY_FUNCTIONS)
    for n in names:
        local[n] = sympy.Symbol(n)
    for fn in (vocab.FORMULA_FUNCTIONS | functions) & used:
        if fn not in local:
            local[fn] = sympy.Function(fn)
    for fn in METADATA_FUNCS:
        if fn in used:
            local[fn] = sympy.Function(fn)
    expr = _evaluate_plain(text, local)
    if expr is not _NOT_PLAIN:
        return expr
    return sympy.parse_expr(text, local_dict=local, evaluate=True)


_NOT_PLAIN = object()
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_COMPARE = {ast.Gt: operator.gt, ast.Lt: operator.lt, ast.GtE: operator.ge, ast.LtE: operator.le}


class _NotPlain(Exception):
    """The formula uses syntax outside :func:`_evaluate_plain`'s subset."""


def _evaluate_plain(text: str, local: dict) -> Any:
    """The value ``sympy.parse_expr(text, local_dict=local, evaluate=True)`` has, computed from
    the Python syntax tree without sympy's tokenizer (several times faster), or ``_NOT_PLAIN``.

    The subset is arithmetic, single comparisons, tuples, calls and names of ``local``, and
    decimal literals (made ``Integer``/``Float`` from their text, as sympy's parser does).  Any
    other syntax, or a name ``local`` lacks, is left to sympy's parser, so unknown names and
    malformed formulas get its behaviour and errors.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return _NOT_PLAIN

    def value(node):
        kind = type(node)
        if kind is ast.BinOp and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        if kind is ast.UnaryOp and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        if kind is ast.Name and node.id in local:
            return local[node.id]
        if kind is ast.Constant:
            if type(node.value) is bool:
                return node.value
            literal = ast.get_source_segment(text.strip(), node)
            if literal is None or not literal.replace(".", "").replace("e", "").replace("-", "").isdigit():
                raise _NotPlain
            return sympy.Integer(literal) if type(node.value) is int else sympy.Float(literal)
        if kind is ast.Call and type(node.func) is ast.Name and node.func.id in local and not node.keywords \
                and not any(type(a) is ast.Starred for a in node.args):
            return local[node.func.id](*(value(a) for a in node.args))
        if kind is ast.Tuple:
            return tuple(value(e) for e in node.elts)
        if kind is ast.Compare and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        raise _NotPlain

    try:
        return value(tree.body)
    except _NotPlain:
        return _NOT_PLAIN


def _metadata_to_symbols(expr: sympy.Expr, where: str) -> sympy.Expr:
    """Replace ``shape(x)`` by the symbol ``x__shape`` (likewise numel, dtype)."""
    repl = {}
    for call in expr.atoms(sympy.Function):
        fname = type(call).__name__
        if fname in METADATA_FUNCS:
            (arg,) = call.args
            if not isinstance(arg, sympy.Symbol):
                raise ValueError(f"{where}: {fname}() takes an argument name, got {arg}")
            repl[call] = sympy.Symbol(f"{arg.name}__{fname}")
    return expr.xreplace(repl)


def _check_names(expr: sympy.Expr, allowed: set[str], where: str, functions=frozenset()) -> None:
    for sym in expr.free_symbols:
        base = sym.name.split("__")[0]
        if base not in allowed:
            raise ValueError(f"{where}: unknown name {sym.name!r} (known: {', '.join(sorted(allowed))})")
    for call in expr.atoms(sympy.Function):
        fname = type(call).__name__
        known = vocab.FORMULA_FUNCTIONS | functions
        if isinstance(call, sympy.core.function.AppliedUndef) and fname not in known \
                and fname not in METADATA_FUNCS:
            raise ValueError(f"{where}: unknown function {fname!r}; formula functions are "
                             f"{', '.join(sorted(known))}")


def _parse_elementwise(text: str, arg_names: set[str], where: str) -> sympy.Expr:
    try:
        expr = _parse_expr(text, arg_names)
        _check_names(expr, arg_names, where + " elementwise")
        return expr
    except (SyntaxError, TypeError, ValueError, sympy.SympifyError, TokenError) as exc:
        raise RuleTableError(f"{where}: cannot parse elementwise expression: {exc}") from None


def _parse_formula(text: str, scope: set[str], functions, where: str, error: str):
    """(expr, code_expr) of one formula, or RuleTableError naming its entry."""
    try:
        expr = _parse_expr(text, scope, functions)
        _check_names(expr, scope, where, functions)
        return expr, _metadata_to_symbols(expr, where)
    except (SyntaxError, TypeError, ValueError, sympy.SympifyError, TokenError) as exc:
        raise RuleTableError(f"{error}: {exc}") from None


def _formula_params(text: str, scope: set[str]) -> tuple[str, ...] | None:
    """The formula's parameter names from its Python syntax tree (what sympy would find free).

    Names of the scope that are read as values, and ``x__shape`` for ``shape(x)`` (likewise
    numel, dtype).  None when the text is not plain Python syntax (sympy then decides).
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    found: set[str] = set()
    stack = [tree.body]
    while stack:   # one pass over the tree (this runs for every formula of the table at load)
        node = stack.pop()
        kind = type(node)
        if kind is ast.Name:
            if node.id in scope:
                found.add(node.id)
            continue
        if kind is ast.Call and type(node.func) is ast.Name:
            if node.func.id in METADATA_FUNCS:
                if len(node.args) != 1 or type(node.args[0]) is not ast.Name or node.keywords:
                    return None
                found.add(f"{node.args[0].id}__{node.func.id}")
                continue
            # a called name is a function, not a value
            stack.extend(node.args)
            stack.extend(k.value for k in node.keywords)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return tuple(sorted(found, key=lambda n: (n != "grad", n)))


def _build_rule(entry: dict, line: int, counters: dict[str, int], functions=frozenset(), lazy: bool = False) -> Rule:
    where = f"derivatives.yaml line {line}"
    if not isinstance(entry, dict) or "name" not in entry:
        raise RuleTableError(f"{where}: each entry needs a 'name:' schema")
    try:
        schema = parse_schema(str(entry["name"]))
    except ValueError as exc:
        raise RuleTableError(f"{where}: {exc}") from None
    where = f"derivatives.yaml line {line} ({schema.key})"
    arg_names = {a.name for a in schema.args}
    scope = arg_names | {"grad", "grads", "result"} | {f"result{i}" for i in range(schema.num_outputs)}

    elementwise_text = None
    parse_elementwise = None
    if "elementwise" in entry:
        elementwise_text = str(entry["elementwise"])
        parse_elementwise = functools.partial(_parse_elementwise, elementwise_text, arg_names, where)

    formulas: dict[str, Formula] = {}
    non_diff: list[str] = []
    for key, value in entry.items():
        if key in RESERVED_KEYS:
            continue
        if key not in arg_names:
            raise RuleTableError(f"{where}: {key!r} is not an argument of the schema "
                                 f"(arguments: {', '.join(a.name for a in schema.args)})")
        if value == "non_differentiable":
            non_diff.append(key)
            continue
        text = str(value)
        parse = functools.partial(_parse_formula, text, scope, functions, f"{where} formula for {key!r}",
                                  f"{where}: cannot parse formula for {key!r}: {text!r}")
        params = _formula_params(text, scope) if lazy else None
        if params is None:  # eager (or a formula whose syntax the fast path does not read): parse now
            _, code_expr = parse()
            params = tuple(sorted((s.name for s in code_expr.free_symbols), key=lambda n: (n != "grad", n)))
        formulas[key] = Formula(key, text, params, parse)

    n_out = schema.num_outputs
    out_diff = entry.get("output_differentiability")
    if schema.returns.strip().startswith("Tensor[]"):
        out_diff = ()  # a list of outputs, all differentiable
    elif out_diff is None:
        out_diff = (True,) + (False,) * (n_out - 1)
    elif len(out_diff) != n_out:
        raise RuleTableError(f"{where}: output_differentiability has {len(out_diff)} entries, "
                             f"the schema returns {n_out}")

    prefix = node_prefix(schema.name)
    if "node" in entry:
        node_name = str(entry["node"])
    elif formulas:
        node_name = f"{prefix}Backward{counters.get(prefix, 0)}"
    else:
        node_name = ""
    if formulas:  # like PyTorch, only differentiable overloads take a number
        counters[prefix] = counters.get(prefix, 0) + 1

    saved: dict[str, str] = {}
    tensor_args = {a.name for a in schema.args if a.is_tensor or a.is_tensor_list}
    for f in formulas.values():
        for p in f.params:
            if p in ("grad", "grads"):
                continue
            if "__" in p:
                saved[p] = "meta"
            elif p.startswith("result") or p in tensor_args:
                saved[p] = "tensor"
            else:
                saved[p] = "value"
    rule = Rule(schema, line, node_name, elementwise_text, formulas, tuple(non_diff), tuple(out_diff), saved,
                tags=_parse_tags(entry.get("tags"), where), _parse_elementwise=parse_elementwise)
    if not lazy and parse_elementwise is not None:
        rule.elementwise  # noqa: B018 - parse now so that errors point at the entry at load time
    return rule


def _parse_tags(value, where: str) -> frozenset[str]:
    """The ``tags:`` of an entry: a list of names from :data:`TAGS`, at most one ``reduce_*``."""
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise RuleTableError(f"{where}: tags must be a list of names, got {value!r}")
    for t in value:
        if t not in TAGS:
            raise RuleTableError(f"{where}: unknown tag {t!r} (tags: {', '.join(TAGS)})")
    reductions = [t for t in value if t.startswith("reduce_")]
    if len(reductions) > 1:
        raise RuleTableError(f"{where}: at most one reduce_* tag, got {', '.join(reductions)}")
    return frozenset(value)


try:  # sympy raises tokenize errors for some malformed formulas
    from tokenize import TokenError
except ImportError:  # pragma: no cover
    TokenError = SyntaxError


class _LineLoader(yaml.SafeLoader):
    """A YAML loader that records each mapping's line number under '__line__'."""


def _construct_mapping(loader, node, deep=False):
    mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _FastLineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The same with libyaml's parser when PyYAML has it (much faster; its errors say less,
    so a failure is parsed again by :class:`_LineLoader` for the message)."""


_FastLineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_rules(text: str, counters: dict[str, int] | None = None, known_ops=frozenset(),
                lazy: bool = False) -> dict[str, Rule]:
    """Parse YAML text in the table's format into rules keyed by ``op.overload``.

    With ``lazy``, derivative formulas are turned into sympy expressions on first use
    (schemas, names, node names and saved-value plans are still checked now).

    >>> parse_rules("- name: cube(Tensor self) -> Tensor\\n  elementwise: self**3\\n"
    ...             "  self: 3 * grad * self**2\\n")["cube"].node_name
    'CubeBackward0'
    """
    try:
        try:
            entries = yaml.load(text, Loader=_FastLineLoader)
        except yaml.YAMLError:
            entries = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        raise RuleTableError(f"derivatives.yaml is not valid YAML: {exc}") from None
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise RuleTableError("the rule table must be a YAML list of entries")
    counters = {} if counters is None else counters
    # Formulas may call any op of this table (or already registered) by its base name.
    functions = set(known_ops)
    for entry in entries:
        if isinstance(entry, dict) and "name" in entry:
            m = _SCHEMA_RE.match(str(entry["name"]))
            if m:
                functions.add(m.group(1))
    functions = frozenset(functions)
    rules: dict[str, Rule] = {}
    for entry in entries:
        line = entry.pop("__line__", 0) if isinstance(entry, dict) else 0
        rule = _build_rule(entry, line, counters, functions, lazy)
        if rule.key in rules:
            raise RuleTableError(f"derivatives.yaml line {line}: duplicate entry {rule.key!r} "
                                 f"(first at line {rules[rule.key].line})")
        rules[rule.key] = rule
    return rules


_cache: dict[str, Rule] | None = None
_counters: dict[str, int] = {}


def load_rules(validate: bool = False) -> dict[str, Rule]:
    """The shipped rule table, parsed once (formulas lazily; ``validate`` parses them all now)."""
    global _cache
    if _cache is None:
        _cache = parse_rules(TABLE_PATH.read_text(), _counters, lazy=True)
    if validate:
        for rule in _cache.values():
            rule.elementwise  # noqa: B018 - parsing is the check
            for f in rule.formulas.values():
                f.expr  # noqa: B018
    return _cache


def name_counters() -> dict[str, int]:
    """Per-prefix overload counters after loading the shipped table (for user-registered ops)."""
    load_rules()
    return _counters
