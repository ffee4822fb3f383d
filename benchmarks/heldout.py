"""Held-out workloads (issue 21): losses unlike W1-W5, timed against jax.jit, torch and hand numpy.

    python -m benchmarks.heldout                 # the full run (torch.compile included)
    python -m benchmarks.heldout --quick         # fewer samples, no torch.compile (add --torch-compile)
    python -m benchmarks.heldout --parts table   # only the steady-state table (``cold``: first gradients)
    python -m benchmarks.heldout --check         # only the hand gradients against finite differences

Every workload is a :class:`benchmarks.workloads.Workload` (inputs, numpy forward, hand-written numpy
gradient checked against finite differences, and torch-like code run with ``T`` = symgrad, torch or the
jax namespace :func:`jax_namespace`), float64:

- **heat**: 1-D heat-equation residual on u[1e6], ``dx = 1/(n-1)``,
  ``r = (u[2:] - 2*u[1:-1] + u[:-2]) / dx**2 - f[1:-1]``, ``sum(r**2)``; grad for u.
- **tv**: total-variation denoising of a 512x512 image with forward differences cropped to 511x511,
  ``0.5*sum((x-y)**2) + lam*sum(sqrt(dx**2 + dy**2 + eps))``, lam 0.1, eps 1e-3; grad for x.
- **rowpen**: a per-row smoothness penalty on u[1024,1024] with a row sum between the slices and the
  root, ``sum(sqrt(sum((u[:, 1:] - u[:, :-1])**2, dim=1) + eps))``, eps 1e-3; grad for u.
- **embbag**: embedding bag, E[50_000,64], 200_000 tokens (int64) in 20_000 bags (sorted bag ids),
  ``h = scatter-add of E[tok] into bags`` (``np.add.at`` in the hand gradient, ``index_put(...,
  accumulate=True)`` in the torch-like code, ``.at[].add`` under jax), ``sum(tanh(h @ W))``, W[64,16];
  grads for E and W.
- **rnn**: a tanh RNN unrolled by a Python loop over 10 steps (batch 64, input 32, hidden 64,
  ``h0 = 0``), readout ``mean((h_T @ Wo - y)**2)``; grads for Wx, Wh, b, Wo.
- **attention**: single-head scaled dot-product attention, X[8,128,64], ``Q, K, V = X@Wq, X@Wk, X@Wv``,
  ``sum((softmax(Q @ K^T / sqrt(64)) @ V)**2)``; grads for Wq, Wk, Wv.

For the cold first-gradient measurement (``--parts cold``, each tool in a fresh process with empty
caches; :func:`benchmarks.latency.cold_first_gradients`) there are also **logreg** (a logistic
regression, X[2000,50]) and the MLP W3 of :mod:`benchmarks.workloads`; :data:`COLD_WORKLOADS` names them.
symgrad runs there as a user's process runs it, tiered (the steady-state table builds the kernels first).

:func:`make_heldout` builds the workloads at other sizes (``small=True``: the sizes of the tests).
Timing follows :mod:`benchmarks.suite`: every implementation is checked against the numpy reference
before it is timed, one thread, round-robin medians; ratios are to jax.jit's median of the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from .workloads import SEED, WORKLOADS, Workload, check_hand_gradient

# --- heat: 1-D heat-equation residual ---------------------------------------------------------------

def _heat_inputs(n: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 21)
        grid = np.linspace(0.0, 1.0, n)
        u = np.sin(np.pi * grid) + 1e-6 * r.standard_normal(n)
        f = -np.pi ** 2 * np.sin(np.pi * grid)
        return {"u": u, "f": f}

    return make


def heat_numpy_forward(u, f) -> float:
    dx = 1.0 / (u.shape[0] - 1)
    r = (u[2:] - 2.0 * u[1:-1] + u[:-2]) / dx ** 2 - f[1:-1]
    return float(np.sum(r * r))


def heat_numpy_value_and_grad(u, f):
    dx = 1.0 / (u.shape[0] - 1)
    r = u[2:] - 2.0 * u[1:-1]
    r += u[:-2]
    r /= dx ** 2
    r -= f[1:-1]
    value = float(np.dot(r, r))
    c = r
    c *= 2.0 / dx ** 2            # d loss / d (u[i+1] - 2 u[i] + u[i-1]) at each interior point
    g = np.zeros_like(u)
    g[2:] += c
    g[1:-1] -= 2.0 * c
    g[:-2] += c
    return value, {"u": g}


def heat_torch_like(T, u, f):
    dx = 1.0 / (u.shape[0] - 1)
    r = (u[2:] - 2.0 * u[1:-1] + u[:-2]) / dx ** 2 - f[1:-1]
    return T.sum(r ** 2)


# --- tv: total-variation denoising ------------------------------------------------------------------

TV_LAM = 0.1
TV_EPS = 1e-3


def _tv_inputs(n: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 22)
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        clean = ((i // max(1, n // 4) + j // max(1, n // 4)) % 2).astype(np.float64)  # a checkerboard
        y = clean + 0.2 * r.standard_normal((n, n))
        x = y + 0.05 * r.standard_normal((n, n))
        return {"x": x, "y": y}

    return make


def tv_numpy_forward(x, y) -> float:
    dx = x[:-1, 1:] - x[:-1, :-1]
    dy = x[1:, :-1] - x[:-1, :-1]
    return float(0.5 * np.sum((x - y) ** 2) + TV_LAM * np.sum(np.sqrt(dx * dx + dy * dy + TV_EPS)))


def tv_numpy_value_and_grad(x, y):
    dx = x[:-1, 1:] - x[:-1, :-1]
    dy = x[1:, :-1] - x[:-1, :-1]
    s = np.sqrt(dx * dx + dy * dy + TV_EPS)
    g = x - y
    value = float(0.5 * np.sum(g * g) + TV_LAM * np.sum(s))
    s = TV_LAM / s
    dx *= s                       # d loss / d dx
    dy *= s                       # d loss / d dy
    g[:-1, 1:] += dx
    g[1:, :-1] += dy
    g[:-1, :-1] -= dx + dy
    return value, {"x": g}


def tv_torch_like(T, x, y):
    dx = x[:-1, 1:] - x[:-1, :-1]
    dy = x[1:, :-1] - x[:-1, :-1]
    return 0.5 * T.sum((x - y) ** 2) + TV_LAM * T.sum(T.sqrt(dx ** 2 + dy ** 2 + TV_EPS))


# --- rowpen: per-row smoothness penalty (a row sum between shifted reads) ----------------------------

ROWPEN_EPS = 1e-3


def _rowpen_inputs(rows: int, cols: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 27)
        return {"u": np.cumsum(r.standard_normal((rows, cols)), axis=1) / np.sqrt(cols)}

    return make


def rowpen_numpy_forward(u) -> float:
    d = u[:, 1:] - u[:, :-1]
    return float(np.sum(np.sqrt(np.sum(d * d, axis=1) + ROWPEN_EPS)))


def rowpen_numpy_value_and_grad(u):
    d = u[:, 1:] - u[:, :-1]
    root = np.sqrt(np.einsum("ij,ij->i", d, d) + ROWPEN_EPS)
    value = float(root.sum())
    d /= root[:, None]                 # d loss / d d = d / root of its row
    g = np.zeros_like(u)
    g[:, 1:] += d
    g[:, :-1] -= d
    return value, {"u": g}


def rowpen_torch_like(T, u):
    d = u[:, 1:] - u[:, :-1]
    return T.sum(T.sqrt(T.sum(d * d, dim=1) + ROWPEN_EPS))


# --- embbag: embedding bag, scatter-add -------------------------------------------------------------

def _embbag_inputs(vocab: int, dim: int, tokens: int, bags: int, out: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 23)
        return {
            "E": 0.1 * r.standard_normal((vocab, dim)),
            "tok": r.integers(0, vocab, size=tokens, dtype=np.int64),
            "bag": np.sort(r.integers(0, bags, size=tokens, dtype=np.int64)),
            "W": r.standard_normal((dim, out)) / np.sqrt(dim),
        }

    return make


def _embbag(bags: int):
    """Forward, hand gradient and torch-like code for ``bags`` bags (a static size, not an input)."""

    def bag_sums(E, tok, bag):
        h = np.zeros((bags, E.shape[1]))
        np.add.at(h, bag, E[tok])
        return h

    def numpy_forward(E, tok, bag, W) -> float:
        return float(np.sum(np.tanh(bag_sums(E, tok, bag) @ W)))

    def numpy_value_and_grad(E, tok, bag, W):
        h = bag_sums(E, tok, bag)
        t = np.tanh(h @ W)
        value = float(np.sum(t))
        t *= t
        np.subtract(1.0, t, out=t)    # d loss / d (h @ W)
        dW = h.T @ t
        dh = t @ W.T
        dE = np.zeros_like(E)
        np.add.at(dE, tok, dh[bag])
        return value, {"E": dE, "W": dW}

    def torch_like(T, E, tok, bag, W):
        h = T.index_put(T.zeros((bags, E.shape[1]), dtype=E.dtype), (bag,), E[tok], accumulate=True)
        return T.sum(T.tanh(h @ W))

    return numpy_forward, numpy_value_and_grad, torch_like


# --- rnn: a tanh RNN unrolled by a Python loop ------------------------------------------------------

def _rnn_inputs(steps: int, batch: int, n_in: int, hidden: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 24)
        return {
            "xs": r.standard_normal((steps, batch, n_in)),
            "Wx": r.standard_normal((n_in, hidden)) / np.sqrt(n_in),
            "Wh": 0.9 * r.standard_normal((hidden, hidden)) / np.sqrt(hidden),
            "b": 0.1 * r.standard_normal(hidden),
            "Wo": r.standard_normal((hidden, 1)) / np.sqrt(hidden),
            "y": r.standard_normal((batch, 1)),
        }

    return make


def rnn_numpy_forward(xs, Wx, Wh, b, Wo, y) -> float:
    h = np.tanh(xs[0] @ Wx + b)
    for t in range(1, xs.shape[0]):
        h = np.tanh(xs[t] @ Wx + h @ Wh + b)
    return float(np.mean((h @ Wo - y) ** 2))


def rnn_numpy_value_and_grad(xs, Wx, Wh, b, Wo, y):
    hs = [np.tanh(xs[0] @ Wx + b)]
    for t in range(1, xs.shape[0]):
        hs.append(np.tanh(xs[t] @ Wx + hs[-1] @ Wh + b))
    R = hs[-1] @ Wo - y
    value = float(np.mean(R * R))
    dP = R * (2.0 / R.size)
    dWo = hs[-1].T @ dP
    dh = dP @ Wo.T
    dWx = np.zeros_like(Wx)
    dWh = np.zeros_like(Wh)
    db = np.zeros_like(b)
    for t in range(xs.shape[0] - 1, -1, -1):   # backpropagation through time
        dz = dh * (1.0 - hs[t] * hs[t])
        dWx += xs[t].T @ dz
        db += dz.sum(axis=0)
        if t > 0:
            dWh += hs[t - 1].T @ dz
            dh = dz @ Wh.T
    return value, {"Wx": dWx, "Wh": dWh, "b": db, "Wo": dWo}


def rnn_torch_like(T, xs, Wx, Wh, b, Wo, y):
    h = T.tanh(xs[0] @ Wx + b)
    for t in range(1, xs.shape[0]):
        h = T.tanh(xs[t] @ Wx + h @ Wh + b)
    return T.mean((h @ Wo - y) ** 2)


# --- attention: single-head scaled dot-product attention --------------------------------------------

def _attention_inputs(batch: int, seq: int, dim: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 25)
        return {
            "X": r.standard_normal((batch, seq, dim)),
            "Wq": r.standard_normal((dim, dim)) / np.sqrt(dim),
            "Wk": r.standard_normal((dim, dim)) / np.sqrt(dim),
            "Wv": r.standard_normal((dim, dim)) / np.sqrt(dim),
        }

    return make


def _softmax_last(S):
    P = S - S.max(axis=-1, keepdims=True)
    np.exp(P, out=P)
    P /= P.sum(axis=-1, keepdims=True)
    return P


def attention_numpy_forward(X, Wq, Wk, Wv) -> float:
    scale = 1.0 / np.sqrt(X.shape[-1])
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    O = _softmax_last(Q @ K.swapaxes(-1, -2) * scale) @ V
    return float(np.sum(O * O))


def attention_numpy_value_and_grad(X, Wq, Wk, Wv):
    d = X.shape[-1]
    scale = 1.0 / np.sqrt(d)
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    P = _softmax_last(Q @ K.swapaxes(-1, -2) * scale)
    O = P @ V
    value = float(np.sum(O * O))
    dO = 2.0 * O
    dV = P.swapaxes(-1, -2) @ dO
    dP = dO @ V.swapaxes(-1, -2)
    dS = P * (dP - np.sum(dP * P, axis=-1, keepdims=True))   # softmax backward
    dS *= scale
    dQ = dS @ K
    dK = dS.swapaxes(-1, -2) @ Q
    Xf = X.reshape(-1, d)
    return value, {"Wq": Xf.T @ dQ.reshape(-1, d), "Wk": Xf.T @ dK.reshape(-1, d),
                   "Wv": Xf.T @ dV.reshape(-1, d)}


def attention_torch_like(T, X, Wq, Wk, Wv):
    scale = 1.0 / X.shape[-1] ** 0.5
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    P = T.softmax(Q @ K.mT * scale, dim=-1)
    return T.sum((P @ V) ** 2)


# --- logreg (cold first gradient only) --------------------------------------------------------------

def _logreg_inputs(rows: int, cols: int):
    def make() -> dict[str, np.ndarray]:
        r = np.random.default_rng(SEED + 26)
        X = r.standard_normal((rows, cols))
        w_true = r.standard_normal(cols) / np.sqrt(cols)
        return {
            "X": X,
            "y": (X @ w_true + 0.3 * r.standard_normal(rows) > 0).astype(np.float64),
            "w": 0.1 * r.standard_normal(cols),
            "b": np.zeros(1),
        }

    return make


def logreg_numpy_forward(X, y, w, b) -> float:
    z = X @ w + b
    return float(np.mean(np.log1p(np.exp(z)) - y * z))


def logreg_numpy_value_and_grad(X, y, w, b):
    z = X @ w + b
    value = float(np.mean(np.log1p(np.exp(z)) - y * z))
    dz = (1.0 / (1.0 + np.exp(-z)) - y) / z.size       # sigmoid(z) - y, averaged
    return value, {"w": X.T @ dz, "b": np.array([dz.sum()])}


def logreg_torch_like(T, X, y, w, b):
    z = X @ w + b
    return T.mean(T.log1p(T.exp(z)) - y * z)


# --- the table --------------------------------------------------------------------------------------

FULL_SIZES = {
    "heat": {"n": 1_000_000},
    "tv": {"n": 512},
    "rowpen": {"rows": 1024, "cols": 1024},
    "embbag": {"vocab": 50_000, "dim": 64, "tokens": 200_000, "bags": 20_000, "out": 16},
    "rnn": {"steps": 10, "batch": 64, "n_in": 32, "hidden": 64},
    "attention": {"batch": 8, "seq": 128, "dim": 64},
    "logreg": {"rows": 2000, "cols": 50},
}
SMALL_SIZES = {  # the tests' sizes: finite differences and the numpy backend stay fast
    "heat": {"n": 50},
    "tv": {"n": 9},
    "rowpen": {"rows": 5, "cols": 7},
    "embbag": {"vocab": 30, "dim": 4, "tokens": 80, "bags": 7, "out": 3},
    "rnn": {"steps": 4, "batch": 3, "n_in": 5, "hidden": 6},
    "attention": {"batch": 2, "seq": 5, "dim": 4},
    "logreg": {"rows": 40, "cols": 5},
}
TABLE_NAMES = ("heat", "tv", "rowpen", "embbag", "rnn", "attention")
COLD_WORKLOADS = ("W1 1e3", "logreg", "W3 f64", "rnn")   # the cold first-gradient measurement


def _describe_sizes(name: str, s: dict) -> str:
    if name == "heat":
        return f"1-D heat residual sum(((u[2:]-2u[1:-1]+u[:-2])/dx^2 - f[1:-1])^2), u[{s['n']}]"
    if name == "tv":
        return f"TV denoise 0.5|x-y|^2 + lam*sum(sqrt(dx^2+dy^2+eps)), x[{s['n']},{s['n']}]"
    if name == "rowpen":
        return f"row penalty sum(sqrt(sum((u[:,1:]-u[:,:-1])^2, dim=1) + eps)), u[{s['rows']},{s['cols']}]"
    if name == "embbag":
        return (f"embedding bag sum(tanh(scatter_add(E[tok], bag) @ W)), E[{s['vocab']},{s['dim']}], "
                f"{s['tokens']} tokens, {s['bags']} bags, W[{s['dim']},{s['out']}]")
    if name == "rnn":
        return (f"tanh RNN unrolled {s['steps']} steps, batch {s['batch']}, input {s['n_in']}, "
                f"hidden {s['hidden']}, readout MSE")
    if name == "attention":
        return (f"softmax attention sum((softmax(QK^T/sqrt(d)) V)^2), X[{s['batch']},{s['seq']},{s['dim']}], "
                "grads for Wq, Wk, Wv")
    if name == "logreg":
        return f"logistic regression mean(log1p(exp(z)) - y*z), X[{s['rows']},{s['cols']}]"
    raise KeyError(name)


def make_workload(name: str, **sizes) -> Workload:
    """The held-out workload ``name`` with the sizes of :data:`FULL_SIZES` overridden by ``sizes``."""
    s = dict(FULL_SIZES[name], **sizes)
    desc = _describe_sizes(name, s)
    if name == "heat":
        return Workload("heat", desc, _heat_inputs(s["n"]), ("u",), heat_numpy_forward,
                        heat_numpy_value_and_grad, heat_torch_like, tags=("heldout",))
    if name == "tv":
        return Workload("tv", desc, _tv_inputs(s["n"]), ("x",), tv_numpy_forward, tv_numpy_value_and_grad,
                        tv_torch_like, tags=("heldout",))
    if name == "rowpen":
        return Workload("rowpen", desc, _rowpen_inputs(s["rows"], s["cols"]), ("u",), rowpen_numpy_forward,
                        rowpen_numpy_value_and_grad, rowpen_torch_like, tags=("heldout",))
    if name == "embbag":
        fwd, vg, tl = _embbag(s["bags"])
        return Workload("embbag", desc, _embbag_inputs(s["vocab"], s["dim"], s["tokens"], s["bags"], s["out"]),
                        ("E", "W"), fwd, vg, tl, tags=("heldout",))
    if name == "rnn":
        return Workload("rnn", desc, _rnn_inputs(s["steps"], s["batch"], s["n_in"], s["hidden"]),
                        ("Wx", "Wh", "b", "Wo"), rnn_numpy_forward, rnn_numpy_value_and_grad, rnn_torch_like,
                        tags=("heldout",))
    if name == "attention":
        return Workload("attention", desc, _attention_inputs(s["batch"], s["seq"], s["dim"]), ("Wq", "Wk", "Wv"),
                        attention_numpy_forward, attention_numpy_value_and_grad, attention_torch_like,
                        tags=("heldout",))
    if name == "logreg":
        return Workload("logreg", desc, _logreg_inputs(s["rows"], s["cols"]), ("w", "b"), logreg_numpy_forward,
                        logreg_numpy_value_and_grad, logreg_torch_like, tags=("heldout",))
    raise KeyError(name)


def make_heldout(small: bool = False, names=TABLE_NAMES) -> dict[str, Workload]:
    """``{name: Workload}`` at the benchmark's sizes, or (``small``) at the tests' sizes."""
    return {n: make_workload(n, **(SMALL_SIZES[n] if small else {})) for n in names}


HELDOUT: dict[str, Workload] = make_heldout()


def cold_workload(name: str) -> Workload:
    """A workload of the cold first-gradient measurement: a held-out one or one of W1-W5."""
    return WORKLOADS[name] if name in WORKLOADS else make_workload(name)


# --- the jax namespace -------------------------------------------------------------------------------

def jax_namespace(jax):
    """The names the torch-like code uses, on ``jax.numpy`` (``dim=`` -> ``axis=``, scatter via ``.at``)."""
    import jax.numpy as jnp
    import jax.scipy.special as jss

    def index_put(x, indices, values, accumulate=False):
        at = x.at[tuple(indices)]
        return at.add(values) if accumulate else at.set(values)

    return SimpleNamespace(
        sin=jnp.sin, cos=jnp.cos, exp=jnp.exp, log1p=jnp.log1p, tanh=jnp.tanh, sqrt=jnp.sqrt,
        sum=lambda x, dim=None: jnp.sum(x, axis=dim), mean=jnp.mean, arange=jnp.arange, zeros=jnp.zeros,
        index_put=index_put,
        softmax=lambda x, dim: jax.nn.softmax(x, axis=dim),
        logsumexp=lambda x, dim: jss.logsumexp(x, axis=dim))


# --- the implementations ----------------------------------------------------------------------------

def _impls():
    """The held-out table's implementations: the suite's numpy, symgrad and torch builders, and a jax
    builder whose namespace has the held-out workloads' extra names (sqrt, zeros, softmax, index_put)."""
    from . import peers

    def build_jax(w: Workload, inputs: dict, J):
        jax = J.jax
        fn = jax.jit(jax.value_and_grad(peers.positional(w, inputs, jax_namespace(jax)),
                                        argnums=peers.argnums(w, inputs)))
        arrays = tuple(inputs.values())
        return peers.Prepared(lambda: jax.block_until_ready(fn(*arrays)), peers._from_tuple(w))

    jax_impl = replace(peers.BY_KEY["jax"], build=build_jax)
    keys = ("numpy", "sg-vg", "sg-compile", "sg-eager", "torch", "torch-compile")
    return [jax_impl] + [peers.BY_KEY[k] for k in keys]


BASELINE = "jax.jit"
DEFAULT_KEYS = ("jax", "numpy", "sg-vg", "torch", "torch-compile")


def ratio_table(records: list[dict], order: list[str]) -> str:
    """Rows: implementations; columns: workloads; jax.jit in absolute time, the others as ratios to it."""
    from .timing import format_seconds
    head = "| implementation | " + " | ".join(r["workload"] for r in records) + " |"
    lines = [head, "|---|" + "---:|" * len(records)]
    for name in order:
        cells = []
        for r in records:
            e = r["results"].get(name)
            if e is None:
                cells.append("")
            elif e["status"] != "ok":
                cells.append({"skipped": "skip", "mismatch": "WRONG", "error": "error"}[e["status"]])
            elif name == BASELINE:
                cells.append(format_seconds(e["timing"]["median_s"]))
            else:
                q = e.get("ratio_to_jax")
                cells.append("-" if q is None else f"{q:.2f}" if q < 10 else f"{q:.1f}")
        if any(cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_table(names, impl_keys, samples: int, min_time: float, log, left_out=None, small=False) -> list[dict]:
    """Check, then time every implementation on every held-out workload (:func:`benchmarks.suite.run_workload`);
    each record gains ``ratio_to_jax`` per implementation."""
    from . import suite
    by_key = {i.key: i for i in _impls()}
    impls = [by_key[k] for k in impl_keys]
    records = []
    for name in names:
        w = make_workload(name, **(SMALL_SIZES[name] if small else {}))
        rec = suite.run_workload(w, impls, samples, min_time, log, left_out)
        base = rec["results"].get(BASELINE, {}).get("timing")
        for e in rec["results"].values():
            t = e.get("timing")
            e["ratio_to_jax"] = t["median_s"] / base["median_s"] if t and base else None
        records.append(rec)
    return records


def cold_table(rows: list[dict]) -> str:
    names = list(dict.fromkeys(r["workload"] for r in rows))
    tools = list(dict.fromkeys(r["name"] for r in rows))
    by = {(r["workload"], r["name"]): r for r in rows}
    lines = ["| tool | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for tool in tools:
        cells = []
        for n in names:
            r = by.get((n, tool))
            if r is None:
                cells.append("")
            elif r.get("error"):
                cells.append("failed")
            else:
                cells.append(f"{r['cold_s']:.2f} s" + ("" if r["matches_numpy"] else " WRONG"))
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    jax_rows = {r["workload"]: r for r in rows if r["tool"] == "jax" and not r.get("error")}
    sg_rows = {r["workload"]: r for r in rows if r["tool"] == "sg-vg" and not r.get("error")}
    if jax_rows and sg_rows:
        cells = [f"{sg_rows[n]['cold_s'] / jax_rows[n]['cold_s']:.2f}x" if n in jax_rows and n in sg_rows else "-"
                 for n in names]
        lines.append("| symgrad / jax.jit | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def check_all(small: bool = False) -> list[str]:
    """Every held-out hand gradient (and logreg's) against central finite differences."""
    problems = []
    for name in (*TABLE_NAMES, "logreg"):
        problems += check_hand_gradient(make_workload(name, **(SMALL_SIZES[name] if small else {})))
    return problems


# --- the command line ---------------------------------------------------------------------------------

def _reexec(argv: list[str]) -> int:
    """Run in a fresh interpreter whose thread variables are set before numpy loads."""
    from .latency import REPO
    from .suite import THREAD_ENV
    env = dict(os.environ, **THREAD_ENV)
    env["PYTHONPATH"] = os.pathsep.join([REPO.as_posix()] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.call([sys.executable, "-m", "benchmarks.heldout", *argv], env=env, cwd=REPO)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.heldout", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="7 samples of >= 20 ms, one cold run per tool, no torch.compile unless --torch-compile")
    ap.add_argument("--torch-compile", action="store_true", help="include torch.compile in --quick")
    ap.add_argument("--only", metavar="NAMES", help=f"workloads, comma-separated (default: {','.join(TABLE_NAMES)})")
    ap.add_argument("--impls", metavar="KEYS",
                    help="implementations: jax,numpy,sg-vg,sg-compile,sg-eager,torch,torch-compile "
                         f"(default: {','.join(DEFAULT_KEYS)})")
    ap.add_argument("--parts", default="table,cold", metavar="P", help="table (steady state), cold (first gradient)")
    ap.add_argument("--cold-tools", default="sg-vg,jax", metavar="KEYS",
                    help="tools of the cold first-gradient part (sg-vg, sg-compile, jax, torch-compile)")
    ap.add_argument("--samples", type=int, help="samples per implementation, >= 7 (default 11, --quick 7)")
    ap.add_argument("--min-sample-time", type=float, metavar="SECONDS", help="default 0.05, --quick 0.02")
    ap.add_argument("--small", action="store_true", help="the tests' tiny sizes (to try the harness out)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--check", action="store_true", help="only check the hand gradients (finite differences)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from .suite import THREAD_ENV
    if any(os.environ.get(k) != v for k, v in THREAD_ENV.items()):
        return _reexec(argv)
    args = build_parser().parse_args(argv)
    log = lambda s="": print(s, flush=True)  # noqa: E731
    if args.check:
        problems = check_all(args.small)
        for p in problems:
            log(p)
        log("hand gradients vs finite differences: " + ("ok" if not problems else "FAILED"))
        return int(bool(problems))

    from . import latency, suite, timing
    started = time.perf_counter()
    samples = args.samples or (7 if args.quick else 11)
    if samples < timing.MIN_SAMPLES:
        raise SystemExit(f"--samples: at least {timing.MIN_SAMPLES}")
    min_time = args.min_sample_time or (0.020 if args.quick else 0.050)
    names = [n.strip() for n in args.only.split(",")] if args.only else list(TABLE_NAMES)
    unknown = [n for n in names if n not in FULL_SIZES]
    if unknown:
        raise SystemExit(f"--only: unknown {unknown} (known: {', '.join(FULL_SIZES)})")
    keys = [k.strip() for k in args.impls.split(",")] if args.impls else list(DEFAULT_KEYS)
    known = [i.key for i in _impls()]
    if [k for k in keys if k not in known]:
        raise SystemExit(f"--impls: unknown {[k for k in keys if k not in known]} (known: {', '.join(known)})")
    left_out = {}
    if args.quick and not args.torch_compile and "torch-compile" in keys and not args.impls:
        keys.remove("torch-compile")
        left_out["torch.compile"] = "not in --quick (compiling costs seconds per workload); add --torch-compile"
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if [p for p in parts if p not in ("table", "cold")]:
        raise SystemExit("--parts: table, cold")

    import numba
    numba.set_num_threads(1)
    log("# held-out workloads (issue 21): one forward+backward per call, ratios to jax.jit")
    log(f"date {datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} logical CPUs; "
        f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__}; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    log(f"timing: {samples} samples of >= {min_time * 1e3:.0f} ms, interleaved round-robin, median per call; "
        "one thread everywhere")
    for name, why in left_out.items():
        log(f"{name}: skipped, {why}")
    doc = {"benchmark": "heldout", "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "command": "python -m benchmarks.heldout " + shlex.join(argv), "machine": suite.machine_info(),
           "load_average": os.getloadavg(), "git": suite.git_info(),
           "settings": {"quick": args.quick, "samples": samples, "min_sample_s": min_time, "small": args.small,
                        "parts": parts, "workloads": names, "impls": keys},
           "baseline": BASELINE, "workloads": [], "cold": None}
    if "table" in parts:
        log("## steady state")
        doc["workloads"] = run_table(names, keys, samples, min_time, log, left_out, small=args.small)
        order = [i.name for i in _impls() if i.key in keys] + list(left_out)
        log("")
        log(f"### time per forward+backward relative to {BASELINE} (its row is absolute); lower is faster")
        log(ratio_table(doc["workloads"], order))
        log("")
    if "cold" in parts:
        tools = [t.strip() for t in args.cold_tools.split(",") if t.strip()]
        log("## first gradient in a fresh process, empty caches, one thread")
        doc["cold"] = latency.cold_first_gradients(tools, list(COLD_WORKLOADS), repeats=1 if args.quick else 3,
                                                   log=log)
        log("")
        log("### seconds from after the imports to the first gradient (cold caches)")
        log(cold_table(doc["cold"]))
        log("")
    doc["elapsed_s"] = time.perf_counter() - started
    log(f"total {doc['elapsed_s']:.0f} s; load average now {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
