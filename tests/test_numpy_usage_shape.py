"""The numpy usage table, shape/assembly/indexing family: flip, roll, tile, repeat, pad, tril/triu, diag,
diagonal, trace, the stacks, the splits, take, take_along_axis, moveaxis, negative-step slices.
Each row runs eagerly and compiled against numpy's values and finite-difference gradients
(tests/numpy_usage.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_usage import Usage, _finite_differences, check, params

import symgrad

try:  # the oracle for the torch-named functions; the numpy table needs only numpy
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="could not import 'torch': PyTorch is the oracle of this test")


def m(*shape):
    return lambda r: (r.standard_normal(shape),)


def ints(*shape):
    return lambda r: (r.integers(-9, 10, shape),)


def two(s1, s2):
    return lambda r: (r.standard_normal(s1), r.standard_normal(s2))


def _face(x):
    """A tensor marked numpy-face, as values traced for a function given numpy arrays are (arrays pass)."""
    if isinstance(x, symgrad.Tensor):
        x._numpy_face = True
    return x


def _scatter_add(x, v):
    z = np.zeros_like(x)
    np.add.at(z, [0, 2, 0, 1, 0], v * x[[0, 2, 0, 1, 0]])
    return z


def _write_repeats(x, v):
    z = _face(x * 1.0)
    z[[0, 2, 0, 0]] += v      # numpy: the last write of position 0 wins
    z[[1, 1]] = v[1:3]
    return z


def _write_leading_one(x, v):
    z = _face(x * 1.0)
    z[[0, 0, 1]] = v          # v of shape (1, 3): numpy drops the leading 1
    return z


def _write_negative_step(x, v):
    z = _face(x * 1.0)
    z[::-2] = v
    return z


def _pieces(parts):
    # every piece weighted differently, so a gradient routed to the wrong piece shows
    return np.concatenate([np.ravel(p) * (k + 1) for k, p in enumerate(parts)])


ROWS = [
    # flip
    Usage("np.flip(x)", lambda x: np.flip(x), m(3, 4)),
    Usage("np.flip(x, axis=0)", lambda x: np.flip(x, axis=0), m(3, 4)),
    Usage("np.flip(x, axis=-1)", lambda x: np.flip(x, axis=-1), m(3, 4)),
    Usage("np.flip(x, axis=(0, 2))", lambda x: np.flip(x, axis=(0, 2)), m(2, 3, 4)),
    Usage("np.flip(x) 1-D", lambda x: np.flip(x), m(5)),
    Usage("np.fliplr(x)", lambda x: np.fliplr(x), m(3, 4)),
    Usage("np.flipud(x)", lambda x: np.flipud(x), m(3, 4)),
    # roll
    Usage("np.roll(x, 2)", lambda x: np.roll(x, 2), m(3, 4)),
    Usage("np.roll(x, -1, axis=1)", lambda x: np.roll(x, -1, axis=1), m(3, 4)),
    Usage("np.roll(x, (1, 2), axis=(0, 1))", lambda x: np.roll(x, (1, 2), axis=(0, 1)), m(3, 4)),
    Usage("np.roll(x, 7) 1-D", lambda x: np.roll(x, 7), m(5)),
    # tile, repeat
    Usage("np.tile(x, 2) 1-D", lambda x: np.tile(x, 2), m(3)),
    Usage("np.tile(x, (2, 1))", lambda x: np.tile(x, (2, 1)), m(2, 3)),
    Usage("np.tile(x, (2, 1, 3))", lambda x: np.tile(x, (2, 1, 3)), m(2, 3)),
    Usage("np.repeat(x, 2)", lambda x: np.repeat(x, 2), m(2, 3)),
    Usage("np.repeat(x, 3, axis=1)", lambda x: np.repeat(x, 3, axis=1), m(2, 3)),
    Usage("np.repeat(x, [1, 0, 2], axis=-1)", lambda x: np.repeat(x, [1, 0, 2], axis=-1), m(2, 3)),
    Usage("np.repeat(x, [2, 1]) 1-D", lambda x: np.repeat(x, [2, 1]), m(2)),
    # pad
    Usage("np.pad(x, 1)", lambda x: np.pad(x, 1), m(2, 3)),
    Usage("np.pad(x, (1, 2)) 1-D", lambda x: np.pad(x, (1, 2)), m(4)),
    Usage("np.pad(x, ((0, 1), (2, 0)), constant_values=3.5)",
          lambda x: np.pad(x, ((0, 1), (2, 0)), constant_values=3.5), m(2, 3)),
    Usage("np.pad(x, 1, constant_values=((1, 2), (3, 4)))",
          lambda x: np.pad(x, 1, constant_values=((1, 2), (3, 4))), m(2, 3)),
    Usage("np.pad(x, 2, mode='edge')", lambda x: np.pad(x, 2, mode="edge"), m(2, 3)),
    Usage("np.pad(x, 2, mode='reflect')", lambda x: np.pad(x, 2, mode="reflect"), m(3, 4)),
    Usage("np.pad(x, (3, 1), mode='symmetric') 1-D", lambda x: np.pad(x, (3, 1), mode="symmetric"), m(4)),
    Usage("np.pad(x, ((1, 0), (2, 5)), mode='wrap')", lambda x: np.pad(x, ((1, 0), (2, 5)), mode="wrap"),
          m(2, 3)),
    # tril, triu
    Usage("np.tril(x)", lambda x: np.tril(x), m(3, 4)),
    Usage("np.tril(x, k=-1)", lambda x: np.tril(x, k=-1), m(4, 3)),
    Usage("np.triu(x, 1)", lambda x: np.triu(x, 1), m(3, 4)),
    Usage("np.triu(x) batched", lambda x: np.triu(x), m(2, 3, 3)),
    Usage("np.tril(x) 1-D", lambda x: np.tril(x), m(3)),
    # diag, diagonal, trace
    Usage("np.diag(v)", lambda x: np.diag(x), m(3)),
    Usage("np.diag(v, k=1)", lambda x: np.diag(x, k=1), m(3)),
    Usage("np.diag(v, -2)", lambda x: np.diag(x, -2), m(2)),
    Usage("np.diag(M)", lambda x: np.diag(x), m(3, 4)),
    Usage("np.diag(M, k=-1)", lambda x: np.diag(x, k=-1), m(3, 4)),
    Usage("np.diagonal(x)", lambda x: np.diagonal(x), m(3, 4)),
    Usage("np.diagonal(x, offset=1, axis1=1, axis2=2)", lambda x: np.diagonal(x, offset=1, axis1=1, axis2=2),
          m(2, 3, 4)),
    Usage("np.diagonal(x, 0, 2, 0)", lambda x: np.diagonal(x, 0, 2, 0), m(3, 2, 4)),
    Usage("np.trace(x)", lambda x: np.trace(x), m(3, 3)),
    Usage("np.trace(x, offset=-1)", lambda x: np.trace(x, offset=-1), m(3, 4)),
    Usage("np.trace(x) 3-D", lambda x: np.trace(x), m(3, 3, 2)),
    # stacks
    Usage("np.vstack([a, b]) 1-D", lambda a, b: np.vstack([a, b]), two((3,), (3,)), wrt=(0, 1)),
    Usage("np.vstack((a, b)) 2-D", lambda a, b: np.vstack((a, b)), two((2, 3), (1, 3)), wrt=(0, 1)),
    Usage("np.hstack([a, b]) 1-D", lambda a, b: np.hstack([a, b]), two((2,), (3,)), wrt=(0, 1)),
    Usage("np.hstack([a, b]) 2-D", lambda a, b: np.hstack([a, b]), two((2, 1), (2, 3)), wrt=(0, 1)),
    Usage("np.dstack([a, b])", lambda a, b: np.dstack([a, b]), two((2, 3), (2, 3)), wrt=(0, 1)),
    Usage("np.column_stack([a, b])", lambda a, b: np.column_stack([a, b]), two((3,), (3, 2)), wrt=(0, 1)),
    Usage("np.vstack([a, const])", lambda a: np.vstack([a, np.ones(3)]), m(3)),
    Usage("np.vstack(x) of an array: its rows", lambda x: np.vstack(x), m(3, 2)),
    Usage("np.column_stack(x) of an array", lambda x: np.column_stack(x), m(2, 3)),
    Usage("np.atleast_2d(x)", lambda x: np.atleast_2d(x), m(3)),
    Usage("np.atleast_3d(x)", lambda x: np.atleast_3d(x), m(2, 3)),
    # splits: the pieces reassembled with distinct weights
    Usage("np.split(x, 3, axis=1)", lambda x: _pieces(np.split(x, 3, axis=1)), m(2, 6)),
    Usage("np.split(x, [1, 3])", lambda x: _pieces(np.split(x, [1, 3])), m(5, 2)),
    Usage("np.array_split(x, 3)", lambda x: _pieces(np.array_split(x, 3)), m(7)),
    Usage("np.array_split(x, 4, axis=-1)", lambda x: _pieces(np.array_split(x, 4, axis=-1)), m(2, 6)),
    Usage("np.hsplit(x, 2)", lambda x: _pieces(np.hsplit(x, 2)), m(3, 4)),
    Usage("np.vsplit(x, [2])", lambda x: _pieces(np.vsplit(x, [2])), m(3, 4)),
    Usage("a, b = np.split(x, 2)", lambda x: (lambda a, b: a * b)(*np.split(x, 2)), m(4, 3)),
    # take, take_along_axis
    Usage("np.take(x, [0, 5, 5, 2])", lambda x: np.take(x, [0, 5, 5, 2]), m(2, 3)),
    Usage("np.take(x, [[2, 0], [1, 1]], axis=1)", lambda x: np.take(x, [[2, 0], [1, 1]], axis=1), m(2, 3)),
    Usage("np.take(x, idx, axis=-1) idx an argument", lambda x, i: np.take(x, i, axis=-1),
          lambda r: (r.standard_normal((2, 4)), np.array([3, 0, 3]))),
    Usage("np.take(x, 4)", lambda x: np.take(x, 4), m(2, 3)),
    Usage("np.take(x, [-1, 7], mode='wrap')", lambda x: np.take(x, [-1, 7], mode="wrap"), m(5)),
    Usage("np.take(x, [-1, 7], axis=0, mode='clip')", lambda x: np.take(x, [-1, 7], axis=0, mode="clip"), m(5, 2)),
    Usage("np.take_along_axis(x, np.argsort(x, 1), 1)",
          lambda x: np.take_along_axis(x, np.array([[2, 0, 1], [1, 1, 0]]), axis=1), m(2, 3)),
    Usage("np.take_along_axis(x, idx, axis=0) broadcast",
          lambda x: np.take_along_axis(x, np.array([[1, 0, 1]]), axis=0), m(2, 3)),
    Usage("np.take_along_axis(x, idx, None)", lambda x: np.take_along_axis(x, np.array([5, 0, 5]), None), m(2, 3)),
    Usage("np.take_along_axis(x, idx, -1) idx an argument", lambda x, i: np.take_along_axis(x, i, -1),
          lambda r: (r.standard_normal((3, 4)), np.array([[3], [0], [1]]))),
    # moveaxis
    Usage("np.moveaxis(x, 0, -1)", lambda x: np.moveaxis(x, 0, -1), m(2, 3, 4)),
    Usage("np.moveaxis(x, [0, 1], [-1, -2])", lambda x: np.moveaxis(x, [0, 1], [-1, -2]), m(2, 3, 4)),
    # rot90, append, diagflat
    Usage("np.rot90(x)", lambda x: np.rot90(x), m(3, 4)),
    Usage("np.rot90(x, 2)", lambda x: np.rot90(x, 2), m(3, 4)),
    Usage("np.rot90(x, -1, axes=(1, 2))", lambda x: np.rot90(x, -1, axes=(1, 2)), m(2, 3, 4)),
    Usage("np.rot90(x, 3, axes=(2, 0))", lambda x: np.rot90(x, 3, axes=(2, 0)), m(2, 3, 4)),
    Usage("np.append(x, y)", lambda x, y: np.append(x, y), two((2, 2), (3,)), wrt=(0, 1)),
    Usage("np.append(x, y, axis=1)", lambda x, y: np.append(x, y, axis=1), two((2, 2), (2, 3)), wrt=(0, 1)),
    Usage("np.diagflat(x, 1)", lambda x: np.diagflat(x, 1), m(2, 2)),
    # delete, resize, rollaxis
    Usage("np.delete(x, 1)", lambda x: np.delete(x, 1), m(2, 3)),
    Usage("np.delete(x, [0, 2], axis=1)", lambda x: np.delete(x, [0, 2], axis=1), m(2, 4)),
    Usage("np.delete(x, slice(None, None, 2), axis=0)", lambda x: np.delete(x, slice(None, None, 2), axis=0),
          m(5, 2)),
    Usage("np.resize(x, (3, 5))", lambda x: np.resize(x, (3, 5)), m(2, 3)),
    Usage("np.insert(x, 2, v)", lambda x, v: np.insert(x, 2, v), two((2, 3), ()), wrt=(0, 1)),
    Usage("np.insert(x, [1, 1], v, axis=1)", lambda x, v: np.insert(x, [1, 1], v, axis=1), two((2, 3), (2, 1)),
          wrt=(0, 1)),
    Usage("np.insert(x, 1, v, axis=0)", lambda x, v: np.insert(x, 1, v, axis=0), two((2, 3), (3,)), wrt=(0, 1)),
    Usage("np.insert(x, [0, 2], 5.0)", lambda x: np.insert(x, [0, 2], 5.0), m(4)),
    Usage("np.rollaxis(x, 2)", lambda x: np.rollaxis(x, 2), m(2, 3, 4)),
    Usage("np.rollaxis(x, 0, 3)", lambda x: np.rollaxis(x, 0, 3), m(2, 3, 4)),
    Usage("np.rollaxis(x, 0, -1)", lambda x: np.rollaxis(x, 0, -1), m(2, 3, 4)),
    Usage("np.rollaxis(x, -1, -3)", lambda x: np.rollaxis(x, -1, -3), m(2, 3, 4)),
    # meshgrid
    Usage("X, Y = np.meshgrid(a, b)", lambda a, b: (lambda X, Y: X * Y + 2 * X)(*np.meshgrid(a, b)),
          two((3,), (2,)), wrt=(0, 1)),
    Usage("np.meshgrid(a, b, c, indexing='ij')",
          lambda a, b, c: _pieces(np.meshgrid(a, b, c, indexing="ij")),
          lambda r: (r.standard_normal(2), r.standard_normal(3), r.standard_normal(2)), wrt=(0, 1, 2)),
    # scatter-add and writes through repeated indices, negative-step slices (numpy-face values)
    Usage("np.add.at(np.zeros_like(x), idx, v * x[idx])", _scatter_add, two((3,), (5,)), wrt=(0, 1)),
    Usage("z[idx] += v; z[idx] = v with repeats", _write_repeats, two((3,), (4,)), wrt=(0, 1)),
    Usage("z[::-2] = v", _write_negative_step, two((5,), (3,)), wrt=(0, 1)),
    Usage("z[[0, 0, 1]] = v with v of shape (1, 3)", _write_leading_one, two((4,), (1, 3)), wrt=(0, 1)),
    Usage("x[::-1]", lambda x: _face(x)[::-1], m(5)),
    Usage("x[:, ::-2]", lambda x: _face(x)[:, ::-2], m(3, 5)),
    Usage("x[4:0:-3, ::-1]", lambda x: _face(x)[4:0:-3, ::-1], m(6, 2)),
    # integer arrays: values only, eager and compiled, integer dtype kept
    Usage("np.flip(i) int", lambda i: np.flip(i, 0), ints(3, 4), grad=False),
    Usage("np.tril(i) int", lambda i: np.tril(i), ints(3, 3), grad=False),
    Usage("np.pad(i, 1, constant_values=7) int", lambda i: np.pad(i, 1, constant_values=7), ints(2, 3), grad=False),
    Usage("np.repeat(i, [1, 2], axis=0) int", lambda i: np.repeat(i, [1, 2], axis=0), ints(2, 3), grad=False),
    Usage("np.roll(i, 1) int", lambda i: np.roll(i, 1), ints(2, 3), grad=False),
    Usage("np.diag(i) int", lambda i: np.diag(i), ints(3), grad=False),
    # in a loss written the numpy way
    Usage("np.sum(np.diff-like via roll)", lambda x: np.sum((np.roll(x, 1) - x) ** 2), m(6)),
    Usage("np.trace(np.tril(x) @ x.T)", lambda x: np.trace(np.tril(x) @ x.T), m(3, 3)),
]


@params(ROWS)
def test_usage(usage):
    check(usage)


# --- beyond the table: numpy-face slicing, writes through repeated indices, torch names ---------


NEGATIVE_STEPS = [np.s_[::-1], np.s_[:, ::-2], np.s_[5:1:-1], np.s_[-2::-3, 1], np.s_[1:5:-1],
                  np.s_[..., 10:-10:-4], np.s_[None, :2:-2, ::-1], np.s_[::-1, [0, 2, 2]],
                  np.s_[[1, 1, 4], ::-2]]


def _numpy_face(t):
    t._numpy_face = True  # what a value traced for a function given numpy arrays is
    return t


@pytest.mark.parametrize("key", NEGATIVE_STEPS, ids=[str(k) for k in NEGATIVE_STEPS])
def test_negative_step_slices_on_numpy_face_values(key):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 6))
    want = x[key]
    w = rng.standard_normal(want.shape)
    fd = _finite_differences(lambda a: np.sum(a[key] * w), (x,), (0,))[0]

    t = _numpy_face(symgrad.tensor(x, requires_grad=True))
    got = t[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.detach().numpy(), want)
    (got * symgrad.tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    fresh = _numpy_face(symgrad.tensor(x, requires_grad=True))
    # (gradgradcheck can't perturb the empty grad_outputs of an empty slice; its value and gradient are checked)
    assert want.size == 0 or symgrad.autograd.gradgradcheck(lambda a: _numpy_face(a)[key] ** 2, [fresh])

    def loss(a):
        return np.sum(_numpy_face(a)[key] * w)
    value, grad = symgrad.value_and_grad(loss)(x)
    np.testing.assert_allclose(value, np.sum(want * w), rtol=1e-12)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


@needs_torch
def test_negative_step_slices_on_torch_face_tensors_raise_as_torch_does():
    t = symgrad.tensor(np.arange(6.0))
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        torch.arange(6.0)[::-1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        symgrad.tensor(np.ones((3, 3)))[[0, 1], ::-1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        t[::-2] = symgrad.tensor(np.ones(3))
    with pytest.raises(ValueError, match="step must be greater than zero"):
        torch.zeros(6)[::-2] = torch.ones(3)


INDEX = np.array([0, 2, 0, 3, 3, 3])


def _add_at(x, v):
    z = x * 1.0
    np.add.at(z, INDEX, v)
    np.subtract.at(z, [1, 1], v[:2])
    return z


def test_np_add_at_accumulates_repeats_eager_and_compiled():
    rng = np.random.default_rng(2)
    x, v, w = rng.standard_normal(4), rng.standard_normal(6), rng.standard_normal(4)
    want = _add_at(x, v)
    fd = _finite_differences(lambda a, b: np.sum(_add_at(a, b) * w), (x, v), (0, 1))
    tx, tv = symgrad.tensor(x, requires_grad=True), symgrad.tensor(v, requires_grad=True)
    got = _add_at(tx, tv)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12)
    (got * symgrad.tensor(w)).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), fd[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tv.grad.numpy(), fd[1], rtol=1e-6, atol=1e-8)
    value, grads = symgrad.value_and_grad(lambda a, b: np.sum(_add_at(a, b) * w), argnums=(0, 1))(x, v)
    np.testing.assert_allclose(value, np.sum(want * w), rtol=1e-12)
    for g, f in zip(grads, fd):
        np.testing.assert_allclose(g, f, rtol=1e-6, atol=1e-8)


def test_np_add_at_into_an_ndarray_with_tensor_values_says_what_to_do():
    with pytest.raises(TypeError, match=r"numpy\.add\.at into a numpy array.*accumulate into a tensor"):
        np.add.at(np.zeros(4), INDEX, symgrad.tensor(np.ones(6), requires_grad=True))


def _write_last_wins(x, v, index):
    z = x * 1.0
    z[index] += v     # numpy: a repeated position keeps its last write, it does not accumulate
    z[index[:2]] = 2 * v[:2]
    return z


@pytest.mark.parametrize("index", [INDEX, np.array([1, 1, 1, 1, 1, 0])], ids=["mixed", "mostly-one"])
def test_fancy_index_writes_with_repeats_follow_numpy_on_numpy_face_values(index):
    rng = np.random.default_rng(3)
    x, v, w = rng.standard_normal(4), rng.standard_normal(6), rng.standard_normal(4)
    want = _write_last_wins(x, v, index)
    fd = _finite_differences(lambda a, b: np.sum(_write_last_wins(a, b, index) * w), (x, v), (0, 1))

    def numpy_face_fn(a, b, i):
        z = _numpy_face(a * 1.0)
        z[i] += b
        z[i[:2]] = 2 * b[:2]
        return z

    tx, tv = symgrad.tensor(x, requires_grad=True), symgrad.tensor(v, requires_grad=True)
    got = numpy_face_fn(tx, tv, index)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12)
    (got * symgrad.tensor(w)).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), fd[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tv.grad.numpy(), fd[1], rtol=1e-6, atol=1e-8)
    # compiled, with the index an argument: the last-write mask is computed at run time
    step = symgrad.value_and_grad(lambda a, b, i: np.sum(numpy_face_fn(a, b, i) * w), argnums=(0, 1))
    for idx in (index, np.array([3, 2, 1, 0, 3, 2])):
        want_fd = _finite_differences(lambda a, b, idx=idx: np.sum(_write_last_wins(a, b, idx) * w), (x, v), (0, 1))
        value, grads = step(x, v, idx)
        np.testing.assert_allclose(value, np.sum(_write_last_wins(x, v, idx) * w), rtol=1e-12)
        for g, f in zip(grads, want_fd):
            np.testing.assert_allclose(g, f, rtol=1e-6, atol=1e-8)


@needs_torch
def test_fancy_index_writes_with_repeats_keep_torch_semantics_on_torch_face_tensors():
    rng = np.random.default_rng(4)
    x, v, w = rng.standard_normal(4), rng.standard_normal(6), rng.standard_normal(4)
    results = []
    for lib in (symgrad, torch):
        tx, tv = lib.tensor(x, requires_grad=True), lib.tensor(v, requires_grad=True)
        z = tx * 1.0
        z[lib.tensor(INDEX)] += tv
        (z * lib.tensor(w)).sum().backward()
        results.append([np.asarray(a.detach().numpy()) for a in (z, tx.grad, tv.grad)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12)


# torch-named functions against torch: value, gradient, float32 kept
TORCH_CASES = [
    ("flip", lambda L, x: L.flip(x, (0, -1)), (3, 4)),
    ("fliplr", lambda L, x: L.fliplr(x), (3, 4)),
    ("flipud", lambda L, x: L.flipud(x), (3, 4)),
    ("roll", lambda L, x: L.roll(x, 5), (3, 4)),
    ("roll dims", lambda L, x: L.roll(x, (1, -2), (0, 1)), (3, 4)),
    ("tile", lambda L, x: L.tile(x, (2, 1, 3)), (2, 3)),
    ("repeat_interleave", lambda L, x: L.repeat_interleave(x, 2, 1), (2, 3)),
    ("repeat_interleave flat", lambda L, x: L.repeat_interleave(x, 3), (2, 3)),
    ("repeat_interleave counts", lambda L, x: L.repeat_interleave(x, L.tensor([1, 0, 2]), 1), (2, 3)),
    ("tril", lambda L, x: L.tril(x, -1), (3, 4)),
    ("triu", lambda L, x: L.triu(x, 1), (2, 3, 4)),
    ("diag vector", lambda L, x: L.diag(x, -1), (3,)),
    ("diag matrix", lambda L, x: L.diag(x, 1), (3, 4)),
    ("diagonal", lambda L, x: L.diagonal(x, 1, 2, 0), (3, 2, 4)),
    ("vstack", lambda L, x: L.vstack([x, 2 * x]), (3,)),
    ("hstack", lambda L, x: L.hstack([x, 2 * x]), (2, 3)),
    ("dstack", lambda L, x: L.dstack([x, 2 * x]), (2, 3)),
    ("column_stack", lambda L, x: L.column_stack([x, 2 * x]), (3,)),
    ("split", lambda L, x: L.cat([p * (k + 1) for k, p in enumerate(L.split(x, 2, 1))], 1), (2, 5)),
    ("split sizes", lambda L, x: L.cat([p * (k + 1) for k, p in enumerate(L.split(x, [1, 2], 0))], 0), (3, 2)),
    ("tensor_split", lambda L, x: L.cat([p * (k + 1) for k, p in enumerate(L.tensor_split(x, 3, 1))], 1), (2, 7)),
    ("tensor_split indices",
     lambda L, x: L.cat([p * (k + 1) for k, p in enumerate(L.tensor_split(x, [1, 4], 0))], 0), (5, 2)),
    ("take", lambda L, x: L.take(x, L.tensor([[0, 5], [5, 11]])), (3, 4)),
    ("take_along_dim", lambda L, x: L.take_along_dim(x, L.tensor([[2, 0, 2], [1, 1, 0]]), 1), (2, 3)),
    ("take_along_dim flat", lambda L, x: L.take_along_dim(x, L.tensor([4, 4, 0])), (2, 3)),
    ("movedim", lambda L, x: L.movedim(x, (0, 1), (2, 0)), (2, 3, 4)),
    ("atleast_3d", lambda L, x: L.atleast_3d(x), (3,)),
    ("rot90", lambda L, x: L.rot90(x, 1, (0, 1)), (3, 4)),
    ("rot90 k=-1", lambda L, x: L.rot90(x, -1, (2, 0)), (2, 3, 4)),
    ("rot90 k=2", lambda L, x: L.rot90(x, 2, (1, 2)), (2, 3, 4)),
    ("meshgrid", lambda L, x: L.stack(L.meshgrid(x, 2 * x[:2], indexing="xy")[::-1], 0), (3,)),
]


@needs_torch
@pytest.mark.parametrize("fn,shape", [c[1:] for c in TORCH_CASES], ids=[c[0] for c in TORCH_CASES])
def test_torch_named_functions_match_torch(fn, shape):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    out = {}
    for lib in (symgrad, torch):
        t = lib.tensor(x, requires_grad=True)
        y = fn(lib, t)
        w = lib.tensor(np.random.default_rng(6).standard_normal(tuple(y.shape)))
        (y * w).sum().backward()
        out[lib.__name__] = (y.detach().numpy(), t.grad.numpy())
    for a, b in zip(out["symgrad"], out["torch"]):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    t32 = symgrad.tensor(x.astype(np.float32), requires_grad=True)
    y32 = fn(symgrad, t32)
    (y32 * 1.5).sum().backward()
    assert y32.dtype == symgrad.float32 and t32.grad.dtype == symgrad.float32


FLOAT32_ROWS = [lambda x: np.flip(x, 1), lambda x: np.roll(x, 1, axis=0), lambda x: np.pad(x, 1, mode="reflect"),
                lambda x: np.pad(x, 1, constant_values=0.5), lambda x: np.tril(x), lambda x: np.diag(x),
                lambda x: np.hstack([x, x]), lambda x: np.take(x, [0, 3, 3]), lambda x: np.repeat(x, 2, 0)]


@pytest.mark.parametrize("fn", FLOAT32_ROWS)
def test_float32_stays_float32(fn):
    x = np.random.default_rng(7).standard_normal((3, 3)).astype(np.float32)
    t = symgrad.tensor(x, requires_grad=True)
    y = fn(t)
    assert y.dtype == symgrad.float32
    np.testing.assert_array_equal(y.detach().numpy(), fn(x))
    y.sum().backward()
    assert t.grad.dtype == symgrad.float32
    value, grad = symgrad.value_and_grad(lambda a: np.sum(fn(a)))(x)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(value, np.sum(fn(x)), rtol=1e-6)


@pytest.mark.parametrize("call,error,message", [
    (lambda t: np.pad(t, 1, mode="linear_ramp"), ValueError, r"numpy\.pad: mode='linear_ramp' is not supported"),
    (lambda t: np.pad(t, 1, mode="mean"), ValueError, r"numpy\.pad: mode='mean'"),
    (lambda t: np.pad(t, 1, mode="reflect", reflect_type="odd"), ValueError, r"numpy\.pad: reflect_type='odd'"),
    (lambda t: np.pad(t, 1, mode="edge", constant_values=2), ValueError,
     r"numpy\.pad: unsupported keyword arguments for mode 'edge'"),
    (lambda t: np.meshgrid(t[0], t[1], sparse=True), TypeError, r"numpy\.meshgrid with sparse=True"),
    (lambda t: np.pad(t, ((1, 2), (3, 4), (5, 6))), ValueError, r"numpy\.pad: pad_width"),
    (lambda t: np.split(t, 4), ValueError, r"numpy\.split: array split does not result in an equal division"),
    (lambda t: np.vsplit(t[0], 2), ValueError, r"numpy\.vsplit only works on arrays of 2 or more dimensions"),
    (lambda t: np.take(t, symgrad.tensor([0, 1]), mode="wrap"), TypeError, r"numpy\.take with mode='wrap'"),
    (lambda t: np.take(t, [0.5]), TypeError, r"numpy\.take: indices must be integers"),
    (lambda t: np.diag(t[None]), ValueError, r"numpy\.diag: Input must be 1- or 2-d"),
    (lambda t: np.roll(t, 1, axis=2), np.exceptions.AxisError, r"numpy\.roll: axis 2 is out of bounds"),
    (lambda t: np.moveaxis(t, [0], [1, 0]), ValueError, r"numpy\.moveaxis"),
])
def test_unsupported_patterns_name_the_numpy_function(call, error, message):
    t = symgrad.tensor(np.ones((6, 2)), requires_grad=True)
    with pytest.raises(error, match=message):
        call(t)


METHOD_FORMS = ["x.flip(0)", "x.flip(0, 1)", "x.flip((1,))", "x.fliplr()", "x.tile(2, 1)", "x.tile((2,))",
                "x.roll(1, 1)", "x.tril(1)", "x.triu()", "x.diagonal(1)", "x.diag()", "x.trace()",
                "x.movedim(0, 1)", "x.repeat_interleave(2, dim=0)", "x.take_along_dim(I([[0], [1], [2]]), 1)",
                "x.take(I([1, 5]))", "x.split(2, 1)[1]", "x.tensor_split(3)[2]"]


@needs_torch
@pytest.mark.parametrize("expr", METHOD_FORMS)
def test_torch_method_forms_match_torch(expr):
    x = np.random.default_rng(8).standard_normal((3, 4))
    got = eval(expr, {"x": symgrad.tensor(x), "I": symgrad.tensor})
    want = eval(expr, {"x": torch.tensor(x), "I": torch.tensor})
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("fn", [lambda x, r: np.repeat(x, r), lambda x, r: np.split(x, r)[0]],
                         ids=["np.repeat", "np.split"])
def test_shape_deciding_arguments_traced_as_inputs_are_refused(fn):
    with pytest.raises(symgrad.TraceError, match=r"traced tensor is not supported in a compiled function"):
        symgrad.value_and_grad(lambda x, r: np.sum(fn(x, r)), strict=True)(np.ones(4), np.array([1, 2, 0, 1]))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_compiled_forward_and_backward_of_a_shape_heavy_function(backend):
    def f(x, y):
        gathered = np.roll(np.flip(x, 0), 1, axis=1)[[0, 0, 1, 2, 2]][:, [0, 1, 2, 3, 0, 1]]
        a = np.pad(np.tril(x), 1, mode="edge") + gathered
        b = np.vstack(np.split(np.tile(y, 2), 2)) @ np.diag(np.diagonal(np.rot90(a))[:5])
        return np.sum(np.take_along_axis(b, np.array([[1], [0]]), 1)) + np.trace(a)

    rng = np.random.default_rng(9)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal(5)
    leaves = [symgrad.tensor(x, requires_grad=True), symgrad.tensor(y, requires_grad=True)]
    eager = f(*leaves)
    eager.backward()
    compiled = [symgrad.tensor(x, requires_grad=True), symgrad.tensor(y, requires_grad=True)]
    out = symgrad.compile(f, backend=backend)(*compiled)
    out.backward()
    np.testing.assert_allclose(out.item(), f(x, y), rtol=1e-12)
    np.testing.assert_allclose(eager.item(), f(x, y), rtol=1e-12)
    fd = _finite_differences(f, (x, y), (0, 1))
    for a, b, g in zip(compiled, leaves, fd):
        np.testing.assert_allclose(a.grad.numpy(), g, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(b.grad.numpy(), g, rtol=1e-6, atol=1e-8)


# --- property check: every function of the family moves input entries around -------------------
# Applied to the array of positions, a function says where each output entry comes from; the gradient
# of sum(f(x) * w) is then w scattered back to those positions, exactly.


@st.composite
def _shape_case(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axis = draw(st.integers(-ndim, ndim - 1))
    kind = draw(st.sampled_from(["flip", "roll", "tile", "repeat", "pad", "split", "take", "tril", "diagonal",
                                 "moveaxis", "rot90", "slice"]))
    if kind == "flip":
        return shape, lambda a: np.flip(a, axis=axis), f"flip axis={axis}"
    if kind == "roll":
        s = draw(st.integers(-6, 6))
        return shape, lambda a: np.roll(a, s, axis=axis), f"roll {s} axis={axis}"
    if kind == "tile":
        reps = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)))
        return shape, lambda a: np.tile(a, reps), f"tile {reps}"
    if kind == "repeat":
        counts = draw(st.lists(st.integers(0, 3), min_size=shape[axis], max_size=shape[axis]))
        return shape, lambda a: np.repeat(a, counts, axis=axis), f"repeat {counts} axis={axis}"
    if kind == "pad":
        widths = [tuple(draw(st.lists(st.integers(0, 3), min_size=2, max_size=2))) for _ in shape]
        mode = draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
        if mode == "reflect" and any(n == 1 and (b or a) for n, (b, a) in zip(shape, widths)):
            mode = "symmetric"  # numpy's reflect of a length-1 axis repeats it; covered by edge
        if mode == "constant":
            return shape, lambda a: np.pad(a, widths, constant_values=-1), f"pad {widths} constant"
        return shape, lambda a: np.pad(a, widths, mode=mode), f"pad {widths} {mode}"
    if kind == "split":
        k = draw(st.integers(1, 4))
        return shape, lambda a: np.concatenate([np.ravel(p) for p in np.array_split(a, k, axis=axis)[::-1]]), \
            f"array_split {k} axis={axis}"
    if kind == "take":
        idx = draw(st.lists(st.integers(-shape[axis], shape[axis] - 1), min_size=0, max_size=5))
        return shape, lambda a: np.take(a, np.array(idx, dtype=int), axis=axis), f"take {idx} axis={axis}"
    if kind == "tril":
        k = draw(st.integers(-3, 3))
        # zeroed entries come from no input entry: shifted by one, they read -1 in the positions' version
        tri = draw(st.sampled_from([np.tril, np.triu]))
        return shape, lambda a: tri(a + 1, k) - 1, f"{tri.__name__} k={k}"
    if kind == "diagonal" and ndim >= 2:
        off = draw(st.integers(-3, 3))
        return shape, lambda a: np.diagonal(a, off, 0, ndim - 1), f"diagonal {off}"
    if kind == "rot90" and ndim >= 2:
        k = draw(st.integers(-4, 4))
        return shape, lambda a: np.rot90(a, k, axes=(ndim - 1, 0)), f"rot90 {k}"
    if kind == "moveaxis":
        dst = draw(st.integers(-ndim, ndim - 1))
        return shape, lambda a: np.moveaxis(a, axis, dst), f"moveaxis {axis}->{dst}"
    start, stop = draw(st.integers(-5, 5)), draw(st.integers(-5, 5))
    step = draw(st.sampled_from([-3, -2, -1, 1, 2]))
    key = (slice(None),) * (axis % ndim) + (slice(start, stop, step),)
    return shape, lambda a: (_face(a) if isinstance(a, symgrad.Tensor) else a)[key], f"slice {key}"


@settings(max_examples=300, deadline=None)
@given(_shape_case())
def test_family_moves_entries_as_numpy_does(case):
    shape, fn, label = case
    n = int(np.prod(shape))
    x = np.random.default_rng(n).standard_normal(shape)
    source = fn(np.arange(n).reshape(shape))              # which input entry each output entry copies
    want = fn(x)
    # the oracle itself: each output entry is the input entry it names ((x + 1) - 1 rounds, hence allclose)
    assert np.allclose(np.where(source >= 0, x.reshape(-1)[np.maximum(source, 0)], want), want,
                       rtol=1e-15, atol=1e-15), label
    w = np.random.default_rng(n + 1).standard_normal(want.shape)
    expected = np.zeros(n)
    np.add.at(expected, source[source >= 0], w[source >= 0])

    t = symgrad.tensor(x, requires_grad=True)
    got = fn(t)
    np.testing.assert_array_equal(got.detach().numpy(), want, err_msg=label)
    if want.size:
        (got * symgrad.tensor(w)).sum().backward()
        # (entries copied several times sum their weights in another order: rounding only)
        np.testing.assert_allclose(t.grad.numpy().reshape(-1), expected, rtol=1e-13, atol=1e-15, err_msg=label)
