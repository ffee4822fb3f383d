"""``symgrad.autograd.functional`` against ``torch.autograd.functional``: the same functions, inputs and
options give the same values, the same result structure (Tensor or tuple, tuples of tuples) and the
same errors."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(19)
A = RNG.normal(size=(3, 4))
X4 = RNG.normal(size=4)
Y3 = RNG.normal(size=3)
M23 = RNG.normal(size=(2, 3))


def lib_tensor(lib, array, requires_grad=False):
    return lib.tensor(array, dtype=lib.float64, requires_grad=requires_grad)


# Each function is written once with what torch and symgrad share (methods and operators); a function of
# ``lib`` so that constants are tensors of the library under test.
def elementwise(lib):
    return lambda x: x.exp() * x.sin() + x ** 3


def matrix_tanh(lib):
    a = lib_tensor(lib, A)
    return lambda x: (a @ x).tanh()


def pair_to_pair(lib):
    return lambda x, y: (x * y.sum() + x.cos(), (x ** 2).sum() * y.exp())


def pair_to_tensor(lib):
    return lambda x, m: (m * x[:3]).tanh()          # x: [4], m: [2, 3] -> [2, 3]


def scalar_of_one(lib):
    a = lib_tensor(lib, A)
    return lambda x: ((a @ x).tanh() ** 2).sum() + (x ** 4).sum() * x[0]


def scalar_of_pair(lib):
    return lambda x, y: (x.sin() * y.exp().sum()).sum() + (x ** 2).sum() * (y ** 3).sum()


VECTOR_FUNCTIONS = {   # name -> (function, inputs as arrays (a tuple means tuple inputs))
    "elementwise": (elementwise, X4),
    "matrix_tanh": (matrix_tanh, X4),
    "pair_to_pair": (pair_to_pair, (X4, Y3)),
    "pair_to_tensor": (pair_to_tensor, (X4, M23)),
}
SCALAR_FUNCTIONS = {
    "scalar_of_one": (scalar_of_one, X4),
    "scalar_of_pair": (scalar_of_pair, (X4, Y3)),
    "scalar_of_one_in_tuple": (scalar_of_one, (X4,)),
}


def make_inputs(lib, arrays, requires_grad=False):
    if isinstance(arrays, tuple):
        return tuple(lib_tensor(lib, a, requires_grad) for a in arrays)
    return lib_tensor(lib, arrays, requires_grad)


def assert_same(ours, theirs, rtol=1e-10):
    """Same structure (Tensor vs tuple, nesting, shapes) and values."""
    if isinstance(theirs, (tuple, list)):    # torch's forward-mode jacobian returns lists
        assert type(ours) is type(theirs) and len(ours) == len(theirs), (type(ours), ours)
        for a, b in zip(ours, theirs):
            assert_same(a, b, rtol)
        return
    assert isinstance(ours, symgrad.Tensor), type(ours)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=1e-12)


def vector_for(lib, arrays_like):
    """A fixed ``v`` shaped like a Tensor or tuple of Tensors."""
    if isinstance(arrays_like, tuple):
        return tuple(vector_for(lib, a) for a in arrays_like)
    shape = tuple(arrays_like.shape)
    return lib_tensor(lib, np.linspace(-1.0, 2.0, int(np.prod(shape))).reshape(shape))


def both(name_fn, call):
    """``call(lib, function, inputs)`` for symgrad and torch."""
    make, arrays = name_fn
    return [call(lib, make(lib), make_inputs(lib, arrays)) for lib in (symgrad, torch)]


def outputs_of(lib, f, inputs):
    return f(*inputs) if isinstance(inputs, tuple) else f(inputs)


# --- values and structure --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(VECTOR_FUNCTIONS))
def test_vjp(name):
    ours, theirs = both(VECTOR_FUNCTIONS[name], lambda lib, f, x: lib.autograd.functional.vjp(
        f, x, vector_for(lib, outputs_of(lib, f, x))))
    assert_same(ours, theirs)


@pytest.mark.parametrize("name", sorted(VECTOR_FUNCTIONS))
def test_jvp(name):
    ours, theirs = both(VECTOR_FUNCTIONS[name], lambda lib, f, x: lib.autograd.functional.jvp(f, x, vector_for(lib, x)))
    assert_same(ours, theirs)


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
@pytest.mark.parametrize("name", sorted(VECTOR_FUNCTIONS) + sorted(SCALAR_FUNCTIONS))
def test_jacobian(name, strategy):
    spec = {**VECTOR_FUNCTIONS, **SCALAR_FUNCTIONS}[name]
    # torch's forward mode needs vectorize=True; symgrad accepts either
    ours, theirs = both(spec, lambda lib, f, x: lib.autograd.functional.jacobian(
        f, x, strategy=strategy, vectorize=strategy == "forward-mode"))
    assert_same(ours, theirs)
    if strategy == "forward-mode":
        make, arrays = spec
        plain = symgrad.autograd.functional.jacobian(make(symgrad), make_inputs(symgrad, arrays),
                                                     strategy=strategy)
        assert_same(plain, theirs)


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_hessian(name, strategy):
    ours, theirs = both(SCALAR_FUNCTIONS[name], lambda lib, f, x: lib.autograd.functional.hessian(
        f, x, outer_jacobian_strategy=strategy, vectorize=strategy == "forward-mode"))
    assert_same(ours, theirs)


@pytest.mark.parametrize("which", ["hvp", "vhp"])
@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_hvp_and_vhp(name, which):
    ours, theirs = both(SCALAR_FUNCTIONS[name], lambda lib, f, x: getattr(lib.autograd.functional, which)(
        f, x, vector_for(lib, x)))
    assert_same(ours, theirs)


def test_v_may_be_none_for_single_elements():
    for lib_results in zip(*[(
            lib.autograd.functional.vjp(lambda x: (x ** 2).sum(), lib_tensor(lib, X4)),
            lib.autograd.functional.jvp(lambda x: x.sin() * 2, lib_tensor(lib, [0.5])),
            lib.autograd.functional.hvp(lambda x: (x ** 4).sum(), lib_tensor(lib, [0.5])),
            lib.autograd.functional.vhp(lambda x: (x ** 4).sum(), lib_tensor(lib, 0.5)),
    ) for lib in (symgrad, torch)]):
        assert_same(*lib_results)


def test_results_are_detached_and_reachable_as_torch_autograd_functional():
    import symgrad as torch_like

    x = torch_like.tensor(X4, requires_grad=True)
    out, g = torch_like.autograd.functional.vjp(lambda x: x.exp(), x, torch_like.ones(4, dtype=torch_like.float64))
    assert not out.requires_grad and not g.requires_grad
    assert torch_like.autograd.functional.__all__ == ["hessian", "hvp", "jacobian", "jvp", "vhp", "vjp"]


# --- create_graph=True, then a further backward ---------------------------------------------------

CREATE_GRAPH_CASES = {
    "vjp": lambda lib, f, x: lib.autograd.functional.vjp(f, x, vector_for(lib, outputs_of(lib, f, x)),
                                                         create_graph=True)[1],
    "jvp": lambda lib, f, x: lib.autograd.functional.jvp(f, x, vector_for(lib, x), create_graph=True)[1],
    "jacobian": lambda lib, f, x: lib.autograd.functional.jacobian(f, x, create_graph=True),
}
SCALAR_CREATE_GRAPH_CASES = {
    "hessian": lambda lib, f, x: lib.autograd.functional.hessian(f, x, create_graph=True),
    "hvp": lambda lib, f, x: lib.autograd.functional.hvp(f, x, vector_for(lib, x), create_graph=True)[1],
    "vhp": lambda lib, f, x: lib.autograd.functional.vhp(f, x, vector_for(lib, x), create_graph=True)[1],
}


def _flat_sum(result, lib):
    if isinstance(result, tuple):
        return sum((_flat_sum(r, lib) for r in result), lib_tensor(lib, 0.0))
    return (result * result).sum()


def _further_backward(cases, functions, which, name):
    grads = []
    for lib in (symgrad, torch):
        make, arrays = functions[name]
        x = make_inputs(lib, arrays, requires_grad=True)
        result = cases[which](lib, make(lib), x)
        loss = _flat_sum(result, lib)
        assert loss.requires_grad
        loss.backward()
        grads.append(tuple(t.grad for t in x) if isinstance(x, tuple) else x.grad)
    assert_same(*grads, rtol=1e-9)


@pytest.mark.parametrize("which", sorted(CREATE_GRAPH_CASES))
@pytest.mark.parametrize("name", ["matrix_tanh", "pair_to_pair"])
def test_create_graph_then_backward(which, name):
    _further_backward(CREATE_GRAPH_CASES, VECTOR_FUNCTIONS, which, name)


@pytest.mark.parametrize("which", sorted(SCALAR_CREATE_GRAPH_CASES))
@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_create_graph_then_backward_second_order(which, name):
    _further_backward(SCALAR_CREATE_GRAPH_CASES, SCALAR_FUNCTIONS, which, name)


# --- strict=True and other errors: torch's error class and message ------------------------------

def independent_of_y(lib):
    return lambda x, y: x * 2.0


def detached(lib):
    return lambda x: x.detach() * 2.0


def linear_scalar(lib):
    return lambda x: (x * 3.0).sum()


ERROR_CASES = {
    "vjp-independent": (independent_of_y, (X4, X4),
                        lambda lib, f, x: lib.autograd.functional.vjp(f, x, lib_tensor(lib, X4), strict=True)),
    "vjp-not-requiring-grad": (detached, X4,
                               lambda lib, f, x: lib.autograd.functional.vjp(f, x, lib_tensor(lib, X4), strict=True)),
    "jvp-independent": (independent_of_y, (X4, X4),
                        lambda lib, f, x: lib.autograd.functional.jvp(f, x, vector_for(lib, x), strict=True)),
    "jacobian-independent": (independent_of_y, (X4, X4),
                             lambda lib, f, x: lib.autograd.functional.jacobian(f, x, strict=True)),
    "jacobian-strict-vectorize": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.jacobian(
        f, x, strict=True, vectorize=True)),
    "jacobian-bad-strategy": (elementwise, X4,
                              lambda lib, f, x: lib.autograd.functional.jacobian(f, x, strategy="sideways")),
    "jacobian-forward-create-graph": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.jacobian(
        f, x, create_graph=True, strategy="forward-mode", vectorize=True)),
    "hessian-linear": (linear_scalar, X4, lambda lib, f, x: lib.autograd.functional.hessian(f, x, strict=True)),
    "hessian-not-scalar": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.hessian(f, x)),
    "hvp-linear": (linear_scalar, X4,
                   lambda lib, f, x: lib.autograd.functional.hvp(f, x, lib_tensor(lib, X4), strict=True)),
    "vhp-linear": (linear_scalar, X4,
                   lambda lib, f, x: lib.autograd.functional.vhp(f, x, lib_tensor(lib, X4), strict=True)),
    "vhp-not-scalar": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.vhp(f, x, lib_tensor(lib, X4))),
    "vjp-v-none": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.vjp(f, x)),
    "jvp-v-none": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.jvp(f, x)),
    "vjp-v-length": (pair_to_pair, (X4, Y3),
                     lambda lib, f, x: lib.autograd.functional.vjp(f, x, (lib_tensor(lib, X4),))),
    "jvp-v-size": (pair_to_pair, (X4, Y3),
                   lambda lib, f, x: lib.autograd.functional.jvp(f, x, (lib_tensor(lib, X4), lib_tensor(lib, X4)))),
    "inputs-not-tensors": (elementwise, X4, lambda lib, f, x: lib.autograd.functional.jacobian(f, [1.0, 2.0])),
    "inputs-tuple-with-number": (pair_to_pair, (X4, Y3),
                                 lambda lib, f, x: lib.autograd.functional.vjp(f, (x[0], 2.0), x[0])),
}


def _error_of(call):
    try:
        call()
    except Exception as exc:   # noqa: BLE001 - the error itself is compared
        return exc
    return None


def _normalise(message: str) -> str:
    # torch names its own module and types; symgrad the same spots
    return message.replace("torch.Size(", "Size(").replace("symgrad.Size(", "Size(")


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_match_torch(case):
    make, arrays, call = ERROR_CASES[case]
    ours, theirs = [_error_of(lambda lib=lib: call(lib, make(lib), make_inputs(lib, arrays)))
                    for lib in (symgrad, torch)]
    assert theirs is not None and ours is not None, (case, ours, theirs)
    assert isinstance(ours, type(theirs)), (ours, theirs)
    assert _normalise(str(ours)) == _normalise(str(theirs))


def test_non_strict_independent_inputs_give_zeros_like_torch():
    for which in ("vjp", "jacobian"):
        results = []
        for lib in (symgrad, torch):
            x = (lib_tensor(lib, X4), lib_tensor(lib, Y3))
            fn = getattr(lib.autograd.functional, which)
            args = (lib_tensor(lib, X4),) if which == "vjp" else ()
            results.append(fn(lambda x, y: x * 2.0, x, *args))
        assert_same(*results)


def test_forward_mode_jacobian_of_a_wide_function():
    """More outputs than inputs: forward mode takes one pass per input element."""
    f = lambda x: (symgrad.tensor(np.ones((50, 1))) * x).sin()           # noqa: E731
    jac_fwd = symgrad.autograd.functional.jacobian(f, symgrad.tensor([0.3, 0.2]), strategy="forward-mode")
    jac_rev = symgrad.autograd.functional.jacobian(f, symgrad.tensor([0.3, 0.2]))
    assert tuple(jac_fwd.shape) == (50, 2, 2)
    np.testing.assert_allclose(jac_fwd.numpy(), jac_rev.numpy(), rtol=1e-6)
