"""Every entry of the rule table (``symgrad/derivatives.yaml``), checked the same way.

The cases are collected from :func:`symgrad.ops.registry.all_ops` at import time, so a new
table entry becomes new test cases by itself.  For each entry:

* ``SAMPLES`` must hold a builder of example arguments (a test fails, naming the op, if not);
* gradcheck in float64 through :func:`symgrad.ops.registry.apply`;
* elementwise entries: each formula is proved equal to ``grad * d(elementwise)/d(arg)``
  (symbolically with sympy, or numerically away from ties for piecewise rules), and
  gradgradcheck passes;
* float32 in, float32 out: the output and every gradient keep the input's dtype;
* with PyTorch installed: same forward values, same gradients, and the same ``grad_fn``
  class name when the public symgrad function is called the way a torch user would.

A sample builder takes a ``numpy.random.Generator`` and returns the op's arguments in schema
order (tensors as float64 numpy arrays, lists of arrays for ``Tensor[]``), or a list of such
argument tuples for several variants.  Values stay away from non-differentiable points and
ties, and are positive where the op needs it.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import sympy

import symgrad
from symgrad.ops import functional as F
from symgrad.ops.registry import all_ops, apply
from symgrad.rules import vocab

OPS = all_ops()
KEYS = sorted(OPS)
# ops with at least one gradient formula (comparisons, logic and heaviside have none)
DIFFERENTIABLE = [k for k in KEYS if OPS[k].rule.formulas]
INF = math.inf


# --- value helpers ----------------------------------------------------------------------------

def U(rng, *shape, lo=-2.0, hi=2.0):
    """Uniform values in [lo, hi)."""
    return rng.uniform(lo, hi, shape)


def P(rng, *shape, lo=0.5, hi=2.0):
    """Positive values."""
    return rng.uniform(lo, hi, shape)


def A(rng, *shape):
    """Values away from zero: |x| in [0.5, 2], either sign."""
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.5, 2.0, shape)


def D(rng, *shape, gap=0.25):
    """Pairwise distinct values (no ties: neighbours differ by at least ``gap``), centred on 0."""
    n = int(np.prod(shape)) if shape else 1
    vals = (rng.permutation(n) - (n - 1) / 2) * gap + rng.uniform(0, gap / 5, n)
    return vals.reshape(shape)


def D_split(rng, *shapes):
    """Arrays of the given shapes whose values are all distinct from one another."""
    sizes = [int(np.prod(s)) for s in shapes]
    flat = D(rng, sum(sizes))
    out, start = [], 0
    for s, n in zip(shapes, sizes):
        out.append(flat[start:start + n].reshape(s))
        start += n
    return out


def with_zero(x, *positions):
    x = np.array(x, copy=True)
    for p in positions:
        x[p] = 0.0
    return x


def _WC(rng, *shape, shift=3.0):
    """Well-conditioned square matrices: uniform values plus ``shift`` times the identity."""
    return U(rng, *shape, lo=-1.0, hi=1.0) + shift * np.eye(shape[-1])


def _SPD(rng, *shape):
    """Symmetric positive definite with eigenvalues about 1, 2, 3, ... (well separated)."""
    q, _ = np.linalg.qr(rng.standard_normal(shape))
    w = np.arange(1.0, shape[-1] + 1) + rng.uniform(0, 0.3, shape[:-1])
    return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)


# --- SAMPLES: op key -> builder(rng) ----------------------------------------------------------

def _binary(rng):
    return [(U(rng, 3, 1), U(rng, 1, 4)), (U(rng, 2, 3), U(rng, 3))]


def _reduce_dims(rng):
    """(self, dim, keepdim) variants for dim-list reductions: keepdim both ways, negative dims."""
    return [(U(rng, 2, 3, 4), (1,), False), (U(rng, 2, 3, 4), (0, 2), True),
            (U(rng, 2, 3, 4), (-1,), False), (U(rng, 2, 3, 4), None, False),
            (U(rng, 2, 3, 4), None, True)]


def _maxmin_pair(rng):
    a, b = D_split(rng, (3, 1), (1, 4))
    c, d = D_split(rng, (2, 3), (3,))
    return [(a, b), (c, d)]


# Ops whose index argument follows from their other arguments (as_strided's positions, which
# symgrad.as_strided computes): only ever constants of a graph, never free inputs of a compiled call.
DERIVED_INDEX = frozenset({"as_strided"})


def _as_strided_args(size, stride, offset, input_shape):
    """``as_strided``'s arguments for a contiguous input, with the positions symgrad.as_strided computes."""
    flat = np.full(size, offset)
    for d, (n, st) in enumerate(zip(size, stride)):
        flat = flat + np.arange(n).reshape((1,) * d + (n,) + (1,) * (len(size) - d - 1)) * st
    return size, stride, offset, np.unravel_index(flat, input_shape)


SAMPLES = {
    # arithmetic
    "add.Tensor": _binary,
    "sub.Tensor": _binary,
    "rsub.Tensor": _binary,
    "mul.Tensor": _binary,
    "rsub.Scalar": lambda r: [(U(r, 3, 4), 1.5), (U(r, 3), -2)],
    "div.Tensor": lambda r: [(U(r, 3, 1), A(r, 1, 4)), (U(r, 2, 3), A(r, 3))],
    "neg": lambda r: (U(r, 2, 3),),
    "reciprocal": lambda r: (A(r, 2, 3),),
    "pow.Tensor_Scalar": lambda r: [(P(r, 2, 3), 2.5), (U(r, 2, 3), 3), (U(r, 2, 3), 0), (A(r, 2, 3), -2),
                                    (P(r, 2, 3), 0.5)],
    "pow.Tensor_Tensor": lambda r: [(P(r, 3, 1), U(r, 1, 4)), (P(r, 2, 3), U(r, 3))],
    "pow.Scalar": lambda r: [(2.5, U(r, 2, 3)), (0.5, U(r, 3))],
    # elementary functions
    "exp": lambda r: (U(r, 2, 3),),
    "log": lambda r: (P(r, 2, 3),),
    "log1p": lambda r: (U(r, 2, 3, lo=-0.5, hi=2.0),),
    "sin": lambda r: (U(r, 2, 3),),
    "cos": lambda r: (U(r, 2, 3),),
    "tanh": lambda r: (U(r, 2, 3),),
    "sqrt": lambda r: (P(r, 2, 3),),
    "sigmoid": lambda r: (U(r, 2, 3, lo=-4, hi=4),),
    "relu": lambda r: (A(r, 2, 3),),
    "abs": lambda r: (A(r, 2, 3),),
    "sign": lambda r: (A(r, 2, 3),),
    "expm1": lambda r: (U(r, 2, 3),),
    "log2": lambda r: (P(r, 2, 3),),
    "exp2": lambda r: (U(r, 2, 3),),
    "rsqrt": lambda r: (P(r, 2, 3),),
    "erf": lambda r: (U(r, 2, 3),),
    "sinh": lambda r: (U(r, 2, 3),),
    "cosh": lambda r: (U(r, 2, 3),),
    "tan": lambda r: (U(r, 2, 3, lo=-1.2, hi=1.2),),
    "atan": lambda r: (U(r, 2, 3),),
    # clamp: some elements below, between and above the bounds; a missing bound is +-inf
    "clamp.Tensor": lambda r: [(U(r, 3, 4), U(r, 1, 4, lo=-1.2, hi=-0.3), U(r, 3, 1, lo=0.3, hi=1.2)),
                               (U(r, 3, 1), U(r, 3, 4, lo=-1.2, hi=-0.3), U(r, 4, lo=0.3, hi=1.2))],
    "clamp": lambda r: [(U(r, 3, 4), -0.5, 0.7), (U(r, 3, 4), -INF, 0.7), (U(r, 3, 4), -0.5, INF)],
    "clamp_min": lambda r: (U(r, 3, 4), 0.3),
    "clamp_max": lambda r: (U(r, 3, 4), -0.2),
    "maximum": _maxmin_pair,
    "minimum": _maxmin_pair,
    # selection
    "where.self": lambda r: [(r.random((3, 4)) < 0.5, U(r, 3, 1), U(r, 1, 4)),
                             (r.random((2, 3)) < 0.5, U(r, 2, 3), U(r, 2, 3))],
    # reductions
    "sum": lambda r: [(U(r, 2, 3), None), (U(r, 2, 3), symgrad.float64)],
    "sum.dim_IntList": lambda r: [args + (None,) for args in _reduce_dims(r)],
    "mean": lambda r: (U(r, 2, 3), None),
    "mean.dim": lambda r: [args + (None,) for args in _reduce_dims(r)],
    "prod": lambda r: [(A(r, 2, 3), None), (with_zero(A(r, 2, 3), (1, 2)), None),
                       (with_zero(A(r, 2, 3), (0, 0), (1, 1)), None)],
    "prod.dim_int": lambda r: [(A(r, 2, 3, 4), 1, False, None), (A(r, 2, 3, 4), 2, True, None),
                               (with_zero(A(r, 2, 3, 4), (0, 1, 2)), 1, False, None),
                               (with_zero(A(r, 2, 3, 4), (0, 1, 2), (0, 2, 2)), 1, True, None)],
    "max.dim": lambda r: [(D(r, 3, 4), 1, False), (D(r, 3, 4), 0, True)],
    "max": lambda r: (D(r, 3, 4),),
    "min.dim": lambda r: [(D(r, 3, 4), 1, False), (D(r, 3, 4), 0, True)],
    "min": lambda r: (D(r, 3, 4),),
    "amax": lambda r: [(D(r, 2, 3, 4), (1,), False), (D(r, 2, 3, 4), (0, 2), True),
                       (D(r, 2, 3, 4), (), False)],
    "amin": lambda r: [(D(r, 2, 3, 4), (1,), False), (D(r, 2, 3, 4), (0, 2), True),
                       (D(r, 2, 3, 4), (), False)],
    "var.correction": lambda r: [(U(r, 3, 4), (1,), 1, False), (U(r, 3, 4), None, 0, True),
                                 (U(r, 3, 4), (0,), None, False)],
    "std.correction": lambda r: [(U(r, 3, 4), (1,), 1, False), (U(r, 3, 4), None, 0, True),
                                 (U(r, 3, 4), (0,), None, False)],
    "logsumexp": lambda r: [(U(r, 3, 4), (1,), False), (U(r, 3, 4), (0, 1), True)],
    "_softmax": lambda r: [(U(r, 3, 4), 1, False), (U(r, 3, 4), 0, False)],
    "_log_softmax": lambda r: [(U(r, 3, 4), 1, False), (U(r, 3, 4), 0, False)],
    # linear algebra
    "mm": lambda r: (U(r, 2, 3), U(r, 3, 4)),
    "addmm": lambda r: [(U(r, 4), U(r, 2, 3), U(r, 3, 4)), (U(r, 2, 4), U(r, 2, 3), U(r, 3, 4))],
    "mv": lambda r: (U(r, 2, 3), U(r, 3)),
    "dot": lambda r: (U(r, 3), U(r, 3)),
    "outer": lambda r: (U(r, 2), U(r, 3)),
    "bmm": lambda r: (U(r, 2, 2, 3), U(r, 2, 3, 4)),
    # shape
    "expand": lambda r: [(U(r, 3, 1), (2, 3, 4), False), (U(r, 3, 1), (2, -1, 4), False)],
    "view": lambda r: [(U(r, 3, 4), (2, 6)), (U(r, 3, 4), (-1,))],
    "_unsafe_view": lambda r: (U(r, 3, 4), (4, 3)),
    "t": lambda r: [(U(r, 2, 3),), (U(r, 3),)],
    "transpose.int": lambda r: (U(r, 2, 3, 4), 0, 2),
    "permute": lambda r: (U(r, 2, 3, 4), (2, 0, 1)),
    "squeeze": lambda r: (U(r, 3, 1, 4, 1),),
    "squeeze.dim": lambda r: [(U(r, 3, 1, 4), 1), (U(r, 3, 1, 4), 0)],
    "squeeze.dims": lambda r: (U(r, 3, 1, 4, 1), (1, 3)),
    "squeeze_": lambda r: (U(r, 1, 3),),
    "squeeze_.dim": lambda r: (U(r, 1, 3), 0),
    "cat": lambda r: [([U(r, 2, 3), U(r, 1, 3), U(r, 3, 3)], 0), ([U(r, 2, 1), U(r, 2, 3)], 1)],
    "_to_copy": lambda r: [(U(r, 2, 3), symgrad.float64), (U(r, 2, 3), None)],
    "clone": lambda r: (U(r, 2, 3),),
    "zero_": lambda r: (U(r, 2, 3),),
    # indexing
    "select.int": lambda r: [(U(r, 3, 4), 1, 2), (U(r, 3, 4), 0, 0)],
    "select_backward": lambda r: [(U(r, 4), (3, 4), 0, 1), (U(r, 3), (3, 4), 1, 2)],
    "slice.Tensor": lambda r: [(U(r, 5, 3), 0, 1, 5, 2), (U(r, 3, 5), 1, 0, 3, 1)],
    "slice_backward": lambda r: [(U(r, 3, 2), (3, 4), 1, 1, 4, 2), (U(r, 2, 4), (3, 4), 0, 0, 2, 1)],
    "unsqueeze": lambda r: [(U(r, 3, 4), 1), (U(r, 3), 0)],
    "diagonal": lambda r: [(U(r, 3, 4), 0, 0, 1), (U(r, 2, 3, 4), -1, 2, 0), (U(r, 3, 4), 2, 1, 0)],
    "diagonal_backward": lambda r: [(U(r, 3), (3, 4), 0, 0, 1), (U(r, 3, 2), (2, 3, 4), -1, 2, 0)],
    "as_strided": lambda r: [(U(r, 3, 4),) + _as_strided_args((2, 2), (4, 1), 1, (3, 4)),
                             (U(r, 3, 4),) + _as_strided_args((3, 2), (1, 3), 0, (3, 4))],
    # advanced indices repeat on purpose: their gradients must accumulate
    "index.Tensor": lambda r: [(U(r, 3, 4), np.array([0, 2, 0])),
                               (U(r, 3, 4), (np.array([0, 1, 1]), np.array([3, 0, 0]))),
                               (U(r, 3, 4), (slice(None), np.array([1, 3, 1]))),
                               (U(r, 3, 4), r.random((3, 4)) < 0.5)],
    "index_put_add": lambda r: [(U(r, 3, 4), (3, 4), np.array([0, 2, 0])),
                                (U(r, 3), (3, 4), (np.array([0, 1, 1]), np.array([3, 0, 0])))],
    "unbind.int": lambda r: [(U(r, 3, 4), 0), (U(r, 3, 4), 1)],
    "stack": lambda r: [([U(r, 2, 3), U(r, 2, 3), U(r, 2, 3)], 0), ([U(r, 2, 3), U(r, 2, 3)], 2)],
    # comparisons, logic and heaviside: forward only (no gradient)
    **{k: (lambda r: [(U(r, 3, 1), U(r, 1, 4)), (U(r, 4), 0.5)]) for k in (
        "gt.Tensor", "lt.Tensor", "ge.Tensor", "le.Tensor", "eq.Tensor", "ne.Tensor", "heaviside")},
    "logical_and": lambda r: [(U(r, 3, 1) > 0.5, U(r, 1, 4) > 0.5)],
    "logical_or": lambda r: [(U(r, 3, 1) > 0.5, U(r, 1, 4) > 0.5)],
    "logical_not": lambda r: [(U(r, 4) > 0.5,)],
    # rounding, remainders (values away from the jumps) and bitwise operators on integers
    "floor_divide": lambda r: [(3 * U(r, 3, 1), A(r, 1, 4)), (3 * U(r, 4), 0.7)],
    "trunc": lambda r: (3 * U(r, 2, 3),),
    "remainder.Scalar": lambda r: [(3 * U(r, 3, 4), 1.5), (3 * U(r, 3), -0.7)],
    "remainder.Tensor": lambda r: [(3 * U(r, 3, 1), A(r, 1, 4)), (3 * U(r, 2, 3), A(r, 3))],
    "fmod.Scalar": lambda r: [(3 * U(r, 3, 4), 1.5), (3 * U(r, 3), -0.7)],
    "fmod.Tensor": lambda r: [(3 * U(r, 3, 1), A(r, 1, 4)), (3 * U(r, 2, 3), A(r, 3))],
    **{k: (lambda r: [(r.integers(-20, 20, (3, 1)), r.integers(-20, 20, (1, 4))),
                      (r.integers(-20, 20, (4,)), 10)]) for k in (
        "bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor")},
    **{k: (lambda r: [(r.integers(-20, 20, (3, 4)), r.integers(0, 4, (3, 4))), (r.integers(-20, 20, (4,)), 2)])
       for k in ("bitwise_left_shift.Tensor", "bitwise_right_shift.Tensor")},
    "bitwise_not": lambda r: [(r.integers(-20, 20, (4,)),)],
    # numpy surface, elementwise family: inverse trigonometric, special functions, rounding
    "asin": lambda r: (U(r, 2, 3, lo=-0.9, hi=0.9),),
    "acos": lambda r: (U(r, 2, 3, lo=-0.9, hi=0.9),),
    "asinh": lambda r: (U(r, 2, 3),),
    "acosh": lambda r: (P(r, 2, 3, lo=1.2, hi=3.0),),
    "atanh": lambda r: (U(r, 2, 3, lo=-0.9, hi=0.9),),
    "atan2": lambda r: [(U(r, 3, 1), A(r, 1, 4)), (A(r, 2, 3), U(r, 3))],
    "hypot": lambda r: [(A(r, 3, 1), A(r, 1, 4)), (A(r, 2, 3), U(r, 3))],
    "log10": lambda r: (P(r, 2, 3),),
    "logaddexp": _binary,
    "logaddexp2": _binary,
    "cbrt": lambda r: (A(r, 2, 3),),
    "sinc": lambda r: (A(r, 2, 3),),
    "deg2rad": lambda r: (U(r, 2, 3),),
    "rad2deg": lambda r: (U(r, 2, 3),),
    "floor": lambda r: (3 * U(r, 2, 3),),
    "ceil": lambda r: (3 * U(r, 2, 3),),
    "round": lambda r: (3 * U(r, 2, 3),),
    "round.decimals": lambda r: [(3 * U(r, 2, 3), 1), (30 * U(r, 4), -1)],
    "erfc": lambda r: (U(r, 2, 3),),
    "logit": lambda r: (U(r, 2, 3, lo=0.1, hi=0.9),),
    "lgamma": lambda r: [(P(r, 2, 3, lo=0.3, hi=4.0),), (P(r, 4, lo=0.2, hi=0.8) - 2.0,)],
    "digamma": lambda r: [(P(r, 2, 3, lo=0.3, hi=4.0),), (P(r, 4, lo=0.2, hi=0.8) - 2.0,)],
    "polygamma": lambda r: [(1, P(r, 2, 3, lo=0.3, hi=4.0)), (2, P(r, 4)), (3, P(r, 4, lo=0.2, hi=0.8) - 2.0)],
    "xlogy.Tensor": lambda r: [(U(r, 3, 1), P(r, 1, 4)), (U(r, 2, 3), P(r, 3))],
    "special_xlog1py": lambda r: [(U(r, 3, 1), P(r, 1, 4, lo=-0.5)), (U(r, 2, 3), P(r, 3, lo=-0.5))],
    # index_put: integer-array indices, replacing or accumulating (repeated indices add up)
    "index_put": lambda r: [(U(r, 3, 4), np.array([0, 2]), U(r, 2, 4), False),
                            (U(r, 3, 4), (np.array([0, 1, 0]), np.array([3, 0, 3])), U(r, 3), True)],
    # t[idx] = src on a non-leaf; src broadcasts in some variants
    "copy_slices": lambda r: [(U(r, 3, 4), U(r, 2, 4), np.array([0, 2])),
                              (U(r, 3, 4), U(r, 4), 1),
                              (U(r, 3, 4), U(r, 3, 1), (slice(None), slice(1, 3))),
                              (U(r, 3, 4), U(r, 1, 4), np.array([2, 0]))],
    # numpy surface: linear algebra (well-conditioned, SPD where needed, distinct eigen/singular values)
    "linalg_inv": lambda r: [(_WC(r, 3, 3),), (_WC(r, 2, 3, 3),)],
    "linalg_det": lambda r: [(_WC(r, 3, 3),), (_WC(r, 2, 3, 3),), (_WC(r, 3, 3, shift=-3.0),)],
    "linalg_slogdet": lambda r: [(_WC(r, 3, 3),), (_WC(r, 2, 3, 3, shift=-3.0),)],
    "linalg_solve": lambda r: [(_WC(r, 3, 3), U(r, 3, 2)), (_WC(r, 2, 3, 3), U(r, 2, 3, 1)),
                               (_WC(r, 3, 3), U(r, 2, 3, 2))],
    "linalg_cholesky": lambda r: [(_SPD(r, 3, 3), False), (_SPD(r, 3, 3), True), (_SPD(r, 2, 3, 3), False)],
    "linalg_eigh": lambda r: [(_SPD(r, 3, 3), "L"), (_SPD(r, 3, 3), "U"), (_SPD(r, 2, 3, 3), "L")],
    "linalg_svd": lambda r: [(U(r, 4, 3),), (U(r, 3, 4),), (U(r, 2, 3, 3),)],
    "linalg_qr": lambda r: [(U(r, 4, 3),), (U(r, 2, 3, 3),)],
    # numpy surface: reductions, scans and sorting (cumprod with zeros: exact gradients there)
    "cumsum": lambda r: [(U(r, 3, 4), 1), (U(r, 3, 4), 0), (U(r, 2, 3, 4), -1)],
    "cumsum_backward": lambda r: [(U(r, 3, 4), 1), (U(r, 5), 0)],
    "cumprod": lambda r: [(A(r, 3, 4), 1), (A(r, 3, 4), 0), (with_zero(A(r, 2, 5), (0, 2)), 1),
                          (with_zero(A(r, 2, 5), (1, 1), (1, 3)), -1), (with_zero(A(r, 4, 2), (0, 0)), 0)],
    "cumprod_backward": lambda r: [(U(r, 3, 4), A(r, 3, 4), 1), (U(r, 3, 4), with_zero(A(r, 3, 4), (1, 0), (1, 2)), 1),
                                   (U(r, 4, 2), with_zero(A(r, 4, 2), (0, 1)), 0), (U(r, 5), A(r, 5), -1)],
    "argsort": lambda r: [(D(r, 3, 4), 1, False), (D(r, 3, 4), 0, True), (D(r, 5), -1, False)],
    "argmax": lambda r: [(D(r, 3, 4), None, False), (D(r, 3, 4), 1, False), (D(r, 3, 4), 0, True)],
    "argmin": lambda r: [(D(r, 3, 4), None, False), (D(r, 3, 4), -1, False), (D(r, 3, 4), 1, True)],
    # the weights are the differentiable input (torch's bincount has no gradient: no torch row)
    "bincount": lambda r: [(r.integers(0, 4, 9), U(r, 9), 0), (r.integers(0, 4, 9), U(r, 9), 6)],
    "_bincount_fixed": lambda r: [(np.array([0, 2, 2, 1]), U(r, 4), 0, 3), (np.array([0, 2, 2, 1]), U(r, 4), 5, 5)],
    "isnan": lambda r: [(np.array([1.0, np.nan, -2.0, np.inf]),), (U(r, 2, 3),)],
    "isinf": lambda r: [(np.array([1.0, np.nan, -np.inf, np.inf]),), (U(r, 2, 3),)],
    "isfinite": lambda r: [(np.array([1.0, np.nan, -np.inf, np.inf]),), (U(r, 2, 3),)],
    # torch surface: sorting, selection and repetition (distinct values: the order is unambiguous)
    "sort": lambda r: [(D(r, 3, 4), 1, False), (D(r, 3, 4), 0, True), (D(r, 5), -1, True)],
    "sort.stable": lambda r: [(D(r, 3, 4), True, 1, False), (D(r, 2, 3, 4), False, -1, True)],
    "topk": lambda r: [(D(r, 3, 5), 2, 1, True, True), (D(r, 4, 3), 3, 0, False, True), (D(r, 6), 1, -1, True, True)],
    # repeated indices on purpose: their gradients add up
    "gather": lambda r: [(U(r, 3, 4), 1, np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]])),
                         (U(r, 3, 4), 0, np.array([[2, 0, 1, 2], [0, 0, 0, 1]]))],
    "value_selecting_reduction_backward": lambda r: [(U(r, 3, 2), 1, np.array([[0, 3], [2, 1], [1, 1]]), (3, 4)),
                                                     (U(r, 2, 4), 0, np.array([[2, 0, 1, 2], [0, 0, 0, 1]]), (3, 4))],
    "repeat": lambda r: [(U(r, 2, 3), (2, 1)), (U(r, 2, 3), (2, 1, 3)), (U(r, 3), (1, 1))],
    "repeat_backward": lambda r: [(U(r, 4, 3), (2, 1), (2, 3)), (U(r, 2, 2, 9), (2, 1, 3), (2, 3))],
    "masked_fill.Scalar": lambda r: [(U(r, 3, 4), U(r, 3, 4) > 0, 0.5), (U(r, 3, 4), U(r, 4) > 0, -2.0)],
    # numpy surface: shape, assembly and indexing
    "flip": lambda r: [(U(r, 3, 4), (0,)), (U(r, 2, 3, 4), (0, 2)), (U(r, 3, 4), ())],
    # repeated positions on purpose: only the last write of each keeps its value and gradient
    "keep_last_writes": lambda r: [(U(r, 4, 4), (3, 4), np.array([0, 2, 0, 0])),
                                   (U(r, 3), (3, 4), (np.array([0, 1, 0]), np.array([3, 0, 3])))],
    # torch.nn.functional primitives: windows in the canonical, the conv and the pooling layouts;
    # dropout's mask with p = 0 and p = 1, the two draws that are not random
    "_im2col": lambda r: [(U(r, 2, 3, 5, 6), (3, 2), (1, 2), (2, 1), (0, 1, 2, 3, 4, 5)),
                          (U(r, 1, 2, 4, 4), (2, 2), (1, 1), (1, 1), (1, 2, 3, 0, 4, 5)),
                          (U(r, 2, 1, 5, 4), (2, 3), (2, 1), (1, 1), (0, 1, 4, 5, 2, 3))],
    "_col2im": lambda r: [(U(r, 2, 3, 3, 2, 2, 4), (2, 3, 5, 6), (3, 2), (1, 2), (2, 1), (0, 1, 2, 3, 4, 5)),
                          (U(r, 2, 2, 2, 1, 3, 3), (1, 2, 4, 4), (2, 2), (1, 1), (1, 1), (1, 2, 3, 0, 4, 5))],
    "_dropout_mask": lambda r: [(U(r, 3, 4), 0.0, 0), (U(r, 2, 3), 1.0, 1)],
    # the range check passes its input through: values within the bounds (the gradient is grad)
    "_check_range": lambda r: [(U(r, 3, 4), -10.0, 10.0, None, "RuntimeError", "out of range: {value}"),
                               (U(r, 5), -10.0, 10.0, 0.5, "IndexError", "out of range: {value}")],
    "gelu": lambda r: (U(r, 2, 3, lo=-3, hi=3),),
    "gelu_tanh": lambda r: (U(r, 2, 3, lo=-3, hi=3),),
    "leaky_relu": lambda r: [(D(r, 2, 3), 0.2), (D(r, 4), 0.01)],
    "hardtanh": lambda r: [(U(r, 2, 3, lo=-2, hi=2), -1.0, 1.0), (U(r, 2, 3, lo=-1, hi=1), -0.5, 0.25)],
    "elu": lambda r: [(D(r, 2, 3), 1.0), (D(r, 2, 3), 0.5)],
    "silu": lambda r: [(U(r, 2, 3, lo=-6, hi=6),), (np.array([-800.0, 0.0, 800.0]) + U(r, 3, lo=-1, hi=1),)],
    "mish": lambda r: [(U(r, 2, 3, lo=-6, hi=6),), (np.array([-800.0, 0.0, 800.0]) + U(r, 3, lo=-1, hi=1),)],
    "log_sigmoid": lambda r: [(U(r, 2, 3, lo=-6, hi=6),), (np.array([-800.0, 0.0, 800.0]) + U(r, 3, lo=-1, hi=1),)],
    "softplus": lambda r: [(U(r, 2, 3, lo=-6, hi=6), 1.0, 20.0), (U(r, 2, 3, lo=-3, hi=3), 2.0, 1.0),
                           (np.array([-800.0, 0.0, 800.0]) + U(r, 3, lo=-1, hi=1), 1.0, 20.0)],
    "hardsigmoid": lambda r: [(U(r, 3, 4, lo=-5, hi=5),)],
    "hardswish": lambda r: [(U(r, 3, 4, lo=-5, hi=5),)],
    "celu": lambda r: [(D(r, 2, 3), 1.0), (D(r, 2, 3), 0.5)],
    "selu": lambda r: [(D(r, 2, 3),)],
    "threshold": lambda r: [(D(r, 3, 4), 0.3, -2.0), (D(r, 3, 4), -0.5, 0.0)],
    # losses: reduction 0 none, 1 mean, 2 sum (PyTorch's enum)
    "mse_loss": lambda r: [(U(r, 3, 4), U(r, 3, 4), 0), (U(r, 3, 4), U(r, 3, 4), 1), (U(r, 5), U(r, 5), 2)],
    "smooth_l1_loss": lambda r: [(U(r, 3, 4), U(r, 3, 4), 0, 1.0), (U(r, 3, 4), U(r, 3, 4), 1, 0.5),
                                 (U(r, 6), U(r, 6), 2, 2.0)],
    "huber_loss": lambda r: [(U(r, 3, 4), U(r, 3, 4), 0, 1.0), (U(r, 3, 4), U(r, 3, 4), 1, 0.4),
                             (U(r, 6), U(r, 6), 2, 2.5)],
    # the per-element losses of a difference, on both sides of beta / delta
    "_smooth_l1": lambda r: [(U(r, 3, 4, lo=-3, hi=3), 1.0), (U(r, 6), 0.5)],
    "_huber": lambda r: [(U(r, 3, 4, lo=-3, hi=3), 1.0), (U(r, 6), 0.4)],
    "binary_cross_entropy": lambda r: [(U(r, 3, 4, lo=0.05, hi=0.95), U(r, 3, 4, lo=0, hi=1), P(r, 3, 4), red)
                                       for red in (0, 1, 2)],
    "binary_cross_entropy_with_logits": lambda r: [
        (U(r, 3, 4, lo=-6, hi=6), U(r, 3, 4, lo=0, hi=1), P(r, 3, 4), P(r, 4), red) for red in (0, 1, 2)],
    # unbatched (C,) input with a 0-d target: tests/test_nn_functional.py, eager and compiled, against torch
    "nll_loss": lambda r: [(U(r, 4, 3), np.array([0, 2, 1, 2]), P(r, 3), 1, -100),
                           (U(r, 4, 3), np.array([0, 2, 1, 2]), P(r, 3), 1, 2)],
    "nll_loss2d": lambda r: [(U(r, 2, 3, 2, 2), np.array([[[0, 2], [1, 2]], [[1, 1], [0, 2]]]), P(r, 3), red, 1)
                             for red in (0, 1, 2)],
    # a reduced loss's 0-d gradient: through nll_loss's own gradient (the nll_loss rows above)
    "nll_loss_backward": lambda r: [(U(r, 2, 4), U(r, 2, 3, 4), np.array([[0, 2, 1, 2], [1, 1, 0, 2]]), P(r, 3), 0, 1)],
    # torch.nn.functional's ops with PyTorch's nodes; convolution padding: a (before, after) pair per spatial dim
    "convolution": lambda r: [(U(r, 2, 4, 5, 6), U(r, 6, 2, 3, 2), U(r, 6), (1, 2), (1, 1, 0, 1), (1, 1), 2),
                              (U(r, 2, 3, 7), U(r, 4, 3, 3), U(r, 4), (2,), (1, 2), (2,), 1)],
    "convolution_backward_input": lambda r: [(U(r, 2, 6, 5, 3), U(r, 6, 2, 3, 2), (2, 4, 5, 6), (1, 2), (1, 1, 0, 1),
                                              (1, 1), 2)],
    "convolution_backward_weight": lambda r: [(U(r, 2, 6, 5, 3), U(r, 2, 4, 5, 6), (6, 2, 3, 2), (1, 2), (1, 1, 0, 1),
                                               (1, 1), 2)],
    "max_pool2d": lambda r: [(D(r, 2, 3, 5, 6), (2, 3), (2, 2), (1, 1), (1, 1), True),
                             (D(r, 3, 4, 5), (2, 2), (1, 2), (0, 1), (2, 1), False)],
    "max_pool2d_with_indices_backward": lambda r: [(U(r, 2, 3, 3, 4), D(r, 2, 3, 5, 6), (2, 3), (2, 2), (1, 1), (1, 1),
                                                    True)],
    "_max_pool2d_pick": lambda r: [(U(r, 2, 3, 5, 6), D(r, 2, 3, 5, 6), (2, 3), (2, 2), (1, 1), (1, 1), True)],
    "avg_pool2d": lambda r: [(U(r, 2, 3, 5, 6), (2, 3), (2, 2), (1, 1), True, False, None),
                             (U(r, 3, 4, 5), (2, 2), (2, 1), (0, 1), False, True, None),
                             (U(r, 2, 3, 5, 6), (3, 3), (2, 2), (1, 1), False, True, 4)],
    "avg_pool2d_backward": lambda r: [(U(r, 2, 3, 3, 4), (2, 3, 5, 6), (2, 3), (2, 2), (1, 1), True, False, None)],
    "constant_pad_nd": lambda r: [(U(r, 2, 3, 4), (1, 2, -1, 1), 0.5), (U(r, 3, 4), (0, 0), 0.0)],
    # the padding row's gradient is 0 while the value reads it: no gradcheck sample picks it (test_nn_functional)
    "reflection_pad1d": lambda r: [(U(r, 2, 3, 5), (2, 1))],
    "reflection_pad2d": lambda r: [(U(r, 3, 4, 5), (1, 2, 3, 0))],
    "reflection_pad3d": lambda r: [(U(r, 1, 2, 3, 4, 3), (1, 2, 0, 1, 2, 1))],
    "replication_pad1d": lambda r: [(U(r, 3, 4), (3, 1))],
    "replication_pad2d": lambda r: [(U(r, 2, 2, 3, 4), (2, 0, 1, 3))],
    "replication_pad3d": lambda r: [(U(r, 2, 3, 2, 3), (1, 1, 2, 0, 1, 2))],
    "_index_pad": lambda r: [(U(r, 2, 3, 4), (1, 2, 2, 1), 0), (U(r, 2, 3, 4), (3, 1), 1)],
    "_index_pad_backward": lambda r: [(U(r, 2, 6, 7), (2, 3, 4), (1, 2, 2, 1), 0),
                                      (U(r, 2, 3, 8), (2, 3, 4), (3, 1), 1)],
    "embedding": lambda r: [(U(r, 5, 3), np.array([[0, 2], [4, 2]]), -1), (U(r, 5, 3), np.array([1, 0, 1]), 3)],
    "embedding_dense_backward": lambda r: [(U(r, 2, 2, 3), np.array([[0, 2], [4, 2]]), (5, 3), 2)],
    "native_layer_norm": lambda r: [(U(r, 2, 3, 4), (4,), U(r, 4), U(r, 4), 1e-5),
                                    (U(r, 2, 3, 4), (3, 4), U(r, 3, 4), U(r, 3, 4), 1e-3)],
    "masked_fill.Tensor": lambda r: (U(r, 3, 4), r.uniform(size=(3, 4)) > 0.5, np.array(0.7)),
    "linalg_vector_norm": lambda r: [(A(r, 3, 4), 2.0, (1,), False), (A(r, 3, 4), 3.0, None, True),
                                     (A(r, 2, 3), 1.0, (0, 1), False), (A(r, 3, 4), -1.5, (1,), True),
                                     (A(r, 3, 4), 0.5, (0,), False)],
    "linalg_vector_norm.inf": lambda r: [(D(r, 3, 4), INF, (1,), False), (D(r, 3, 4), -INF, None, False)],
    "linalg_vector_norm.zero": lambda r: [(U(r, 3, 4), 0.0, (1,), False)],
    # attention: an additive mask (0-d zero: none); the second masks every key of query 1 (its output 0)
    "_scaled_dot_product_flash_attention_for_cpu": lambda r: [
        (U(r, 2, 3, 4, 5), U(r, 2, 3, 6, 5), U(r, 2, 3, 6, 5), np.zeros(()), False, 0.4),
        (U(r, 1, 2, 3, 4), U(r, 1, 2, 5, 4), U(r, 1, 2, 5, 4),
         np.where(np.arange(15).reshape(3, 5) % 4 == 1, -INF, 0.0) + np.array([[0.0], [-INF], [0.0]]) + U(r, 3, 5),
         False, 0.5),
        (U(r, 1, 2, 4, 3), U(r, 1, 2, 6, 3), U(r, 1, 2, 6, 3), np.zeros(()), True, 0.7),
        (U(r, 2, 4, 3, 2), U(r, 2, 2, 4, 2), U(r, 2, 2, 4, 2), np.zeros(()), False, 0.6)],   # grouped heads
}


# --- building calls ---------------------------------------------------------------------------

def _seed(key: str, salt: int = 0) -> int:
    return zlib.crc32(key.encode()) + 7919 * salt


def sample_variants(key: str, salt: int = 0) -> list[tuple]:
    """The argument tuples (schema order) of ``key``'s sample, as numpy values."""
    out = SAMPLES[key](np.random.default_rng(_seed(key, salt)))
    variants = out if isinstance(out, list) else [out]
    schema_args = OPS[key].schema.args
    for args in variants:
        assert isinstance(args, tuple) and len(args) == len(schema_args), (
            f"SAMPLES[{key!r}] must give {len(schema_args)} arguments in schema order "
            f"({', '.join(a.name for a in schema_args)}), got {args!r}")
    return variants


def _n_variants(key: str) -> int:
    try:
        return len(sample_variants(key))
    except Exception:  # a broken builder is reported by the test, not at collection
        return 1


def _case_params(keys):
    out = []
    for key in keys:
        if key not in SAMPLES:
            out.append(pytest.param(key, -1, id=f"{key}-NO_SAMPLE"))
            continue
        out.extend(pytest.param(key, i, id=f"{key}-{i}") for i in range(_n_variants(key)))
    return out


def differentiable_outputs(op, n_outputs: int) -> list[int]:
    od = op.rule.output_differentiability
    return [k for k in range(n_outputs) if k >= len(od) or od[k]]


def _is_float_array(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype.kind == "f"


class Call:
    """One call of an op with tensors built from a sample: leaves to differentiate and a runner."""

    def __init__(self, op, args, np_dtype=np.float64):
        self.op = op
        self.args = list(args)
        self.slots = []     # (arg position, list index or None) of each differentiable leaf
        self.leaves = []
        sg_dtype = symgrad.float32 if np_dtype == np.float32 else symgrad.float64
        formulas = op.rule.formulas
        for pos, (a, v) in enumerate(zip(op.schema.args, args)):
            diff = a.name in formulas
            if a.is_tensor_list:
                items = []
                for k, arr in enumerate(v):
                    t = symgrad.tensor(arr, dtype=sg_dtype, requires_grad=diff)
                    items.append(t)
                    if diff:
                        self.slots.append((pos, k))
                        self.leaves.append(t)
                self.args[pos] = items
            elif a.is_tensor and isinstance(v, np.ndarray):
                if _is_float_array(v):
                    t = symgrad.tensor(v, dtype=sg_dtype, requires_grad=diff)
                    if diff:
                        self.slots.append((pos, None))
                        self.leaves.append(t)
                else:
                    t = symgrad.tensor(v)
                self.args[pos] = t
            elif isinstance(v, symgrad.dtype) and v.is_floating_point:
                self.args[pos] = sg_dtype

    def run(self, *leaves):
        args = list(self.args)
        args = [list(a) if isinstance(a, list) else a for a in args]
        for (pos, k), t in zip(self.slots, leaves or self.leaves):
            if k is None:
                args[pos] = t
            else:
                args[pos][k] = t
        out = apply(self.op, tuple(args))
        return out if isinstance(out, tuple) else (out,)

    def weights(self, outs, rng):
        return [rng.standard_normal(outs[k].shape) for k in differentiable_outputs(self.op, len(outs))]

    def scalarised(self, weights):
        """A function of the leaves: the output, or a weighted sum of the differentiable outputs."""
        op = self.op

        def fn(*leaves):
            outs = self.run(*leaves)
            idx = differentiable_outputs(op, len(outs))
            if len(outs) == 1:
                return outs[0]
            total = None
            for k, w in zip(idx, weights):
                term = (outs[k] * symgrad.tensor(w, dtype=outs[k].dtype)).sum()
                total = term if total is None else total + term
            return total

        return fn


def _require_sample(key: str, variant: int) -> tuple:
    if key not in SAMPLES:
        pytest.fail(f"op {key!r} is in the rule table but has no entry in tests/test_rules.py SAMPLES: "
                    f"add a builder of example arguments for it", pytrace=False)
    return sample_variants(key)[variant]


def _describe(args) -> str:
    parts = []
    for v in args:
        if isinstance(v, np.ndarray):
            parts.append(f"array{list(v.shape)}:{v.dtype}")
        elif isinstance(v, list) and v and isinstance(v[0], np.ndarray):
            parts.append("[" + ", ".join(f"array{list(x.shape)}" for x in v) + "]")
        else:
            parts.append(repr(v))
    return "(" + ", ".join(parts) + ")"


# --- a. every op has a sample -----------------------------------------------------------------

@pytest.mark.parametrize("key", KEYS)
def test_op_has_sample(key):
    if key not in SAMPLES:
        pytest.fail(f"op {key!r} is in the rule table but has no entry in tests/test_rules.py SAMPLES: "
                    f"add a builder of example arguments for it", pytrace=False)
    variants = sample_variants(key)
    assert variants
    op = OPS[key]
    for args in variants:
        for a, v in zip(op.schema.args, args):
            if a.name in op.rule.formulas and a.is_tensor:
                assert _is_float_array(v) and v.dtype == np.float64, \
                    f"{key}: differentiable input {a.name!r} must be a float64 array, got {type(v).__name__}"


def test_samples_name_only_table_ops():
    stale = sorted(set(SAMPLES) - set(OPS))
    assert not stale, f"SAMPLES has entries for ops not in the rule table: {stale}"


# --- b. gradcheck in float64 ------------------------------------------------------------------

@pytest.mark.parametrize("key,variant", _case_params(DIFFERENTIABLE))
def test_gradcheck(key, variant):
    args = _require_sample(key, variant)
    op = OPS[key]
    call = Call(op, args)
    outs = call.run()
    if not call.leaves:
        assert not any(o.requires_grad for o in outs), \
            f"{key}: output requires grad without differentiable inputs"
        return
    for k in differentiable_outputs(op, len(outs)):
        assert outs[k].requires_grad, f"{key}{_describe(args)}: output {k} does not require grad"
        assert type(outs[k].grad_fn) is op.node_class
    weights = call.weights(outs, np.random.default_rng(_seed(key, 99)))
    fn = call.scalarised(weights)
    assert symgrad.autograd.gradcheck(fn, tuple(call.leaves)), f"{key}{_describe(args)}"


def test_unbind_uses_only_some_outputs():
    """unbind's backward must fill the gradient of unused outputs with zeros."""
    x = symgrad.tensor(np.arange(12.0).reshape(3, 4), dtype=symgrad.float64, requires_grad=True)
    outs = apply(OPS["unbind.int"], (x, 0))
    (outs[0] * 2 + outs[2]).sum().backward()
    expected = np.zeros((3, 4))
    expected[0], expected[2] = 2, 1
    np.testing.assert_array_equal(x.grad.numpy(), expected)


# --- c. elementwise formulas against sympy.diff -----------------------------------------------

ELEMENTWISE = [k for k in DIFFERENTIABLE if OPS[k].rule.elementwise is not None]
ELEMENTWISE_FORMULAS = [(k, name) for k in ELEMENTWISE for name in OPS[k].rule.formulas]
_TIES = (sympy.Piecewise, sympy.Heaviside, sympy.sign, sympy.Abs, sympy.Max, sympy.Min, sympy.DiracDelta)
_GRAD, _RESULT = sympy.Symbol("grad", real=True), sympy.Symbol("result", real=True)

# lambdify namespace: the formula vocabulary's numpy functions, plus DiracDelta (0 away from ties)
_NUMERIC = dict(vocab.NUMPY_FUNCTIONS)
_NUMERIC["erf"] = vocab.NUMPY_FUNCTIONS["erf"]
_NUMERIC["DiracDelta"] = lambda x, k=0: np.zeros_like(np.asarray(x, dtype=np.float64))


def _real(expr):
    """``expr`` with every symbol real (so that sympy differentiates Abs, sign... as real functions)."""
    return expr.xreplace({s: sympy.Symbol(s.name, real=True) for s in expr.free_symbols})


def _expected_and_actual(key, name):
    rule = OPS[key].rule
    elementwise = _real(rule.elementwise)
    arg = sympy.Symbol(name, real=True)
    expected = _GRAD * sympy.diff(elementwise, arg)
    actual = _real(rule.formulas[name].expr).xreplace({_RESULT: elementwise})
    # sigmoid, a formula function sympy does not know, by its definition
    actual = actual.replace(sympy.Function("sigmoid"), lambda z: 1 / (1 + sympy.exp(-z)))
    return elementwise, expected, actual


def _has_ties(*exprs) -> bool:
    return any(e.has(*_TIES) for e in exprs)


def _numeric_points(key):
    """Sample arguments from several seeds, plus a random incoming gradient for each."""
    op = OPS[key]
    names = [a.name for a in op.schema.args]
    for salt in range(12):
        for args in sample_variants(key, salt):
            values = dict(zip(names, args))
            numeric = [v for v in args if isinstance(v, (np.ndarray, float, int))]
            shape = np.broadcast_shapes(*[np.shape(v) for v in numeric])
            grad = np.random.default_rng(_seed(key, 1000 + salt)).standard_normal(shape)
            yield values, grad


def _numeric_function(expr, names):
    symbols = [sympy.Symbol(n, real=True) for n in names] + [_GRAD]
    return sympy.lambdify(symbols, expr, modules=[_NUMERIC, "numpy"])


def _evaluate(f, names, values, grad):
    # every argument at the full shape: lambdify's numpy code stacks some operands (logical_and.reduce)
    full = [np.broadcast_to(np.asarray(values[n], dtype=np.float64), np.shape(grad)) for n in names]
    with np.errstate(all="ignore"):
        out = f(*full, grad)
    return np.broadcast_to(np.asarray(out, dtype=np.float64), np.shape(grad))


# Formulas equal to sympy's derivative on the op's real domain only (torch's form of acosh's derivative,
# 1/sqrt(x**2 - 1), is sympy's 1/(sqrt(x - 1)*sqrt(x + 1)) for x >= 1): compared at the samples.
_EQUAL_ON_THE_DOMAIN = {"acosh"}


@pytest.mark.parametrize("key,name", [pytest.param(k, n, id=f"{k}-{n}") for k, n in ELEMENTWISE_FORMULAS])
def test_elementwise_formula_matches_sympy_diff(key, name):
    elementwise, expected, actual = _expected_and_actual(key, name)
    if not _has_ties(expected, actual, elementwise) and key not in _EQUAL_ON_THE_DOMAIN:
        diff = sympy.simplify(sympy.expand_func(actual - expected))  # expand_func: expm1 -> exp - 1
        assert diff == 0, (f"{key}: formula for {name!r} is {actual}, but grad * d/d{name}({elementwise}) is "
                           f"{sympy.simplify(expected)} (difference {diff})")
        return
    # Rules with tie conventions (Heaviside, Piecewise, sign...): compare at non-tie points.
    _require_sample(key, 0)
    names = [a.name for a in OPS[key].schema.args]
    f_expected, f_actual = _numeric_function(expected, names), _numeric_function(actual, names)
    checked = 0
    for values, grad in _numeric_points(key):
        want = _evaluate(f_expected, names, values, grad)
        got = _evaluate(f_actual, names, values, grad)
        assert np.all(np.isfinite(want)), f"{key}: sympy's derivative is not finite at the sample {values}"
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{key}: formula for {name!r} ({actual}) differs from "
                                           f"grad * d/d{name}({elementwise}) = {expected} at {values}")
        checked += want.size
    assert checked >= 50


@pytest.mark.parametrize("key", ELEMENTWISE)
def test_elementwise_inputs_have_rules(key):
    """Every Tensor argument the forward depends on has a formula or is declared non_differentiable."""
    rule = OPS[key].rule
    used = {s.name for s in rule.elementwise.free_symbols}
    missing = [a.name for a in rule.schema.args
               if a.is_tensor and a.name in used and a.name not in rule.formulas
               and a.name not in rule.non_differentiable]
    assert not missing, f"{key}: no formula for tensor input(s) {missing}"


# --- d. second order for elementwise ops ------------------------------------------------------

@pytest.mark.parametrize("key,variant", _case_params(ELEMENTWISE))
def test_gradgradcheck_elementwise(key, variant):
    args = _require_sample(key, variant)
    call = Call(OPS[key], args)
    if not call.leaves:
        pytest.skip(f"{key} has no differentiable input")
    fn = call.scalarised([])
    assert symgrad.autograd.gradgradcheck(fn, tuple(call.leaves)), f"{key}{_describe(args)}"


# --- e. float32 stays float32 -----------------------------------------------------------------

@pytest.mark.parametrize("key,variant", _case_params(DIFFERENTIABLE))
def test_float32_in_float32_out(key, variant):
    args = _require_sample(key, variant)
    op = OPS[key]
    call = Call(op, args, np_dtype=np.float32)
    outs = call.run()
    for k, o in enumerate(outs):
        if o._data.dtype.kind == "f":
            assert o.dtype == symgrad.float32, \
                f"{key}{_describe(args)}: output {k} is {o.dtype} for float32 input"
    if not call.leaves:
        return
    idx = differentiable_outputs(op, len(outs))
    ones = [symgrad.tensor(np.ones(outs[k].shape), dtype=symgrad.float32) for k in idx]
    grads = symgrad.autograd.grad([outs[k] for k in idx], call.leaves, grad_outputs=ones, allow_unused=True)
    for (pos, _), g in zip(call.slots, grads):
        name = op.schema.args[pos].name
        assert g is not None, f"{key}: no gradient for {name!r}"
        assert g.dtype == symgrad.float32, \
            f"{key}{_describe(args)}: gradient of {name!r} is {g.dtype}, want float32"
        assert np.all(np.isfinite(g.numpy())), f"{key}: gradient of {name!r} is not finite"


@pytest.mark.parametrize("src,dst", [("float32", "float64"), ("float64", "float32")])
def test_to_copy_gradient_has_the_input_dtype(src, dst):
    x = symgrad.tensor(np.array([1.0, 2.0]), dtype=getattr(symgrad, src), requires_grad=True)
    y = apply(OPS["_to_copy"], (x, getattr(symgrad, dst)))
    assert y.dtype == getattr(symgrad, dst)
    (g,) = symgrad.autograd.grad(y, x, grad_outputs=symgrad.tensor(np.ones(2), dtype=getattr(symgrad, dst)))
    assert g.dtype == getattr(symgrad, src)


# --- f. parity with PyTorch -------------------------------------------------------------------

def _is_torch(lib) -> bool:
    return lib is not symgrad


def _aten(lib, name):
    """An internal op: ``torch.ops.aten.<name>``, or symgrad's function of that name."""
    return getattr(lib.ops.aten, name) if _is_torch(lib) else getattr(F, name)


def _setitem(lib, self, src, idx):
    y = self.clone()
    y[idx] = src
    return y


def _clamp(lib, x, lo, hi):
    bounds = {}
    if not (isinstance(lo, float) and lo == -INF):
        bounds["min"] = lo
    if not (isinstance(hi, float) and hi == INF):
        bounds["max"] = hi
    return lib.clamp(x, **bounds)


def _unary(name):
    return lambda lib, x: getattr(lib, name)(x)


def _to_copy(lib, x, dtype):
    return x.to(x.dtype if dtype is None else dtype, copy=True)


def _index_put_add(lib, values, sizes, idx):
    if not _is_torch(lib):
        return lib.index_put_add(values, sizes, idx)
    idx = idx if isinstance(idx, tuple) else (idx,)
    return lib.zeros(sizes, dtype=values.dtype).index_put(idx, values, accumulate=True)


class TorchCall:
    """Different spellings in torch and symgrad; ``symgrad=None``: no public symgrad spelling."""

    def __init__(self, torch, symgrad=None, grad_fn=True):
        self.torch, self.symgrad, self.grad_fn = torch, symgrad, grad_fn


def _one_triangle(A, upper: bool):
    """The symmetric matrix LAPACK sees when it reads one triangle of ``A`` (torch tensors)."""
    T = A.triu(1) if upper else A.tril(-1)
    return T + T.mT + A.diagonal(dim1=-2, dim2=-1).diag_embed()


def _signs_like(V, ref):
    """+-1 per column of ``V`` (a torch tensor) that turns it towards numpy's ``ref``."""
    import torch
    return torch.tensor(np.sign(np.sum(V.detach().numpy() * ref, axis=-2, keepdims=True)))


def _torch_eigh(L, A, UPLO):
    w, V = L.linalg.eigh(_one_triangle(A, UPLO == "U"))
    return w, V * _signs_like(V, np.linalg.eigh(A.detach().numpy(), UPLO=UPLO)[1])


def _torch_svd(L, A):
    U, S, Vh = L.linalg.svd(A, full_matrices=False)
    s = _signs_like(U, np.linalg.svd(A.detach().numpy(), full_matrices=False)[0])
    return U * s, S, Vh * s.mT


def _torch_qr(L, A):
    Q, R = L.linalg.qr(A)
    s = _signs_like(Q, np.linalg.qr(A.detach().numpy())[0])
    return Q * s, R * s.mT


# op key -> fn(lib, *args): the call a torch user would write, with lib = torch or symgrad
_REDUCTION = {0: "none", 1: "mean", 2: "sum"}
TORCH_EQUIVALENT = {
    "silu": lambda L, x: L.nn.functional.silu(x),
    "mish": lambda L, x: L.nn.functional.mish(x),
    "log_sigmoid": lambda L, x: L.nn.functional.logsigmoid(x),
    "softplus": lambda L, x, beta, threshold: L.nn.functional.softplus(x, beta=beta, threshold=threshold),
    # hardsigmoid: compared in tests/test_nn_functional.py (torch's float64 backward multiplies by 1/6 rounded
    # to float32, off the 1e-9 asked here)
    "hardswish": lambda L, x: L.nn.functional.hardswish(x),
    "celu": lambda L, x, alpha: L.nn.functional.celu(x, alpha),
    "selu": lambda L, x: L.nn.functional.selu(x),
    "threshold": lambda L, x, threshold, value: L.nn.functional.threshold(x, threshold, value),
    "mse_loss": lambda L, x, t, r: L.nn.functional.mse_loss(x, t, reduction=_REDUCTION[r]),
    "smooth_l1_loss": lambda L, x, t, r, b: L.nn.functional.smooth_l1_loss(x, t, reduction=_REDUCTION[r], beta=b),
    "huber_loss": lambda L, x, t, r, d: L.nn.functional.huber_loss(x, t, reduction=_REDUCTION[r], delta=d),
    "_smooth_l1": TorchCall(lambda L, d, b: L.nn.functional.smooth_l1_loss(d, L.zeros_like(d), reduction="none",
                                                                          beta=b), grad_fn=False),
    "_huber": TorchCall(lambda L, d, delta: L.nn.functional.huber_loss(d, L.zeros_like(d), reduction="none",
                                                                      delta=delta), grad_fn=False),
    "binary_cross_entropy": lambda L, x, t, w, r: L.nn.functional.binary_cross_entropy(x, t, weight=w,
                                                                                     reduction=_REDUCTION[r]),
    "binary_cross_entropy_with_logits": lambda L, x, t, w, pw, r: L.nn.functional.binary_cross_entropy_with_logits(
        x, t, weight=w, pos_weight=pw, reduction=_REDUCTION[r]),
    "nll_loss": lambda L, x, t, w, r, ignore: L.nn.functional.nll_loss(x, t, weight=w, reduction=_REDUCTION[r],
                                                                      ignore_index=ignore),
    "nll_loss2d": lambda L, x, t, w, r, ignore: L.nn.functional.nll_loss(x, t, weight=w, reduction=_REDUCTION[r],
                                                                        ignore_index=ignore),
    "max_pool2d": lambda L, x, k, s, p, d, c: L.nn.functional.max_pool2d(x, k, s, p, d, c),
    "avg_pool2d": lambda L, x, k, s, p, c, i, d: L.nn.functional.avg_pool2d(x, k, s, p, c, i, d),
    "constant_pad_nd": lambda L, x, pad, value: L.nn.functional.pad(x, pad, value=value),
    **{f"reflection_pad{d}d": lambda L, x, pad: L.nn.functional.pad(x, pad, mode="reflect") for d in (1, 2, 3)},
    **{f"replication_pad{d}d": lambda L, x, pad: L.nn.functional.pad(x, pad, mode="replicate") for d in (1, 2, 3)},
    "embedding": lambda L, w, i, p: L.nn.functional.embedding(i, w, padding_idx=None if p < 0 else p),
    "native_layer_norm": lambda L, x, shape, w, b, eps: L.nn.functional.layer_norm(x, shape, w, b, eps),
    "masked_fill.Tensor": lambda L, x, mask, value: x.masked_fill(mask, value),
    "linalg_vector_norm": lambda L, x, ord, dim, keepdim: L.linalg.vector_norm(x, ord, dim, keepdim),
    "linalg_vector_norm.inf": lambda L, x, ord, dim, keepdim: L.linalg.vector_norm(x, ord, dim, keepdim),
    "linalg_vector_norm.zero": lambda L, x, ord, dim, keepdim: L.linalg.vector_norm(x, ord, dim, keepdim),
    "_scaled_dot_product_flash_attention_for_cpu": lambda L, q, k, v, mask, causal, scale:
        L.nn.functional.scaled_dot_product_attention(q, k, v, None if mask.ndim == 0 else mask, is_causal=causal,
                                                     scale=scale, enable_gqa=q.shape[1] != k.shape[1]),
    "add.Tensor": lambda L, a, b: L.add(a, b),
    "sub.Tensor": lambda L, a, b: L.sub(a, b),
    "rsub.Tensor": lambda L, a, b: L.rsub(a, b),
    "rsub.Scalar": lambda L, a, s: s - a,
    "mul.Tensor": lambda L, a, b: L.mul(a, b),
    "div.Tensor": lambda L, a, b: L.div(a, b),
    "neg": _unary("neg"),
    "reciprocal": _unary("reciprocal"),
    "pow.Tensor_Scalar": lambda L, a, e: L.pow(a, e),
    "pow.Tensor_Tensor": lambda L, a, e: L.pow(a, e),
    "pow.Scalar": lambda L, s, e: s ** e,
    **{k: _unary(k) for k in ("exp", "log", "log1p", "sin", "cos", "tanh", "sqrt", "sigmoid", "relu",
                              "abs", "sign", "expm1", "log2", "exp2", "rsqrt", "erf", "sinh", "cosh", "tan",
                              "atan")},
    "clamp.Tensor": lambda L, x, lo, hi: L.clamp(x, min=lo, max=hi),
    "gelu": lambda L, x: L.nn.functional.gelu(x),
    "gelu_tanh": lambda L, x: L.nn.functional.gelu(x, approximate="tanh"),
    "leaky_relu": lambda L, x, s: L.nn.functional.leaky_relu(x, s),
    "hardtanh": lambda L, x, lo, hi: L.nn.functional.hardtanh(x, lo, hi),
    "elu": lambda L, x, a: L.nn.functional.elu(x, a),
    "clamp": _clamp,
    "clamp_min": lambda L, x, m: L.clamp_min(x, m),
    "clamp_max": lambda L, x, m: L.clamp_max(x, m),
    "maximum": lambda L, a, b: L.maximum(a, b),
    "minimum": lambda L, a, b: L.minimum(a, b),
    "where.self": lambda L, c, a, b: L.where(c, a, b),
    "sum": lambda L, x, dtype: L.sum(x) if dtype is None else L.sum(x, dtype=dtype),
    "sum.dim_IntList": lambda L, x, dim, keepdim, dtype: L.sum(x, dim=dim, keepdim=keepdim),
    "mean": lambda L, x, dtype: L.mean(x),
    "mean.dim": lambda L, x, dim, keepdim, dtype: L.mean(x, dim=dim, keepdim=keepdim),
    "prod": lambda L, x, dtype: L.prod(x),
    "prod.dim_int": lambda L, x, dim, keepdim, dtype: L.prod(x, dim, keepdim=keepdim),
    "max.dim": lambda L, x, dim, keepdim: tuple(L.max(x, dim, keepdim=keepdim)),
    "max": lambda L, x: L.max(x),
    "min.dim": lambda L, x, dim, keepdim: tuple(L.min(x, dim, keepdim=keepdim)),
    "min": lambda L, x: L.min(x),
    "amax": lambda L, x, dim, keepdim: L.amax(x, dim, keepdim=keepdim),
    "amin": lambda L, x, dim, keepdim: L.amin(x, dim, keepdim=keepdim),
    "var.correction": lambda L, x, dim, c, keepdim: L.var(x, dim=dim, correction=c, keepdim=keepdim),
    "std.correction": lambda L, x, dim, c, keepdim: L.std(x, dim=dim, correction=c, keepdim=keepdim),
    "logsumexp": lambda L, x, dim, keepdim: L.logsumexp(x, dim, keepdim=keepdim),
    "_softmax": lambda L, x, dim, half: L.softmax(x, dim),
    "_log_softmax": lambda L, x, dim, half: L.log_softmax(x, dim),
    "mm": lambda L, a, b: L.mm(a, b),
    "addmm": TorchCall(lambda L, b, m1, m2: L.addmm(b, m1, m2),
                       lambda L, b, m1, m2: L.nn.functional.linear(m1, m2.t(), b)),
    "mv": lambda L, a, b: L.mv(a, b),
    "dot": lambda L, a, b: L.dot(a, b),
    "outer": lambda L, a, b: L.outer(a, b),
    "bmm": lambda L, a, b: L.bmm(a, b),
    "expand": lambda L, x, size, implicit: x.expand(*size),
    "view": lambda L, x, size: x.view(size),
    "_unsafe_view": lambda L, x, size: _aten(L, "_unsafe_view")(x, size),
    "t": lambda L, x: L.t(x),
    "transpose.int": lambda L, x, d0, d1: L.transpose(x, d0, d1),
    "permute": lambda L, x, dims: L.permute(x, dims),
    "squeeze": lambda L, x: L.squeeze(x),
    "squeeze.dim": lambda L, x, d: L.squeeze(x, d),
    "squeeze.dims": lambda L, x, dims: L.squeeze(x, dims),
    # the in-place squeezes: torch users reach them as x.squeeze_(); symgrad has no squeeze_ method
    # (matmul(vector, matrix) is checked in test_public_grad_fn_matches_torch instead)
    "squeeze_": TorchCall(lambda L, x: x.clone().squeeze_(), None),
    "squeeze_.dim": TorchCall(lambda L, x, d: x.clone().squeeze_(d), None),
    "cat": lambda L, ts, dim: L.cat(ts, dim),
    "_to_copy": _to_copy,
    "clone": lambda L, x: L.clone(x),
    "zero_": lambda L, x: x.clone().zero_(),
    "select.int": lambda L, x, dim, index: L.select(x, dim, index),
    "select_backward": lambda L, g, sizes, dim, index: _aten(L, "select_backward")(g, sizes, dim, index),
    "slice.Tensor": lambda L, x, dim, start, end, step: x[(slice(None),) * dim + (slice(start, end, step),)],
    "slice_backward": lambda L, g, sizes, dim, start, end, step: _aten(L, "slice_backward")(
        g, sizes, dim, start, end, step),
    "unsqueeze": lambda L, x, dim: L.unsqueeze(x, dim),
    "diagonal": lambda L, x, offset, d1, d2: L.diagonal(x, offset, d1, d2),
    "diagonal_backward": lambda L, g, sizes, offset, d1, d2: _aten(L, "diagonal_backward")(g, sizes, offset, d1, d2),
    "as_strided": lambda L, x, size, stride, offset, positions: x.as_strided(size, stride, offset),
    "index.Tensor": lambda L, x, idx: x[idx],
    # torch spells it index_put(accumulate=True) on zeros (IndexPutBackward0): names not comparable
    "index_put_add": TorchCall(_index_put_add, _index_put_add, grad_fn=False),
    "unbind.int": lambda L, x, dim: L.unbind(x, dim),
    "stack": lambda L, ts, dim: L.stack(ts, dim),
    "copy_slices": _setitem,
    "gt.Tensor": lambda L, a, b: L.gt(a, b), "lt.Tensor": lambda L, a, b: L.lt(a, b),
    "ge.Tensor": lambda L, a, b: L.ge(a, b), "le.Tensor": lambda L, a, b: L.le(a, b),
    "eq.Tensor": lambda L, a, b: L.eq(a, b), "ne.Tensor": lambda L, a, b: L.ne(a, b),
    "heaviside": lambda L, a, b: L.heaviside(a, b if not isinstance(b, float) else L.tensor(b, dtype=a.dtype)),
    "logical_and": lambda L, a, b: L.logical_and(a, b), "logical_or": lambda L, a, b: L.logical_or(a, b),
    "logical_not": lambda L, a: L.logical_not(a),
    "index_put": lambda L, x, idx, v, acc: L.index_put(x, idx if isinstance(idx, tuple) else (idx,), v, acc),
    "floor_divide": lambda L, a, b: L.floor_divide(a, b),
    "trunc": _unary("trunc"),
    **{k: (lambda name: lambda L, a, b: getattr(L, name)(a, b))(k.split(".")[0]) for k in (
        "remainder.Scalar", "remainder.Tensor", "fmod.Scalar", "fmod.Tensor", "bitwise_and.Tensor",
        "bitwise_or.Tensor", "bitwise_xor.Tensor", "bitwise_left_shift.Tensor", "bitwise_right_shift.Tensor")},
    "bitwise_not": lambda L, a: L.bitwise_not(a),
    # numpy surface: linear algebra. torch's nodes are the *_ex variants (LinalgInvExBackward0...), so the
    # names are not compared. eigh and cholesky read one triangle: torch gets that symmetric matrix, and
    # the sign of each eigen/singular vector is taken from numpy's (LAPACK may pick either).
    "linalg_inv": TorchCall(lambda L, A: L.linalg.inv(A), grad_fn=False),
    "linalg_det": lambda L, A: L.linalg.det(A),
    "linalg_slogdet": TorchCall(lambda L, A: tuple(L.linalg.slogdet(A)), grad_fn=False),
    "linalg_solve": TorchCall(lambda L, A, B: L.linalg.solve(A, B), grad_fn=False),
    "linalg_cholesky": TorchCall(lambda L, A, upper: L.linalg.cholesky(_one_triangle(A, upper), upper=upper)),
    "linalg_eigh": TorchCall(_torch_eigh),
    "linalg_svd": TorchCall(_torch_svd),
    "linalg_qr": TorchCall(_torch_qr),
    # numpy surface: reductions, scans and sorting
    "cumsum": lambda L, x, dim: L.cumsum(x, dim),
    "cumprod": lambda L, x, dim: L.cumprod(x, dim),
    "argsort": lambda L, x, dim, descending: L.argsort(x, dim=dim, descending=descending, stable=True),
    "argmax": lambda L, x, dim, keepdim: L.argmax(x, dim=dim, keepdim=keepdim),
    "argmin": lambda L, x, dim, keepdim: L.argmin(x, dim=dim, keepdim=keepdim),
    "isnan": lambda L, x: L.isnan(x),
    "isinf": lambda L, x: L.isinf(x),
    "isfinite": lambda L, x: L.isfinite(x),
    # torch surface: sorting, selection and repetition
    "sort": lambda L, x, dim, descending: tuple(L.sort(x, dim, descending)),
    "sort.stable": lambda L, x, stable, dim, descending: tuple(L.sort(x, stable=stable, dim=dim,
                                                                     descending=descending)),
    "topk": lambda L, x, k, dim, largest, sorted: tuple(L.topk(x, k, dim, largest, sorted)),
    "gather": lambda L, x, dim, index: L.gather(x, dim, index),
    "repeat": lambda L, x, repeats: x.repeat(*repeats),
    "masked_fill.Scalar": lambda L, x, mask, value: L.masked_fill(x, mask, value),
    # numpy surface: shape, assembly and indexing
    "flip": lambda L, x, dims: L.flip(x, dims),
    # numpy surface, elementwise family (torch has no cbrt; its trigamma is good to only ~1e-9, so
    # digamma's gradient and polygamma are compared with scipy in tests/test_numpy_usage_elementwise.py)
    **{k: _unary(k) for k in ("asin", "acos", "asinh", "acosh", "atanh", "log10", "sinc", "deg2rad", "rad2deg",
                              "floor", "ceil", "round", "erfc", "logit", "lgamma")},
    "round.decimals": lambda L, x, d: L.round(x, decimals=d),
    **{k: (lambda name: lambda L, a, b: getattr(L, name)(a, b))(k.split(".")[0]) for k in (
        "atan2", "hypot", "logaddexp", "logaddexp2", "xlogy.Tensor")},
    "special_xlog1py": TorchCall(lambda L, a, b: L.special.xlog1py(a, b), lambda L, a, b: L.xlog1py(a, b)),
}


def _to_lib(lib, op, args, diff=True):
    """The sample's arguments for ``lib`` (torch or symgrad): float arrays become float64 leaves."""
    out, leaves = [], []

    def leaf(arr, requires):
        t = lib.tensor(arr, dtype=lib.float64, requires_grad=requires)
        if requires:
            leaves.append(t)
        return t

    def index(v):
        if isinstance(v, np.ndarray):
            return lib.tensor(v)
        if isinstance(v, tuple):
            return tuple(index(i) for i in v)
        return v

    for a, v in zip(op.schema.args, args):
        requires = diff and a.name in op.rule.formulas
        if a.is_tensor_list:
            out.append([leaf(x, requires) for x in v])
        elif a.is_tensor and isinstance(v, np.ndarray):
            out.append(leaf(v, requires) if _is_float_array(v) else lib.tensor(v))
        elif isinstance(v, symgrad.dtype):
            out.append(getattr(lib, v.name))
        elif a.type == "Index":
            out.append(index(v))
        else:
            out.append(v)
    return out, leaves


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


@pytest.mark.parametrize("key,variant", _case_params(KEYS))
def test_matches_torch(key, variant):
    torch = pytest.importorskip("torch")
    args = _require_sample(key, variant)
    if key not in TORCH_EQUIVALENT:
        pytest.skip(f"no torch equivalent listed for {key}")
    spec = TORCH_EQUIVALENT[key]
    torch_fn, sg_public = (spec.torch, spec.symgrad) if isinstance(spec, TorchCall) else (spec, spec)
    check_grad_fn = spec.grad_fn if isinstance(spec, TorchCall) else True
    op = OPS[key]
    where = f"{key}{_describe(args)}"

    # forward values and gradients: symgrad's op (through apply) against torch's call
    call = Call(op, args)
    outs = call.run()
    t_args, t_leaves = _to_lib(torch, op, args)
    t_outs = _as_tuple(torch_fn(torch, *t_args))
    assert len(outs) == len(t_outs), f"{where}: {len(outs)} outputs, torch gives {len(t_outs)}"
    for k, (o, to) in enumerate(zip(outs, t_outs)):
        assert tuple(o.shape) == tuple(to.shape), \
            f"{where}: output {k} shape {list(o.shape)} vs torch {list(to.shape)}"
        assert o.dtype.name == str(to.dtype).replace("torch.", ""), \
            f"{where}: output {k} dtype {o.dtype} vs {to.dtype}"
        np.testing.assert_allclose(_np(o), _np(to), rtol=1e-10, atol=1e-12, err_msg=f"{where}: output {k}")
    idx = differentiable_outputs(op, len(outs))
    for k, to in enumerate(t_outs):
        if t_leaves:
            assert to.requires_grad == (k in idx), \
                f"{where}: torch output {k} requires_grad={to.requires_grad}, table says {k in idx}"
    if call.leaves:
        rng = np.random.default_rng(_seed(key, 7))
        weights = call.weights(outs, rng)
        grads = symgrad.autograd.grad([outs[k] for k in idx], call.leaves,
                                      grad_outputs=[symgrad.tensor(w, dtype=symgrad.float64)
                                                    for w in weights],
                                      allow_unused=True)
        t_grads = torch.autograd.grad([t_outs[k] for k in idx], t_leaves,
                                      grad_outputs=[torch.tensor(w) for w in weights], allow_unused=True)
        for (pos, j), g, tg, leaf in zip(call.slots, grads, t_grads, call.leaves):
            name = op.schema.args[pos].name + ("" if j is None else f"[{j}]")
            want = np.zeros(tuple(leaf.shape)) if tg is None else _np(tg)
            got = np.zeros(tuple(leaf.shape)) if g is None else g.numpy()
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{where}: gradient of {name!r}")

    # the public symgrad function, called the way a torch user would: same values and grad_fn
    if sg_public is None:
        return
    s_args, _ = _to_lib(symgrad, op, args)
    s_outs = _as_tuple(sg_public(symgrad, *s_args))
    t_args, _ = _to_lib(torch, op, args)
    t_outs = _as_tuple(torch_fn(torch, *t_args))
    for k, (o, to) in enumerate(zip(s_outs, t_outs)):
        np.testing.assert_allclose(_np(o), _np(to), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{where}: public call, output {k}")
        if check_grad_fn:
            assert type(o.grad_fn).__name__ == type(to.grad_fn).__name__, (
                f"{where}: public call, output {k}: grad_fn {type(o.grad_fn).__name__} "
                f"vs torch {type(to.grad_fn).__name__}")


# Composite public calls whose recorded node a torch user sees (beyond one table entry per call).
PUBLIC_CALLS = {
    "clamp(min=)": (lambda L, x: L.clamp(x, min=0.1), [(3, 4)]),
    "clamp(max=)": (lambda L, x: L.clamp(x, max=0.1), [(3, 4)]),
    "clamp(tensor min)": (lambda L, x, m: L.clamp(x, min=m), [(3, 4), (1, 4)]),
    "2 ** x": (lambda L, x: 2 ** x, [(3,)]),
    "3 - x": (lambda L, x: 3 - x, [(3,)]),
    "x - 3": (lambda L, x: x - 3, [(3,)]),
    "1 / x": (lambda L, x: 1 / x, [(3,)]),
    "x ** 2": (lambda L, x: x ** 2, [(3,)]),
    "x.square()": (lambda L, x: x.square(), [(3,)]),
    "x[0]": (lambda L, x: x[0], [(3, 4)]),
    "x[:, 1:3]": (lambda L, x: x[:, 1:3], [(3, 4)]),
    "x[None]": (lambda L, x: x[None], [(3, 4)]),
    "x[[0, 2, 0]]": (lambda L, x: x[[0, 2, 0]], [(3, 4)]),
    "x.sum(0)": (lambda L, x: x.sum(0), [(3, 4)]),
    "x.mean()": (lambda L, x: x.mean(), [(3, 4)]),
    "x.max()": (lambda L, x: L.max(x), [(3, 4)]),
    "max(x, 1).values": (lambda L, x: L.max(x, 1)[0], [(3, 4)]),
    "matmul vec@vec": (lambda L, a, b: L.matmul(a, b), [(3,), (3,)]),
    "matmul mat@vec": (lambda L, a, b: L.matmul(a, b), [(2, 3), (3,)]),
    "matmul vec@mat": (lambda L, a, b: L.matmul(a, b), [(3,), (3, 4)]),
    "matmul mat@mat": (lambda L, a, b: L.matmul(a, b), [(2, 3), (3, 4)]),
    "matmul batch@mat": (lambda L, a, b: L.matmul(a, b), [(2, 2, 3), (3, 4)]),
    "matmul batch@batch": (lambda L, a, b: L.matmul(a, b), [(2, 2, 3), (1, 3, 4)]),
    "matmul vec@batch": (lambda L, a, b: L.matmul(a, b), [(3,), (2, 3, 4)]),
    "reshape": (lambda L, x: x.reshape(4, 3), [(3, 4)]),
    "flatten": (lambda L, x: L.flatten(x), [(3, 4)]),
    "to float32": (lambda L, x: x.to(L.float32), [(3,)]),
    "setitem basic": (lambda L, x: _setitem(L, x, 1.0, 0), [(3, 4)]),
    "setitem slice": (lambda L, x: _setitem(L, x, 1.0, (slice(None), slice(1, 3))), [(3, 4)]),
    "setitem advanced": (lambda L, x: _setitem(L, x, 1.0, [0, 2]), [(3, 4)]),
    "softmax": (lambda L, x: L.softmax(x, -1), [(3, 4)]),
    "var": (lambda L, x: L.var(x), [(3, 4)]),
}


@pytest.mark.parametrize("name", list(PUBLIC_CALLS))
def test_public_grad_fn_matches_torch(name):
    torch = pytest.importorskip("torch")
    fn, shapes = PUBLIC_CALLS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    arrays = [D(rng, *s) for s in shapes]
    ys = fn(symgrad, *[symgrad.tensor(a, dtype=symgrad.float64, requires_grad=True) for a in arrays])
    ts = fn(torch, *[torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays])
    np.testing.assert_allclose(_np(ys), _np(ts), rtol=1e-6, err_msg=name)
    assert type(ys.grad_fn).__name__ == type(ts.grad_fn).__name__, \
        f"{name}: grad_fn {type(ys.grad_fn).__name__} vs torch {type(ts.grad_fn).__name__}"
