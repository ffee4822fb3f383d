"""The backward engine: runs the grad_fn graph in decreasing creation order.

A node is always created after the nodes it points at, so running the reachable
nodes most recently created first runs each one after all of its consumers, once
its gradient is complete: the order PyTorch's ``Engine::execute`` prefers, with
no dependency counts (:func:`_execute`).  Every gradient is reduced to its
input's shape and dtype in one place (:func:`_validate`), and saved tensors are
freed unless ``retain_graph``.

Gradients travel as numpy arrays; under ``create_graph=True`` they travel as
Tensors and every formula is recorded, so the result can be differentiated again.

>>> import symgrad
>>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
>>> symgrad.autograd.grad((x ** 3).sum(), x)
(tensor([ 3., 12.]),)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from ..rules.vocab import sum_to
from . import anomaly
from .grad_mode import STATE
from .node import AccumulateGrad, FormulaNode, Node

_SEQ = attrgetter("_seq")


class _GraphTask:
    """What one running backward will execute: read by ``register_multi_grad_hook``."""

    __slots__ = ("id", "seen", "needed", "allowed_leaves")

    def __init__(self, task_id, seen, needed, allowed_leaves) -> None:
        self.id, self.seen, self.needed, self.allowed_leaves = task_id, seen, needed, allowed_leaves

    def will_execute(self, node) -> bool:
        if node not in self.seen:
            return False
        if self.needed is not None:
            return node in self.needed
        if self.allowed_leaves is not None and isinstance(node, AccumulateGrad):
            return node in self.allowed_leaves
        return True


class _Tasks(threading.local):
    stack: list | None = None


_TASKS = _Tasks()
_task_ids = itertools.count()


def current_graph_task():
    """The innermost backward running on this thread, or None."""
    stack = _TASKS.stack
    return stack[-1] if stack else None
_OWN_MIN_SIZE = 4096  # elements; below this, tracking buffer ownership costs more than it saves


def _tensor_cls():
    from ..tensor import Tensor

    return Tensor


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    Tensor = _tensor_cls()
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _root_edge(t, index: int):
    from ..tensor import gradient_edge

    edge = gradient_edge(t)
    if edge[0] is not None:
        return edge
    raise RuntimeError(f"element {index} of tensors does not require grad and does not have a grad_fn")


def _make_root_grads(outputs: tuple, grads: Sequence, create_graph: bool) -> list:
    Tensor = _tensor_cls()
    out = []
    for i, t in enumerate(outputs):
        g = grads[i] if i < len(grads) else None
        if g is None:
            if t._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs "
                                   f"(output {i} has shape {list(t.shape)}; pass gradient= / grad_outputs=)")
            g = np.ones_like(t._data)
            out.append(Tensor._wrap(g) if create_graph else g)
            continue
        if not isinstance(g, Tensor):
            g = Tensor(g, dtype=t.dtype)
        if g.shape != t.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {list(g.shape)} and "
                               f"output[{i}] has a shape of {list(t.shape)}.")
        if create_graph:
            out.append(g)
        else:
            d = g._data
            out.append(d if d.dtype == t._data.dtype else d.astype(t._data.dtype))
    return out


def backward(tensors, grad_tensors=None, retain_graph: bool | None = None, create_graph: bool = False,
             inputs=None) -> None:
    """Compute gradients of ``tensors`` and accumulate them into the leaves' ``.grad``.

    >>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    >>> symgrad.autograd.backward((x * 3).sum()); x.grad
    tensor([3., 3.])
    """
    outputs = _as_tuple(tensors)
    grads = list(_as_tuple(grad_tensors)) if grad_tensors is not None else []
    if retain_graph is None:
        retain_graph = create_graph
    roots = [_root_edge(t, i) for i, t in enumerate(outputs)]
    root_grads = _make_root_grads(outputs, grads, create_graph)
    only = None
    if inputs is not None:
        only = _as_tuple(inputs)
        if not only:
            raise RuntimeError("backward() received an empty list of inputs")
    _execute(roots, root_grads, retain_graph, create_graph, capture=None, accumulate_only=only)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None, create_graph: bool = False,
         allow_unused: bool | None = None, materialize_grads: bool = False) -> tuple:
    """Return the gradients of ``outputs`` with respect to ``inputs`` (``.grad`` is left untouched).

    >>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
    >>> symgrad.autograd.grad((x * x).sum(), x)
    (tensor([2., 4.]),)
    """
    from .graph import GradientEdge

    outs = _as_tuple(outputs)
    ins = (inputs,) if isinstance(inputs, GradientEdge) else _as_tuple(inputs)
    Tensor = _tensor_cls()
    for i, t in enumerate(ins):
        if isinstance(t, GradientEdge):
            if materialize_grads:
                raise RuntimeError("materialize_grads cannot be used when the given input is a GradientEdge")
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd.grad: inputs[{i}] is {type(t).__name__}, expected a Tensor")
        if not t.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (inputs[{i}]) does not require grad")
    if allow_unused is None:
        allow_unused = materialize_grads
    if retain_graph is None:
        retain_graph = create_graph
    grads = list(_as_tuple(grad_outputs)) if grad_outputs is not None else []
    roots = [_root_edge(t, i) for i, t in enumerate(outs)]
    root_grads = _make_root_grads(outs, grads, create_graph)
    capture: dict = {}
    for k, t in enumerate(ins):
        node, nr = (t.node, t.output_nr) if isinstance(t, GradientEdge) else _root_edge(t, k)
        capture.setdefault(node, []).append((nr, k))
    captured = _execute(roots, root_grads, retain_graph, create_graph, capture=capture, n_capture=len(ins))
    result = []
    for k, g in enumerate(captured):
        if g is None:
            if materialize_grads:
                g = np.zeros_like(ins[k]._data)
            elif not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                                   "Set allow_unused=True if this is the desired behavior.")
            else:
                result.append(None)
                continue
        if isinstance(g, Tensor):
            result.append(g)
        else:
            result.append(Tensor._wrap(np.array(g, copy=True) if not g.flags.owndata or not g.flags.writeable
                                       else g))
    return tuple(result)


def _n_outputs(node: Node) -> int:
    return node._n_outputs


def _validate(node: Node, index: int, g, meta, create_graph: bool):
    """Reduce a gradient to its input's shape (undoing broadcasting) and cast it to its dtype."""
    if meta is None:
        return g
    shape, dtype = meta
    if create_graph:
        from ..ops import functional as F

        if not hasattr(g, "_data"):  # a constant formula such as sign's 0
            g = _tensor_cls()._wrap(np.asarray(g, dtype=dtype))
        if tuple(g.shape) != shape:
            g = _reshape_grad(node, index, g, shape, F.sum_to, F.expand)
        if g._data.dtype != dtype:
            g = F.to(g, dtype)
        return g
    if type(g) is not np.ndarray:
        g = np.asarray(g)
    if g.shape != shape:
        g = _reshape_grad(node, index, g, shape, sum_to, np.broadcast_to)
    if g.dtype != dtype:
        g = g.astype(dtype)
    return g


def _reshape_grad(node, index, g, shape, sum_to, expand):
    gshape = tuple(g.shape)
    if len(gshape) >= len(shape) and all(s == 1 or s == gs for s, gs in zip(shape, gshape[len(gshape) - len(shape):])):
        return sum_to(g, shape)
    try:
        if getattr(node, "_user_backward", False):
            # a custom Function's backward: PyTorch only sums a broadcast gradient down, never expands one
            raise ValueError
        return expand(g, shape)  # a rule's constant gradient (e.g. a 0-d zero) broadcast to the input
    except (ValueError, RuntimeError):
        raise RuntimeError(f"Function {type(node).__name__} returned an invalid gradient at index {index} - got "
                           f"{list(gshape)} but expected shape compatible with {list(shape)}") from None


def _run_tensor_hooks(node: Node, grads: list, create_graph: bool) -> None:
    Tensor = _tensor_cls()
    for nr, hooks in node._pre_hooks.items():
        if nr < 0 or not hooks:
            continue
        g = grads[nr] if nr < len(grads) else None
        for hook in list(hooks):
            if g is None:
                # the node runs but this output got no gradient: PyTorch calls its hooks with None
                if hook(None) is not None:
                    raise RuntimeError("can't replace a None gradient with a non-None value")
                continue
            arg = g if create_graph else Tensor._wrap(g)
            new = hook(arg)
            if new is None:
                continue
            if not isinstance(new, Tensor):
                raise TypeError(f"hook {getattr(hook, '__name__', hook)!r} returned {type(new).__name__}; "
                                "a tensor hook must return a Tensor or None")
            old_shape = tuple(arg.shape)
            if tuple(new.shape) != old_shape:
                raise RuntimeError(f"hook '{getattr(hook, '__name__', 'hook')}' has changed the size of value: "
                                   f"expected {list(old_shape)}, got {list(new.shape)}")
            g = new if create_graph else new._data
        if g is not None:
            grads[nr] = g


def _run_node_pre_hooks(node: Node, grads: list, create_graph: bool) -> None:
    """``Node.register_prehook`` hooks: each sees the gradients as a tuple and may replace them."""
    Tensor = _tensor_cls()
    for hook in list(node._node_pre_hooks):
        name = getattr(hook, "__name__", "hook")
        new = hook(tuple(None if g is None else g if create_graph else Tensor._wrap(g) for g in grads))
        if new is None:
            continue
        if not isinstance(new, tuple):
            raise TypeError(f"expected tuple, but hook returned '{type(new).__name__}'")
        if len(new) != len(grads):
            raise RuntimeError(f"hook '{name}' has returned an incorrect number of values "
                               f"(got {len(new)}, but expected {len(grads)})")
        for i, g in enumerate(new):
            if g is not None and not isinstance(g, Tensor):
                raise TypeError(f"hook '{name}' returned a {type(g).__name__} at index {i}; "
                                "a node pre-hook must return Tensors or None")
            grads[i] = None if g is None else g if create_graph else g._data


def _retain(node: Node, grads: list, create_graph: bool) -> None:
    Tensor = _tensor_cls()
    for nr, ref in node._retain.items():
        t = ref()
        if t is None or nr >= len(grads) or grads[nr] is None:
            continue
        g = grads[nr]
        if create_graph:
            t._grad = g if t._grad is None else t._grad + g
        else:
            t._grad = Tensor._wrap(np.array(g, copy=True)) if t._grad is None else Tensor._wrap(t._grad._data + g)


def _needed_nodes(order: list, targets) -> set:
    """Nodes from which some capture target is reachable (only those run under autograd.grad).

    ``order`` is the run order (decreasing creation order): walked backwards, every node comes
    after all the nodes it points at.
    """
    needed = set(targets)
    for node in reversed(order):
        if node in needed:
            continue
        for nxt, _ in node._next:
            if nxt in needed:
                needed.add(node)
                break
    return needed


def _place_leaves(order: list) -> list:
    """Move each AccumulateGrad node (sorted last) to just after the last node that feeds it: its
    gradient is complete there, and PyTorch runs a leaf's hooks as soon as it is.  Leaves fed by the
    same node keep that node's input order."""
    n_leaves = 0
    for node in reversed(order):
        if node._seq != -1:
            break
        n_leaves += 1
    if not n_leaves or n_leaves == len(order):
        return order
    body = order[:-n_leaves]
    after: dict = {}  # position in body -> the leaves whose last consumer is there
    placed = set()
    for i in range(len(body) - 1, -1, -1):
        for nxt, _ in body[i]._next:
            if nxt is not None and nxt._seq == -1 and nxt not in placed:
                placed.add(nxt)
                after.setdefault(i, []).append(nxt)
    result = [leaf for leaf in order[-n_leaves:] if leaf not in placed]  # roots themselves
    for i, node in enumerate(body):
        result.append(node)
        leaves = after.get(i)
        if leaves is not None:
            result.extend(leaves)
    return result


def _execute(roots: list, root_grads: list, keep_graph: bool, create_graph: bool, capture=None,
             n_capture: int = 0, accumulate_only=None):
    """Run the graph from ``roots``; returns the captured gradients when ``capture`` is given.

    Scheduling: a node is always created after the nodes it points at, so running the reachable
    nodes in decreasing creation order (``_seq``) runs every node after all of its consumers, i.e.
    once its gradient is complete.  This is the order PyTorch's ready queue prefers; it needs no
    dependency counts.  AccumulateGrad nodes (sinks, ``_seq`` -1) run last.
    """
    stack = []
    seen: dict = {}  # a dict: ties in the run order (leaves) follow discovery order, not hashes
    for node, _ in roots:
        if node not in seen:
            seen[node] = None
            stack.append(node)
    while stack:
        node = stack.pop()
        for nxt, _ in node._next:
            if nxt is not None and nxt not in seen:
                seen[nxt] = None
                stack.append(nxt)

    order = _place_leaves(sorted(seen, key=_SEQ, reverse=True))
    needed = _needed_nodes(order, capture.keys()) if capture is not None else None
    allowed_leaves = None
    if accumulate_only is not None:
        allowed_leaves = {_root_edge(t, i)[0] for i, t in enumerate(accumulate_only)}
        needed = _needed_nodes(order, allowed_leaves | {t._grad_fn for t in accumulate_only
                                                        if t._grad_fn is not None})
        for t in accumulate_only:
            if t._grad_fn is not None and not t._retains_grad:
                t.retain_grad()
    captured = [None] * n_capture
    owned: dict = {}  # id -> array for gradients this backward allocated and holds exclusively

    buffers: dict = {}
    for (node, nr), g in zip(roots, root_grads):
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * max(_n_outputs(node), nr + 1)
        elif nr >= len(buf):
            buf.extend([None] * (nr + 1 - len(buf)))
        buf[nr] = g if buf[nr] is None else buf[nr] + g

    tasks = _TASKS.stack
    if tasks is None:
        tasks = _TASKS.stack = []
    tasks.append(_GraphTask(next(_task_ids), seen, needed, allowed_leaves))
    prev_mode = STATE.enabled
    STATE.enabled = create_graph
    check_nan = anomaly.is_anomaly_check_nan_enabled()
    slow = anomaly.STATE.enabled
    ndarray = np.ndarray
    try:
        plain = capture is None and allowed_leaves is None and not slow and not create_graph
        for node in order:
            grads = buffers.pop(node, None)
            if grads is None:  # no gradient reached this node
                continue
            if plain and not node._special:
                # The short path: a rule-table node without hooks, plain numpy gradients.
                # (a node with several outputs, unbind, may get a gradient for a later output only)
                outputs = node.apply(grads, False) if grads[0] is not None or \
                    any(g is not None for g in grads) else [None] * len(node._next)
                if not keep_graph:
                    node._released = True
                    if node._has_saved:
                        node._saved = None
                fresh_ok = node._alias_free
            else:
                outputs = _run_special(node, grads, owned, capture, captured, needed, allowed_leaves,
                                       create_graph, slow, check_nan)
                if not keep_graph and not node._released:
                    node.release_variables()
                fresh_ok = not create_graph and (isinstance(node, FormulaNode) and node._alias_free
                                                 or node._fresh_outputs)
            metas = node._meta
            for i, (nxt, nr) in enumerate(node._next):
                g = outputs[i]
                if g is None or nxt is None:
                    continue
                meta = metas[i]
                # Ownership (add in place, let AccumulateGrad steal) only pays for large arrays.
                if create_graph or g.__class__ is not ndarray or g.shape != meta[0] or \
                        (g.dtype is not meta[1] and g.dtype != meta[1]):
                    h = _validate(node, i, g, meta, create_graph)
                    fresh = fresh_ok and h is not g and h.__class__ is ndarray and h.size >= _OWN_MIN_SIZE \
                        and h.flags.owndata
                    g = h
                else:
                    fresh = fresh_ok and g.size >= _OWN_MIN_SIZE and g.flags.owndata and \
                        not any(g is x for x in grads)
                buf = buffers.get(nxt)
                if buf is None:
                    n = nxt._n_outputs
                    buf = buffers[nxt] = [None] * (n if n > nr else nr + 1)
                elif nr >= len(buf):  # nodes with a list of outputs (unbind)
                    buf.extend([None] * (nr + 1 - len(buf)))
                prev = buf[nr]
                if prev is None:
                    buf[nr] = g
                    if fresh:
                        owned[id(g)] = g
                elif owned and id(prev) in owned and prev.shape == g.shape:
                    np.add(prev, g, out=prev)
                else:
                    total = prev + g
                    buf[nr] = total
                    if fresh_ok and total.size >= _OWN_MIN_SIZE:
                        owned.pop(id(prev), None)
                        owned[id(total)] = total
    finally:
        STATE.enabled = prev_mode
        tasks.pop()
    return captured


def _run_special(node, grads, owned, capture, captured, needed, allowed_leaves, create_graph, slow,
                 check_nan) -> list:
    """Run a node that needs more than the short path: hooks, retain_grad, captures for
    autograd.grad, AccumulateGrad, custom Functions, anomaly mode or create_graph."""
    # Which incoming arrays this backward created itself and nobody else holds: AccumulateGrad
    # may steal those instead of copying them.
    mine = [owned.pop(id(g), None) is not None for g in grads] if owned else None
    if (allowed_leaves is not None and node.__class__ is AccumulateGrad and node not in allowed_leaves) or \
            (needed is not None and node not in needed):
        return [None] * len(node._next)  # not part of this backward: its hooks do not run either
    if node._pre_hooks:
        _run_tensor_hooks(node, grads, create_graph)
        mine = None
    if node._retain:
        _retain(node, grads, create_graph)
    if node._node_pre_hooks:
        _run_node_pre_hooks(node, grads, create_graph)
        mine = None
    if capture is not None:
        if node in capture:
            for nr, k in capture[node]:
                captured[k] = grads[nr] if nr < len(grads) else None
        skip = node not in needed or isinstance(node, AccumulateGrad)
    else:
        skip = allowed_leaves is not None and isinstance(node, AccumulateGrad) and node not in allowed_leaves
    nxt_list = node._next
    if skip or (grads[0] is None and all(g is None for g in grads)):
        return [None] * len(nxt_list)
    if slow or node._post_hooks:
        return _apply_node(node, grads, create_graph, check_nan, needed)
    if node.__class__ is AccumulateGrad:
        return node.apply(grads, create_graph, steal=bool(mine and mine[0]))
    outputs = node.apply(grads, create_graph)
    if len(outputs) != len(nxt_list):
        _apply_node_count_error(node, outputs)
    return outputs if needed is None else _drop_unneeded(node, outputs, needed)


def _drop_unneeded(node: Node, outputs: list, needed: set) -> list:
    """Gradients for inputs this backward does not reach are None, as PyTorch hands them to hooks."""
    return [None if g is None or nxt is None or nxt not in needed else g
            for g, (nxt, _) in zip(outputs, node._next)]


def _apply_node_count_error(node, outputs):
    raise RuntimeError(f"function {type(node).__name__} returned an incorrect number of gradients "
                       f"(expected {len(node._next)}, got {len(outputs)})")


def _apply_node(node: Node, grads: list, create_graph: bool, check_nan: bool, needed=None) -> list:
    if anomaly.STATE.enabled:
        try:
            outputs = node.apply(grads, create_graph)
        except Exception:
            anomaly.report(node)
            raise
    else:
        outputs = node.apply(grads, create_graph)
    if len(outputs) != len(node._next):
        raise RuntimeError(f"function {type(node).__name__} returned an incorrect number of gradients "
                           f"(expected {len(node._next)}, got {len(outputs)})")
    if check_nan:
        for i, g in enumerate(outputs):
            if g is None:
                continue
            data = g._data if hasattr(g, "_data") else np.asarray(g)
            if data.dtype.kind == "f" and np.isnan(data).any():
                anomaly.report(node)
                site = anomaly.forward_site(node)
                where = f" The forward op was created at {site}." if site else ""
                raise RuntimeError(f"Function '{type(node).__name__}' returned nan values in its {i}th output."
                                   + where)
    if needed is not None:
        outputs = _drop_unneeded(node, outputs, needed)
    if node._post_hooks:
        outputs = _run_post_hooks(node, outputs, grads, create_graph)
    return outputs


def _run_post_hooks(node: Node, outputs: list, grads: list, create_graph: bool) -> list:
    """``Node.register_hook`` hooks, as PyTorch calls them: ``hook(grad_inputs, grad_outputs)`` with
    tuples of Tensors (or None); a returned tuple replaces the gradients the node passes on."""
    Tensor = _tensor_cls()

    def wrap(g):
        return None if g is None else g if isinstance(g, Tensor) else Tensor._wrap(np.asarray(g))

    grad_outputs = tuple(wrap(g) for g in grads)
    for hook in list(node._post_hooks):
        name = getattr(hook, "__name__", "hook")
        new = hook(tuple(wrap(g) for g in outputs), grad_outputs)
        if new is None:
            continue
        if not isinstance(new, tuple):
            raise TypeError(f"expected tuple, but hook returned '{type(new).__name__}'")
        if len(new) != len(outputs):
            raise RuntimeError(f"hook '{name}' has returned an incorrect number of values "
                               f"(got {len(new)}, but expected {len(outputs)})")
        for i, g in enumerate(new):
            if g is not None and not isinstance(g, Tensor):
                raise TypeError(f"hook '{name}' returned a {type(g).__name__} at index {i}; "
                                "a node hook must return Tensors or None")
        outputs = [None if g is None else g if create_graph else g._data for g in new]
    return outputs
