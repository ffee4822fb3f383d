"""Devices and random generators: ``symgrad.device``, ``symgrad.cuda``, ``symgrad.Generator``.

symgrad computes with numpy on the CPU, so the only device is ``cpu``.  The names exist so
that PyTorch code that asks where it runs (``torch.cuda.is_available()``, ``device="cpu"``,
``x.to(device)``) runs unchanged; any other device is refused with :class:`DeviceError`.

>>> import symgrad as torch
>>> torch.device("cpu"), torch.cuda.is_available()
(device(type='cpu'), False)
>>> torch.zeros(2, device="cpu").device
device(type='cpu')
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types

import numpy as np

# The device types PyTorch's parser knows: a known non-CPU type is a DeviceError when used, an
# unknown one a RuntimeError when the device is made (as in PyTorch).
_KNOWN_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")


class DeviceError(RuntimeError, AssertionError):
    """A tensor was asked to live on a device other than the CPU.

    A RuntimeError, and an AssertionError as PyTorch's "Torch not compiled with CUDA enabled" is,
    so that code catching either still works.
    """


def cpu_only_error(what: str) -> DeviceError:
    return DeviceError(f"symgrad runs on the CPU only: {what} is not available. Use device='cpu' (or leave "
                       "device out); torch.cuda.is_available() is False under symgrad, so code that checks it "
                       "picks the CPU by itself.")


class device:
    """Where a tensor lives: ``device("cpu")``, ``device("cpu:0")``, ``device("cpu", 0)``.

    Other types (``"cuda"``, ``"mps"``) can be named, as in PyTorch, but making a tensor there
    raises :class:`DeviceError`.

    >>> device("cpu") == device("cpu"), device("cpu") == device("cpu", 0)
    (True, False)
    """

    def __init__(self, type, index: int | None = None) -> None:
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(): a device object cannot be given an index")
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            raise cpu_only_error(f"device ordinal {type} (an accelerator index)")
        if not isinstance(type, str):
            raise TypeError(f"device(): expected a string or a device, got {type.__class__.__name__}")
        kind, sep, number = type.partition(":")
        if kind not in _KNOWN_TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_KNOWN_TYPES)} device type at start of device "
                               f"string: {type}")
        if sep:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed "
                                   f"explicitly: {type}")
            if not number.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(number)
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self.type, self.index = kind, index

    def __eq__(self, other) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash(("device", self.type, self.index))

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __reduce__(self):
        return (device, (self.type, self.index))

    # `with torch.device("cpu"):` sets the default device for factories inside the block
    def __enter__(self):
        self._previous = get_default_device()
        set_default_device(self)
        return self

    def __exit__(self, *exc) -> None:
        set_default_device(self._previous)


CPU = device("cpu")


def check_device(spec, what: str = "device") -> device:
    """``spec`` (None, a string, an int or a device) as the CPU device; anything else raises DeviceError."""
    if spec is None:
        return CPU
    d = spec if isinstance(spec, device) else device(spec)
    if d.type != "cpu":
        raise cpu_only_error(f"{what} {str(d)!r}")
    if d.index not in (None, 0):
        raise cpu_only_error(f"{what} {str(d)!r} (there is one CPU device, cpu:0)")
    return d


_default_device = CPU


def set_default_device(spec) -> None:
    """Set the device factories use; only the CPU (or None) is accepted."""
    global _default_device
    _default_device = CPU if spec is None else check_device(spec, "default device")


def get_default_device() -> device:
    """The device factories use: always ``device(type='cpu')``."""
    return _default_device


# --- random generators ----------------------------------------------------------------------

class Generator:
    """A random number generator (``torch.Generator``), for the ``generator=`` argument of ``rand``,
    ``randn``, ``randint`` and ``randperm``.

    The streams are numpy's PCG64, so a seed gives the same numbers on every run, but not the
    numbers PyTorch draws for the same seed.

    >>> g = Generator().manual_seed(3)
    >>> g.initial_seed()
    3
    """

    def __init__(self, device="cpu") -> None:
        self.device = check_device(device, "Generator device")
        self._seed = int(np.random.SeedSequence().entropy % (2 ** 63))
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed: int) -> Generator:
        seed = int(seed)
        # PyTorch accepts any 64-bit value, negative ones included (read as unsigned)
        self._seed = seed % (2 ** 64)
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        """Re-seed from fresh entropy and return the new seed."""
        self.manual_seed(int(np.random.SeedSequence().entropy % (2 ** 63)))
        return self._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The generator's state (an opaque object for :meth:`set_state`, not PyTorch's ByteTensor)."""
        return dict(self._rng.bit_generator.state)

    def set_state(self, state) -> Generator:
        self._rng.bit_generator.state = state
        return self


default_generator = Generator()

# A thread's own stream in place of the default generator's (see private_default_stream).
_thread_streams = threading.local()


def generator_rng(generator: Generator | None) -> np.random.Generator:
    if generator is None:
        own = getattr(_thread_streams, "rng", None)
        return default_generator._rng if own is None else own
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a symgrad.Generator, got {type(generator).__name__}")
    return generator._rng


@contextlib.contextmanager
def private_default_stream():
    """Within this block, draws of the calling thread from the default generator come from a
    throwaway stream: a compiled function run in the background to compile its kernels
    (:mod:`symgrad.compiler.tiers`) must not advance the user's random stream."""
    _thread_streams.rng = np.random.default_rng()
    try:
        yield
    finally:
        _thread_streams.rng = None


def manual_seed(seed: int) -> Generator:
    """Seed the default generator behind ``rand``, ``randn``, ``randint`` and ``randperm``; returns it.

    The same seed gives the same numbers on every run (numpy's PCG64 streams, not PyTorch's
    Mersenne Twister: the numbers differ from PyTorch's).
    """
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(state) -> None:
    default_generator.set_state(state)


# --- torch.cuda, torch.backends.mps: present, and empty -----------------------------------

def _module(name: str, doc: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _refuse(what: str):
    def fn(*args, **kwargs):
        raise cpu_only_error(what)

    fn.__name__ = what.split("(")[0].rsplit(".", 1)[-1]
    return fn


def _nothing(*args, **kwargs) -> None:
    """Seeding a device that is not there does nothing, as PyTorch's lazy CUDA seeding."""


cuda = _module(
    "symgrad.cuda", "CUDA is not available under symgrad: is_available() is False, device_count() is 0.",
    is_available=lambda: False, device_count=lambda: 0, is_initialized=lambda: False,
    manual_seed=_nothing, manual_seed_all=_nothing, seed=_nothing, seed_all=_nothing, synchronize=_nothing,
    empty_cache=_nothing, current_device=_refuse("torch.cuda.current_device()"),
    get_device_name=_refuse("torch.cuda.get_device_name()"), set_device=_refuse("torch.cuda.set_device()"),
    device=_refuse("torch.cuda.device()"))

_mps = _module("symgrad.backends.mps", "No MPS under symgrad.", is_available=lambda: False,
               is_built=lambda: False)
_cuda_backend = _module("symgrad.backends.cuda", "No CUDA under symgrad.", is_built=lambda: False)
backends = _module("symgrad.backends", "Accelerator backends: none under symgrad.", mps=_mps, cuda=_cuda_backend)
