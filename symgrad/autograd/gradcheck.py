"""Finite-difference checks of gradients: ``gradcheck`` and ``gradgradcheck``.

>>> import symgrad
>>> x = symgrad.tensor([0.3, 0.7], dtype=symgrad.float64, requires_grad=True)
>>> symgrad.autograd.gradcheck(lambda t: (t.sin() * t).sum(), (x,))
True
"""

from __future__ import annotations

import warnings

import numpy as np

from .engine import grad as autograd_grad


class GradcheckError(RuntimeError):
    """Analytical and numerical gradients disagree."""


def _tensors(outputs):
    from ..tensor import Tensor

    if isinstance(outputs, Tensor):
        return (outputs,)
    return tuple(o for o in outputs if isinstance(o, Tensor))


def _numerical_jacobian(func, inputs, x, out_index, out_numel, eps):
    flat = x._data.reshape(-1)  # a view when contiguous, which tensors from symgrad.tensor are
    if not np.shares_memory(flat, x._data):
        raise ValueError("gradcheck needs contiguous inputs")
    jac = np.zeros((out_numel, flat.size))
    for j in range(flat.size):
        orig = flat[j]
        # func may itself differentiate (gradgradcheck), so it runs with grad mode on
        flat[j] = orig + eps
        plus = np.array(_tensors(func(*inputs))[out_index]._data, dtype=np.float64).reshape(-1)
        flat[j] = orig - eps
        minus = np.array(_tensors(func(*inputs))[out_index]._data, dtype=np.float64).reshape(-1)
        flat[j] = orig
        jac[:, j] = (plus - minus) / (2 * eps)
    return jac


def gradcheck(func, inputs, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True, **_ignored) -> bool:
    """Compare the gradients of ``func`` at ``inputs`` with central finite differences.

    Every input that requires grad is perturbed element by element; every
    differentiable output is checked against the engine's vector-Jacobian products.
    Use float64 inputs: float32 differences are too coarse for the default tolerances.
    """
    from ..tensor import Tensor

    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    diff = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    for x in diff:
        if x._data.dtype != np.float64:
            warnings.warn(f"gradcheck: input of dtype {x.dtype.name} is not float64; the check is likely to fail",
                          UserWarning, stacklevel=2)
    outputs = _tensors(func(*inputs))
    for oi, out in enumerate(outputs):
        if not out.requires_grad:
            continue
        m = out.numel()
        numerical = [_numerical_jacobian(func, inputs, x, oi, m, eps) for x in diff]
        analytical = [np.zeros((m, x.numel())) for x in diff]
        for i in range(m):
            onehot = np.zeros(m, dtype=out._data.dtype)
            onehot[i] = 1
            out_i = _tensors(func(*inputs))[oi]
            grads = autograd_grad(out_i, diff, grad_outputs=Tensor._wrap(onehot.reshape(out._data.shape)),
                                  allow_unused=True)
            for k, g in enumerate(grads):
                if g is not None:
                    analytical[k][i] = g._data.reshape(-1)
        for k, (a, n) in enumerate(zip(analytical, numerical)):
            if not np.allclose(a, n, rtol=rtol, atol=atol):
                worst = np.unravel_index(np.argmax(np.abs(a - n)), a.shape)
                msg = (f"Jacobian mismatch for output {oi} with respect to input {k},\n"
                       f"numerical:{n}\nanalytical:{a}\n"
                       f"largest difference at (output element, input element) {tuple(map(int, worst))}: "
                       f"analytical {a[worst]:.6g} vs numerical {n[worst]:.6g}")
                if raise_exception:
                    raise GradcheckError(msg)
                return False
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
                  raise_exception: bool = True, seed: int = 0, **_ignored) -> bool:
    """Check second derivatives: gradcheck of the (create_graph) vector-Jacobian product of ``func``."""
    from ..tensor import Tensor

    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    outputs = [o for o in _tensors(func(*inputs)) if o.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(Tensor(rng.standard_normal(o._data.shape).astype(o._data.dtype), requires_grad=True)
                             for o in outputs)
    grad_outputs = tuple(grad_outputs)
    n = len(inputs)
    diff_pos = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]

    def first_derivative(*args):
        ins, gos = args[:n], args[n:]
        outs = [o for o in _tensors(func(*ins)) if o.requires_grad]
        grads = autograd_grad(outs, [ins[i] for i in diff_pos], grad_outputs=gos, create_graph=True,
                              allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
