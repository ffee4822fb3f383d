"""Disk cache of what symgrad derives with sympy: generated code for traced graphs, and the
printed numpy forwards of the rule table's elementwise ops.

A compiled function traces the user's function on every guard miss.  Tracing *runs* the
function, so it always sees the current code, globals and closure values — and it needs no
sympy.  What follows (autodiff from the rule table, the partition, code generation) is a pure
function of the traced graph, the compile options and symgrad's own code; in a warm process it
is most of the first call (importing and first using sympy are slow).  This
module keys that work by a fingerprint of exactly those inputs and keeps the generated sources
in the per-user cache directory of :mod:`codegen.jit` (mode 0700, refused when others could
write it), as JSON with a SHA-256 of its content: a damaged entry is ignored and rebuilt, and an
entry is only ever *data* (source text, numbers, arrays) — the generated code is compiled by
the same path as freshly generated code.

The fingerprint covers every node's op, arguments (floats bit for bit, arrays by dtype, shape
and a hash of their bytes), output names, dtypes and shapes and marks; the inputs and outputs;
the rule-table entry of every op the graph uses (custom ops included); the options; and a
digest of symgrad's and codegen's source files, the numpy and Numba versions, the CPU features
and Numba thread count the code generator looks at.  A graph holding anything it cannot
fingerprint exactly is not cached.

>>> import numpy as np, symgrad
>>> g1 = symgrad.trace(lambda x: (x * 2.0).sum(), np.ones(3))
>>> g2 = symgrad.trace(lambda x: (x * 2.5).sum(), np.ones(3))
>>> graph_fingerprint(g1) == graph_fingerprint(symgrad.trace(lambda x: (x * 2.0).sum(), np.ones(3)))
True
>>> graph_fingerprint(g1) == graph_fingerprint(g2)
False
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import dtype as Dtype
from ..dtypes import to_dtype
from ..ir.graph import Graph, IndexRef, Value
from ..rules import diskcache
from ..rules.diskcache import FORMULAS_PREFIX, code_digest

log = logging.getLogger("symgrad.cache")

BUILD_PREFIX = "symgrad_build_"
# Modules whose functions a cached namespace may refer to by name.
_TRUSTED_MODULES = ("numpy", "math", "builtins", "codegen", "symgrad", "numba")


class NotCacheable(Exception):
    """Something in a graph or a generated namespace that has no exact, data-only encoding."""


# --- what the generated code depends on besides the graph ----------------------------------------

def _rule_signature(op: str) -> str:
    """The rule-table entry of ``op`` as text (a changed custom op changes the key)."""
    from ..ops import registry

    rule = registry.get(op).rule
    formulas = sorted((name, f.text) for name, f in rule.formulas.items())
    return repr((repr(rule.schema), rule.node_name, rule.elementwise_text, formulas, rule.non_differentiable,
                 rule.output_differentiability, sorted(rule.saved.items())))


# --- exact encodings ----------------------------------------------------------------------------

def _encode_value(v: Any) -> Any:
    """A JSON-able, exact encoding of a constant (see :func:`_decode_value`)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": v.hex()}
    if isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            raise NotCacheable("an object array")
        data = np.ascontiguousarray(v)
        return {"array": data.dtype.str, "shape": list(v.shape), "data": base64.b64encode(data.tobytes()).decode()}
    if isinstance(v, np.generic):
        return {"scalar": _encode_value(np.asarray(v))}
    if isinstance(v, np.dtype):
        return {"dtype": v.str}
    if isinstance(v, Dtype):
        return {"symgrad_dtype": v.name}
    if isinstance(v, slice):
        return {"slice": [_encode_value(v.start), _encode_value(v.stop), _encode_value(v.step)]}
    if v is Ellipsis:
        return {"ellipsis": True}
    if isinstance(v, tuple):
        return {"tuple": [_encode_value(x) for x in v]}
    if isinstance(v, list):
        return {"list": [_encode_value(x) for x in v]}
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {"dict": [[k, _encode_value(v[k])] for k in sorted(v)]}
    raise NotCacheable(f"a constant of type {type(v).__name__}")


def _decode_value(d: Any) -> Any:
    if d is None or isinstance(d, (bool, str)):
        return d
    (tag, body), *rest = d.items()
    if tag == "int":
        return int(body)
    if tag == "float":
        return float.fromhex(body)
    if tag == "array":
        raw = base64.b64decode(d["data"])
        return np.frombuffer(raw, dtype=np.dtype(body)).reshape(d["shape"]).copy()
    if tag == "scalar":
        return _decode_value(body)[()]
    if tag == "dtype":
        return np.dtype(body)
    if tag == "symgrad_dtype":
        return to_dtype(body)
    if tag == "slice":
        return slice(*(_decode_value(x) for x in body))
    if tag == "ellipsis":
        return Ellipsis
    if tag == "tuple":
        return tuple(_decode_value(x) for x in body)
    if tag == "list":
        return [_decode_value(x) for x in body]
    if tag == "dict":
        return {k: _decode_value(x) for k, x in body}
    raise ValueError(f"unknown tag {tag!r}")


def _fingerprint_arg(a: Any) -> Any:
    if isinstance(a, Value):
        return ["v", a.name]
    if isinstance(a, IndexRef):
        return ["i", _fingerprint_arg(a.parts)]
    if isinstance(a, (list, tuple)):
        return ["l" if isinstance(a, list) else "t", [_fingerprint_arg(x) for x in a]]
    if isinstance(a, np.ndarray) and a.size > 64:   # large constants by hash
        return ["a", a.dtype.str, list(a.shape), hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()]
    return _encode_value(a)


def graph_fingerprint(graph: Graph) -> str:
    """SHA-256 of everything in ``graph`` that generated code depends on (raises
    :class:`NotCacheable`).  Needs no sympy: node expressions follow from ops and arguments."""
    parts: list = [["in", [[v.name, v.dtype.name, list(v.shape)] for v in graph.placeholders]]]
    ops = set()
    for n in graph.nodes:
        if n.op not in ("constant", "detach"):
            ops.add(n.op)
        parts.append([n.op, [_fingerprint_arg(a) for a in n.args],
                      [[o.name, o.dtype.name, list(o.shape)] for o in n.outputs],
                      None if n.data is None else _fingerprint_arg(np.asarray(n.data)),
                      sorted((k, _fingerprint_arg(v)) for k, v in n.meta.items())])
    parts.append(["out", [None if v is None else v.name for v in graph.outputs], graph.output_kind])
    parts.append(["rules", [[op, _rule_signature(op)] for op in sorted(ops)]])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def build_key(graph: Graph, **settings: Any) -> str | None:
    """The cache key of a build: the graph's fingerprint, ``settings`` (options, ``wrt``...) and
    :func:`code_digest`; None when the graph cannot be fingerprinted exactly."""
    try:
        fp = graph_fingerprint(graph)
        encoded = json.dumps({k: _encode_value(v) for k, v in sorted(settings.items())}, sort_keys=True)
    except NotCacheable as exc:
        log.debug("build not cached: %s", exc)
        return None
    return hashlib.sha256(f"{fp}\n{encoded}\n{code_digest()}".encode()).hexdigest()


# --- generated code as data ----------------------------------------------------------------------

@functools.cache
def _base_namespace(cls: type) -> dict:
    """The names an emitter puts in every namespace (what it emits for an empty graph)."""
    from codegen.emit import Emitted, emit_numpy

    if cls is Emitted:
        return emit_numpy(Graph(), "base").namespace
    from codegen.numba_emit import emit_numba

    return emit_numba(Graph(), "base").namespace


def _reference(v: Any) -> list | None:
    """``[module, qualified name]`` naming ``v`` exactly, or None."""
    if isinstance(v, type(sys)):
        return [v.__name__, None] if v.__name__.split(".")[0] in _TRUSTED_MODULES else None
    module = getattr(v, "__module__", None)
    name = getattr(v, "__qualname__", None) or getattr(v, "__name__", None)
    if not module or not name or module.split(".")[0] not in _TRUSTED_MODULES:
        return None
    try:
        if _resolve([module, name]) is v:
            return [module, name]
    except (ImportError, AttributeError):
        return None
    return None


def _resolve(ref: list) -> Any:
    module, name = ref
    if module.split(".")[0] not in _TRUSTED_MODULES:
        raise ImportError(f"untrusted module {module}")
    obj = importlib.import_module(module)
    for part in (name.split(".") if name else ()):
        obj = getattr(obj, part)
    return obj


def encode_emitted(e: Any) -> dict:
    """A JSON-able description of an emitted function (``codegen.emit.Emitted`` or
    ``codegen.numba_emit.NumbaEmitted``): its fields, and its namespace as base names, op
    forwards, named functions and constants.  Raises :class:`NotCacheable`."""
    cls = type(e)
    fields = {}
    for f in dataclasses.fields(e):
        if f.name != "namespace":
            value = getattr(e, f.name)
            if not isinstance(value, (str, int, float, bool, list, type(None))) or \
                    (isinstance(value, list) and not all(isinstance(x, str) for x in value)):
                raise NotCacheable(f"emitted field {f.name}")
            fields[f.name] = value
    base = _base_namespace(cls)
    ops = dict(e.namespace.get("__ops__", {}))
    names: dict = {}
    for k, v in e.namespace.items():
        if k == "__ops__" or k in ops or (k in base and base[k] is v):
            continue
        if callable(v) or isinstance(v, type(sys)):
            ref = _reference(v)
            if ref is None:
                raise NotCacheable(f"namespace entry {k} ({type(v).__name__})")
            names[k] = {"ref": ref}
        else:
            names[k] = {"value": _encode_value(v)}
    return {"class": [cls.__module__, cls.__qualname__], "fields": fields, "ops": ops, "names": names}


def decode_emitted(d: dict) -> Any:
    """The emitted object described by :func:`encode_emitted` (compile it as a fresh one)."""
    from ..ops import registry

    cls = _resolve(d["class"])
    ns = dict(_base_namespace(cls))
    for key, op in d["ops"].items():
        ns[key] = registry.get(op).forward
    if d["ops"]:
        ns["__ops__"] = dict(d["ops"])
    for key, entry in d["names"].items():
        ns[key] = _resolve(entry["ref"]) if "ref" in entry else _decode_value(entry["value"])
    return cls(namespace=ns, **d["fields"])


# --- the files ----------------------------------------------------------------------------------

def _directory() -> Path | None:
    return diskcache.cache_dir()


def load_build(key: str | None, defer=None) -> dict | None:
    """``{"emitted": {name: emitted object}, "meta": {...}}`` stored under ``key``, or None.

    ``defer(names)`` may name entries not to decode now (decoding Numba code imports Numba): those
    come as functions of no arguments that decode them (raising ``ValueError`` if unusable).
    """
    directory = _directory() if key else None
    if directory is None:
        return None
    path = directory / f"{BUILD_PREFIX}{key[:40]}.json"
    payload = diskcache.read_json(path)
    if payload is None or payload.get("key") != key:
        return None
    try:
        later = set(defer(set(payload["emitted"]))) if defer is not None else set()
        emitted = {name: functools.partial(_decode_later, d, path) if name in later else decode_emitted(d)
                   for name, d in payload["emitted"].items()}
    except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
        log.info("symgrad: ignoring unusable cache entry (%s)", exc)
        return None
    return {"emitted": emitted, "meta": payload["meta"]}


def _decode_later(d: dict, path: Path) -> Any:
    """Decode a deferred entry; an unusable one is removed, so the next process builds it again."""
    try:
        return decode_emitted(d)
    except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
        log.info("symgrad: removing unusable cache entry %s (%s)", path.name, exc)
        path.unlink(missing_ok=True)
        raise ValueError(f"unusable build-cache entry {path.name} ({type(exc).__name__}: {exc})") from exc


def store_build(key: str | None, emitted: dict, meta: dict) -> bool:
    """Keep ``emitted`` ({name: emitted object}) and ``meta`` (JSON-able) under ``key``."""
    directory = _directory() if key else None
    if directory is None:
        return False
    try:
        payload = {"key": key, "emitted": {name: encode_emitted(e) for name, e in emitted.items()}, "meta": meta}
    except NotCacheable as exc:
        log.debug("build not cached: %s", exc)
        return False
    diskcache.write_json(directory / f"{BUILD_PREFIX}{key[:40]}.json", payload)
    return True


def entries(directory: Path) -> list[Path]:
    """The build and formula files in a cache directory (for ``symgrad cache info|clear``)."""
    return sorted(p for p in directory.glob("symgrad_*.json")
                  if p.name.startswith((BUILD_PREFIX, FORMULAS_PREFIX)))
