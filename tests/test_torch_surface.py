"""`import symgrad as torch`: plumbing (devices, factories, .data, .to, .type, seeds) and the tensor
methods PyTorch code uses (all/any, sort/topk, cumsum/cumprod, repeat, isclose, in-place trig, axis=),
each compared with real torch: values, gradients (second order too), grad_fn names, float32 and float64,
eager and through symgrad.compile."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import symgrad

torch = pytest.importorskip("torch")


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


# --- the op table: name -> (fn(lib, x), input builder) ---------------------------------------

def _distinct(rng, *shape):
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) * 0.3 + rng.uniform(0, 0.05, n)).reshape(shape)


def _with_zeros(rng, *shape):
    x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    x.reshape(-1)[[1, 5]] = 0.0
    return x


# Differentiable ops: values, first and second derivatives, node names, float32/64, eager and compiled.
DIFFERENTIABLE = {
    "cumsum": (lambda L, x: L.cumsum(x, 1), _distinct),
    "cumsum_method_axis": (lambda L, x: x.cumsum(axis=0), _distinct),
    "cumprod": (lambda L, x: L.cumprod(x, 1), _distinct),
    "cumprod_zeros": (lambda L, x: L.cumprod(x, dim=1), _with_zeros),
    "sort_values": (lambda L, x: L.sort(x, 1).values, _distinct),
    "sort_descending": (lambda L, x: x.sort(dim=0, descending=True)[0], _distinct),
    "sort_stable": (lambda L, x: L.sort(x, stable=True, dim=1).values, _distinct),
    "topk_largest": (lambda L, x: L.topk(x, 2, dim=1).values, _distinct),
    "topk_smallest": (lambda L, x: x.topk(3, 0, largest=False)[0], _distinct),
    "flip": (lambda L, x: L.flip(x, [0, 1]), _distinct),
    "flip_method": (lambda L, x: x.flip(1), _distinct),
    "repeat": (lambda L, x: x.repeat(2, 3), _distinct),
    "repeat_new_dims": (lambda L, x: x.repeat(2, 1, 2), _distinct),
    "gather": (lambda L, x: L.gather(x, 1, L.tensor([[0, 0], [3, 1], [2, 2]])), _distinct),
    "round_decimals": (lambda L, x: L.round(x * 10, decimals=1) + x, _distinct),
    "einsum": (lambda L, x: L.einsum("ij,kj->ik", x, x), _distinct),
    "sum_axis": (lambda L, x: L.sum(x, axis=1), _distinct),
    "mean_axis_keepdims": (lambda L, x: x.mean(axis=0, keepdims=True), _distinct),
    "max_axis": (lambda L, x: L.max(x, axis=1).values, _distinct),
    "amax_axis": (lambda L, x: L.amax(x, axis=0), _distinct),
    "masked_fill": (lambda L, x: x.masked_fill(x > 0, 0.5), _distinct),
    "norm": (lambda L, x: x.norm(), _distinct),
    "norm_dim": (lambda L, x: L.norm(x, p=1, dim=1) + x.norm(dim=0).sum(), _distinct),
    "chunk": (lambda L, x: L.chunk(x, 3, 1)[1] * x.chunk(3)[0][:, :2], _distinct),
    "narrow": (lambda L, x: x.narrow(1, 1, 2) ** 2, _distinct),
    "view_as": (lambda L, x: x.reshape(4, 3).view_as(x) * x, _distinct),
}

# The node names PyTorch gives these ops (checked against torch below when it names the same node).
NODE_NAMES = {"cumsum": "CumsumBackward0", "cumprod": "CumprodBackward0", "sort_values": "SortBackward0",
              "sort_stable": "SortBackward1", "topk_largest": "TopkBackward0", "flip": "FlipBackward0",
              "repeat": "RepeatBackward0", "gather": "GatherBackward0", "sum_axis": "SumBackward1",
              "max_axis": "MaxBackward0", "masked_fill": "MaskedFillBackward0"}


def _inputs(lib, name, dtype_name, requires_grad=True):
    rng = np.random.default_rng(sum(map(ord, name)))
    arr = DIFFERENTIABLE[name][1](rng, 3, 4)
    return lib.tensor(arr, dtype=getattr(lib, dtype_name), requires_grad=requires_grad)


def _weights(out_shape, dtype):
    return np.linspace(-1.0, 2.0, int(np.prod(out_shape)) or 1).reshape(out_shape).astype(dtype)


@pytest.mark.parametrize("dtype_name", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_values_and_gradients_match_torch(name, dtype_name):
    fn = DIFFERENTIABLE[name][0]
    results = {}
    for lib in (torch, symgrad):
        x = _inputs(lib, name, dtype_name)
        out = fn(lib, x)
        w = lib.tensor(_weights(tuple(out.shape), np.dtype(dtype_name)))
        (g,) = lib.autograd.grad((out * w).sum(), x, create_graph=True)
        # a first derivative that does not depend on x has no graph in torch: no second derivative
        gg = lib.autograd.grad((g * g).sum(), x, allow_unused=True)[0] if g.requires_grad else None
        results[lib] = (out, g, gg)
    for k, (mine, theirs) in enumerate(zip(results[symgrad], results[torch])):
        # float32 second derivatives: torch's formulas and ours round differently (cumprod's divides)
        tol = dict(rtol=1e-10, atol=1e-10) if dtype_name == "float64" else \
            dict(rtol=1e-5, atol=1e-5) if k < 2 else dict(rtol=5e-3, atol=1e-3)
        if theirs is None:      # torch: no second derivative (the first is constant); ours is 0 or None
            assert mine is None or not _np(mine).any(), name
            continue
        assert _np(mine).dtype == np.dtype(dtype_name)
        np.testing.assert_allclose(_np(mine), _np(theirs), err_msg=f"{name} output {k}", **tol)


@pytest.mark.parametrize("name", sorted(NODE_NAMES))
def test_grad_fn_names_match_torch(name):
    fn = DIFFERENTIABLE[name][0]
    names = [type(fn(lib, _inputs(lib, name, "float64")).grad_fn).__name__ for lib in (torch, symgrad)]
    assert names[0] == NODE_NAMES[name]
    assert names[1] == names[0]


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_compiled_matches_eager(name):
    fn = DIFFERENTIABLE[name][0]

    def loss(x):
        out = fn(symgrad, x)
        return (out * out).sum()

    compiled = symgrad.compile(loss)
    for seed in (0, 1):       # a second call runs the compiled graph on new values
        x_eager = _inputs(symgrad, name, "float64") * 1.0 + seed
        x_eager = x_eager.detach().requires_grad_(True)
        x_comp = x_eager.detach().clone().requires_grad_(True)
        expected = loss(x_eager)
        expected.backward()
        got = compiled(x_comp)
        got.backward()
        np.testing.assert_allclose(_np(got), _np(expected), rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(_np(x_comp.grad), _np(x_eager.grad), rtol=1e-10, atol=1e-12, err_msg=name)


# --- ops without gradients: values and dtypes ------------------------------------------------

VALUE_ONLY = {
    "all": lambda L, x: L.all(x > -1),
    "all_dim": lambda L, x: L.all(x > 0, dim=1),
    "all_dims_keepdim": lambda L, x: (x > -5).all(dim=(0, 1), keepdim=True),
    "all_axis": lambda L, x: L.all(x > 0, axis=0),
    "any": lambda L, x: L.any(x > 1),
    "any_dim_keepdim": lambda L, x: x.any(1, keepdim=True),
    "all_uint8": lambda L, x: L.all((x > 0).to(L.uint8)),
    "any_float": lambda L, x: L.any(x, 0),
    "argmax": lambda L, x: L.argmax(x),
    "argmax_dim": lambda L, x: x.argmax(dim=1, keepdim=True),
    "argmin_axis": lambda L, x: L.argmin(x, axis=0),
    "sort_indices": lambda L, x: L.sort(x, 1, descending=True).indices,
    "topk_indices": lambda L, x: L.topk(x, 2).indices,
    "argsort": lambda L, x: x.argsort(dim=0),
    "isnan": lambda L, x: L.isnan(L.log(x)),
    "isinf": lambda L, x: L.isinf(1 / (x * 0)),
    "isfinite": lambda L, x: (L.log(x) / (x - x.max())).isfinite(),
    "isclose": lambda L, x: L.isclose(x, x + 1e-6),
    "isclose_tol": lambda L, x: x.isclose(x * 1.01, rtol=0.02),
    "isclose_inf_nan": lambda L, x: L.isclose(L.tensor([float("inf"), float("nan"), 1.0, float("-inf")]),
                                              L.tensor([float("inf"), float("nan"), float("inf"), 1.0]),
                                              equal_nan=True),
    "round": lambda L, x: L.round(x * 7),
    "round_half_even": lambda L, x: L.round(L.tensor([0.5, 1.5, 2.5, -0.5])),
    "cumsum_int": lambda L, x: L.cumsum((x * 10).long(), 0),
    "repeat_int": lambda L, x: L.arange(6).reshape(2, 3).repeat(2, 2),
    "nonzero": lambda L, x: L.nonzero(x > 0),
    "nonzero_method": lambda L, x: (x > 0.5).nonzero(),
}


@pytest.mark.parametrize("name", sorted(VALUE_ONLY))
def test_value_ops_match_torch(name):
    fn = VALUE_ONLY[name]
    arr = _distinct(np.random.default_rng(3), 3, 4).astype(np.float32)
    mine = fn(symgrad, symgrad.tensor(arr))
    theirs = fn(torch, torch.tensor(arr, dtype=torch.float32))
    assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(_np(mine), _np(theirs))
    assert mine.grad_fn is None


@pytest.mark.parametrize("a,b,kwargs", [([1.0, 2.0], [1.0, 2.0 + 1e-7], {}), ([1.0, 2.0], [1.0, 2.1], {}),
                                        ([1.0, float("nan")], [1.0, float("nan")], {}),
                                        ([1.0, float("nan")], [1.0, float("nan")], {"equal_nan": True}),
                                        ([1.0, 2.0], [1.1, 2.1], {"atol": 0.2})])
def test_allclose_and_equal(a, b, kwargs):
    for lib in (torch, symgrad):
        assert isinstance(lib.allclose(lib.tensor(a), lib.tensor(b), **kwargs), bool)
    assert symgrad.allclose(symgrad.tensor(a), symgrad.tensor(b), **kwargs) == \
        torch.allclose(torch.tensor(a), torch.tensor(b), **kwargs)
    assert symgrad.equal(symgrad.tensor(a), symgrad.tensor(b)) == torch.equal(torch.tensor(a), torch.tensor(b))
    assert symgrad.tensor([1, 2]).equal(symgrad.tensor([1, 2])) and not symgrad.equal(symgrad.ones(2), symgrad.ones(3))


def test_topk_returns_named_values_and_indices():
    x = symgrad.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    result = symgrad.topk(x, 2)
    values, indices = result
    assert result.values is values and result.indices is indices
    np.testing.assert_array_equal(indices.numpy(), torch.topk(torch.tensor(x.numpy()), 2).indices.numpy())
    s = x.sort(dim=1)
    assert s.values.tolist() == [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]] and s.indices.tolist() == [[0, 2, 1], [1, 0, 2]]


def test_sort_is_stable_like_torch():
    arr = np.array([2.0, 1.0, 2.0, 1.0, 2.0, 0.0])
    for descending in (False, True):
        mine = symgrad.sort(symgrad.tensor(arr), descending=descending, stable=True).indices
        theirs = torch.sort(torch.tensor(arr), descending=descending, stable=True).indices
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_topk_k_out_of_range_is_a_clear_error():
    with pytest.raises(RuntimeError, match="topk.*k=4 out of range"):
        symgrad.topk(symgrad.ones(3), 4)


def test_axis_alias_conflict_is_an_error():
    with pytest.raises(TypeError, match="both dim= and its alias axis="):
        symgrad.sum(symgrad.ones(2, 2), dim=0, axis=1)


# --- in-place elementwise ops ----------------------------------------------------------------

INPLACE = ["cos_", "sin_", "tan_", "exp_", "tanh_", "sigmoid_", "log_", "sqrt_", "abs_", "neg_", "atan_",
           "sinh_", "cosh_", "expm1_", "log1p_", "reciprocal_", "square_", "erf_", "rsqrt_", "floor_", "ceil_",
           "trunc_", "round_", "sign_", "asin_", "acos_"]


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_elementwise_matches_torch(name):
    arr = np.array([[0.3, 0.6, 0.9], [0.2, 0.4, 0.7]])
    out = {}
    for lib in (torch, symgrad):
        leaf = lib.tensor(arr, dtype=lib.float64, requires_grad=True)
        y = leaf * 1.0
        version = y._version
        returned = getattr(y, name)()
        assert returned is y and y._version == version + 1
        (y * lib.tensor(arr + 1.0)).sum().backward()
        out[lib] = (y, leaf.grad, type(y.grad_fn).__name__)
        # a leaf that requires grad cannot be changed in place
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            getattr(leaf, name)()
        with lib.no_grad():    # ... except under no_grad, as torch
            getattr(lib.tensor(arr, dtype=lib.float64), name)()
    np.testing.assert_allclose(_np(out[symgrad][0]), _np(out[torch][0]), rtol=1e-12)
    np.testing.assert_allclose(_np(out[symgrad][1]), _np(out[torch][1]), rtol=1e-12, atol=1e-15)


def test_inplace_on_saved_tensor_is_detected_as_torch():
    for lib in (torch, symgrad):
        x = lib.tensor([0.5, 1.0], requires_grad=True)
        y = x.exp()         # ExpBackward0 saves its result
        y.cos_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


# --- small integer dtypes -------------------------------------------------------------------

INT_CASES = {
    "uint8_plus_int8": lambda L: L.tensor([250, 3], dtype=L.uint8) + L.tensor([-3, 4], dtype=L.int8),
    "uint8_wraps": lambda L: L.tensor([250, 3], dtype=L.uint8) + 10,
    "uint8_times": lambda L: L.tensor([250, 3], dtype=L.uint8) * 2,
    "uint8_big_scalar": lambda L: L.tensor([250, 3], dtype=L.uint8) + 1000,
    "int8_times": lambda L: L.tensor([-3, 4], dtype=L.int8) * 100,
    "int16_times": lambda L: L.tensor([300, -2], dtype=L.int16) * 3,
    "int8_minus_float": lambda L: L.tensor([-3, 4], dtype=L.int8) - 1.5,
    "uint8_div": lambda L: L.tensor([7, 3], dtype=L.uint8) / 2,
    "uint8_floordiv": lambda L: L.tensor([7, 3], dtype=L.uint8) // 2,
    "int16_plus_int64": lambda L: L.tensor([1, 2], dtype=L.int16) + L.tensor([1, 2]),
    "int8_plus_0d_int64": lambda L: L.tensor([1, 2], dtype=L.int8) + L.tensor(5),
    "uint8_sum": lambda L: L.tensor([200, 100], dtype=L.uint8).sum(),
    "uint8_from_list": lambda L: L.tensor([1, 2], dtype=L.uint8),
    "int16_zeros": lambda L: L.zeros(2, dtype=L.int16),
    "int8_arange": lambda L: L.arange(4, dtype=L.int8),
    "uint8_to_float": lambda L: L.tensor([1, 255], dtype=L.uint8).float(),
    "float_to_uint8": lambda L: L.tensor([1.7, 200.2]).to(L.uint8),
    "uint8_compare": lambda L: L.tensor([1, 255], dtype=L.uint8) > 100,
    "short_alias": lambda L: L.ones(2, dtype=L.short),
}


@pytest.mark.parametrize("name", sorted(INT_CASES))
def test_small_integer_dtypes_match_torch(name):
    mine, theirs = INT_CASES[name](symgrad), INT_CASES[name](torch)
    assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], name
    np.testing.assert_array_equal(_np(mine), _np(theirs))


# --- plumbing: devices ------------------------------------------------------------------------

def test_device_objects_behave_as_torch():
    for spec in ("cpu", "cpu:0"):
        mine, theirs = symgrad.device(spec), torch.device(spec)
        assert repr(mine) == repr(theirs) and str(mine) == str(theirs)
        assert (mine.type, mine.index) == (theirs.type, theirs.index)
    assert symgrad.device("cpu") == symgrad.device("cpu")
    assert (symgrad.device("cpu") == symgrad.device("cpu:0")) == (torch.device("cpu") == torch.device("cpu:0"))
    assert symgrad.device(symgrad.device("cpu")) == symgrad.device("cpu")
    assert symgrad.device("cpu", 0) == symgrad.device("cpu:0")
    assert hash(symgrad.device("cpu")) == hash(symgrad.device("cpu"))
    assert pickle.loads(pickle.dumps(symgrad.device("cpu:0"))) == symgrad.device("cpu:0")
    assert repr(symgrad.device("cuda:1")) == repr(torch.device("cuda:1"))   # naming one is fine
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        symgrad.device("gpu")


def test_tensor_device_and_cuda_queries():
    x = symgrad.ones(2)
    assert x.device == symgrad.device("cpu") and str(x.device) == "cpu" and repr(x.device) == "device(type='cpu')"
    assert x.is_cuda is False and x.get_device() == -1
    assert symgrad.cuda.is_available() is False and symgrad.cuda.device_count() == 0
    assert symgrad.backends.mps.is_available() is False
    symgrad.cuda.manual_seed(0)
    symgrad.cuda.manual_seed_all(0)     # seeding absent devices does nothing, as in torch
    import symgrad.cuda as cuda_module  # noqa: F401 - importable as a module

    assert symgrad.get_default_device() == symgrad.device("cpu")
    symgrad.set_default_device("cpu")
    symgrad.set_default_device(None)
    with symgrad.device("cpu"):
        assert symgrad.zeros(1).device.type == "cpu"


FACTORIES = {
    "tensor": lambda L, **kw: L.tensor([1.0, 2.0], **kw),
    "zeros": lambda L, **kw: L.zeros(2, 3, **kw),
    "zeros_tuple": lambda L, **kw: L.zeros((2, 3), **kw),
    "zeros_size_keyword": lambda L, **kw: L.zeros(size=(2, 3), **kw),
    "ones": lambda L, **kw: L.ones([2], **kw),
    "empty": lambda L, **kw: L.empty(2, 2, **kw),
    "full": lambda L, **kw: L.full((2,), 3.5, **kw),
    "arange": lambda L, **kw: L.arange(0, 2, 0.5, **kw),
    "linspace": lambda L, **kw: L.linspace(0, 1, 5, **kw),
    "eye": lambda L, **kw: L.eye(3, **kw),
    "zeros_like": lambda L, **kw: L.zeros_like(L.ones(2, 2), **kw),
    "ones_like": lambda L, **kw: L.ones_like(L.ones(2), **kw),
    "full_like": lambda L, **kw: L.full_like(L.ones(2), 7.0, **kw),
    "empty_like": lambda L, **kw: L.empty_like(L.ones(2), **kw),
    "rand": lambda L, **kw: L.rand(2, 3, **kw) * 0,
    "randn": lambda L, **kw: L.randn(2, **kw) * 0,
    "rand_like": lambda L, **kw: L.rand_like(L.ones(2), **kw) * 0,
    "randn_like": lambda L, **kw: L.randn_like(L.ones(2), **kw) * 0,
    "as_tensor": lambda L, **kw: L.as_tensor([1.0, 2.0], **{k: v for k, v in kw.items() if k != "requires_grad"}),
    "new_zeros": lambda L, **kw: L.ones(1).new_zeros((2, 2), **kw),
    "new_ones": lambda L, **kw: L.ones(1).new_ones(3, **kw),
    "new_full": lambda L, **kw: L.ones(1).new_full((2,), 4.0, **kw),
    "new_tensor": lambda L, **kw: L.ones(1).new_tensor([1.0, 5.0], **kw),
}


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "device", None])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_take_device_dtype_requires_grad(name, device):
    for lib in (torch, symgrad):
        dev = lib.device("cpu") if device == "device" else device
        t = FACTORIES[name](lib, device=dev, dtype=lib.float64, requires_grad=True)
        assert t.dtype == lib.float64 and t.device.type == "cpu"
        if name != "as_tensor":
            assert t.requires_grad and t.is_leaf or t.grad_fn is not None
    mine = FACTORIES[name](symgrad, dtype=symgrad.float64)
    theirs = FACTORIES[name](torch, dtype=torch.float64)
    assert mine.shape == theirs.shape
    if not name.startswith("empty"):    # empty's values are whatever the memory held
        np.testing.assert_array_equal(_np(mine), _np(theirs))


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "mps"])
def test_accelerator_devices_are_refused_clearly(name, device):
    with pytest.raises(symgrad.DeviceError, match="symgrad runs on the CPU only") as info:
        FACTORIES[name](symgrad, device=device)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, AssertionError)
    assert device.split(":")[0] in str(info.value)


def test_to_cpu_cuda_and_type():
    x = symgrad.tensor([1.5, 2.5], requires_grad=True)
    assert x.to("cpu") is x and x.to(symgrad.device("cpu")) is x and x.cpu() is x
    y = x.to("cpu", symgrad.float64)
    assert y.dtype == symgrad.float64 and type(y.grad_fn).__name__ == "ToCopyBackward0"
    assert x.to(symgrad.ones(1, dtype=symgrad.int64)).dtype == symgrad.int64
    assert x.to(dtype=symgrad.float64, device="cpu").dtype == symgrad.float64
    copied = x.to("cpu", copy=True)
    assert copied is not x and copied.grad_fn is not None
    for bad in ("cuda", "cuda:0", symgrad.device("mps")):
        with pytest.raises(symgrad.DeviceError, match="CPU only"):
            x.to(bad)
    with pytest.raises(symgrad.DeviceError, match="CPU only"):
        x.cuda()
    for dtype in ("float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "float16"):
        mine, theirs = symgrad.ones(2).to(getattr(symgrad, dtype)), torch.ones(2).to(getattr(torch, dtype))
        assert mine.type() == theirs.type()
        assert symgrad.ones(2).type(mine.type()).dtype == mine.dtype
    assert x.type(symgrad.float64).dtype == symgrad.float64
    with pytest.raises(symgrad.DeviceError):
        x.type("torch.cuda.FloatTensor")


def test_data_is_a_detached_alias_and_can_be_assigned():
    for lib in (torch, symgrad):
        p = lib.tensor([1.0, 2.0], requires_grad=True)
        d = p.data
        assert not d.requires_grad and d.is_leaf
        (p * p).sum().backward()
        version = p._version
        p.data -= 0.5 * p.grad          # the SGD step of many tutorials
        assert p.tolist() == [0.0, 0.0] and p.requires_grad and p.is_leaf
        assert p._version == version    # through .data: autograd does not see the change
        p.data = lib.tensor([3.0, 4.0, 5.0])      # replaces the values, even with another shape
        assert p.tolist() == [3.0, 4.0, 5.0] and p.requires_grad
        q = p * 2
        q.data.zero_()
        assert q.tolist() == [0.0, 0.0, 0.0] and q.grad_fn is not None


# --- plumbing: random numbers ----------------------------------------------------------------

@pytest.mark.parametrize("draw", [
    lambda: symgrad.randn(3, 2), lambda: symgrad.rand(4), lambda: symgrad.randint(0, 10, (5,)),
    lambda: symgrad.randint(7, (2, 2)), lambda: symgrad.randperm(6), lambda: symgrad.ones(3).normal_(),
    lambda: symgrad.ones(3).uniform_(-1, 1), lambda: symgrad.randn_like(symgrad.ones(3))])
def test_manual_seed_makes_draws_reproducible(draw):
    symgrad.manual_seed(0)
    first = draw().numpy().copy()
    symgrad.manual_seed(0)
    np.testing.assert_array_equal(draw().numpy(), first)
    symgrad.manual_seed(1)
    assert not np.array_equal(draw().numpy(), first) or first.size == 1


def test_generator_argument():
    g = symgrad.Generator().manual_seed(5)
    a = symgrad.randn(4, generator=g)
    assert g.initial_seed() == 5
    b = symgrad.randn(4, generator=symgrad.Generator().manual_seed(5))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    state = g.get_state()
    c = symgrad.rand(3, generator=g)
    g.set_state(state)
    np.testing.assert_array_equal(symgrad.rand(3, generator=g).numpy(), c.numpy())
    assert isinstance(symgrad.manual_seed(0), symgrad.Generator)


def test_randint_requires_grad_as_torch():
    for lib in (torch, symgrad):
        with pytest.raises(RuntimeError, match="(?i)only Tensors of floating point"):
            lib.randint(0, 10, (3,), requires_grad=True)
        t = lib.randint(0, 10, (3,), dtype=lib.float32, requires_grad=True)
        assert t.requires_grad and t.dtype == lib.float32
        assert lib.randint(3, 5, (100,)).min() >= 3 and lib.randint(3, 5, (100,)).max() <= 4
        assert lib.randint(5, (2, 3)).shape == (2, 3) and lib.randint(5, (2, 3)).dtype == lib.int64


def test_random_draws_of_integer_dtype_are_refused():
    with pytest.raises(RuntimeError, match="not implemented for 'int64'"):
        symgrad.randn(2, dtype=symgrad.int64)


def test_fill_copy_and_new_values_follow_autograd_rules():
    x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.fill_(0.0)
    with symgrad.no_grad():
        x.fill_(3.0)
        x.normal_()
    y = x * 2
    y.fill_(1.0)
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]      # fill_ cuts the old values out
    src = symgrad.tensor([5.0], requires_grad=True)
    z = (x * 1.0).copy_(src)
    assert z.tolist() == [5.0, 5.0]
    z.sum().backward()
    assert src.grad.tolist() == [2.0]          # copy_ broadcasts src: its gradient sums
    with pytest.raises(RuntimeError, match="layout"):
        symgrad.zeros(2, layout="sparse_coo")


# --- inside compiled functions ----------------------------------------------------------------

@pytest.mark.parametrize("draw", [lambda x: symgrad.randn(2), lambda x: symgrad.rand(2),
                                  lambda x: symgrad.randint(0, 3, (2,)).float(),
                                  lambda x: symgrad.ones(2).normal_(), lambda x: symgrad.ones(2).uniform_()])
def test_random_draws_in_a_compiled_function_are_refused(draw):
    # a draw during tracing would be baked in as a constant: the same numbers on every call.  strict=True
    # refuses it; by default the call runs eagerly (with a warning) and draws anew each time.
    strict = symgrad.compile(lambda x: (x * draw(x)).sum(), strict=True)
    with pytest.raises(symgrad.TraceError, match="constant of the trace"):
        strict(symgrad.ones(2, requires_grad=True))
    compiled = symgrad.compile(lambda x: (x * draw(x)).sum())
    symgrad.manual_seed(3)
    with pytest.warns(symgrad.EagerFallbackWarning, match="constant of the trace"):
        first = compiled(symgrad.ones(2, requires_grad=True)).item()
    symgrad.manual_seed(3)
    assert first == draw(None).sum().item()


def test_data_in_a_compiled_function_follows_the_values():
    compiled = symgrad.compile(lambda x: ((x * 2).data * x).sum())
    for values in ([1.0, 2.0], [3.0, -4.0]):
        x = symgrad.tensor(values, dtype=symgrad.float64, requires_grad=True)
        out = compiled(x)
        out.backward()
        assert out.item() == pytest.approx(sum(2 * v * v for v in values))
        assert x.grad.tolist() == [2 * v for v in values]     # .data is a constant for autograd

    def assigns(x):
        y = x * 2
        y.data = symgrad.ones(2)
        return y.sum()

    with pytest.raises(symgrad.TraceError, match="assigning Tensor.data"):
        symgrad.compile(assigns, strict=True)(symgrad.ones(2, requires_grad=True))


def test_missing_torch_names_say_why():
    for name, needle in (("complex64", "no complex dtypes"), ("sparse_coo_tensor", "dense"),
                         ("distributed", "no distributed"), ("jit", "symgrad.compile"), ("bfloat16", "float16")):
        with pytest.raises(AttributeError, match=needle):
            getattr(symgrad, name)


def test_queries_match_torch():
    for lib in (torch, symgrad):
        x = lib.arange(10.0).reshape(2, 5)
        assert lib.is_tensor(x) and not lib.is_tensor([1.0]) and lib.numel(x) == 10
        assert x.stride() == (5, 1) and x.t().stride() == (1, 5) and x.stride(1) == 1
        assert x.element_size() == 4 and x.nelement() == 10 and x.ndimension() == 2 and not x.is_pinned()
        assert [c.shape[0] for c in lib.arange(6).chunk(4)] == [2, 2, 2]
        assert [c.tolist() for c in lib.nonzero(lib.tensor([0, 3, 4]), as_tuple=True)] == [[1, 2]]
    for name in ("float16", "float32", "float64"):
        mine, theirs = symgrad.finfo(getattr(symgrad, name)), torch.finfo(getattr(torch, name))
        assert (mine.bits, mine.eps, mine.max, mine.min, mine.tiny) == \
            (theirs.bits, theirs.eps, theirs.max, theirs.min, theirs.tiny)
    for name in ("uint8", "int8", "int16", "int32", "int64"):
        mine, theirs = symgrad.iinfo(getattr(symgrad, name)), torch.iinfo(getattr(torch, name))
        assert (mine.bits, mine.max, mine.min) == (theirs.bits, theirs.max, theirs.min)
    names = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
    for a in names:
        for b in names:
            mine = symgrad.promote_types(getattr(symgrad, a), getattr(symgrad, b))
            assert mine.name == str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[1]


@pytest.mark.parametrize("call", [lambda L, x: L.max(x, 1), lambda L, x: x.min(dim=0), lambda L, x: L.topk(x, 1),
                                  lambda L, x: x.sort(descending=True)])
def test_named_results_print_as_torch(call):
    mine = call(symgrad, symgrad.tensor([[1.0, 3.0], [4.0, 2.0]], requires_grad=True))
    theirs = call(torch, torch.tensor([[1.0, 3.0], [4.0, 2.0]], requires_grad=True))
    assert repr(mine).replace("symgrad.", "torch.") == repr(theirs)
