"""symgrad/compile.py: @compile, CompiledFunctionBackward, value_and_grad (numpy backend)."""

import numpy as np
import pytest
from workloads import w1, w2, w3, w5  # the workloads, defined once (tests/workloads.py)

import symgrad
from symgrad.ir import interpret


def _args(name, seed):
    r = np.random.default_rng(seed)
    return {
        "w1": [r.uniform(-2, 2, 40)],
        "w2": [r.standard_normal((6, 5)), r.standard_normal(5), r.standard_normal(5)],
        "w3": [r.standard_normal(s) for s in [(7, 4), (4, 3), (3,), (3, 1), (1,), (7, 1)]],
        "w5": [r.standard_normal((6, 5)), r.integers(0, 5, 6)],
    }[name]


FUNCS = {"w1": w1, "w2": w2, "w3": w3, "w5": w5}


def _leaves(arrays):
    return [symgrad.tensor(a, dtype=symgrad.float64, requires_grad=True) if a.dtype.kind == "f"
            else symgrad.tensor(a) for a in arrays]


@pytest.mark.parametrize("backend,strategy", [("numba", "joint"), ("numba", "split"), ("numpy", "joint")])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_compiled_equals_eager_and_interpreter(name, backend, strategy):
    fn = FUNCS[name]
    compiled = symgrad.compile(fn, backend=backend, scalar_loss=strategy)
    for seed in (0, 1):  # the second call reuses the kernels on new values
        arrays = _args(name, seed)
        eager_in, comp_in = _leaves(arrays), _leaves(arrays)
        fn(*eager_in).backward()
        out = compiled(*comp_in)
        assert compiled.kernels_for(*comp_in).strategy == strategy
        out.backward(symgrad.tensor(1.0, dtype=out.dtype) if seed == 0 else None)
        np.testing.assert_allclose(out.item(), fn(*_leaves(arrays)).item(), rtol=1e-12)
        for e, c in zip(eager_in, comp_in):
            if e.requires_grad:
                np.testing.assert_allclose(c.grad.numpy(), e.grad.numpy(), rtol=1e-10, atol=1e-14)
        k = compiled.kernels_for(*comp_in)
        np.testing.assert_allclose(interpret(k.graph, *arrays)[0], out.item(), rtol=1e-12)
    assert compiled.stats()["traces"] == 1


def test_grad_fn_is_one_compiled_node_pointing_at_the_inputs():
    f = symgrad.compile(w2)
    x, w = _leaves(_args("w2", 0)[:2])
    b = symgrad.tensor(_args("w2", 0)[2])  # needs no grad: (None, 0)
    y = f(x, w, b)
    assert type(y.grad_fn).__name__ == "CompiledFunctionBackward"
    nxt = y.grad_fn.next_functions
    assert [type(n).__name__ if n else None for n, _ in nxt] == ["AccumulateGrad", "AccumulateGrad", None]
    assert nxt[0][0].variable is x
    y.backward()
    assert b.grad is None and x.grad is not None


def test_composes_with_eager_ops_on_both_sides():
    f = symgrad.compile(w1)
    a = symgrad.tensor([0.3, -0.7, 1.1], dtype=symgrad.float64, requires_grad=True)
    loss = f(a * 2 + 1) ** 2          # eager before (non-leaf input) and after
    loss.backward()
    b = symgrad.tensor([0.3, -0.7, 1.1], dtype=symgrad.float64, requires_grad=True)
    (w1(b * 2 + 1) ** 2).backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_joint_strategy_scales_by_the_incoming_gradient_and_retains():
    f = symgrad.compile(w1)
    x = symgrad.tensor(np.linspace(-1, 2, 7), requires_grad=True)
    ref = symgrad.tensor(np.linspace(-1, 2, 7), requires_grad=True)
    (w1(ref) * 3.0).backward()
    out = f(x)
    assert f.kernels_for(x).strategy == "joint"
    (out * 1.5).backward(retain_graph=True)
    (out * 1.5).backward()            # the saved gradients are not consumed by the first backward
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


def test_retain_graph_and_second_backward_error():
    f = symgrad.compile(w1)
    x = _leaves(_args("w1", 0))[0]
    y = f(x)
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_hooks_on_inputs_and_outputs():
    f = symgrad.compile(w1)
    x = _leaves(_args("w1", 0))[0]
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    y = f(x)
    y.register_hook(lambda g: g * 10)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), seen[0])
    ref = _leaves(_args("w1", 0))[0]
    w1(ref).backward()
    np.testing.assert_allclose(x.grad.numpy(), 10 * ref.grad.numpy(), rtol=1e-12)


def test_guards_retrace_on_dtype_and_requires_grad_but_not_on_values():
    f = symgrad.compile(w1)
    f(symgrad.tensor(np.ones(5), dtype=symgrad.float64, requires_grad=True))
    f(symgrad.tensor(np.zeros(5), dtype=symgrad.float64, requires_grad=True))
    assert f.stats()["traces"] == 1
    f(symgrad.tensor(np.ones(5), dtype=symgrad.float32, requires_grad=True))
    assert f.stats()["traces"] == 2
    out = f(symgrad.tensor(np.ones(5), dtype=symgrad.float64))   # no grad wanted: forward-only kernel
    assert out.grad_fn is None and f.stats()["traces"] == 3
    with symgrad.no_grad():
        assert f(symgrad.tensor(np.ones(5), dtype=symgrad.float64, requires_grad=True)).grad_fn is None


def test_float32_stays_float32():
    f = symgrad.compile(w2)
    args = [symgrad.tensor(a, dtype=symgrad.float32, requires_grad=True) for a in _args("w2", 0)]
    y = f(*args)
    y.backward()
    assert y.dtype is symgrad.float32 and all(a.grad.dtype is symgrad.float32 for a in args)


def test_double_backward_is_refused_clearly():
    f = symgrad.compile(w1)
    x = _leaves(_args("w1", 0))[0]
    with pytest.raises(RuntimeError, match="double backward"):
        symgrad.autograd.grad(f(x), x, create_graph=True)


def test_generated_source_is_readable_and_is_what_runs():
    f = symgrad.compile(w1)
    x = _leaves(_args("w1", 0))[0]
    k = f.inspect(x)
    assert "# %sin: f64[n0] = sin(%x)" in k.forward_source
    assert "def backward(" in k.backward_source
    assert k.forward.__source__ == k.forward_source
    assert [v.name for v in k.parts.saved] == ["x", "sin", "exp", "log1p", "tanh"]


def test_value_and_grad_for_scipy_minimize():
    scipy_optimize = pytest.importorskip("scipy.optimize")

    def rosenbrock(x):
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    vg = symgrad.value_and_grad(rosenbrock)
    value, g = vg(np.array([0.5, -0.2, 1.3]))
    assert isinstance(value, float) and g.shape == (3,)
    result = scipy_optimize.minimize(vg, np.zeros(6), jac=True, method="L-BFGS-B")
    assert result.success
    np.testing.assert_allclose(result.x, np.ones(6), atol=1e-4)
    # one trace per input shape (3 then 6): this backend's kernels are specialised to shapes
    assert vg.compiled.stats()["traces"] == 2


def test_value_and_grad_argnums_and_grad():
    vg = symgrad.value_and_grad(w2, argnums=(1, 2))
    args = _args("w2", 0)
    value, (gw, gb) = vg(*args)
    leaves = _leaves(args)
    w2(*leaves).backward()
    np.testing.assert_allclose(gw, leaves[1].grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gb, leaves[2].grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(symgrad.grad(w2, argnums=1)(*args), gw)


def test_value_and_grad_needs_a_scalar():
    with pytest.raises(ValueError, match="scalar"):
        symgrad.value_and_grad(lambda x: x * 2)(np.ones(3))


def test_unsupported_argument_type():
    with pytest.raises(TypeError, match="dict"):
        symgrad.compile(lambda d: d)({"a": 1})


def test_data_dependent_control_flow_names_the_line():
    @symgrad.compile(strict=True)
    def f(x):
        if x.sum() > 0:  # the offending line
            return x * 2
        return x

    with pytest.raises(symgrad.TraceError, match="test_compile.py"):
        f(symgrad.tensor([1.0, 2.0], requires_grad=True))


UNARY = ["exp", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "log1p", "expm1", "sinh", "cosh", "atan", "erf",
         "square", "neg", "reciprocal", "rsqrt", "sqrt", "log", "log2", "exp2", "sign", "tan"]


@pytest.mark.parametrize("dtype", [symgrad.float64, symgrad.float32])
def test_every_elementwise_op_in_one_fused_kernel(dtype):
    """One numba compile for all elementwise rules: fused loop == eager, values and gradients."""
    def f(x, y):
        total = 0.0
        for name in UNARY:
            total = total + getattr(symgrad, name)(x * 0.5 + 1.5).sum()
        total = total + (symgrad.maximum(x, y) + symgrad.minimum(x, y) + x.clamp(0.2, 0.8) + x ** y
                         + symgrad.where(x > y, x, y) + x / y - y).sum()
        return total

    r = np.random.default_rng(3)
    xs, ys = r.uniform(0.1, 0.9, (3, 4)), r.uniform(0.1, 0.9, (4,))
    tol = 1e-10 if dtype is symgrad.float64 else 1e-4
    compiled = symgrad.compile(f, backend="numba")
    a, b = (symgrad.tensor(v, dtype=dtype, requires_grad=True) for v in (xs, ys))
    c, d = (symgrad.tensor(v, dtype=dtype, requires_grad=True) for v in (xs, ys))
    out = compiled(a, b)
    out.backward()
    ref = f(c, d)
    ref.backward()
    np.testing.assert_allclose(out.item(), ref.item(), rtol=tol)
    np.testing.assert_allclose(a.grad.numpy(), c.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(b.grad.numpy(), d.grad.numpy(), rtol=tol, atol=tol)
    assert a.grad.dtype is dtype
    k = compiled.kernels_for(a, b)
    assert "fused loop 0" in k.forward_source and "@njit" in k.forward_source


# --- size-generic kernels, parallel and fastmath --------------------------------------------

def _eager_grads(fn, arrays):
    leaves = _leaves(arrays)
    out = fn(*leaves)
    out.backward()
    return out.item(), [t.grad.numpy() for t in leaves if t.requires_grad]


def _compiled_grads(f, arrays):
    leaves = _leaves(arrays)
    out = f(*leaves)
    out.backward()
    return out.item(), [t.grad.numpy() for t in leaves if t.requires_grad]


def test_a_new_size_of_the_same_rank_compiles_nothing():
    f = symgrad.compile(w2)
    r = np.random.default_rng(3)
    first = [r.standard_normal((6, 5)), r.standard_normal(5), r.standard_normal(5)]
    _compiled_grads(f, first)
    before = f.stats()
    assert before["kernels"] >= 1 and before["kernel_compiles"] + before["kernel_cache_loads"] >= 1
    for rows, cols in [(9, 5), (3, 11), (50, 2)]:
        arrays = [r.standard_normal((rows, cols)), r.standard_normal(cols), r.standard_normal(cols)]
        value, grads = _compiled_grads(f, arrays)
        ref_value, ref_grads = _eager_grads(w2, arrays)
        np.testing.assert_allclose(value, ref_value, rtol=1e-12)
        for g, ref in zip(grads, ref_grads):
            np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-14)
    after = f.stats()
    assert after["traces"] == before["traces"] + 3        # the glue is re-traced for each size...
    assert after["kernels"] == before["kernels"]           # ...but runs the same kernels
    assert (after["kernel_compiles"], after["kernel_cache_loads"]) == \
        (before["kernel_compiles"], before["kernel_cache_loads"])


def test_a_new_dtype_compiles_new_kernels():
    f = symgrad.compile(w1)
    x = np.linspace(-1, 1, 9)
    f(symgrad.tensor(x, requires_grad=True)).backward()
    before = f.stats()
    x32 = symgrad.tensor(x.astype(np.float32), requires_grad=True)
    f(x32).backward()
    after = f.stats()
    assert x32.grad.dtype == symgrad.float32
    assert after["kernel_compiles"] + after["kernel_cache_loads"] > \
        before["kernel_compiles"] + before["kernel_cache_loads"]


def test_value_and_grad_new_size_reuses_the_kernel():
    vg = symgrad.value_and_grad(w1)
    vg(np.linspace(-1, 1, 700))     # both sizes above codegen.simd.MIN_ELEMENTS: the same loop structure
    before = vg.compiled.stats()
    x = np.linspace(-1, 2, 1001)
    value, grad = vg(x)
    after = vg.compiled.stats()
    assert after["kernel_compiles"] == before["kernel_compiles"]
    assert after["kernel_cache_loads"] == before["kernel_cache_loads"]
    ref = np.sum(np.sin(x) * np.exp(-x * x) + np.log1p(x * x) * np.tanh(x))
    np.testing.assert_allclose(value, ref, rtol=1e-12)
    assert grad.shape == (1001,)


def test_constants_are_kernel_arguments():
    """A mean's 1/N and the user's constants reach the kernel as arguments, not literals."""
    f = symgrad.compile(lambda x: (x * 0.25 + symgrad.exp(x * 1.5)).mean())
    source = f.inspect(symgrad.tensor(np.ones(8), requires_grad=True)).backward_source + \
        f.inspect(symgrad.tensor(np.ones(8), requires_grad=True)).forward_source
    kernel_text = source.split("\ndef forward")[0].split("\ndef backward")[0]
    assert "0.25" not in kernel_text and "1.5" not in kernel_text and "0.125" not in kernel_text
    x = np.linspace(-1, 1, 8)
    t = symgrad.tensor(x, requires_grad=True)
    f(t).backward()
    np.testing.assert_allclose(t.grad.numpy(), (0.25 + 1.5 * np.exp(1.5 * x)) / 8, rtol=1e-12)


@pytest.fixture(scope="module")
def w2_parallel():
    # libm: in-order sums repeat bit for bit (a vector-math sum's last bits may depend on addresses)
    return symgrad.compile(w2, parallel=True, math="libm")


@pytest.mark.heavy
def test_parallel_kernels_match_serial_and_are_deterministic(w2_parallel):
    r = np.random.default_rng(7)
    arrays = [r.standard_normal((300, 17)), r.standard_normal(17), r.standard_normal(17)]
    k = w2_parallel.inspect(*_leaves(arrays))
    assert "prange(" in k.backward_source + k.forward_source
    runs = [_compiled_grads(w2_parallel, arrays) for _ in range(3)]
    ref_value, ref_grads = _eager_grads(w2, arrays)
    np.testing.assert_allclose(runs[0][0], ref_value, rtol=1e-12)
    for g, ref in zip(runs[0][1], ref_grads):
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-14)
    for value, grads in runs[1:]:           # fixed chunking: bit-identical every time
        assert value == runs[0][0]
        assert all(np.array_equal(a, b) for a, b in zip(grads, runs[0][1]))


def test_parallel_auto_stays_serial_for_small_inputs():
    f = symgrad.compile(w1)   # parallel="auto"
    k = f.inspect(symgrad.tensor(np.ones(100), requires_grad=True))
    assert "prange" not in k.forward_source + k.backward_source


def test_fastmath_is_opt_in():
    x = np.linspace(-1, 1, 16)
    plain = symgrad.compile(w1)
    fast = symgrad.compile(w1, fastmath=True)
    assert "fastmath" not in plain.inspect(symgrad.tensor(x, requires_grad=True)).forward_source
    # under math="vector" (default) fastmath is limited to FMA contraction (the inlined functions need IEEE)
    assert "fastmath={'contract'}" in fast.inspect(symgrad.tensor(x, requires_grad=True)).forward_source
    libm = symgrad.compile(w1, fastmath=True, math="libm")
    assert "fastmath=True" in libm.inspect(symgrad.tensor(x, requires_grad=True)).forward_source
    a, b = symgrad.tensor(x, requires_grad=True), symgrad.tensor(x, requires_grad=True)
    plain(a).backward()
    fast(b).backward()
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-12)


# --- SIMD elementary functions handed to numpy -----------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_simd_functions_run_in_numpy_between_fused_loops(dtype):
    from codegen.simd import MIN_ELEMENTS, simd_functions

    if "tanh" not in simd_functions(np.dtype(dtype).name):
        pytest.skip("numpy has no SIMD tanh on this CPU")
    from codegen.numba_emit import vector_functions

    inline = vector_functions("vector")[0]
    x = np.linspace(-2, 3, MIN_ELEMENTS + 88).astype(dtype)
    for simd, math in ((True, "libm"), (False, "libm"), (True, "vector")):
        f = symgrad.compile(w1, numpy_simd=simd, math=math)
        t = symgrad.tensor(x, requires_grad=True)
        k = f.inspect(t)
        glue = k.joint_source.rsplit("\ndef joint", 1)[1]
        in_numpy = [f for f in ("tanh", "log1p") if f"np.{f}(" in glue or f"op_{f}(" in glue]
        # under math="vector" the float64 functions codegen.vecmath provides are computed inside the loops
        # (float32 ones stay with numpy's native float32 SIMD code, which is faster than vecmath's)
        offloaded = [f for f in ("tanh", "log1p") if math == "libm" or dtype == np.float32 or f not in inline]
        assert in_numpy == (offloaded if simd else [])
        f(t).backward()
        ref = symgrad.tensor(x, requires_grad=True)
        w1(ref).backward()
        rtol = 1e-12 if dtype == np.float64 else 2e-5
        np.testing.assert_allclose(t.grad.numpy(), ref.grad.numpy(), rtol=rtol, atol=rtol)
        assert t.grad.dtype == ref.grad.dtype


def test_small_loops_keep_their_functions_fused():
    f = symgrad.compile(w1)
    k = f.inspect(symgrad.tensor(np.linspace(-1, 1, 16), requires_grad=True))
    glue = k.joint_source.rsplit("\ndef joint", 1)[1]
    assert "np.tanh(" not in glue and "op_tanh(" not in glue and "tanh(" in k.joint_source


@pytest.mark.parametrize("name,arrays", [
    ("w2", lambda r: [r.standard_normal((40, 20)), r.standard_normal(20), r.standard_normal(20)]),
    ("w3", lambda r: [r.standard_normal(s) for s in [(30, 8), (8, 24), (24,), (24, 1), (1,), (30, 1)]]),
    ("w5", lambda r: [3 * r.standard_normal((30, 20)), r.integers(0, 20, 30)]),
])
def test_workloads_above_the_simd_threshold_match_eager(name, arrays):
    data = arrays(np.random.default_rng(11))
    value, grads = symgrad.value_and_grad(FUNCS[name], argnums=tuple(
        i for i, a in enumerate(data) if a.dtype.kind == "f"))(*data)
    ref_value, ref_grads = _eager_grads(FUNCS[name], data)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for g, ref in zip(grads, ref_grads):
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-14)


def test_reused_buffers_never_reach_the_caller():
    """Intermediates live in pooled buffers; what a call returns must survive the next call."""
    r = np.random.default_rng(5)
    L, labels = 3 * r.standard_normal((40, 30)), r.integers(0, 30, 40)
    vg = symgrad.value_and_grad(w5, math="libm")   # (math="vector" runs W5 as one row kernel: no pool)
    k = vg.compiled.kernels_for(L, labels, wrt=[0], joint_kernel=True)
    assert "pool_.pop()" in k.joint_source                 # this graph does use the pool
    v1, g1 = vg(L, labels)
    keep = g1.copy()
    v2, g2 = vg(L + 1.0, labels)
    assert g2 is not g1 and not np.shares_memory(g1, g2)
    np.testing.assert_array_equal(g1, keep)
    ref_value, (ref,) = _eager_grads(w5, [L, labels])
    np.testing.assert_allclose(v1, ref_value, rtol=1e-12)
    np.testing.assert_allclose(g1, ref, rtol=1e-10, atol=1e-15)


def test_concurrent_calls_take_separate_buffers():
    import threading

    r = np.random.default_rng(6)
    vg = symgrad.value_and_grad(w5)
    inputs = [(3 * r.standard_normal((40, 30)), r.integers(0, 30, 40)) for _ in range(4)]
    expected = [vg(*a) for a in inputs]
    errors = []

    def worker(i):
        for _ in range(30):
            value, grad = vg(*inputs[i])
            if value != expected[i][0] or not np.array_equal(grad, expected[i][1]):
                errors.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_long_1d_graphs_run_in_cache_sized_blocks(dtype):
    from codegen.numba_emit import BLOCK_ELEMENTS

    x = np.linspace(-2, 3, 2 * BLOCK_ELEMENTS + 77).astype(dtype)   # a partial last block

    for loss in (w1, lambda t: (symgrad.tanh(t) * t * 0.5).mean()):
        _check_blocked(loss, x, dtype)


def test_a_single_vectorised_loop_is_not_blocked():
    """Under math="vector" W1 is one loop with no intermediate arrays: blocks would only add calls."""
    from codegen.numba_emit import BLOCK_ELEMENTS

    x = np.linspace(-2, 3, 2 * BLOCK_ELEMENTS + 77)
    vg = symgrad.value_and_grad(w1)
    source = vg.compiled.kernels_for(x, wrt=[0], joint_kernel=True).joint_source
    if "np.tanh(" in source or "np.log1p(" in source:
        pytest.skip("codegen.vecmath does not provide tanh and log1p yet")
    assert "run in blocks" not in source and "group_1" not in source     # one loop (and its libm twin)
    value, grad = vg(x)
    ref = symgrad.tensor(x, requires_grad=True)
    out = w1(ref)
    out.backward()
    np.testing.assert_allclose(value, out.item(), rtol=1e-12)
    np.testing.assert_allclose(grad, ref.grad.numpy(), rtol=1e-10, atol=1e-14)


def _check_blocked(loss, x, dtype):
    # math="libm": numpy computes tanh and log1p between the loops, through block-sized buffers
    vg = symgrad.value_and_grad(loss, math="libm")
    value, grad = vg(x)
    assert "run in blocks" in vg.compiled.kernels_for(x, wrt=[0], joint_kernel=True).joint_source
    ref = symgrad.tensor(x, requires_grad=True)
    out = loss(ref)
    out.backward()
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(value, out.item(), rtol=rtol)
    np.testing.assert_allclose(grad, ref.grad.numpy(), rtol=rtol, atol=rtol)
    assert grad.dtype == dtype and grad.shape == x.shape
    f = symgrad.compile(loss, math="libm")         # the tensor API runs the same blocked joint kernel
    t = symgrad.tensor(x, requires_grad=True)
    f(t).backward()
    np.testing.assert_allclose(t.grad.numpy(), ref.grad.numpy(), rtol=rtol, atol=rtol)


# --- the joint strategy hands its gradients to AccumulateGrad without copies -----------------------

def test_joint_gradients_are_handed_over_once_and_retained_ones_stay_intact():
    f = symgrad.compile(lambda x: (symgrad.sin(x) * x).sum())
    x0 = np.linspace(-1.0, 1.0, 5000)
    want = np.sin(x0) + x0 * np.cos(x0)
    x = symgrad.tensor(x0, requires_grad=True)
    y = f(x)
    saved = y.grad_fn._saved_values[0]
    y.backward(retain_graph=True)
    assert x.grad.numpy() is not saved                 # retained: AccumulateGrad copied it
    y.backward(retain_graph=True)
    y.backward(symgrad.tensor(2.0))                    # a seed other than 1, then released
    np.testing.assert_allclose(x.grad.numpy(), 4 * want, rtol=1e-12)
    np.testing.assert_allclose(saved, want, rtol=1e-12)  # the saved gradient was never modified
    x2 = symgrad.tensor(x0, requires_grad=True)
    y2 = f(x2)
    saved2 = y2.grad_fn._saved_values[0]
    y2.backward()                                      # released: the saved array becomes .grad
    assert x2.grad.numpy() is saved2
    np.testing.assert_allclose(x2.grad.numpy(), want, rtol=1e-12)


def test_value_and_grad_finds_the_partition_only_when_asked():
    """value_and_grad runs one joint kernel: the forward/backward cut (read by inspect and logs) is
    computed on first use, and is the one compile() finds."""
    x = np.linspace(-1.0, 1.0, 50)
    vg = symgrad.value_and_grad(w1)
    value, grad = vg(x)
    (k,) = vg.compiled._kernels.values()
    assert k.__dict__.get("_parts") is None
    split = symgrad.compile(w1).inspect(symgrad.tensor(x, requires_grad=True))
    assert [v.name for v in k.parts.saved] == [v.name for v in split.parts.saved] == \
        ["x", "sin", "exp", "log1p", "tanh"]
    assert k.__dict__.get("_parts") is k.parts
