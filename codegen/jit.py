"""Generated kernels as modules in a per-user cache directory, so Numba's cache works across processes.

Numba cannot cache a function made by ``exec`` of a string ("no locator available"), and a
module loaded from a file but not registered in ``sys.modules`` fails to load its cache in the
next process.  So the generated source is written as a real module file (atomically, named by
the hash of its content and the versions that shape the code), imported by name into
``sys.modules``, and its kernels are compiled with ``cache=True``.  Array constants go to an
``.npz`` beside it.  Anything unexpected falls back to compiling in memory.

The directory is ``$SYMGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/symgrad`` or ``~/.cache/symgrad``;
it is created with mode 0700 and refused (with a warning) if another user owns it or others can
write to it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import stat
import sys
import tempfile
import warnings
from pathlib import Path

import numba
import numpy as np

from .scalar_math import IMPORT_LINES, SCALAR_NAMESPACE

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


def module_text(kernels: list[str], glue: str, namespace: dict, op_keys: dict) -> tuple[str, dict] | None:
    """The module source and its array constants, or None if the namespace holds something else."""
    lines = [f"# symgrad generated kernels (format {FORMAT_VERSION}); do not edit: regenerated on demand",
             IMPORT_LINES.rstrip("\n"), "from numpy import asarray", "from symgrad.ops.registry import get as _op", ""]
    arrays: dict[str, np.ndarray] = {}
    body = []
    for key, value in namespace.items():
        if key in SCALAR_NAMESPACE or key in ("asarray", "np", "__ops__"):
            continue
        if key in op_keys:
            body.append(f"{key} = _op({op_keys[key]!r}).forward")
        elif isinstance(value, np.ndarray):
            arrays[key] = value
            body.append(f"{key} = _C[{key!r}]")
        else:
            return None  # an object we cannot write down: keep this graph in memory
    if arrays:
        lines.append("_C = dict(np.load(__file__[:-3] + '.npz'))")
    lines += body
    for src in kernels:
        lines += ["", "", "@njit(cache=True, error_model='numpy')", src]
    lines += ["", "", glue, ""]
    return "\n".join(lines), arrays


def load(kernels: list[str], glue: str, namespace: dict, op_keys: dict, entry: str):
    """Write (if new) and import the module; return its ``entry`` function, or None to fall back."""
    made = module_text(kernels, glue, namespace, op_keys)
    directory = cache_dir()
    if made is None or directory is None:
        return None
    text, arrays = made
    buf = io.BytesIO()
    if arrays:
        np.savez(buf, **arrays)
    digest = hashlib.sha256()
    for part in (text.encode(), buf.getvalue(), numba.__version__.encode(), np.__version__.encode(),
                 sys.version.encode()):
        digest.update(part)
    name = f"symgrad_kernels_{digest.hexdigest()[:24]}"
    path = directory / f"{name}.py"
    if name in sys.modules:
        return getattr(sys.modules[name], entry)
    if arrays and not (directory / f"{name}.npz").exists():
        _atomic_write(directory / f"{name}.npz", buf.getvalue())
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
    return getattr(module, entry)
