"""Tests for symgrad._format: golden strings, plus PyTorch as an oracle when installed."""

from __future__ import annotations

import numpy as np
import pytest

from symgrad._format import format_tensor

nan, inf = float("nan"), float("inf")


def _fmt(arr: np.ndarray, **kw) -> str:
    arr = np.asarray(arr)
    return format_tensor(arr, dtype_name=arr.dtype.name, show_dtype=kw.pop("show_dtype", False), **kw)


# --------------------------------------------------------------------------- golden strings

F32 = np.float32

GOLDEN = [
    (np.array([8.0], F32), "tensor([8.])"),
    (np.array(8.0, F32), "tensor(8.)"),
    (np.array([0.5], F32), "tensor([0.5000])"),
    (np.array([0.5, 1.25, 3.0], F32), "tensor([0.5000, 1.2500, 3.0000])"),
    (np.array([1, 2, 3], F32) / F32(3), "tensor([0.3333, 0.6667, 1.0000])"),
    (np.array([1.0, 10.0], F32), "tensor([ 1., 10.])"),
    (np.array([1, 2, 3]), "tensor([1, 2, 3])"),
    (np.array([True, False]), "tensor([ True, False])"),
    (np.array([1e-5, 1.0], F32), "tensor([1.0000e-05, 1.0000e+00])"),
    (np.array([nan, inf, -inf, 1.5], F32), "tensor([   nan,    inf,   -inf, 1.5000])"),
    (np.array([-0.0, 1.0], F32), "tensor([-0., 1.])"),
    (np.zeros((0, 3), F32), "tensor([], size=(0, 3))"),
    (np.array([[1.5, -2.0], [3.0, 4.25]], F32), "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.2500]])"),
    (np.ones((2, 2, 2), F32),
     "tensor([[[1., 1.],\n         [1., 1.]],\n\n        [[1., 1.],\n         [1., 1.]]])"),
    (np.arange(1001), "tensor([   0,    1,    2,  ...,  998,  999, 1000])"),
    (np.arange(30, dtype=F32) + F32(0.5),
     "tensor([ 0.5000,  1.5000,  2.5000,  3.5000,  4.5000,  5.5000,  6.5000,  7.5000,\n"
     "         8.5000,  9.5000, 10.5000, 11.5000, 12.5000, 13.5000, 14.5000, 15.5000,\n"
     "        16.5000, 17.5000, 18.5000, 19.5000, 20.5000, 21.5000, 22.5000, 23.5000,\n"
     "        24.5000, 25.5000, 26.5000, 27.5000, 28.5000, 29.5000])"),
]


@pytest.mark.parametrize("arr, expected", GOLDEN, ids=[repr(e) for _, e in GOLDEN])
def test_golden(arr, expected):
    assert _fmt(arr) == expected


def test_golden_dtype_and_suffixes():
    got = _fmt(np.array([8.0], F32), suffixes=["grad_fn=<MulBackward0>"])
    assert got == "tensor([8.], grad_fn=<MulBackward0>)"
    assert _fmt(np.array(8.0, F32), suffixes=["requires_grad=True"]) == "tensor(8., requires_grad=True)"
    assert _fmt(np.array([1.0, 2.0]), show_dtype=True) == "tensor([1., 2.], dtype=symgrad.float64)"
    assert _fmt(np.zeros(0, np.int64), show_dtype=True) == "tensor([], dtype=symgrad.int64)"
    assert (_fmt(np.ones((2, 2)), show_dtype=True, suffixes=["requires_grad=True"])
            == "tensor([[1., 1.],\n        [1., 1.]], dtype=symgrad.float64, requires_grad=True)")
    assert (format_tensor(np.array([1.0]), dtype_name="float64", show_dtype=True, module="torch")
            == "tensor([1.], dtype=torch.float64)")


def test_dtype_wraps_where_pytorch_would():
    # "symgrad." is 2 chars longer than "torch.", yet the break must stay where PyTorch puts it.
    got = _fmt(np.arange(-40.0, 40.0).reshape(4, 20), show_dtype=True)
    assert got.endswith("\n          32.,  33.,  34.,  35.,  36.,  37.,  38.,  39.]], dtype=symgrad.float64)")


def test_rejects_complex():
    with pytest.raises(TypeError):
        _fmt(np.array([1j]))


# --------------------------------------------------------------------------- PyTorch oracle


def _cases() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    float_cases = {
        "scalar": 8.0, "scalar_frac": 0.5, "scalar_neg": -3.25, "scalar_nan": nan, "scalar_inf": -inf,
        "scalar_negzero": -0.0, "scalar_tiny": 1e-7, "scalar_huge": 3e12,
        "one": [8.0], "frac": [0.5, 1.25, 3.0], "thirds": [1 / 3, 2 / 3, 1.0], "ints": [1.0, 10.0],
        "neg_ints": [-1.0, -20.0, 300.0], "neg": [-1.5, 2.25, -3.0],
        "small": [1e-5], "small_mix": [1e-5, 1.0], "edge_1e-4": [1e-4, 0.5], "below_1e-4": [9.9e-5, 0.5],
        "ratio_1000": [0.001, 1.0], "ratio_gt_1000": [0.001, 1.01], "int_ratio": [1.0, 1001.0],
        "big_1e8": [1e8], "big_gt_1e8": [1.5e8], "big_int": [123456789.0], "huge": [1e20, -1.0],
        "nan": [nan], "infs": [inf, -inf], "nan_frac": [nan, 1.5], "inf_int": [inf, 1.0, -2.0],
        "nan_sci": [nan, 1e-6, -3.0], "zeros": [0.0, 0.0], "negzero": [-0.0], "zeros_signed": [0.0, -0.0],
        "negzero_frac": [-0.0, 1.5], "negzero_sci": [-0.0, 1e-9], "zero_nan": [0.0, nan],
        "round_up": [0.99999, 9.99995], "mixed": [1e-3, 12.5, -400.0],
    }
    out: list[tuple[str, np.ndarray]] = []
    for dt in (np.float32, np.float64):
        tag = np.dtype(dt).name
        for name, v in float_cases.items():
            out.append((f"{tag}-{name}", np.array(v, dt)))
        generated = {
            "randn_2d": rng.standard_normal((3, 4)),
            "randn_3d": rng.standard_normal((2, 3, 4)),
            "randn_4d": rng.standard_normal((2, 2, 2, 2)),
            "wide_2d": rng.standard_normal((2, 30)) * 100,
            "long_1d": rng.standard_normal(50),
            "sci_2d": rng.standard_normal((3, 5)) * 1e6,
            "sci_wide": rng.standard_normal(40) * 1e-6,
            "int_wide": np.arange(-40.0, 40.0).reshape(4, 20),
            "nan_2d": np.where(rng.random((4, 6)) < 0.3, nan, rng.standard_normal((4, 6))),
            "big_1d": rng.standard_normal(1001),
            "big_arange": np.arange(2000.0),
            "big_2d": rng.standard_normal((100, 20)),
            "big_3d": rng.standard_normal((10, 10, 11)),
            "big_wide_rows": rng.standard_normal((3, 400)),
            "big_deep": rng.standard_normal((2, 2, 300)),
            "big_sci": rng.standard_normal((40, 40)) * 1e9,
            "big_mid_outlier": np.concatenate([np.ones(500), [1e-9], np.full(500, 2.0)]),
            "empty_1d": np.zeros(0),
            "empty_2d": np.zeros((0, 3)),
            "empty_2d_b": np.zeros((2, 0)),
            "empty_3d": np.zeros((0, 2, 3)),
        }
        for name, v in generated.items():
            out.append((f"{tag}-{name}", v.astype(dt)))

    out += [
        ("float16-frac", np.array([0.5, 1.25, -3.0], np.float16)),
        ("float16-sci", np.array([1e-5, 60000.0], np.float16)),
        ("int64-scalar", np.array(7)),
        ("int64-1d", np.array([1, 2, 3])),
        ("int64-neg", np.array([-5, 20, -300])),
        ("int64-huge", np.array([2**62, -(2**63)])),
        ("int64-2d", rng.integers(-1000, 1000, (4, 5))),
        ("int64-wide", np.arange(100).reshape(2, 50)),
        ("int64-big", np.arange(2000)),
        ("int64-big3d", rng.integers(0, 10, (11, 10, 10))),
        ("int64-empty", np.zeros(0, np.int64)),
        ("int64-empty2d", np.zeros((3, 0), np.int64)),
        ("int32-1d", np.array([1, -2, 3], np.int32)),
        ("int16-2d", np.array([[1, 2], [3, 4]], np.int16)),
        ("int8-1d", np.array([-128, 127], np.int8)),
        ("uint8-1d", np.array([0, 255], np.uint8)),
        ("bool-scalar", np.array(True)),
        ("bool-1d", np.array([True, False])),
        ("bool-all_true", np.array([True, True])),
        ("bool-2d", rng.random((3, 4)) < 0.5),
        ("bool-long", rng.random(60) < 0.5),
        ("bool-big", rng.random(2000) < 0.5),
        ("bool-empty", np.zeros((0, 2), bool)),
    ]
    return out


CASES = _cases()


def _torch_shows_dtype(arr: np.ndarray) -> bool:
    # PyTorch hides float32/int64/bool, but an empty tensor only hides the default float dtype.
    if arr.size == 0:
        return arr.dtype != np.float32
    return arr.dtype not in (np.float32, np.int64, np.bool_)


def _oracle(t) -> str:
    return repr(t).replace("torch.", "symgrad.")


@pytest.mark.parametrize("arr", [a for _, a in CASES], ids=[n for n, _ in CASES])
def test_matches_torch(arr):
    torch = pytest.importorskip("torch")
    assert _fmt(arr, show_dtype=_torch_shows_dtype(arr)) == _oracle(torch.from_numpy(arr))


SUFFIX_CASES = [(n, a) for n, a in CASES if a.dtype.kind == "f" and a.dtype != np.float16]


@pytest.mark.parametrize("arr", [a for _, a in SUFFIX_CASES], ids=[n for n, _ in SUFFIX_CASES])
def test_matches_torch_with_autograd_suffixes(arr):
    torch = pytest.importorskip("torch")
    show = _torch_shows_dtype(arr)
    leaf = torch.from_numpy(arr).requires_grad_()
    assert _fmt(arr, show_dtype=show, suffixes=["requires_grad=True"]) == _oracle(leaf)
    assert _fmt(arr, show_dtype=show, suffixes=["grad_fn=<MulBackward0>"]) == _oracle(leaf * 1)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n", range(1, 31))
def test_suffix_wrapping_matches_torch(n, dt):
    # Sweep lengths so the last line lands on both sides of the 80-column wrap point.
    torch = pytest.importorskip("torch")
    arr = (np.arange(n) * 1.5 - 4).astype(dt)
    t = torch.from_numpy(arr).requires_grad_()
    show = _torch_shows_dtype(arr)
    assert _fmt(arr, show_dtype=show, suffixes=["grad_fn=<MulBackward0>"]) == _oracle(t * 1)
    assert _fmt(arr, show_dtype=show, suffixes=["requires_grad=True"]) == _oracle(t)


def test_custom_prefix_matches_torch_subclass():
    torch = pytest.importorskip("torch")

    class MyTensor(torch.Tensor):
        pass

    for arr in (np.arange(12.0).reshape(3, 4), np.arange(40.0) / 3, np.array(2.5, np.float32)):
        t = torch.from_numpy(arr).as_subclass(MyTensor)
        got = _fmt(arr, show_dtype=_torch_shows_dtype(arr), prefix="MyTensor(")
        assert got == _oracle(t)
