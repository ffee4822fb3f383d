"""The eager :class:`Tensor`: a numpy array plus PyTorch's autograd state.

>>> import symgrad
>>> x = symgrad.tensor([2.0], requires_grad=True)
>>> z = 2 * x ** 2
>>> z
tensor([8.], grad_fn=<MulBackward0>)
>>> z.backward(); x.grad
tensor([8.])
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import Any

import numpy as np

from . import _device
from . import dtypes as _dt
from ._format import format_tensor
from .autograd import engine as _engine
from .autograd import node as _node_module
from .autograd.grad_mode import INFERENCE_COUNTER as _INFERENCE_COUNTER
from .autograd.grad_mode import STATE as _GRAD_MODE
from .autograd.node import AccumulateGrad
from .ops import registry as _registry

_DEFAULT_SHOWN = {"float32", "int64", "bool"}


class VersionCounter:
    """Counts in-place modifications; shared by a tensor, its views and its detached aliases."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class Size(tuple):
    """A tensor's shape: a tuple of ints (``torch.Size``)."""

    def __repr__(self) -> str:
        return f"symgrad.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n


def _accumulate_node(t: Tensor) -> AccumulateGrad:
    """The leaf's AccumulateGrad node, shared by every graph alive that uses the leaf.

    Like PyTorch, the tensor holds its node weakly (graphs hold it strongly): a strong
    reference both ways would make every leaf a reference cycle that only the garbage
    collector can free.
    """
    ref = t._accumulate
    node = ref() if ref is not None else None
    if node is None:
        node = AccumulateGrad(t)
        t._accumulate = weakref.ref(node)
    return node


def gradient_edge(t: Tensor) -> tuple:
    """Where ``t``'s gradient goes: ``(grad_fn, output_nr)``, its AccumulateGrad, or ``(None, 0)``."""
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    if t._requires_grad:
        return (_accumulate_node(t), 0)
    return (None, 0)


def is_numpy_face(t) -> bool:
    """Whether ``t`` follows numpy's semantics rather than PyTorch's: a value traced for a function that
    was given numpy arrays (method signatures, promotion, negative-step slices)."""
    return getattr(t, "_numpy_face", False)


class Tensor:
    """A multi-dimensional array that records the operations applied to it.

    Create tensors with :func:`symgrad.tensor`, :func:`symgrad.zeros` and friends.
    """

    # Defaults live on the class so that making a tensor (every op does) sets two attributes.
    _requires_grad = False
    _grad_fn = None
    _output_nr = 0
    _grad = None
    _accumulate = None
    _retains_grad = False
    _vc = None  # the VersionCounter, created when first needed (most temporaries never need one)
    _numpy_face = False  # see is_numpy_face
    _view_info = None    # a view's base and the view ops that make it (symgrad.ops.views.ViewInfo)

    # numpy must defer to Tensor's reflected operators (np.float64(2) * t -> Tensor.__rmul__)
    __array_priority__ = 1000

    def __init__(self, data: Any = None, *, dtype=None, requires_grad: bool = False) -> None:
        arr = _as_array(data if data is not None else [], dtype)
        self._data = arr
        self._requires_grad = False
        self._grad_fn = None
        self._output_nr = 0
        self._grad = None
        self._accumulate = None
        self._retains_grad = False
        if _GRAD_MODE.inference:
            self._vc = _INFERENCE_COUNTER
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _wrap(data: np.ndarray) -> Tensor:
        """A leaf around ``data`` (no copy); the fast constructor used by ops."""
        t = object.__new__(Tensor)
        t._data = data
        return t

    @property
    def _version_counter(self) -> VersionCounter:
        vc = self._vc
        if vc is None:
            vc = self._vc = VersionCounter()
        return vc

    @_version_counter.setter
    def _version_counter(self, counter: VersionCounter) -> None:
        self._vc = counter

    # --- metadata ---------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        """The shape, or the length of one dimension."""
        if dim is None:
            return self.shape
        return self._data.shape[dim]

    @property
    def dtype(self) -> _dt.dtype:
        return _dt.from_numpy_dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    @property
    def device(self) -> _device.device:
        return _device.CPU

    is_cuda = False
    is_sparse = False
    is_quantized = False
    is_meta = False
    is_complex = staticmethod(lambda: False)

    def get_device(self) -> int:
        """-1: the tensor is on the CPU (PyTorch's answer for CPU tensors)."""
        return -1

    def cpu(self, memory_format=None) -> Tensor:
        """This tensor (it is on the CPU already)."""
        return self

    def cuda(self, device=None, non_blocking: bool = False, memory_format=None) -> Tensor:
        raise _device.cpu_only_error("Tensor.cuda() (a CUDA device)")

    def mps(self, *args, **kwargs) -> Tensor:
        raise _device.cpu_only_error("Tensor.mps() (an MPS device)")

    @property
    def data(self) -> Tensor:
        """The values without the autograd history: a tensor sharing this one's memory, not requiring grad.

        Unlike :meth:`detach` it has its own version counter, so in-place changes through ``.data``
        (``p.data -= lr * p.grad``) are not seen by autograd, as in PyTorch.
        """
        rec = _registry._recorder
        if rec is not None and rec.is_traced(self):
            # in a traced function, a graph value: shares the version counter so that the tracer sees
            # in-place writes through it (a separate counter would hide them from the trace)
            return self.detach()
        return Tensor._wrap(self._data)

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data must be set to a Tensor, got {type(value).__name__}")
        rec = _registry._recorder
        if rec is not None and (rec.is_traced(self) or rec.is_traced(value)):
            rec.refuse("assigning Tensor.data inside a compiled function is not supported: the graph cannot "
                       "rebind a tensor to other values; compute a new tensor instead")
        if self.requires_grad and value._data.dtype != self._data.dtype:
            raise RuntimeError(f"data set to a tensor that requires gradients must match its dtype: assigning "
                               f"{value.dtype.name} data to a {self.dtype.name} tensor that requires grad")
        self._data = value._data

    _TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
                   "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor", "int8": "CharTensor",
                   "uint8": "ByteTensor", "bool": "BoolTensor"}

    def type(self, dtype=None, non_blocking: bool = False, **kwargs):
        """With no argument, PyTorch's type name (``'torch.FloatTensor'``, so code comparing it runs
        unchanged); with a dtype or such a name, the tensor converted to it."""
        if dtype is None:
            return "torch." + self._TYPE_NAMES[self._data.dtype.name]
        if isinstance(dtype, str):
            name = dtype.rsplit(".", 1)[-1]
            by_type = {v: k for k, v in self._TYPE_NAMES.items()}
            if dtype.startswith("torch.cuda."):
                raise _device.cpu_only_error(f"the CUDA tensor type {dtype!r}")
            if name not in by_type:
                raise ValueError(f"invalid type: {dtype!r}")
            dtype = by_type[name]
        return self.to(dtype)

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_contiguous(self) -> bool:
        return bool(self._data.flags.c_contiguous)

    # --- autograd state ---------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._grad_fn is not None or self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` on a leaf in place and return it."""
        if self._grad_fn is not None:
            if requires_grad:
                return self
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to "
                               "use a computed variable in a subgraph that doesn't require differentiation "
                               "use var_no_grad = var.detach().")
        if requires_grad and self._vc is _INFERENCE_COUNTER and not _GRAD_MODE.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not "
                               "allowed.")
        if requires_grad and self._data.dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients "
                               f"(got dtype {self.dtype.name})")
        self._requires_grad = bool(requires_grad)
        return self

    @property
    def _base(self) -> Tensor | None:
        """The root tensor whose memory this view shares (None when this is not a view)."""
        info = self._view_info
        return None if info is None else info.base

    def _is_view(self) -> bool:
        return self._view_info is not None

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    @property
    def grad_fn(self):
        return self._grad_fn

    @property
    def grad(self) -> Tensor | None:
        if self._grad_fn is not None and not self._retains_grad:
            warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
                          ".grad attribute won't be populated during autograd.backward(). If you indeed "
                          "want the .grad field to be populated for a non-leaf Tensor, use .retain_grad() "
                          "on the non-leaf Tensor.", UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has data of a different size: {list(value.shape)} "
                                   f"vs the tensor's {list(self.shape)}")
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def retain_grad(self) -> None:
        """Keep this non-leaf's gradient in ``.grad`` after backward."""
        if self._grad_fn is None:
            if not self._requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return  # leaves keep their gradient anyway
        if self._retains_grad:
            return
        node = self._grad_fn
        if node._retain is None:
            node._retain = {}
            node._special = True
        import weakref

        node._retain[self._output_nr] = weakref.ref(self)
        self._retains_grad = True

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor replaces it.

        >>> x = symgrad.tensor([1.0], requires_grad=True)
        >>> h = x.register_hook(lambda g: g * 2)
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is not None:
            node = self._grad_fn
        else:
            node = _accumulate_node(self)
            self._hooked_accumulate = node  # hooks live on the node: keep it while the tensor lives
        return node._add_tensor_hook(self._output_nr, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` after a backward has accumulated this leaf's gradient into ``.grad``.

        >>> w = symgrad.tensor([1.0, 2.0], requires_grad=True)
        >>> def halve(p):
        ...     p.grad.mul_(0.5)
        >>> h = w.register_post_accumulate_grad_hook(halve)
        >>> (w * 4).sum().backward(); w.grad
        tensor([2., 2.])
        """
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        node = _accumulate_node(self)
        self._hooked_accumulate = node  # hooks live on the node: keep it while the tensor lives
        return node._add_post_accumulate_hook(hook)

    def is_inference(self) -> bool:
        """True for a tensor created inside ``inference_mode`` (or a view of one)."""
        return self._vc is _INFERENCE_COUNTER

    @property
    def _version(self) -> int:
        if self._vc is _INFERENCE_COUNTER:
            raise RuntimeError("Inference tensors do not track version counter.")
        return self._version_counter.value

    def _bump_version(self) -> None:
        self._version_counter.value += 1

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data (and version counter), cut from the graph."""
        t = Tensor._wrap(self._data)
        t._version_counter = self._version_counter
        if _registry._recorder is not None:
            _registry._recorder.alias(t, self, "detach")
        return t

    def detach_(self) -> Tensor:
        """Cut this tensor from the graph in place: it becomes a leaf that does not require grad."""
        if self._view_info is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self._grad_fn = None
        self._output_nr = 0
        self._requires_grad = False
        return self

    def backward(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves.

        >>> x = symgrad.tensor([3.0], requires_grad=True)
        >>> (x * x).backward(); x.grad
        tensor([6.])
        """
        if gradient is None and inputs is None and self._grad_fn is not None and self._data.size == 1:
            # the common `loss.backward()`: skip the general argument handling
            _engine._execute([(self._grad_fn, self._output_nr)],
                             [Tensor._wrap(np.ones_like(self._data)) if create_graph else np.ones_like(self._data)],
                             create_graph if retain_graph is None else retain_graph, create_graph)
            return
        _engine.backward((self,), None if gradient is None else (gradient,), retain_graph, create_graph, inputs)

    # --- conversion -------------------------------------------------------------------------
    def numpy(self, force: bool = False) -> np.ndarray:
        """The underlying numpy array (shared, not copied)."""
        _concrete(self, ".numpy()")
        # as in PyTorch, only while grad mode is on (a Function's forward runs without it)
        if self.requires_grad and not force and _GRAD_MODE.enabled:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        return self._data

    def __array__(self, dtype=None, copy=None):
        rec = _registry._recorder
        if rec is not None and rec.is_traced(self):
            _refuse_scipy_function()   # a scipy.special function converting its argument: name it
            rec.refuse(f"numpy.array/numpy.asarray of a traced value (in {_array_caller()}; a list of tensors "
                       "given to a numpy function is converted this way too) would take it out of the graph: "
                       "to combine values into one array use np.stack([...]) or np.concatenate([...]), which "
                       "keep the graph")
        if self.requires_grad and _GRAD_MODE.enabled:
            _refuse_scipy_function()
            # a numpy array made of this tensor would silently drop its graph
            raise RuntimeError(f"Can't call numpy() on Tensor that requires grad: numpy.array/asarray of it (in "
                               f"{_array_caller()}) "
                               "would drop its gradient. To combine tensors use symgrad.stack or np.stack "
                               "(which keep the graph); to read the values use tensor.detach().numpy().")
        if dtype is not None and np.dtype(dtype) != self._data.dtype:
            return self._data.astype(dtype)
        return self._data.copy() if copy else self._data

    def item(self):
        """The value of a one-element tensor as a Python number."""
        _concrete(self, ".item()")
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        _concrete(self, ".tolist()")
        return self._data.tolist()

    def __float__(self) -> float:
        _concrete(self, "float(tensor)")
        return float(self.item())

    def __int__(self) -> int:
        _concrete(self, "int(tensor)")
        return int(self.item())

    def __index__(self) -> int:
        _concrete(self, "using a tensor as an index")
        if self._data.dtype.kind not in "iu" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        _concrete(self, "bool(tensor) (an `if` or `while` on a tensor)")
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._data.reshape(()).item())

    def __repr__(self) -> str:
        suffixes = []
        if self._grad_fn is not None:
            suffixes.append(f"grad_fn=<{type(self._grad_fn).__name__}>")
        elif self._requires_grad:
            suffixes.append("requires_grad=True")
        name = self._data.dtype.name
        name = "bool" if name == "bool" else name
        show = name not in _DEFAULT_SHOWN or (self._data.size == 0 and name != "float32")
        if name == "float32" and _dt.get_default_dtype() is not _dt.float32:
            show = True
        return format_tensor(self._data, dtype_name=name, show_dtype=show, suffixes=suffixes)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0:  # f"{t:.3f}" formats the number, as in PyTorch
            return format(self._data.item(), spec)
        return format(repr(self), spec)

    def __hash__(self) -> int:
        return id(self)

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return _rows(self)

    def __reduce__(self):
        return (_rebuild, (self._data, self._requires_grad))


_node_module.bind_tensor_class(Tensor)


# numpy surface, elementwise family: scipy.special's Python functions (not ufuncs) convert their
# argument with numpy.asarray, which cannot keep a graph; name the function and what to use instead.
# symgrad.scipy.special has drop-ins; with SCIPY_ARRAY_API=1 scipy's own run on tensors (their array API).
_SCIPY_EQUIVALENTS = {name: f"symgrad.scipy.special.{name} (a drop-in: the same arguments)"
                      for name in ("logsumexp", "softmax", "log_softmax")}


def _refuse_scipy_function() -> None:
    """Raise a TypeError naming the scipy.special function on the call stack, if one is there."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith("scipy.special"):
            # the outermost scipy frame whose function scipy.special exports: the one the user called
            # (inner frames are helpers, outer ones may be wrappers with other names)
            special = sys.modules.get("scipy.special")
            name = frame.f_code.co_name
            while frame is not None and frame.f_globals.get("__name__", "").startswith("scipy."):
                if hasattr(special, frame.f_code.co_name):
                    name = frame.f_code.co_name
                else:
                    # with SCIPY_ARRAY_API=1 a ufunc runs inside scipy's dispatching wrapper, as its local _f
                    wrapped = getattr(frame.f_locals.get("_f"), "__name__", None)
                    if isinstance(wrapped, str) and hasattr(special, wrapped):
                        name = wrapped
                frame = frame.f_back
            use = _SCIPY_EQUIVALENTS.get(name)
            raise TypeError(f"symgrad: scipy.special.{name} is not supported on symgrad tensors (it converts "
                            f"its argument with numpy.asarray, which would drop the gradient); "
                            + (f"use {use}, or set the environment variable SCIPY_ARRAY_API=1 before scipy is "
                               "first imported (scipy then computes it with symgrad's array API namespace)"
                               if use else "the scipy.special functions symgrad differentiates are those of "
                               "symgrad.scipy.special (expit, logit, erf, erfc, gammaln, digamma, xlogy, xlog1py, "
                               "logsumexp, softmax, log_softmax)")
                            + ", or t.detach().numpy() if no gradient is needed")
        frame = frame.f_back


def _concrete(t: Tensor, what: str) -> None:
    """Refuse to read data computed from traced inputs (see symgrad.ir.tracer)."""
    rec = _registry._recorder
    if rec is not None:
        rec.check_concrete(t, what)


def _array_caller() -> str:
    """``module.function`` of the innermost Python frame outside symgrad: who turned a tensor into an
    array (the user's code, or a library function such as scipy.special.logsumexp)."""
    import sys

    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("symgrad"):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"

    def installed(f) -> bool:
        return "-packages" in f.f_code.co_filename

    def package(f) -> str:
        return f.f_globals.get("__name__", "?").split(".")[0]

    # inside an installed library, name its outermost function the caller called (scipy's logsumexp,
    # not the private helper that ran asarray)
    while installed(frame) and frame.f_back is not None and installed(frame.f_back) and \
            package(frame.f_back) == package(frame):
        frame = frame.f_back
    module = ".".join(p for p in frame.f_globals.get("__name__", "?").split(".") if not p.startswith("_")) \
        if installed(frame) else frame.f_globals.get("__name__", "?")
    return f"{module}.{frame.f_code.co_name}"


def _rows(t: Tensor):
    """``iter(t)``: unbound on the first ``next()``, since ``np.iterable(t)`` (which array API libraries
    call on every argument) only asks for the iterator."""
    from .ops import functional as F

    yield from F.unbind(t, 0)


def _rebuild(data, requires_grad):
    t = Tensor._wrap(data)
    t._requires_grad = requires_grad
    return t


def _as_array(data: Any, dtype) -> np.ndarray:
    """Convert tensor-constructor input to an owned numpy array with PyTorch's dtype defaults."""
    want = None if dtype is None else _dt.to_dtype(dtype)
    if isinstance(data, Tensor):
        arr = np.array(data._data, copy=True)
    elif isinstance(data, np.ndarray):
        arr = np.array(data, copy=True)
        _dt.from_numpy_dtype(arr.dtype)  # rejects unsupported dtypes with a clear error
    elif isinstance(data, np.generic):
        arr = np.array(data)
    else:
        if isinstance(data, (list, tuple)) and _contains_tensor(data):
            data = _tensors_to_lists(data)
        try:
            arr = np.array(data)
        except ValueError as exc:
            raise ValueError(f"symgrad.tensor: cannot build a tensor from {type(data).__name__}: {exc}") from None
        kind = arr.dtype.kind
        if kind == "f":
            arr = arr.astype(_dt.get_default_dtype().np if want is None else want.np)
        elif kind in "iu":
            arr = arr.astype(np.int64)
        elif kind == "b":
            pass
        elif arr.size == 0 and kind == "f":
            pass
        else:
            raise TypeError(f"symgrad.tensor: could not infer dtype of {type(data).__name__} "
                            f"(numpy made dtype {arr.dtype})")
    if want is not None and arr.dtype != want.np:
        arr = arr.astype(want.np)
    return arr


def _contains_tensor(data) -> bool:
    return any(isinstance(d, Tensor) or (isinstance(d, (list, tuple)) and _contains_tensor(d)) for d in data)


def _tensors_to_lists(data):
    return [d.tolist() if isinstance(d, Tensor) else _tensors_to_lists(d) if isinstance(d, (list, tuple))
            else d for d in data]


