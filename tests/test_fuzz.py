"""Differential fuzzing: random well-typed programs over the whole op table, in every mode.

Each hypothesis example is a small Python function (``Program.source()`` prints it, so a
failure is its own reproducer) built from random steps over values of random shapes:
elementwise ops (every unary op of the table, binary ops with broadcasting, Python and 0-d
tensor constants on either side), comparisons and logical ops feeding ``where``,
``heaviside``/``sign``, reductions over all or some dims (sum, mean, amax/amin, max/min, var/std,
logsumexp, softmax, log_softmax), matmul in every form (mm, mv, dot, outer, bmm, ``@``), shape
ops (reshape, view, transpose, permute, expand, squeeze, unsqueeze, flatten, clone, dtype round
trips), basic and advanced indexing, select, cat/stack/unbind, and in-place writes into
intermediate values (``y[i] = v``, ``add_``, ``mul_``, ``clamp_``, ``zero_``).
Values are reused (a value feeds several later steps) and every value's range is tracked so
that no step leaves its domain (logs of positives, divisions away from zero, bounded exps).
A program may also take a Python number argument, which ``symgrad.compile`` bakes into the
trace: the second call passes another number, so the guard must retrace.

Every program runs, in float64 and in float32:

* eagerly (``backward()``), the reference;
* through the IR interpreter: ``interpret`` of the traced forward graph and of the joint graph;
* compiled (``symgrad.compile``: the joint kernel for a scalar loss, or the split forward/backward
  kernels for ``scalar_loss="split"`` and non-scalar outputs, chosen at random; mostly Numba
  kernels, sometimes with ``parallel=True`` forcing the chunked ``prange`` loops, sometimes the
  numpy backend), on the traced values and on new values (no retrace);
* through ``symgrad.value_and_grad`` (scalar losses);
* and, in float64 for programs without kinks (no relu/abs/max/where/...), against central finite
  differences: ``symgrad.autograd.gradcheck`` of the *compiled* function.

Profiles: the default runs in CI (about a minute); ``SYMGRAD_FUZZ=long`` runs many more
examples (marked ``slow``), with ``SYMGRAD_FUZZ_EXAMPLES=N`` to choose how many.  A bug found
here becomes a named test in tests/test_reliability.py.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import time
from dataclasses import dataclass

import fuzz_profile
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import symgrad
from symgrad.ir import interpret

# --- value ranges -------------------------------------------------------------------------------

SHAPES = [(), (3,), (4,), (1, 4), (3, 1), (3, 4), (4, 3), (2, 3, 4), (2, 1, 3)]
MAX_NDIM, MAX_NUMEL, MAX_ABS = 3, 48, 40.0
CONSTS = [0.5, -1.5, 2.0, 0.3, 3, -2, 1, 0.25]


@dataclass(frozen=True)
class Meta:
    """What the generator knows of a value: shape, bounds of every element, contiguity."""

    shape: tuple
    lo: float
    hi: float
    contiguous: bool = True


def _mul_iv(a, b):
    p = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(p), max(p)


def _sq_iv(lo, hi):
    m = max(lo * lo, hi * hi)
    return (0.0 if lo <= 0 <= hi else min(lo * lo, hi * hi)), m


def _bshape(*shapes):
    try:
        s = np.broadcast_shapes(*shapes)
    except ValueError:
        return None
    return s if len(s) <= MAX_NDIM and math.prod(s) <= MAX_NUMEL else None


def _fits(shape) -> bool:
    return shape is not None and len(shape) <= MAX_NDIM and 0 < math.prod(shape) <= MAX_NUMEL


# --- steps: each returns (code, Meta, kinky) or None (not applicable) ----------------------------
# ``{x}`` is the input value's name; ``D`` is the program's float dtype in the generated code.

UNARY = {
    # name: (code, domain(lo, hi) -> bool, image(lo, hi) -> (lo, hi), kinky)
    "neg": ("-{x}", None, lambda a, b: (-b, -a), False),
    "exp": ("symgrad.exp({x})", lambda a, b: b <= 3.5, lambda a, b: (math.exp(a), math.exp(b)), False),
    "expm1": ("symgrad.expm1({x})", lambda a, b: b <= 3.5, lambda a, b: (math.expm1(a), math.expm1(b)), False),
    "exp2": ("symgrad.exp2({x})", lambda a, b: b <= 5, lambda a, b: (2 ** a, 2 ** b), False),
    "log": ("symgrad.log({x})", lambda a, b: a >= 0.2, lambda a, b: (math.log(a), math.log(b)), False),
    "log2": ("symgrad.log2({x})", lambda a, b: a >= 0.2, lambda a, b: (math.log2(a), math.log2(b)), False),
    "log1p": ("symgrad.log1p({x})", lambda a, b: a >= -0.7, lambda a, b: (math.log1p(a), math.log1p(b)), False),
    "sqrt": ("symgrad.sqrt({x})", lambda a, b: a >= 0.2, lambda a, b: (math.sqrt(a), math.sqrt(b)), False),
    "rsqrt": ("symgrad.rsqrt({x})", lambda a, b: a >= 0.2, lambda a, b: (b ** -0.5, a ** -0.5), False),
    "reciprocal": ("symgrad.reciprocal({x})", lambda a, b: a >= 0.3 or b <= -0.3,
                   lambda a, b: (1 / b, 1 / a), False),
    "sin": ("symgrad.sin({x})", None, lambda a, b: (-1.0, 1.0), False),
    "cos": ("{x}.cos()", None, lambda a, b: (-1.0, 1.0), False),
    "tan": ("symgrad.tan({x})", lambda a, b: -1.2 <= a and b <= 1.2, lambda a, b: (math.tan(a), math.tan(b)), False),
    "atan": ("symgrad.atan({x})", None, lambda a, b: (math.atan(a), math.atan(b)), False),
    "tanh": ("symgrad.tanh({x})", None, lambda a, b: (math.tanh(a), math.tanh(b)), False),
    "sinh": ("symgrad.sinh({x})", lambda a, b: -3 <= a and b <= 3, lambda a, b: (math.sinh(a), math.sinh(b)), False),
    "cosh": ("symgrad.cosh({x})", lambda a, b: -3 <= a and b <= 3,
             lambda a, b: (1.0, max(math.cosh(a), math.cosh(b))), False),
    "sigmoid": ("symgrad.sigmoid({x})", None, lambda a, b: (0.0, 1.0), False),
    "erf": ("symgrad.erf({x})", None, lambda a, b: (math.erf(a), math.erf(b)), False),
    "square": ("{x}.square()", None, _sq_iv, False),
    "abs": ("abs({x})", None, lambda a, b: (0.0, max(abs(a), abs(b))), True),
    "relu": ("symgrad.relu({x})", None, lambda a, b: (max(a, 0.0), max(b, 0.0)), True),
    "sign_mul": ("{x} * symgrad.sign({x} - 0.9)", None, lambda a, b: (-max(abs(a), abs(b)), max(abs(a), abs(b))),
                 True),
    # the step sits at 0.95, not at 1.0: tanh, erf and sigmoid saturate to 1.0 within an ulp, where
    # two correct float32 implementations may round to either side (found by the long run)
    "heaviside_mul": ("{x} * symgrad.heaviside({x} - 0.95, symgrad.tensor(0.5, dtype=D))", None,
                      lambda a, b: (min(a, 0.0), max(b, 0.0)), True),
}


def _pow_step(draw, x, m):
    p = draw(st.sampled_from([2, 3, 0.5, 1.5, -1, -0.5, 2.5]))
    if (not isinstance(p, int) or p < 0) and m.lo < 0.2:
        p = 2
    if p == 2:
        return f"{x} ** 2", _sq_iv(m.lo, m.hi)
    if p == 3:
        return f"{x} ** 3", (m.lo ** 3, m.hi ** 3)
    ends = sorted((m.lo ** p, m.hi ** p))
    return f"{x} ** {p}", tuple(ends)


def _clamp_step(draw, x, m, pool, names):
    a = draw(st.sampled_from([-1.0, -0.4, 0.2, 0.8]))
    b = a + draw(st.sampled_from([0.35, 1.0, 2.5]))
    how = draw(st.sampled_from(["both", "min", "max", "clamp_min", "clamp_max", "tensor"]))
    if how == "both":
        return f"{x}.clamp({a}, {b})", (min(max(m.lo, a), b), min(max(m.hi, a), b)), m.shape
    if how in ("min", "clamp_min"):
        code = f"symgrad.clamp({x}, min={a})" if how == "min" else f"symgrad.clamp_min({x}, {a})"
        return code, (max(m.lo, a), max(m.hi, a)), m.shape
    if how in ("max", "clamp_max"):
        code = f"{x}.clamp(max={b})" if how == "max" else f"symgrad.clamp_max({x}, {b})"
        return code, (min(m.lo, b), min(m.hi, b)), m.shape
    # clamp.Tensor: bounds are other values (broadcast)
    j = draw(st.sampled_from(range(len(pool))))
    shape = _bshape(m.shape, pool[j].shape)
    if shape is None:
        return None
    lo_b = (pool[j].lo - 0.5, pool[j].hi - 0.5)
    hi_b = (pool[j].lo + 0.5, pool[j].hi + 0.5)
    lo, hi = min(max(m.lo, lo_b[0]), hi_b[0]), max(min(m.hi, hi_b[1]), lo_b[1])
    return f"symgrad.clamp({x}, {names[j]} - 0.5, {names[j]} + 0.5)", (min(lo, hi), max(lo, hi)), shape


BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "rsub"]


def _binary_step(draw, i, pool, names):
    name = draw(st.sampled_from(BINARY))
    fits = [j for j in range(len(pool)) if _bshape(pool[i].shape, pool[j].shape) is not None]
    j = draw(st.sampled_from(fits))  # i itself always fits: a reused value
    if draw(st.booleans()):
        i, j = j, i
    a, b = pool[i], pool[j]
    x, y = names[i], names[j]
    shape = _bshape(a.shape, b.shape)
    kinky = False
    if name == "add":
        code, iv = f"{x} + {y}", (a.lo + b.lo, a.hi + b.hi)
    elif name == "sub":
        code, iv = f"{x} - {y}", (a.lo - b.hi, a.hi - b.lo)
    elif name == "rsub":
        code, iv = f"symgrad.rsub({x}, {y})", (b.lo - a.hi, b.hi - a.lo)
    elif name == "mul":
        code, iv = f"{x} * {y}", _mul_iv((a.lo, a.hi), (b.lo, b.hi))
    elif name == "div":
        if not (b.lo > 0.3 or b.hi < -0.3):
            return None
        code, iv = f"{x} / {y}", _mul_iv((a.lo, a.hi), (1 / b.hi, 1 / b.lo))
    elif name in ("maximum", "minimum"):
        f = max if name == "maximum" else min
        code, iv, kinky = f"symgrad.{name}({x}, {y})", (f(a.lo, b.lo), f(a.hi, b.hi)), True
    else:  # pow.Tensor_Tensor with a positive base
        if a.lo < 0.2 or max(abs(b.lo), abs(b.hi)) > 3:
            return None
        corners = [p ** q for p in (a.lo, a.hi) for q in (b.lo, b.hi)]
        code, iv = f"{x} ** {y}", (min(corners), max(corners))
    return code, Meta(shape, *iv), kinky


SCALAR = ["radd", "add", "rmul", "mul", "rsub", "sub", "div", "rdiv", "rpow", "tensor0d", "python_arg"]


def _scalar_step(draw, x, m, has_arg):
    name = draw(st.sampled_from(SCALAR))
    c = draw(st.sampled_from(CONSTS))
    lo, hi = m.lo, m.hi
    if name == "python_arg":  # the program's Python number argument s, in [0.5, 2]
        if not has_arg:
            return None
        return f"{x} * s + s", (min(lo * 0.5, lo * 2) + 0.5, max(hi * 0.5, hi * 2) + 2)
    if name == "tensor0d":  # a 0-d tensor constant: it must not change the dtype of x
        how = draw(st.sampled_from(["same", "float64"]))
        dt = "D" if how == "same" or not m.shape else "symgrad.float64"
        return f"{x} * symgrad.tensor({c!r}, dtype={dt})", _mul_iv((lo, hi), (c, c))
    if name in ("radd", "add"):
        return (f"{c!r} + {x}" if name == "radd" else f"{x} + {c!r}"), (lo + c, hi + c)
    if name in ("rmul", "mul"):
        return (f"{c!r} * {x}" if name == "rmul" else f"{x} * {c!r}"), _mul_iv((lo, hi), (c, c))
    if name == "rsub":
        return f"{c!r} - {x}", (c - hi, c - lo)
    if name == "sub":
        return f"{x} - {c!r}", (lo - c, hi - c)
    if name == "div":
        return f"{x} / {c!r}", _mul_iv((lo, hi), (1 / c, 1 / c))
    if name == "rdiv":
        if not (lo > 0.3 or hi < -0.3):
            return None
        return f"{c!r} / {x}", _mul_iv((c, c), (1 / hi, 1 / lo))
    c = abs(c) if abs(c) != 1 else 2.0  # rpow: c ** x, a positive base
    if max(abs(lo), abs(hi)) > 3:
        return None
    return f"{c!r} ** {x}", tuple(sorted((c ** lo, c ** hi)))


REDUCE = ["sum", "sum_all", "sum_dims", "mean", "mean_all", "amax", "amin", "max_dim", "min_dim", "max_all",
          "min_all", "var", "std", "logsumexp", "softmax", "log_softmax"]


def _reduce_step(draw, x, m):
    name = draw(st.sampled_from(REDUCE))
    s, n = m.shape, math.prod(m.shape)
    if name == "sum_all":
        return f"{x}.sum()", (), (n * m.lo, n * m.hi), False
    if name == "mean_all":
        return f"symgrad.mean({x})", (), (m.lo, m.hi), False
    if name in ("max_all", "min_all"):
        return f"{x}.{name[:3]}()", (), (m.lo, m.hi), True
    if not s:
        return None
    keep = draw(st.booleans())
    if name == "sum_dims":
        if len(s) < 2:
            return None
        dims = tuple(sorted(draw(st.sets(st.integers(0, len(s) - 1), min_size=1, max_size=len(s)))))
        k = math.prod(s[d] for d in dims)
        shape = tuple(1 if d in dims else v for d, v in enumerate(s)) if keep else \
            tuple(v for d, v in enumerate(s) if d not in dims)
        how = draw(st.sampled_from(["sum", "mean"]))
        iv = (k * m.lo, k * m.hi) if how == "sum" else (m.lo, m.hi)
        return f"symgrad.{how}({x}, {dims}, keepdim={keep})", shape, iv, False
    dim = draw(st.integers(-len(s), len(s) - 1))
    k = s[dim]
    reduced = tuple(1 if d == dim % len(s) else v for d, v in enumerate(s)) if keep else \
        tuple(v for d, v in enumerate(s) if d != dim % len(s))
    if name == "sum":
        return f"{x}.sum({dim}, keepdim={keep})", reduced, (k * m.lo, k * m.hi), False
    if name == "mean":
        return f"{x}.mean({dim}, keepdim={keep})", reduced, (m.lo, m.hi), False
    if name in ("amax", "amin"):
        return f"symgrad.{name}({x}, {dim}, keepdim={keep})", reduced, (m.lo, m.hi), True
    if name in ("max_dim", "min_dim"):
        return f"{x}.{name[:3]}({dim}, keepdim={keep})[0]", reduced, (m.lo, m.hi), True
    if name in ("var", "std"):
        correction = draw(st.sampled_from([0, 1]))
        if k - correction < 1:
            return None
        top = (m.hi - m.lo) ** 2 * k / max(k - correction, 1)
        iv = (0.0, top) if name == "var" else (0.0, math.sqrt(top))
        # std has an infinite slope at zero spread (repeated values): a kink for finite differences
        return f"{x}.{name}({dim}, correction={correction}, keepdim={keep})", reduced, iv, name == "std"
    if name == "logsumexp":
        return f"symgrad.logsumexp({x}, {dim}, keepdim={keep})", reduced, (m.lo, m.hi + math.log(k)), False
    if name == "softmax":
        return f"symgrad.softmax({x}, {dim})", s, (0.0, 1.0), False
    return f"symgrad.log_softmax({x}, {dim})", s, (m.lo - m.hi - math.log(k), 0.0), False


def _matmul_step(draw, i, pool, names):
    m = pool[i]
    options = []
    for j in range(len(pool)):
        for a, b in ((i, j), (j, i)):
            sa, sb = pool[a].shape, pool[b].shape
            if not sa or not sb:
                continue
            try:
                out = np.matmul(np.zeros(sa), np.zeros(sb)).shape
            except ValueError:
                continue
            if not _fits(out) and out != ():
                continue
            forms = ["@"]
            if len(sa) == 2 and len(sb) == 2:
                forms.append("mm")
            if len(sa) == 2 and len(sb) == 1:
                forms.append("mv")
            if len(sa) == 1 and len(sb) == 1:
                forms += ["dot", "outer"]
            if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0]:
                forms.append("bmm")
            for form in forms:
                options.append((a, b, form))
    if len(m.shape) == 1 and _fits((m.shape[0], m.shape[0])):
        options.append((i, i, "outer"))
    if len(m.shape) == 2:
        options.append((i, i, "xxt"))
    if len(m.shape) == 3:
        options.append((i, i, "bxxt"))
    if not options:
        return None
    a, b, form = draw(st.sampled_from(options))
    pa, pb = pool[a], pool[b]
    x, y = names[a], names[b]
    prod = _mul_iv((pa.lo, pa.hi), (pb.lo, pb.hi))
    if form == "outer":
        return f"symgrad.outer({x}, {y})", (pa.shape[0], pb.shape[0]), prod
    if form == "bxxt":  # batched x @ x^T: bmm
        b, n, k = pa.shape
        p = _mul_iv((pa.lo, pa.hi), (pa.lo, pa.hi))
        code = draw(st.sampled_from([f"symgrad.bmm({x}, {x}.transpose(1, 2))", f"{x} @ {x}.transpose(-1, -2)"]))
        return code, (b, n, n), (k * p[0], k * p[1])
    if form == "xxt":
        left = draw(st.booleans())
        k = pa.shape[1] if left else pa.shape[0]
        shape = (pa.shape[0],) * 2 if left else (pa.shape[1],) * 2
        p = _mul_iv((pa.lo, pa.hi), (pa.lo, pa.hi))
        return (f"{x} @ {x}.t()" if left else f"{x}.t() @ {x}"), shape, (k * p[0], k * p[1])
    k = pa.shape[-1]
    out = np.matmul(np.zeros(pa.shape), np.zeros(pb.shape)).shape
    code = f"{x} @ {y}" if form == "@" else f"symgrad.{form}({x}, {y})"
    return code, out, (k * prod[0], k * prod[1])


SHAPE_OPS = ["reshape", "view", "transpose", "t", "permute", "unsqueeze", "squeeze", "expand", "flatten", "clone",
             "to_copy", "contiguous"]


def _factorisations(n):
    out = [(n,)] + [(a, n // a) for a in range(1, n + 1) if n % a == 0]
    out += [(a, b, n // (a * b)) for a in range(1, n + 1) for b in range(1, n + 1) if n % (a * b) == 0]
    return ([()] if n == 1 else []) + out


def _shape_step(draw, x, m):
    name = draw(st.sampled_from(SHAPE_OPS))
    s = m.shape
    if name in ("reshape", "view"):
        if name == "view" and not m.contiguous:
            return None
        target = draw(st.sampled_from(_factorisations(math.prod(s))))
        if target and draw(st.booleans()):
            pos = draw(st.integers(0, len(target) - 1))
            target = tuple(-1 if k == pos else d for k, d in enumerate(target))
        shape = np.zeros(s).reshape(target).shape
        return f"{x}.{name}({target})", shape, name == "reshape" and m.contiguous
    if name == "transpose":
        if len(s) < 2:
            return None
        d0, d1 = draw(st.integers(-len(s), len(s) - 1)), draw(st.integers(-len(s), len(s) - 1))
        return f"symgrad.transpose({x}, {d0}, {d1})", np.swapaxes(np.zeros(s), d0, d1).shape, d0 % len(s) == d1 % len(s)
    if name == "t":
        if len(s) > 2:
            return None
        return f"{x}.t()", s[::-1], len(s) < 2
    if name == "permute":
        if len(s) < 2:
            return None
        perm = tuple(draw(st.permutations(range(len(s)))))
        return f"{x}.permute{perm}" if len(perm) > 1 else f"{x}.permute({perm[0]})", \
            tuple(s[p] for p in perm), perm == tuple(range(len(s)))
    if name == "unsqueeze":
        if len(s) >= MAX_NDIM:
            return None
        d = draw(st.integers(-len(s) - 1, len(s)))
        return f"{x}.unsqueeze({d})", np.expand_dims(np.zeros(s), d).shape, m.contiguous
    if name == "squeeze":
        ones = [d for d, v in enumerate(s) if v == 1]
        if not ones:
            return None
        how = draw(st.sampled_from(["all", "dim", "dims"]))
        if how == "all":
            return f"{x}.squeeze()", tuple(v for v in s if v != 1), m.contiguous
        if how == "dim":
            d = draw(st.sampled_from(ones))
            return f"{x}.squeeze({d})", tuple(v for k, v in enumerate(s) if k != d), m.contiguous
        return f"symgrad.squeeze({x}, {tuple(ones)})", tuple(v for v in s if v != 1), m.contiguous
    if name == "expand":
        if not s or 1 not in s:
            return None
        target = tuple(draw(st.sampled_from([1, 2, 3, 4])) if v == 1 else v for v in s)
        if not _fits(target):
            return None
        if draw(st.booleans()):
            target = tuple(-1 if v != 1 and k == 0 else v for k, v in enumerate(target))
        return f"{x}.expand{target}" if len(target) > 1 else f"{x}.expand({target[0]})", \
            tuple(v if v != -1 else s[k] for k, v in enumerate(target)), False
    if name == "flatten":
        return f"{x}.flatten()", (math.prod(s),) if s else (1,), m.contiguous
    if name == "clone":
        return f"{x}.clone()", s, m.contiguous
    if name == "contiguous":
        return f"{x}.contiguous()", s, True
    # a dtype round trip: _to_copy twice (values round to float32 and back in float64 programs)
    return f"{x}.to(OTHER).to(D)", s, m.contiguous


INDEX = ["int", "slice", "slice_dim1", "ellipsis", "newaxis", "list", "tensor_index", "array_dim1", "array_pair",
         "select"]


def _index_step(draw, x, m):
    s = m.shape
    if not s:
        return None
    name = draw(st.sampled_from(INDEX))
    n0 = s[0]
    if name == "int":
        key = str(draw(st.integers(-n0, n0 - 1)))
    elif name == "slice":
        start = draw(st.integers(0, n0 - 1))
        stop = draw(st.sampled_from([None] + list(range(start + 1, n0 + 1))))
        step = draw(st.sampled_from([None, 1, 2]))
        key = f"{start}:{'' if stop is None else stop}" + ("" if step is None else f":{step}")
    elif name == "slice_dim1":
        if len(s) < 2:
            return None
        key = f":, {draw(st.integers(-s[1], s[1] - 1))}" if draw(st.booleans()) else \
            f":, {draw(st.integers(0, s[1] - 1))}:"
    elif name == "ellipsis":
        key = f"..., {draw(st.integers(0, s[-1] - 1))}::{draw(st.sampled_from([1, 2]))}"
    elif name == "newaxis":
        if len(s) >= MAX_NDIM:
            return None
        key = "None, :" if draw(st.booleans()) else ":, None"
    elif name in ("list", "tensor_index"):
        idx = draw(st.lists(st.integers(-n0, n0 - 1), min_size=1, max_size=4))
        key = str(idx) if name == "list" else f"symgrad.tensor({idx})"
    elif name == "array_dim1":
        if len(s) < 2:
            return None
        key = f":, {draw(st.lists(st.integers(0, s[1] - 1), min_size=1, max_size=4))}"
    elif name == "array_pair":
        if len(s) < 2:
            return None
        k = draw(st.integers(1, 4))
        a = draw(st.lists(st.integers(0, n0 - 1), min_size=k, max_size=k))
        b = draw(st.lists(st.integers(0, s[1] - 1), min_size=k, max_size=k))
        key = f"{a}, {b}"
    else:
        d = draw(st.integers(-len(s), len(s) - 1))
        i = draw(st.integers(-s[d], s[d] - 1))
        code = f"symgrad.select({x}, {d}, {i})"
        return code, tuple(v for k, v in enumerate(s) if k != d % len(s))
    code = f"{x}[{key}]"
    shape = eval(f"_z[{key}]", {"_z": np.zeros(s), "symgrad": _IndexNp}).shape
    if not _fits(shape) and shape != ():
        return None
    return code, shape


class _IndexNp:
    """Stands for symgrad while computing an index's result shape with numpy."""

    @staticmethod
    def tensor(idx):
        return np.array(idx)


def _join_step(draw, i, pool, names):
    m = pool[i]
    s = m.shape
    how = draw(st.sampled_from(["cat", "stack", "unbind"]))
    if how == "unbind":
        if not s:
            return None
        d = draw(st.integers(-len(s), len(s) - 1))
        k = draw(st.integers(0, s[d] - 1))
        return f"symgrad.unbind({names[i]}, {d})[{k}]", tuple(v for q, v in enumerate(s) if q != d % len(s)), m.lo, m.hi
    if how == "stack":
        same = [j for j, o in enumerate(pool) if o.shape == s]
        others = draw(st.lists(st.sampled_from(same), min_size=1, max_size=2))
        d = draw(st.integers(-len(s) - 1, len(s)))
        parts = [i] + others
        shape = np.stack([np.zeros(s)] * len(parts), axis=d).shape
        if not _fits(shape):
            return None
        return f"symgrad.stack([{', '.join(names[j] for j in parts)}], {d})", shape, \
            min(pool[j].lo for j in parts), max(pool[j].hi for j in parts)
    if not s:
        return None
    d = draw(st.integers(-len(s), len(s) - 1))
    dd = d % len(s)
    ok = [j for j, o in enumerate(pool) if len(o.shape) == len(s)
          and all(a == b for q, (a, b) in enumerate(zip(o.shape, s)) if q != dd)]
    others = draw(st.lists(st.sampled_from(ok), min_size=1, max_size=2))
    parts = [i] + others
    shape = tuple(sum(pool[j].shape[dd] for j in parts) if q == dd else v for q, v in enumerate(s))
    if not _fits(shape):
        return None
    return f"symgrad.cat([{', '.join(names[j] for j in parts)}], {d})", shape, \
        min(pool[j].lo for j in parts), max(pool[j].hi for j in parts)


INPLACE = ["setitem_const", "setitem_value", "setitem_adv", "add_", "mul_", "sub_", "div_", "clamp_", "zero_"]


def _inplace_step(draw, i, pool, names):
    """``y = x.clone()`` (or ``x * 1``) then an in-place write into ``y``: two statements."""
    m = pool[i]
    s = m.shape
    x = names[i]
    copy = draw(st.sampled_from([f"{x}.clone()", f"{x} * 1.0", f"{x} + 0.0"]))
    name = draw(st.sampled_from(INPLACE))
    c = draw(st.sampled_from([0.5, -1.5, 2.0]))
    if name == "setitem_const":
        if not s:
            return None
        k = draw(st.integers(-s[0], s[0] - 1))
        return [f"y = {copy}", f"y[{k}] = {c!r}"], s, min(m.lo, c), max(m.hi, c)
    if name in ("setitem_value", "setitem_adv"):
        if not s:
            return None
        if name == "setitem_value":
            start = draw(st.integers(0, s[0] - 1))
            key = f"{start}:"
            target = np.zeros(s)[start:].shape
        else:
            idx = sorted(set(draw(st.lists(st.integers(0, s[0] - 1), min_size=1, max_size=3))))
            key = str(idx)
            target = np.zeros(s)[idx].shape
        fits = [j for j, o in enumerate(pool) if _bshape(target, o.shape) == tuple(target)]
        if not fits:
            return None
        j = draw(st.sampled_from(fits))
        return [f"y = {copy}", f"y[{key}] = {names[j]}"], s, min(m.lo, pool[j].lo), max(m.hi, pool[j].hi)
    if name in ("add_", "sub_"):
        fits = [j for j, o in enumerate(pool) if _bshape(s, o.shape) == tuple(s)]
        j = draw(st.sampled_from(fits))
        o = pool[j]
        iv = (m.lo + o.lo, m.hi + o.hi) if name == "add_" else (m.lo - o.hi, m.hi - o.lo)
        return [f"y = {copy}", f"y.{name}({names[j]})"], s, *iv
    if name == "mul_":
        return [f"y = {copy}", f"y.mul_({c!r})"], s, *_mul_iv((m.lo, m.hi), (c, c))
    if name == "div_":
        return [f"y = {copy}", f"y.div_({c!r})"], s, *_mul_iv((m.lo, m.hi), (1 / c, 1 / c))
    if name == "clamp_":
        return [f"y = {copy}", "y.clamp_(-0.5, 1.2)"], s, min(max(m.lo, -0.5), 1.2), min(max(m.hi, -0.5), 1.2)
    assert name == "zero_"
    return [f"y = {copy}", "y.zero_()", f"y = y + {x}"], s, m.lo, m.hi


def _where_step(draw, i, pool, names):
    m = pool[i]
    fits = [j for j in range(len(pool)) if _bshape(m.shape, pool[j].shape) is not None]
    j = draw(st.sampled_from(fits))
    k = draw(st.sampled_from([q for q in fits if _bshape(m.shape, pool[j].shape, pool[q].shape) is not None]))
    x, y, z = names[i], names[j], names[k]
    cmp = draw(st.sampled_from([">", "<", ">=", "<=", "==", "!="]))
    c = round(draw(st.floats(min_value=m.lo, max_value=m.hi, allow_nan=False)), 2) if m.hi > m.lo else m.lo
    cond = draw(st.sampled_from([
        f"{x} {cmp} {y}", f"{x} {cmp} {c!r}", f"symgrad.logical_and({x} > {c!r}, {y} < {z})",
        f"symgrad.logical_or({x} < {c!r}, {y} == {y})", f"symgrad.logical_not({x} > {y})",
        f"symgrad.gt({x}, {y})", f"symgrad.le({x}, {z})", f"symgrad.eq({x}, {x})", f"symgrad.ne({x}, {y})"]))
    shape = _bshape(m.shape, pool[j].shape, pool[k].shape)
    if shape is None:
        return None
    return f"symgrad.where({cond}, {y}, {z})", shape, min(pool[j].lo, pool[k].lo), max(pool[j].hi, pool[k].hi)


KINDS = (["unary"] * 5 + ["binary"] * 4 + ["scalar"] * 3 + ["reduce"] * 3 + ["matmul"] * 2 + ["shape"] * 3
         + ["index"] * 2 + ["join"] + ["inplace"] + ["where"] * 2 + ["pow"] + ["clamp"])
NEEDS_DIMS = {"index", "join"}


# --- programs ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Program:
    shapes: tuple
    lines: tuple          # statements; line k assigns v{n_inputs + k}
    output: str           # "loss": sum(last * W); "vector": last * W (backward with gradient=G)
    strategy: str         # "joint" or "split" (symgrad.compile's scalar_loss)
    backend: str          # "numba" (parallel=False), "numba-parallel" (prange chunks forced) or "numpy"
    python_arg: bool      # a trailing Python number argument s
    kinky: bool           # has an op without a derivative somewhere: no finite differences
    seed: int

    @property
    def last(self) -> str:
        """The value the program returns (weighted): the last ``v<k> = ...`` statement's target."""
        return [ln.split(" = ", 1)[0] for ln in self.lines if ln.startswith("v")][-1]

    @property
    def unused(self) -> list[str]:
        """Values no later statement reads (besides the last): they join the output, so that every
        step of the program is live (not removed as dead code before it is compiled)."""
        assigned = [ln.split(" = ", 1)[0] for ln in self.lines if ln.startswith("v")]
        read = set()
        for ln in self.lines:
            read.update(re.findall(r"\bv\d+\b", ln.split(" = ", 1)[1] if " = " in ln else ln))
        return [v for v in assigned[:-1] if v not in read]

    def source(self, dtype: str = "float64") -> str:
        params = [f"v{i}" for i in range(len(self.shapes))] + (["s"] if self.python_arg else [])
        out = [f"D, OTHER = symgrad.{dtype}, symgrad.{'float32' if dtype == 'float64' else 'float64'}",
               f"def program({', '.join(params)}):"]
        out += [f"    {line}" for line in self.lines]
        ret = f"({self.last} * W).sum()" if self.output == "loss" else f"{self.last} * W"
        if self.unused:
            ret += " + 0.5 * (" + " + ".join(f"{v}.sum()" for v in self.unused) + ")"
        out.append(f"    return {ret}")
        return "\n".join(out)

    def __repr__(self) -> str:
        flags = f"output={self.output}, strategy={self.strategy}, backend={self.backend}, seed={self.seed}"
        return f"Program(inputs={list(self.shapes)}, {flags}):\n{self.source()}"

    def function(self, dtype, weights):
        ns = {"symgrad": symgrad, "W": symgrad.tensor(weights, dtype=dtype)}
        exec(compile(self.source(dtype.name), "<fuzz program>", "exec"), ns)
        return ns["program"]


def _draw_step(draw, kind, i, pool, names, python_arg):
    """(statements, Meta, kinky) for one step reading pool[i], or None."""
    m = pool[i]
    x = names[i]
    if kind == "unary":
        name = draw(st.sampled_from(sorted(UNARY)))
        code, domain, image, kinky = UNARY[name]
        if domain is not None and not domain(m.lo, m.hi):
            return None
        lo, hi = image(m.lo, m.hi)
        return [code.format(x=x)], Meta(m.shape, lo, hi, m.contiguous), kinky
    if kind == "pow":
        code, iv = _pow_step(draw, x, m)
        return [code], Meta(m.shape, *iv, m.contiguous), False
    if kind == "clamp":
        res = _clamp_step(draw, x, m, pool, names)
        if res is None:
            return None
        code, iv, shape = res
        return [code], Meta(shape, *iv, False), True
    if kind == "binary":
        res = _binary_step(draw, i, pool, names)
        if res is None:
            return None
        code, meta, kinky = res
        contiguous = pool[i].contiguous and all(p.contiguous for p in pool if p.shape)  # conservative
        return [code], Meta(meta.shape, meta.lo, meta.hi, contiguous and meta.shape == m.shape), kinky
    if kind == "scalar":
        res = _scalar_step(draw, x, m, python_arg)
        if res is None:
            return None
        code, iv = res
        return [code], Meta(m.shape, *iv, m.contiguous), False
    if kind == "reduce":
        res = _reduce_step(draw, x, m)
        if res is None:
            return None
        code, shape, iv, kinky = res
        return [code], Meta(tuple(shape), *iv, m.contiguous), kinky
    if kind == "matmul":
        res = _matmul_step(draw, i, pool, names)
        if res is None:
            return None
        code, shape, iv = res
        return [code], Meta(tuple(shape), *iv), False
    if kind == "shape":
        res = _shape_step(draw, x, m)
        if res is None:
            return None
        code, shape, contiguous = res
        # a float32 round trip makes a float64 program a staircase at finite-difference scale
        return [code], Meta(tuple(shape), m.lo, m.hi, contiguous), ".to(OTHER)" in code
    if kind == "index":
        res = _index_step(draw, x, m)
        if res is None:
            return None
        code, shape = res
        return [code], Meta(tuple(shape), m.lo, m.hi, False), False
    if kind == "join":
        res = _join_step(draw, i, pool, names)
        if res is None:
            return None
        code, shape, lo, hi = res
        return [code], Meta(tuple(shape), lo, hi, not code.startswith("symgrad.unbind")), False
    if kind == "inplace":
        res = _inplace_step(draw, i, pool, names)
        if res is None:
            return None
        stmts, shape, lo, hi = res
        return stmts, Meta(tuple(shape), lo, hi, m.contiguous), stmts[-1].startswith("y.clamp_")
    if kind == "where":
        res = _where_step(draw, i, pool, names)
        if res is None:
            return None
        code, shape, lo, hi = res
        return [code], Meta(tuple(shape), lo, hi, False), True
    raise AssertionError(kind)


@st.composite
def programs(draw, max_steps: int = 10):
    n_inputs = draw(st.integers(1, 3))
    shapes = tuple(draw(st.sampled_from(SHAPES)) for _ in range(n_inputs))
    python_arg = draw(st.booleans())
    pool = [Meta(s, 0.5, 1.5) for s in shapes]
    names = [f"v{i}" for i in range(n_inputs)]
    lines: list[str] = []
    kinky = False
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(KINDS))
        fits = [j for j, m in enumerate(pool) if m.shape or kind not in NEEDS_DIMS] or list(range(len(pool)))
        # often the newest value (long chains), else any earlier one (values used several times)
        i = draw(st.one_of(st.just(fits[-1]), st.sampled_from(fits)))
        res = _draw_step(draw, kind, i, pool, names, python_arg)
        if res is not None:
            stmts, meta, k = res
            ok = _fits(meta.shape) or meta.shape == ()
            ok = ok and max(abs(meta.lo), abs(meta.hi)) <= MAX_ABS and meta.lo <= meta.hi
        if res is None or not ok:  # always safe: squash the value
            stmts, meta, k = [f"symgrad.tanh({names[i]})"], Meta(pool[i].shape, -1.0, 1.0), False
        name = f"v{len(pool)}"
        if stmts[0].startswith("y = "):  # an in-place block: the last statement's target is y
            lines.extend(stmts)
            lines.append(f"{name} = y")
        else:
            lines.append(f"{name} = {stmts[0]}")
        pool.append(meta)
        names.append(name)
        kinky = kinky or k
    output = draw(st.sampled_from(["loss", "loss", "vector"]))
    strategy = draw(st.sampled_from(["joint", "split"]))
    backend = draw(st.sampled_from(["numba"] * 6 + ["numba-parallel", "numpy"]))
    return Program(shapes, tuple(lines), output, strategy, backend, python_arg, kinky,
                   draw(st.integers(0, 2 ** 32 - 1)))


# --- running a program in every mode ----------------------------------------------------------

HAS_SCALAR_LOSS_OPTION = "scalar_loss" in inspect.signature(symgrad.compile).parameters
DTYPES = {"float64": (symgrad.float64, 1e-9), "float32": (symgrad.float32, 2e-4)}
STATS = {name: {"examples": 0, "gradchecks": 0, "seconds": 0.0} for name in DTYPES}


def assert_close(got, want, rtol, where):
    """Relative comparison with an absolute floor of ``rtol * max(1, max|want|)``: a gradient that
    is zero in exact arithmetic (``x / x``) is rounding noise of the size of the values around it."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{where}: shape {got.shape} vs {want.shape}"
    scale = float(np.max(np.abs(want[np.isfinite(want)]))) if np.isfinite(want).any() else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(scale, 1.0), err_msg=where)


def _inputs(prog: Program, rng, np_dtype):
    arrays = [np.asarray(rng.uniform(0.5, 1.5, s), dtype=np_dtype) for s in prog.shapes]
    extra = [float(rng.choice([0.5, 0.75, 1.25, 2.0]))] if prog.python_arg else []
    return arrays, extra


def _leaves(arrays, dtype):
    return [symgrad.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]


def _grads(leaves, arrays):
    return [np.zeros(a.shape) if t.grad is None else t.grad.numpy() for t, a in zip(leaves, arrays)]


def _eager(fn, arrays, extra, dtype, cotangent):
    leaves = _leaves(arrays, dtype)
    out = fn(*leaves, *extra)
    if cotangent is None:
        out.backward()
    else:
        out.backward(symgrad.tensor(cotangent, dtype=dtype))
    return out.detach().numpy(), out.dtype, _grads(leaves, arrays)


def run_program(prog: Program, dtype_name: str) -> None:
    """Eager, interpreter, compiled (+ value_and_grad) on two sets of values, then gradcheck."""
    t0 = time.perf_counter()
    dtype, rtol = DTYPES[dtype_name]
    if dtype_name == "float64" and any(".to(OTHER)" in ln for ln in prog.lines):
        # a float32 round trip: its backward rounds the gradient to float32 too, and the joint
        # strategy rounds the gradient for a cotangent of 1 and then scales it (reported)
        rtol = 1e-6
    np_dtype = dtype.np
    rng = np.random.default_rng(prog.seed)
    first, fresh = _inputs(prog, rng, np_dtype), _inputs(prog, rng, np_dtype)
    with np.errstate(all="ignore"):
        probe = prog.function(symgrad.float64, np.ones(()))(
            *[symgrad.tensor(a.astype(np.float64)) for a in first[0]], *first[1])
    out_shape = tuple(probe.shape)
    weights = rng.standard_normal(out_shape)
    cotangent = rng.standard_normal(out_shape).astype(np_dtype) if prog.output == "vector" else None
    fn = prog.function(dtype, weights)
    options = {"backend": "numpy" if prog.backend == "numpy" else "numba",
               "parallel": prog.backend == "numba-parallel"}
    if HAS_SCALAR_LOSS_OPTION:
        options["scalar_loss"] = prog.strategy
    compiled = symgrad.compile(fn, **options)
    vg = symgrad.value_and_grad(compiled, argnums=tuple(range(len(prog.shapes)))) if prog.output == "loss" else None
    traces_before = None
    for call, (arrays, extra) in enumerate((first, fresh)):
        where = f"{dtype_name}, call {call + 1}"
        want, want_dtype, want_grads = _eager(fn, arrays, extra, dtype, cotangent)
        # compiled, through the tensor API
        leaves = _leaves(arrays, dtype)
        out = compiled(*leaves, *extra)
        assert out.dtype == want_dtype, f"{where}: compiled output dtype {out.dtype}, eager {want_dtype}"
        assert type(out.grad_fn).__name__ == "CompiledFunctionBackward", f"{where}: grad_fn {out.grad_fn}"
        if cotangent is None:
            out.backward()
        else:
            out.backward(symgrad.tensor(cotangent, dtype=dtype))
        assert_close(out.detach().numpy(), want, rtol, f"{where}: compiled value vs eager")
        for k, (g, w, t) in enumerate(zip(_grads(leaves, arrays), want_grads, leaves)):
            assert t.grad is None or t.grad.dtype == dtype, f"{where}: gradient {k} dtype {t.grad.dtype}"
            assert_close(g, w, rtol, f"{where}: compiled gradient of v{k} vs eager")
        # the IR interpreter, on the graphs the compiled function traced
        k = compiled.kernels_for(*leaves, *extra)
        got = interpret(k.graph, *arrays)
        assert_close(got[0], want, rtol, f"{where}: interpreted forward graph vs eager")
        tangent = np.ones((), np_dtype) if cotangent is None else cotangent
        joint = interpret(k.joint, *arrays, tangent)
        assert_close(joint[0], want, rtol, f"{where}: interpreted joint graph value vs eager")
        for i, g in enumerate(joint[k.joint.n_forward_outputs:]):
            w = want_grads[k.wrt[i]]
            assert_close(np.zeros(w.shape) if g is None else g, w, rtol,
                         f"{where}: interpreted joint graph gradient of v{k.wrt[i]} vs eager")
        # value_and_grad: numpy in, numpy out
        if vg is not None:
            value, grads = vg(*arrays, *extra)
            assert_close(value, want, rtol, f"{where}: value_and_grad value vs eager")
            for i, (g, w) in enumerate(zip(grads, want_grads)):
                assert g.dtype == np_dtype, f"{where}: value_and_grad gradient {i} dtype {g.dtype}"
                assert_close(g, w, rtol, f"{where}: value_and_grad gradient of v{i} vs eager")
        traces = compiled.stats()["traces"]
        if call == 1 and not prog.python_arg:
            assert traces == traces_before, f"{where}: new values of the same shapes retraced"
        traces_before = traces
        last = (out.detach().numpy(), _grads(leaves, arrays))
    # a new compiled function of the same program: its code comes from the build cache (the same
    # source, the same bits: its buffers lie elsewhere, and sums must not depend on addresses)
    again = symgrad.compile(fn, **options)
    arrays, extra = fresh
    leaves = _leaves(arrays, dtype)
    out = again(*leaves, *extra)
    out.backward() if cotangent is None else out.backward(symgrad.tensor(cotangent, dtype=dtype))
    assert again.stats()["build_cache_loads"] == 1, f"{dtype_name}: the same graph did not load from the build cache"
    k_again, k_first = again.kernels_for(*leaves, *extra), compiled.kernels_for(*leaves, *extra)
    for part in ("forward_source", "backward_source", "joint_source"):
        assert getattr(k_again, part) == getattr(k_first, part), f"{dtype_name}: build-cache {part} differs"
    np.testing.assert_array_equal(out.detach().numpy(), last[0], f"{dtype_name}: build-cache value vs fresh build")
    for k, (g, w) in enumerate(zip(_grads(leaves, arrays), last[1])):
        np.testing.assert_array_equal(g, w, f"{dtype_name}: build-cache gradient of v{k} vs fresh build")
    # finite differences through the compiled function (float64, programs without kinks)
    if dtype_name == "float64" and not prog.kinky:
        arrays, extra = fresh
        leaves = _leaves(arrays, dtype)
        assert symgrad.autograd.gradcheck(lambda *t: compiled(*t, *extra), leaves, eps=1e-6, atol=1e-5, rtol=1e-4)
        STATS[dtype_name]["gradchecks"] += 1
    STATS[dtype_name]["examples"] += 1
    STATS[dtype_name]["seconds"] += time.perf_counter() - t0
    fuzz_profile.EXTRA["random_programs"] = STATS
    fuzz_profile.record("random_programs", dtype_name)


# --- profiles ----------------------------------------------------------------------------------

FUZZ = os.environ.get("SYMGRAD_FUZZ", "")
LONG = FUZZ == "long"
_BASE = dict(deadline=None, derandomize=not LONG, database=None, print_blob=True,
             phases=[Phase.explicit, Phase.generate, Phase.shrink],
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
DEFAULT_EXAMPLES = {"float64": 10, "float32": 4}
LONG_EXAMPLES = int(os.environ.get("SYMGRAD_FUZZ_EXAMPLES", "100000"))


def _profile(dtype_name: str) -> settings:
    n = LONG_EXAMPLES if LONG else DEFAULT_EXAMPLES[dtype_name]
    return settings(max_examples=n, **_BASE)


def _slow_when_long(test):
    return pytest.mark.slow(test) if LONG else test


@_slow_when_long
@pytest.mark.skipif(not fuzz_profile.runs_dtype("float64"), reason="SYMGRAD_FUZZ_DTYPE=float32")
@_profile("float64")
@given(programs())
@pytest.mark.heavy
def test_random_programs_float64(prog):
    run_program(prog, "float64")


@_slow_when_long
@pytest.mark.skipif(not fuzz_profile.runs_dtype("float32"), reason="SYMGRAD_FUZZ_DTYPE=float64")
@_profile("float32")
@given(programs())
@pytest.mark.heavy
def test_random_programs_float32(prog):
    run_program(prog, "float32")


def test_profile_follows_the_environment():
    assert _profile("float64").max_examples == (LONG_EXAMPLES if LONG else DEFAULT_EXAMPLES["float64"])
    marks = {m.name for m in getattr(test_random_programs_float64, "pytestmark", [])}
    assert ("slow" in marks) == LONG

