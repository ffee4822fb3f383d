"""Conv and pooling modules against torch.nn (values and gradients, float64, weights copied).

These call symgrad.nn.functional's conv1d/conv2d/max_pool2d/avg_pool2d, which come with the full
symgrad.nn.functional (issue 20, functional helper): on the nn-modules branch alone they fail with
NotImplementedError naming that file.
"""

import math

import numpy as np
import pytest

import symgrad
from symgrad import nn

torch = pytest.importorskip("torch")

MODULES = [
    ("Conv2d", (3, 4, 3), {}, (2, 3, 8, 7)),
    ("Conv2d", (3, 6, (3, 2)), {"stride": 2, "padding": 1, "bias": False}, (2, 3, 9, 8)),
    ("Conv2d", (4, 4, 3), {"groups": 2, "dilation": 2}, (1, 4, 9, 9)),
    ("Conv1d", (2, 5, 3), {"padding": 1}, (3, 2, 10)),
    ("MaxPool2d", (2,), {}, (2, 3, 8, 8)),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1}, (1, 2, 7, 9)),
    ("AvgPool2d", (2,), {}, (2, 3, 8, 8)),
    ("AvgPool2d", (3,), {"stride": 1, "padding": 1, "count_include_pad": False}, (1, 2, 5, 6)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", MODULES, ids=[f"{m[0]}-{m[2]}" for m in MODULES])
def test_conv_and_pool_modules_match_torch(name, args, kwargs, shape):
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, **kwargs).double()
    sm = getattr(nn, name)(*args, **kwargs).double()
    assert [n for n, _ in sm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [tuple(p.shape) for p in sm.parameters()] == [tuple(p.shape) for p in tm.parameters()]
    assert repr(sm) == repr(tm)
    if list(tm.parameters()):
        sm.load_state_dict({k: symgrad.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(0).standard_normal(shape)
    tx, sx = torch.tensor(x, requires_grad=True), symgrad.tensor(x, requires_grad=True)
    ty, sy = tm(tx), sm(sx)
    np.testing.assert_allclose(sy.detach().numpy(), ty.detach().numpy(), rtol=1e-11, atol=1e-12)
    seed = np.random.default_rng(1).standard_normal(ty.shape)
    ty.backward(torch.tensor(seed))
    sy.backward(symgrad.tensor(seed))
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    for ps, pt in zip(sm.parameters(), tm.parameters()):
        np.testing.assert_allclose(ps.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_conv2d_default_init_bounds():
    symgrad.manual_seed(0)
    conv = nn.Conv2d(8, 16, 5)
    bound = 1 / math.sqrt(8 * 5 * 5)
    w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert np.abs(b).max() <= bound


def test_small_cnn_trains_like_torch():
    torch.manual_seed(0)

    def net(lib):
        return lib.nn.Sequential(lib.nn.Conv2d(1, 4, 3, padding=1), lib.nn.ReLU(), lib.nn.MaxPool2d(2),
                                 lib.nn.Flatten(), lib.nn.Linear(4 * 4 * 4, 3)).double()

    tnet, snet = net(torch), net(symgrad)
    snet.load_state_dict({k: symgrad.tensor(v.numpy()) for k, v in tnet.state_dict().items()})
    topt, sopt = torch.optim.SGD(tnet.parameters(), lr=0.1, momentum=0.9), \
        symgrad.optim.SGD(snet.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, y = rng.standard_normal((8, 1, 8, 8)), rng.integers(0, 3, 8)
        for lib, model, opt in ((torch, tnet, topt), (symgrad, snet, sopt)):
            opt.zero_grad()
            lib.nn.functional.cross_entropy(model(lib.tensor(x)), lib.tensor(y)).backward()
            opt.step()
    for ps, pt in zip(snet.parameters(), tnet.parameters()):
        np.testing.assert_allclose(ps.detach().numpy(), pt.detach().numpy(), rtol=1e-10, atol=1e-12)
