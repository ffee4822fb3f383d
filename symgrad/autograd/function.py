"""Custom differentiable functions: ``symgrad.autograd.Function``.

As in PyTorch, ``ctx`` *is* the backward node, and a subclass ``Foo`` gets a
node class named ``FooBackward`` (no digit).  Both of PyTorch's styles work:
``forward(ctx, *args)``, or ``forward(*args)`` plus
``setup_context(ctx, inputs, output)``.

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

import functools
import inspect
import traceback

import numpy as np

from . import anomaly
from .grad_mode import STATE, no_grad, set_grad_enabled
from .node import ERR_BACKWARD_TWICE, Node, PackedSaved, SavedVariable

ERR_ONCE_DIFFERENTIABLE = "trying to differentiate twice a function that was marked with @once_differentiable"


class BackwardCFunction(Node):
    """The node (and ``ctx``) of one call of a custom Function."""

    _forward_cls = None
    _has_saved = False
    _user_backward = True   # the engine checks its gradients' shapes as PyTorch does (no expanding)

    def __init__(self) -> None:
        super().__init__()
        self._to_save: tuple = ()          # what save_for_backward got, until apply() has the outputs
        self._saved_vars: tuple | None = None
        self._saved_any = False
        self.needs_input_grad: tuple = ()
        self._non_diff: set = set()
        self._dirty: tuple = ()
        self._arg_is_tensor: tuple = ()
        self._out_meta: tuple = ()
        self._n_outputs = 1
        self.materialize_grads = True

    # --- ctx API ----------------------------------------------------------------------------
    def save_for_backward(self, *tensors) -> None:
        """Keep tensors (inputs, outputs or None) for backward; reading them after an in-place change
        raises.  They are stored once the Function's outputs exist, so outputs are saved without a
        reference cycle and through the active ``saved_tensors_hooks``."""
        self._to_save = tensors
        self._saved_any = bool(tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._saved_vars is None:
            if self._released:
                raise RuntimeError(ERR_BACKWARD_TWICE)
            return tuple(self._to_save)  # read before apply() finished (inside forward/setup_context)
        out = []
        for i, sv in enumerate(self._saved_vars):
            if sv is None:
                out.append(None)
            elif sv.__class__ is PackedSaved:
                out.append(sv.unpack_tensor(self))
            else:
                sv.check(self, f"saved_tensors[{i}]")
                out.append(sv.tensor if sv.tensor is not None else sv.unpack_tensor(self))
        return tuple(out)

    def mark_non_differentiable(self, *outputs) -> None:
        """Outputs that never require grad (e.g. masks, indices); their gradient in backward is zeros
        (or None without materialized grads)."""
        self._non_diff.update(id(o) for o in outputs)

    def mark_dirty(self, *tensors) -> None:
        """Inputs that ``forward`` modified in place; each must also be returned as an output, which
        is then that same tensor object, now computed by this Function."""
        self._dirty = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """With False, backward gets None (not zeros) for outputs that received no gradient."""
        self.materialize_grads = bool(value)

    def release_variables(self) -> None:
        self._released = True
        if self._saved_any:
            self._saved_vars = None
            self._to_save = ()

    def _check_not_released(self) -> None:
        if self._released and self._saved_any:
            raise RuntimeError(ERR_BACKWARD_TWICE)

    # --- engine entry -----------------------------------------------------------------------
    def apply(self, grads: list, create_graph: bool) -> list:
        from ..tensor import Tensor

        self._check_not_released()
        cls = self._forward_cls
        if cls.backward is not Function.backward and cls.vjp is not Function.vjp:
            raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function is not allowed. "
                               "You should only implement one of them.")
        user_fn = cls.vjp if cls.vjp is not Function.vjp else cls.backward
        args = []
        for g, meta in zip(grads, self._out_meta):
            if g is None:
                # a non-tensor output (an int, a string, None) gets None even with materialized grads
                if meta is None or not self.materialize_grads:
                    args.append(None)
                    continue
                g = np.zeros(meta[0], dtype=meta[1])
                args.append(Tensor._wrap(g))
            else:
                args.append(g if create_graph else Tensor._wrap(g))
        with set_grad_enabled(create_graph):
            result = user_fn(self, *args)
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


def _refuse_in_trace(cls, args) -> None:
    """A Function's backward is Python code that symgrad.compile cannot put in a graph: tracing
    through its forward would silently differentiate the forward's ops instead."""
    from ..ops import registry
    from ..tensor import Tensor

    rec = registry._recorder
    if rec is None:
        return
    if any(isinstance(a, Tensor) and (a.requires_grad or rec.is_traced(a)) for a in args):
        rec.refuse(f"custom autograd.Function {cls.__name__}.apply cannot be compiled: symgrad.compile "
                   "differentiates through its rule table, and a Function's backward is Python code. Call the "
                   "Function outside the compiled function, or define the op with symgrad.register_op "
                   "(a formula derivative, see docs/custom_ops.md)")


class Function(metaclass=FunctionMeta):
    """Base class of user-defined differentiable operations.

    Subclass it with static ``forward(ctx, *args)`` (or ``forward(*args)`` and
    ``setup_context(ctx, inputs, output)``) and ``backward(ctx, *grads)`` (one gradient per
    forward argument, ``None`` for non-tensors; ``vjp`` is accepted as the name instead of
    ``backward``), then call ``.apply``.
    """

    generate_vmap_rule = False

    @staticmethod
    def forward(*args, **kwargs):  # pragma: no cover - overridden
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs: tuple, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @staticmethod
    def vjp(ctx, *grads):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("symgrad: forward-mode AD (jvp) of a custom autograd.Function is not "
                                  "supported; only backward mode (backward/vjp) is.")

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("symgrad: custom autograd.Function does not support vmap (neither a vmap "
                                  "staticmethod nor generate_vmap_rule=True); apply it outside vmap, or write "
                                  "it with symgrad ops, which vmap and compile handle.")

    @classmethod
    def apply(cls, *args, **kwargs):
        from ..tensor import Tensor, gradient_edge

        new_style = cls.setup_context is not Function.setup_context
        if new_style:  # as PyTorch does, setup_context sees every argument, defaults included
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        _refuse_in_trace(cls, args)
        ctx = cls._backward_cls()
        is_tensor = tuple(isinstance(a, Tensor) for a in args)
        ctx._arg_is_tensor = is_tensor
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        record = STATE.enabled and any(ctx.needs_input_grad)
        with no_grad():
            if new_style:
                raw = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, raw)
            else:
                raw = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(raw, tuple)
        outputs = (raw,) if single else raw
        dirty_ids = _check_dirty(ctx, outputs, record)
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
        ctx._out_meta = tuple((o._data.shape, o._data.dtype) if isinstance(o, Tensor) else None for o in outputs)
        ctx._has_saved = ctx._saved_any
        if anomaly.is_enabled():
            ctx._trace = traceback.format_stack()[:-1]
        wrapped = []
        input_ids = {id(a) for a in args}
        for k, o in enumerate(outputs):
            if not isinstance(o, Tensor) or id(o) in ctx._non_diff:
                wrapped.append(o)
                continue
            if id(o) not in dirty_ids and (id(o) in input_ids or o._grad_fn is not None or o._requires_grad):
                o = Tensor._wrap(o._data)  # an input returned as-is becomes a new output (a view in PyTorch)
            if o._data.dtype.kind == "f":
                o._grad_fn = ctx
                o._output_nr = k
            wrapped.append(o)
        _store_saved(ctx, wrapped)
        return wrapped[0] if single else tuple(wrapped)


def _check_dirty(ctx, outputs: tuple, record: bool) -> set:
    """PyTorch's checks for ``mark_dirty``; bumps the version of each modified input."""
    if not ctx._dirty:
        return set()
    output_ids = {id(o) for o in outputs}
    for t in ctx._dirty:
        if id(t) not in output_ids:
            raise RuntimeError("Some elements marked as dirty during the forward method were not returned as "
                               "output. The inputs that are modified inplace must all be outputs of the Function.")
        if record and t._grad_fn is None and t._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")
        t._version_counter.value += 1
    return {id(t) for t in ctx._dirty}


def _store_saved(ctx, outputs: list) -> None:
    """Turn what ``save_for_backward`` got into saved variables, now that the outputs exist."""
    if not ctx._saved_any:
        ctx._saved_vars = ()
        return
    output_nr = {id(o): k for k, o in enumerate(outputs) if getattr(o, "_grad_fn", None) is ctx}
    hooks = STATE.saved_hooks
    saved = []
    for t in ctx._to_save:
        if t is None:
            saved.append(None)
            continue
        nr = output_nr.get(id(t), -1)
        if hooks is not None:
            saved.append(PackedSaved(t, hooks[0], hooks[1], nr))
        else:
            saved.append(SavedVariable(t, is_output=nr >= 0))
    ctx._saved_vars = tuple(saved)
    ctx._to_save = ()


class DelayedError(Node):
    """The node of gradients computed by a ``@once_differentiable`` backward under ``create_graph``:
    differentiating them again raises."""

    def __init__(self, message: str, n_outputs: int) -> None:
        super().__init__()
        self.message = message
        self._n_outputs = n_outputs
        self._next = ((None, 0),) * n_outputs
        self._meta = (None,) * n_outputs

    def name(self) -> str:
        return "torch::autograd::Error"

    def apply(self, grads: list, create_graph: bool) -> list:
        raise RuntimeError(self.message)


DelayedError.__name__ = DelayedError.__qualname__ = "Error"  # PyTorch's node type name


def once_differentiable(fn):
    """Decorate a Function's ``backward`` that cannot itself be differentiated: it runs without
    recording, and differentiating its result again (``create_graph=True``) raises."""
    from ..tensor import Tensor

    @functools.wraps(fn)
    def wrapper(ctx, *args, **kwargs):
        with no_grad():
            outputs = fn(ctx, *args, **kwargs)
        if not STATE.enabled or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return outputs
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        err = DelayedError(ERR_ONCE_DIFFERENTIABLE, len(outs))
        marked = []
        for k, o in enumerate(outs):
            if isinstance(o, Tensor):
                o = Tensor._wrap(o._data)
                o._grad_fn, o._output_nr = err, k
            marked.append(o)
        return tuple(marked) if isinstance(outputs, tuple) else marked[0]

    return wrapper
