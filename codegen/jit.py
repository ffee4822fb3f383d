"""Generated kernels as modules in a per-user cache directory, so Numba's cache works across processes.

Numba cannot cache a function made by ``exec`` of a string ("no locator available"), and a
module loaded from a file but not registered in ``sys.modules`` fails to load its cache in the
next process.  So the generated source is written as a real module file (atomically, named by
the hash of its content and the versions that shape the code), imported by name into
``sys.modules``, and its kernels are compiled with ``cache=True``.  Only kernels go there: they
are size-generic and hold no data (sizes and constants are arguments), so the same module serves
every input size; the per-call Python glue is made in memory.  Anything unexpected falls back to
compiling in memory.

The directory is ``$SYMGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/symgrad`` or ``~/.cache/symgrad``;
it is created with mode 0700 and refused (with a warning) if another user owns it or others can
write to it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import sys
import tempfile
import warnings
from pathlib import Path

import numba
import numpy as np

from .scalar_math import IMPORT_LINES, PARALLEL_PRANGE_ONLY, SCALAR_NAMESPACE

FORMAT_VERSION = 1


def cache_dir() -> Path | None:
    """The kernel cache directory, or None when it cannot be used safely."""
    root = os.environ.get("SYMGRAD_CACHE_DIR")
    if root:
        path = Path(root)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path = Path(base) / "symgrad"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as exc:
        warnings.warn(f"symgrad: kernel cache {path} is unusable ({exc}); compiling in memory", stacklevel=3)
        return None
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        warnings.warn(f"symgrad: refusing kernel cache {path}: it is owned by another user or writable by "
                      "others; compiling in memory", stacklevel=3)
        return None
    if not os.access(path, os.W_OK):
        warnings.warn(f"symgrad: kernel cache {path} is read-only; compiling in memory", stacklevel=3)
        return None
    return path


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_loaded: dict[str, dict] = {}   # module text hash -> {kernel name: dispatcher}, for this process


def module_text(kernels: list[str], options: dict) -> str:
    """The source of a module holding ``kernels`` (size-generic loop nests; no data, no glue)."""
    flags = ["cache=True", "error_model='numpy'"]
    if options.get("parallel"):
        flags.append("parallel=PARALLEL_PRANGE_ONLY")
    if options.get("fastmath"):
        flags.append("fastmath=True")
    lines = [f"# symgrad generated kernels (format {FORMAT_VERSION}); do not edit: regenerated on demand",
             IMPORT_LINES.rstrip("\n"), ""]
    for src in kernels:
        lines += ["", f"@njit({', '.join(flags)})", src]
    return "\n".join(lines) + "\n"


def _kernel_names(kernels: list[str]) -> list[str]:
    return [src.split("(", 1)[0].removeprefix("def ").strip() for src in kernels]


def _in_memory(kernels: list[str], options: dict) -> dict:
    glb = dict(SCALAR_NAMESPACE)
    glb["prange"] = numba.prange
    jit = numba.njit(error_model="numpy", parallel=PARALLEL_PRANGE_ONLY if options.get("parallel") else False,
                     fastmath=bool(options.get("fastmath")))
    out = {}
    for src in kernels:
        local: dict = {}
        exec(compile(src, "<symgrad kernel>", "exec"), glb, local)
        (name, fn), = local.items()
        out[name] = jit(fn)
    return out


def load_kernels(kernels: list[str], options: dict, cache: bool = True) -> dict:
    """``{name: dispatcher}`` for these kernel sources, compiled at most once per process.

    With ``cache`` the kernels live in a module of the cache directory, so Numba's own cache
    serves later processes; otherwise (or if the directory is unusable) they compile in memory.
    """
    text = module_text(kernels, options)
    digest = hashlib.sha256()
    for part in (text.encode(), numba.__version__.encode(), np.__version__.encode(), sys.version.encode()):
        digest.update(part)
    name = f"symgrad_kernels_{digest.hexdigest()[:24]}"
    key = name + ("" if cache else ":memory")
    if key in _loaded:
        return _loaded[key]
    found = None
    if cache:
        try:
            found = _load_module(name, text, _kernel_names(kernels))
        except Exception as exc:  # never let the cache break compilation
            warnings.warn(f"symgrad: kernel cache unavailable ({exc}); compiling in memory", stacklevel=3)
    if found is None:
        found = _in_memory(kernels, options)
    _loaded[key] = found
    return found


def _load_module(name: str, text: str, entries: list[str]) -> dict | None:
    directory = cache_dir()
    if directory is None:
        return None
    path = directory / f"{name}.py"
    if name not in sys.modules:
        if not path.exists() or path.read_text() != text:  # a truncated or foreign file is rewritten
            _atomic_write(path, text.encode())
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Numba's cache locator needs the module registered by name
        try:
            spec.loader.exec_module(module)
        except Exception:
            sys.modules.pop(name, None)
            raise
    module = sys.modules[name]
    return {entry: getattr(module, entry) for entry in entries}
