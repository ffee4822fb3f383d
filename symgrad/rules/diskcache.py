"""Files symgrad keeps between processes: the per-user cache directory and its checked writes.

Every layer that caches something on disk goes through here: the printed numpy forwards of the
rule table (:func:`formula_source`, used by the eager core), the compiler's build cache and
codegen's kernel modules.  Nothing read back is trusted without a check:

* The directory is ``$SYMGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/symgrad`` or
  ``~/.cache/symgrad``.  It is created with mode 0700 and refused (a warning, then nothing is
  cached) if another user owns it, others can write to it, or it is read-only.
* Files are written whole: a temporary file, then ``os.replace``.
* JSON entries carry a SHA-256 of their body; a damaged entry reads as missing.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import stat
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("symgrad.cache")
# Temporary files of a write in progress (``symgrad cache clear`` removes leftovers).
TMP_PREFIX = ".symgrad_kernels_tmp-"
FORMULAS_PREFIX = "symgrad_formulas_"
_warned: set[str] = set()


def warn_once(msg: str) -> None:
    """One warning per distinct message per process (a refused directory is not news every call)."""
    log.info(msg)
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, UserWarning, stacklevel=4)


def cache_path() -> Path:
    """Where the cache lives (it may not exist yet)."""
    root = os.environ.get("SYMGRAD_CACHE_DIR")
    if root:
        return Path(root).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "symgrad"


def cache_problem(path: Path) -> str | None:
    """Why the existing directory ``path`` must not be used as a cache, or None if it is fine."""
    try:
        info = path.stat()
    except OSError as exc:
        return f"it cannot be read ({exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"it is owned by another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by others (mode {oct(info.st_mode & 0o777)})"
    if not os.access(path, os.W_OK | os.X_OK):
        return "it is read-only"
    return None


def cache_dir() -> Path | None:
    """The cache directory (created with mode 0700), or None when it cannot be used safely."""
    path = cache_path()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        warn_once(f"symgrad: kernel cache {path} is unusable ({exc}); compiling in memory")
        return None
    problem = cache_problem(path)
    if problem is not None:
        warn_once(f"symgrad: refusing kernel cache {path}: {problem}; compiling in memory "
                  "(set SYMGRAD_CACHE_DIR to a private directory)")
        return None
    return path


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TMP_PREFIX, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> Any | None:
    """The payload of a file written by :func:`write_json`, or None if missing or damaged."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    digest, _, body = raw.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        log.info("symgrad: ignoring damaged cache entry %s", path.name)
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def write_json(path: Path, payload: Any) -> None:
    """Keep ``payload`` as JSON headed by its SHA-256; a full or read-only disk just keeps nothing."""
    body = json.dumps(payload, sort_keys=True).encode()
    try:
        atomic_write(path, hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    except OSError as exc:
        log.info("symgrad: could not write cache entry %s (%s)", path.name, exc)


def _unloaded_version(package: str, filename: str, parse) -> str | None:
    """``package.__version__`` without importing the package: ``parse`` of the text of its file
    ``filename`` (where ``__version__`` is read from), else the installed distribution's metadata
    (slower: it scans the path and loads the email parser)."""
    try:
        spec = importlib.util.find_spec(package)
        return str(parse((Path(spec.origin).parent / filename).read_text()))
    except (ImportError, AttributeError, TypeError, OSError, IndexError, ValueError, KeyError):
        pass
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _numba_facts() -> str:
    """Numba's version and thread count, without importing Numba when it is not loaded yet (a first
    call on the numpy tier of ``tiered=True`` does not need it): its thread count is then the one
    Numba would read, ``NUMBA_NUM_THREADS`` or the CPUs this process may run on."""
    numba = sys.modules.get("numba")
    if numba is not None and hasattr(numba, "config"):
        return f"{numba.__version__} threads {numba.config.NUMBA_NUM_THREADS}"
    version = _unloaded_version("numba", "_version.py", lambda text: json.loads(text.split("'''")[1])["version"])
    if version is None:  # pragma: no cover - numba is a dependency
        return "none"
    threads = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if not threads:
        threads = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return f"{version} threads {int(threads) if threads.isdigit() else threads}"


def _sympy_version() -> str | None:
    """``sympy.__version__``; read from its ``release.py`` (then the distribution's metadata) when sympy
    is not loaded yet, so that computing the digest never imports it."""
    sympy = sys.modules.get("sympy")
    if sympy is not None and hasattr(sympy, "__version__"):
        return str(sympy.__version__)
    return _unloaded_version("sympy", "release.py", lambda text: text.split("__version__", 1)[1].split("=", 1)[1]
                             .strip().splitlines()[0].strip("\"'"))


@functools.cache
def code_digest() -> str:
    """SHA-256 of symgrad's and codegen's sources and rule table, library versions (sympy's printing
    and simplification shape the generated code too) and the machine facts code generation reads
    (CPU features, Numba's thread count)."""
    h = hashlib.sha256(b"build-cache 1\n")
    root = Path(__file__).resolve().parents[2]
    for package in ("symgrad", "codegen"):
        base = root / package
        for path in sorted(base.rglob("*")):
            if path.suffix in (".py", ".yaml") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode() + b"\0")
                h.update(path.read_bytes() + b"\0")
    h.update(f"python {sys.version}\nnumpy {np.__version__}\n".encode())
    h.update(f"numba {_numba_facts()}\nsympy {_sympy_version()}\n".encode())
    try:
        features = sorted(np._core._multiarray_umath.__cpu_features__.items())
    except AttributeError:  # pragma: no cover - numpy < 2
        features = sorted(np.core._multiarray_umath.__cpu_features__.items())
    h.update(repr(features).encode())
    return h.hexdigest()


# --- printed forwards of elementwise ops ---------------------------------------------------------

_lock = threading.Lock()
_formulas: dict | None = None     # this process's view of the formulas file
_formulas_new: dict = {}          # printed here, not yet written


def _formulas_path() -> Path | None:
    directory = cache_dir()
    return None if directory is None else directory / f"{FORMULAS_PREFIX}{code_digest()[:40]}.json"


def formula_source(key: str, make) -> str:
    """The source ``make()`` prints for ``key`` (which must name everything the source depends
    on besides symgrad's code), kept on disk so that a new process prints no formula again.
    New sources are written once, when the process exits.
    """
    global _formulas
    with _lock:
        if _formulas is None:
            path = _formulas_path()
            loaded = read_json(path) if path is not None and path.exists() else None
            _formulas = loaded if isinstance(loaded, dict) else {}
        src = _formulas.get(key)
    if isinstance(src, str):
        return src
    src = make()
    with _lock:
        _formulas[key] = src
        if not _formulas_new:
            atexit.register(flush_formulas)
        _formulas_new[key] = src
    return src


def flush_formulas() -> None:
    """Write the formulas printed by this process (merged with what other processes wrote)."""
    with _lock:
        if not _formulas_new:
            return
        path = _formulas_path()
        if path is not None:
            on_disk = read_json(path) if path.exists() else None
            merged = dict(on_disk) if isinstance(on_disk, dict) else {}
            merged.update(_formulas_new)
            write_json(path, merged)
        _formulas_new.clear()
