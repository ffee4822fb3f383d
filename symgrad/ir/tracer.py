"""Tracing: run a function once on example inputs and record every op it applies.

The function runs eagerly (every op's real numpy forward, so shapes and dtypes are
exactly the eager ones) while the op registry reports each call here.  Python control
flow is evaluated at trace time, as with ``jax.jit``; reading a traced value's data
(``if loss > 0:``, ``float(x)``, ``x.item()``) raises :class:`TraceError` naming the
user's file and line.

>>> import symgrad, numpy as np
>>> g = symgrad.trace(lambda x, w: symgrad.tanh(x @ w).sum(), np.ones((2, 3)), np.ones(3))
>>> [n.op for n in g.nodes]
['mv', 'tanh', 'sum']
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ..autograd.grad_mode import STATE
from ..dtypes import from_numpy_dtype
from ..ops import registry, views
from ..ops.numpy_surface.face import make_numpy_face
from ..tensor import Tensor, is_numpy_face
from .decompositions import DECOMPOSITIONS
from .graph import Graph, IndexRef, Value

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# frames inside these directories are the library's, not the user's (a trailing separator, so that
# a user's own "symgrad_demo/" or ".../numpy/" folder still counts as the user's)
_LIBRARY_DIRS = (_PACKAGE_DIR + os.sep, os.path.join(os.path.dirname(_PACKAGE_DIR), "codegen") + os.sep,
                 os.path.dirname(os.path.abspath(np.__file__)) + os.sep)


_TRACE_LOCK = threading.RLock()


class TraceError(RuntimeError):
    """The traced function did something a compiled graph cannot express.

    ``data_dependent`` is True when the function needed a traced value on the host (``if``/``while``
    on a tensor, ``.item()``, ``float(x)``, a shape that depends on values): the function itself is
    fine, and running it eagerly gives the right answer (``symgrad.compile`` and ``symgrad.grad`` fall
    back to that).  It is False for mistakes and for what eager mode would not do either (an in-place
    write to an input, a non-Tensor result).  ``location`` is the user's ``file:LINE in function``
    that stopped the trace (or ""), ``reason`` the message without it.
    """

    def __init__(self, message: str, *, location: str = "", reason: str | None = None,
                 data_dependent: bool = False) -> None:
        super().__init__(message)
        self.location = location
        self.reason = message if reason is None else reason
        self.data_dependent = data_dependent


def user_frame() -> str:
    """'file.py:LINE in function' of the innermost frame outside symgrad and numpy."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if path.startswith(_LIBRARY_DIRS) or frame.filename.startswith("<"):
            if not frame.filename.startswith("<stdin>") and not frame.filename.startswith("<doctest"):
                continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown location>"


class Tracer:
    """Receives op calls from the registry and appends them to a :class:`Graph`."""

    records_graph = True

    def __init__(self, graph: Graph, decompose: bool = True) -> None:
        self.graph = graph
        self.decompositions = DECOMPOSITIONS if decompose else {}
        self._values: dict[int, tuple[Tensor, Value]] = {}
        # ndarray id -> (array, Value) for op outputs: autograd re-wraps saved outputs in new
        # Tensor objects around the same array (SavedVariable.unpack_tensor), which must map back.
        self._arrays: dict[int, tuple[np.ndarray, Value]] = {}
        # id(tensor) -> its version when bound: a tensor whose version moved on without an in-place
        # op on it was written through a view (views share the counter); the graph cannot follow
        self._versions: dict[int, int] = {}
        self.inputs: list[tuple[Tensor, Value]] = []
        self.constants_from: list[np.ndarray] = []   # arrays of tensors that became constants
        self._sources: dict[int, tuple[Tensor, np.ndarray]] = {}   # tensor -> the array it copied
        # the registry's recorder is one global: ops that other threads run meanwhile are not ours
        self.thread = threading.get_ident()

    # --- tensor <-> value -------------------------------------------------------------------
    def bind(self, t: Tensor, v: Value) -> None:
        self._values[id(t)] = (t, v)  # holding t keeps its id from being reused during the trace
        self._versions[id(t)] = 0 if t._vc is None else t._vc.value

    def value_of(self, t: Tensor) -> Value | None:
        entry = self._values.get(id(t))
        if entry is not None and entry[0] is t:
            return entry[1]
        entry = self._arrays.get(id(t._data))
        if entry is not None and entry[0] is t._data:
            return entry[1]
        return None

    def leaf_alias(self, t: Tensor) -> Tensor:
        """A new leaf tensor that requires grad and stands for ``t``'s value in the graph: a
        gradient taken inside the traced function w.r.t. it is recorded as ops on ``t``'s value,
        so the enclosing function can differentiate through that gradient."""
        alias = Tensor._wrap(t._data)
        alias.requires_grad_(True)
        if is_numpy_face(t):
            make_numpy_face(alias)
        self.bind(alias, self._as_value(t))
        return alias

    def note_source(self, t: Tensor, array: np.ndarray) -> None:
        """``t`` was made from a copy of ``array``: if it becomes a constant, ``array`` is watched."""
        self._sources[id(t)] = (t, array)

    def refuse(self, message: str, data_dependent: bool = True):
        """Stop tracing: the eager layer met something a graph cannot express (raises TraceError).

        The callers refuse values that a graph would have to read on the host (or whose shape depends
        on them), so ``data_dependent`` defaults to True: eager mode computes them correctly."""
        where = user_frame()
        raise TraceError(f"{message} ({where})", location=where, reason=message, data_dependent=data_dependent)

    def is_traced(self, t: Tensor) -> bool:
        if threading.get_ident() != self.thread:  # another thread's eager ops are not traced
            return False
        v = self.value_of(t)
        return v is not None and not (v.producer is not None and v.producer.op == "constant")

    def _as_value(self, t: Tensor) -> Value:
        if views.is_stale(t):   # a view whose base changed in place: replay it on the base's new value
            views.regenerate(t)
        v = self.value_of(t)
        if v is not None and t._vc is not None and self._versions.get(id(t), t._vc.value) != t._vc.value:
            raise TraceError(
                f"%{v.name} is read at {user_frame()} after it was modified in place through another tensor "
                "sharing its memory (a view such as y[0], y.view(...), y.t() or y.detach()); a compiled graph "
                "does not follow writes through views: write into the tensor itself (y[0] = ..., y.add_(...)) "
                "or clone() the view before modifying it")
        if v is None:  # a tensor made inside the function or captured from outside: a constant
            source = self._sources.get(id(t))
            self.constants_from.append(source[1] if source is not None and source[0] is t else t._data)
            data = np.array(t._data, copy=True)
            node = self.graph.add_node("constant", (), [(from_numpy_dtype(data.dtype), data.shape)], data=data,
                                       name="const")
            v = node.output
            self.bind(t, v)
        return v

    def _arg(self, a, spec):
        if spec.type == "Index":  # before the Tensor case: a bare mask or index tensor is an index
            return IndexRef(self._index(a))
        if isinstance(a, Tensor):
            return self._as_value(a)
        if spec.is_tensor_list and isinstance(a, (list, tuple)):
            return [self._as_value(x) if isinstance(x, Tensor) else x for x in a]
        return a

    def _index(self, part):
        if isinstance(part, Tensor):
            if part._data.dtype == np.bool_ and self.is_traced(part):
                where = user_frame()
                reason = ("boolean-mask indexing with a mask computed from the inputs gives a data-dependent "
                          "shape, which a compiled graph cannot have")
                raise TraceError(f"{reason} ({where}); use symgrad.where(mask, x, 0) instead", location=where,
                                 reason=reason, data_dependent=True)
            return self._as_value(part) if self.is_traced(part) else np.array(part._data, copy=True)
        if isinstance(part, tuple):
            return tuple(self._index(p) for p in part)
        if isinstance(part, list):
            return np.asarray(part)
        return part

    # --- the registry's hook ----------------------------------------------------------------
    def record(self, op, args: tuple, outputs: Sequence[Tensor]) -> None:
        if threading.get_ident() != self.thread:
            return
        decompose = self.decompositions.get(op.key)
        if decompose is not None and len(outputs) == 1 and self._decompose(decompose, args, outputs[0]):
            return
        if "shape_from_values" in op.rule.tags:
            self.refuse(f"{op.key}: its result's shape depends on the input values, which a compiled function "
                        f"cannot record; call the public function (symgrad.{op.name} or its numpy form), which "
                        f"fixes the shape when traced, or call it outside the compiled function")
        schema_args = op.rule.schema.args
        rec = tuple(self._arg(a, spec) for a, spec in zip(args, schema_args))
        specs = [(o.dtype, tuple(o._data.shape)) for o in outputs]
        elementwise = op.rule if op.rule.elementwise_text is not None else None
        node = self.graph.add_node(op.key, rec, specs, name=op.name, rule=elementwise)
        if not STATE.enabled:
            node.meta["no_grad"] = True
        face = _any_numpy_face(args)
        for t, v in zip(outputs, node.outputs):
            self.bind(t, v)
            self._arrays[id(t._data)] = (t._data, v)
            if face:
                make_numpy_face(t)

    def _decompose(self, decompose, args: tuple, output: Tensor) -> bool:
        """Record ``decompose(*args)`` (its ops record themselves) as the value of ``output``."""
        result = decompose(*args)
        if result is None:
            return False
        v = self._as_value(result)
        if v.shape != tuple(output._data.shape) or v.dtype is not output.dtype:
            raise AssertionError(f"a decomposition gives {v.type_str} for {output.dtype}{list(output.shape)}")
        self.bind(output, v)
        self._arrays[id(output._data)] = (output._data, v)
        if _any_numpy_face(args):
            make_numpy_face(output)
        return True

    def alias(self, new: Tensor, old: Tensor, op: str) -> None:
        """``new`` is ``old`` seen through ``op`` (``detach``): one node, same data."""
        if threading.get_ident() != self.thread:
            return
        src = self._as_value(old)
        node = self.graph.add_node(op, (src,), [(src.dtype, src.shape)], name=op)
        self.bind(new, node.output)
        if is_numpy_face(old):
            make_numpy_face(new)

    def rebind(self, t: Tensor, result: Tensor) -> None:
        """An in-place op made ``t`` hold ``result``'s value."""
        if threading.get_ident() != self.thread:
            return
        for x, xv in self.inputs:
            if x is t or (t._vc is not None and x._vc is t._vc):
                raise TraceError(
                    f"in-place modification of the input {xv.name!r} inside a compiled function, at {user_frame()}: "
                    "the compiled function would not write the new value back to the caller's array. Compute a "
                    "new value instead (x = x + 1 rather than x += 1, x.add_(1) or x[0] = ...), or clone() the "
                    "input first")
        if t._data.base is not None:  # a write into a view that shares no version counter with its base
            cur = self.value_of(t)
            for u, uv in list(self._values.values()):
                if u is not t and uv is not cur and (t._vc is None or u._vc is not t._vc) and \
                        np.may_share_memory(u._data, t._data) and np.shares_memory(u._data, t._data):
                    raise TraceError(
                        f"in-place modification of a view of %{uv.name} (made by view/reshape), at {user_frame()}: "
                        "a compiled graph does not follow writes through views; write into the tensor itself "
                        "(y[0] = ..., y.add_(...)) or clone() the view before modifying it")
        v = self._as_value(result)
        self.bind(t, v)
        self._arrays[id(t._data)] = (t._data, v)  # the array now holds the new value

    def same_value(self, new: Tensor, old: Tensor) -> None:
        """``new`` stands for ``old``'s current value (the stand-in an in-place op computes from)."""
        if threading.get_ident() != self.thread:
            return
        v = self.value_of(old)
        if v is not None:
            self.bind(new, v)

    def check_concrete(self, t: Tensor, what: str) -> None:
        if self.is_traced(t):
            where = user_frame()
            raise TraceError(
                f"{what} reads the value of a tensor computed from the traced inputs, at {where}. "
                "A compiled function is traced once and cannot branch on data: use symgrad.where(...) for "
                "data-dependent choices, or pass the value as a Python number.", location=where,
                reason=f"{what} reads the value of a tensor computed from the inputs", data_dependent=True)


class _NumpyFaceRecorder:
    """Stands in for a tracer during an eager run of a function given numpy arrays (the eager
    fallback of ``symgrad.compile``): ops on numpy-face values return numpy-face values, exactly as
    when traced, and nothing is recorded or refused."""

    records_graph = False

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def record(self, op, args: tuple, outputs: Sequence[Tensor]) -> None:
        if threading.get_ident() == self.thread and _any_numpy_face(args):
            for t in outputs:
                make_numpy_face(t)

    def alias(self, new: Tensor, old: Tensor, op: str) -> None:
        if is_numpy_face(old):
            make_numpy_face(new)

    def is_traced(self, t: Tensor) -> bool:
        return False

    def check_concrete(self, t: Tensor, what: str) -> None:
        pass

    def note_source(self, t: Tensor, array: np.ndarray) -> None:
        pass

    def rebind(self, t: Tensor, result: Tensor) -> None:
        pass

    def same_value(self, new: Tensor, old: Tensor) -> None:
        pass


@contextlib.contextmanager
def numpy_face_eager():
    """Run eager code on numpy-face tensors with numpy's semantics carried to every result (as
    tracing does).  Inside a trace the tracer already does this, so it stays in place.

    >>> from symgrad.ops.numpy_surface.face import make_numpy_face
    >>> x = make_numpy_face(symgrad.tensor([1.0, 2.0, 3.0], dtype=symgrad.float64))
    >>> with numpy_face_eager():
    ...     y = x * 2
    >>> type(y).__name__, float(y.var())     # numpy's ddof=0 (PyTorch's var would be 4.0)
    ('NumpyFaceTensor', 2.6666666666666665)
    """
    if registry._recorder is not None:
        yield
        return
    with _TRACE_LOCK:   # the registry has one recorder for all threads, as while tracing
        previous = registry.set_recorder(_NumpyFaceRecorder())
        try:
            yield
        finally:
            registry.set_recorder(previous)


def _any_numpy_face(args) -> bool:
    """Whether an op's arguments include a numpy-face value (its results then follow numpy too)."""
    for a in args:
        if a.__class__ is Tensor:
            continue
        if is_numpy_face(a) or (isinstance(a, (list, tuple)) and any(is_numpy_face(x) for x in a)):
            return True
    return False


def _flatten_outputs(out) -> tuple[list, str]:
    if isinstance(out, Tensor):
        return [out], "single"
    if isinstance(out, (tuple, list)):
        if not all(isinstance(o, Tensor) or o is None for o in out):
            bad = next(type(o).__name__ for o in out if not isinstance(o, Tensor) and o is not None)
            raise TraceError(f"the traced function returned a {type(out).__name__} containing a {bad}; "
                             "return Tensors (or a tuple of Tensors)")
        return list(out), "tuple"
    raise TraceError(f"the traced function returned {type(out).__name__}; return a Tensor or a tuple of Tensors "
                     "(dicts and other containers are not supported)")


def _arg_names(fn: Callable, n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = params[:n]
    names += [f"arg{i}" for i in range(len(names), n)]
    return names


def trace(fn: Callable, *example_args, names: Sequence[str] | None = None,
          requires_grad: Sequence[bool] | None = None, decompose: bool = True, numpy_face: bool = True) -> Graph:
    """Trace ``fn`` on example inputs (numpy arrays, Tensors or numbers) into a :class:`Graph`.

    Arrays and Tensors become placeholders; Python numbers are constants of the trace.
    With ``numpy_face`` (the default), placeholders made from numpy arrays follow numpy's semantics
    (methods, promotion: see :mod:`symgrad.ops.numpy_surface.face`), as do the values computed from
    them; placeholders made from Tensors follow PyTorch's.  Internal re-traces of graphs pass False.
    ``requires_grad[i]`` makes input ``i`` require grad while tracing (autodiff uses it).
    ``decompose`` records the ops of :mod:`symgrad.ir.decompositions` as their primitives.

    >>> g = symgrad.trace(lambda x: symgrad.exp(-x * x), np.zeros(4))
    """
    graph = Graph()
    tracer = Tracer(graph, decompose)
    names = list(names) if names is not None else _arg_names(fn, len(example_args))
    call_args = []
    for i, (name, a) in enumerate(zip(names, example_args)):
        if isinstance(a, (bool, int, float)) and not isinstance(a, np.ndarray):
            call_args.append(a)
            continue
        data = a._data if isinstance(a, Tensor) else np.asarray(a)
        if data.dtype == np.float64 and not isinstance(a, (Tensor, np.ndarray)) and np.ndim(a) == 0:
            data = np.asarray(a)
        t = Tensor._wrap(np.array(data, copy=True))
        from_numpy_dtype(t._data.dtype)  # a clear error for unsupported dtypes
        if requires_grad is not None and requires_grad[i] and t._data.dtype.kind == "f":
            t.requires_grad_(True)
        if numpy_face and not isinstance(a, Tensor):
            make_numpy_face(t)
        v = graph.add_placeholder(name, t.dtype, t._data.shape)
        tracer.bind(t, v)
        tracer.inputs.append((t, v))
        graph.example_inputs.append(t._data)
        call_args.append(t)
    _TRACE_LOCK.acquire()  # one trace at a time: the registry has one recorder for all threads
    previous = registry.set_recorder(tracer)
    # the user's function behind wrappers (a compiled module's parameter lifting): its return line
    code = getattr(inspect.unwrap(fn), "__code__", None)
    returned_at = []

    def watch_return(frame, event, arg):  # remembers where fn returned, for error messages
        if event == "return" and frame.f_code is code:
            returned_at.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")

    old_profile = sys.getprofile()
    if code is not None and old_profile is None:
        sys.setprofile(watch_return)
    try:
        out = fn(*call_args)
    finally:
        if code is not None and old_profile is None:
            sys.setprofile(None)
        registry.set_recorder(previous)
        _TRACE_LOCK.release()
    try:
        outs, kind = _flatten_outputs(out)
    except TraceError as exc:
        where = returned_at[-1] if returned_at else getattr(fn, "__qualname__", repr(fn))
        raise TraceError(f"{exc} (returned at {where})") from None
    graph.output_kind = kind
    graph.outputs = [None if o is None else tracer._as_value(o) for o in outs]
    graph.captured = [CapturedArray(a) for a in tracer.constants_from if a.size]
    return graph


class CapturedArray:
    """An array behind a constant of the trace, watched through a weak reference and a sample of
    its values: arrays made during the trace are gone once it ends, so only arrays something
    outside still holds (a closure, a global, a captured Tensor's storage) are ever compared."""

    __slots__ = ("ref", "positions", "sample")
    SAMPLE = 32

    def __init__(self, array: np.ndarray) -> None:
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        self.ref = weakref.ref(root)
        self.positions = np.unique(np.linspace(0, root.size - 1, min(root.size, self.SAMPLE)).astype(np.intp))
        self.sample = root.reshape(-1)[self.positions].tobytes() if root.flags.c_contiguous else \
            root.flat[self.positions].tobytes()

    def changed(self) -> bool:
        """Whether the sampled values differ now (False once the array is gone)."""
        root = self.ref()
        if root is None:
            return False
        now = root.reshape(-1)[self.positions] if root.flags.c_contiguous else root.flat[self.positions]
        return now.tobytes() != self.sample
