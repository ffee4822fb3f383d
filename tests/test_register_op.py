"""User-defined ops: :func:`symgrad.register_op` (``symgrad/ops/custom.py``).

softplus and gelu defined by a user (keyword form and YAML form) are checked like the shipped
table's entries: values against numpy, gradcheck and gradgradcheck in float64, node names, and each
rule proved against ``sympy.diff`` of the elementwise expression.  A structural op with a numpy
forward, overload dispatch, formulas calling user ops, and every error case are covered too.

Registration is global: every test registers ops under its own names, and an autouse fixture
unregisters them afterwards, so the rest of the suite sees only the shipped table.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import sympy

import symgrad
from symgrad.autograd import grad as autograd_grad
from symgrad.autograd import gradcheck, gradgradcheck
from symgrad.ops import custom, formula_namespaces, registry
from symgrad.rules import table
from symgrad.rules.table import RuleTableError

SOFTPLUS = "log(1 + exp(self))"
SOFTPLUS_RULE = "grad * (1 - exp(-result))"
GELU = "self * (1 + erf(self / sqrt(2))) / 2"
GELU_RULE = "grad * ((1 + erf(self / sqrt(2))) / 2 + self * exp(-self**2 / 2) / sqrt(2 * pi))"

DOCS = Path(__file__).resolve().parent.parent / "docs" / "custom_ops.md"


@pytest.fixture(autouse=True)
def _isolate():
    """Unregister every op a test registered (and check the shipped state is restored)."""
    names_before = set(custom._REGISTERED)
    keys_before = set(registry.all_ops())
    counters_before = dict(table.name_counters())
    yield
    for name in list(custom._REGISTERED):
        if name not in names_before:
            custom._unregister(name)
    assert set(registry.all_ops()) == keys_before
    assert table.name_counters() == counters_before


def f64(values, requires_grad=True):
    return symgrad.tensor(np.asarray(values, dtype=np.float64), dtype=symgrad.float64,
                          requires_grad=requires_grad)


def np_softplus(x):
    return np.log1p(np.exp(x))


def np_gelu(x):
    erf = np.vectorize(math.erf)
    return x * (1 + erf(x / math.sqrt(2))) / 2


def prove(key: str, arg: str = "self") -> None:
    """The rule of ``arg`` equals grad * d(elementwise)/d(arg), symbolically."""
    rule = registry.get(key).rule
    real = {s: sympy.Symbol(s.name, real=True) for s in rule.elementwise.free_symbols}
    elementwise = rule.elementwise.xreplace(real)
    g, r = sympy.Symbol("grad", real=True), sympy.Symbol("result", real=True)
    expected = g * sympy.diff(elementwise, sympy.Symbol(arg, real=True))
    formula = rule.formulas[arg].expr
    actual = formula.xreplace({s: sympy.Symbol(s.name, real=True) for s in formula.free_symbols})
    actual = actual.xreplace({r: elementwise})
    assert sympy.simplify(sympy.expand_func(actual - expected)) == 0, (actual, expected)


X = np.array([[-3.0, -1.2, -0.3], [0.0, 0.7, 2.5]])


# --- softplus and gelu, keyword form ---------------------------------------------------------------

@pytest.mark.parametrize("name,expr,rule,ref", [
    ("kw_softplus", SOFTPLUS, SOFTPLUS_RULE, np_softplus),
    ("kw_gelu", GELU, GELU_RULE, np_gelu),
])
def test_keyword_form_elementwise(name, expr, rule, ref):
    fn = symgrad.register_op(f"{name}(Tensor self) -> Tensor", elementwise=expr, rules={"self": rule})
    assert fn.__name__ == name and callable(fn)
    assert getattr(symgrad.ops.custom, name) is fn
    assert getattr(symgrad.Tensor, name) is fn

    x = f64(X)
    y = fn(x)
    np.testing.assert_allclose(y.detach().numpy(), ref(X), rtol=1e-12, atol=1e-14)
    assert y.dtype == symgrad.float64
    node = table.node_prefix(name) + "Backward0"
    assert type(y.grad_fn).__name__ == node
    assert registry.get(name).node_class.__name__ == node
    np.testing.assert_allclose(getattr(x, name)().detach().numpy(), y.detach().numpy())

    assert gradcheck(fn, (x,))
    assert gradgradcheck(fn, (x,))
    prove(name)

    # float32 in, float32 out (the forward printed from the expression keeps the dtype)
    x32 = symgrad.tensor(X.astype(np.float32), requires_grad=True)
    y32 = fn(x32)
    y32.sum().backward()
    assert y32.dtype == symgrad.float32 and x32.grad.dtype == symgrad.float32
    np.testing.assert_allclose(y32.detach().numpy(), ref(X), rtol=1e-5, atol=1e-6)


def test_softplus_values_gradients_and_second_derivative():
    sp = symgrad.register_op("sp2(Tensor self) -> Tensor", elementwise=SOFTPLUS, rules={"self": SOFTPLUS_RULE})
    x = f64(X)
    (g,) = autograd_grad(sp(x).sum(), x, create_graph=True)
    sig = 1 / (1 + np.exp(-X))
    np.testing.assert_allclose(g.detach().numpy(), sig, rtol=1e-12)
    assert g.grad_fn is not None  # the backward was recorded
    (gg,) = autograd_grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), sig * (1 - sig), rtol=1e-10)


def test_numbers_arrays_and_no_grad():
    sp = symgrad.register_op("sp3(Tensor self) -> Tensor", elementwise=SOFTPLUS, rules={"self": SOFTPLUS_RULE})
    out = sp(2.0)
    assert isinstance(out, symgrad.Tensor) and out.dtype == symgrad.float32
    assert out.item() == pytest.approx(math.log1p(math.exp(2.0)), rel=1e-6)
    np.testing.assert_allclose(sp([0.0, 1.0]).numpy(), np_softplus(np.array([0.0, 1.0])), rtol=1e-6)
    assert sp(symgrad.tensor([1, 2])).dtype == symgrad.float32  # integer input: float result
    x = f64(X)
    with symgrad.no_grad():
        assert sp(x).grad_fn is None
    assert sp(x.detach()).grad_fn is None


def test_broadcasting_binary_user_op():
    fn = symgrad.register_op("hypot2(Tensor self, Tensor other) -> Tensor",
                             elementwise="sqrt(self**2 + other**2)",
                             rules={"self": "grad * self / result", "other": "grad * other / result"})
    a, b = f64([[1.0], [2.0], [-3.0]]), f64([0.5, -1.5])
    out = fn(a, b)
    np.testing.assert_allclose(out.detach().numpy(), np.hypot(a.detach().numpy(), b.detach().numpy()))
    assert type(out.grad_fn).__name__ == "Hypot2Backward0"
    assert gradcheck(fn, (a, b)) and gradgradcheck(fn, (a, b))
    prove("hypot2", "self")
    prove("hypot2", "other")
    # a number for a Tensor argument: no edge for it, like x + 3
    assert gradcheck(lambda t: fn(t, 2.0), (a,))


# --- YAML form ---------------------------------------------------------------------------------------

def test_yaml_form_softplus_and_gelu():
    text = (
        "# two user ops in the table's format\n"
        f"- name: y_softplus(Tensor self) -> Tensor\n"
        f"  elementwise: {SOFTPLUS}\n"
        f"  self: {SOFTPLUS_RULE}\n"
        "\n"
        f"- name: y_gelu(Tensor self) -> Tensor\n"
        f"  elementwise: {GELU}\n"
        f"  self: {GELU_RULE}\n"
    )
    last = symgrad.register_op(text)
    from symgrad.ops.custom import y_gelu, y_softplus

    assert last is y_gelu
    assert registry.get("y_softplus").rule.line == 2 and registry.get("y_gelu").rule.line == 6
    x = f64(X)
    for fn, ref, node in [(y_softplus, np_softplus, "YSoftplusBackward0"), (y_gelu, np_gelu, "YGeluBackward0")]:
        y = fn(x)
        np.testing.assert_allclose(y.detach().numpy(), ref(X), rtol=1e-12, atol=1e-14)
        assert type(y.grad_fn).__name__ == node
        assert gradcheck(fn, (x,)) and gradgradcheck(fn, (x,))
        prove(fn.__name__)


def test_yaml_form_overloads_dispatch_and_numbering():
    symgrad.register_op(
        "- name: scl.Tensor(Tensor self, Tensor other) -> Tensor\n"
        "  elementwise: self * other\n"
        "  self: grad * other\n"
        "  other: grad * self\n"
        "- name: scl.Scalar(Tensor self, Scalar other) -> Tensor\n"
        "  elementwise: self * other\n"
        "  self: grad * other\n"
        "- name: scl.nodiff(Tensor self, bool flag) -> Tensor\n"
        "  elementwise: self\n"
        "  self: non_differentiable\n"
        "- name: scl.named(Tensor self, int k) -> Tensor\n"
        "  elementwise: self * k\n"
        "  node: MyScaleNode\n"
        "  self: grad * k\n"
    )
    rules = {k: registry.get(k).rule for k in ("scl.Tensor", "scl.Scalar", "scl.nodiff", "scl.named")}
    assert {k: r.node_name for k, r in rules.items()} == {
        "scl.Tensor": "SclBackward0", "scl.Scalar": "SclBackward1", "scl.nodiff": "",
        "scl.named": "MyScaleNode"}
    assert table.name_counters()["Scl"] == 3
    scl = custom.scl
    x = f64(X)
    assert type(scl(x, x).grad_fn).__name__ == "SclBackward0"
    assert type(scl(x, 2.5).grad_fn).__name__ == "SclBackward1"
    assert type(x.scl(2.5).grad_fn).__name__ == "SclBackward1"
    np.testing.assert_allclose(scl(x, 2.5).detach().numpy(), 2.5 * X)
    assert gradcheck(lambda t: scl(t, t), (x,)) and gradgradcheck(lambda t: scl(t, 3.0), (x,))


def test_node_numbering_continues_shipped_counters():
    """A user op whose prefix a shipped op already uses gets the next number, as PyTorch's overloads do."""
    shipped = table.name_counters()["Sum"]  # sum, sum.dim_IntList
    assert shipped == 2
    fn = symgrad.register_op("sum_(Tensor self) -> Tensor", forward=lambda self: np.sum(self),
                             rules={"self": "expand(grad, shape(self))"}, method=False)
    assert not hasattr(symgrad.Tensor, "sum_")
    out = fn(f64(X))
    assert type(out.grad_fn).__name__ == f"SumBackward{shipped}"
    assert table.name_counters()["Sum"] == shipped + 1
    assert gradcheck(fn, (f64(X),))
    custom._unregister("sum_")
    assert table.name_counters()["Sum"] == shipped


def test_keyword_form_node_and_output_differentiability():
    fn = symgrad.register_op("splitmax(Tensor self) -> (Tensor values, Tensor indices)",
                             forward=lambda self: (self.max(axis=1), self.argmax(axis=1)),
                             rules={"self": "index_reduction_backward(grad, result1, shape(self), 1, False)"},
                             node="SplitMaxNode", output_differentiability=[True, False])
    x = f64([[0.1, 0.9, -0.4], [1.5, -2.0, 0.2]])
    values, indices = fn(x)
    assert type(values.grad_fn).__name__ == "SplitMaxNode" and indices.grad_fn is None
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    assert gradcheck(lambda t: fn(t)[0], (x,))


# --- structural ops ------------------------------------------------------------------------------------

def test_structural_op_with_custom_forward():
    rowsum = symgrad.register_op("rowsum(Tensor self) -> Tensor", forward=lambda self: self.sum(axis=1),
                                 rules={"self": "expand(unsqueeze(grad, 1), shape(self))"})
    rule = registry.get("rowsum").rule
    assert rule.elementwise is None
    assert rule.saved == {"self__shape": "meta"}  # only the input's shape is saved
    x = f64(X)
    out = rowsum(x)
    np.testing.assert_allclose(out.detach().numpy(), X.sum(axis=1))
    assert type(out.grad_fn).__name__ == "RowsumBackward0"
    assert type(x.rowsum().grad_fn).__name__ == "RowsumBackward0"
    assert gradcheck(rowsum, (x,))
    assert gradgradcheck(lambda t: rowsum(t * t), (x,))
    out.backward(symgrad.tensor([1.0, 2.0], dtype=symgrad.float64))
    np.testing.assert_allclose(x.grad.numpy(), [[1.0] * 3, [2.0] * 3])


def test_yaml_form_structural_op_with_forwards_and_defaults():
    fn = symgrad.register_op(
        "- name: colsum(Tensor self, bool keepdim=False) -> Tensor\n"
        "  self: sum_backward(grad, shape(self), 0, keepdim)\n",
        forwards={"colsum": lambda self, keepdim=False: self.sum(axis=0, keepdims=keepdim)})
    x = f64(X)
    assert fn(x).shape == (3,) and fn(x, keepdim=True).shape == (1, 3) and fn(x, True).shape == (1, 3)
    assert gradcheck(lambda t: fn(t, True), (x,)) and gradgradcheck(fn, (x,))
    with pytest.raises(TypeError, match="colsum"):
        fn(x, True, 3)


def test_formulas_may_call_user_ops():
    """A rule may call an earlier user op by name, in plain and in create_graph backward."""
    symgrad.register_op("cube3(Tensor self) -> Tensor", elementwise="self**3", rules={"self": "3 * grad * self**2"})
    twice = symgrad.register_op("twice3(Tensor self) -> Tensor", forward=lambda self: 2 * self ** 3,
                                rules={"self": "2 * cube3(self) * 3 * grad / self"})
    x = f64([0.5, -1.5, 2.0])
    assert gradcheck(twice, (x,)) and gradgradcheck(twice, (x,))
    np.testing.assert_allclose(autograd_grad(twice(x).sum(), x)[0].numpy(), 6 * x.detach().numpy() ** 2)
    (g,) = autograd_grad(twice(x).sum(), x, create_graph=True)
    assert "Cube3Backward0" in _graph_nodes(g)  # the create_graph backward called the user op


def _graph_nodes(t) -> set:
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and type(node).__name__ not in seen:
            seen.add(type(node).__name__)
            stack.extend(n for n, _ in node.next_functions)
    return seen


def test_registered_op_is_in_the_registry_like_a_shipped_one():
    symgrad.register_op("reg_sp(Tensor self) -> Tensor", elementwise=SOFTPLUS, rules={"self": SOFTPLUS_RULE})
    op = registry.get("reg_sp")
    assert op.forward is not None and op.dtype_rule == "float" and op.simple
    assert "reg_sp" in formula_namespaces.known_functions()
    x = f64(X)
    direct = registry.apply(op, (x,))
    np.testing.assert_allclose(direct.detach().numpy(), np_softplus(X))
    assert type(direct.grad_fn).__name__ == "RegSpBackward0"


def test_user_forward_overrides_printed_elementwise_forward():
    calls = []

    def stable(self):
        calls.append(1)
        return np.logaddexp(0, self)

    fn = symgrad.register_op("sp_stable(Tensor self) -> Tensor", elementwise=SOFTPLUS,
                             rules={"self": SOFTPLUS_RULE}, forward=stable)
    x = f64([-800.0, 0.0, 800.0])
    np.testing.assert_allclose(fn(x).detach().numpy(), [0.0, math.log(2), 800.0])
    assert calls
    assert fn(symgrad.tensor([1.0])).dtype == symgrad.float32


# --- errors ----------------------------------------------------------------------------------------

def _assert_names(msg: str, op: str, line: int | None = None):
    assert f"({op})" in msg or f"register_op({op})" in msg, msg
    if line is not None:
        assert f"line {line}" in msg, msg


GOOD = "- name: e_good(Tensor self) -> Tensor\n  elementwise: self**3\n  self: 3 * grad * self**2\n\n"


def test_error_existing_key():
    with pytest.raises(ValueError, match="'exp'.*already registered"):
        symgrad.register_op("exp(Tensor self) -> Tensor", elementwise="exp(self)", rules={"self": "grad * result"})
    symgrad.register_op("e_twice(Tensor self) -> Tensor", elementwise="self", rules={"self": "grad"})
    with pytest.raises(ValueError, match="already registered"):
        symgrad.register_op("e_twice(Tensor self) -> Tensor", elementwise="self", rules={"self": "grad"})


def test_error_overload_of_existing_op():
    with pytest.raises(ValueError, match="already exists"):
        symgrad.register_op("exp.custom(Tensor self) -> Tensor", elementwise="exp(self)")


def test_error_reserved_name():
    with pytest.raises(ValueError, match="reserved"):
        symgrad.register_op("sum_to(Tensor self) -> Tensor", elementwise="self")
    with pytest.raises(ValueError, match="shadow"):
        symgrad.register_op("register_op(Tensor self) -> Tensor", elementwise="self", method=False)


@pytest.mark.parametrize("body,needle", [
    ("- name: e_bad(Tensor self) -> Tensor\n  self: grad * bogus\n", "unknown name 'bogus'"),
    ("- name: e_bad(Tensor self) -> Tensor\n  self: frobnicate(grad)\n", "unknown function 'frobnicate'"),
    ("- name: e_bad(Tensor self) -> Tensor\n  elementwise: self * bogus\n  self: grad\n", "bogus"),
    ("- name: e_bad(Tensor self) -> Tensor\n  elementwise: self\n  other: grad\n", "not an argument"),
    ("- name: e_bad(Tensor self) -> Tensor\n  self: grad * (\n", "cannot parse formula"),
])
def test_error_bad_entry_names_entry_and_line(body, needle):
    with pytest.raises(RuleTableError) as info:
        symgrad.register_op(GOOD + body)
    msg = str(info.value)
    _assert_names(msg, "e_bad", line=5)
    assert needle in msg
    assert "derivatives.yaml" not in msg  # the user's snippet is named, not the shipped file
    # all-or-nothing: the valid first entry was not registered either
    with pytest.raises(KeyError):
        registry.get("e_good")
    assert "E_good" not in table.name_counters() and "EGood" not in table.name_counters()
    assert not hasattr(custom, "e_good") and not hasattr(symgrad.Tensor, "e_good")


def test_error_bad_schema_and_bad_yaml():
    with pytest.raises(RuleTableError, match="line 5.*cannot parse schema"):
        symgrad.register_op(GOOD + "- name: e_bad(Tensor self -> Tensor\n")
    with pytest.raises(RuleTableError, match="cannot parse schema"):
        symgrad.register_op("e_bad Tensor self -> Tensor", elementwise="self")
    with pytest.raises(RuleTableError, match="not valid"):
        symgrad.register_op("- name: [e_bad\n")
    with pytest.raises(RuleTableError, match="list"):
        symgrad.register_op("name: e_bad(Tensor self) -> Tensor\nself: grad\n")
    with pytest.raises(ValueError, match="no entries"):
        symgrad.register_op("# nothing\n\n")


@pytest.mark.parametrize("kwargs,needle", [
    ({"elementwise": "self", "rules": {"self": "grad * bogus"}}, "unknown name 'bogus'"),
    ({"elementwise": "self * bogus", "rules": {"self": "grad"}}, "bogus"),
    ({"elementwise": "self", "rules": {"self": "frobnicate(grad)"}}, "unknown function 'frobnicate'"),
    ({"elementwise": "self", "rules": {"other": "grad"}}, "not an argument"),
])
def test_error_keyword_form_unknown_names(kwargs, needle):
    with pytest.raises(RuleTableError) as info:
        symgrad.register_op("e_kw(Tensor self) -> Tensor", **kwargs)
    msg = str(info.value)
    _assert_names(msg, "e_kw")
    assert needle in msg
    with pytest.raises(KeyError):
        registry.get("e_kw")


def test_error_non_elementwise_without_forward():
    with pytest.raises(ValueError, match="not elementwise.*forward"):
        symgrad.register_op("e_nofwd(Tensor self) -> Tensor", rules={"self": "expand(grad, shape(self))"})
    with pytest.raises(ValueError, match="not elementwise.*forward"):
        symgrad.register_op("- name: e_nofwd(Tensor self) -> Tensor\n  self: expand(grad, shape(self))\n")
    with pytest.raises(KeyError):
        registry.get("e_nofwd")


def test_error_method_clash_with_tensor_attribute():
    with pytest.raises(ValueError, match="Tensor attribute.*method=False"):
        symgrad.register_op("detach(Tensor self) -> Tensor", elementwise="self", rules={"self": "grad"})
    with pytest.raises(KeyError):
        registry.get("detach")
    original = symgrad.Tensor.detach
    fn = symgrad.register_op("detach(Tensor self) -> Tensor", elementwise="self", rules={"self": "grad"},
                             method=False)
    assert symgrad.Tensor.detach is original and custom.detach is fn
    assert type(fn(f64([1.0])).grad_fn).__name__ == "DetachBackward0"


def test_error_forwards_misuse():
    with pytest.raises(ValueError, match="names no entry"):
        symgrad.register_op(GOOD, forwards={"e_other": lambda self: self})
    with pytest.raises(TypeError, match="not callable"):
        symgrad.register_op(GOOD, forwards={"e_good": 3})
    with pytest.raises(TypeError, match="keyword form"):
        symgrad.register_op(GOOD, elementwise="self")
    with pytest.raises(TypeError, match="forwards="):
        symgrad.register_op("e_kw2(Tensor self) -> Tensor", elementwise="self", forwards={})
    with pytest.raises(TypeError):
        symgrad.register_op(42)
    with pytest.raises(KeyError):
        registry.get("e_good")


def test_error_wrong_call_arguments():
    fn = symgrad.register_op("e_call(Tensor self) -> Tensor", elementwise="self", rules={"self": "grad"})
    with pytest.raises(TypeError, match="e_call"):
        fn()
    with pytest.raises(TypeError, match="e_call"):
        fn(f64([1.0]), 2)


# --- the user guide ------------------------------------------------------------------------------------

def test_docs_examples_run():
    """Every python block of docs/custom_ops.md runs, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOCS), "exec"), ns)
    assert type(ns["softplus"](ns["x"]).grad_fn).__name__ == "SmoothReluBackward0"
    prove("gelu_erf")
