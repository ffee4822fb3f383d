"""Function transforms (symgrad.compiler.transforms): against central differences and torch.func."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad
from symgrad.compiler import options as compile_options
from symgrad.compiler import transforms

# These tests check what the transforms compute; the Numba backend compiles the same graphs into
# fused kernels (tests/test_compile*.py), which would cost a cold compile per traced graph here.
# They trace and compile with the numpy backend, except the tests named below, which check the
# fused kernels the transforms build.
FUSED_KERNEL_TESTS = {"test_hvp_inside_a_compiled_function_is_not_a_constant",
                      "test_transform_compiles_once_per_structure_and_reuses_the_kernels",
                      "test_large_jacobians_run_one_compiled_kernel_per_row",
                      "test_third_order_nesting_matches_torch"}


@pytest.fixture(autouse=True)
def _numpy_backend_unless_fused(request, monkeypatch):
    if request.node.originalname not in FUSED_KERNEL_TESTS:
        monkeypatch.setattr(compile_options, "DEFAULT_BACKEND", "numpy")

RNG = np.random.default_rng(19)


def fd_grad(f, x, eps=1e-6):
    """Central differences of a scalar function of one array."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.reshape(-1)[k] = eps
        g.reshape(-1)[k] = (float(f(x + e)) - float(f(x - e))) / (2 * eps)
    return g


def fd_jacobian(f, x, eps=1e-6):
    """``out.shape + x.shape`` central-difference Jacobian of an array function of one array."""
    x = np.array(x, dtype=np.float64)
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e.reshape(-1)[k] = eps
        cols.append((np.asarray(f(x + e), dtype=np.float64) - np.asarray(f(x - e), dtype=np.float64)) / (2 * eps))
    out_shape = cols[0].shape
    return np.stack(cols, axis=-1).reshape(out_shape + x.shape)


def value(x):
    return x._data if isinstance(x, symgrad.Tensor) else np.asarray(x)


# functions written once for symgrad and torch (T is the module)
SCALAR_FUNCTIONS = {
    "sin_cube": lambda T, x: (T.sin(x) * x ** 3).sum(),
    "exp_tanh": lambda T, x: (T.exp(-x * x) + T.tanh(x) * x).sum(),
    "log1p_quad": lambda T, x: T.log1p(x * x).sum() * (x ** 2).sum(),
}
VECTOR_FUNCTIONS = {
    "elementwise": lambda T, x: T.sin(x) * x,
    "coupled": lambda T, x: T.tanh(x[:3] * x[1:]) + x[:3] ** 2,
    "matrix": lambda T, x: T.exp(x.reshape(2, 2) @ x.reshape(2, 2)).sum(0),
}

x4 = RNG.uniform(-1.0, 1.0, 4)


# --- first order against central differences ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_grad_and_value_and_grad_match_finite_differences(name):
    f = lambda x: SCALAR_FUNCTIONS[name](symgrad, x)
    v, g = symgrad.value_and_grad(f)(x4)
    np.testing.assert_allclose(v, float(value(f(symgrad.tensor(x4)))), rtol=1e-12)
    np.testing.assert_allclose(g, fd_grad(lambda x: value(f(symgrad.tensor(x))), x4), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(symgrad.grad(f)(x4), g, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(VECTOR_FUNCTIONS))
@pytest.mark.parametrize("jac", ["jacrev", "jacfwd", "jacobian"])
def test_jacobians_match_finite_differences(name, jac):
    f = lambda x: VECTOR_FUNCTIONS[name](symgrad, x)
    got = getattr(symgrad, jac)(f)(x4)
    expected = fd_jacobian(lambda x: value(f(symgrad.tensor(x))), x4)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(VECTOR_FUNCTIONS))
def test_vjp_and_jvp_match_the_jacobian(name):
    f = lambda x: VECTOR_FUNCTIONS[name](symgrad, x)
    J = fd_jacobian(lambda x: value(f(symgrad.tensor(x))), x4)
    out, pull = symgrad.vjp(f, x4)
    ct = RNG.standard_normal(out.shape)
    (pulled,) = pull(ct)
    np.testing.assert_allclose(pulled, np.tensordot(ct, J, axes=ct.ndim), rtol=1e-6, atol=1e-8)
    t = RNG.standard_normal(x4.shape)
    out2, pushed = symgrad.jvp(f, (x4,), (t,))
    np.testing.assert_allclose(out2, out, rtol=1e-12)
    np.testing.assert_allclose(pushed, J @ t, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_hessian_and_hvp_match_finite_differences(name):
    f = lambda x: SCALAR_FUNCTIONS[name](symgrad, x)
    g = symgrad.grad(f)
    H = fd_jacobian(g, x4)
    np.testing.assert_allclose(symgrad.hessian(f)(x4), H, rtol=1e-6, atol=1e-7)
    v = RNG.standard_normal(4)
    (hv,) = symgrad.hvp(f, (x4,), (v,))
    np.testing.assert_allclose(hv, H @ v, rtol=1e-6, atol=1e-7)


def test_elementwise_grad_is_the_derivative_at_each_element():
    x = np.linspace(-2.0, 2.0, 7)
    got = symgrad.elementwise_grad(lambda x: symgrad.tanh(x) * x)(x)
    np.testing.assert_allclose(got, np.tanh(x) + x * (1 - np.tanh(x) ** 2), rtol=1e-12)


# --- against torch.func ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_scalar_transforms_match_torch_func(torch, name):
    make = SCALAR_FUNCTIONS[name]
    f, tf = (lambda x: make(symgrad, x)), (lambda x: make(torch, x))
    tx = torch.tensor(x4)
    v = RNG.standard_normal(4)
    np.testing.assert_allclose(symgrad.grad(f)(x4), torch.func.grad(tf)(tx).numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(symgrad.hessian(f)(x4), torch.func.hessian(tf)(tx).numpy(), rtol=1e-10, atol=1e-12)
    expected_hvp = torch.autograd.functional.hvp(tf, tx, torch.tensor(v))[1].numpy()
    np.testing.assert_allclose(symgrad.hvp(f, (x4,), (v,))[0], expected_hvp, rtol=1e-10, atol=1e-12)
    third = symgrad.grad(lambda x: symgrad.hvp(f, (x,), (v,))[0].sum())(x4)
    t_third = torch.func.grad(lambda x: torch.func.jvp(torch.func.grad(tf), (x,), (torch.tensor(v),))[1].sum())(tx)
    np.testing.assert_allclose(third, t_third.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", sorted(VECTOR_FUNCTIONS))
def test_vector_transforms_match_torch_func(torch, name):
    make = VECTOR_FUNCTIONS[name]
    f, tf = (lambda x: make(symgrad, x)), (lambda x: make(torch, x))
    tx = torch.tensor(x4)
    for ours, theirs in [(symgrad.jacrev, torch.func.jacrev), (symgrad.jacfwd, torch.func.jacfwd)]:
        np.testing.assert_allclose(ours(f)(x4), theirs(tf)(tx).numpy(), rtol=1e-12, atol=1e-14)
    out, pull = symgrad.vjp(f, x4)
    t_out, t_pull = torch.func.vjp(tf, tx)
    ct = RNG.standard_normal(out.shape)
    np.testing.assert_allclose(out, t_out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(pull(ct)[0], t_pull(torch.tensor(ct))[0].numpy(), rtol=1e-12, atol=1e-14)
    t = RNG.standard_normal(4)
    np.testing.assert_allclose(symgrad.jvp(f, (x4,), (t,))[1], torch.func.jvp(tf, (tx,), (torch.tensor(t),))[1],
                               rtol=1e-12, atol=1e-14)
    # second order: the Jacobian of the Jacobian, both modes
    np.testing.assert_allclose(symgrad.jacfwd(symgrad.jacrev(f))(x4),
                               torch.func.jacfwd(torch.func.jacrev(tf))(tx).numpy(), rtol=1e-10, atol=1e-12)


def test_third_order_nesting_matches_torch(torch):
    f = lambda x: symgrad.sin(x) * x ** 2
    d3 = symgrad.grad(symgrad.grad(symgrad.grad(f)))
    x = 0.7
    # d3/dx3 (x^2 sin x) = -x^2 cos x - 6x sin x + 6 cos x
    expected = -x * x * np.cos(x) - 6 * x * np.sin(x) + 6 * np.cos(x)
    np.testing.assert_allclose(d3(np.array(x)), expected, rtol=1e-12)
    np.testing.assert_allclose(d3(x), expected, rtol=1e-12)
    tf = lambda x: (torch.sin(x) * x ** 2).sum()
    x3 = RNG.uniform(-1, 1, 2)   # 8 entries: every one a different mixed third derivative
    third = symgrad.jacrev(symgrad.hessian(lambda x: (symgrad.sin(x) * x ** 2).sum() * x.sum()))(x3)
    t_third = torch.func.jacrev(torch.func.hessian(lambda x: tf(x) * x.sum()))(torch.tensor(x3))
    assert third.shape == (2, 2, 2)
    np.testing.assert_allclose(third, t_third.numpy(), rtol=1e-10, atol=1e-12)


# --- compiled, recorded, eager -----------------------------------------------------------------------
def test_hvp_inside_a_compiled_function_is_not_a_constant():
    # grad of <grad f, v> inside symgrad.compile: f = sum(x^3), x=2, v=1 -> 6*x*v = 12 per element...
    @symgrad.compile
    def hvp_in(x, v):
        return symgrad.grad(lambda y: (symgrad.grad(lambda z: (z ** 3).sum())(y) * v).sum())(x)

    x, v = np.array([2.0, 3.0]), np.array([1.0, 3.0])
    np.testing.assert_allclose(value(hvp_in(x, v)), 6 * x * v)   # 12 and 54 (a constant gradient would be 0)


def test_transform_compiles_once_per_structure_and_reuses_the_kernels():
    f = lambda x: (symgrad.exp(x) * x).sum()
    stage = transforms._cached_stage(transforms._HVP_STAGES, f, None,
                                     lambda call: transforms._Staged(transforms._hvp_impl(call), call, "hvp"))
    for _ in range(3):
        x = RNG.standard_normal(5)
        np.testing.assert_allclose(symgrad.hvp(f, (x,), (np.ones(5),))[0], np.exp(x) * (x + 2), rtol=1e-12)
    (cf,) = stage.by_structure.values()
    stats = cf.stats()
    assert stats["calls"] == 3 and stats["traces"] == 1 and stats["guard_hits"] == 2
    assert len(cf.kernels_for(x, np.ones(5), wrt=()).graph.nodes) > 0
    # the cache does not keep the function (nor its kernels) alive
    import gc
    import weakref

    gone = weakref.ref(f)
    del f, stage, cf
    gc.collect()
    assert gone() is None


def test_vjp_fn_keeps_a_temporary_function_alive():
    import gc

    _, pull = symgrad.vjp(lambda x: symgrad.exp(x) * 2.0, np.array([0.0, 1.0]))
    gc.collect()
    np.testing.assert_allclose(pull(np.ones(2))[0], 2 * np.exp([0.0, 1.0]))


def test_eager_tensors_requiring_grad_give_differentiable_results():
    x = symgrad.tensor([0.5, 1.5], dtype=symgrad.float64, requires_grad=True)
    g = symgrad.grad(lambda x: (x ** 3).sum())(x)
    assert g.requires_grad and g.grad_fn is not None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.detach().numpy())
    x.grad = None
    out, pull = symgrad.vjp(lambda x: symgrad.sin(x), x)
    (p,) = pull(symgrad.ones(2, dtype=symgrad.float64))
    p.sum().backward()   # d/dx sum(cos x) = -sin x
    np.testing.assert_allclose(x.grad.numpy(), -np.sin([0.5, 1.5]), rtol=1e-12)
    # tensors that do not require grad: Tensors out, nothing recorded
    h = symgrad.hessian(lambda x: (x ** 3).sum())(symgrad.tensor([1.0, 2.0], dtype=symgrad.float64))
    assert isinstance(h, symgrad.Tensor) and not h.requires_grad
    np.testing.assert_allclose(h.numpy(), np.diag([6.0, 12.0]))


def test_a_closed_over_value_is_a_constant_of_the_inner_gradient():
    # d/dx [x * d/dy (x*y)] = d/dx x^2 = 2x (perturbation confusion would count the inner x too)
    f = lambda x: x * symgrad.grad(lambda y: x * y)(x)
    np.testing.assert_allclose(symgrad.grad(f)(np.array(3.0)), 6.0)
    x = symgrad.tensor(3.0, dtype=symgrad.float64, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 6.0)


def test_argnums_and_has_aux():
    f = lambda a, b, c: ((a * b) ** 2).sum() + c
    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    ga, gb = symgrad.grad(f, argnums=(0, 1))(a, b, 1.0)
    np.testing.assert_allclose(ga, 2 * a * b * b)
    np.testing.assert_allclose(gb, 2 * a * a * b)
    np.testing.assert_allclose(symgrad.grad(f, argnums=-2)(a, b, 1.0), gb)
    (v, aux), g = symgrad.value_and_grad(lambda x: ((x ** 2).sum(), x * 10), has_aux=True)(a)
    assert v == 5.0
    np.testing.assert_allclose(aux, a * 10)
    np.testing.assert_allclose(g, 2 * a)
    jac, aux = symgrad.jacrev(lambda x: (x ** 2, x.sum()), has_aux=True)(a)
    np.testing.assert_allclose(jac, np.diag(2 * a))
    np.testing.assert_allclose(aux, 3.0)


def test_pytree_inputs_and_outputs_of_jacobians():
    params = {"w": np.array([[1.0, 2.0], [0.5, -1.0]]), "b": (np.array([0.1, 0.2]), np.array(0.3))}
    f = lambda p: {"y": symgrad.tanh(p["w"] @ p["b"][0] + p["b"][1]), "s": (p["w"] ** 2).sum()}
    jr = symgrad.jacrev(f)(params)
    jf = symgrad.jacfwd(f)(params)
    assert set(jr) == {"y", "s"} and set(jr["y"]) == {"w", "b"}
    assert jr["y"]["w"].shape == (2, 2, 2) and jr["y"]["b"][0].shape == (2, 2) and jr["y"]["b"][1].shape == (2,)
    assert jr["s"]["w"].shape == (2, 2)
    for path in [("y", "w"), ("s", "w")]:
        np.testing.assert_allclose(jr[path[0]][path[1]], jf[path[0]][path[1]], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jr["y"]["b"][0], jf["y"]["b"][0], rtol=1e-12)
    b0 = params["b"][0]
    fd = fd_jacobian(lambda b: np.tanh(params["w"] @ b + 0.3), b0)
    np.testing.assert_allclose(jr["y"]["b"][0], fd, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(jr["s"]["w"], 2 * params["w"])


def test_large_jacobians_run_one_compiled_kernel_per_row():
    n = transforms.ROWS_IN_ONE_GRAPH + 6
    x = RNG.uniform(-1, 1, n)
    f = lambda x: symgrad.sin(x) * x.sum()
    expected = np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None]
    np.testing.assert_allclose(symgrad.jacrev(f)(x), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(symgrad.jacfwd(f)(x), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
def test_row_by_row_jacobians_agree_with_one_graph_on_pytrees(monkeypatch, jac):
    params = {"w": RNG.standard_normal((2, 3)), "b": (RNG.standard_normal(2), np.array(0.5))}
    f = lambda p, x: ({"y": symgrad.tanh(p["w"] @ x + p["b"][0]) * p["b"][1], "s": (p["w"] ** 2).sum()}, x.sum())
    x = RNG.standard_normal(3)
    one_graph, aux = getattr(symgrad, jac)(f, argnums=(0, 1), has_aux=True)(params, x)
    monkeypatch.setattr(transforms, "ROWS_IN_ONE_GRAPH", 0)
    by_rows, aux2 = getattr(symgrad, jac)(f, argnums=(0, 1), has_aux=True)(params, x)
    np.testing.assert_allclose(aux, x.sum())
    np.testing.assert_allclose(aux2, x.sum())
    flat_a, spec_a = symgrad.compiler.pytree.tree_flatten(one_graph)
    flat_b, spec_b = symgrad.compiler.pytree.tree_flatten(by_rows)
    assert spec_a == spec_b and len(flat_a) == 8   # 2 outputs x 4 input leaves
    for a, b in zip(flat_a, flat_b):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(one_graph["s"][1], np.zeros(3))      # d s / d x
    np.testing.assert_allclose(one_graph["s"][0]["w"], 2 * params["w"])


def test_jvp_and_vjp_with_pytrees_and_several_primals():
    f = lambda p, s: (p[0] * s, p[1] ** 2)
    p, s = (np.array([1.0, 2.0]), np.array(3.0)), np.array(0.5)
    t = ((np.array([1.0, 0.0]), np.array(1.0)), np.array(2.0))
    out, tout = symgrad.jvp(f, (p, s), t)
    np.testing.assert_allclose(tout[0], np.array([1.0, 0.0]) * 0.5 + np.array([1.0, 2.0]) * 2.0)
    np.testing.assert_allclose(tout[1], 6.0)
    out, pull = symgrad.vjp(f, p, s)
    gp, gs = pull((np.array([1.0, 1.0]), np.array(1.0)))
    np.testing.assert_allclose(gp[0], [0.5, 0.5])
    np.testing.assert_allclose(gp[1], 6.0)
    np.testing.assert_allclose(gs, 3.0)


# --- errors -----------------------------------------------------------------------------------------
def test_grad_of_a_non_scalar_output_says_what_to_do():
    with pytest.raises(ValueError, match=r"must return a scalar, got shape \(3,\).*jacobian"):
        symgrad.grad(lambda x: x * 2)(symgrad.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="must return a scalar"):
        symgrad.grad(lambda p: p[0] * 2)((np.ones(3), np.ones(2)))


@pytest.mark.parametrize("argnums, error, message", [
    ("x", TypeError, "argnums must be an int or a tuple of ints"),
    ((0, 0), ValueError, "repeats a position"),
    (1.0, TypeError, "argnums must be an int"),
])
def test_bad_argnums_fail_when_the_transform_is_made(argnums, error, message):
    with pytest.raises(error, match=message):
        symgrad.grad(lambda x: x.sum(), argnums=argnums)


def test_out_of_range_argnums_name_the_call():
    with pytest.raises(ValueError, match="names argument 2, but the function was called with 1"):
        symgrad.jacrev(lambda x: x, argnums=2)(np.ones(2))
    with pytest.raises(ValueError, match="names argument 3"):
        symgrad.grad(lambda p: p[0].sum(), argnums=3)((np.ones(2),))


def test_mismatched_tangents_are_named():
    f = lambda a, b: a * b
    with pytest.raises(ValueError, match="tangents have structure.*primals have structure"):
        symgrad.jvp(f, (np.ones(2), np.ones(2)), (np.ones(2),))
    with pytest.raises(ValueError, match=r"tangent leaf 1 has shape \(3,\), but its primal has shape \(2,\)"):
        symgrad.jvp(f, (np.ones(2), np.ones(2)), (np.ones(2), np.ones(3)))
    with pytest.raises(TypeError, match="primals and tangents must be tuples"):
        symgrad.hvp(lambda x: x.sum(), np.ones(2), np.ones(2))
    _, pull = symgrad.vjp(lambda x: (x, x * 2), np.ones(2))
    with pytest.raises(ValueError, match="cotangents have structure"):
        pull(np.ones(2))


def test_integer_inputs_and_outputs_are_refused():
    with pytest.raises(TypeError, match="dtype int64: only floating-point inputs have gradients"):
        symgrad.grad(lambda p: (p[0] * 1.0).sum())((np.arange(3),))
    with pytest.raises(TypeError, match="has_aux=True"):
        symgrad.grad(lambda x: ((x ** 2).sum(), x))(symgrad.tensor([1.0]))
    with pytest.raises(TypeError, match="must return a pair"):
        symgrad.grad(lambda x: (x ** 2).sum(), has_aux=True)(np.ones(2))


# --- the user guide ---------------------------------------------------------------------------------
def test_docs_examples_run():
    """Every python block of docs/transforms.md runs, in order, in one namespace (they assert their results)."""
    import re
    from pathlib import Path

    pytest.importorskip("scipy")
    docs = Path(__file__).resolve().parent.parent / "docs" / "transforms.md"
    blocks = re.findall(r"```python\n(.*?)```", docs.read_text(), re.S)
    assert len(blocks) >= 4
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(docs), "exec"), ns)
    assert ns["res"].fun < 0.1 * ns["fun"](ns["flat0"])[0]
