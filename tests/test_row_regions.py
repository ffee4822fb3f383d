"""codegen/row_regions.py: row kernels for the row-reducing parts of graphs that also multiply matrices.

Every loss is compiled with symgrad and checked against torch (value and gradients); the generated glue
is checked to run the part as a row kernel where one applies.  Compiles cost about a second per graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from codegen.row_regions import region_graph, row_regions

torch = pytest.importorskip("torch")

REGION = "(codegen/row_regions.py)"


def _attention(T, X, Wq, Wk, Wv):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    P = T.softmax(Q @ K.mT * (1.0 / X.shape[-1] ** 0.5), dim=-1)
    return T.sum((P @ V) ** 2)


def _log_softmax(T, X, Wq, Wk, Wv):
    S = (X @ Wq) @ (X @ Wk).mT
    return T.sum(T.tanh(T.log_softmax(S, dim=-1) @ (X @ Wv)))


def _centred(T, X, Wq, Wk, Wv):
    S = (X @ Wq) @ (X @ Wk).mT
    C = S - S.mean(dim=-1, keepdim=True)
    return T.sum(((C * C) @ (X @ Wv)) ** 2)


def _from_min(T, X, Wq, Wk, Wv):
    S = (X @ Wq) @ (X @ Wk).mT
    E = T.exp(S.amin(dim=-1, keepdim=True) - S)
    return T.sum((E / E.sum(dim=-1, keepdim=True)) @ (X @ Wv))


def _masked(T, X, Wq, Wk, Wv):
    """A mask over the last two dims, broadcast over the batch: the add reading it is not row by row."""
    s = X.shape[-2]
    mask = T.tensor(np.triu(np.full((s, s), -1e9), 1))
    P = T.softmax((X @ Wq) @ (X @ Wk).mT + mask, dim=-1)
    return T.sum((P @ (X @ Wv)) ** 2)


def _no_reuse(T, X, Wq, Wk, Wv):
    """Row sums that no later step of their rows reads: the fuser's loops, no row kernel."""
    S = (X @ Wq) @ (X @ Wk).mT
    r = T.exp(S).sum(dim=-1, keepdim=True) * 0.5
    return T.sum((r * (X @ Wv)) ** 2)


LOSSES = {"attention": _attention, "log_softmax": _log_softmax, "centred": _centred, "from_min": _from_min,
          "masked": _masked, "no_reuse": _no_reuse}
# row kernels each joint kernel runs, at least
ROW_KERNELS = {"attention": 2, "log_softmax": 2, "centred": 2, "from_min": 2, "masked": 2, "no_reuse": 0}


def _inputs(lead=(3, 7), dim=5, dtype=np.float64, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((*lead, dim)).astype(dtype)
    return (X, *((r.standard_normal((dim, dim)) / np.sqrt(dim)).astype(dtype) for _ in range(3)))


def _torch(fn, args):
    ts = [torch.tensor(a, requires_grad=i > 0) for i, a in enumerate(args)]
    loss = fn(torch, *ts)
    loss.backward()
    return float(loss), [t.grad.numpy() for t in ts[1:]]


def _vg(fn, **options):
    return symgrad.value_and_grad(symgrad.compile(lambda *a: fn(symgrad, *a), **options), argnums=(1, 2, 3))


@pytest.fixture(scope="module")
def compiled():
    return {name: _vg(fn) for name, fn in LOSSES.items()}


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("lead", [(3, 7), (2, 3, 6)], ids=["3d", "4d"])
def test_losses_match_torch(compiled, name, lead):
    args = _inputs(lead)
    value, grads = compiled[name](*args)
    want_value, want_grads = _torch(LOSSES[name], args)
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", LOSSES)
def test_row_parts_run_as_row_kernels(compiled, name):
    args = _inputs()
    k = compiled[name].compiled.kernels_for(*args, wrt=[1, 2, 3], joint_kernel=True)
    count = k.joint_source.count(REGION)
    # at least the forward's and the backward's row steps (the amin's gradient may make one more)
    assert count >= ROW_KERNELS[name] if ROW_KERNELS[name] else count == 0
    assert ("for i in range(n0):" in k.joint_source) == bool(count)


def test_calls_with_new_values_reuse_the_buffers_correctly(compiled):
    """The glue's pooled buffers (matrix products, row kernels' outputs) hold the last call's values:
    a second call with other inputs must not see them, nor change the first call's results."""
    first = _inputs(seed=1)
    v1, g1 = compiled["attention"](*first)
    kept = [g.copy() for g in g1]
    second = _inputs(seed=2)
    v2, g2 = compiled["attention"](*second)
    want_value, want_grads = _torch(_attention, second)
    np.testing.assert_allclose(v2, want_value, rtol=1e-10)
    for got, want in zip(g2, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    for got, want in zip(g1, kept):
        np.testing.assert_array_equal(got, want)


def test_float32():
    args = _inputs(dtype=np.float32)
    value, grads = _vg(_attention)(*args)
    want_value, want_grads = _torch(_attention, args)
    assert all(g.dtype == np.float32 for g in grads)
    np.testing.assert_allclose(value, want_value, rtol=2e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def test_parallel_row_kernels():
    args = _inputs((4, 9))
    vg = _vg(_attention, parallel=True)
    value, grads = vg(*args)
    want_value, want_grads = _torch(_attention, args)
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    k = vg.compiled.kernels_for(*args, wrt=[1, 2, 3], joint_kernel=True)
    assert k.joint_source.count(REGION) == 2 and "prange" in k.joint_source


def _trace(fn, *shapes):
    return symgrad.trace(fn, *(np.ones(s) for s in shapes))


def test_regions_found():
    g = _trace(lambda a, b: symgrad.softmax(a @ b, dim=-1) @ b.mT, (2, 3, 4), (2, 4, 5))
    (r,) = row_regions(g)
    assert (r.lead, r.cols, r.rows) == ((2, 3), 5, 6)
    assert [n.op for n in r.nodes] == ["amax", "detach", "sub.Tensor", "exp", "sum.dim_IntList", "reciprocal",
                                       "mul.Tensor"]
    assert [v.shape for v in r.inputs] == [(2, 3, 5)] and [v.shape for v in r.outputs] == [(2, 3, 5)]
    flat = region_graph(r)
    assert [v.shape for v in flat.placeholders] == [(6, 5)]
    assert [n.outputs[0].shape for n in flat.nodes] == [(6, 1), (6, 1), (6, 5), (6, 5), (6, 1), (6, 1), (6, 5)]
    assert flat.nodes[0].args[1:] == ((1,), True)


@pytest.mark.parametrize("fn, shapes", [
    # the reduction drops its dim: a (rows,) value, not taken
    (lambda a: symgrad.exp(a - a.amax(dim=-1)[..., None]).sum(), [(2, 3, 4)]),
    # over another dim than the last
    (lambda a: symgrad.exp(a - a.amax(dim=1, keepdim=True)).sum(), [(2, 3, 4)]),
    # 1-D: no rows
    (lambda a: symgrad.exp(a - a.amax(dim=-1, keepdim=True)).sum(), [(4,)]),
], ids=["no-keepdim", "middle-dim", "1d"])
def test_no_region(fn, shapes):
    assert row_regions(_trace(fn, *shapes)) == []


def test_region_starts_after_its_inputs():
    """A node reading a value made after a region started begins a region of its own (the whole region
    runs at its first node's place)."""
    def f(a, b):
        m = a.amax(dim=-1, keepdim=True)
        e = symgrad.exp(a - m)
        c = e @ b                      # made after the first region started
        return (e * c.amax(dim=-1, keepdim=True)).sum(dim=-1, keepdim=True) * e

    g = _trace(f, (2, 3, 3), (2, 3, 3))
    regions = row_regions(g)
    assert len(regions) == 2
    first, second = regions
    positions = {n: i for i, n in enumerate(g.nodes)}
    for v in second.inputs:
        assert v.producer is None or positions[v.producer] < second.start


@pytest.mark.parametrize("name", ["attention", "log_softmax"])
def test_split_forward_and_backward(name):
    """Through the Tensor API the forward and the backward are separate kernels (the backward reads what
    the forward saved): each runs its row parts as row kernels."""
    args = _inputs((2, 9), seed=4)
    f = symgrad.compile(lambda *a: LOSSES[name](symgrad, *a))
    ts = [symgrad.tensor(a, requires_grad=i > 0) for i, a in enumerate(args)]
    loss = f(*ts)
    loss.backward()
    want_value, want_grads = _torch(LOSSES[name], args)
    np.testing.assert_allclose(loss.item(), want_value, rtol=1e-10)
    for t, want in zip(ts[1:], want_grads):
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-9, atol=1e-12)
    k = f.kernels_for(*args, wrt=[1, 2, 3])
    assert REGION in k.forward_source and REGION in k.backward_source


def test_cross_entropy_of_a_product_keeps_its_scatter():
    """The gradient of ``log_softmax(x @ w)[arange, t]`` adds a scatter of one value per row into the
    softmax's gradient; that add scatters in the glue, so it stays out of the row kernel (which then
    reads its result)."""
    import torch.nn.functional as TF

    import symgrad.nn.functional as F

    r = np.random.default_rng(5)
    x, w, t = r.standard_normal((8, 5)), r.standard_normal((5, 4)), r.integers(0, 4, 8)
    vg = symgrad.value_and_grad(symgrad.compile(lambda x, w, t: F.cross_entropy(x @ w, t, label_smoothing=0.1)),
                                argnums=(0, 1))
    value, grads = vg(x, w, t)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ref = TF.cross_entropy(tx @ tw, torch.tensor(t), label_smoothing=0.1)
    ref.backward()
    np.testing.assert_allclose(value, ref.item(), rtol=1e-12)
    for got, want in zip(grads, (tx.grad, tw.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-14)
