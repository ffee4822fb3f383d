"""The op registry: one :class:`OpDef` per rule-table entry, and :func:`apply`, the eager hot path.

An op is its rule (from ``derivatives.yaml``) plus a numpy forward.  Elementwise
ops need no Python at all: their forward is printed from the table's
``elementwise`` expression.  Other ops register a forward with :func:`forward`.

>>> from symgrad.ops.registry import get
>>> get("mul.Tensor").node_class.__name__
'MulBackward0'
"""

from __future__ import annotations

import ast
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy

from ..autograd.anomaly import STATE as _anomaly_state
from ..autograd.grad_mode import INFERENCE_COUNTER, STATE
from ..autograd.node import FusedBackward, SavedVariable, _sequence, make_node_class, pack_saved
from ..dtypes import from_numpy_dtype, get_default_dtype, result_type
from ..rules import diskcache, table, vocab
from ..rules.printers import compile_formula, compile_source, formula_source
from . import formula_namespaces

# Functions whose result keeps an integer input's dtype (everything else in an
# elementwise expression makes the result floating point, as in PyTorch).
_INTEGER_PRESERVING = {"Abs", "sign", "Max", "Min", "Heaviside", "Piecewise",
                       "floor", "ceil", "rint"}   # numpy surface, elementwise family: rounding, as torch


@dataclass
class OpDef:
    """Everything symgrad knows about one op overload."""

    key: str
    rule: table.Rule
    forward: Callable | None = None
    dtype_rule: str = "keep"          # keep | promote | float
    node_class: type | None = None
    tensor_positions: tuple[int, ...] = ()
    list_positions: tuple[int, ...] = ()
    save_plan: tuple = ()
    float_only: bool = False
    simple: bool = False              # one output, no tensor-list inputs
    promotes: bool = False            # dtype_rule != "keep"
    view: bool | str = False          # output aliases input 0 (shares its version counter); "maybe"
    saves_result: bool = False
    edge_plan: tuple = ()
    run: Callable | None = None       # apply's generated call (_generate), made on first use
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.rule.schema.name

    @property
    def schema(self) -> table.Schema:
        return self.rule.schema


_REGISTRY: dict[str, OpDef] = {}
_FORWARDS: dict[str, tuple[Callable, dict]] = {}


def forward(key: str, *, dtype_rule: str = "keep", float_only: bool = False, view: bool | str = False):
    """Register the numpy forward of a non-elementwise op (decorator).

    ``view=True`` marks ops whose output aliases the input's memory: the output
    then shares the input's version counter, as PyTorch views do; ``view="maybe"`` (reshapes)
    shares it when the output does alias the input.
    """

    def deco(fn):
        opts = {"dtype_rule": dtype_rule, "float_only": float_only, "view": view}
        _FORWARDS[key] = (fn, opts)
        if key in _REGISTRY:
            _set_forward(_REGISTRY[key], fn, opts)
        return fn

    return deco


def _set_forward(op: OpDef, fn, opts: dict) -> None:
    op.forward, op.dtype_rule, op.float_only = fn, opts["dtype_rule"], opts["float_only"]
    op.promotes = op.dtype_rule != "keep"
    op.extra["view"] = op.view = opts["view"]
    op.run = None  # the generated calls captured the old forward and options
    op.extra.pop("fast_call", None)


def _elementwise_dtype_rule(expr: sympy.Expr) -> str:
    if isinstance(expr, (sympy.core.relational.Relational, sympy.logic.boolalg.Boolean)):
        return "keep"  # comparisons and logic give numpy's bool result as it is
    for f in expr.atoms(sympy.Function):
        if type(f).__name__ not in _INTEGER_PRESERVING:
            return "float"
    for p in expr.atoms(sympy.Pow):
        e = p.exp
        if e.is_number and (e.is_negative or not e.is_integer):
            return "float"
    if any(not r.is_integer for r in expr.atoms(sympy.Rational)):   # x / 6 is Rational(1, 6) * x: a division
        return "float"
    return "promote"


def elementwise_dtype_rule_of_text(text: str) -> str:
    """:func:`_elementwise_dtype_rule` read from the expression's syntax, without building it in sympy.

    >>> elementwise_dtype_rule_of_text("self * other"), elementwise_dtype_rule_of_text("exp(self)")
    ('promote', 'float')
    """
    tree = ast.parse(text.strip(), mode="eval").body
    if isinstance(tree, (ast.Compare, ast.BoolOp)) or (
            isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in _LOGICAL):
        return "keep"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id not in _INTEGER_PRESERVING:
            return "float"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return "float"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            e = node.right
            negative = isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub)
            e = e.operand if negative else e
            if isinstance(e, ast.Constant) and (negative or not isinstance(e.value, int)):
                return "float"
    return "promote"


_LOGICAL = {"Eq", "Ne", "And", "Or", "Not"}


class _LazyForward:
    """An elementwise op's numpy forward, printed from its sympy expression on the first call."""

    __slots__ = ("op", "fn")

    def __init__(self, op: OpDef) -> None:
        self.op, self.fn = op, None

    def resolve(self):
        if self.fn is None:
            op = self.op
            params = tuple(a.name for a in op.rule.schema.args)
            name = f"forward_{op.rule.schema.name}"
            # printed once per machine (sympy's first use is slow); the key holds all it depends on
            src = diskcache.formula_source(f"forward {op.key} {params} {op.rule.elementwise_text}",
                                lambda: formula_source(op.rule.elementwise, params, name))
            # elementwise forwards only use elementwise functions, never other ops
            self.fn = compile_source(src, vocab.NUMPY_FUNCTIONS, name)
            if op.forward is self:
                op.forward = self.fn
        return self.fn

    def __call__(self, *args):
        return (self.fn or self.resolve())(*args)


def resolved_forward(op: OpDef):
    """``op.forward`` with an elementwise forward compiled (for code that captures the function)."""
    fwd = op.forward
    return fwd.resolve() if isinstance(fwd, _LazyForward) else fwd


def _build(rule: table.Rule) -> OpDef:
    schema = rule.schema
    op = OpDef(key=rule.key, rule=rule)
    op.tensor_positions = tuple(i for i, a in enumerate(schema.args) if a.is_tensor)
    op.list_positions = tuple(i for i, a in enumerate(schema.args) if a.is_tensor_list)
    if rule.elementwise_text is not None:
        op.forward = _LazyForward(op)
        op.dtype_rule = elementwise_dtype_rule_of_text(rule.elementwise_text)
        op.float_only = False
    if rule.key in _FORWARDS:
        _set_forward(op, *_FORWARDS[rule.key])
    if rule.differentiable:
        _attach_node(op)
    op.promotes = op.dtype_rule != "keep"
    op.simple = not op.list_positions and schema.num_outputs == 1 and \
        not schema.returns.strip().startswith("Tensor[]") and \
        all(kind != "result" or name == "result" for name, kind, _ in op.save_plan)
    return op


def _attach_node(op: OpDef) -> None:
    rule = op.rule
    names = list(rule.formulas)
    params = tuple(rule.formulas[n].params for n in names)
    np_fns = [_LazyFormula(rule.formulas[n], formula_namespaces.numpy_namespace) for n in names]
    t_fns = [_LazyFormula(rule.formulas[n], formula_namespaces.tensor_namespace) for n in names]
    for i, f in enumerate(np_fns):
        f.slot = (np_fns, i)
    for i, f in enumerate(t_fns):
        f.slot = (t_fns, i)
    edges = []
    for a in rule.schema.args:
        # Like PyTorch, only inputs with a formula get an edge (where's condition does not).
        if not (a.is_tensor or a.is_tensor_list) or a.name not in rule.formulas:
            continue
        fi = names.index(a.name)
        edges.append((rule.schema.args.index(a), fi, a.is_tensor_list))
    op.edge_plan = tuple(edges)
    # The per-edge formula table; list inputs are expanded per call (their length varies).
    fast = None
    if not any(is_list for _, _, is_list in edges) and rule.schema.num_outputs == 1 \
            and not rule.schema.returns.strip().startswith("Tensor[]"):
        fast = FusedBackward(rule, names, tuple(fi for _, fi, _ in edges), formula_namespaces.numpy_namespace,
                             formula_namespaces.tensor_namespace)
    op.node_class = make_node_class(rule, np_fns, t_fns, params,
                                    tuple((fi, -1) for _, fi, _ in edges), fast)
    arg_pos = {a.name: i for i, a in enumerate(rule.schema.args)}
    plan = []
    for name, kind in rule.saved.items():
        if kind == "meta":
            base, what = name.split("__")
            plan.append((name, "meta_" + what, arg_pos.get(base, -1)))
        elif name.startswith("result"):
            plan.append((name, "result", int(name[6:] or 0)))
        else:
            plan.append((name, kind, arg_pos[name]))
    op.save_plan = tuple(plan)
    op.extra["saves_result"] = op.saves_result = any(kind == "result" for _, kind, _ in plan)


class _LazyFormula:
    """A formula compiled against a namespace the first time it runs (ops may call ops
    registered after them, and the create_graph version is rarely needed)."""

    __slots__ = ("formula", "namespace", "fn", "slot")

    def __init__(self, formula, namespace) -> None:
        self.formula, self.namespace, self.fn, self.slot = formula, namespace, None, None

    def __call__(self, *args):
        fn = self.fn
        if fn is None:
            fn = self.fn = compile_formula(self.formula.code_expr, self.formula.params, self.namespace(),
                                           name=f"d_{self.formula.input}")
            if self.slot is not None:  # later calls go straight to the compiled function
                fns, i = self.slot
                fns[i] = fn
        return fn(*args)


def _ensure_loaded() -> None:
    if not _REGISTRY:
        for key, rule in table.load_rules().items():
            _REGISTRY[key] = _build(rule)


def get(key: str) -> OpDef:
    """The OpDef of ``op.overload`` (e.g. ``"mul.Tensor"``)."""
    try:
        return _REGISTRY[key]
    except KeyError:
        _ensure_loaded()
    try:
        return _REGISTRY[key]
    except KeyError:
        raise KeyError(f"no op {key!r} in the rule table") from None


def all_ops() -> dict[str, OpDef]:
    _ensure_loaded()
    return dict(_REGISTRY)


def add_rules(rules: dict[str, table.Rule]) -> list[OpDef]:
    """Register rules parsed at run time (user-defined ops)."""
    _ensure_loaded()
    out = []
    for key, rule in rules.items():
        if key in _REGISTRY:
            raise ValueError(f"op {key!r} is already registered")
        op = _REGISTRY[key] = _build(rule)
        out.append(op)
    return out


# --- the eager hot path ---------------------------------------------------------------------

def _fix_dtype(op: OpDef, out: np.ndarray, args: tuple, Tensor) -> np.ndarray:
    """Cast a numpy result to PyTorch's result dtype when numpy promoted differently."""
    operands = [args[i] for i in op.tensor_positions if args[i] is not None]
    for i in op.list_positions:
        operands.extend(args[i])
    if out.dtype.kind == "c":
        raise TypeError(f"{op.name}: symgrad has no complex dtype, so a complex number cannot be an operand "
                        f"(arguments: {', '.join(type(a).__name__ for a in args)}); compute with the real and "
                        "imaginary parts as separate real tensors")
    # Python numbers given as Scalar arguments take part in promotion, as in
    # PyTorch: an integer tensor ** 0.5 or clamped to 2.5 is a floating-point tensor
    operands.extend(args[i] for i in _scalar_positions(op) if i < len(args) and isinstance(args[i], (int, float)))
    want = result_type(*operands)
    if op.dtype_rule == "float" and not want.is_floating_point:
        want = get_default_dtype()
        if out.dtype.kind == "f" and out.dtype.itemsize < want.np.itemsize and not op.list_positions:
            # numpy computed in float16 (its choice for bool and int8 inputs): compute in the
            # result dtype instead, as PyTorch does, rather than widening a float16 result
            datas = [a._data.astype(want.np) if isinstance(a, Tensor) else a for a in args]
            return np.asarray(resolved_forward(op)(*datas), dtype=want.np)
    if out.dtype != want.np:
        out = out.astype(want.np)
    return out


def _to_default_float(t):
    """An integer or bool tensor cast to the default float dtype by the op ``_to_copy`` (recorded)."""
    return apply(get("_to_copy"), (t, get_default_dtype()))


def _scalar_positions(op: OpDef) -> tuple[int, ...]:
    """Positions of the ``Scalar`` arguments of an op (cached on the op)."""
    positions = op.extra.get("scalar_positions")
    if positions is None:
        positions = op.extra["scalar_positions"] = tuple(
            i for i, a in enumerate(op.rule.schema.args) if a.type in ("Scalar", "Scalar?"))
    return positions


def _check_float(op: OpDef, args: tuple, Tensor) -> None:
    for i in op.tensor_positions:
        a = args[i]
        if isinstance(a, Tensor) and not a.dtype.is_floating_point:
            raise RuntimeError(f"{op.name}(): could not infer output dtype. Input dtype must be either a "
                               f"floating point or complex dtype. Got: {a.dtype.name}")


_recorder = None  # the active ir.tracer.Tracer while a function is being traced

# Records that an op's output is a view of its input (symgrad.ops.views, which sets it on import:
# the views module replays ops through this registry).
note_view = None


def set_recorder(recorder):
    """Install the tracer that every op call is reported to (None to stop); returns the previous one."""
    global _recorder
    previous, _recorder = _recorder, recorder
    return previous


_T = None  # symgrad.tensor.Tensor, bound on first use (tensor.py imports this package)
_acc = None
gradient_edge = None  # symgrad.tensor.gradient_edge, bound with _T


def _bind():
    global _T, _acc
    from ..tensor import Tensor, _accumulate_node
    from ..tensor import gradient_edge as edge

    global gradient_edge
    _T, _acc, gradient_edge = Tensor, _accumulate_node, edge
    return Tensor


def apply(op: OpDef, args: tuple):
    """Run ``op`` eagerly on ``args`` (schema order) and record its node when needed."""
    run = op.run
    if run is None:
        run = _generate(op, "apply")
    return run(args)


_apply_simple = apply  # the name the functional layer binds


def fast_call(op: OpDef):
    """A generated function ``f(*args)`` equivalent to ``apply(op, args)``.

    It takes the schema's arguments positionally (with the schema's defaults), so the hottest
    public functions reach it without building a tuple first.  Built on first use and cached.

    >>> mul = fast_call(get("mul.Tensor"))
    >>> import symgrad
    >>> y = mul(symgrad.tensor([1.0, 2.0], requires_grad=True), 3.0)
    >>> y.tolist(), type(y.grad_fn).__name__
    ([3.0, 6.0], 'MulBackward0')
    """
    fn = op.extra.get("fast_call")
    if fn is None:
        fn = _generate(op, "call")
    return fn


_new = object.__new__


def _edge_meta(a, Tensor):
    """(edge, metadata) of one tensor input; numbers and tensors without grad give (None, 0)."""
    if isinstance(a, Tensor):
        return gradient_edge(a), (a._data.shape, a._data.dtype)
    return (None, 0), None


def _generate(op: OpDef, entry: str):
    """Generate the eager call of ``op``: the one definition of the dispatch, specialised per op.

    The steps, each emitted for this op's schema only (tensor inputs unrolled, tensor-list
    inputs as loops): unwrap the tensor inputs, noting whether any needs a gradient and whether
    their dtypes differ; check float-only inputs; run the numpy forward, translating shape
    errors; fix the result dtype; wrap the output(s), views sharing input 0's version counter;
    record the node (:func:`_record_lines`); report to the tracer.

    ``entry`` is ``"call"`` (the schema's arguments positionally, for :func:`fast_call`) or
    ``"apply"`` (one tuple, as given to :func:`apply`: trailing arguments may be left to the
    forward's own defaults).  The result is cached on ``op``.
    """
    Tensor = _T or _bind()
    schema_args = op.rule.schema.args
    names = [f"a{i}" for i in range(len(schema_args))]
    tensors, lists = op.tensor_positions, op.list_positions
    inputs = sorted(tensors + lists)
    glb = {"Tensor": Tensor, "op": op, "forward": resolved_forward(op), "ndarray": np.ndarray,
           "asarray": np.asarray, "fix": _fix_dtype, "check_float": _check_float, "new": _new,
           "STATE": STATE, "SavedVariable": SavedVariable, "anomaly_state": _anomaly_state,
           "format_stack": traceback.format_stack, "reg": sys.modules[__name__], "shape_error": _shape_error,
           "wide_ints": _with_wide_ints,
           "to_float": _to_default_float, "INFERENCE_VC": INFERENCE_COUNTER, "pack_saved": pack_saved}

    if entry == "call":
        params, default_values = [], []
        for name, a in zip(names, schema_args):
            if a.default is None:
                params.append(name)
            else:
                params.append(f"{name}=_D[{len(default_values)}]")
                default_values.append(_default_value(a.default))
        glb["_D"] = default_values
        lines = [f"def call({', '.join(params)}):", f"    args = ({', '.join(names)}{',' if len(names) == 1 else ''})"]
        bound = set(range(len(names)))
    else:
        lines = ["def call(args):"] + [f"    a{i} = args[{i}]" for i in inputs]
        bound = set(inputs)

    def ref(i: int) -> str:
        return f"a{i}" if i in bound else f"args[{i}]"

    # 1. unwrap tensor inputs (positions first, then lists, the order that picks the first dtype)
    track = op.promotes       # the first input dtype and whether all agree decide the dtype fix
    records = op.node_class is not None
    lines.append("    req = False")
    if track:
        lines += ["    dt = None", "    same = True"]
    if op.float_only:
        lines.append("    nonfloat = False")

    def note_dtype(d: str, first: bool, indent: str) -> list[str]:
        out = []
        if track and first:
            out.append(f"{indent}dt = {d}.dtype")
        elif track:
            out += [f"{indent}dd = {d}.dtype",
                    f"{indent}if dd is not dt:",
                    f"{indent}    if dt is None:",
                    f"{indent}        dt = dd",
                    f"{indent}    elif dd != dt:",
                    f"{indent}        same = False"]
        return out

    for k, i in enumerate(tensors):
        a = f"a{i}"
        lines += [f"    c = {a}.__class__",
                  f"    if c is Tensor or (c is not float and c is not int and isinstance({a}, Tensor)):",
                  f"        d{i} = {a}._data"]
        if records:
            lines += [f"        if {a}._grad_fn is not None or {a}._requires_grad:", "            req = True"]
        lines += note_dtype(f"d{i}", k == 0, "        ")
        if op.float_only:
            lines += [f"        if d{i}.dtype.kind != 'f':", "            nonfloat = True"]
        lines += ["    else:", f"        d{i} = {a}"]
    for i in lists:
        lines += [f"    d{i} = []", f"    for t in a{i}:", "        d = t._data", f"        d{i}.append(d)"]
        if records:
            lines += ["        if t._grad_fn is not None or t._requires_grad:", "            req = True"]
        lines += note_dtype("d", False, "        ")

    # 2. float-only ops: the exact check (and its error) only when an input is not plainly float
    if op.float_only:
        lines += ["    if nonfloat:", "        check_float(op, args, Tensor)"]

    # 3. ops whose result is floating point compute integer and bool tensors in the default float dtype, as
    # PyTorch does (numpy would truncate erf's result to the integer dtype, or refuse -bool in sigmoid)
    # through the recorded op _to_copy, so that traced graphs (and every backend) see the cast too
    if op.dtype_rule == "float" and tensors:
        lines += ["    if dt is not None and (dt.kind != 'f' or not same):"]
        for i in tensors:
            lines += [f"        if d{i}.__class__ is ndarray and d{i}.dtype.kind != 'f':",
                      f"            a{i} = to_float({ref(i)})",
                      f"            d{i} = a{i}._data"]
        if entry == "call":
            lines.append(f"        args = ({', '.join(names)}{',' if len(names) == 1 else ''})")
        else:
            lines += ["        args = list(args)"] + [f"        args[{i}] = a{i}" for i in tensors] + \
                ["        args = tuple(args)"]

    # 4. the forward
    if entry == "call":
        call = ", ".join(f"d{i}" if i in inputs else names[i] for i in range(len(names)))
    elif inputs == list(range(len(inputs))):
        call = ", ".join([f"d{i}" for i in inputs] + [f"*args[{len(inputs)}:]"])
    else:
        lines += ["    datas = list(args)"] + [f"    datas[{i}] = d{i}" for i in inputs]
        call = "*datas"
    lines += ["    try:", f"        out = forward({call})", "    except ValueError as exc:",
              "        raise shape_error(op, args, exc) from None",
              "    except OverflowError:", f"        out = wide_ints(forward, {call})"]

    # apply() adds a frame of its own; for ops outside the simple class the trace also leaves out
    # the public function that called apply()
    cut = 1 if entry == "call" else 2 if op.simple else 3
    out_diff = op.rule.output_differentiability

    def fix_dtype(o: str, indent: str) -> list[str]:
        out = [f"{indent}if {o}.__class__ is not ndarray:", f"{indent}    {o} = asarray({o})"]
        if track:
            out += [f"{indent}if not same or ({o}.dtype is not dt and {o}.dtype != dt):",
                    f"{indent}    {o} = fix(op, {o}, args, Tensor)"]
        return out

    if op.simple:
        # 4-7 for one output
        lines += fix_dtype("out", "    ")
        lines += ["    t = new(Tensor)", "    t._data = out"]
        if op.view == "maybe":  # a reshape is a view unless numpy had to copy
            glb["may_share_memory"] = np.may_share_memory
            lines += [f"    if out.base is not None and (out.size == 0 or may_share_memory(out, {ref(0)}._data)):",
                      f"        t._version_counter = {ref(0)}._version_counter",
                      f"        reg.note_view(t, {ref(0)}, op, args)"]
        elif op.view:
            lines += [f"    t._version_counter = {ref(0)}._version_counter",
                      f"    reg.note_view(t, {ref(0)}, op, args)"]
        if records:
            lines.append("    if req and STATE.enabled and out.dtype.kind == 'f':")
            lines += _record_lines(op, ref, "out", "        ", glb)
            lines.append("        t._grad_fn = node")
            if op.saves_result:
                lines.append("        node._saved['result'] = SavedVariable(t, is_output=True)")
            lines += ["        if STATE.saved_hooks is not None:", "            pack_saved(node, (t,))",
                      "        if anomaly_state.enabled:", f"            node._trace = format_stack()[:-{cut}]"]
            # inference mode turns grad mode off, so only tensors made without a node can be inference tensors
            lines += ["    elif STATE.inference and t._vc is None:", "        t._vc = INFERENCE_VC"]
        else:
            lines += ["    if STATE.inference and t._vc is None:", "        t._vc = INFERENCE_VC"]
        lines += ["    if reg._recorder is not None:", "        reg._recorder.record(op, args, (t,))", "    return t"]
    else:
        # 4-7 for a tuple of outputs (or one array from a list-input op)
        lines += ["    multi = isinstance(out, tuple)", "    fixed = []", "    for o in (out if multi else (out,)):"]
        lines += fix_dtype("o", "        ")
        lines += ["        fixed.append(o)", "    node = None"]
        if records:
            lines.append("    if req and STATE.enabled and fixed[0].dtype.kind == 'f':")
            lines += _record_lines(op, ref, "fixed[0]", "        ", glb)
            lines += ["        if anomaly_state.enabled:", f"            node._trace = format_stack()[:-{cut}]"]
        if op.view:
            lines.append(f"    view_of = {ref(0)}._version_counter")
        lines += ["    results = []", "    for k, o in enumerate(fixed):",
                  "        t = new(Tensor)", "        t._data = o"]
        if op.view:
            lines += ["        t._version_counter = view_of", f"        reg.note_view(t, {ref(0)}, op, args, k)"]
        else:  # a view shares its base's counter: inference only if the base is
            lines += ["        if STATE.inference:", "            t._vc = INFERENCE_VC"]
        if records:
            glb["out_diff"] = out_diff
            lines += [f"        if node is not None and (k >= {len(out_diff)} or out_diff[k]):",
                      "            t._grad_fn = node", "            t._output_nr = k"]
        lines.append("        results.append(t)")
        if records and op.rule.schema.returns.strip().startswith("Tensor[]"):
            # one gradient slot per tensor of the list (unbind, split): hooks see them all, as in PyTorch
            lines += ["    if node is not None:", "        node._n_outputs = len(results)"]
        results_saved = [(name, k) for name, kind, k in op.save_plan if kind == "result"]
        if records and results_saved:
            lines.append("    if node is not None:")
            lines += [f"        node._saved[{name!r}] = SavedVariable(results[{k}], is_output=True)"
                      for name, k in results_saved]
        if records:
            lines += ["    if node is not None and STATE.saved_hooks is not None:", "        pack_saved(node, results)"]
        lines += ["    if reg._recorder is not None:", "        reg._recorder.record(op, args, results)",
                  "    return tuple(results) if multi else results[0]"]

    src = "\n".join(lines)
    exec(compile(src, f"<{'fast call' if entry == 'call' else 'apply'} {op.key}>", "exec"), glb)
    fn = glb["call"]
    fn.__source__ = src
    if entry == "call":
        op.extra["fast_call"] = fn
    else:
        op.run = fn
    return fn


def _default_value(text: str):
    """A schema default (``None``, ``False``, ``1``, ``[]``) as a Python value."""
    return {"None": None, "False": False, "True": True, "[]": ()}.get(text, None) if not text.lstrip("-").isdigit() \
        else int(text)


def _record_lines(op: OpDef, ref: Callable[[int], str], out: str, indent: str, glb: dict) -> list[str]:
    """The source that records ``op``'s node into ``node``: edges, metadata, saved values.

    ``ref(i)`` is the expression of argument ``i``, ``out`` that of the first output array;
    the names it uses are added to ``glb``.  Tensor inputs are unrolled; a tensor-list input
    gives one edge per element, with the node's per-call ``_edges`` naming each element.
    """
    Tensor = glb["Tensor"]
    lines = ["node = new(cls)", "node._seq = seq()"]
    parts_next, parts_meta, per_call = [], [], None
    for k, (pos, fi, is_list) in enumerate(op.edge_plan):
        a = ref(pos)
        if is_list:
            lines += [f"e{k} = [edge(t) for t in {a}]", f"m{k} = [(t._data.shape, t._data.dtype) for t in {a}]"]
            parts_next.append(f"*e{k}")
            parts_meta.append(f"*m{k}")
            per_call = per_call or []
            per_call.append(f"*[({fi}, j) for j in range(len(e{k}))]")
            continue
        if per_call is not None:  # an entry only after a list edge (no shipped op has one before)
            per_call.append(f"({fi}, -1)")
        lines += [f"a = {a}",
                  "if a.__class__ is Tensor:",
                  "    d = a._data",
                  f"    m{k} = (d.shape, d.dtype)",
                  "    g = a._grad_fn",
                  "    if g is not None:",
                  f"        e{k} = (g, a._output_nr)",
                  "    elif a._requires_grad:",
                  f"        e{k} = (acc(a), 0)",
                  "    else:",
                  f"        e{k} = NO_EDGE",
                  "else:",
                  f"    e{k}, m{k} = edge_meta(a, Tensor)"]
        parts_next.append(f"e{k}")
        parts_meta.append(f"m{k}")

    def tup(parts):
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    lines += [f"node._next = {tup(parts_next)}", f"node._meta = {tup(parts_meta)}"]
    if per_call is not None:
        lines.append(f"node._edges = {tup(per_call)}")

    def meta(name, kind, pos) -> str:
        src = out if pos < 0 else ref(pos)
        what = kind[5:]
        if what == "shape":
            return f"{'list_shape' if pos in op.list_positions else 'shape'}({src})"
        return f"{'numel' if what == 'numel' else 'dtype_of'}({src})"

    if op.simple:
        # Like PyTorch, a tensor is saved only when an input whose formula reads it needs a gradient:
        # `y[1:] * 10` saves nothing of the view, so writing into `y` afterwards stays legal.
        formula_of_edge = [op.rule.schema.args[pos].name for pos, _fi, _l in op.edge_plan]
        items, conditional = [], []
        for name, kind, pos in op.save_plan:
            if kind == "tensor":
                users = [k for k, inp in enumerate(formula_of_edge) if name in op.rule.formulas[inp].params]
                conditional.append((name, pos, " or ".join(f"e{k}[0] is not None" for k in users) or "True"))
            elif kind == "value":
                items.append(f"{name!r}: {ref(pos)}")
            elif kind == "result":
                items.append(f"{name!r}: None")  # filled once the output tensor exists
            else:
                items.append(f"{name!r}: {meta(name, kind, pos)}")
        lines.append("saved = node._saved = {" + ", ".join(items) + "}")
        if conditional:
            lines.append("versions = []")
            for name, pos, cond in conditional:
                lines += [f"if {cond}:",
                          f"    a = {ref(pos)}",
                          f"    saved[{name!r}] = a",
                          "    if a.__class__ is Tensor or isinstance(a, Tensor):",
                          "        c = a._vc",  # no counter yet means version 0 (made on first need)
                          f"        versions.append(({name!r}, 0 if c is None else c.value))"]
            lines += ["if versions:", "    node._versions = versions"]
    else:
        # list inputs and several outputs: every tensor input is saved, in the rule's order
        saves_tensors = any(kind == "tensor" for _, kind, _ in op.save_plan)
        lines.append("saved = node._saved = {}")
        if saves_tensors:
            lines.append("versions = []")
        for name, kind, pos in op.save_plan:
            if kind == "tensor":
                lines += [f"a = {ref(pos)}",
                          "if a.__class__ is Tensor or isinstance(a, Tensor):",
                          f"    saved[{name!r}] = a",
                          "    c = a._vc",
                          f"    versions.append(({name!r}, 0 if c is None else c.value))",
                          "elif isinstance(a, list):",
                          f"    saved[{name!r}] = [SavedVariable(t) for t in a]",
                          "else:",
                          f"    saved[{name!r}] = a"]
            elif kind == "value":
                lines.append(f"saved[{name!r}] = {ref(pos)}")
            elif kind == "result":
                lines.append(f"saved[{name!r}] = None")
            else:
                lines.append(f"saved[{name!r}] = {meta(name, kind, pos)}")
        if saves_tensors:
            lines += ["if versions:", "    node._versions = versions"]

    def shape(x):
        return x._data.shape if isinstance(x, Tensor) else np.shape(x)

    def list_shape(x):
        data = x._data if isinstance(x, Tensor) else x
        return tuple(t._data.shape for t in data) if isinstance(data, list) else np.shape(data)

    def numel(x):
        return int(x._data.size) if isinstance(x, Tensor) else int(np.size(x))

    def dtype_of(x):
        return from_numpy_dtype(x._data.dtype if isinstance(x, Tensor) else np.asarray(x).dtype)

    glb.update(cls=op.node_class, seq=_sequence.__next__, acc=_acc, edge=gradient_edge, NO_EDGE=(None, 0),
               edge_meta=_edge_meta, shape=shape, list_shape=list_shape, numel=numel, dtype_of=dtype_of)
    return [indent + line for line in lines]


def _with_wide_ints(forward, *args):
    """Run ``forward`` again with its Python ints as int64 scalars: numpy refuses a Python int outside a
    small integer dtype's range (``uint8 tensor + 1000``), where PyTorch wraps it into the tensor's dtype.
    The int64 result is cast back to the tensor's dtype afterwards, which wraps as PyTorch does."""
    return forward(*(np.int64(a) if a.__class__ is int else a for a in args))


def _shape_error(op: OpDef, args: tuple, exc: Exception) -> Exception:
    shapes = []
    for a in args:
        s = getattr(a, "shape", None)
        if s is not None:
            shapes.append(list(s))
    msg = str(exc)
    if "broadcast" in msg:
        return RuntimeError(f"{op.name}: the shapes {' and '.join(map(str, shapes))} cannot be broadcast "
                            f"together (numpy: {msg})")
    return RuntimeError(f"{op.name} with input shapes {shapes}: {msg}")
