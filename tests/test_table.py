"""The rule-table loader (``symgrad/ops/table.py``) and the formula printer (``codegen/printers.py``).

Covers: every shipped entry parses and compiles; node names follow PyTorch's; saved-variable
inference (metadata-only nodes can run backward twice); and each validation error is a
:class:`RuleTableError` naming the entry's line and name.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

import symgrad
from symgrad.ops import formula_namespaces, registry
from symgrad.rules import table
from symgrad.rules.printers import FormulaPrinter, compile_formula, formula_source
from symgrad.rules.table import TABLE_PATH, RuleTableError, load_rules, node_prefix, parse_rules, parse_schema

RULES = load_rules()

# A valid entry (lines 1-3, then a blank line 4) placed before each bad one, so the bad entry is on line 5.
GOOD = (
    "- name: cube(Tensor self) -> Tensor\n"
    "  elementwise: self**3\n"
    "  self: 3 * grad * self**2\n"
    "\n"
)
BAD_LINE = 5


# --- the shipped table ------------------------------------------------------------------------

def test_table_is_not_empty_and_matches_registry():
    assert len(RULES) > 10
    assert set(RULES) == set(registry.all_ops())


def test_shipped_table_parses_fresh():
    """Parsing the file again (without the cache) gives the same entries, node names and formulas."""
    fresh = parse_rules(TABLE_PATH.read_text())
    assert list(fresh) == list(RULES)
    for key, rule in fresh.items():
        assert rule.node_name == RULES[key].node_name, key
        texts = {n: f.text for n, f in rule.formulas.items()}
        assert texts == {n: f.text for n, f in RULES[key].formulas.items()}


@pytest.mark.parametrize("key", list(RULES))
def test_shipped_entry(key):
    rule = RULES[key]
    text_lines = TABLE_PATH.read_text().splitlines()
    assert text_lines[rule.line - 1].lstrip("- ").startswith("name:"), \
        f"{key}: line {rule.line} is not its entry"
    assert rule.schema.text in text_lines[rule.line - 1]
    assert rule.key == key
    arg_names = {a.name for a in rule.schema.args}
    assert set(rule.formulas) <= arg_names
    assert set(rule.non_differentiable) <= arg_names
    assert not set(rule.formulas) & set(rule.non_differentiable)
    if rule.elementwise is not None:
        assert isinstance(rule.elementwise, sympy.Basic)  # Expr, or Boolean for comparisons
        assert {s.name for s in rule.elementwise.free_symbols} <= arg_names
    for name, f in rule.formulas.items():
        assert f.input == name
        assert isinstance(f.expr, sympy.Basic)
        if f.expr != 0:  # `0 * grad` (sign, zero_) folds to 0
            assert {"grad", "grads"} & set(f.params), \
                f"{key}: {name}: formula does not use the incoming gradient"
        # every shipped formula prints to Python source that compiles against both namespaces
        src = formula_source(f.code_expr, f.params)
        compile(src, f"<{key} {name}>", "exec")
        for ns in (formula_namespaces.numpy_namespace(), formula_namespaces.tensor_namespace()):
            fn = compile_formula(f.code_expr, f.params, ns)
            names = set(re.findall(r"\b([A-Za-z_]\w*)\(", src))
            missing = sorted(n for n in names if n not in fn.__globals__)
            assert not missing, f"{key}: formula for {name!r} calls {missing}, not in the formula namespace"
    if rule.formulas:
        assert rule.node_name
        assert registry.get(key).node_class.__name__ == rule.node_name
    else:
        assert rule.node_name == ""


# --- node names -------------------------------------------------------------------------------

@pytest.mark.parametrize("key,name", [
    ("mul.Tensor", "MulBackward0"),
    ("add.Tensor", "AddBackward0"),
    ("pow.Tensor_Scalar", "PowBackward0"),
    ("pow.Tensor_Tensor", "PowBackward1"),
    ("pow.Scalar", "PowBackward2"),
    ("sum", "SumBackward0"),
    ("sum.dim_IntList", "SumBackward1"),
    ("mean", "MeanBackward0"),
    ("mean.dim", "MeanBackward1"),
    ("rsub.Tensor", "RsubBackward0"),
    ("rsub.Scalar", "RsubBackward1"),
    ("log1p", "Log1PBackward0"),
    ("_to_copy", "ToCopyBackward0"),
    ("select_backward", "SelectBackwardBackward0"),
    ("copy_slices", "CopySlices"),
])
def test_node_names_follow_pytorch(key, name):
    assert RULES[key].node_name == name
    assert registry.get(key).node_class.__name__ == name


def test_node_names_at_run_time():
    x = symgrad.tensor([1.5, 2.0], dtype=symgrad.float64, requires_grad=True)
    names = {
        "x ** 2": type((x ** 2).grad_fn).__name__,
        "x ** x": type((x ** x).grad_fn).__name__,
        "2 ** x": type((2 ** x).grad_fn).__name__,
        "x.sum()": type(x.sum().grad_fn).__name__,
        "x.sum(0)": type(x.sum(0).grad_fn).__name__,
        "log1p": type(symgrad.log1p(x).grad_fn).__name__,
    }
    assert names == {"x ** 2": "PowBackward0", "x ** x": "PowBackward1", "2 ** x": "PowBackward2",
                     "x.sum()": "SumBackward0", "x.sum(0)": "SumBackward1", "log1p": "Log1PBackward0"}


@pytest.mark.parametrize("op,prefix", [("mul", "Mul"), ("log1p", "Log1P"), ("log_softmax", "LogSoftmax"),
                                       ("_softmax", "Softmax"), ("_to_copy", "ToCopy"),
                                       ("select_backward", "SelectBackward")])
def test_node_prefix(op, prefix):
    assert node_prefix(op) == prefix


def test_overload_numbering():
    """Overloads of one op count up in table order; non-differentiable overloads take no number;
    ``node:`` overrides the name (and still takes a number)."""
    rules = parse_rules(
        "- name: foo.a(Tensor self) -> Tensor\n"
        "  self: grad\n"
        "- name: foo.b(Tensor self) -> Tensor\n"
        "- name: foo.c(Tensor self, Tensor other) -> Tensor\n"
        "  self: grad\n"
        "  other: non_differentiable\n"
        "- name: foo.d(Tensor self) -> Tensor\n"
        "  node: Special\n"
        "  self: grad\n"
        "- name: foo.e(Tensor self) -> Tensor\n"
        "  self: grad\n"
        "- name: bar_baz(Tensor self) -> Tensor\n"
        "  self: grad\n"
    )
    assert {k: r.node_name for k, r in rules.items()} == {
        "foo.a": "FooBackward0", "foo.b": "", "foo.c": "FooBackward1", "foo.d": "Special",
        "foo.e": "FooBackward3", "bar_baz": "BarBazBackward0"}
    assert rules["foo.c"].non_differentiable == ("other",)
    assert not rules["foo.b"].differentiable


def test_counters_continue_across_calls():
    counters = {}
    parse_rules("- name: foo(Tensor self) -> Tensor\n  self: grad\n", counters)
    again = parse_rules("- name: foo.x(Tensor self) -> Tensor\n  self: grad\n", counters)
    assert again["foo.x"].node_name == "FooBackward1"


# --- schemas ----------------------------------------------------------------------------------

def test_parse_schema():
    s = parse_schema("sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
                     "ScalarType? dtype=None) -> Tensor")
    assert (s.name, s.overload, s.key, s.returns) == ("sum", "dim_IntList", "sum.dim_IntList", "Tensor")
    assert [a.name for a in s.args] == ["self", "dim", "keepdim", "dtype"]
    assert [a.kwarg_only for a in s.args] == [False, False, False, True]
    assert s.args[2].default == "False" and s.args[1].optional and s.args[0].is_tensor
    assert s.num_outputs == 1
    m = parse_schema("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)")
    assert m.num_outputs == 2
    st = parse_schema("stack(Tensor[] tensors, int dim=0) -> Tensor")
    assert st.args[0].is_tensor_list and not st.args[0].is_tensor and st.key == "stack"


# --- saved-variable inference -----------------------------------------------------------------

def test_saved_kinds():
    assert RULES["sum"].saved == {"self__shape": "meta"}
    assert RULES["mul.Tensor"].saved == {"self": "tensor", "other": "tensor"}
    assert RULES["add.Tensor"].saved == {}
    assert RULES["pow.Tensor_Scalar"].saved == {"self": "tensor", "exponent": "value"}
    assert RULES["tanh"].saved == {"result": "tensor"}
    assert RULES["sum.dim_IntList"].saved == {"self__shape": "meta", "dim": "value", "keepdim": "value"}


def test_metadata_calls_become_symbols():
    f = RULES["sum"].formulas["self"]
    assert "shape(self)" in str(f.expr)
    assert {s.name for s in f.code_expr.free_symbols} == {"grad", "self__shape"}
    assert f.params == ("grad", "self__shape")


def test_metadata_only_graph_runs_backward_twice():
    x = symgrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x + x).sum()
    assert y.grad_fn._saved == {"self__shape": (3,)}   # metadata, no tensor
    y.backward()
    y.backward()  # nothing was freed: no saved tensors
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])


def test_graph_saving_tensors_cannot_run_backward_twice():
    x = symgrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    assert set(y.grad_fn.next_functions[0][0]._saved) == {"self", "other"}
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


# --- validation errors ------------------------------------------------------------------------

def _error(body: str) -> str:
    with pytest.raises(RuleTableError) as info:
        parse_rules(GOOD + body)
    return str(info.value)


def _assert_names(msg: str, name: str, line: int = BAD_LINE):
    assert re.search(rf"\bline {line}\b", msg), f"no 'line {line}' in: {msg}"
    assert name in msg, f"{name!r} not in: {msg}"


def test_error_unparsable_schema():
    msg = _error("- name: foo Tensor self -> Tensor\n  self: grad\n")
    _assert_names(msg, "foo Tensor self")
    assert "schema" in msg


def test_error_unparsable_argument_in_schema():
    msg = _error("- name: foo(Tensor) -> Tensor\n  self: grad\n")
    _assert_names(msg, "foo(Tensor)")


def test_error_unknown_argument_key():
    msg = _error("- name: foo(Tensor self) -> Tensor\n  other: grad\n")
    _assert_names(msg, "foo")
    assert "'other'" in msg and "not an argument" in msg


@pytest.mark.parametrize("formula", ["grad * (self +", "grad +", "grad)"])
def test_error_unparsable_formula(formula):
    msg = _error(f"- name: foo(Tensor self) -> Tensor\n  self: '{formula}'\n")
    _assert_names(msg, "foo")
    assert "cannot parse formula for 'self'" in msg


def test_error_unparsable_elementwise():
    msg = _error("- name: foo(Tensor self) -> Tensor\n  elementwise: self +\n  self: grad\n")
    _assert_names(msg, "foo")
    assert "elementwise" in msg


def test_error_unknown_name():
    msg = _error("- name: foo(Tensor self) -> Tensor\n  self: grad * bogus\n")
    _assert_names(msg, "foo")
    assert "unknown name 'bogus'" in msg


def test_error_unknown_name_in_elementwise():
    msg = _error("- name: foo(Tensor self) -> Tensor\n  elementwise: self * bogus\n  self: grad\n")
    _assert_names(msg, "foo")
    assert "bogus" in msg


def test_error_unknown_function():
    msg = _error("- name: foo(Tensor self) -> Tensor\n  self: frobnicate(grad)\n")
    _assert_names(msg, "foo")
    assert "unknown function 'frobnicate'" in msg


def test_table_ops_are_callable_in_formulas():
    """A formula may call any op of the same table by its base name (cube here)."""
    rules = parse_rules(GOOD + "- name: foo(Tensor self) -> Tensor\n  self: cube(grad)\n")
    assert "cube" in str(rules["foo"].formulas["self"].expr)


def test_error_duplicate_entry():
    msg = _error("- name: cube(Tensor self) -> Tensor\n  self: grad\n")
    _assert_names(msg, "cube")
    assert "duplicate" in msg and "line 1" in msg


def test_error_output_differentiability_length():
    msg = _error("- name: foo(Tensor self) -> (Tensor a, Tensor b)\n  self: grad\n"
                 "  output_differentiability: [True]\n")
    _assert_names(msg, "foo")
    assert "output_differentiability" in msg


def test_output_differentiability_default():
    rules = parse_rules("- name: foo(Tensor self) -> (Tensor a, Tensor b)\n  self: grad\n"
                        "- name: bar(Tensor self) -> (Tensor a, Tensor b)\n  self: grad\n"
                        "  output_differentiability: [True, True]\n")
    assert rules["foo"].output_differentiability == (True, False)
    assert rules["bar"].output_differentiability == (True, True)


def test_error_invalid_yaml():
    msg = _error("- name: foo(Tensor self) -> Tensor: x\n  self: grad\n")
    _assert_names(msg, "foo(Tensor self)")
    assert "YAML" in msg


def test_error_invalid_yaml_unclosed_bracket():
    with pytest.raises(RuleTableError, match="not valid YAML"):
        parse_rules(GOOD + "- name: foo(Tensor self) -> Tensor\n  self: [grad\n")


def test_error_entry_without_name():
    msg = _error("- self: grad\n")
    assert re.search(rf"\bline {BAD_LINE}\b", msg) and "name" in msg


def test_error_not_a_list():
    with pytest.raises(RuleTableError, match="list"):
        parse_rules("name: foo(Tensor self) -> Tensor\n")


def test_empty_table():
    assert parse_rules("") == {}


def test_error_is_a_value_error():
    assert issubclass(RuleTableError, ValueError)


# --- the formula printer ----------------------------------------------------------------------

S, G, E = sympy.symbols("self grad exponent")


def _print(expr):
    return FormulaPrinter().doprint(expr)


def test_print_piecewise_as_where():
    expr = sympy.Piecewise((0, sympy.Eq(E, 0)), (G * E * S ** (E - 1), True))
    assert _print(expr) == "where(eq(exponent, 0), 0, exponent*grad*self**(exponent - 1))"


def test_print_nested_piecewise_and_conditions():
    expr = sympy.Piecewise((0, sympy.Eq(S, 0) & (E >= 0)), (1, S > 2), (G * sympy.log(S), True))
    assert _print(expr) == ("where(logical_and(eq(self, 0), (exponent >= 0)), 0, "
                            "where((self > 2), 1, grad*log(self)))")


def test_piecewise_needs_a_final_true_branch():
    with pytest.raises(ValueError, match="final"):
        _print(sympy.Piecewise((G, S > 0)))


@pytest.mark.parametrize("expr,literal", [
    (G * sympy.log(2), "0.6931471805599453"),
    (G / (S * sympy.log(2)), "1.4426950408889634"),
    (G * sympy.pi, "3.141592653589793"),
    (G * S / 3, "0.3333333333333333"),
    (G * sympy.E, "2.718281828459045"),
])
def test_constants_fold_to_float_literals(expr, literal):
    src = _print(expr)
    assert literal in src
    assert not re.search(r"\b(log|pi|E)\b", src.replace("log(self)", "")), src


def test_folded_constants_keep_float32():
    """A folded constant is a Python float, so a float32 gradient stays float32 (NEP 50)."""
    for expr in (G * sympy.log(2), G * 2 / sympy.sqrt(sympy.pi) * sympy.exp(-S ** 2), G / (S * sympy.log(2))):
        fn = compile_formula(expr, ("grad", "self"), formula_namespaces.numpy_namespace())
        g = np.array([1.0, -2.0], dtype=np.float32)
        x = np.array([0.5, 1.5], dtype=np.float32)
        out = fn(g, x)
        assert out.dtype == np.float32, f"{expr}: {fn.__source__}"
        want = sympy.lambdify((G, S), expr, "numpy")(g.astype(np.float64), x.astype(np.float64))
        np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("expr,src", [
    (G / (2 * sympy.sqrt(S)), "sqrt(self)"),
    (G * S ** sympy.Rational(1, 2), "grad*sqrt(self)"),
    (G * S ** sympy.Rational(-1, 2), "grad/sqrt(self)"),
    (G / S, "grad/self"),
])
def test_print_sqrt_and_reciprocal(expr, src):
    out = _print(expr)
    assert src in out
    assert "**" not in out


@pytest.mark.parametrize("expr,src", [
    (G * sympy.Heaviside(S), "grad*heaviside(self, 0.5)"),
    (G * sympy.Heaviside(S, 1), "grad*heaviside(self, 1)"),
    (G * sympy.Heaviside(S, 0), "grad*heaviside(self, 0)"),
    (G * sympy.Heaviside(S - E, sympy.Rational(1, 2)), "grad*heaviside(-exponent + self, 0.5)"),
])
def test_print_heaviside(expr, src):
    assert _print(expr) == src


@pytest.mark.parametrize("expr,src", [
    (G * sympy.Abs(S), "grad*abs(self)"),
    (sympy.Max(S, 0), "maximum(self, 0)"),
    (sympy.Min(S, E), "minimum(exponent, self)"),
    (G * sympy.sign(S), "grad*sign(self)"),
    (G * sympy.Function("expand")(S), "grad*expand(self)"),
])
def test_print_function_names(expr, src):
    assert _print(expr) == src


def test_formula_source():
    assert formula_source(G * S, ("grad", "self")) == "def formula(grad, self):\n    return grad*self"
    assert formula_source(G, ("grad",), name="d_self") == "def d_self(grad):\n    return grad"


def test_shipped_formula_sources():
    """A few shipped rules print the way the runtime evaluates them."""
    pow0 = RULES["pow.Tensor_Scalar"].formulas["self"]
    assert formula_source(pow0.code_expr, pow0.params).splitlines()[1].strip().startswith(
        "return where(eq(exponent, 0), 0,")
    summ = RULES["sum"].formulas["self"]
    assert formula_source(summ.code_expr, summ.params) == \
        "def formula(grad, self__shape):\n    return expand(grad, self__shape)"
    sqrt = RULES["sqrt"].formulas["self"]
    assert "log" not in formula_source(sqrt.code_expr, sqrt.params)


# --- lazy parsing of the shipped table ------------------------------------------------------

def test_shipped_table_validates_in_full():
    rules = table.load_rules(validate=True)
    assert all(r.elementwise is not None for r in rules.values() if r.elementwise_text is not None)


@pytest.mark.parametrize("key", sorted(table.load_rules()))
def test_syntax_derived_facts_match_sympy(key):
    """What is read from a formula's syntax (without sympy) agrees with the parsed expression."""
    rule = table.load_rules()[key]
    for f in rule.formulas.values():
        from_sympy = {s.name for s in f.code_expr.free_symbols}
        # sympy may cancel a name (``0 * grad``); the syntax may only list more, never fewer
        assert from_sympy <= set(f.params), (f, f.params, from_sympy)
        assert set(f.params) - from_sympy <= {"grad"}
        assert f.is_bare_name == f.code_expr.is_Symbol
    if rule.elementwise_text is not None:
        assert registry.elementwise_dtype_rule_of_text(rule.elementwise_text) == \
            registry._elementwise_dtype_rule(rule.elementwise)


def test_lazy_formula_error_names_the_entry_on_first_use():
    rules = table.parse_rules("- name: foo(Tensor self) -> Tensor\n  self: grad * bogus\n", lazy=True)
    with pytest.raises(table.RuleTableError, match=r"line 1 \(foo\) formula for 'self': unknown name 'bogus'"):
        rules["foo"].formulas["self"].expr
    with pytest.raises(table.RuleTableError, match=r"line 1 \(foo\).*cannot parse formula"):  # syntax: at load
        table.parse_rules("- name: foo(Tensor self) -> Tensor\n  self: grad * (self +\n", lazy=True)


# --- formulas read without sympy's tokenizer ------------------------------------------------

def _sympy_locals(names: set[str]) -> dict:
    local = dict(table.SYMPY_FUNCTIONS)
    local.update({n: sympy.Symbol(n) for n in names})
    for fn in table.vocab.FORMULA_FUNCTIONS | {key.split(".")[0] for key in RULES}:
        local.setdefault(fn, sympy.Function(fn))
    local.update({fn: sympy.Function(fn) for fn in table.METADATA_FUNCS})
    return local


def _shipped_texts():
    for key, rule in table.load_rules().items():
        names = {a.name for a in rule.schema.args}
        scope = names | {"grad", "grads", "result"} | {f"result{i}" for i in range(rule.schema.num_outputs)}
        for f in rule.formulas.values():
            yield key, f.text, scope
        if rule.elementwise_text is not None:
            yield key, rule.elementwise_text, names


@pytest.mark.parametrize("key,text,names", list(_shipped_texts()))
def test_plain_formula_reading_matches_sympy_parser(key, text, names):
    """Every formula of the table read from Python's syntax tree is exactly what sympy's parser builds."""
    local = _sympy_locals(names)
    fast = table._evaluate_plain(text, local)
    want = sympy.parse_expr(text, local_dict=local, evaluate=True)
    if fast is not table._NOT_PLAIN:
        assert sympy.srepr(fast) == sympy.srepr(want), key
    assert sympy.srepr(table._parse_expr(text, names, frozenset(k.split(".")[0] for k in RULES))) == sympy.srepr(want)


@pytest.mark.parametrize("text,expected", [
    ("1/2 * x", sympy.Rational(1, 2) * sympy.Symbol("x")),        # a rational, not the float 0.5
    ("0.1 * x", sympy.Float("0.1") * sympy.Symbol("x")),          # the literal's own digits
    ("x * 1e-3", sympy.Float("1e-3") * sympy.Symbol("x")),
    ("-2 ** x", -(sympy.Integer(2) ** sympy.Symbol("x"))),
    ("Piecewise((x, x > 0), (0, True))", sympy.Piecewise((sympy.Symbol("x"), sympy.Symbol("x") > 0), (0, True))),
])
def test_plain_formula_literals_and_operators(text, expected):
    local = _sympy_locals({"x"})
    got = table._evaluate_plain(text, local)
    assert sympy.srepr(got) == sympy.srepr(expected)
    assert sympy.srepr(got) == sympy.srepr(sympy.parse_expr(text, local_dict=local, evaluate=True))


@pytest.mark.parametrize("text", [
    "x * bogus",            # a name the scope lacks: sympy's parser makes the symbol, the check names it
    "frobnicate(x)",        # likewise an unknown function
    "x ^ 2", "0 < x < 1", "x if x else 1", "x[0]", "x.y", "2j * x", "(x > 0) & (x < 1)", "lambda: x",
    "1_000 * x", "exp(*x)", "x +",
])
def test_other_syntax_is_left_to_sympy(text):
    assert table._evaluate_plain(text, _sympy_locals({"x"})) is table._NOT_PLAIN


@pytest.mark.parametrize("text, made", [
    ("grad * cos(self)", set()),                                   # sympy's own functions only
    ("sum_backward(grad, shape(self), dim, keepdim)", {"sum_backward", "shape"}),
    ("grad * self__x", set()),                                     # a name that merely contains one
])
def test_parsing_makes_only_the_functions_a_formula_names(monkeypatch, text, made):
    """Making sympy's undefined-function classes is slow the first time: a formula makes only its own."""
    asked, make = [], sympy.Function

    def function(name):
        asked.append(name)
        return make(name)

    monkeypatch.setattr(table.sympy, "Function", function)
    expr = table._parse_expr(text, {"grad", "self", "dim", "keepdim", "self__x"})
    monkeypatch.undo()
    assert set(asked) == made
    assert {type(f).__name__ for f in expr.atoms(sympy.core.function.AppliedUndef)} == made
