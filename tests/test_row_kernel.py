"""codegen/row_kernel.py: one loop over the rows for losses that reduce each row and use it again.

Every loss here is checked against eager autograd (value and gradient) and, for W5, against the fuser's
kernels (row kernels switched off): the gradient must agree to the last bit, since within a row both
compute the same operations in the same order.  Compiles cost about a second per graph; each graph is
built once per module.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from fuzz_profile import N_LONG, dtype_names, record
from workloads import w5

import symgrad
from codegen import numba_emit
from codegen.row_kernel import emit_row_kernel
from symgrad.compiler.autodiff import autodiff

# its tests share the compiled losses (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_row_kernel")


def _nll(L, labels):
    """Negative log-likelihood of log_softmax (PyTorch's cross_entropy, spelled out)."""
    return -symgrad.log_softmax(L, dim=1)[symgrad.arange(L.shape[0]), labels].mean()


def _entropy(L, labels):
    p = symgrad.softmax(L, dim=1)
    return -(p * symgrad.log(p)).sum(dim=1).mean()


def _centred(L, labels):
    return ((L - L.mean(dim=1, keepdim=True)) ** 2).sum()


def _from_min(L, labels):
    return symgrad.log(symgrad.exp(L.amin(dim=1, keepdim=True) - L).sum(dim=1)).sum()


def _masked(L, labels):
    """A bool row vector (the mask) made in the first loop and read in the second: its row buffer is bool."""
    m = L > 0.5
    e = symgrad.where(m, symgrad.exp(L - L.amax(dim=1, keepdim=True)), 0.0)
    return symgrad.log(e.sum(dim=1) + 1.0).sum()


LOSSES = {"w5": w5, "nll": _nll, "entropy": _entropy, "centred": _centred, "from_min": _from_min,
          "masked": _masked}


def _inputs(rows=37, cols=23, seed=0):
    r = np.random.default_rng(seed)
    return 3.0 * r.standard_normal((rows, cols)), r.integers(0, cols, rows)


def _eager(fn, L, labels):
    t = symgrad.tensor(L, requires_grad=True)
    loss = fn(t, symgrad.tensor(labels))
    loss.backward()
    return float(loss.item()), t.grad.numpy()


@pytest.fixture(scope="module")
def compiled():
    """Per loss: its value_and_grad (row kernels on)."""
    return {name: symgrad.value_and_grad(symgrad.compile(fn)) for name, fn in LOSSES.items()}


@pytest.mark.parametrize("name", LOSSES)
def test_row_losses_match_eager_and_run_as_one_row_loop(compiled, name):
    L, labels = _inputs()
    value, grad = compiled[name](L, labels)
    want_value, want_grad = _eager(LOSSES[name], L, labels)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-11, atol=1e-15)
    k = compiled[name].compiled.kernels_for(L, labels, wrt=[0], joint_kernel=True)
    assert "def row_kernel_0(" in k.joint_source and "for i in range(n0):" in k.joint_source


def test_w5_gradient_is_bit_identical_to_the_fusers_loops(compiled, monkeypatch):
    L, labels = _inputs(64, 40, seed=1)
    value, grad = compiled["w5"](L, labels)
    monkeypatch.setattr(numba_emit, "_row_kernel_mode", lambda graph, parallel: None)
    fused = symgrad.value_and_grad(symgrad.compile(w5, cache=False))
    value_f, grad_f = fused(L, labels)
    assert "row_kernel" not in fused.compiled.kernels_for(L, labels, wrt=[0], joint_kernel=True).joint_source
    np.testing.assert_array_equal(grad, grad_f)
    np.testing.assert_allclose(value, value_f, rtol=1e-14)   # the mean adds rows in another order


@pytest.mark.parametrize("name", ["w5", "nll"])
def test_non_finite_rows_give_eagers_nans_and_infinities(compiled, name):
    L, labels = _inputs(6, 5, seed=2)
    L[1, 2] = np.nan
    L[2, :] = -np.inf
    L[3, 4] = np.inf
    L[4, :] = np.inf
    L[5, 0] = -np.inf
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        value, grad = compiled[name](L, labels)
        want_value, want_grad = _eager(LOSSES[name], L, labels)
    np.testing.assert_array_equal(np.isnan(value), np.isnan(want_value))
    np.testing.assert_array_equal(np.isnan(grad), np.isnan(want_grad))
    finite = np.isfinite(want_grad)
    np.testing.assert_array_equal(grad[~finite & ~np.isnan(want_grad)], want_grad[~finite & ~np.isnan(want_grad)])
    np.testing.assert_allclose(grad[finite], want_grad[finite], rtol=1e-11, atol=1e-15)


def test_negative_labels_count_from_the_end_and_out_of_range_ones_raise(compiled):
    L, labels = _inputs(5, 4, seed=3)
    wrapped = labels - 4                           # -4..-1: the same columns
    v, g = compiled["w5"](L, wrapped)
    v0, g0 = compiled["w5"](L, labels)
    assert v == v0 and np.array_equal(g, g0)
    bad = labels.copy()
    bad[3] = 4
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        compiled["w5"](L, bad)
    bad[3] = -5
    with pytest.raises(IndexError, match="index -5 is out of bounds for axis 1 with size 4"):
        compiled["w5"](L, bad)


def test_a_new_batch_size_reuses_the_compiled_row_kernel(compiled):
    f = compiled["nll"]
    f(*_inputs(37, 23))
    before = f.compiled.stats()
    L, labels = _inputs(50, 23, seed=4)
    value, grad = f(L, labels)
    after = f.compiled.stats()
    assert after["traces"] == before["traces"] + 1
    assert after["kernel_compiles"] == before["kernel_compiles"]
    want_value, want_grad = _eager(_nll, L, labels)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-11, atol=1e-15)


def test_the_tensor_api_uses_the_row_kernel_too():
    f = symgrad.compile(_entropy)
    L, labels = _inputs(9, 7, seed=5)
    t = symgrad.tensor(L, requires_grad=True)
    loss = f(t, symgrad.tensor(labels))
    loss.backward()
    want_value, want_grad = _eager(_entropy, L, labels)
    np.testing.assert_allclose(loss.item(), want_value, rtol=1e-12)
    np.testing.assert_allclose(t.grad.numpy(), want_grad, rtol=1e-11, atol=1e-15)


NOT_ROWS = {
    "one pass (no row value used again)": (lambda L, w: (symgrad.tanh(L) * 2.0).sum(dim=1).mean(), None),
    "mixes rows (a column mean)": (lambda L, w: ((L - L.mean(dim=0)) ** 2).sum(), None),
    "a weight shared by the rows": (lambda L, w: symgrad.logsumexp(L * w, dim=1).mean(), "w"),
    "a transpose": (lambda L, w: symgrad.logsumexp(L.t(), dim=1).mean(), None),
    "1-D": (lambda x, w: (x - x.max()).exp().sum(), "1d"),
}


@pytest.mark.parametrize("what", NOT_ROWS)
def test_graphs_that_are_not_row_losses_keep_the_fusers_loops(what):
    fn, extra = NOT_ROWS[what]
    L = np.random.default_rng(6).standard_normal((6, 5))
    args = [L[0] if extra == "1d" else L, np.random.default_rng(7).standard_normal(5) if extra == "w" else 1.0]
    g = autodiff(symgrad.trace(fn, *args), [0])
    assert emit_row_kernel(g, "joint", vector={"exp": "vexp"}, vector_import="") is None


@pytest.mark.parametrize("name", ["w5", "nll", "masked"])
def test_float32_losses_match_eager_and_stay_float32(name):
    L, labels = _inputs(13, 6, seed=9)
    L32 = L.astype(np.float32)
    vg = symgrad.value_and_grad(symgrad.compile(LOSSES[name]))
    value, grad = vg(L32, labels)
    assert "def row_kernel_0(" in vg.compiled.kernels_for(L32, labels, wrt=[0], joint_kernel=True).joint_source
    want_value, want_grad = _eager(LOSSES[name], L32, labels)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)
    f = symgrad.compile(LOSSES[name])        # the tensor API keeps the loss float32 too
    loss = f(symgrad.tensor(L32, requires_grad=True), symgrad.tensor(labels))
    assert loss.dtype == symgrad.float32


def test_libm_keeps_the_fusers_loops():
    L, labels = _inputs(6, 5)
    g = autodiff(symgrad.trace(w5, L, labels), [0])
    assert "row_kernel" not in numba_emit.emit_numba(g, "joint", math="libm").full_source
    assert "row_kernel" in numba_emit.emit_numba(g, "joint", math="vector").full_source


@pytest.mark.parametrize("name", ["w5", "nll", "centred"])
@pytest.mark.heavy
def test_parallel_row_kernels_match_serial_and_do_not_depend_on_the_thread_count(name):
    """``parallel=True``: fixed chunks of rows over Numba's threads.  The gradient rows are the serial
    kernel's bits; sums over rows add per-chunk partial sums, the same for 1 and 2 threads."""
    import numba

    L, labels = _inputs(301, 17, seed=10)
    par = symgrad.value_and_grad(symgrad.compile(LOSSES[name], parallel=True))
    value, grad = par(L, labels)
    if name != "centred":                            # an out-of-range label, in a later chunk of rows
        bad = labels.copy()
        bad[250] = 17
        with pytest.raises(IndexError, match="index 17 is out of bounds for axis 1 with size 17"):
            par(L, bad)
    source = par.compiled.kernels_for(L, labels, wrt=[0], joint_kernel=True).joint_source
    assert "for c in prange(" in source and "def row_kernel_0(" in source
    serial_value, serial_grad = symgrad.value_and_grad(symgrad.compile(LOSSES[name], parallel=False))(L, labels)
    np.testing.assert_array_equal(grad, serial_grad)
    np.testing.assert_allclose(value, serial_value, rtol=1e-13)
    if numba.config.NUMBA_NUM_THREADS > 1:
        before = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            one_value, one_grad = par(L, labels)
        finally:
            numba.set_num_threads(before)
        assert one_value == value and np.array_equal(one_grad, grad)


def test_a_split_forward_saves_its_row_values_for_the_backward():
    """``scalar_loss="split"``: the forward is a row kernel that also returns what the backward reads
    (the exponentials, the row sums, and the labels it passes on); the backward keeps the fused loops."""
    f = symgrad.compile(w5, scalar_loss="split")
    L, labels = _inputs(11, 6, seed=8)
    t = symgrad.tensor(L, requires_grad=True)
    loss = f(t, symgrad.tensor(labels))
    k = f.kernels_for(t, symgrad.tensor(labels))
    assert k.strategy == "split" and "def row_kernel_0(" in k.forward_source
    assert "row_kernel" not in k.backward_source
    loss.backward()
    want_value, want_grad = _eager(w5, L, labels)
    np.testing.assert_allclose(loss.item(), want_value, rtol=1e-12)
    np.testing.assert_allclose(t.grad.numpy(), want_grad, rtol=1e-11, atol=1e-15)


# --- random row losses -------------------------------------------------------------------------------

ROW_STEPS = {
    "shift_max": lambda x: x - x.amax(dim=1, keepdim=True),
    "shift_min": lambda x: x - symgrad.amin(x, 1, keepdim=True),
    "centre": lambda x: x - x.mean(dim=1, keepdim=True),
    "scale_sum": lambda x: x / (1.0 + symgrad.abs(x).sum(dim=1, keepdim=True)),
    "softmax": lambda x: symgrad.softmax(x, dim=1),
    "log_softmax": lambda x: symgrad.log_softmax(x, dim=1),
    "tanh": symgrad.tanh,
    "exp_tanh": lambda x: symgrad.exp(symgrad.tanh(x)),
    "mask": lambda x: symgrad.where(x > 0.1, x, x * 0.5),
}
ROW_FINALS = {
    "mean_rowsum": lambda x, labels: x.sum(dim=1).mean(),
    "gather": lambda x, labels: x[symgrad.arange(x.shape[0]), labels].mean(),
    "lse": lambda x, labels: symgrad.logsumexp(x, dim=1).sum(),
    "sum": lambda x, labels: x.sum(),
    "square_mean": lambda x, labels: (x * x).mean(),
}


def _row_program(steps, final):
    def loss(L, labels):
        x = L
        for s in steps:
            x = ROW_STEPS[s](x)
        return ROW_FINALS[final](x, labels)
    loss.__name__ = "_".join(steps) + "__" + final
    return loss


_LONG = os.environ.get("SYMGRAD_FUZZ", "") == "long"
# (rtol, atol) of a compiled row program against eager, per dtype: float32 sums run in another order
_TOLERANCES = {"float64": (1e-9, 1e-12), "float32": (2e-5, 2e-5)}


@pytest.mark.parametrize("seed", range(3 if _LONG else 1))
@pytest.mark.heavy
def test_random_row_losses_match_eager(seed):
    """Random pipelines of row steps and a final reduction: compiled (a row kernel where the graph reads a
    reduced row again, the fused loops otherwise) against eager autograd, value and gradient.  The CI profile
    runs 4 programs, ``SYMGRAD_FUZZ=long`` 3 x ``SYMGRAD_FUZZ_EXAMPLES``."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=N_LONG if _LONG else 4, deadline=None, derandomize=not _LONG, database=None)
    @given(steps=st.lists(st.sampled_from(sorted(ROW_STEPS)), min_size=1, max_size=4),
           final=st.sampled_from(sorted(ROW_FINALS)), rows=st.sampled_from([3, 7]), cols=st.sampled_from([2, 5]),
           data_seed=st.integers(0, 2**16), dtype_name=dtype_names("float64", "float32"))
    def check(steps, final, rows, cols, data_seed, dtype_name):
        r = np.random.default_rng(data_seed + 1000 * seed)
        L = (2.0 * r.standard_normal((rows, cols))).astype(dtype_name)
        labels = r.integers(-cols, cols, rows)
        fn = _row_program(steps, final)
        value, grad = symgrad.value_and_grad(fn)(L, labels)
        want_value, want_grad = _eager(fn, L, labels)
        rtol, atol = _TOLERANCES[dtype_name]
        where = f"{fn.__name__} {dtype_name}"
        assert grad.dtype == L.dtype, where
        np.testing.assert_allclose(value, want_value, rtol=rtol, atol=atol, err_msg=where)
        np.testing.assert_allclose(grad, want_grad, rtol=10 * rtol, atol=atol, err_msg=where)
        record("row_losses", dtype_name)

    check()


# --- random row programs with non-scalar outputs: vector-Jacobian products -------------------------------

ROW_HEADS = {
    # the output: the whole matrix, one value per row, or a kept-dim column
    "matrix": lambda x: x,
    "rowsum": lambda x: x.sum(dim=1),
    "lse": lambda x: symgrad.logsumexp(x, dim=1),
    "amax": lambda x: x.amax(dim=1),
    "np_max_times_2": lambda x: np.max(x, axis=1) * 2.0,
    "mean_keepdim": lambda x: x.mean(dim=1, keepdim=True),
    "centred_square": lambda x: (x - x.mean(dim=1, keepdim=True)) ** 2,
    "softmax": lambda x: symgrad.softmax(x, dim=1),
    "log_softmax": lambda x: x.log_softmax(dim=1),
}


def _row_vjp_program(steps, head):
    def fn(L):
        x = L
        for s in steps:
            x = ROW_STEPS[s](x)
        return ROW_HEADS[head](x)
    fn.__name__ = "_".join(steps) + "__" + head
    return fn


def _check_row_vjp(fn, L_batches, cotangents, **options):
    """``symgrad.compile(fn, **options)`` then ``backward(G)`` with a random cotangent G, against eager, on
    every batch (same shape: the second batch reuses the kernels)."""
    compiled = symgrad.compile(fn, **options)
    rtol, atol = _TOLERANCES[L_batches[0].dtype.name]
    where = f"{fn.__name__} {L_batches[0].dtype} {options}"
    for L, G in zip(L_batches, cotangents):
        want_t = symgrad.tensor(L, requires_grad=True)
        want = fn(want_t)
        want.backward(symgrad.tensor(G))
        t = symgrad.tensor(L, requires_grad=True)
        out = compiled(t)
        assert tuple(out.shape) == tuple(want.shape), where
        assert out.dtype == want.dtype, where
        out.backward(symgrad.tensor(G))
        assert t.grad.dtype == want_t.grad.dtype, where
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"value: {where}")
        np.testing.assert_allclose(t.grad.numpy(), want_t.grad.numpy(), rtol=10 * rtol, atol=atol,
                                   err_msg=f"gradient: {where}")


ROW_VJP_KNOWN = [
    # (steps, head, options): outputs whose VJP kernels must compile, in each code path
    ((), "log_softmax", {"scalar_loss": "joint", "math": "vector"}),
    ((), "softmax", {"scalar_loss": "split", "math": "vector"}),
    ((), "np_max_times_2", {"scalar_loss": "joint", "math": "vector"}),
]


@pytest.mark.parametrize("steps, head, options", ROW_VJP_KNOWN, ids=[c[1] for c in ROW_VJP_KNOWN])
def test_row_vjps_of_row_outputs_match_eager(steps, head, options):
    r = np.random.default_rng(11)
    L = [r.standard_normal((8, 5)) for _ in range(2)]
    out_shape = tuple(_row_vjp_program(steps, head)(symgrad.tensor(L[0])).shape)
    _check_row_vjp(_row_vjp_program(steps, head), L, [r.standard_normal(out_shape) for _ in range(2)], **options)


@pytest.mark.parametrize("seed", range(3 if _LONG else 1))
@pytest.mark.heavy
def test_random_row_vjps_match_eager(seed):
    """Random row pipelines whose output is the matrix, a value per row or a kept-dim column, with a random
    cotangent (``backward(G)``): compiled with ``scalar_loss`` joint and split, ``math`` vector and libm,
    serial (and, in the long profile, parallel), against eager.  The CI profile runs 5 programs,
    ``SYMGRAD_FUZZ=long`` 3 x ``SYMGRAD_FUZZ_EXAMPLES``."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=N_LONG if _LONG else 5, deadline=None, derandomize=not _LONG, database=None)
    @given(steps=st.lists(st.sampled_from(sorted(ROW_STEPS)), min_size=0, max_size=3),
           head=st.sampled_from(sorted(ROW_HEADS)), rows=st.sampled_from([1, 3, 7]), cols=st.sampled_from([1, 2, 5]),
           strategy=st.sampled_from(["joint", "split"]), math=st.sampled_from(["vector", "vector", "libm"]),
           parallel=st.sampled_from([False, False, True] if _LONG else [False]), data_seed=st.integers(0, 2**16),
           dtype_name=dtype_names("float64", "float32"))
    def check(steps, head, rows, cols, strategy, math, parallel, data_seed, dtype_name):
        r = np.random.default_rng(data_seed + 1000 * seed)
        fn = _row_vjp_program(steps, head)
        L = [(2.0 * r.standard_normal((rows, cols))).astype(dtype_name) for _ in range(2)]
        out_shape = tuple(fn(symgrad.tensor(L[0])).shape)
        G = [r.standard_normal(out_shape).astype(dtype_name) for _ in range(2)]
        _check_row_vjp(fn, L, G, scalar_loss=strategy, math=math, parallel=parallel)
        record("row_vjps", dtype_name)

    check()
