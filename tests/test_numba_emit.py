"""codegen/numba_emit.py under ``math="vector"`` and ``math="libm"``.

Vector math inlines codegen.vecmath's functions into the fused loops and lets LLVM reassociate the
loops' sums; libm keeps scalar libm calls (offloading SIMD functions to numpy) and in-order sums.
Both must agree with eager evaluation within the differential tests' tolerances (float64 1e-9,
float32 1e-4 relative), for the benchmark workloads and for every elementwise op with an elementary
function, special values included.  Compiling costs 0.3-3 s per kernel, so each compiled function is
built once per module (fixtures) and checks many ops at once.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from workloads import w1, w2, w3, w5  # the workloads, defined once (tests/workloads.py)

import symgrad
from codegen import jit
from codegen.numba_emit import emit_numba, vector_functions

# its tests share the compiled elementwise tables (module-scoped fixtures, built once per worker): one
# xdist worker runs them all
pytestmark = pytest.mark.xdist_group("test_numba_emit")

RTOL = {np.float64: 1e-9, np.float32: 1e-4}
MODES = ("vector", "libm")


def assert_close(got, want, rtol, where=""):
    """Relative comparison with an absolute floor of ``rtol * 1e-3 * max|want|`` (cancellation near 0);
    nan, inf and -inf must be in the same places."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, where
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{where}: nan positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{where}: infinities")
    finite = np.isfinite(want)
    scale = float(np.max(np.abs(want[finite]))) if finite.any() else 0.0
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * 1e-3 * scale, err_msg=where)


# --- the workloads -------------------------------------------------------------------------------



def _workload(name: str, dtype=np.float64):
    """(loss, arrays, argnums); sizes above codegen.simd.MIN_ELEMENTS, so libm offloads to numpy."""
    r = np.random.default_rng(17)
    if name == "w1":
        return w1, [r.uniform(-3, 3, 33_000)], (0,)           # > 2 blocks: libm runs blocked
    if name == "w2":
        return w2, [r.standard_normal((40, 30)), r.standard_normal(30), r.standard_normal(30)], (0, 1, 2)
    if name == "w3":
        arrays = [r.standard_normal(s).astype(dtype) for s in [(300, 8), (8, 24), (24,), (24, 1), (1,), (300, 1)]]
        return w3, arrays, (1, 2, 3, 4)
    return w5, [3 * r.standard_normal((60, 40)), r.integers(0, 40, 60)], (0,)


WORKLOADS = [("w1", np.float64), ("w2", np.float64), ("w3", np.float64), ("w3", np.float32), ("w5", np.float64)]


@pytest.fixture(scope="module")
def compiled_workloads():
    """{(name, dtype, math): value_and_grad}, built on first use."""
    made = {}

    def get(name, dtype, math):
        key = (name, dtype, math)
        if key not in made:
            loss, _, argnums = _workload(name, dtype)
            made[key] = symgrad.value_and_grad(loss, argnums=argnums, math=math)
        return made[key]

    return get


def _eager(loss, arrays, argnums):
    leaves = [symgrad.tensor(a, requires_grad=i in argnums) for i, a in enumerate(arrays)]
    out = loss(*leaves)
    out.backward()
    return out.item(), [leaves[i].grad.numpy() for i in argnums]


@pytest.mark.parametrize("math", MODES)
@pytest.mark.parametrize("name,dtype", WORKLOADS, ids=[f"{n}-{np.dtype(d).name}" for n, d in WORKLOADS])
def test_workloads_match_eager_under_both_math_modes(compiled_workloads, name, dtype, math):
    loss, arrays, argnums = _workload(name, dtype)
    vg = compiled_workloads(name, dtype, math)
    value, grads = vg(*arrays)
    ref_value, ref_grads = _eager(loss, arrays, argnums)
    rtol = RTOL[dtype]
    assert_close(value, ref_value, rtol, f"{name} {math}: value")
    for i, g, ref in zip(argnums, grads, ref_grads):
        assert g.dtype == ref.dtype
        assert_close(g, ref, rtol, f"{name} {math}: gradient of argument {i}")
    source = vg.compiled.kernels_for(*arrays, wrt=list(argnums), joint_kernel=True).joint_source
    assert source.startswith(f"# math={math!r}")
    if math == "libm":
        assert "radd(" not in source and "wide_vectors" not in source and not re.search(r"\bv[a-z0-9]+_f(32|64)\(",
                                                                                       source)
    else:
        assert "wide_vectors()" in source
        # kernels, without the libm twins of loops with vector sin/cos (run for huge arguments only)
        kernels = "\n".join(line for part in source.split("\ndef joint")[0].split("\n\n") if "_libm(" not in part
                             for line in part.splitlines() if not line.lstrip().startswith("#"))
        for fn, base in vector_functions()[0].items():
            # a float64 function the library provides is computed in the loop, never handed to numpy
            # (float32 keeps numpy's native float32 SIMD code where it has some)
            assert dtype == np.float32 or f"np.{fn}(" not in source
            if re.search(rf"(?<![a-z_.]){fn}\(", kernels):
                raise AssertionError(f"{name}: libm {fn}() in a vector kernel although {base} exists")


def test_vector_sums_are_deterministic(compiled_workloads):
    loss, arrays, argnums = _workload("w5")
    vg = compiled_workloads("w5", np.float64, "vector")
    first = vg(*arrays)
    for _ in range(3):
        again = vg(*arrays)
        assert again[0] == first[0] and np.array_equal(again[1], first[1])


def test_vector_sums_do_not_depend_on_where_the_arrays_are():
    """LLVM's run-time overlap checks would run a scalar copy of the loop for arrays lying close
    together (another summation order); kernels declare their arrays distinct instead."""
    import ast

    g = symgrad.trace(lambda x: (x * 1.5 + 0.25, (symgrad.exp(x * 0.01) * x).sum()), np.ones(8))
    e = emit_numba(g, "forward")
    assert "distinct_arrays()" in e.kernels[0]
    kernel = e.compile(cache=False).kernels[0]
    params = e.kernels[0].split("def group_0(", 1)[1].split(")", 1)[0].split(", ")
    call = next(line for line in e.source.splitlines() if "group_0(" in line).split("group_0(", 1)[1].rsplit(")", 1)[0]
    sources = [ast.unparse(a) for a in ast.parse(f"f({call})").body[0].value.args]
    r = np.random.default_rng(5)

    def run(x, out, values, n, consts):
        x[:] = values
        args = [x if p == "x" else out if p.startswith("out_") else n if p == "n0" else consts[p] for p in params]
        return kernel(*args)[-1]

    changed = 0
    for n in range(1, 120, 7):
        values = r.standard_normal(n) * 100
        consts = {p: float(eval(src)) for p, src in zip(params, sources) if p.startswith("k")}
        want = run(np.empty(n), np.empty(n), values, n, consts)
        for gap in range(0, 24, 3):
            buf = np.empty(2 * n + gap)
            for x, out in ((buf[:n], buf[n + gap:2 * n + gap]), (buf[n + gap:2 * n + gap], buf[:n])):
                changed += run(x, out, values, n, consts) != want
    assert changed == 0


# --- every elementwise op with an elementary function ---------------------------------------------

# (name, function, domain): "any" on [-4, 4], "pos" on (0, 4]
UNARY = [
    ("neg", lambda x: -x, "any"), ("reciprocal", symgrad.reciprocal, "pos"), ("exp", symgrad.exp, "any"),
    ("log", symgrad.log, "pos"), ("log1p", symgrad.log1p, "pos"), ("sin", symgrad.sin, "any"),
    ("cos", symgrad.cos, "any"), ("tanh", symgrad.tanh, "any"), ("sqrt", symgrad.sqrt, "pos"),
    ("sigmoid", symgrad.sigmoid, "any"), ("relu", symgrad.relu, "any"), ("abs", symgrad.abs, "any"),
    ("sign", symgrad.sign, "any"), ("expm1", symgrad.expm1, "any"), ("log2", symgrad.log2, "pos"),
    ("exp2", symgrad.exp2, "any"), ("rsqrt", symgrad.rsqrt, "pos"), ("erf", symgrad.erf, "any"),
    ("sinh", symgrad.sinh, "any"), ("cosh", symgrad.cosh, "any"), ("tan", symgrad.tan, "any"),
    ("atan", symgrad.atan, "any"), ("pow1.5", lambda x: x ** 1.5, "pos"), ("pow-2.5", lambda x: x ** -2.5, "pos"),
    ("pow3", lambda x: x ** 3, "any"), ("pow0.5", lambda x: x ** 0.5, "pos"),
    ("exp2x", lambda x: symgrad.pow(2.0, x), "any"),
]
N = 600   # above codegen.simd.MIN_ELEMENTS: libm hands SIMD functions to numpy
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, 1e-300, 1e-8, 0.5, 20.0, 88.5, 89.0, 700.0, 710.0, -745.0,
           -750.0, 3e5, 1e8, 1e16, 1e22, 1e300, -1e300]


def _special(name: str) -> bool:
    """Special values for the functions codegen.vecmath provides (numpy's nan/inf/0/overflow results);
    the other ops keep their libm/numpy code under both modes and get the finite sweep."""
    vector = vector_functions()[0]
    return name in vector or (name.startswith("pow") and "pow" in vector)


def _sweep(domain: str, dtype, special: bool) -> np.ndarray:
    x = np.linspace(0.01, 4.0, N) if domain == "pos" else np.linspace(-4.0, 4.0, N)
    if special:
        extra = np.array(SPECIAL + [-v for v in SPECIAL])
        x = np.concatenate([x[: N - len(extra)], extra])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.fixture(scope="module")
def compiled_ops():
    """{(dtype, math, kind): compiled function}: ``values`` returns every op's output (a tuple),
    ``grads`` is value_and_grad of ``sum(op_i(x_i) * w)`` over all ops."""
    made = {}
    fns = [f for _, f, _ in UNARY]

    def values(*xs):
        return tuple(f(x) for f, x in zip(fns, xs))

    def weighted(*xs):
        total = None
        for f, x in zip(fns, xs):
            term = (f(x) * 0.75).sum()
            total = term if total is None else total + term
        return total

    def get(dtype, math, kind):
        key = (dtype, math, kind)
        if key not in made:
            made[key] = symgrad.compile(values, math=math, parallel=False) if kind == "values" else \
                symgrad.value_and_grad(weighted, argnums=tuple(range(len(fns))), math=math)
        return made[key]

    return get


@pytest.mark.parametrize("math", MODES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_elementwise_op_matches_eager_with_special_values(compiled_ops, dtype, math):
    xs = [_sweep(domain, dtype, special=_special(name)) for name, _, domain in UNARY]
    with np.errstate(all="ignore"):
        got = compiled_ops(dtype, math, "values")(*xs)
        for (name, f, _), x, g in zip(UNARY, xs, got):
            want = f(symgrad.tensor(x)).numpy()
            assert g.numpy().dtype == want.dtype, name
            assert_close(g.numpy(), want, RTOL[dtype], f"{name} ({math}, {np.dtype(dtype).name})")


# (float32 under libm is the code of before vector math, covered by the differential tests' history)
@pytest.mark.parametrize("dtype,math", [(np.float64, "vector"), (np.float64, "libm"), (np.float32, "vector")])
def test_every_elementwise_op_gradient_matches_eager(compiled_ops, dtype, math):
    xs = [_sweep(domain, dtype, special=False) for _, _, domain in UNARY]
    value, grads = compiled_ops(dtype, math, "grads")(*xs)
    total = 0.0
    for (name, f, _), x, g in zip(UNARY, xs, grads):
        t = symgrad.tensor(x, requires_grad=True)
        out = (f(t) * 0.75).sum()
        out.backward()
        total += out.item()
        assert g.dtype == dtype, name
        assert_close(g, t.grad.numpy(), RTOL[dtype], f"d {name} ({math}, {np.dtype(dtype).name})")
    assert_close(value, total, RTOL[dtype], "sum of all ops")


def test_huge_sin_arguments_rerun_the_loop_with_libm():
    if "sin" not in vector_functions()[0]:
        pytest.skip("codegen.vecmath has no vector sin")
    x = np.concatenate([np.linspace(-3, 3, 1000), [1e22, -3e17, 8e15]])
    vg = symgrad.value_and_grad(lambda t: (symgrad.sin(t) * t).sum())
    value, grad = vg(x)
    source = vg.compiled.kernels_for(x, wrt=[0], joint_kernel=True).joint_source
    assert "sincos_out_of_range_f64(" in source and "group_0_libm(" in source
    np.testing.assert_allclose(grad, np.cos(x) * x + np.sin(x), rtol=1e-13)
    np.testing.assert_allclose(value, np.sum(np.sin(x) * x), rtol=1e-13)
    value, grad = vg(x[:1000])                     # in range: the vector loop's own results
    np.testing.assert_allclose(grad, np.cos(x[:1000]) * x[:1000] + np.sin(x[:1000]), rtol=1e-13, atol=1e-15)


# --- the source and the cache key --------------------------------------------------------------------

def test_emitted_kernels_call_dtype_specific_functions_with_one_comment_per_node():
    if "exp" not in vector_functions()[0]:
        pytest.skip("codegen.vecmath has no vector exp")
    for dtype, suffix in ((np.float64, "f64"), (np.float32, "f32")):
        g = symgrad.trace(lambda x: (symgrad.exp(-x * x) * x).sum(), np.ones(8, dtype))
        e = emit_numba(g, "forward")
        kernel = e.kernels[0]
        assert f"vexp_{suffix}(" in kernel and "radd(acc_0, " in kernel
        assert kernel.count("        # %") == len(g.nodes) - 1           # every node but the sum
        assert "from codegen.vecmath import" in e.imports and "vexp_" + suffix in e.imports
        libm = emit_numba(g, "forward", math="libm")
        assert "vexp" not in libm.full_source and "exp(" in libm.kernels[0] and "acc_0 += " in libm.kernels[0]
        assert libm.imports == ""


def test_sin_and_cos_of_one_argument_are_emitted_side_by_side():
    """W1's joint graph needs cos(x) only for the backward, twenty nodes after sin(x); next to each other they
    share their range reduction (LLVM computes it once: 8.1 -> 7.3 ms for W1 1e6)."""
    if not {"sin", "cos"} <= set(vector_functions()[0]):
        pytest.skip("codegen.vecmath has no vector sin/cos")
    from symgrad.compiler.autodiff import autodiff

    g = autodiff(symgrad.trace(w1, np.ones(8)), [0])
    kernel = emit_numba(g, "joint").kernels[0]
    lines = [ln.strip() for ln in kernel.splitlines() if not ln.strip().startswith("#")]
    at = {f: next(i for i, ln in enumerate(lines) if ln.startswith(f"{f}_ = v{f}_f64(")) for f in ("sin", "cos")}
    between = lines[at["sin"] + 1:at["cos"]]
    assert at["sin"] < at["cos"] and all("out_of_range" in ln for ln in between), between
    assert lines.index("exp_ = vexp_f64(mul)") > at["cos"]    # the nodes between them moved after both
    libm = emit_numba(g, "joint", math="libm").kernels[0]     # libm: graph order
    assert libm.index("cos_ = cos(x_in)") > libm.index("exp_ = exp(mul)")


@pytest.mark.parametrize("math", MODES)
def test_a_constant_recorded_mid_graph_does_not_split_the_loop(math):
    """A tensor captured from outside becomes a constant node where it is first used, after the loop
    has started (torch.compile's seed 1 in a scalar loss's joint graph): the glue assigns constants
    first, so the nodes reading it still join that loop."""
    c = symgrad.tensor(np.float64(2.5))

    def f(x):
        s = symgrad.sin(x)
        return (s * x).sum(), s * c.expand(x.shape) + x

    x = np.linspace(-1.0, 2.0, 64)
    g = symgrad.trace(f, x)
    assert [n.op for n in g.nodes].index("constant") > 0
    e = emit_numba(g, "f", math=math)
    assert e.source.count("# fused loop") == 1
    total, out = e.compile()(x)
    assert_close(total, (np.sin(x) * x).sum(), RTOL[np.float64])
    assert_close(out, np.sin(x) * 2.5 + x, RTOL[np.float64])


def test_constant_powers_use_vpow_when_the_library_lists_it(monkeypatch):
    from codegen import vecmath

    if not hasattr(vecmath, "vpow_f64"):
        pytest.skip("codegen.vecmath has no vpow")
    table = dict(vecmath.VECTOR_FUNCTIONS, pow="vpow")
    monkeypatch.setattr(vecmath, "VECTOR_FUNCTIONS", table)
    names = sorted(f"{base}_{suffix}" for base in table.values() for suffix in ("f64", "f32"))
    monkeypatch.setattr(vecmath, "IMPORT_LINE", f"from codegen.vecmath import ({', '.join(names)})")
    g = symgrad.trace(lambda x: (x ** 1.5 + x ** -2.5 + x ** 3 + symgrad.sqrt(x)).sum(), np.ones(8, np.float32))
    kernel = emit_numba(g, "forward").kernels[0]
    assert "vpow_f32(x_in, 1.5)" in kernel and "vpow_f32(x_in, -2.5)" in kernel
    assert "x_in**3" in kernel and "sqrt(x_in)" in kernel      # integer powers multiply; sqrt is an instruction
    assert "vpow" not in emit_numba(g, "forward", math="libm").kernels[0]


def test_an_empty_library_keeps_every_function_libm(monkeypatch):
    from codegen import vecmath

    monkeypatch.setattr(vecmath, "VECTOR_FUNCTIONS", {})
    assert vector_functions("vector") == ({}, "")
    g = symgrad.trace(lambda x: (symgrad.exp(x) * x).sum(), np.ones(600))
    e = emit_numba(g, "forward")
    assert "vexp" not in e.full_source and "np.exp(" in e.source     # offloaded to numpy as before
    assert "radd(" in e.full_source                                   # the sums still vectorise
    with pytest.raises(ValueError, match="math must be one of"):
        vector_functions("fast")
    with pytest.raises(ValueError, match="math must be 'vector' or 'libm'"):
        symgrad.compile(w1, math="svml")


def test_math_is_part_of_the_cache_key():
    def loss(x):
        return (symgrad.exp(x) * x).sum()

    x = np.linspace(-1, 1, 700)
    modules = {}
    for math in MODES:
        vg = symgrad.value_and_grad(loss, math=math)
        vg(x)
        k = vg.compiled.kernels_for(x, wrt=[0], joint_kernel=True)
        assert k.options["math"] == math
        stats = vg.compiled.stats()
        assert stats["kernel_compiles"] + stats["kernel_cache_loads"] >= 1
        e = emit_numba(k.joint, "joint", math=math)           # what names the module in the disk cache
        modules[math] = jit.module_name(jit.module_text(e.kernels, e.imports))
    assert modules["vector"] != modules["libm"]
    # switching the option of a compiled function builds new kernels
    f = symgrad.compile(loss)
    t = symgrad.tensor(x, requires_grad=True)
    vector_source = f.inspect(t).joint_source
    f.options["math"] = "libm"
    libm_source = f.inspect(t).joint_source
    assert vector_source != libm_source and libm_source.startswith("# math='libm'")
    assert f.stats()["traces"] == 2


def test_blocked_execution_with_vector_loops_and_numpy_between_them():
    """A 1-D graph whose loops are split by a function vecmath lacks (numpy's atan) still runs in
    blocks under math="vector": the loops' partial sums (radd) add up per block in the glue."""
    from codegen.numba_emit import BLOCK_ELEMENTS
    from codegen.simd import simd_functions

    if "atan" not in simd_functions("float64") or "atan" in vector_functions()[0]:
        pytest.skip("needs atan offloaded to numpy (SVML) and absent from codegen.vecmath")

    def loss(t):
        return (symgrad.atan(t * 0.5) * symgrad.exp(-t * t) + t * t).sum()

    x = np.linspace(-3, 3, 2 * BLOCK_ELEMENTS + 77)
    vg = symgrad.value_and_grad(loss)
    value, grad = vg(x)
    source = vg.compiled.kernels_for(x, wrt=[0], joint_kernel=True).joint_source
    assert "run in blocks" in source and "np.arctan(" in source and "vexp_f64(" in source and "radd(" in source
    ref_value, (ref,) = _eager(loss, [x], (0,))
    assert_close(value, ref_value, 1e-9)
    assert_close(grad, ref, 1e-9)
    again = vg(x)                                   # pooled block buffers: the same result again
    assert again[0] == value and np.array_equal(again[1], grad) and again[1] is not grad


@pytest.mark.heavy
def test_parallel_vector_kernels_match_serial_and_are_deterministic():
    r = np.random.default_rng(3)
    arrays = [r.standard_normal((300, 17)), r.standard_normal(17), r.standard_normal(17)]
    par = symgrad.value_and_grad(symgrad.compile(w2, parallel=True), argnums=(0, 1, 2))
    source = par.compiled.kernels_for(*arrays, wrt=[0, 1, 2], joint_kernel=True).joint_source
    assert "prange(" in source and "radd(" in source
    runs = [par(*arrays) for _ in range(3)]
    ref_value, ref_grads = _eager(w2, arrays, (0, 1, 2))
    assert_close(runs[0][0], ref_value, 1e-9)
    for g, ref in zip(runs[0][1], ref_grads):
        assert_close(g, ref, 1e-9)
    for value, grads in runs[1:]:
        assert value == runs[0][0] and all(np.array_equal(a, b) for a, b in zip(grads, runs[0][1]))


# --- the hot loops are vectorised --------------------------------------------------------------------

def _has_avx2() -> bool:
    try:
        features = dict(np._core._multiarray_umath.__cpu_features__)
    except AttributeError:  # pragma: no cover - numpy < 2
        return False
    return bool(features.get("AVX2") and features.get("FMA3"))


PACKED = re.compile(r"\b(v[a-z0-9]+p[ds])\s+[^\n]*%[yz]mm")
PACKED_FMA = re.compile(r"\bv(fn?m(add|sub)\d{3}p[ds])\s+[^\n]*%[yz]mm")


@pytest.mark.skipif(not _has_avx2(), reason="needs a CPU with AVX2 and FMA")
@pytest.mark.parametrize("name", ["w1", "w2", "w5"])
def test_hot_loops_use_packed_vector_instructions(name):
    """Every kernel that calls a vector function or sums with radd compiles to packed ymm/zmm code."""
    loss, arrays, argnums = _workload(name)
    # compiled in memory: Numba cannot show the assembly of a kernel loaded from its disk cache
    vg = symgrad.value_and_grad(symgrad.compile(loss, cache=False), argnums=argnums)
    vg(*arrays)
    k = vg.compiled.kernels_for(*arrays, wrt=list(argnums), joint_kernel=True)
    checked = 0
    # the glue calls each kernel by its readable name; kernels with the same canonical form share a dispatcher
    called = {src: d for src, d in k.joint_fn.__globals__.items() if any(d is x for x in k.joint_fn.kernels)}
    for src, d in called.items():
        text = next(s for s in k.joint_source.split("\n\n") if f"def {src}(" in s)
        if not d.signatures or "_libm" in src:
            continue
        asm = d.inspect_asm(d.signatures[0])
        if re.search(r"\bv[a-z0-9]+_f64\(", text):
            assert PACKED_FMA.search(asm), f"{name} {src}: no packed FMA in a kernel with vector math"
            checked += 1
        if "radd(" in text:
            assert re.search(r"\bvaddpd\s+[^\n]*%[yz]mm", asm), f"{name} {src}: its sum is not vectorised"
            checked += 1
    assert checked >= 1


# --- bounded compile cost -------------------------------------------------------------------------

def test_a_loop_with_many_elementary_functions_keeps_libm_calls():
    """Numba inlines every vector call site separately (a 1000-op chain ran out of 24 GiB): past
    MAX_VECTOR_CALLS per loop, the loop calls libm, and the result is still eager's."""
    from codegen.numba_emit import MAX_VECTOR_CALLS

    def chain(x, n):
        for k in range(n):
            x = symgrad.sin(x) if k % 2 == 0 else symgrad.tanh(x) * 0.9 + 0.1
        return x.sum()

    x = np.linspace(-2.0, 2.0, 64)
    few = symgrad.value_and_grad(lambda t: chain(t, 4))
    many = symgrad.value_and_grad(lambda t: chain(t, 2 * MAX_VECTOR_CALLS))
    few(x)
    value, grad = many(x)
    few_src = list(few.compiled._kernels.values())[0].joint_source
    many_src = list(many.compiled._kernels.values())[0].joint_source
    assert "vsin_f64(" in few_src
    assert "vsin_f64(" not in many_src and "vtanh_f64(" not in many_src and " sin(" in many_src
    t = symgrad.tensor(x, requires_grad=True)
    ref = chain(t, 2 * MAX_VECTOR_CALLS)
    ref.backward()
    np.testing.assert_allclose(value, ref.item(), rtol=1e-12)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("shape", ["reduce", "matmul"])   # (the elementwise chain is one loop: no buffers)
@pytest.mark.parametrize("parallel", [False, "auto"])
def test_buffer_pool_reuses_the_lowest_free_slot(monkeypatch, shape, parallel):
    """Each array goes to the lowest-numbered buffer of its shape and dtype whose value is read no
    more (checked against a scan of every buffer at every request), and buffers are reused."""
    from benchmarks.trace_cost import example_input, make_loss
    from codegen import numba_emit
    from symgrad.compiler.autodiff import autodiff

    found = []
    pick = numba_emit._BufferPool._free_slot

    def checked(pool, spec, now):
        got = pick(pool, spec, now)
        free = [i for i, (owner, s) in enumerate(zip(pool.owner, pool.shapes))
                if s == spec and pool.last_use(owner) < now]
        assert got == (free[0] if free else None)
        found.append(got)
        return got

    monkeypatch.setattr(numba_emit._BufferPool, "_free_slot", checked)
    joint = autodiff(symgrad.trace(make_loss(shape, 40, symgrad), example_input(shape)), [0])
    emit_numba(joint, "joint", parallel=parallel)
    assert found and any(slot is not None for slot in found)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("keepdim", [True, False])
def test_partial_reductions_keep_their_shape_and_dtype(dtype, keepdim):
    """A float64 reduction over some dims with keepdim is the loop's accumulator as it is; the other
    cases are reshaped or cast in the glue."""
    r = np.random.default_rng(4)
    x = r.standard_normal((5, 6, 7)).astype(dtype)

    def f(x):
        y = symgrad.exp(x * 0.5)
        return y.sum(dim=1, keepdim=keepdim), (y * x).mean(dim=(0, 2), keepdim=keepdim), y.sum(dim=2, keepdim=keepdim)

    g = symgrad.trace(f, x)
    e = emit_numba(g, "forward")
    outs = e.compile(cache=False)(x)
    y = np.exp(x.astype(np.float64) * 0.5)
    wants = [y.sum(axis=1, keepdims=keepdim), (y * x).mean(axis=(0, 2), keepdims=keepdim),
             y.sum(axis=2, keepdims=keepdim)]
    for got, want in zip(outs, wants):
        assert isinstance(got, np.ndarray) and got.dtype == dtype and got.shape == want.shape
        assert_close(got, want, RTOL[dtype])
    assert (".reshape(" in e.source) == (not keepdim or dtype == np.float32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matrix_products_write_into_pooled_buffers(dtype):
    """Intermediate ``mm``/``bmm`` results go into the buffer pool (``np.matmul(..., out=buf_[k])``);
    returned ones (and views of them) never do, so a later call cannot change an earlier call's results."""
    def loss(A, B, C):
        return symgrad.sum(symgrad.tanh(symgrad.tanh(A @ B) @ C) ** 2)

    r = np.random.default_rng(3)
    vg = symgrad.value_and_grad(symgrad.compile(loss, parallel=False), argnums=(0, 1, 2))
    shapes = [(2, 6, 5), (2, 5, 4), (2, 4, 3)]
    calls = [[r.standard_normal(s).astype(dtype) for s in shapes] for _ in range(2)]
    results = [vg(*args) for args in calls]   # both calls made before either is checked
    for args, (value, grads) in zip(calls, results):
        ts = [symgrad.tensor(a, requires_grad=True) for a in args]
        ref = loss(*ts)
        ref.backward()
        assert_close(value, ref.item(), RTOL[dtype])
        for got, t in zip(grads, ts):
            assert got.dtype == dtype
            assert_close(got, t.grad.numpy(), RTOL[dtype])
    src = vg.compiled.kernels_for(*calls[0], wrt=[0, 1, 2], joint_kernel=True).joint_source
    assert re.search(r"= np\.matmul\(\w+, \w+, out=buf_\[\d+\]\)", src)
    returned = re.search(r"return \((.*)\)", src).group(1).replace(" ", "").split(",")
    for name in filter(None, returned[1:]):
        assert not re.search(rf"\b{name} = np\.matmul\(.*out=buf_", src)
