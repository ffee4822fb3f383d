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
import inspect
import threading
import warnings


class _GradState(threading.local):
    enabled = True        # ops record the graph (read on every op: one flag)
    grad_flag = True      # the grad mode the user set; differs from `enabled` only inside inference mode
    inference = False     # inside inference_mode: new tensors are inference tensors
    saved_hooks = None    # (pack, unpack) of the innermost saved_tensors_hooks, or None
    saved_hooks_stack = ()
    saved_hooks_disabled = None  # the message of an active disable_saved_tensors_hooks


STATE = _GradState()


def is_grad_enabled() -> bool:
    """True when ops record the graph (outside ``no_grad``)."""
    return STATE.grad_flag if STATE.inference else STATE.enabled


def _save_mode() -> tuple:
    return STATE.enabled, STATE.grad_flag


def _restore_mode(saved: tuple) -> None:
    STATE.enabled, STATE.grad_flag = saved


def _set_grad_mode(mode: bool) -> None:
    # inside inference mode nothing records, whatever grad mode says (as in PyTorch)
    STATE.grad_flag = mode
    STATE.enabled = mode and not STATE.inference


def _wrap_generator(make_context, fn):
    """A generator function whose body runs under a fresh ``make_context()`` at each resumption (first
    ``next``, ``send``, ``throw``, ``close``), while its caller keeps its own mode between them: a
    generator decorated with ``no_grad`` must not turn grad mode off for the code that iterates it."""

    @functools.wraps(fn)
    def generator(*args, **kwargs):
        inner = fn(*args, **kwargs)
        try:
            with make_context():
                value = inner.send(None)
            while True:
                try:
                    sent = yield value
                except GeneratorExit:
                    with make_context():
                        inner.close()
                    raise
                except BaseException as exc:  # thrown in by the caller: the body handles it in its mode
                    with make_context():
                        value = inner.throw(exc)
                else:
                    with make_context():
                        value = inner.send(sent)
        except StopIteration as stop:
            return stop.value

    return generator


def _decorate(make_context, fn):
    """``fn`` run under a fresh ``make_context()`` per call, as PyTorch's grad-mode decorators: a
    generator function per resumption (:func:`_wrap_generator`); a coroutine function, as in PyTorch,
    only while the call creates the coroutine (its body runs later, in the mode of whoever awaits it)."""
    if inspect.isclass(fn):
        warnings.warn("Decorating classes is deprecated and will be disabled in future versions. You should only "
                      "decorate functions or methods. To preserve the current behavior of class decoration, you "
                      "can directly decorate the `__init__` method and nothing else.", FutureWarning, stacklevel=3)
        cls = fn

        def fn(*args, **kwargs):
            return cls(*args, **kwargs)
    if inspect.isgeneratorfunction(fn):
        return _wrap_generator(make_context, fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with make_context():
            return fn(*args, **kwargs)

    return wrapper


class _GradModeBase:
    """Shared context-manager and decorator behaviour."""

    _target: bool

    def __init__(self) -> None:
        self._prev: list[tuple] = []

    def __enter__(self):
        self._prev.append(_save_mode())
        _set_grad_mode(self._target)
        return self

    def __exit__(self, *exc) -> None:
        _restore_mode(self._prev.pop())

    def __call__(self, fn):
        return _decorate(self._clone, fn)

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
    """Set grad mode: as a plain call it takes effect at once; as a context manager it is undone on exit
    (back to the mode before the call, as in PyTorch)."""

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self._target = bool(mode)
        self._before = _save_mode()
        _set_grad_mode(self._target)  # a plain call takes effect immediately

    def __enter__(self):
        _set_grad_mode(self._target)
        return self

    def __exit__(self, *exc) -> None:
        _restore_mode(self._before)

    def __call__(self, fn):
        _restore_mode(self._before)  # used as a decorator: undo the immediate effect (each time it decorates)
        return _decorate(self._clone, fn)

    def _clone(self):
        return set_grad_enabled(self._target)


ERR_INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
    "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use "
    "it in autograd, or use `symgrad.no_grad()` instead of `symgrad.inference_mode()`.")
ERR_INFERENCE_INPLACE = (
    "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to get a "
    "normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 for more details.")


class _InferenceVersionCounter:
    """The version counter of every inference tensor: it tracks nothing.

    Saving an inference tensor for backward reads its version, so this is where PyTorch's
    "cannot be saved for backward" error comes from, at no cost to ordinary tensors.
    """

    __slots__ = ()

    @property
    def value(self) -> int:
        if STATE.inference:  # in-place updates inside inference mode are allowed and not counted
            return 0
        raise RuntimeError(ERR_INFERENCE_SAVED)

    @value.setter
    def value(self, new: int) -> None:
        pass


INFERENCE_COUNTER = _InferenceVersionCounter()


def is_inference_mode_enabled() -> bool:
    """True inside ``inference_mode()``."""
    return STATE.inference


class inference_mode:
    """Like ``no_grad``, and tensors created inside are *inference tensors*: they can never be saved
    for backward later, nor updated in place outside inference mode (PyTorch's rules).

    Context manager or decorator (``@inference_mode``, ``@inference_mode()``); ``mode=False`` turns
    inference mode off and grad mode on inside.

    >>> import symgrad
    >>> with symgrad.inference_mode():
    ...     y = symgrad.ones(2) * 2
    >>> y.is_inference(), y.requires_grad
    (True, False)
    """

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # bare @inference_mode on a function

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)
        self._prev: list = []

    def __enter__(self):
        self._prev.append((STATE.enabled, STATE.grad_flag, STATE.inference))
        STATE.inference = self.mode
        _set_grad_mode(not self.mode)
        return self

    def __exit__(self, *exc) -> None:
        STATE.enabled, STATE.grad_flag, STATE.inference = self._prev.pop()

    def __call__(self, fn):
        return _decorate(self.clone, fn)

    def clone(self) -> inference_mode:
        return self.__class__(self.mode)
