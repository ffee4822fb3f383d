"""Compiled value-and-gradient of data-parallel losses over a Dask cluster (``pip install symgrad[dask]``).

:func:`value_and_grad` splits a loss ``loss(params..., data...)`` along the rows of its data: the
data arguments are ``dask.array`` arrays chunked along axis 0, the parameters are numpy arrays.
Each chunk runs the compiled forward+backward (:func:`symgrad.value_and_grad`) on a worker, and the
partial values and gradients are added up by a tree reduction::

    import dask.array as da, scipy.optimize, symgrad, symgrad.dask

    def logistic(w, X, y):                      # in the script or notebook itself: sent by value
        z = X @ w
        return (symgrad.log1p(symgrad.exp(z)) - y * z).sum()

    X = da.from_zarr(...)                       # rows chunked along axis 0, e.g. chunks=(100_000, 8)
    vg = symgrad.dask.value_and_grad(logistic, argnums=0, data_argnums=(1, 2))
    scipy.optimize.minimize(vg, w0, args=(X, y), jac=True, method="L-BFGS-B")

What ``reduction`` means: ``loss(params, X_chunk)`` must return the chunk's **sum** of per-row
terms (``reduction="sum"``) or the chunk's **mean** of per-row terms (``reduction="mean"``, every
row weighing the same).  The combined result is then exactly the loss over all rows:
``sum``: ``loss(X) = sum_i loss(X_i)``; ``mean``: ``loss(X) = sum_i n_i * loss(X_i) / sum_i n_i``
(``n_i`` the rows of chunk ``i``), and likewise for the gradients.  A mean over several axes, such
as ``(tanh(x * w + b) ** 2).mean()`` over ``x[N, 1000]``, is a mean of per-row means, so it is fine.

How the loss reaches the workers: never as compiled code.  A loss defined at the top level of an
importable module travels **by reference** (:class:`LossRef`: its module and qualified name), and
each worker imports it.  Any other loss -- defined in ``__main__`` (a script, a notebook cell), a
lambda, a closure, a ``functools.partial`` -- travels **by value** (:class:`LossByValue`), pickled
with ``cloudpickle`` as Dask does: its code, its defaults, the values of its closure cells and of
the globals it reads, and, by value again, the functions of ``__main__`` it calls.  The SHA-256 of
those bytes is the loss's identity: each worker compiles a function once per digest (kernels come
from the shared disk cache, ``$SYMGRAD_CACHE_DIR``, when already there) and keeps it, so a redefined
loss -- or one whose captured array or constant changed -- has a new digest and is compiled anew,
and an unchanged one is not.  The bytes are made afresh on every call, so a global changed between
two calls is seen.  ``symgrad.compile(...)`` options travel with the loss either way.

Checks made before anything is submitted (once per argument signature): the loss is importable (on
every worker of a distributed client too); the data arguments are dask arrays chunked only along
axis 0, all with the same row chunks; and, unless ``check=False``, the loss is additive over rows:

* structurally: the loss is traced on the first rows and its graph is followed from the data
  inputs; an op that combines rows of a chunk with each other while keeping them apart (``x -
  x.mean(0)``, a softmax or normalisation over axis 0, ``x[1:] - x[:-1]``, ``x @ x.T``, picking a row)
  is rejected, naming the op;
* numerically: on the first 8 rows, ``loss(rows)`` must equal ``loss(rows[:4]) + loss(rows[4:])``
  and ``loss(rows[:3]) + loss(rows[3:])`` for ``sum`` (the row-weighted averages for ``mean``),
  values and gradients, to a relative 1e-7 (float64; 1e-3 for float32).  This catches what the
  graph walk lets through: a non-linear function of a sum over rows (``x.sum() ** 2``), a constant
  added to a ``sum`` loss, a ``mean`` loss declared as ``sum``.

The checks look at the first rows only: a loss that is additive there but not elsewhere (rows that
are all equal, say) is not caught.  A worker process that dies while computing is handled by Dask:
the scheduler reruns its tasks (and any chunk it held) elsewhere, so the result is the same.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import importlib
import operator
import threading
import uuid
from collections.abc import Callable, Sequence

import numpy as np

try:
    import cloudpickle
    import dask
    import dask.array as da
    from dask.base import get_scheduler
except ImportError as e:  # pragma: no cover - exercised only without the extra
    # importable without Dask (the doctests collect it); using it says what to do
    cloudpickle = dask = da = get_scheduler = None
    _MISSING = e

from .compiler.compile import CompiledFunction
from .compiler.compile import value_and_grad as _local_value_and_grad
from .compiler.options import CompileOptions
from .ir import trace
from .ir.graph import IndexRef

__all__ = ["LossRef", "LossByValue", "value_and_grad", "worker_stats", "NotAdditiveError"]

PROBE_ROWS = 8
INLINE_PARAMS_BYTES = 1 << 20
WORKER_KEEP_BY_VALUE = 32     # compiled by-value losses a worker keeps (a notebook redefines them often)
RTOL = {np.dtype(np.float64): 1e-7, np.dtype(np.float32): 1e-3}


class NotAdditiveError(ValueError):
    """The loss is not a sum (or mean) of per-row terms over its data arguments' axis 0."""


# --- the loss, by reference ---------------------------------------------------------------------

class LossRef:
    """A loss named by its module and qualified name (what travels to the workers).

    ``options`` are the ``symgrad.compile`` options to compile it with on the worker, when the
    name refers to the plain function rather than to the compiled one (None: the defaults).
    """

    __slots__ = ("module", "qualname", "options")

    def __init__(self, module: str, qualname: str, options: CompileOptions | None = None) -> None:
        self.module, self.qualname, self.options = module, qualname, options

    def __reduce__(self):
        return LossRef, (self.module, self.qualname, self.options)

    def __eq__(self, other) -> bool:
        return isinstance(other, LossRef) and \
            (self.module, self.qualname, self.options) == (other.module, other.qualname, other.options)

    def __hash__(self) -> int:
        return hash((self.module, self.qualname, self.options))

    def __repr__(self) -> str:
        return f"LossRef({self.module}.{self.qualname})"

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"

    def resolve(self):
        """Import the module and look the name up (raises ImportError / AttributeError)."""
        obj = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj

    def compiled(self) -> CompiledFunction:
        """The CompiledFunction this reference names, compiled with its options."""
        obj = self.resolve()
        obj = getattr(obj, "compiled", obj)          # a symgrad.value_and_grad(...) wrapper
        if isinstance(obj, CompiledFunction):
            return obj
        if not callable(obj):
            raise TypeError(f"{self.module}.{self.qualname} is a {type(obj).__name__}, not a function")
        return CompiledFunction(obj, **(self.options or {}))


def _underlying(obj):
    obj = getattr(obj, "compiled", obj)
    return obj.fn if isinstance(obj, CompiledFunction) else obj


IMPORTABLE = ("a loss defined in an importable module is sent by reference, so that module must be importable "
              "on every worker too (a package installed there, a file on their PYTHONPATH, or "
              "client.upload_file('mylosses.py')); a loss defined in the script or notebook itself is sent by "
              "value instead")


class LossByValue:
    """A loss shipped by value: its ``cloudpickle`` bytes, their SHA-256 ``digest`` and the
    ``symgrad.compile`` options to compile it with (None: the defaults).

    Equality and hashing use the digest and options only, so a worker keys its compiled functions
    by content; the bytes are unpickled on a worker only when it has not compiled that digest yet.
    """

    __slots__ = ("digest", "blob", "options", "label", "_fn")

    def __init__(self, digest: str, blob: bytes, options: CompileOptions | None, label: str, fn=None) -> None:
        self.digest, self.blob, self.options, self.label, self._fn = digest, blob, options, label, fn

    @classmethod
    def of(cls, fn, options: CompileOptions | None) -> LossByValue:
        """Pickle ``fn`` as it is now (its globals' current values) and take the digest."""
        try:
            blob = cloudpickle.dumps(fn)
        except Exception as e:  # noqa: BLE001 - anything cloudpickle cannot pickle is reported the same way
            raise TypeError(f"symgrad.dask: cannot send the loss {_label(fn)} to the workers by value: cloudpickle "
                            f"fails on it or on something it reads ({type(e).__name__}: {e}); pass such objects as "
                            f"arguments, or define the loss at the top level of a module the workers can "
                            f"import") from e
        return cls(hashlib.sha256(blob).hexdigest(), blob, options, _label(fn), fn)

    def __reduce__(self):
        return LossByValue, (self.digest, self.blob, self.options, self.label)

    def __eq__(self, other) -> bool:
        return isinstance(other, LossByValue) and (self.digest, self.options) == (other.digest, other.options)

    def __hash__(self) -> int:
        return hash((self.digest, self.options))

    def __repr__(self) -> str:
        return f"LossByValue({self.label}, digest={self.digest[:12]})"

    @property
    def name(self) -> str:
        return f"{self.label}#{self.digest[:12]}"

    def resolve(self):
        """The function (unpickled from the bytes on a worker)."""
        if self._fn is None:
            self._fn = cloudpickle.loads(self.blob)
        return self._fn

    def compiled(self) -> CompiledFunction:
        return CompiledFunction(self.resolve(), **(self.options or {}))


def _label(fn) -> str:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(fn)


def _by_reference(fn, options: CompileOptions | None) -> LossRef | None:
    """The :class:`LossRef` of ``fn`` when its module and name give it back here, else None."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__" \
            or "<lambda>" in qualname or "<locals>" in qualname:
        return None
    ref = LossRef(module, qualname, options)
    try:
        found = ref.resolve()
    except (ImportError, AttributeError):
        return None
    if _underlying(found) is not fn:
        return None    # the name now holds another object (redefined or wrapped)
    if isinstance(found, CompiledFunction) or isinstance(getattr(found, "compiled", None), CompiledFunction):
        ref = LossRef(module, qualname)   # the name carries its own options
    return ref


def reference(loss: Callable) -> LossRef | LossByValue:
    """How ``loss`` travels to the workers: a :class:`LossRef` when it is a top-level function of
    an importable module, else a :class:`LossByValue` of its current content."""
    fn = _underlying(loss)
    if not callable(fn):
        raise TypeError(f"symgrad.dask: the loss must be a function, not a {type(fn).__name__}")
    compiled = getattr(loss, "compiled", loss)
    options = compiled.compile_options if isinstance(compiled, CompiledFunction) else None
    ref = _by_reference(fn, options)
    return ref if ref is not None else LossByValue.of(fn, options)


def _probe_import(module: str, qualname: str) -> str | None:
    """Run on each worker before submitting: None, or why the loss cannot be imported there."""
    try:
        LossRef(module, qualname).resolve()
    except Exception as e:  # noqa: BLE001 - reported to the client
        return f"{type(e).__name__}: {e}"
    return None


# --- the worker side --------------------------------------------------------------------------

_WORKER_LOCK = threading.Lock()
_WORKER_FNS: collections.OrderedDict = collections.OrderedDict()


class _WorkerLoss:
    """A worker's compiled value-and-gradient of one loss.  The first call per argument signature
    holds a lock, so worker threads sharing a process trace it once, not once each."""

    def __init__(self, vg) -> None:
        self.vg, self.compiled, self.lock, self.seen = vg, vg.compiled, threading.Lock(), set()

    def __call__(self, *args):
        sig = tuple((a.dtype.str, a.shape) if isinstance(a, np.ndarray) else (type(a).__name__, a) for a in args)
        if sig in self.seen:
            return self.vg(*args)
        with self.lock:
            out = self.vg(*args)
            self.seen.add(sig)
        return out


def _worker_vg(ref: LossRef | LossByValue, argnums: tuple) -> _WorkerLoss:
    key = (ref, argnums)
    vg = _WORKER_FNS.get(key)
    if vg is None:
        with _WORKER_LOCK:
            vg = _WORKER_FNS.get(key)
            if vg is None:
                try:
                    compiled = ref.compiled()
                except (ImportError, AttributeError) as e:
                    if isinstance(ref, LossByValue):
                        raise ImportError(f"symgrad.dask: this worker cannot unpickle the loss {ref.label}: it "
                                          f"refers to a module the worker cannot import ({type(e).__name__}: {e}); "
                                          "install that module on the workers") from e
                    raise ImportError(f"symgrad.dask: this worker cannot import the loss {ref.module}.{ref.qualname} "
                                      f"({type(e).__name__}: {e}); {IMPORTABLE}") from e
                vg = _WORKER_FNS[key] = _WorkerLoss(_local_value_and_grad(compiled, argnums))
                by_value = [k for k in _WORKER_FNS if isinstance(k[0], LossByValue)]
                for old in by_value[:-WORKER_KEEP_BY_VALUE]:
                    del _WORKER_FNS[old]
    return vg


def _chunk_value_and_grad(ref: LossRef | LossByValue, argnums: tuple, layout: tuple, mean: bool, params: tuple,
                          *blocks):
    """One chunk: (value, gradients, rows); for a mean loss, value and gradients times the rows."""
    args = [params[j] if kind == "p" else np.ascontiguousarray(blocks[j]) for kind, j in layout]
    value, grads = _worker_vg(ref, argnums)(*args)
    rows = blocks[0].shape[0]
    if mean:
        value = value * rows
        grads = tuple(g * rows for g in grads)
    return float(value), tuple(grads), rows


def _combine(*parts):
    """Add up partial (value, gradients, rows) triples (a node of the tree reduction)."""
    value = sum(p[0] for p in parts)
    grads = tuple(functools.reduce(operator.add, gs) for gs in zip(*(p[1] for p in parts)))
    return value, grads, sum(p[2] for p in parts)


def worker_stats() -> dict:
    """In a worker (``client.run(symgrad.dask.worker_stats)``): each loss it compiled and its
    :meth:`CompiledFunction.stats`; a loss sent by reference is named ``module.qualname``, one sent
    by value ``module.qualname#digest`` (the first 12 hex digits of its digest)."""
    return {ref.name: vg.compiled.stats() for (ref, _), vg in list(_WORKER_FNS.items())}


# --- the additivity check ---------------------------------------------------------------------

_REDUCTIONS = {  # op -> (position of dims, position of keepdim); dims None: all
    "sum": None, "mean": None, "prod": None, "max": None, "min": None,
    "sum.dim_IntList": (1, 2), "mean.dim": (1, 2), "prod.dim_int": (1, 2), "max.dim": (1, 2), "min.dim": (1, 2),
    "amax": (1, 2), "amin": (1, 2), "var.correction": (1, 3), "std.correction": (1, 3), "logsumexp": (1, 2),
}
_PASSTHROUGH = {"detach", "clone", "_to_copy", "contiguous", "where.self",
                "_check_range"}  # nn.functional's index checks: values unchanged, each row checked alone
# matmul-like ops: for each operand, where each of its axes goes ("out", k) or "c" (contracted)
_MATMUL = {
    "mm": ({0: 0, 1: "c"}, {0: "c", 1: 1}),
    "mv": ({0: 0, 1: "c"}, {0: "c"}),
    "dot": ({0: "c"}, {0: "c"}),
    "outer": ({0: 0}, {0: 1}),
}
POOLED, UNKNOWN = "pooled", "unknown"


class _Mix(Exception):
    def __init__(self, node, why: str) -> None:
        super().__init__(why)
        self.node, self.why = node, why


def _dims(spec, rank: int) -> set[int]:
    if spec is None:
        return set(range(rank))
    if isinstance(spec, int):
        spec = (spec,)
    return {d % rank for d in spec} if rank else set()


def _row_flow(node, states: list):
    """The row state of each output of ``node``: None (no data rows), an int (the axis whose slices
    each depend on one row only), POOLED (rows reduced away) or UNKNOWN; raises _Mix."""
    op, ins, out = node.op, node.inputs, node.outputs[0]
    rows = [(v, s) for v, s in zip(ins, states) if isinstance(s, int)]
    if all(s is None for s in states):
        return None
    if any(s == UNKNOWN for s in states):
        return UNKNOWN
    if not rows:
        return POOLED
    pooled = POOLED in states
    if node.expr is not None or op in _PASSTHROUGH:   # elementwise, with broadcasting
        axes = {k + len(out.shape) - len(v.shape) for v, k in rows}
        if pooled:
            raise _Mix(node, "combines a reduction over the rows with the rows themselves, so each row's term "
                             "depends on the other rows of its chunk")
        if len(axes) > 1:
            raise _Mix(node, "pairs the rows of the data along different axes")
        return axes.pop()
    if pooled and op not in _MATMUL:
        return UNKNOWN
    v, k = rows[0]
    rank = len(v.shape)
    if op in _REDUCTIONS:
        pos = _REDUCTIONS[op]
        dims = _dims(None if pos is None else node.args[pos[0]], rank)
        if k in dims:
            return POOLED
        keep = pos is not None and len(node.args) > pos[1] and node.args[pos[1]] is True
        return k if keep else k - sum(d < k for d in dims)
    if op in ("_softmax", "_log_softmax"):
        if node.args[1] % rank == k:
            raise _Mix(node, "normalises over the rows")
        return k
    if op in _MATMUL:
        maps = _MATMUL[op]
        places = [maps[i].get(s) if isinstance(s, int) else None for i, s in enumerate(states[:2])]
        if pooled:
            raise _Mix(node, "combines a reduction over the rows with the rows themselves")
        if len(rows) == 2:
            if places == ["c", "c"]:
                return POOLED          # sum over the rows of row_i * row_i (X.T @ Y)
            raise _Mix(node, "pairs every row with every other row")
        place = places[0] if places[0] is not None else places[1]
        if place == "c":
            raise _Mix(node, "contracts the rows against something that is not a row of the data")
        return place
    if op == "unsqueeze":
        d = node.args[1] % len(out.shape)
        return k + (d <= k)
    if op in ("squeeze", "squeeze.dim", "squeeze.dims"):
        dims = _dims(node.args[1] if len(node.args) > 1 else None, rank)
        gone = {d for d in dims if v.shape[d] == 1}
        return UNKNOWN if k in gone else k - sum(d < k for d in gone)
    if op == "expand":
        return k + len(out.shape) - rank
    if op == "t":
        return (1 - k) if rank == 2 else k
    if op == "transpose.int":
        d0, d1 = node.args[1] % rank, node.args[2] % rank
        return d1 if k == d0 else d0 if k == d1 else k
    if op == "permute":
        return [d % rank for d in node.args[1]].index(k)
    if op in ("view", "_unsafe_view", "reshape"):
        return k if tuple(out.shape[:k + 1]) == tuple(v.shape[:k + 1]) else UNKNOWN
    if op == "select.int":
        d = node.args[1] % rank
        if d == k:
            raise _Mix(node, "picks one row of the chunk")
        return k - (d < k)
    if op == "slice.Tensor":
        d = node.args[1] % rank
        if d == k and out.shape[d] != v.shape[d]:
            raise _Mix(node, "takes a slice of the rows, so the result depends on where the chunk starts and ends")
        return k
    if op == "index.Tensor":
        return _index_rows(node, v, k)
    return UNKNOWN


def _index_rows(node, v, k):
    ref = node.args[1]
    parts = ref.parts if isinstance(ref, IndexRef) else ref
    parts = parts if isinstance(parts, tuple) else (parts,)
    if k >= len(parts) or any(p is None or p is Ellipsis for p in parts[:k + 1]):
        return UNKNOWN
    p = parts[k]
    if isinstance(p, slice):
        if p == slice(None):
            return UNKNOWN
        raise _Mix(node, "takes a slice of the rows, so the result depends on where the chunk starts and ends")
    n = v.shape[k]
    if k == 0 and isinstance(p, np.ndarray) and p.shape == (n,) and np.array_equal(p, np.arange(n)):
        return 0 if all(isinstance(q, (int, np.integer, slice)) or getattr(q, "shape", None) == (n,)
                        for q in parts[1:]) else UNKNOWN
    if isinstance(p, (int, np.integer, np.ndarray)):
        raise _Mix(node, "picks rows of the chunk by position")
    return UNKNOWN


def _node_line(graph, node) -> str:
    head = f"%{node.outputs[0].name}:"
    for line in str(graph).splitlines():
        if line.strip().startswith(head):
            return line.split("#")[0].strip()
    return f"{node.op}(...)"


def _check_structure(fn, args: list, data_pos: list, name: str) -> None:
    graph = trace(fn, *args)
    placeholders = iter(graph.placeholders)
    states: dict = {}
    for i, a in enumerate(args):
        if not isinstance(a, (bool, int, float)):    # arrays become placeholders, numbers constants
            states[next(placeholders)] = 0 if i in data_pos else None
    for node in graph.nodes:
        try:
            st = _row_flow(node, [states.get(v) for v in node.inputs])
        except _Mix as m:
            raise NotAdditiveError(
                f"symgrad.dask: the loss {name} is not a sum of per-row terms over axis 0 of its data: in its "
                f"traced graph, `{_node_line(graph, m.node)}` {m.why}. Each chunk is evaluated on its own, so "
                f"such an op would see only the rows of one chunk. Compute whatever needs all rows (a centring, "
                f"a scaling) over the whole data set beforehand, or pass check=False if you know better") from None
        for o in node.outputs:
            states[o] = st


def _rows_value_and_grad(vg, args, data_pos, lo, hi):
    a = [x[lo:hi] if i in data_pos else x for i, x in enumerate(args)]
    value, grads = vg(*a)
    return value, [np.asarray(g, dtype=np.float64) for g in grads]


def _check_numeric(vg, args: list, data_pos: list, mean: bool, rtol: float, name: str) -> None:
    n = args[data_pos[0]].shape[0]
    whole = _rows_value_and_grad(vg, args, data_pos, 0, n)
    declared, other = ("mean", "sum") if mean else ("sum", "mean")
    for s in dict.fromkeys(s for s in (n // 2, 3) if 0 < s < n):
        a = _rows_value_and_grad(vg, args, data_pos, 0, s)
        b = _rows_value_and_grad(vg, args, data_pos, s, n)
        bad = _mismatch(whole, a, b, s / n if mean else 1.0, (n - s) / n if mean else 1.0, rtol)
        if bad is None:
            continue
        if _mismatch(whole, a, b, 1.0 if mean else s / n, 1.0 if mean else (n - s) / n, rtol) is None:
            raise NotAdditiveError(
                f"symgrad.dask: the loss {name} is a {other} over the rows, not a {declared}: pass "
                f"reduction={other!r} (on the first {n} rows with reduction={declared!r}, {bad})")
        parts = f"loss(rows 0:{s}) * {s}/{n} + loss(rows {s}:{n}) * {n - s}/{n}" if mean else \
            f"loss(rows 0:{s}) + loss(rows {s}:{n})"
        raise NotAdditiveError(
            f"symgrad.dask: the loss {name} is not a {declared} of per-row terms over axis 0 of its data: on the "
            f"first {n} rows, loss(rows 0:{n}) must equal {parts}, but {bad}. Each chunk is evaluated on its own "
            f"and the results are {'averaged, weighted by rows' if mean else 'added'}; a loss that is a non-linear "
            f"function of a sum over rows, adds a constant, or mixes rows cannot be split this way "
            f"(check=False skips this check)")


def _mismatch(whole, a, b, wa, wb, rtol) -> str | None:
    v, va, vb = whole[0], a[0], b[0]
    scale = abs(wa * va) + abs(wb * vb) + abs(v)
    if abs(v - (wa * va + wb * vb)) > rtol * scale:
        return f"the value is {v!r} against {wa * va + wb * vb!r} from the parts"
    for j, (g, ga, gb) in enumerate(zip(whole[1], a[1], b[1])):
        comb = wa * ga + wb * gb
        scale = float(np.max(np.abs(wa * ga) + np.abs(wb * gb) + np.abs(g), initial=0.0))
        err = float(np.max(np.abs(g - comb), initial=0.0))
        if err > rtol * scale:
            return f"gradient {j} differs by {err:.3g} (of {scale:.3g})"
    return None


# --- the driver ---------------------------------------------------------------------------------

def _client_of(scheduler):
    try:
        sched = get_scheduler(scheduler=scheduler)
    except (RuntimeError, ValueError):
        return None
    owner = getattr(sched, "__self__", sched)
    return owner if type(owner).__name__ == "Client" and hasattr(owner, "run") else None


def value_and_grad(loss: Callable, argnums: int | Sequence[int] = 0, data_argnums: int | Sequence[int] | None = None,
                   reduction: str = "sum", *, check: bool = True, split_every: int = 8, scheduler=None):
    """``f(*args) -> (value, grad)`` for a loss summed (or averaged) over the rows of Dask arrays.

    * ``loss``: a function (or ``symgrad.compile``'d function) returning a scalar: a top-level
      function of an importable module travels by reference, any other (``__main__``, a lambda, a
      closure) by value with cloudpickle (see the module docstring).
    * ``argnums``: the parameters to differentiate (numpy arrays or Python numbers; an int gives
      one gradient, a sequence a tuple), as in :func:`symgrad.value_and_grad`.
    * ``data_argnums``: the data arguments, ``dask.array`` arrays chunked along axis 0 only, all
      with the same row chunks (default: every dask array argument).
    * ``reduction``: ``"sum"`` when ``loss(params, X_chunk)`` returns the sum of per-row terms of the
      chunk, ``"mean"`` when it returns their mean; either way the result is the loss over all rows.
    * ``check``: trace the loss on the first rows and reject losses that are not additive over rows
      (see the module docstring); done once per argument signature.
    * ``split_every``: fan-in of the tree reduction.  ``scheduler``: passed to ``dask.compute``
      (default: the current client or Dask's default scheduler).

    The result works as the ``fun`` of ``scipy.optimize.minimize(..., jac=True)``.
    """
    if dask is None:  # pragma: no cover
        raise ImportError("symgrad.dask needs Dask: pip install 'symgrad[dask]' (dask[array] and distributed)") \
            from _MISSING
    if reduction not in ("sum", "mean"):
        raise ValueError(f"symgrad.dask.value_and_grad: reduction must be 'sum' or 'mean', not {reduction!r}")
    if not isinstance(split_every, int) or split_every < 2:
        raise ValueError(f"symgrad.dask.value_and_grad: split_every must be an int >= 2, not {split_every!r}")
    first = reference(loss)
    fn = _underlying(loss)
    many = not isinstance(argnums, int)
    nums = tuple(argnums) if many else (argnums,)
    local: dict = {}
    checked: set = set()
    workers_checked: set = set()
    mean = reduction == "mean"
    name = first.name if isinstance(first, LossRef) else first.label

    def local_vg(ref):
        if ref not in local:      # a loss by value: one per digest, so a changed global is seen here too
            local.clear()
            local[ref] = _local_value_and_grad(ref.compiled(), nums)
        return local[ref]

    def run(*args):
        # by value, the loss is pickled again on each call: its globals may have changed since
        ref = first if isinstance(first, LossRef) else LossByValue.of(fn, first.options)
        run.loss_ref = ref
        n = len(args)
        for i in nums:
            if not -n <= i < n:
                raise TypeError(f"symgrad.dask.value_and_grad: argnums={argnums!r}: argument {i} is out of range "
                                f"(called with {n} arguments)")
        wrt = tuple(i % n for i in nums)
        if data_argnums is None:
            data_pos = [i for i, a in enumerate(args) if isinstance(a, da.Array)]
        else:
            dn = (data_argnums,) if isinstance(data_argnums, int) else tuple(data_argnums)
            bad = [i for i in dn if not -n <= i < n]
            if bad:
                raise TypeError(f"symgrad.dask.value_and_grad: data_argnums={data_argnums!r}: argument {bad[0]} is "
                                f"out of range (called with {n} arguments)")
            data_pos = sorted({i % n for i in dn})
        if not data_pos:
            raise TypeError("symgrad.dask.value_and_grad: no data argument: pass dask arrays chunked along axis 0 "
                            "(and data_argnums)")
        clash = sorted(set(wrt) & set(data_pos))
        if clash:
            raise ValueError(f"symgrad.dask.value_and_grad: argument {clash[0]} is both differentiated (argnums) "
                             f"and data (data_argnums); gradients with respect to data are not supported")
        for i, a in enumerate(args):
            if i in data_pos and not isinstance(a, da.Array):
                raise TypeError(f"symgrad.dask.value_and_grad: data argument {i} is a {type(a).__name__}, not a "
                                f"dask array (wrap it with dask.array.from_array(x, chunks=(rows, *x.shape[1:])))")
            if i not in data_pos and isinstance(a, da.Array):
                raise TypeError(f"symgrad.dask.value_and_grad: argument {i} is a dask array but not a data argument "
                                f"(data_argnums={data_argnums!r}); parameters are numpy arrays")
        data = [args[i] for i in data_pos]
        _check_chunks(data, data_pos)
        # parameters: numbers to differentiate become float64 arrays, as in symgrad.value_and_grad
        params = [np.asarray(a, dtype=np.float64) if i in wrt and isinstance(a, (list, float, int)) else a
                  for i, a in enumerate(args)]
        layout, plist = [], []
        for i, a in enumerate(params):
            if i in data_pos:
                layout.append(("d", data_pos.index(i)))
            else:
                layout.append(("p", len(plist)))
                plist.append(a)
        sig = tuple(("d", a.dtype.str, a.shape[1:]) if isinstance(a, da.Array) else
                    ("p", a.dtype.str, a.shape) if isinstance(a, np.ndarray) else ("n", type(a).__name__, a)
                    for a in params)
        if (sig, ref) not in checked:
            client = _client_of(scheduler)
            if client is not None and isinstance(ref, LossRef) and (id(client), ref) not in workers_checked:
                problems = {w: p for w, p in client.run(_probe_import, ref.module, ref.qualname).items() if p}
                if problems:
                    w, p = next(iter(problems.items()))
                    raise ImportError(f"symgrad.dask: {len(problems)} worker(s) cannot import the loss {name} "
                                      f"({w}: {p}); {IMPORTABLE}")
                workers_checked.add((id(client), ref))
            if check:
                _check_loss(local_vg(ref), ref, params, data_pos, mean, name, scheduler)
            checked.add((sig, ref))
        blocks = [a.to_delayed().reshape(-1) for a in data]
        nonempty = [c for c, r in enumerate(data[0].chunks[0]) if r > 0]    # a 0-row chunk adds nothing
        token = uuid.uuid4().hex
        # small parameters ride along in every chunk task; large ones are one key, sent once per worker
        params_d = tuple(plist)
        if sum(getattr(a, "nbytes", 0) for a in plist) > INLINE_PARAMS_BYTES:
            params_d = dask.delayed(params_d, name=f"symgrad-params-{token}", pure=False)
        ref_d = ref
        if isinstance(ref, LossByValue) and len(ref.blob) > INLINE_PARAMS_BYTES:   # large captured arrays
            ref_d = dask.delayed(ref, name=f"symgrad-loss-{token}", pure=False)
        chunk = dask.delayed(_chunk_value_and_grad, pure=False)
        parts = [chunk(ref_d, wrt, tuple(layout), mean, params_d, *(b[c] for b in blocks),
                       dask_key_name=f"symgrad-chunk-{token}-{c}") for c in nonempty]
        if not parts:
            raise ValueError("symgrad.dask.value_and_grad: the data has no rows")
        level = 0
        while len(parts) > 1:
            level += 1
            parts = [dask.delayed(_combine, pure=False)(*parts[j:j + split_every],
                                                        dask_key_name=f"symgrad-combine-{token}-{level}-{j}")
                     for j in range(0, len(parts), split_every)]
        (value, grads, rows), = dask.compute(parts[0], scheduler=scheduler)
        if mean:
            value = value / rows
            grads = tuple(g / rows for g in grads)
        return float(value), (tuple(grads) if many else grads[0])

    functools.update_wrapper(run, fn)
    run.loss_ref = first
    return run


def _check_chunks(data: list, data_pos: list) -> None:
    for i, a in zip(data_pos, data):
        if a.ndim == 0:
            raise ValueError(f"symgrad.dask.value_and_grad: data argument {i} is 0-dimensional; data has rows")
        split = [ax for ax in range(1, a.ndim) if len(a.chunks[ax]) > 1]
        if split:
            raise ValueError(f"symgrad.dask.value_and_grad: data argument {i} is chunked along axis {split[0]} too "
                             f"(chunks {a.chunks}); chunk data along axis 0 only: "
                             f"x.rechunk({{{', '.join(f'{ax}: -1' for ax in split)}}})")
        if any(np.isnan(c) for c in a.chunks[0]):
            raise ValueError(f"symgrad.dask.value_and_grad: data argument {i} has unknown chunk sizes (after a "
                             f"boolean selection?); call x.compute_chunk_sizes() first")
    first, c0 = data_pos[0], data[0].chunks[0]
    for i, a in zip(data_pos[1:], data[1:]):
        if a.chunks[0] != c0:
            what = f"{a.shape[0]} rows against {data[0].shape[0]}" if a.shape[0] != data[0].shape[0] else \
                f"row chunks {_short(a.chunks[0])} against {_short(c0)}"
            raise ValueError(f"symgrad.dask.value_and_grad: data arguments {first} and {i} are not chunked alike "
                             f"along axis 0 ({what}); every data argument must have the same row chunks, e.g. "
                             f"y.rechunk({{0: X.chunks[0]}})")


def _short(chunks: tuple) -> str:
    return str(chunks) if len(chunks) <= 6 else f"({', '.join(map(str, chunks[:5]))}, ... {len(chunks)} chunks)"


def _check_loss(vg, ref: LossRef | LossByValue, params: list, data_pos: list, mean: bool, name: str, scheduler) -> None:
    rows = params[data_pos[0]].shape[0]
    p = min(PROBE_ROWS, rows)
    probe = dask.compute(*[params[i][:p] for i in data_pos], scheduler=scheduler)
    args = list(params)
    for i, x in zip(data_pos, probe):
        args[i] = np.ascontiguousarray(x)
    _check_structure(_underlying(ref.resolve()), args, data_pos, name)
    if p >= 2:
        dtypes = [np.result_type(a) for i, a in enumerate(args) if i not in data_pos and isinstance(a, np.ndarray)]
        rtol = max((RTOL.get(d, 1e-3) for d in dtypes), default=1e-7)
        _check_numeric(vg, args, data_pos, mean, rtol, name)
