"""Grad-mode switches: ``no_grad``, ``enable_grad``, ``set_grad_enabled``.

Each works as a context manager and as a decorator (``@no_grad()`` and bare
``@no_grad``), like PyTorch's.  The flag is per thread.

>>> import symgrad
>>> x = symgrad.tensor([1.0], requires_grad=True)
>>> with symgrad.no_grad():
...     (x * 2).requires_grad
False
"""

from __future__ import annotations

import functools
import threading


class _GradState(threading.local):
    enabled = True


STATE = _GradState()


def is_grad_enabled() -> bool:
    """True when ops record the graph (outside ``no_grad``)."""
    return STATE.enabled


class _GradModeBase:
    """Shared context-manager and decorator behaviour."""

    _target: bool

    def __init__(self) -> None:
        self._prev: list[bool] = []

    def __enter__(self):
        self._prev.append(STATE.enabled)
        STATE.enabled = self._target
        return self

    def __exit__(self, *exc) -> None:
        STATE.enabled = self._prev.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__._clone(self):
                return fn(*args, **kwargs)

        return wrapper

    def _clone(self):
        return self.__class__()


class no_grad(_GradModeBase):
    """Disable graph recording inside a block or a decorated function."""

    _target = False

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if callable(fn):  # bare @no_grad
            self.__init__()
            return self(fn)
        return self

    def __init__(self, fn=None) -> None:
        super().__init__()


class enable_grad(no_grad):
    """Re-enable graph recording (for example inside ``no_grad``)."""

    _target = True


class set_grad_enabled(_GradModeBase):
    """Set grad mode: as a plain call it takes effect at once; as a context manager it is undone on exit."""

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self._target = bool(mode)
        self._prev.append(STATE.enabled)
        STATE.enabled = self._target  # a plain call takes effect immediately

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        STATE.enabled = self._prev.pop()

    def __call__(self, fn):
        STATE.enabled = self._prev.pop()  # used as a decorator: undo the immediate effect
        mode = self._target

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper
