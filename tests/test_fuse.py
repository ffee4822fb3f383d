"""codegen/fuse.py: which elementwise nodes become one loop, and where that loop runs; checked on the
groups themselves and on the values the compiled loops compute."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from codegen.fuse import MAX_SUNK_INPUTS, fusion_groups
from codegen.numba_emit import emit_numba


def unrolled(steps, W, V, *, func=None, read_at=None):
    """A loop unrolled in Python whose accumulator adds a matrix product per step: the operands
    become ready one step apart (``func`` wraps each term; at step ``read_at`` a product reads the
    partial sum)."""
    def f(h):
        acc = h * 0.5
        side = 0.0
        for t in range(steps):
            h = symgrad.tanh(h @ W)
            term = h @ V
            acc = acc + (func(term) if func is not None else term)
            if t == read_at:
                side = (acc @ W).sum()
        return acc.sum() + side
    return f


def numpy_unrolled(steps, W, V, h, func=None):
    acc = h * 0.5
    for _ in range(steps):
        h = np.tanh(h @ W)
        term = h @ V
        acc = acc + (func(term) if func is not None else term)
    return acc.sum()


def is_step_add(n):
    return n.op == "add.Tensor" and len(n.output.shape) == 2


def groups_of(f, *arrays):
    g = symgrad.trace(f, *arrays)
    return g, fusion_groups(g)


@pytest.fixture
def arrays():
    r = np.random.default_rng(2)
    return r.standard_normal((4, 5)), r.standard_normal((5, 5)) / 3, r.standard_normal((5, 5)) / 3


@pytest.mark.parametrize("steps", [2, 5])
def test_an_accumulation_over_unrolled_steps_is_one_loop(arrays, steps):
    h, W, V = arrays
    g, groups = groups_of(unrolled(steps, W, V), h)
    adds = [n for n in g.nodes if is_step_add(n)]
    chain = [grp for grp in groups if any(is_step_add(n) for n in grp.nodes)]
    assert len(adds) == steps and len(chain) == 1 and len(chain[0].nodes) >= steps
    # it runs where its last term is ready: after the last product
    last_mm = max(i for i, n in enumerate(g.nodes) if n.op == "mm")
    assert chain[0].start > last_mm
    # the order of the loop's statements is the graph's
    order = {n: i for i, n in enumerate(g.nodes)}
    assert [order[n] for n in chain[0].nodes] == sorted(order[n] for n in chain[0].nodes)


def test_a_partial_sum_read_elsewhere_stays_where_it_is(arrays):
    h, W, V = arrays
    g, groups = groups_of(unrolled(4, W, V, read_at=1), h)
    # the partial sum after step 1 feeds a product: steps 0-1 are one loop before it, steps 2-3 one after
    adds = [n for n in g.nodes if is_step_add(n)]
    group_of = {n: grp for grp in groups for n in grp.nodes}
    assert group_of[adds[0]] is group_of[adds[1]] is not group_of[adds[2]] is group_of[adds[3]]
    reader = next(i for i, n in enumerate(g.nodes) if n.op == "mm" and adds[1].output in n.inputs)
    assert group_of[adds[1]].start < reader < group_of[adds[3]].start


def test_elementary_functions_do_not_move(arrays):
    h, W, V = arrays
    _, groups = groups_of(unrolled(4, W, V, func=symgrad.exp), h)
    chained = [grp for grp in groups if any(is_step_add(n) for n in grp.nodes)]
    # each step's exp stays in its own loop (kernels keep a bounded number of elementary functions)
    assert all(sum(1 for n in grp.nodes if n.op == "exp") <= 1 for grp in groups)
    assert len(chained) == 4


def test_a_loop_takes_a_bounded_number_of_arrays(arrays):
    h, W, V = arrays
    _, groups = groups_of(unrolled(MAX_SUNK_INPUTS + 6, W, V), h)
    assert max(len(grp.inputs) for grp in groups) <= MAX_SUNK_INPUTS


@pytest.mark.parametrize("steps, func", [(6, None), (4, np.exp), (30, None)])
def test_compiled_values_and_gradients_match_numpy_and_torch(arrays, steps, func):
    torch = pytest.importorskip("torch")
    h, W, V = arrays
    sg_func = {None: None, np.exp: symgrad.exp}[func]
    f = unrolled(steps, W, V, func=sg_func)
    e = emit_numba(symgrad.trace(f, h), "forward")
    (value,) = e.compile(cache=False)(h)
    np.testing.assert_allclose(value, numpy_unrolled(steps, W, V, h, func), rtol=1e-12)

    def loss(T, h, W, V):
        acc = h * 0.5
        for _ in range(steps):
            h = T.tanh(h @ W)
            term = h @ V
            acc = acc + (T.exp(term) if func is not None else term)
        return acc.sum()

    vg = symgrad.value_and_grad(symgrad.compile(lambda h, W, V: loss(symgrad, h, W, V), tiered=False, cache=False),
                                argnums=(0, 1, 2))
    got, grads = vg(h, W, V)
    ts = [torch.tensor(a, requires_grad=True) for a in (h, W, V)]
    ref = loss(torch, *ts)
    ref.backward()
    np.testing.assert_allclose(got, ref.item(), rtol=1e-12)
    for g, t in zip(grads, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-10, atol=1e-12)
