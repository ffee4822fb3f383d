"""``SYMGRAD_LOG``: see what a compiled call did, through the standard :mod:`logging` module.

In the spirit of PyTorch's ``TORCH_LOGS``: set ``SYMGRAD_LOG`` to a comma-separated list of
stages (or ``all``) before importing symgrad, and each kernel build logs those stages to stderr::

    SYMGRAD_LOG=trace,code python train.py
    SYMGRAD_LOG=all python -c "..."

Stages, each a logger named ``symgrad.<stage>``:

``trace``  what was traced: the function, its inputs, node count, trace time
``graph``  the forward IR and the joint forward+backward graph (with the rule of each backward node)
``rules``  per gradient: the ops it flows back through and the ``derivatives.yaml`` formulas used
``code``   the generated forward and backward source, and the partition (saved vs recomputed)
``cache``  the kernel module files (written or reused) and the compiled function's cache counters

The loggers are ordinary ``logging`` loggers: without ``SYMGRAD_LOG`` they are left alone, so an
application can also enable them itself (``logging.getLogger("symgrad.code").setLevel(logging.INFO)``
plus a handler).  :func:`configure` does what the variable does, from code.

>>> import io
>>> stream = io.StringIO()
>>> configure("trace", stream=stream)
{'trace'}
>>> log("trace", "hello %s", "world"); stream.getvalue()
'[symgrad.trace] hello world\\n'
>>> configure("")
set()
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings

ENV = "SYMGRAD_LOG"
STAGES = ("trace", "graph", "rules", "code", "cache")

_HANDLER_FLAG = "_symgrad_log_handler"


def logger(stage: str) -> logging.Logger:
    return logging.getLogger(f"symgrad.{stage}")


def parse(spec: str) -> set[str]:
    """The stages named in ``spec`` (``"trace,code"``, ``"all"``); unknown names raise ValueError."""
    stages = set()
    for part in spec.replace(" ", ",").split(","):
        part = part.strip().lower()
        if not part:
            continue
        if part == "all":
            stages.update(STAGES)
        elif part in STAGES:
            stages.add(part)
        else:
            raise ValueError(f"{ENV}: unknown stage {part!r} (stages: {', '.join(STAGES)}, or all)")
    return stages


def configure(spec: str | None = None, stream=None) -> set[str]:
    """Enable the stages in ``spec`` (default: the ``SYMGRAD_LOG`` variable) at INFO level, each with
    a handler printing ``[symgrad.<stage>] message`` to ``stream`` (default stderr); disable the rest
    of the stages this function enabled before.  Returns the enabled stages."""
    if spec is None:
        spec = os.environ.get(ENV, "")
        try:
            stages = parse(spec)
        except ValueError as exc:  # a typo in an environment variable must not break `import symgrad`
            warnings.warn(str(exc), stacklevel=2)
            stages = parse(",".join(p for p in spec.split(",") if p.strip().lower() in STAGES + ("all",)))
    else:
        stages = parse(spec)
    for stage in STAGES:
        log_ = logger(stage)
        for h in [h for h in log_.handlers if getattr(h, _HANDLER_FLAG, False)]:
            log_.removeHandler(h)
        if stage in stages:
            handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            setattr(handler, _HANDLER_FLAG, True)
            log_.addHandler(handler)
            log_.setLevel(logging.INFO)
            log_.propagate = False
        elif getattr(log_, "_symgrad_configured", False):
            log_.setLevel(logging.NOTSET)
            log_.propagate = True
        log_._symgrad_configured = stage in stages
    return stages


def enabled(stage: str) -> bool:
    return logger(stage).isEnabledFor(logging.INFO)


def any_enabled() -> bool:
    return any(enabled(s) for s in STAGES)


def log(stage: str, msg: str, *args) -> None:
    """Log ``msg % args`` on ``symgrad.<stage>`` at INFO level."""
    logger(stage).info(msg, *args)


def _seconds(s) -> str:
    return f"{s * 1e3:.1f} ms" if isinstance(s, (int, float)) else str(s)


def report_build(compiled_function, kernels) -> None:
    """Log every enabled stage of one kernel build (call it right after the build).

    ``compiled_function`` is the :class:`~symgrad.compile.CompiledFunction` (for its name and
    stats), ``kernels`` the :class:`~symgrad.compile.Kernels` it built.  Costs nothing when no
    stage is enabled.
    """
    if not any_enabled():
        return
    try:
        _report_build(compiled_function, kernels)
    except Exception as exc:  # logging must never break a compile
        logging.getLogger("symgrad").warning("symgrad.compiler.logs: could not report a build: %s: %s",
                                             type(exc).__name__, exc)


def _report_build(compiled_function, kernels) -> None:
    from . import inspect_report as ir

    fn = getattr(compiled_function, "fn", compiled_function)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    g = kernels.graph
    t = kernels.timings or {}
    if enabled("trace"):
        ins = ", ".join(f"{v.name}: {v.type_str}" for v in g.placeholders)
        wrt = ", ".join(g.placeholders[i].name for i in kernels.wrt) or "none"
        log("trace", "traced %s%s: inputs (%s), %d nodes, %d outputs in %s; gradients for: %s",
            name, where, ins, len(g.nodes), len(g.outputs), _seconds(t.get("trace_s", "?")), wrt)
    if enabled("graph"):
        log("graph", "forward IR of %s:\n%s", name, g)
        if kernels.joint is not None:
            log("graph", "joint graph of %s (autodiff %s, partition %s):\n%s", name,
                _seconds(t.get("autodiff_s", "?")), _seconds(t.get("partition_s", "?")),
                ir.annotated_joint(kernels.joint))
    if enabled("rules") and kernels.joint is not None:
        log("rules", "rules applied in %s:\n%s", name, ir.format_rules(ir.gradient_rules(kernels)))
    if enabled("code"):
        if kernels.parts is not None:
            log("code", "partition of %s:\n%s", name, ir.format_partition(ir.partition_info(kernels.parts)))
        for kernel in ("forward", "backward", "joint"):
            src = getattr(kernels, f"{kernel}_source", "")
            if src:
                log("code", "%s kernel of %s (codegen %s):\n%s", kernel, name, _seconds(t.get("codegen_s", "?")),
                    src)
    if enabled("cache"):
        now = time.time()
        built = sum(v for k, v in t.items() if isinstance(v, (int, float)) and k.endswith("_s"))
        for kernel in ("forward", "backward", "joint"):
            fn_k = getattr(kernels, kernel if kernel != "joint" else "joint_fn", None)
            if fn_k is None:
                continue
            files = ir.kernel_files(fn_k)
            if not files:
                log("cache", "%s kernel of %s: compiled in memory (kernel cache off or unusable)", kernel, name)
            for path in files:
                fresh = os.path.getmtime(path) >= now - built - 1.0
                log("cache", "%s kernel of %s: module %s %s", kernel, name, path,
                    "written now (Numba compiles it on the first call and caches the machine code)" if fresh
                    else "reused from the kernel cache (Numba loads its cached machine code)")
        extra = {k: v for k, v in t.items() if "cache" in k or "numba" in k}
        stats = compiled_function.stats() if hasattr(compiled_function, "stats") else {}
        counters = {k: v for k, v in stats.items() if k in ("calls", "traces", "cache_hits") or "cache" in k}
        log("cache", "%s: %s", name, ", ".join(f"{k}={v}" for k, v in {**counters, **extra}.items()))
