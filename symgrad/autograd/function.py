"""Custom differentiable functions: ``symgrad.autograd.Function``.

As in PyTorch, ``ctx`` *is* the backward node, and a subclass ``Foo`` gets a
node class named ``FooBackward`` (no digit).

>>> import symgrad
>>> class Square(symgrad.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x * x
...     @staticmethod
...     def backward(ctx, g):
...         (x,) = ctx.saved_tensors
...         return 2 * x * g
>>> y = Square.apply(symgrad.tensor([3.0], requires_grad=True))
>>> type(y.grad_fn).__name__
'SquareBackward'
"""

from __future__ import annotations

import traceback

import numpy as np

from . import anomaly
from .grad_mode import STATE, no_grad, set_grad_enabled
from .node import ERR_BACKWARD_TWICE, Node, SavedVariable


class BackwardCFunction(Node):
    """The node (and ``ctx``) of one call of a custom Function."""

    _forward_cls = None
    _has_saved = False

    def __init__(self) -> None:
        super().__init__()
        self._saved_vars: tuple | None = ()
        self._saved_any = False
        self.needs_input_grad: tuple = ()
        self._non_diff: set = set()
        self._arg_is_tensor: tuple = ()
        self._out_meta: tuple = ()
        self._n_outputs = 1
        self.materialize_grads = True

    # --- ctx API ----------------------------------------------------------------------------
    def save_for_backward(self, *tensors) -> None:
        """Keep tensors for backward; reading them after an in-place change raises."""
        self._saved_vars = tuple(None if t is None else SavedVariable(t) for t in tensors)
        self._saved_any = bool(tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._saved_vars is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        out = []
        for i, sv in enumerate(self._saved_vars):
            if sv is None:
                out.append(None)
                continue
            sv.check(self, f"saved_tensors[{i}]")
            out.append(sv.tensor)
        return tuple(out)

    def mark_non_differentiable(self, *outputs) -> None:
        """Outputs that never require grad (e.g. masks, indices)."""
        self._non_diff.update(id(o) for o in outputs)

    def mark_dirty(self, *tensors) -> None:  # accepted for API compatibility
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def release_variables(self) -> None:
        self._released = True
        if self._saved_any:
            self._saved_vars = None

    def _check_not_released(self) -> None:
        if self._released and self._saved_any:
            raise RuntimeError(ERR_BACKWARD_TWICE)

    # --- engine entry -----------------------------------------------------------------------
    def apply(self, grads: list, create_graph: bool) -> list:
        from ..tensor import Tensor

        self._check_not_released()
        args = []
        for g, (shape, dtype) in zip(grads, self._out_meta):
            if g is None:
                if not self.materialize_grads:
                    args.append(None)
                    continue
                g = np.zeros(shape, dtype=dtype)
                args.append(Tensor._wrap(g))
            else:
                args.append(g if create_graph else Tensor._wrap(g))
        with set_grad_enabled(create_graph):
            result = self._forward_cls.backward(self, *args)
        if not isinstance(result, tuple):
            result = (result,)
        n_args = len(self._arg_is_tensor)
        name = type(self).__name__
        if len(result) < n_args or any(r is not None for r in result[n_args:]):
            raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                               f"(expected {n_args}, got {len(result)})")
        out = []
        for i, is_tensor in enumerate(self._arg_is_tensor):
            r = result[i]
            if not is_tensor:
                if r is not None:
                    raise RuntimeError(f"function {name} returned a gradient different than None at position "
                                       f"{i + 1}, but the corresponding forward input was not a Variable")
                continue
            if r is None:
                out.append(None)
                continue
            if not isinstance(r, Tensor):
                r = Tensor(r)
            out.append(r if create_graph else r._data)
        return out


class FunctionMeta(type):
    """Gives every Function subclass its own ``<Name>Backward`` node class."""

    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._backward_cls = type(name + "Backward", (BackwardCFunction,),
                                 {"_forward_cls": cls, "__module__": cls.__module__})


class Function(metaclass=FunctionMeta):
    """Base class of user-defined differentiable operations.

    Subclass it with static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``
    (one gradient per forward argument, ``None`` for non-tensors) and call ``.apply``.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):  # pragma: no cover - overridden
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grads):  # pragma: no cover - overridden
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        from ..tensor import Tensor, gradient_edge

        ctx = cls._backward_cls()
        is_tensor = tuple(isinstance(a, Tensor) for a in args)
        ctx._arg_is_tensor = is_tensor
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        record = STATE.enabled and any(ctx.needs_input_grad)
        with no_grad():
            raw = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(raw, tuple)
        outputs = (raw,) if single else raw
        if not record:
            return raw
        edges, metas = [], []
        for a, t in zip(args, is_tensor):
            if not t:
                continue
            edges.append(gradient_edge(a))
            metas.append((a._data.shape, a._data.dtype))
        ctx._next = tuple(edges)
        ctx._meta = tuple(metas)
        ctx._n_outputs = len(outputs)
        ctx._out_meta = tuple((o._data.shape, o._data.dtype) if isinstance(o, Tensor) else ((), np.float32)
                              for o in outputs)
        ctx._has_saved = ctx._saved_any
        if anomaly.is_enabled():
            ctx._trace = traceback.format_stack()[:-1]
        wrapped = []
        input_ids = {id(a) for a in args}
        for k, o in enumerate(outputs):
            if not isinstance(o, Tensor):
                wrapped.append(o)
                continue
            if id(o) in ctx._non_diff:
                wrapped.append(o)
                continue
            if id(o) in input_ids or o._grad_fn is not None or o._requires_grad:
                o = Tensor._wrap(o._data)  # an input returned as-is becomes a new output (a view in PyTorch)
            if o._data.dtype.kind == "f":
                o._grad_fn = ctx
                o._output_nr = k
            wrapped.append(o)
        return wrapped[0] if single else tuple(wrapped)


class once_differentiable:  # pragma: no cover - decorator accepted for API compatibility
    def __new__(cls, fn):
        return fn
