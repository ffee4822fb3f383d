"""The numpy usage table's harness: one row per (numpy function x argument pattern), checked the same way.

A row is a :class:`Usage`: a function written in plain numpy (``lambda x: np.cumsum(x, axis=1)``) and a
builder of its arguments.  :func:`check` runs it

* with plain numpy arrays: the reference value;
* eagerly, on symgrad tensors that require grad (the numpy function reaches symgrad through
  ``__array_function__`` / ``__array_ufunc__``), unless the row only makes sense on numpy-face values
  (``eager=False``: method forms such as ``x.max(axis=1)``, whose torch-face meaning differs);
* compiled: ``symgrad.value_and_grad`` of ``sum(f(*args) * weights)`` called with the numpy arrays
  (the traced values then follow numpy), value against numpy;
* gradients (rows with ``grad=True``): eager and compiled against central finite differences of the
  plain-numpy function, and, with ``second_order=True``, ``gradgradcheck`` of the eager function.

Rows whose result has no gradient (``argsort``, ``bincount``) set ``grad=False``: their values are checked,
eagerly and compiled.  Arguments are float64 numpy arrays unless the builder makes them otherwise; the
positions in ``wrt`` are differentiated (floating-point arrays only).

When HIPS autograd is installed, the gradients are also compared with ``autograd.grad`` of the same code run
with ``autograd.numpy`` (and ``autograd.scipy.special``) in place of ``np`` (and ``sc``/``ss``), which are
swapped in the row's module while autograd runs.  Rows autograd cannot run (a function it lacks, a
gradient it does not define, or a value that differs from numpy's) are not compared; a row where autograd
is known to be the one wrong says why in ``autograd_differs``.  ``SYMGRAD_AUTOGRAD_LOG=<file>`` appends each
row's outcome to that file (for counting).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import symgrad

try:
    import autograd
    import autograd.numpy as anp
    import autograd.scipy.special as asp
except ImportError:   # the comparison is skipped (the other checks of each row still run)
    autograd = None

# A Numba compile costs about a second per row: the CI profile compiles every sixth row (chosen by its
# name) with Numba and the others with the numpy backend (the same trace, autodiff and partition, kernels
# in numpy); SYMGRAD_FUZZ=long compiles every row with Numba.
ALL_NUMBA = os.environ.get("SYMGRAD_FUZZ", "") == "long"


def backend_for(name: str) -> str:
    return "numba" if ALL_NUMBA or zlib.crc32(name.encode()) % 6 == 0 else "numpy"


@dataclass(frozen=True)
class Usage:
    name: str                                  # how the row reads, e.g. "np.cumsum(x, axis=1)"
    fn: Callable                               # plain numpy code
    args: Callable[[np.random.Generator], tuple]
    wrt: tuple = (0,)
    grad: bool = True                          # False: no gradient (integer or piecewise-constant result)
    second_order: bool = True
    eager: bool = True                         # False: only on numpy-face (traced) values
    compiled: bool = True
    rtol: float = 1e-6
    atol: float = 1e-8
    autograd_differs: str = ""                 # why HIPS autograd's gradient is not the one to compare with


def params(usages: list[Usage]):
    """``pytest.mark.parametrize`` arguments: one case per row, named by the row."""
    names = [u.name for u in usages]
    assert len(set(names)) == len(names), "two rows have the same name"
    return pytest.mark.parametrize("usage", usages, ids=names)


def _weights(value, rng) -> np.ndarray:
    return rng.standard_normal(np.shape(value))


def _loss(fn, weights):
    def loss(*a):
        return np.sum(fn(*a) * weights)
    return loss


def _finite_differences(f, args, wrt, eps=1e-6) -> list[np.ndarray]:
    grads = []
    for i in wrt:
        x = np.array(args[i], dtype=np.float64)
        g = np.zeros_like(x)
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            plus = f(*[x if k == i else a for k, a in enumerate(args)])
            flat[j] = orig - eps
            minus = f(*[x if k == i else a for k, a in enumerate(args)])
            flat[j] = orig
            gflat[j] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


def _autograd_stand_ins(module_globals: dict) -> dict:
    """The names of a row's module to point at autograd while it runs: numpy, scipy.special and
    symgrad.scipy.special (whatever the module calls them)."""
    swaps = {}
    for name, value in module_globals.items():
        if value is np:
            swaps[name] = anp
        elif getattr(value, "__name__", None) in ("scipy.special", "symgrad.scipy.special"):
            swaps[name] = asp
    return swaps


def autograd_gradients(usage: Usage, args: tuple, weights: np.ndarray, want_value: float) -> tuple[dict, str]:
    """``({argument position: gradient}, outcome)`` from HIPS autograd, for the positions it differentiates;
    the outcome says why a row gets no gradients (autograd lacks a function or a gradient, its value is not
    numpy's, or its gradient does not have the argument's shape)."""
    module_globals = usage.fn.__globals__
    swaps = _autograd_stand_ins(module_globals)
    saved = {name: module_globals[name] for name in swaps}

    def loss(*a):
        return anp.sum(usage.fn(*a) * weights)

    grads, outcome = {}, "autograd has no gradient for it"
    module_globals.update(swaps)
    try:
        try:
            value = loss(*args)
        except Exception:   # noqa: BLE001 - autograd lacks something the row calls
            return {}, "autograd cannot run it"
        if not np.allclose(np.asarray(value, dtype=np.float64), want_value, rtol=1e-6, atol=1e-8):
            return {}, "autograd's value is not numpy's"
        for i in usage.wrt:
            try:
                g = np.asarray(autograd.grad(loss, i)(*args))
            except Exception:   # noqa: BLE001 - no gradient defined for this argument
                continue
            if g.shape == np.shape(args[i]) and g.dtype.kind == "f":
                grads[i] = g
            else:
                outcome = f"autograd's gradient has shape {g.shape}, not the argument's {np.shape(args[i])}"
    finally:
        module_globals.update(saved)
    return grads, "compared" if grads else outcome


def _log_autograd(usage: Usage, outcome: str) -> None:
    path = os.environ.get("SYMGRAD_AUTOGRAD_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{outcome}\t{usage.name}\n")


def _compare_with_autograd(usage: Usage, ag: dict, got: dict, where: str) -> None:
    """symgrad's gradients against autograd's: tighter than finite differences (both are analytic)."""
    for i, g in ag.items():
        if i not in got:
            continue
        float32 = np.asarray(got[i]).dtype == np.float32
        rtol, atol = (1e-5, 1e-6) if float32 else (1e-8, 1e-10)   # analytic on both sides
        np.testing.assert_allclose(got[i], g, rtol=rtol, atol=atol * max(1.0, float(np.max(np.abs(g), initial=0))),
                                   err_msg=f"{usage.name}: {where} gradient of argument {i} vs HIPS autograd")


def _as_array(v) -> np.ndarray:
    if isinstance(v, symgrad.Tensor):
        return v.detach().numpy()
    return np.asarray(v)


def check(usage: Usage, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    args = usage.args(rng)
    want = np.asarray(usage.fn(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args]))
    weights = _weights(want, rng)
    tol = dict(rtol=usage.rtol, atol=usage.atol)
    differentiate = usage.grad and want.dtype.kind == "f"
    fd = _finite_differences(_loss(usage.fn, weights), args, usage.wrt) if differentiate else None
    ag = {}
    if differentiate and autograd is not None:
        if usage.autograd_differs:
            _log_autograd(usage, "autograd wrong: " + usage.autograd_differs)
        else:
            ag, outcome = autograd_gradients(usage, args, weights, float(np.sum(want * weights)))
            _log_autograd(usage, outcome)

    if usage.eager:
        leaves = [symgrad.tensor(a, requires_grad=(i in usage.wrt and differentiate))
                  if isinstance(a, np.ndarray) else a for i, a in enumerate(args)]
        got = usage.fn(*leaves)
        np.testing.assert_allclose(_as_array(got), want, err_msg=f"{usage.name}: eager value", **tol)
        got_dtype = _as_array(got).dtype
        assert got_dtype == want.dtype, f"{usage.name}: eager dtype {got_dtype}, numpy {want.dtype}"
        if differentiate:
            (got * symgrad.tensor(weights)).sum().backward()
            for i, g in zip(usage.wrt, fd):
                assert leaves[i].grad is not None, f"{usage.name}: eager gradient of argument {i} is None"
                np.testing.assert_allclose(leaves[i].grad.numpy(), g, rtol=1e-4, atol=1e-6,
                                           err_msg=f"{usage.name}: eager gradient of argument {i} vs differences")
            _compare_with_autograd(usage, ag, {i: leaves[i].grad.numpy() for i in usage.wrt}, "eager")
            if usage.second_order:
                fresh = [symgrad.tensor(a, requires_grad=(i in usage.wrt)) if isinstance(a, np.ndarray) else a
                         for i, a in enumerate(args)]
                assert symgrad.autograd.gradgradcheck(lambda *t: usage.fn(*t), fresh, atol=1e-5, rtol=1e-3), \
                    f"{usage.name}: second derivatives"

    if usage.compiled:
        if differentiate:
            compiled = symgrad.compile(_loss(usage.fn, weights), backend=backend_for(usage.name))
            value, grads = symgrad.value_and_grad(compiled, argnums=tuple(usage.wrt))(*args)
            np.testing.assert_allclose(value, np.sum(want * weights), err_msg=f"{usage.name}: compiled value", **tol)
            for i, g, f in zip(usage.wrt, grads, fd):
                np.testing.assert_allclose(g, f, rtol=1e-4, atol=1e-6,
                                           err_msg=f"{usage.name}: compiled gradient of argument {i} vs differences")
            _compare_with_autograd(usage, ag, dict(zip(usage.wrt, grads)), "compiled")
        else:
            got = symgrad.compile(usage.fn, backend=backend_for(usage.name))(*args)
            np.testing.assert_allclose(_as_array(got), want, err_msg=f"{usage.name}: compiled value", **tol)
