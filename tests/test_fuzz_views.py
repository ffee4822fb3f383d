"""Differential fuzzing of in-place ops on views of graph intermediates, against PyTorch.

Each program makes an intermediate ``y`` from two inputs that require grad, takes random chains of views
of it (slices, selects, transposes, diagonals, narrow, unsqueeze, permute, flattening views) and of each
other, applies random in-place ops to any of them (the intermediate, a view, a view of a view; with
numbers or with values that require grad), and ends in a loss that reads every tensor, stale views
included.  The same program runs on symgrad and on torch: values of every tensor, the loss, both
gradients and the errors (PyTorch's refusals, the saved-tensor version check) must agree.  Programs
without an error are compiled too (``symgrad.compile``, strict: no eager fallback), and must give the
eager numbers.

Profiles as in tests/test_fuzz.py (tests/fuzz_profile.py): quick in CI, ``SYMGRAD_FUZZ=long`` for many
programs (also with the Numba backend); ``SYMGRAD_FUZZ_DTYPE`` picks the float dtype.
"""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_profile import LONG, dtype_names, record, slow_when_long
from fuzz_profile import examples as _examples
from hypothesis import given
from hypothesis import strategies as st

import symgrad

torch = pytest.importorskip("torch")


def _view_step(draw, shape: tuple):
    """One view op applicable to a tensor of ``shape``, as ``(name, args)``."""
    nd = len(shape)
    choices = ["unsqueeze", "flatten_view"]
    if nd >= 1 and all(n > 0 for n in shape):
        choices += ["slice", "select", "narrow"]
    if nd >= 2:
        choices += ["transpose", "diagonal", "permute"]
    if nd == 2:
        choices.append("t")
    name = draw(st.sampled_from(choices))
    if name == "slice":
        dim = draw(st.integers(0, nd - 1))
        start = draw(st.integers(0, shape[dim] - 1))
        return name, (dim, start, draw(st.integers(start + 1, shape[dim])), draw(st.integers(1, 2)))
    if name == "select":
        dim = draw(st.integers(0, nd - 1))
        return name, (dim, draw(st.integers(-shape[dim], shape[dim] - 1)))
    if name == "narrow":
        dim = draw(st.integers(0, nd - 1))
        start = draw(st.integers(0, shape[dim] - 1))
        return name, (dim, start, draw(st.integers(1, shape[dim] - start)))
    if name == "transpose":
        return name, (draw(st.integers(0, nd - 1)), draw(st.integers(0, nd - 1)))
    if name == "diagonal":
        d1 = draw(st.integers(0, nd - 1))
        d2 = draw(st.sampled_from([d for d in range(nd) if d != d1]))
        return name, (draw(st.integers(-1, 1)), d1, d2)
    if name == "permute":
        return name, (tuple(draw(st.permutations(range(nd)))),)
    if name == "unsqueeze":
        return name, (draw(st.integers(0, nd)),)
    return name, ()


def _apply_view(t, name, args):
    if name == "slice":
        dim, start, stop, step = args
        return t[(slice(None),) * dim + (slice(start, stop, step),)]
    if name == "select":
        return t.select(*args)
    if name == "flatten_view":
        return t.view(-1)          # refused (by both) when the strides do not allow it
    return getattr(t, name)(*args)


INPLACE = ("mul_", "add_", "sub_", "div_", "exp_", "sigmoid_", "tanh_", "clamp_", "fill_", "zero_", "copy_",
           "setitem", "masked_fill_", "pow_", "neg_")


def _program(draw) -> dict:
    nd = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    seed = draw(st.integers(0, 2 ** 16))
    actions = []
    shapes = [shape]                      # shapes of the tensors the program holds, y first
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()) or len(shapes) == 1:
            src = draw(st.integers(0, len(shapes) - 1))
            steps, s = [], shapes[src]
            for _ in range(draw(st.integers(1, 2))):
                name, args = _view_step(draw, s)
                steps.append((name, args))
                s = _shape_after(s, name, args)
            actions.append(("view", src, tuple(steps)))
            shapes.append(s)
        else:
            target = draw(st.integers(0, len(shapes) - 1))
            op = draw(st.sampled_from(INPLACE))
            with_grad = draw(st.booleans())           # an operand that requires grad (from w)
            actions.append(("inplace", target, op, with_grad, draw(st.floats(0.3, 1.7))))
    return {"shape": shape, "seed": seed, "actions": actions, "n": len(shapes)}


def _shape_after(shape, name, args):
    probe = np.empty(shape)
    t = torch.from_numpy(probe)
    try:
        return tuple(_apply_view(t, name, args).shape)
    except RuntimeError:
        return shape        # the step raises; the program stops there


def _operand(lib, w, shape, with_grad: bool, c: float):
    """A value of ``shape`` to combine with a tensor in place: a number, or one computed from ``w``."""
    if not with_grad:
        return c
    return (w.sum() * 0.1 + c).expand(shape) if shape else w.sum() * 0.1 + c


def _inplace(lib, t, op, w, with_grad, c):
    shape = tuple(t.shape)
    v = _operand(lib, w, shape, with_grad, c)
    if op in ("mul_", "add_", "sub_", "div_"):
        return getattr(t, op)(v)
    if op in ("exp_", "sigmoid_", "tanh_", "zero_", "neg_"):
        return getattr(t, op)()
    if op == "clamp_":
        return t.clamp_(-c, c)
    if op == "fill_":
        return t.fill_(c)
    if op == "pow_":
        return t.pow_(2)
    if op == "copy_":
        return t.copy_(v if with_grad else lib.full(shape, c, dtype=t.dtype))
    if op == "masked_fill_":
        return t.masked_fill_(t > 0.5, c)
    if op == "setitem":
        if not shape:
            t[...] = v
        else:
            t[0] = v[0] if with_grad else c
        return t


def run_program(lib, prog, x_np, w_np, *, in_function: bool = False):
    """The program on ``lib``: ``(tensors, loss)`` with every tensor's value, or raises."""
    def body(x, w):
        y = x * 1.3 + w * 0.5
        held = [y]
        for action in prog["actions"]:
            if action[0] == "view":
                _, src, steps = action
                t = held[src]
                for name, args in steps:
                    t = _apply_view(t, name, args)
                held.append(t)
            else:
                _, target, op, with_grad, c = action
                _inplace(lib, held[target], op, w, with_grad, c)
        loss = sum(((k + 1) * 0.3 * (t * t)).sum() for k, t in enumerate(held))
        return loss, held

    if in_function:
        return body
    dtype = getattr(lib, prog["dtype"])
    x = lib.tensor(x_np, dtype=dtype, requires_grad=True)
    w = lib.tensor(w_np, dtype=dtype, requires_grad=True)
    loss, held = body(x, w)
    loss.backward()
    return [t.detach().numpy().astype(np.float64) for t in held], loss.item(), x.grad, w.grad


def _outcome(lib, prog, x_np, w_np):
    try:
        return run_program(lib, prog, x_np, w_np), None
    except (RuntimeError, ValueError, IndexError) as exc:
        return None, exc


def _close(a, b, rtol, what):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol,
                               atol=rtol, err_msg=what)


@st.composite
def programs(draw) -> dict:
    return _program(draw)


@slow_when_long
@_examples(40)
@given(programs(), dtype_names("float64", "float32"))
def test_random_inplace_ops_on_views_match_torch(prog, dtype):
    prog = dict(prog, dtype=dtype)
    r = np.random.default_rng(prog["seed"])
    x_np, w_np = r.uniform(-1.2, 1.2, prog["shape"]), r.uniform(-1.2, 1.2, prog["shape"])
    ours, our_error = _outcome(symgrad, prog, x_np, w_np)
    theirs, their_error = _outcome(torch, prog, x_np, w_np)
    record("views", dtype)
    assert (our_error is None) == (their_error is None), (prog, our_error, their_error)
    if their_error is not None:
        assert type(our_error) is type(their_error), (prog, our_error, their_error)
        return
    rtol = 1e-9 if dtype == "float64" else 2e-4
    for k, (a, b) in enumerate(zip(ours[0], theirs[0])):
        _close(a, b, rtol, f"tensor {k} of {prog}")
    _close(ours[1], theirs[1], rtol, f"loss of {prog}")
    _close(ours[2].numpy(), theirs[2].numpy(), rtol, f"x.grad of {prog}")
    _close(ours[3].numpy(), theirs[3].numpy(), rtol, f"w.grad of {prog}")

    # compiled: the same numbers, with no eager fallback
    backend = "numba" if LONG and prog["seed"] % 2 else "numpy"
    body = run_program(symgrad, prog, x_np, w_np, in_function=True)
    compiled = symgrad.compile(lambda x, w: body(x, w)[0], backend=backend, strict=True)
    dt = getattr(symgrad, dtype)
    x = symgrad.tensor(x_np, dtype=dt, requires_grad=True)
    w = symgrad.tensor(w_np, dtype=dt, requires_grad=True)
    loss = compiled(x, w)
    loss.backward()
    _close(loss.item(), ours[1], rtol, f"compiled loss ({backend}) of {prog}")
    _close(x.grad.numpy(), ours[2].numpy(), rtol, f"compiled x.grad ({backend}) of {prog}")
    _close(w.grad.numpy(), ours[3].numpy(), rtol, f"compiled w.grad ({backend}) of {prog}")
