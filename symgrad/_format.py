"""Render numpy arrays exactly the way PyTorch's ``repr(tensor)`` does.

This mirrors ``torch/_tensor_str.py`` with PyTorch's default print options
(precision 4, threshold 1000, edgeitems 3, linewidth 80).  It depends only on
numpy so that it can be imported before the rest of symgrad.

>>> import numpy as np
>>> format_tensor(np.array([0.5, 1.25, 3.0], np.float32), dtype_name="float32", show_dtype=False)
'tensor([0.5000, 1.2500, 3.0000])'
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["format_tensor"]

# PyTorch's default print options (torch._tensor_str.PRINT_OPTS).
_PRECISION = 4
_THRESHOLD = 1000
_EDGEITEMS = 3
_LINEWIDTH = 80


class _Formatter:
    """Chooses one notation and column width for every element of a tensor."""

    def __init__(self, values: np.ndarray) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1

        if not self.floating:
            for v in values.ravel().tolist():
                self.max_width = max(self.max_width, len(str(v)))
            return

        # PyTorch decides in float64 (float16/float32 widen exactly).
        flat = values.ravel().astype(np.float64)
        nonzero_finite = flat[np.isfinite(flat) & (flat != 0)]
        if nonzero_finite.size == 0:
            return
        abs_vals = np.abs(nonzero_finite)
        lo, hi = float(abs_vals.min()), float(abs_vals.max())

        self.int_mode = bool(np.all(nonzero_finite == np.ceil(nonzero_finite)))
        self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4

        if self.sci_mode:
            spec, extra = f".{_PRECISION}e", 0
        elif self.int_mode:
            spec, extra = ".0f", 1  # +1 for the trailing "." that marks a float
        else:
            spec, extra = f".{_PRECISION}f", 0
        for v in nonzero_finite.tolist():
            self.max_width = max(self.max_width, len(format(v, spec)) + extra)

    def format(self, value: float | int | bool) -> str:
        if self.floating:
            if self.sci_mode:
                ret = format(value, f"{self.max_width}.{_PRECISION}e")
            elif self.int_mode:
                ret = format(value, ".0f")
                if math.isfinite(value):
                    ret += "."
            else:
                ret = format(value, f".{_PRECISION}f")
        else:
            ret = str(value)
        return ret.rjust(self.max_width)


def _summarized(values: np.ndarray) -> np.ndarray:
    """Only the elements that will be printed, so widths ignore the elided middle."""
    e = _EDGEITEMS
    for axis, n in enumerate(values.shape):
        if n > 2 * e:
            idx = list(range(e)) + list(range(n - e, n))
            values = values.take(idx, axis=axis)
    return values


def _vector_str(values: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    element_length = fmt.max_width + 2  # ", " between elements
    per_line = max(1, (_LINEWIDTH - indent) // element_length)

    n = values.shape[0]
    if summarize and n > 2 * _EDGEITEMS:
        data = (
            [fmt.format(v) for v in values[:_EDGEITEMS].tolist()]
            + [" ..."]
            + [fmt.format(v) for v in values[n - _EDGEITEMS:].tolist()]
        )
    else:
        data = [fmt.format(v) for v in values.tolist()]

    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested_str(values: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    dim = values.ndim
    if dim == 0:
        return fmt.format(values.item())
    if dim == 1:
        return _vector_str(values, indent, summarize, fmt)

    n = values.shape[0]
    if summarize and n > 2 * _EDGEITEMS:
        rows = list(range(_EDGEITEMS)) + [None] + list(range(n - _EDGEITEMS, n))
    else:
        rows = list(range(n))
    slices = ["..." if i is None else _nested_str(values[i], indent + 1, summarize, fmt) for i in rows]
    # Blank lines between blocks grow with rank, as in PyTorch.
    return "[" + ("," + "\n" * (dim - 1) + " " * (indent + 1)).join(slices) + "]"


def _add_suffixes(tensor_str: str, suffixes: Sequence[tuple[str, int]], indent: int) -> str:
    """Append ``(text, width)`` items; ``width`` is what the wrap decision counts."""
    parts = [tensor_str]
    # PyTorch's own arithmetic, which overcounts the last line by 2; copied so the
    # wrap decisions match PyTorch's exactly.
    last_line_len = len(tensor_str) - tensor_str.rfind("\n") + 1
    for suffix, width in suffixes:
        if last_line_len + width + 2 > _LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + width
        else:
            parts.append(", " + suffix)
            last_line_len += width + 2
    parts.append(")")
    return "".join(parts)


def format_tensor(
    values: np.ndarray,
    *,
    dtype_name: str,
    show_dtype: bool,
    suffixes: Sequence[str] = (),
    prefix: str = "tensor(",
    module: str = "symgrad",
) -> str:
    """Return the PyTorch-style ``repr`` of ``values``.

    ``show_dtype`` appends ``dtype=<module>.<dtype_name>`` after the contents; the
    caller decides when, as PyTorch does: non-empty tensors hide the default float
    dtype, int64 and bool, while empty tensors hide only the default float dtype.
    ``suffixes`` (e.g. ``"requires_grad=True"``) follow the dtype, wrapping onto new
    lines aligned with the contents when a line would exceed 80 columns.  Line breaks
    are placed where PyTorch places them for ``dtype=torch.<name>``, so the output is
    PyTorch's text with only the module name swapped.

    >>> import numpy as np
    >>> format_tensor(np.array([8.0], np.float32), dtype_name="float32", show_dtype=False,
    ...               suffixes=["grad_fn=<MulBackward0>"])
    'tensor([8.], grad_fn=<MulBackward0>)'
    >>> format_tensor(np.array([1, 2]), dtype_name="int32", show_dtype=True)
    'tensor([1, 2], dtype=symgrad.int32)'
    """
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":
        raise TypeError(f"format_tensor: unsupported numpy dtype {values.dtype}")

    indent = len(prefix)
    items: list[tuple[str, int]] = []
    if values.size == 0:
        # Like NumPy, an empty tensor states its shape unless it is simply (0,).
        if values.ndim != 1:
            size = f"size={tuple(int(s) for s in values.shape)}"
            items.append((size, len(size)))
        body = "[]"
    else:
        summarize = values.size > _THRESHOLD
        fmt = _Formatter(_summarized(values) if summarize else values)
        body = _nested_str(values, indent, summarize, fmt)
    if show_dtype:
        # Wrap as if PyTorch had printed "dtype=torch.<name>", so line breaks fall exactly
        # where PyTorch puts them even though the module name differs in length.
        items.append((f"dtype={module}.{dtype_name}", len(f"dtype=torch.{dtype_name}")))
    items.extend((s, len(s)) for s in suffixes)
    return _add_suffixes(prefix + body, items, indent)
