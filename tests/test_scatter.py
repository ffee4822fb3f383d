"""Scatter loops (codegen/scatter.py): gathers and scatter-adds compiled to Numba loops.

Values and gradients against numpy references (np.add.at) and eager symgrad, with repeated and
negative indices, 1-d and 2-d index arrays, several index arrays, float32/float64, serial and
parallel kernels; out-of-range indices raise IndexError.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import symgrad

pytest.importorskip("numba")

# parallel scatter kernels take several times longer to build: the CI profile builds them in the tests
# that name their parallel cases (the embedding bag, gathers in loops, index dtypes, out-of-range
# indices, bit-for-bit equality with serial) and SYMGRAD_FUZZ=long in every test taking PARALLEL
LONG = os.environ.get("SYMGRAD_FUZZ") == "long"
PARALLEL = [False, True] if LONG else [False]


def _vg(fn, argnums, parallel):
    return symgrad.value_and_grad(symgrad.compile(fn, parallel=parallel), argnums=argnums)


def _joint_source(vg, args, argnums):
    return vg.compiled.kernels_for(*args, wrt=list(argnums), joint_kernel=True).joint_source


def _eager(fn, args, argnums):
    leaves = [symgrad.tensor(a, requires_grad=i in argnums) if isinstance(a, np.ndarray) and
              a.dtype.kind == "f" else a for i, a in enumerate(args)]
    out = fn(*leaves)
    out.backward()
    return out.item(), [leaves[i].grad.numpy() for i in argnums]


def _compiled_matching_eager(loss, args, parallel, tol):
    """Compiled value and gradients (for every argument) equal eager symgrad's; returns the compiled
    gradients and the joint kernel's source."""
    argnums = tuple(range(len(args)))
    vg = _vg(loss, argnums, parallel)
    value, grads = vg(*args)
    eager_value, eager_grads = _eager(loss, args, argnums)
    np.testing.assert_allclose(value, eager_value, **tol)
    for g, e in zip(grads, eager_grads):
        np.testing.assert_allclose(g, e, **tol)
    return grads, _joint_source(vg, args, argnums)


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


# --- the embedding bag: h[bag] += E[tok]; loss = sum(tanh(h @ W)) --------------------------------

def _bag_problem(dtype, seed=0, vocab=40, dim=5, tokens=300, bags=17, k=3, negative=False):
    r = np.random.default_rng(seed)
    E = r.standard_normal((vocab, dim)).astype(dtype)
    W = r.standard_normal((dim, k)).astype(dtype)
    tok = r.integers(0, vocab, tokens)
    bag = np.sort(r.integers(0, bags, tokens))
    if negative:   # the same rows, counted from the end
        tok = np.where(r.random(tokens) < 0.5, tok - vocab, tok)
        bag = np.where(r.random(tokens) < 0.5, bag - bags, bag)
    return E, W, tok, bag, bags


def _bag_reference(E, W, tok, bag, bags):
    h = np.zeros((bags, E.shape[1]), E.dtype)
    np.add.at(h, bag, E[tok])
    z = np.tanh(h @ W)
    g = (1 - z * z).astype(E.dtype)
    gE = np.zeros_like(E)
    np.add.at(gE, tok, (g @ W.T)[bag])
    return z.sum(dtype=np.float64), gE, h.T @ g


# parallel kernels take several times longer to build: one of the four dtype/sign pairs in the CI
# profile (float32: the scatters' sums in a parallel loop), a second under SYMGRAD_FUZZ=long
@pytest.mark.parametrize("parallel,dtype,negative",
                         [(False, d, n) for d in (np.float64, np.float32) for n in (False, True)]
                         + [(True, np.float32, False)] + ([(True, np.float64, True)] if LONG else []))
def test_embedding_bag_values_and_gradients(parallel, dtype, negative):
    E, W, tok, bag, bags = _bag_problem(dtype, negative=negative)

    def loss(E, W):
        h = symgrad.zeros((bags, E.shape[1]), dtype=E.dtype)
        np.add.at(h, bag, E[tok])
        return np.sum(np.tanh(h @ W))

    vg = _vg(loss, (0, 1), parallel)
    value, (gE, gW) = vg(E, W)
    ref_value, ref_gE, ref_gW = _bag_reference(E, W, tok, bag, bags)
    np.testing.assert_allclose(value, ref_value, **_tol(dtype))
    np.testing.assert_allclose(gE, ref_gE, **_tol(dtype))
    np.testing.assert_allclose(gW, ref_gW, **_tol(dtype))
    eager_value, (eE, eW) = _eager(loss, (E, W), (0, 1))
    np.testing.assert_allclose(gE, eE, **_tol(dtype))
    source = _joint_source(vg, (E, W), (0, 1))
    # both scatters are loops reading E / the gradient through the gather's index: no E[tok] array
    assert source.count("bad_, which_ = scatter_") == 2
    assert "op_index_Tensor" not in source and "op_index_put" not in source
    assert ("prange(" in source) == parallel


@pytest.mark.parametrize("parallel", PARALLEL)
def test_index_arrays_as_arguments(parallel):
    """Indices passed at call time (graph inputs) are read by the kernels; a new index is used."""
    E, W, tok, bag, bags = _bag_problem(np.float64, seed=1)

    def loss(E, W, tok, bag):
        h = symgrad.zeros((bags, E.shape[1]), dtype=E.dtype)
        np.add.at(h, bag, E[tok])
        return np.sum(np.tanh(h @ W))

    vg = _vg(loss, (0, 1), parallel)
    for seed in (1, 2):
        _, _, tok, bag, _ = _bag_problem(np.float64, seed=seed)
        value, (gE, gW) = vg(E, W, tok, bag)
        ref_value, ref_gE, ref_gW = _bag_reference(E, W, tok, bag, bags)
        np.testing.assert_allclose(value, ref_value, rtol=1e-12)
        np.testing.assert_allclose(gE, ref_gE, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gW, ref_gW, rtol=1e-12, atol=1e-12)
    assert "op_index" not in _joint_source(vg, (E, W, tok, bag), (0, 1))
    bad = bag.copy()
    bad[7] = bags   # one past the end
    with pytest.raises(IndexError, match=f"index {bags} is out of bounds for axis 0 with size {bags}"):
        vg(E, W, tok, bad)
    bad = tok.copy()
    bad[-1] = -E.shape[0] - 1
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 40"):
        vg(E, W, bad, bag)


def test_parallel_scatter_equals_serial_bit_for_bit():
    E, W, tok, bag, bags = _bag_problem(np.float64, seed=3, tokens=5000, bags=64)
    # unsorted bags with many repeats: rows are shared between every chunk of positions
    bag = np.random.default_rng(4).integers(0, bags, tok.size)

    def loss(E, W):
        h = symgrad.zeros((bags, E.shape[1]), dtype=E.dtype)
        np.add.at(h, bag, E[tok])
        return np.sum(np.tanh(h @ W))

    serial = _vg(loss, (0, 1), False)(E, W)
    parallel = _vg(loss, (0, 1), True)(E, W)
    assert serial[0] == pytest.approx(parallel[0], rel=1e-13)   # the loss sums chunks in another order
    # the scatter-adds (h, and so gW = h.T @ g; gE) add each row's values in position order in both
    assert all(np.array_equal(a, b) for a, b in zip(serial[1], parallel[1]))


# --- other index forms ------------------------------------------------------------------------------

@pytest.mark.parametrize("parallel", PARALLEL)
def test_two_dimensional_index_arrays(parallel):
    r = np.random.default_rng(5)
    E = r.standard_normal((9, 4))
    tok = r.integers(-9, 9, (6, 7))           # negative and repeated
    bag = r.integers(0, 3, (6, 7))

    def loss(E):
        h = symgrad.zeros((3, 4), dtype=E.dtype)
        np.add.at(h, bag, E[tok] * 2.0)
        return np.sum(np.sin(h))

    value, (g,) = _vg(loss, (0,), parallel)(E)
    h = np.zeros((3, 4))
    np.add.at(h, bag, E[tok] * 2.0)
    ref_g = np.zeros_like(E)
    np.add.at(ref_g, tok, 2.0 * np.cos(h)[bag])
    np.testing.assert_allclose(value, np.sin(h).sum(), rtol=1e-12)
    np.testing.assert_allclose(g, ref_g, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("parallel", PARALLEL)
def test_several_index_arrays(parallel):
    """x[i, j] (a gather over two dims) and its gradient, a scatter-add at (i, j)."""
    r = np.random.default_rng(6)
    x = r.standard_normal((5, 6, 2))
    i = np.array([0, 4, 4, -1, 2, 0, 0])
    j = np.array([1, 5, 5, 5, -6, 1, 1])

    def loss(x):
        return np.sum(np.exp(x[i, j]) * (x * x).sum())

    vg = _vg(loss, (0,), parallel)
    value, (g,) = vg(x)
    eager_value, (eg,) = _eager(loss, (x,), (0,))
    np.testing.assert_allclose(value, eager_value, rtol=1e-12)
    np.testing.assert_allclose(g, eg, rtol=1e-12, atol=1e-12)
    assert "scatter_" in _joint_source(vg, (x,), (0,))


@pytest.mark.parametrize("parallel", PARALLEL)
def test_scatter_into_another_gradient(parallel):
    """The gradient of x[idx] added to a dense gradient of x: scattered into it (no zeros array)."""
    r = np.random.default_rng(7)
    x = r.standard_normal((12, 3))
    idx = np.array([3, 3, -1, 0, 11, 3])

    def loss(x):
        return np.sum(x * x) + np.sum(np.sin(x[idx]))

    vg = _vg(loss, (0,), parallel)
    value, (g,) = vg(x)
    ref = 2 * x
    np.add.at(ref, idx, np.cos(x[idx]))
    np.testing.assert_allclose(value, np.sum(x * x) + np.sin(x[idx]).sum(), rtol=1e-12)
    np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)
    source = _joint_source(vg, (x,), (0,))
    assert "scatter_into" not in source and "bad_, which_ = scatter_" in source


@pytest.mark.parametrize("parallel", PARALLEL)
def test_one_dimensional_target(parallel):
    x = np.linspace(-1.0, 1.0, 7)
    idx = np.array([6, 0, 0, -2, 3])

    def loss(x):
        return np.sum(np.tanh(x[idx]) ** 2)

    value, (g,) = _vg(loss, (0,), parallel)(x)
    eager_value, (eg,) = _eager(loss, (x,), (0,))
    np.testing.assert_allclose(value, eager_value, rtol=1e-12)
    np.testing.assert_allclose(g, eg, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("where", ["gather", "scatter"])
def test_out_of_range_raises(parallel, where):
    E = np.ones((4, 2))
    tok = np.array([0, 1, 4 if where == "gather" else 2])
    bag = np.array([0, -4 if where == "scatter" else 1, 2])

    def loss(E):
        h = symgrad.zeros((3, 2), dtype=E.dtype)
        np.add.at(h, bag, E[tok])
        return np.sum(h * h)

    with pytest.raises(IndexError):
        _eager(loss, (E,), (0,))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size " + ("4" if where == "gather" else "3")):
        _vg(loss, (0,), parallel)(E)


def test_finite_differences():
    E, W, tok, bag, bags = _bag_problem(np.float64, seed=8, vocab=6, dim=3, tokens=20, bags=4, k=2)

    def loss(E, W):
        h = symgrad.zeros((bags, E.shape[1]), dtype=E.dtype)
        np.add.at(h, bag, E[tok])
        return np.sum(np.tanh(h @ W))

    _, (gE, _) = _vg(loss, (0, 1), False)(E, W)
    f = symgrad.compile(loss)
    eps = 1e-6
    for a, b in [(0, 0), (tok[3], 2), (5, 1)]:
        d = np.zeros_like(E)
        d[a, b] = eps
        fd = (float(f(E + d, W)) - float(f(E - d, W))) / (2 * eps)
        assert abs(fd - gE[a, b]) < 1e-7


# --- the torch face: index_put(accumulate=True), embedding -------------------------------------------

def _assert_matches_torch(torch, loss, arrays, parallel):
    """``loss(lib, *tensors)`` compiled by symgrad (value and every gradient) equals torch's eager run."""
    argnums = tuple(range(len(arrays)))
    value, grads = _vg(lambda *a: loss(symgrad, *a), argnums, parallel)(*arrays)
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    t_value = loss(torch, *leaves)
    t_value.backward()
    np.testing.assert_allclose(value, t_value.item(), rtol=1e-12)
    for g, leaf in zip(grads, leaves):
        np.testing.assert_allclose(g, leaf.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("parallel", PARALLEL)
def test_torch_index_put_and_embedding_match_torch(parallel):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(9)
    E, W = r.standard_normal((10, 4)), r.standard_normal((4, 2))
    tok = r.integers(0, 10, 30)
    bag = r.integers(0, 5, 30)

    def loss(lib, E, W):
        rows = lib.nn.functional.embedding(lib.tensor(tok), E)
        h = lib.index_put(lib.zeros((5, 4), dtype=E.dtype), (lib.tensor(bag),), rows, accumulate=True)
        return lib.tanh(h @ W).sum()

    _assert_matches_torch(torch, loss, (E, W), parallel)


# --- gathers read inside elementwise loops -----------------------------------------------------------

# parallel kernels take several times longer to build: one of the four dtype/shape pairs in the CI
# profile (a 2-D index: a nest of loops over it), a second under SYMGRAD_FUZZ=long
@pytest.mark.parametrize("parallel,dtype,index_shape",
                         [(False, d, s) for d in (np.float64, np.float32) for s in ((6,), (2, 3))]
                         + [(True, np.float64, (2, 3))] + ([(True, np.float32, (6,))] if LONG else []))
def test_gather_read_in_loop(parallel, dtype, index_shape):
    r = np.random.default_rng(10)
    E = r.standard_normal((10, 4)).astype(dtype)
    w = r.standard_normal(4).astype(dtype)
    tok = np.array([3, -1, 3, 0, 9, -10]).reshape(index_shape)

    def loss(E, w):
        return np.sum(np.tanh(E[tok]) * w)

    _, source = _compiled_matching_eager(loss, (E, w), parallel, _tol(dtype))
    assert "op_index_Tensor" not in source and "E.shape[0]" in source   # E read through the index


@pytest.mark.parametrize("parallel", PARALLEL)
def test_gather_read_in_loop_out_of_range(parallel):
    x = np.arange(5.0)

    def loss(x, idx):
        return np.sum(np.exp(x[idx]))

    vg = _vg(loss, (0,), parallel)
    value, (g,) = vg(x, np.array([0, -5, 4, 4]))
    np.testing.assert_allclose(value, np.exp(x[[0, -5, 4, 4]]).sum(), rtol=1e-14)
    np.testing.assert_allclose(g, [2.0, 0, 0, 0, 2 * np.exp(4.0)], rtol=1e-14)   # -5 is row 0
    for bad in (5, -6):
        with pytest.raises(IndexError, match=f"index {bad} is out of bounds for axis 0 with size 5"):
            vg(x, np.array([0, bad, 1, 2]))


@pytest.mark.parametrize("parallel,index_dtype",
                         [(False, np.int32), (False, np.uint8), (False, np.int64), (True, np.uint8)])
def test_base_with_gradient_and_index_dtypes(parallel, index_dtype):
    """index_put(base, idx, values, accumulate=True): base and values both get gradients."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(11)
    base, vals = r.standard_normal((6, 2)), r.standard_normal((5, 2))
    idx = np.array([5, 0, 5, 2, 5], dtype=index_dtype)

    def loss(lib, base, vals):
        h = lib.index_put(base * 2.0, (lib.tensor(idx.astype(np.int64)),), lib.sin(vals), accumulate=True)
        return (h * h).sum()

    _assert_matches_torch(torch, loss, (base, vals), parallel)

    def np_loss(x, i):   # the index as a graph input of its own dtype
        h = symgrad.zeros((6, 2), dtype=x.dtype)
        np.add.at(h, i, x[i[::-1]])
        return np.sum(h * h)

    x = r.standard_normal((6, 2))
    value, (g,) = _vg(np_loss, (0,), parallel)(x, idx)
    eager_value, (eg,) = _eager(np_loss, (x, idx), (0,))
    np.testing.assert_allclose(value, eager_value, rtol=1e-12)
    np.testing.assert_allclose(g, eg, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("parallel", PARALLEL)
def test_empty_index(parallel):
    E = np.ones((4, 3))
    tok = np.zeros(0, dtype=np.int64)

    def loss(E):
        h = symgrad.zeros((2, 3), dtype=E.dtype)
        np.add.at(h, tok, E[tok])
        return np.sum(np.exp(h))

    value, (g,) = _vg(loss, (0,), parallel)(E)
    assert value == 6.0 and np.array_equal(g, np.zeros((4, 3)))


# --- index arrays after full slices: x[:, idx], np.add.at(h, (slice(None), idx), v) ------------------

# the parallel kernel of a leading-slices scatter (the slices on threads) is built in CI by
# test_add_at_after_a_full_slice_fuses_its_gather; here under the long profile
@pytest.mark.parametrize("parallel,dtype,shape,index_shape",
                         [(p, np.float64, (5, 7) if not p else (3, 4, 7), (6,)) for p in PARALLEL]
                         + [(p, np.float32, (3, 4, 7) if not p else (5, 7), (2, 3)) for p in PARALLEL])
def test_index_after_full_slices(parallel, dtype, shape, index_shape):
    r = np.random.default_rng(12)
    x = r.standard_normal(shape).astype(dtype)
    idx = np.array([3, -1, 3, 0, 6, -7]).reshape(index_shape)
    lead = (slice(None),) * (len(shape) - 1)
    w = r.standard_normal(shape[:-1] + index_shape).astype(dtype)

    def loss(x, w):
        return np.sum(np.tanh(x[lead + (idx,)]) * w)

    (gx, _), source = _compiled_matching_eager(loss, (x, w), parallel, _tol(dtype))
    # the gradient, by numpy: repeated columns accumulate
    ref = np.zeros_like(x)
    np.add.at(ref, lead + (idx,), (1 - np.tanh(x[lead + (idx,)]) ** 2) * w)
    np.testing.assert_allclose(gx, ref, **_tol(dtype))
    assert "op_index_Tensor" not in source and "op_index_put_add" not in source
    assert f"x.shape[{len(shape) - 1}]" in source      # x read through the index inside the loop


@pytest.mark.parametrize("parallel", [False, True])
def test_add_at_after_a_full_slice_fuses_its_gather(parallel):
    """h[:, bag] += E[:, tok] (a column embedding bag): one scatter kernel reads E through tok; its
    sums and the gradient's scatter equal np.add.at's bit for bit (repeated rows add in order)."""
    r = np.random.default_rng(13)
    E, W = r.standard_normal((4, 9)), r.standard_normal((6, 3))
    tok, bag = r.integers(-9, 9, 40), r.integers(0, 6, 40)

    def bag_of(E):
        h = symgrad.zeros((4, 6), dtype=E.dtype)
        np.add.at(h, (slice(None), bag), E[:, tok])
        return h

    h = np.zeros((4, 6))
    np.add.at(h, (slice(None), bag), E[:, tok])
    np.testing.assert_array_equal(symgrad.compile(bag_of, parallel=parallel)(E), h)

    C = r.standard_normal((4, 6))
    vg = _vg(lambda E: np.sum(bag_of(E) * C), (0,), parallel)
    _, (gE,) = vg(E)
    ref_E = np.zeros_like(E)
    np.add.at(ref_E, (slice(None), tok), C[:, bag])
    np.testing.assert_array_equal(gE, ref_E)

    def loss(E, W):
        return np.sum(np.tanh(bag_of(E) @ W))

    vg = _vg(loss, (0, 1), parallel)
    value, (gE, gW) = vg(E, W)
    eager_value, (eE, eW) = _eager(loss, (E, W), (0, 1))
    np.testing.assert_allclose(value, eager_value, rtol=1e-13)
    np.testing.assert_allclose(gE, eE, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gW, eW, rtol=1e-12, atol=1e-13)
    source = _joint_source(vg, (E, W), (0, 1))
    assert "op_index_put" not in source and "op_index_Tensor" not in source


@pytest.mark.parametrize("where", ["gather", "scatter"])
def test_index_after_a_full_slice_out_of_range_names_the_axis(where):
    E = np.ones((2, 4))
    tok = np.array([0, 1, 4 if where == "gather" else 2])
    bag = np.array([0, -4 if where == "scatter" else 1, 2])

    def loss(E):
        h = symgrad.zeros((2, 3), dtype=E.dtype)
        np.add.at(h, (slice(None), bag), E[:, tok])
        return np.sum(h * h)

    with pytest.raises(IndexError):
        _eager(loss, (E,), (0,))
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size " + ("4" if where == "gather" else "3")):
        _vg(loss, (0,), False)(E)
