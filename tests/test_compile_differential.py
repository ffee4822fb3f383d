"""Differential tests of ``symgrad.compile(backend="numba")`` against eager evaluation.

a. every differentiable op of the rule table: a weighted scalar loss ``sum(op(args) * W)`` per
   sample variant of tests/test_rules.py's ``SAMPLES`` (integer index arrays as inputs, and once
   more as constants), compiled with Numba; value and gradients (``.backward()`` through
   ``CompiledFunctionBackward``) equal eager's to 1e-9 relative, on the first call and on *new*
   values of the same shapes (the second call must not retrace).  ``prod`` and
   ``prod.dim_int`` refuse a traced gradient on purpose: compiling them raises ``TraceError``;
b. float32: a representative subset (elementwise, matmul, softmax, reductions) within 1e-4
   relative, with float32 outputs and gradients;
c. random programs (the strategy of tests/test_autodiff.py) compiled with Numba vs eager;
   ``SYMGRAD_FUZZ=long`` runs a long profile (``@pytest.mark.slow``);
d. ``symgrad.value_and_grad`` (one joint Numba kernel) vs eager on the W1, W2, W3, W5 workloads.

Every Numba build costs a fraction of a second, and a batch of a few ops builds dozens of loops, so
the CI profile compiles with Numba each op's first sample variant (with index arrays as inputs and as
constants) and its other variants with the numpy backend (the same trace, autodiff, partition and
``CompiledFunctionBackward``; only the loops run as numpy statements); groups whose loops other tests
build with Numba op by op (the elementwise functions: tests/test_numba_emit.py and
tests/test_numpy_usage_elementwise.py; in float32, tests/test_compile.py's one-kernel test) and the
linalg group (numpy calls joined by elementwise loops) compile entirely with the numpy backend.
``SYMGRAD_FUZZ=long`` compiles every case with Numba.

Every Numba compile costs a fraction of a second, so the op cases of (a) and (b) are compiled in
a handful of batches: one compiled function per group of ops, taking every case's arrays (and its
fixed weights) as inputs and returning one scalar loss per case (summed eagerly before
``.backward()``).  Each case is still its own test, checked against its own loss and gradients.
When a batch fails to build or run, it is bisected until the failing cases are alone, so a
failure names its op (tested by injecting a wrong and an uncompilable scalar function).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from workloads import w1, w2, w3, w5  # the workloads, defined once (tests/workloads.py)

import symgrad
from symgrad.ops.registry import apply


def _load(name: str):
    """tests/<name>.py as a module (tests/ is not a package: load it from its path if needed)."""
    for mod_name in (f"tests.{name}", name, f"_symgrad_{name}"):
        mod = sys.modules.get(mod_name)
        if mod is not None and getattr(mod, "__file__", None) and Path(mod.__file__).stem == name:
            return mod
    path = Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_symgrad_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


_rules = _load("test_rules")
_autodiff_tests = _load("test_autodiff")
SAMPLES, OPS = _rules.SAMPLES, _rules.OPS
sample_variants = _rules.sample_variants
differentiable_outputs = _rules.differentiable_outputs

KEYS = sorted(OPS)
DIFFERENTIABLE = [k for k in KEYS if OPS[k].rule.formulas]
# the traced gradient of prod depends on where the zeros are: autodiff refuses it on purpose
NO_TRACED_GRADIENT = {"prod", "prod.dim_int"}
# ops whose result's shape depends on values (tag shape_from_values): the tracer refuses them
SHAPE_FROM_VALUES = {"bincount"}
# ops whose gradient is zero by definition; the compiled graph drops it, leaving `.grad` None as
# PyTorch does (torch.linalg.vector_norm(x, 0))
ZERO_GRADIENT_IS_NONE = {"linalg_vector_norm.zero"}
BACKEND = "numba"
# Groups the CI profile compiles with the numpy backend (see the module docstring): "unary" (every op
# in tests/test_numba_emit.py's UNARY list, both math modes and dtypes), the numpy surface's elementwise
# functions (tests/test_numpy_usage_elementwise.py's COMPILED table) and the linalg group.
NUMPY_IN_CI = {"unary", "numpy_unary", "numpy_special", "numpy_binary", "numpy_linalg"}
# float32's elementwise ops whose float32 Numba loops tests/test_compile.py's one-kernel test and
# tests/test_numba_emit.py build: in CI the float32 batch compiles them with the numpy backend
FLOAT32_NUMPY_IN_CI = {"add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "exp", "log", "sin", "tanh",
                       "sigmoid", "sqrt", "relu", "abs", "erf", "maximum", "where.self"}
ALL_NUMBA = os.environ.get("SYMGRAD_FUZZ", "") == "long"


def _backend(group: str, variant: int = 0, key: str | None = None) -> str:
    if ALL_NUMBA:
        return BACKEND
    if group == "float32" and key in FLOAT32_NUMPY_IN_CI:
        return "numpy"
    return "numpy" if group in NUMPY_IN_CI or variant > 0 else BACKEND


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def assert_close(got, want, rtol, where, atol_scale=1e-2):
    """Relative comparison; the absolute floor is ``rtol * atol_scale * max|want|`` (cancellation)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, eager {want.shape}"
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * atol_scale * max(scale, 1e-3), err_msg=where)


def _show(a) -> str:
    return np.array2string(np.asarray(a), precision=6, separator=", ", max_line_width=200).replace("\n", "")


# --- a/b. one case per (op, sample variant) ---------------------------------------------------

def _replace_in_tuple(tup, path, value):
    items = list(tup)
    items[path[0]] = value if len(path) == 1 else _replace_in_tuple(items[path[0]], path[1:], value)
    return tuple(items)


class Case:
    """One sample variant of one op: its array arguments (float tensors, tensor-list items, bool
    tensors, integer index arrays) become inputs of the compiled function; everything else (numbers,
    sizes, dims, boolean masks) is baked into the trace."""

    def __init__(self, key: str, variant: int, dtype=symgrad.float64, index_inputs: bool = True):
        self.key, self.variant, self.op, self.dtype = key, variant, OPS[key], dtype
        self.index_inputs = index_inputs
        self.np_dtype = np.dtype(dtype.np)
        self.template = list(sample_variants(key)[variant])
        self.paths, self.kinds, self.diff = [], [], []
        self.example = self._arrays(self.template)
        fresh_template = sample_variants(key, salt=1)[variant]
        fresh = self._arrays(fresh_template, collect=False)
        for k, (a, b) in enumerate(zip(self.example, fresh)):
            assert a.shape == b.shape and a.dtype == b.dtype, f"{self.id}: sample shapes differ between seeds"
            if self.kinds[k] == "index":   # rotate index arrays: other values, still in range
                b = np.roll(a, 1)
                if np.array_equal(a, b):
                    b = a[::-1].copy()
            fresh[k] = np.array(b, order="C")   # (ascontiguousarray would make a 0-d array 1-d)
        self.fresh = fresh
        # fixed weights, from the example outputs' shapes
        outs = self.outputs([symgrad.tensor(a) for a in self.example])
        rng = np.random.default_rng(_seed(key, variant))
        self.weights = [rng.standard_normal(outs[k].shape).astype(self.np_dtype)
                        for k in differentiable_outputs(self.op, len(outs))]

    @property
    def id(self) -> str:
        suffix = "" if self.np_dtype == np.float64 else f" ({self.np_dtype.name})"
        suffix += "" if self.index_inputs else " (constant index)"
        return f"{self.key}[{self.variant}]{suffix}"

    @property
    def slot(self) -> tuple:
        return (self.key, self.variant, self.index_inputs)

    def _arrays(self, args, collect=True) -> list[np.ndarray]:
        out = []
        formulas = self.op.rule.formulas

        def add(arr, path, kind, diff):
            arr = np.asarray(arr)
            if arr.dtype.kind == "f":
                arr = arr.astype(self.np_dtype)
            out.append(arr)
            if collect:
                self.paths.append(path)
                self.kinds.append(kind)
                self.diff.append(diff)

        def index(v, path):
            if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
                add(v, path, "index", False)
            elif isinstance(v, tuple):
                for k, p in enumerate(v):
                    index(p, path + (k,))

        for pos, (spec, v) in enumerate(zip(self.op.schema.args, args)):
            if spec.is_tensor_list:
                for k, arr in enumerate(v):
                    add(arr, (pos, k), "tensor", spec.name in formulas)
            elif spec.is_tensor and isinstance(v, np.ndarray):
                add(v, (pos,), "tensor", spec.name in formulas and v.dtype.kind == "f")
            elif spec.type == "Index" and self.index_inputs:
                index(v, (pos,))
        return out

    @property
    def wrt(self) -> list[int]:
        return [i for i, d in enumerate(self.diff) if d]

    def build(self, tensors) -> tuple:
        args = [list(a) if isinstance(a, list) else a for a in self.template]
        for pos, a in enumerate(args):   # a float dtype argument follows the case's dtype
            if isinstance(a, symgrad.dtype) and a.is_floating_point:
                args[pos] = self.dtype
        for path, t in zip(self.paths, tensors):
            pos = path[0]
            if len(path) == 1:
                args[pos] = t
            elif isinstance(args[pos], list):
                args[pos][path[1]] = t
            else:  # an index array inside an index tuple
                args[pos] = _replace_in_tuple(args[pos], path[1:], t)
        return tuple(args)

    def outputs(self, tensors) -> tuple:
        out = apply(self.op, self.build(tensors))
        return out if isinstance(out, tuple) else (out,)

    def weight_tensors(self) -> list:
        return [symgrad.tensor(w, dtype=self.dtype) for w in self.weights]

    def loss(self, tensors, weights=None):
        """``sum_k sum(out_k * W_k)`` over the differentiable outputs, for fixed weights ``W_k``
        (constants of the trace unless given, as tensors)."""
        weights = self.weight_tensors() if weights is None else weights
        outs = self.outputs(tensors)
        total = None
        for k, w in zip(differentiable_outputs(self.op, len(outs)), weights):
            term = (outs[k] * w).sum()
            total = term if total is None else total + term
        return total

    def leaves(self, arrays) -> list:
        return [symgrad.tensor(a, dtype=self.dtype, requires_grad=d) if a.dtype.kind == "f" else symgrad.tensor(a)
                for a, d in zip(arrays, self.diff)]

    def describe(self, arrays) -> str:
        parts = []
        for path, kind, a in zip(self.paths, self.kinds, arrays):
            name = self.op.schema.args[path[0]].name + "".join(f"[{p}]" for p in path[1:])
            parts.append(f"{name} ({kind}, {a.dtype}{list(a.shape)}) = {_show(a)}")
        others = [f"{s.name}={v!r}" for s, v in zip(self.op.schema.args, self.template)
                  if not isinstance(v, (np.ndarray, list)) and not (s.type == "Index" and isinstance(v, tuple))]
        return "; ".join(parts + others)


@dataclass
class CallResult:
    """One call of a case inside a batch: compiled and eager value and gradients."""

    value: np.ndarray
    eager_value: np.ndarray
    grads: list            # per wrt input: np array or None
    eager_grads: list
    value_dtype: object
    grad_fn: str


@dataclass
class Outcome:
    """A case's results from the batch that ran it (or the exception that stopped it alone)."""

    calls: list = field(default_factory=list)   # [example call, fresh call]
    traces: int = 0
    batch: list = field(default_factory=list)   # ids of the cases compiled together
    error: str | None = None


def _batch_function(cases):
    """``f(*case inputs, *weights) -> (loss of case 0, loss of case 1, ...)``.

    The weights are inputs that need no gradient, with the same values on every call: as
    constants of the trace they would be recorded where first used, between the cases, and each
    case would get loop kernels of its own (a Numba compile each); as inputs they are ready from
    the start and the elementwise chains of many cases share fused loops."""
    sizes = [len(c.example) for c in cases]
    n_weights = [len(c.weights) for c in cases]

    def batch(*tensors):
        losses, pos, wpos = [], 0, sum(sizes)
        for c, n, m in zip(cases, sizes, n_weights):
            losses.append(c.loss(tensors[pos:pos + n], tensors[wpos:wpos + m]))
            pos, wpos = pos + n, wpos + m
        return tuple(losses)

    return batch


def _batch_inputs(cases, which: str) -> tuple[list, list]:
    """The leaves per case (``which`` values: "example" or "fresh") and the flat argument list."""
    leaves = [c.leaves(getattr(c, which)) for c in cases]
    weights = [w for c in cases for w in c.weight_tensors()]
    return leaves, [t for ls in leaves for t in ls] + weights


def _run_batch(cases, backend: str = BACKEND) -> dict:
    """Compile the cases as one function; call it on the example values, then on fresh ones."""
    fn = _batch_function(cases)
    compiled = symgrad.compile(fn, backend=backend)
    outcomes = {c.id: Outcome(batch=[x.id for x in cases]) for c in cases}
    for which in ("example", "fresh"):
        leaves, args = _batch_inputs(cases, which)
        eager_leaves, eager_args = _batch_inputs(cases, which)
        outs = compiled(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        total = outs[0]
        for o in outs[1:]:
            total = total + o
        total.backward()
        eager_outs = fn(*eager_args)
        eager_total = eager_outs[0]
        for o in eager_outs[1:]:
            eager_total = eager_total + o
        eager_total.backward()
        for c, o, eo, ls, els in zip(cases, outs, eager_outs, leaves, eager_leaves):
            outcomes[c.id].calls.append(CallResult(
                value=o.detach().numpy(), eager_value=eo.detach().numpy(),
                grads=[None if ls[i].grad is None else ls[i].grad.numpy() for i in c.wrt],
                eager_grads=[None if els[i].grad is None else els[i].grad.numpy() for i in c.wrt],
                value_dtype=o.dtype, grad_fn=type(o.grad_fn).__name__))
    traces = compiled.stats()["traces"]
    for o in outcomes.values():
        o.traces = traces
    return outcomes


def _run_bisecting(cases, interactions: list, backend: str = BACKEND) -> dict:
    """:func:`_run_batch`, splitting a failing batch until each failure is one case alone."""
    try:
        return _run_batch(cases, backend)
    except Exception as exc:  # noqa: BLE001 - any failure is reported by the case's test
        if len(cases) == 1:
            c = cases[0]
            text = re.sub(r"\x1b\[[0-9;]*m", "", "".join(traceback.format_exception_only(type(exc), exc)).strip())
            tb = "".join(traceback.format_tb(exc.__traceback__)[-3:])
            return {c.id: Outcome(batch=[c.id], error=f"{type(exc).__name__}: {text}\n{tb}")}
        mid = len(cases) // 2
        out = {**_run_bisecting(cases[:mid], interactions, backend),
               **_run_bisecting(cases[mid:], interactions, backend)}
        if not any(o.error for o in out.values()):
            interactions.append(f"{[c.id for c in cases]}: {type(exc).__name__}: {exc}")
        return out


# groups of ops compiled together (a differentiable op in none of them joins an "other_N" batch)
GROUPS = {
    "unary": ["neg", "reciprocal", "exp", "log", "log1p", "sin", "cos", "tanh", "sqrt", "sigmoid", "relu",
              "abs", "sign", "expm1", "log2", "exp2", "rsqrt", "erf", "sinh", "cosh", "tan", "atan"],
    "binary": ["add.Tensor", "sub.Tensor", "rsub.Tensor", "rsub.Scalar", "mul.Tensor", "div.Tensor",
               "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "clamp.Tensor", "clamp", "clamp_min",
               "clamp_max", "maximum", "minimum", "where.self"],
    "reductions": ["sum", "sum.dim_IntList", "mean", "mean.dim", "max.dim", "max", "min.dim", "min", "amax",
                   "amin", "var.correction", "std.correction", "logsumexp", "_softmax", "_log_softmax"],
    "linalg": ["mm", "mv", "dot", "outer", "bmm"],
    "shape": ["expand", "view", "_unsafe_view", "t", "transpose.int", "permute", "squeeze", "squeeze.dim",
              "squeeze.dims", "squeeze_", "squeeze_.dim", "unsqueeze", "cat", "stack", "unbind.int",
              "_to_copy", "clone", "zero_"],
    "indexing": ["select.int", "select_backward", "slice.Tensor", "slice_backward", "index.Tensor",
                 "index_put_add", "index_put", "copy_slices"],
    # the numpy surface's ops, in batches small enough to compile quickly and to spread over workers
    "numpy_unary": ["acos", "acosh", "asin", "asinh", "atanh", "cbrt", "ceil", "deg2rad", "erfc", "floor",
                    "log10", "logit", "rad2deg", "round", "round.decimals", "sinc", "trunc"],
    "numpy_special": ["digamma", "lgamma", "polygamma", "xlogy.Tensor", "special_xlog1py"],
    "numpy_binary": ["atan2", "hypot", "logaddexp", "logaddexp2", "fmod.Scalar", "fmod.Tensor",
                     "remainder.Scalar", "remainder.Tensor"],
    "numpy_scans": ["cumsum", "cumsum_backward", "cumprod", "cumprod_backward", "flip", "keep_last_writes",
                    "_bincount_fixed"],
    "numpy_linalg": ["linalg_cholesky", "linalg_det", "linalg_eigh", "linalg_inv", "linalg_qr", "linalg_slogdet",
                     "linalg_solve", "linalg_svd"],
}
GROUP_OF = {k: g for g, keys in GROUPS.items() for k in keys}

# float32: elementwise ops, matmul, softmax and reductions
FLOAT32_KEYS = ["add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "pow.Tensor_Scalar", "exp", "log", "sin",
                "tanh", "sigmoid", "sqrt", "relu", "abs", "erf", "maximum", "where.self", "clamp.Tensor",
                "mm", "mv", "bmm", "_softmax", "_log_softmax", "sum", "sum.dim_IntList", "mean.dim", "amax",
                "max.dim", "logsumexp", "var.correction"]


# ops in no group above are compiled in batches of this many ops: one large batch makes one large
# kernel, and LLVM's time grows faster than the kernel's size
OTHER_BATCH = 8
_OTHER = sorted(k for k in DIFFERENTIABLE if k not in GROUP_OF)


def _group(key: str) -> str:
    if key in GROUP_OF:
        return GROUP_OF[key]
    return f"other_{_OTHER.index(key) // OTHER_BATCH}" if key in _OTHER else "other"


def _variants(key: str) -> int:
    try:
        return len(sample_variants(key))
    except Exception:  # noqa: BLE001 - a broken builder is reported by the test, not at collection
        return 1


def _has_index_array(key: str, variant: int) -> bool:
    def has(v):
        return (isinstance(v, np.ndarray) and v.dtype.kind in "iu") or \
            (isinstance(v, tuple) and any(has(p) for p in v))

    try:
        args = sample_variants(key)[variant]
    except Exception:  # noqa: BLE001
        return False
    return any(spec.type == "Index" and has(v) for spec, v in zip(OPS[key].schema.args, args))


def _specs(keys, first_variant_only=False) -> list[tuple]:
    """(key, variant, index_inputs): integer index arrays as inputs, and once more as constants."""
    out = []
    for key in keys:
        if key not in SAMPLES:
            out.append((key, -1, True))
            continue
        for v in range(1 if first_variant_only else _variants(key)):
            if key not in _rules.DERIVED_INDEX:
                out.append((key, v, True))
            if _has_index_array(key, v):
                out.append((key, v, False))
    return out


F64_SPECS = _specs([k for k in DIFFERENTIABLE if k not in NO_TRACED_GRADIENT | SHAPE_FROM_VALUES])
F32_SPECS = _specs(FLOAT32_KEYS, first_variant_only=True)

_CACHE: dict = {}
_INTERACTIONS: dict = {}


def _group_outcomes(group: str, dtype) -> dict:
    """Run (once) every case of a group, in one batch when it works; outcomes by (key, variant, index_inputs)."""
    cache_key = (group, dtype.np.name)
    if cache_key not in _CACHE:
        if dtype is symgrad.float32:
            specs = [s for s in F32_SPECS if s[0] in SAMPLES]
        else:
            specs = [s for s in F64_SPECS if s[0] in SAMPLES and _group(s[0]) == group]
        cases, out = [], {}
        for key, variant, index_inputs in specs:
            try:
                cases.append(Case(key, variant, dtype, index_inputs))
            except Exception as exc:  # noqa: BLE001 - a broken sample fails its own test
                out[(key, variant, index_inputs)] = Outcome(error=f"building the case: {type(exc).__name__}: {exc}")
        interactions: list = []
        by_id = {}
        for backend in sorted({_backend(group, c.variant, c.key) for c in cases}):
            batch = [c for c in cases if _backend(group, c.variant, c.key) == backend]
            by_id.update(_run_bisecting(batch, interactions, backend))
        out.update({c.slot: by_id[c.id] for c in cases})
        _CACHE[cache_key] = out
        _INTERACTIONS[cache_key] = interactions
    return _CACHE[cache_key]


def _check_case(key: str, variant: int, index_inputs: bool, dtype, rtol: float, atol_scale: float) -> None:
    group = "float32" if dtype is symgrad.float32 else _group(key)
    outcome = _group_outcomes(group, dtype)[(key, variant, index_inputs)]
    case = Case(key, variant, dtype, index_inputs)
    if outcome.error:
        alone = "alone in its batch" if len(outcome.batch) <= 1 else f"batch {outcome.batch}"
        backend = _backend(group, variant, key)
        pytest.fail(f"{case.id}: compiling/running `sum(op(args) * W)` with backend={backend!r} failed "
                    f"({alone}):\n{outcome.error}\ninputs: {case.describe(case.example)}", pytrace=False)
    assert outcome.traces == 1, f"{case.id}: {outcome.traces} traces for two calls of the same shapes"
    names = [case.op.schema.args[case.paths[i][0]].name + "".join(f"[{p}]" for p in case.paths[i][1:])
             for i in case.wrt]
    assert len(outcome.calls) == 2
    for which, res, arrays in zip(("first call", "second call (new values)"), outcome.calls,
                                  (case.example, case.fresh)):
        where = f"{case.id}, {which}, inputs: {case.describe(arrays)}"
        assert res.grad_fn == "CompiledFunctionBackward", f"{where}: grad_fn {res.grad_fn}"
        assert res.value_dtype == dtype, f"{where}: compiled loss dtype {res.value_dtype}, want {dtype}"
        assert_close(res.value, res.eager_value, rtol, f"{where}: loss value (compiled vs eager)", atol_scale)
        for name, i, g, eg in zip(names, case.wrt, res.grads, res.eager_grads):
            if g is None and key in ZERO_GRADIENT_IS_NONE:
                assert eg is None or not np.any(eg), f"{where}: eager gradient of {name!r} is not zero"
                continue
            assert g is not None, f"{where}: no compiled gradient for {name!r}"
            assert g.dtype == dtype.np, f"{where}: gradient of {name!r} is {g.dtype}, want {dtype.np}"
            want = np.zeros(arrays[i].shape, dtype.np) if eg is None else eg
            assert_close(g, want, rtol, f"{where}: gradient of {name!r} (compiled vs eager)", atol_scale)


def _params(specs, group=None):
    """One test per case; the cases of a batch share an xdist group, so that one worker builds the
    batch (under ``--dist loadgroup``; other schedulers ignore the mark)."""
    return [pytest.param(k, v, ii, id=f"{k}-NO_SAMPLE" if v < 0 else f"{k}-{v}" + ("" if ii else "-const_index"),
                         marks=pytest.mark.xdist_group(f"differential-{group or _group(k)}"))
            for k, v, ii in specs]


def _require_sample(key):
    if key not in SAMPLES:
        pytest.fail(f"op {key!r} is in the rule table but has no entry in tests/test_rules.py SAMPLES",
                    pytrace=False)


@pytest.mark.parametrize("key,variant,index_inputs", _params(F64_SPECS))
def test_op_compiled_matches_eager(key, variant, index_inputs):
    _require_sample(key)
    _check_case(key, variant, index_inputs, symgrad.float64, rtol=1e-9, atol_scale=1e-2)


@pytest.mark.parametrize("key,variant,index_inputs",
                         _params(_specs(sorted(NO_TRACED_GRADIENT & set(DIFFERENTIABLE)))))
def test_prod_compile_raises_trace_error(key, variant, index_inputs):
    """prod's traced gradient would depend on where the zeros are: compiling it is refused."""
    _require_sample(key)
    case = Case(key, variant, symgrad.float64, index_inputs)
    compiled = symgrad.compile(_batch_function([case]), backend=BACKEND, strict=True)
    _, args = _batch_inputs([case], "example")
    with pytest.raises(symgrad.TraceError, match="prod"):
        compiled(*args)


@pytest.mark.parametrize("key", sorted(SHAPE_FROM_VALUES))
def test_ops_whose_shape_comes_from_values_are_refused_when_traced(key):
    """Recorded with the traced call's shape, a later call with other values would misshape the graph."""
    case = Case(key, 0, symgrad.float64, True)
    compiled = symgrad.compile(_batch_function([case]), backend=BACKEND, strict=True)
    _, args = _batch_inputs([case], "example")
    with pytest.raises(symgrad.TraceError, match=f"{key}: its result's shape depends on the input values"):
        compiled(*args)


@pytest.mark.parametrize("group", [pytest.param(g, marks=pytest.mark.xdist_group(f"differential-{g}"))
                                   for g in sorted(set(GROUPS) | {_group(k) for k in _OTHER})])
def test_group_batch_fails_only_where_a_case_fails_alone(group):
    """A batch that fails while each of its cases passes alone would be a bug of the combination
    (fusing the loops of several ops); the bisection records it here."""
    _group_outcomes(group, symgrad.float64)
    assert not _INTERACTIONS[(group, "float64")], _INTERACTIONS[(group, "float64")]


def test_every_op_is_covered_and_the_float32_subset_is_differentiable():
    assert set(FLOAT32_KEYS) <= set(DIFFERENTIABLE)
    assert {s[0] for s in F64_SPECS} | NO_TRACED_GRADIENT | SHAPE_FROM_VALUES >= set(DIFFERENTIABLE)


@pytest.mark.parametrize("key,variant,index_inputs", _params(F32_SPECS, "float32"))
def test_op_compiled_matches_eager_float32(key, variant, index_inputs):
    _require_sample(key)
    _check_case(key, variant, index_inputs, symgrad.float32, rtol=1e-4, atol_scale=1.0)


@pytest.mark.xdist_group("differential-float32")
def test_float32_batch_fails_only_where_a_case_fails_alone():
    _group_outcomes("float32", symgrad.float32)
    assert not _INTERACTIONS[("float32", "float32")], _INTERACTIONS[("float32", "float32")]


# --- c. random programs -----------------------------------------------------------------------

def _fits_limits(shape) -> bool:
    A = _autodiff_tests
    return len(shape) <= A.MAX_NDIM and 0 < math.prod(shape) <= A.MAX_NUMEL


@st.composite
def programs(draw):
    """tests/test_autodiff.py's ``programs()`` strategy, built from its steps, with one guard: a
    binary step never reads a value beyond the generator's size limits (``x @ x.T`` can make one,
    e.g. 12x12, and then no operand "fits", not even the value itself: ``sampled_from([])``)."""
    A = _autodiff_tests
    n_inputs = draw(st.integers(1, 3))
    shapes = tuple(draw(st.sampled_from(A.SHAPES)) for _ in range(n_inputs))
    pool = [A.Meta(s, 0.5, 1.5) for s in shapes]
    steps = []
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(A.KINDS))
        last = len(pool) - 1
        fits = [j for j, m in enumerate(pool) if m.shape or kind not in A.NEEDS_DIMS] or list(range(len(pool)))
        i = draw(st.one_of(st.just(fits[-1]), st.sampled_from(fits))) if fits[-1] == last else \
            draw(st.sampled_from(fits))
        res = A._make_step(draw, kind, i, pool) if kind != "binary" or _fits_limits(pool[i].shape) else None
        if res is not None and res[1] is not None and max(abs(res[2][0]), abs(res[2][1])) <= A.MAX_ABS:
            step, shape, (lo, hi) = res
        else:  # always safe: squash the value
            step, shape, (lo, hi) = ("tanh", i), pool[i].shape, (-1.0, 1.0)
        steps.append(step)
        pool.append(A.Meta(tuple(shape), float(lo), float(hi)))
    return A.Program(shapes, tuple(steps), draw(st.integers(0, 2 ** 32 - 1)))


def _program_inputs(rng, shapes):
    return [np.asarray(rng.uniform(0.5, 1.5, s), dtype=np.float64) for s in shapes]


def _check_program(prog) -> None:
    fn = prog.function()
    rng = np.random.default_rng(prog.seed)
    example, fresh = _program_inputs(rng, prog.shapes), _program_inputs(rng, prog.shapes)
    compiled = symgrad.compile(fn, backend=BACKEND)
    for which, arrays in (("first call", example), ("second call (new values)", fresh)):
        leaves = [symgrad.tensor(a, requires_grad=True) for a in arrays]
        out = compiled(*leaves)
        assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
        out.backward()
        eager_leaves = [symgrad.tensor(a, requires_grad=True) for a in arrays]
        want = fn(*eager_leaves)
        want.backward()
        where = f"{which}, inputs {[_show(a) for a in arrays]}"
        assert_close(out.detach().numpy(), want.detach().numpy(), 1e-9, f"{where}: loss (compiled vs eager)")
        for k, (t, e) in enumerate(zip(leaves, eager_leaves)):
            g = np.zeros(arrays[k].shape) if t.grad is None else t.grad.numpy()
            w = np.zeros(arrays[k].shape) if e.grad is None else e.grad.numpy()
            assert_close(g, w, 1e-9, f"{where}: gradient of input {k} (compiled vs eager)")
    assert compiled.stats()["traces"] == 1


# CI: 12 programs (tests/test_fuzz.py compiles random programs too); SYMGRAD_FUZZ=long: 2000 programs,
# and the test is marked slow
_FUZZ_LONG = os.environ.get("SYMGRAD_FUZZ", "") == "long"
_FUZZ_SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                      phases=[Phase.explicit, Phase.generate, Phase.shrink],  # no example database
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("symgrad-compile-default", max_examples=12, **_FUZZ_SETTINGS)
settings.register_profile("symgrad-compile-long", max_examples=2000, **_FUZZ_SETTINGS)
FUZZ_PROFILE = "symgrad-compile-long" if _FUZZ_LONG else "symgrad-compile-default"


def _slow_when_long(test):
    return pytest.mark.slow(test) if _FUZZ_LONG else test


@_slow_when_long
@settings(settings.get_profile(FUZZ_PROFILE))
@given(programs())
@pytest.mark.heavy
def test_random_programs_compiled_match_eager(prog):
    _check_program(prog)


def test_fuzz_profile_follows_the_environment():
    want = 2000 if _FUZZ_LONG else 12
    assert settings.get_profile(FUZZ_PROFILE).max_examples == want
    marks = {m.name for m in getattr(test_random_programs_compiled_match_eager, "pytestmark", [])}
    assert ("slow" in marks) == _FUZZ_LONG


# --- d. value_and_grad: one joint Numba kernel ------------------------------------------------



def _workload_args(name, seed):
    r = np.random.default_rng(_seed(name, seed))
    return {
        "W1": lambda: [r.uniform(-2, 2, 40)],
        "W2": lambda: [r.standard_normal((6, 5)), r.standard_normal(5), r.standard_normal(5)],
        "W3": lambda: [r.standard_normal(s) for s in [(7, 4), (4, 3), (3,), (3, 1), (1,), (7, 1)]],
        "W5": lambda: [r.standard_normal((6, 5)), r.integers(0, 5, 6)],
    }[name]()


WORKLOADS = {"W1": (w1, 0), "W2": (w2, (0, 1, 2)), "W3": (w3, (0, 1, 2, 3, 4, 5)), "W5": (w5, 0)}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_value_and_grad_joint_kernel_matches_eager(name):
    fn, argnums = WORKLOADS[name]
    vg = symgrad.value_and_grad(symgrad.compile(fn, backend=BACKEND), argnums)
    nums = [argnums] if isinstance(argnums, int) else list(argnums)
    for seed in (0, 1):   # the second call runs the same kernel on new values
        arrays = _workload_args(name, seed)
        assert nums == [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]  # every float input
        value, grads = vg(*arrays)
        grads = [grads] if isinstance(argnums, int) else list(grads)
        leaves = [symgrad.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        want = fn(*leaves)
        want.backward()
        where = f"{name}, call {seed + 1}"
        assert isinstance(value, float)
        assert_close(value, want.item(), 1e-9, f"{where}: value")
        for i, g in zip(nums, grads):
            assert isinstance(g, np.ndarray) and g.dtype == np.float64, f"{where}: gradient {i} is {g!r}"
            assert_close(g, leaves[i].grad.numpy(), 1e-9, f"{where}: gradient of argument {i}")
    compiled = vg.compiled
    assert compiled.options["backend"] == "numba"
    assert compiled.stats()["traces"] == 1
    arrays = _workload_args(name, 0)
    positions = [i for i, a in enumerate(arrays)]
    k = compiled.kernels_for(*arrays, wrt=[positions.index(i) for i in nums], joint_kernel=True)
    assert k.joint_fn is not None and "@njit" in k.joint_source
    assert compiled.stats()["traces"] == 1

