"""The implementations the benchmark suite compares, one builder per tool.

An :class:`Impl` builds, for a workload and its inputs, a :class:`Prepared` pair:

- ``call()``: one forward+backward with the workload's numpy arrays as input (this is what is timed;
  creating the tool's leaf tensors from the arrays is part of it, as a user's training step pays it);
- ``extract(out)``: ``(loss, {name: gradient as a numpy array})`` from what ``call()`` returned (used to
  check the implementation against the numpy reference; not timed).

Every implementation except the hand-written ones runs the workload's *torch-like* code
(``Workload.torch_like``, written against a module ``T``): with ``T = symgrad``, ``T = torch``, or a
small namespace mapping the same names onto ``jax.numpy``, ``autograd.numpy`` or ``pytensor.tensor``.

Optional peers (torch, jax, HIPS autograd, PyTensor) are imported on first use by :func:`load`; when
the import fails the implementation is skipped and the reason is reported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from .workloads import Workload

Extract = Callable[[object], tuple[float, dict[str, np.ndarray]]]


@dataclass
class Prepared:
    call: Callable[[], object]
    extract: Extract


@dataclass(frozen=True)
class Impl:
    key: str                 # command-line id (``--impls``)
    name: str                # display name (table row, JSON key)
    kind: str                # "hand" (hand-written baselines), "symgrad" or "peer"
    threads: int             # Numba threads while it runs (the rest of the process runs one thread)
    tool: str                # what :func:`load` must import: symgrad, numba, numpy, torch, jax, ...
    build: Callable[[Workload, dict, Any], Prepared]
    full_only: bool = False  # not in ``--quick`` (skipped there, with a line saying so)
    note: str = ""


# --- helpers ---------------------------------------------------------------------------------------

def positional(w: Workload, inputs: dict, T) -> Callable:
    """The workload's torch-like loss as ``f(*arrays)`` in the order of ``inputs``."""
    names = list(inputs)
    f = w.torch_like

    def loss(*args):
        return f(T, **dict(zip(names, args)))

    loss.__name__ = w.name.split()[0].lower()
    return loss


def argnums(w: Workload, inputs: dict) -> tuple[int, ...]:
    names = list(inputs)
    return tuple(names.index(n) for n in w.grad_inputs)


def _from_tuple(w: Workload) -> Extract:
    """Extract for ``(value, (grad, ...))`` in ``grad_inputs`` order."""
    def extract(out):
        value, grads = out
        return float(value), {n: np.asarray(g) for n, g in zip(w.grad_inputs, grads)}

    return extract


def _leaf_results(w: Workload) -> Extract:
    """Extract for ``(loss, {name: leaf tensor})`` after ``loss.backward()`` (symgrad and torch)."""
    def extract(out):
        loss, leaves = out
        grads = {}
        for n in w.grad_inputs:
            g = leaves[n].grad
            grads[n] = None if g is None else np.array(g.detach().numpy())
        return float(loss.item()), grads

    return extract


def _tensor_api(w: Workload, inputs: dict, make: Callable, fn: Callable) -> Prepared:
    """Create leaves with ``make(array, requires_grad=...)``, call ``fn`` on them, run ``.backward()``."""
    spec = [(n, a, n in w.grad_inputs) for n, a in inputs.items()]

    def call():
        leaves = {n: make(a, requires_grad=rg) for n, a, rg in spec}
        loss = fn(*leaves.values())
        loss.backward()
        return loss, leaves

    return Prepared(call, _leaf_results(w))


# --- loading the tools ------------------------------------------------------------------------------

_loaded: dict[str, tuple[Any, str | None]] = {}


def _load_jax():
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 workloads stay float64
    import jax.numpy as jnp
    import jax.scipy.special as jss

    ns = SimpleNamespace(sin=jnp.sin, cos=jnp.cos, exp=jnp.exp, log1p=jnp.log1p, tanh=jnp.tanh,
                         sum=jnp.sum, mean=jnp.mean, arange=jnp.arange,
                         logsumexp=lambda x, dim: jss.logsumexp(x, axis=dim))
    return SimpleNamespace(jax=jax, T=ns, version=jax.__version__)


def _load_autograd():
    import autograd
    import autograd.numpy as anp
    import autograd.scipy.special as asp

    ns = SimpleNamespace(sin=anp.sin, cos=anp.cos, exp=anp.exp, log1p=anp.log1p, tanh=anp.tanh,
                         sum=anp.sum, mean=anp.mean, arange=anp.arange,
                         logsumexp=lambda x, dim: asp.logsumexp(x, axis=dim))
    version = getattr(autograd, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v
        version = _v("autograd")
    return SimpleNamespace(autograd=autograd, T=ns, version=version)


def _load_pytensor():
    import pytensor
    import pytensor.tensor as pt

    ns = SimpleNamespace(sin=pt.sin, cos=pt.cos, exp=pt.exp, log1p=pt.log1p, tanh=pt.tanh,
                         sum=pt.sum, mean=pt.mean, arange=pt.arange,
                         logsumexp=lambda x, dim: pt.logsumexp(x, axis=dim))
    return SimpleNamespace(pytensor=pytensor, pt=pt, T=ns, version=pytensor.__version__)


def _load_torch():
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set or inter-op work started; the intra-op threads are what matter
    return torch


def _load_kernels():
    from . import kernels
    return kernels


_LOADERS: dict[str, Callable[[], Any]] = {
    "numpy": lambda: np,
    "numba": _load_kernels,
    "symgrad": lambda: importlib.import_module("symgrad"),
    "torch": _load_torch,
    "jax": _load_jax,
    "autograd": _load_autograd,
    "pytensor": _load_pytensor,
}

INSTALL_HINT = {
    "torch": "pip install torch==2.13.0 (CPU build)",
    "jax": 'pip install "jax[cpu]"',
    "autograd": "pip install autograd",
    "pytensor": "pip install pytensor",
}


def load(tool: str) -> tuple[Any, str | None]:
    """``(module-like, None)`` or ``(None, why it is unavailable)``; imported once per process."""
    if tool not in _loaded:
        try:
            _loaded[tool] = (_LOADERS[tool](), None)
        except Exception as exc:  # noqa: BLE001 - any import failure means "skip this tool"
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            hint = f"; install with: {INSTALL_HINT[tool]}" if tool in INSTALL_HINT else ""
            _loaded[tool] = (None, f"import failed ({type(exc).__name__}: {msg}){hint}")
    return _loaded[tool]


def version(tool: str) -> str | None:
    mod, _ = _loaded.get(tool, (None, None))
    if mod is None:
        return None
    if tool == "numba":
        import numba
        return numba.__version__
    v = getattr(mod, "__version__", None) or getattr(mod, "version", None)
    return v if isinstance(v, str) else str(v)


# --- the builders -----------------------------------------------------------------------------------

def build_hand_numba(serial: bool) -> Callable[[Workload, dict, Any], Prepared]:
    def build(w: Workload, inputs: dict, kernels) -> Prepared:
        kernel = kernels.kernels_for(w.name)[0 if serial else 1]
        arrays = tuple(inputs.values())

        def extract(out):
            return float(out[0]), dict(zip(w.grad_inputs, out[1:]))

        return Prepared(lambda: kernel(*arrays), extract)

    return build


def build_numpy(w: Workload, inputs: dict, _np) -> Prepared:
    f = w.numpy_value_and_grad
    return Prepared(lambda: f(**inputs), lambda out: (float(out[0]), out[1]))


def build_symgrad_eager(w: Workload, inputs: dict, symgrad) -> Prepared:
    return _tensor_api(w, inputs, symgrad.tensor, positional(w, inputs, symgrad))


def build_symgrad_vg(parallel: bool) -> Callable[[Workload, dict, Any], Prepared]:
    def build(w: Workload, inputs: dict, symgrad) -> Prepared:
        compiled = symgrad.compile(positional(w, inputs, symgrad), parallel=parallel)
        vg = symgrad.value_and_grad(compiled, argnums=argnums(w, inputs))
        arrays = tuple(inputs.values())
        return Prepared(lambda: vg(*arrays), _from_tuple(w))

    return build


def build_symgrad_compiled(w: Workload, inputs: dict, symgrad) -> Prepared:
    compiled = symgrad.compile(positional(w, inputs, symgrad), parallel=False)
    return _tensor_api(w, inputs, symgrad.tensor, compiled)


def build_torch_eager(w: Workload, inputs: dict, torch) -> Prepared:
    return _tensor_api(w, inputs, torch.tensor, positional(w, inputs, torch))


def build_torch_compile(w: Workload, inputs: dict, torch) -> Prepared:
    # Dynamo caches compiled frames per code object, and every workload's loss is the same closure code
    # (``positional``): without a reset the 9th shape hits ``recompile_limit`` and runs eagerly.
    torch._dynamo.reset()
    compiled = torch.compile(positional(w, inputs, torch), dynamic=False)
    return _tensor_api(w, inputs, torch.tensor, compiled)


def build_jax(w: Workload, inputs: dict, J) -> Prepared:
    jax = J.jax
    fn = jax.jit(jax.value_and_grad(positional(w, inputs, J.T), argnums=argnums(w, inputs)))
    arrays = tuple(inputs.values())

    def call():
        return jax.block_until_ready(fn(*arrays))

    return Prepared(call, _from_tuple(w))


def build_autograd(w: Workload, inputs: dict, A) -> Prepared:
    fn = A.autograd.value_and_grad(positional(w, inputs, A.T), argnum=argnums(w, inputs))
    arrays = tuple(inputs.values())
    return Prepared(lambda: fn(*arrays), _from_tuple(w))


def build_pytensor(w: Workload, inputs: dict, P) -> Prepared:
    pt = P.pt
    syms = [pt.tensor(n, dtype=str(a.dtype), shape=a.shape) for n, a in inputs.items()]
    loss = positional(w, inputs, P.T)(*syms)
    grads = P.pytensor.grad(loss, [syms[i] for i in argnums(w, inputs)])
    fn = P.pytensor.function(syms, [loss, *grads], mode="NUMBA")
    arrays = tuple(inputs.values())

    def extract(out):
        return float(out[0]), {n: np.asarray(g) for n, g in zip(w.grad_inputs, out[1:])}

    return Prepared(lambda: fn(*arrays), extract)


BASELINE = "hand Numba"

IMPLS: list[Impl] = [
    Impl("hand", BASELINE, "hand", 1, "numba", build_hand_numba(serial=True),
         note="fused forward+backward loop, scalar libm math, one thread (the baseline)"),
    Impl("hand-par", "hand Numba parallel (2 thr)", "hand", 2, "numba", build_hand_numba(serial=False),
         full_only=True, note="the same loop with prange, 2 Numba threads"),
    Impl("numpy", "numpy hand grad", "hand", 1, "numpy", build_numpy,
         note="hand-written numpy gradient (benchmarks/workloads.py)"),
    Impl("sg-vg", "symgrad value_and_grad", "symgrad", 1, "symgrad", build_symgrad_vg(parallel=False),
         note="symgrad.value_and_grad(symgrad.compile(f, parallel=False)): numpy in, numpy out"),
    Impl("sg-compile", "symgrad compile + backward", "symgrad", 1, "symgrad", build_symgrad_compiled,
         note="tensor API: compiled call returning a Tensor, then .backward()"),
    Impl("sg-vg-par", "symgrad value_and_grad parallel (2 thr)", "symgrad", 2, "symgrad",
         build_symgrad_vg(parallel=True), full_only=True,
         note="symgrad.compile(f, parallel=True), 2 Numba threads"),
    Impl("sg-eager", "symgrad eager", "symgrad", 1, "symgrad", build_symgrad_eager,
         note="symgrad.tensor(..., requires_grad=True), f, loss.backward()"),
    Impl("torch", "torch eager", "peer", 1, "torch", build_torch_eager, note="torch.set_num_threads(1)"),
    Impl("torch-compile", "torch.compile", "peer", 1, "torch", build_torch_compile, full_only=True,
         note="torch.compile(f, dynamic=False) (Inductor), then .backward(); compiling costs seconds per "
              "workload, so only in the full run"),
    Impl("jax", "jax.jit", "peer", 1, "jax", build_jax,
         note="jax.jit(jax.value_and_grad(f)) with jax_enable_x64; numpy arrays in"),
    Impl("autograd", "HIPS autograd", "peer", 1, "autograd", build_autograd, note="autograd.value_and_grad(f)"),
    Impl("pytensor", "PyTensor (Numba)", "peer", 1, "pytensor", build_pytensor,
         note='pytensor.function(inputs, [loss, *pytensor.grad(loss, wrt)], mode="NUMBA")'),
]

BY_KEY = {i.key: i for i in IMPLS}
