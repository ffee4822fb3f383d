"""Eager autograd semantics: the graph, the engine and the autograd API.

Every expectation here was checked against real PyTorch 2.x by running this file with
``sys.modules["symgrad"] = torch``; where PyTorch differs from what a tutorial (or intuition)
says, the test follows PyTorch and says so in a comment.

Values are read through ``.tolist()`` so that the tests use only the public Tensor API.
"""

import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import symgrad

# --------------------------------------------------------------------------- helpers


def arr(t):
    """The values of a tensor as a numpy array (float64 for float tensors)."""
    return np.asarray(t.detach().tolist())


def name(node):
    return None if node is None else type(node).__name__


def next_names(node):
    """``node.next_functions`` as ``((class name or None, input_nr), ...)``."""
    return tuple((name(fn), nr) for fn, nr in node.next_functions)


def leaf(values, dtype=None):
    if dtype is None:
        return symgrad.tensor(values, requires_grad=True)
    return symgrad.tensor(values, dtype=dtype, requires_grad=True)


def assert_tensor(t, expected, dtype=None, shape=None, rtol=1e-6, atol=0.0):
    expected = np.asarray(expected, dtype=float)
    got = arr(t)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert tuple(t.shape) == (expected.shape if shape is None else tuple(shape))
    assert_allclose(got, expected, rtol=rtol, atol=atol)
    if dtype is not None:
        assert t.dtype == dtype, t.dtype


@pytest.fixture(autouse=True)
def _restore_global_modes():
    """A failing test must not leave grad mode off or anomaly mode on for the next one."""
    yield
    set_grad = getattr(symgrad, "set_grad_enabled", None)
    if set_grad is not None:
        set_grad(True)
    set_anomaly = getattr(getattr(symgrad, "autograd", None), "set_detect_anomaly", None)
    if set_anomaly is not None:
        set_anomaly(False)


# --------------------------------------------------------------------------- leaves and flags


def test_user_tensors_are_leaves_and_results_are_not():
    a = symgrad.tensor([1.0, 2.0])
    w = leaf([0.5, 0.25])
    assert a.is_leaf and w.is_leaf
    assert a.grad_fn is None and w.grad_fn is None
    assert a.requires_grad is False and w.requires_grad is True
    assert a.grad is None and w.grad is None

    c = a + a
    assert c.requires_grad is False and c.is_leaf and c.grad_fn is None

    d = a * w
    assert d.requires_grad is True and d.is_leaf is False
    assert name(d.grad_fn) == "MulBackward0"
    assert_tensor(d, [0.5, 0.5])

    for factory in (symgrad.zeros(2, requires_grad=True), symgrad.ones(2, requires_grad=True),
                    symgrad.arange(2.0, requires_grad=True)):
        assert factory.is_leaf and factory.requires_grad and factory.grad_fn is None


# --------------------------------------------------------------------------- graph structure


def test_next_functions_pairs_nodes_with_input_numbers():
    x = leaf([1.0, 2.0])
    w = leaf([3.0, 4.0])
    y = x * w
    assert isinstance(y.grad_fn.next_functions, tuple)
    assert next_names(y.grad_fn) == (("AccumulateGrad", 0), ("AccumulateGrad", 0))
    for pair in y.grad_fn.next_functions:
        assert isinstance(pair, tuple) and len(pair) == 2
    z = (y.exp() + x).sum()
    assert name(z.grad_fn) == "SumBackward0"
    assert next_names(z.grad_fn) == (("AddBackward0", 0),)
    assert next_names(z.grad_fn.next_functions[0][0]) == (("ExpBackward0", 0), ("AccumulateGrad", 0))


@pytest.mark.parametrize(
    "label, make, expected",
    [
        ("x + 3", lambda x, c: x + 3, (("AccumulateGrad", 0), (None, 0))),
        ("3 + x", lambda x, c: 3 + x, (("AccumulateGrad", 0), (None, 0))),
        ("x * 2", lambda x, c: x * 2, (("AccumulateGrad", 0), (None, 0))),
        ("2 * x", lambda x, c: 2 * x, (("AccumulateGrad", 0), (None, 0))),
        ("x * c", lambda x, c: x * c, (("AccumulateGrad", 0), (None, 0))),
        ("c * x", lambda x, c: c * x, ((None, 0), ("AccumulateGrad", 0))),
        ("c - x", lambda x, c: c - x, ((None, 0), ("AccumulateGrad", 0))),
        ("x / c", lambda x, c: x / c, (("AccumulateGrad", 0), (None, 0))),
        ("x.exp()", lambda x, c: x.exp(), (("AccumulateGrad", 0),)),
        ("x.sum()", lambda x, c: x.sum(), (("AccumulateGrad", 0),)),
    ],
)
def test_constants_and_no_grad_tensors_appear_as_none(label, make, expected):
    # A Python number or a tensor that does not require grad is (None, 0), never an AccumulateGrad.
    x = leaf([1.0, 2.0])
    c = symgrad.tensor([2.0, 2.0])
    assert next_names(make(x, c).grad_fn) == expected


def test_one_accumulate_grad_per_leaf_with_variable():
    x = leaf([1.0, 2.0])
    w = leaf([3.0, 4.0])
    y = x * x
    a, b = (fn for fn, _ in y.grad_fn.next_functions)
    assert name(a) == "AccumulateGrad"
    assert a is b
    assert a.variable is x
    assert a.next_functions == ()
    # the same node is used wherever x is an input, while a graph holding it is alive
    z = x + 1
    assert z.grad_fn.next_functions[0][0] is a
    # a different leaf gets a different node
    v = x * w
    ax, aw = (fn for fn, _ in v.grad_fn.next_functions)
    assert ax is a
    assert aw is not ax
    assert aw.variable is w
    assert aw.variable is not x


def test_nodes_read_twice_are_the_same_object():
    x = leaf([1.0, 2.0])
    y = x.exp()
    z = y * y
    assert y.grad_fn is y.grad_fn
    assert z.grad_fn is z.grad_fn
    first, second = (fn for fn, _ in z.grad_fn.next_functions)
    assert first is second
    assert first is y.grad_fn
    assert z.grad_fn.next_functions[0][0] is z.grad_fn.next_functions[0][0]


def test_multi_output_node_input_numbers():
    m = leaf([[1.0, 2.0], [5.0, 7.0]])
    top, bottom = m.unbind(0)
    assert top.grad_fn is bottom.grad_fn
    d = bottom - top
    assert next_names(d.grad_fn) == (("UnbindBackward0", 1), ("UnbindBackward0", 0))
    assert next_names(d.grad_fn.next_functions[0][0]) == (("AccumulateGrad", 0),)
    (d * symgrad.tensor([1.0, 10.0])).sum().backward()
    assert_tensor(m.grad, [[-1.0, -10.0], [1.0, 10.0]])


def test_graph_tree_walk():
    x = leaf([0.5, 1.0])
    w = leaf([2.0, 3.0])
    z = (x * 2 + w).sin().sum()
    lines = []

    def walk(node, depth):
        for child, nr in node.next_functions:
            lines.append("  " * depth + f"({name(child)}, {nr})")
            if child is not None:
                walk(child, depth + 1)

    walk(z.grad_fn, 0)
    assert lines == [
        "(SinBackward0, 0)",
        "  (AddBackward0, 0)",
        "    (MulBackward0, 0)",
        "      (AccumulateGrad, 0)",
        "      (None, 0)",
        "    (AccumulateGrad, 0)",
    ]
    z.backward()
    xv, wv = np.array([0.5, 1.0]), np.array([2.0, 3.0])
    assert_allclose(arr(z), np.sin(2 * xv + wv).sum(), rtol=1e-6)
    assert_tensor(x.grad, 2 * np.cos(2 * xv + wv), rtol=1e-5)
    assert_tensor(w.grad, np.cos(2 * xv + wv), rtol=1e-5)


# --------------------------------------------------------------------------- the engine


class Counted(symgrad.autograd.Function):
    """Identity whose backward records every call: shows how often the engine runs a node."""

    calls = []

    @staticmethod
    def forward(ctx, x):
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        Counted.calls.append(grad.tolist())
        return grad


def test_diamond_runs_shared_node_once_with_summed_gradient():
    Counted.calls = []
    x = leaf([2.0])
    h = Counted.apply(x * 3)
    # three consumers of h, one of them through a longer chain
    out = h.exp() + h.sin().cos() + h * h
    out.backward()
    hv = 6.0
    dh = math.exp(hv) - math.sin(math.sin(hv)) * math.cos(hv) + 2 * hv
    assert len(Counted.calls) == 1
    assert_allclose(Counted.calls[0], [dh], rtol=1e-5)
    assert_tensor(x.grad, [3 * dh], rtol=1e-5)


def test_doubling_chain_is_dependency_counted():
    # y = y + y ten times: 2**10 paths, but every node must run exactly once.
    Counted.calls = []
    x = leaf([1.0])
    y = x
    for _ in range(10):
        y = Counted.apply(y)
        y = y + y
    y.backward()
    assert len(Counted.calls) == 10
    assert sorted(c[0] for c in Counted.calls) == [2.0 ** k for k in range(1, 11)]
    assert_tensor(x.grad, [1024.0])


def test_nonleaf_hook_in_diamond_called_once():
    x = leaf([2.0])
    a = x * 3
    calls = []
    a.register_hook(lambda g: calls.append(g.tolist()))
    (a.exp() + a.sin() + a * a).backward()
    expected = math.exp(6.0) + math.cos(6.0) + 12.0
    assert len(calls) == 1
    assert_allclose(calls[0], [expected], rtol=1e-5)
    assert_tensor(x.grad, [3 * expected], rtol=1e-5)


def test_shared_inputs_sum_path_gradients():
    x = leaf([1.0, 2.0, 3.0])
    (x * x + 3 * x).sum().backward()
    assert_tensor(x.grad, [5.0, 7.0, 9.0])

    w = leaf([2.0])
    a = w * 4
    b = w.exp()
    (a * b + a).backward()
    # d/dw (4w e^w + 4w) = 4 e^w + 4 w e^w + 4
    assert_tensor(w.grad, [4 * math.exp(2) + 8 * math.exp(2) + 4], rtol=1e-5)


def test_backward_returns_none_and_grad_is_a_plain_leaf():
    x = leaf([1.0, 2.0, 3.0])
    loss = (x ** 2).sum()
    assert name(loss.grad_fn) == "SumBackward0"
    assert loss.shape == ()
    assert_allclose(arr(loss), 14.0)
    assert loss.backward() is None
    assert_tensor(x.grad, [2.0, 4.0, 6.0], dtype=symgrad.float32)
    assert type(x.grad).__name__ == "Tensor"
    assert x.grad.requires_grad is False
    assert x.grad.grad_fn is None


def test_only_leaves_that_require_grad_get_grad():
    x = leaf([1.0, 2.0, 3.0])
    c = symgrad.tensor([2.0, 2.0, 2.0])
    y = x * c
    z = y.sum()
    z.backward()
    assert_tensor(x.grad, [2.0, 2.0, 2.0])
    assert c.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns when a non-leaf's .grad is read
        assert y.grad is None
        assert z.grad is None
    assert y.retains_grad is False


def test_grad_accumulates_and_resets():
    x = leaf([1.0, 2.0])
    (x * 3).sum().backward()
    assert_tensor(x.grad, [3.0, 3.0])
    (x * x).sum().backward()
    assert_tensor(x.grad, [5.0, 7.0])
    x.grad.zero_()
    assert_tensor(x.grad, [0.0, 0.0])
    (x * 5).sum().backward()
    assert_tensor(x.grad, [5.0, 5.0])
    x.grad = None
    assert x.grad is None
    (x ** 3).sum().backward()
    assert_tensor(x.grad, [3.0, 12.0])


def test_retain_graph_allows_repeated_backward():
    x = leaf([1.0, 2.0])
    y = (x ** 3).sum()
    y.backward(retain_graph=True)
    assert_tensor(x.grad, [3.0, 12.0])
    y.backward(retain_graph=True)
    assert_tensor(x.grad, [6.0, 24.0])
    y.backward()  # this one frees the graph
    assert_tensor(x.grad, [9.0, 36.0])
    with pytest.raises(RuntimeError, match=r"(?i)second time|retain_graph"):
        y.backward()
    assert_tensor(x.grad, [9.0, 36.0])


@pytest.mark.parametrize(
    "label, make",
    [
        ("x.exp().sum()", lambda x: x.exp().sum()),
        ("(x * x).sum()", lambda x: (x * x).sum()),
        ("(x * 2).sum()", lambda x: (x * 2).sum()),  # MulBackward0 keeps the wrapped number
        ("(x ** 3).sum()", lambda x: (x ** 3).sum()),
    ],
)
def test_second_backward_through_freed_graph_raises(label, make):
    x = leaf([0.0, 1.0])
    y = make(x)
    y.backward()
    first = arr(x.grad)
    with pytest.raises(RuntimeError, match=r"(?i)second time|retain_graph"):
        y.backward()
    assert_array_equal(arr(x.grad), first)


def test_graph_that_saved_nothing_can_run_backward_twice():
    # PyTorch only complains when a node needs a freed saved tensor; (x + 1).sum() saves none.
    x = leaf([1.0, 2.0])
    s = (x + 1).sum()
    s.backward()
    s.backward()
    assert_tensor(x.grad, [2.0, 2.0])
    x.grad = None
    t = (x - 1).mean()
    t.backward()
    t.backward()
    assert_tensor(x.grad, [1.0, 1.0])


def test_gradient_argument_for_non_scalar_outputs():
    x = leaf([1.0, 2.0, 3.0])
    y = x * x
    y.backward(gradient=symgrad.tensor([1.0, 0.1, 10.0]))
    assert_tensor(x.grad, [2.0, 0.4, 60.0], rtol=1e-6)

    m = leaf([[1.0, 2.0], [3.0, 4.0]])
    (m * 3).backward(symgrad.tensor([[1.0, 0.0], [0.5, 2.0]]))
    assert_tensor(m.grad, [[3.0, 0.0], [1.5, 6.0]])

    v = leaf([1.0, 2.0])
    symgrad.autograd.backward([v * v], [symgrad.tensor([1.0, 1.0])])
    assert_tensor(v.grad, [2.0, 4.0])
    v.grad = None
    symgrad.autograd.backward((v * 3).sum())
    assert_tensor(v.grad, [3.0, 3.0])


def test_gradient_argument_of_wrong_shape_raises():
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="(?i)shape"):
        (x * x).backward(gradient=symgrad.ones(2))
    assert x.grad is None


def test_non_scalar_output_without_gradient_raises():
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="(?i)scalar"):
        (x * 2).backward()
    assert x.grad is None
    m = leaf([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RuntimeError, match="(?i)scalar"):
        (m @ m).backward()
    (m @ m).sum().backward()
    assert_tensor(m.grad, [[7.0, 11.0], [9.0, 13.0]])


@pytest.mark.parametrize(
    "label, make",
    [
        ("plain.sum()", lambda: symgrad.tensor([1.0, 2.0]).sum()),
        ("0-d plain", lambda: symgrad.tensor(3.0)),
        ("detached", lambda: (symgrad.tensor([1.0], requires_grad=True) ** 3).detach().sum()),
    ],
)
def test_backward_of_tensor_not_requiring_grad_raises(label, make):
    with pytest.raises(RuntimeError, match="(?i)require"):
        make().backward()


def test_backward_of_no_grad_result_raises():
    x = leaf([1.0, 2.0])
    with symgrad.no_grad():
        y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="(?i)require"):
        y.backward()
    assert x.grad is None


def test_one_element_outputs_need_no_gradient():
    x = leaf([3.0])
    y = x * x
    assert tuple(y.shape) == (1,)
    y.backward()
    assert_tensor(x.grad, [6.0])
    m = leaf([[2.0]])
    (m ** 3).backward()
    assert_tensor(m.grad, [[12.0]])


def test_broadcast_column_by_row_reduces_gradients():
    a = leaf([[1.0], [2.0], [3.0]])
    b = leaf([[1.0, 10.0, 100.0, 1000.0]])
    p = a * b
    assert tuple(p.shape) == (3, 4)
    p.sum().backward()
    assert_tensor(a.grad, [[1111.0], [1111.0], [1111.0]])
    assert_tensor(b.grad, [[6.0, 6.0, 6.0, 6.0]])
    a.grad = None
    b.grad = None
    (a + b).sum().backward()
    assert_tensor(a.grad, [[4.0], [4.0], [4.0]])
    assert_tensor(b.grad, [[3.0, 3.0, 3.0, 3.0]])


def test_broadcast_zero_dim_with_vector():
    s = leaf(2.0)
    v = leaf([1.0, 2.0, 3.0])
    (s * v).sum().backward()
    assert tuple(s.grad.shape) == ()
    assert_tensor(s.grad, 6.0, shape=())
    assert_tensor(v.grad, [2.0, 2.0, 2.0])
    s.grad = None
    v.grad = None
    ((v - s) ** 2).sum().backward()
    assert_tensor(s.grad, 0.0, shape=(), atol=1e-6)
    assert_tensor(v.grad, [-2.0, 0.0, 2.0], atol=1e-6)


def test_broadcast_trailing_dimension_and_leading_ones():
    m = leaf([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    r = leaf([10.0, 20.0, 30.0])
    k = leaf([[[2.0]]])  # [1, 1, 1] against [2, 3] -> result [1, 2, 3]
    out = m * r + k
    assert tuple(out.shape) == (1, 2, 3)
    out.sum().backward()
    assert_tensor(m.grad, [[10.0, 20.0, 30.0], [10.0, 20.0, 30.0]])
    assert_tensor(r.grad, [5.0, 7.0, 9.0])
    assert_tensor(k.grad, [[[6.0]]])


# --------------------------------------------------------------------------- retain_grad and hooks


def test_retain_grad_keeps_non_leaf_gradient():
    x = leaf([1.0, 2.0])
    y = x * 2
    assert y.retains_grad is False
    y.retain_grad()
    assert y.retains_grad is True
    z = (y * y).sum()
    z.backward(retain_graph=True)
    assert_tensor(y.grad, [4.0, 8.0])
    assert_tensor(x.grad, [8.0, 16.0])
    assert y.is_leaf is False
    z.backward()  # retained gradients accumulate like leaf gradients
    assert_tensor(y.grad, [8.0, 16.0])
    assert_tensor(x.grad, [16.0, 32.0])


def test_retain_grad_on_leaf_is_a_no_op():
    x = leaf([1.0, 2.0])
    x.retain_grad()
    assert x.retains_grad is False
    (x * 3).sum().backward()
    assert_tensor(x.grad, [3.0, 3.0])


@pytest.mark.parametrize("retain_first", [True, False])
def test_retained_grad_sees_hook_result_whatever_the_order(retain_first):
    # PyTorch 2.x runs the retain_grad hook after all other tensor hooks.
    x = leaf([1.0, 2.0])
    y = x * 2
    if retain_first:
        y.retain_grad()
    y.register_hook(lambda g: g * 10)
    if not retain_first:
        y.retain_grad()
    (y * y).sum().backward()
    assert_tensor(y.grad, [40.0, 80.0])
    assert_tensor(x.grad, [80.0, 160.0])


def test_leaf_hook_sees_gradient():
    seen = []
    x = leaf([1.0, 2.0, 3.0])
    x.register_hook(lambda g: seen.append(g.clone()))
    (x * x).sum().backward()
    assert len(seen) == 1
    assert_tensor(seen[0], [2.0, 4.0, 6.0])
    assert_tensor(x.grad, [2.0, 4.0, 6.0])


def test_hooks_replace_gradient_on_leaves_and_non_leaves():
    x = leaf([1.0, 2.0])
    x.register_hook(lambda g: g * 10)
    (x * 3).sum().backward()
    assert_tensor(x.grad, [30.0, 30.0])

    w = leaf([1.0, 2.0])
    y = w * 2
    seen = []

    def add_one(g):
        seen.append(g.clone())
        return g + 1

    y.register_hook(add_one)
    (y * y).sum().backward()
    assert_tensor(seen[0], [4.0, 8.0])
    assert_tensor(w.grad, [10.0, 18.0])  # (2y + 1) * 2


def test_hooks_chain_in_registration_order_and_none_keeps_gradient():
    x = leaf([1.0, 2.0])
    seen = []
    x.register_hook(lambda g: g + 1)
    x.register_hook(lambda g: seen.append(g.clone()))  # returns None: gradient unchanged
    x.register_hook(lambda g: g * 2)
    (x * 3).sum().backward()
    assert_tensor(seen[0], [4.0, 4.0])
    assert_tensor(x.grad, [8.0, 8.0])


def test_hook_handle_remove():
    calls = []
    x = leaf([2.0])
    handle = x.register_hook(lambda g: calls.append(g.clone()))
    (x * 4).backward()
    assert len(calls) == 1
    assert_tensor(calls[0], [4.0])
    handle.remove()
    (x * 4).backward()
    assert len(calls) == 1
    assert_tensor(x.grad, [8.0])

    y = x * 1
    h2 = y.register_hook(lambda g: g * 100)
    h2.remove()
    (y * 2).backward()
    assert_tensor(x.grad, [10.0])


@pytest.mark.parametrize("on_leaf", [True, False])
def test_hook_returning_wrong_shape_raises(on_leaf):
    x = leaf([1.0, 2.0])
    target = x if on_leaf else x * 3
    target.register_hook(lambda g: symgrad.ones(3))
    with pytest.raises(RuntimeError, match="(?i)size|shape"):
        (target * target).sum().backward()
    assert x.grad is None


def test_register_hook_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="(?i)require"):
        symgrad.tensor([1.0, 2.0]).register_hook(lambda g: g)


# --------------------------------------------------------------------------- detach and requires_grad_


def test_detach_returns_leaf_sharing_data():
    x = leaf([1.0, 2.0, 3.0])
    d = x.detach()
    assert d.requires_grad is False and d.grad_fn is None and d.is_leaf
    assert_tensor(d, [1.0, 2.0, 3.0])
    d[0] = 10.0
    assert_tensor(x, [10.0, 2.0, 3.0])
    assert x.requires_grad is True

    y = x * 2
    e = y.detach()
    assert e.is_leaf and e.requires_grad is False and e.grad_fn is None
    assert_tensor(e, [20.0, 4.0, 6.0])
    assert name(y.grad_fn) == "MulBackward0"  # the original keeps its graph


def test_detach_blocks_gradient_flow():
    x = leaf([1.0, 2.0])
    w = (x ** 3).detach()
    with pytest.raises(RuntimeError):
        w.sum().backward()
    assert x.grad is None
    (x * w).sum().backward()
    assert_tensor(x.grad, [1.0, 8.0])  # w is a constant: d(x * w)/dx = w

    v = leaf([2.0])
    (v.detach() * v * v).backward()  # only the tracked factors count: 2 * v * v.detach()
    assert_tensor(v.grad, [8.0])


def test_detach_in_place():
    x = leaf([1.0, 2.0])
    z = x * 3
    r = z.detach_()
    assert r is z
    assert z.requires_grad is False and z.grad_fn is None and z.is_leaf
    assert_tensor(z, [3.0, 6.0])
    # detach_ on a leaf that requires grad is allowed and turns the flag off
    x.detach_()
    assert x.requires_grad is False and x.is_leaf


def test_requires_grad_rules():
    t = symgrad.tensor([1.0, 2.0])
    r = t.requires_grad_()
    assert r is t and t.requires_grad and t.is_leaf
    t.requires_grad_(False)
    assert t.requires_grad is False
    t.requires_grad = True
    assert t.requires_grad is True
    t.requires_grad = False
    assert t.requires_grad is False

    x = leaf([1.0, 2.0])
    y = x * 2
    with pytest.raises(RuntimeError, match="(?i)leaf"):
        y.requires_grad_(False)
    with pytest.raises(RuntimeError, match="(?i)leaf"):
        y.requires_grad = False
    assert y.requires_grad_(True) is y  # already requires grad: allowed
    assert y.requires_grad is True

    x.requires_grad = False  # allowed on a leaf
    assert x.requires_grad is False


def test_detached_copy_becomes_new_leaf():
    x = leaf([3.0, 4.0])
    y = (x * 2).detach().requires_grad_()
    assert y.is_leaf and y.grad_fn is None and y.requires_grad
    (y * y).sum().backward()
    assert_tensor(y.grad, [12.0, 16.0])
    assert x.grad is None


# --------------------------------------------------------------------------- grad modes


def test_no_grad_context():
    x = leaf([1.0, 2.0])
    assert symgrad.is_grad_enabled() is True
    with symgrad.no_grad():
        assert symgrad.is_grad_enabled() is False
        y = x * 2
    assert symgrad.is_grad_enabled() is True
    assert y.requires_grad is False and y.grad_fn is None and y.is_leaf
    assert_tensor(y, [2.0, 4.0])
    z = x * 2
    assert z.requires_grad is True and name(z.grad_fn) == "MulBackward0"


def test_no_grad_restores_mode_after_exception():
    with pytest.raises(ValueError):
        with symgrad.no_grad():
            raise ValueError("boom")
    assert symgrad.is_grad_enabled() is True


def test_enable_grad_inside_no_grad():
    x = leaf([1.0, 2.0])
    with symgrad.no_grad():
        a = x * 3
        with symgrad.enable_grad():
            assert symgrad.is_grad_enabled() is True
            b = x * 3
        assert symgrad.is_grad_enabled() is False
        c = x * 3
    assert a.requires_grad is False and c.requires_grad is False
    assert b.requires_grad is True and name(b.grad_fn) == "MulBackward0"
    b.sum().backward()
    assert_tensor(x.grad, [3.0, 3.0])


def test_no_grad_decorators_called_and_bare():
    x = leaf([1.0, 2.0])
    inside = []

    @symgrad.no_grad()
    def called(t):
        inside.append(symgrad.is_grad_enabled())
        return t * 5

    @symgrad.no_grad
    def bare(t):
        inside.append(symgrad.is_grad_enabled())
        return t * 5

    for fn in (called, bare):
        y = fn(x)
        assert y.requires_grad is False and y.grad_fn is None
        assert_tensor(y, [5.0, 10.0])
        assert symgrad.is_grad_enabled() is True
    assert inside == [False, False]
    assert called.__name__ == "called" and bare.__name__ == "bare"
    assert (x * 5).requires_grad is True


def test_enable_grad_and_set_grad_enabled_decorators():
    x = leaf([1.0])

    @symgrad.enable_grad()
    def tracked(t):
        return t * 2

    @symgrad.enable_grad
    def tracked_bare(t):
        return t * 2

    @symgrad.set_grad_enabled(False)
    def untracked(t):
        return t * 2

    with symgrad.no_grad():
        y = tracked(x)
        y2 = tracked_bare(x)
        assert symgrad.is_grad_enabled() is False
    assert y.requires_grad is True and name(y.grad_fn) == "MulBackward0"
    assert y2.requires_grad is True and name(y2.grad_fn) == "MulBackward0"
    z = untracked(x)
    assert z.requires_grad is False
    assert symgrad.is_grad_enabled() is True


def test_set_grad_enabled_context_and_plain_call():
    x = leaf([1.0])
    with symgrad.set_grad_enabled(False):
        assert (x * 2).requires_grad is False
    with symgrad.set_grad_enabled(True):
        assert (x * 2).requires_grad is True
    assert symgrad.is_grad_enabled() is True
    try:
        symgrad.set_grad_enabled(False)
        assert symgrad.is_grad_enabled() is False
        assert (x * 2).requires_grad is False
    finally:
        symgrad.set_grad_enabled(True)
    assert symgrad.is_grad_enabled() is True
    assert (x * 2).requires_grad is True


# --------------------------------------------------------------------------- in-place operations


def test_version_counter_counts_in_place_changes():
    t = symgrad.tensor([1.0, 2.0, 3.0])
    assert t._version == 0
    steps = [
        lambda t: t.add_(1),
        lambda t: t.sub_(1),
        lambda t: t.mul_(2),
        lambda t: t.div_(2),
        lambda t: t.zero_(),
    ]
    for expected, step in enumerate(steps, start=1):
        assert step(t) is t  # in-place methods return self
        assert t._version == expected
    assert_tensor(t, [0.0, 0.0, 0.0])
    before = id(t)
    t += 4
    assert id(t) == before and t._version == 6
    t -= 1
    assert t._version == 7
    t *= 3
    assert t._version == 8
    t /= 2
    assert id(t) == before and t._version == 9
    assert_tensor(t, [4.5, 4.5, 4.5])
    t[0] = 1.0
    assert t._version == 10
    u = t * 2
    assert t._version == 10 and u._version == 0
    t.mul_(2).add_(1)
    assert t._version == 12
    assert_tensor(t, [3.0, 10.0, 10.0])


def test_in_place_on_leaf_requiring_grad_raises():
    x = leaf([1.0, 2.0])
    for op in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.sub_(1), lambda: x.div_(2), lambda: x.zero_()):
        with pytest.raises(RuntimeError, match="(?i)leaf"):
            op()
    with pytest.raises(RuntimeError, match="(?i)leaf"):
        x += 1
    assert_tensor(x, [1.0, 2.0])
    assert x._version == 0
    plain = symgrad.tensor([1.0, 2.0])
    plain.add_(1)
    assert_tensor(plain, [2.0, 3.0])


def test_in_place_on_leaf_allowed_under_no_grad():
    w = leaf([1.0, 2.0])
    (w * w).sum().backward()
    with symgrad.no_grad():
        w -= 0.25 * w.grad  # an SGD step
        w.add_(1)
    assert_tensor(w, [1.5, 2.0])
    assert w.requires_grad is True and w.is_leaf and w.grad_fn is None
    assert w._version == 2
    w.grad = None
    (w * 3).sum().backward()
    assert_tensor(w.grad, [3.0, 3.0])


def test_in_place_on_saved_result_raises_at_backward():
    # exp saves its result; changing it in place breaks backward (checked by the version counter)
    x = leaf([0.0, 1.0])
    y = x.exp()
    assert y._version == 0
    y.add_(1)
    assert y._version == 1
    assert name(y.grad_fn) == "AddBackward0"  # the in-place op rebased y's history
    assert_tensor(y, [2.0, math.e + 1], rtol=1e-6)
    with pytest.raises(RuntimeError, match="(?i)in-?place"):
        y.sum().backward()
    assert x.grad is None


def test_in_place_on_saved_input_raises_at_backward():
    x = leaf([1.0, 2.0])
    h = x * 1
    z = h * h  # MulBackward0 saves both of its inputs
    h.mul_(2)
    with pytest.raises(RuntimeError, match="(?i)in-?place"):
        z.sum().backward()


def test_in_place_on_unsaved_non_leaf_is_fine():
    # y = x * 2 saves x and the number, not y: y += 1 is harmless (a seed says it errors; it does not)
    x = leaf([1.0, 2.0])
    y = x * 2
    assert name(y.grad_fn) == "MulBackward0"
    y += 1
    assert name(y.grad_fn) == "AddBackward0"
    assert next_names(y.grad_fn) == (("MulBackward0", 0), (None, 0))
    assert_tensor(y, [3.0, 5.0])
    assert y._version == 1
    y.sum().backward()
    assert_tensor(x.grad, [2.0, 2.0])


@pytest.mark.parametrize(
    "op, node, grad",
    [
        (lambda y: y.add_(1), "AddBackward0", [1.0, 1.0]),
        (lambda y: y.sub_(1), "SubBackward0", [1.0, 1.0]),
        (lambda y: y.mul_(3), "MulBackward0", [3.0, 3.0]),
        (lambda y: y.div_(4), "DivBackward0", [0.25, 0.25]),
        (lambda y: y.zero_(), "ZeroBackward0", [0.0, 0.0]),
    ],
)
def test_in_place_ops_on_non_leaf_are_differentiated(op, node, grad):
    x = leaf([1.0, 2.0])
    y = x * 1
    assert op(y) is y
    assert name(y.grad_fn) == node
    assert y._version == 1
    y.sum().backward()
    assert_tensor(x.grad, grad)


def test_augmented_assignment_chain_gradient():
    x = leaf([1.0, 2.0])
    y = x * 1
    y -= 1
    y *= 2
    y /= 4
    assert name(y.grad_fn) == "DivBackward0"
    assert_tensor(y, [0.0, 0.5])
    y.sum().backward()
    assert_tensor(x.grad, [0.5, 0.5])


def test_setitem_on_non_leaf_records_copy_slices():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 1
    y[0] = 0.0
    assert name(y.grad_fn) == "CopySlices"
    assert next_names(y.grad_fn) == (("MulBackward0", 0), (None, 0))
    (y * symgrad.tensor([5.0, 6.0, 7.0])).sum().backward()
    assert_tensor(x.grad, [0.0, 6.0, 7.0])


# --------------------------------------------------------------------------- custom Function


class MySquare(symgrad.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


def test_custom_function_node_and_gradient():
    x = leaf([1.0, 3.0])
    y = MySquare.apply(x)
    assert name(y.grad_fn) == "MySquareBackward"
    assert next_names(y.grad_fn) == (("AccumulateGrad", 0),)
    assert y.grad_fn.next_functions[0][0].variable is x
    assert y.requires_grad and not y.is_leaf
    assert_tensor(y, [1.0, 9.0])
    y.sum().backward()
    assert_tensor(x.grad, [2.0, 6.0])
    # saved tensors are freed like any other node's
    with pytest.raises(RuntimeError):
        y.sum().backward()


def test_custom_function_chains_with_builtin_ops():
    x = leaf([0.5, 2.0])
    y = MySquare.apply(x.exp()) * 3
    assert next_names(y.grad_fn) == (("MySquareBackward", 0), (None, 0))
    assert next_names(y.grad_fn.next_functions[0][0]) == (("ExpBackward0", 0),)
    y.sum().backward()
    xv = np.array([0.5, 2.0])
    assert_tensor(x.grad, 6 * np.exp(2 * xv), rtol=1e-5)


def test_custom_function_forward_runs_without_grad_mode():
    modes = []

    class Probe(symgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            modes.append(symgrad.is_grad_enabled())
            y = x * 2
            modes.append(y.requires_grad)
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = leaf([1.0])
    out = Probe.apply(x)
    assert modes == [False, False]
    assert name(out.grad_fn) == "ProbeBackward"
    out.backward()
    assert_tensor(x.grad, [2.0])


def test_custom_function_non_tensor_args_and_needs_input_grad():
    seen = {}

    class Scale(symgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor, w):
            ctx.factor = factor
            ctx.save_for_backward(x, w)
            seen["forward"] = tuple(ctx.needs_input_grad)
            return x * factor * w

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            seen["backward"] = tuple(ctx.needs_input_grad)
            gx = g * ctx.factor * w if ctx.needs_input_grad[0] else None
            gw = g * ctx.factor * x if ctx.needs_input_grad[2] else None
            return gx, None, gw

    x = leaf([1.0, 2.0])
    w = symgrad.tensor([3.0, 4.0])
    y = Scale.apply(x, 2.5, w)
    # the number is not an input of the node; the tensor that needs no grad is (None, 0)
    assert name(y.grad_fn) == "ScaleBackward"
    assert next_names(y.grad_fn) == (("AccumulateGrad", 0), (None, 0))
    assert_tensor(y, [7.5, 20.0])
    y.sum().backward()
    assert seen == {"forward": (True, False, False), "backward": (True, False, False)}
    assert_tensor(x.grad, [7.5, 10.0])
    assert w.grad is None

    w2 = leaf([3.0, 4.0])
    Scale.apply(symgrad.tensor([1.0, 2.0]), 2.0, w2).sum().backward()
    assert seen["backward"] == (False, False, True)
    assert_tensor(w2.grad, [2.0, 4.0])


def test_custom_function_without_grad_inputs_is_untracked():
    y = MySquare.apply(symgrad.tensor([2.0]))
    assert y.requires_grad is False and y.grad_fn is None
    assert_tensor(y, [4.0])


def test_custom_function_mark_non_differentiable():
    class ScaleAndMask(symgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            mask = (x > 1.5).to(x.dtype)
            ctx.mark_non_differentiable(mask)
            return x * 3, mask

        @staticmethod
        def backward(ctx, g_out, g_mask):
            return g_out * 3

    x = leaf([1.0, 2.0, 3.0])
    out, mask = ScaleAndMask.apply(x)
    assert out.requires_grad is True and name(out.grad_fn) == "ScaleAndMaskBackward"
    assert mask.requires_grad is False and mask.grad_fn is None
    assert_tensor(mask, [0.0, 1.0, 1.0], dtype=symgrad.float32)
    (out * mask).sum().backward()
    assert_tensor(x.grad, [0.0, 3.0, 3.0])


@pytest.mark.parametrize("too_many", [False, True])
def test_custom_function_wrong_gradient_count_raises(too_many):
    class Shift(symgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x, amount):
            return x + amount

        @staticmethod
        def backward(ctx, g):
            if too_many:
                return g, None, g
            return g

    x = leaf([1.0, 2.0])
    y = Shift.apply(x, 1.0)
    assert_tensor(y, [2.0, 3.0])
    with pytest.raises(RuntimeError, match="(?i)number of gradients"):
        y.sum().backward()
    assert x.grad is None


# --------------------------------------------------------------------------- autograd.grad


def test_autograd_grad_returns_tuple_and_leaves_grad_untouched():
    x = leaf([1.0, 2.0])
    grads = symgrad.autograd.grad((x ** 3).sum(), x)
    assert isinstance(grads, tuple) and len(grads) == 1
    assert_tensor(grads[0], [3.0, 12.0])
    assert grads[0].requires_grad is False and grads[0].grad_fn is None
    assert x.grad is None

    w = leaf([3.0])
    gx, gw = symgrad.autograd.grad((x * w).sum(), [x, w])
    assert_tensor(gx, [3.0, 3.0])
    assert_tensor(gw, [3.0])
    assert x.grad is None and w.grad is None


def test_autograd_grad_with_grad_outputs():
    x = leaf([1.0, 2.0])
    (g,) = symgrad.autograd.grad(x * x, x, grad_outputs=symgrad.tensor([1.0, 0.5]))
    assert_tensor(g, [2.0, 2.0])
    a = x * 2
    b = x * x
    (g2,) = symgrad.autograd.grad([a, b], x, grad_outputs=[symgrad.ones(2), symgrad.tensor([1.0, 0.0])])
    assert_tensor(g2, [4.0, 2.0])


def test_autograd_grad_with_respect_to_intermediate():
    x = leaf([1.0, 2.0])
    h = x * 3
    (gh,) = symgrad.autograd.grad((h * h).sum(), h)
    assert_tensor(gh, [6.0, 12.0])
    assert x.grad is None


def test_autograd_grad_retain_graph():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    (g1,) = symgrad.autograd.grad(y, x, retain_graph=True)
    (g2,) = symgrad.autograd.grad(y, x)
    assert_tensor(g1, [2.0, 4.0])
    assert_tensor(g2, [2.0, 4.0])
    with pytest.raises(RuntimeError, match=r"(?i)second time|retain_graph"):
        symgrad.autograd.grad(y, x)


def test_autograd_grad_create_graph():
    x = leaf([1.0, 2.0])
    (g,) = symgrad.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert_tensor(g, [3.0, 12.0])
    assert g.requires_grad is True and g.grad_fn is not None
    assert x.grad is None
    (h,) = symgrad.autograd.grad((x ** 3).sum(), x)
    assert h.requires_grad is False and h.grad_fn is None


def test_autograd_grad_allow_unused():
    x = leaf([1.0, 2.0])
    u = leaf([5.0])
    with pytest.raises(RuntimeError, match="allow_unused"):
        symgrad.autograd.grad((x * 2).sum(), [x, u])
    grads = symgrad.autograd.grad((x * 2).sum(), [x, u], allow_unused=True)
    assert isinstance(grads, tuple) and len(grads) == 2
    assert_tensor(grads[0], [2.0, 2.0])
    assert grads[1] is None


def test_autograd_grad_errors():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="(?i)scalar"):
        symgrad.autograd.grad(x * x, x)
    with pytest.raises(RuntimeError, match="(?i)require"):
        symgrad.autograd.grad((x * x).sum(), symgrad.ones(2))
    with pytest.raises(RuntimeError, match="(?i)require"):
        symgrad.autograd.grad(symgrad.ones(2).sum(), x)


# --------------------------------------------------------------------------- higher order


def test_second_derivative_of_cube():
    x = leaf([1.0, 2.0, -1.0])
    (g,) = symgrad.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert_tensor(g, [3.0, 12.0, 3.0])
    (h,) = symgrad.autograd.grad(g.sum(), x, retain_graph=True)
    assert_tensor(h, [6.0, 12.0, -6.0])
    g.sum().backward()
    assert_tensor(x.grad, [6.0, 12.0, -6.0])


def test_second_derivative_of_sin_x_times_x():
    xv = np.array([0.0, 0.5, 1.0])
    x = leaf(xv.tolist())
    y = symgrad.sin(x) * x
    (g,) = symgrad.autograd.grad(y.sum(), x, create_graph=True)
    assert_tensor(g, np.cos(xv) * xv + np.sin(xv), rtol=1e-5, atol=1e-7)
    (h,) = symgrad.autograd.grad(g.sum(), x)
    assert_tensor(h, 2 * np.cos(xv) - xv * np.sin(xv), rtol=1e-5, atol=1e-7)


def test_third_derivative():
    x = leaf([2.0], dtype=symgrad.float64)
    (g1,) = symgrad.autograd.grad((x ** 4).sum(), x, create_graph=True)
    (g2,) = symgrad.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = symgrad.autograd.grad(g2.sum(), x)
    assert_tensor(g1, [32.0], dtype=symgrad.float64)
    assert_tensor(g2, [48.0], dtype=symgrad.float64)
    assert_tensor(g3, [48.0], dtype=symgrad.float64)


def test_hessian_vector_product():
    # f(x) = x0^2 x1 + x1^3 ; H = [[2 x1, 2 x0], [2 x0, 6 x1]]
    x = leaf([1.0, 2.0], dtype=symgrad.float64)
    f = x[0] ** 2 * x[1] + x[1] ** 3
    (g,) = symgrad.autograd.grad(f, x, create_graph=True)
    assert_tensor(g, [4.0, 13.0])
    v = symgrad.tensor([1.0, -1.0], dtype=symgrad.float64)
    (hv,) = symgrad.autograd.grad(g, x, grad_outputs=v)
    assert_tensor(hv, np.array([[4.0, 2.0], [2.0, 12.0]]) @ np.array([1.0, -1.0]), dtype=symgrad.float64)
    # the same product as the gradient of g . v, on a fresh graph
    f2 = x[0] ** 2 * x[1] + x[1] ** 3
    (g2,) = symgrad.autograd.grad(f2, x, create_graph=True)
    (hv2,) = symgrad.autograd.grad((g2 * v).sum(), x)
    assert_tensor(hv2, [2.0, -10.0])


# --------------------------------------------------------------------------- gradcheck


X64 = [0.3, 0.7, 1.1]
W64 = [1.5, -0.5, 2.0]


@pytest.mark.parametrize(
    "label, fn, n_inputs",
    [
        ("sin(x)*exp(x)", lambda t: (t.sin() * t.exp()).sum(), 1),
        ("tanh(x*w)", lambda a, b: (a * b).tanh(), 2),
        ("x / w + x ** 3", lambda a, b: a / b + a ** 3, 2),
        ("softmax", lambda t: symgrad.softmax(t, dim=0), 1),
        ("custom MySquare", lambda t: MySquare.apply(t), 1),
    ],
)
def test_gradcheck_accepts_correct_functions(label, fn, n_inputs):
    inputs = (leaf(X64, symgrad.float64), leaf(W64, symgrad.float64))[:n_inputs]
    assert symgrad.autograd.gradcheck(fn, inputs) is True


def test_gradgradcheck_accepts_correct_functions():
    x = leaf(X64, symgrad.float64)
    w = leaf(W64, symgrad.float64)
    assert symgrad.autograd.gradgradcheck(lambda t: t.sin() * t, (x,)) is True
    assert symgrad.autograd.gradgradcheck(lambda a, b: (a * b).exp() + a ** 3, (x, w)) is True


def test_gradcheck_rejects_a_wrong_backward():
    class BadSquare(symgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x  # should be 2 * x

    x = leaf(X64, symgrad.float64)
    with pytest.raises(RuntimeError):
        symgrad.autograd.gradcheck(BadSquare.apply, (x,))
    assert symgrad.autograd.gradcheck(BadSquare.apply, (x,), raise_exception=False) is False


# --------------------------------------------------------------------------- anomaly mode


def test_nan_gradient_without_anomaly_mode_passes_silently():
    x = leaf([0.0, 1.0])
    (x.sqrt() * 0).sum().backward()  # 0 / (2 * sqrt(0)) = nan
    got = arr(x.grad)
    assert math.isnan(got[0]) and got[1] == 0.0


def test_set_detect_anomaly_names_the_backward_node_and_forward_trace():
    x = leaf([0.0, 1.0])
    symgrad.autograd.set_detect_anomaly(True)
    try:
        y = (x.sqrt() * 0).sum()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match="SqrtBackward0") as info:
                y.backward()
    finally:
        symgrad.autograd.set_detect_anomaly(False)
    # PyTorch: "Function 'SqrtBackward0' returned nan values in its 0th output."
    assert "nan" in str(info.value).lower()
    assert x.grad is None  # the engine stops before anything is accumulated
    # ...and a UserWarning carries the traceback of the forward call that made the node
    traces = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any("SqrtBackward0" in m and "test_engine.py" in m and "x.sqrt()" in m for m in traces), traces

    # after switching it off, the same NaN passes silently again
    z = leaf([0.0, 1.0])
    (z.sqrt() * 0).sum().backward()
    assert math.isnan(arr(z.grad)[0])


def test_anomaly_mode_does_not_disturb_finite_gradients():
    symgrad.autograd.set_detect_anomaly(True)
    try:
        x = leaf([1.0, 4.0])
        x.sqrt().sum().backward()
    finally:
        symgrad.autograd.set_detect_anomaly(False)
    assert_tensor(x.grad, [0.5, 0.25])


def test_detect_anomaly_context_manager():
    z = leaf([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with symgrad.autograd.detect_anomaly():
            y = ((z * 0).log() * 0).sum()  # log(0) = -inf; its backward computes 0 / 0
            with pytest.raises(RuntimeError, match="LogBackward0"):
                y.backward()
    assert z.grad is None
    # the mode ends with the block
    w = leaf([0.0, 1.0])
    ((w * 0).log() * 0).sum().backward()
    assert np.isnan(arr(w.grad)).all()


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    "label, make, dtype_name, values",
    [
        ("tensor([2.0])", lambda: symgrad.tensor([2.0]), "float32", [2.0]),
        ("tensor(2.5)", lambda: symgrad.tensor(2.5), "float32", 2.5),
        ("tensor([1, 2.5])", lambda: symgrad.tensor([1, 2.5]), "float32", [1.0, 2.5]),
        ("tensor([2])", lambda: symgrad.tensor([2]), "int64", [2]),
        ("tensor(float64 array)", lambda: symgrad.tensor(np.array([0.5, 1.5])), "float64", [0.5, 1.5]),
        ("from_numpy float32", lambda: symgrad.from_numpy(np.array([1.5], dtype=np.float32)), "float32",
         [1.5]),
        ("from_numpy float64", lambda: symgrad.from_numpy(np.array([1.5])), "float64", [1.5]),
        ("zeros(2)", lambda: symgrad.zeros(2), "float32", [0.0, 0.0]),
        ("arange(3)", lambda: symgrad.arange(3), "int64", [0, 1, 2]),
        ("arange(3.0)", lambda: symgrad.arange(3.0), "float32", [0.0, 1.0, 2.0]),
        ("linspace", lambda: symgrad.linspace(0, 1, 3), "float32", [0.0, 0.5, 1.0]),
        ("int64 / 2", lambda: symgrad.tensor([1, 2, 3]) / 2, "float32", [0.5, 1.0, 1.5]),
        ("int64 * 2.5", lambda: symgrad.tensor([1, 2, 3]) * 2.5, "float32", [2.5, 5.0, 7.5]),
        ("2.5 * int64", lambda: 2.5 * symgrad.tensor([1, 2, 3]), "float32", [2.5, 5.0, 7.5]),
        ("int64 * 2", lambda: symgrad.tensor([1, 2, 3]) * 2, "int64", [2, 4, 6]),
        ("int64 // 2", lambda: symgrad.tensor([1, 2, 3]) // 2, "int64", [0, 1, 1]),
        ("int64 / int64", lambda: symgrad.tensor([1, 2]) / symgrad.tensor([2, 2]), "float32", [0.5, 1.0]),
        ("int64.sum()", lambda: symgrad.tensor([1, 2, 3]).sum(), "int64", 6),
        ("float64 * 2.5", lambda: symgrad.tensor([1.0], dtype=symgrad.float64) * 2.5, "float64", [2.5]),
        ("float64 / 3", lambda: symgrad.tensor([3.0], dtype=symgrad.float64) / 3, "float64", [1.0]),
        ("float32 vec * float64 0-d",
         lambda: symgrad.tensor([1.0]) * symgrad.tensor(2.0, dtype=symgrad.float64), "float32", [2.0]),
        ("int64 vec * float64 0-d",
         lambda: symgrad.tensor([1]) * symgrad.tensor(2.0, dtype=symgrad.float64), "float64", [2.0]),
        ("float32 * float64", lambda: symgrad.tensor([1.0]) * symgrad.tensor([2.0], dtype=symgrad.float64),
         "float64", [2.0]),
        ("int64 > 1", lambda: symgrad.tensor([1, 2, 3]) > 1, "bool", [False, True, True]),
        ("int64.float()", lambda: symgrad.tensor([1, 2]).float(), "float32", [1.0, 2.0]),
        ("float32.double()", lambda: symgrad.tensor([1.0, 2.0]).double(), "float64", [1.0, 2.0]),
        ("to(float64)", lambda: symgrad.tensor([1.0]).to(symgrad.float64), "float64", [1.0]),
    ],
)
def test_dtype_rules(label, make, dtype_name, values):
    t = make()
    assert t.dtype == getattr(symgrad, dtype_name), (label, t.dtype)
    assert t.tolist() == values
    if not isinstance(values, list):
        assert tuple(t.shape) == ()


def test_default_dtype_and_aliases():
    assert symgrad.get_default_dtype() == symgrad.float32
    assert symgrad.float is symgrad.float32
    assert symgrad.double is symgrad.float64
    assert symgrad.tensor([1.5]).dtype is symgrad.float32


def test_float64_is_kept_through_ops_and_gradient():
    x = leaf([2.0, 3.0], dtype=symgrad.float64)
    y = x.exp() * 2
    assert y.dtype == symgrad.float64
    y.sum().backward()
    assert_tensor(x.grad, 2 * np.exp([2.0, 3.0]), dtype=symgrad.float64, rtol=1e-12)


def test_mixed_precision_gradients_keep_each_input_dtype():
    a = leaf([1.5, 2.0])
    b = leaf([3.0, 4.0], dtype=symgrad.float64)
    c = a * b
    assert c.dtype == symgrad.float64
    c.sum().backward()
    assert_tensor(a.grad, [3.0, 4.0], dtype=symgrad.float32)
    assert_tensor(b.grad, [1.5, 2.0], dtype=symgrad.float64)

    x = leaf([1.0, 2.0])
    y = x * symgrad.tensor([1, 2])
    assert y.dtype == symgrad.float32
    assert next_names(y.grad_fn) == (("AccumulateGrad", 0), (None, 0))
    y.sum().backward()
    assert_tensor(x.grad, [1.0, 2.0], dtype=symgrad.float32)


@pytest.mark.parametrize(
    "label, make",
    [
        ("tensor int64", lambda: symgrad.tensor([1, 2], requires_grad=True)),
        ("tensor bool", lambda: symgrad.tensor([True, False], requires_grad=True)),
        ("zeros int64", lambda: symgrad.zeros(2, dtype=symgrad.int64, requires_grad=True)),
        ("arange int", lambda: symgrad.arange(3, requires_grad=True)),
        ("requires_grad_()", lambda: symgrad.arange(3).requires_grad_()),
        ("requires_grad = True", lambda: setattr(symgrad.tensor([1, 2]), "requires_grad", True)),
    ],
)
def test_integer_tensors_cannot_require_grad(label, make):
    with pytest.raises(RuntimeError, match="(?i)floating point"):
        make()


def test_integer_mean_raises():
    with pytest.raises(RuntimeError):
        symgrad.tensor([1, 2]).mean()
    assert_allclose(arr(symgrad.tensor([1.0, 2.0]).mean()), 1.5)


@pytest.mark.parametrize(
    "label, make",
    [
        ("tensor, str", lambda: symgrad.tensor([1.0], dtype="not_a_dtype")),
        ("tensor, int", lambda: symgrad.tensor([1.0], dtype=12345)),
        ("zeros, str", lambda: symgrad.zeros(2, dtype="not_a_dtype")),
        ("ones, object", lambda: symgrad.ones(2, dtype=object())),
    ],
)
def test_unknown_dtype_raises_type_error(label, make):
    with pytest.raises(TypeError):
        make()


# --------------------------------------------------------------------------- Python scalars on either side


LN2 = math.log(2.0)


@pytest.mark.parametrize(
    "label, op, node, nexts, value, grad",
    [
        ("2 * x", lambda x: 2 * x, "MulBackward0", (("AccumulateGrad", 0), (None, 0)),
         lambda v: 2 * v, lambda v: 2 + 0 * v),
        ("x * 2", lambda x: x * 2, "MulBackward0", (("AccumulateGrad", 0), (None, 0)),
         lambda v: 2 * v, lambda v: 2 + 0 * v),
        ("x + 3", lambda x: x + 3, "AddBackward0", (("AccumulateGrad", 0), (None, 0)),
         lambda v: v + 3, lambda v: 1 + 0 * v),
        ("3 + x", lambda x: 3 + x, "AddBackward0", (("AccumulateGrad", 0), (None, 0)),
         lambda v: v + 3, lambda v: 1 + 0 * v),
        ("x - 3", lambda x: x - 3, "SubBackward0", (("AccumulateGrad", 0), (None, 0)),
         lambda v: v - 3, lambda v: 1 + 0 * v),
        # a number on the left of "-" is rsub, with the number not in next_functions at all
        ("3 - x", lambda x: 3 - x, "RsubBackward1", (("AccumulateGrad", 0),),
         lambda v: 3 - v, lambda v: -1 + 0 * v),
        ("3.0 - x", lambda x: 3.0 - x, "RsubBackward1", (("AccumulateGrad", 0),),
         lambda v: 3 - v, lambda v: -1 + 0 * v),
        ("x / 2", lambda x: x / 2, "DivBackward0", (("AccumulateGrad", 0), (None, 0)),
         lambda v: v / 2, lambda v: 0.5 + 0 * v),
        # 1 / x is reciprocal(x) * 1: a MulBackward0 whose first input is ReciprocalBackward0
        ("1 / x", lambda x: 1 / x, "MulBackward0", (("ReciprocalBackward0", 0), (None, 0)),
         lambda v: 1 / v, lambda v: -1 / v ** 2),
        ("1.5 / x", lambda x: 1.5 / x, "MulBackward0", (("ReciprocalBackward0", 0), (None, 0)),
         lambda v: 1.5 / v, lambda v: -1.5 / v ** 2),
        ("x ** 2", lambda x: x ** 2, "PowBackward0", (("AccumulateGrad", 0),),
         lambda v: v ** 2, lambda v: 2 * v),
        ("x ** 0.5", lambda x: x ** 0.5, "PowBackward0", (("AccumulateGrad", 0),),
         lambda v: v ** 0.5, lambda v: 0.5 * v ** -0.5),
        # number ** tensor is pow.Scalar: PowBackward2, one input
        ("2 ** x", lambda x: 2 ** x, "PowBackward2", (("AccumulateGrad", 0),),
         lambda v: 2 ** v, lambda v: 2 ** v * LN2),
        ("2.0 ** x", lambda x: 2.0 ** x, "PowBackward2", (("AccumulateGrad", 0),),
         lambda v: 2 ** v, lambda v: 2 ** v * LN2),
        ("-x", lambda x: -x, "NegBackward0", (("AccumulateGrad", 0),),
         lambda v: -v, lambda v: -1 + 0 * v),
    ],
)
@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
def test_python_scalar_operands(label, op, node, nexts, value, grad, dtype_name):
    dtype = getattr(symgrad, dtype_name)
    xv = np.array([0.5, 2.0])
    x = leaf(xv.tolist(), dtype)
    y = op(x)
    assert name(y.grad_fn) == node, label
    assert next_names(y.grad_fn) == nexts, label
    assert y.dtype == dtype  # a Python number never widens a float tensor
    rtol = 1e-6 if dtype_name == "float32" else 1e-12
    assert_tensor(y, value(xv), rtol=rtol)
    y.sum().backward()
    assert_tensor(x.grad, grad(xv), dtype=dtype, rtol=rtol)


def test_reciprocal_node_feeds_from_the_leaf():
    x = leaf([0.5, 2.0])
    y = 1 / x
    recip = y.grad_fn.next_functions[0][0]
    assert next_names(recip) == (("AccumulateGrad", 0),)
    assert recip.next_functions[0][0].variable is x


@pytest.mark.parametrize(
    "label, op, node, nexts",
    [
        ("c - x", lambda x, c: c - x, "SubBackward0", ((None, 0), ("AccumulateGrad", 0))),
        ("c ** x", lambda x, c: c ** x, "PowBackward1", ((None, 0), ("AccumulateGrad", 0))),
        ("x ** x", lambda x, c: x ** x, "PowBackward1", (("AccumulateGrad", 0), ("AccumulateGrad", 0))),
        ("x / x", lambda x, c: x / x, "DivBackward0", (("AccumulateGrad", 0), ("AccumulateGrad", 0))),
        ("x.square()", lambda x, c: x.square(), "PowBackward0", (("AccumulateGrad", 0),)),
    ],
)
def test_tensor_operand_node_names(label, op, node, nexts):
    x = leaf([0.5, 2.0])
    c = symgrad.tensor([2.0, 2.0])
    y = op(x, c)
    assert name(y.grad_fn) == node
    assert next_names(y.grad_fn) == nexts


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "label, make, pattern",
    [
        ("[5] + [7]", lambda: symgrad.ones(5) + symgrad.ones(7), r"5[\s\S]*7"),
        ("[2, 5] * [2, 7]", lambda: symgrad.ones(2, 5) * symgrad.ones(2, 7), r"5[\s\S]*7"),
        ("[3, 5] - [4, 1]", lambda: symgrad.ones(3, 5) - symgrad.ones(4, 1), r"3[\s\S]*4"),
    ],
)
def test_shapes_that_do_not_broadcast_raise(label, make, pattern):
    with pytest.raises(RuntimeError, match=pattern):
        make()


def test_matmul_shape_mismatch_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"2\D+3\D+4\D+5"):
        symgrad.ones(2, 3) @ symgrad.ones(4, 5)


def test_broadcast_error_happens_before_graph_is_built():
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError):
        x * symgrad.ones(2)
    (x * 2).sum().backward()
    assert_tensor(x.grad, [2.0, 2.0, 2.0])



# --- Node.register_prehook (values recorded from PyTorch 2.13) -------------------------------------

def test_node_prehook_replaces_gradients_before_the_node_and_post_hooks_see_them():
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).sum()
    calls = []

    def pre(grads):
        calls.append(("pre", [g.tolist() for g in grads]))
        return (grads[0] * 10,)

    handle = y.grad_fn.register_prehook(pre)
    y.grad_fn.register_hook(lambda gi, go: calls.append(("post", [g.tolist() for g in go])))
    y.backward()
    assert calls == [("pre", [1.0]), ("post", [10.0])]
    assert x.grad.tolist() == [30.0, 30.0]
    handle.remove()


def test_node_prehook_runs_after_tensor_hooks_and_retain_grad():
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    m = x * 3
    m.retain_grad()
    m.register_hook(lambda g: g * 2)
    m.grad_fn.register_prehook(lambda g: (g[0] * 5,))
    m.sum().backward()
    assert m.grad.tolist() == [2.0, 2.0] and x.grad.tolist() == [30.0, 30.0]


def test_node_prehook_on_accumulate_grad_and_removal():
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    acc = (x * 1).grad_fn.next_functions[0][0]
    handle = acc.register_prehook(lambda g: (g[0] * 7,))
    (x * 1).sum().backward()
    assert x.grad.tolist() == [7.0, 7.0]
    handle.remove()
    x.grad = None
    (x * 1).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


def test_node_prehook_bad_returns():
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).sum()
    y.grad_fn.register_prehook(lambda g: (g[0], g[0]))
    with pytest.raises(RuntimeError, match=r"hook '<lambda>' has returned an incorrect number of values "
                                           r"\(got 2, but expected 1\)"):
        y.backward()
    y = (x * 3).sum()
    y.grad_fn.register_prehook(lambda g: 5)
    with pytest.raises(TypeError, match="expected tuple, but hook returned 'int'"):
        y.backward()
