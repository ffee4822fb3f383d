"""``torch.compile(f, backend="symgrad")``: symgrad's fused Numba kernels as a torch.compile backend.

Registered through the ``torch_dynamo_backends`` entry point (``pip install symgrad[torch]``), so
``backend="symgrad"`` works without importing symgrad.  Dynamo hands the backend an FX graph of one
compiled region; the backend passes it to AOTAutograd, which traces the joint forward+backward graph
in aten ops and partitions it (min-cut rematerialisation, as Inductor does).  AOTAutograd then calls
:func:`compile_aten_graph` on the forward graph and on the backward graph: each is lowered into
symgrad's IR (aten op by aten op, :mod:`symgrad.torch_backend.runner`), compiled into fused kernels
by :class:`symgrad.compiler.compile.CompiledFunction`, and run on the tensors' memory through
``Tensor.numpy()`` and ``torch.from_numpy`` (no copies on CPU).  The region's ``grad_fn`` is
torch's ``CompiledFunctionBackward``.

Why AOTAutograd's joint graph rather than symgrad's own rule table for the backward: the issue asks
that the compiled region's ``grad_fn`` be torch's ``CompiledFunctionBackward``, which only
AOTAutograd makes; and AOTAutograd already solves what a backend would otherwise redo
(functionalising in-place ops, aliased outputs, saved tensors, symbolic sizes, double backward
refusals, RNG state).  symgrad contributes what it is for -- fusing the elementwise chains and the
reductions they feed into loops with inlined vector math -- on both graphs.  The derivatives of the
backward graph are therefore torch's, not the rule table's.

For a region returning a scalar loss (static sizes), :mod:`symgrad.torch_backend.joint` partitions
instead: the forward computes the loss and its gradients in one kernel, the backward scales them
(``options={"scalar_loss": "split"}`` keeps the min-cut partition).

A graph with an op that cannot be lowered (or a dtype other than float32/float64 among its float
tensors) runs through torch as AOTAutograd gave it: never a wrong result, only no speed-up.
:func:`stats` counts the graphs lowered and the ops that made others fall back.
"""

from __future__ import annotations

import collections
import threading

try:
    import torch
    from torch._dynamo.backends.common import aot_autograd

    from . import joint
except ImportError as e:  # pragma: no cover - exercised only without the extra
    torch = None
    _MISSING = e

__all__ = ["symgrad_backend", "compile_aten_graph", "stats", "reset_stats"]

_STATS_LOCK = threading.Lock()
_STATS: dict = {"graphs_lowered": 0, "graphs_fallback": 0, "kernel_builds": 0, "fallback_ops": collections.Counter()}


def stats() -> dict:
    """Graphs lowered into symgrad kernels, graphs left to torch, kernel builds (one per graph and
    input signature), and the ops that sent graphs back to torch (``{op: graphs}``)."""
    with _STATS_LOCK:
        out = dict(_STATS)
        out["fallback_ops"] = dict(_STATS["fallback_ops"])
    return out


def reset_stats() -> None:
    with _STATS_LOCK:
        for k in ("graphs_lowered", "graphs_fallback", "kernel_builds"):
            _STATS[k] = 0
        _STATS["fallback_ops"].clear()


def _count(key: str, n: int = 1) -> None:
    with _STATS_LOCK:
        _STATS[key] += n


def _check_cpu(tensors) -> None:
    for t in tensors:
        device = getattr(t, "device", None)
        if device is not None and device.type != "cpu":
            raise RuntimeError(f"torch.compile(backend='symgrad') runs on CPU tensors only; got a tensor on "
                               f"{device}. Move the inputs and the module to the CPU (.cpu()), or compile with "
                               f"backend='inductor' for {device.type} tensors")


def compile_aten_graph(gm, example_inputs):
    """AOTAutograd's forward or backward compiler: a boxed callable running ``gm`` with symgrad's
    kernels, or ``gm`` itself (run by torch) when it has an op symgrad does not lower."""
    from .runner import GraphRunner, unsupported_ops

    _check_cpu(example_inputs)
    plan = joint.scaled_plan(gm)
    if plan is not None:     # the backward of a loss whose forward computed the gradients: a scaling
        _count("graphs_lowered")
        return joint.scaled_backward(plan)
    missing = unsupported_ops(gm)
    if missing:
        with _STATS_LOCK:
            _STATS["graphs_fallback"] += 1
            _STATS["fallback_ops"].update(set(missing))
        return _boxed(gm)
    _count("graphs_lowered")
    return GraphRunner(gm, _count)


def _boxed(gm):
    def run(*args):
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        return gm(*args)
    run._boxed_call = True
    return run


SCALAR_LOSS = ("joint", "split")


def symgrad_backend(gm, example_inputs, options: dict | None = None, **kwargs):
    """The ``torch.compile`` backend: ``torch.compile(f, backend="symgrad")``.

    ``options={"scalar_loss": "split"}`` (``torch.compile``'s ``options``) partitions a region
    returning a scalar loss like any other (the forward saves activations, the backward kernel runs at
    ``.backward()``) instead of the default ``"joint"`` (the forward computes the gradients too,
    :mod:`symgrad.torch_backend.joint`), as ``symgrad.compile``'s option of the same name."""
    if torch is None:  # pragma: no cover
        raise ImportError("symgrad's torch.compile backend needs PyTorch: pip install 'symgrad[torch]'") from _MISSING
    if kwargs:
        raise TypeError(f"torch.compile(backend='symgrad') takes no arguments but options, got {sorted(kwargs)}")
    options = dict(options or {})
    scalar_loss = options.pop("scalar_loss", "joint")
    if options or scalar_loss not in SCALAR_LOSS:
        raise TypeError(f"torch.compile(backend='symgrad') takes options={{'scalar_loss': 'joint' or 'split'}}, "
                        f"got {dict(options, scalar_loss=scalar_loss)}")
    _check_cpu(example_inputs)
    partition = joint.partition if scalar_loss == "joint" else joint.split_partition
    return aot_autograd(fw_compiler=compile_aten_graph, bw_compiler=compile_aten_graph,
                        partition_fn=partition)(gm, example_inputs)
