"""Hand-written fused forward+backward Numba kernels for W1-W5 (the suite's baseline).

Each workload has a serial kernel (``@njit``) and a parallel one (``@njit(parallel=True)``, ``prange``
over the outer loop), both with scalar libm math (``math.sin``, ``math.exp``, ...: the pip builds of
Numba have no vector math library, so these calls are not vectorised).  A kernel takes the workload's
inputs positionally, in the order of ``make_inputs()``, and returns ``(value, *grads)`` with one new
gradient array per name of ``grad_inputs``: like every other implementation in the suite it
allocates its outputs on every call.  Matrix products (W3) call BLAS through ``np.dot``.

``cache=True``: the compiled kernels are kept in ``benchmarks/__pycache__`` between runs.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

_opts = {"cache": True, "error_model": "numpy"}
njit = numba.njit(**_opts)
njit_par = numba.njit(parallel=True, **_opts)


# --- W1: sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x)) -----------------------------------------------

@numba.njit(inline="always", **_opts)
def _w1_point(v):
    s, c = math.sin(v), math.cos(v)
    e = math.exp(-v * v)
    l1 = math.log1p(v * v)
    th = math.tanh(v)
    value = s * e + l1 * th
    grad = c * e - 2.0 * v * s * e + 2.0 * v / (1.0 + v * v) * th + l1 * (1.0 - th * th)
    return value, grad


@njit
def w1_serial(x):
    grad = np.empty_like(x)
    total = 0.0
    for i in range(x.shape[0]):
        v, grad[i] = _w1_point(x[i])
        total += v
    return total, grad


@njit_par
def w1_parallel(x):
    grad = np.empty_like(x)
    total = 0.0
    for i in prange(x.shape[0]):
        v, g = _w1_point(x[i])
        grad[i] = g
        total += v
    return total, grad


# --- W2: mean(tanh(x*w + b)**2) -------------------------------------------------------------------

@njit
def w2_serial(x, w, b):
    n, m = x.shape
    gx = np.empty_like(x)
    gw = np.zeros_like(w)
    gb = np.zeros_like(b)
    scale = 1.0 / (n * m)
    total = 0.0
    for i in range(n):
        for j in range(m):
            t = math.tanh(x[i, j] * w[j] + b[j])
            total += t * t
            d = 2.0 * t * (1.0 - t * t) * scale
            gx[i, j] = d * w[j]
            gw[j] += d * x[i, j]
            gb[j] += d
    return total * scale, gx, gw, gb


@njit_par
def _w2_parallel(x, w, b, threads):
    n, m = x.shape
    gx = np.empty_like(x)
    chunks = max(1, min(n, threads))
    part_w = np.zeros((chunks, m))
    part_b = np.zeros((chunks, m))
    part_t = np.zeros(chunks)
    scale = 1.0 / (n * m)
    for c in prange(chunks):  # one block of rows per thread, private column sums
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            for j in range(m):
                t = math.tanh(x[i, j] * w[j] + b[j])
                part_t[c] += t * t
                d = 2.0 * t * (1.0 - t * t) * scale
                gx[i, j] = d * w[j]
                part_w[c, j] += d * x[i, j]
                part_b[c, j] += d
    return part_t.sum() * scale, gx, part_w.sum(axis=0), part_b.sum(axis=0)


def w2_parallel(x, w, b):
    return _w2_parallel(x, w, b, numba.get_num_threads())


# --- W3: mean((tanh(X@W1+b1)@W2+b2 - Y)**2) -------------------------------------------------------

@njit
def w3_serial(X, W1, b1, W2, b2, Y):
    n, h = X.shape[0], W1.shape[1]
    H = np.dot(X, W1)
    for i in range(n):
        for j in range(h):
            H[i, j] = math.tanh(H[i, j] + b1[j])
    P = np.dot(H, W2)
    dP = np.empty_like(P)
    scale = 2.0 / n
    total = 0.0
    for i in range(n):
        r = P[i, 0] + b2[0] - Y[i, 0]
        total += r * r
        dP[i, 0] = r * scale
    gW2 = np.dot(H.T, dP)
    gb2 = np.empty_like(b2)
    gb2[0] = dP.sum()
    dZ = np.empty_like(H)
    gb1 = np.zeros_like(b1)
    for i in range(n):
        d = dP[i, 0]
        for j in range(h):
            t = H[i, j]
            v = d * W2[j, 0] * (1.0 - t * t)
            dZ[i, j] = v
            gb1[j] += v
    gW1 = np.dot(X.T, dZ)
    return total / n, gW1, gb1, gW2, gb2


@njit_par
def w3_parallel(X, W1, b1, W2, b2, Y):
    n, h = X.shape[0], W1.shape[1]
    H = np.dot(X, W1)
    for i in prange(n):
        for j in range(h):
            H[i, j] = math.tanh(H[i, j] + b1[j])
    P = np.dot(H, W2)
    dP = np.empty_like(P)
    scale = 2.0 / n
    total = 0.0
    for i in prange(n):
        r = P[i, 0] + b2[0] - Y[i, 0]
        total += r * r
        dP[i, 0] = r * scale
    gW2 = np.dot(H.T, dP)
    gb2 = np.empty_like(b2)
    gb2[0] = dP.sum()
    dZ = np.empty_like(H)
    for i in prange(n):
        d = dP[i, 0]
        for j in range(h):
            t = H[i, j]
            dZ[i, j] = d * W2[j, 0] * (1.0 - t * t)
    gb1 = dZ.sum(axis=0)
    gW1 = np.dot(X.T, dZ)
    return total / n, gW1, gb1, gW2, gb2


# --- W4: 20 chained elementwise ops, then sum -----------------------------------------------------

@numba.njit(inline="always", **_opts)
def _w4_point(x):
    a2 = x * 1.5 + 0.25
    a3 = math.sin(a2)
    a5 = math.exp(a3 * x)
    a7 = math.tanh(a5 - 1.0)
    a9 = a7 * a7 + x
    a10 = math.sin(a9)
    a12 = math.exp(a10 * 0.5)
    a14 = math.tanh(a12 * x)
    a15 = a14 + 1.0
    a16 = a15 * a15
    a17 = math.sin(a16)
    a19 = math.exp(a17 * x)
    a20 = math.tanh(a19)
    g = (1.0 - a20 * a20) * a19      # d/d a18
    gx = g * a17
    g *= x * math.cos(a16) * 2.0 * a15 * (1.0 - a14 * a14)   # d/d a13
    gx += g * a12
    g *= x * a12 * 0.5 * math.cos(a9)                          # d/d a9
    gx += g
    g *= 2.0 * a7 * (1.0 - a7 * a7) * a5                       # d/d a4
    gx += g * a3
    g *= x * math.cos(a2)                                      # d/d a1
    gx += 1.5 * g
    return a20, gx


@njit
def w4_serial(x):
    grad = np.empty_like(x)
    total = 0.0
    for i in range(x.shape[0]):
        v, grad[i] = _w4_point(x[i])
        total += v
    return total, grad


@njit_par
def w4_parallel(x):
    grad = np.empty_like(x)
    total = 0.0
    for i in prange(x.shape[0]):
        v, g = _w4_point(x[i])
        grad[i] = g
        total += v
    return total, grad


# --- W5: mean(logsumexp(L, axis=1) - L[range, labels]) --------------------------------------------

@numba.njit(inline="always", **_opts)
def _w5_row(L, labels, g, i, inv_n):
    m = L.shape[1]
    mx = L[i, 0]
    for j in range(1, m):
        if L[i, j] > mx:
            mx = L[i, j]
    s = 0.0
    for j in range(m):
        e = math.exp(L[i, j] - mx)
        g[i, j] = e
        s += e
    c = inv_n / s
    for j in range(m):
        g[i, j] *= c
    g[i, labels[i]] -= inv_n
    return mx + math.log(s) - L[i, labels[i]]


@njit
def w5_serial(L, labels):
    n = L.shape[0]
    g = np.empty_like(L)
    total = 0.0
    for i in range(n):
        total += _w5_row(L, labels, g, i, 1.0 / n)
    return total / n, g


@njit_par
def w5_parallel(L, labels):
    n = L.shape[0]
    g = np.empty_like(L)
    total = 0.0
    for i in prange(n):
        total += _w5_row(L, labels, g, i, 1.0 / n)
    return total / n, g


KERNELS = {  # workload family -> (serial, parallel)
    "W1": (w1_serial, w1_parallel),
    "W2": (w2_serial, w2_parallel),
    "W3": (w3_serial, w3_parallel),
    "W4": (w4_serial, w4_parallel),
    "W5": (w5_serial, w5_parallel),
}


def kernels_for(workload_name: str):
    """``(serial, parallel)`` for a workload name such as ``"W1 1e6"``, ``"W3 f32"`` or ``"W1 n=1000"``."""
    return KERNELS[workload_name.split()[0]]
