"""Differential tests at the edges, against PyTorch: reductions over one and over zero elements, and
second derivatives at 0 and at kinks.

* ``test_reductions_of_one_and_zero_elements_*``: sum, mean, prod, var/std (correction 0 and 1),
  logsumexp, amax/amin, softmax and log_softmax over inputs of shapes (1,), (1, 4), (4, 1), (0, 3), (0,),
  (3, 0) and (): over all elements and over each dim (amax/amin only where the reduced dims are not
  empty, since PyTorch raises there).  Eagerly (every case) and, on a sample drawn by hypothesis,
  compiled (Numba and numpy backends, joint and split) and through ``value_and_grad``: values (nan
  where PyTorch has nan: the mean of nothing), dtypes, gradient shapes and gradients.
* ``test_second_derivatives_match_torch``: for every unary op of the rule table, pow with exponents
  0, 1, 2, 0.5, 3 (scalar and tensor exponents, and a scalar base), and clamp at its bounds: first and
  second derivatives (``symgrad.autograd.grad(..., create_graph=True)`` twice) at 0, +-1, +-0.5 and at the
  kinks; a point where PyTorch's derivative is nan or infinite must be nan or the same infinity.

Profiles as in tests/test_fuzz.py: ``SYMGRAD_FUZZ=long`` compiles many more reduction cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_profile import BASE as _BASE
from fuzz_profile import LONG, N_LONG, record, runs_dtype
from fuzz_profile import slow_when_long as _slow_when_long
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad

torch = pytest.importorskip("torch")


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _close(got, want, rtol=1e-9, torch_nan_ok=False):
    """Same shape, nan where nan, the same infinities, finite values close.  ``torch_nan_ok``: where
    torch has nan, any value is accepted (a 0 * inf of torch's own masked formula, see below)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, torch {want.shape}"
    if torch_nan_ok:
        got = np.where(np.isnan(want), np.nan, got)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return f"{got.tolist()}, torch {want.tolist()} (nan differs)"
    inf = np.isinf(want)
    if not np.array_equal(got[inf], want[inf]) or np.isinf(got[~inf]).any():
        return f"{got.tolist()}, torch {want.tolist()} (infinities differ)"
    fin = np.isfinite(want)
    if not np.allclose(got[fin], want[fin], rtol=rtol, atol=rtol):
        return f"{got.tolist()}, torch {want.tolist()}"
    return None


# --- reductions over one and zero elements --------------------------------------------------------

EDGE_SHAPES = [(1,), (1, 4), (4, 1), (0, 3), (0,), (3, 0), ()]
EDGE_REDUCTIONS = ["sum", "mean", "prod", "var0", "var1", "std0", "std1", "logsumexp", "amax", "amin", "max",
                   "softmax", "log_softmax", "sum_sq"]


def _reduction_code(op, dim, keepdim):
    """An expression over x and X (the module: symgrad or torch); ``dim`` None reduces everything."""
    kd = "" if dim is None else f", keepdim={keepdim}"
    if op in ("sum", "mean", "prod"):
        return f"x.{op}()" if dim is None else f"x.{op}({dim}, keepdim={keepdim})"
    if op.startswith(("var", "std")):
        return f"x.{op[:3]}({'' if dim is None else f'{dim}, '}correction={op[3]}{kd})"
    if op == "logsumexp":
        dims = "tuple(range(x.dim())) or 0" if dim is None else str(dim)
        return f"X.logsumexp(x, {dims}{kd})"
    if op in ("amax", "amin"):
        return f"X.{op}(x)" if dim is None else f"X.{op}(x, {dim}{kd})"
    if op == "max":
        return "x.max()" if dim is None else f"x.max({dim}, keepdim={keepdim})[0]"
    if op in ("softmax", "log_softmax"):
        return f"X.{op}(x, {0 if dim is None else dim})"
    return "(x * x).sum()" if dim is None else f"(x * x).sum({dim}{kd})"


def _reduction_cases():
    cases = []
    for shape in EDGE_SHAPES:
        dims = [None] + list(range(-len(shape), len(shape))) if shape else [None, 0, -1]
        for op in EDGE_REDUCTIONS:
            for dim in dims:
                if op in ("softmax", "log_softmax") and dim is None and len(shape) > 1:
                    continue
                for keepdim in ([False, True] if dim is not None else [False]):
                    if op in ("amax", "amin", "max"):
                        reduced = shape if dim is None else ([shape[dim]] if shape else [])
                        if 0 in reduced:  # torch raises: no identity
                            continue
                    cases.append((shape, op, dim, keepdim))
    return cases


REDUCTION_CASES = _reduction_cases()


def _edge_input(shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape)


def _torch_reference(code, x, W):
    tx = torch.tensor(x, requires_grad=True)
    out = eval(code, {"X": torch, "x": tx})
    loss = (out * torch.tensor(W)).sum()
    (g,) = torch.autograd.grad(loss, tx, allow_unused=True)
    return out, loss, (torch.zeros_like(tx) if g is None else g)


def _weights(out_shape, seed=1):
    return np.random.default_rng(seed).standard_normal(out_shape)


def _check_eager(shape, code):
    x = _edge_input(shape)
    with torch.no_grad():
        out_shape = tuple(eval(code, {"X": torch, "x": torch.tensor(x)}).shape)
    W = _weights(out_shape)
    want, want_loss, want_grad = _torch_reference(code, x, W)
    errors = []
    sx = symgrad.tensor(x, requires_grad=True)
    try:
        with np.errstate(all="ignore"):
            got = eval(code, {"X": symgrad, "x": sx})
            loss = (got * symgrad.tensor(W)).sum()
            loss.backward()
    except Exception as exc:
        return [f"{code} on {shape}: {type(exc).__name__}: {exc}"]
    if str(got.dtype).rsplit(".", 1)[-1] != str(want.dtype).rsplit(".", 1)[-1]:
        errors.append(f"{code} on {shape}: dtype {got.dtype}, torch {want.dtype}")
    for what, g, w in (("value", _np(got), _np(want)),
                       ("gradient", np.zeros(shape) if sx.grad is None else _np(sx.grad), _np(want_grad))):
        msg = _close(g, w)
        if msg:
            errors.append(f"{code} on {shape}: {what} {msg}")
    return errors


def test_reductions_of_one_and_zero_elements_eager_match_torch():
    errors = []
    for shape, op, dim, keepdim in REDUCTION_CASES:
        errors += _check_eager(shape, _reduction_code(op, dim, keepdim))
    assert not errors, f"{len(errors)} of {len(REDUCTION_CASES)} cases differ from torch:\n" + "\n".join(errors)


def _check_compiled(shape, code, backend, strategy, parallel=False):
    x = _edge_input(shape)
    with torch.no_grad():
        out_shape = tuple(eval(code, {"X": torch, "x": torch.tensor(x)}).shape)
    W = _weights(out_shape)
    want, want_loss, want_grad = _torch_reference(code, x, W)
    fn = eval(f"lambda x, W: ({code} * W).sum()", {"X": symgrad})
    vector = eval(f"lambda x: {code}", {"X": symgrad})
    options = dict(backend=backend, scalar_loss=strategy, parallel=parallel)
    errors = []
    where = f"{code} on {shape}, {options}"
    with np.errstate(all="ignore"):
        try:  # a scalar loss through the tensor API
            sx = symgrad.tensor(x, requires_grad=True)
            loss = symgrad.compile(fn, **options)(sx, symgrad.tensor(W))
            loss.backward()
            for what, g, w in (("loss", _np(loss), _np(want_loss)), ("gradient", _np(sx.grad), _np(want_grad))):
                msg = _close(g, w)
                if msg:
                    errors.append(f"compiled {where}: {what} {msg}")
        except Exception as exc:
            errors.append(f"compiled {where}: {type(exc).__name__}: {str(exc)[:300]}")
        try:  # the reduction itself as the output, with W as the cotangent
            sx = symgrad.tensor(x, requires_grad=True)
            out = symgrad.compile(vector, **options)(sx)
            out.backward(symgrad.tensor(W))
            for what, g, w in (("value", _np(out), _np(want)), ("gradient", _np(sx.grad), _np(want_grad))):
                msg = _close(g, w)
                if msg:
                    errors.append(f"compiled output {where}: {what} {msg}")
        except Exception as exc:
            errors.append(f"compiled output {where}: {type(exc).__name__}: {str(exc)[:300]}")
        try:  # value_and_grad: numpy in and out
            value, grad = symgrad.value_and_grad(symgrad.compile(fn, **options))(x, W)
            for what, g, w in (("value", value, _np(want_loss)), ("gradient", grad, _np(want_grad))):
                msg = _close(g, w)
                if msg:
                    errors.append(f"value_and_grad {where}: {what} {msg}")
        except Exception as exc:
            errors.append(f"value_and_grad {where}: {type(exc).__name__}: {str(exc)[:300]}")
    return errors


# a traced prod refuses its gradient (it depends on where the zeros are): eager only
COMPILED_REDUCTION_CASES = [c for c in REDUCTION_CASES if c[1] != "prod"]


@_slow_when_long
@pytest.mark.skipif(not runs_dtype("float64"), reason="float64 programs")
@settings(max_examples=N_LONG if LONG else 4, **_BASE)
@given(st.sampled_from(COMPILED_REDUCTION_CASES), st.sampled_from(["numba", "numba", "numpy"]),
       st.sampled_from(["joint", "split"]))
def test_reductions_of_one_and_zero_elements_compiled_match_torch(case, backend, strategy):
    shape, op, dim, keepdim = case
    errors = _check_compiled(shape, _reduction_code(op, dim, keepdim), backend, strategy)
    assert not errors, "\n".join(errors)
    record("reductions_of_one_and_zero_elements", "float64")


def test_a_loss_over_zero_rows_compiles_like_numpy():
    """The mean of nothing is nan, the sum of nothing 0, the gradient of a (0, 3) input has shape (0, 3)."""
    def loss(x, w):
        return np.sum(np.tanh(x @ w) ** 2) + np.mean(np.log1p(np.exp(-x)))

    x, w = np.zeros((0, 3)), np.linspace(0.5, 1.5, 3)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    want = (torch.tanh(tx @ tw) ** 2).sum() + torch.log1p(torch.exp(-tx)).mean()
    want_gx, want_gw = torch.autograd.grad(want, (tx, tw))
    with np.errstate(all="ignore"):
        value, (gx, gw) = symgrad.value_and_grad(loss, argnums=(0, 1))(x, w)
    assert np.isnan(value) and np.isnan(want.item())
    assert gx.shape == (0, 3)
    np.testing.assert_allclose(gw, want_gw.numpy())


def test_std_of_one_element_with_correction_0():
    errors = []
    for code in ("x.std(correction=0)", "x.var(correction=0)", "x.std(0, correction=0)", "x.std(correction=1)"):
        errors += _check_eager((1,), code)
    assert not errors, "\n".join(errors)


# --- second derivatives at 0 and at kinks ----------------------------------------------------------

POINTS = [0.0, 1.0, -1.0, 0.5, -0.5]


# torch has no cbrt (tests/test_numpy_usage_elementwise.py checks it against numpy and scipy), and no
# double backward for hardsigmoid (tests/test_rules.py gradgradchecks it against finite differences)
_NO_TORCH_OP = ("cbrt", "hardsigmoid")
# points left out per op: at the poles of lgamma and digamma torch's polygamma returns a large finite
# number (6.6e32) where symgrad returns inf; outside logit's domain [0, 1] (where its value is nan) torch's
# gradient is nan and symgrad's is the formula's finite value
_LEFT_OUT = {"lgamma": {-1.0}, "digamma": {-1.0}, "logit": {-1.0, -0.5}}


def _unary_rule_ops():
    from symgrad.rules.table import load_rules

    ops = []
    for key, rule in load_rules().items():
        args = rule.schema.args
        # the unary ops of floating-point tensors (logical and bitwise not take bools and integers; the
        # linalg ops take matrices, and tests/test_numpy_usage_linalg.py checks their second derivatives)
        if len(args) == 1 and "Tensor" in str(args[0].type) and not key.endswith("_") and rule.formulas \
                and key.split(".")[0] not in ("logical_not", "bitwise_not", *_NO_TORCH_OP) \
                and not key.startswith("linalg_"):
            ops.append(key)
    return sorted(ops)


UNARY_OPS = _unary_rule_ops()


def _first(t) -> float:
    """The first element of a symgrad or torch tensor (torch's zero tensors included)."""
    t = t.detach()
    if isinstance(t, torch.Tensor):
        return float(t.reshape(-1)[0].item())
    return float(np.asarray(t.numpy()).reshape(-1)[0])


def _derivatives(mod, f, points, n_inputs=1):
    """Value, first derivatives and second derivatives of ``f`` at each point (rows: points), each
    input a 1-element float64 tensor that requires grad."""
    tensor = mod.tensor
    rows = []
    for pt in points:
        pt = pt if isinstance(pt, tuple) else (pt,)
        xs = [tensor([p], dtype=mod.float64, requires_grad=True) for p in pt[:n_inputs]]
        y = f(*xs, *pt[n_inputs:])
        grad = mod.autograd.grad
        firsts = grad(y.sum(), xs, create_graph=True, allow_unused=True)
        firsts = [mod.zeros(1, dtype=mod.float64) if g is None else g for g in firsts]
        seconds = []
        for g in firsts:
            if not g.requires_grad:
                seconds.append([0.0] * len(xs))
                continue
            hs = grad(g.sum(), xs, allow_unused=True)
            seconds.append([0.0 if h is None else _first(h) for h in hs])
        rows.append((_first(y), [_first(g) for g in firsts], seconds))
    return rows


def _compare_derivatives(name, s_fn, t_fn, points, n_inputs=1, torch_nan_ok=lambda pt: False):
    errors = []
    with np.errstate(all="ignore"):
        want = _derivatives(torch, t_fn, points, n_inputs)
        try:
            got = _derivatives(symgrad, s_fn, points, n_inputs)
        except Exception as exc:
            return [f"{name}: {type(exc).__name__}: {exc}"]
    for pt, (v, d1, d2), (wv, wd1, wd2) in zip(points, got, want):
        for what, g, w in (("value", v, wv), ("first derivative", d1, wd1), ("second derivative", d2, wd2)):
            msg = _close(g, w, torch_nan_ok=what == "second derivative" and torch_nan_ok(pt))
            if msg:
                errors.append(f"{name} at {pt}: {what} {msg}")
    return errors


_KINKS = {"abs": [0.0], "relu": [0.0], "sign": [0.0], "max": [0.0], "min": [0.0], "hardswish": [-3.0, 3.0],
          "selu": [0.0]}
_TORCH_NAMES = {"max": lambda x: x.max(), "min": lambda x: x.min(), "t": lambda x: x.t(),
                "squeeze": lambda x: x.squeeze(), "clone": lambda x: x.clone(),
                "gelu": lambda x: torch.nn.functional.gelu(x),
                "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
# table ops that both expose under torch.nn.functional rather than at the top level
_FUNCTIONAL_NAMES = {"silu": "silu", "mish": "mish", "log_sigmoid": "logsigmoid", "hardsigmoid": "hardsigmoid",
                     "hardswish": "hardswish", "selu": "selu"}
_TORCH_NAMES.update({op: (lambda x, f=f: getattr(torch.nn.functional, f)(x)) for op, f in _FUNCTIONAL_NAMES.items()})
_SYMGRAD_NAMES = {"gelu": lambda x: symgrad.nn.functional.gelu(x),
                  "gelu_tanh": lambda x: symgrad.nn.functional.gelu(x, approximate="tanh"),
                  **{op: (lambda x, f=f: getattr(symgrad.nn.functional, f)(x)) for op, f in _FUNCTIONAL_NAMES.items()}}


@pytest.mark.parametrize("op", UNARY_OPS)
def test_second_derivatives_match_torch(op):
    name = op.split(".")[0]
    t_fn = _TORCH_NAMES.get(name) or getattr(torch, name)
    s_fn = _SYMGRAD_NAMES.get(name) or getattr(symgrad, name, None) or (lambda x: getattr(x, name)())
    points = [p for p in POINTS if p not in _LEFT_OUT.get(name, ())]
    points += [p for p in _KINKS.get(name, []) if p not in points]
    errors = _compare_derivatives(op, s_fn, t_fn, points)
    assert not errors, "\n".join(errors)


POW_EXPONENTS = [0.0, 1.0, 2.0, 0.5, 3, 0, 2, -1.0, 1.5]


@pytest.mark.parametrize("form", ["Tensor_Scalar", "Tensor_Tensor", "Scalar"])
def test_second_derivatives_of_pow_match_torch(form):
    errors = []
    for p in POW_EXPONENTS:
        if form == "Tensor_Scalar":
            errors += _compare_derivatives(f"x ** {p!r}", lambda x, p=p: x ** p, lambda x, p=p: x ** p, POINTS)
        elif form == "Tensor_Tensor":  # both the base and the exponent require grad
            # at base 0 torch's exponent derivative is where(base == 0, 0, grad * result * log(base)): its
            # own derivative is 0 * -inf = nan there, where the true value is 0; a finite value is accepted
            pts = [(x, float(p)) for x in POINTS]
            errors += _compare_derivatives(f"x ** y (y = {p!r})", lambda x, y: x ** y, lambda x, y: x ** y, pts, 2,
                                           torch_nan_ok=lambda pt: pt[0] == 0.0)
        else:
            base = abs(float(p))
            errors += _compare_derivatives(f"{base!r} ** x", lambda x, b=base: b ** x, lambda x, b=base: b ** x,
                                           POINTS, torch_nan_ok=lambda pt, b=base: b == 0.0)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("form", ["clamp", "clamp_min", "clamp_max", "clamp_tensor"])
def test_second_derivatives_of_clamp_at_its_bounds_match_torch(form):
    lo, hi = -0.5, 1.0
    points = [lo, hi, 0.0, -1.0, 1.5]
    if form == "clamp":
        args = (lambda x: x.clamp(lo, hi),) * 2
    elif form == "clamp_min":
        args = (lambda x: symgrad.clamp_min(x, lo), lambda x: torch.clamp_min(x, lo))
    elif form == "clamp_max":
        args = (lambda x: symgrad.clamp_max(x, hi), lambda x: torch.clamp_max(x, hi))
    else:  # tensor bounds that require grad too
        pts = [(p, lo, hi) for p in points]
        errors = _compare_derivatives("clamp(x, a, b)", lambda x, a, b: x.clamp(a, b), lambda x, a, b: x.clamp(a, b),
                                      pts, 3)
        assert not errors, "\n".join(errors)
        return
    errors = _compare_derivatives(form, *args, points)
    assert not errors, "\n".join(errors)
