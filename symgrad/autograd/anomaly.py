"""Anomaly mode: remember where each node was created and stop at the first NaN gradient.

>>> import symgrad
>>> with symgrad.autograd.detect_anomaly():
...     symgrad.autograd.is_anomaly_enabled()
True
"""

from __future__ import annotations

import os
import re
import sys
import threading
import warnings

# symgrad's own code: frames in these directories are not the user's
_SYMGRAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME_FILE = re.compile(r'\s*File "(.+)", line \d+')


class _AnomalyState(threading.local):
    enabled = False
    check_nan = True


STATE = _AnomalyState()


def is_enabled() -> bool:
    return STATE.enabled


def is_anomaly_enabled() -> bool:
    """True inside ``detect_anomaly`` or after ``set_detect_anomaly(True)``."""
    return STATE.enabled


def is_anomaly_check_nan_enabled() -> bool:
    return STATE.enabled and STATE.check_nan


class set_detect_anomaly:
    """Turn anomaly detection on or off: as a plain call, or as a context manager that restores it."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self._prev = (STATE.enabled, STATE.check_nan)
        STATE.enabled, STATE.check_nan = bool(mode), bool(check_nan)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        STATE.enabled, STATE.check_nan = self._prev


class detect_anomaly:
    """Context manager (and decorator) that enables anomaly detection inside it.

    Nodes created inside remember their forward traceback; a backward node that
    returns NaN raises a RuntimeError naming the node and the forward op's line.
    """

    def __init__(self, check_nan: bool = True) -> None:
        self.check_nan = check_nan
        self._prev = None

    def __enter__(self):
        self._prev = (STATE.enabled, STATE.check_nan)
        STATE.enabled, STATE.check_nan = True, self.check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should "
                      "only be enabled for debugging.", UserWarning, stacklevel=2)
        return self

    def __exit__(self, *exc) -> None:
        STATE.enabled, STATE.check_nan = self._prev

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with detect_anomaly(self.check_nan):
                return fn(*args, **kwargs)

        return wrapper


def _package_dirs() -> tuple[str, ...]:
    """The directories of symgrad and (once imported) codegen, each ending with a separator."""
    dirs = [_SYMGRAD_DIR]
    codegen_file = getattr(sys.modules.get("codegen"), "__file__", None)
    if codegen_file:
        dirs.append(os.path.dirname(os.path.abspath(codegen_file)))
    return tuple(os.path.normcase(d) + os.sep for d in dirs)


def _in_package(frame: str, dirs: tuple[str, ...]) -> bool:
    """Whether a ``traceback.format_stack`` entry is a frame of symgrad's own code."""
    m = _FRAME_FILE.match(frame)
    return m is not None and os.path.normcase(os.path.abspath(m.group(1))).startswith(dirs)


def forward_site(node) -> str:
    """The last frame of the node's forward traceback outside symgrad, as 'file:line in fn'."""
    trace = getattr(node, "_trace", None)
    if not trace:
        return ""
    dirs = _package_dirs()
    for frame in reversed(trace):
        if not _in_package(frame, dirs):
            return frame.strip().splitlines()[0]
    return trace[-1].strip().splitlines()[0]


def report(node) -> None:
    """Warn with the forward traceback of ``node`` (PyTorch's anomaly-mode message)."""
    trace = getattr(node, "_trace", None)
    if trace:
        warnings.warn(f"Error detected in {type(node).__name__}. Traceback of forward call that caused the "
                      f"error:\n{''.join(trace)}", UserWarning, stacklevel=3)
