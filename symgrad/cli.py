"""The ``symgrad`` command.

    symgrad demo                              a guided tour: eager autograd, the compiler, checks, timings
    symgrad inspect FILE.py:FUNC --arg ...    what the compiler makes of your function, section by section
    symgrad rules [OP]                        the rule table (all entries, or those of one op)
    symgrad graph FILE.py:FUNC --arg ...      the grad_fn graph and the IR as Graphviz DOT (or svg/png)
    symgrad cache info|clear                  the kernel cache: where, how many modules, bytes; or empty it

Mistakes in the user's file or arguments (import errors, an unknown function, a bad ``--arg``, an
op symgrad cannot trace) print one message on stderr and exit with status 2; ``--verbose`` adds
the Python traceback.  Progress of long steps is shown on stderr when it is a terminal.

>>> main(["rules", "tanh"])        # doctest: +ELLIPSIS
tanh(Tensor self) -> Tensor
...
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

from .userfile import UserError

# --- output helpers ---------------------------------------------------------------------------------

class Progress:
    """One self-erasing status line on stderr, only when stderr is a terminal (quiet when piped)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._shown = False

    def __call__(self, msg: str) -> None:
        if self.enabled:
            sys.stderr.write(f"\r\x1b[Ksymgrad: {msg}...")
            sys.stderr.flush()
            self._shown = True

    def clear(self) -> None:
        if self.enabled and self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._shown = False


def _error(msg: str) -> None:
    print(f"symgrad: error: {msg}", file=sys.stderr)


class _UserCodeFailed(Exception):
    """The user's function raised (or could not be traced): carries the message to print."""


def _user_location(exc: BaseException, path: str) -> str:
    target = os.path.abspath(path)
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == target:
            where = f"{path}:{frame.lineno}"
    return where


def _run_user(call, path: str, what: str):
    """Run ``call()``; an error raised in the user's code, or a trace error, becomes a user error."""
    from .ir.tracer import TraceError

    try:
        return call()
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as exc:
        where = _user_location(exc, path)
        if isinstance(exc, TraceError) or where:
            msg = f"{what} failed: {type(exc).__name__}: {exc}"
            if where and where not in str(exc):
                msg += f" (at {where})"
            raise _UserCodeFailed(msg) from exc
        raise


def _timeit(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _ms(s: float) -> str:
    return f"{s * 1e3:9.3f} ms"


# --- demo -------------------------------------------------------------------------------------------

def cmd_demo(args) -> int:
    import numpy as np

    import symgrad

    from .rules.table import load_rules
    from .viz import graph_lines

    progress = Progress()
    n = args.size
    print(f"symgrad demo: the W1 loss  sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x)),  x of {n} elements\n")
    rng = np.random.default_rng(0)
    data = rng.uniform(-2, 2, n)

    def w1(x):
        return (symgrad.sin(x) * symgrad.exp(-x * x) + symgrad.log1p(x * x) * symgrad.tanh(x)).sum()

    print("1. Eager mode: each op records a backward node generated from derivatives.yaml\n")
    x = symgrad.tensor(data, dtype=symgrad.float64, requires_grad=True)
    loss = w1(x)
    print(f"loss = {loss.item():.6f}   ({loss!r})\n")
    print("grad_fn graph (node class  <- rule-table entry):")
    for line in graph_lines(loss.grad_fn, show_rules=True, params={"x": x}):
        print("  " + line)
    rules = load_rules()
    print("\nrules used:")
    for key in ("sin", "exp", "mul.Tensor", "log1p", "tanh", "add.Tensor", "neg", "sum"):
        rule = rules[key]
        formulas = "; ".join(f"{k}: {f.text}" for k, f in rule.formulas.items())
        print(f"  {rule.node_name:<14} {formulas}")
    loss.backward()
    eager_grad = x.grad.numpy()

    print("\n2. Compiled mode: symgrad.compile traces the loss once, builds the joint forward+backward graph")
    print("   from the same rules, splits it and emits fused Numba loops\n")
    progress("compiling (trace, autodiff, codegen, Numba)")
    t0 = time.perf_counter()
    compiled = symgrad.compile(w1)
    xc = symgrad.tensor(data, dtype=symgrad.float64, requires_grad=True)
    closs = compiled(xc)
    closs.backward()
    first_s = time.perf_counter() - t0
    progress.clear()
    k = compiled.inspect(xc)
    print("forward IR:")
    print(k.graph)
    print("\ngenerated forward kernel (one comment per IR node):")
    print(k.forward_source)
    print("\ngenerated backward kernel:")
    print(k.backward_source)
    t = k.timings
    rest = "running numpy code while the Numba kernels compiled in the background (tiered=True)" \
        if k.background is not None else "the rest Numba compiling or loading its cache"
    print(f"\nfirst compiled call: {first_s:.2f} s (trace {t.get('trace_s', 0) * 1e3:.0f} ms, autodiff "
          f"{t.get('autodiff_s', 0) * 1e3:.0f} ms, codegen {t.get('codegen_s', 0) * 1e3:.0f} ms, {rest})")
    print("everything about it, section by section: "
          "symgrad inspect examples/losses.py:w1 --arg x=f64[1000]")

    print("\n3. Checks")
    compiled_grad = xc.grad.numpy()
    scale = max(1.0, float(np.max(np.abs(eager_grad))))
    vs_eager = float(np.max(np.abs(compiled_grad - eager_grad))) / scale
    value_diff = abs(closs.item() - loss.item()) / max(1.0, abs(loss.item()))
    ok_eager = vs_eager < 1e-10 and value_diff < 1e-10
    print(f"compiled vs eager: loss differs by {value_diff:.1e}, gradient by {vs_eager:.1e} (relative) -> "
          f"{'OK' if ok_eager else 'MISMATCH'}")
    f = lambda v: float(np.sum(np.sin(v) * np.exp(-v * v) + np.log1p(v * v) * np.tanh(v)))
    eps = 1e-6
    picks = rng.choice(n, size=min(5, n), replace=False)
    worst = 0.0
    for i in picks:
        e = np.zeros_like(data)
        e[i] = eps
        fd = (f(data + e) - f(data - e)) / (2 * eps)
        worst = max(worst, abs(fd - compiled_grad[i]) / max(1.0, abs(fd)))
    ok_fd = worst < 1e-6
    print(f"compiled gradient vs central finite differences at {len(picks)} points: max relative error "
          f"{worst:.1e} -> {'OK' if ok_fd else 'MISMATCH'}")

    def eager():
        t = symgrad.tensor(data, dtype=symgrad.float64, requires_grad=True)
        w1(t).backward()

    def compiled_call():
        t = symgrad.tensor(data, dtype=symgrad.float64, requires_grad=True)
        compiled(t).backward()

    vg = symgrad.value_and_grad(compiled)
    vg(data)  # compile its single joint kernel before timing
    compiled.wait()  # tiered=True: until the kernels built in the background run

    def numpy_hand():
        s, c, e, l1, th = np.sin(data), np.cos(data), np.exp(-data * data), np.log1p(data * data), np.tanh(data)
        val = np.sum(s * e + l1 * th)
        g = c * e - 2 * data * s * e + 2 * data / (1 + data * data) * th + l1 * (1 - th * th)
        return val, g

    progress("timing")
    rows = [("symgrad eager", _timeit(eager, args.repeat)),
            ("symgrad.compile + backward", _timeit(compiled_call, args.repeat)),
            ("symgrad.value_and_grad", _timeit(lambda: vg(data), args.repeat)),
            ("numpy, hand-written gradient", _timeit(numpy_hand, args.repeat))]
    progress.clear()
    base = rows[-1][1]
    print(f"\n4. Timings: value and gradient of {n} elements, best of {args.repeat}, one process")
    print(f"  {'':<30} {'time':>12}   vs numpy")
    for name, s in rows:
        print(f"  {name:<30} {_ms(s):>12}   {s / base:6.2f}x")
    print("\nNext: `symgrad rules` lists the rule table; `symgrad graph` draws the grad_fn graph; "
          "`python -m benchmarks.compiled` compares with other tools.")
    return 0 if (ok_fd and ok_eager) else 1


# --- inspect ----------------------------------------------------------------------------------------

def _sections(values: list[str] | None) -> list[str]:
    from .compiler.inspect_report import SECTIONS

    if not values:
        return list(SECTIONS)
    chosen = []
    for v in values:
        for s in v.split(","):
            s = s.strip()
            if not s:
                continue
            if s not in SECTIONS:
                raise UserError(f"unknown --section {s!r} (sections: {', '.join(SECTIONS)})")
            if s not in chosen:
                chosen.append(s)
    return [s for s in SECTIONS if s in chosen]


def _load(args):
    from .userfile import build_inputs, load_function

    fn, path, name = load_function(args.target)
    inputs, names, grads = build_inputs(fn, args.arg or [], args.wrt, seed=args.seed)
    return fn, path, name, inputs, names, grads


def cmd_inspect(args) -> int:
    import symgrad

    from .compiler import inspect_report as ir

    sections = _sections(args.section)
    fn, path, name, inputs, _, _ = _load(args)
    if isinstance(fn, symgrad.CompiledFunction):
        # a compiled function keeps its own options; --no-cache and --strict only turn theirs on
        changes = {**({"cache": False} if args.no_cache else {}), **({"strict": True} if args.strict else {})}
        compiled = symgrad.compile(fn.fn, **fn.compile_options.replace(**changes)) if changes else fn
    else:
        compiled = symgrad.compile(getattr(fn, "fn", fn), cache=not args.no_cache, strict=args.strict)
    progress = Progress()
    try:
        ins = _run_user(lambda: ir.inspect_function(compiled, inputs, name=name, progress=progress,
                                                             run="timings" in sections), path,
                        f"compiling {name}")
    finally:
        progress.clear()
    if args.json:
        print(ir.to_json(ins, sections))
    else:
        sys.stdout.write(ir.format_report(ins, sections))
    if args.out:
        written = []
        for m in ins.modules.values():
            written += m.write(args.out)
        print(f"symgrad: wrote {', '.join(written)}", file=sys.stderr)
    return 0


# --- rules ------------------------------------------------------------------------------------------

def cmd_cache(args) -> int:
    """``symgrad cache info|clear``: the kernel cache directory (``$SYMGRAD_CACHE_DIR``)."""
    from codegen import jit

    if args.action == "clear":
        done = jit.clear_cache()
        print(f"removed {done['removed']} files ({done['bytes']} bytes) from {done['path']}")
        return 0
    info = jit.cache_info()
    if not info["exists"]:
        status = "does not exist (created on the first compiled call)"
    elif info["problem"]:
        status = f"refused: {info['problem']} (kernels compile in memory)"
    else:
        status = "usable"
    print(f"path:    {info['path']}" + ("  (from SYMGRAD_CACHE_DIR)" if os.environ.get("SYMGRAD_CACHE_DIR") else ""))
    print(f"status:  {status}")
    print(f"modules: {info['modules']}")
    print(f"files:   {info['files']} ({info['bytes']} bytes: kernel modules and Numba's cache of them)")
    if os.environ.get("NUMBA_CACHE_DIR"):
        print(f"note:    NUMBA_CACHE_DIR={os.environ['NUMBA_CACHE_DIR']}: Numba keeps its cache files there")
    return 0


def cmd_rules(args) -> int:
    from .rules.table import load_rules

    rules = load_rules()
    shown = 0
    for key, rule in rules.items():
        if args.op and rule.schema.name != args.op and key != args.op:
            continue
        shown += 1
        print(rule.schema.text)
        if rule.node_name:
            print(f"    node: {rule.node_name}   (derivatives.yaml line {rule.line})")
        if rule.elementwise is not None:
            print(f"    elementwise: {rule.elementwise}")
        for name, f in rule.formulas.items():
            print(f"    {name}: {f.text}")
        for name in rule.non_differentiable:
            print(f"    {name}: non_differentiable")
    if not shown:
        import difflib

        names = sorted({r.schema.name for r in rules.values()} | set(rules))
        close = difflib.get_close_matches(args.op, names, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (try `symgrad rules` for the list)"
        _error(f"no op named {args.op!r} in the rule table{hint}")
        return 2
    return 0


# --- graph ------------------------------------------------------------------------------------------

FORMATS = ("dot", "svg", "png", "pdf")


def cmd_graph(args) -> int:
    import numpy as np

    import symgrad

    from . import viz
    from .compiler.autodiff import autodiff

    fmt = args.format
    if fmt is None:
        ext = os.path.splitext(args.output or "")[1].lstrip(".").lower()
        fmt = ext if ext in FORMATS else "dot"
    if fmt == "png" and not args.output and sys.stdout.isatty():
        raise UserError("png output is binary: write it to a file with -o FILE.png")
    fn, path, name, inputs, names, grads = _load(args)
    user_fn = getattr(fn, "fn", fn)
    parts = []
    if args.kind in ("grad_fn", "both"):
        out = _run_user(lambda: user_fn(*inputs), path, f"running {name} eagerly")
        tensors = out if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(t, symgrad.Tensor) for t in tensors):
            raise UserError(f"{name} returned {type(out).__name__}: symgrad graph draws functions that return "
                            "symgrad Tensors")
        params = {n: a for n, a in zip(names, inputs) if isinstance(a, symgrad.Tensor)}
        parts.append(("grad_fn", f"grad_fn graph of {name} (eager run)",
                      viz.grad_fn_graph(out, params, show_attrs=args.show_attrs)))
    if args.kind in ("ir", "joint", "both"):
        graph = _run_user(lambda: symgrad.trace(user_fn, *inputs, names=names), path, f"tracing {name}")
        if args.kind == "joint":
            arrays = [a for a in inputs if isinstance(a, (symgrad.Tensor, np.ndarray))]
            wrt = [i for i, a in enumerate(arrays) if isinstance(a, symgrad.Tensor) and a.requires_grad]
            if not wrt:
                raise UserError("--kind joint needs an input that requires grad (a floating-point --arg)")
            graph = autodiff(graph, wrt)
            parts.append(("joint", f"joint forward+backward IR of {name}", viz.ir_graph(graph, "joint", "j_")))
        else:
            parts.append(("ir", f"forward IR of {name} (symgrad.trace)", viz.ir_graph(graph, "ir", "i_")))
    source = parts[0][2].source() if len(parts) == 1 else viz.combined_dot(parts)
    if fmt == "dot":
        data = source.encode()
    else:
        try:
            data = viz.render(source, fmt)
        except viz.DotNotFound as exc:
            _error(str(exc))
            return 1
    if args.output:
        with open(args.output, "wb") as f:
            f.write(data)
        print(f"symgrad: wrote {args.output} ({fmt})", file=sys.stderr)
    elif fmt in ("dot", "svg"):
        sys.stdout.write(data.decode())
    else:
        sys.stdout.buffer.write(data)
    return 0


# --- the parser ---------------------------------------------------------------------------------------

_RAW = argparse.RawDescriptionHelpFormatter

DEMO_EPILOG = """\
examples:
  symgrad demo                        the full tour on 1e6 elements (a few seconds)
  symgrad demo --size 1000            a small input: quick, timings dominated by per-call overhead
  symgrad demo --size 100000 --repeat 20
"""

INSPECT_EPILOG = """\
--arg forms (one per parameter of FUNC; parameters with defaults may be left out):
  NAME=DTYPE[SHAPE]   random values: floats U(-1, 1), integers and bools 0 or 1 (seeded by --seed)
                      dtypes: f64 f32 f16 i64 i32 i16 i8 u8 bool (or float64, float32, ...);
                      x=f64[1000]  W=f32[64,128]  s=f64[] (a 0-d array)
  NAME=FILE.npy       the array saved in FILE.npy (numpy.save)
  NAME=NUMBER         a Python number, baked into the trace as a constant: alpha=0.5  n=3

sections (--section, default all, in this order):
  ir         the forward IR
  joint      the joint forward+backward graph, each backward node tagged with its rule
  rules      per gradient: the ops it flows back through, the derivatives.yaml rule and formula of
             each, and the joint values each rule produced
  partition  values the forward saves for the backward vs values the backward recomputes, in bytes
  source     the generated forward and backward modules, exactly as they are imported and run
  timings    trace, autodiff, partition, codegen, Numba compile or cache load; cache hits/misses

examples:
  symgrad inspect examples/losses.py:w1 --arg x=f64[1000]
  symgrad inspect examples/losses.py:w2 --arg x=f64[1000,1000] --arg w=f64[1000] --arg b=f64[1000]
  symgrad inspect examples/losses.py:w3 --arg X=f64[256,64] --arg W1=f64[64,128] --arg b1=f64[128] \\
      --arg W2=f64[128,1] --arg b2=f64[1] --arg Y=f64[256,1] --wrt W1,b1,W2,b2
  symgrad inspect examples/losses.py:w1 --arg x=f64[1000] --section rules,partition
  symgrad inspect examples/losses.py:w1 --arg x=data.npy --json > report.json
  symgrad inspect examples/losses.py:w1 --arg x=f64[1000] --section source --out kernels/
  symgrad inspect examples/losses.py:w1 --arg x=f64[1000] --no-cache --seed 1 --verbose
"""

RULES_EPILOG = """\
examples:
  symgrad rules               every entry of derivatives.yaml
  symgrad rules pow           all overloads of pow (pow.Tensor_Scalar, pow.Tensor_Tensor, ...)
  symgrad rules mul.Tensor    one overload
"""

GRAPH_EPILOG = """\
The grad_fn graph is drawn like torchviz's make_dot: backward nodes by class name, leaves (light blue)
named after FUNC's parameters, tensors saved for backward (orange) with their shapes, the output (green).
The IR graph has one box per IR node; in the joint graph, backward nodes name the rule they came from.
svg, png and pdf need the Graphviz `dot` program; DOT text needs nothing.

--arg forms are those of `symgrad inspect` (see symgrad inspect --help).

examples:
  symgrad graph examples/losses.py:w2 --arg x=f64[4,3] --arg w=f64[3] --arg b=f64[3]
  symgrad graph examples/losses.py:w1 --arg x=f64[8] --kind grad_fn --show-attrs
  symgrad graph examples/losses.py:w1 --arg x=f64[8] --kind joint -o w1_joint.dot
  symgrad graph examples/losses.py:w1 --arg x=f64[8] --format svg -o w1.svg
  symgrad graph examples/losses.py:w3 --arg X=f64[4,3] --arg W1=f64[3,5] --arg b1=f64[5] \\
      --arg W2=f64[5,1] --arg b2=f64[1] --arg Y=f64[4,1] --wrt W1,W2 -o w3.png
"""


CACHE_EPILOG = """\
examples:
  symgrad cache info
  symgrad cache clear
  SYMGRAD_CACHE_DIR=/tmp/kernels symgrad cache info
"""


def _add_target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="FILE.py:FUNC",
                   help="the function to use, in a Python file (example: examples/losses.py:w1)")
    p.add_argument("--arg", action="append", metavar="NAME=SPEC",
                   help="one input of FUNC, repeated per parameter: NAME=DTYPE[SHAPE], NAME=FILE.npy or "
                        "NAME=NUMBER (example: --arg x=f64[1000] --arg W=f32[64,128])")
    p.add_argument("--wrt", metavar="NAMES",
                   help="comma-separated inputs to differentiate (default: every floating-point array; "
                        "'' for none; example: --wrt W1,b1,W2,b2)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random input values (default 0; example: --seed 1)")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="symgrad", formatter_class=_RAW,
        description="Inspectable autograd driven by one rule table, and a compiler to fused Numba kernels.",
        epilog="examples:\n  symgrad demo\n  symgrad inspect examples/losses.py:w1 --arg x=f64[1000]\n"
               "  symgrad rules tanh\n  symgrad graph examples/losses.py:w1 --arg x=f64[8] -o w1.svg\n"
               "  symgrad cache info\n\n"
               "`symgrad COMMAND --help` documents each command's options.\n"
               "SYMGRAD_LOG=trace,graph,rules,code,cache (or all) logs what compiled calls do; "
               "SYMGRAD_CACHE_DIR moves the kernel cache.")
    parser.add_argument("--version", action="version", version=f"symgrad {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true",
                        help="on an error, also print the Python traceback (example: symgrad rules pow -v)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo", parents=[common], formatter_class=_RAW, epilog=DEMO_EPILOG,
        help="a guided tour on an example loss",
        description="Run the W1 loss eagerly (grad_fn graph, rules used), compile it (IR, generated "
                    "source), check the compiled gradient against eager mode and finite differences, and "
                    "time eager vs compiled vs numpy.")
    demo.add_argument("--size", type=int, default=1_000_000,
                      help="number of elements of x (default 1000000; example: --size 1000)")
    demo.add_argument("--repeat", type=int, default=5,
                      help="timing repetitions, the best is shown (default 5; example: --repeat 20)")
    demo.set_defaults(func=cmd_demo)

    ins = sub.add_parser(
        "inspect", parents=[common], formatter_class=_RAW, epilog=INSPECT_EPILOG,
        help="show what the compiler makes of a function",
        description="Import FILE.py, trace FUNC on the given inputs with symgrad.compile, and print the "
                    "forward IR, the joint graph, each gradient with the rules applied, the partition, the "
                    "generated source and the timings of each stage.")
    _add_target_args(ins)
    ins.add_argument("--section", action="append", metavar="NAMES",
                     help="sections to print, comma-separated or repeated: ir, joint, rules, partition, "
                          "source, timings (default all; example: --section rules,partition)")
    ins.add_argument("--json", action="store_true",
                     help="print a machine-readable JSON report of the chosen sections "
                          "(example: --json > report.json)")
    ins.add_argument("--out", metavar="DIR",
                     help="also write the generated modules as DIR/forward.py and DIR/backward.py (with "
                          ".npz files for array constants); they import and run as is (example: --out kernels/)")
    ins.add_argument("--no-cache", action="store_true",
                     help="compile in memory instead of through the kernel cache (example: --no-cache)")
    ins.add_argument("--strict", action="store_true",
                     help="a function that cannot be traced (an if/while on a tensor, .item()) is an error "
                          "instead of being reported as running eagerly (example: --strict)")
    ins.set_defaults(func=cmd_inspect)

    rules = sub.add_parser(
        "rules", parents=[common], formatter_class=_RAW, epilog=RULES_EPILOG,
        help="list the rule table, or one op's entries",
        description="Print the derivatives.yaml entries: op signature, backward node class, the forward's "
                    "elementwise expression and one formula per differentiable input.")
    rules.add_argument("op", nargs="?",
                       help="an op name such as mul or pow, or an overload such as mul.Tensor "
                            "(default: all; example: symgrad rules pow)")
    rules.set_defaults(func=cmd_rules)

    graph = sub.add_parser(
        "graph", parents=[common], formatter_class=_RAW, epilog=GRAPH_EPILOG,
        help="draw the grad_fn graph and the IR (Graphviz DOT, svg, png)",
        description="Run FUNC eagerly and draw its grad_fn graph, and trace it and draw its IR, as Graphviz "
                    "DOT text (default) or, with the `dot` program, svg/png/pdf.")
    _add_target_args(graph)
    graph.add_argument("--kind", choices=("both", "grad_fn", "ir", "joint"), default="both",
                       help="what to draw: both = the grad_fn graph and the forward IR (default), grad_fn, "
                            "ir, or joint (the joint forward+backward IR) (example: --kind joint)")
    graph.add_argument("--format", choices=FORMATS,
                       help="dot (text, default), svg, png or pdf; default: from the -o file's extension "
                            "(example: --format svg)")
    graph.add_argument("-o", "--output", metavar="FILE",
                       help="write to FILE instead of stdout (example: -o w1.png)")
    graph.add_argument("--show-attrs", action="store_true",
                       help="add non-tensor saved values (exponents, shapes) to the node labels "
                            "(example: --show-attrs)")
    graph.set_defaults(func=cmd_graph)

    cache = sub.add_parser(
        "cache", parents=[common], formatter_class=_RAW, epilog=CACHE_EPILOG,
        help="show or clear the kernel cache",
        description="The directory where compiled kernel modules and Numba's machine code for them are kept "
                    "($SYMGRAD_CACHE_DIR, else $XDG_CACHE_HOME/symgrad or ~/.cache/symgrad).")
    cache.add_argument("action", choices=("info", "clear"),
                       help="info: path, status, number of modules and bytes; clear: remove the symgrad_kernels_* "
                            "files and their __pycache__ entries (nothing else)")
    cache.set_defaults(func=cmd_cache)

    bench = sub.add_parser(
        "bench", formatter_class=_RAW, add_help=False,
        help="run the benchmark suite (python -m benchmarks.suite; needs a checkout)",
        description="Run benchmarks/suite.py: symgrad against hand-written Numba and numpy and the installed "
                    "peers. Every option is passed on; `symgrad bench --help` lists them.\n"
                    "examples:\n  symgrad bench --quick\n  symgrad bench --only W1,W5 --json out.json")
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="options of benchmarks.suite (example: --quick)")
    bench.set_defaults(func=cmd_bench)
    return parser


def cmd_bench(args) -> int:
    """``symgrad bench ...`` = ``python -m benchmarks.suite ...`` from the repository checkout."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / "benchmarks" / "suite.py").exists():
        raise UserError("symgrad bench runs benchmarks/suite.py from a checkout of the repository; this "
                        f"installation has no benchmarks/ beside {root / 'symgrad'}")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks import suite

    rest = list(args.rest)
    return suite.main(rest[1:] if rest[:1] == ["--"] else rest)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``symgrad`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # every option belongs to benchmarks.suite (its own --help included)
        argv = ["bench", "--"] + argv[1:] if argv[1:2] != ["--"] else argv
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    try:
        return args.func(args)
    except (UserError, _UserCodeFailed) as exc:
        if verbose:
            traceback.print_exc()
        _error(str(exc))
        return 2
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:  # `symgrad rules | head`
        sys.stderr.close()
        return 0
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        _error(f"internal error: {type(exc).__name__}: {exc} (a bug in symgrad: please report it; "
               "--verbose shows the traceback)")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
