"""Differential fuzzing of integer and bool tensors: as arguments that change between calls, mixed with
floats (type promotion, float exponents) and in bitwise ops.

* ``test_*_index_and_mask_arguments*``: programs that take an int64 index array (gather ``v[idx]``, scatter
  ``index_put(..., accumulate=True)`` with repeated indices) and a bool mask (``where(mask, v, 0.0)``,
  ``v * mask``) as arguments of the compiled function and of ``value_and_grad``, called again with other
  indices and masks: every call must match eager autograd (an index or a mask baked into the trace as a
  constant gives the first call's answer again).
* ``test_mixed_steps_match_torch`` / ``test_bitwise_steps_match_torch``: one step each (``v * i``,
  ``i ** 0.5``, ``0.7 ** i``, ``i & 10``, ``i << k``, ...), eager and compiled, against PyTorch: values,
  dtypes and the gradient with respect to the float input.  PyTorch is the oracle here, since eager
  symgrad itself may promote wrongly.
* ``test_random_mixed_expressions_match_torch``: random expressions over a float tensor, int tensors,
  bools and Python numbers, built alike with ``symgrad`` and ``torch``; eager and compiled against torch.

Profiles as in tests/test_fuzz.py: the default is quick, ``SYMGRAD_FUZZ=long`` runs many more examples.
"""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_profile import examples as _examples
from fuzz_profile import record, runs_dtype
from fuzz_profile import slow_when_long as _slow_when_long
from hypothesis import assume, given
from hypothesis import strategies as st

import symgrad

torch = pytest.importorskip("torch")


def _np(t):
    return np.asarray(t.detach().numpy())


def _dtype_name(t) -> str:
    return str(t.dtype).rsplit(".", 1)[-1]


def _compare(got, want, where, rtol=1e-6):
    """Shape, dtype name and values (nan where nan, exact for integers and bools)."""
    errors = []
    if tuple(got.shape) != tuple(want.shape):
        return [f"{where}: shape {tuple(got.shape)}, torch {tuple(want.shape)}"]
    if _dtype_name(got) != _dtype_name(want):
        errors.append(f"{where}: dtype {_dtype_name(got)}, torch {_dtype_name(want)}")
    g, w = _np(got), _np(want)
    if w.dtype.kind in "biu" and g.dtype.kind in "biu":
        if not np.array_equal(g.astype(np.int64), w.astype(np.int64)):
            errors.append(f"{where}: values {g.tolist()}, torch {w.tolist()}")
        return errors
    try:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=rtol, equal_nan=True)
    except AssertionError:
        errors.append(f"{where}: values {g.tolist()}, torch {w.tolist()}")
    return errors


# --- int64 indices and bool masks as arguments ---------------------------------------------------------

N, K = 5, 7   # v has N rows; an index array has K entries (so some repeat)


def _index_program_steps(draw):
    """Statements over ``x`` (starting as v, shape (N,) or (N, 3)), reading ``idx`` and ``mask``."""
    lines, rows = [], N
    for _ in range(draw(st.integers(1, 5))):
        options = ["tanh", "square"]
        options += ["gather"] if rows == N else ["scatter", "scatter_into_v"]
        options += ["where_mask", "mul_mask", "where_not_mask", "mask_float"] if rows == N else []
        step = draw(st.sampled_from(options))
        if step == "tanh":
            lines.append("x = symgrad.tanh(x)")
        elif step == "square":
            lines.append("x = x * x + 0.5")
        elif step == "gather":
            lines.append(draw(st.sampled_from(["x = x[idx]", "x = x[idx, ...]"])))
            rows = K
        elif step == "scatter":  # repeated indices add up
            lines.append("x = symgrad.index_put(symgrad.zeros(v.shape, dtype=v.dtype), (idx,), x, accumulate=True)")
            rows = N
        elif step == "scatter_into_v":
            lines.append("x = symgrad.index_put(v * 0.5, (idx,), x, accumulate=True)")
            rows = N
        elif step == "where_mask":
            lines.append("x = symgrad.where(mask, x, 0.0)")
        elif step == "where_not_mask":
            lines.append("x = symgrad.where(~mask, x, x * 2.0)")
        elif step == "mul_mask":
            lines.append("x = x * mask")
        else:
            lines.append("x = x + mask.to(x.dtype)")
    if rows == K:
        lines.append("x = x.sum(0)")
    return lines


@st.composite
def index_programs(draw):
    cols = draw(st.sampled_from([(), (3,)]))
    lines = _index_program_steps(draw)
    backend = draw(st.sampled_from(["numba", "numba", "numpy"]))
    strategy = draw(st.sampled_from(["joint", "split"]))
    return cols, tuple(lines), backend, strategy, draw(st.integers(0, 2 ** 32 - 1))


def _index_function(lines):
    src = "def program(v, idx, mask):\n    x = v\n" + "".join(f"    {ln}\n" for ln in lines) + \
        "    return (x * W[:x.shape[0]] if x.shape and x.shape[0] == N else x).sum()\n"
    return src


def _index_values(rng, cols, index_dtype=np.int64):
    idx = rng.integers(-N, N, K).astype(index_dtype)
    mask = rng.random((N, *cols)) < 0.5
    return idx, mask


def run_index_program(cols, lines, backend, strategy, seed, calls=3):
    rng = np.random.default_rng(seed)
    src = _index_function(lines)
    ns = {"symgrad": symgrad, "N": N, "W": symgrad.tensor(rng.standard_normal((N, *cols)))}
    exec(compile(src, "<index program>", "exec"), ns)
    fn = ns["program"]
    compiled = symgrad.compile(fn, backend=backend, scalar_loss=strategy)
    vg = symgrad.value_and_grad(compiled, argnums=0)
    where0 = f"\n{src}backend={backend}, scalar_loss={strategy}"
    for call in range(calls):
        v = rng.uniform(0.5, 1.5, (N, *cols))
        idx, mask = _index_values(rng, cols)
        where = f"call {call + 1} (idx={idx.tolist()}, mask={mask.astype(int).tolist()}){where0}"
        t = symgrad.tensor(v, requires_grad=True)
        want = fn(t, symgrad.tensor(idx), symgrad.tensor(mask))
        want.backward()
        want_grad = t.grad.numpy()
        # the compiled kernels' tanh/exp differ from numpy's by an ulp, and 1 - tanh(x)**2 near saturation
        # cancels it into a larger relative error: an absolute tolerance on the gradient's scale
        atol = 1e-12 * max(1.0, float(np.abs(want_grad).max(initial=0.0)))
        t2 = symgrad.tensor(v, requires_grad=True)
        got = compiled(t2, symgrad.tensor(idx), symgrad.tensor(mask))
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12, err_msg=f"compiled value, {where}")
        np.testing.assert_allclose(t2.grad.numpy(), want_grad, rtol=1e-12, atol=atol,
                                   err_msg=f"compiled gradient, {where}")
        value, grad = vg(v, idx, mask)
        np.testing.assert_allclose(value, want.item(), rtol=1e-12, err_msg=f"value_and_grad value, {where}")
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=atol,
                                   err_msg=f"value_and_grad gradient, {where}")


INDEX_KNOWN = {
    "gather_scatter": ("x = x[idx]", "x = symgrad.tanh(x)",
                       "x = symgrad.index_put(symgrad.zeros(v.shape, dtype=v.dtype), (idx,), x, accumulate=True)"),
    "masks": ("x = symgrad.where(mask, x, 0.0)", "x = symgrad.tanh(x)", "x = x * mask"),
}


@pytest.mark.parametrize("name", INDEX_KNOWN)
def test_index_and_mask_arguments_change_between_calls(name):
    run_index_program((), INDEX_KNOWN[name], "numba", "joint", 5)


@_slow_when_long
@pytest.mark.skipif(not runs_dtype("float64"), reason="float64 programs")
@_examples(4)
@given(index_programs())
def test_random_programs_with_index_and_mask_arguments(prog):
    run_index_program(*prog)
    record("index_and_mask_arguments", "float64")


# --- mixed int/bool/float steps against torch ----------------------------------------------------------

def _mixed_inputs(rng, shape=(4,)):
    v = rng.uniform(0.5, 1.5, shape)
    i = rng.integers(1, 5, shape)            # 1..4: positive bases and exponents
    j = rng.integers(-9, 13, shape)          # signed bit patterns
    k = rng.integers(0, 4, shape)            # shift amounts
    return v, i, j, k


def _run_both(code, v, i, j, k, *, compiled_backend=None, cotangent_seed=0):
    """``code`` (an expression over v, i, j, k and X, the module) with symgrad and with torch; returns
    a list of mismatches (empty when all agree)."""
    env_s = {"X": symgrad, "v": symgrad.tensor(v, requires_grad=True), "i": symgrad.tensor(i),
             "j": symgrad.tensor(j), "k": symgrad.tensor(k)}
    env_t = {"X": torch, "v": torch.tensor(v, requires_grad=True), "i": torch.tensor(i),
             "j": torch.tensor(j), "k": torch.tensor(k)}
    want = eval(code, dict(env_t))
    errors = []
    differentiable = want.requires_grad
    if differentiable:
        G = np.random.default_rng(cotangent_seed).standard_normal(tuple(want.shape))
        (want_grad,) = torch.autograd.grad(want, env_t["v"], torch.tensor(G, dtype=want.dtype))
    try:
        got = eval(code, dict(env_s))
    except Exception as exc:
        return [f"eager: {type(exc).__name__}: {exc}"]
    errors += _compare(got, want, "eager")
    if differentiable and not errors:
        if not got.requires_grad:
            errors.append("eager: the result does not require grad (torch's does)")
        else:
            got.backward(symgrad.tensor(G, dtype=got.dtype))
            grad = env_s["v"].grad
            errors += _compare(grad, want_grad, "eager gradient")
    if compiled_backend is not None:
        fn = eval(f"lambda v, i, j, k: {code}", {"X": symgrad})
        env_c = {n: symgrad.tensor(a, requires_grad=(n == "v")) for n, a in zip("vijk", (v, i, j, k))}
        try:
            got = symgrad.compile(fn, backend=compiled_backend)(*(env_c[n] for n in "vijk"))
            errors += _compare(got, want, f"compiled ({compiled_backend})")
            if differentiable and got.requires_grad:
                got.backward(symgrad.tensor(G, dtype=got.dtype))
                errors += _compare(env_c["v"].grad, want_grad, f"compiled ({compiled_backend}) gradient")
            elif differentiable:
                errors.append(f"compiled ({compiled_backend}): output does not require grad")
        except Exception as exc:
            errors.append(f"compiled ({compiled_backend}): {type(exc).__name__}: {str(exc)[:300]}")
    return errors


MIXED_STEPS = [
    "v * i", "i * v", "v + (i > 2)", "(i > 2) * v", "v - i", "i / 2", "i / v", "v / i", "i * 0.5", "i + 0.5",
    "i ** 0.5", "i ** 2", "i ** 2.0", "0.7 ** i", "2.0 ** i", "2 ** i", "v ** i", "i ** v", "v % 2.0",
    "(i > 2) + (i < 4)", "(i > 2) * 1.5", "X.exp(i * 0.1) * v", "X.sqrt(i) + v", "X.where(i > 2, v, i)",
    "X.maximum(v, i)", "i // 2", "i % 3", "v % i", "-i * v", "abs(j) + v",
]
BITWISE_STEPS = [
    "i & 10", "j & 10", "10 & j", "j | 3", "3 | j", "j ^ 5", "5 ^ j", "~j", "j << 2", "j >> 1", "2 << k",
    "j & i", "j | i", "j ^ i", "i << k", "j >> k", "(i > 2) & (j > 0)", "(i > 2) | (j > 0)", "(i > 2) ^ (j > 0)",
    "~(j > 0)", "(j & 6) * v", "v + (j | 1)",
]


def _check_steps(code, backend):
    rng = np.random.default_rng(abs(hash(code)) % 2 ** 32)
    v, i, j, k = _mixed_inputs(rng)
    with np.errstate(all="ignore"):
        errors = _run_both(code, v, i, j, k, compiled_backend=backend)
    assert not errors, f"{code}  (v={v.tolist()}, i={i.tolist()}, j={j.tolist()}, k={k.tolist()})\n" + \
        "\n".join(errors)


@pytest.mark.parametrize("code", MIXED_STEPS)
def test_mixed_steps_match_torch(code):
    _check_steps(code, "numpy")


@pytest.mark.parametrize("code", BITWISE_STEPS)
def test_bitwise_steps_match_torch(code):
    _check_steps(code, "numpy")


# random expressions: kinds "f" (float), "i" (int), "b" (bool)

_FLOAT_CONSTS = ["0.5", "0.7", "2.5", "-1.5"]
_INT_CONSTS = ["2", "3", "-1", "10"]


@st.composite
def mixed_expr(draw, depth=3):
    """(code, kind): a random well-typed expression over v (float64, requires grad), i (ints 1..4),
    j (ints -9..12), k (ints 0..3) and Python numbers."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.sampled_from(["v", "v", "i", "j", "k", "c_int", "c_float", "c_bool"]))
        if leaf == "c_int":
            return draw(st.sampled_from(_INT_CONSTS)), "ci"
        if leaf == "c_float":
            return draw(st.sampled_from(_FLOAT_CONSTS)), "cf"
        if leaf == "c_bool":
            return "True", "cb"
        return leaf, "f" if leaf == "v" else "i"
    a, ka = draw(mixed_expr(depth - 1))
    b, kb = draw(mixed_expr(depth - 1))
    if ka.startswith("c") and kb.startswith("c"):  # two Python numbers: use a tensor on one side
        b, kb = "i", "i"
    tensor_kinds = {ka.lstrip("c"), kb.lstrip("c")}
    ops = ["+", "-", "*", "/", "**", "cmp", "where", "unary"]
    if tensor_kinds <= {"i", "b"}:
        ops += ["&", "|", "^", "<<", ">>", "//", "%", "~"] * 2
    op = draw(st.sampled_from(ops))
    if op == "cmp":
        c = draw(st.sampled_from(["2", "0.9", "1"]))
        x, kx = (a, ka) if not ka.startswith("c") else (b, kb)
        return f"({x} {draw(st.sampled_from(['>', '<', '>=', '==']))} {c})", "b"
    if op == "where":
        x, kx = (a, ka) if not ka.startswith("c") else (b, kb)
        return f"X.where({x} > 1, {a}, {b})", "f" if "f" in (ka, kb, "cf") and "f" in ka + kb else "i"
    if op == "unary":
        x, kx = (a, ka) if not ka.startswith("c") else (b, kb)
        fn = draw(st.sampled_from(["X.tanh", "X.exp", "X.sin", "abs", "-", "X.sigmoid"]))
        if fn == "X.exp":
            return f"X.exp(X.tanh({x}))", "f"
        return f"{fn}({x})", "f" if fn.startswith("X.") else kx
    if op == "~":
        x, kx = (a, ka) if not ka.startswith("c") else (b, kb)
        return f"(~{x})", kx
    if op in ("<<", ">>"):
        return f"({a} {op} k)", "i"
    kind = "f" if "f" in ka + kb or op in ("/", "**") else "i"
    return f"({a} {op} {b})", kind


def _torch_ok(code, v, i, j, k) -> bool:
    """True when torch computes ``code`` without an error, with finite moderate values and gradient."""
    env = {"X": torch, "v": torch.tensor(v, requires_grad=True), "i": torch.tensor(i), "j": torch.tensor(j),
           "k": torch.tensor(k)}
    try:
        with np.errstate(all="ignore"):
            out = eval(code, env)
        if not isinstance(out, torch.Tensor):
            return False
        vals = out.detach().double()
        if not bool(torch.isfinite(vals).all()) or (vals.numel() and float(vals.abs().max()) > 1e6):
            return False
        if out.requires_grad:
            (g,) = torch.autograd.grad(out.sum(), env["v"], allow_unused=True)
            if g is not None and not bool(torch.isfinite(g).all()):
                return False
    except Exception:
        return False
    return True


@_slow_when_long
@pytest.mark.skipif(not runs_dtype("float64"), reason="float64 programs")
@_examples(25)
@given(mixed_expr(), st.sampled_from([(4,), (2, 3)]), st.sampled_from([None, None, "numpy", "numba"]),
       st.integers(0, 2 ** 32 - 1))
def test_random_mixed_expressions_match_torch(expr, shape, backend, seed):
    code, _ = expr
    v, i, j, k = _mixed_inputs(np.random.default_rng(seed), shape)
    assume(_torch_ok(code, v, i, j, k))
    with np.errstate(all="ignore"):
        errors = _run_both(code, v, i, j, k, compiled_backend=backend, cotangent_seed=seed)
    assert not errors, f"{code}  (v={v.tolist()}, i={i.tolist()}, j={j.tolist()}, k={k.tolist()})\n" + \
        "\n".join(errors)
    record("mixed_int_bool_float", "float64")
