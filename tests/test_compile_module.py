"""symgrad.compile of nn.Modules and of functions that call modules: parameters are graph inputs,
get .grad through CompiledFunctionBackward, and training loops match the eager (and torch) loops."""

import warnings

import numpy as np
import pytest

import symgrad
from symgrad import nn
from symgrad.nn import functional as F

torch = pytest.importorskip("torch")


def mlp(lib, act):
    return lib.nn.Sequential(lib.nn.Linear(5, 16), getattr(lib.nn, act)(), lib.nn.Linear(16, 3)).double()


def same_weights(act):
    torch.manual_seed(0)
    tnet = mlp(torch, act)
    state = {k: symgrad.tensor(v.numpy()) for k, v in tnet.state_dict().items()}
    eager, compiled = mlp(symgrad, act), mlp(symgrad, act)
    eager.load_state_dict(state)
    compiled.load_state_dict(state)
    return tnet, eager, compiled


def batch(step, loss):
    rng = np.random.default_rng(step)
    x = rng.standard_normal((32, 5))
    y = rng.integers(0, 3, 32) if loss == "cross_entropy" else rng.standard_normal((32, 3))
    return x, y


def assert_params_close(a, b, tol):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("act,loss", [("GELU", "cross_entropy"), ("Tanh", "mse_loss")])
@pytest.mark.parametrize("how", ["module", "loss_function"])
def test_adam_training_loop_matches_eager_and_torch(act, loss, how):
    tnet, eager, model = same_weights(act)
    if how == "module":   # compile(model): the loss is computed eagerly from the compiled output
        fast = symgrad.compile(model)

        def compiled_loss(x, y):
            return getattr(F, loss)(fast(x), y)
    else:                 # a compiled function that calls the model (a scalar loss: one fused kernel)
        compiled_loss = symgrad.compile(lambda x, y: getattr(F, loss)(model(x), y))
    opts = [symgrad.optim.Adam(eager.parameters(), lr=0.01), symgrad.optim.Adam(model.parameters(), lr=0.01),
            torch.optim.Adam(tnet.parameters(), lr=0.01)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no "captured array changed" retrace warnings
        for step in range(12):
            x, y = batch(step, loss)
            losses = []
            for opt, lib, fn in ((opts[0], symgrad, lambda a, b: getattr(F, loss)(eager(a), b)),
                                 (opts[1], symgrad, compiled_loss),
                                 (opts[2], torch, lambda a, b: getattr(torch.nn.functional, loss)(tnet(a), b))):
                opt.zero_grad()
                value = fn(lib.tensor(x), lib.tensor(y))
                value.backward()
                opt.step()
                losses.append(float(value.detach()))
            assert losses[1] == pytest.approx(losses[0], rel=1e-10, abs=1e-12)
            assert losses[2] == pytest.approx(losses[0], rel=1e-10, abs=1e-12)
            assert_params_close(model, eager, 1e-10)
            assert_params_close(model, tnet, 1e-10)
    compiled = fast.compiled if how == "module" else compiled_loss
    assert compiled.stats()["traces"] == 1   # parameters are inputs: their new values need no new trace


def test_compiled_module_output_has_compiled_backward_and_fills_grads():
    _, eager, model = same_weights("Tanh")
    fast = symgrad.compile(model)
    x = symgrad.tensor(np.random.default_rng(0).standard_normal((4, 5)))
    out = fast(x)
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    seed = symgrad.tensor(np.random.default_rng(1).standard_normal((4, 3)))
    out.backward(seed)
    eager(x).backward(seed)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-14)
    kernels = next(iter(fast.compiled._kernels.values()))
    assert len(kernels.graph.placeholders) == 5 and not kernels.graph.captured   # 4 parameters and x
    assert [v.name for v in kernels.graph.placeholders][:2] == ["p_0_weight", "p_0_bias"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # torch.compile imports torch.jit
def test_optimized_module_is_a_module_like_torch():
    lin = nn.Linear(2, 2)
    fast = symgrad.compile(lin)
    assert isinstance(fast, nn.Module) and type(fast).__name__ == "OptimizedModule"
    tfast = torch.compile(torch.nn.Linear(2, 2))
    assert list(fast.state_dict()) == list(tfast.state_dict())
    assert repr(fast) == repr(tfast)
    assert [p for p in fast.parameters()] == [lin.weight, lin.bias] or \
        all(a is b for a, b in zip(fast.parameters(), lin.parameters()))
    assert fast.in_features == 2 and fast._orig_mod is lin
    fast.eval()
    assert not lin.training


def test_function_calling_a_module_sees_updated_weights():
    model = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)).double()
    f = symgrad.compile(lambda x: model(x).sum(dim=1))
    x = symgrad.tensor(np.random.default_rng(0).standard_normal((6, 3)))
    opt = symgrad.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(4):
        out = f(x)
        np.testing.assert_allclose(out.detach().numpy(), model(x).sum(dim=1).detach().numpy(), rtol=1e-13)
        opt.zero_grad()
        out.sum().backward()
        assert all(p.grad is not None for p in model.parameters())
        opt.step()
    with symgrad.no_grad():   # inference with the new weights
        np.testing.assert_allclose(f(x).numpy(), model(x).sum(dim=1).numpy(), rtol=1e-13)
    assert f.parameters_passed() == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_replaced_submodule_is_used():
    model = nn.Sequential(nn.Linear(3, 2)).double()
    fast = symgrad.compile(model)
    x = symgrad.ones(1, 3, dtype=symgrad.float64)
    fast(x)
    model[0] = nn.Linear(3, 2).double()
    np.testing.assert_allclose(fast(x).detach().numpy(), model(x).detach().numpy(), rtol=1e-14)


def test_closed_over_parameter_gets_its_gradient():
    w = nn.Parameter(symgrad.tensor([1.0, 2.0, 3.0], dtype=symgrad.float64))
    f = symgrad.compile(lambda x: (symgrad.sin(x * w)).sum())
    x = symgrad.tensor([0.5, 0.25, 1.0], dtype=symgrad.float64)
    f(x).backward()
    np.testing.assert_allclose(w.grad.numpy(), (x * symgrad.cos(x * w)).detach().numpy(), rtol=1e-14)
    with symgrad.no_grad():
        w.mul_(2.0)
    w.grad = None
    value = f(x)
    assert float(value) == pytest.approx(float(symgrad.sin(x * w).sum()), rel=1e-14)
    value.backward()
    np.testing.assert_allclose(w.grad.numpy(), (x * symgrad.cos(x * w)).detach().numpy(), rtol=1e-14)


def test_frozen_parameters_get_no_gradient():
    _, eager, model = same_weights("Tanh")
    model[0].requires_grad_(False)
    eager[0].requires_grad_(False)
    fast = symgrad.compile(model)
    x = symgrad.tensor(np.random.default_rng(0).standard_normal((4, 5)))
    fast(x).sum().backward()
    eager(x).sum().backward()
    assert model[0].weight.grad is None and model[0].bias.grad is None
    np.testing.assert_allclose(model[2].weight.grad.numpy(), eager[2].weight.grad.numpy(), rtol=1e-12)


def test_dropout_in_training_mode_draws_a_new_mask_per_call_and_eval_runs():
    model = nn.Sequential(nn.Dropout(0.5)).double()
    fast = symgrad.compile(model)
    x = symgrad.ones(4000, dtype=symgrad.float64)
    first, second = fast(x).numpy(), fast(x).numpy()
    for out in (first, second):
        assert set(np.unique(out)) <= {0.0, 2.0}
        assert 0.45 < (out == 0).mean() < 0.55
    assert (first != second).any()   # a mask frozen into the kernels would repeat
    model.eval()
    np.testing.assert_array_equal(fast(x).numpy(), x.numpy())


def test_train_and_eval_get_separate_kernels():
    class Switch(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x) * (2.0 if self.training else 1.0)

    model = Switch().double()
    fast = symgrad.compile(model)
    x = symgrad.ones(1, 2, dtype=symgrad.float64)
    for mode in (True, False, True):
        model.train(mode)
        np.testing.assert_allclose(fast(x).detach().numpy(), model(x).detach().numpy(), rtol=1e-14)


def test_writing_a_parameter_inside_is_refused():
    lin = nn.Linear(2, 2).double()

    def f(x):
        with symgrad.no_grad():   # as an optimizer step would
            lin.weight.add_(1.0)
        return lin(x)

    with pytest.raises(symgrad.TraceError, match="in-place modification of the input"):
        symgrad.compile(f)(symgrad.ones(1, 2, dtype=symgrad.float64))


def test_captured_non_leaf_requiring_grad_is_refused():
    w = symgrad.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2
    with pytest.raises(RuntimeError, match="computed outside it that requires grad"):
        symgrad.compile(lambda x: (x * h).sum())(symgrad.ones(2))


def test_plain_functions_are_unchanged():
    f = symgrad.compile(lambda x: (x * x).sum())
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    f(x).backward()
    assert x.grad.tolist() == [2.0, 4.0]
    assert f.parameters_passed() == []
    assert isinstance(f, symgrad.CompiledFunction)


def test_inspect_shows_parameters_as_placeholders():
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh()).double()
    fast = symgrad.compile(model)
    x = symgrad.ones(4, 2, dtype=symgrad.float64)
    kernels = fast.inspect(x)
    assert [v.name for v in kernels.graph.placeholders] == ["p_0_weight", "p_0_bias", "input"]
    assert not any(n.op == "constant" for n in kernels.graph.nodes)
    fast(x).sum().backward()
    assert fast.stats()["traces"] == 1   # the call used the kernels inspect built


def test_training_flag_read_through_a_plain_object_selects_kernels():
    class Trainer:   # not a module: the model is reached through an attribute
        def __init__(self):
            self.model = nn.Sequential(nn.Dropout(0.5)).double()

    trainer = Trainer()
    trainer.model.eval()
    f = symgrad.compile(lambda x: trainer.model(x))
    x = symgrad.ones(2000, dtype=symgrad.float64)
    np.testing.assert_array_equal(f(x).numpy(), x.numpy())
    trainer.model.train()   # the kernels traced in eval mode must not run: dropout is applied now
    assert (f(x).numpy() == 0).any()
    trainer.model.eval()
    np.testing.assert_array_equal(f(x).numpy(), x.numpy())
    assert f.stats()["traces"] == 2


def test_data_dependent_forward_falls_back_with_parameters_filled():
    """A module whose forward branches on a value runs eagerly (the lifted parameters are not
    passed to the user's forward twice) and its parameters still get their gradients."""
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)

        def forward(self, x):
            y = self.lin(x)
            return y.sum() if y.sum() > 0 else (-y).sum()

    symgrad.manual_seed(0)
    model = Gate()
    compiled = symgrad.compile(model)
    x = symgrad.randn(4, 3)
    with pytest.warns(symgrad.EagerFallbackWarning):
        loss = compiled(x)
    loss.backward()
    expected = model(x)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected.backward()
    assert loss.item() == expected.item()
    for g, p in zip(grads, model.parameters()):
        np.testing.assert_array_equal(g.numpy(), p.grad.numpy())
