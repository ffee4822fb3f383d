"""The op library's behaviour beyond single rules: stability, ties, dtypes, bad input.

Mirrors symgrad/ops/functional.py.  Every rule's own gradient checks live in test_rules.py.
"""

import numpy as np
import pytest

import symgrad
from symgrad.autograd import gradcheck


def f64(data, requires_grad=True):
    return symgrad.tensor(np.asarray(data, dtype=np.float64), dtype=symgrad.float64, requires_grad=requires_grad)


# --- numerical stability ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [symgrad.float32, symgrad.float64])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_softmax_family_finite_at_large_magnitude(op, dtype):
    data = np.array([[1e4, -1e4, 0.5e4, 1e4 - 1.0], [-1e4, -1e4 + 3.0, -2e4, -1e4]])
    x = symgrad.tensor(data, dtype=dtype, requires_grad=True)
    y = getattr(symgrad, op)(x, dim=1)
    assert np.isfinite(y.detach().numpy()).all(), f"{op} forward overflowed: {y}"
    weights = symgrad.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)) + 1, dtype=dtype)
    (y * weights).sum().backward()
    g = x.grad.numpy()
    assert np.isfinite(g).all(), f"{op} backward overflowed: {g}"
    assert x.grad.dtype is dtype


def test_softmax_values_at_large_magnitude():
    x = f64([1e4, 1e4 - np.log(3.0)])
    p = symgrad.softmax(x, dim=0).detach().numpy()
    np.testing.assert_allclose(p, [0.75, 0.25], rtol=1e-12)
    lse = symgrad.logsumexp(x, dim=0).item()
    assert lse == pytest.approx(1e4 + np.log(4.0 / 3.0), rel=1e-14)


def test_logsumexp_gradient_is_softmax():
    x = f64([[0.3, -1.2, 2.0], [5.0, 5.0, -3.0]])
    symgrad.logsumexp(x, dim=1).sum().backward()
    e = np.exp(x.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), e / e.sum(axis=1, keepdims=True), rtol=1e-12)


def test_logsumexp_of_all_minus_inf_row_is_minus_inf():
    x = f64([[-np.inf, -np.inf], [0.0, 1.0]], requires_grad=False)
    out = symgrad.logsumexp(x, dim=1).numpy()
    assert out[0] == -np.inf and np.isfinite(out[1])


# --- ties follow PyTorch ---------------------------------------------------------------------

def test_relu_abs_clamp_at_ties():
    x = f64([-1.0, 0.0, 1.0, 2.0])
    (symgrad.relu(x) + symgrad.abs(x) + x.clamp(0.0, 1.0)).sum().backward()
    # relu'(0) = 0, |x|'(0) = 0, clamp passes the gradient at both bounds (inclusive)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0 - 1.0 + 0.0, 0.0 + 0.0 + 1.0, 1.0 + 1.0 + 1.0,
                                                   1.0 + 1.0 + 0.0])


def test_maximum_minimum_split_ties_evenly():
    a, b = f64([1.0, 2.0, 3.0]), f64([1.0, 5.0, 0.0])
    symgrad.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0, 0.0])
    a.grad = b.grad = None
    symgrad.minimum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1.0, 0.0])


def test_max_all_splits_ties_but_max_dim_picks_the_index():
    x = f64([[3.0, 1.0, 3.0], [0.0, 2.0, 2.0]])
    x.max().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])
    x.grad = None
    values, indices = x.max(dim=1)
    np.testing.assert_array_equal(indices.numpy(), [0, 1])
    values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def test_amax_splits_ties_along_dim():
    x = f64([[3.0, 1.0, 3.0], [0.0, 2.0, 2.0]])
    x.amax(dim=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.5, 0.0, 0.5], [0.0, 0.5, 0.5]])


def test_prod_with_zeros_is_exact():
    x = f64([2.0, 0.0, 3.0])
    x.prod().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 6.0, 0.0])
    y = f64([[0.0, 0.0, 4.0], [1.0, 2.0, 3.0]])
    y.prod(dim=1).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [[0.0, 0.0, 0.0], [6.0, 3.0, 2.0]])


# --- reductions with dims --------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, -1, (0, 1), (0, -1)])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "var", "std", "logsumexp"])
def test_reductions_with_dims_gradcheck(op, dim, keepdim):
    rng = np.random.default_rng(7)
    x = f64(rng.uniform(0.5, 2.0, (3, 4)))
    fn = getattr(symgrad, op)
    y = fn(x, dim, keepdim=keepdim)
    want = {"sum": np.sum, "mean": np.mean, "amax": np.amax, "var": lambda a, axis, keepdims: np.var(
        a, axis=axis, keepdims=keepdims, ddof=1), "std": lambda a, axis, keepdims: np.std(
        a, axis=axis, keepdims=keepdims, ddof=1), "logsumexp": lambda a, axis, keepdims: np.log(np.sum(
            np.exp(a), axis=axis, keepdims=keepdims))}[op](x.detach().numpy(), axis=dim, keepdims=keepdim)
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-12)
    assert gradcheck(lambda t: fn(t, dim, keepdim=keepdim), (x,))


# --- dtypes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [symgrad.float32, symgrad.float64])
def test_gradients_have_their_inputs_dtype(dtype):
    x = symgrad.tensor([[0.5, 1.5], [2.0, 0.25]], dtype=dtype, requires_grad=True)
    w = symgrad.tensor([0.1, -0.2], dtype=dtype, requires_grad=True)
    loss = (symgrad.tanh(x @ w) ** 2).mean() + symgrad.log_softmax(x, dim=1).sum() + x.sigmoid().prod()
    assert loss.dtype is dtype
    loss.backward()
    assert x.grad.dtype is dtype and w.grad.dtype is dtype


def test_mixed_float_dtypes_give_each_input_its_own_dtype():
    a = symgrad.tensor([1.0, 2.0], dtype=symgrad.float32, requires_grad=True)
    b = symgrad.tensor([3.0, 4.0], dtype=symgrad.float64, requires_grad=True)
    (a * b).sum().backward()
    assert (a * b).dtype is symgrad.float64
    assert a.grad.dtype is symgrad.float32 and b.grad.dtype is symgrad.float64


def test_integer_and_bool_tensors_flow_through_non_differentiable_ops():
    i = symgrad.tensor([[1, 5, 2], [7, 0, 3]])
    assert i.sum(dim=1).tolist() == [8, 10] and i.sum().dtype is symgrad.int64
    assert i.amax(dim=0).tolist() == [7, 5, 3]
    assert i.max(dim=1).indices.tolist() == [1, 0]
    assert (i > 2).dtype is symgrad.bool and (i > 2).sum().item() == 3
    assert i.reshape(3, 2).tolist() == [[1, 5], [2, 7], [0, 3]]
    assert i.T.tolist() == [[1, 7], [5, 0], [2, 3]]
    assert symgrad.where(i > 2, i, 0).tolist() == [[0, 5, 0], [7, 0, 3]]
    assert i[:, 1].tolist() == [5, 0] and i[i > 4].tolist() == [5, 7]
    assert symgrad.cat([i, i], dim=0).shape == (4, 3)
    assert symgrad.abs(-i).dtype is symgrad.int64 and symgrad.clamp(i, 1, 4).tolist() == [[1, 4, 2], [4, 1, 3]]
    mask = symgrad.tensor([True, False, True])
    assert (mask & ~mask).tolist() == [False, False, False]
    # a float op on ints promotes like PyTorch
    assert symgrad.exp(i).dtype is symgrad.float32 and (i / 2).dtype is symgrad.float32


# --- indexing --------------------------------------------------------------------------------

def test_repeated_advanced_indices_accumulate():
    x = f64([1.0, 2.0, 3.0])
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 1.0])


def test_boolean_mask_gradient():
    x = f64([[1.0, -2.0], [3.0, -4.0]])
    (x[x > 0] * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 0.0], [2.0, 0.0]])


def test_basic_indexing_chain_gradient():
    x = f64(np.arange(24.0).reshape(2, 3, 4))
    y = x[1, ::2, None, 1:3]
    assert tuple(y.shape) == (2, 1, 2)
    y.sum().backward()
    expected = np.zeros((2, 3, 4))
    expected[1, ::2, 1:3] = 1
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    z = x[..., 0]
    assert tuple(z.shape) == (2, 3)


def test_setitem_on_non_leaf_records_copy_slices():
    x = f64([1.0, 2.0, 3.0])
    y = x * 1
    y[1:] = y[1:] * 10
    assert type(y.grad_fn).__name__ == "CopySlices"
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 10.0, 10.0])


# --- matmul ----------------------------------------------------------------------------------

@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                                   ((5, 2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (4, 3, 2)),
                                   ((3,), (2, 3, 4)), ((2, 2, 3), (3,))])
def test_matmul_shapes_and_gradients(sa, sb):
    rng = np.random.default_rng(3)
    a, b = f64(rng.standard_normal(sa)), f64(rng.standard_normal(sb))
    out = a @ b
    np.testing.assert_allclose(out.detach().numpy(), np.matmul(a.detach().numpy(), b.detach().numpy()), rtol=1e-12)
    assert gradcheck(lambda p, q: symgrad.matmul(p, q), (a, b))


# --- bad input: errors name the op and the shapes -------------------------------------------

def test_matmul_shape_mismatch_names_shapes():
    a, b = symgrad.ones(2, 3), symgrad.ones(4, 5)
    with pytest.raises(RuntimeError, match=r"\[2, 3\] and \[4, 5\]"):
        a @ b
    with pytest.raises(RuntimeError, match=r"2x3 and 4x5"):
        symgrad.mm(a, b)
    with pytest.raises(RuntimeError, match=r"matmul.*\[3\].*\[4\]"):
        symgrad.ones(3) @ symgrad.ones(4)
    with pytest.raises(RuntimeError, match="mv"):
        symgrad.mv(symgrad.ones(2, 3), symgrad.ones(2))


def test_broadcast_error_names_op_and_shapes():
    with pytest.raises(RuntimeError, match=r"add.*\[2, 3\].*\[4\]"):
        symgrad.ones(2, 3) + symgrad.ones(4)


@pytest.mark.parametrize("call", [
    lambda x: x.sum(dim=2), lambda x: x.mean(dim=-3), lambda x: x.softmax(dim=5), lambda x: x.transpose(0, 2),
    lambda x: x.unsqueeze(4), lambda x: symgrad.logsumexp(x, dim=2), lambda x: x.amax(dim=(0, 3)),
])
def test_out_of_range_dims(call):
    with pytest.raises(IndexError, match="Dimension out of range"):
        call(symgrad.ones(2, 3))


@pytest.mark.parametrize("index", [1.5, "a", {1: 2}])
def test_bad_index_types(index):
    with pytest.raises(IndexError, match="valid indices"):
        symgrad.ones(3)[index]


def test_index_out_of_bounds_names_dim_and_size():
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
        symgrad.ones(3)[5]
    with pytest.raises(IndexError, match="too many indices"):
        symgrad.ones(3)[0, 0]


def test_cat_and_stack_shape_errors():
    with pytest.raises(RuntimeError, match="cat"):
        symgrad.cat([symgrad.ones(2, 3), symgrad.ones(2, 4)], dim=0)
    with pytest.raises(RuntimeError, match="stack"):
        symgrad.stack([symgrad.ones(2), symgrad.ones(3)])


def test_float_only_reductions_reject_integers():
    with pytest.raises(RuntimeError, match="mean"):
        symgrad.tensor([1, 2]).mean()
    with pytest.raises(RuntimeError, match="softmax"):
        symgrad.softmax(symgrad.tensor([1, 2]), dim=0)
