"""The benchmark workloads W1-W5 (benchmarks/README.md), as data.

Every workload is one forward+backward of a scalar loss and comes with

- ``make_inputs()``: deterministic inputs (seeded numpy ``default_rng``), a dict name -> array;
- ``numpy_forward(**inputs)``: the loss value in plain numpy (a Python float);
- ``numpy_value_and_grad(**inputs)``: a hand-written numpy gradient, ``(value, {name: grad})``
  for every name in ``grad_inputs`` - the "numpy hand grad" baseline;
- ``torch_like(T, **tensors)``: the loss written against a module parameter ``T`` with PyTorch's
  API only (``T.sin``, ``T.mean``, ``@``, ``T.logsumexp(..., dim=1)``, advanced indexing), so the
  same code runs with ``T = symgrad`` and ``T = torch``.

Workloads (float64 unless said):

- **W1** ``sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x))``, x of 1e6 and of 1e3 elements (and 1e7 for
  the benchmark suite's scaling runs), x ~ U(-3, 3).
- **W2** ``mean(tanh(x*w + b)**2)``, x[1000,1000], w[1000], b[1000] (broadcast over the last
  axis); grads for x, w, b.
- **W3** MLP ``mean((tanh(X@W1+b1)@W2+b2 - Y)**2)``, X[256,64], W1[64,128], b1[128], W2[128,1],
  b2[1], Y[256,1], float32 and float64; grads for W1, b1, W2, b2 (X and Y are data).
- **W4** per-call overhead: 20 chained elementwise ops on 10 elements, x ~ U(-1, 1), then ``sum``.
  The chain (7 mul, 3 add, 1 sub, 3 sin, 3 exp, 3 tanh; x re-enters at ops 4, 9, 13, 18; the
  comment gives the range of each value for x in [-1, 1], so everything stays finite)::

       1 a = x * 1.5       [-1.5, 1.5]     11 a = a * 0.5     [-0.5, 0.5]
       2 a = a + 0.25      [-1.25, 1.75]   12 a = exp(a)      [0.61, 1.65]
       3 a = sin(a)        [-1, 1]         13 a = a * x       [-1.65, 1.65]
       4 a = a * x         [-1, 1]         14 a = tanh(a)     (-1, 1)
       5 a = exp(a)        [0.37, 2.72]    15 a = a + 1.0     (0, 2)
       6 a = a - 1.0       [-0.63, 1.72]   16 a = a * a       (0, 4)
       7 a = tanh(a)       (-1, 1)         17 a = sin(a)      [-1, 1]
       8 a = a * a         [0, 1)          18 a = a * x       [-1, 1]
       9 a = a + x         (-1, 2)         19 a = exp(a)      [0.37, 2.72]
      10 a = sin(a)        [-1, 1]         20 a = tanh(a)     (0.35, 0.992)
      loss = sum(a)

- **W5** ``mean(logsumexp(L, axis=1) - L[range, labels])``, L[4096,512] ~ 3*N(0,1),
  labels[4096] ~ U{0..511} (int64); grad for L.

``python -m benchmarks.workloads`` checks every hand gradient against central finite differences.
:func:`sized` gives a copy of a workload with its batch dimension scaled (the suite's ``--size-scale``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

SEED = 20240601


@dataclass(frozen=True)
class Workload:
    """One benchmark workload: inputs, numpy reference, hand gradient and torch-like code."""

    name: str
    description: str
    make_inputs: Callable[[], dict[str, np.ndarray]]
    grad_inputs: tuple[str, ...]
    numpy_forward: Callable[..., float]
    numpy_value_and_grad: Callable[..., tuple[float, dict[str, np.ndarray]]]
    torch_like: Callable[..., object]
    dtype: str = "float64"
    rtol: float = 1e-6  # for checking an implementation against the numpy reference
    tags: tuple[str, ...] = field(default=())


def _rng(offset: int) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


# --- W1 ------------------------------------------------------------------------------------------

def _w1_inputs(n: int) -> Callable[[], dict[str, np.ndarray]]:
    def make() -> dict[str, np.ndarray]:
        return {"x": _rng(1).uniform(-3.0, 3.0, size=n)}

    return make


def w1_numpy_forward(x: np.ndarray) -> float:
    return float(np.sum(np.sin(x) * np.exp(-x * x) + np.log1p(x * x) * np.tanh(x)))


def w1_numpy_value_and_grad(x: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    xx = x * x
    s = np.sin(x)
    e = np.exp(-xx)
    t = np.tanh(x)
    l = np.log1p(xx)
    se = s * e
    value = float(np.sum(se + l * t))
    # d/dx: cos(x) e - 2x sin(x) e + 2x/(1+x^2) tanh(x) + log1p(x^2) (1 - tanh(x)^2)
    two_x = 2.0 * x
    g = np.cos(x)
    g *= e
    g -= two_x * se
    g += two_x / (1.0 + xx) * t
    t *= t
    np.subtract(1.0, t, out=t)
    g += l * t
    return value, {"x": g}


def w1_torch_like(T, x):
    return T.sum(T.sin(x) * T.exp(-x * x) + T.log1p(x * x) * T.tanh(x))


# --- W2 ------------------------------------------------------------------------------------------

def _w2_inputs(rows: int = 1000, cols: int = 1000) -> dict[str, np.ndarray]:
    r = _rng(2)
    return {
        "x": r.standard_normal((rows, cols)),
        "w": r.standard_normal(cols),
        "b": r.standard_normal(cols),
    }


def w2_numpy_forward(x, w, b) -> float:
    return float(np.mean(np.tanh(x * w + b) ** 2))


def w2_numpy_value_and_grad(x, w, b):
    t = x * w
    t += b
    np.tanh(t, out=t)
    t2 = t * t
    value = float(np.mean(t2))
    # d/du mean(tanh(u)^2) = 2 tanh(u) (1 - tanh(u)^2) / N
    np.subtract(1.0, t2, out=t2)
    g = t2
    g *= t
    g *= 2.0 / x.size
    gw = np.einsum("ij,ij->j", g, x)
    gb = g.sum(axis=0)
    g *= w
    return value, {"x": g, "w": gw, "b": gb}


def w2_torch_like(T, x, w, b):
    return T.mean(T.tanh(x * w + b) ** 2)


# --- W3 ------------------------------------------------------------------------------------------

def _w3_inputs(dtype, batch: int = 256) -> Callable[[], dict[str, np.ndarray]]:
    def make() -> dict[str, np.ndarray]:
        r = _rng(3)
        arrs = {
            "X": r.standard_normal((batch, 64)),
            "W1": r.standard_normal((64, 128)) / np.sqrt(64.0),
            "b1": 0.1 * r.standard_normal(128),
            "W2": r.standard_normal((128, 1)) / np.sqrt(128.0),
            "b2": 0.1 * r.standard_normal(1),
            "Y": r.standard_normal((batch, 1)),
        }
        return {k: v.astype(dtype) for k, v in arrs.items()}

    return make


def w3_numpy_forward(X, W1, b1, W2, b2, Y) -> float:
    return float(np.mean((np.tanh(X @ W1 + b1) @ W2 + b2 - Y) ** 2))


def w3_numpy_value_and_grad(X, W1, b1, W2, b2, Y):
    H = X @ W1
    H += b1
    np.tanh(H, out=H)
    R = H @ W2
    R += b2
    R -= Y
    value = float(np.mean(R * R))
    dP = R
    dP *= 2.0 / R.size
    dW2 = H.T @ dP
    db2 = dP.sum(axis=0)
    dZ = dP @ W2.T
    dZ *= 1.0 - H * H
    dW1 = X.T @ dZ
    db1 = dZ.sum(axis=0)
    return value, {"W1": dW1, "b1": db1, "W2": dW2, "b2": db2}


def w3_torch_like(T, X, W1, b1, W2, b2, Y):
    return T.mean((T.tanh(X @ W1 + b1) @ W2 + b2 - Y) ** 2)


# --- W4 ------------------------------------------------------------------------------------------

def _w4_inputs() -> dict[str, np.ndarray]:
    return {"x": _rng(4).uniform(-1.0, 1.0, size=10)}


def w4_numpy_forward(x) -> float:
    a = x * 1.5
    a = a + 0.25
    a = np.sin(a)
    a = a * x
    a = np.exp(a)
    a = a - 1.0
    a = np.tanh(a)
    a = a * a
    a = a + x
    a = np.sin(a)
    a = a * 0.5
    a = np.exp(a)
    a = a * x
    a = np.tanh(a)
    a = a + 1.0
    a = a * a
    a = np.sin(a)
    a = a * x
    a = np.exp(a)
    a = np.tanh(a)
    return float(np.sum(a))


def w4_numpy_value_and_grad(x):
    a2 = x * 1.5 + 0.25            # ops 1-2
    a3 = np.sin(a2)
    a5 = np.exp(a3 * x)            # ops 4-5
    a7 = np.tanh(a5 - 1.0)         # ops 6-7
    a9 = a7 * a7 + x               # ops 8-9
    a10 = np.sin(a9)
    a12 = np.exp(a10 * 0.5)        # ops 11-12
    a14 = np.tanh(a12 * x)         # ops 13-14
    a15 = a14 + 1.0
    a17 = np.sin(a15 * a15)        # ops 16-17
    a19 = np.exp(a17 * x)          # ops 18-19
    a20 = np.tanh(a19)
    value = float(np.sum(a20))
    g = 1.0 - a20 * a20            # d/d a19
    g *= a19                       # d/d a18
    gx = g * a17
    g *= x                         # d/d a17
    g *= np.cos(a15 * a15)         # d/d a16
    g *= 2.0 * a15                 # d/d a15 = d/d a14
    g *= 1.0 - a14 * a14           # d/d a13
    gx += g * a12
    g *= x                         # d/d a12
    g *= a12                       # d/d a11
    g *= 0.5                       # d/d a10
    g *= np.cos(a9)                # d/d a9
    gx += g
    g *= 2.0 * a7                  # d/d a7
    g *= 1.0 - a7 * a7             # d/d a6 = d/d a5
    g *= a5                        # d/d a4
    gx += g * a3
    g *= x                         # d/d a3
    g *= np.cos(a2)                # d/d a2 = d/d a1
    gx += 1.5 * g
    return value, {"x": gx}


def w4_torch_like(T, x):
    a = x * 1.5
    a = a + 0.25
    a = T.sin(a)
    a = a * x
    a = T.exp(a)
    a = a - 1.0
    a = T.tanh(a)
    a = a * a
    a = a + x
    a = T.sin(a)
    a = a * 0.5
    a = T.exp(a)
    a = a * x
    a = T.tanh(a)
    a = a + 1.0
    a = a * a
    a = T.sin(a)
    a = a * x
    a = T.exp(a)
    a = T.tanh(a)
    return T.sum(a)


# --- W5 ------------------------------------------------------------------------------------------

def _w5_inputs(rows: int = 4096, cols: int = 512) -> dict[str, np.ndarray]:
    r = _rng(5)
    return {
        "L": 3.0 * r.standard_normal((rows, cols)),
        "labels": r.integers(0, cols, size=rows, dtype=np.int64),
    }


def w5_numpy_forward(L, labels) -> float:
    m = L.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.sum(np.exp(L - m), axis=1))
    return float(np.mean(lse - L[np.arange(L.shape[0]), labels]))


def w5_numpy_value_and_grad(L, labels):
    n = L.shape[0]
    rows = np.arange(n)
    m = L.max(axis=1, keepdims=True)
    p = L - m
    np.exp(p, out=p)
    s = p.sum(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(s[:, 0])
    value = float(np.mean(lse - L[rows, labels]))
    # d/dL: (softmax(L) - onehot(labels)) / n
    p /= s
    p[rows, labels] -= 1.0
    p *= 1.0 / n
    return value, {"L": p}


def w5_torch_like(T, L, labels):
    return T.mean(T.logsumexp(L, dim=1) - L[T.arange(L.shape[0]), labels])


# --- the table -----------------------------------------------------------------------------------

W1_DESC = "sum(sin(x)*exp(-x*x) + log1p(x*x)*tanh(x))"

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("W1 1e6", W1_DESC + ", x[1_000_000]", _w1_inputs(1_000_000), ("x",),
                 w1_numpy_forward, w1_numpy_value_and_grad, w1_torch_like),
        Workload("W1 1e3", W1_DESC + ", x[1000]", _w1_inputs(1000), ("x",),
                 w1_numpy_forward, w1_numpy_value_and_grad, w1_torch_like),
        Workload("W1 1e7", W1_DESC + ", x[10_000_000]", _w1_inputs(10_000_000), ("x",),
                 w1_numpy_forward, w1_numpy_value_and_grad, w1_torch_like),
        Workload("W2", "mean(tanh(x*w + b)**2), x[1000,1000], w[1000], b[1000]", _w2_inputs,
                 ("x", "w", "b"), w2_numpy_forward, w2_numpy_value_and_grad, w2_torch_like),
        Workload("W3 f32", "mean((tanh(X@W1+b1)@W2+b2 - Y)**2), X[256,64], W1[64,128], W2[128,1], float32",
                 _w3_inputs(np.float32), ("W1", "b1", "W2", "b2"), w3_numpy_forward,
                 w3_numpy_value_and_grad, w3_torch_like, dtype="float32", rtol=1e-4),
        Workload("W3 f64", "mean((tanh(X@W1+b1)@W2+b2 - Y)**2), X[256,64], W1[64,128], W2[128,1]",
                 _w3_inputs(np.float64), ("W1", "b1", "W2", "b2"), w3_numpy_forward,
                 w3_numpy_value_and_grad, w3_torch_like),
        Workload("W4", "20 chained elementwise ops (mul/add/sub/sin/exp/tanh) on x[10], then sum",
                 _w4_inputs, ("x",), w4_numpy_forward, w4_numpy_value_and_grad, w4_torch_like),
        Workload("W5", "mean(logsumexp(L, axis=1) - L[range, labels]), L[4096,512]", _w5_inputs,
                 ("L",), w5_numpy_forward, w5_numpy_value_and_grad, w5_torch_like),
    ]
}


def w1_sized(n: int) -> Workload:
    """W1 on ``x[n]`` (the suite's runtime-vs-N curve)."""
    return replace(WORKLOADS["W1 1e6"], name=f"W1 n={n}", description=W1_DESC + f", x[{n}]",
                   make_inputs=_w1_inputs(n))


def sized(name: str, scale: float) -> Workload:
    """Workload ``name`` with its batch dimension multiplied by ``scale`` (at least 1; same name).

    W1: the number of elements; W2: the rows of x; W3: the batch (rows of X and Y); W5: the rows of L;
    W4 (per-call overhead, 10 elements) is never scaled.  ``scale == 1`` returns the workload itself.
    """
    w = WORKLOADS[name]
    if scale == 1 or name == "W4":
        return w
    rows = lambda n: max(1, round(n * scale))  # noqa: E731
    if name.startswith("W1"):
        n = rows(int(float(name.split()[1])))
        make, desc = _w1_inputs(n), W1_DESC + f", x[{n}]"
    elif name == "W2":
        n = rows(1000)
        make, desc = (lambda: _w2_inputs(n)), f"mean(tanh(x*w + b)**2), x[{n},1000], w[1000], b[1000]"
    elif name.startswith("W3"):
        n = rows(256)
        dtype = np.float32 if w.dtype == "float32" else np.float64
        make, desc = _w3_inputs(dtype, n), w.description.replace("X[256,64]", f"X[{n},64]")
    elif name == "W5":
        n = rows(4096)
        make, desc = (lambda: _w5_inputs(n)), f"mean(logsumexp(L, axis=1) - L[range, labels]), L[{n},512]"
    else:
        raise KeyError(name)
    return replace(w, description=desc, make_inputs=make)


# --- checking ------------------------------------------------------------------------------------

def compare(name: str, got, want, rtol: float) -> str | None:
    """``None`` if ``got`` matches ``want``, else a one-line description of the mismatch.

    Elementwise ``|got - want| <= rtol * max(|want|, max|want| * 1e-3)``: relative to each
    element, but with an absolute floor of ``rtol * 1e-3 * max|want|`` so gradient elements that are
    a cancellation of larger terms (near zero) do not fail on rounding alone.
    """
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != reference shape {want.shape}"
    if not np.all(np.isfinite(got)):
        return f"{name}: {int(np.sum(~np.isfinite(got)))} non-finite values"
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    tol = rtol * np.maximum(np.abs(want), 1e-3 * scale)
    err = np.abs(got - want)
    bad = err > tol
    if np.any(bad):
        i = int(np.argmax(err - tol))
        idx = np.unravel_index(i, want.shape) if want.ndim else ()
        return (f"{name}: {int(bad.sum())}/{want.size} elements off (rtol {rtol:g}); worst at index "
                f"{tuple(int(j) for j in idx)}: got {float(got.flat[i])!r}, want {float(want.flat[i])!r}, "
                f"max |err| {float(err.max()):.3g}")
    return None


def check_hand_gradient(w: Workload, h: float = 1e-6, rtol: float = 1e-5) -> list[str]:
    """Check ``w.numpy_value_and_grad`` against ``numpy_forward`` and central finite differences.

    Done in float64 (float32 workloads are upcast), one random direction per gradient input:
    ``(f(a + h v) - f(a - h v)) / 2h`` against ``<grad_a, v>``.  Returns the problems found.
    """
    inputs = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in w.make_inputs().items()}
    problems = []
    value, grads = w.numpy_value_and_grad(**{k: v.copy() for k, v in inputs.items()})
    ref = w.numpy_forward(**inputs)
    if abs(value - ref) > 1e-12 * max(1.0, abs(ref)):
        problems.append(f"{w.name}: hand value {value!r} != numpy forward {ref!r}")
    if set(grads) != set(w.grad_inputs):
        problems.append(f"{w.name}: hand grads for {sorted(grads)}, expected {sorted(w.grad_inputs)}")
    r = np.random.default_rng(SEED + 99)
    for name in w.grad_inputs:
        a = inputs[name]
        v = r.standard_normal(a.shape)
        plus = dict(inputs, **{name: a + h * v})
        minus = dict(inputs, **{name: a - h * v})
        fd = (w.numpy_forward(**plus) - w.numpy_forward(**minus)) / (2 * h)
        an = float(np.sum(grads[name] * v))
        if abs(fd - an) > rtol * max(abs(an), abs(fd), 1e-8):
            problems.append(f"{w.name}: d/d{name} . v = {an!r} but finite differences give {fd!r}")
    return problems


def main() -> int:
    failed = False
    for w in WORKLOADS.values():
        problems = check_hand_gradient(w)
        print(f"{w.name:7s} hand gradient vs finite differences: {'ok' if not problems else 'FAILED'}")
        for p in problems:
            print("   ", p)
        failed = failed or bool(problems)
    return int(failed)


if __name__ == "__main__":
    raise SystemExit(main())
