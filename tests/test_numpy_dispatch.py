"""numpy code on symgrad tensors: ``__array_ufunc__`` (NEP 13) and ``__array_function__`` (NEP 18).

Each case runs one function twice: on plain numpy arrays (the reference value) and on
float64 tensors that require grad, where the result must be a Tensor with the same value
whose gradient passes ``gradcheck``.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import symgrad
from symgrad.autograd import gradcheck

RNG = np.random.default_rng(0)


def leaf(a):
    return symgrad.tensor(np.asarray(a, dtype=np.float64), dtype=symgrad.float64, requires_grad=True)


def data(t):
    return np.asarray(t.detach().tolist()) if isinstance(t, symgrad.Tensor) else np.asarray(t)


def check(fn, *arrays, grad=True):
    """``fn`` on tensors matches ``fn`` on the arrays, records a graph and has the right gradient."""
    expected = fn(*arrays)
    tensors = [leaf(a) for a in arrays]
    got = fn(*tensors)
    assert isinstance(got, symgrad.Tensor), f"got {type(got).__name__}, not a Tensor"
    assert_allclose(data(got), expected, rtol=1e-12, atol=1e-12)
    assert got.shape == np.shape(expected)
    if grad:
        assert got.requires_grad and got.grad_fn is not None
        assert gradcheck(fn, tensors)
    return got


def central_fd(f, arrays, k, eps=1e-6):
    """d f(*arrays) / d arrays[k] by central differences, all in plain numpy."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    g = np.zeros_like(arrays[k])
    flat, gflat = arrays[k].reshape(-1), g.reshape(-1)
    for j in range(flat.size):
        orig = flat[j]
        flat[j] = orig + eps
        plus = float(f(*arrays))
        flat[j] = orig - eps
        minus = float(f(*arrays))
        flat[j] = orig
        gflat[j] = (plus - minus) / (2 * eps)
    return g


# --------------------------------------------------------------------------- ufuncs

POS = RNG.uniform(0.5, 2.0, (3, 4))
ANY = RNG.uniform(-1.5, 1.5, (3, 4))
NONZERO = np.where(np.abs(ANY) < 0.1, 0.5, ANY)

UNARY = [
    (np.exp, ANY), (np.log, POS), (np.log1p, POS), (np.expm1, ANY), (np.exp2, ANY), (np.log2, POS),
    (np.sin, ANY), (np.cos, ANY), (np.tan, ANY * 0.8), (np.tanh, ANY), (np.sinh, ANY), (np.cosh, ANY),
    (np.arctan, ANY), (np.sqrt, POS), (np.square, ANY), (np.absolute, NONZERO), (np.abs, NONZERO),
    (np.sign, NONZERO), (np.negative, ANY), (np.reciprocal, POS),
]


@pytest.mark.parametrize("ufunc,x", UNARY, ids=[u.__name__ + str(i) for i, (u, _) in enumerate(UNARY)])
def test_unary_ufunc(ufunc, x):
    check(ufunc, x)


def test_positive_keeps_the_graph():
    x = leaf(ANY)
    y = np.positive(x * 2.0)
    assert_allclose(data(y), ANY * 2.0)
    np.sum(y).backward()
    assert_allclose(data(x.grad), np.full(ANY.shape, 2.0))


BINARY = [np.add, np.subtract, np.multiply, np.divide, np.true_divide, np.power, np.maximum, np.minimum]


@pytest.mark.parametrize("ufunc", BINARY, ids=lambda u: u.__name__)
def test_binary_ufunc_tensor_tensor(ufunc):
    check(ufunc, POS, RNG.uniform(0.5, 2.0, (3, 4)))
    check(ufunc, POS, RNG.uniform(0.5, 2.0, (4,)))  # broadcasting sums the gradient back


@pytest.mark.parametrize("ufunc", BINARY, ids=lambda u: u.__name__)
def test_binary_ufunc_mixed_operands_keep_their_order(ufunc):
    const = RNG.uniform(0.5, 2.0, (3, 4))
    check(lambda t: ufunc(const, t), POS)  # numpy array first
    check(lambda t: ufunc(t, const), POS)
    for scalar in (np.float64(1.7), 1.7, np.float32(1.7), 3):
        check(lambda t, s=scalar: ufunc(s, t), POS)
        check(lambda t, s=scalar: ufunc(t, s), POS)


def test_operators_with_arrays_on_the_left_dispatch_in_order():
    arr = RNG.uniform(0.5, 2.0, (3, 4))
    cases = {
        "add": lambda t: arr + t, "sub": lambda t: arr - t, "mul": lambda t: arr * t,
        "div": lambda t: arr / t, "pow": lambda t: arr ** t, "scalar_sub": lambda t: np.float64(2.0) - t,
        "scalar_div": lambda t: np.float64(2.0) / t, "scalar_pow": lambda t: np.float64(2.0) ** t,
        "rsub": lambda t: t - arr, "neg": lambda t: -t + arr,
    }
    for name, fn in cases.items():
        got = check(fn, POS)
        assert got.grad_fn is not None, name


def test_array_minus_tensor_gradient_is_minus_one():
    x = leaf([1.0, 2.0])
    y = np.array([10.0, 20.0]) - x
    assert_allclose(data(y), [9.0, 18.0])
    np.sum(y).backward()
    assert_allclose(data(x.grad), [-1.0, -1.0])


def test_list_of_tensors_as_an_operand_stays_in_the_graph():
    a, b = leaf(1.0), leaf(2.0)
    y = np.multiply([a, b], leaf([3.0, 4.0]))
    assert_allclose(data(y), [3.0, 8.0])
    np.sum(y).backward()
    assert a.grad.item() == 3.0 and b.grad.item() == 4.0


def test_floor_divide_is_a_value_like_torch():
    x, arr = POS * 5, RNG.uniform(0.5, 2.0, (3, 4))
    got = np.floor_divide(arr * 7, leaf(x))
    assert_allclose(data(got), np.floor_divide(arr * 7, x))
    assert_allclose(data(leaf(x) // arr), x // arr)
    assert_allclose(data(arr // leaf(x)), arr // x)


@pytest.mark.parametrize("ufunc", [np.greater, np.less, np.greater_equal, np.less_equal, np.equal,
                                   np.not_equal], ids=lambda u: u.__name__)
def test_comparisons(ufunc):
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([3.0, 2.0, 1.0])
    t = leaf(a)
    for got, want in [(ufunc(t, b), ufunc(a, b)), (ufunc(b, t), ufunc(b, a)), (ufunc(t, 2.0), ufunc(a, 2.0)),
                      (ufunc(np.float64(2.0), t), ufunc(2.0, a))]:
        assert isinstance(got, symgrad.Tensor) and got.dtype is symgrad.bool
        assert_array_equal(data(got), want)
    assert_array_equal(data(b > t), b > a)
    assert_array_equal(data(b == t), b == a)


def test_logical_ufuncs_and_predicates():
    a, b = np.array([True, False, True]), np.array([True, True, False])
    ta = symgrad.tensor(a)
    assert_array_equal(data(np.logical_and(ta, b)), a & b)
    assert_array_equal(data(np.logical_or(b, ta)), a | b)
    assert_array_equal(data(np.logical_not(ta)), ~a)
    x = symgrad.tensor([1.0, np.nan, np.inf])
    for ufunc in (np.isnan, np.isinf, np.isfinite):
        got = ufunc(x)
        assert isinstance(got, symgrad.Tensor) and got.dtype is symgrad.bool
        assert_array_equal(data(got), ufunc(np.array([1.0, np.nan, np.inf])))


@pytest.mark.parametrize("sa,sb", [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((3, 4), (4, 2)),
                                   ((2, 3, 4), (4, 2)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4,))])
def test_matmul_ufunc(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    check(np.matmul, a, b)
    check(lambda x, y: x @ y, a, b)
    check(lambda y: a @ y, b)  # ndarray @ Tensor goes through np.matmul
    check(lambda x: x @ b, a)


# --------------------------------------------------------------------------- dtypes


def test_float32_tensor_with_float64_numpy_scalars_stays_float32():
    t = symgrad.tensor([1.0, 2.0], requires_grad=True)
    for got in (np.float64(2.0) * t, t * np.float64(2.0), np.multiply(np.float64(2.0), t), np.float64(2.0) - t,
                np.array(2.0) * t, np.add(t, 1.5), np.exp(t), np.mean(t), np.maximum(t, np.float64(0.0)),
                np.power(t, np.float64(2.0))):
        assert got.dtype is symgrad.float32, got
        assert got.requires_grad


def test_dimensioned_float64_array_promotes_like_a_tensor():
    t = symgrad.tensor([1.0, 2.0])
    assert (np.array([1.0, 2.0]) * t).dtype is symgrad.float64  # torch: float32 * float64 tensor -> float64
    assert (np.array([1, 2]) * t).dtype is symgrad.float32       # int array does not widen a float tensor


def test_integer_sums_and_means():
    t = symgrad.tensor([1, 2, 4])
    assert np.sum(t).dtype is symgrad.int64 and np.sum(t).item() == 7
    m = np.mean(t)  # numpy makes a float; symgrad uses the default float dtype
    assert m.dtype is symgrad.get_default_dtype() and m.item() == pytest.approx(7 / 3)


# --------------------------------------------------------------------------- functions

X3 = RNG.standard_normal((2, 3, 4))
X2 = RNG.standard_normal((3, 4))
CONST = RNG.standard_normal((3, 4))
MASK = RNG.random((3, 4)) < 0.5
LO = RNG.uniform(-1.0, -0.2, (3, 4))

FUNCTIONS = {
    "sum": (lambda x: np.sum(x), X3),
    "sum_axis": (lambda x: np.sum(x, axis=1), X3),
    "sum_neg_axis_keepdims": (lambda x: np.sum(x, axis=-1, keepdims=True), X3),
    "sum_tuple": (lambda x: np.sum(x, axis=(0, 2)), X3),
    "sum_keepdims_all": (lambda x: np.sum(x, keepdims=True), X3),
    "sum_positional_axis": (lambda x: np.sum(x, 0), X3),
    "sum_empty_axes": (lambda x: np.sum(x, axis=()) * 1.0, X2),
    "mean": (lambda x: np.mean(x), X3),
    "mean_axis": (lambda x: np.mean(x, axis=2), X3),
    "mean_tuple_keepdims": (lambda x: np.mean(x, axis=(0, 1), keepdims=True), X3),
    "prod": (lambda x: np.prod(x), X2),
    "prod_axis": (lambda x: np.prod(x, axis=1), X3),
    "prod_tuple": (lambda x: np.prod(x, axis=(0, 2)), X3),
    "prod_tuple_keepdims": (lambda x: np.prod(x, axis=(2, 0), keepdims=True), X3),
    "prod_keepdims_all": (lambda x: np.prod(x, keepdims=True), X2),
    "max": (lambda x: np.max(x), X3),
    "max_axis": (lambda x: np.max(x, axis=1), X3),
    "max_tuple_keepdims": (lambda x: np.max(x, axis=(0, 2), keepdims=True), X3),
    "amax": (lambda x: np.amax(x, axis=-1), X3),
    "min": (lambda x: np.min(x), X3),
    "min_axis_keepdims": (lambda x: np.min(x, axis=0, keepdims=True), X3),
    "amin": (lambda x: np.amin(x, axis=(1, 2)), X3),
    "var": (lambda x: np.var(x), X3),
    "var_ddof1_axis": (lambda x: np.var(x, axis=1, ddof=1), X3),
    "var_keepdims": (lambda x: np.var(x, axis=(0, 2), keepdims=True), X3),
    "std": (lambda x: np.std(x), X3),
    "std_ddof1": (lambda x: np.std(x, ddof=1, axis=-1), X3),
    "std_correction": (lambda x: np.std(x, correction=1), X2),
    "where": (lambda x: np.where(MASK, x, CONST), X2),
    "where_scalar": (lambda x: np.where(MASK, x, 0.0), X2),
    "where_tensor_condition": (lambda x: np.where(x > 0, x, x * 0.1), X2),
    "where_scalar_first": (lambda x: np.where(MASK, 2.0, x), X2),
    "clip": (lambda x: np.clip(x, -0.5, 0.5), X2),
    "clip_upper_only": (lambda x: np.clip(x, None, 0.3), X2),
    "clip_array_bound": (lambda x: np.clip(x, LO, None), X2),
    "clip_array_bounds": (lambda x: np.clip(x, LO, LO + 1.0), X2),
    "clip_keywords": (lambda x: np.clip(x, min=-0.5, max=0.5), X2),
    "reshape": (lambda x: np.reshape(x, (4, 6)), X3),
    "reshape_minus_one": (lambda x: np.reshape(x, -1), X3),
    "ravel": (lambda x: np.ravel(x), X3),
    "transpose": (lambda x: np.transpose(x), X3),
    "transpose_axes": (lambda x: np.transpose(x, (1, 0, 2)), X3),
    "swapaxes": (lambda x: np.swapaxes(x, 0, 2), X3),
    "expand_dims": (lambda x: np.expand_dims(x, 1), X2),
    "expand_dims_tuple": (lambda x: np.expand_dims(x, (0, -1)), X2),
    "squeeze": (lambda x: np.squeeze(x), X2.reshape(3, 1, 4, 1)),
    "squeeze_axis": (lambda x: np.squeeze(x, axis=1), X2.reshape(3, 1, 4, 1)),
    "squeeze_axes": (lambda x: np.squeeze(x, axis=(1, -1)), X2.reshape(3, 1, 4, 1)),
    "concatenate": (lambda x: np.concatenate([x, CONST, x], axis=1), X2),
    "concatenate_none": (lambda x: np.concatenate((CONST, x), axis=None), X2),
    "stack": (lambda x: np.stack([x, CONST], axis=1), X2),
    "broadcast_to": (lambda x: np.broadcast_to(x, (2, 3, 4)), X2),
    "outer": (lambda x: np.outer(x, CONST[0]), X2[0]),
    "copy": (lambda x: np.copy(x), X2),
    "dot_1d_1d": (lambda x: np.dot(x, CONST[0]), X2[0]),
    "dot_2d_1d": (lambda x: np.dot(x, CONST[0]), X2),
    "dot_1d_2d": (lambda x: np.dot(CONST[:, 0], x), X2),
    "dot_2d_2d": (lambda x: np.dot(x, CONST.T), X2),
    "dot_scalar": (lambda x: np.dot(x, 2.0), X2),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_function(name):
    fn, x = FUNCTIONS[name]
    check(fn, x)


@pytest.mark.parametrize("fn", [np.dot, np.matmul, lambda a, b: np.where(a > b, a, b),
                                lambda a, b: np.concatenate([a, b]), lambda a, b: np.stack((a, b), axis=-1),
                                lambda a, b: np.clip(a, b - 1.0, b + 1.0)])
def test_two_tensor_functions(fn):
    check(fn, RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3)))


def test_numpy_var_default_is_ddof0():
    x = leaf(X2)
    assert_allclose(np.var(x).item(), np.var(X2))
    assert not np.isclose(np.var(x).item(), X2.var(ddof=1))
    assert_allclose(np.std(x, ddof=1).item(), X2.std(ddof=1))


def test_where_with_one_argument_gives_index_tensors():
    t = symgrad.tensor([[0.0, 1.0], [2.0, 0.0]])
    got = np.where(t)
    want = np.where(np.array([[0.0, 1.0], [2.0, 0.0]]))
    assert len(got) == 2
    for g, w in zip(got, want):
        assert isinstance(g, symgrad.Tensor) and g.dtype is symgrad.int64
        assert_array_equal(data(g), w)


def test_squeeze_of_a_non_unit_axis_is_an_error_like_numpy():
    with pytest.raises(ValueError, match="size not equal to one"):
        np.squeeze(leaf(X2), axis=0)


def test_shape_ndim_size_are_plain_python_values():
    t = leaf(X3)
    assert np.shape(t) == (2, 3, 4) and type(np.shape(t)) is tuple
    assert np.ndim(t) == 3 and type(np.ndim(t)) is int
    assert np.size(t) == 24 and type(np.size(t)) is int
    assert np.size(t, 1) == 3


def test_value_only_helpers():
    t = leaf([1.0, 2.0])
    assert np.allclose(t, [1.0, 2.0 + 1e-10]) is True
    assert np.array_equal(t, np.array([1.0, 2.0])) is True
    assert_array_equal(data(np.isclose(t, [1.0, 3.0])), [True, False])
    z = np.zeros_like(t)
    assert isinstance(z, symgrad.Tensor) and z.dtype is symgrad.float64 and not z.requires_grad
    assert_array_equal(data(np.ones_like(t)), [1.0, 1.0])
    assert_array_equal(data(np.full_like(t, 7.0)), [7.0, 7.0])


def test_asarray_returns_the_data_of_a_tensor_without_grad():
    t = leaf([1.0, 2.0, 3.0]).detach()
    a = np.asarray(t)
    assert type(a) is np.ndarray
    assert_array_equal(a, [1.0, 2.0, 3.0])
    assert np.shares_memory(a, t.numpy())
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    assert_array_equal(np.array(t), [1.0, 2.0, 3.0])


def test_asarray_of_a_tensor_that_requires_grad_raises_as_in_torch():
    t = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="requires grad"):
        np.asarray(t)
    with symgrad.no_grad():
        assert_array_equal(np.asarray(t), [1.0, 2.0, 3.0])


# --------------------------------------------------------------------------- refusals


UNSUPPORTED = {
    "numpy.spacing": lambda t: np.spacing(t),          # (arcsin and hypot are supported now)
    "numpy.nextafter": lambda t: np.nextafter(t, t),
    "numpy.linalg.eig": lambda t: np.linalg.eig(t),        # linalg family: einsum and norm now work
    "numpy.linalg.matrix_rank": lambda t: np.linalg.matrix_rank(t),
    # reductions family: these ufunc methods stay unsupported
    "numpy.add.reduceat": lambda t: np.add.reduceat(t, [0, 2]),
    "numpy.maximum.accumulate": lambda t: np.maximum.accumulate(t),
    "numpy.logical_and.reduce": lambda t: np.logical_and.reduce(t),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_raises_type_error_naming_it(name):
    t = leaf([0.1, 0.2, 0.3])
    with pytest.raises(TypeError, match=rf"symgrad.*{name.replace('.', '[.]')}\b.*not supported"):
        UNSUPPORTED[name](t)


@pytest.mark.parametrize("call", [
    lambda t: np.add(t, t, out=np.empty(3)),
    lambda t: np.exp(t, out=np.empty(3)),
    lambda t: np.add(t, 1.0, where=np.array([True, False, True])),
    lambda t: np.add(t, 1.0, dtype=np.float32),
    lambda t: np.sum(t, out=np.empty(())),
    lambda t: np.sum(t, where=np.array([True, False, True])),
    lambda t: np.max(t, initial=0.0),
])
def test_out_where_and_friends_are_refused(call):
    with pytest.raises(TypeError, match=r"symgrad: numpy[.]\w+ with (out|where|dtype|initial)=.*not supported"):
        call(leaf([0.1, 0.2, 0.3]))


def test_augmented_assignment_into_an_array_is_refused():
    a = np.zeros(3)
    with pytest.raises(TypeError, match=r"numpy[.]add with out="):
        a += leaf([0.1, 0.2, 0.3])


def test_ufunc_at_into_an_array_with_index_tensors_works():
    # integer index tensors carry no graph; library code (and symgrad's own forwards) scatter with them
    out = np.zeros(4)
    np.add.at(out, symgrad.tensor([0, 2, 0]), np.array([1.0, 2.0, 3.0]))
    assert_array_equal(out, [4.0, 0.0, 2.0, 0.0])
    with pytest.raises(TypeError, match=r"numpy[.]add[.]at"):  # differentiable values would lose their graph
        np.add.at(np.zeros(3), [0], leaf([1.0]))


def test_dot_of_3d_arrays_is_refused():
    with pytest.raises(TypeError, match="numpy.dot"):
        np.dot(leaf(X3), leaf(X3.transpose(0, 2, 1)))


# --------------------------------------------------------------------------- acceptance


def mlp(W1, b1, W2, b2, X, Y):
    h = np.tanh(X @ W1 + b1)
    out = h @ W2 + b2
    return np.mean((out - Y) ** 2)


def ce(L, labels):
    m = np.max(L, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(L - m), axis=1)) + m[:, 0]
    return np.mean(lse - L[np.arange(len(labels)), labels])


@pytest.mark.parametrize("data_as_tensors", [False, True])
def test_mlp_written_in_numpy(data_as_tensors):
    rng = np.random.default_rng(1)
    params = [rng.standard_normal((3, 5)) * 0.5, rng.standard_normal(5) * 0.1,
              rng.standard_normal((5, 2)) * 0.5, rng.standard_normal(2) * 0.1]
    X, Y = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    ts = [leaf(p) for p in params]
    Xi, Yi = (symgrad.tensor(X, dtype=symgrad.float64), symgrad.tensor(Y, dtype=symgrad.float64)) \
        if data_as_tensors else (X, Y)
    loss = mlp(*ts, Xi, Yi)
    assert isinstance(loss, symgrad.Tensor) and loss.grad_fn is not None
    assert_allclose(loss.item(), mlp(*params, X, Y), rtol=1e-12)
    loss.backward()
    for k, t in enumerate(ts):
        assert_allclose(data(t.grad), central_fd(lambda *p: mlp(*p, X, Y), params, k), rtol=1e-6, atol=1e-8)


def test_softmax_cross_entropy_written_in_numpy():
    rng = np.random.default_rng(2)
    logits, labels = rng.standard_normal((5, 4)) * 2.0, np.array([0, 3, 1, 1, 2])
    L = leaf(logits)
    loss = ce(L, labels)
    assert isinstance(loss, symgrad.Tensor) and loss.grad_fn is not None
    assert_allclose(loss.item(), ce(logits, labels), rtol=1e-12)
    loss.backward()
    assert_allclose(data(L.grad), central_fd(lambda a: ce(a, labels), [logits], 0), rtol=1e-6, atol=1e-8)
    # and against the closed form softmax - onehot
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(5), labels] -= 1
    assert_allclose(data(L.grad), p / 5, rtol=1e-10, atol=1e-12)


def test_numpy_loss_passes_gradcheck():
    rng = np.random.default_rng(3)
    labels = np.array([1, 0, 2])
    assert gradcheck(lambda L: ce(L, labels), (leaf(rng.standard_normal((3, 3))),))
    X, Y = rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    params = [leaf(rng.standard_normal(s)) for s in [(2, 3), (3,), (3, 1), (1,)]]
    assert gradcheck(lambda *p: mlp(*p, X, Y), params)
