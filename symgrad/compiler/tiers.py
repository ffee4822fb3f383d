"""Tiered execution: the first calls run numpy code while the Numba kernels compile in a background thread.

Compiling the Numba kernels of a new graph takes LLVM a second or more; the numpy backend's code for
the same graph (:mod:`codegen.emit`, one numpy statement per IR node) runs at once.  So under
``symgrad.compile(..., tiered=True)`` (the default) a build whose kernels are not in the disk cache

1. generates the numpy code of its graphs (the forward, backward or joint graph of the same
   partition) and returns it: the call that built it, and the calls after it, run numpy code;
2. queues a :class:`BackgroundBuild` on one worker thread, which generates the Numba code of the same
   graphs, compiles its kernels by running them once on a copy of the first call's arguments (most of
   the time is in LLVM, which releases the GIL), and then replaces the functions of the
   :class:`~symgrad.compiler.compile.Kernels`: later calls run the kernels.  The generated code goes
   to the build cache only then, so a build found there has had its kernels compiled (and cached on
   disk by Numba): a new process loads them at its first call, without a numpy tier, or, when it has
   not imported Numba yet, runs the numpy code kept with them while a background build loads them.

Both tiers compute the same graphs in float64 or float32 as traced; they differ only by rounding
(vector elementary functions within 1.5 ulp, reassociated sums): docs/compiling.md states the
agreement (1e-12 in float64, 1e-5 in float32, of the largest magnitude) that tests/test_tiered.py
checks.  A backward always runs in the tier of the forward that saved its values.  The run that
compiles the kernels draws random numbers (dropout masks) from a throwaway stream, never the user's.

An exception in the background build is never silent and never changes a value: the calls stay on
the numpy tier, the next call warns once with :class:`KernelBuildWarning` naming the function and
the error, and ``stats()["background_error"]`` keeps it.  ``CompiledFunction.wait()`` blocks until
the builds of a function are done; ``kernels_ready()`` asks without blocking.

At exit, the interpreter waits for builds whose kernels go to the disk cache (the next process
then starts on the kernels); builds compiling in memory only (``cache=False``) that have not
started are dropped.  A fork waits for the running build, since the child would inherit Numba's
compiler lock held by a thread it does not have.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import warnings
from collections.abc import Callable

import numpy as np

from .._device import private_default_stream
from . import logs


class KernelBuildWarning(UserWarning):
    """Building a compiled function's Numba kernels in the background failed; it keeps running numpy code."""


_lock = threading.Lock()
_queue: collections.deque = collections.deque()
_worker: threading.Thread | None = None
_running: BackgroundBuild | None = None


def argument_copies(arrays) -> list[np.ndarray]:
    """Copies of a call's arrays with the layout and writeability that decide Numba's signatures
    (C/F-contiguous, strided, read-only), so compiling for them compiles what the calls will run."""
    out = []
    for a in arrays:
        if a.flags.c_contiguous or a.flags.f_contiguous:
            b = np.copy(a, order="K")
        else:   # a strided view of a fresh buffer: Numba types it as the strided argument
            b = np.empty(a.shape + (2,), a.dtype)[..., 0]
            b[...] = a
        if not a.flags.writeable:
            b.flags.writeable = False
        out.append(b)
    return out


class BackgroundBuild:
    """The Numba tier of one :class:`~symgrad.compiler.compile.Kernels`, built on the worker thread.

    ``emit(graph, name, keep)`` generates and loads one Numba function (``(function, source)``),
    ``graphs`` maps ``"forward"``/``"backward"``/``"joint"`` to the graphs whose numpy code the
    kernels run now, ``inputs`` are copies of the first call's arrays, ``store(keep)`` keeps the
    generated code in the build cache (None: not cached).
    """

    def __init__(self, name: str, kernels, graphs: dict, emit: Callable, inputs: list, cache: bool,
                 store: Callable | None = None) -> None:
        self.name = name
        self.kernels = kernels
        self.graphs = graphs
        self.emit = emit
        self.inputs = inputs
        self.cache = cache
        self.store = store
        self.state = "queued"          # then "building", and "ready", "failed" or "cancelled"
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        self._warned = False

    # --- the main thread's side ---------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build is done (or ``timeout`` seconds); True if the kernels run now.
        A failed build warns here (once) as at the next call."""
        self.done.wait(timeout)
        if self.state == "failed":
            self.warn()
        return self.state == "ready"

    def warn(self) -> None:
        if self._warned:
            return
        self._warned = True
        from .compile import _user_stacklevel

        exc = self.error
        warnings.warn(f"symgrad.compile({self.name}): building the Numba kernels in the background failed "
                      f"({type(exc).__name__}: {exc}); its calls keep running the numpy code generated for the "
                      "same graph (correct values, slower). Pass tiered=False to build the kernels in the call "
                      "and see the error there.", KernelBuildWarning, stacklevel=_user_stacklevel())

    def status(self) -> str:
        """One line for ``inspect`` reports."""
        if self.state == "ready":
            return f"ready: Numba kernels built in the background in {self.seconds:.2f} s"
        if self.state == "failed":
            return f"failed ({type(self.error).__name__}: {self.error}); calls run numpy code"
        return f"{self.state}: calls run numpy code until the Numba kernels are built"

    # --- the worker's side ----------------------------------------------------------------------
    def run(self) -> None:
        t0 = time.perf_counter()
        self.state = "building"
        try:
            keep: dict = {}
            built = {name: self.emit(graph, name, keep if self.store is not None else None)
                     for name, graph in self.graphs.items()}
            try:
                self._compile(built)
            except Exception as exc:
                if not self._numpy_tier_raises(type(exc)):
                    raise
                # the first call's values make the numpy code raise as well (an index out of range):
                # the Numba code is right, and kernels the run did not reach compile at their first call
            self._switch(built)
            if self.store is not None:
                self.store(keep)
            self.state = "ready"
        except Exception as exc:  # noqa: BLE001 - any failure leaves the numpy tier, loudly
            self.error = exc
            self.state = "failed"
            self._stay_on_numpy()
            logs.log("cache", "background build of %s failed: %s: %s", self.name, type(exc).__name__, exc)
        finally:
            # what only the build needs (the argument copies above all) is released
            self.inputs = self.graphs = self.emit = self.store = None
            self.seconds = time.perf_counter() - t0
            self.done.set()
        if self.state == "ready":
            logs.log("cache", "%s runs its Numba kernels now (built in the background in %.2f s)",
                     self.name, self.seconds)

    def _compile(self, built: dict) -> None:
        """Run the Numba functions once on the copied arguments, as the calls run them: Numba compiles
        (or loads from its disk cache) each kernel for the signatures the calls will pass."""
        self._run_as_calls({name: fn for name, (fn, _) in built.items()})

    def _numpy_tier_raises(self, error: type) -> bool:
        """Whether the numpy functions raise ``error`` too on the copied arguments."""
        k = self.kernels
        try:
            self._run_as_calls({name: getattr(k, "joint_fn" if name == "joint" else name) for name in self.graphs})
        except error:
            return True
        except Exception:  # noqa: BLE001 - another error: not the same behaviour
            return False
        return False

    def _run_as_calls(self, fns: dict) -> None:
        """Run the joint function, or the forward and then the backward, as calls run them; draws of
        random ops (dropout masks) come from a throwaway stream, not the user's."""
        k = self.kernels
        with private_default_stream():
            if "joint" in fns:
                fns["joint"](*self.inputs, k.unit_tangent)
                return
            result = fns["forward"](*self.inputs)
            if "backward" in fns:
                tangents = [np.ones(k.graph.outputs[i].shape, k.graph.outputs[i].dtype.np) for i in k.diff_outputs]
                fns["backward"](*result[k.n_outputs:], *tangents)

    def _switch(self, built: dict) -> None:
        k = self.kernels
        forward, backward = built.get("forward", (None, ""))[0], built.get("backward", (None, ""))[0]
        if forward is not None:
            forward.paired_backward = backward
        for name, attr in (("backward", "backward"), ("forward", "forward"), ("joint", "joint_fn")):
            if name in built:
                fn, source = built[name]
                setattr(k, f"{name}_source", source)
                setattr(k, attr, fn)

    def _stay_on_numpy(self) -> None:
        """Make the next call of each numpy function warn (on the caller's thread, naming its line),
        then run it as before."""
        k = self.kernels
        for attr in ("forward", "joint_fn"):
            fn = getattr(k, attr)
            if fn is None:
                continue

            def first_call(*args, _fn=fn, _attr=attr):
                if getattr(k, _attr) is first_call:
                    setattr(k, _attr, _fn)
                self.warn()
                return _fn(*args)

            first_call.paired_backward = getattr(fn, "paired_backward", None)
            setattr(k, attr, first_call)


def submit(build: BackgroundBuild) -> None:
    """Queue ``build`` on the worker thread (started when needed)."""
    with _lock:
        _queue.append(build)
        if _worker is None:
            _start_worker()


def _start_worker() -> None:
    """Start the worker (with ``_lock`` held)."""
    global _worker
    _worker = threading.Thread(target=_work, name="symgrad-kernel-builder", daemon=True)
    _worker.start()


def _work() -> None:
    global _worker, _running
    try:
        while True:
            with _lock:
                if not _queue:
                    _worker = _running = None
                    return
                build = _running = _queue.popleft()
            build.run()
    except BaseException:   # the thread dies (run() keeps ordinary exceptions): the queue goes on
        with _lock:
            _worker = _running = None
            if _queue:
                _start_worker()
        raise


def wait_all(timeout: float | None = None) -> bool:
    """Wait for every queued build; True if none is left."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _lock:
            pending = list(_queue) + ([_running] if _running is not None else [])
        if not pending:
            return True
        for b in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not b.done.wait(left):
                return False


def _at_exit() -> None:
    """Drop the queued builds that compile in memory only, then wait for the rest (their kernels
    go to the disk cache, where the next process finds them)."""
    with _lock:
        for b in [b for b in _queue if not b.cache]:
            _queue.remove(b)
            b.state = "cancelled"
            b.done.set()
    wait_all()


def _before_fork() -> None:
    """Hold the queue, with no build running, across a fork: a build compiling at the fork would
    leave the child with Numba's compiler lock held by a thread it does not have."""
    while True:
        _lock.acquire()
        running = _running
        if running is None or running.done.is_set():
            return
        _lock.release()
        running.done.wait()


def _after_fork_in_parent() -> None:
    _lock.release()


def _after_fork_in_child() -> None:
    global _worker, _running
    _worker = _running = None
    if _queue:   # the parent's worker does not exist here: the child builds what is queued itself
        _start_worker()
    _lock.release()


try:
    # before the interpreter joins its threads and runs atexit handlers: Numba and llvmlite are
    # still whole (their own atexit handlers mark them as shutting down)
    threading._register_atexit(_at_exit)
except (AttributeError, RuntimeError):  # pragma: no cover - another Python: the atexit module
    import atexit

    atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
