"""Pytrees: ravel_pytree, gradients in the arguments' structure, and the scipy recipe."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import symgrad

RNG = np.random.default_rng(3)
Layer = namedtuple("Layer", ["W", "b"])


def mlp_params():
    return [(RNG.standard_normal((3, 5)) * 0.5, np.zeros(5)), (RNG.standard_normal((5, 1)) * 0.5, np.zeros(1))]


def mlp_loss(params, X, Y):
    h = X
    for k, (W, b) in enumerate(params):
        h = h @ W + b
        if k < len(params) - 1:
            h = symgrad.tanh(h)
    return ((h - Y) ** 2).mean()


def numpy_loss(params, X, Y):
    h = X
    for k, (W, b) in enumerate(params):
        h = h @ W + b
        if k < len(params) - 1:
            h = np.tanh(h)
    return float(((h - Y) ** 2).mean())


@pytest.mark.parametrize("tree", [
    {"a": (np.ones((2, 3)), np.arange(4.0)), "c": 2.5},
    [Layer(np.eye(2), np.array([1.0, -1.0])), Layer(np.ones((2, 1)), np.zeros(1))],
    (np.float32([1.5, 2.5]), np.array(3.0), {"n": np.arange(3, dtype=np.float32).reshape(3, 1)}),
    [],
])
def test_ravel_pytree_round_trips_structure_shapes_and_dtypes(tree):
    flat, unravel = symgrad.ravel_pytree(tree)
    leaves, spec = symgrad.compiler.pytree.tree_flatten(tree)
    assert flat.ndim == 1 and flat.size == sum(np.size(leaf) for leaf in leaves)
    back = unravel(flat)
    back_leaves, back_spec = symgrad.compiler.pytree.tree_flatten(back)
    assert back_spec == spec
    for a, b in zip(leaves, back_leaves):
        assert type(a) is type(b) or isinstance(a, np.ndarray)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert np.asarray(a).dtype == np.asarray(b).dtype


def test_ravel_pytree_with_tensors_is_differentiable():
    w = symgrad.tensor([[1.0, 2.0]], dtype=symgrad.float64, requires_grad=True)
    flat, unravel = symgrad.ravel_pytree({"w": w, "b": np.array([3.0])})
    assert isinstance(flat, symgrad.Tensor) and flat.shape == (3,)
    (flat * flat).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[2.0, 4.0]])
    back = unravel(flat * 2)
    assert back["w"].shape == (1, 2) and back["b"].shape == (1,)


def test_unravel_refuses_a_wrong_size():
    _, unravel = symgrad.ravel_pytree((np.ones(2), np.ones(3)))
    with pytest.raises(ValueError, match="expected a 1-D array of 5 elements"):
        unravel(np.ones(4))


def test_gradient_of_a_list_of_pairs_has_the_same_structure():
    params = mlp_params()
    X, Y = RNG.standard_normal((8, 3)), RNG.standard_normal((8, 1))
    value, g = symgrad.value_and_grad(mlp_loss)(params, X, Y)
    assert value == pytest.approx(numpy_loss(params, X, Y), rel=1e-12)
    assert isinstance(g, list) and len(g) == 2 and all(isinstance(p, tuple) and len(p) == 2 for p in g)
    flat, unravel = symgrad.ravel_pytree(params)
    eps = 1e-6
    fd = np.array([(numpy_loss(unravel(flat + eps * e), X, Y) - numpy_loss(unravel(flat - eps * e), X, Y)) / (2 * eps)
                   for e in np.eye(flat.size)])
    np.testing.assert_allclose(symgrad.ravel_pytree(g)[0], fd, rtol=1e-6, atol=1e-9)


def test_namedtuples_and_dicts_of_tuples_keep_their_types():
    params = {"layer": Layer(np.array([[1.0, 2.0]]), np.array([0.5])), "scale": (np.array(2.0), 3.0)}
    loss = lambda p: ((p["layer"].W.sum() + p["layer"].b.sum()) * p["scale"][0] * p["scale"][1]) ** 2
    g = symgrad.grad(loss)(params)
    assert isinstance(g["layer"], Layer) and isinstance(g["scale"], tuple)
    s = 3.5 * 2.0 * 3.0
    np.testing.assert_allclose(g["layer"].W, 2 * s * 6.0 * np.ones((1, 2)))
    np.testing.assert_allclose(g["layer"].b, [2 * s * 6.0])
    np.testing.assert_allclose(g["scale"][0], 2 * s * 3.5 * 3.0)
    np.testing.assert_allclose(g["scale"][1], 2 * s * 3.5 * 2.0)   # a Python number is differentiated as float64
    h = symgrad.hessian(lambda p: (p["layer"].W ** 3).sum() * p["scale"][0])(params)
    assert h["layer"].W["layer"].W.shape == (1, 2, 1, 2)
    np.testing.assert_allclose(h["layer"].W["scale"][0], 3 * params["layer"].W ** 2)


def test_scipy_minimize_over_a_pytree_of_parameters():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    X = RNG.standard_normal((64, 3))
    Y = np.sin(X[:, :1]) + 0.1 * X[:, 1:2]
    params = mlp_params()
    flat0, unravel = symgrad.ravel_pytree(params)
    vg = symgrad.value_and_grad(mlp_loss)

    def fun(flat):
        value, g = vg(unravel(flat), X, Y)
        return value, symgrad.ravel_pytree(g)[0]

    start = fun(flat0)[0]
    res = scipy_optimize.minimize(fun, flat0, jac=True, method="L-BFGS-B", options={"maxiter": 200})
    assert res.fun < 0.2 * start
    assert res.fun == pytest.approx(numpy_loss(unravel(res.x), X, Y), rel=1e-10)


def test_numpy_arrays_need_no_pytree_library(tmp_path):
    """value_and_grad of numpy arrays takes its fast path: optree is loaded for the first pytree only."""
    import os
    import subprocess
    import sys

    code = ("import sys, numpy as np, symgrad\n"
            "vg = symgrad.value_and_grad(lambda x, w: ((x * w) ** 2).sum(), argnums=1)\n"
            "value, g = vg(np.arange(3.0), np.ones(3))\n"
            "assert value == 5.0 and g.tolist() == [0.0, 2.0, 8.0], (value, g)\n"
            "print('optree' in sys.modules)\n"
            "value, g = symgrad.value_and_grad(lambda p: (p['w'] ** 2).sum())({'w': np.ones(2)})\n"
            "assert value == 2.0 and g['w'].tolist() == [2.0, 2.0]\n"
            "print('optree' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SYMGRAD_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
