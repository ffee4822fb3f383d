"""Piecewise ops at their special values: the regression suite for the rule table's selections.

Every op whose gradient is piecewise (relu, abs, the clamp family, maximum/minimum, the activations with
kinks, the piecewise losses, rounding) runs at nan, +-inf, +-0, at each of its kinks and at the floats
either side of them, with incoming gradients 1, -1.5 and 0 (0 is the masking idiom
``where(isnan(x), 0, f(x))``).  Values, first and second derivatives are compared with PyTorch:

* eagerly (``backward`` with ``create_graph=True``, then again);
* compiled with the numpy backend and with the Numba backend: a function returning the value and its
  first and second derivatives (``symgrad.grad`` nested inside ``symgrad.compile``), the tensor API
  (``compile`` of the op, ``y.backward(w)``: the split forward and backward kernels) and
  ``symgrad.value_and_grad`` (the joint kernel); for Numba both tiers: the numpy code a tiered build
  runs first and the kernels that replace it, which must agree;

in float64 and in float32.  A gradient must never depend on the backend or the tier.

The reference is PyTorch on one-element tensors, one point at a time: that runs PyTorch's scalar
kernels, whose code is the definition the table follows.  PyTorch's vectorised CPU loops of hardtanh
(relu6), hardswish and elu (celu, selu) differ from their own scalar code at nan (0 or nan where the
scalar code passes the gradient), so on longer tensors PyTorch's answer at nan depends on the position.
Signs of zeros are not compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

import symgrad

NAN, INF = math.nan, math.inf
SPECIAL = (NAN, INF, -INF, 0.0, -0.0)
REGULAR = (-2.5, -0.7, 0.3, 1.7)
WEIGHTS = (1.0, -1.5, 0.0)
RTOL = {np.float64: 1e-9, np.float32: 2e-5}


@dataclass(frozen=True)
class Op:
    """One piecewise op: ``fn(L, *inputs)`` with ``L`` the torch or the symgrad module.

    ``kinks``: where a unary op's pieces meet (tested at the kink and at the floats either side);
    ``points``: the input tuples of an op of several inputs; ``symgrad_fn``: symgrad's spelling when it
    is not torch's (numpy functions on traced values); ``second``: False where torch has no second
    derivative (then the expected one is 0: the op is piecewise linear); ``rtol``: per dtype, when
    torch's own rounding is coarser than RTOL."""

    name: str
    fn: Callable
    kinks: tuple = ()
    points: tuple | None = None
    symgrad_fn: Callable | None = None
    second: bool = True
    rtol: dict = field(default_factory=dict)

    @property
    def n_inputs(self) -> int:
        return 1 if self.points is None else len(self.points[0])

    def symgrad_call(self, *xs):
        return (self.symgrad_fn or self.fn)(symgrad, *xs)


def _nnf(name, **kw):
    return lambda L, x: getattr(L.nn.functional, name)(x, **kw)


def _loss(name, **kw):
    return lambda L, x: getattr(L.nn.functional, name)(x, L.zeros_like(x), **kw)


_PAIR_VALUES = (NAN, INF, -INF, 0.0, -0.0, 1.0, -2.0, 2.0)
PAIRS = tuple((a, b) for a in _PAIR_VALUES for b in _PAIR_VALUES)
_BOUNDS = ((-1.0, 1.0), (1.0, -1.0), (0.0, 0.0), (1.0, 1.0), (NAN, 1.0), (-1.0, NAN), (-INF, INF), (INF, -INF),
           (-INF, 1.0), (-1.0, INF), (INF, INF), (-INF, -INF))
TRIPLES = tuple((x, lo, hi) for x in (NAN, INF, -INF, 0.0, 1.0, -1.0, 2.0, -2.0) for lo, hi in _BOUNDS)
# A missing max is passed as +inf, so where a tensor min is +inf itself min < max fails and the gradient
# is lost where PyTorch (which knows max is missing) gives it to min: that one point is left out.
MIN_ONLY = tuple((x, lo) for x in _PAIR_VALUES for lo in _PAIR_VALUES if lo != INF)
MAX_ONLY = PAIRS


def _const(L, x, value):
    return L.tensor(value, dtype=x.dtype)


OPS = [
    Op("relu", lambda L, x: L.relu(x), (0.0,)),
    Op("relu6", _nnf("relu6"), (0.0, 6.0)),
    Op("abs", lambda L, x: L.abs(x), (0.0,)),
    Op("clamp", lambda L, x: L.clamp(x, -1.0, 1.0), (-1.0, 1.0)),
    Op("clamp_min_only", lambda L, x: L.clamp(x, min=0.5), (0.5,)),
    Op("clamp_max_only", lambda L, x: L.clamp(x, max=0.5), (0.5,)),
    Op("clamp_min_above_max", lambda L, x: L.clamp(x, 1.0, -1.0), (1.0, -1.0)),
    Op("clamp_int_bounds_min_above_max", lambda L, x: L.clamp(x, 1, -1), (1.0, -1.0)),
    Op("clamp_min", lambda L, x: L.clamp_min(x, 0.5), (0.5,)),
    Op("clamp_max", lambda L, x: L.clamp_max(x, -0.5), (-0.5,)),
    Op("clamp_tensor_bounds", lambda L, x, lo, hi: L.clamp(x, lo, hi), points=TRIPLES),
    Op("clamp_tensor_min", lambda L, x, lo: L.clamp(x, min=lo), points=MIN_ONLY),
    Op("clamp_tensor_max", lambda L, x, hi: L.clamp(x, max=hi), points=MAX_ONLY),
    Op("where_isnan_clamp", lambda L, x: L.where(L.isnan(x), 0.0, L.clamp(x, -5.0, 5.0)), (-5.0, 5.0)),
    Op("maximum_constant", lambda L, x: L.maximum(x, _const(L, x, 2.0)), (2.0,)),
    Op("minimum_constant", lambda L, x: L.minimum(x, _const(L, x, 2.0)), (2.0,)),
    Op("maximum", lambda L, x, y: L.maximum(x, y), points=PAIRS),
    Op("minimum", lambda L, x, y: L.minimum(x, y), points=PAIRS),
    # numpy functions on symgrad values are the same table ops, with torch's gradients
    Op("np.maximum", lambda L, x: L.maximum(x, _const(L, x, 2.0)), (2.0,),
       symgrad_fn=lambda L, x: np.maximum(x, 2.0)),
    Op("np.clip", lambda L, x: L.clamp(x, -1.0, 1.0), (-1.0, 1.0), symgrad_fn=lambda L, x: np.clip(x, -1.0, 1.0)),
    Op("np.abs", lambda L, x: L.abs(x), (0.0,), symgrad_fn=lambda L, x: np.abs(x)),
    Op("leaky_relu", _nnf("leaky_relu", negative_slope=0.1), (0.0,)),
    Op("hardtanh", _nnf("hardtanh"), (-1.0, 1.0)),
    Op("hardtanh_asymmetric", _nnf("hardtanh", min_val=-0.5, max_val=2.0), (-0.5, 2.0)),
    Op("elu", _nnf("elu"), (0.0,)),
    Op("elu_alpha", _nnf("elu", alpha=0.5), (0.0,)),
    Op("celu", _nnf("celu", alpha=2.0), (0.0,)),
    Op("selu", _nnf("selu"), (0.0,)),
    Op("threshold", _nnf("threshold", threshold=1.0, value=-2.0), (1.0,)),
    # torch has no second derivative of hardsigmoid, and multiplies by 1/6 rounded to float32
    Op("hardsigmoid", _nnf("hardsigmoid"), (-3.0, 3.0), second=False, rtol={np.float64: 1e-7}),
    Op("hardswish", _nnf("hardswish"), (-3.0, 3.0)),
    Op("softplus", _nnf("softplus"), (20.0,)),
    Op("softplus_beta", _nnf("softplus", beta=2.0, threshold=10.0), (5.0,)),
    Op("huber_loss", _loss("huber_loss", reduction="none"), (-1.0, 1.0)),
    Op("huber_loss_delta", _loss("huber_loss", reduction="none", delta=0.5), (-0.5, 0.5)),
    Op("huber_loss_weighted", lambda L, x: L.nn.functional.huber_loss(
        x, L.zeros_like(x), reduction="none", delta=2.0, weight=L.full_like(x, 0.5)), (-2.0, 2.0)),
    Op("smooth_l1_loss", _loss("smooth_l1_loss", reduction="none"), (-1.0, 1.0)),
    Op("smooth_l1_loss_beta", _loss("smooth_l1_loss", reduction="none", beta=0.5), (-0.5, 0.5)),
    Op("smooth_l1_loss_beta_0", _loss("smooth_l1_loss", reduction="none", beta=0.0), (0.0,)),
    Op("l1_loss", _loss("l1_loss", reduction="none"), (0.0,)),
    Op("floor", lambda L, x: L.floor(x), (0.0, 1.0, -1.0)),
    Op("round", lambda L, x: L.round(x), (0.5, 1.5, -0.5)),
    Op("trunc", lambda L, x: L.trunc(x), (0.0, 1.0, -1.0)),
]
OPS_BY_NAME = {op.name: op for op in OPS}
DTYPES = [np.float64, np.float32]


def points(op: Op, dtype) -> list[tuple]:
    """The op's input tuples in ``dtype``: special values, kinks and their neighbours, a few others."""
    if op.points is not None:
        return [tuple(dtype(v) for v in p) for p in op.points]
    xs = [dtype(v) for v in SPECIAL + REGULAR]
    for k in op.kinks:
        k = dtype(k)
        xs += [k, np.nextafter(k, dtype(-INF)), np.nextafter(k, dtype(INF))]
    return [(x,) for x in xs]


@dataclass
class Results:
    """Per point (rows): the value, the first derivatives (one column per input) and the second ones
    (``d2[:, i, j]``: the derivative of the i-th first derivative with respect to input j)."""

    y: np.ndarray
    d1: np.ndarray
    d2: np.ndarray | None


def _columns(pts, w, dtype):
    """All points with each weight: the input columns and the weight column."""
    rows = [(p, wt) for wt in w for p in pts]
    cols = [np.array([p[i] for p, _ in rows], dtype=dtype) for i in range(len(pts[0]))]
    return cols, np.array([wt for _, wt in rows], dtype=dtype)


def torch_reference(op: Op, pts, dtype) -> Results:
    torch = pytest.importorskip("torch")
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    n = op.n_inputs
    ys, d1s, d2s = [], [], []
    for wt in WEIGHTS:
        for p in pts:
            xs = [torch.tensor([v], dtype=tdtype, requires_grad=True) for v in p]
            y = op.fn(torch, *xs)
            firsts = torch.autograd.grad((y * wt).sum(), xs, create_graph=True, allow_unused=True,
                                         materialize_grads=True)
            row = []
            for g in firsts:
                if op.second and g.requires_grad:
                    hs = torch.autograd.grad(g.sum(), xs, retain_graph=True, allow_unused=True,
                                             materialize_grads=True)
                    # torch's zero tensors have no storage of their own: add them to real zeros
                    row.append([float((torch.zeros(1, dtype=tdtype) + h.detach())[0]) for h in hs])
                else:
                    row.append([0.0] * n)
            ys.append(float(y.detach().reshape(-1)[0]))
            d1s.append([float(g.detach()[0]) for g in firsts])
            d2s.append(row)
    return Results(np.array(ys), np.array(d1s), np.array(d2s))


def _symgrad_eager(op: Op, pts, dtype) -> tuple[Results, list[str]]:
    cols, w = _columns(pts, WEIGHTS, dtype)
    xs = [symgrad.tensor(c, requires_grad=True) for c in cols]
    wt = symgrad.tensor(w)
    with np.errstate(all="ignore"):
        y = op.symgrad_call(*xs)
        firsts = symgrad.autograd.grad((y * wt).sum(), xs, create_graph=True, allow_unused=True)
        firsts = [symgrad.zeros_like(x) if g is None else g for x, g in zip(xs, firsts)]
        d2 = []
        for g in firsts:
            if not g.requires_grad:   # the first derivative is piecewise constant: no graph left
                d2.append([np.zeros(len(w))] * len(xs))
                continue
            hs = symgrad.autograd.grad(g.sum(), xs, retain_graph=True, allow_unused=True)
            d2.append([np.zeros(len(w)) if h is None else h.numpy() for h in hs])
    dtypes = _dtype_errors("eager", y, firsts, dtype)
    return Results(y.detach().numpy(), np.stack([g.detach().numpy() for g in firsts], -1),
                   np.transpose(np.array(d2, dtype=np.float64), (2, 0, 1))), dtypes


def _dtype_errors(where, y, grads, dtype) -> list[str]:
    want = np.dtype(dtype).name
    got = [str(np.asarray(v.detach().numpy() if hasattr(v, "detach") else v).dtype) for v in (y, *grads)]
    return [f"{where}: dtypes {got}, want {want}"] if any(g != want for g in got) else []


def compare(op: Op, got: Results, want: Results, pts, dtype, where: str) -> list[str]:
    """The points where ``got`` and ``want`` differ: nan where nan, the same infinities, finite values
    close (relative to the value, and absolutely near 0)."""
    rtol = op.rtol.get(dtype, RTOL[dtype])
    n_pts = len(pts)
    errors = []

    def check(what, g, w):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            same = (np.isnan(g) & np.isnan(w)) | (g == w) | \
                (np.isfinite(g) & np.isfinite(w) & (np.abs(g - w) <= rtol * np.maximum(np.abs(w), 1.0)))
        for k in np.flatnonzero(~same.reshape(len(same), -1).all(-1)):
            p, wt = pts[k % n_pts], WEIGHTS[k // n_pts]
            errors.append(f"{op.name} {where} {what} at {tuple(float(v) for v in p)} (incoming gradient {wt}): "
                          f"{g[k].tolist()}, torch {w[k].tolist()}")

    if got.y is not None:
        check("value", got.y, want.y)
    check("first derivative", got.d1, want.d1)
    if got.d2 is not None:
        check("second derivative", got.d2, want.d2)
    return errors


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(OPS_BY_NAME))
def test_eager_matches_torch(name, dtype):
    op = OPS_BY_NAME[name]
    pts = points(op, dtype)
    want = torch_reference(op, pts, dtype)
    got, errors = _symgrad_eager(op, pts, dtype)
    errors += compare(op, got, want, pts, dtype, "eager")
    assert not errors, f"{len(errors)} differences:\n" + "\n".join(errors[:40])


# --- compiled ---------------------------------------------------------------------------------------

def _derivatives_function(op: Op):
    """``f(*xs, w)`` returning the value, the first derivatives of ``sum(w * op(xs))`` and their own
    derivatives: one traced graph with two levels of differentiation."""
    n = op.n_inputs
    argnums = tuple(range(n))

    def f(*args):
        xs, w = args[:n], args[n]

        def loss(*zs):
            return (op.symgrad_call(*zs) * w).sum()

        firsts = symgrad.grad(loss, argnums=argnums)(*xs)
        seconds = [symgrad.grad(lambda *zs, i=i: symgrad.grad(loss, argnums=argnums)(*zs)[i].sum(),
                                argnums=argnums)(*xs) for i in range(n)]
        return (op.symgrad_call(*xs), *firsts, *(h for row in seconds for h in row))

    return f


def _unpack(op: Op, outs) -> Results:
    n = op.n_inputs
    outs = [np.asarray(o, dtype=np.float64) for o in outs]
    d1 = np.stack(outs[1:1 + n], -1)
    d2 = np.array([[outs[1 + n + i * n + j] for j in range(n)] for i in range(n)])
    return Results(outs[0], d1, np.transpose(d2, (2, 0, 1)))


def _compiled_runs(op: Op, pts, dtype, backend: str):
    """(label, Results, dtype errors) of every compiled path of ``backend``."""
    cols, w = _columns(pts, WEIGHTS, dtype)
    tiered = backend == "numba"
    runs = []
    with np.errstate(all="ignore"):
        # value, first and second derivatives in one compiled function
        f = symgrad.compile(_derivatives_function(op), backend=backend, tiered=tiered, cache=False)
        outs = f(*cols, w)
        runs.append(("derivatives" + (" (numpy tier)" if tiered else ""), _unpack(op, outs),
                     _dtype_errors("derivatives", outs[0], outs[1:], dtype)))
        if tiered:
            assert f.wait(300), f"{op.name}: the background build failed: {f.stats()['background_error']}"
            outs = f(*cols, w)
            assert all(hasattr(k.forward, "kernels") for k in f._kernels.values()), "still the numpy tier"
            runs.append(("derivatives (Numba tier)", _unpack(op, outs),
                         _dtype_errors("derivatives", outs[0], outs[1:], dtype)))

        # the tensor API: the op's output, backward with the weights (split forward and backward kernels)
        leaves = [symgrad.tensor(c, requires_grad=True) for c in cols]
        y = symgrad.compile(lambda *zs: op.symgrad_call(*zs), backend=backend, tiered=False, cache=False)(*leaves)
        y.backward(symgrad.tensor(w))
        grads = [symgrad.zeros_like(t) if t.grad is None else t.grad for t in leaves]
        d1 = np.stack([g.numpy() for g in grads], -1)
        runs.append(("compile + backward", Results(y.detach().numpy(), d1, None),
                     _dtype_errors("compile + backward", y, grads, dtype)))

        # value_and_grad: numpy in and out, the joint kernel (both tiers for Numba)
        def loss(*args):
            return (op.symgrad_call(*args[:-1]) * args[-1]).sum()

        vg = symgrad.value_and_grad(symgrad.compile(loss, backend=backend, tiered=tiered, cache=False),
                                    argnums=tuple(range(op.n_inputs)))
        for tier in (["numpy tier", "Numba tier"] if tiered else [""]):
            if tier == "Numba tier":
                assert vg.compiled.wait(300)
            value, grads = vg(*cols, w)
            d1 = np.stack([np.asarray(g) for g in grads], -1)
            runs.append((f"value_and_grad {tier}".strip(), Results(None, d1, None),   # the value is a float
                         _dtype_errors("value_and_grad", grads[0], grads[1:], dtype)))
    return runs


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(OPS_BY_NAME))
def test_compiled_matches_torch(name, dtype, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    op = OPS_BY_NAME[name]
    pts = points(op, dtype)
    want = torch_reference(op, pts, dtype)
    errors = []
    for label, got, dtype_errors in _compiled_runs(op, pts, dtype, backend):
        errors += dtype_errors
        errors += compare(op, got, want, pts, dtype, f"{backend} {label}")
    assert not errors, f"{len(errors)} differences:\n" + "\n".join(errors[:40])


# --- beyond the elementwise table ----------------------------------------------------------------

def test_heaviside_keeps_nan_in_every_backend():
    """numpy.heaviside's value at nan is nan; loop kernels gave the value at 0."""
    x = np.array([NAN, -INF, -1.0, -0.0, 0.0, 2.0, INF])
    want = np.heaviside(x, 0.5)

    def f(a):
        return np.heaviside(a, 0.5) * a

    eager = symgrad.heaviside(symgrad.tensor(x), symgrad.tensor(0.5)).numpy()
    np.testing.assert_array_equal(eager, want)
    for backend in ("numpy", "numba"):
        got = symgrad.compile(f, backend=backend, tiered=False, cache=False)(x)
        np.testing.assert_array_equal(np.asarray(got), want * x, err_msg=backend)


PROD_CASES = [([0.0, 2.0, 3.0], None), ([0.0, 0.0, 3.0], None), ([[0.0, 2.0], [3.0, 4.0]], 1),
              ([[0.0, 2.0], [3.0, 4.0]], 0), ([[0.0, 0.0, 5.0]], -1), ([2.0, -3.0, 4.0], None)]


@pytest.mark.parametrize("values,dim", PROD_CASES)
def test_second_derivatives_of_prod_at_zeros_match_torch(values, dim):
    """With a zero entry the gradient is the product of the other entries, itself differentiable."""
    torch = pytest.importorskip("torch")
    results = []
    for L in (torch, symgrad):
        x = L.tensor(values, dtype=L.float64, requires_grad=True)
        p = x.prod() if dim is None else x.prod(dim)
        (g,) = L.autograd.grad(p.sum(), x, create_graph=True)
        weights = L.tensor(np.arange(1.0, g.numel() + 1).reshape(tuple(g.shape)))
        (h,) = L.autograd.grad((g * weights).sum(), x)
        results.append((g.detach().numpy(), h.numpy()))
    (tg, th), (sg, sh) = results
    np.testing.assert_allclose(sg, tg, rtol=1e-12)
    np.testing.assert_allclose(sh, th, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(OPS_BY_NAME))
def test_first_gradients_are_in_the_graph_where_torchs_are(name):
    """Under ``create_graph`` a selected gradient (relu, hardtanh, ...) is differentiable again when
    torch's is (its backward op reads the input), so ``autograd.grad`` of it gives zeros, not an error."""
    torch = pytest.importorskip("torch")
    op = OPS_BY_NAME[name]
    seen = []
    for L in (symgrad, torch):
        xs = [L.tensor([0.7, -1.3, 2.5], dtype=L.float64, requires_grad=True) for _ in range(op.n_inputs)]
        out = op.symgrad_call(*xs) if L is symgrad else op.fn(L, *xs)
        grads = L.autograd.grad(out.sum(), xs, create_graph=True, allow_unused=True)
        seen.append(tuple(g is not None and g.requires_grad for g in grads))
        if L is symgrad and grads[0] is not None and grads[0].requires_grad:
            (h,) = L.autograd.grad(grads[0].sum(), xs[0], allow_unused=True)
            assert h is None or np.isfinite(h.numpy()).all()
    assert seen[0] == seen[1]
