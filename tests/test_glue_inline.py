"""codegen/glue_inline.py: matrix products and views in the Numba glue (direct ``np.matmul``, outer
products as broadcast multiplies, contiguous copies of reused transposes, indexing and reshapes),
checked by what the glue says and by the values it computes against torch."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from codegen.glue_inline import SMALL_PRODUCT, contiguous_transposes
from codegen.numba_emit import emit_numba
from symgrad.compiler.autodiff import autodiff


def rnn_loss(T, xs, Wx, Wh, b, Wo, y):
    """A tanh RNN unrolled by a Python loop, readout MSE (``T``: symgrad or torch)."""
    h = T.tanh(xs[0] @ Wx + b)
    for t in range(1, xs.shape[0]):
        h = T.tanh(xs[t] @ Wx + h @ Wh + b)
    return T.mean((h @ Wo - y) ** 2)


def rnn_inputs(steps=4, batch=5, n_in=3, hidden=6, seed=3):
    r = np.random.default_rng(seed)
    return [r.standard_normal((steps, batch, n_in)), r.standard_normal((n_in, hidden)) / 2,
            r.standard_normal((hidden, hidden)) / 3, r.standard_normal(hidden) / 4,
            r.standard_normal((hidden, 1)), r.standard_normal((batch, 1))]


def joint_graph(fn, arrays, wrt):
    return autodiff(symgrad.trace(fn, *arrays), wrt)


@pytest.mark.parametrize("steps, copied", [(2, 0), (3, 1), (5, 1)])
def test_reused_transpose_is_copied_once(steps, copied):
    # the backward multiplies by Wh.t() once per step after the first: a copy pays from two uses on
    joint = joint_graph(lambda *a: rnn_loss(symgrad, *a), rnn_inputs(steps=steps), [1, 2, 3, 4])
    found = contiguous_transposes(joint)
    assert len(found) == copied
    for n in found:
        assert n.op == "t" and n.args[0] is joint.placeholders[2]   # Wh


@pytest.mark.parametrize("size, copied", [(8, True), (64, True), (int(round(SMALL_PRODUCT ** (1 / 3))) + 1, False)])
def test_only_small_products_copy_their_transpose(size, copied):
    a, w = np.ones((size, size)), np.ones((size, size))
    def f(a, w):
        wt = w.t()
        return ((a @ wt) @ wt).sum()

    g = symgrad.trace(f, a, w)
    assert bool(contiguous_transposes(g)) is copied


@pytest.mark.parametrize("returned", [False, True])
def test_a_transpose_returned_keeps_its_view(returned):
    def f(a, w):
        wt = w.t()
        loss = (a @ wt + a @ wt @ wt).sum()
        return (loss, wt) if returned else loss

    g = symgrad.trace(f, np.ones((4, 4)), np.ones((4, 4)))
    assert len(contiguous_transposes(g)) == (0 if returned else 1)


def test_glue_calls_matmul_and_multiplies_outer_products():
    arrays = rnn_inputs(steps=3)
    joint = joint_graph(lambda *a: rnn_loss(symgrad, *a), arrays, [1, 2, 3, 4])
    source = emit_numba(joint, "joint").source
    assert "op_mm(" not in source and "op_select_int(" not in source and "op_view(" not in source
    assert "= arg0[1]" in source      # xs[1]
    # d(h @ Wo)/dh = grad @ Wo.t() with Wo of shape [hidden, 1]: an outer product
    assert "np.multiply(" in source
    assert "np.ascontiguousarray(arg2.T)" in source


def test_compiled_rnn_gradients_match_torch():
    torch = pytest.importorskip("torch")
    arrays = rnn_inputs(steps=5)
    value, grads = symgrad.value_and_grad(symgrad.compile(lambda *a: rnn_loss(symgrad, *a), tiered=False, cache=False),
                                          argnums=(1, 2, 3, 4))(*arrays)
    ts = [torch.tensor(a, requires_grad=i in (1, 2, 3, 4)) for i, a in enumerate(arrays)]
    loss = rnn_loss(torch, *ts)
    loss.backward()
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12)
    for g, t in zip(grads, ts[1:5]):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_outer_product_values_and_gradients_match_torch(dtype):
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(5)
    u, v, w = (r.standard_normal(s).astype(dtype) for s in [(7, 1), (1, 9), (9, 9)])

    def loss(T, u, v, w):
        return ((u @ v) @ w.t() @ w.t()).sum() + (T.tanh(u @ v) * 3).sum()

    f = symgrad.compile(lambda u, v, w: loss(symgrad, u, v, w), tiered=False, cache=False)
    us, vs, ws = (symgrad.tensor(a, requires_grad=True) for a in (u, v, w))
    out = f(us, vs, ws)
    out.backward()
    ut, vt, wt = (torch.tensor(a, requires_grad=True) for a in (u, v, w))
    ref = loss(torch, ut, vt, wt)
    ref.backward()
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    assert out.detach().numpy().dtype == dtype
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=rtol)
    for s, t in ((us, ut), (vs, vt), (ws, wt)):
        assert s.grad.numpy().dtype == dtype
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=rtol * 1e-2)


def test_selects_and_views_are_indexing_and_reshapes():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(8)
    x, w = r.standard_normal((3, 4, 5)), r.standard_normal((5, 2))

    def loss(x, w):
        a = x[-1] @ w                               # select.int(x, 0, -1)
        b = x.select(2, 1).reshape(-1)              # select.int over the last dim, then a view
        c = x[:, 2].sum(dim=0, keepdim=True).view(5)
        return (a ** 2).sum() + (b * b.flip(0)).sum() + (c * w[:, 0]).sum()

    source = compiled_source_matching_torch(torch, loss, x, w)
    assert "= select.int(" in source and "= view(" in source      # the IR lines, as comments
    assert "op_select_int(" not in source and "op_view(" not in source


def compiled_source_matching_torch(torch, loss, *arrays) -> str:
    """Compile ``loss`` (tensors in), check its value and gradients against torch's eager run, and
    return the generated forward and backward source."""
    f = symgrad.compile(loss, tiered=False, cache=False)
    ours = [symgrad.tensor(a, requires_grad=True) for a in arrays]
    k = f.inspect(*ours)
    out = f(*ours)
    out.backward()
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ref = loss(*theirs)
    ref.backward()
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-12)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-13)
    return k.forward_source + k.backward_source


def test_transposes_and_permutes_are_array_views():
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(9)
    x, w = r.standard_normal((2, 3, 4)), r.standard_normal((4, 3))

    def loss(x, w):
        s = x @ x.transpose(1, 2)                   # transpose.int, then bmm
        p = x.permute(2, 0, 1)                      # permute
        q = (x.reshape(6, 4) @ w).t()               # _unsafe_view of the product's input, t
        return (s * s).sum() + (p[1] * p[-1]).sum() + (q @ q.t()).trace()

    source = compiled_source_matching_torch(torch, loss, x, w)
    assert "= transpose.int(" in source and "= permute(" in source and "= t(" in source
    for wrapper in ("op_transpose_int(", "op_permute(", "op_t(", "op__unsafe_view("):
        assert wrapper not in source
    assert ".swapaxes(1, 2)" in source and ".transpose((2, 0, 1))" in source
