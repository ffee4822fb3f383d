"""``symgrad.compile``: trace once, differentiate symbolically, run generated kernels.

A compiled function traces the user's function on its first call (per guard key), builds the
joint forward+backward graph from the rule table (:mod:`symgrad.compiler.autodiff`), splits it at a
minimum-bytes cut (:mod:`codegen.partition`) and generates a forward and a backward kernel
(:mod:`codegen.emit`).  Its outputs carry one ``CompiledFunctionBackward`` node, so compiled
regions compose with eager code on both sides.

Two backends generate the kernels (:func:`_emit`): ``"numba"`` (the default) fuses elementwise
chains and reductions into loop kernels (:mod:`codegen.numba_emit`); ``"numpy"`` emits one numpy
statement per IR node (:mod:`codegen.emit`), and also runs float16 graphs, which Numba cannot.

>>> import numpy as np, symgrad
>>> @symgrad.compile
... def loss(x):
...     return (symgrad.sin(x) * x).sum()
>>> x = symgrad.tensor([0.5, 1.0], dtype=symgrad.float64, requires_grad=True)
>>> y = loss(x)
>>> type(y.grad_fn).__name__
'CompiledFunctionBackward'
>>> y.backward(); np.round(x.grad.numpy(), 6)
array([0.918217, 1.381773])
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from codegen.emit import emit_numpy
from codegen.partition import Partition, partition

from ..autograd import anomaly, engine
from ..autograd.grad_mode import STATE, enable_grad
from ..autograd.node import ERR_BACKWARD_TWICE, Node
from ..creation import zeros_like
from ..ir.graph import Graph, JointGraph
from ..ir.interpreter import first_nan
from ..ir.simplify import dce
from ..ir.tracer import TraceError, numpy_face_eager, trace
from ..ops import registry
from ..ops.numpy_surface.face import make_numpy_face
from ..tensor import Tensor, gradient_edge, is_numpy_face
from . import build_cache, logs, tiers
from .autodiff import autodiff
from .options import DEFAULT_BACKEND, BoundOptions, CompileOptions  # noqa: F401 - DEFAULT_BACKEND is API here too


def _depending_outputs(graph: Graph, wrt: Sequence[int]) -> frozenset:
    """Indices of the outputs computed from one of the ``wrt`` inputs (as in eager mode, an output
    made only of constants has no grad_fn)."""
    live = {graph.placeholders[i] for i in wrt}
    for n in graph.nodes:
        if n.op != "detach" and not n.meta.get("no_grad") and any(v in live for v in n.inputs):
            live.update(n.outputs)
    return frozenset(i for i, v in enumerate(graph.outputs) if v is not None and v in live)


@contextlib.contextmanager
def _gc_paused():
    """Pause Python's cyclic garbage collector while a function is built and first run.

    Building allocates many long-lived objects (graphs, generated code, Numba's dispatchers and
    type registries), so collections keep triggering, and each full one walks every sympy and
    Numba object in the process, which is a large share of a warm first call.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _half(graph: Graph) -> bool:
    """Whether ``graph`` has float16 values: Numba has none, so such graphs run as numpy statements
    (eager mode's float16 semantics)."""
    return any(v.dtype.np == np.float16 for n in graph.nodes for v in n.outputs) or \
        any(v.dtype.np == np.float16 for v in graph.placeholders)


def _emit(graph: Graph, name: str, options: CompileOptions, keep: dict | None = None):
    """Generate and compile ``graph`` as function ``name``: ``(function, source)``.  ``keep``
    collects the generated code by name (for the build cache)."""
    if options.backend == "numba" and not _half(graph):
        from codegen.numba_emit import emit_numba

        e = emit_numba(graph, name, parallel=options.parallel, fastmath=bool(options.fastmath),
                       offload=options.numpy_simd, math=options.math)
        if keep is not None:
            keep[name] = e
        return e.compile(cache=options.cache), e.full_source
    e = emit_numpy(graph, name)
    if keep is not None:
        keep[name] = e
    return e.compile(), e.source


# Build-cache entries of tiered builds keep the numpy tier's code too, under this prefix: a new
# process that has not imported Numba yet runs it while the cached kernels load in the background.
NUMPY_TIER = "numpy_tier:"


def _emit_tier(graph: Graph, name: str, options: CompileOptions, keep: dict | None, later: dict | None):
    """:func:`_emit`; or, when ``later`` is a dict (tiered execution), the numpy code of ``graph``
    now, with the graph put in ``later`` for the background build of its Numba code (and the numpy
    code in ``keep`` as ``NUMPY_TIER + name``)."""
    if later is None or options.backend != "numba" or _half(graph):
        return _emit(graph, name, options, keep)
    later[name] = graph
    numpy_keep: dict | None = None if keep is None else {}
    fn_source = _emit(graph, name, options.replace(backend="numpy"), numpy_keep)
    if keep is not None:
        keep[NUMPY_TIER + name] = numpy_keep[name]
    return fn_source


def _compile_emitted(e, options: CompileOptions):
    """``(function, source)`` of generated code loaded from the build cache."""
    if hasattr(e, "kernels"):  # codegen.numba_emit.NumbaEmitted
        return e.compile(cache=options.cache), e.full_source
    return e.compile(), e.source


@dataclass
class Kernels:
    """Everything built for one guard key: the graphs, the cut, the generated code."""

    graph: Graph
    joint: JointGraph | None
    parts: Partition | None
    forward: Callable
    backward: Callable | None
    forward_source: str
    backward_source: str
    wrt: list[int]
    n_outputs: int
    output_kind: str
    diff_outputs: list[int]
    timings: dict = field(default_factory=dict)
    joint_fn: Callable | None = None     # forward and backward in one kernel (value_and_grad)
    joint_source: str = ""
    unit_tangent: np.ndarray | None = None   # the seed ``1`` of a scalar output, made once
    grad_outputs: frozenset = frozenset()     # outputs that depend on an input requiring grad (get grad_fn)
    options: CompileOptions = field(default_factory=CompileOptions)  # what these were built with
    background: tiers.BackgroundBuild | None = None   # tiered: the Numba kernels being built for these

    @property
    def strategy(self) -> str:
        """How a recorded call runs: ``"joint"`` (a scalar loss: value and gradients in one
        kernel, the backward scales them) or ``"split"`` (forward saves, backward recomputes)."""
        return "joint" if self.joint_fn is not None and self.forward is not None else "split"


def _rebuilt_on_use(attr: str) -> property:
    def get(self):
        if self.__dict__.get("_rebuild"):
            self.__dict__["_rebuild"] = False
            joint = autodiff(self.graph, self.wrt)
            self.__dict__["_joint"], self.__dict__["_parts"] = joint, partition(joint)
        return self.__dict__.get("_" + attr)

    def set(self, value) -> None:
        self.__dict__["_" + attr] = value

    return property(get, set)


class JointKernels(Kernels):
    """Kernels of ``value_and_grad``: one joint kernel, so the forward/backward partition, which only
    ``inspect`` and logs read, is computed on first use."""

    @property
    def parts(self) -> Partition | None:
        if self.__dict__.get("_parts") is None and self.joint is not None:
            self.__dict__["_parts"] = partition(self.joint)
        return self.__dict__.get("_parts")

    @parts.setter
    def parts(self, value) -> None:
        self.__dict__["_parts"] = value


class CachedKernels(Kernels):
    """Kernels whose code came from the build cache (:mod:`symgrad.compiler.build_cache`): the joint graph
    and the partition, which only ``inspect``, logs and anomaly mode read, are rebuilt on first use."""

    joint = _rebuilt_on_use("joint")
    parts = _rebuilt_on_use("parts")
    _rebuild = False


class CompiledFunctionBackward(Node):
    """The single backward node of a compiled call (as in PyTorch's AOTAutograd)."""

    _has_saved = True

    def __init__(self, kernels: Kernels, saved: tuple, n_tensor_inputs: int, scaled: bool = False,
                 backward: Callable | None = None) -> None:
        super().__init__()
        self.kernels = kernels
        self._backward = backward           # the backward of the forward's tier (tiered execution)
        self._saved_values = saved          # split: what the forward saved; scaled: the gradients at seed 1
        self._scaled = scaled
        self._handed_saved = False
        self._n_outputs = kernels.n_outputs

    def release_variables(self) -> None:
        self._released = True
        self._saved_values = None

    @property
    def _fresh_outputs(self) -> bool:
        """Whether AccumulateGrad may keep the gradients of the last apply() without copying them
        (the engine asks after releasing the node): new arrays made by scaling, or the saved
        gradients handed over by a node that no longer holds them (no ``retain_graph``)."""
        return self._scaled and (not self._handed_saved or self._saved_values is None)

    def apply(self, grads: list, create_graph: bool) -> list:
        if create_graph:
            raise RuntimeError("double backward through a symgrad.compile'd function is not supported; "
                               "differentiate the eager function, or compose symgrad.compiler.autodiff graphs")
        if self._saved_values is None:
            raise RuntimeError(ERR_BACKWARD_TWICE)
        k = self.kernels
        if self._scaled:
            # The forward already ran the joint kernel with the seed 1: a scalar output's
            # vector-Jacobian product is linear in its cotangent, so scaling is exact.
            g = grads[0]
            if g is None:
                return [None] * len(self._tensor_positions)
            scale = float(g)
            by_input = dict(zip(k.wrt, self._saved_values))
            # ``.backward()`` seeds 1: hand over the saved gradients themselves; any other seed
            # makes new arrays
            self._handed_saved = scale == 1.0
            out = [None if by_input.get(i) is None else by_input[i] if scale == 1.0 else by_input[i] * scale
                   for i in self._tensor_positions]
            return self._check_nan(out, [np.asarray(g)]) if anomaly.STATE.enabled else out
        tangents = []
        for i in k.diff_outputs:
            g = grads[i] if i < len(grads) else None
            if g is None:
                v = k.graph.outputs[i]
                g = np.zeros(v.shape, v.dtype.np)
            tangents.append(g)
        raw = (self._backward or k.backward)(*self._saved_values, *tangents)
        by_input = dict(zip(k.wrt, raw))
        out = [by_input.get(i) for i in self._tensor_positions]
        return self._check_nan(out, tangents) if anomaly.STATE.enabled else out

    def _check_nan(self, out: list, tangents: list) -> list:
        """Anomaly mode: name the op of the compiled graph where the first NaN appears."""
        if not anomaly.is_anomaly_check_nan_enabled():
            return out
        for i, g in enumerate(out):
            if g is not None and g.dtype.kind == "f" and np.isnan(g).any():
                inputs = getattr(self, "_anomaly_inputs", None)
                origin = first_nan(self.kernels.joint, *inputs, *tangents) if inputs is not None else None
                site = anomaly.forward_site(self)
                raise RuntimeError(
                    f"Function 'CompiledFunctionBackward' returned nan values in its {i}th output"
                    + (f"; the first NaN of the compiled joint graph is {origin}" if origin else "") + "."
                    + (f" The compiled function was called at {site}." if site else ""))
        return out


class CompiledFunction:
    """A function compiled by :func:`compile`; call it like the original."""

    def __init__(self, fn: Callable, **options) -> None:
        """``options``: the keyword arguments of :func:`compile` (see :class:`CompileOptions`)."""
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.compile_options = CompileOptions.of(**options)
        self._kernels: dict = {}
        self._warned_captured = False
        self._fallback: dict = {}     # guard key -> the TraceError that made those calls run eagerly
        self._warned_fallback = False
        self._stats = {"calls": 0, "traces": 0, "cache_hits": 0, "trace_s": 0.0, "autodiff_s": 0.0,
                       "partition_s": 0.0, "codegen_s": 0.0, "build_cache_loads": 0, "eager_fallbacks": 0,
                       "fallback_reason": None}
        self._background: list[tiers.BackgroundBuild] = []   # tiered: Numba kernels built in the background

    @property
    def options(self) -> BoundOptions:
        """The compile options as a mapping (``f.options["math"]``); assigning one
        (``f.options["math"] = "libm"``) validates it, and later calls build kernels for it."""
        return BoundOptions(self)

    @options.setter
    def options(self, options) -> None:
        self.compile_options = CompileOptions.of(**options)

    # --- guards ---------------------------------------------------------------------------
    @staticmethod
    def _guard(args: tuple) -> tuple:
        key = []
        for a in args:
            if isinstance(a, Tensor):
                key.append(("T", a._data.dtype.str, a._data.shape, a.requires_grad))
            elif isinstance(a, np.ndarray):
                key.append(("A", a.dtype.str, a.shape))
            elif isinstance(a, (bool, int, float)):
                key.append(("N", type(a).__name__, a))  # numbers are baked into the trace
            else:
                raise TypeError(f"symgrad.compile: argument of type {type(a).__name__} is not supported; "
                                "pass Tensors, numpy arrays or Python numbers")
        return tuple(key)

    def _build(self, args: tuple, wrt: Sequence[int] | None, joint_kernel: bool = False) -> Kernels:
        t0 = time.perf_counter()
        graph = trace(self.fn, *args)
        t1 = time.perf_counter()
        tensor_args = [a for a in args if isinstance(a, (Tensor, np.ndarray))]
        if wrt is None:
            wrt = [i for i, a in enumerate(tensor_args) if isinstance(a, Tensor) and a.requires_grad]
        n_out = len(graph.outputs)
        diff = [k for k, v in enumerate(graph.outputs) if v is not None and v.dtype.is_floating_point]
        timings = {"trace_s": t1 - t0}
        # tracing always runs (it sees the function's current code and values); the rest may come
        # from the build cache, keyed by the traced graph
        options = self.compile_options
        key = build_cache.build_key(graph, wrt=list(wrt), joint_kernel=joint_kernel,
                                    options={k: v for k, v in options.items()
                                             if k not in ("cache", "strict", "tiered")}) \
            if options.cache else None
        kernels = self._from_build_cache(key, graph, wrt, joint_kernel, timings, args)
        keep: dict | None = {} if key is not None and kernels is None else None
        # tiered (and not in the build cache, so its kernels were never compiled here): numpy code now,
        # the Numba kernels of the graphs collected in ``later`` in a background thread
        later: dict | None = {} if kernels is None and options.tiered else None

        def emit(g: Graph, name: str):
            return _emit_tier(g, name, options, keep, later)
        if kernels is None and wrt:
            joint = autodiff(graph, wrt)
            t2 = time.perf_counter()
            # value_and_grad runs one joint kernel: no forward/backward cut to find now
            parts = None if joint_kernel else partition(joint)
            t3 = time.perf_counter()
            out0 = graph.outputs[0] if n_out == 1 else None
            scalar_loss = out0 is not None and out0.shape == () and out0.dtype.is_floating_point
            if joint_kernel:  # value_and_grad: one kernel computes the value and the gradients
                joint_fn, joint_src = emit(joint, "joint")
                kernels = JointKernels(graph, joint, None, None, None, "", "", list(wrt), n_out, graph.output_kind,
                                       joint.diff_outputs, joint_fn=joint_fn, joint_source=joint_src)
            else:
                fwd_fn, fwd_src = emit(parts.forward, "forward")
                bwd_fn, bwd_src = emit(parts.backward, "backward")
                kernels = Kernels(graph, joint, parts, fwd_fn, bwd_fn, fwd_src, bwd_src, list(wrt), n_out,
                                  graph.output_kind, joint.diff_outputs)
                if scalar_loss and options.scalar_loss == "joint":
                    kernels.joint_fn, kernels.joint_source = emit(joint, "joint")
            if scalar_loss:
                kernels.unit_tangent = np.ones((), out0.dtype.np)
            kernels.grad_outputs = _depending_outputs(graph, wrt)
            timings.update(autodiff_s=t2 - t1, partition_s=t3 - t2, codegen_s=time.perf_counter() - t3)
        elif kernels is None:
            t2 = time.perf_counter()
            # no gradients: what the outputs do not need (a value traced and dropped) is not computed
            fwd_fn, fwd_src = emit(dce(graph), "forward")
            kernels = Kernels(graph, None, None, fwd_fn, None, fwd_src, "", [], n_out, graph.output_kind, diff)
            timings.update(codegen_s=time.perf_counter() - t2)
        meta = {"diff_outputs": list(kernels.diff_outputs)}
        if later:   # the build cache gets the code once its kernels are compiled
            def store(compiled_keep: dict) -> None:
                build_cache.store_build(key, {**keep, **compiled_keep}, meta)

            self._tier_up(kernels, later, args, store if keep is not None else None)
        elif keep:
            build_cache.store_build(key, keep, meta)
        kernels.timings = timings
        kernels.options = options
        logs.report_build(self, kernels)
        self._stats["traces"] += 1
        for k, v in timings.items():
            self._stats[k] += v
        return kernels

    def _tier_up(self, kernels: Kernels, graphs: dict, args: tuple, store: Callable | None,
                 emit: Callable | None = None, finish_at_exit: bool | None = None) -> None:
        """Queue the build of the Numba code of ``graphs`` (:mod:`symgrad.compiler.tiers`); ``kernels``
        run their numpy code until it is done.  ``emit(graph, name, keep)`` makes one Numba function
        (default: generate it from the graph); ``finish_at_exit`` (default: the ``cache`` option) makes
        the interpreter wait for the build at exit."""
        options = self.compile_options
        if kernels.forward is not None:
            kernels.forward.paired_backward = kernels.backward
        arrays = [a._data if isinstance(a, Tensor) else a for a in args if isinstance(a, (Tensor, np.ndarray))]
        if emit is None:
            def emit(g, name, keep):
                return _emit(g, name, options, keep)
        build = kernels.background = tiers.BackgroundBuild(
            getattr(self.fn, "__qualname__", repr(self.fn)), kernels, graphs, emit, tiers.argument_copies(arrays),
            options.cache if finish_at_exit is None else finish_at_exit, store)
        self._background.append(build)
        tiers.submit(build)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the Numba kernels this function builds in the background (``tiered=True``) are
        built, or ``timeout`` seconds have passed; True if every call runs its kernels now.  A build
        that failed warns (:class:`~symgrad.compiler.tiers.KernelBuildWarning`) and makes this False.

        >>> f = symgrad.compile(lambda x: (x * x).sum(), tiered=True)
        >>> float(f(np.ones(3))), f.wait(), f.kernels_ready()
        (3.0, True, True)
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        done = [b.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                for b in list(self._background)]
        return all(done)

    def kernels_ready(self) -> bool:
        """Whether no background build of this function is queued, running or failed (without waiting)."""
        return all(b.state == "ready" for b in self._background)

    def _from_build_cache(self, key: str | None, graph: Graph, wrt: Sequence[int], joint_kernel: bool,
                          timings: dict, args: tuple = ()) -> Kernels | None:
        """The kernels of an earlier, identical build (same graph, options and symgrad), or None.

        Under ``tiered`` in a process that has not imported Numba yet, an entry that has the numpy
        tier's code runs it and loads the kernels in the background: importing Numba and loading
        them takes longer than the numpy code's first call.  Otherwise the kernels run from the start.
        """
        t0 = time.perf_counter()
        load_later = False

        def defer(names: set[str]) -> set[str]:
            """The entries not to decode now: the kernels, when they load in the background, else
            the numpy tier's code."""
            nonlocal load_later
            tier = {n for n in names if n.startswith(NUMPY_TIER)}
            kernels = names - tier
            load_later = (self.compile_options.tiered and "numba" not in sys.modules and bool(tier)
                          and {n[len(NUMPY_TIER):] for n in tier} == kernels)
            return kernels if load_later else tier

        found = build_cache.load_build(key, defer)
        if found is None:
            return None
        compiled = {name: e for name, e in found["emitted"].items() if not name.startswith(NUMPY_TIER)}
        first = {name[len(NUMPY_TIER):]: e for name, e in found["emitted"].items() if name.startswith(NUMPY_TIER)} \
            if load_later else compiled
        fns = {name: _compile_emitted(e, self.compile_options) for name, e in first.items()}
        none = (None, "")
        n_out = len(graph.outputs)
        k = CachedKernels(graph, None, None, fns.get("forward", none)[0], fns.get("backward", none)[0],
                          fns.get("forward", none)[1], fns.get("backward", none)[1], list(wrt), n_out,
                          graph.output_kind, list(found["meta"]["diff_outputs"]), joint_fn=fns.get("joint", none)[0],
                          joint_source=fns.get("joint", none)[1])
        if wrt:
            k._rebuild = True
            out0 = graph.outputs[0] if n_out == 1 else None
            if out0 is not None and out0.shape == () and out0.dtype.is_floating_point:
                k.unit_tangent = np.ones((), out0.dtype.np)
            k.grad_outputs = _depending_outputs(graph, wrt)
        if load_later:
            options = self.compile_options
            # loading cached kernels leaves nothing for the next process: no need to finish at exit
            self._tier_up(k, dict.fromkeys(compiled), args, None, finish_at_exit=False,
                          emit=lambda _graph, name, _keep: _compile_emitted(compiled[name](), options))
        timings["codegen_s"] = time.perf_counter() - t0
        self._stats["build_cache_loads"] += 1
        return k

    def kernels_for(self, *args, wrt: Sequence[int] | None = None, joint_kernel: bool = False) -> Kernels:
        """The kernels for these arguments (building them on a guard miss)."""
        # the options are part of the key: assigning one builds new kernels
        key = (self._guard(args), None if wrt is None else tuple(wrt), joint_kernel, self.compile_options)
        k = self._kernels.get(key)
        if k is not None and k.graph.captured and self._captured_changed(k.graph):
            k = None
        if k is None:
            with _gc_paused():
                k = self._kernels[key] = self._build(args, wrt, joint_kernel)
        else:
            self._stats["cache_hits"] += 1
        return k

    def _captured_changed(self, graph: Graph) -> bool:
        """Whether an array the function read from outside its arguments was written since it was
        traced (a constant of the trace): then the function is traced again, with one warning."""
        if not any(c.changed() for c in graph.captured):
            return False
        if not self._warned_captured:
            self._warned_captured = True
            name = getattr(self.fn, "__qualname__", repr(self.fn))
            warnings.warn(f"symgrad.compile({name}): an array the function reads from outside its arguments (a "
                          "closure, a global or a captured Tensor) changed since it was traced; it is a constant "
                          "of the trace, so the function is traced again. Pass it as an argument instead, as "
                          "with jax.jit.", UserWarning, stacklevel=_user_stacklevel())
        return True

    # --- calling ---------------------------------------------------------------------------
    def __call__(self, *args):
        self._stats["calls"] += 1
        record = STATE.enabled and any(isinstance(a, Tensor) and a.requires_grad for a in args)
        traces = self._stats["traces"]
        if self._fallback and self._guard(args) in self._fallback and not self.compile_options.strict:
            return self._call_eager(args)
        try:
            k = self.kernels_for(*args, wrt=None if record else ())
        except TraceError as exc:
            if not self.falls_back(exc, args):
                raise
            k = None
        if k is None:   # outside the except block: an error of the eager run is not chained to the trace's
            return self._call_eager(args)
        tensors = [a for a in args if isinstance(a, (Tensor, np.ndarray))]
        arrays = [a._data if isinstance(a, Tensor) else a for a in tensors]
        scaled = record and k.joint_fn is not None
        # the first run of new kernels loads (or compiles) them: as building, with the GC paused
        run = k.joint_fn if scaled else k.forward
        with _gc_paused() if self._stats["traces"] != traces else contextlib.nullcontext():
            result = run(*arrays, k.unit_tangent) if scaled else run(*arrays)
        outputs, saved = result[:k.n_outputs], result[k.n_outputs:]
        wrapped = [None if o is None else Tensor._wrap(np.asarray(o)) for o in outputs]
        if record and k.backward is not None:
            # tiered: the backward of the tier whose forward saved these values
            backward = None if scaled or k.background is None else getattr(run, "paired_backward", None)
            node = CompiledFunctionBackward(k, tuple(saved), len(tensors), scaled, backward)
            if anomaly.STATE.enabled:  # kept to find the op that makes a NaN gradient, and the call site
                node._anomaly_inputs = [np.array(a, copy=True) for a in arrays]
                node._trace = traceback.format_stack()[:-1]
            edges, metas = [], []
            for a in tensors:
                edges.append(gradient_edge(a) if isinstance(a, Tensor) else (None, 0))
                metas.append((a.shape if isinstance(a, np.ndarray) else a._data.shape,
                              (a if isinstance(a, np.ndarray) else a._data).dtype))
            node._next, node._meta = tuple(edges), tuple(metas)
            node._tensor_positions = list(range(len(tensors)))
            for i in k.diff_outputs:
                if wrapped[i] is not None and i in k.grad_outputs:
                    wrapped[i]._grad_fn, wrapped[i]._output_nr = node, i
        if k.output_kind == "single":
            return wrapped[0]
        return tuple(wrapped)

    # --- eager fallback ----------------------------------------------------------------------
    def falls_back(self, exc: TraceError, args: tuple) -> bool:
        """Whether a call with ``args`` whose trace raised ``exc`` runs eagerly instead (and, if so,
        remember it for these arguments' guard key and warn once per function).

        Only refusals of data-dependent Python (``if``/``while`` on a tensor, ``.item()``, a shape
        that depends on values) fall back: eager mode computes those correctly.  Mistakes raise as
        before, and ``strict=True`` raises every TraceError."""
        if self.compile_options.strict or not getattr(exc, "data_dependent", False):
            return False
        guard = self._guard(args)
        self._fallback[guard] = exc
        if self._stats["fallback_reason"] is None:
            self._stats["fallback_reason"] = str(exc)
        if not self._warned_fallback:
            self._warned_fallback = True
            name = getattr(self.fn, "__qualname__", repr(self.fn))
            warnings.warn(f"symgrad: {name} cannot be traced: tracing stopped at {exc.location or 'an unknown line'}"
                          f": {exc.reason}. It runs with eager autograd instead (the same numbers as calling it on "
                          "tensors, with no fused kernels; nothing compares them with a compiled result). "
                          "For a compiled function, replace the data-dependent branch by symgrad.where(...) or "
                          "pass the value as a Python number; pass strict=True to raise instead.",
                          EagerFallbackWarning, stacklevel=_user_stacklevel())
        return True

    def fallback_for(self, *args) -> TraceError | None:
        """The TraceError that makes calls with these arguments run eagerly, or None."""
        return self._fallback.get(self._guard(args))

    def _call_eager(self, args: tuple):
        """Run the function eagerly: what a compiled call returns, computed by the eager engine.
        Arrays are copied into numpy-face Tensors (a compiled function never writes to its
        arguments, and the function was written for numpy); Tensors are passed as they are, so
        outputs computed from one that requires grad get a working ``grad_fn``."""
        self._stats["eager_fallbacks"] += 1
        eager_args = [make_numpy_face(Tensor._wrap(np.array(a, copy=True))) if isinstance(a, np.ndarray) else a
                      for a in args]
        arrays_given = any(isinstance(a, np.ndarray) for a in args)
        with numpy_face_eager() if arrays_given else contextlib.nullcontext():
            out = self.fn(*eager_args)
        outs, kind = _eager_outputs(out)
        for o in outs:
            if o is not None and is_numpy_face(o):
                o.__class__ = Tensor     # as compiled calls return: PyTorch-face Tensors
        return outs[0] if kind == "single" else tuple(outs)

    def _dispatchers(self) -> list:
        seen: dict[int, object] = {}
        for k in self._kernels.values():
            for fn in (k.forward, k.backward, k.joint_fn):
                for d in getattr(fn, "kernels", ()):
                    seen[id(d)] = d
        return list(seen.values())

    def stats(self) -> dict:
        """What this function's calls cost so far.

        ``calls``; ``traces`` (one per new guard key: dtype, rank, shape or requires_grad);
        ``guard_hits``; seconds in ``trace_s``, ``autodiff_s``, ``partition_s``, ``codegen_s``;
        ``build_cache_loads`` (traces whose generated code came from the disk cache of
        :mod:`symgrad.compiler.build_cache`: no autodiff, partition or code generation ran);
        and, for its Numba kernels, ``kernels`` (how many have run), ``kernel_compiles`` (Numba
        compilations in this process) and ``kernel_cache_loads`` (signatures loaded from the
        disk cache instead).  Kernels take sizes at run time: a new size of the same rank
        re-traces but compiles nothing.  ``eager_fallbacks`` counts the calls that ran eagerly
        because the function cannot be traced, and ``fallback_reason`` says why (the TraceError's
        message, naming the line; None if it never fell back).  Under ``tiered=True``:
        ``background_builds`` (builds whose Numba kernels compiled, or compile, in the background),
        ``background_failures`` and ``background_error`` (the first failure, None if none), and
        ``kernels_ready`` (no build queued, running or failed: every call runs Numba kernels).

        >>> f = symgrad.compile(lambda x: (x * x).sum(), tiered=False)
        >>> _ = f(symgrad.ones(3)); _ = f(symgrad.ones(5))
        >>> s = f.stats(); s["traces"], s["kernels"], s["kernel_compiles"] + s["kernel_cache_loads"]
        (2, 1, 1)
        """
        out = dict(self._stats)
        out["guard_hits"] = out.pop("cache_hits")
        dispatchers = self._dispatchers()
        out["kernels"] = sum(1 for d in dispatchers if d.overloads)   # kernels that have run
        out["kernel_compiles"] = sum(sum(d.stats.cache_misses.values()) for d in dispatchers)
        out["kernel_cache_loads"] = sum(sum(d.stats.cache_hits.values()) for d in dispatchers)
        builds = list(self._background)
        failed = [b for b in builds if b.state == "failed"]
        out["background_builds"] = len(builds)
        out["background_failures"] = len(failed)
        out["background_error"] = f"{type(failed[0].error).__name__}: {failed[0].error}" if failed else None
        out["kernels_ready"] = all(b.state == "ready" for b in builds)
        return out

    def inspect(self, *args) -> Kernels:
        """The IR, joint graph, partition and generated source for these arguments.

        ``.options`` of the result are the compile options it was built with (``math`` among them);
        the Numba sources start with a ``# math=...`` line naming the vector functions they import.
        Under ``tiered=True`` it waits for the background build, so the kernels are the ones later calls run.
        """
        return self._settled(self.kernels_for(*args))

    @staticmethod
    def _settled(k: Kernels) -> Kernels:
        """``k`` once its background build (if any) is done."""
        if k.background is not None:
            k.background.wait()
        return k


class EagerFallbackWarning(UserWarning):
    """A function could not be traced (data-dependent Python control flow) and runs eagerly."""


def _eager_outputs(out) -> tuple[list, str]:
    """The outputs of an eager fallback call, checked as a trace checks them."""
    if isinstance(out, Tensor):
        return [out], "single"
    if isinstance(out, (tuple, list)) and all(isinstance(o, Tensor) or o is None for o in out):
        return list(out), "tuple"
    bad = next((type(o).__name__ for o in out if not isinstance(o, Tensor) and o is not None), None) \
        if isinstance(out, (tuple, list)) else None
    what = f"a {type(out).__name__} containing a {bad}" if bad else type(out).__name__
    raise TypeError(f"symgrad.compile: the function returned {what}; return a Tensor or a tuple of Tensors")


def compile(fn: Callable | None = None, **options):
    """Compile ``fn`` (usable as ``@compile`` and ``@compile(...)``).

    The options (keyword arguments; :class:`~symgrad.compiler.options.CompileOptions` holds and
    validates them, and ``.options`` of the result reads them):

    * ``backend="numba"`` (the default when Numba is installed) fuses elementwise chains and the
      reductions they feed into loop kernels; ``backend="numpy"`` emits one numpy statement per node.
    * ``parallel``: ``"auto"`` runs loops of at least 2**22 elements over Numba's threads (when it has
      more than one); ``True``/``False`` force it.  Parallel reductions are chunked in a fixed order,
      so results do not depend on the thread count.
    * ``fastmath=True`` lets LLVM reassociate floating-point arithmetic (off by default); under
      ``math="vector"`` it only allows FMA contraction, since the inlined elementary functions need IEEE
      arithmetic (their loops vectorise without it).
    * ``cache=True`` keeps compiled kernels in the per-user disk cache (see :mod:`codegen.jit`), and
      the code generated for each traced graph (:mod:`symgrad.compiler.build_cache`): a new process still
      traces the function, but an identical graph skips autodiff and code generation.
    * ``scalar_loss``: when the function returns one floating scalar and an input requires grad,
      ``"joint"`` (default) computes value and gradients in one fused pass at the call and the
      backward only scales them by the incoming gradient; ``"split"`` runs the partitioned
      forward, then the backward kernel at ``.backward()`` (AOTAutograd's way).  Non-scalar outputs
      always split.
    * ``numpy_simd=True``: on loops of 512 elements or more, elementary functions that numpy
      evaluates with SIMD on this CPU (exp, log, tanh, ...: see :mod:`codegen.simd`) run as numpy
      calls between fused loops, since inside a Numba loop each is a scalar libm call.
    * ``math="vector"`` (default): elementary functions that :mod:`codegen.vecmath` provides (exp, log1p,
      tanh, ...: ``codegen.numba_emit.vector_functions()``) are inlined into the fused loops as branch-free
      code that LLVM vectorises (AVX-512/AVX2), so they are not offloaded to numpy, and the loops' sums
      are reassociated so whole loops vectorise (the order of a sum's terms is fixed per machine).
      ``math="libm"``: scalar libm calls, and sums that add their terms in order.
    * ``strict``: a function that cannot be traced because it needs a traced value on the host
      (``if``/``while`` on a tensor, ``.item()`` or ``float(x)`` for control flow, a shape that
      depends on values) runs eagerly with one :class:`EagerFallbackWarning` naming the line
      (``strict=False``, the default; ``f.stats()["eager_fallbacks"]`` counts such calls), or
      raises :class:`~symgrad.TraceError` (``strict=True``).  Other trace errors always raise.
    * ``tiered=True`` (the default; ``SYMGRAD_TIERED=0`` makes False the default of a process): a build
      whose Numba kernels are not in the disk cache runs the numpy code of the same graphs at once, while
      its kernels compile in a background thread; calls switch to the kernels when they are built
      (:mod:`symgrad.compiler.tiers`; ``f.wait()`` waits for them).  ``tiered=False`` compiles the
      kernels in the first call, which returns when they have run.

    >>> @symgrad.compile(parallel=False)
    ... def f(x):
    ...     return (x * x).sum()
    >>> f.options["parallel"], f.options["scalar_loss"], f.options["math"]
    (False, 'joint', 'vector')
    """
    checked = CompileOptions.of(**options)   # bad options fail here, not at decoration
    from .module import compile_callable  # modules, and parameters read from outside: symgrad/compiler/module.py

    if fn is None:
        return lambda f: compile_callable(f, **checked)
    return compile_callable(fn, **checked)


# help() and inspect show the options as keyword arguments
compile.__signature__ = inspect.Signature(
    [inspect.Parameter("fn", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)]
    + [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
       for f in dataclasses.fields(CompileOptions)])


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0, *, math: str | None = None,
                   strict: bool | None = None, other_args: Callable | None = None):
    """``f(*arrays) -> (value, grad)`` with numpy arrays in and out (for scipy.optimize, ``jac=True``).

    ``fn`` must return a scalar.  With a tuple ``argnums`` the gradient is a tuple.  ``math``:
    ``"vector"`` or ``"libm"`` as in :func:`compile` (default: ``fn``'s own option if it is a compiled
    function, else ``"vector"``).  ``strict`` as in :func:`compile` (default: ``fn``'s own option, else
    False): a function with data-dependent Python control flow is differentiated eagerly, with one
    :class:`EagerFallbackWarning`, unless ``strict=True``.  ``other_args``: calls whose arguments are
    not all numpy arrays go there instead (``symgrad.value_and_grad`` of
    :mod:`symgrad.compiler.transforms` passes its pytree and Tensor path, so that numpy calls pay
    nothing for it).

    >>> vg = symgrad.value_and_grad(lambda x: (x ** 2).sum())
    >>> vg(np.array([1.0, 2.0]))
    (5.0, array([2., 4.]))
    >>> symgrad.value_and_grad(lambda x: symgrad.exp(x).sum(), math="libm").compiled.options["math"]
    'libm'
    """
    if isinstance(fn, CompiledFunction):
        options = fn.compile_options
        compiled = fn if math in (None, options.math) and strict in (None, options.strict) else \
            CompiledFunction(fn.fn, **options.replace(math=math or options.math,
                                                      strict=options.strict if strict is None else strict))
    else:
        compiled = CompiledFunction(fn, math=math or "vector", strict=bool(strict))
    many = not isinstance(argnums, int)
    nums = list(argnums) if many else [argnums]

    # Calls whose arguments are all numpy arrays skip the general path: per (dtype, shape) of
    # the arguments, remember the joint kernel (on small problems this overhead dominates).
    fast: dict = {}
    stats = compiled._stats

    def run(*args):
        try:
            if len(args) == 1:
                a = args[0]
                key = (a.__class__, a.dtype, a.shape)
            else:
                key = tuple([(a.__class__, a.dtype, a.shape) for a in args])
            plan = fast.get(key)
        except AttributeError:  # a Python number or list among the arguments
            key = plan = None
        if plan is not None and plan[3] and any(c.changed() for c in plan[3]):
            del fast[key]   # an outside array changed: the general path traces again
            plan = None
        if plan is not None:   # numpy arrays only: nothing to record
            k, tangent, n_out, _ = plan
            result = k.joint_fn(*args, tangent)   # read at each call: tiered kernels switch to Numba
            stats["calls"] += 1
            return float(result[0]), (result[n_out:] if many else result[n_out])
        if other_args is not None and not all(a.__class__ in (np.ndarray, float, int) for a in args):
            return other_args(*args)
        if _differentiable_call(args):
            return _value_and_grad_recorded(fn, args, nums, many)
        arrays = tuple(np.asarray(a, dtype=np.float64) if isinstance(a, (list, float, int)) and i in nums
                       else a for i, a in enumerate(args))
        positions = [i for i, a in enumerate(arrays) if isinstance(a, (Tensor, np.ndarray))]
        for i in nums:
            if not -len(arrays) <= i < len(arrays) or (i % len(arrays)) not in positions:
                what = "out of range" if not -len(arrays) <= i < len(arrays) else \
                    f"a {type(arrays[i]).__name__}, not an array"
                raise TypeError(f"value_and_grad: argnums={argnums!r}: argument {i} is {what} (called with "
                                f"{len(arrays)} arguments); differentiate numpy arrays, Tensors or Python numbers")
        wrt = [positions.index(i % len(arrays)) for i in nums]
        if compiled._fallback and compiled._guard(arrays) in compiled._fallback and \
                not compiled.compile_options.strict:
            return eager_call(arrays)
        try:
            with _gc_paused():   # first calls take this path: building, loading and first runs of kernels
                return general_call(arrays, key, wrt, args)
        except TraceError as exc:
            if not compiled.falls_back(exc, arrays):
                raise
        return eager_call(arrays)

    def eager_call(arrays):
        compiled._stats["calls"] += 1
        compiled._stats["eager_fallbacks"] += 1
        return _value_and_grad_eager(compiled.fn, arrays, [i % len(arrays) for i in nums], many)

    def general_call(arrays, key, wrt, args):
        k = compiled.kernels_for(*arrays, wrt=wrt, joint_kernel=True)
        compiled._stats["calls"] += 1
        data = [a._data if isinstance(a, Tensor) else a for a in arrays if isinstance(a, (Tensor, np.ndarray))]
        out_value = k.graph.outputs[0]
        if k.n_outputs != 1:
            raise ValueError(f"value_and_grad: the function must return one scalar Tensor, got a "
                             f"{k.graph.output_kind} of {k.n_outputs} outputs")
        if out_value is None or out_value.shape != ():
            shape = None if out_value is None else out_value.shape
            raise ValueError(f"value_and_grad: the function must return a scalar, got shape {shape}")
        if not out_value.dtype.is_floating_point:
            raise TypeError(_not_differentiable_output(out_value.dtype))
        result = k.joint_fn(*data, k.unit_tangent)
        if key is not None and all(a.__class__ is np.ndarray for a in args) and \
                not any(g is None for g in result[k.n_outputs:]):
            watched = [c for c in k.graph.captured if c.ref() is not None]
            fast[key] = (k, k.unit_tangent, k.n_outputs, watched)
        value, grads = result[0], list(result[k.n_outputs:])
        grads = [np.zeros_like(data[w]) if g is None else g for g, w in zip(grads, wrt)]
        return float(value), (tuple(grads) if many else grads[0])

    functools.update_wrapper(run, fn if not isinstance(fn, CompiledFunction) else fn.fn)
    run.compiled = compiled   # after update_wrapper, which copies a wrapped transform's own .compiled
    return run


def _not_differentiable_output(dtype) -> str:
    return (f"value_and_grad: the function returns a {dtype.name} value (a count or a comparison, such as "
            f"np.sum(x > 0)), which has no gradient; return a floating-point value, e.g. "
            f"np.sum(np.where(x > 0, 1.0, 0.0)) or a float loss")


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that names the user's line calling into symgrad."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _differentiable_call(args) -> bool:
    """Whether a transform's result must itself be differentiable: an argument is a value of an
    enclosing trace, or a tensor that requires grad while grad mode is on."""
    recorder = registry._recorder
    for a in args:
        if isinstance(a, Tensor):
            if recorder is not None and recorder.is_traced(a):
                return True
            if STATE.enabled and (a._requires_grad or a._grad_fn is not None):
                return True
    return False


def _value_and_grad_recorded(fn: Callable, args: tuple, nums: list[int], many: bool):
    """``(value, grad)`` as Tensors computed by the eager engine with ``create_graph=True``, so that
    an enclosing trace records the gradient's ops (and differentiates through them) and an eager
    caller can take higher derivatives."""
    fn = fn.fn if isinstance(fn, CompiledFunction) else fn
    recorder = registry._recorder
    leaves = list(args)
    with enable_grad():
        for i in nums:
            a = args[i]
            if not isinstance(a, Tensor):
                a = Tensor._wrap(np.asarray(a, dtype=np.float64))
            if recorder is not None and recorder.is_traced(a):
                a = recorder.leaf_alias(a)
            elif not (a._requires_grad or a._grad_fn is not None):
                a = a.detach().requires_grad_(True)
            leaves[i] = a
        value = fn(*leaves)
        if not isinstance(value, Tensor) or value.shape != ():
            shape = getattr(value, "shape", None)
            raise ValueError(f"value_and_grad: the function must return a scalar, got shape {shape}")
        if not value.dtype.is_floating_point:
            raise TypeError(_not_differentiable_output(value.dtype))
        if value.requires_grad:
            grads = engine.grad([value], [leaves[i] for i in nums], create_graph=True, allow_unused=True)
        else:  # a constant of the arguments (the gradient of x ** 0, say)
            grads = [None] * len(nums)
    grads = [zeros_like(leaves[i]) if g is None else g for g, i in zip(grads, nums)]
    return value, (tuple(grads) if many else grads[0])


def _value_and_grad_eager(fn: Callable, arrays: tuple, nums: list[int], many: bool):
    """``(value, grad)`` of one call computed by the eager engine, with numpy arrays out as
    :func:`value_and_grad`'s compiled path returns them: the fallback for functions that cannot be
    traced.  Arrays become numpy-face leaves (copies), so the function sees numpy's semantics."""
    leaves = []
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            a = make_numpy_face(Tensor._wrap(np.array(a, copy=True)))
            if i in nums:
                a.requires_grad_(True)
        elif i in nums:
            a = a.detach().requires_grad_(True)
        leaves.append(a)
    with numpy_face_eager(), enable_grad():
        value = fn(*leaves)
        if not isinstance(value, Tensor) or value.shape != ():
            shape = getattr(value, "shape", None)
            raise ValueError(f"value_and_grad: the function must return a scalar, got shape {shape}")
        if not value.dtype.is_floating_point:
            raise TypeError(_not_differentiable_output(value.dtype))
        wrt = [leaves[i] for i in nums]
        grads = engine.grad([value], wrt, allow_unused=True) if value.requires_grad else [None] * len(nums)
    out = [np.zeros_like(t._data) if g is None else g._data for g, t in zip(grads, wrt)]
    return float(value._data), (tuple(out) if many else out[0])


def grad(fn: Callable, argnums: int | Sequence[int] = 0, *, math: str | None = None, strict: bool | None = None):
    """``f(*arrays) -> grad``: the gradient part of :func:`value_and_grad` (``math`` and ``strict`` as there).

    >>> symgrad.grad(lambda x: (x ** 2).sum(), math="libm")(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    vg = value_and_grad(fn, argnums, math=math, strict=strict)

    def run(*args):
        return vg(*args)[1]

    functools.update_wrapper(run, fn if not isinstance(fn, CompiledFunction) else fn.fn)
    run.compiled = vg.compiled
    return run
