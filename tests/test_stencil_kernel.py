"""codegen/stencil_kernel.py: slices, flips, concatenations, pads and their gradients as shifted reads.

Every program is traced, differentiated (the joint value-and-gradient graph) and emitted as Numba stencil
loops; its value and gradient are compared with the numpy backend of the same graph (the glue running each
op's numpy forward, slices and zero-padded ``slice_backward`` arrays included) and with central finite
differences of numpy itself.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad
from codegen.emit import emit_numpy
from codegen.numba_emit import emit_numba
from codegen.shifted_reads import Guard, Idx
from codegen.stencil_kernel import _run_of, emit_stencil_kernel
from symgrad.compiler.autodiff import autodiff


def _finite_differences(f, arrays, h=1e-6):
    x = arrays[0].astype(np.float64)
    grad = np.zeros_like(x)
    flat, g = x.reshape(-1), grad.reshape(-1)
    for j in range(flat.size):
        keep = flat[j]
        flat[j] = keep + h
        up = float(f(x, *arrays[1:]))
        flat[j] = keep - h
        down = float(f(x, *arrays[1:]))
        flat[j] = keep
        g[j] = (up - down) / (2 * h)
    return grad


def _check(f, arrays, math="vector", fd=True):
    """The stencil kernels of ``f``'s value and gradient (wrt argument 0) against the numpy backend and
    finite differences; returns the emitted code."""
    joint = autodiff(symgrad.trace(f, *arrays), [0])
    e = emit_numba(joint, "joint", math=math)
    assert e.kernels and all(k.splitlines()[1].startswith("def stencil_") for k in e.kernels), e.full_source
    seed = np.ones((), dtype=arrays[0].dtype)
    value, grad = e.compile(cache=False)(*arrays, seed)
    want_value, want_grad = emit_numpy(joint, "joint").compile()(*arrays, seed)
    rtol = 1e-12 if arrays[0].dtype == np.float64 else 1e-5
    np.testing.assert_allclose(value, want_value, rtol=rtol)
    np.testing.assert_allclose(grad, want_grad, rtol=rtol, atol=rtol * np.abs(want_grad).max(initial=0.0))
    np.testing.assert_allclose(value, f(*arrays), rtol=rtol)
    if fd:
        np.testing.assert_allclose(grad, _finite_differences(f, arrays), rtol=1e-5, atol=1e-6)
    return e


def _w(shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape)


W1 = _w(23, 1)          # weights: every output element counts differently
W2 = _w((7, 9), 2)

PROGRAMS_1D = {
    "shift": lambda u: ((u[2:] - 2 * u[1:-1] + u[:-2]) ** 2).sum(),
    "step": lambda u: (u[1::3] * u[::3][:len(u[1::3])]).sum(),
    "neg_step": lambda u: ((u[::-1] - u) ** 2 * W1).sum() + (u[20:2:-3] ** 2).sum(),
    "beyond": lambda u: ((u[-100:100] * W1) ** 2).sum() + (u[3:1000] ** 3).sum() + u[50:].sum(),
    "flip": lambda u: (np.flip(u) * W1 * u).sum(),
    "select": lambda u: (u * u[3]).sum() + u[-1] ** 2,
    "cat": lambda u: (np.concatenate([u[5:], u[:5] * 2.0, u[::-2]]) ** 2 * np.arange(35)).sum(),
    "pad": lambda u: ((np.pad(u, (3, 1)) - np.pad(u, (0, 4), constant_values=1.5)) ** 2 * _w(27, 3)).sum(),
    "mean": lambda u: ((u[1:] - u[:-1]) ** 2).mean() * (u[4:9] ** 2).mean(),
}

PROGRAMS_2D = {
    "tv": lambda x: np.sqrt((x[1:, :] - x[:-1, :])[:, :-1] ** 2 + (x[:, 1:] - x[:, :-1])[:-1, :] ** 2 + 1e-3).sum(),
    "steps": lambda x: (x[::2, 1::3] ** 2).sum() + (x[6:0:-2, ::-1] * W2[6:0:-2, ::-1]).sum(),
    "flips": lambda x: (np.flip(x, 0) * W2 * x).sum() + (np.flip(x, 1) * x).sum() + (x[::-1, ::-1] * W2).sum(),
    "cat0": lambda x: (np.concatenate([x, x[:2] * 3.0], axis=0) ** 2 * _w((9, 9), 4)).sum(),
    "cat1": lambda x: (np.concatenate([x[:, 4:], x], axis=1) ** 2 * _w((7, 14), 5)).sum(),
    "pad": lambda x: (np.pad(x, ((1, 2), (0, 3))) ** 2 * _w((10, 12), 6)).sum()
    + (np.pad(x, 2, constant_values=-0.5) * _w((11, 13), 7)).sum(),
    "rows": lambda x: ((x[1] - x[2]) ** 2).sum() + (x[-1, ::-1] * x[0]).sum() + (x[:, 2] * x[:, -1] ** 3).sum()
    + (x[:, 1:2] * x[:, None, 3]).sum(),
    # row sums and means (reductions over the trailing dims) between the shifted reads
    "row_sum": lambda x: np.sqrt(((x[:, 1:] - x[:, :-1]) ** 2).sum(axis=1) + 1e-3).sum(),
    "row_mean_kept": lambda x: (np.exp(-((x[1:] - x[:-1]) ** 2).mean(axis=-1, keepdims=True)) * x[1:, ::2]).sum(),
    "row_sum_of_cat": lambda x: (np.concatenate([x[:2] * 2.0, x], axis=0).sum(axis=1) ** 2 * _w(9, 8)).sum(),
    "row_sums_twice": lambda x: (np.pad(x, ((0, 0), (1, 1))).sum(axis=1) * np.flip(x, 1).mean(axis=1)).sum()
    / (x[:, 1:] ** 2).sum(),
    # column sums (a leading dim reduced): added into an array
    "column_sum": lambda x: np.sqrt(((x[1:] - x[:-1]) ** 2).sum(axis=0) + 1e-3).sum()
    + (np.tanh(x[:, 1:].mean(axis=0, keepdims=True)) * x[2:, :-1]).sum(),
}

PROGRAMS_3D = {
    # over the two trailing dims, then over the last one only
    "plane_sums": lambda x: (((x[:, 1:, :] - x[:, :-1, :]) ** 2).sum(axis=(1, 2)) * np.arange(1.0, 4.0)).sum()
    + np.tanh((x[:, :, 1:] * x[:, :, :-1]).sum(axis=2)).sum(),
    "outer_sums": lambda x: (np.exp(-((x[:, 1:, :] - x[:, :-1, :]) ** 2).mean(axis=(0, 2))) * _w(4, 9)).sum()
    + ((np.flip(x, 2) * x).sum(axis=1, keepdims=True) ** 2).sum(),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS_1D))
def test_one_dim(name):
    _check(PROGRAMS_1D[name], [np.random.default_rng(0).standard_normal(23)])


@pytest.mark.parametrize("name", sorted(PROGRAMS_2D))
def test_two_dims(name):
    _check(PROGRAMS_2D[name], [np.random.default_rng(1).standard_normal((7, 9))])


@pytest.mark.parametrize("name", sorted(PROGRAMS_3D))
def test_three_dims(name):
    _check(PROGRAMS_3D[name], [np.random.default_rng(9).standard_normal((3, 5, 6))])


def test_row_sums_are_written_once_per_row():
    e = _check(PROGRAMS_2D["row_sum"], [np.random.default_rng(10).standard_normal((7, 9))])
    assert "slice_backward(" not in e.source and "np.sum" not in e.source
    # the forward's row sums: one accumulator per row, written after the row's loop
    first = e.kernels[0]
    assert first.index("acc_0 = 0.0") > first.index("for i0") and "out_sum[i0] = acc_0" in first


def test_row_mean_float32_and_reduction_as_output():
    x = np.random.default_rng(11).standard_normal((6, 8)).astype(np.float32)
    _check(PROGRAMS_2D["row_mean_kept"], [x], fd=False)
    # a row mean returned as it is, not summed: the graph's output is the kernel's row array
    row_means = symgrad.compile(lambda x: ((x[:, 1:] - x[:, :-1]) ** 2).mean(axis=1, keepdims=True))
    got = row_means(x)
    np.testing.assert_allclose(got, ((x[:, 1:] - x[:, :-1]) ** 2).mean(axis=1, keepdims=True), rtol=1e-6)
    assert got.shape == (6, 1) and got.dtype == np.float32


def test_column_sums_float32_and_bias_gradient():
    x = np.random.default_rng(12).standard_normal((6, 8)).astype(np.float32)
    _check(PROGRAMS_2D["column_sum"], [x], fd=False)
    # a bias broadcast over the rows: its gradient is a column sum of the shifted residual
    r = np.random.default_rng(13)
    u, b = r.standard_normal((9, 7)), r.standard_normal(6)
    e = _check(lambda b, u: ((u[:, 1:] - u[:, :-1] + b) ** 2).sum(), [b, u])
    assert "np.sum" not in e.source and "+= " in "".join(e.kernels)


EDGE_PROGRAMS = {
    "heat_rows": lambda x: ((x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]) ** 2).sum(),
    "row_sum": PROGRAMS_2D["row_sum"],
    "row_mean": lambda x: (((x[:, 1:] - x[:, :-1]) ** 2).mean(axis=1) + 1.0).sum(),
    "column_sum": lambda x: np.sqrt(((x[1:] - x[:-1]) ** 2).sum(axis=0) + 1.0).sum(),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy's mean of an empty slice
@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (0, 0), (1, 1), (3, 1)])
@pytest.mark.parametrize("name", sorted(EDGE_PROGRAMS))
def test_empty_and_single_element_dims(name, shape):
    # a dim of size 0 leaves a loop without positions (its body: pass; a row sum over it: 0, a mean: nan)
    _check(EDGE_PROGRAMS[name], [np.random.default_rng(14).standard_normal(shape)], fd=False)


def test_float32_and_libm():
    f = PROGRAMS_2D["pad"]
    _check(f, [np.random.default_rng(2).standard_normal((7, 9)).astype(np.float32)], fd=False)
    _check(PROGRAMS_1D["cat"], [np.random.default_rng(3).standard_normal(23)], math="libm")


def _heat(u, f):
    r = (u[2:] - 2 * u[1:-1] + u[:-2]) / 0.01 ** 2 - f[1:-1]
    return (r ** 2).sum()


def test_heat_residual_is_one_loop_forward_one_backward():
    u, f = np.random.default_rng(4).standard_normal((2, 5000))
    e = _check(_heat, [u, f], fd=False)
    # the residual (with its sum) and the gradient: two loops, no slice or zero-padded gradient made
    assert len(e.kernels) == 2
    assert "slice" not in e.source.replace("stencil", "")
    # the interior of the gradient's loop tests nothing: it vectorises
    interior = e.kernels[1].split("for i0 in range(2, 4998):")[1].split("for lo0")[0]
    assert " if " not in interior and "in_u[i0 - 2]" in interior


def test_value_and_grad_uses_stencil_loops():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 40, 40))

    def tv(x, y):
        dx = (x[1:, :] - x[:-1, :])[:, :-1]
        dy = (x[:, 1:] - x[:, :-1])[:-1, :]
        return 0.5 * ((x - y) ** 2).sum() + 0.1 * np.sqrt(dx ** 2 + dy ** 2 + 1e-6).sum()

    vg = symgrad.value_and_grad(tv)
    value, grad = vg(x, y)
    assert "def stencil_0" in vg.compiled.kernels_for(x, y, wrt=[0], joint_kernel=True).joint_source
    np.testing.assert_allclose(value, tv(x, y), rtol=1e-12)
    np.testing.assert_allclose(grad, _finite_differences(tv, [x, y]), rtol=1e-5, atol=1e-6)


def test_graphs_without_shifted_reads_are_left_to_the_fuser():
    g = autodiff(symgrad.trace(lambda x: (x * x).sum(), np.ones(10)), [0])
    assert emit_stencil_kernel(g, "joint", vector={}) is None
    g = autodiff(symgrad.trace(lambda x: (x[1:] @ x[:-1]), np.ones(10)), [0])   # a matmul
    assert emit_stencil_kernel(g, "joint", vector={}) is None


@pytest.mark.parametrize(("guard", "n", "run"), [
    (Guard(Idx(0, 1, -2), 0, 998), 1000, (2, 1000)),
    (Guard(Idx(0, 1, 0), 1, 999), 1000, (1, 999)),
    (Guard(Idx(0, -1, 9), 0, 5), 10, (5, 10)),
    (Guard(Idx(0, 2, 1), 4, 9), 10, (2, 4)),
    (Guard(Idx(0, -3, 20), 0, 10), 10, (4, 7)),
])
def test_run_of_a_guard(guard, n, run):
    assert _run_of(guard, n) == run
    holds = [i for i in range(n) if guard.lo <= guard.at.off + guard.at.coef * i < guard.hi]
    assert (holds[0], holds[-1] + 1) == run


# --- random slice programs ------------------------------------------------------------------------

@st.composite
def _slice_programs(draw):
    """A list of steps on a 2-D array, each keeping every dim non-empty."""
    start_shape = (draw(st.integers(3, 8)), draw(st.integers(3, 8)))
    steps, shape = [], list(start_shape)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["slice", "flip", "pad", "cat", "square"]))
        axis = draw(st.integers(0, 1))
        n = shape[axis]
        if kind == "slice":
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            start = draw(st.integers(-n - 3, n + 3) | st.none())
            stop = draw(st.integers(-n - 3, n + 3) | st.none())
            size = len(range(n)[slice(start, stop, step)])
            if size == 0:
                continue
            shape[axis] = size
            steps.append((kind, axis, slice(start, stop, step)))
        elif kind == "pad":
            before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
            shape[axis] += before + after
            steps.append((kind, axis, (before, after, draw(st.sampled_from([0.0, 1.5])))))
        elif kind == "cat":
            shape[axis] *= 2
            steps.append((kind, axis, None))
        else:
            steps.append((kind, axis, None))
    return start_shape, steps


def _program(steps):
    def f(x):
        for kind, axis, arg in steps:
            if kind == "slice":
                x = x[(slice(None),) * axis + (arg,)]
            elif kind == "flip":
                x = np.flip(x, axis)
            elif kind == "pad":
                widths = [(0, 0), (0, 0)]
                widths[axis] = arg[:2]
                x = np.pad(x, widths, constant_values=arg[2])
            elif kind == "cat":
                x = np.concatenate([x, 0.5 * x], axis=axis)
            else:
                x = x * x + 0.25 * x
        return (x * np.linspace(0.5, 1.5, x.size).reshape(x.shape)).sum()
    return f


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(_slice_programs())
def test_random_slice_programs(program):
    shape, steps = program
    if not any(kind in ("slice", "flip", "pad", "cat") for kind, _, _ in steps):
        return
    _check(_program(steps), [np.random.default_rng(6).standard_normal(shape)])


def test_compiled_tensor_function_forward_and_backward():
    """The split path (symgrad.compile on Tensors): a forward that saves, a backward that reads; F.pad,
    torch.cat and flip against eager autograd."""
    import symgrad as torch
    F = torch.nn.functional

    def loss(t, w):
        padded = F.pad(t, (1, 2, 2, 0), value=0.5)
        joined = torch.cat([t, t.flip(0) * 2.0], dim=1)[:, 1:]
        return (padded ** 2 * w).sum() + torch.sin(joined).mean() * t.sum()

    data = np.random.default_rng(7).standard_normal((6, 5))
    weights = torch.tensor(np.random.default_rng(8).uniform(0.5, 1.5, (8, 8)))
    compiled = torch.compile(loss)
    results = []
    for fn in (loss, compiled):
        t = torch.tensor(data, requires_grad=True)
        out = fn(t, weights)
        out.backward()
        results.append((out.item(), t.grad.numpy().copy()))
    (want, want_grad), (got, got_grad) = results
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-10, atol=1e-12)
    k = compiled.kernels_for(torch.tensor(data, requires_grad=True), weights, wrt=[0])
    assert "def stencil_0" in k.forward_source and "def stencil_0" in k.backward_source
