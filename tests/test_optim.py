"""symgrad.optim against torch.optim: the same MLP, weights and data in float64, 10 steps, parameters
equal to ~1e-12 after every step."""

import numpy as np
import pytest

import symgrad
from symgrad import nn

torch = pytest.importorskip("torch")


def make_pair(seed=0):
    torch.manual_seed(seed)
    tnet = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    snet = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    snet.load_state_dict({k: symgrad.tensor(v.numpy()) for k, v in tnet.state_dict().items()})
    return snet, tnet


def data(step):
    rng = np.random.default_rng(100 + step)
    return rng.standard_normal((16, 4)), rng.standard_normal((16, 3))


def assert_same(snet, tnet, tol=1e-12):
    for (name, ps), (_, pt) in zip(snet.named_parameters(), tnet.named_parameters()):
        np.testing.assert_allclose(ps.detach().numpy(), pt.detach().numpy(), rtol=tol, atol=tol, err_msg=name)


def run(opt_name, kwargs, steps=10, closure=False, groups=False):
    snet, tnet = make_pair()
    if groups:   # a second group with its own learning rate
        sparams = [{"params": snet[0].parameters()}, {"params": snet[2].parameters(), "lr": kwargs["lr"] / 3}]
        tparams = [{"params": tnet[0].parameters()}, {"params": tnet[2].parameters(), "lr": kwargs["lr"] / 3}]
    else:
        sparams, tparams = snet.parameters(), tnet.parameters()
    sopt = getattr(symgrad.optim, opt_name)(sparams, **kwargs)
    topt = getattr(torch.optim, opt_name)(tparams, **kwargs)
    for step in range(steps):
        x, y = data(step)
        for net, opt, lib in ((snet, sopt, symgrad), (tnet, topt, torch)):
            def loss_fn(net=net, opt=opt, lib=lib, x=x, y=y):
                opt.zero_grad()
                loss = ((net(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
                loss.backward()
                return loss

            if closure:
                opt.step(loss_fn)
            else:
                loss_fn()
                opt.step()
        assert_same(snet, tnet)
    return snet, tnet, sopt, topt


CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "weight_decay": 0.1}),
    ("SGD", {"lr": 0.05, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("Adam", {"lr": 0.01, "maximize": True, "amsgrad": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.3, "amsgrad": True}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "weight_decay": 0.1, "momentum": 0.5}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9, "maximize": True}),
]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_steps_match_torch(name, kwargs):
    run(name, kwargs)


@pytest.mark.parametrize("name,kwargs", [("SGD", {"lr": 0.05, "momentum": 0.9}), ("Adam", {"lr": 0.01})])
def test_param_groups_and_closure_match_torch(name, kwargs):
    run(name, kwargs, steps=5, groups=True)
    run(name, kwargs, steps=5, closure=True)


def test_state_and_state_dict_match_torch():
    snet, tnet, sopt, topt = run("Adam", {"lr": 0.01, "amsgrad": True}, steps=3)
    sd, td = sopt.state_dict(), topt.state_dict()
    assert sd["param_groups"] == td["param_groups"]
    assert sd["state"].keys() == td["state"].keys()
    for i in td["state"]:
        assert sd["state"][i].keys() == td["state"][i].keys()
        for key, value in td["state"][i].items():
            np.testing.assert_allclose(sd["state"][i][key].numpy(), value.numpy(), rtol=1e-12, atol=1e-14)
    assert sd["state"][0]["step"].dtype == symgrad.float32


def test_load_state_dict_resumes_identically():
    snet, _, sopt, _ = run("Adam", {"lr": 0.01}, steps=3)
    clone = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    clone.load_state_dict(snet.state_dict())
    copt = symgrad.optim.Adam(clone.parameters(), lr=0.5)
    copt.load_state_dict(sopt.state_dict())
    assert copt.param_groups[0]["lr"] == 0.01
    for net, opt in ((snet, sopt), (clone, copt)):
        x, y = data(7)
        opt.zero_grad()
        ((net(symgrad.tensor(x)) - symgrad.tensor(y)) ** 2).mean().backward()
        opt.step()
    for a, b in zip(snet.parameters(), clone.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_sgd_momentum_buffer_matches_torch():
    _, _, sopt, topt = run("SGD", {"lr": 0.05, "momentum": 0.9}, steps=2)
    for i, state in topt.state_dict()["state"].items():
        np.testing.assert_allclose(sopt.state_dict()["state"][i]["momentum_buffer"].numpy(),
                                   state["momentum_buffer"].numpy(), rtol=1e-12)


def test_step_updates_in_place_and_bumps_version():
    p = nn.Parameter(symgrad.tensor([1.0, 2.0], dtype=symgrad.float64))
    data_before, version = p._data, p._version
    opt = symgrad.optim.SGD([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    assert p._data is data_before and p._version > version
    assert p.tolist() == pytest.approx([0.8, 1.6])
    assert p.grad_fn is None and p.requires_grad


def test_parameters_without_grad_are_skipped():
    a = nn.Parameter(symgrad.tensor([1.0]))
    b = nn.Parameter(symgrad.tensor([1.0]))
    opt = symgrad.optim.Adam([a, b], lr=0.1)
    (a * 2).sum().backward()
    opt.step()
    assert b.tolist() == [1.0] and a.tolist() != [1.0]
    assert b not in opt.state


def test_zero_grad():
    p = nn.Parameter(symgrad.tensor([1.0, 2.0]))
    opt = symgrad.optim.SGD([p], lr=0.1)
    (p * p).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert p.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize("call,message", [
    ("optim.SGD(p, lr=-1)", "Invalid learning rate: -1"),
    ("optim.SGD(p, lr=0.1, momentum=-0.5)", "Invalid momentum value: -0.5"),
    ("optim.SGD(p, lr=0.1, nesterov=True)", "Nesterov momentum requires a momentum and zero dampening"),
    ("optim.Adam(p, betas=(1.0, 0.9))", "Invalid beta parameter at index 0: 1.0"),
    ("optim.Adam(p, eps=-1.0)", "Invalid epsilon value: -1.0"),
    ("optim.AdamW(p, weight_decay=-1.0)", "Invalid weight_decay value: -1.0"),
    ("optim.Adam([], lr=0.1)", "optimizer got an empty parameter list"),
])
def test_errors_match_torch(call, message):
    for lib in (symgrad, torch):
        p = [lib.nn.Parameter(lib.ones(2))]
        with pytest.raises(ValueError) as err:
            eval(call, {"optim": lib.optim, "p": p})
        assert str(err.value) == message


def test_non_leaf_and_duplicate_parameters_refused():
    p = nn.Parameter(symgrad.ones(2))
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        symgrad.optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        symgrad.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)


def test_defaults_match_torch():
    for name in ("SGD", "Adam", "AdamW", "RMSprop"):
        sopt = getattr(symgrad.optim, name)([nn.Parameter(symgrad.ones(2))])
        topt = getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(2))])
        assert sopt.defaults == topt.defaults
        assert repr(sopt) == repr(topt)
