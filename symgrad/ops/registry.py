"""The op registry: one :class:`OpDef` per rule-table entry, and :func:`apply`, the eager hot path.

An op is its rule (from ``derivatives.yaml``) plus a numpy forward.  Elementwise
ops need no Python at all: their forward is printed from the table's
``elementwise`` expression.  Other ops register a forward with :func:`forward`.

>>> from symgrad.ops.registry import get
>>> get("mul.Tensor").node_class.__name__
'MulBackward0'
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import sympy

from codegen.printers import compile_formula

from ..autograd import anomaly
from ..autograd.grad_mode import STATE
from ..autograd.node import FusedBackward, SavedVariable, _sequence, make_node_class
from ..dtypes import from_numpy_dtype, get_default_dtype, result_type
from . import table, vocab

# Functions whose result keeps an integer input's dtype (everything else in an
# elementwise expression makes the result floating point, as in PyTorch).
_INTEGER_PRESERVING = {"Abs", "sign", "Max", "Min", "Heaviside", "Piecewise"}


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
    simple: bool = False              # one output, no tensor-list inputs: takes the fast path
    view: bool = False                # output aliases input 0 (shares its version counter)
    saves_result: bool = False
    edge_plan: tuple = ()
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.rule.schema.name

    @property
    def schema(self) -> table.Schema:
        return self.rule.schema


_REGISTRY: dict[str, OpDef] = {}
_FORWARDS: dict[str, tuple[Callable, dict]] = {}


def forward(key: str, *, dtype_rule: str = "keep", float_only: bool = False, view: bool = False):
    """Register the numpy forward of a non-elementwise op (decorator).

    ``view=True`` marks ops whose output aliases the input's memory: the output
    then shares the input's version counter, as PyTorch views do.
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
    op.extra["view"] = op.view = opts["view"]


def _elementwise_dtype_rule(expr: sympy.Expr) -> str:
    for f in expr.atoms(sympy.Function):
        if type(f).__name__ not in _INTEGER_PRESERVING:
            return "float"
    for p in expr.atoms(sympy.Pow):
        e = p.exp
        if e.is_number and (e.is_negative or not e.is_integer):
            return "float"
    return "promote"


def _build(rule: table.Rule) -> OpDef:
    schema = rule.schema
    op = OpDef(key=rule.key, rule=rule)
    op.tensor_positions = tuple(i for i, a in enumerate(schema.args) if a.is_tensor)
    op.list_positions = tuple(i for i, a in enumerate(schema.args) if a.is_tensor_list)
    if rule.elementwise is not None:
        params = tuple(a.name for a in schema.args)
        # elementwise forwards only use elementwise functions, never other ops
        op.forward = compile_formula(rule.elementwise, params, vocab.NUMPY_FUNCTIONS, name=f"forward_{rule.schema.name}")
        op.dtype_rule = _elementwise_dtype_rule(rule.elementwise)
        op.float_only = False
    if rule.key in _FORWARDS:
        _set_forward(op, *_FORWARDS[rule.key])
    if rule.differentiable:
        _attach_node(op)
    op.simple = not op.list_positions and schema.num_outputs == 1 and \
        not schema.returns.strip().startswith("Tensor[]") and \
        all(kind != "result" or name == "result" for name, kind, _ in op.save_plan)
    return op


def _attach_node(op: OpDef) -> None:
    rule = op.rule
    names = list(rule.formulas)
    params = tuple(rule.formulas[n].params for n in names)
    np_fns = [_LazyFormula(rule.formulas[n], vocab.numpy_namespace) for n in names]
    t_fns = [_LazyFormula(rule.formulas[n], vocab.tensor_namespace) for n in names]
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
        fast = FusedBackward(rule, names, tuple(fi for _, fi, _ in edges), vocab.numpy_namespace,
                             vocab.tensor_namespace)
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
    want = result_type(*operands)
    if op.dtype_rule == "float" and not want.is_floating_point:
        want = get_default_dtype()
    if out.dtype != want.np:
        out = out.astype(want.np)
    return out


def _check_float(op: OpDef, args: tuple, Tensor) -> None:
    for i in op.tensor_positions:
        a = args[i]
        if isinstance(a, Tensor) and not a.dtype.is_floating_point:
            raise RuntimeError(f"{op.name}(): could not infer output dtype. Input dtype must be either a "
                               f"floating point or complex dtype. Got: {a.dtype.name}")


_T = None  # symgrad.tensor.Tensor, bound on first use (tensor.py imports this package)
_acc = None


def _bind():
    global _T, _acc
    from ..tensor import Tensor, _accumulate_node

    _T, _acc = Tensor, _accumulate_node
    return Tensor


def apply(op: OpDef, args: tuple):
    """Run ``op`` eagerly on ``args`` (schema order) and record its node when needed."""
    if op.simple:
        return _apply_simple(op, args)
    Tensor = _T or _bind()
    datas = list(args)
    requires = False
    first_dtype = None
    same_dtype = True
    for i in op.tensor_positions:
        a = args[i]
        if isinstance(a, Tensor):
            d = a._data
            datas[i] = d
            if a._grad_fn is not None or a._requires_grad:
                requires = True
            if first_dtype is None:
                first_dtype = d.dtype
            elif d.dtype != first_dtype:
                same_dtype = False
    for i in op.list_positions:
        items = args[i]
        datas[i] = [t._data for t in items]
        for t in items:
            if t._grad_fn is not None or t._requires_grad:
                requires = True
            if first_dtype is None:
                first_dtype = t._data.dtype
            elif t._data.dtype != first_dtype:
                same_dtype = False
    if op.float_only:
        _check_float(op, args, Tensor)
    try:
        out = op.forward(*datas)
    except ValueError as exc:
        raise _shape_error(op, args, exc) from None

    multi = isinstance(out, tuple)
    outs = out if multi else (out,)
    fixed = []
    for o in outs:
        if type(o) is not np.ndarray:
            o = np.asarray(o)
        if op.dtype_rule != "keep" and (not same_dtype or o.dtype != first_dtype):
            o = _fix_dtype(op, o, args, Tensor)
        fixed.append(o)

    node = None
    if requires and STATE.enabled and op.node_class is not None and fixed[0].dtype.kind == "f":
        node = _record(op, args, fixed, Tensor, _acc)
    results = []
    out_diff = op.rule.output_differentiability
    view_of = args[0]._version_counter if op.extra.get("view") else None
    for k, o in enumerate(fixed):
        t = Tensor._wrap(o)
        if view_of is not None:
            t._version_counter = view_of
        if node is not None and (k >= len(out_diff) or out_diff[k]):
            t._grad_fn = node
            t._output_nr = k
        results.append(t)
    if node is not None and op.extra.get("saves_result"):
        for name, kind, k in op.save_plan:
            if kind == "result":
                node._saved[name] = SavedVariable(results[k], is_output=True)
    return tuple(results) if multi else results[0]


def _apply_simple(op: OpDef, args: tuple):
    """The hot path: one output, no tensor lists (every elementwise op, most others)."""
    Tensor = _T or _bind()
    datas = list(args)
    requires = False
    dt = None
    same = True
    for i in op.tensor_positions:
        a = args[i]
        if a.__class__ is Tensor or isinstance(a, Tensor):
            d = a._data
            datas[i] = d
            if a._grad_fn is not None or a._requires_grad:
                requires = True
            if dt is None:
                dt = d.dtype
            elif d.dtype != dt:
                same = False
    if op.float_only:
        _check_float(op, args, Tensor)
    try:
        out = op.forward(*datas)
    except ValueError as exc:
        raise _shape_error(op, args, exc) from None
    if out.__class__ is not np.ndarray:
        out = np.asarray(out)
    if op.dtype_rule != "keep" and (not same or out.dtype != dt):
        out = _fix_dtype(op, out, args, Tensor)
    t = Tensor._wrap(out)
    if op.view:
        t._version_counter = args[0]._version_counter
    if requires and op.node_class is not None and STATE.enabled and out.dtype.kind == "f":
        node = _record(op, args, (out,), Tensor, _acc)
        t._grad_fn = node
        if op.saves_result:
            node._saved["result"] = SavedVariable(t, is_output=True)
    return t


def _record(op: OpDef, args: tuple, outs: list, Tensor, _accumulate_node):
    node = op.node_class.__new__(op.node_class)
    node._seq = next(_sequence)
    edges = []
    metas = []
    per_call = None
    for pos, fi, is_list in op.edge_plan:
        if is_list:
            per_call = per_call or []
            for k, t in enumerate(args[pos]):
                edges.append(_edge(t, _accumulate_node))
                metas.append((t._data.shape, t._data.dtype))
                per_call.append((fi, k))
            continue
        if per_call is not None:
            per_call.append((fi, -1))
        a = args[pos]
        if a.__class__ is Tensor or isinstance(a, Tensor):
            if a._grad_fn is not None:
                edges.append((a._grad_fn, a._output_nr))
            elif a._requires_grad:
                edges.append((_accumulate_node(a), 0))
            else:
                edges.append((None, 0))
            d = a._data
            metas.append((d.shape, d.dtype))
        else:
            edges.append((None, 0))
            metas.append(None)
    node._next = tuple(edges)
    node._meta = tuple(metas)
    if per_call is not None:
        node._edges = tuple(per_call)
    saved = {}
    versions = None
    for name, kind, pos in op.save_plan:
        if kind == "tensor":
            a = args[pos]
            if a.__class__ is Tensor or isinstance(a, Tensor):
                # the tensor itself plus the version it had: cheaper than a SavedVariable per input
                saved[name] = a
                c = a._version_counter
                if versions is None:
                    versions = [(name, c, c.value)]
                else:
                    versions.append((name, c, c.value))
            elif isinstance(a, list):
                saved[name] = [SavedVariable(t) for t in a]
            else:
                saved[name] = a
        elif kind == "value":
            saved[name] = args[pos]
        elif kind == "result":
            saved[name] = None  # filled once the output tensor exists
        else:
            src = outs[0] if pos < 0 else args[pos]
            data = src._data if isinstance(src, Tensor) else src
            what = kind[5:]
            if what == "shape":
                saved[name] = tuple(t._data.shape for t in data) if isinstance(data, list) else np.shape(data)
            elif what == "numel":
                saved[name] = int(np.size(data))
            else:
                saved[name] = from_numpy_dtype(np.asarray(data).dtype)
    if versions is not None:
        node._versions = versions
    node._saved = saved
    if anomaly.is_enabled():
        node._trace = traceback.format_stack()[:-3]
    return node


def _edge(t, _accumulate_node):
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    if t._requires_grad:
        return (_accumulate_node(t), 0)
    return (None, 0)


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
