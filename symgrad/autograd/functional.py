"""``torch.autograd.functional``: vjp, jvp, jacobian, hessian, hvp and vhp of a Python function, eagerly.

The same signatures, argument handling and results as PyTorch's: ``inputs`` (and ``v``) are a Tensor
or a tuple of Tensors, and results mirror them (a Tensor for a Tensor, a tuple for a tuple; a
Jacobian of tuple outputs and tuple inputs is a tuple of tuples).  Results are detached unless
``create_graph=True``, which keeps them differentiable for a further backward.  ``strict=True``
raises a RuntimeError when an output does not depend on an input (instead of returning zeros).

Everything runs on the eager engine (:mod:`symgrad.autograd.engine`), so functions with any Python
control flow work.  There is no forward-mode AD: ``jvp`` (and ``strategy="forward-mode"``) use the
double-backward trick, as PyTorch's ``jvp`` does: the vector-Jacobian product ``u -> J^T u`` is
linear in ``u``, so differentiating it with respect to ``u`` against ``v`` gives ``J v``.
``vectorize`` is accepted for compatibility; it changes nothing here (PyTorch uses it to batch
the rows with vmap, which symgrad does not have: the rows are computed one backward pass each).

>>> import symgrad as torch
>>> x = torch.tensor([1.0, 2.0])
>>> torch.autograd.functional.jacobian(lambda x: x ** 2, x)
tensor([[2., 0.],
        [0., 4.]])
>>> torch.autograd.functional.hvp(lambda x: (x ** 3).sum(), x, torch.tensor([1.0, 0.0]))[1]
tensor([6., 0.])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from .engine import grad as _engine_grad
from .grad_mode import enable_grad, is_grad_enabled, set_grad_enabled

__all__ = ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]

_STRATEGIES = ("forward-mode", "reverse-mode")


class _StrategyError(ValueError, AssertionError):
    """An unknown ``strategy``: a ValueError, and an AssertionError as PyTorch raises."""


def _tensor():
    from ..tensor import Tensor  # the eager core imports autograd: resolved at call time

    return Tensor


def _as_tuple(value, arg_name: str, fn_name: str) -> tuple[bool, tuple]:
    """``(was_a_tuple, value as a tuple)``; anything but Tensors is PyTorch's TypeError."""
    Tensor = _tensor()
    is_tuple = isinstance(value, tuple)
    items = value if is_tuple else (value,)
    for i, item in enumerate(items):
        if not isinstance(item, Tensor):
            if is_tuple:
                raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors "
                                f"but the value at index {i} has type {type(item)}.")
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors "
                            f"but the given {arg_name} has type {type(item)}.")
    return is_tuple, items


def _unpack(result, was_tuple):
    """Undo :func:`_as_tuple` on a result: ``was_tuple`` is one flag, or ``(outputs, inputs)`` for a
    result indexed by outputs then inputs (a Jacobian)."""
    if isinstance(was_tuple, tuple):
        outputs_tuple, inputs_tuple = was_tuple
        if not inputs_tuple:
            result = tuple(row[0] for row in result)
        return result if outputs_tuple else result[0]
    return result if was_tuple else result[0]


def _prepare(inputs: tuple, create_graph: bool, need_graph: bool) -> tuple:
    """The tensors the function is called with: with ``create_graph`` an input that requires grad is
    passed as a differentiable view, so results stay connected to the caller's graph; otherwise a
    detached copy of the reference (requiring grad when ``need_graph``)."""
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t.view(t.shape))
        else:
            out.append(t.detach().requires_grad_(need_graph))
    return tuple(out)


def _finish(tensors, create_graph: bool):
    """Results as PyTorch returns them: detached unless ``create_graph`` (nested tuples too)."""
    if create_graph:
        return tensors
    if isinstance(tensors, (tuple, list)):
        return type(tensors)(_finish(t, create_graph) for t in tensors)
    return tensors.detach()


def _check_v(v: tuple, other: tuple, other_is_tuple: bool) -> None:
    if len(v) != len(other):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}.")
    for i, (a, b) in enumerate(zip(v, other)):
        if a.shape != b.shape:
            where = f"Entry {i} in " if other_is_tuple else ""
            raise RuntimeError(f"{where}v has invalid size: should be {b.shape} but got {a.shape}.")


def _check_requires_grad(tensors: tuple, kind: str, strict: bool) -> None:
    if not strict:
        return
    for i, t in enumerate(tensors):
        if t is None:
            raise RuntimeError(f"The output of the user-provided function is independent of input {i}. This is not "
                               "allowed in strict mode.")
        if t.requires_grad:
            continue
        if kind == "hessian":
            raise RuntimeError(f"The hessian of the user-provided function with respect to input {i} is independent "
                               "of the input. This is not allowed in strict mode. You should ensure that your "
                               "function is thrice differentiable and that the hessian depends on the inputs.")
        if kind == "jacobian":
            raise RuntimeError("While computing the hessian, found that the jacobian of the user-provided function "
                               f"with respect to input {i} is independent of the input. This is not allowed in strict "
                               "mode. You should ensure that your function is twice differentiable and that the "
                               "jacobian depends on the inputs (this would be violated by a linear function for "
                               "example).")
        if kind == "grad_inputs":
            raise RuntimeError(f"The gradient with respect to input {i} is independent of the inputs of the "
                               "user-provided function. This is not allowed in strict mode.")
        raise RuntimeError(f"Output {i} of the user-provided function does not require gradients. The outputs must "
                           "be computed in a differentiable manner from the input when running in strict mode.")


def _grad(outputs: tuple, inputs: tuple, grad_outputs=None, create_graph: bool = False,
          retain_graph: bool | None = None) -> tuple:
    """``autograd.grad`` of the outputs that require grad (None per input when none does)."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    kept = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not kept:
        return (None,) * len(inputs)
    return _engine_grad([o for o, _ in kept], list(inputs), [g for _, g in kept], retain_graph=retain_graph,
                        create_graph=create_graph, allow_unused=True)


_INDEPENDENT = {
    "back": "The output of the user-provided function is independent of input {i}. This is not allowed in "
            "strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the grad_outputs when "
                  "using the double backward trick to compute forward mode gradients. This is not allowed in "
                  "strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. This is not allowed "
                   "in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} in the grad_jacobian."
                         " This is not allowed in strict mode as it prevents from using the double backward trick "
                         "to replace forward mode AD.",
}


def _zeros_for_none(grads: tuple, refs: tuple, strict: bool, stage: str) -> tuple:
    from ..creation import zeros_like

    out = []
    for i, (g, ref) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise RuntimeError(_INDEPENDENT[stage].format(i=i))
            g = zeros_like(ref)
        out.append(g)
    return tuple(out)


def _default_v(tensors: tuple, what: str):
    """``v=None`` is allowed for one single-element Tensor: its ``v`` is 1."""
    from ..creation import ones_like

    if len(tensors) != 1 or tensors[0].numel() != 1:
        raise RuntimeError(f"The vector v can only be None if the {what} a single Tensor with a single element.")
    return (ones_like(tensors[0]),)


def vjp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T J)``: the vector-Jacobian product (PyTorch's ``autograd.functional.vjp``).

    ``v`` matches the outputs (it may be None for one single-element output).

    >>> import symgrad as torch
    >>> out, g = torch.autograd.functional.vjp(lambda x: x * x, torch.tensor([1.0, 3.0]), torch.tensor([1.0, 1.0]))
    >>> g
    tensor([2., 6.])
    """
    with enable_grad():
        inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph, need_graph=True)
        outputs = func(*inputs)
        outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "vjp")
        _check_requires_grad(outputs, "outputs", strict)
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            v = _prepare(v, create_graph, need_graph=False)
            _check_v(v, outputs, outputs_tuple)
        else:
            v = _default_v(outputs, "user-provided function returns")
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grads = _zeros_for_none(_grad(outputs, inputs, v, create_graph), inputs, strict, "back")
    return (_unpack(_finish(outputs, create_graph), outputs_tuple),
            _unpack(_finish(grads, create_graph), inputs_tuple))


def jvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), J v)``: the Jacobian-vector product (PyTorch's ``autograd.functional.jvp``),
    by the double-backward trick.  ``v`` matches the inputs (None for one single-element input).

    >>> import symgrad as torch
    >>> out, t = torch.autograd.functional.jvp(lambda x: x.sin().sum(), torch.tensor([0.0, 0.0]),
    ...                                        torch.tensor([1.0, 2.0]))
    >>> t
    tensor(3.)
    """
    from ..creation import zeros_like

    with enable_grad():
        inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph, need_graph=True)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            v = _prepare(v, create_graph, need_graph=False)
            _check_v(v, inputs, inputs_tuple)
        else:
            v = _default_v(inputs, "input to the user-provided function is")
        outputs = func(*inputs)
        outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jvp")
        _check_requires_grad(outputs, "outputs", strict)
        # J^T u is linear in u, so u's value never shows in the second derivative: zeros do
        cotangents = tuple(zeros_like(o, requires_grad=True) for o in outputs)
        grad_inputs = _grad(outputs, inputs, cotangents, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict)
    with enable_grad() if create_graph else contextlib.nullcontext():
        tangents = _zeros_for_none(_grad(grad_inputs, cotangents, v, create_graph), outputs, strict, "back_trick")
    return (_unpack(_finish(outputs, create_graph), outputs_tuple),
            _unpack(_finish(tangents, create_graph), outputs_tuple))


def _stack_rows(rows: list, out_shape: tuple, in_shape: tuple):
    from ..creation import zeros
    from ..ops.functional import stack

    if not rows:   # an output or input with no elements
        return zeros(tuple(out_shape) + tuple(in_shape))
    return stack(rows, dim=0).view(tuple(out_shape) + tuple(in_shape))


def jacobian(func: Callable, inputs, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
             strategy: str = "reverse-mode"):
    """The Jacobian of ``func`` at ``inputs`` (PyTorch's ``autograd.functional.jacobian``): for one
    output and one input a Tensor of shape ``output.shape + input.shape``; ``result[i][j]`` for tuples.

    ``strategy="reverse-mode"`` takes one backward pass per output element; ``"forward-mode"`` one
    Jacobian-vector product per input element (double-backward trick), fewer when the inputs are
    fewer than the outputs.  PyTorch's forward mode needs ``vectorize=True``; here it works either way,
    and returns lists where reverse mode returns tuples, as PyTorch's does.

    >>> import symgrad as torch
    >>> torch.autograd.functional.jacobian(lambda x, y: x * y, (torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])))
    (tensor([[3., 0.],
            [0., 4.]]), tensor([[1., 0.],
            [0., 2.]]))
    """
    if strategy not in _STRATEGIES:
        raise _StrategyError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your function '
                         'has more outputs than inputs, "forward-mode" tends to be more performant. Otherwise, '
                         'prefer to use "reverse-mode".')
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError('torch.autograd.functional.jacobian: `create_graph=True` and `strategy="forward-'
                                      'mode"` are not supported together (yet). Please either set `create_graph=False` '
                                      'or `strategy="reverse-mode"`.')
        if strict:
            raise RuntimeError('torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` are '
                               'not supported together (yet). Please either set `strict=False` or '
                               '`strategy="reverse-mode"`.')
        return _jacobian_forward(func, inputs)
    if strict and vectorize:
        raise RuntimeError("torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
                           "supported together. Please either set `strict=False` or `vectorize=False`.")
    from ..creation import zeros_like

    with enable_grad():
        inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph, need_graph=True)
        outputs = func(*inputs)
        outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jacobian")
        _check_requires_grad(outputs, "outputs", strict)
        result = []
        for i, out in enumerate(outputs):
            rows: list[list] = [[] for _ in inputs]
            flat = out.reshape(-1)
            for k in range(out.numel()):
                row = _grad((flat[k],), inputs, retain_graph=True, create_graph=create_graph)
                for j, (g, inp) in enumerate(zip(row, inputs)):
                    if g is None:
                        if strict:
                            raise RuntimeError(f"Output {i} of the user-provided function is independent of input "
                                               f"{j}. This is not allowed in strict mode.")
                        g = zeros_like(inp)
                    elif strict and create_graph and not g.requires_grad:
                        raise RuntimeError(f"The jacobian of the user-provided function is independent of input {i}. "
                                           "This is not allowed in strict mode when create_graph=True.")
                    rows[j].append(g)
            result.append(tuple(_stack_rows(r, out.shape, inp.shape) for r, inp in zip(rows, inputs)))
    return _unpack(_finish(tuple(result), create_graph), (outputs_tuple, inputs_tuple))


def _jacobian_forward(func: Callable, inputs):
    """The Jacobian by columns: one Jacobian-vector product per input element (double-backward trick)."""
    from ..creation import zeros_like
    from ..ops.functional import stack

    with enable_grad():
        inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, False, need_graph=True)
        outputs = func(*inputs)
        outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jacobian")
        cotangents = tuple(zeros_like(o, requires_grad=True) for o in outputs)
        grad_inputs = _grad(outputs, inputs, cotangents, create_graph=True)
    columns: list[list[list]] = [[[] for _ in inputs] for _ in outputs]   # [output][input] -> J e_k
    for j, inp in enumerate(inputs):
        for k in range(inp.numel()):
            unit = [zeros_like(t) for t in inputs]
            unit[j]._data.reshape(-1)[k] = 1
            tangents = _grad(grad_inputs, cotangents, tuple(unit), retain_graph=True)
            for i, (t, out) in enumerate(zip(tangents, outputs)):
                columns[i][j].append(zeros_like(out) if t is None else t.detach())
    from ..creation import zeros

    # lists, as PyTorch's forward-mode jacobian returns them (tuples where its reverse mode has them)
    result = []
    for i, out in enumerate(outputs):
        row = []
        for j, inp in enumerate(inputs):
            cols = columns[i][j]
            if not cols or out.numel() == 0:
                row.append(zeros(tuple(out.shape) + tuple(inp.shape), dtype=out.dtype))
            else:   # columns stacked last: shape out.shape + (inp.numel(),)
                row.append(stack(cols, dim=-1).reshape(tuple(out.shape) + tuple(inp.shape)))
        result.append(row)
    return _unpack(result, (outputs_tuple, inputs_tuple))


def hessian(func: Callable, inputs, create_graph: bool = False, strict: bool = False, vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode"):
    """The Hessian of a function returning one single-element Tensor (PyTorch's
    ``autograd.functional.hessian``): the Jacobian of its gradient.  For tuple inputs ``result[i][j]``
    has shape ``inputs[i].shape + inputs[j].shape``.

    >>> import symgrad as torch
    >>> torch.autograd.functional.hessian(lambda x: (x[0] ** 2) * x[1], torch.tensor([1.0, 2.0]))
    tensor([[4., 2.],
            [2., 0.]])
    """
    inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in _STRATEGIES:
        raise _StrategyError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    Tensor = _tensor()

    def single_output(*args):
        out = func(*args)
        out_tuple, outs = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(outs, "outputs", strict)
        if out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should contain a single element")
        return out.squeeze()

    def gradient(*args):
        if outer_jacobian_strategy == "forward-mode":
            args = tuple(a.requires_grad_(True) for a in args)
        jac = jacobian(single_output, args, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        return jac

    result = jacobian(gradient, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                      strategy=outer_jacobian_strategy)
    return _unpack(result, (inputs_tuple, inputs_tuple))


def _scalar_function_outputs(func: Callable, inputs: tuple, strict: bool, name: str) -> tuple[bool, tuple]:
    outputs = func(*inputs)
    outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", name)
    _check_requires_grad(outputs, "outputs", strict)
    if outputs_tuple or not isinstance(outputs[0], _tensor()):
        raise RuntimeError(f"The function given to {name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {name} should contain a single element")
    return outputs_tuple, outputs


def _hessian_vector_inputs(inputs, v, create_graph: bool, name: str):
    inputs_tuple, inputs = _as_tuple(inputs, "inputs", name)
    inputs = _prepare(inputs, create_graph, need_graph=True)
    if v is not None:
        _, v = _as_tuple(v, "v", name)
        v = _prepare(v, create_graph, need_graph=False)
        _check_v(v, inputs, inputs_tuple)
    else:
        v = _default_v(inputs, "input to the user-provided function is")
    return inputs_tuple, inputs, v


def vhp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), v^T H)`` for a function returning one single-element Tensor (PyTorch's
    ``autograd.functional.vhp``): a backward pass through the gradient.

    >>> import symgrad as torch
    >>> torch.autograd.functional.vhp(lambda x: (x ** 3).sum(), torch.tensor([1.0, 2.0]), torch.tensor([1.0, 1.0]))
    (tensor(9.), tensor([ 6., 12.]))
    """
    with enable_grad():
        inputs_tuple, inputs, v = _hessian_vector_inputs(inputs, v, create_graph, "vhp")
        outputs_tuple, outputs = _scalar_function_outputs(func, inputs, strict, "vhp")
        jac = _grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        result = _zeros_for_none(_grad(jac, inputs, v, create_graph), inputs, strict, "double_back")
    return (_unpack(_finish(outputs, create_graph), outputs_tuple),
            _unpack(_finish(result, create_graph), inputs_tuple))


def hvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(*inputs), H v)`` for a function returning one single-element Tensor (PyTorch's
    ``autograd.functional.hvp``), by the double-backward trick on the gradient.  (The Hessian of a
    twice-differentiable function is symmetric, so it equals :func:`vhp`; this is the other order.)

    >>> import symgrad as torch
    >>> torch.autograd.functional.hvp(lambda x: (x[0] ** 2) * x[1], torch.tensor([1.0, 2.0]),
    ...                               torch.tensor([0.0, 1.0]))
    (tensor(2.), tensor([2., 0.]))
    """
    from ..creation import zeros_like

    with enable_grad():
        inputs_tuple, inputs, v = _hessian_vector_inputs(inputs, v, create_graph, "hvp")
        outputs_tuple, outputs = _scalar_function_outputs(func, inputs, strict, "hvp")
        jac = _grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict)
        cotangents = tuple(zeros_like(t, requires_grad=True) for t in inputs)
        double_back = _grad(jac, inputs, cotangents, create_graph=True)
        _check_requires_grad(jac, "hessian", strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        result = _zeros_for_none(_grad(double_back, cotangents, v, create_graph), inputs, strict,
                                 "double_back_trick")
    return (_unpack(_finish(outputs, create_graph), outputs_tuple),
            _unpack(_finish(result, create_graph), inputs_tuple))
