"""The numpy interpreter of the IR against eager evaluation, for every op of the rule table.

Each case traces one call of the op (through :func:`symgrad.ops.registry.apply`) whose array
arguments are all graph inputs, then checks that :func:`symgrad.ir.interpret` gives exactly
eager's dtype and shape and eager's values to 1e-12 relative, both on the traced values and on
*different* values of the same shapes (so nothing the op reads was baked in as a constant).
Integer and boolean arrays (where's condition, index arrays, comparison and logic operands,
integer arithmetic) are graph inputs too.

The example arguments come from ``SAMPLES`` in tests/test_rules.py, so a new table entry is
covered here as soon as it has a sample.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import symgrad
from symgrad.ir import TraceError, interpret, trace
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
sample_variants = _rules.sample_variants


# --- arguments as graph inputs ----------------------------------------------------------------

class Slots:
    """The sample's arguments with every numpy array (tensor, tensor-list item, integer index array)
    replaced by a graph input; bool index masks stay constants (a traced mask is refused)."""

    def __init__(self, op, args):
        self.op = op
        self.template = list(args)
        self.arrays: list[np.ndarray] = []
        self.kinds: list[str] = []
        self.paths: list[tuple] = []
        for pos, (spec, v) in enumerate(zip(op.schema.args, args)):
            if spec.is_tensor_list:
                for k, arr in enumerate(v):
                    self._add(arr, (pos, k), "tensor")
            elif spec.is_tensor and isinstance(v, np.ndarray):
                self._add(v, (pos,), "tensor")
            elif spec.type == "Index":
                self._index(v, (pos,))

    def _add(self, arr, path, kind):
        arr = np.asarray(arr)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float64)
        self.arrays.append(arr)
        self.paths.append(path)
        self.kinds.append(kind)

    def _index(self, v, path):
        if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
            self._add(v, path, "index")
        elif isinstance(v, tuple):
            for k, p in enumerate(v):
                self._index(p, path + (k,))

    def build(self, tensors) -> tuple:
        """The op's arguments with ``tensors`` (one per slot) in place of the arrays."""
        args = [list(a) if isinstance(a, list) else a for a in self.template]
        for path, t in zip(self.paths, tensors):
            pos = path[0]
            if len(path) == 1:
                args[pos] = t
            elif isinstance(args[pos], list):
                args[pos][path[1]] = t
            else:  # an array inside an index tuple
                args[pos] = _replace_in_tuple(args[pos], path[1:], t)
        return tuple(args)

    def function(self):
        def fn(*tensors):
            return apply(self.op, self.build(tensors))

        return fn

    def eager(self, arrays) -> tuple:
        out = apply(self.op, self.build([symgrad.tensor(a) for a in arrays]))
        return out if isinstance(out, tuple) else (out,)


def _replace_in_tuple(tup, path, value):
    items = list(tup)
    if len(path) == 1:
        items[path[0]] = value
    else:
        items[path[0]] = _replace_in_tuple(items[path[0]], path[1:], value)
    return tuple(items)


def fresh_arrays(key: str, variant: int, slots: Slots) -> list[np.ndarray]:
    """Other values of the same shapes: float data from another seed, index arrays rotated."""
    other = Slots(slots.op, sample_variants(key, salt=1)[variant])
    out = []
    for a, b, kind in zip(slots.arrays, other.arrays, slots.kinds):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{key}: sample shapes differ between seeds"
        if kind == "index" and a.ndim == 0:
            b = a.copy()   # one index: no other position is known to be valid; the data changes
        elif kind == "index":
            b = np.roll(a, 1)
            if np.array_equal(a, b):
                b = a[::-1].copy()
        out.append(np.ascontiguousarray(b))
    changed = [not np.array_equal(a, b) for a, b in zip(slots.arrays, out)]
    assert any(changed) or not out, f"{key}: the fresh inputs equal the traced ones"
    return out


def assert_same(got: list, want: tuple, where: str) -> None:
    assert len(got) == len(want), f"{where}: {len(got)} outputs, eager gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        w = w._data
        assert isinstance(g, np.ndarray), f"{where}: output {k} is {type(g).__name__}"
        assert g.dtype == w.dtype, f"{where}: output {k} dtype {g.dtype}, eager {w.dtype}"
        assert g.shape == w.shape, f"{where}: output {k} shape {g.shape}, eager {w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{where}: output {k}")
        else:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0, err_msg=f"{where}: output {k}")


def _params():
    out = []
    for key in KEYS:
        if "shape_from_values" in OPS[key].rule.tags:
            continue   # refused by the tracer (tests/test_compile_differential.py checks the refusal)
        if key not in SAMPLES:
            out.append(pytest.param(key, -1, id=f"{key}-NO_SAMPLE"))
            continue
        out.extend(pytest.param(key, i, id=f"{key}-{i}") for i in range(len(sample_variants(key))))
    return out


@pytest.mark.parametrize("key,variant", _params())
def test_interpret_matches_eager(key, variant):
    if key not in SAMPLES:
        pytest.fail(f"op {key!r} has no entry in tests/test_rules.py SAMPLES", pytrace=False)
    op = OPS[key]
    slots = Slots(op, sample_variants(key)[variant])
    graph = trace(slots.function(), *slots.arrays, decompose=False)
    where = f"{key}[{variant}]"
    # one node for the one op, reading the inputs: nothing was folded into a constant
    assert [n.op for n in graph.nodes] == [key], f"{where}: traced nodes {[n.op for n in graph.nodes]}"
    assert [v.dtype.np for v in graph.placeholders] == [a.dtype for a in slots.arrays]
    assert set(graph.nodes[0].inputs) == set(graph.placeholders)
    assert_same(interpret(graph, *slots.arrays), slots.eager(slots.arrays), f"{where} (traced values)")
    fresh = fresh_arrays(key, variant, slots)
    assert_same(interpret(graph, *fresh), slots.eager(fresh), f"{where} (fresh values)")


# --- integer and boolean data through non-differentiable (and integer-valued) ops --------------

def _ints(rng, *shape, lo=-5, hi=6):
    return rng.integers(lo, hi, shape).astype(np.int64)


def _nonzero_ints(rng, *shape):
    return rng.choice(np.array([-3, -2, -1, 1, 2, 3, 4]), size=shape).astype(np.int64)


def _bools(rng, *shape):
    return rng.random(shape) < 0.5


INT_CASES = {
    "add int": ("add.Tensor", lambda r: (_ints(r, 3, 1), _ints(r, 1, 4))),
    "sub int": ("sub.Tensor", lambda r: (_ints(r, 3, 4), _ints(r, 4))),
    "mul int": ("mul.Tensor", lambda r: (_ints(r, 3, 1), _ints(r, 1, 4))),
    "mul bool*float": ("mul.Tensor", lambda r: (_bools(r, 3, 4), r.uniform(-2, 2, (3, 4)))),
    "add int+float": ("add.Tensor", lambda r: (_ints(r, 3, 4), r.uniform(-2, 2, (4,)))),
    "div int": ("div.Tensor", lambda r: (_ints(r, 3, 4), _nonzero_ints(r, 4))),
    "neg int": ("neg", lambda r: (_ints(r, 2, 3),)),
    "abs int": ("abs", lambda r: (_ints(r, 2, 3),)),
    "sign int": ("sign", lambda r: (_ints(r, 2, 3),)),
    "exp int": ("exp", lambda r: (_ints(r, 2, 3, lo=-3, hi=3),)),
    "pow int": ("pow.Tensor_Scalar", lambda r: (_ints(r, 2, 3), 2)),
    "maximum int": ("maximum", lambda r: (_ints(r, 3, 1), _ints(r, 1, 4))),
    "clamp int": ("clamp", lambda r: (_ints(r, 3, 4), -2, 3)),
    "sum int": ("sum", lambda r: (_ints(r, 3, 4), None)),
    "sum.dim int": ("sum.dim_IntList", lambda r: (_ints(r, 2, 3, 4), (0, 2), True, None)),
    "amax int": ("amax", lambda r: (_ints(r, 3, 4), (1,), False)),
    "max.dim int": ("max.dim", lambda r: (_ints(r, 3, 4, lo=-50, hi=50), 1, False)),
    "mm int": ("mm", lambda r: (_ints(r, 2, 3), _ints(r, 3, 4))),
    "cat int": ("cat", lambda r: ([_ints(r, 2, 3), _ints(r, 1, 3)], 0)),
    "stack bool": ("stack", lambda r: ([_bools(r, 2, 3), _bools(r, 2, 3)], 1)),
    "view int": ("view", lambda r: (_ints(r, 3, 4), (2, 6))),
    "permute bool": ("permute", lambda r: (_bools(r, 2, 3, 4), (2, 0, 1))),
    "index int by int": ("index.Tensor", lambda r: (_ints(r, 3, 4), (np.array([2, 0, 2]), np.array([1, 1, 3])))),
    "index_put int": ("index_put", lambda r: (_ints(r, 3, 4), np.array([0, 2]), _ints(r, 2, 4), False)),
    "where int branches": ("where.self", lambda r: (_bools(r, 3, 4), _ints(r, 3, 1), _ints(r, 1, 4))),
    "where mixed": ("where.self", lambda r: (_bools(r, 3, 4), _ints(r, 3, 4), r.uniform(-2, 2, (4,)))),
    "gt int": ("gt.Tensor", lambda r: (_ints(r, 3, 1), _ints(r, 1, 4))),
    "eq int": ("eq.Tensor", lambda r: (_ints(r, 3, 4, lo=0, hi=3), _ints(r, 4, lo=0, hi=3))),
    "le int/float": ("le.Tensor", lambda r: (_ints(r, 3, 4), r.uniform(-5, 5, (3, 4)))),
    "ne bool": ("ne.Tensor", lambda r: (_bools(r, 3, 1), _bools(r, 1, 4))),
    "logical_and": ("logical_and", lambda r: (_bools(r, 3, 1), _bools(r, 1, 4))),
    "logical_or int": ("logical_or", lambda r: (_ints(r, 3, 4, lo=0, hi=2), _bools(r, 4))),
    "logical_not": ("logical_not", lambda r: (_bools(r, 2, 3),)),
    "heaviside": ("heaviside", lambda r: (_ints(r, 3, 4, lo=-1, hi=2).astype(np.float64), r.uniform(0, 1, (4,)))),
}


@pytest.mark.parametrize("name", list(INT_CASES))
def test_interpret_integer_and_bool_inputs(name):
    key, build = INT_CASES[name]
    op = OPS[key]
    slots = Slots(op, build(np.random.default_rng(0)))
    graph = trace(slots.function(), *slots.arrays, decompose=False)
    # ops with a floating-point result cast integer and bool inputs first (recorded as _to_copy)
    assert [n.op for n in graph.nodes if n.op != "_to_copy"] == [key]
    assert all(n.outputs[0].dtype.is_floating_point for n in graph.nodes if n.op == "_to_copy")
    assert [v.dtype.np for v in graph.placeholders] == [a.dtype for a in slots.arrays]
    assert_same(interpret(graph, *slots.arrays), slots.eager(slots.arrays), f"{name} (traced values)")
    for seed in (1, 2):
        fresh = Slots(op, build(np.random.default_rng(seed))).arrays
        assert_same(interpret(graph, *fresh), slots.eager(fresh), f"{name} (fresh values, seed {seed})")


def test_integer_index_input_changes_the_result():
    """An integer index array that is a graph input is read at run time, not baked in."""
    g = trace(lambda x, i: x[i] * 2, np.arange(12.0).reshape(3, 4), np.array([0, 2]))
    x = np.arange(12.0).reshape(3, 4) + 0.5
    for idx in ([0, 2], [2, 2, 1], [1]):
        (out,) = interpret(g, x, np.array(idx))
        np.testing.assert_array_equal(out, x[idx] * 2)


MASK_CASES = {
    "x[m], m an input": (lambda x, m: x[m], lambda x: (x, x > 5)),
    "x[x > 5]": (lambda x: x[x > 5], lambda x: (x,)),
    "x[m, :2], m an input": (lambda x, m: x[m, :2], lambda x: (x, x[:, 0] > 5)),
    "x[(m,)], m an input": (lambda x, m: x[(m,)], lambda x: (x, x > 5)),
}


@pytest.mark.parametrize("name", list(MASK_CASES))
def test_traced_boolean_mask_is_refused(name):
    """A mask computed from the inputs gives a data-dependent shape: the tracer must refuse it
    (otherwise the graph records the example's output shape and interpret() breaks it)."""
    fn, args = MASK_CASES[name]
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(TraceError, match="boolean-mask"):
        trace(fn, *args(x))


def test_interpret_composite_function_on_fresh_values():
    """A small function mixing float, integer and boolean inputs; checked on many fresh inputs."""

    def f(x, w, i, m):
        y = symgrad.tanh(x @ w) + x[i].sum(0)[: w.shape[1]]
        z = symgrad.where(m, y, -y) * (i.sum() + 1)
        return z.amax(1), (x > 0.5).sum(), symgrad.logsumexp(z, 1, keepdim=True)

    rng = np.random.default_rng(3)

    def inputs():
        return (rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 2)),
                rng.integers(0, 3, (5,)), rng.random((3, 2)) < 0.5)

    g = trace(f, *inputs())
    assert all(n.op != "constant" for n in g.nodes), str(g)
    for _ in range(5):
        args = inputs()
        want = f(*[symgrad.tensor(a) for a in args])
        assert_same(interpret(g, *args), want, "composite")


def test_interpret_rejects_wrong_arity():
    g = trace(lambda x: x * 2, np.ones(3))
    with pytest.raises(TypeError):
        interpret(g)
