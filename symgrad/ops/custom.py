"""User-defined ops at run time: :func:`register_op`.

A user op is an entry of the rule table written by the user: it is parsed and
validated by the same loader as ``derivatives.yaml`` (a bad entry raises
:class:`~symgrad.rules.table.RuleTableError` naming the entry and its line), numbered
after the shipped table's overloads, and registered in the same registry, so it runs
in eager mode (and under ``create_graph=True``) exactly like a built-in op.

>>> import symgrad
>>> softplus = symgrad.register_op(
...     "doc_softplus(Tensor self) -> Tensor",
...     elementwise="log(1 + exp(self))",
...     rules={"self": "grad * (1 - exp(-result))"})
>>> x = symgrad.tensor([0.0, 1.0], requires_grad=True)
>>> y = softplus(x)
>>> type(y.grad_fn).__name__
'DocSoftplusBackward0'
>>> y.sum().backward(); x.grad
tensor([0.5000, 0.7311])
>>> symgrad.ops.custom.doc_softplus is softplus, x.doc_softplus() is not None
(True, True)
>>> from symgrad.ops.custom import _unregister; _unregister("doc_softplus")

Every registered op is a public function of this module (``symgrad.ops.custom.<name>``)
and, unless ``method=False``, a Tensor method.
"""

from __future__ import annotations

import ast
import inspect
import keyword
import numbers
import re
from collections.abc import Callable

import numpy as np
import yaml

from ..rules import table, vocab
from ..rules.table import Rule, RuleTableError
from ..tensor import Tensor
from . import formula_namespaces, registry

__all__ = ["register_op", "RuleTableError"]

# Names a user op may not take: the formula vocabulary, the sympy functions and constants a
# formula may use, the metadata readers and the names a formula binds.
_RESERVED = (set(vocab.FORMULA_FUNCTIONS) | set(table.SYMPY_FUNCTIONS) | set(table.METADATA_FUNCS)
             | {"grad", "grads", "result", "expand", "sum", "slice", "outer"})

# name -> what registering it did (for _unregister)
_REGISTERED: dict[str, dict] = {}

_Number = (numbers.Number, np.generic)


# --- the public entry point -----------------------------------------------------------------

def register_op(spec: str, *, elementwise: str | None = None, rules: dict | None = None,
                forward: Callable | None = None, forwards: dict | None = None, method: bool = True,
                node: str | None = None, output_differentiability=None):
    """Register a user-defined op and return its public function.

    Two forms:

    * YAML: ``register_op(yaml_text, forwards={"my_op": fn})`` -- one or more entries in the
      format of ``symgrad/derivatives.yaml``; ``forwards`` maps an op key (``name.overload``)
      or a base name to the numpy forward of each non-elementwise entry.
    * keyword: ``register_op("softplus(Tensor self) -> Tensor", elementwise="log(1 + exp(self))",
      rules={"self": "grad * (1 - exp(-result))"})``; a structural (non-elementwise) op passes
      ``forward=numpy_fn`` instead of ``elementwise``.  ``node`` and
      ``output_differentiability`` are the table's optional keys.

    A forward takes numpy arrays (and the schema's non-Tensor arguments) in schema order and
    returns an array (a tuple of arrays for several outputs).  An elementwise op needs no
    forward: it is printed from its expression, as for the shipped table (a given forward
    overrides it, e.g. for numerical stability).

    Returns the public function of the (last) registered op name: it takes Tensors, numbers
    and arrays, is also ``symgrad.ops.custom.<name>``, and is attached as a Tensor method
    when ``method`` is true.  Every function registered by a YAML snippet is reachable
    through ``symgrad.ops.custom``.

    Raises :class:`RuleTableError` for a malformed entry (bad schema, unknown name or function
    in a formula...), ``ValueError`` when an op key or name already exists, when a
    non-elementwise op has no forward, or when the name clashes with a Tensor attribute
    (pass ``method=False``), and ``TypeError`` for a misuse of the arguments.
    Registration is all-or-nothing: on error nothing is registered.
    """
    if not isinstance(spec, str):
        raise TypeError(f"register_op: expected a schema or YAML text, got {type(spec).__name__}")
    keyword_args = {"elementwise": elementwise, "rules": rules, "forward": forward, "node": node,
                    "output_differentiability": output_differentiability}
    if _is_yaml(spec):
        given = [k for k, v in keyword_args.items() if v is not None]
        if given:
            raise TypeError(f"register_op: {', '.join(given)} belong to the keyword form "
                            f"(register_op('name(Tensor self) -> Tensor', ...)); in the YAML form write "
                            f"them in the entry and pass forwards={{name: fn}}")
        text, label = spec, None
        forwards = dict(forwards or {})
    else:
        if forwards is not None:
            raise TypeError("register_op: forwards= is for the YAML form; the keyword form takes forward=")
        text = _entry_yaml(spec, elementwise, rules, node, output_differentiability)
        label = f"register_op({table.parse_schema(spec).key})"
        forwards = {}
        if forward is not None:
            forwards[table.parse_schema(spec).key] = forward

    parsed = _parse(text, label)
    plan = _check(parsed, forwards, method)
    return _install(parsed, plan, method)


def _is_yaml(spec: str) -> bool:
    """A schema is one line with an arrow; anything else (entries, comments, blank) is YAML."""
    head = spec.strip()
    return head.startswith(("-", "#", "name:")) or "\n" in head or "->" not in head


def _entry_yaml(schema: str, elementwise, rules, node, output_differentiability) -> str:
    """The keyword form as a one-entry YAML snippet (so that it goes through the same loader)."""
    if rules is not None and not isinstance(rules, dict):
        raise TypeError(f"register_op: rules= must be a dict {{argument: formula}}, got {type(rules).__name__}")
    try:
        table.parse_schema(schema)
    except ValueError as exc:
        raise RuleTableError(f"register_op({schema.strip()!r}): {exc}") from None
    entry: dict = {"name": schema.strip()}
    if elementwise is not None:
        entry["elementwise"] = str(elementwise)
    if node is not None:
        entry["node"] = str(node)
    if output_differentiability is not None:
        entry["output_differentiability"] = list(output_differentiability)
    for arg, formula in (rules or {}).items():
        if arg in table.RESERVED_KEYS:
            raise RuleTableError(f"register_op({schema.strip()!r}): {arg!r} is not an argument name "
                                 f"(pass it as a keyword of register_op)")
        entry[str(arg)] = formula if isinstance(formula, (bool, int, float)) else str(formula)
    return yaml.safe_dump([entry], sort_keys=False, default_flow_style=False, width=10_000)


def _parse(text: str, label: str | None) -> dict[str, Rule]:
    """Parse with the table's loader, numbering after the shipped table (counters are only
    committed once the whole registration succeeds)."""
    counters = dict(table.name_counters())
    try:
        rules = table.parse_rules(text, counters, formula_namespaces.known_functions())
    except RuleTableError as exc:
        # the loader names the shipped file; name the user's snippet (or schema) instead
        msg = str(exc)
        if label is None:
            msg = msg.replace("derivatives.yaml is not valid YAML", "register_op: the YAML text is not valid")
            msg = re.sub(r"derivatives\.yaml line (\d+)", r"register_op entry line \1", msg)
        else:  # the keyword form is one generated entry: its line number means nothing to the user
            msg = re.sub(r"derivatives\.yaml line 1(?: \([^)]*\))?", label, msg)
        raise RuleTableError(msg) from None
    if not rules:
        raise ValueError("register_op: the YAML text holds no entries")
    return {"rules": rules, "counters": counters}


def _check(parsed: dict, forwards: dict, method: bool) -> dict:
    """Validate everything before anything global changes."""
    rules: dict[str, Rule] = parsed["rules"]
    existing = registry.all_ops()
    existing_names = {op.name for op in existing.values()}
    by_name: dict[str, list[Rule]] = {}
    for key, rule in rules.items():
        name = rule.schema.name
        where = f"register_op: op {key!r} (line {rule.line})"
        if key in existing:
            raise ValueError(f"{where} is already registered")
        if name in existing_names:
            raise ValueError(f"{where}: an op named {name!r} already exists; overloads cannot be added to an "
                             f"existing op (register all overloads of a new op in one call)")
        if name in _RESERVED or keyword.iskeyword(name):
            raise ValueError(f"{where}: {name!r} is reserved (a formula function or name); choose another name")
        if name in globals() and name not in _REGISTERED:
            raise ValueError(f"{where}: {name!r} would shadow symgrad.ops.custom.{name}; choose another name")
        for a in rule.schema.args:
            if not a.name.isidentifier() or keyword.iskeyword(a.name):
                raise ValueError(f"{where}: argument name {a.name!r} is not a valid Python parameter name")
        by_name.setdefault(name, []).append(rule)

    # forwards: by key, or by base name when the name has one overload in the snippet
    fwd: dict[str, Callable] = {}
    for k, fn in forwards.items():
        if k in rules:
            target = k
        elif k in by_name and len(by_name[k]) == 1:
            target = by_name[k][0].key
        elif k in by_name:
            raise ValueError(f"register_op: forwards[{k!r}] is ambiguous ({k!r} has overloads "
                             f"{', '.join(r.key for r in by_name[k])}); key it by 'name.overload'")
        else:
            raise ValueError(f"register_op: forwards[{k!r}] names no entry of the snippet "
                             f"(entries: {', '.join(rules)})")
        if not callable(fn):
            raise TypeError(f"register_op: the forward of {target!r} is not callable: {fn!r}")
        fwd[target] = fn
    for key, rule in rules.items():
        if rule.elementwise is None and key not in fwd:
            raise ValueError(f"register_op: op {key!r} (line {rule.line}) is not elementwise, so it needs a "
                             f"numpy forward: pass forward=fn (keyword form) or forwards={{{key!r}: fn}} "
                             f"(or give it an 'elementwise:' expression)")

    if method:
        for name in by_name:
            if hasattr(Tensor, name):
                raise ValueError(f"register_op: {name!r} clashes with the existing Tensor attribute "
                                 f"Tensor.{name}; pass method=False to register it as a function only")
    return {"by_name": by_name, "forwards": fwd}


def _install(parsed: dict, plan: dict, method: bool):
    rules: dict[str, Rule] = parsed["rules"]
    counters = table.name_counters()
    before = dict(counters)
    for key, fn in plan["forwards"].items():
        rule = rules[key]
        dtype_rule = registry._elementwise_dtype_rule(rule.elementwise) if rule.elementwise is not None \
            else "keep"
        registry.forward(key, dtype_rule=dtype_rule)(fn)
    try:
        ops = registry.add_rules(rules)
    except Exception:
        for key in plan["forwards"]:
            registry._FORWARDS.pop(key, None)
        raise
    counters.update(parsed["counters"])
    op_by_key = {op.key: op for op in ops}

    fn = None
    for name, name_rules in plan["by_name"].items():
        overloads = [op_by_key[r.key] for r in name_rules]
        fn = _public_function(name, overloads)
        numpy_fn = overloads[0].forward if len(overloads) == 1 else _numpy_dispatcher(overloads)
        formula_namespaces.register(name, numpy_fn, fn)  # formulas may call the op (also under create_graph)
        globals()[name] = fn
        if method:
            setattr(Tensor, name, fn)
        _REGISTERED[name] = {"keys": [op.key for op in overloads], "method": method,
                             "prefix": table.node_prefix(name), "counters": before}
    return fn


# --- the public function ----------------------------------------------------------------------

def _default(text: str | None):
    if text is None:
        return inspect.Parameter.empty
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # e.g. an enum name such as `Mean`: passed through as written
    return tuple(value) if isinstance(value, list) else value


def _signature(op: registry.OpDef) -> inspect.Signature:
    params = []
    for a in op.schema.args:
        kind = inspect.Parameter.KEYWORD_ONLY if a.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append(inspect.Parameter(a.name, kind, default=_default(a.default)))
    return inspect.Signature(params)


def _is_number(x) -> bool:
    return isinstance(x, _Number) and not isinstance(x, np.ndarray)


def _convert(op: registry.OpDef, values: list) -> tuple:
    """Arguments in schema order, as :func:`registry.apply` takes them."""
    out = list(values)
    for i, a in enumerate(op.schema.args):
        v = out[i]
        if a.is_tensor_list:
            out[i] = [x if isinstance(x, Tensor) else Tensor(x) for x in v]
        elif a.is_tensor:
            if v is None or isinstance(v, Tensor):
                continue
            if _is_number(v):
                out[i] = v.item() if isinstance(v, np.generic) else v
            else:
                out[i] = Tensor(v)  # arrays and (nested) lists
        elif isinstance(v, np.generic):
            out[i] = v.item()
        elif isinstance(v, list) and a.type.startswith(("int", "SymInt")):
            out[i] = tuple(v)
    if op.tensor_positions and not any(isinstance(out[i], Tensor) for i in op.tensor_positions) \
            and not op.list_positions:
        # only numbers: the first one becomes a Tensor of the default dtype, as torch.softplus(2.) would
        i = next((i for i in op.tensor_positions if out[i] is not None), None)
        if i is not None:
            out[i] = Tensor(out[i])
    return tuple(out)


def _matches(op: registry.OpDef, values: list, is_tensor) -> bool:
    """Tensor arguments receive tensors and non-Tensor arguments do not (overload choice)."""
    for a, v in zip(op.schema.args, values):
        if a.is_tensor and not (is_tensor(v) or (v is None and a.optional)):
            return False
        if not a.is_tensor and not a.is_tensor_list and is_tensor(v):
            return False
    return True


def _bind(sig: inspect.Signature, args, kwargs) -> list | None:
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return list(bound.arguments.values())


def _select(overloads, sigs, args, kwargs, is_tensor, name):
    candidates = []
    for op, sig in zip(overloads, sigs):
        values = _bind(sig, args, kwargs)
        if values is not None:
            candidates.append((op, values))
    if not candidates:
        # re-raise the binding error of the first overload (a helpful TypeError)
        try:
            sigs[0].bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc} (schema: {overloads[0].schema.text})") from None
    for op, values in candidates:
        if _matches(op, values, is_tensor):
            return op, values
    return candidates[0]


def _public_function(name: str, overloads: list[registry.OpDef]):
    sigs = [_signature(op) for op in overloads]
    apply = registry.apply

    if len(overloads) == 1:
        op, sig = overloads[0], sigs[0]

        def fn(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"{name}(): {exc} (schema: {op.schema.text})") from None
            bound.apply_defaults()
            return apply(op, _convert(op, list(bound.arguments.values())))

        fn.__signature__ = sig
    else:
        def fn(*args, **kwargs):
            op, values = _select(overloads, sigs, args, kwargs, lambda v: isinstance(v, Tensor), name)
            return apply(op, _convert(op, values))

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    lines = [f"User-defined op ``{name}`` (registered with symgrad.register_op)."]
    for op in overloads:
        rule = op.rule
        lines.append("")
        lines.append(f"``{rule.schema.text}``" + (f" -- backward node ``{rule.node_name}``" if rule.node_name else ""))
        if rule.elementwise is not None:
            lines.append(f"    elementwise: {rule.elementwise}")
        for arg, f in rule.formulas.items():
            lines.append(f"    {arg}: {f.text}")
    fn.__doc__ = "\n".join(lines)
    fn._symgrad_ops = tuple(op.key for op in overloads)
    return fn


def _numpy_dispatcher(overloads: list[registry.OpDef]):
    """The numpy form of a name with several overloads (for formulas that call it)."""
    sigs = [_signature(op) for op in overloads]

    def numpy_fn(*args, **kwargs):
        op, values = _select(overloads, sigs, args, kwargs, lambda v: isinstance(v, np.ndarray),
                             overloads[0].name)
        return op.forward(*values)

    return numpy_fn


# --- undo (for tests) -------------------------------------------------------------------------

def _unregister(name: str) -> None:
    """Remove a user-defined op registered by :func:`register_op` (all its overloads).

    Meant for test isolation: registration is global.  Graphs already recorded with the op keep
    working; the node-name counter goes back only if no later op of the same prefix took a number.
    """
    info = _REGISTERED.pop(name, None)
    if info is None:
        raise KeyError(f"no user-defined op named {name!r}")
    for key in info["keys"]:
        registry._REGISTRY.pop(key, None)
        registry._FORWARDS.pop(key, None)
    formula_namespaces._extra_numpy.pop(name, None)
    formula_namespaces._extra_tensor.pop(name, None)
    formula_namespaces._numpy_namespace = formula_namespaces._tensor_namespace = None
    globals().pop(name, None)
    if info["method"] and getattr(Tensor, name, None) is not None:
        try:
            delattr(Tensor, name)
        except AttributeError:
            pass
    counters = table.name_counters()
    prefix = info["prefix"]
    if not any(other["prefix"] == prefix for other in _REGISTERED.values()):
        if prefix in info["counters"]:
            counters[prefix] = info["counters"][prefix]
        else:
            counters.pop(prefix, None)
