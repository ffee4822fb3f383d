"""``symgrad.autograd.graph``: the backward graph's public face, as ``torch.autograd.graph``.

- :class:`Node`: the abstract type of every ``grad_fn`` (and of leaves' AccumulateGrad nodes);
- :class:`saved_tensors_hooks`, :class:`save_on_cpu`, :func:`disable_saved_tensors_hooks`: control how
  the tensors an op keeps for backward are stored;
- :func:`register_multi_grad_hook`: one hook over the gradients of several tensors;
- :class:`GradientEdge`, :func:`get_gradient_edge`.

>>> import symgrad
>>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
>>> packed = []
>>> with symgrad.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
...     y = (x * x).sum()
>>> len(packed), isinstance(y.grad_fn, symgrad.autograd.graph.Node)
(2, True)
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, NamedTuple

from . import engine as _engine
from .grad_mode import STATE
from .node import Node as _ConcreteNode

__all__ = ["GradientEdge", "Node", "disable_saved_tensors_hooks", "get_gradient_edge", "register_multi_grad_hook",
           "save_on_cpu", "saved_tensors_hooks"]


class Node(abc.ABC):
    """The abstract type of backward-graph nodes: ``isinstance(t.grad_fn, Node)`` holds for every
    node symgrad makes (rule-table nodes, AccumulateGrad, custom Functions, compiled functions)."""

    @abc.abstractmethod
    def name(self) -> str:
        """The node's name, e.g. ``MulBackward0``."""

    @property
    @abc.abstractmethod
    def next_functions(self) -> tuple:
        """``((node or None, input_nr), ...)``, one pair per input of the op."""

    @property
    @abc.abstractmethod
    def metadata(self) -> dict:
        """A dict kept with the node for the user's own notes."""

    @abc.abstractmethod
    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs) -> tuple | None`` after the node ran."""

    @abc.abstractmethod
    def register_prehook(self, fn):
        """``fn(grad_outputs) -> tuple | None`` before the node runs."""


Node.register(_ConcreteNode)


class GradientEdge(NamedTuple):
    """Where a tensor's gradient enters the graph: ``(node, output_nr)``."""

    node: Any
    output_nr: int
    ownership_token: Any = None


def get_gradient_edge(tensor) -> GradientEdge:
    """The :class:`GradientEdge` of ``tensor``: its ``grad_fn`` and output number, or its AccumulateGrad.

    >>> x = symgrad.tensor([1.0], requires_grad=True)
    >>> get_gradient_edge(x * 2).node.name()
    'MulBackward0'
    """
    from ..tensor import gradient_edge

    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require "
                           "gradients")
    node, nr = gradient_edge(tensor)
    return GradientEdge(node, nr)


class saved_tensors_hooks:
    """Inside this context, every tensor an op saves for backward is passed to ``pack_hook`` and only
    what it returns is kept; backward calls ``unpack_hook`` on that to get the tensor back.

    Applies to the rule-table ops and to ``ctx.save_for_backward`` of custom Functions.  The unpack hook
    must return a tensor with the original's values (its shape and dtype are not checked).
    """

    def __init__(self, pack_hook, unpack_hook) -> None:
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if STATE.saved_hooks_disabled is not None:
            raise RuntimeError(STATE.saved_hooks_disabled)
        STATE.saved_hooks_stack = STATE.saved_hooks_stack + ((self.pack_hook, self.unpack_hook),)
        STATE.saved_hooks = STATE.saved_hooks_stack[-1]
        return self

    def __exit__(self, *exc) -> None:
        STATE.saved_hooks_stack = STATE.saved_hooks_stack[:-1]
        STATE.saved_hooks = STATE.saved_hooks_stack[-1] if STATE.saved_hooks_stack else None


class save_on_cpu(saved_tensors_hooks):
    """Keep saved tensors in CPU memory.  symgrad tensors always live there, so the hooks keep the
    tensor as it is (``pin_memory`` and ``device_type`` are accepted for compatibility)."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        super().__init__(lambda tensor: tensor, lambda tensor: tensor)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str):
    """Make entering ``saved_tensors_hooks`` raise ``RuntimeError(error_message)`` inside this context
    (and raise at once if hooks are active already)."""
    if STATE.saved_hooks is not None:
        raise RuntimeError(error_message)
    previous = STATE.saved_hooks_disabled
    STATE.saved_hooks_disabled = error_message
    try:
        yield
    finally:
        STATE.saved_hooks_disabled = previous


class _MultiHandle:
    """Removes every tensor hook a multi-grad hook registered."""

    def __init__(self, handles: tuple) -> None:
        self.handles = handles

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def register_multi_grad_hook(tensors, fn, *, mode: str = "all"):
    """Call ``fn`` once per backward over the gradients of several tensors.

    ``mode="all"``: ``fn(grads)`` after the gradients of all the tensors this backward computes are
    known, with ``None`` for tensors it does not reach.  ``mode="any"``: ``fn(grad)`` with the first of
    those gradients.  ``fn`` cannot change the gradients.

    >>> a = symgrad.tensor([1.0], requires_grad=True)
    >>> b = symgrad.tensor([2.0], requires_grad=True)
    >>> h = register_multi_grad_hook((a, b), lambda grads: print([g.tolist() for g in grads]))
    >>> (a * 3 + b * 5).sum().backward()
    [[3.0], [5.0]]
    """
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = tuple(tensors)
    if mode == "any":
        fired: set = set()

        def on_any(grad):
            task = _engine.current_graph_task()
            if task.id in fired:
                return
            fired.add(task.id)
            fn(grad)

        return _MultiHandle(tuple(t.register_hook(on_any) for t in tensors if t.requires_grad))

    from ..tensor import gradient_edge

    nodes = [gradient_edge(t)[0] for t in tensors]
    pending: dict = {}  # task id -> [gradients so far, calls still expected]

    def make_hook(index: int):
        def on_grad(grad):
            task = _engine.current_graph_task()
            state = pending.get(task.id)
            if state is None:  # the first of these tensors this backward reaches
                expected = sum(1 for node in nodes if node is not None and task.will_execute(node))
                state = pending[task.id] = [[None] * len(tensors), expected]
            state[0][index] = grad
            state[1] -= 1
            if state[1] == 0:
                del pending[task.id]
                fn(state[0])

        return on_grad

    return _MultiHandle(tuple(t.register_hook(make_hook(i)) for i, t in enumerate(tensors)))
