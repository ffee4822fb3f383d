"""What a compiled function was turned into, as data and as text (``symgrad inspect``, ``SYMGRAD_LOG``).

:func:`inspect_function` builds the kernels of a :class:`~symgrad.compile.CompiledFunction` for
some inputs, runs them once (so Numba compiles or loads them from its cache, and that time is
measured) and returns an :class:`Inspection`; :func:`report` turns it into a JSON-ready dict and
:func:`format_report` into text, section by section:

``ir``         the forward IR (``symgrad.trace``)
``joint``      the joint forward+backward graph (:func:`symgrad.compiler.autodiff.autodiff`)
``rules``      per gradient: the ops it flows back through, the ``derivatives.yaml`` rule and
               formula of each, and the joint-graph values each rule produced
``partition``  what the forward saves for the backward and what the backward recomputes, in bytes
``source``     the generated forward and backward modules, exactly as they are imported and run
``timings``    seconds per stage (trace, autodiff, partition, codegen, first calls = Numba
               compile or cache load) and the cache's hits and misses

A function that cannot be traced (data-dependent Python control flow) has none of these: the
report says that its calls run eagerly, and which line stopped the trace (``eager fallback``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ..dtypes import dtype as Dtype
from ..ir.graph import SHORT_DTYPES, Graph, Node, Value, _arg_text
from ..ir.tracer import TraceError, _arg_names

SECTIONS = ("ir", "joint", "rules", "partition", "source", "timings")
SECTION_TITLES = {
    "ir": "forward IR",
    "joint": "joint forward+backward graph",
    "rules": "gradients and the rules applied",
    "partition": "partition: saved by the forward vs recomputed by the backward",
    "source": "generated source (the modules that run)",
    "timings": "timings and cache",
}


# --- small helpers ------------------------------------------------------------------------------

def node_line(n: Node) -> str:
    """The IR line of a node: ``%mul: f64[3] = mul.Tensor(%x, %x)``."""
    outs = ", ".join(f"%{o.name}: {o.type_str}" for o in n.outputs)
    if n.op == "constant":
        return f"{outs} = constant"
    return f"{outs} = {n.op}({', '.join(_arg_text(a) for a in n.args)})"


def _rule(op: str):
    from ..ops import registry

    try:
        return registry.get(op).rule
    except Exception:
        return None


def _nbytes(v: Value) -> int:
    n = 1
    for s in v.shape:
        n *= s
    return n * v.dtype.itemsize


def _ancestors(values) -> set:
    """Nodes that the given values depend on (their producers, transitively)."""
    seen: set = set()
    stack = [v.producer for v in values if v is not None and v.producer is not None]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(u.producer for u in n.inputs if u.producer is not None)
    return seen


def _fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n} B ({n / size:.1f} {unit})"
    return f"{n} B"


# --- the rules applied ----------------------------------------------------------------------------

def gradient_rules(kernels) -> list[dict]:
    """One entry per gradient: the forward ops it flows back through (last op first), each with its
    rule-table node, the formulas used for the inputs on the path, and the joint values produced.

    The joint graph's backward nodes carry ``meta["grad_rule"]``/``["grad_of"]`` tags set by
    :func:`symgrad.compiler.autodiff.autodiff`; values recorded by the engine between rules (summing the
    contributions of a value used twice, reducing a broadcast gradient) are listed separately.
    """
    graph, joint = kernels.graph, kernels.joint
    if joint is None:
        return []
    n_fwd = joint.n_forward_outputs
    diff_outputs = [graph.outputs[i] for i in joint.diff_outputs]
    forward_anc = _ancestors(diff_outputs)
    out = []
    for j, i in enumerate(kernels.wrt):
        p = graph.placeholders[i]
        g = joint.outputs[n_fwd + j] if n_fwd + j < len(joint.outputs) else None
        depends = {p}
        chain = []
        for n in graph.nodes:
            if n.op in ("constant", "detach") or n.meta.get("no_grad"):
                continue
            if any(u in depends for u in n.inputs):
                depends.update(n.outputs)
                if n in forward_anc:
                    chain.append(n)
        joint_anc = _ancestors([g]) if g is not None else set()
        steps = []
        for n in reversed(chain):
            rule = _rule(n.op)
            formulas = {}
            if rule is not None:
                for spec, a in zip(rule.schema.args, n.args):
                    vals = [a] if isinstance(a, Value) else [x for x in a if isinstance(x, Value)] \
                        if isinstance(a, list) else []
                    if spec.name in rule.formulas and any(v in depends for v in vals):
                        formulas[spec.name] = rule.formulas[spec.name].text
            produced = [o.name for jn in joint.nodes if jn in joint_anc
                        and jn.meta.get("grad_of") == n.outputs[0].name and jn.meta.get("grad_key") == n.op
                        for o in jn.outputs]
            steps.append({"value": n.outputs[0].name, "ir": node_line(n), "op": n.op,
                          "node": rule.node_name if rule is not None else None,
                          "rule_line": rule.line if rule is not None else None,
                          "formulas": formulas, "produced": produced})
        engine = [o.name for jn in joint.nodes if jn in joint_anc and jn.meta.get("grad_rule") == "engine"
                  for o in jn.outputs]
        out.append({"input": p.name, "gradient": None if g is None else g.name,
                    "type": None if g is None else g.type_str, "steps": steps, "engine": engine})
    return out


def format_rules(entries: list[dict]) -> str:
    if not entries:
        return "no input requires grad: nothing to differentiate"
    lines = []
    for e in entries:
        if e["gradient"] is None:
            lines.append(f"gradient of {e['input']}: None (the output does not depend on {e['input']})")
            continue
        lines.append(f"gradient of {e['input']} = %{e['gradient']}: {e['type']}   "
                     f"(backward through {len(e['steps'])} ops, last op first)")
        for s in e["steps"]:
            lines.append(f"  {s['ir']}")
            where = f"derivatives.yaml line {s['rule_line']}" if s["rule_line"] else "no rule"
            lines.append(f"      {s['node']}  <- {s['op']}  ({where})")
            for arg, text in s["formulas"].items():
                lines.append(f"        {arg}: {text}")
            made = ", ".join("%" + v for v in s["produced"]) or "nothing new (the gradient passes through)"
            lines.append(f"        produced: {made}")
        if e["engine"]:
            lines.append("  summed or reduced to an input's shape by the engine: "
                         + ", ".join("%" + v for v in e["engine"]))
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def annotated_joint(joint: Graph) -> str:
    """The joint graph's listing with, on each backward line, the rule it came from."""
    text = str(joint).split("\n")
    lines = text[:1]
    for n, line in zip(joint.nodes, text[1:]):
        rule = n.meta.get("grad_rule")
        if rule == "engine":
            line = f"{line:<92}  [engine]"
        elif rule:
            line = f"{line:<92}  [{rule} of %{n.meta.get('grad_of')}]"
        lines.append(line)
    lines += text[1 + len(joint.nodes):]
    return "\n".join(lines)


# --- the partition --------------------------------------------------------------------------------

def partition_info(parts) -> dict | None:
    if parts is None:
        return None
    saved = [{"name": v.name, "type": v.type_str, "bytes": _nbytes(v)} for v in parts.saved]
    recomputed = [{"name": v.name, "type": v.type_str, "bytes": _nbytes(v)} for v in parts.recomputed]
    return {"saved": saved, "saved_bytes": sum(s["bytes"] for s in saved),
            "recomputed": recomputed, "recomputed_bytes": sum(r["bytes"] for r in recomputed),
            "forward_nodes": len(parts.forward.nodes), "backward_nodes": len(parts.backward.nodes)}


def format_partition(info: dict | None) -> str:
    if info is None:
        return "no backward (no input requires grad): the forward saves nothing"
    lines = [f"forward: {info['forward_nodes']} nodes; backward: {info['backward_nodes']} nodes",
             f"saved by the forward for the backward: {len(info['saved'])} values, {_fmt_bytes(info['saved_bytes'])}"]
    lines += [f"  {'%' + s['name'] + ': ' + s['type']:<40} {s['bytes']:>12} B" for s in info["saved"]]
    lines.append(f"recomputed in the backward instead of saved: {len(info['recomputed'])} values, "
                 f"{_fmt_bytes(info['recomputed_bytes'])} not stored")
    lines += [f"  {'%' + r['name'] + ': ' + r['type']:<40} {r['bytes']:>12} B" for r in info["recomputed"]]
    return "\n".join(lines)


# --- the generated modules --------------------------------------------------------------------------

@dataclass
class ModuleSource:
    """A generated kernel function written out as a module that imports and runs on its own."""

    kernel: str                 # "forward" or "backward"
    text: str
    arrays: dict = field(default_factory=dict)
    path: str | None = None     # the module file the whole function came from, when it was one
    kernel_files: list = field(default_factory=list)  # kernel-cache modules its loop kernels came from
    exact: bool = True          # True: ``text`` is that module file as is

    def write(self, directory: str) -> list[str]:
        """Write ``<kernel>.py`` (and ``<kernel>.npz`` for array constants) into ``directory``."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{self.kernel}.py")
        with open(path, "w") as f:
            f.write(self.text)
        written = [path]
        if self.arrays:
            np.savez(os.path.join(directory, f"{self.kernel}.npz"), **self.arrays)
            written.append(path[:-3] + ".npz")
        return written


def _is_dispatcher(v) -> bool:
    return hasattr(v, "py_func") and hasattr(v, "targetoptions")


def _kernel_module_file(fn) -> str | None:
    """The kernel-cache module file (``symgrad_kernels_*.py``) that defines ``fn``, if any."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if path and os.path.basename(path).startswith("symgrad_kernels_") and os.path.exists(path):
        return path
    return None


def kernel_files(fn) -> list[str]:
    """The kernel-cache module files that the generated function ``fn`` and its loop kernels come from."""
    files = []
    own = _kernel_module_file(fn) if fn is not None else None
    if own:
        files.append(own)
    for v in (getattr(fn, "__globals__", {}) if fn is not None else {}).values():
        if _is_dispatcher(v):
            path = _kernel_module_file(v.py_func)
            if path and path not in files:
                files.append(path)
    return files


def _importable(name: str, v) -> tuple[str, str] | None:
    """(module, attribute) from which ``v`` can be imported, or None (generated code, exec'd objects)."""
    target = v.py_func if _is_dispatcher(v) else v
    mod_name = getattr(target, "__module__", None)
    attr = getattr(target, "__name__", None)
    if isinstance(v, np.ufunc):
        mod_name = "numpy"
    if not mod_name or not attr or mod_name.startswith("symgrad_kernels_"):
        return None
    module = sys.modules.get(mod_name)
    if module is None or getattr(module, attr, None) is not v:
        return None
    return mod_name, attr


def _block(source: str, name: str) -> str | None:
    """The top-level ``def name(...)`` block of ``source`` (without decorators), or None."""
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(f"def {name}("):
            j = i + 1
            while j < len(lines) and (not lines[j] or lines[j][0] in " \t"):
                j += 1
            return "\n".join(lines[i:j]).rstrip()
    return None


def _function_source(fn, sources: list[str]) -> str:
    import inspect

    name = fn.__name__
    for src in sources:
        block = _block(src or "", name)
        if block is not None:
            return block
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        raise ValueError(f"the source of generated function {name!r} is not available") from None
    return _block(text, name) or text


def _decorator(d) -> str:
    opts = {k: v for k, v in d.targetoptions.items() if k != "nopython" and v is not None}
    if type(getattr(d, "_cache", None)).__name__ not in ("NullCache", "NoneType"):
        opts = {"cache": True, **opts}
    return f"@njit({', '.join(f'{k}={v!r}' for k, v in opts.items())})"


def _code_names(code) -> set:
    names = set(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            names |= _code_names(c)
    return names


def module_source(fn, kernel: str) -> ModuleSource | None:
    """The generated function ``fn`` (a forward or backward) as a self-contained module.

    When ``fn`` itself was imported from a kernel-cache module file, that file is returned as it is
    (with the ``.npz`` of constants beside it).  Otherwise the module is assembled from what runs:
    the function's source and the source of each loop kernel it calls, as generated for it (the
    kernel cache compiled its canonical form, the same statements with names normalised and
    comments dropped: :mod:`codegen.kernel_key`), with every other name it uses (scalar math,
    numpy, op forwards, array constants) imported or loaded instead of injected.
    """
    if fn is None:
        return None
    path = _kernel_module_file(fn)
    if path is not None:
        with open(path) as f:
            text = f.read()
        npz = path[:-3] + ".npz"
        arrays = dict(np.load(npz)) if os.path.exists(npz) else {}
        return ModuleSource(kernel, text, arrays, path, [path], True)
    return _assembled_module(fn, kernel)


def _assembled_module(fn, kernel: str) -> ModuleSource:
    import builtins

    sources = [getattr(fn, "__source__", "")]
    imports = ["import numpy as np", "from numba import njit"]
    defs: list[str] = []
    kernels: list[str] = []
    arrays: dict = {}
    files: list[str] = []
    done: set = {"np", "njit"}
    ops = fn.__globals__.get("__ops__", {})

    def resolve(names: set, glb: dict) -> None:
        for key in sorted(names):
            if key in done or key not in glb:
                continue
            v = glb[key]
            if getattr(builtins, key, None) is v:
                continue
            done.add(key)
            if key in ops:
                imports.append("from symgrad.ir.opinfo import numpy_forward as _forward")
                defs.append(f"{key} = _forward({ops[key]!r})")
            elif isinstance(v, type(np)):
                imports.append(f"import {v.__name__}" + (f" as {key}" if key != v.__name__ else ""))
            elif _importable(key, v) is not None:
                mod, attr = _importable(key, v)
                imports.append(f"from {mod} import {attr}" + (f" as {key}" if key != attr else ""))
            elif _is_dispatcher(v):  # a generated loop kernel: its source, then what it uses
                k_path = _kernel_module_file(v.py_func)
                if k_path and k_path not in files:
                    files.append(k_path)
                # the kernel as generated for this function, under the name the glue calls (the
                # dispatcher compiled its canonical form, shared by kernels that differ only in names)
                body = _block(sources[0] or "", key)
                if body is None:
                    body = _function_source(v.py_func, sources)
                    names = _code_names(v.py_func.__code__)
                else:
                    names = _code_names(compile(body, f"<kernel {key}>", "exec"))
                kernels.append(f"{_decorator(v)}\n{body}")
                resolve(names, {**v.py_func.__globals__, **{k: d for k, d in glb.items() if _is_dispatcher(d)}})
            elif isinstance(v, Dtype):
                imports.append("import symgrad")
                defs.append(f"{key} = {v!r}")
            elif isinstance(v, np.dtype):
                defs.append(f"{key} = np.dtype({v.str!r})")
            elif isinstance(v, np.ndarray):
                arrays[key] = v
                defs.append(f"{key} = _C[{key!r}]")
            elif isinstance(v, (int, float, bool, str, type(None))) or (
                    isinstance(v, tuple) and all(isinstance(x, (int, float, bool, type(None))) for x in v)):
                defs.append(f"{key} = {v!r}")
            else:
                raise ValueError(f"generated {kernel} uses {key!r}, a {type(v).__name__} that cannot be "
                                 "written into a module")

    glue = _function_source(fn, sources)
    resolve(_code_names(fn.__code__), fn.__globals__)
    if arrays:
        defs.insert(0, "_C = dict(np.load(__file__[:-3] + '.npz'))")
    origin = (f"loop kernels from {', '.join(files)}; " if files else "") + "Python glue compiled in memory"
    head = [f"# symgrad generated {kernel}: the code that runs, as one module ({origin})",
            *dict.fromkeys(imports)]
    parts = ["\n".join(head), "\n".join(defs)] if defs else ["\n".join(head)]
    text = "\n\n".join(parts + kernels + [glue]) + "\n"
    return ModuleSource(kernel, text, arrays, None, files, False)


# --- running it once --------------------------------------------------------------------------------

def _dispatchers(fn) -> list:
    """The generated loop kernels ``fn`` calls (not the scalar helpers it imports)."""
    glb = getattr(fn, "__globals__", {}) if fn is not None else {}
    return [v for k, v in glb.items() if _is_dispatcher(v) and hasattr(v, "stats") and _importable(k, v) is None]


def _numba_counts(fns) -> tuple[int, int]:
    hits = misses = 0
    for fn in fns:
        for d in _dispatchers(fn):
            hits += sum(d.stats.cache_hits.values())
            misses += sum(d.stats.cache_misses.values())
    return hits, misses


def _kernel_files() -> set:
    try:
        import warnings

        from codegen.jit import cache_dir

        with warnings.catch_warnings():  # an unusable cache is reported when the kernels are built
            warnings.simplefilter("ignore")
            d = cache_dir()
    except Exception:
        return set()
    if d is None:
        return set()
    return {p.name for p in d.glob("symgrad_kernels_*.py")}


def _first_calls(k, arrays, timings: dict, step) -> tuple[list, list]:
    """Run forward and backward twice each, timing the first (compile or cache load) and second call."""
    step("first forward call (Numba compile or cache load)")
    t0 = time.perf_counter()
    result = k.forward(*arrays)
    timings["forward_first_call_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = k.forward(*arrays)
    timings["forward_call_s"] = time.perf_counter() - t0
    outputs, saved = list(result[:k.n_outputs]), list(result[k.n_outputs:])
    grads: list = []
    if k.backward is not None:
        tangents = [np.ones(k.graph.outputs[i].shape, k.graph.outputs[i].dtype.np) for i in k.diff_outputs]
        step("first backward call (Numba compile or cache load)")
        t0 = time.perf_counter()
        grads = list(k.backward(*saved, *tangents))
        timings["backward_first_call_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        grads = list(k.backward(*saved, *tangents))
        timings["backward_call_s"] = time.perf_counter() - t0
    compile_s = timings["forward_first_call_s"] - timings["forward_call_s"]
    if k.backward is not None:
        compile_s += timings["backward_first_call_s"] - timings["backward_call_s"]
    timings["numba_compile_or_load_s"] = max(compile_s, 0.0)
    return outputs, grads


@dataclass
class Inspection:
    """Everything ``symgrad inspect`` shows about one compiled function and one set of inputs."""

    name: str
    inputs: list[dict]
    kernels: object
    timings: dict
    cache: dict
    modules: dict            # "forward"/"backward" -> ModuleSource
    outputs: list            # the forward's outputs on the inputs
    gradients: list          # the backward's results (one per input in kernels.wrt)
    fallback: object = None  # the TraceError that makes these calls run eagerly (kernels is None then)


def inspect_function(compiled, args: tuple, *, name: str | None = None, progress=None, run: bool = True
                     ) -> Inspection:
    """Build ``compiled``'s kernels for ``args`` (Tensors, arrays, numbers), run forward and backward
    twice (the first call compiles with Numba or loads its cache) and collect what was built.

    ``run=False`` skips the calls (no Numba compilation, no call timings, no outputs)."""
    from ..tensor import Tensor

    step = progress or (lambda msg: None)
    before = _kernel_files()
    step("tracing, differentiating, generating code")
    t0 = time.perf_counter()
    try:
        k = compiled.inspect(*args)
    except TraceError as exc:
        if getattr(compiled, "compile_options", None) is None or compiled.compile_options.strict or \
                not exc.data_dependent:
            raise
        return _fallback_inspection(compiled, args, name, exc, time.perf_counter() - t0)
    build_s = time.perf_counter() - t0
    timings = dict(k.timings)
    timings.setdefault("build_total_s", build_s)
    arrays = [a._data if isinstance(a, Tensor) else a for a in args if isinstance(a, (Tensor, np.ndarray))]

    outputs, grads = [], []
    if run:
        outputs, grads = _first_calls(k, arrays, timings, step)

    modules = {}
    cache_modules = []
    # a scalar loss runs the joint kernel at the call (k.strategy == "joint"); forward/backward
    # are what scalar_loss="split" and non-scalar outputs run
    for kernel, fn in (("forward", k.forward), ("backward", k.backward), ("joint", k.joint_fn)):
        if fn is None:
            continue
        src = module_source(fn, kernel)
        if src is None:
            continue
        modules[kernel] = src
        for path in src.kernel_files:
            status = "reused" if os.path.basename(path) in before else "written"
            cache_modules.append({"kernel": kernel, "module": path, "status": status})
        if not src.kernel_files:
            cache_modules.append({"kernel": kernel, "module": None, "status": "compiled in memory (not cached)"})
    hits, misses = _numba_counts([k.forward, k.backward, k.joint_fn])
    cache = {"kernel_modules": cache_modules, "numba_cache_hits": hits, "numba_cache_misses": misses}
    stats = compiled.stats() if hasattr(compiled, "stats") else {}
    cache.update({key: v for key, v in stats.items() if "cache" in key and key not in cache})
    if getattr(k, "background", None) is not None:   # tiered=True: the kernels were built in the background
        cache["background_build"] = k.background.status()

    inputs = []
    positions = [i for i, a in enumerate(args) if isinstance(a, (Tensor, np.ndarray))]
    for v, pos in zip(k.graph.placeholders, positions):
        a = args[pos]
        inputs.append({"name": v.name, "type": v.type_str, "bytes": _nbytes(v),
                       "requires_grad": bool(isinstance(a, Tensor) and a.requires_grad)})
    return Inspection(name or getattr(compiled, "__name__", "fn"), inputs, k, timings, cache, modules,
                      outputs, grads)


def _fallback_inspection(compiled, args: tuple, name: str | None, exc, trace_s: float) -> Inspection:
    """The inspection of a function whose calls with ``args`` run eagerly: inputs and the reason."""
    from ..dtypes import from_numpy_dtype
    from ..tensor import Tensor

    positions = [i for i, a in enumerate(args) if isinstance(a, (Tensor, np.ndarray))]
    names = _arg_names(compiled.fn, len(args))
    inputs = []
    for pos in positions:
        a = args[pos]
        data = a._data if isinstance(a, Tensor) else a
        dt = from_numpy_dtype(data.dtype).name
        inputs.append({"name": names[pos], "type": f"{SHORT_DTYPES.get(dt, dt)}[{', '.join(map(str, data.shape))}]",
                       "bytes": int(data.nbytes), "requires_grad": bool(isinstance(a, Tensor) and a.requires_grad)})
    return Inspection(name or getattr(compiled, "__name__", "fn"), inputs, None, {"trace_s": trace_s}, {}, {}, [],
                      [], fallback=exc)


def _fallback_report(exc) -> dict:
    return {"location": exc.location, "reason": exc.reason, "message": str(exc),
            "runs": "eagerly (the eager engine differentiates each call); strict=True raises instead"}


def _format_fallback(exc) -> str:
    return (f"this function cannot be traced: tracing stopped at {exc.location or 'an unknown line'}:\n"
            f"  {exc.reason}\n"
            "calls with these arguments run eagerly (correct, slower: no fused kernels; strict=True raises\n"
            "instead). To compile it, replace the data-dependent branch by symgrad.where(...) or pass the\n"
            "value as a Python number.")


# --- report -----------------------------------------------------------------------------------------

def report(ins: Inspection, sections=SECTIONS) -> dict:
    """A JSON-ready dict of the chosen sections."""
    k = ins.kernels
    if ins.fallback is not None:
        return {"function": ins.name, "inputs": ins.inputs, "eager_fallback": _fallback_report(ins.fallback)}
    out: dict = {"function": ins.name, "inputs": ins.inputs, "wrt": [k.graph.placeholders[i].name for i in k.wrt]}
    if "ir" in sections:
        out["ir"] = str(k.graph)
    if "joint" in sections:
        out["joint"] = None if k.joint is None else annotated_joint(k.joint)
    if "rules" in sections:
        out["rules"] = gradient_rules(k)
    if "partition" in sections:
        out["partition"] = partition_info(k.parts)
    if "source" in sections:
        out["source"] = {kernel: {"text": m.text, "module": m.path, "exact": m.exact,
                                  "constants": sorted(m.arrays)} for kernel, m in ins.modules.items()}
    if "timings" in sections:
        out["timings"] = dict(ins.timings)
        out["cache"] = dict(ins.cache)
    return out


def format_timings(timings: dict, cache: dict) -> str:
    labels = {"trace_s": "trace", "autodiff_s": "autodiff (joint graph)", "partition_s": "partition",
              "codegen_s": "codegen", "build_total_s": "build total",
              "forward_first_call_s": "forward, first call", "forward_call_s": "forward, next call",
              "backward_first_call_s": "backward, first call", "backward_call_s": "backward, next call",
              "numba_compile_or_load_s": "Numba compile or cache load (first calls minus next calls)"}
    lines = []
    for key, v in timings.items():
        if isinstance(v, (int, float)) and key.endswith("_s"):
            lines.append(f"  {labels.get(key, key[:-2].replace('_', ' ')):<58} {_fmt_seconds(v):>10}")
        else:
            lines.append(f"  {key.replace('_', ' '):<58} {v!s:>10}")
    lines.append("cache:")
    for m in cache.get("kernel_modules", []):
        where = m["module"] or "-"
        lines.append(f"  {m['kernel']} kernel module: {m['status']}  {where}")
    lines.append(f"  Numba cache: {cache.get('numba_cache_hits', 0)} hit(s), "
                 f"{cache.get('numba_cache_misses', 0)} miss(es) (a miss compiles and writes the cache)")
    for key, v in cache.items():
        if key == "cache_hits":
            lines.append(f"  calls that reused kernels already built in this process: {v}")
        elif key not in ("kernel_modules", "numba_cache_hits", "numba_cache_misses"):
            lines.append(f"  {key.replace('_', ' ')}: {v}")
    return "timings:\n" + "\n".join(lines)


def format_source(modules: dict) -> str:
    if not modules:
        return "no kernels"
    parts = []
    for kernel, m in modules.items():
        where = f"the module file {m.path}" if m.path else f"{kernel}.py with --out"
        consts = f", constants {', '.join(sorted(m.arrays))} in {kernel}.npz" if m.arrays else ""
        parts.append(f"# ---- {kernel}: {where}{consts}\n{m.text.rstrip()}")
    return "\n\n".join(parts)


def format_report(ins: Inspection, sections=SECTIONS) -> str:
    """The text report: a header, then one titled block per chosen section."""
    k = ins.kernels
    args = ", ".join(f"{i['name']}: {i['type']}{' (requires grad)' if i['requires_grad'] else ''}"
                     for i in ins.inputs)
    blocks = [f"symgrad inspect {ins.name}({args})"]
    if ins.fallback is not None:
        blocks.append(f"=== eager fallback ===\n{_format_fallback(ins.fallback)}")
        return "\n\n".join(blocks) + "\n"
    for s in sections:
        if s == "ir":
            body = str(k.graph)
        elif s == "joint":
            body = "no input requires grad: no joint graph" if k.joint is None else annotated_joint(k.joint)
        elif s == "rules":
            body = format_rules(gradient_rules(k))
        elif s == "partition":
            body = format_partition(partition_info(k.parts))
        elif s == "source":
            body = format_source(ins.modules)
        elif s == "timings":
            body = format_timings(ins.timings, ins.cache)
        else:  # pragma: no cover - the CLI validates section names
            continue
        blocks.append(f"=== {SECTION_TITLES[s]} ===\n{body}")
    return "\n\n".join(blocks) + "\n"


def to_json(ins: Inspection, sections=SECTIONS) -> str:
    return json.dumps(report(ins, sections), indent=2, default=str)
