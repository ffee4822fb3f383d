"""The options of ``symgrad.compile``: one frozen, validated record.

:class:`CompileOptions` is also a read-only mapping (``options["math"]``, ``dict(options)``,
``**options``), so options pass on as keyword arguments: ``CompiledFunction(fn, **options)``.

>>> o = CompileOptions(parallel=False, backend="numpy")
>>> o["parallel"], o.math, o.replace(math="libm").math
(False, 'vector', 'libm')
>>> CompileOptions(math="svml")
Traceback (most recent call last):
...
ValueError: symgrad.compile: math must be 'vector' or 'libm', not 'svml'
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

# Whether Numba is installed, without importing it: importing Numba takes a large share of a first
# call, and under ``tiered=True`` only the background build needs it.
DEFAULT_BACKEND = "numba" if importlib.util.find_spec("numba") is not None else "numpy"

# ``SYMGRAD_TIERED=0`` makes ``tiered=False`` the default of the process (the test suite sets it, so
# that its tests check the Numba kernels unless a test asks for tiering).
DEFAULT_TIERED = os.environ.get("SYMGRAD_TIERED", "1").strip().lower() not in ("0", "false", "no", "off")

BACKENDS = ("numba", "numpy")


@dataclasses.dataclass(frozen=True)
class CompileOptions(Mapping):
    """The options of a compiled function (documented at :func:`symgrad.compile`).

    ``backend=None`` means :data:`DEFAULT_BACKEND`, ``tiered=None`` :data:`DEFAULT_TIERED`.  The field
    order is the order of the build cache's settings, so keep it.
    """

    parallel: bool | str = "auto"
    fastmath: bool = False
    cache: bool = True
    backend: str | None = None
    scalar_loss: str = "joint"
    numpy_simd: bool = True
    math: str = "vector"
    strict: bool = False    # True: a function that cannot be traced raises TraceError (no eager fallback)
    tiered: bool | None = None   # None: DEFAULT_TIERED; see symgrad.compiler.tiers

    def __post_init__(self) -> None:
        object.__setattr__(self, "backend", self.backend or DEFAULT_BACKEND)
        if self.tiered is None:
            object.__setattr__(self, "tiered", DEFAULT_TIERED)
        if self.backend not in BACKENDS:
            raise ValueError(f"symgrad.compile: unknown backend {self.backend!r} "
                             f"(available: {', '.join(map(repr, BACKENDS))})")
        _one_of("parallel", self.parallel, ("auto", True, False))
        _one_of("scalar_loss", self.scalar_loss, ("joint", "split"))
        _one_of("math", self.math, ("vector", "libm"))
        _one_of("strict", self.strict, (True, False))
        _one_of("tiered", self.tiered, (True, False))

    @classmethod
    def of(cls, **options: Any) -> CompileOptions:
        """``CompileOptions(**options)``, with an unknown name reported as such (a TypeError)."""
        unknown = sorted(set(options) - set(_NAMES))
        if unknown:
            raise TypeError(f"symgrad.compile: unknown option {unknown[0]!r} (options: {', '.join(_NAMES)})")
        return cls(**options)

    def replace(self, **changes: Any) -> CompileOptions:
        """These options with ``changes`` (validated)."""
        return CompileOptions.of(**{**self, **changes})

    # --- read-only mapping --------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        if name not in _NAMES:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)


_NAMES = tuple(f.name for f in dataclasses.fields(CompileOptions))


def _one_of(name: str, value: Any, allowed: tuple) -> None:
    # ``is`` for booleans: 0 and 1 are not options, "auto" == "auto" is
    if not any(value is a or (isinstance(a, str) and value == a) for a in allowed):
        raise ValueError(f"symgrad.compile: {name} must be "
                         f"{', '.join(map(repr, allowed[:-1]))} or {allowed[-1]!r}, not {value!r}")


class BoundOptions(MutableMapping):
    """``CompiledFunction.options``: reads the function's :class:`CompileOptions`; assigning an
    option (``f.options["math"] = "libm"``) replaces them with validated ones, and the next call
    builds kernels for the new options."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Any) -> None:
        self._owner = owner

    def __getitem__(self, name: str) -> Any:
        return self._owner.compile_options[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self._owner.compile_options = self._owner.compile_options.replace(**{name: value})

    def __delitem__(self, name: str) -> None:
        raise TypeError("compile options cannot be removed; assign a value instead")

    def __iter__(self) -> Iterator[str]:
        return iter(_NAMES)

    def __len__(self) -> int:
        return len(_NAMES)

    def __repr__(self) -> str:
        return repr(dict(self))
