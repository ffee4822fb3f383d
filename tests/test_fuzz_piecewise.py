"""Differential fuzzing of piecewise ops at special values: random elementwise programs over the ops of
tests/test_piecewise_special_values.py (relu, abs, the clamp family, maximum/minimum, the activations, the
piecewise losses, rounding), fed nan, +-inf, +-0, every kink of the ops the program uses and the floats
either side of them.

Each hypothesis example is a short program of two inputs (``Program.source()`` prints it, so a failure is
its own reproducer): piecewise ops chained with exact arithmetic (negation, sums and products of values,
products with powers of two, sums with halves), whose results feed later steps, so that infinities and
nans reach the piecewise ops from other ops too and incoming gradients are 0, infinite or nan.  No
elementary function sits between two steps: they round differently in different libraries, and a value
rounded to either side of a kink takes another branch.  Every program runs, in float64 or float32:

* eagerly, against PyTorch (one element at a time, PyTorch's scalar kernels: see the regression suite):
  the value, the first derivatives of ``sum(w * program)`` (``w`` random, zeros included) and their
  derivatives.  One difference is accepted: where PyTorch's first derivative is infinite or nan its
  second derivative may be nan where symgrad's is a number (``relu(x * x)`` at nan: PyTorch's relu
  gradient has a zero derivative along its saved result, which x * x's backward multiplies by nan;
  symgrad's selection has no derivative along its condition);
* compiled, against eager mode: value, first and second derivatives in one compiled function, and
  ``value_and_grad``, with the numpy backend or Numba (tiered or not: with tiers both are run).

Profiles as in tests/test_fuzz.py (tests/fuzz_profile.py): the default is a few examples, quick;
``SYMGRAD_FUZZ=long`` runs many more, and ``SYMGRAD_FUZZ_DTYPE`` fixes the dtype.
"""

from __future__ import annotations

import math

import fuzz_profile
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_piecewise_special_values import OPS, REGULAR, RTOL, SPECIAL

import symgrad

torch = pytest.importorskip("torch")

N = 5           # elements per input: one point of each input per element
UNARY = [op for op in OPS if op.points is None]
BINARY = {"maximum": 2, "minimum": 2, "clamp_tensor_bounds": 3}
OP_TORCH = {op.name: op.fn for op in OPS}
OP_SYMGRAD = {op.name: (op.symgrad_fn or op.fn) for op in OPS}
OP_BY_NAME = {op.name: op for op in OPS}
# torch has no second derivative of hardsigmoid (and multiplies by 1/6 rounded to float32)
NO_TORCH_SECOND = {"hardsigmoid"}


class Program:
    """Statements ``v<k> = ...`` over the inputs ``v0``, ``v1``; the last value is the output."""

    def __init__(self, lines: list[str], ops: list[str], dtype: str, inputs, weights, backend: str, tiered: bool):
        self.lines, self.ops, self.dtype = lines, ops, dtype
        self.inputs, self.weights, self.backend, self.tiered = inputs, weights, backend, tiered

    def source(self) -> str:
        body = "\n".join(f"    {line}" for line in self.lines)
        return f"def program(L, OP, v0, v1):\n{body}\n    return v{len(self.lines) + 1}"

    def function(self):
        ns: dict = {"math": math}
        exec(compile(self.source(), "<piecewise program>", "exec"), ns)
        return ns["program"]

    def __repr__(self) -> str:
        np.set_printoptions(precision=17)
        return (f"{self.source()}\n# {self.dtype}, inputs {[a.tolist() for a in self.inputs]}, "
                f"weights {self.weights.tolist()}, backend {self.backend}, tiered {self.tiered}")


@st.composite
def programs(draw):
    dtype = draw(fuzz_profile.dtype_names("float64", "float32"))
    lines, used = [], []
    n_values = 2
    for _ in range(draw(st.integers(1, 5))):
        def pick(n=n_values):   # an earlier value, drawn per operand
            return f"v{draw(st.integers(0, n - 1))}"

        kind = draw(st.sampled_from(["unary", "unary", "unary", "binary", "arithmetic"]))
        if kind == "unary":
            op = draw(st.sampled_from(UNARY))
            lines.append(f"v{n_values} = OP[{op.name!r}](L, {pick()})")
            used.append(op.name)
        elif kind == "binary":
            name = draw(st.sampled_from(sorted(BINARY)))
            args = ", ".join(pick() for _ in range(BINARY[name]))
            lines.append(f"v{n_values} = OP[{name!r}](L, {args})")
            used.append(name)
        else:
            form = draw(st.sampled_from(["{a} * {b}", "{a} + {b}", "-{a}", "{a} * {c}", "{a} + {h}"]))
            c, h = draw(st.sampled_from([2.0, -0.5, 4.0])), draw(st.sampled_from([0.5, -1.0, 1.5]))
            lines.append(f"v{n_values} = " + form.format(a=pick(), b=pick(), c=c, h=h))
        n_values += 1
    if not used:   # at least one piecewise op
        op = draw(st.sampled_from(UNARY))
        lines.append(f"v{n_values} = OP[{op.name!r}](L, v{n_values - 1})")
        used.append(op.name)
    # the inputs: special values, the kinks of the ops used and their neighbours, a few others
    np_dtype = np.dtype(dtype).type
    pool = [np_dtype(v) for v in SPECIAL + REGULAR]
    for name in used:
        for k in OP_BY_NAME[name].kinks:
            k = np_dtype(k)
            pool += [k, np.nextafter(k, np_dtype(-math.inf)), np.nextafter(k, np_dtype(math.inf))]
    if "clamp_tensor_bounds" in used or "maximum" in used or "minimum" in used:
        pool += [np_dtype(v) for v in (1.0, -1.0, 2.0, -2.0)]
    inputs = [np.array([draw(st.sampled_from(pool)) for _ in range(N)], dtype=np_dtype) for _ in range(2)]
    weights = np.array([draw(st.sampled_from([1.0, -1.5, 0.0, 2.0])) for _ in range(N)], dtype=np_dtype)
    backend = draw(st.sampled_from(["numpy", "numba", "numba"]))
    return Program(lines, used, dtype, inputs, weights, backend, draw(st.booleans()))


def _torch_derivatives(prog: Program):
    """Per element (one-element tensors): value, first derivatives (2) and second (2 x 2)."""
    fn = prog.function()
    tdtype = getattr(torch, prog.dtype)
    second = not (set(prog.ops) & NO_TORCH_SECOND)
    ys, d1s, d2s = [], [], []
    for k in range(N):
        xs = [torch.tensor([a[k]], dtype=tdtype, requires_grad=True) for a in prog.inputs]
        y = fn(torch, OP_TORCH, *xs)
        firsts = torch.autograd.grad((y * float(prog.weights[k])).sum(), xs, create_graph=True, allow_unused=True,
                                     materialize_grads=True)
        rows = []
        for g in firsts:
            if second and g.requires_grad:
                hs = torch.autograd.grad(g.sum(), xs, retain_graph=True, allow_unused=True, materialize_grads=True)
                rows.append([float((torch.zeros(1, dtype=tdtype) + h.detach())[0]) for h in hs])
            else:
                rows.append([0.0, 0.0])   # a piecewise constant first derivative, or none asked
        ys.append(float(y.detach()[0]))
        d1s.append([float(g.detach()[0]) for g in firsts])
        d2s.append(rows)
    return np.array(ys), np.array(d1s), (np.array(d2s) if second else None)


def _eager(prog: Program):
    fn = prog.function()
    xs = [symgrad.tensor(a, requires_grad=True) for a in prog.inputs]
    with np.errstate(all="ignore"):
        y = fn(symgrad, OP_SYMGRAD, *xs)
        firsts = symgrad.autograd.grad((y * symgrad.tensor(prog.weights)).sum(), xs, create_graph=True,
                                       allow_unused=True)
        firsts = [symgrad.zeros_like(x) if g is None else g for x, g in zip(xs, firsts)]
        rows = []
        for g in firsts:
            if not g.requires_grad:
                rows.append([np.zeros(N), np.zeros(N)])
                continue
            hs = symgrad.autograd.grad(g.sum(), xs, retain_graph=True, allow_unused=True)
            rows.append([np.zeros(N) if h is None else h.numpy() for h in hs])
    return (y.detach().numpy(), np.stack([g.detach().numpy() for g in firsts], -1),
            np.transpose(np.array(rows, dtype=np.float64), (2, 0, 1)))


def _compiled(prog: Program):
    """(label, value or None, first derivatives, second derivatives or None) of each compiled path."""
    fn = prog.function()
    w = prog.weights

    def loss(*zs):
        return (fn(symgrad, OP_SYMGRAD, *zs) * w).sum()

    def derivatives(a, b):
        firsts = symgrad.grad(loss, argnums=(0, 1))(a, b)
        seconds = [symgrad.grad(lambda *zs, i=i: symgrad.grad(loss, argnums=(0, 1))(*zs)[i].sum(),
                                argnums=(0, 1))(a, b) for i in range(2)]
        return (fn(symgrad, OP_SYMGRAD, a, b), *firsts, *(h for row in seconds for h in row))

    tiered = prog.backend == "numba" and prog.tiered
    options = dict(backend=prog.backend, tiered=tiered, cache=not tiered)
    runs = []
    with np.errstate(all="ignore"):
        f = symgrad.compile(derivatives, **options)
        vg = symgrad.value_and_grad(symgrad.compile(loss, **options), argnums=(0, 1))
        for tier in (["numpy tier", "Numba tier"] if tiered else [prog.backend]):
            if tier == "Numba tier":
                assert f.wait(300) and vg.compiled.wait(300), "a background build failed"
            outs = [np.asarray(o, dtype=np.float64) for o in f(*prog.inputs)]
            d2 = np.transpose(np.array([[outs[3], outs[4]], [outs[5], outs[6]]]), (2, 0, 1))
            runs.append((f"derivatives ({tier})", outs[0], np.stack(outs[1:3], -1), d2))
            _, grads = vg(*prog.inputs)
            runs.append((f"value_and_grad ({tier})", None, np.stack([np.asarray(g) for g in grads], -1), None))
    return runs


def _differences(what, got, want, rtol) -> list[str]:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        same = (np.isnan(got) & np.isnan(want)) | (got == want) | \
            (np.isfinite(got) & np.isfinite(want) & (np.abs(got - want) <= rtol * np.maximum(np.abs(want), 1.0)))
    bad = np.flatnonzero(~same.reshape(N, -1).all(-1))
    return [f"{what} at element {k}: {got[k].tolist()}, want {want[k].tolist()}" for k in bad]


def check(prog: Program) -> list[str]:
    rtol = RTOL[np.dtype(prog.dtype).type] * (100 if "hardsigmoid" in prog.ops else 1)
    errors = []
    ty, t1, t2 = _torch_derivatives(prog)
    ey, e1, e2 = _eager(prog)
    errors += _differences("eager value (torch)", ey, ty, rtol)
    errors += _differences("eager first derivatives (torch)", e1, t1, rtol)
    if t2 is not None:
        # where torch's first derivative is not finite, torch's second may be nan where symgrad's is a number:
        # torch's piecewise first derivative carries a zero derivative along its comparison's operand, and
        # that zero times an upstream inf or nan (x * x at nan) is nan; symgrad's comparisons carry none
        lenient = np.isnan(t2) & ~np.isfinite(t1).all(-1)[:, None, None]
        errors += _differences("eager second derivatives (torch)", np.where(lenient, np.nan, e2), t2, rtol)
    for label, y, d1, d2 in _compiled(prog):
        if y is not None:
            errors += _differences(f"{label} value (eager)", y, ey, rtol)
        errors += _differences(f"{label} first derivatives (eager)", d1, e1, rtol)
        if d2 is not None:
            errors += _differences(f"{label} second derivatives (eager)", d2, e2, rtol)
    return errors


@fuzz_profile.slow_when_long
@fuzz_profile.examples(4)
@given(programs())
def test_piecewise_programs_at_special_values(prog):
    errors = check(prog)
    assert not errors, f"{prog!r}\n" + "\n".join(errors)
    fuzz_profile.record("piecewise_special_values", prog.dtype)
