"""Composable function transforms with JAX's names: ``grad``, ``value_and_grad``, ``vjp``, ``jvp``,
``jacrev`` (= ``jacobian``), ``jacfwd``, ``hessian``, ``hvp`` and HIPS autograd's ``elementwise_grad``.

Each transform has one definition, written with the eager autograd engine and ``create_graph=True``
(the *recorded* form).  How a call runs depends on its arguments:

* **compiled**: numpy arrays, numbers and Tensors that need no gradient.  The recorded form is traced
  as the body of one :class:`~symgrad.compiler.compile.CompiledFunction` per input structure: the
  function's ops, the backward formulas the engine applies and any further differentiation all land
  in one graph, which becomes fused kernels (a Hessian-vector product is one kernel call).
* **recorded**: an argument is a value of an enclosing trace (the transform is used inside a compiled
  function or inside another transform), or a Tensor that requires grad while grad mode is on.  The
  recorded form runs as is: its ops are recorded by the enclosing trace, or by the eager autograd
  graph, so the results can be differentiated again.  This is what makes transforms nest:
  ``grad(grad(grad(f)))`` compiles one graph with three levels of differentiation in it.

Arguments and results may be pytrees (nested tuples, lists, dicts, namedtuples of arrays:
:mod:`symgrad.compiler.pytree`); gradients come back in the structure of the argument.

Forward mode (``jvp``, ``jacfwd``) is the transpose of the reverse mode: the rule table holds
reverse-mode formulas only, and the vector-Jacobian product ``u -> J^T u`` is linear in ``u``, so
``J t`` is its derivative with respect to ``u`` contracted with ``t``: ``d/du <J^T u, t>``.  Every
derivative therefore still comes from ``derivatives.yaml``, once.

>>> import numpy as np, symgrad
>>> f = lambda x: (x ** 3).sum()
>>> symgrad.grad(symgrad.grad(lambda x: x ** 3))(np.array(2.0))
array(12.)
>>> symgrad.hvp(f, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
(array([6., 0.]),)
"""

from __future__ import annotations

import functools
import inspect
import numbers
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ..autograd import engine
from ..autograd.grad_mode import STATE, enable_grad
from ..creation import zeros_like
from ..ir.tracer import TraceError
from ..ops import functional as F
from ..ops import registry
from ..tensor import Tensor
from . import compile as _compile
from .compile import CompiledFunction
from .pytree import describe, ravel_pytree, tree_flatten, tree_unflatten  # noqa: F401 - ravel_pytree: API

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "jacrev", "jacobian", "jacfwd", "hessian", "hvp",
           "elementwise_grad", "ravel_pytree"]

# Compiled mode builds Jacobians of at most this many rows (output elements for jacrev, input
# elements for jacfwd) as one graph; larger ones run one compiled vector-Jacobian (or Jacobian-vector)
# kernel per row, so that the traced graph and the compile time do not grow with the row count.
ROWS_IN_ONE_GRAPH = 64


# --- leaves ------------------------------------------------------------------------------------
def _must_record(leaf) -> bool:
    """Whether a leaf makes the call *recorded*: a value of the enclosing trace, or a Tensor that
    requires grad while grad mode is on."""
    if not isinstance(leaf, Tensor):
        return False
    recorder = registry._recorder
    if recorder is not None and recorder.is_traced(leaf):
        return True
    return STATE.enabled and leaf.requires_grad


def _number_to_array(leaf):
    """A Python number to differentiate becomes a float64 0-d array (as in ``value_and_grad``)."""
    if isinstance(leaf, numbers.Number) and not isinstance(leaf, (np.generic, bool)):
        return np.asarray(leaf, dtype=np.float64)
    if isinstance(leaf, np.generic):
        return np.asarray(leaf)
    return leaf


def _diff_args(args: tuple, nums: Sequence[int]) -> tuple:
    """``args`` with the Python numbers inside the differentiated arguments made into arrays."""
    if not any(isinstance(leaf, (numbers.Number, np.generic)) for i in nums for leaf in tree_flatten(args[i])[0]):
        return args
    out = list(args)
    for i in nums:
        leaves, spec = tree_flatten(args[i])
        out[i] = tree_unflatten(spec, [_number_to_array(leaf) for leaf in leaves])
    return tuple(out)


def _as_diff_input(leaf, connect: bool, what: str) -> Tensor:
    """A Tensor requiring grad that stands for ``leaf`` and is differentiated *alone*: a gradient
    with respect to it counts only the uses of this tensor (not of ``leaf`` captured elsewhere,
    which is a constant of the inner function, as in JAX), while a gradient of the result still
    flows back to ``leaf`` when it is itself being differentiated (``connect``)."""
    if isinstance(leaf, Tensor):
        data = leaf._data
    elif isinstance(leaf, np.ndarray):
        data = leaf
    else:
        raise TypeError(f"{what} is a {type(leaf).__name__}; differentiate numpy arrays, Tensors or Python "
                        f"numbers (nested in tuples, lists, dicts or namedtuples)")
    if data.dtype.kind != "f":
        raise TypeError(f"{what} has dtype {data.dtype}: only floating-point inputs have gradients "
                        f"(convert it with .astype(float), or leave it out of argnums)")
    if not isinstance(leaf, Tensor):
        return Tensor._wrap(data).requires_grad_(True)
    if connect and leaf.requires_grad:
        return F.reshape(leaf, tuple(data.shape))   # a view: its own node, its gradient flows to ``leaf``
    recorder = registry._recorder
    if recorder is not None and recorder.is_traced(leaf):
        return recorder.leaf_alias(leaf)
    return leaf.detach().requires_grad_(True)


def _as_output(x, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (np.ndarray, np.generic, numbers.Number)):   # a constant of the inputs
        return Tensor._wrap(np.asarray(x, dtype=np.float64 if isinstance(x, numbers.Number) else None))
    raise TypeError(f"{what} is a {type(x).__name__}; the function must return arrays or Tensors "
                    f"(nested in tuples, lists, dicts or namedtuples)")


def _vjp_of(outputs: Sequence[Tensor], inputs: Sequence[Tensor], cotangents: Sequence | None = None) -> list:
    """``sum_k J_k^T c_k`` for each input, recorded (``create_graph``): zeros where an input is unused."""
    cotangents = [None] * len(outputs) if cotangents is None else list(cotangents)
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
    grads = [None] * len(inputs)
    if pairs and inputs:
        grads = engine.grad([o for o, _ in pairs], list(inputs),
                            grad_outputs=None if cotangents[0] is None else [c for _, c in pairs],
                            retain_graph=True, create_graph=True, allow_unused=True)
    return [zeros_like(x) if g is None else g for g, x in zip(grads, inputs)]


def _linearization(outputs: Sequence[Tensor], inputs: Sequence[Tensor]):
    """``jvp_of(tangents) -> J t`` for each output, by transposing the vector-Jacobian product: with
    ``g(u) = J^T u`` (linear in a stand-in cotangent ``u``), ``J t = d/du <g(u), t>``."""
    dummies = [zeros_like(o).requires_grad_(True) for o in outputs]
    live = [k for k, o in enumerate(outputs) if o.requires_grad]
    pulled = [None] * len(inputs)
    if live and inputs:
        pulled = engine.grad([outputs[k] for k in live], list(inputs), grad_outputs=[dummies[k] for k in live],
                             retain_graph=True, create_graph=True, allow_unused=True)

    def jvp_of(tangents: Sequence[Tensor | None]) -> list:
        pairs = [(g, t) for g, t in zip(pulled, tangents) if g is not None and t is not None and g.requires_grad]
        out = [None] * len(outputs)
        if pairs:
            out = engine.grad([g for g, _ in pairs], dummies, grad_outputs=[t for _, t in pairs],
                              retain_graph=True, create_graph=True, allow_unused=True)
        return [zeros_like(o) if t is None else t for t, o in zip(out, outputs)]

    return jvp_of


def _one_hot(shape: tuple, dtype, k: int) -> Tensor:
    e = np.zeros(shape, dtype=dtype)
    e.reshape(-1)[k] = 1
    return Tensor._wrap(e)


def _float_outputs(leaves: list, name: str) -> list[Tensor]:
    outs = [_as_output(x, f"{name}: output leaf {k}") for k, x in enumerate(leaves)]
    for k, o in enumerate(outs):
        if o._data.dtype.kind != "f":
            raise TypeError(f"{name}: output leaf {k} has dtype {o._data.dtype}, which has no derivative; "
                            f"return floating-point values")
    return outs


# --- argnums -----------------------------------------------------------------------------------
def _argnums(argnums, name: str) -> tuple[list[int], bool]:
    """``(positions, many)``; ``many`` when ``argnums`` is a sequence (results are then tuples)."""
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        return [argnums], False
    if isinstance(argnums, Sequence) and not isinstance(argnums, str) and \
            all(isinstance(i, int) and not isinstance(i, bool) for i in argnums):
        if len(set(argnums)) != len(argnums):
            raise ValueError(f"{name}: argnums={argnums!r} repeats a position")
        return list(argnums), True
    raise TypeError(f"{name}: argnums must be an int or a tuple of ints, got {argnums!r}")


def _resolve(nums: list[int], n_args: int, argnums, name: str) -> list[int]:
    out = []
    for i in nums:
        if not -n_args <= i < n_args:
            raise ValueError(f"{name}: argnums={argnums!r} names argument {i}, but the function was called with "
                             f"{n_args} positional argument{'s' if n_args != 1 else ''}")
        out.append(i % n_args)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: argnums={argnums!r} names one argument twice")
    return out


def _split_aux(out, name: str):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{name}(has_aux=True): the function must return a pair (output, auxiliary data), "
                        f"got {type(out).__name__}" + (f" of length {len(out)}" if isinstance(out, (tuple, list))
                                                       else ""))
    return out[0], out[1]


def _with_inputs(args: tuple, nums: list[int], connect: bool, name: str):
    """``(args with differentiated leaves, their structures, the leaves)``."""
    args = list(args)
    specs, flat = [], []
    for i in nums:
        leaves, spec = tree_flatten(args[i])
        diff = [_as_diff_input(leaf, connect, f"{name}: argument {i}" + (f", leaf {j}" if len(leaves) > 1 else ""))
                for j, leaf in enumerate(leaves)]
        args[i] = tree_unflatten(spec, diff)
        specs.append(spec)
        flat.extend(diff)
    return args, specs, flat


def _per_argument(specs: list, flat: list, many: bool):
    """Split a flat list (one entry per differentiated leaf) back into the arguments' structures."""
    out, at = [], 0
    for spec in specs:
        out.append(tree_unflatten(spec, flat[at:at + spec.num_leaves]))
        at += spec.num_leaves
    return tuple(out) if many else out[0]


# --- staging: recorded or compiled -------------------------------------------------------------
class _Staged:
    """Runs ``impl(*args)`` (the recorded form of a transform) directly when a leaf must record,
    else as one CompiledFunction per input structure (the leaves are its arguments)."""

    def __init__(self, impl: Callable, fn: Callable, name: str) -> None:
        self.impl = impl
        self.name = name
        self.options = dict(fn.compile_options) if isinstance(fn, CompiledFunction) else {}
        self.by_structure: dict = {}
        self.out_specs: dict = {}
        self._key = None
        base = fn.fn if isinstance(fn, CompiledFunction) else fn
        self.qualname = f"{name}({getattr(base, '__qualname__', type(base).__name__)})"

    def __call__(self, *args):
        leaves, spec = tree_flatten(args)
        for leaf in leaves:
            if _must_record(leaf):
                return self.impl(*args)
        return self.compiled(leaves, spec)

    def compiled_function(self, spec) -> CompiledFunction:
        cf = self.by_structure.get(spec)
        if cf is None:
            def body(*leaves):
                out = self.impl(*tree_unflatten(spec, leaves))
                out_leaves, out_spec = tree_flatten(out)
                self.out_specs[self._key] = out_spec
                return tuple(_as_output(x, f"{self.name}: result leaf {k}") for k, x in enumerate(out_leaves))

            body.__name__ = body.__qualname__ = self.qualname
            cf = self.by_structure[spec] = CompiledFunction(body, **self.options)
        return cf

    def compiled(self, leaves: list, spec):
        for k, leaf in enumerate(leaves):
            if not isinstance(leaf, (Tensor, np.ndarray, bool, int, float)):
                if isinstance(leaf, np.generic):
                    leaves[k] = np.asarray(leaf)
                    continue
                raise TypeError(f"{self.name}: an argument holds a {type(leaf).__name__}; pass numpy arrays, "
                                f"Tensors or Python numbers (nested in tuples, lists, dicts or namedtuples)")
        cf = self.compiled_function(spec)
        key = self._key = (spec, CompiledFunction._guard(leaves))
        outs = cf(*leaves)
        out_spec = self.out_specs[key]
        if any(isinstance(leaf, Tensor) for leaf in leaves):
            return tree_unflatten(out_spec, outs)
        return tree_unflatten(out_spec, [o._data for o in outs])


def _as_float(value):
    return float(value) if isinstance(value, np.ndarray) and value.ndim == 0 else value


# --- grad and value_and_grad ---------------------------------------------------------------------
def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
                   math: str | None = None, strict: bool | None = None):
    """``f(*args) -> (value, gradient)``; ``fn`` returns a scalar (and, with ``has_aux``, a pair
    ``(scalar, aux)``: then the result is ``((value, aux), gradient)``, as in JAX).

    The arguments named by ``argnums`` may be pytrees; the gradient has their structure (a tuple of
    them when ``argnums`` is a tuple).  With numpy arrays in, the value is a float and the gradients
    are numpy arrays (the form ``scipy.optimize.minimize(jac=True)`` takes); with Tensors in, they are
    Tensors, differentiable when an input requires grad.  ``math`` and ``strict`` as in
    :func:`symgrad.compile`: a function that cannot be traced is differentiated eagerly, with one
    warning, unless ``strict=True``.

    >>> import numpy as np, symgrad
    >>> params = [(np.ones((2, 2)), np.zeros(2))]
    >>> loss = lambda p, x: sum(((x @ W + b) ** 2).sum() for W, b in p)
    >>> value, g = symgrad.value_and_grad(loss)(params, np.array([1.0, 2.0]))
    >>> value, g[0][1]
    (18.0, array([6., 6.]))
    """
    nums, many = _argnums(argnums, "value_and_grad")
    if isinstance(fn, CompiledFunction):
        options = fn.compile_options
        if math not in (None, options.math) or strict not in (None, options.strict):
            fn = CompiledFunction(fn.fn, **options.replace(math=math or options.math,
                                                          strict=options.strict if strict is None else strict))
    elif math is not None or strict is not None:
        fn = CompiledFunction(fn, math=math or "vector", strict=bool(strict))
    base = fn.fn if isinstance(fn, CompiledFunction) else fn

    def impl(*args):
        connect = STATE.enabled
        where = _resolve(nums, len(args), argnums, "value_and_grad")
        with enable_grad():
            call_args, specs, inputs = _with_inputs(args, where, connect, "value_and_grad")
            out = base(*call_args)
            aux = None
            if has_aux:
                out, aux = _split_aux(out, "value_and_grad")
            value = _scalar(out, "value_and_grad")
            grads = _vjp_of([value], inputs)
        result = _per_argument(specs, grads, many)
        return ((value, aux), result) if has_aux else (value, result)

    staged = _Staged(impl, fn, "value_and_grad")

    def run(*args):
        args = _diff_args(args, _resolve(nums, len(args), argnums, "value_and_grad"))
        out, grads = staged(*args)
        if has_aux:
            return (_as_float(out[0]), out[1]), grads
        return _as_float(out), grads

    functools.update_wrapper(run, base)
    if has_aux:
        return run
    # numpy arrays only: symgrad.compile's value_and_grad and its fast path; other calls come to ``run``
    return _compile.value_and_grad(fn, argnums, other_args=run)


def _scalar(out, name: str) -> Tensor:
    if isinstance(out, (tuple, list, dict)):
        raise TypeError(f"{name}: the function must return a scalar, got a {type(out).__name__}"
                        + (" (pass has_aux=True to return (loss, aux))" if isinstance(out, tuple) and len(out) == 2
                           else ""))
    value = _as_output(out, f"{name}: the result")
    if value._data.shape != ():
        raise ValueError(f"{name}: the function must return a scalar, got shape {tuple(value._data.shape)}; "
                         f"reduce it (.sum()), or use jacobian / jacrev for vector outputs, or elementwise_grad "
                         f"for an elementwise function")
    if value._data.dtype.kind != "f":
        raise TypeError(_compile._not_differentiable_output(value.dtype).replace("value_and_grad", name, 1))
    return value


def grad(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, *, math: str | None = None,
         strict: bool | None = None):
    """``f(*args) -> gradient``: the gradient part of :func:`value_and_grad` (``(gradient, aux)``
    with ``has_aux``).  Nests to any order.

    >>> import numpy as np, symgrad
    >>> d3 = symgrad.grad(symgrad.grad(symgrad.grad(lambda x: symgrad.sin(x))))
    >>> np.round(d3(np.array(0.5)), 6)          # -cos(0.5)
    np.float64(-0.877583)
    """
    vg = value_and_grad(fn, argnums, has_aux, math=math, strict=strict)

    def run(*args):
        out, g = vg(*args)
        return (g, out[1]) if has_aux else g

    if hasattr(vg, "compiled"):
        run.compiled = vg.compiled
    functools.update_wrapper(run, vg)
    return run


def elementwise_grad(fn: Callable, argnum: int | Sequence[int] = 0):
    """HIPS autograd's ``elementwise_grad``: the vector-Jacobian product with a cotangent of ones,
    which for an elementwise function is its derivative at every element.

    >>> import numpy as np, symgrad
    >>> symgrad.elementwise_grad(lambda x: x ** 2)(np.array([1.0, 2.0, 3.0]))
    array([2., 4., 6.])
    """
    def total(*args):
        leaves = tree_flatten(fn(*args))[0]
        outs = _float_outputs(leaves, "elementwise_grad")
        s = F.sum(outs[0])
        for o in outs[1:]:
            s = s + F.sum(o)
        return s

    functools.update_wrapper(total, fn.fn if isinstance(fn, CompiledFunction) else fn)
    return grad(total, argnum)


# --- vjp and jvp ----------------------------------------------------------------------------------
def _check_like(name: str, given, spec, shapes: list, what: str, reference: str) -> list:
    leaves, given_spec = tree_flatten(given)
    if given_spec != spec:
        raise ValueError(f"{name}: {what} have structure {describe(given_spec)}, but the {reference} have "
                         f"structure {describe(spec)}; pass one {what[:-1]} per {reference[:-1]}, in the same "
                         f"structure")
    for k, (leaf, shape) in enumerate(zip(leaves, shapes)):
        got = tuple(np.shape(leaf._data if isinstance(leaf, Tensor) else leaf))
        if got != tuple(shape):
            raise ValueError(f"{name}: {what[:-1]} leaf {k} has shape {got}, but its {reference[:-1]} has "
                             f"shape {tuple(shape)}")
    return leaves


def _tensor_leaf(x, dtype) -> Tensor:
    if isinstance(x, Tensor):
        return x
    return Tensor._wrap(np.asarray(x, dtype=dtype))


def _vjp_recorded(fn: Callable, primals: tuple, has_aux: bool):
    connect = STATE.enabled
    nums = list(range(len(primals)))
    with enable_grad():
        args, specs, inputs = _with_inputs(primals, nums, connect, "vjp")
        out = fn(*args)
        aux = None
        if has_aux:
            out, aux = _split_aux(out, "vjp")
        out_leaves, out_spec = tree_flatten(out)
        outs = _float_outputs(out_leaves, "vjp")
    shapes = [tuple(o._data.shape) for o in outs]

    def vjp_fn(cotangents):
        leaves = _check_like("vjp_fn", cotangents, out_spec, shapes, "cotangents", "outputs")
        with enable_grad():
            cts = [_tensor_leaf(c, o._data.dtype) for c, o in zip(leaves, outs)]
            return _per_argument(specs, _vjp_of(outs, inputs, cts), True)

    result = tree_unflatten(out_spec, outs)
    return (result, vjp_fn, aux) if has_aux else (result, vjp_fn)


_VJP_STAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _vjp_stages(fn: Callable, has_aux: bool):
    """The compiled forward and the compiled pullback of ``fn`` (made once per function)."""
    def make(call):
        def pullback(primals, cotangents):
            return _vjp_recorded(call, tuple(primals), has_aux)[1](cotangents)

        return _Staged(lambda *primals: call(*primals), fn, "vjp"), _Staged(pullback, fn, "vjp_fn")

    return _cached_stage(_VJP_STAGES, fn, has_aux, make)


def vjp(fn: Callable, *primals, has_aux: bool = False):
    """``(fn(*primals), vjp_fn)``: ``vjp_fn(cotangents)`` returns a tuple with one vector-Jacobian
    product per primal (each in that primal's structure); ``cotangents`` has the structure of
    ``fn``'s output.  With ``has_aux``: ``(out, vjp_fn, aux)``.

    With numpy arrays in, the forward and the pullback are compiled (the pullback recomputes the
    forward inside its fused kernel); with differentiable Tensors or inside a trace they are recorded.

    >>> import numpy as np, symgrad
    >>> out, pull = symgrad.vjp(lambda x: x * x, np.array([1.0, 2.0]))
    >>> out, pull(np.array([1.0, 10.0]))
    (array([1., 4.]), (array([ 2., 40.]),))
    """
    primals = _diff_args(primals, range(len(primals)))
    leaves = tree_flatten(primals)[0]
    if any(_must_record(leaf) for leaf in leaves):
        return _vjp_recorded(fn.fn if isinstance(fn, CompiledFunction) else fn, primals, has_aux)
    forward, pullback = _vjp_stages(fn, has_aux)
    out = forward(*primals)
    aux = None
    if has_aux:
        out, aux = _split_aux(out, "vjp")
    out_leaves, out_spec = tree_flatten(out)
    shapes = [tuple(np.shape(o._data if isinstance(o, Tensor) else o)) for o in out_leaves]

    def vjp_fn(cotangents):
        _check_like("vjp_fn", cotangents, out_spec, shapes, "cotangents", "outputs")
        return pullback(primals, cotangents)

    vjp_fn.function = fn   # the cached stages reach ``fn`` weakly: it lives as long as vjp_fn
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _primals_tangents(name: str, primals, tangents):
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(f"{name}: primals and tangents must be tuples (one entry per argument of the function), "
                        f"got {type(primals).__name__} and {type(tangents).__name__}; write {name}(f, (x,), (v,))")
    primals = _diff_args(tuple(primals), range(len(primals)))
    tangents = _diff_args(tuple(tangents), range(len(tangents)))
    p_leaves, p_spec = tree_flatten(primals)
    shapes = [tuple(np.shape(p._data if isinstance(p, Tensor) else p)) for p in p_leaves]
    _check_like(name, tangents, p_spec, shapes, "tangents", "primals")
    return primals, tangents


def jvp(fn: Callable, primals, tangents, has_aux: bool = False):
    """``(fn(*primals), J·tangents)``: the Jacobian-vector product, ``tangents`` in the structure of
    ``primals`` (a tuple with one entry per argument), the result in the structure of ``fn``'s output.

    Computed as the transpose of the vector-Jacobian product (``J t = d/du <J^T u, t>``), so it uses
    the rule table's reverse-mode formulas; compiled, the whole computation is one fused graph.

    >>> import numpy as np, symgrad
    >>> symgrad.jvp(lambda x: x ** 2, (np.array([1.0, 3.0]),), (np.array([1.0, 1.0]),))
    (array([1., 9.]), array([2., 6.]))
    """
    primals, tangents = _primals_tangents("jvp", primals, tangents)
    return _jvp_staged(fn, has_aux)(primals, tangents)


_JVP_STAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cached_stage(table: weakref.WeakKeyDictionary, fn: Callable, key, make: Callable):
    """``make(call)``, remembered per function while it lives: the stages of ``vjp``, ``jvp`` and ``hvp``
    (which take the function with each call) are traced and compiled once per function, not per call.
    ``call`` reaches the function through a weak reference, so the cache does not keep it alive."""
    base = fn.fn if isinstance(fn, CompiledFunction) else fn
    if inspect.ismethod(fn) or inspect.ismethod(base):   # a new bound method object at every access
        return make(base)
    try:
        found = table.get(fn, {}).get(key)
        ref = weakref.ref(base)
    except TypeError:   # not weakly referenceable
        return make(base)
    if found is None:
        found = make(lambda *args: ref()(*args))
        table.setdefault(fn, {})[key] = found
    return found


def _jvp_staged(fn: Callable, has_aux: bool) -> _Staged:
    def make(call):
        def impl(primals, tangents):
            connect = STATE.enabled
            with enable_grad():
                args, _, inputs = _with_inputs(tuple(primals), list(range(len(primals))), connect, "jvp")
                out = call(*args)
                aux = None
                if has_aux:
                    out, aux = _split_aux(out, "jvp")
                out_leaves, out_spec = tree_flatten(out)
                outs = _float_outputs(out_leaves, "jvp")
                t_leaves = [_tensor_leaf(t, x._data.dtype) for t, x in zip(tree_flatten(tangents)[0], inputs)]
                tangent_out = _linearization(outs, inputs)(t_leaves)
            result = (tree_unflatten(out_spec, outs), tree_unflatten(out_spec, tangent_out))
            return result + (aux,) if has_aux else result

        return _Staged(impl, fn, "jvp")

    return _cached_stage(_JVP_STAGES, fn, has_aux, make)


def hvp(fn: Callable, primals, tangents):
    """The Hessian-vector product of a scalar function: ``H(primals)·tangents``, in the structure of
    ``primals`` (a tuple with one entry per argument; all are differentiated).

    JAX has no ``hvp`` of its own; this is the signature of its cookbook's ``hvp(f, primals, tangents)``
    (which is ``jvp(grad(f), primals, tangents)[1]``), returning the product only.  It is computed
    reverse-over-reverse, ``grad_x <grad f(x), v>``: two backward passes in one fused graph.

    >>> import numpy as np, symgrad
    >>> f = lambda x, y: (x * x * y).sum()
    >>> symgrad.hvp(f, (np.array([1.0]), np.array([2.0])), (np.array([1.0]), np.array([0.0])))
    (array([4.]), array([2.]))
    """
    primals, tangents = _primals_tangents("hvp", primals, tangents)
    return _cached_stage(_HVP_STAGES, fn, None, lambda call: _Staged(_hvp_impl(call), fn, "hvp"))(primals, tangents)


_HVP_STAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _hvp_impl(base: Callable):

    def impl(primals, tangents):
        connect = STATE.enabled
        with enable_grad():
            args, specs, inputs = _with_inputs(tuple(primals), list(range(len(primals))), connect, "hvp")
            value = _scalar(base(*args), "hvp")
            grads = _vjp_of([value], inputs)
            t_leaves = [_tensor_leaf(t, x._data.dtype) for t, x in zip(tree_flatten(tangents)[0], inputs)]
            inner = None
            for g, t in zip(grads, t_leaves):
                term = F.sum(g * t)
                inner = term if inner is None else inner + term
            products = _vjp_of([inner], inputs)
        return _per_argument(specs, products, True)

    return impl


# --- Jacobians and Hessians -------------------------------------------------------------------------
def _jacobian_impl(fn: Callable, nums: list[int], many: bool, has_aux: bool, argnums, name: str, forward: bool):
    base = fn.fn if isinstance(fn, CompiledFunction) else fn

    def impl(*args):
        connect = STATE.enabled
        where = _resolve(nums, len(args), argnums, name)
        with enable_grad():
            call_args, specs, inputs = _with_inputs(args, where, connect, name)
            out = base(*call_args)
            aux = None
            if has_aux:
                out, aux = _split_aux(out, name)
            out_leaves, out_spec = tree_flatten(out)
            outs = _float_outputs(out_leaves, name)
            blocks = _jacobian_blocks_forward(outs, inputs) if forward else _jacobian_blocks_reverse(outs, inputs)
        per_output = [_per_argument(specs, row, many) for row in blocks]
        result = tree_unflatten(out_spec, per_output)
        return (result, aux) if has_aux else result

    return impl


def _jacobian_blocks_reverse(outs: list[Tensor], inputs: list[Tensor]) -> list[list[Tensor]]:
    """``blocks[i][j]``: d outs[i] / d inputs[j], of shape ``outs[i].shape + inputs[j].shape``; one
    vector-Jacobian product per output element."""
    blocks = []
    for o in outs:
        shape = tuple(o._data.shape)
        rows = [_vjp_of([o], inputs, [_one_hot(shape, o._data.dtype, k)]) for k in range(o._data.size)]
        blocks.append([_stacked([r[j] for r in rows], shape, tuple(x._data.shape), x, leading=True)
                       for j, x in enumerate(inputs)])
    return blocks


def _jacobian_blocks_forward(outs: list[Tensor], inputs: list[Tensor]) -> list[list[Tensor]]:
    """As :func:`_jacobian_blocks_reverse`, by one Jacobian-vector product per input element."""
    jvp_of = _linearization(outs, inputs)
    columns_by_input = []
    for j, x in enumerate(inputs):
        cols = []
        for k in range(x._data.size):
            tangents = [None] * len(inputs)
            tangents[j] = _one_hot(tuple(x._data.shape), x._data.dtype, k)
            cols.append(jvp_of(tangents))
        columns_by_input.append(cols)
    return [[_stacked([c[i] for c in columns_by_input[j]], tuple(o._data.shape), tuple(x._data.shape), o,
                      leading=False)
             for j, x in enumerate(inputs)] for i, o in enumerate(outs)]


def _stacked(parts: list[Tensor], out_shape: tuple, in_shape: tuple, like: Tensor, leading: bool) -> Tensor:
    """Rows (``leading``: one per output element, each of the input's shape) or columns (one per input
    element, each of the output's shape) assembled into an ``out_shape + in_shape`` block."""
    full = out_shape + in_shape
    if not parts:
        return Tensor._wrap(np.zeros(full, dtype=like._data.dtype))
    stacked = F.stack(parts, 0 if leading else len(out_shape))
    return F.reshape(stacked, full)


def _make_jacobian(fn, argnums, has_aux: bool, name: str, forward: bool):
    nums, many = _argnums(argnums, name)
    staged = _Staged(_jacobian_impl(fn, nums, many, has_aux, argnums, name, forward), fn, name)
    by_row = _Staged(_row_impl(fn, nums, has_aux, argnums, name, forward), fn, name + " row")
    base = fn.fn if isinstance(fn, CompiledFunction) else fn
    sizes: dict = {}

    def run(*args):
        where = _resolve(nums, len(args), argnums, name)
        args = _diff_args(args, where)
        leaves, spec = tree_flatten(args)
        if any(_must_record(leaf) for leaf in leaves):
            return staged(*args)
        key = (spec, CompiledFunction._guard(leaves))
        if key not in sizes:
            try:
                sizes[key] = _output_layout(base, args, has_aux)
            except TraceError as exc:
                if not getattr(exc, "data_dependent", False):
                    raise
                sizes[key] = None   # cannot be traced: the staged call runs it eagerly (or raises if strict)
        if sizes[key] is None:
            return staged(*args)
        out_spec, out_shapes = sizes[key]
        in_shapes = [_shape(leaf) for i in where for leaf in tree_flatten(args[i])[0]]
        rows = sum(int(np.prod(s, dtype=np.int64)) for s in (in_shapes if forward else out_shapes))
        if rows <= ROWS_IN_ONE_GRAPH:
            return staged(*args)
        return _jacobian_by_rows(by_row, args, where, many, has_aux, forward, out_spec, out_shapes, in_shapes)

    functools.update_wrapper(run, base)
    return run


def _shape(leaf) -> tuple:
    return tuple(np.shape(leaf._data if isinstance(leaf, Tensor) else leaf))


def _output_layout(base: Callable, args: tuple, has_aux: bool):
    """``(structure, leaf shapes)`` of ``base(*args)``'s output, from a trace (nothing is compiled)."""
    from ..ir.tracer import trace

    leaves, spec = tree_flatten(args)
    found = []

    def flat(*xs):
        out = base(*tree_unflatten(spec, xs))
        if has_aux:
            out = _split_aux(out, "jacobian")[0]
        out_leaves, out_spec = tree_flatten(out)
        found.append((out_spec, [_shape(o) for o in out_leaves]))
        return tuple(_as_output(o, "jacobian: result leaf") for o in out_leaves)

    trace(flat, *leaves)
    return found[0]


def _row_impl(fn: Callable, nums: list[int], has_aux: bool, argnums, name: str, forward: bool):
    """One row of a Jacobian: ``(args, vectors)`` -> the Jacobian-vector product (``forward``: one
    tangent per differentiated input leaf; a list with one entry per output leaf) or the
    vector-Jacobian product (one cotangent per output leaf; a list with one entry per input leaf)."""
    base = fn.fn if isinstance(fn, CompiledFunction) else fn

    def impl(args, vectors):
        connect = STATE.enabled
        where = _resolve(nums, len(args), argnums, name)
        with enable_grad():
            call_args, _, inputs = _with_inputs(tuple(args), where, connect, name)
            out = base(*call_args)
            aux = None
            if has_aux:
                out, aux = _split_aux(out, name)
            outs = _float_outputs(tree_flatten(out)[0], name)
            like = inputs if forward else outs
            vecs = [_tensor_leaf(v, x._data.dtype) for v, x in zip(vectors, like)]
            row = _linearization(outs, inputs)(vecs) if forward else _vjp_of(outs, inputs, vecs)
        return (row, aux) if has_aux else row

    return impl


def _jacobian_by_rows(by_row: _Staged, args: tuple, where: list[int], many: bool, has_aux: bool, forward: bool,
                      out_spec, out_shapes: list, in_shapes: list):
    """A large Jacobian: one compiled kernel (a Jacobian-vector product for jacfwd, a vector-Jacobian
    product for jacrev) called once per row with a one-hot vector."""
    leaves = tree_flatten(args)[0]
    dtypes_in = [np.asarray(leaf._data if isinstance(leaf, Tensor) else leaf).dtype
                 for i in where for leaf in tree_flatten(args[i])[0]]
    basis_shapes = in_shapes if forward else out_shapes
    basis_dtypes = dtypes_in if forward else [np.dtype(np.result_type(*dtypes_in))] * len(out_shapes)
    # results[a][k]: the product for the k-th element of basis leaf a (a list over the other side's leaves)
    results, aux = [], None
    for a, shape in enumerate(basis_shapes):
        per_element = []
        for k in range(int(np.prod(shape, dtype=np.int64))):
            vectors = [np.zeros(s, d) for s, d in zip(basis_shapes, basis_dtypes)]
            vectors[a].reshape(-1)[k] = 1
            row = by_row(args, vectors)
            if has_aux:
                row, aux = row
            per_element.append([r._data if isinstance(r, Tensor) else np.asarray(r) for r in row])
        results.append(per_element)
    blocks = []   # blocks[i][j]: d output i / d input j
    for i, o_shape in enumerate(out_shapes):
        row = []
        for j, x_shape in enumerate(in_shapes):
            if forward:   # columns: one per element of input j, each of output i's shape
                parts = [col[i] for col in results[j]]
                block = np.stack(parts, axis=len(o_shape)).reshape(o_shape + x_shape) if parts else None
            else:         # rows: one per element of output i, each of input j's shape
                parts = [r[j] for r in results[i]]
                block = np.stack(parts).reshape(o_shape + x_shape) if parts else None
            row.append(np.zeros(o_shape + x_shape, dtypes_in[j]) if block is None else block)
        blocks.append(row)
    specs = [tree_flatten(args[i])[1] for i in where]
    wrap = Tensor._wrap if any(isinstance(leaf, Tensor) for leaf in leaves) else (lambda b: b)
    jac = tree_unflatten(out_spec, [_per_argument(specs, [wrap(b) for b in row], many) for row in blocks])
    return (jac, aux) if has_aux else jac


def jacrev(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """The Jacobian by reverse mode: for each output leaf of shape ``S`` and each differentiated input
    leaf of shape ``P``, a block of shape ``S + P``, arranged as the output's structure holding the
    inputs' structure (as ``jax.jacrev``).

    Compiled, Jacobians with up to :data:`ROWS_IN_ONE_GRAPH` output elements are one fused graph (one
    vector-Jacobian product per row inside it); larger ones call one compiled pullback kernel per row.

    >>> import numpy as np, symgrad
    >>> symgrad.jacrev(lambda x: x[:2] * x[1:])(np.array([1.0, 2.0, 3.0]))
    array([[2., 1., 0.],
           [0., 3., 2.]])
    """
    return _make_jacobian(fn, argnums, has_aux, "jacrev", forward=False)


jacobian = jacrev


def jacfwd(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """The Jacobian by forward mode (one Jacobian-vector product per input element), laid out as
    :func:`jacrev`'s.  Cheaper than ``jacrev`` when there are fewer inputs than outputs.

    >>> import numpy as np, symgrad
    >>> symgrad.jacfwd(lambda x: symgrad.stack([x[0] * x[1], x[0] + x[1], x[1]]))(np.array([2.0, 5.0]))
    array([[5., 2.],
           [1., 1.],
           [0., 1.]])
    """
    return _make_jacobian(fn, argnums, has_aux, "jacfwd", forward=True)


def hessian(fn: Callable, argnums: int | Sequence[int] = 0):
    """The Hessian of a scalar function: ``jacrev(grad(fn, argnums), argnums)``, so for inputs of
    shapes ``P`` and ``Q`` the block is ``P + Q`` (pytrees nest as in ``jax.hessian``).

    >>> import numpy as np, symgrad
    >>> symgrad.hessian(lambda x: (x[0] ** 2) * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    """
    return jacrev(grad(fn, argnums), argnums)
