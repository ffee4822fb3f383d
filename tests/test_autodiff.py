"""Reverse mode over the IR (:func:`symgrad.compiler.autodiff.autodiff`): the joint graph against eager
``backward()`` and central finite differences.

a. every differentiable op of the rule table, on a weighted scalar loss;
b. random well-typed programs (hypothesis): broadcasting, reductions, matmul, reshapes,
   basic and advanced indexing, reused values, Python constants;
c. second order: Hessian-vector products by applying autodiff twice;
d. the joint graph's contract: None for unused inputs, only floating-point inputs
   differentiated, printable, ``simplify=True`` never adds nodes nor changes values.

Every joint graph is interpreted on *new* input values, not the traced ones.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import symgrad
from symgrad.compiler.autodiff import autodiff
from symgrad.ir import TraceError, interpret, replay, trace
from symgrad.ops.registry import apply


def _load_rules():
    """tests/test_rules.py as a module (tests/ is not a package: load it from its path if needed)."""
    for name in ("tests.test_rules", "test_rules", "_symgrad_test_rules"):
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "SAMPLES"):
            return mod
    path = Path(__file__).resolve().with_name("test_rules.py")
    spec = importlib.util.spec_from_file_location("_symgrad_test_rules", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


_rules = _load_rules()
SAMPLES, OPS = _rules.SAMPLES, _rules.OPS
KEYS = sorted(OPS)
DIFFERENTIABLE = [k for k in KEYS if OPS[k].rule.formulas]
# the traced gradient of prod depends on where the zeros are: autodiff refuses it on purpose
NO_TRACED_GRADIENT = {"prod", "prod.dim_int"}
sample_variants = _rules.sample_variants
DERIVED_INDEX = _rules.DERIVED_INDEX
differentiable_outputs = _rules.differentiable_outputs


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _grad_or_zeros(g, like: np.ndarray) -> np.ndarray:
    if g is None:
        return np.zeros(like.shape)
    return np.asarray(g._data if hasattr(g, "_data") else g)


def assert_close(got, want, rtol, where, atol_scale=1e-2):
    """Relative comparison; the absolute floor is ``rtol * atol_scale * max|want|`` (cancellation)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{where}: shape {got.shape} vs {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * atol_scale * max(scale, 1e-3), err_msg=where)


def assert_constants_match_their_types(graph) -> None:
    """Every constant node's data has exactly the dtype and shape its Value declares."""
    for node in graph.nodes:
        if node.op == "constant":
            v = node.output
            assert node.data.shape == v.shape and node.data.dtype == v.dtype.np, (
                f"constant %{v.name}: {v.type_str} holds {node.data.dtype}{list(node.data.shape)}\n{graph}")


# --- a. every differentiable op of the rule table ---------------------------------------------

class OpCall:
    """One op call whose array arguments (tensors, list items, integer index arrays) are inputs."""

    def __init__(self, key, args, index_inputs=True):
        self.key, self.op, self.index_inputs = key, OPS[key], index_inputs
        self.template = list(args)
        self.arrays, self.paths, self.diff = [], [], []
        formulas = self.op.rule.formulas
        for pos, (spec, v) in enumerate(zip(self.op.schema.args, args)):
            if spec.is_tensor_list:
                for k, arr in enumerate(v):
                    self._add(arr, (pos, k), spec.name in formulas)
            elif spec.is_tensor and isinstance(v, np.ndarray):
                self._add(v, (pos,), spec.name in formulas and v.dtype.kind == "f")
            elif spec.type == "Index" and index_inputs:
                self._index(v, (pos,))

    def _add(self, arr, path, diff):
        arr = np.asarray(arr)
        self.arrays.append(arr.astype(np.float64) if arr.dtype.kind == "f" else arr)
        self.paths.append(path)
        self.diff.append(diff)

    def _index(self, v, path):
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
            self._add(v, path, False)
        elif isinstance(v, tuple):
            for k, p in enumerate(v):
                self._index(p, path + (k,))

    @property
    def wrt(self) -> list[int]:
        return [i for i, d in enumerate(self.diff) if d]

    def build(self, tensors) -> tuple:
        args = [list(a) if isinstance(a, list) else a for a in self.template]
        for path, t in zip(self.paths, tensors):
            pos = path[0]
            if len(path) == 1:
                args[pos] = t
            elif isinstance(args[pos], list):
                args[pos][path[1]] = t
            else:
                args[pos] = _replace_in_tuple(args[pos], path[1:], t)
        return tuple(args)

    def outputs(self, tensors) -> tuple:
        out = apply(self.op, self.build(tensors))
        return out if isinstance(out, tuple) else (out,)

    def loss(self, weights):
        """``sum_k sum(out_k * W_k)`` over the differentiable outputs; the weights are constants."""

        def fn(*tensors):
            outs = self.outputs(tensors)
            total = None
            for k, w in zip(differentiable_outputs(self.op, len(outs)), weights):
                term = (outs[k] * symgrad.tensor(w)).sum()
                total = term if total is None else total + term
            return total

        return fn


def _replace_in_tuple(tup, path, value):
    items = list(tup)
    items[path[0]] = value if len(path) == 1 else _replace_in_tuple(items[path[0]], path[1:], value)
    return tuple(items)


def _eager_value_and_grads(fn, arrays, wrt):
    leaves = [symgrad.tensor(a, requires_grad=(i in wrt)) for i, a in enumerate(arrays)]
    loss = fn(*leaves)
    loss.backward()
    return loss._data, [_grad_or_zeros(leaves[i].grad, arrays[i]) for i in wrt]


def _eager_value(fn, arrays) -> float:
    with symgrad.no_grad():
        return float(fn(*[symgrad.tensor(a) for a in arrays])._data)


def _finite_difference_grads(fn, arrays, wrt, h=1e-6):
    grads = []
    for i in wrt:
        g = np.zeros(arrays[i].shape)
        for pos in np.ndindex(*arrays[i].shape):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[i][pos] += h
            minus[i][pos] -= h
            g[pos] = (_eager_value(fn, plus) - _eager_value(fn, minus)) / (2 * h)
        grads.append(g)
    return grads


def _has_index_array(key, args) -> bool:
    return len(OpCall(key, args, True).arrays) != len(OpCall(key, args, False).arrays)


def _op_params():
    out = []
    for key in DIFFERENTIABLE:
        if "shape_from_values" in OPS[key].rule.tags:
            continue   # refused by the tracer (tests/test_compile_differential.py checks the refusal)
        if key not in SAMPLES:
            out.append(pytest.param(key, -1, True, id=f"{key}-NO_SAMPLE"))
            continue
        for i, args in enumerate(sample_variants(key)):
            if key not in DERIVED_INDEX:
                out.append(pytest.param(key, i, True, id=f"{key}-{i}"))
            if _has_index_array(key, args):  # integer index arrays as graph inputs above, constants here
                out.append(pytest.param(key, i, False, id=f"{key}-{i}-const_index"))
    return out


@pytest.mark.parametrize("key,variant,index_inputs", _op_params())
def test_op_joint_graph_matches_eager_and_finite_differences(key, variant, index_inputs):
    if key not in SAMPLES:
        pytest.fail(f"op {key!r} has no entry in tests/test_rules.py SAMPLES", pytrace=False)
    call = OpCall(key, sample_variants(key)[variant], index_inputs)
    where = f"{key}[{variant}]" + ("" if index_inputs else " (constant index)")
    example_outs = call.outputs([symgrad.tensor(a) for a in call.arrays])
    rng = np.random.default_rng(_seed(key, variant))
    weights = [rng.standard_normal(example_outs[k].shape)
               for k in differentiable_outputs(call.op, len(example_outs))]
    fn = call.loss(weights)
    wrt = call.wrt
    assert wrt, f"{where}: no differentiable input"
    graph = trace(fn, *call.arrays)
    if key in NO_TRACED_GRADIENT:
        with pytest.raises(TraceError, match="prod"):
            autodiff(graph, wrt)
        return
    joint = autodiff(graph, wrt)
    n = len(call.arrays)
    assert [v.name for v in joint.placeholders[n:]] == ["tangent_0"], where
    assert len(joint.outputs) == 1 + len(wrt), where

    # new values of the same shapes (another seed); integer index arrays rotated
    fresh = []
    for a, b in zip(call.arrays, OpCall(key, sample_variants(key, salt=1)[variant], index_inputs).arrays):
        fresh.append(np.roll(a, 1) if a.dtype.kind in "iu" else b)
    got = interpret(joint, *fresh, np.ones(()))
    want_loss, want_grads = _eager_value_and_grads(fn, fresh, wrt)
    assert_close(got[0], want_loss, 1e-10, f"{where}: loss")
    for i, g_joint, g_eager in zip(wrt, got[1:], want_grads):
        assert_close(_grad_or_zeros(g_joint, fresh[i]), g_eager, 1e-10, f"{where}: gradient of input {i} vs eager")
    fd = _finite_difference_grads(fn, fresh, wrt)
    for i, g_joint, g_fd in zip(wrt, got[1:], fd):
        assert_close(_grad_or_zeros(g_joint, fresh[i]), g_fd, 1e-6, f"{where}: gradient of input {i} vs finite "
                     f"differences", atol_scale=1.0)


# --- b. random programs -----------------------------------------------------------------------

SHAPES = [(3, 1), (1, 4), (4,), (), (3, 4), (4, 3), (3,)]
MAX_NDIM, MAX_NUMEL, MAX_ABS = 3, 48, 60.0


@dataclass(frozen=True)
class Meta:
    """What the generator knows of a value: its shape and an interval holding every element
    for any inputs in [0.5, 1.5]."""

    shape: tuple
    lo: float
    hi: float


def _mul_iv(a, b):
    p = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(p), max(p)


def _square_iv(lo, hi):
    m = max(lo * lo, hi * hi)
    return (0.0 if lo <= 0 <= hi else min(lo * lo, hi * hi)), m


def _index_key_np(key):
    """The generator's hashable index description as a numpy index."""
    def part(p):
        if isinstance(p, tuple) and p and p[0] == "arr":
            return np.array(p[1], dtype=np.int64)
        return p
    return tuple(part(p) for p in key) if isinstance(key, tuple) else part(key)


def _shape_of(fn, *shapes):
    try:
        with np.errstate(all="ignore"):
            out = fn(*[np.zeros(s) for s in shapes])
    except (ValueError, IndexError, TypeError):
        return None
    s = np.shape(out)
    if len(s) > MAX_NDIM or math.prod(s) > MAX_NUMEL or math.prod(s) == 0:
        return None
    return tuple(s)


UNARY = ["neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "pow", "square", "abs", "relu", "clamp"]
BINARY = ["add", "sub", "mul", "div", "maximum"]
SCALAR = ["radd", "add", "rmul", "mul", "rsub", "sub", "div", "rdiv", "rpow"]
REDUCE = ["sum", "mean", "amax", "logsumexp", "sum_all", "mean_all", "sum_dims"]
SHAPE_OPS = ["reshape", "transpose", "t", "unsqueeze"]
INDEX = ["int", "slice", "slice_dim1", "ellipsis", "newaxis", "list", "array_dim1", "array_pair", "tensor_index"]
KINDS = ["unary"] * 4 + ["binary"] * 3 + ["scalar"] * 2 + ["reduce"] * 3 + ["matmul"] * 2 + ["shape"] * 2 + \
    ["index"] * 3
# kinds that need a value with at least one dimension
NEEDS_DIMS = {"reduce", "matmul", "shape", "index"}
CONSTS = [0.5, -1.5, 2.0, 0.3, 3, -2]


def _unary_step(draw, name, i, m: Meta):
    lo, hi = m.lo, m.hi
    if name == "neg":
        return ("neg", i), (-hi, -lo)
    if name == "exp":
        if hi > 3.5:
            return None
        return ("exp", i), (math.exp(lo), math.exp(hi))
    if name in ("log", "sqrt"):
        f = math.log if name == "log" else math.sqrt
        if lo >= 0.2:
            return (name, i), (f(lo), f(hi))
        how = draw(st.sampled_from(["sq", "exp"]))
        if how == "exp" and hi <= 3.5:  # positive through exp
            return (name + "_exp", i), (f(math.exp(lo)), f(math.exp(hi)))
        slo, shi = _square_iv(lo, hi)
        return (name + "_sq", i), (f(slo + 0.1), f(shi + 0.1))
    if name in ("sin", "cos"):
        return (name, i), (-1.0, 1.0)
    if name == "tanh":
        return ("tanh", i), (math.tanh(lo), math.tanh(hi))
    if name == "sigmoid":
        return ("sigmoid", i), (1 / (1 + math.exp(-lo)), 1 / (1 + math.exp(-hi)))
    if name == "square":
        return ("square", i), _square_iv(lo, hi)
    if name == "pow":
        p = draw(st.sampled_from([2, 3, 0.5, 1.5, -1, -0.5]))
        if not isinstance(p, int) or p < 0:
            if lo < 0.2:
                p = 2
        if p == 2:
            return ("pow", i, 2), _square_iv(lo, hi)
        if p == 3:
            return ("pow", i, 3), (lo ** 3, hi ** 3)
        ends = sorted((lo ** p, hi ** p))
        return ("pow", i, p), tuple(ends)
    if name == "abs":
        if lo >= 0:
            return ("abs", i), (lo, hi)
        if hi <= 0:
            return ("abs", i), (-hi, -lo)
        return ("abs", i), (0.0, max(-lo, hi))
    if name == "relu":
        return ("relu", i), (max(lo, 0.0), max(hi, 0.0))
    if name == "clamp":
        a = draw(st.sampled_from([-1.0, -0.4, 0.2, 0.8]))
        b = a + draw(st.sampled_from([0.35, 1.0, 2.5]))
        which = draw(st.sampled_from(["both", "min", "max"]))
        a2 = a if which != "max" else -math.inf
        b2 = b if which != "min" else math.inf
        return ("clamp", i, a2, b2), (min(max(lo, a2), b2), min(max(hi, a2), b2))
    raise AssertionError(name)


def _binary_iv(name, a, b):
    if name == "add":
        return a[0] + b[0], a[1] + b[1]
    if name == "sub":
        return a[0] - b[1], a[1] - b[0]
    if name == "mul":
        return _mul_iv(a, b)
    if name == "div":
        if not (b[0] > 0.3 or b[1] < -0.3):
            return None
        return _mul_iv(a, (1 / b[1], 1 / b[0]))
    if name == "maximum":
        return max(a[0], b[0]), max(a[1], b[1])
    raise AssertionError(name)


def _make_step(draw, kind, i, pool):
    """One step reading pool[i] (and maybe another value); None when it would be unsafe or ill-typed."""
    m = pool[i]
    s = m.shape
    if kind == "unary":
        res = _unary_step(draw, draw(st.sampled_from(UNARY)), i, m)
        if res is None:
            return None
        step, iv = res
        return step, s, iv
    if kind == "binary":
        name = draw(st.sampled_from(BINARY))
        fits = [j for j, o in enumerate(pool) if _shape_of(np.add, s, o.shape) is not None]
        j = draw(st.sampled_from(fits))  # i itself always fits: a reused value
        if draw(st.booleans()):
            i, j = j, i
        iv = _binary_iv(name, (pool[i].lo, pool[i].hi), (pool[j].lo, pool[j].hi))
        if iv is None:
            return None
        return (name, i, j), _shape_of(np.add, pool[i].shape, pool[j].shape), iv
    if kind == "scalar":
        name = draw(st.sampled_from(SCALAR))
        c = draw(st.sampled_from(CONSTS))
        lo, hi = m.lo, m.hi
        if name in ("radd", "add"):
            iv = (lo + c, hi + c)
        elif name in ("rmul", "mul"):
            iv = _mul_iv((lo, hi), (c, c))
        elif name == "rsub":
            iv = (c - hi, c - lo)
        elif name == "sub":
            iv = (lo - c, hi - c)
        elif name == "div":
            iv = _mul_iv((lo, hi), (1 / c, 1 / c))
        elif name == "rdiv":
            iv = _binary_iv("div", (c, c), (lo, hi))
        else:  # rpow: c ** x with a positive base
            c = abs(c)
            iv = tuple(sorted((c ** lo, c ** hi)))
            if max(abs(lo), abs(hi)) > 3:
                return None
        if iv is None:
            return None
        return ("scalar_" + name, i, c), s, iv
    if kind == "reduce":
        name = draw(st.sampled_from(REDUCE))
        n = math.prod(s)
        if name == "sum_all":
            return ("sum_all", i), (), (n * m.lo, n * m.hi)
        if name == "mean_all":
            return ("mean_all", i), (), (m.lo, m.hi)
        if not s:
            return None
        keepdim = draw(st.booleans())
        if name == "sum_dims":
            if len(s) < 2:
                return None
            dims = tuple(sorted(draw(st.sets(st.integers(0, len(s) - 1), min_size=1, max_size=len(s)))))
            k = math.prod(s[d] for d in dims)
            shape = _shape_of(lambda x: x.sum(axis=dims, keepdims=keepdim), s)
            return ("sum_dims", i, dims, keepdim), shape, (k * m.lo, k * m.hi)
        dim = draw(st.integers(-len(s), len(s) - 1))
        k = s[dim]
        shape = _shape_of(lambda x: x.sum(axis=dim, keepdims=keepdim), s)
        iv = {"sum": (k * m.lo, k * m.hi), "mean": (m.lo, m.hi), "amax": (m.lo, m.hi),
              "logsumexp": (m.lo, m.hi + math.log(k))}[name]
        return (name, i, dim, keepdim), shape, iv
    if kind == "matmul":
        fits = []
        for j, o in enumerate(pool):
            if _shape_of(np.matmul, s, o.shape) is not None:
                fits.append((i, j))
            if _shape_of(np.matmul, o.shape, s) is not None:
                fits.append((j, i))
        if fits:
            a, b = draw(st.sampled_from(fits))
            k = pool[a].shape[-1]
            p = _mul_iv((pool[a].lo, pool[a].hi), (pool[b].lo, pool[b].hi))
            return ("matmul", a, b), _shape_of(np.matmul, pool[a].shape, pool[b].shape), (k * p[0], k * p[1])
        if len(s) == 2:  # x @ x.T or x.T @ x: a value used twice
            left = draw(st.booleans())
            k = s[1] if left else s[0]
            p = _mul_iv((m.lo, m.hi), (m.lo, m.hi))
            shape = (s[0], s[0]) if left else (s[1], s[1])
            return ("matmul_t", i, left), shape, (k * p[0], k * p[1])
        return None
    if kind == "shape":
        name = draw(st.sampled_from(SHAPE_OPS))
        iv = (m.lo, m.hi)
        if name == "reshape":
            n = math.prod(s)
            options = [()] if n == 1 else []
            options += [(a,) for a in [n]] + [(a, n // a) for a in range(1, n + 1) if n % a == 0]
            options += [(a, b, n // (a * b)) for a in range(1, n + 1) for b in range(1, n + 1)
                        if n % (a * b) == 0]
            target = draw(st.sampled_from(options))
            if target and draw(st.booleans()):  # let reshape infer one size
                pos = draw(st.integers(0, len(target) - 1))
                target = tuple(-1 if k == pos else d for k, d in enumerate(target))
            return ("reshape", i, target), _shape_of(lambda x: x.reshape(target), s), iv
        if name == "transpose":
            if len(s) < 2:
                return None
            d0 = draw(st.integers(-len(s), len(s) - 1))
            d1 = draw(st.integers(-len(s), len(s) - 1))
            return ("transpose", i, d0, d1), _shape_of(lambda x: np.swapaxes(x, d0, d1), s), iv
        if name == "t":
            if len(s) > 2:
                return None
            return ("t", i), s[::-1], iv
        if len(s) >= MAX_NDIM:
            return None
        d = draw(st.integers(-len(s) - 1, len(s)))
        return ("unsqueeze", i, d), _shape_of(lambda x: np.expand_dims(x, d), s), iv
    if kind == "index":
        name = draw(st.sampled_from(INDEX))
        iv = (m.lo, m.hi)
        if not s:
            return None
        n0 = s[0]
        if name == "int":
            key = draw(st.integers(-n0, n0 - 1))
        elif name == "slice":
            start = draw(st.integers(0, n0 - 1))
            key = slice(start, draw(st.sampled_from([None] + list(range(start + 1, n0 + 1)))),
                        draw(st.sampled_from([None, 1, 2])))
        elif name == "slice_dim1":
            if len(s) < 2:
                return None
            key = (slice(None), draw(st.integers(-s[1], s[1] - 1)))
            if draw(st.booleans()):
                key = (slice(None), slice(draw(st.integers(0, s[1] - 1)), None))
        elif name == "ellipsis":
            key = (Ellipsis, slice(draw(st.integers(0, s[-1] - 1)), None, draw(st.sampled_from([1, 2]))))
        elif name == "newaxis":
            key = (None, slice(None)) if draw(st.booleans()) else (slice(None), None)
        elif name in ("list", "tensor_index"):
            idx = tuple(draw(st.lists(st.integers(-n0, n0 - 1), min_size=1, max_size=4)))
            key = ("list", idx) if name == "list" else ("tensor", idx)
            return ("index_adv", i, key), _shape_of(lambda x: x[np.array(idx)], s), iv
        elif name == "array_dim1":
            if len(s) < 2:
                return None
            idx = tuple(draw(st.lists(st.integers(0, s[1] - 1), min_size=1, max_size=4)))
            key = (slice(None), ("arr", idx))
        else:  # array_pair: two broadcast index arrays
            if len(s) < 2:
                return None
            k = draw(st.integers(1, 4))
            key = (("arr", tuple(draw(st.lists(st.integers(0, n0 - 1), min_size=k, max_size=k)))),
                   ("arr", tuple(draw(st.lists(st.integers(0, s[1] - 1), min_size=k, max_size=k)))))
        np_key = _index_key_np(key)
        return ("index", i, key), _shape_of(lambda x: x[np_key], s), iv
    raise AssertionError(kind)


@dataclass(frozen=True)
class Program:
    shapes: tuple
    steps: tuple
    seed: int

    def __repr__(self) -> str:
        lines = [f"Program(inputs={list(self.shapes)}, seed={self.seed})"]
        n = len(self.shapes)
        lines += [f"  v{n + k} = {step}" for k, step in enumerate(self.steps)]
        return "\n".join(lines)

    def weights(self, shape) -> np.ndarray:
        return np.random.default_rng(self.seed).standard_normal(shape)

    def function(self):
        """The program as a Python function of its inputs, returning the scalar loss."""

        def fn(*inputs):
            pool = list(inputs)
            for step in self.steps:
                pool.append(_run_step(step, pool))
            last = pool[-1]
            return (last * symgrad.tensor(self.weights(tuple(last.shape)))).sum()

        return fn


def _run_step(step, pool):
    name, i, *params = step
    x = pool[i]
    F = symgrad
    simple = {"neg": lambda: -x, "exp": lambda: F.exp(x), "log": lambda: F.log(x), "sqrt": lambda: F.sqrt(x),
              "sin": lambda: F.sin(x), "cos": lambda: F.cos(x), "tanh": lambda: F.tanh(x),
              "sigmoid": lambda: F.sigmoid(x), "square": lambda: x.square(), "abs": lambda: abs(x),
              "relu": lambda: F.relu(x),
              "log_sq": lambda: F.log(x * x + 0.1), "sqrt_sq": lambda: F.sqrt(x.square() + 0.1),
              "log_exp": lambda: F.log(F.exp(x)), "sqrt_exp": lambda: F.sqrt(F.exp(x)),
              "sum_all": lambda: x.sum(), "mean_all": lambda: F.mean(x), "t": lambda: x.t()}
    if name in simple:
        return simple[name]()
    if name == "pow":
        return x ** params[0]
    if name == "clamp":
        lo, hi = params
        if lo == -math.inf:
            return x.clamp(max=hi)
        if hi == math.inf:
            return F.clamp(x, min=lo)
        return x.clamp(lo, hi)
    if name in ("add", "sub", "mul", "div", "maximum"):
        y = pool[params[0]]
        return {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "div": lambda: x / y,
                "maximum": lambda: F.maximum(x, y)}[name]()
    if name.startswith("scalar_"):
        c = params[0]
        return {"radd": lambda: c + x, "add": lambda: x + c, "rmul": lambda: c * x, "mul": lambda: x * c,
                "rsub": lambda: c - x, "sub": lambda: x - c, "div": lambda: x / c, "rdiv": lambda: c / x,
                "rpow": lambda: c ** x}[name[7:]]()
    if name == "sum":
        return x.sum(params[0], keepdim=params[1])
    if name == "sum_dims":
        return F.sum(x, params[0], keepdim=params[1])
    if name == "mean":
        return x.mean(params[0], keepdim=params[1])
    if name == "amax":
        return F.amax(x, params[0], keepdim=params[1])
    if name == "logsumexp":
        return F.logsumexp(x, params[0], keepdim=params[1])
    if name == "matmul":
        return x @ pool[params[0]]
    if name == "matmul_t":
        return x @ x.t() if params[0] else x.t() @ x
    if name == "reshape":
        return x.reshape(params[0])
    if name == "transpose":
        return F.transpose(x, params[0], params[1])
    if name == "unsqueeze":
        return x.unsqueeze(params[0])
    if name == "index":
        return x[_index_key_np(params[0])]
    if name == "index_adv":
        how, idx = params[0]
        return x[list(idx)] if how == "list" else x[symgrad.tensor(np.array(idx, dtype=np.int64))]
    raise AssertionError(name)


@st.composite
def programs(draw):
    n_inputs = draw(st.integers(1, 3))
    shapes = tuple(draw(st.sampled_from(SHAPES)) for _ in range(n_inputs))
    pool = [Meta(s, 0.5, 1.5) for s in shapes]
    steps = []
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(KINDS))
        last = len(pool) - 1
        fits = [j for j, m in enumerate(pool) if m.shape or kind not in NEEDS_DIMS] or list(range(len(pool)))
        # often the newest value (long chains), else any earlier one (values used several times)
        i = draw(st.one_of(st.just(fits[-1]), st.sampled_from(fits))) if fits[-1] == last else \
            draw(st.sampled_from(fits))
        res = _make_step(draw, kind, i, pool)
        if res is not None and res[1] is not None and max(abs(res[2][0]), abs(res[2][1])) <= MAX_ABS:
            step, shape, (lo, hi) = res
        else:  # always safe: squash the value
            step, shape, (lo, hi) = ("tanh", i), pool[i].shape, (-1.0, 1.0)
        steps.append(step)
        pool.append(Meta(tuple(shape), float(lo), float(hi)))
    return Program(shapes, tuple(steps), draw(st.integers(0, 2 ** 32 - 1)))


def _inputs(rng, shapes):
    return [np.asarray(rng.uniform(0.5, 1.5, s), dtype=np.float64) for s in shapes]


@settings(max_examples=200, deadline=None, derandomize=True, database=None, print_blob=True,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],  # no example database, no patch files
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs(prog):
    fn = prog.function()
    rng = np.random.default_rng(prog.seed)
    example, fresh = _inputs(rng, prog.shapes), _inputs(rng, prog.shapes)
    n = len(example)
    graph = trace(fn, *example)
    joint = autodiff(graph)
    joint_plain = autodiff(graph, simplify=False)
    assert len(joint.nodes) <= len(joint_plain.nodes)
    assert_constants_match_their_types(joint)
    got = interpret(joint, *fresh, np.ones(()))
    got_plain = interpret(joint_plain, *fresh, np.ones(()))
    for a, b in zip(got, got_plain):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b, err_msg="simplify changed a value")

    # eager on the same fresh inputs
    want_loss, want_grads = _eager_value_and_grads(fn, fresh, list(range(n)))
    assert_close(got[0], want_loss, 1e-10, "loss vs eager")
    assert_close(interpret(graph, *fresh)[0], want_loss, 1e-10, "forward graph loss vs eager")
    grads = [_grad_or_zeros(g, a) for g, a in zip(got[1:], fresh)]
    for k, (g, w) in enumerate(zip(grads, want_grads)):
        assert_close(g, w, 1e-10, f"gradient of input {k} vs eager")

    # central finite differences along a few random directions
    h = 1e-6
    drng = np.random.default_rng(prog.seed + 1)
    for _ in range(3):
        d = [drng.standard_normal(a.shape) for a in fresh]
        f_plus = _eager_value(fn, [a + h * v for a, v in zip(fresh, d)])
        f_minus = _eager_value(fn, [a - h * v for a, v in zip(fresh, d)])
        fd = (f_plus - f_minus) / (2 * h)
        gd = sum(float(np.sum(g * v)) for g, v in zip(grads, d))
        scale = sum(float(np.sum(np.abs(g * v))) for g, v in zip(grads, d))
        tol = 1e-6 * max(abs(gd), scale) + 1e-9 * (1 + abs(float(want_loss)))
        assert abs(fd - gd) <= tol, f"directional derivative {gd} vs finite differences {fd}"


# --- c. second order: Hessian-vector products through autodiff twice --------------------------

def w1(x):
    return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()


def w2(x, w, b):
    return (symgrad.tanh(x * w + b) ** 2).mean()


HVP_CASES = {
    "W1": (w1, [(7,)]),
    "W1 matrix": (w1, [(3, 4)]),
    "W2": (w2, [(6, 5), (5,), (5,)]),
}


def _hvp_graphs(f, example):
    """J = autodiff(trace(f)); then H = autodiff(trace((x, v) -> sum_i <grad_i(x), v_i>))."""
    n = len(example)
    joint = autodiff(trace(f, *example))

    def grad_dot_v(*args):
        xs, vs = list(args[:n]), args[n:]
        outs = replay(joint, xs + [symgrad.tensor(np.ones(()))])
        total = None
        for g, v in zip(outs[1:], vs):
            term = (g * v).sum()
            total = term if total is None else total + term
        return total

    hvp = autodiff(trace(grad_dot_v, *example, *[np.ones_like(a) for a in example]), wrt=list(range(n)))
    return joint, hvp


@pytest.mark.parametrize("name", list(HVP_CASES))
def test_hessian_vector_products(name):
    f, shapes = HVP_CASES[name]
    rng = np.random.default_rng(_seed(name))
    example = [rng.uniform(-1.5, 1.5, s) for s in shapes]
    joint, hvp = _hvp_graphs(f, example)
    n = len(shapes)
    assert len(hvp.placeholders) == 2 * n + 1 and len(hvp.outputs) == 1 + n
    for _ in range(2):
        x = [rng.uniform(-1.5, 1.5, s) for s in shapes]
        v = [rng.standard_normal(s) for s in shapes]
        got = interpret(hvp, *x, *v, np.ones(()))
        grads = interpret(joint, *x, np.ones(()))[1:]
        assert_close(got[0], sum(np.sum(g * vi) for g, vi in zip(grads, v)), 1e-10, f"{name}: <grad, v>")
        # central differences of the gradient along v
        h = 1e-5
        g_plus = interpret(joint, *[a + h * b for a, b in zip(x, v)], np.ones(()))[1:]
        g_minus = interpret(joint, *[a - h * b for a, b in zip(x, v)], np.ones(()))[1:]
        # eager double backward
        leaves = [symgrad.tensor(a, requires_grad=True) for a in x]
        gs = symgrad.autograd.grad(f(*leaves), leaves, create_graph=True)
        total = sum((g * symgrad.tensor(vi)).sum() for g, vi in zip(gs, v))
        eager_hv = symgrad.autograd.grad(total, leaves, allow_unused=True)
        for k in range(n):
            fd = (g_plus[k] - g_minus[k]) / (2 * h)
            assert_close(got[1 + k], fd, 1e-6, f"{name}: Hv[{k}] vs finite differences", atol_scale=1.0)
            assert_close(got[1 + k], _grad_or_zeros(eager_hv[k], x[k]), 1e-10, f"{name}: Hv[{k}] vs eager")


def test_hvp_graph_takes_its_inputs_at_run_time():
    """The second-order graph holds no constant copy of the traced point."""
    x0 = np.linspace(-1, 1, 7)
    _, hvp = _hvp_graphs(w1, [x0])
    for node in hvp.nodes:
        if node.op == "constant" and node.data.shape == x0.shape:
            assert not np.allclose(node.data, x0), "the traced input was baked into the HVP graph"


# --- d. the joint graph's contract ------------------------------------------------------------

def _two_paths(x):
    """``a`` reaches the loss directly (first argument) and through ``b``: two paths to sum."""
    a = -x
    b = -a
    return symgrad.dot(a, b)


def test_engine_grad_sums_every_path():
    """autodiff differentiates with ``autograd.grad``: it must add the gradients of all paths, as
    ``backward()`` does (d/dx <-x, x> = -2x)."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    leaf = symgrad.tensor(x, requires_grad=True)
    _two_paths(leaf).backward()
    np.testing.assert_allclose(leaf.grad._data, -2 * x, rtol=1e-15)
    for create_graph in (False, True):
        leaf = symgrad.tensor(x, requires_grad=True)
        (g,) = symgrad.autograd.grad(_two_paths(leaf), leaf, create_graph=create_graph)
        np.testing.assert_allclose(g._data, -2 * x, rtol=1e-15,
                                   err_msg=f"autograd.grad(create_graph={create_graph})")


def test_joint_graph_sums_every_path():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    for simplify in (True, False):
        joint = autodiff(trace(_two_paths, x), simplify=simplify)
        loss, grad = interpret(joint, x + 1, np.ones(()))
        np.testing.assert_allclose(loss, -np.sum((x + 1) ** 2), rtol=1e-15)
        np.testing.assert_allclose(grad, -2 * (x + 1), rtol=1e-15, err_msg=f"simplify={simplify}")


@pytest.mark.parametrize("simplify", [True, False])
def test_scalar_input_gradient_keeps_its_shape(simplify):
    """A 0-d input's gradient is 0-d (pow's formula has an ``exponent == 0`` test on two numbers,
    which constant folding must keep 0-d)."""
    f = lambda x: ((-x).square() * 0.7).sum()  # noqa: E731
    joint = autodiff(trace(f, np.array(1.3)), simplify=simplify)
    assert_constants_match_their_types(joint)
    loss, grad = interpret(joint, np.array(-0.4), np.ones(()))
    assert grad.shape == () and loss.shape == ()
    np.testing.assert_allclose(grad, 1.4 * -0.4, rtol=1e-15)


def test_unused_inputs_give_none():
    x, y, z = np.linspace(0.5, 1.5, 3), np.ones(4), np.ones((2, 2))
    g = trace(lambda x, y, z: (x * x).sum() + z.sum() * 0.5, x, y, z)
    joint = autodiff(g)
    assert joint.outputs[2] is None
    assert joint.outputs[1] is not None and joint.outputs[3] is not None
    out = interpret(joint, x + 1, y, z, np.ones(()))
    assert out[2] is None
    np.testing.assert_allclose(out[1], 2 * (x + 1), rtol=1e-15)
    np.testing.assert_allclose(out[3], np.full((2, 2), 0.5), rtol=1e-15)


@pytest.mark.parametrize("how", ["comparison", "detach"])
def test_inputs_used_without_a_gradient_path_give_none(how):
    """As in torch.autograd.grad(allow_unused=True): no differentiable path, no gradient."""
    def f(x, y):
        gate = (y > 1.0) if how == "comparison" else y.detach()
        return (x * gate).sum()

    joint = autodiff(trace(f, np.ones(3), np.linspace(0, 2, 3)))
    assert joint.outputs[2] is None, str(joint)
    out = interpret(joint, np.full(3, 2.0), np.array([0.5, 1.5, 2.5]), np.ones(()))
    want_gate = np.array([0.0, 1.0, 1.0]) if how == "comparison" else np.array([0.5, 1.5, 2.5])
    np.testing.assert_allclose(out[1], want_gate, rtol=1e-15)


def test_non_float_inputs_are_not_differentiated():
    x = np.linspace(0.5, 1.5, 12).reshape(3, 4)
    i, m = np.array([0, 2, 2]), np.array([True, False, True, True])
    f = lambda x, i, m: (symgrad.where(m, x[i], -x[i]) * (i.sum() + 1)).sum()  # noqa: E731
    g = trace(f, x, i, m)
    joint = autodiff(g)
    assert joint.wrt == [0]
    assert [v.name for v in joint.placeholders] == ["x", "i", "m", "tangent_0"]
    assert len(joint.outputs) == 2
    x2, i2, m2 = x[::-1].copy(), np.array([1, 1, 0]), np.array([False, True, True, False])
    loss, grad = interpret(joint, x2, i2, m2, np.ones(()))
    want_loss, (want_grad,) = _eager_value_and_grads(f, [x2, i2, m2], [0])
    assert_close(loss, want_loss, 1e-12, "loss")
    assert_close(grad, want_grad, 1e-12, "gradient")
    for pos in (1, 2):
        with pytest.raises(TypeError):
            autodiff(g, wrt=[pos])


def test_the_joint_graph_declares_its_layout():
    """autodiff returns a JointGraph: a Graph whose primals, forward outputs, ``wrt`` and
    differentiated outputs are declared fields (a plain Graph has none of them)."""
    from symgrad.compiler.autodiff import value_and_grad_graph
    from symgrad.ir.graph import Graph, JointGraph

    def f(x, w, k):
        return (x * w).sum(), k * 2, symgrad.exp(x)

    g = trace(f, np.ones(3), np.ones(3), np.arange(3))
    assert type(g) is Graph and g.output_kind == "tuple"
    assert not any(hasattr(g, a) for a in ("n_primals", "n_forward_outputs", "wrt", "diff_outputs"))
    joint = autodiff(g, wrt=[1])
    assert isinstance(joint, JointGraph)
    assert (joint.n_primals, joint.n_forward_outputs, joint.wrt, joint.diff_outputs) == (3, 3, [1], [0, 2])
    assert [v.name for v in joint.placeholders] == ["x", "w", "k", "tangent_0", "tangent_1"]
    assert len(joint.outputs) == 3 + 1 and joint.output_kind == "tuple"
    loss = trace(lambda x: (x * x).sum(), np.ones(3))
    vg = value_and_grad_graph(loss)
    assert isinstance(vg, JointGraph) and (vg.n_primals, vg.n_forward_outputs, vg.wrt) == (1, 1, [0])
    assert [v.name for v in vg.placeholders] == ["x"]
    value, grad = interpret(vg, np.array([1.0, 2.0, 3.0]))
    assert value == 14.0 and np.array_equal(grad, [2.0, 4.0, 6.0])


def test_one_tangent_per_float_output():
    """Several outputs: a tangent per floating-point output (the int output has none)."""
    def f(x, w):
        y = symgrad.tanh(x @ w)
        return y, (x > 1.0).sum(), (y * y).sum(0)

    rng = np.random.default_rng(5)
    x, w = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(-1, 1, (4, 2))
    joint = autodiff(trace(f, x, w))
    assert [v.name for v in joint.placeholders] == ["x", "w", "tangent_0", "tangent_1"]
    assert joint.diff_outputs == [0, 2]
    assert len(joint.outputs) == 3 + 2
    x2, w2 = rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(-1, 1, (4, 2))
    t0, t1 = rng.standard_normal((3, 2)), rng.standard_normal(2)
    out = interpret(joint, x2, w2, t0, t1)
    leaves = [symgrad.tensor(x2, requires_grad=True), symgrad.tensor(w2, requires_grad=True)]
    y, count, s = f(*leaves)
    np.testing.assert_array_equal(out[1], count._data)
    assert out[1].dtype == np.int64
    gx, gw = symgrad.autograd.grad([y, s], leaves, grad_outputs=[symgrad.tensor(t0), symgrad.tensor(t1)])
    assert_close(out[3], gx._data, 1e-12, "grad x")
    assert_close(out[4], gw._data, 1e-12, "grad w")


def test_joint_graph_prints():
    g = trace(w2, np.ones((6, 5)), np.ones(5), np.ones(5))
    for simplify in (True, False):
        joint = autodiff(g, simplify=simplify)
        text = str(joint)
        assert text.startswith("graph(x: f64[6, 5], w: f64[5], b: f64[5], tangent_0: f64[])"), text
        assert text.rstrip().endswith("}")
        assert "return (" in text
        assert repr(joint).startswith("<Graph:")
    _, hvp = _hvp_graphs(w1, [np.ones(4)])
    assert "tangent_0" in str(hvp)


@pytest.mark.parametrize("name", list(HVP_CASES))
def test_simplify_gives_no_more_nodes_and_the_same_values(name):
    f, shapes = HVP_CASES[name]
    rng = np.random.default_rng(_seed("simplify", name))
    example = [rng.uniform(-1, 1, s) for s in shapes]
    g = trace(f, *example)
    simple, plain = autodiff(g, simplify=True), autodiff(g, simplify=False)
    assert len(simple.nodes) <= len(plain.nodes)
    assert [v.name for v in simple.placeholders] == [v.name for v in plain.placeholders]
    x = [rng.uniform(-1, 1, s) for s in shapes]
    for a, b in zip(interpret(simple, *x, np.ones(())), interpret(plain, *x, np.ones(()))):
        np.testing.assert_array_equal(a, b)
