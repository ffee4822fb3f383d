"""Two faces, one graph: a function given numpy arrays sees numpy semantics; Tensors keep PyTorch's.

The same Python function runs on both faces here: eagerly on ``symgrad.tensor`` values (PyTorch:
``x.var()`` is unbiased, ``x.sum(0)`` takes ``dim``) and through ``value_and_grad``/``compile`` called
with ndarrays (numpy: ``ddof=0``, numpy's promotion, ``x.size`` an int).
"""

import numpy as np
import pytest
import scipy.special

import symgrad
from symgrad.ir import TraceError
from symgrad.tensor import is_numpy_face


def _value(v):
    return v.detach().numpy() if isinstance(v, symgrad.Tensor) else np.asarray(v)


def compiled(fn, *args):
    return _value(symgrad.compile(fn)(*args))


X = np.random.default_rng(0).standard_normal((3, 4))


def var_plus_max(x):
    return x.var() + x.sum(0).max()


# --- the same function on both faces -------------------------------------------------------------

def test_same_function_follows_torch_on_tensors_and_numpy_on_arrays():
    torch = pytest.importorskip("torch")
    torch_value = var_plus_max(torch.tensor(X)).item()     # unbiased var, max over a tensor
    numpy_value = var_plus_max(X)                           # ddof=0
    assert not np.isclose(torch_value, numpy_value)         # the two faces really differ here
    eager = var_plus_max(symgrad.tensor(X, dtype=symgrad.float64))
    np.testing.assert_allclose(eager.item(), torch_value, rtol=1e-12)
    value, grad = symgrad.value_and_grad(var_plus_max)(X)
    np.testing.assert_allclose(value, numpy_value, rtol=1e-12)
    tx = torch.tensor(X, requires_grad=True)
    (tx.var(unbiased=False) + tx.sum(0).max()).backward()
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-10)


def test_var_and_std_default_to_ddof_0_when_given_arrays():
    """The silent wrong answer this face fixes: a Sharpe ratio was off by ~2.5e-4 relative."""
    torch = pytest.importorskip("torch")
    r = np.random.default_rng(1).standard_normal(250) * 0.01 + 0.001

    def sharpe(r):
        return r.mean() / r.std() * np.sqrt(252.0)

    np.testing.assert_allclose(symgrad.value_and_grad(sharpe)(r)[0], sharpe(r), rtol=1e-13)
    np.testing.assert_allclose(compiled(lambda r: r.var(), r), r.var(), rtol=1e-13)
    np.testing.assert_allclose(compiled(lambda r: r.std(ddof=1), r), r.std(ddof=1), rtol=1e-13)
    # the PyTorch face keeps PyTorch's unbiased default
    t = symgrad.tensor(r, dtype=symgrad.float64)
    np.testing.assert_allclose(sharpe(t).item(), (torch.tensor(r).mean() / torch.tensor(r).std()).item()
                               * np.sqrt(252.0), rtol=1e-12)


def test_user_tensors_keep_pytorch_semantics():
    t = symgrad.tensor(X)
    assert not is_numpy_face(t)
    assert t.size() == (3, 4) and t.size(1) == 4          # a method, as in PyTorch
    assert not is_numpy_face(t * 2.0 + 1)
    assert (symgrad.tensor([1, 2]) * 0.5).dtype is symgrad.float32   # PyTorch's default dtype
    assert np.mean(symgrad.tensor([True, False, True])).dtype is symgrad.float32


def test_traced_values_of_arrays_are_numpy_face_and_tensors_are_not():
    seen = {}

    def f(x, t):
        y, s, c = x * t, np.sin(t), symgrad.tensor(1.0) + t
        seen.update(x=is_numpy_face(x), t=is_numpy_face(t), y=is_numpy_face(y), s=is_numpy_face(s),
                    c=is_numpy_face(c))
        return (y + s + c).sum()   # every value used (a dead elementwise value breaks the codegen, base bug)

    symgrad.compile(f)(X, symgrad.tensor(X, dtype=symgrad.float64))
    assert seen == {"x": True, "t": False, "y": True, "s": False, "c": False}


def test_a_method_style_numpy_function_compiles_unchanged():
    def loss(w, x, y):
        h = np.tanh(x.dot(w))
        z = h - h.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        nll = -(logp * y).sum(axis=1).mean()
        return nll + 1e-3 * (w ** 2).sum() + 0.1 * h.var(axis=0).mean() + 0.01 * h.T.dot(h).std()

    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    y = np.eye(3)[rng.integers(0, 3, 5)]
    value, grad = symgrad.value_and_grad(loss)(w, x, y)
    np.testing.assert_allclose(value, loss(w, x, y), rtol=1e-12)
    eps, fd = 1e-6, np.zeros_like(w)
    for i in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[i] = eps
        fd[i] = (loss(w + d, x, y) - loss(w - d, x, y)) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)


# --- attributes --------------------------------------------------------------------------------

def test_numpy_attributes_on_traced_values():
    seen = {}

    def f(x):
        seen.update(size=x.size, shape=x.shape, ndim=x.ndim, T=x.T.shape, len=len(x),
                    t=x.transpose(2, 0, 1).shape, tt=x.transpose((1, 0, 2)).shape, r=x.reshape(2, -1).shape,
                    rt=x.reshape((4, -1)).shape, nbytes=x.nbytes, itemsize=x.itemsize)
        return x.sum()

    a = np.zeros((2, 3, 4))
    symgrad.compile(f)(a)
    want = dict(size=24, shape=(2, 3, 4), ndim=3, T=(4, 3, 2), len=2, t=(4, 2, 3), tt=(3, 2, 4), r=(2, 12),
                rt=(4, 6), nbytes=192, itemsize=8)
    assert seen == want
    assert isinstance(seen["size"], int) and type(seen["shape"]) is tuple


def test_numpy_takes_the_dtype_of_a_traced_value():
    def f(x):
        eps = np.finfo(x.dtype).eps
        return (x * np.ones(x.shape, dtype=x.dtype) + eps).astype(x.dtype).sum()

    for a in (X, X.astype(np.float32)):
        np.testing.assert_allclose(compiled(f, a), f(a), rtol=1e-6)
        assert compiled(f, a).dtype == f(a).dtype


def test_dtype_comparisons_read_as_numpy_does():
    def f(x):
        scale = 1e-3 if x.dtype == np.float32 else 1e-9   # numpy code branching on the dtype
        assert x.dtype != np.int64 and x.dtype == x.dtype.name
        return x.sum() * scale

    assert compiled(f, X.astype(np.float32)) == pytest.approx(X.astype(np.float32).sum() * 1e-3, rel=1e-6)
    assert compiled(f, X) == pytest.approx(X.sum() * 1e-9, rel=1e-12)
    assert symgrad.float32 == symgrad.float32 and symgrad.float32 != symgrad.float64
    assert symgrad.float64 != None and symgrad.float64 != float   # noqa: E711, E721 - numpy reads both as float64


def test_pytorch_style_code_given_arrays_keeps_pytorch_keywords():
    """Code written for PyTorch and called with ndarrays: PyTorch's keywords select PyTorch's method."""
    torch = pytest.importorskip("torch")
    def f(x):
        n = x.size(0) * x.size()[1]                      # size still callable
        centred = x - x.mean(dim=1, keepdim=True)
        return (centred.std(dim=0) * n).sum() + x.sum(1, True).max() + x.max(dim=1).values.sum()

    t = torch.tensor(X)
    want = f(t).item()
    np.testing.assert_allclose(symgrad.value_and_grad(f)(X)[0], want, rtol=1e-12)
    cube = np.random.default_rng(2).standard_normal((2, 3, 4))
    np.testing.assert_allclose(compiled(lambda k: k.transpose(0, 2), cube), cube.transpose(2, 1, 0))
    np.testing.assert_allclose(compiled(lambda k: k.flatten(1), cube), cube.reshape(2, -1))


# --- numpy's promotion (NEP 50) ------------------------------------------------------------------

PROMOTION = {
    "int * 0.5": lambda x: x.astype(np.int64) * 0.5,
    "0.5 * int": lambda x: 0.5 * x.astype(np.int64),
    "bool * 1.0": lambda x: (x > 0) * 1.0,
    "int / int": lambda x: x.astype(np.int64) / x.astype(np.int64).clip(1, None),
    "int // 2": lambda x: x.astype(np.int64) // 2,
    "int ** 2": lambda x: x.astype(np.int64) ** 2,
    "np.mean(x > 0)": lambda x: np.mean(x > 0),
    "(x > 0).mean()": lambda x: (x > 0).mean(),
    "np.mean(int)": lambda x: np.mean(x.astype(np.int64), axis=0),
    "np.var(int)": lambda x: np.var(x.astype(np.int64)),
    "sum of bools": lambda x: (x > 0).sum(),
    "float32 * 2.0": lambda x: x.astype(np.float32) * 2.0,
    "float32 * np.float64": lambda x: x.astype(np.float32) * np.float64(2.0),
    "float32 + float64 array": lambda x: x.astype(np.float32) + np.ones(4),
    "float32 + int": lambda x: x.astype(np.float32) + 3,
    "np.sqrt(int)": lambda x: np.sqrt(np.abs(x.astype(np.int64))),
    "np.exp(float32)": lambda x: np.exp(x.astype(np.float32)),
    "int32 + np.int64": lambda x: x.astype(np.int32) + np.int64(1),
    "bool + 1": lambda x: (x > 0) + 1,
    "int > 0.5": lambda x: x.astype(np.int64) > 0.5,
    "where(m, int, 0.5)": lambda x: np.where(x > 0, x.astype(np.int64), 0.5),
    "clip(int, 0.5, 2.5)": lambda x: np.clip(x.astype(np.int64), 0.5, 2.5),
    "np.maximum(int, 0.5)": lambda x: np.maximum(x.astype(np.int64), 0.5),
    "int @ float": lambda x: x.astype(np.int64) @ x.T,
    "float32 sum": lambda x: x.astype(np.float32).sum(axis=0),
    "zeros_like(int) * 0.5": lambda x: np.zeros_like(x.astype(np.int64)) * 0.5 + x,
    "ones_like(x, dtype=float)": lambda x: np.ones_like(x.astype(np.int64), dtype=float) * x,
    "full_like(int, 2) / 4": lambda x: np.full_like(x.astype(np.int64), 2) / 4,
    "concatenate([float32, [1.0]])": lambda x: np.concatenate([x[0].astype(np.float32), [1.0]]),
    "float32 * [0.1, ...] list": lambda x: x.astype(np.float32)[0] * [0.1, 0.2, 0.3, 0.4],
    "[0.1, ...] list - float32": lambda x: [0.1, 0.2, 0.3, 0.4] - x.astype(np.float32),
    "np.add(float32, list)": lambda x: np.add(x.astype(np.float32), [0.1, 0.2, 0.3, 0.4]),
    "np.sum(float32, dtype=float)": lambda x: np.sum(x.astype(np.float32), dtype=float),
    "x.mean(dtype=float) of ints": lambda x: x.astype(np.int64).mean(axis=0, dtype=float),
    "np.var(float32, dtype=float)": lambda x: np.var(x.astype(np.float32), dtype=float),
    "np.stack(..., dtype=float)": lambda x: np.stack([x[0].astype(np.float32), x[1]], dtype=float),
}


@pytest.mark.parametrize("name", list(PROMOTION))
def test_numpy_promotion_on_traced_values(name):
    fn = PROMOTION[name]
    x = 3 * X
    want = np.asarray(fn(x))
    got = compiled(fn, x)
    assert got.dtype == want.dtype, f"{name}: compiled dtype {got.dtype}, numpy {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype == np.float32 else 1e-15)


def test_mean_of_a_comparison_is_float64_exactly():
    """np.mean(x > 0) was 0.6666666865 (float32) in a traced function; numpy gives 2/3 in float64."""
    x = np.array([1.0, -1.0, 2.0])
    assert compiled(lambda x: np.mean(x > 0), x) == np.mean(x > 0)


def test_float32_inputs_keep_float32():
    x = X.astype(np.float32)

    def loss(x):
        return (np.tanh(x) * 0.5 + x.mean(axis=0) - x.var()).sum()

    value, grad = symgrad.value_and_grad(loss)(x)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(value, loss(x), rtol=1e-5)


# --- errors name what exists -------------------------------------------------------------------------

def leaf(values):
    return symgrad.tensor(values, dtype=symgrad.float64, requires_grad=True)


# functions no family of the numpy surface adds, so these stay unsupported
@pytest.mark.parametrize("call,name", [
    (lambda t: scipy.special.j0(t), "scipy.special.j0"),
    (lambda t: scipy.special.erfcx(t), "scipy.special.erfcx"),
    (lambda t: np.linalg.eig(np.outer(t, t)), "numpy.linalg.eig"),
    (lambda t: np.fft.fft(t), "numpy.fft.fft"),
    (lambda t: np.polyval(t, 2.0), "numpy.polyval"),
])
def test_unsupported_functions_are_named_with_their_module(call, name):
    with pytest.raises(TypeError) as info:
        call(leaf([0.1, 0.2, 0.3]))
    message = str(info.value)
    assert message.startswith(f"symgrad: {name} is not supported"), message
    assert "use the symgrad op instead" not in message


@pytest.mark.parametrize("func,name", [
    (scipy.special.expit, "scipy.special.expit"), (scipy.special.logsumexp, "scipy.special.logsumexp"),
    (np.linalg.norm, "numpy.linalg.norm"), (np.cumsum, "numpy.cumsum"), (np.arcsin, "numpy.arcsin"),
    (np.add, "numpy.add"),
])
def test_public_names_of_numpy_and_scipy_functions(func, name):
    """The name an error gives (scipy.special.expit was reported as numpy.expit)."""
    from symgrad.ops.numpy_dispatch import _numpy_name
    assert _numpy_name(func) == name


def test_a_symgrad_function_of_the_same_name_is_suggested_only_when_it_exists():
    from symgrad.ops.numpy_dispatch import _suggestions
    assert "symgrad.logsumexp computes it" in _suggestions("numpy.logsumexp")
    assert "symgrad.frobnicate" not in _suggestions("numpy.frobnicate")
    with pytest.raises(TypeError) as info:      # symgrad.select is PyTorch's select(dim, index), not np.select
        np.select([symgrad.tensor([True, False])], [leaf([1.0, 2.0])])
    assert "symgrad.select" not in str(info.value)
    with pytest.raises(TypeError) as info:
        np.fft.fft(leaf([1.0, 2.0]))
    assert "symgrad." not in str(info.value).split("not supported", 1)[1].replace("symgrad tensors", "")


def test_close_supported_names_are_suggested():
    with pytest.raises(TypeError, match=r"numpy[.]nancumsum is not supported.*similar names: .*numpy[.]cumsum"):
        np.nancumsum(leaf([0.1, 0.2]))


def test_unsupported_ufunc_methods_list_the_supported_ones():
    with pytest.raises(TypeError, match=r"numpy[.]add[.]reduceat .*ufunc methods that are: .*numpy[.]add[.]reduce\b"):
        np.add.reduceat(leaf([0.1, 0.2, 0.3]), [0, 2])


# --- sequences of tensors -------------------------------------------------------------------------

def test_lists_of_tensors_to_concatenate_and_stack_stay_in_the_graph():
    a, b = leaf([1.0, 2.0]), leaf([3.0])
    y = np.concatenate([a, b]) * np.array([1.0, 2.0, 3.0])
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [3.0])
    s = np.stack([a, a * 2])
    assert s.shape == (2, 2) and s.grad_fn is not None


def test_concatenating_scalars_says_to_stack():
    with pytest.raises(ValueError, match="zero-dimensional.*numpy.stack"):
        np.concatenate([leaf(1.0), leaf(2.0)])


def test_numpy_array_of_traced_values_says_to_stack():
    with pytest.raises(TraceError, match=r"np[.]stack"):
        symgrad.compile(lambda x: np.array([x.sum(), x.max()]).sum(), strict=True)(X)
    with pytest.raises(TraceError, match=r"np[.]stack"):
        symgrad.compile(lambda x: np.sum([x.sum(), x.max()]), strict=True)(X)


def test_numpy_array_of_tensors_that_require_grad_says_to_stack():
    with pytest.raises(RuntimeError, match=r"np[.]stack"):
        np.array([leaf([1.0]), leaf([2.0])])


def test_list_elements_next_to_numpy_face_values_are_numpy_arrays():
    x = X.astype(np.float32)
    f = lambda x: np.concatenate([x[0], [1.0, 2.0]])   # noqa: E731 - numpy: the list is float64
    got, want = compiled(f, x), f(x)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want)


def test_isnan_of_traced_values_is_an_op_that_follows_each_call():
    f = symgrad.compile(lambda x: np.where(np.isnan(x), 0.0, x).sum())
    assert f(np.array([1.0, np.nan, 3.0])).item() == 4.0
    assert f(np.array([np.nan, 2.0, np.nan])).item() == 2.0


@pytest.mark.parametrize("predicate", [np.isinf, np.isfinite])
def test_value_predicates_of_traced_values_are_ops_that_follow_each_call(predicate):
    """np.isnan of a traced value was computed from the example data and became a constant: the compiled
    function answered 4.0 for [nan, 2, nan] after tracing on [1, nan, 3].  isinf and isfinite are ops."""
    f = symgrad.compile(lambda x: np.where(predicate(x), 0.0, 1.0).sum())
    for values in ([1.0, np.nan, 3.0], [np.inf, 2.0, -np.inf], [np.nan, np.inf, 1.0]):
        arr = np.array(values)
        assert f(arr).item() == np.where(predicate(arr), 0.0, 1.0).sum()
    t = symgrad.tensor([1.0, np.nan, np.inf])
    np.testing.assert_array_equal(predicate(t).numpy(), predicate(np.array([1.0, np.nan, np.inf])))


def test_stacking_different_shapes_is_numpys_value_error():
    with pytest.raises(ValueError, match=r"numpy[.]stack: all input arrays must have the same shape"):
        np.stack([leaf([1.0, 2.0]), leaf([3.0])])


def test_second_order_through_numpy_face_methods():
    """A Hessian-vector product of x.var() + x.max(axis=0).sum() through methods, traced from arrays:
    the inner gradient is taken on numpy-face values and differentiated again."""
    v = np.random.default_rng(4).standard_normal(X.shape)

    def f(x):
        return x.var() + (x.std(axis=1) ** 2).sum()

    def directional(x):
        return (symgrad.grad(f)(x) * v).sum()

    hvp = symgrad.grad(directional)(X)
    n, m = X.size, X.shape[1]
    want = 2.0 / n * (v - v.mean()) + 2.0 / m * (v - v.mean(axis=1, keepdims=True))
    np.testing.assert_allclose(hvp, want, rtol=1e-10, atol=1e-12)
