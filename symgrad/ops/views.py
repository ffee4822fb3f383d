"""PyTorch's view/base model: views know their base, and in-place ops on views rewrite the base's history.

A view (``x[1:]``, ``x.t()``, ``x.diagonal()``, the outputs of ``unbind``/``split``, ...) shares its base's
memory and version counter, and carries a :class:`ViewInfo`: the root base and the chain of view ops that
makes the view from it.  An in-place op on a view

1. computes the view's new value out of place (its graph: the op applied to the view's old value),
2. writes it into the shared memory, and
3. rebases the root: its ``grad_fn`` becomes the ``CopySlices`` node of ``copy_slices(old base, new
   view value, where)``, which routes the gradient of the written region into the op and passes the
   rest through to the old base.

Every other live view of the base then holds a stale ``grad_fn``.  They are marked stale (their class
is swapped for a subclass whose autograd attributes are properties) and regenerate their ``grad_fn`` by
replaying their chain of view ops on the base the first time it is read, as PyTorch does.  A tensor that
is not stale has plain attributes, so the eager hot path pays nothing for this.

The same steps run while a function is traced: the ops above are recorded, so an in-place op on a view
becomes out-of-place IR (``copy_slices`` into the base, then the views replayed from it).

>>> import symgrad
>>> w = symgrad.tensor([2.0], requires_grad=True)
>>> out = symgrad.zeros(3)
>>> out[1:2].copy_(w * 3)
tensor([6.], grad_fn=<SliceBackward0>)
>>> out.grad_fn, out._base is None
(<CopySlices object at 0x...>, True)
>>> ((out ** 2).sum() + (w ** 2).sum()).backward(); w.grad
tensor([40.])
"""

from __future__ import annotations

import weakref

import numpy as np

from ..autograd.grad_mode import STATE
from ..tensor import Tensor
from . import registry

# How a view was made (PyTorch's CreationMeta): it decides which in-place ops on it are allowed.
DEFAULT, NO_GRAD, MULTI_OUTPUT, INFERENCE = 0, 1, 2, 3


class ViewInfo:
    """What makes a view from its root base: ``steps`` replayed on ``base`` give the view.

    Each step is ``(op, arguments after the input, output index or None)``.  ``made_by`` names the
    function that returned several views (``Split``, ``Unbind``), for PyTorch's error about them.
    """

    __slots__ = ("base", "steps", "meta", "made_by", "output_nr")

    def __init__(self, base: Tensor, steps: tuple, meta: int, made_by: str = "", output_nr: int = 0) -> None:
        self.base, self.steps, self.meta, self.made_by, self.output_nr = base, steps, meta, made_by, output_nr


# --- making views -----------------------------------------------------------------------------

def note_view(out: Tensor, inp: Tensor, op, args: tuple, k: int | None = None) -> None:
    """Record that ``out`` is output ``k`` (None: the only output) of view op ``op`` applied to ``inp``."""
    meta = DEFAULT if STATE.enabled else (INFERENCE if STATE.inference else NO_GRAD)
    step = (op, tuple(args[1:]), k)
    parent = inp._view_info
    if parent is None:
        base, steps = inp, (step,)
        made_by, output_nr = "", 0
    else:
        base, steps = parent.base, parent.steps + (step,)
        made_by, output_nr = parent.made_by, parent.output_nr
        if meta == DEFAULT:
            meta = parent.meta
    if k is not None and meta == DEFAULT:
        meta, made_by, output_nr = MULTI_OUTPUT, op.name.capitalize(), k
    out._view_info = ViewInfo(base, steps, meta, made_by, output_nr)
    _track(base, out)


def mark_multi_output(views, made_by: str) -> None:
    """The pieces of ``split``/``chunk``/``tensor_split``: views that PyTorch does not let an in-place
    op modify while autograd records, since their bases would be rebased several times."""
    for k, v in enumerate(views):
        info = v._view_info
        if info is not None and info.meta == DEFAULT:
            info.meta, info.made_by, info.output_nr = MULTI_OUTPUT, made_by, k


class _LiveViews:
    """Weak references to the views of one base, pruned as they die."""

    __slots__ = ("refs", "limit")

    def __init__(self) -> None:
        self.refs: list = []
        self.limit = 16

    def add(self, view: Tensor) -> None:
        refs = self.refs
        refs.append(weakref.ref(view))
        if len(refs) > self.limit:
            refs[:] = [r for r in refs if r() is not None]
            self.limit = max(16, 2 * len(refs))

    def alive(self):
        for r in self.refs:
            v = r()
            if v is not None:
                yield v


def _track(base: Tensor, view: Tensor) -> None:
    live = base.__dict__.get("_live_views")
    if live is None:
        live = base._live_views = _LiveViews()
    live.add(view)


def base_of(t: Tensor) -> Tensor | None:
    info = t._view_info
    return None if info is None else info.base


def replay(base: Tensor, steps: tuple) -> Tensor:
    """The view that ``steps`` make from ``base`` now (recorded, so it has a current ``grad_fn``)."""
    x = base
    for op, rest, k in steps:
        x = registry.apply(op, (x,) + rest)
        if k is not None:
            x = x[k]
    return x


# --- stale views --------------------------------------------------------------------------------

class _StaleAttribute:
    """An autograd attribute of a stale view: reading it regenerates the view's ``grad_fn`` first."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        regenerate(obj)
        return getattr(obj, self.name)

    def __set__(self, obj, value) -> None:
        obj.__class__ = type(obj)._fresh_class
        obj.__dict__.pop("_view_poison", None)
        setattr(obj, self.name, value)


_STALE_CLASSES: dict[type, type] = {}
_AUTOGRAD_ATTRIBUTES = ("_grad_fn", "_output_nr", "_requires_grad")


def _stale_class(cls: type) -> type:
    stale = _STALE_CLASSES.get(cls)
    if stale is None:
        body = {name: _StaleAttribute(name) for name in _AUTOGRAD_ATTRIBUTES}
        body.update(_fresh_class=cls, __module__=cls.__module__, __qualname__=cls.__qualname__)
        stale = _STALE_CLASSES[cls] = type(cls.__name__, (cls,), body)
    return stale


def is_stale(t: Tensor) -> bool:
    return type(t).__dict__.get("_fresh_class") is not None


def _no_grad_message(what: str) -> str:
    return (f"A view was created in no_grad mode and {what} with grad mode enabled. Given that this use case "
            "is ambiguous and error-prone, it is forbidden. You can clarify your code by moving both the view "
            "and the inplace either both inside the no_grad block (if you don't want the inplace to be tracked) "
            "or both outside (if you want the inplace to be tracked).")


def _multi_output_message(info: ViewInfo, what: str) -> str:
    return (f"Output {info.output_nr} of {info.made_by} is a view and {what}. This view is the output of a "
            "function that returns multiple views. Such functions do not allow the output views to be modified "
            "inplace. You should replace the inplace operation by an out-of-place one.")


def mark_stale(base: Tensor, recorded: bool) -> None:
    """The base's value or history changed: its live views regenerate their ``grad_fn`` when next read.

    ``recorded``: autograd recorded the change (grad mode on); views made in no_grad mode or by a
    function returning several views then refuse to be used, as in PyTorch.
    """
    live = base.__dict__.get("_live_views")
    if live is None:
        return
    for v in live.alive():
        info = v._view_info
        if info is None or info.base is not base:
            continue
        if recorded and info.meta in (NO_GRAD, INFERENCE):
            v.__dict__["_view_poison"] = _no_grad_message("its base or another view of its base has been modified "
                                                          "inplace")
        elif recorded and info.meta == MULTI_OUTPUT:
            v.__dict__["_view_poison"] = _multi_output_message(
                info, "its base or another view of its base has been modified inplace")
        if not is_stale(v):
            v.__class__ = _stale_class(type(v))


def regenerate(v: Tensor) -> None:
    """Give a stale view the ``grad_fn`` of its chain of view ops replayed on its base's history now."""
    poison = v.__dict__.get("_view_poison")
    if poison is not None:
        raise RuntimeError(poison)
    v.__class__ = type(v)._fresh_class
    info = v._view_info
    was = STATE.enabled
    STATE.enabled = True      # a view's grad_fn is metadata: regenerated even when read under no_grad
    try:
        fresh = replay(info.base, info.steps)
    finally:
        STATE.enabled = was
    d = v.__dict__
    d["_grad_fn"], d["_output_nr"] = fresh._grad_fn, fresh._output_nr
    rec = registry._recorder
    if rec is not None:
        rec.same_value(v, fresh)


# --- in-place ops -------------------------------------------------------------------------------

_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
            "location. Please clone() the tensor before performing the operation.")


def check_inplace(t: Tensor, recorded: bool) -> None:
    """PyTorch's refusals of an in-place op on ``t`` (``recorded``: autograd will record it)."""
    data = t._data
    if data.size > 1 and any(s == 0 and n > 1 for s, n in zip(data.strides, data.shape)):
        raise RuntimeError(_OVERLAP)
    info = t._view_info
    if info is not None and any(op.key == "as_strided" for op, _, _ in info.steps) and data.size > 1:
        pos = _flat_positions(info, data)     # only as_strided (unfold) can make other overlaps
        if np.unique(pos).size != pos.size:
            raise RuntimeError(_OVERLAP)
    if info is None or not recorded:
        return
    if is_stale(t) and t.__dict__.get("_view_poison") is not None:
        raise RuntimeError(t.__dict__["_view_poison"])
    base = info.base
    if base._grad_fn is None and base._requires_grad:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    if info.meta == MULTI_OUTPUT:
        raise RuntimeError(_multi_output_message(info, "is being modified inplace"))
    if info.meta in (NO_GRAD, INFERENCE):
        raise RuntimeError(_no_grad_message("is being modified inplace"))


def written_region(view: Tensor):
    """The index of ``view``'s elements in its base: a basic index when the chain only slices, selects
    and unsqueezes, else a tuple of integer arrays (one per base dimension, of the view's shape)."""
    info = view._view_info
    basic = _basic_index(info)
    if basic is not None:
        return basic
    return np.unravel_index(_flat_positions(info, view._data), info.base._data.shape)


def _basic_index(info: ViewInfo):
    base_shape = info.base._data.shape
    items = [range(n) for n in base_shape]     # per base dim: the positions kept, or an int
    view_dims: list = list(range(len(base_shape)))    # per view dim: its base dim, or None (unsqueezed)
    for op, rest, k in info.steps:
        name = op.key
        if k is not None:
            return None
        if name == "slice.Tensor":
            dim, start, end, step = (list(rest) + [0, None, None, 1][len(rest):])[:4]
            b = view_dims[dim]
            if b is None:
                return None
            items[b] = items[b][slice(start, end, step)]
        elif name == "select.int":
            dim, index = rest
            b = view_dims[dim]
            if b is None:
                return None
            items[b] = items[b][index]
            del view_dims[dim]
        elif name == "unsqueeze":
            view_dims.insert(rest[0] % (len(view_dims) + 1), None)
        else:
            return None
    index, next_base = [], 0
    for b in view_dims:
        if b is None:
            index.append(None)
            continue
        index.extend(items[next_base:b])       # dims selected away before this one (ints)
        r = items[b]
        index.append(slice(r.start, r.stop if r.stop >= 0 else None, r.step))
        next_base = b + 1
    index.extend(items[next_base:])
    return tuple(index)


def _flat_positions(info: ViewInfo, view_data: np.ndarray) -> np.ndarray:
    """Positions, in the base's C order, of the view's elements (an int array of the view's shape)."""
    base_data = info.base._data
    if base_data.flags.c_contiguous and base_data.size:
        # read off the memory: the view's offset and strides in elements of the base
        item = base_data.itemsize
        offset = (view_data.__array_interface__["data"][0] - base_data.__array_interface__["data"][0]) // item
        pos = np.full(view_data.shape, offset, dtype=np.intp)
        for d, (n, s) in enumerate(zip(view_data.shape, view_data.strides)):
            shape = [1] * view_data.ndim
            shape[d] = n
            pos = pos + np.arange(n, dtype=np.intp).reshape(shape) * (s // item)
        return pos
    # any other layout: the same view ops applied to the positions themselves
    pos = np.arange(base_data.size, dtype=np.intp).reshape(base_data.shape)
    for op, rest, k in info.steps:
        if op.key == "as_strided":
            raise RuntimeError("an in-place write through as_strided into a tensor whose memory is not one "
                               "contiguous block is not supported; clone() the base first")
        pos = registry.resolved_forward(op)(pos, *rest)
        if k is not None:
            pos = pos[k]
    return np.asarray(pos)


def move_retained_grad(t: Tensor, old_node, old_nr: int) -> None:
    """``t.retain_grad()`` follows ``t`` through an in-place op to its new ``grad_fn`` (as in PyTorch)."""
    if not t.__dict__.get("_retains_grad") or old_node is None or old_node._retain is None:
        return
    ref = old_node._retain.pop(old_nr, None)
    if ref is None:
        return
    node = t._grad_fn
    if node is None:
        return
    if node._retain is None:
        node._retain = {}
        node._special = True
    node._retain[t._output_nr] = ref


registry.note_view = note_view
