"""Value checks of symgrad.nn.functional in compiled functions: class indices, embedding rows, one_hot
values and binary_cross_entropy probabilities out of range raise when a compiled function runs (numpy
and Numba backends), as they do eagerly and in PyTorch, instead of giving a wrong number; valid inputs
keep their values and gradients (against torch)."""

import math

import numpy as np
import pytest

import symgrad
import symgrad.nn.functional as SF
from symgrad.ops.nn_ops import _check_range, check_range

torch = pytest.importorskip("torch")
TF = torch.nn.functional

BACKENDS = ["numpy", "numba"]


def _logits(n=4, c=5, *extra):
    return np.random.default_rng(n * c).standard_normal((n, c) + extra)


def _ce(F, x, t):
    return F.cross_entropy(x, t)


def _ce_ignore(F, x, t):
    return F.cross_entropy(x, t, ignore_index=1, reduction="sum")


def _ce_smooth_weight(F, x, t):
    classes = x[0].detach().reshape(x.shape[1], -1)[:, 0]        # one weight per class, not uniform
    return F.cross_entropy(x, t, weight=classes.abs() + 0.5, label_smoothing=0.2)


def _nll_weight(F, x, t):
    return F.nll_loss(F.log_softmax(x, 1), t, weight=x[-1].detach().abs() + 0.5)


def _nll(F, x, t):
    return F.nll_loss(F.log_softmax(x, 1), t, reduction="none").sum()


def _embedding(F, w, i):
    return (F.embedding(i, w) ** 2).sum()


def _one_hot(F, x, t):
    return (F.one_hot(t, 5).to(x.dtype) * x).sum()


def _bce(F, x, t):
    return F.binary_cross_entropy(x, t)


# (id, program, first argument (differentiable), bad second argument, error class, message)
BAD = [
    ("ce_too_large", _ce, _logits(), [0, 1, 2, 7], IndexError, r"cross_entropy: Target 7 is out of bounds\."),
    ("ce_negative", _ce, _logits(), [0, -1, 2, 3], IndexError, r"cross_entropy: Target -1 is out of bounds\."),
    ("ce_class_count", _ce, _logits(), [0, 5, 2, 3], IndexError, "Target 5 is out of bounds"),
    ("ce_ignore_index_is_not_-100", _ce_ignore, _logits(), [1, -100, 1, 0], IndexError, "Target -100 is out"),
    ("ce_smoothing_weight", _ce_smooth_weight, _logits(), [0, 9, 2, 3], IndexError, "Target 9 is out of bounds"),
    ("ce_spatial", _ce, _logits(2, 3, 4), [[0, 1, 2, 1], [2, 2, 3, 0]], IndexError, "Target 3 is out of bounds"),
    ("nll_too_large", _nll, _logits(), [0, 1, 2, 5], IndexError, r"nll_loss: Target 5 is out of bounds\."),
    ("nll_negative", _nll, _logits(), [-2, 1, 2, 3], IndexError, r"nll_loss: Target -2 is out of bounds\."),
    ("embedding_negative", _embedding, _logits(), [0, -1], IndexError,
     r"embedding: index out of range in self \(index -1, num_embeddings 4\)"),
    ("embedding_too_large", _embedding, _logits(), [[0, 4]], IndexError, r"index out of range in self \(index 4"),
    ("one_hot_too_large", _one_hot, _logits(), [0, 0, 5, 0], RuntimeError,
     r"one_hot: Class values must be non-negative and smaller than num_classes \(5\); found 5\."),
    ("one_hot_negative", _one_hot, _logits(), [0, -1, 0, 0], RuntimeError, "found -1"),
    ("bce_above_one", _bce, np.full(4, 0.5), [0.5, 0.2, 1.5, 0.1], RuntimeError,
     r"binary_cross_entropy: all elements of input should be between 0 and 1 \(found 1\.5\)"),
    ("bce_negative", _bce, np.full(4, 0.5), [0.5, -0.25, 0.5, 0.1], RuntimeError, r"between 0 and 1 \(found -0\.25"),
    ("bce_nan", _bce, np.full(4, 0.5), [0.5, math.nan, 0.5, 0.1], RuntimeError, r"between 0 and 1 \(found nan"),
]


def _args(name, first, second):
    """The two arguments of a BAD case; for bce the bad values are the input (the probabilities)."""
    if name.startswith("bce"):
        return (symgrad.tensor(np.asarray(second), requires_grad=True), symgrad.tensor(first))
    return (symgrad.tensor(first, requires_grad=True), symgrad.tensor(np.asarray(second, dtype=np.int64)))


def _good(name, first, second):
    """Valid arguments of the case's shapes."""
    bad = np.asarray(second)
    if name.startswith("bce"):
        return (symgrad.tensor(np.full(bad.shape, 0.3), requires_grad=True), symgrad.tensor(first))
    top = first.shape[0] if name.startswith("embedding") else 5 if name.startswith("one_hot") else first.shape[1]
    return (symgrad.tensor(first, requires_grad=True), symgrad.tensor(np.abs(bad) % top))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,program,first,second,error,message", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_values_raise_in_compiled_functions(backend, name, program, first, second, error, message):
    compiled = symgrad.compile(lambda a, b: program(SF, a, b), backend=backend)
    compiled(*_good(name, first, second)).backward()          # traced and run once on valid values
    with pytest.raises(error, match=message):
        compiled(*_args(name, first, second))                 # the same kernels, run on bad values
    assert compiled.stats()["traces"] == 1
    assert compiled.stats()["eager_fallbacks"] == 0


@pytest.mark.parametrize("name,program,first,second,error,message", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_values_raise_eagerly_and_in_torch(name, program, first, second, error, message):
    with pytest.raises(error, match=message):
        program(SF, *_args(name, first, second))
    a, b = _args(name, first, second)
    torch_args = (torch.tensor(a.detach().numpy()), torch.tensor(b.detach().numpy()))
    with pytest.raises(error):        # PyTorch raises the same exception class
        program(TF, *torch_args)


# (id, program, first argument (differentiable), second argument): valid, edge values included
GOOD = [
    ("ce_ignore_default", _ce, _logits(6, 5), [0, -100, 4, 2, -100, 1]),
    ("ce_ignore_custom", _ce_ignore, _logits(6, 5), [1, 0, 4, 1, 3, 1]),
    ("ce_smooth_weight", _ce_smooth_weight, _logits(6, 5), [0, 4, 4, 2, 3, 1]),
    ("ce_spatial", _ce, _logits(2, 3, 4), [[0, 1, 2, 1], [2, 2, -100, 0]]),
    ("nll_all_classes", _nll, _logits(5, 5), [0, 1, 2, 3, 4]),
    ("nll_weight_ignore", _nll_weight, _logits(6, 5), [0, -100, 4, 2, 4, 1]),
    ("ce_weight_ignore_spatial", _ce_smooth_weight, _logits(2, 5, 3), [[0, -100, 4], [2, 4, 1]]),
    ("embedding_edges", _embedding, _logits(4, 3), [[0, 3], [3, 3]]),
    ("one_hot", _one_hot, _logits(3, 5), [4, 0, 2]),
    ("bce", _bce, np.array([1.0, 0.0, 0.3, 0.9]), [0.999, 1e-3, 0.5, 0.25]),
]


@pytest.mark.parametrize("backend", BACKENDS + ["eager"])
@pytest.mark.parametrize("name,program,first,second", GOOD, ids=[g[0] for g in GOOD])
def test_valid_values_keep_values_and_gradients(backend, name, program, first, second):
    a, b = _args(name, first, second)
    ta, tb = torch.tensor(a.detach().numpy(), requires_grad=True), torch.tensor(b.detach().numpy())
    fn = (lambda x, y: program(SF, x, y)) if backend == "eager" else \
        symgrad.compile(lambda x, y: program(SF, x, y), backend=backend)
    out = fn(a, b)
    out.backward()
    want = program(TF, ta, tb)
    want.backward()
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bce_accepts_probabilities_0_and_1(backend):
    compiled = symgrad.compile(lambda x, t: SF.binary_cross_entropy(x, t), backend=backend)
    x, t = np.array([1.0, 0.0, 0.3, 1.0]), np.array([1.0, 0.0, 0.5, 0.0])
    out = compiled(symgrad.tensor(x, requires_grad=True), symgrad.tensor(t))
    np.testing.assert_allclose(out.item(), TF.binary_cross_entropy(torch.tensor(x), torch.tensor(t)).item(),
                               rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_check_runs_in_the_generated_code(backend):
    """The check is a node of the compiled program, not a trace-time test."""
    compiled = symgrad.compile(lambda x, t: SF.cross_entropy(x, t), backend=backend)
    kernels = compiled.inspect(symgrad.tensor(_logits(), requires_grad=True), symgrad.tensor([0, 1, 2, 3]))
    assert [n.op for n in kernels.graph.nodes].count("_check_range") == 1
    assert "_check_range(t, 0.0, 4.0, -100.0, 'IndexError'" in kernels.forward_source


def test_a_constant_target_is_checked_too():
    target = symgrad.tensor([0, 6])      # captured: a constant of the compiled graph
    compiled = symgrad.compile(lambda x: SF.cross_entropy(x, target))
    with pytest.raises(IndexError, match="Target 6 is out of bounds"):
        compiled(symgrad.tensor(_logits(2, 5), requires_grad=True))


@pytest.mark.parametrize("values,low,high,skip,bad", [
    (np.array([0, 4, -100]), 0, 4, -100, None),
    (np.array([0, 5, -100]), 0, 4, -100, 5),
    (np.array([[3, -1], [9, 0]]), 0, 4, None, -1),           # the first in C order
    (np.array([-100, -100]), 0, 4, -100, None),
    (np.array([], dtype=np.int64), 0, 4, None, None),
    (np.array([1, 200], dtype=np.uint8), 0, 9, None, 200),
    (np.array([1, -3], dtype=np.int8), 0, 9, None, -3),
    (np.array([2, 7], dtype=np.int32), 1, 9, None, None),    # a lower bound other than 0
    (np.array([2, 0], dtype=np.int32), 1, 9, None, 0),
    (np.array([0.0, 1.0, 0.5]), 0.0, 1.0, None, None),
    (np.array([0.0, 1.0, np.inf]), 0.0, 1.0, None, math.inf),
    (np.array([0.5, np.nan]), 0.0, 1.0, None, "nan"),
])
def test_check_range(values, low, high, skip, bad):
    if bad is None:
        check_range(values, low, high, skip, "IndexError", "bad {value}")
        np.testing.assert_array_equal(_check_range(symgrad.tensor(values), low, high, skip, "IndexError",
                                                   "bad {value}").numpy(), values)
    else:
        with pytest.raises(IndexError, match=f"^bad {bad}$"):
            check_range(values, low, high, skip, "IndexError", "bad {value}")


def test_check_range_refuses_an_unknown_error_class():
    with pytest.raises(ValueError, match="error must be one of"):
        _check_range(symgrad.tensor([1]), 0, 1, None, "KeyError", "bad")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_embedding_checks_indices_of_either_integer_dtype(backend, dtype):
    weight = symgrad.tensor(_logits(4, 3), requires_grad=True)
    compiled = symgrad.compile(lambda w, i: _embedding(SF, w, i), backend=backend)
    good = np.array([[0, 3], [2, 1]], dtype=dtype)
    out = compiled(weight, symgrad.tensor(good))
    np.testing.assert_allclose(out.item(), (_logits(4, 3)[good] ** 2).sum(), rtol=1e-12)
    for bad in (-1, -4, 4, np.iinfo(dtype).min, np.iinfo(dtype).max):
        with pytest.raises(IndexError, match=f"index {bad}, num_embeddings 4"):
            compiled(weight, symgrad.tensor(np.array([[0, 1], [bad, 2]], dtype=dtype)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_bce_checks_float32_probabilities(backend):
    compiled = symgrad.compile(lambda x, t: SF.binary_cross_entropy(x, t), backend=backend)
    t = symgrad.tensor(np.full(3, 0.5, dtype=np.float32))
    x = np.array([0.25, 0.5, 0.75], dtype=np.float32)
    want = TF.binary_cross_entropy(torch.tensor(x), torch.tensor(t.numpy()))
    np.testing.assert_allclose(compiled(symgrad.tensor(x, requires_grad=True), t).item(), want.item(), rtol=1e-6)
    for bad in (1.0000001, -1e-30, np.inf, np.nan):
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            compiled(symgrad.tensor(np.array([0.25, bad, 0.75], dtype=np.float32), requires_grad=True), t)
