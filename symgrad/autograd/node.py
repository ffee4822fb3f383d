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

    __slots__ = ("_next", "_meta", "_seq", "_pre_hooks", "_retain", "_post_hooks", "_trace",
                 "_released", "__weakref__")

    _has_saved = False

    def __init__(self) -> None:
        self._next: tuple = ()
        self._meta: tuple = ()
        self._seq = next(_sequence)
        self._pre_hooks = None
        self._retain = None
        self._post_hooks = None
        self._trace = None
        self._released = False

    @property
    def next_functions(self) -> tuple:
        """``((node or None, input_nr), ...)``: where each input's gradient goes."""
        return self._next

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {hex(id(self))}>"

    @property
    def metadata(self) -> dict:
        return {}

    def register_hook(self, fn):
        """Post-hook ``fn(grad_inputs, grad_outputs)``, called after the node runs."""
        if self._post_hooks is None:
            self._post_hooks = []
        self._post_hooks.append(fn)
        return RemovableHandle(self._post_hooks, fn)

    def register_prehook(self, fn):
        """Pre-hook ``fn(grad_outputs)``; may return replacement gradients."""
        return self._add_tensor_hook(-1, fn)

    def _add_tensor_hook(self, output_nr: int, fn):
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

    __slots__ = ("variable",)

    def __init__(self, variable) -> None:
        super().__init__()
        self.variable = variable
        self._meta = ((variable.shape, variable.dtype),)

    def apply(self, grads: list, create_graph: bool) -> list:
        from ..tensor import Tensor

        var = self.variable
        g = grads[0]
        if g is None:
            return []
        current = var._grad
        if isinstance(g, Tensor):  # create_graph: keep the graph of the gradient
            if current is None:
                var._grad = g if g._grad_fn is not None else Tensor._wrap(np.array(g._data, copy=True))
            else:
                var._grad = current + g
            return []
        if current is None:
            # The engine may hand the same array to several consumers: always own a fresh copy.
            var._grad = Tensor._wrap(np.array(g, dtype=var._data.dtype, copy=True))
        elif current._grad_fn is not None:
            var._grad = Tensor._wrap(current._data + g)
        else:
            np.add(current._data, g, out=current._data, casting="unsafe")
        return []


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
            kind = "output" if self.is_output else "input"
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{data.dtype.name} {list(data.shape)}] ({kind} {name!r} of "
                f"{type(node).__name__}), is at version {self.counter.value}; expected version "
                f"{self.version} instead. Hint: enable anomaly detection to find the operation that "
                "failed to compute its gradient, with torch-style symgrad.autograd.set_detect_anomaly(True).")

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


class FormulaNode(Node):
    """A node generated from a rule-table entry.

    Class attributes (set by :func:`make_node_class`): ``_rule``, ``_default_edges``
    (per edge: index into the compiled formulas, and the element for list inputs;
    copied to the ``_edges`` slot, which list inputs such as ``cat`` override per call),
    ``_np_fns``/``_t_fns`` (formulas compiled against the numpy and symgrad namespaces).
    """

    __slots__ = ("_saved", "_edges")

    _rule: Any = None
    _default_edges: tuple = ()
    _formula_params: tuple = ()
    _np_fns: tuple = ()
    _t_fns: tuple = ()
    _n_outputs = 1

    def release_variables(self) -> None:
        self._released = True
        if self._has_saved:
            self._saved = None

    def _env(self, create_graph: bool) -> dict:
        if self._released and self._has_saved:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        env = {}
        for name, value in self._saved.items():
            if type(value) is SavedVariable:
                value.check(self, name)
                env[name] = value.unpack_tensor(self) if create_graph else value.unpack_array()
            elif type(value) is list:  # Tensor[] input
                items = []
                for v in value:
                    v.check(self, name)
                    items.append(v.unpack_tensor(self) if create_graph else v.unpack_array())
                env[name] = items
            else:
                env[name] = value
        return env

    def apply(self, grads: list, create_graph: bool) -> list:
        env = self._env(create_graph)
        env["grad"] = grads[0]
        env["grads"] = grads
        fns = self._t_fns if create_graph else self._np_fns
        results: list = [None] * len(fns)
        out = []
        nxt = self._next
        for i, (fi, element) in enumerate(self._edges):
            if fi < 0 or nxt[i][0] is None:
                out.append(None)
                continue
            r = results[fi]
            if r is None:
                r = results[fi] = fns[fi](*[env[p] for p in self._formula_params[fi]])
            out.append(r if element < 0 else r[element])
        return out

    def _saved_view(self) -> dict:
        return self._saved or {}

    def __getattr__(self, name: str):
        # grad_fn._saved_self, grad_fn._saved_other, ... as in PyTorch
        if name.startswith("_saved_"):
            key = name[len("_saved_"):]
            saved = object.__getattribute__(self, "_saved")
            if saved is None:
                raise RuntimeError(ERR_BACKWARD_TWICE)
            if key in saved:
                v = saved[key]
                return v.unpack_tensor(self) if isinstance(v, SavedVariable) else v
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


def make_node_class(rule, np_fns: tuple, t_fns: tuple, formula_params: tuple, edge_formulas: tuple):
    """Create the backward node class of one rule-table entry (``MulBackward0``...)."""
    has_saved = any(kind == "tensor" for kind in rule.saved.values())
    attrs = {
        "__slots__": (),
        "_rule": rule,
        "_np_fns": np_fns,
        "_t_fns": t_fns,
        "_formula_params": formula_params,
        "_default_edges": edge_formulas,
        "_has_saved": has_saved,
        "_n_outputs": rule.schema.num_outputs,
        "__doc__": f"Backward of ``{rule.schema.text}`` (derivatives.yaml line {rule.line}).",
        "__module__": "symgrad.autograd.generated",
    }
    return type(rule.node_name, (FormulaNode,), attrs)
