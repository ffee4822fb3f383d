"""The user's side of ``symgrad inspect`` / ``symgrad graph``: ``FILE.py:FUNC`` and ``--arg`` specs.

Every mistake here is the user's to fix, so each raises :class:`UserError` with one clear message
(the CLI prints it and exits with status 2).

>>> parse_arg("x=f64[1000]")
ArgSpec(name='x', kind='random', dtype='float64', shape=(1000,), value=None)
>>> parse_arg("W1=float32[64, 128]").shape
(64, 128)
>>> parse_arg("alpha=0.5").value
0.5
>>> parse_arg("x=f64[10")                                        # doctest: +ELLIPSIS
Traceback (most recent call last):
...
symgrad.userfile.UserError: bad --arg 'x=f64[10': expected NAME=DTYPE[SHAPE] ...
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import sys
import traceback
from dataclasses import dataclass

import numpy as np

DTYPES = {"f64": "float64", "float64": "float64", "double": "float64", "f32": "float32", "float32": "float32",
          "float": "float32", "f16": "float16", "float16": "float16", "half": "float16",
          "i64": "int64", "int64": "int64", "long": "int64", "i32": "int32", "int32": "int32", "int": "int32",
          "i16": "int16", "int16": "int16", "i8": "int8", "int8": "int8", "u8": "uint8", "uint8": "uint8",
          "bool": "bool"}

ARG_HELP = ("expected NAME=DTYPE[SHAPE] (x=f64[1000], W=f32[64,128], s=f64[]), NAME=FILE.npy or NAME=NUMBER; "
            f"dtypes: {', '.join(sorted(set(DTYPES) - set(DTYPES.values())))} or full numpy names")


class UserError(Exception):
    """A problem in the user's file or command line: reported as one line, exit status 2."""


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: str                     # "random", "file" or "number"
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    value: object = None          # the path (file) or the number

    def make(self, rng: np.random.Generator):
        """The value: random arrays are U(-1, 1) for floats and 0 or 1 for integers and bools."""
        if self.kind == "number":
            return self.value
        if self.kind == "file":
            try:
                return np.load(self.value, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise UserError(f"--arg {self.name}: cannot load {self.value}: {exc}") from None
        dt = np.dtype(self.dtype)
        if dt.kind == "f":
            return rng.uniform(-1.0, 1.0, self.shape).astype(dt)
        if dt.kind == "b":
            return rng.integers(0, 2, self.shape).astype(bool)
        return rng.integers(0, 2, self.shape).astype(dt)


_SPEC = re.compile(r"^([A-Za-z_]\w*)=(.*)$")
_ARRAY = re.compile(r"^([A-Za-z]\w*)\[([0-9,\s]*)\]$")


def parse_arg(text: str) -> ArgSpec:
    """One ``--arg`` value: ``NAME=DTYPE[SHAPE]``, ``NAME=path.npy`` or ``NAME=NUMBER``."""
    m = _SPEC.match(text.strip())
    if not m:
        raise UserError(f"bad --arg {text!r}: {ARG_HELP}")
    name, rhs = m.group(1), m.group(2).strip()
    if rhs.endswith(".npy"):
        return ArgSpec(name, "file", value=rhs)
    a = _ARRAY.match(rhs)
    if a:
        dtype = DTYPES.get(a.group(1).lower())
        if dtype is None:
            raise UserError(f"bad --arg {text!r}: unknown dtype {a.group(1)!r}; {ARG_HELP}")
        dims = [d.strip() for d in a.group(2).split(",")]
        if dims == [""]:
            dims = []
        if any(not d for d in dims):
            raise UserError(f"bad --arg {text!r}: empty dimension in [{a.group(2)}]; {ARG_HELP}")
        return ArgSpec(name, "random", dtype, tuple(int(d) for d in dims))
    for conv in (int, float):
        try:
            return ArgSpec(name, "number", value=conv(rhs))
        except ValueError:
            pass
    if rhs in ("True", "False"):
        return ArgSpec(name, "number", value=rhs == "True")
    raise UserError(f"bad --arg {text!r}: {ARG_HELP}")


def parse_target(text: str) -> tuple[str, str]:
    """``path/to/file.py:function`` -> (path, function)."""
    path, sep, func = text.rpartition(":")
    if not sep or not path or not func:
        raise UserError(f"bad target {text!r}: expected FILE.py:FUNCTION (for example examples/losses.py:w1)")
    if not func.isidentifier():
        raise UserError(f"bad target {text!r}: {func!r} is not a Python function name")
    return path, func


def _user_location(tb, path: str) -> str:
    """'file.py:LINE' of the innermost traceback frame in the user's file, or ''."""
    where = ""
    target = os.path.abspath(path)
    for frame in traceback.extract_tb(tb):
        if os.path.abspath(frame.filename) == target:
            where = f"{path}:{frame.lineno}"
    return where


def load_function(target: str):
    """Import the user's file and return ``(function, path, name)``."""
    path, name = parse_target(target)
    if not os.path.isfile(path):
        raise UserError(f"cannot import {path}: no such file")
    module_name = "symgrad_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # the file's own imports of its neighbours work as when run as a script
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserError(f"cannot import {path}: syntax error at line {exc.lineno}: {exc.msg}") from exc
    except Exception as exc:
        where = _user_location(exc.__traceback__, path)
        raise UserError(f"cannot import {path}: {type(exc).__name__}: {exc}"
                        + (f" (at {where})" if where else "")) from exc
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    fn = getattr(module, name, None)
    if fn is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", module_name) == module_name)
        hint = f" (functions defined there: {', '.join(names)})" if names else ""
        raise UserError(f"{path} has no function {name!r}{hint}")
    if not callable(fn):
        raise UserError(f"{path}:{name} is a {type(fn).__name__}, not a function")
    return fn, path, name


def parameters(fn) -> list[inspect.Parameter]:
    target = getattr(fn, "fn", fn)  # a CompiledFunction wraps the user's function
    try:
        return [p for p in inspect.signature(target).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return []


def build_inputs(fn, arg_texts: list[str], wrt: str | None = None, seed: int = 0):
    """The positional arguments for ``fn``, and the names of those that require grad.

    Floating-point arrays become symgrad Tensors that require grad (all of them, or those named in
    ``wrt``, a comma-separated list; ``wrt=""`` for none); other arrays stay numpy arrays.
    """
    from .tensor import Tensor

    specs = [parse_arg(t) for t in arg_texts]
    by_name: dict[str, ArgSpec] = {}
    for s in specs:
        if s.name in by_name:
            raise UserError(f"--arg {s.name} is given twice")
        by_name[s.name] = s
    params = parameters(fn)
    pnames = [p.name for p in params]
    unknown = [n for n in by_name if n not in pnames]
    if unknown:
        raise UserError(f"--arg {unknown[0]}: the function has no parameter {unknown[0]!r} "
                        f"(its parameters: {', '.join(pnames) or 'none'})")
    wanted = None
    if wrt is not None:
        wanted = {w.strip() for w in wrt.split(",") if w.strip()}
        bad = sorted(wanted - set(pnames))
        if bad:
            raise UserError(f"--wrt {bad[0]}: the function has no parameter {bad[0]!r} "
                            f"(its parameters: {', '.join(pnames)})")
    rng = np.random.default_rng(seed)
    args, names, grads = [], [], []
    for k, p in enumerate(params):
        s = by_name.get(p.name)
        if s is None:
            if p.default is not inspect.Parameter.empty:
                later = [q.name for q in params[k + 1:] if q.name in by_name]
                if later:
                    raise UserError(f"--arg {later[0]} is given but not --arg {p.name}: arguments are passed "
                                    f"by position, so give {p.name} too")
                break  # the rest take their defaults
            example = f"--arg {p.name}=f64[10]"
            raise UserError(f"missing --arg for parameter {p.name!r} of {getattr(fn, '__name__', 'the function')} "
                            f"(for example {example})")
        value = s.make(rng)
        if wanted is not None and p.name in wanted and not isinstance(value, np.ndarray):
            raise UserError(f"--wrt {p.name}: {p.name} is a number, a constant of the trace; give it as an "
                            f"array to differentiate it (--arg {p.name}=f64[])")
        if isinstance(value, np.ndarray):
            floating = value.dtype.kind == "f"
            needs = floating and (wanted is None or p.name in wanted)
            if wanted is not None and p.name in wanted and not floating:
                raise UserError(f"--wrt {p.name}: only floating-point inputs have gradients "
                                f"({p.name} is {value.dtype.name})")
            if needs:
                value = Tensor._wrap(np.asarray(value, order="C")).requires_grad_(True)  # 0-d stays 0-d
                grads.append(p.name)
        args.append(value)
        names.append(p.name)
    return tuple(args), names, grads
