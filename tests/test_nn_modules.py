"""symgrad.nn against torch.nn: registration, state_dict, reprs, init, and each module's values and
gradients (float64, weights copied from the torch module)."""

import copy
import math
import pickle

import numpy as np
import pytest

import symgrad
from symgrad import nn

torch = pytest.importorskip("torch")


def sym(t, requires_grad=False):
    return symgrad.tensor(t.detach().numpy(), requires_grad=requires_grad)


def copy_weights(dst, src):
    """Load torch module ``src``'s state into symgrad module ``dst``."""
    dst.load_state_dict({k: symgrad.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


class SymNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4))
        self.heads = nn.ModuleList([nn.Linear(4, 2), nn.Linear(4, 2)])
        self.table = nn.ModuleDict({"norm": nn.LayerNorm(4)})
        self.scale = nn.Parameter(symgrad.ones(4))
        self.register_buffer("offset", symgrad.zeros(4))
        self.register_buffer("scratch", symgrad.zeros(1), persistent=False)

    def forward(self, x):
        h = self.table["norm"](self.body(x)) * self.scale + self.offset
        return self.heads[0](h) + self.heads[1](h)


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 4))
        self.heads = torch.nn.ModuleList([torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)])
        self.table = torch.nn.ModuleDict({"norm": torch.nn.LayerNorm(4)})
        self.scale = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("offset", torch.zeros(4))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)

    def forward(self, x):
        h = self.table["norm"](self.body(x)) * self.scale + self.offset
        return self.heads[0](h) + self.heads[1](h)


@pytest.fixture
def nets():
    torch.manual_seed(0)
    t = TorchNet().double()
    s = SymNet().double()
    copy_weights(s, t)
    return s, t


# --- Parameter ---------------------------------------------------------------------------------------
def test_parameter_repr_and_defaults():
    p = nn.Parameter(symgrad.tensor([1.0, 2.0]))
    tp = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    assert repr(p) == repr(tp)
    assert p.requires_grad and p.is_leaf
    assert not nn.Parameter(symgrad.ones(2), requires_grad=False).requires_grad
    assert isinstance(p, symgrad.Tensor)
    assert type(p * 2) is symgrad.Tensor   # ops return plain tensors, as in torch


def test_parameter_shares_memory_with_its_tensor():
    t = symgrad.zeros(3)
    p = nn.Parameter(t)
    t.add_(1.0)
    assert p.tolist() == [1.0, 1.0, 1.0]


def test_parameter_copies_keep_the_class():
    p = nn.Parameter(symgrad.tensor([1.0, 2.0]))
    for other in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert isinstance(other, nn.Parameter) and other.requires_grad
        assert other.tolist() == [1.0, 2.0]
        assert other._data is not p._data


# --- registration and iteration -------------------------------------------------------------------------
def test_names_match_torch(nets):
    s, t = nets
    assert [n for n, _ in s.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in s.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in s.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in s.named_children()] == [n for n, _ in t.named_children()]
    assert list(s.state_dict()) == list(t.state_dict())
    assert len(list(s.modules())) == len(list(t.modules()))
    assert len(list(s.children())) == len(list(t.children()))
    assert [tuple(p.shape) for p in s.parameters()] == [tuple(p.shape) for p in t.parameters()]
    assert [n for n, _ in s.named_parameters(recurse=False)] == ["scale"]


def test_forward_and_backward_match_torch(nets):
    s, t = nets
    x = np.random.default_rng(0).standard_normal((6, 3))
    out_t = t(torch.tensor(x))
    out_s = s(symgrad.tensor(x))
    np.testing.assert_allclose(out_s.detach().numpy(), out_t.detach().numpy(), rtol=1e-12, atol=1e-12)
    (out_t ** 2).sum().backward()
    (out_s ** 2).sum().backward()
    for (name, ps), (_, pt) in zip(s.named_parameters(), t.named_parameters()):
        np.testing.assert_allclose(ps.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_shared_parameters_are_listed_once():
    lin = nn.Linear(2, 2)
    net = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(net.parameters())) == 2
    tlin = torch.nn.Linear(2, 2)
    assert len(list(torch.nn.Sequential(tlin, torch.nn.ReLU(), tlin).parameters())) == 2


def test_attribute_rules():
    m = nn.Module()
    m.w = nn.Parameter(symgrad.ones(2))
    m.sub = nn.Linear(2, 2)
    m.plain = 3
    assert "w" in m._parameters and "sub" in m._modules and m.plain == 3
    with pytest.raises(TypeError, match="cannot assign 'int' as parameter 'w'"):
        m.w = 3
    m.w = None
    assert m.w is None and list(m.named_parameters())[0][0] == "sub.weight"
    del m.sub
    assert not hasattr(m, "sub")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        m.nothing

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(symgrad.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_forward_missing():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_register_parameter_refuses_non_leaf():
    m = nn.Module()
    with pytest.raises(TypeError, match="torch.nn.Parameter or None required"):
        m.register_parameter("w", symgrad.ones(2))


# --- state_dict ----------------------------------------------------------------------------------------
def test_state_dict_round_trip_and_identity(nets):
    s, t = nets
    params = list(s.parameters())
    state = s.state_dict()
    assert all(not v.requires_grad for v in state.values())
    other = SymNet().double()
    result = other.load_state_dict(state)
    assert repr(result) == "<All keys matched successfully>"
    for a, b in zip(other.state_dict().values(), state.values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert list(s.parameters())[0] is params[0]   # loading copies in place


def test_load_state_dict_errors_like_torch(nets):
    s, t = nets
    state = {k: v for k, v in s.state_dict().items() if k != "scale"}
    state["extra"] = symgrad.zeros(1)
    tstate = {k: v for k, v in t.state_dict().items() if k != "scale"}
    tstate["extra"] = torch.zeros(1)
    with pytest.raises(RuntimeError) as ours:
        s.load_state_dict(state)
    with pytest.raises(RuntimeError) as theirs:
        t.load_state_dict(tstate)
    assert str(ours.value).replace("SymNet", "X") == str(theirs.value).replace("TorchNet", "X")
    missing, unexpected = s.load_state_dict(state, strict=False)
    assert (missing, unexpected) == (["scale"], ["extra"])
    bad = s.state_dict()
    bad["scale"] = symgrad.zeros(5)
    with pytest.raises(RuntimeError, match="size mismatch for scale"):
        s.load_state_dict(bad)


def test_state_dict_shares_memory(nets):
    s, _ = nets
    state = s.state_dict()
    with symgrad.no_grad():
        s.scale.mul_(3.0)
    assert state["scale"].tolist() == [3.0] * 4


# --- modes, grads, dtype, apply, hooks -------------------------------------------------------------------
def test_train_eval_zero_grad_requires_grad(nets):
    s, _ = nets
    assert s.training and all(m.training for m in s.modules())
    assert s.eval() is s and not any(m.training for m in s.modules())
    s.train()
    assert all(m.training for m in s.modules())
    with pytest.raises(ValueError, match="boolean"):
        s.train("no")
    s(symgrad.ones(2, 3, dtype=symgrad.float64)).sum().backward()
    assert all(p.grad is not None for p in s.parameters())
    s.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0.0 for p in s.parameters())
    s.zero_grad()
    assert all(p.grad is None for p in s.parameters())
    s.requires_grad_(False)
    assert not any(p.requires_grad for p in s.parameters())


def test_to_double_keeps_parameter_objects():
    m = nn.Linear(2, 3)
    w = m.weight
    assert w.dtype == symgrad.float32
    assert m.double() is m and m.weight is w and w.dtype == symgrad.float64 and m.bias.dtype == symgrad.float64
    m.float()
    assert w.dtype == symgrad.float32
    m.to(symgrad.float64)
    assert w.dtype == symgrad.float64
    assert m.to("cpu") is m
    with pytest.raises(RuntimeError, match="CPU only"):
        m.to("cuda")
    with pytest.raises(TypeError, match="floating point"):
        m.to(symgrad.int64)


def test_apply_visits_children_first():
    net = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    tnet = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU()))
    seen, tseen = [], []
    net.apply(lambda m: seen.append(type(m).__name__))
    tnet.apply(lambda m: tseen.append(type(m).__name__))
    assert seen == tseen


def test_forward_hooks():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre"))
    m.register_forward_hook(lambda mod, args, out: out * 0)
    out = m(symgrad.ones(1, 2))
    assert calls == ["pre"] and out.tolist() == [[0.0, 0.0]]
    h1.remove()
    m(symgrad.ones(1, 2))
    assert calls == ["pre"]


# --- reprs ----------------------------------------------------------------------------------------------
REPRS = [
    lambda nn: nn.Linear(3, 4), lambda nn: nn.Linear(3, 4, bias=False), lambda nn: nn.ReLU(),
    lambda nn: nn.GELU(), lambda nn: nn.GELU(approximate="tanh"), lambda nn: nn.SiLU(), lambda nn: nn.Tanh(),
    lambda nn: nn.Sigmoid(), lambda nn: nn.Softplus(), lambda nn: nn.ELU(), lambda nn: nn.LeakyReLU(0.2),
    lambda nn: nn.Softmax(dim=1), lambda nn: nn.LogSoftmax(dim=-1), lambda nn: nn.Identity(), lambda nn: nn.Dropout(),
    lambda nn: nn.Flatten(), lambda nn: nn.LayerNorm(4), lambda nn: nn.LayerNorm((2, 3), elementwise_affine=False),
    lambda nn: nn.Embedding(10, 3), lambda nn: nn.Embedding(10, 3, padding_idx=0), lambda nn: nn.MSELoss(),
    lambda nn: nn.CrossEntropyLoss(), lambda nn: nn.Conv2d(1, 6, 3),
    lambda nn: nn.Conv2d(2, 4, 3, padding=1, bias=False),
    lambda nn: nn.MaxPool2d(2), lambda nn: nn.AvgPool2d(2),
    lambda nn: nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 1))),
    lambda nn: nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU()]),
    lambda nn: nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(1, 1)}),
]


@pytest.mark.parametrize("make", REPRS, ids=lambda f: f(torch.nn).__class__.__name__)
def test_repr_matches_torch(make):
    assert repr(make(nn)) == repr(make(torch.nn))


def test_module_repr_matches_torch(nets):
    s, t = nets
    assert repr(s).replace("SymNet", "X") == repr(t).replace("TorchNet", "X")


# --- containers -----------------------------------------------------------------------------------------
def test_sequential_indexing():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert isinstance(seq[-1], nn.Linear) and len(seq[1:]) == 2 and isinstance(seq[1:], nn.Sequential)
    assert [type(m).__name__ for m in seq] == ["Linear", "ReLU", "Linear"]
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and [n for n, _ in seq.named_children()] == ["0", "1", "2", "3"]
    del seq[1]
    assert [n for n, _ in seq.named_children()] == ["0", "1", "2"]
    with pytest.raises(IndexError):
        seq[7]
    from collections import OrderedDict

    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.Tanh())]))
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]


def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.Linear(1, 1))
    ml += [nn.ReLU()]
    assert len(ml) == 3 and len(list(ml.parameters())) == 4
    md = nn.ModuleDict({"b": nn.ReLU()})
    md["a"] = nn.Linear(1, 1)
    assert list(md.keys()) == ["b", "a"] and "a" in md and len(md) == 2
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]
    assert isinstance(md.pop("b"), nn.ReLU) and len(md) == 1


# --- init -----------------------------------------------------------------------------------------------
def test_linear_init_bounds_and_seed():
    symgrad.manual_seed(3)
    a = nn.Linear(50, 40)
    symgrad.manual_seed(3)
    b = nn.Linear(50, 40)
    np.testing.assert_array_equal(a.weight.detach().numpy(), b.weight.detach().numpy())
    np.testing.assert_array_equal(a.bias.detach().numpy(), b.bias.detach().numpy())
    bound = 1 / math.sqrt(50)
    w, bias = a.weight.detach().numpy(), a.bias.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(bias).max() <= bound and np.abs(bias).max() > 0.8 * bound
    # uniform on [-bound, bound]: variance bound**2 / 3
    assert abs(w.var() - bound ** 2 / 3) < 0.1 * bound ** 2 / 3
    assert a.weight.dtype == symgrad.float32 and a.weight.requires_grad


@pytest.mark.parametrize("name,kwargs", [("xavier_uniform_", {}), ("xavier_uniform_", {"gain": 2.0}),
                                         ("kaiming_uniform_", {}), ("kaiming_uniform_", {"a": math.sqrt(5)}),
                                         ("kaiming_uniform_", {"mode": "fan_out", "nonlinearity": "relu"}),
                                         ("uniform_", {"a": -2.0, "b": 3.0})])
def test_uniform_inits_match_torch_bounds(name, kwargs):
    w = symgrad.empty(300, 200, dtype=symgrad.float64)
    tw = torch.empty(300, 200, dtype=torch.float64)
    getattr(nn.init, name)(w, **kwargs)
    getattr(torch.nn.init, name)(tw, **kwargs)
    ours, theirs = w.numpy(), tw.numpy()
    span = theirs.max() - theirs.min()
    assert abs(ours.min() - theirs.min()) < 0.01 * span and abs(ours.max() - theirs.max()) < 0.01 * span
    assert abs(ours.std() - theirs.std()) < 0.02 * theirs.std()


@pytest.mark.parametrize("name,kwargs", [("normal_", {"mean": 1.0, "std": 2.0}), ("xavier_normal_", {}),
                                         ("kaiming_normal_", {"nonlinearity": "relu"})])
def test_normal_inits_match_torch_moments(name, kwargs):
    w = symgrad.empty(300, 200, dtype=symgrad.float64)
    tw = torch.empty(300, 200, dtype=torch.float64)
    getattr(nn.init, name)(w, **kwargs)
    getattr(torch.nn.init, name)(tw, **kwargs)
    ours, theirs = w.numpy(), tw.numpy()
    # two independent samples of n: their means differ by about sd * sqrt(2 / n), their standard
    # deviations by about sd / sqrt(n); six of those is never reached by chance, a wrong scale is
    n, sd = theirs.size, theirs.std()
    assert abs(ours.mean() - theirs.mean()) < 6 * sd * math.sqrt(2 / n)
    assert abs(ours.std() - sd) < 6 * sd / math.sqrt(n)


def test_constant_inits_and_gain():
    w = nn.Parameter(symgrad.empty(2, 3))
    assert nn.init.zeros_(w) is w and w.tolist() == [[0.0] * 3] * 2 and w.requires_grad
    nn.init.ones_(w)
    assert w.tolist() == [[1.0] * 3] * 2
    nn.init.constant_(w, 0.5)
    assert w.tolist() == [[0.5] * 3] * 2
    for args in [("relu",), ("tanh",), ("leaky_relu", 0.2), ("linear",), ("selu",)]:
        assert nn.init.calculate_gain(*args) == pytest.approx(torch.nn.init.calculate_gain(*args))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_uniform_(symgrad.empty(3))


# --- activation and loss modules: values and gradients ------------------------------------------------------
ACTIVATIONS = [("ReLU", {}), ("GELU", {}), ("GELU", {"approximate": "tanh"}), ("SiLU", {}), ("Tanh", {}),
               ("Sigmoid", {}), ("Softplus", {}), ("Softplus", {"beta": 2.0, "threshold": 1.0}), ("ELU", {}),
               ("ELU", {"alpha": 0.5}), ("LeakyReLU", {}), ("LeakyReLU", {"negative_slope": 0.2}),
               ("Softmax", {"dim": 1}), ("LogSoftmax", {"dim": -1}), ("Identity", {}), ("Flatten", {}),
               ("Flatten", {"start_dim": 0}), ("LayerNorm", {"normalized_shape": 4}),
               ("LayerNorm", {"normalized_shape": (3, 4), "elementwise_affine": False})]


@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}-{k}" for n, k in ACTIVATIONS])
def test_activation_modules_match_torch(name, kwargs):
    x = np.random.default_rng(1).standard_normal((2, 3, 4)) * 3
    tm = getattr(torch.nn, name)(**kwargs).double()
    sm = getattr(nn, name)(**kwargs).double()
    if list(tm.parameters()):
        with torch.no_grad():
            for p in tm.parameters():
                p.copy_(torch.randn(p.shape, dtype=torch.float64))
        copy_weights(sm, tm)
    tx, sx = torch.tensor(x, requires_grad=True), symgrad.tensor(x, requires_grad=True)
    ty, sy = tm(tx), sm(sx)
    np.testing.assert_allclose(sy.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    seed = np.random.default_rng(2).standard_normal(ty.shape)
    ty.backward(torch.tensor(seed))
    sy.backward(symgrad.tensor(seed))
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    for ps, pt in zip(sm.parameters(), tm.parameters()):
        np.testing.assert_allclose(ps.grad.numpy(), pt.grad.numpy(), rtol=1e-10, atol=1e-12)


def _loss_inputs(name, rng):
    x = rng.standard_normal((5, 4))
    if name in ("CrossEntropyLoss", "NLLLoss"):
        target = rng.integers(0, 4, 5)
        target[1] = -100   # the default ignore_index
        if name == "NLLLoss":
            x = x - np.log(np.exp(x).sum(1, keepdims=True))
        return x, target
    if name == "CrossEntropyLoss-probs":
        p = rng.random((5, 4))
        return x, p / p.sum(1, keepdims=True)
    if name == "BCELoss":
        return 1 / (1 + np.exp(-x)), rng.random((5, 4))
    if name == "KLDivLoss":
        p = rng.random((5, 4))
        return x - np.log(np.exp(x).sum(1, keepdims=True)), p / p.sum(1, keepdims=True)
    return x, rng.standard_normal((5, 4))


LOSSES = [("MSELoss", {}), ("MSELoss", {"reduction": "sum"}), ("L1Loss", {}), ("L1Loss", {"reduction": "none"}),
          ("HuberLoss", {}), ("HuberLoss", {"delta": 0.5}), ("SmoothL1Loss", {}), ("SmoothL1Loss", {"beta": 0.3}),
          ("CrossEntropyLoss", {}), ("CrossEntropyLoss", {"reduction": "sum"}),
          ("CrossEntropyLoss", {"weight": [0.5, 1.0, 2.0, 1.5]}), ("CrossEntropyLoss-probs", {}),
          ("NLLLoss", {}), ("NLLLoss", {"reduction": "none"}), ("BCELoss", {}), ("BCEWithLogitsLoss", {}),
          ("BCEWithLogitsLoss", {"pos_weight": [1.0, 2.0, 0.5, 3.0]}), ("KLDivLoss", {"reduction": "batchmean"}),
          ("KLDivLoss", {"reduction": "sum"})]


@pytest.mark.parametrize("name,kwargs", LOSSES, ids=[f"{n}-{k}" for n, k in LOSSES])
def test_loss_modules_match_torch(name, kwargs):
    rng = np.random.default_rng(4)
    x, target = _loss_inputs(name, rng)
    cls = name.split("-")[0]
    tkw = {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, list) else v for k, v in kwargs.items()}
    skw = {k: symgrad.tensor(v, dtype=symgrad.float64) if isinstance(v, list) else v for k, v in kwargs.items()}
    tm, sm = getattr(torch.nn, cls)(**tkw), getattr(nn, cls)(**skw)
    tx, sx = torch.tensor(x, requires_grad=True), symgrad.tensor(x, requires_grad=True)
    ty, sy = tm(tx, torch.tensor(target)), sm(sx, symgrad.tensor(target))
    np.testing.assert_allclose(sy.detach().numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    seed = np.random.default_rng(5).standard_normal(ty.shape)
    ty.backward(torch.tensor(seed))
    sy.backward(symgrad.tensor(seed))
    np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_embedding_matches_torch_with_padding():
    torch.manual_seed(0)
    tm = torch.nn.Embedding(6, 3, padding_idx=1).double()
    sm = nn.Embedding(6, 3, padding_idx=1).double()
    assert sm.weight[1].tolist() == [0.0, 0.0, 0.0]
    copy_weights(sm, tm)
    idx = np.array([[0, 1, 5], [1, 2, 2]])
    ty, sy = tm(torch.tensor(idx)), sm(symgrad.tensor(idx))
    np.testing.assert_array_equal(sy.detach().numpy(), ty.detach().numpy())
    seed = np.random.default_rng(0).standard_normal(ty.shape)
    ty.backward(torch.tensor(seed))
    sy.backward(symgrad.tensor(seed))
    np.testing.assert_allclose(sm.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-12, atol=1e-12)
    pre = nn.Embedding.from_pretrained(symgrad.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert not pre.weight.requires_grad and pre(symgrad.tensor([1])).tolist() == [[3.0, 4.0]]


def test_dropout_train_and_eval():
    symgrad.manual_seed(0)
    d = nn.Dropout(0.25)
    x = symgrad.ones(200, 100, dtype=symgrad.float64, requires_grad=True)
    y = d(x)
    values = np.unique(y.detach().numpy())
    np.testing.assert_allclose(values, [0.0, 1 / 0.75])
    assert abs((y.detach().numpy() == 0).mean() - 0.25) < 0.02
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())   # the same mask scales the gradient
    d.eval()
    assert d(x) is x or np.array_equal(d(x).detach().numpy(), x.detach().numpy())
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
