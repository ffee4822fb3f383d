"""Backward graph nodes: ``Node``, ``AccumulateGrad`` and the rule-table nodes.

A node is what ``tensor.grad_fn`` points at.  ``next_functions`` holds one
``(node or None, input_nr)`` pair per tensor input of the op, exactly as in
PyTorch.  Nodes made from a rule-table entry (:class:`FormulaNode` subclasses,
one class per entry, named ``MulBackward0`` etc.) evaluate that entry's formulas.

>>> import symgrad
>>> x = symgrad.tensor([2.0], requires_grad=True)
>>> y = x * 3
>>> type(y.grad_fn).__name__, y.grad_fn.next_functions[1]
('MulBackward0', (None, 0))
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..rules.printers import FormulaPrinter

ERR_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they "
    "have already been freed). Saved intermediate values of the graph are freed when you call .backward() "
    "or autograd.grad(). Specify retain_graph=True if you need to backward through the graph a second time "
    "or if you need to access saved tensors after calling backward."
)

_sequence = itertools.count()


class Node:
    """Base class of every backward node.

    Subclasses implement :meth:`apply`, which takes the gradients of the node's
    outputs (numpy arrays, or Tensors under ``create_graph``) and returns one
    gradient (or None) per entry of ``next_functions``.
    """

    # Instance attributes default to these class values, so creating a node (once per recorded
    # op, the eager hot path) only sets what differs.
    _has_saved = False
    _next: tuple = ()
    _meta: tuple = ()
    _pre_hooks = None
    _node_pre_hooks = None
    _retain = None
    _post_hooks = None
    _trace = None
    _released = False
    _n_outputs = 1
    # False only for rule-table nodes without hooks: the engine runs those on a short path.
    _special = True
    # True when the gradients the last apply() returned are new arrays nothing else holds, so
    # that AccumulateGrad may keep them instead of copying (rule-table nodes: see _alias_free).
    _fresh_outputs = False

    def __init__(self) -> None:
        self._seq = next(_sequence)

    @property
    def next_functions(self) -> tuple:
        """``((node or None, input_nr), ...)``: where each input's gradient goes."""
        return self._next

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {hex(id(self))}>"

    _metadata = None

    @property
    def metadata(self) -> dict:
        """A dict for the user's own notes about this node (kept as long as the node)."""
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    def register_hook(self, fn):
        """Post-hook ``fn(grad_inputs, grad_outputs)``, called after the node runs."""
        self._special = True
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(fn)
        return RemovableHandle(self._post_hooks, fn)

    def register_prehook(self, fn):
        """Pre-hook ``fn(grad_outputs) -> tuple | None`` run before the node, after the hooks of its
        output tensors and their ``retain_grad``; a returned tuple replaces the gradients.

        >>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
        >>> y = (x * 3).sum()
        >>> h = y.grad_fn.register_prehook(lambda grads: (grads[0] * 10,))
        >>> y.backward(); x.grad
        tensor([30., 30.])
        """
        self._special = True
        if self._node_pre_hooks is None:
            self._node_pre_hooks = []
        self._node_pre_hooks.append(fn)
        return RemovableHandle(self._node_pre_hooks, fn)

    def _add_tensor_hook(self, output_nr: int, fn):
        self._special = True
        if self._pre_hooks is None:
            self._pre_hooks = {}
        hooks = self._pre_hooks.setdefault(output_nr, [])
        hooks.append(fn)
        return RemovableHandle(hooks, fn)

    def apply(self, grads: list, create_graph: bool) -> list:  # pragma: no cover - abstract
        raise NotImplementedError

    def release_variables(self) -> None:
        self._released = True

    def _check_not_released(self) -> None:
        if self._released and self._has_saved:
            raise RuntimeError(ERR_BACKWARD_TWICE)

    def __call__(self, *grads):
        """Run the node on gradients given as Tensors (like calling a PyTorch node)."""
        from ..tensor import Tensor

        out = self.apply([g._data if isinstance(g, Tensor) else g for g in grads], False)
        return tuple(None if g is None else Tensor._wrap(np.asarray(g)) for g in out)


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    __slots__ = ("_hooks", "_fn")

    def __init__(self, hooks: list, fn) -> None:
        self._hooks, self._fn = hooks, fn

    def remove(self) -> None:
        try:
            self._hooks.remove(self._fn)
        except ValueError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class AccumulateGrad(Node):
    """The node of a leaf that requires grad: adds incoming gradients into ``variable.grad``."""

    _seq = -1  # a sink: the engine runs it after every other node

    def __init__(self, variable) -> None:
        self.variable = variable
        self._meta = ((variable.shape, variable.dtype),)

    _post_accumulate_hooks = None

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"  # PyTorch's name, which programs may compare against

    def _add_post_accumulate_hook(self, fn):
        if self._post_accumulate_hooks is None:
            self._post_accumulate_hooks = []
        self._post_accumulate_hooks.append(fn)
        return RemovableHandle(self._post_accumulate_hooks, fn)

    def apply(self, grads: list, create_graph: bool, steal: bool = False) -> list:
        if grads[0] is None:
            return []
        self._accumulate(grads[0], steal)
        if self._post_accumulate_hooks:
            for hook in list(self._post_accumulate_hooks):
                result = hook(self.variable)
                if isinstance(result, _Tensor):
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
                if result is not None:
                    raise TypeError(f"expected None, but post accumulate grad hook returned "
                                    f"'{type(result).__name__}' (these hooks cannot return anything)")
        return []

    def _accumulate(self, g, steal: bool) -> None:
        from ..tensor import Tensor

        var = self.variable
        current = var._grad
        if isinstance(g, Tensor):  # create_graph: keep the graph of the gradient
            if current is None:
                var._grad = g if g._grad_fn is not None else Tensor._wrap(np.array(g._data, copy=True))
            else:
                var._grad = current + g
            return
        if current is None:
            # The engine may hand one array to several consumers: copy unless it says the array is ours.
            if steal and g.dtype == var._data.dtype:
                var._grad = Tensor._wrap(g)
            else:
                var._grad = Tensor._wrap(np.array(g, dtype=var._data.dtype, copy=True))
        elif current._grad_fn is not None:
            var._grad = Tensor._wrap(current._data + g)
        else:
            np.add(current._data, g, out=current._data, casting="unsafe")


class SavedVariable:
    """A tensor kept for backward, with the version it had when saved."""

    __slots__ = ("tensor", "data", "counter", "version", "node_output", "is_output")

    def __init__(self, tensor, is_output: bool = False, node=None) -> None:
        self.counter = tensor._version_counter
        self.version = self.counter.value
        self.is_output = is_output
        if is_output:
            # Saving the output object itself would make a cycle output -> node -> output.
            self.tensor = None
            self.data = tensor._data
            self.node_output = tensor._output_nr
        else:
            self.tensor = tensor
            self.data = None
            self.node_output = 0

    def check(self, node: Node, name: str) -> None:
        if self.counter.value != self.version:
            data = self.tensor._data if self.tensor is not None else self.data
            _version_error(node, name, data, self.counter.value, self.version,
                           "output" if self.is_output else "input")

    def unpack_array(self):
        return self.tensor._data if self.tensor is not None else self.data

    def unpack_tensor(self, node: Node):
        from ..tensor import Tensor

        if self.tensor is not None:
            return self.tensor
        t = Tensor._wrap(self.data)
        t._grad_fn = node
        t._output_nr = self.node_output
        t._version_counter = self.counter
        return t


class PackedSaved:
    """A tensor saved for backward under ``saved_tensors_hooks``: what the pack hook returned.

    Reading it calls the unpack hook.  Under ``create_graph`` the unpacked data is rewrapped with
    the original tensor's place in the graph, so that the gradient can be differentiated again.
    As in PyTorch, no version check is made: the hooks own the saved data.
    """

    __slots__ = ("packed", "unpack_hook", "edge", "output_nr")

    def __init__(self, tensor, pack_hook, unpack_hook, output_nr: int = -1, data_only: bool = False) -> None:
        self.unpack_hook = unpack_hook
        self.output_nr = output_nr  # >= 0: an output of the node itself (no edge kept: it would be a cycle)
        if output_nr < 0:
            from ..tensor import gradient_edge

            self.edge = gradient_edge(tensor)
        else:
            self.edge = None
        # data_only: the hook sees the saved data without its autograd metadata (PyTorch's
        # _raw_saved_*.register_hooks); the graph edge kept above still links the unpacked value back
        self.packed = pack_hook(tensor.detach() if data_only else tensor)

    def check(self, node: Node, name: str) -> None:
        pass

    def _unpacked(self):
        t = self.unpack_hook(self.packed)
        if not isinstance(t, _Tensor):
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got result of type "
                            f"{type(t).__name__}")
        return t

    def unpack_array(self):
        return self._unpacked()._data

    def unpack_tensor(self, node: Node):
        import weakref

        t = _Tensor._wrap(self._unpacked()._data)
        if self.output_nr >= 0:
            t._grad_fn, t._output_nr = node, self.output_nr
        else:
            edge_node, nr = self.edge
            if edge_node.__class__ is AccumulateGrad:
                t._requires_grad = True
                t._accumulate = weakref.ref(edge_node)
            elif edge_node is not None:
                t._grad_fn, t._output_nr = edge_node, nr
        return t


def _pack_one(value, outputs, node, pack, unpack):
    if value.__class__ is SavedVariable:
        if value.is_output:
            # found by its array: a non-differentiable output (max.dim's indices) has no output number
            out = next(o for o in outputs if o._data is value.data)
            if out._grad_fn is node:
                return PackedSaved(out, pack, unpack, out._output_nr)
            return PackedSaved(out, pack, unpack)
        return PackedSaved(value.tensor, pack, unpack)
    if isinstance(value, _Tensor):
        return PackedSaved(value, pack, unpack)
    if value.__class__ is list:
        return [_pack_one(v, outputs, node, pack, unpack) for v in value]
    return value


def pack_saved(node, outputs) -> None:
    """Hand the tensors ``node`` saved for backward to the active ``saved_tensors_hooks`` pack hook."""
    from .grad_mode import STATE

    pack, unpack = STATE.saved_hooks
    saved = node._saved
    for name, value in list(saved.items()):
        saved[name] = _pack_one(value, outputs, node, pack, unpack)
    node._versions = None


def _version_error(node, name, data, now, expected, kind):
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{data.dtype.name} {list(data.shape)}] ({kind} {name!r} of {type(node).__name__}), is at "
        f"version {now}; expected version {expected} instead. Hint: enable anomaly detection to find the "
        "operation that failed to compute its gradient, with symgrad.autograd.set_detect_anomaly(True).")


_Tensor = None


def bind_tensor_class(cls) -> None:
    """Called by symgrad.tensor (which imports this module) to make Tensor known here."""
    global _Tensor
    _Tensor = cls


class FormulaNode(Node):
    """A node generated from a rule-table entry.

    Class attributes (set by :func:`make_node_class`): ``_rule``, ``_edges``
    (per edge: index into the compiled formulas, and the element for list inputs;
    list inputs such as ``cat`` override it per call),
    ``_np_fns``/``_t_fns`` (formulas compiled against the numpy and symgrad namespaces).
    """

    _rule: Any = None
    _edges: tuple = ()  # per edge: (formula index, element); list inputs (cat) override it per call
    _versions = None    # [(name, version)] of saved input tensors
    _special = False
    _fast = None        # FusedBackward of the rule, when every input is a single tensor
    _alias_free = True
    _formula_params: tuple = ()
    _np_fns: tuple = ()
    _t_fns: tuple = ()
    _n_outputs = 1

    def release_variables(self) -> None:
        self._released = True
        if self._has_saved:
            self._saved = None

    def _env(self, grads: list, create_graph: bool) -> dict:
        if self._released and self._has_saved:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        if self._versions is not None:
            _check_versions(self)
        env = {"grad": grads[0], "grads": grads}
        for name, value in self._saved.items():
            if value.__class__ is _Tensor:
                env[name] = value if create_graph else value._data
            elif value.__class__ is PackedSaved:
                env[name] = value.unpack_tensor(self) if create_graph else value.unpack_array()
            elif value.__class__ is SavedVariable:
                if value.counter.value != value.version:
                    value.check(self, name)
                if create_graph:
                    env[name] = value.unpack_tensor(self)
                else:
                    env[name] = value.tensor._data if value.tensor is not None else value.data
            elif value.__class__ is list:  # Tensor[] input
                items = []
                for v in value:
                    v.check(self, name)
                    items.append(v.unpack_tensor(self) if create_graph else v.unpack_array())
                env[name] = items
            elif isinstance(value, _Tensor):  # a Tensor subclass (a numpy-face value saved during a trace)
                env[name] = value if create_graph else value._data
            else:
                env[name] = value
        return env

    def apply(self, grads: list, create_graph: bool) -> list:
        fast = type(self)._fast
        if fast is not None:  # first call: the generated function replaces this method on the class
            fast.install(type(self))
            return fast.run(self, grads, create_graph)
        env = self._env(grads, create_graph)
        fns = self._t_fns if create_graph else self._np_fns
        params = self._formula_params
        results: list = [None] * len(fns)
        out = []
        nxt = self._next
        for i, (fi, element) in enumerate(self._edges):
            if fi < 0 or nxt[i][0] is None:
                out.append(None)
                continue
            r = results[fi]
            if r is None:
                r = results[fi] = fns[fi](*[env[p] for p in params[fi]])
            out.append(r if element < 0 else r[element])
        return out

    def __getattr__(self, name: str):
        if name.startswith("_raw_saved_"):  # grad_fn._raw_saved_self.register_hooks(pack, unpack)
            key = name[len("_raw_saved_"):]
            saved = object.__getattribute__(self, "_saved")
            if saved is None or key in saved:
                return SavedTensor(self, key)
        # grad_fn._saved_self, grad_fn._saved_other, ... as in PyTorch
        if name.startswith("_saved_"):
            key = name[len("_saved_"):]
            saved = object.__getattribute__(self, "_saved")
            if saved is None:
                raise RuntimeError(ERR_BACKWARD_TWICE)
            if key in saved:
                v = saved[key]
                return v.unpack_tensor(self) if isinstance(v, (SavedVariable, PackedSaved)) else v
            if key == "result" and "result" in saved:
                return saved["result"].unpack_tensor(self)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


class SavedTensor:
    """``grad_fn._raw_saved_<name>``: one saved tensor, on which hooks can be set after the fact."""

    def __init__(self, node: FormulaNode, key: str) -> None:
        self._node, self._key = node, key

    def register_hooks(self, pack_hook, unpack_hook) -> None:
        """Pack the saved tensor now; ``unpack_hook`` gets it back whenever it is read."""
        node = self._node
        saved = node._saved
        if saved is None:
            raise RuntimeError("Calling register_hooks on a saved tensor after it has been freed. Saved "
                               "intermediate values of the graph are freed when you call .backward() or "
                               "autograd.grad(). Specify retain_graph=True if you need to backward through the "
                               "graph a second time or if you need to access saved variables after calling "
                               "backward.")
        value = saved[self._key]
        if value.__class__ is PackedSaved:
            raise RuntimeError("Calling register_hooks on a saved tensor whose hooks have already been set. "
                               "Hint: only one pair of hooks is allowed at a time.")
        if value.__class__ is SavedVariable:
            value.check(node, self._key)
            tensor = value.unpack_tensor(node)
            saved[self._key] = PackedSaved(tensor, pack_hook, unpack_hook,
                                           value.node_output if value.is_output else -1, data_only=True)
        elif isinstance(value, _Tensor):
            saved[self._key] = PackedSaved(value, pack_hook, unpack_hook, data_only=True)
        else:
            raise TypeError(f"{type(node).__name__}._raw_saved_{self._key} is not a tensor: no hooks can be set")
        if node._versions is not None:
            node._versions = [(n, v) for n, v in node._versions if n != self._key] or None


class FusedBackward:
    """One generated Python function per rule that evaluates all its formulas inline.

    The generic :meth:`FormulaNode.apply` builds a name -> value dict and calls each
    formula; this is the same computation with the saved values unpacked into locals,
    which roughly halves the per-node cost of eager backward.  The source is compiled
    twice, against the numpy and the symgrad namespaces (``create_graph``).
    """

    def __init__(self, rule, formula_order: list, edges: tuple, np_namespace, t_namespace) -> None:
        self._spec = (rule, formula_order, edges)
        self._source = None  # printed on first use: printing needs the rule's sympy formulas
        self._namespaces = (np_namespace, t_namespace)
        self._fns = [None, None]

    @property
    def source(self) -> str:
        """The generated backward function's source."""
        if self._source is None:
            self._source = self._print(*self._spec)
        return self._source

    @staticmethod
    def _print(rule, formula_order: list, edges: tuple) -> str:
        printer = FormulaPrinter()
        used = []
        for name in formula_order:
            for p in rule.formulas[name].params:
                if p not in used and p not in ("grad", "grads"):
                    used.append(p)
        lines = ["def backward(node_, grads, create_graph=False):",
                 "    if create_graph and not tensor_mode_:",
                 "        return tensor_version_(node_, grads, True)",
                 "    if node_._released and node_._has_saved:",
                 "        raise RuntimeError(ERR_BACKWARD_TWICE)",
                 "    versions_ = node_._versions",
                 "    if versions_ is not None:",
                 "        for name_, version_ in versions_:",
                 "            counter_ = node_._saved[name_]._vc",
                 "            if counter_ is not None and counter_.value != version_:",
                 "                check_versions(node_)",
                 "    saved_ = node_._saved",
                 "    grad = grads[0]"]
        for p in used:
            kind = rule.saved.get(p)
            if kind == "tensor":
                lines += [f"    {p} = saved_.get({p!r})",  # absent when no input needing it wants a grad
                          f"    if {p}.__class__ is Tensor_:",
                          f"        {p} = {p} if create_graph else {p}._data",
                          f"    elif {p}.__class__ is SavedVariable_:",
                          f"        {p}.check(node_, {p!r})",
                          f"        {p} = {p}.unpack_tensor(node_) if create_graph else {p}.unpack_array()",
                          # a Tensor subclass (a numpy-face value saved during a trace)
                          f"    elif not create_graph and isinstance({p}, Tensor_):",
                          f"        {p} = {p}._data",
                          f"    elif {p}.__class__ is PackedSaved_:",  # saved_tensors_hooks
                          f"        {p} = {p}.unpack_tensor(node_) if create_graph else {p}.unpack_array()"]
            else:
                lines.append(f"    {p} = saved_[{p!r}]")
        lines.append("    next_ = node_._next")
        outs = []
        # PyTorch runs these gradients as backward ops of their own (threshold_backward, ...): under
        # create_graph the gradient is in the graph of the value it reads, whose derivative through the
        # mask is zero, even where `grad` has no graph
        mask_read = next((p for p in used if p in ("self", "result")), None) \
            if "mask_backward" in rule.tags else None
        for k, fi in enumerate(edges):
            name = formula_order[fi]
            expr = printer.doprint(rule.formulas[name].code_expr)
            lines.append(f"    g{k} = ({expr}) if next_[{k}][0] is not None else None")
            if mask_read is not None:
                lines += [f"    if tensor_mode_ and g{k} is not None:",
                          f"        g{k} = keep_graph({mask_read}, g{k})"]
            outs.append(f"g{k}")
        lines.append(f"    return [{', '.join(outs)}]")
        return "\n".join(lines)

    def _compile(self, which: int):
        glb = dict(self._namespaces[which]())
        glb.update(ERR_BACKWARD_TWICE=ERR_BACKWARD_TWICE, check_versions=_check_versions, Tensor_=_Tensor,
                   SavedVariable_=SavedVariable, PackedSaved_=PackedSaved, tensor_mode_=bool(which),
                   tensor_version_=lambda node, grads, cg: self.run(node, grads, cg))
        exec(compile(self.source, "<fused backward>", "exec"), glb)
        fn = self._fns[which] = glb["backward"]
        return fn

    def run(self, node, grads, create_graph):
        fn = self._fns[create_graph]
        if fn is None:
            fn = self._compile(int(create_graph))
        return fn(node, grads, create_graph)

    def install(self, cls) -> None:
        """Make the numpy version the class's ``apply`` (it forwards create_graph calls itself)."""
        cls.apply = self._fns[0] or self._compile(0)


def _check_versions(node) -> None:
    """Raise if a saved input tensor was modified in place since it was saved."""
    saved = node._saved
    for name, version in node._versions:
        t = saved[name]
        c = t._vc
        now = 0 if c is None else c.value
        if now != version:
            _version_error(node, name, t._data, now, version, "input")


def _differentiable_outputs(rule) -> int:
    diff = rule.output_differentiability
    n = rule.schema.num_outputs
    if not diff:
        return n
    return max((k + 1 for k, d in enumerate(diff) if d), default=n)


def make_node_class(rule, np_fns: tuple, t_fns: tuple, formula_params: tuple, edge_formulas: tuple,
                    fast: FusedBackward | None = None):
    """Create the backward node class of one rule-table entry (``MulBackward0``...)."""
    has_saved = any(kind == "tensor" for kind in rule.saved.values())
    attrs = {
        "_rule": rule,
        "_np_fns": np_fns,
        "_t_fns": t_fns,
        "_formula_params": formula_params,
        "_edges": edge_formulas,
        "_has_saved": has_saved,
        "_fast": fast,
        # A formula that is a bare saved name (`self: other`) would hand out saved memory: the engine
        # must then not add into its result in place.
        "_alias_free": all(not f.is_bare_name or f.text.strip() == "grad" for f in rule.formulas.values()),
        # PyTorch's node takes no gradient for trailing outputs that have none (sort's indices)
        "_n_outputs": _differentiable_outputs(rule),
        "__doc__": f"Backward of ``{rule.schema.text}`` (derivatives.yaml line {rule.line}).",
        "__module__": "symgrad.autograd.generated",
    }
    return type(rule.node_name, (FormulaNode,), attrs)
