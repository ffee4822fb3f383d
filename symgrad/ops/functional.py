"""The public op functions (``symgrad.exp``, ``symgrad.matmul``...) and their numpy forwards.

Each function picks the rule-table overload PyTorch would pick and hands the
arguments to :func:`registry.apply`.  Elementwise forwards come from the table
itself; the forwards registered here are for structural ops.

>>> import symgrad
>>> x = symgrad.tensor([1.0, 2.0], requires_grad=True)
>>> type(symgrad.exp(x).grad_fn).__name__
'ExpBackward0'
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from .. import dtypes as _dt
from ..autograd.grad_mode import STATE
from ..tensor import Tensor
from .registry import apply, forward, get
from .vocab import normalize_dims

_Number = (numbers.Number, np.generic)


def _is_number(x) -> bool:
    return isinstance(x, _Number) and not isinstance(x, np.ndarray)


def _call(key: str, *args):
    return apply(get(key), args)


def as_tensor(x, dtype=None) -> Tensor:
    """``x`` as a Tensor (numbers and arrays are wrapped without recording anything)."""
    if isinstance(x, Tensor):
        return x if dtype is None or x.dtype is _dt.to_dtype(dtype) else to(x, dtype)
    return Tensor(x, dtype=dtype)


def _operand(x):
    """Binary-op operand: Tensors and Python numbers pass through; arrays and lists become Tensors."""
    if isinstance(x, Tensor) or _is_number(x):
        return x.item() if isinstance(x, np.generic) else x
    return as_tensor(x)


# --- arithmetic -----------------------------------------------------------------------------

def add(input, other) -> Tensor:
    """``input + other`` with broadcasting (AddBackward0)."""
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        a, b = b, a  # 3 + x records like x + 3, as in PyTorch
    return _call("add.Tensor", a, b)


def sub(input, other) -> Tensor:
    """``input - other`` (SubBackward0; ``3 - x`` is RsubBackward1)."""
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        return _call("rsub.Scalar", b, a)
    return _call("sub.Tensor", a, b)


def rsub(input, other) -> Tensor:
    """``other - input``."""
    a, b = _operand(input), _operand(other)
    if isinstance(b, Tensor):
        return _call("rsub.Tensor", a, b)
    return _call("rsub.Scalar", a, b)


def mul(input, other) -> Tensor:
    """``input * other`` with broadcasting (MulBackward0)."""
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        a, b = b, a
    return _call("mul.Tensor", a, b)


def div(input, other) -> Tensor:
    """True division (DivBackward0); ``1 / x`` is ``reciprocal(x) * 1`` as in PyTorch."""
    a, b = _operand(input), _operand(other)
    if not isinstance(a, Tensor):
        return mul(reciprocal(b), a)
    return _call("div.Tensor", a, b)


true_divide = divide = div
multiply = mul
subtract = sub


def neg(input) -> Tensor:
    return _call("neg", _operand(input))


negative = neg


def reciprocal(input) -> Tensor:
    return _call("reciprocal", _operand(input))


def pow(input, exponent) -> Tensor:
    """``input ** exponent``: PowBackward0 (number exponent), 1 (tensor), 2 (number base)."""
    a, e = _operand(input), _operand(exponent)
    if not isinstance(a, Tensor):
        return _call("pow.Scalar", a, e)
    if isinstance(e, Tensor):
        return _call("pow.Tensor_Tensor", a, e)
    return _call("pow.Tensor_Scalar", a, e)


def square(input) -> Tensor:
    return pow(input, 2)


def _unary(name: str):
    def fn(input) -> Tensor:
        return _call(name, _operand(input))

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` (rule: derivatives.yaml entry ``{name}``)."
    return fn


exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
sin = _unary("sin")
cos = _unary("cos")
tanh = _unary("tanh")
sqrt = _unary("sqrt")


# --- comparisons and other non-differentiable elementwise ops ------------------------------

def _compare(ufunc, name):
    def fn(input, other) -> Tensor:
        a, b = _operand(input), _operand(other)
        da = a._data if isinstance(a, Tensor) else a
        db = b._data if isinstance(b, Tensor) else b
        try:
            return Tensor._wrap(np.asarray(ufunc(da, db)))
        except ValueError as exc:
            raise RuntimeError(f"{name}: the shapes {np.shape(da)} and {np.shape(db)} cannot be broadcast "
                               f"together ({exc})") from None

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` comparison, a bool tensor (not differentiable)."
    return fn


gt = greater = _compare(np.greater, "gt")
lt = less = _compare(np.less, "lt")
ge = greater_equal = _compare(np.greater_equal, "ge")
le = less_equal = _compare(np.less_equal, "le")
eq = _compare(np.equal, "eq")
ne = not_equal = _compare(np.not_equal, "ne")
logical_and = _compare(np.logical_and, "logical_and")
logical_or = _compare(np.logical_or, "logical_or")


def logical_not(input) -> Tensor:
    return Tensor._wrap(np.logical_not(as_tensor(input)._data))


def floor_divide(input, other) -> Tensor:
    """Floor division (not differentiable, like PyTorch's)."""
    a, b = _operand(input), _operand(other)
    da = a._data if isinstance(a, Tensor) else a
    db = b._data if isinstance(b, Tensor) else b
    out = np.asarray(np.floor_divide(da, db))
    want = _dt.result_type(a, b)
    return Tensor._wrap(out.astype(want.np, copy=False))


def remainder(input, other) -> Tensor:
    a, b = _operand(input), _operand(other)
    da = a._data if isinstance(a, Tensor) else a
    db = b._data if isinstance(b, Tensor) else b
    out = np.asarray(np.remainder(da, db))
    return Tensor._wrap(out.astype(_dt.result_type(a, b).np, copy=False))


def constant_function(np_fn):
    """Wrap a piecewise-constant numpy function for create_graph formulas: its result needs no grad."""

    def fn(*args):
        return Tensor._wrap(np.asarray(np_fn(*[a._data if isinstance(a, Tensor) else a for a in args])))

    return fn


# --- reductions -----------------------------------------------------------------------------

@forward("sum")
def _sum_fwd(self, dtype=None):
    out = np.sum(self)
    return out if dtype is None else np.asarray(out).astype(dtype.np)


@forward("sum.dim_IntList")
def _sum_dim_fwd(self, dim, keepdim=False, dtype=None):
    out = np.sum(self, axis=normalize_dims(dim, self.ndim), keepdims=keepdim)
    return out if dtype is None else np.asarray(out).astype(dtype.np)


@forward("mean", float_only=True)
def _mean_fwd(self, dtype=None):
    return np.mean(self)


@forward("mean.dim", float_only=True)
def _mean_dim_fwd(self, dim, keepdim=False, dtype=None):
    return np.mean(self, axis=normalize_dims(dim, self.ndim), keepdims=keepdim)


def _is_all_dims(dim) -> bool:
    return dim is None


def sum(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Sum of all elements (SumBackward0) or over ``dim`` (SumBackward1)."""
    t = as_tensor(input)
    d = None if dtype is None else _dt.to_dtype(dtype)
    if _is_all_dims(dim):
        if keepdim:
            return _call("sum.dim_IntList", t, tuple(range(t.ndim)), True, d)
        return _call("sum", t, d)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return _call("sum.dim_IntList", t, _dims_arg(dim, t.ndim, "sum"), keepdim, d)


def mean(input, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Mean of all elements (MeanBackward0) or over ``dim`` (MeanBackward1)."""
    t = as_tensor(input)
    d = None if dtype is None else _dt.to_dtype(dtype)
    if d is not None:
        t = to(t, d)
    if _is_all_dims(dim):
        if keepdim:
            return _call("mean.dim", t, tuple(range(t.ndim)), True, None)
        return _call("mean", t, None)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return _call("mean.dim", t, _dims_arg(dim, t.ndim, "mean"), keepdim, None)


def _dims_arg(dim, ndim: int, op: str):
    try:
        normalize_dims(dim, ndim)
    except IndexError as exc:
        raise IndexError(f"{op}(): {exc} for a tensor of {ndim} dimensions") from None
    if dim is None:
        return None
    return (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)


# --- shape ----------------------------------------------------------------------------------

def _size_arg(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(int(s) for s in size)


@forward("expand")
def _expand_fwd(self, size, implicit=False):
    size = tuple(self.shape[i - (len(size) - self.ndim)] if s == -1 else s for i, s in enumerate(size))
    return np.broadcast_to(self, size)


def expand(input, *size) -> Tensor:
    """Broadcast to a larger shape without copying (ExpandBackward0)."""
    return _call("expand", as_tensor(input), _size_arg(size), False)


def broadcast_to(input, size) -> Tensor:
    return expand(input, tuple(size))


def expand_as(input, other) -> Tensor:
    return expand(input, tuple(as_tensor(other).shape))


@forward("view")
def _view_fwd(self, size):
    try:
        return np.reshape(self, size)
    except ValueError:
        raise RuntimeError(f"shape '{list(size)}' is invalid for input of size {self.size}") from None


def reshape(input, *shape) -> Tensor:
    """Reshape (ViewBackward0); ``-1`` infers one dimension."""
    return _call("view", as_tensor(input), _size_arg(shape))


view = reshape


@forward("_to_copy")
def _to_copy_fwd(self, dtype=None):
    return self.astype(dtype.np) if dtype is not None else self.copy()


def to(input, *args, dtype=None, copy: bool = False) -> Tensor:
    """Convert to a dtype (ToCopyBackward0); a no-op when the dtype already matches."""
    for a in args:
        if isinstance(a, (_dt.dtype, type, np.dtype)) or (isinstance(a, str) and a != "cpu"):
            dtype = a
    t = as_tensor(input)
    if dtype is None:
        return t
    d = _dt.to_dtype(dtype)
    if d.np == t._data.dtype and not copy:
        return t
    return _call("_to_copy", t, d)


@forward("clone")
def _clone_fwd(self):
    return np.array(self, copy=True)


def clone(input) -> Tensor:
    """A copy that stays in the graph (CloneBackward0)."""
    return _call("clone", as_tensor(input))


def to_dtype(input, d) -> Tensor:
    """Formula vocabulary: cast to ``d`` (used by ToCopyBackward0)."""
    return to(input, d)


# --- formula vocabulary in its differentiable form (create_graph=True) ---------------------

def sum_to(x: Tensor, shape) -> Tensor:
    """Sum a broadcast tensor back to ``shape`` (differentiable)."""
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and x.shape[i + lead] != 1)
    out = sum(x, axes, keepdim=True) if axes else x
    return reshape(out, shape) if lead else out


def sum_backward(grad: Tensor, shape, dim, keepdim) -> Tensor:
    """Gradient of a sum over ``dim``: put back the reduced dims, then broadcast."""
    if not keepdim and len(shape):
        dims = normalize_dims(dim, len(shape))
        kept = list(grad.shape)
        for d in dims:
            kept.insert(d, 1)
        grad = reshape(grad, tuple(kept))
    return expand(grad, tuple(shape))


def index(x: Tensor, idx) -> Tensor:
    return x[idx]


def index_zero(x: Tensor, idx) -> Tensor:
    """``x`` with ``x[idx]`` set to zero (differentiable)."""
    mask = np.ones(tuple(x.shape), dtype=x._data.dtype)
    mask[idx] = 0
    return x * Tensor._wrap(mask)


@forward("where.self", dtype_rule="promote")
def _where_fwd(condition, self, other):
    return np.where(condition, self, other)


def where(condition, input, other) -> Tensor:
    """Pick ``input`` where ``condition`` holds, else ``other`` (WhereBackward0)."""
    c = condition if isinstance(condition, Tensor) else as_tensor(np.asarray(condition, dtype=bool))
    if c._data.dtype != np.bool_:
        c = Tensor._wrap(c._data.astype(bool))
    return _call("where.self", c, _operand(input), _operand(other))


# --- indexing -------------------------------------------------------------------------------

@forward("select.int", view=True)
def _select_fwd(self, dim, index):
    return self[(builtins.slice(None),) * dim + (index,)]


@forward("select_backward")
def _select_backward_fwd(grad_output, input_sizes, dim, index):
    out = np.zeros(input_sizes, dtype=grad_output.dtype)
    out[(builtins.slice(None),) * dim + (index,)] = grad_output
    return out


@forward("slice.Tensor", view=True)
def _slice_fwd(self, dim=0, start=None, end=None, step=1):
    return self[(builtins.slice(None),) * dim + (builtins.slice(start, end, step),)]


@forward("slice_backward")
def _slice_backward_fwd(grad_output, input_sizes, dim, start, end, step):
    out = np.zeros(input_sizes, dtype=grad_output.dtype)
    out[(builtins.slice(None),) * dim + (builtins.slice(start, end, step),)] = grad_output
    return out


@forward("unsqueeze", view=True)
def _unsqueeze_fwd(self, dim):
    return np.expand_dims(self, dim)


@forward("index.Tensor")
def _index_fwd(self, indices):
    return self[indices]


@forward("index_put_add")
def _index_put_add_fwd(values, input_sizes, indices):
    out = np.zeros(input_sizes, dtype=values.dtype)
    np.add.at(out, indices, values)  # repeated indices accumulate
    return out


@forward("unbind.int", view=True)
def _unbind_fwd(self, dim=0):
    return tuple(self[(builtins.slice(None),) * dim + (k,)] for k in range(self.shape[dim]))


@forward("stack", dtype_rule="promote")
def _stack_fwd(tensors, dim=0):
    return np.stack(tensors, axis=dim)


def _check_dim(dim: int, ndim: int, op: str) -> int:
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise IndexError(f"{op}(): Dimension out of range (expected to be in range of [{-bound}, {bound - 1}], "
                         f"but got {dim})")
    return dim % bound


def select(input, dim: int, index: int) -> Tensor:
    """``input`` at position ``index`` along ``dim`` (SelectBackward0)."""
    t = as_tensor(input)
    dim = _check_dim(dim, t.ndim, "select")
    size = t.shape[dim]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} is out of bounds for dimension {dim} with size {size}")
    return _call("select.int", t, dim, index % size)


def select_backward(grad, input_sizes, dim, index) -> Tensor:
    return _call("select_backward", grad, tuple(input_sizes), dim, index)


def slice_op(input, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:
    """``input[start:end:step]`` along ``dim`` (SliceBackward0)."""
    if step is not None and step <= 0:
        raise ValueError("slice step must be positive")
    return _call("slice.Tensor", as_tensor(input), dim, start, end, 1 if step is None else step)


def slice_backward(grad, input_sizes, dim, start, end, step) -> Tensor:
    return _call("slice_backward", grad, tuple(input_sizes), dim, start, end, step)


def unsqueeze(input, dim: int) -> Tensor:
    """Insert a dimension of size one at ``dim`` (UnsqueezeBackward0)."""
    t = as_tensor(input)
    dim = _check_dim(dim, t.ndim + 1, "unsqueeze")
    return _call("unsqueeze", t, dim)


def index_put_add(values, input_sizes, indices) -> Tensor:
    return _call("index_put_add", values, tuple(input_sizes), indices)


def unbind(input, dim: int = 0) -> tuple:
    """Split along ``dim`` into a tuple of tensors (UnbindBackward0; each is output ``k``)."""
    t = as_tensor(input)
    return _call("unbind.int", t, _check_dim(dim, t.ndim, "unbind"))


def unbind_backward(grads, shape, dim) -> Tensor:
    ref = next(g for g in grads if g is not None)
    parts = [grads[k] if k < len(grads) and grads[k] is not None else Tensor._wrap(np.zeros_like(ref._data))
             for k in range(shape[dim])]
    return stack(parts, dim)


def stack(tensors, dim: int = 0) -> Tensor:
    """Stack tensors of one shape along a new dimension (StackBackward0)."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise RuntimeError("stack expects a non-empty TensorList")
    shapes = {tuple(t.shape) for t in ts}
    if len(shapes) > 1:
        raise RuntimeError(f"stack expects each tensor to be equal size, but got {[list(t.shape) for t in ts]}")
    return _call("stack", ts, _check_dim(dim, ts[0].ndim + 1, "stack"))


def _is_advanced(item) -> bool:
    return isinstance(item, (list, np.ndarray, Tensor)) or isinstance(item, (bool, np.bool_))


def getitem(t: Tensor, idx) -> Tensor:
    """``t[idx]``: ints select, slices slice, None unsqueezes; arrays and masks gather (IndexBackward0)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    if any(_is_advanced(i) for i in idx):
        key = _index_arg(idx if len(idx) > 1 else idx[0])
        try:
            np.empty(t.shape, dtype=np.bool_)[key]
        except IndexError as exc:
            raise IndexError(f"index {idx!r} does not fit a tensor of shape {list(t.shape)}: {exc}") from None
        return _call("index.Tensor", t, key)
    n_real = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > t.ndim:
        raise IndexError(f"too many indices for tensor of dimension {t.ndim} (got {n_real})")
    out, dim = t, 0
    for item in idx:
        if item is Ellipsis:
            dim += t.ndim - n_real
        elif item is None:
            out = unsqueeze(out, dim)
            dim += 1
        elif isinstance(item, builtins.slice):
            start, stop, step = item.indices(out.shape[dim])
            if (start, stop, step) != (0, out.shape[dim], 1):
                if step < 0:
                    raise ValueError("step must be greater than zero")
                out = slice_op(out, dim, start, max(stop, start), step)
            dim += 1
        elif isinstance(item, (int, np.integer)):
            out = select(out, dim, int(item))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors are "
                             f"valid indices (got {type(item).__name__})")
    if out is t:  # x[:] is a view in PyTorch; keep it in the graph
        out = _call("slice.Tensor", t, 0, 0, t.shape[0], 1) if t.ndim else t
    return out


# --- in-place ops ---------------------------------------------------------------------------

def _check_inplace_leaf(t: Tensor) -> None:
    if STATE.enabled and t._grad_fn is None and t._requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


def _write_inplace(t: Tensor, result: Tensor, op_name: str) -> Tensor:
    """Copy an out-of-place result into ``t`` and move ``t`` onto the result's node."""
    data = result._data
    if data.dtype != t._data.dtype and data.dtype.kind == "f" and t._data.dtype.kind != "f":
        raise RuntimeError(f"{op_name}: result type {_dt.from_numpy_dtype(data.dtype).name} can't be cast to "
                           f"the desired output type {t.dtype.name}")
    if data.shape != t._data.shape:
        raise RuntimeError(f"{op_name}: output with shape {list(t.shape)} doesn't match the broadcast shape "
                           f"{list(data.shape)}")
    np.copyto(t._data, data, casting="unsafe")
    t._version_counter.value += 1
    if result._grad_fn is not None:
        t._grad_fn = result._grad_fn
        t._output_nr = result._output_nr
    return t


def _alias_for_inplace(t: Tensor, needs_old_value: bool) -> Tensor:
    """A stand-in for ``t`` before the in-place op: same graph position, a copy of the data if saved."""
    old = Tensor._wrap(np.array(t._data, copy=True) if needs_old_value else t._data)
    old._grad_fn, old._output_nr, old._requires_grad = t._grad_fn, t._output_nr, t._requires_grad
    old._accumulate = t._accumulate
    return old


def inplace(t: Tensor, fn, *args, name: str = "inplace") -> Tensor:
    """Run ``fn(t, *args)`` out of place and write the result back into ``t`` (``add_`` and friends)."""
    _check_inplace_leaf(t)
    if not STATE.enabled or not (t.requires_grad or any(isinstance(a, Tensor) and a.requires_grad
                                                         for a in args)):
        from ..autograd.grad_mode import no_grad

        with no_grad():
            result = fn(t, *args)
        return _write_inplace(t, result, name)
    result = fn(_alias_for_inplace(t, True), *args)
    return _write_inplace(t, result, name)


@forward("copy_slices")
def _copy_slices_fwd(self, src, indices):
    out = np.array(self, copy=True)
    out[indices] = src
    return out


def setitem(t: Tensor, idx, value) -> None:
    """``t[idx] = value``; on a non-leaf this records a CopySlices node."""
    idx = _index_arg(idx)
    _check_inplace_leaf(t)
    v = _operand(value)
    if isinstance(v, Tensor) and v._data.dtype != t._data.dtype:
        v = to(v, t.dtype)
    if STATE.enabled and (t.requires_grad or (isinstance(v, Tensor) and v.requires_grad)):
        result = _call("copy_slices", _alias_for_inplace(t, False), v, idx)
        _write_inplace(t, result, "setitem")
        return
    t._data[idx] = v._data if isinstance(v, Tensor) else v
    t._version_counter.value += 1


def _index_arg(idx):
    if isinstance(idx, Tensor):
        return idx._data
    if isinstance(idx, tuple):
        return tuple(i._data if isinstance(i, Tensor) else i for i in idx)
    if isinstance(idx, list):
        return np.asarray([i.item() if isinstance(i, Tensor) else i for i in idx])
    return idx


def zeros_like_data(t: Tensor) -> np.ndarray:
    return np.zeros_like(t._data)


