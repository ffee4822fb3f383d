"""The numpy usage table, "two faces" family: numpy method forms and numpy's promotion on values traced
for a function given numpy arrays, and sequences of arrays given to numpy.concatenate / numpy.stack.

Method-form rows are ``eager=False``: on a PyTorch-face tensor (``symgrad.tensor``) ``x.max(axis=1)`` or
``x.var()`` mean what PyTorch says; the compiled run (``value_and_grad`` called with ndarrays) is where
numpy's meaning applies, and is checked against numpy's values and finite differences.
"""

import numpy as np
from numpy_usage import Usage, check, params

import symgrad


def mat(rng, shape=(3, 4)):
    return (rng.standard_normal(shape),)


def vec(rng, n=5):
    return (rng.standard_normal(n),)


def cube(rng):
    return (rng.standard_normal((2, 3, 4)),)


def positive(rng, shape=(3, 4)):
    return (rng.uniform(0.5, 2.0, shape),)


def ints(rng, shape=(3, 4)):
    return (rng.integers(-5, 6, shape),)


def method(name, fn, args=mat, **kw):
    return Usage(name, fn, args, eager=False, **kw)


ROWS = [
    # --- reductions with numpy's signature ----------------------------------------------------
    method("x.sum()", lambda x: x.sum()),
    method("x.sum(axis=1)", lambda x: x.sum(axis=1)),
    method("x.sum(axis=-1, keepdims=True)", lambda x: x.sum(axis=-1, keepdims=True)),
    method("x.sum(axis=(0, 1))", lambda x: x.sum(axis=(0, 1))),
    method("x.sum(0) 3-D", lambda x: x.sum(0), cube),
    method("x.mean()", lambda x: x.mean()),
    method("x.mean(axis=0)", lambda x: x.mean(axis=0)),
    method("x.mean(axis=-1, keepdims=True)", lambda x: x.mean(axis=-1, keepdims=True)),
    method("x.mean(axis=(0, 2)) 3-D", lambda x: x.mean(axis=(0, 2)), cube),
    method("x.var() (ddof=0)", lambda x: x.var()),
    method("x.var() 1-D (ddof=0)", lambda x: x.var(), vec),
    method("x.var(axis=1)", lambda x: x.var(axis=1)),
    method("x.var(ddof=1)", lambda x: x.var(ddof=1)),
    method("x.var(axis=-1, keepdims=True)", lambda x: x.var(axis=-1, keepdims=True)),
    method("x.std() (ddof=0)", lambda x: x.std()),
    method("x.std(axis=0, keepdims=True)", lambda x: x.std(axis=0, keepdims=True)),
    method("x.std(axis=-1, ddof=1)", lambda x: x.std(axis=-1, ddof=1)),
    method("x.max()", lambda x: x.max()),
    method("x.max(axis=1, keepdims=True)", lambda x: x.max(axis=1, keepdims=True)),
    method("x.max(-1) 3-D", lambda x: x.max(-1), cube),
    method("x.min(axis=0)", lambda x: x.min(axis=0)),
    method("x.min() 1-D", lambda x: x.min(), vec),
    # values only: a compiled gradient of prod is refused by a TraceError (it depends on where the zeros are)
    method("x.prod(axis=1)", lambda x: x.prod(axis=1), positive, grad=False),
    method("x.prod() 1-D", lambda x: x.prod(), positive, grad=False),
    method("x.clip(-0.5, 0.5)", lambda x: x.clip(-0.5, 0.5)),
    method("x.clip(min=0.0)", lambda x: x.clip(min=0.0)),
    method("(x > 0).all(axis=1)", lambda x: (x > 0).all(axis=1), grad=False),
    method("(x > 0).any()", lambda x: (x > 0).any(), grad=False),
    method("(x > 1).any(axis=-1, keepdims=True)", lambda x: (x > 1).any(axis=-1, keepdims=True), grad=False),
    # --- attributes and shape methods ----------------------------------------------------------
    method("x.T", lambda x: x.T),
    method("x.T 3-D reverses all axes", lambda x: x.T, cube),
    method("x.transpose() 3-D", lambda x: x.transpose(), cube),
    method("x.transpose(0, 2, 1)", lambda x: x.transpose(0, 2, 1), cube),
    method("x.transpose((2, 0, 1))", lambda x: x.transpose((2, 0, 1)), cube),
    method("x.reshape(2, -1)", lambda x: x.reshape(2, -1)),
    method("x.reshape((2, -1))", lambda x: x.reshape((2, -1))),
    method("x.reshape(-1)", lambda x: x.reshape(-1), cube),
    method("x.flatten()", lambda x: x.flatten()),
    method("x.ravel() 3-D", lambda x: x.ravel(), cube),
    method("x.squeeze(1)", lambda x: x.squeeze(1), lambda rng: mat(rng, (3, 1, 4))),
    method("x.squeeze()", lambda x: x.squeeze(), lambda rng: mat(rng, (1, 3, 1))),
    method("x.swapaxes(0, 1)", lambda x: x.swapaxes(0, 1)),
    method("x.copy()", lambda x: x.copy() * 2.0),
    method("x * x.size", lambda x: x * x.size),
    method("x / x.shape[0] + x.ndim", lambda x: x / x.shape[0] + x.ndim),
    method("x * len(x)", lambda x: x * len(x)),
    method("x.astype(float)", lambda x: x.astype(float) * 2.0),
    method("x.astype(np.float64)", lambda x: x.astype(np.float64).sum(axis=0)),
    method("x.astype(np.float32)", lambda x: x.astype(np.float32) * 2.0, grad=False, rtol=1e-6),
    method("x.astype(int)", lambda x: (3 * x).astype(int), grad=False),
    # --- products --------------------------------------------------------------------------------
    method("a.dot(b) 2-D", lambda a, b: a.dot(b), lambda rng: (rng.standard_normal((3, 4)),
                                                               rng.standard_normal((4, 2))), wrt=(0, 1)),
    method("a.dot(v) 2-D x 1-D", lambda a, v: a.dot(v), lambda rng: (rng.standard_normal((3, 4)),
                                                                   rng.standard_normal(4)), wrt=(0, 1)),
    method("v.dot(v) 1-D", lambda v: v.dot(v), vec),
    method("x.dot(x.T)", lambda x: x.dot(x.T)),
    method("K.transpose(0, 2, 1) @ K", lambda k: k.transpose(0, 2, 1) @ k, cube),
    # --- numpy's promotion ----------------------------------------------------------------------
    method("int array * 0.5", lambda x: (3 * x).astype(int) * 0.5, grad=False),
    method("int array / int array", lambda x: (3 * x).astype(int) / 7, grad=False),
    method("bool array * 1.0", lambda x: (x > 0) * 1.0, grad=False),
    method("np.mean(x > 0)", lambda x: np.mean(x > 0), grad=False),
    method("(x > 0).sum()", lambda x: (x > 0).sum(), grad=False),
    method("(x > 0).mean(axis=0)", lambda x: (x > 0).mean(axis=0), grad=False),
    method("np.sqrt of an int array", lambda x: np.sqrt((3 * x).astype(int) ** 2), grad=False),
    method("np.where(m, int array, 0.5)", lambda x: np.where(x > 0, (3 * x).astype(int), 0.5), grad=False),
    method("float32 array * np.float64", lambda x: x.astype(np.float32) * np.float64(2.0), grad=False),
    method("x * (x > 0)", lambda x: x * (x > 0)),
    method("x + int array", lambda x: x + np.arange(4)),
    # --- numpy-style functions written with methods -----------------------------------------------
    method("softmax with x.max(axis=1, keepdims=True)",
           lambda x: np.exp(x - x.max(axis=1, keepdims=True)) / np.exp(x - x.max(axis=1, keepdims=True))
           .sum(axis=1, keepdims=True)),
    method("sharpe ratio r.mean() / r.std()", lambda r: r.mean() / r.std(), lambda rng: vec(rng, 8)),
    method("layer norm with x.var(-1, keepdims=True)",
           lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)),
    method("x.var() + x.sum(0).max()", lambda x: x.var() + x.sum(0).max()),
    # --- function forms behind the methods, on both faces --------------------------------------------
    Usage("np.all(x > -1, axis=0)", lambda x: np.all(x > -1, axis=0), mat, grad=False),
    Usage("np.any(x > 1)", lambda x: np.any(x > 1), mat, grad=False),
    Usage("np.all(x > -2, axis=(0, 1), keepdims=True)", lambda x: np.all(x > -2, axis=(0, 1), keepdims=True),
          mat, grad=False),
    Usage("np.any(x < 0, axis=-1)", lambda x: np.any(x < 0, axis=-1), cube, grad=False),
    Usage("np.zeros_like(x) + x", lambda x: np.zeros_like(x) + x * 2.0, mat),
    Usage("np.full_like(x, 2.0) * x", lambda x: np.full_like(x, 2.0) * x, mat),
    Usage("np.ones_like(x) / (1 + x * x)", lambda x: np.ones_like(x) / (1.0 + x * x), mat),
    # --- sequences of arrays ----------------------------------------------------------------------
    Usage("np.concatenate([x, 2 * x], axis=1)", lambda x: np.concatenate([x, 2 * x], axis=1), mat),
    Usage("np.concatenate([x, y]) axis=0", lambda x, y: np.concatenate([x, y]),
          lambda rng: (rng.standard_normal((2, 3)), rng.standard_normal((1, 3))), wrt=(0, 1)),
    Usage("np.concatenate((x, y), axis=None)", lambda x, y: np.concatenate((x, y), axis=None),
          lambda rng: (rng.standard_normal((2, 3)), rng.standard_normal(4)), wrt=(0, 1)),
    Usage("np.concatenate([x, ndarray])", lambda x: np.concatenate([x, np.ones((1, 4))]), mat),
    Usage("np.stack([x, y])", lambda x, y: np.stack([x, y]),
          lambda rng: (rng.standard_normal(3), rng.standard_normal(3)), wrt=(0, 1)),
    Usage("np.stack([x, y], axis=-1)", lambda x, y: np.stack([x, y], axis=-1),
          lambda rng: (rng.standard_normal((2, 3)), rng.standard_normal((2, 3))), wrt=(0, 1)),
    Usage("np.stack of scalars", lambda x: np.stack([x.sum(), np.max(x), np.mean(x)]), mat),
    Usage("np.stack([x[0], x[1]], axis=1)", lambda x: np.stack([x[0], x[1]], axis=1), mat),
]


@params(ROWS)
def test_usage(usage):
    check(usage)


def test_bitwise_ufuncs_and_row_stack_run_on_tensors():
    a, b = symgrad.tensor([12, -8, 3]), symgrad.tensor([10, 3, 1])
    for ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift):
        assert ufunc(a, b).tolist() == ufunc(a.numpy(), b.numpy()).tolist()
    assert np.invert(a).tolist() == np.invert(a.numpy()).tolist()
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    if hasattr(np, "row_stack"):
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            y = np.row_stack([x, x * 2])
        assert y.shape == (2, 2) and y.grad_fn is not None
