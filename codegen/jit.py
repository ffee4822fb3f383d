"""Generated kernels as modules in a per-user cache directory, so Numba's cache works across processes.

Numba cannot cache a function made by ``exec`` of a string ("no locator available"), and a
module loaded from a file but not registered in ``sys.modules`` fails to load its cache in the
next process.  So the generated source is written as a real module file and registered in
``sys.modules`` by name, and its kernels are compiled with ``cache=True``.  Only kernels go
there: they are size-generic and hold no data (sizes and constants are arguments), so the same
module serves every input size; the per-call Python glue is made in memory.

A module holds one kernel (or the few kernels that call each other) in its canonical form
(:mod:`codegen.kernel_key`: kernel, parameter and local names normalised, comments dropped), so
a loop body that a function repeats (an unrolled Python loop) or that another function also has
is compiled once per process and cached once on disk; the glue calls it by its readable name.

What is trusted, and why (nothing in the cache is taken on faith):

* The directory is :func:`symgrad.rules.diskcache.cache_dir`: ``$SYMGRAD_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/symgrad`` or ``~/.cache/symgrad``, created with mode 0700 and refused (a
  warning, then kernels compile in memory) if another user owns it, others can write to it, or
  it is read-only.
* A module's text starts with a stamp of the versions that shape the code (format, Numba,
  numpy, Python, and a hash of the helper modules inlined into kernels: Numba's cache of a
  kernel holds their code but only checks the kernel's file) and its file is named by the
  hash of that text.  Before a module is used the
  file's bytes are hashed: a truncated, edited or foreign file (or one from other versions) is
  rewritten atomically (temporary file + ``os.replace``).  The text that runs is the verified
  text held in memory (compiled from it, never from a ``.pyc``), so a file changed after the
  check cannot inject code.
* Numba's own cache files (``__pycache__/*.nbi`` index, ``*.nbc`` data) carry a SHA-256 trailer
  written by symgrad; a data file whose trailer does not match, an unreadable index, or any
  error while loading or saving them makes Numba compile the kernel afresh (the damaged files
  are removed), instead of failing the user's call or loading damaged machine code.
* Two processes building the same module at once each write complete files and
  ``os.replace`` them, so either version is whole; both succeed.

Anything unexpected falls back to compiling in memory, with a warning.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import pickle
import re
import sys
import threading
from pathlib import Path

import numba
import numpy as np

from symgrad.rules.diskcache import TMP_PREFIX, atomic_write, cache_dir, cache_path, cache_problem
from symgrad.rules.diskcache import warn_once as _warn

from .kernel_key import canonical_unit, kernel_name, units
from .scalar_math import IMPORT_LINES, PARALLEL_PRANGE_ONLY, SCALAR_NAMESPACE

FORMAT_VERSION = 3
PREFIX = "symgrad_kernels_"
MODULE_RE = re.compile(rf"^{PREFIX}[0-9a-f]{{24}}\.py$")
# Trailer of a Numba data file written through symgrad: magic + SHA-256 of the pickled body.
_TRAILER_MAGIC = b"SGNBC1\x00\x00"
_TRAILER_SIZE = len(_TRAILER_MAGIC) + 32

log = logging.getLogger("symgrad.cache")
_lock = threading.RLock()          # module loading and the table below, across threads


_loaded: dict[str, dict] = {}   # module name (+ ":memory") -> {canonical kernel name: dispatcher}, for this process
_counts = {"bodies": 0, "shared": 0}


def version_stamp() -> str:
    """Everything besides the kernel text that changes the compiled code."""
    return (f"format {FORMAT_VERSION}; numba {numba.__version__}; numpy {np.__version__}; "
            f"python {sys.version.split()[0]} {sys.implementation.cache_tag}; helpers {helpers_digest()}")


# Modules whose functions are inlined into kernels (``inline="always"``): Numba's cache of a
# kernel holds their code but only checks the kernel's own file, so their text is part of the stamp.
_HELPER_MODULES = ("scalar_math.py", "vecmath.py")


@functools.cache
def helpers_digest() -> str:
    """The first 12 hex digits of a hash over the inlined helper modules' source files.

    >>> len(helpers_digest())
    12
    """
    h = hashlib.sha256()
    for name in _HELPER_MODULES:
        path = Path(__file__).with_name(name)
        h.update(name.encode() + b"\0")
        if path.exists():
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def module_text(kernels: list[str], imports: str = "") -> str:
    """The source of a module holding the canonical form of ``kernels`` (decorated, size-generic loop
    nests that call no kernel outside the list; no data, no glue): see :mod:`codegen.kernel_key`.

    ``imports``: import lines beyond :data:`~codegen.scalar_math.IMPORT_LINES` (the vector
    elementary functions of ``math="vector"`` kernels).
    """
    return _module_text(canonical_unit(tuple(kernels)).sources, imports)


def _module_text(canonical: tuple[str, ...], imports: str) -> str:
    lines = [f"# symgrad generated kernels ({version_stamp()})",
             "# do not edit: the file is named by the hash of its text and rewritten when they differ",
             IMPORT_LINES.rstrip("\n")] + ([imports.rstrip("\n")] if imports else []) + [""]
    for src in canonical:
        lines += ["", src.replace("@njit(", "@njit(cache=True, ", 1)]
    return "\n".join(lines) + "\n"


def module_name(text: str) -> str:
    """``symgrad_kernels_<first 24 hex digits of sha256(text)>``."""
    return PREFIX + hashlib.sha256(text.encode()).hexdigest()[:24]


def _in_memory(canonical: tuple[str, ...], imports: str = "") -> dict:
    glb = dict(SCALAR_NAMESPACE)
    glb.update(prange=numba.prange, njit=numba.njit, PARALLEL_PRANGE_ONLY=PARALLEL_PRANGE_ONLY)
    if imports:
        exec(imports, glb)
    out = {}
    for src in canonical:
        name = kernel_name(src)
        exec(compile(src, f"<symgrad kernel {name}>", "exec"), glb)
        out[name] = glb[name]
    return out


def load_kernels(kernels: list[str], cache: bool = True, imports: str = "") -> dict:
    """``{name: dispatcher}`` for these kernel sources, each distinct body compiled at most once
    per process.

    Kernels are keyed by their canonical form (:mod:`codegen.kernel_key`: names and comments
    normalised), so kernels that differ only in names share one dispatcher, here and in every
    other function of the process, and one module of the disk cache.  Each unit of kernels (a
    kernel, or kernels that call each other) is its own module.  With ``cache`` the module lives
    in the cache directory, so Numba's own cache serves later processes; otherwise (or if the
    directory is unusable) it compiles in memory.  ``imports``: extra import lines the kernels
    need (see :func:`module_text`).  Safe to call from several threads at once.
    """
    found: dict = {}
    for unit in units(kernels):
        canonical = canonical_unit(unit)
        loaded = _load_unit(canonical.sources, cache, imports)
        for readable, name in canonical.names.items():
            found[readable] = loaded[name]
    return found


def _load_unit(canonical: tuple[str, ...], cache: bool, imports: str) -> dict:
    """``{canonical name: dispatcher}`` of one unit, from the table of this process if it is there."""
    text = _module_text(canonical, imports)
    name = module_name(text)
    key = name + ("" if cache else ":memory")
    found = _loaded.get(key)
    if found is not None:
        _counts["shared"] += 1
        return found
    with _lock:
        found = _loaded.get(key)
        if found is not None:
            _counts["shared"] += 1
            return found
        if cache:
            try:
                found = _load_module(name, text, [kernel_name(src) for src in canonical])
            except Exception as exc:  # never let the cache break compilation
                _warn(f"symgrad: kernel cache unavailable ({type(exc).__name__}: {exc}); compiling in memory")
                found = None
        if found is None:
            found = _in_memory(canonical, imports)
        _loaded[key] = found
        _counts["bodies"] += 1
        return found


def kernel_counts() -> dict:
    """How this process's kernels were loaded: ``bodies`` (distinct canonical units, each one set of
    dispatchers) and ``shared`` (requests served by a unit already loaded: kernels that differ only
    in names from one loaded before, in this function or another).

    >>> set(kernel_counts()) == {"bodies", "shared"}
    True
    """
    return dict(_counts)


def _verified(path: Path, name: str) -> bool:
    """True if ``path`` holds exactly the text whose hash is in ``name``."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return PREFIX + hashlib.sha256(data).hexdigest()[:24] == name


def _load_module(name: str, text: str, entries: list[str]) -> dict | None:
    module = sys.modules.get(name)
    if module is None:
        directory = cache_dir()
        if directory is None:
            return None
        path = directory / f"{name}.py"
        if not _verified(path, name):  # missing, truncated, edited or from other versions
            if path.exists():
                log.info("kernel module %s failed its hash check; rewriting it", path)
            atomic_write(path, text.encode())
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Numba's cache locator needs the module registered by name
        try:
            # the verified text in memory runs, not whatever the file (or a .pyc) holds now;
            # the file name stays in the code objects, which is what Numba's cache locator reads
            exec(compile(text, str(path), "exec"), module.__dict__)
        except Exception:
            sys.modules.pop(name, None)
            raise
        for entry in entries:
            guard_numba_cache(getattr(module, entry))
    return {entry: getattr(module, entry) for entry in entries}


# --- Numba's cache files ------------------------------------------------------------------------

def _numba_files(cache_file) -> list[Path]:
    """The index and data files of one function's Numba cache."""
    index = Path(cache_file._index_path)
    base = index.name[:-len(".nbi")]
    return [index] + sorted(index.parent.glob(f"{glob_escape(base)}.*.nbc"))


def glob_escape(s: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", s)


def _discard(cache_file, why: str) -> None:
    files = _numba_files(cache_file)
    log.warning("Numba cache of %s is damaged (%s); recompiling", cache_file._index_path, why)
    for f in files:
        try:
            f.unlink()
        except OSError:
            pass


class DamagedCacheEntry(Exception):
    """A Numba cache file failed symgrad's integrity check."""


def guard_numba_cache(dispatcher) -> None:
    """Make ``dispatcher``'s Numba disk cache fail safe.

    Data files get a SHA-256 trailer when saved and are checked against it before they are
    unpickled (Numba would load damaged machine code otherwise); an exception while loading or
    saving (a corrupt index, a truncated file, a full disk) discards this function's cache files
    and counts as a miss, so the kernel is compiled again and the call succeeds.
    """
    cache = getattr(dispatcher, "_cache", None)
    cache_file = getattr(cache, "_cache_file", None)
    if cache_file is None or getattr(cache, "_symgrad_guarded", False):
        return
    needed = ("_load_data", "_dump", "_data_path", "_open_for_write", "_index_path")
    if not all(hasattr(cache_file, a) for a in needed) or not hasattr(cache, "load_overload"):
        return  # another Numba layout: leave its cache alone

    def load_data(name):
        path = cache_file._data_path(name)
        with open(path, "rb") as f:
            data = f.read()
        body, magic, digest = data[:-_TRAILER_SIZE], data[-_TRAILER_SIZE:-32], data[-32:]
        if magic != _TRAILER_MAGIC or hashlib.sha256(body).digest() != digest:
            raise DamagedCacheEntry(f"{path}: checksum mismatch")
        return pickle.loads(body)

    def save_data(name, data):
        body = cache_file._dump(data)
        with cache_file._open_for_write(cache_file._data_path(name)) as f:
            f.write(body + _TRAILER_MAGIC + hashlib.sha256(body).digest())

    cache_file._load_data = load_data
    cache_file._save_data = save_data
    load_overload, save_overload = cache.load_overload, cache.save_overload

    def safe_load(sig, target_context):
        try:
            return load_overload(sig, target_context)
        except Exception as exc:  # noqa: BLE001 - any damage means: compile again
            _discard(cache_file, f"{type(exc).__name__}: {exc}")
            return None

    def safe_save(sig, data):
        try:
            save_overload(sig, data)
        except Exception as exc:  # noqa: BLE001 - a damaged index: start it again, once
            _discard(cache_file, f"{type(exc).__name__}: {exc}")
            try:
                save_overload(sig, data)
            except Exception as exc2:  # noqa: BLE001 - the kernel runs; only the disk copy is lost
                log.warning("could not save the Numba cache of %s: %s", cache_file._index_path, exc2)

    cache.load_overload, cache.save_overload = safe_load, safe_save
    cache._symgrad_guarded = True


# --- `symgrad cache info|clear` -----------------------------------------------------------------

def _entries(directory: Path) -> tuple[list[Path], list[Path]]:
    """(module files, other files symgrad made: Numba's cache of them, leftover temporaries)."""
    modules = sorted(p for p in directory.glob(f"{PREFIX}*.py") if MODULE_RE.match(p.name))
    others = sorted(p for p in directory.glob(f"{PREFIX}*") if p not in modules)
    others += sorted(directory.glob(f"{TMP_PREFIX}*"))
    # symgrad.compiler.build_cache's files: generated code per traced graph, printed elementwise forwards
    others += sorted(directory.glob("symgrad_build_*.json")) + sorted(directory.glob("symgrad_formulas_*.json"))
    pycache = directory / "__pycache__"
    if pycache.is_dir():
        others += sorted(pycache.glob(f"{PREFIX}*"))
    return modules, [p for p in others if p.is_file()]


def cache_info() -> dict:
    """``path``, ``exists``, ``problem`` (why it is refused, or None), ``modules``, ``files`` and
    ``bytes`` (module files plus Numba's cache of them)."""
    path = cache_path()
    info = {"path": str(path), "exists": path.is_dir(), "problem": None, "modules": 0, "files": 0, "bytes": 0}
    if not info["exists"]:
        return info
    info["problem"] = cache_problem(path)
    try:
        modules, others = _entries(path)
    except OSError as exc:
        info["problem"] = info["problem"] or f"it cannot be listed ({exc})"
        return info
    info["modules"] = len(modules)
    info["files"] = len(modules) + len(others)
    info["bytes"] = sum(p.stat().st_size for p in modules + others if p.exists())
    return info


def clear_cache() -> dict:
    """Remove the kernel modules and their Numba cache files (nothing else in the directory).

    Returns ``{"path", "removed" (files), "bytes"}``; modules already imported by this process
    keep working (their kernels are in memory).
    """
    path = cache_path()
    removed = size = 0
    if path.is_dir():
        modules, others = _entries(path)
        for p in modules + others:
            try:
                n = p.stat().st_size
                p.unlink()
            except OSError:
                continue
            removed += 1
            size += n
    return {"path": str(path), "removed": removed, "bytes": size}
