"""Lowering aten FX graphs (AOTAutograd's forward and backward graphs) into symgrad, and running them.

A graph is lowered by interpreting it with symgrad Tensors while symgrad's tracer records the IR: an
aten op whose name and arguments match an op of symgrad's rule table (``aten.mul.Tensor`` ->
``mul.Tensor``) is applied as that op; the composite aten ops that AOTAutograd emits
(``tanh_backward``, ``gelu``, ``nll_loss_forward``, ``_log_softmax_backward_data``, ...) are written as
short symgrad expressions in :data:`SPECIAL`.  :func:`unsupported_ops` decides before anything runs
whether every node can be lowered; if not, the graph stays torch's.
"""

from __future__ import annotations

import math
import operator

import numpy as np

import symgrad

try:
    import torch
except ImportError:  # pragma: no cover - the backend needs torch; without it this module still imports
    torch = None

from ..compiler.compile import CompiledFunction
from ..ops import registry
from ..ops.functional import index_put_add
from ..tensor import Tensor

aten = torch.ops.aten if torch is not None else None

# float32 and float64 compute; integer and boolean tensors (class labels, masks) come along
_DTYPES = {} if torch is None else {torch.float32: symgrad.float32, torch.float64: symgrad.float64,
                                    torch.int64: symgrad.int64, torch.int32: symgrad.int32, torch.bool: symgrad.bool}
_SUPPORTED_TENSOR_DTYPES = set(_DTYPES)


# --- composite aten ops, written in symgrad ---------------------------------------------------------

def _scalar_op(fn):
    def lower(x, other, alpha=1):
        return fn(x, other * alpha if alpha != 1 else other)
    return lower


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + symgrad.tanh(inner))
    return 0.5 * x * (1.0 + symgrad.erf(x * (1.0 / math.sqrt(2.0))))


def _gelu_backward(g, x, approximate="none"):
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x + 0.044715 * x * x * x)
        t = symgrad.tanh(inner)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x))
    cdf = 0.5 * (1.0 + symgrad.erf(x * (1.0 / math.sqrt(2.0))))
    pdf = symgrad.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
    return g * (cdf + x * pdf)


class _LogSoftmax:
    """``log_softmax(x, dim)`` and ``softmax(x, dim)`` as fusable elementwise ops and reductions (the rule
    table's ops run whole, in numpy) sharing ``exp(x - max)`` and its sum: in a scalar loss's joint
    forward (:mod:`symgrad.torch_backend.joint`) the backward's ``exp(log_softmax)`` is the softmax of
    the forward's exponentials, not a second exponential per element."""

    def __init__(self, x, dim: int) -> None:
        self.x, self.dim = x, dim % x.ndim if x.ndim else dim
        self.max = x.amax(dim, keepdim=True)
        self.shifted = x - self.max
        self.exp = symgrad.exp(self.shifted)
        self.sum = self.exp.sum(dim, keepdim=True)
        self._log_sum = None

    def log_sum(self):
        if self._log_sum is None:
            self._log_sum = symgrad.log(self.sum)
        return self._log_sum

    def log_softmax(self):
        return self.shifted - self.log_sum()

    def picked(self, rows, cols):
        """``log_softmax()[rows, cols]`` of a 2-d log-softmax over dim 1, from those elements of ``x``
        alone (the same two subtractions: the same numbers), or None for another layout."""
        if self.x.ndim != 2 or self.dim != 1:
            return None
        n = self.x.shape[0]
        return (self.x[rows, cols] - self.max.view(n)) - self.log_sum().view(n)

    def softmax(self):
        # as torch's CPU softmax kernel computes it: exp(x - max) times the reciprocal of its sum
        return self.exp * (1.0 / self.sum)


def _log_softmax(x, dim, half_to_float=False):
    return _LogSoftmax(x, dim).log_softmax()


def _softmax(x, dim, half_to_float=False):
    return _LogSoftmax(x, dim).softmax()


def _through_detach(node):
    """The FX node whose value ``node`` is, through detaches and aliases."""
    while isinstance(node, torch.fx.Node) and node.target in (aten.detach.default, aten.alias.default):
        node = node.args[0]
    return node


def _nll_loss_forward(logp, target, weight, reduction, ignore_index, log_softmax=None):
    """``log_softmax``: the :class:`_LogSoftmax` that computed ``logp`` in this graph, if one did."""
    valid = target != ignore_index
    rows = symgrad.arange(logp.shape[0])
    labels = symgrad.where(valid, target, 0)      # an ignored row's label may be out of range
    picked = log_softmax.picked(rows, labels) if log_softmax is not None else None
    if picked is None:
        picked = logp[rows, labels]
    # negated before the sum: with every target ignored, torch's sum is 0.0, -(0.0) would be -0.0
    losses = symgrad.where(valid, -picked, 0.0)
    total = valid.to(logp.dtype).sum()
    out = losses.sum()
    return (out / total if reduction == 1 else out), total


def _nll_loss_backward(g, logp, target, weight, reduction, ignore_index, total_weight):
    # one value per row, added at the row's label: the gradient of the forward's ``logp[rows, label]``,
    # which row kernels compute without a dense one-hot matrix
    valid = target != ignore_index
    scale = -g / total_weight if reduction == 1 else -g
    per_row = symgrad.where(valid, scale, 0.0)
    rows = symgrad.arange(logp.shape[0])
    return index_put_add(per_row, logp.shape, (rows, symgrad.where(valid, target, 0)))


def _safe_softmax(x, dim, dtype=None):
    # aten's softmax for attention: a row whose every entry is -inf gives zeros, not 0/0
    if dtype is not None:
        x = x.to(dtype)
    top = x.amax(dim, keepdim=True)
    empty = top == -math.inf
    e = symgrad.exp(x - symgrad.where(empty, 0.0, top))
    return e * (1.0 / symgrad.where(empty, 1.0, e.sum(dim, keepdim=True)))


def _native_layer_norm(x, normalized_shape, weight, bias, eps):
    """aten's three results: the output, and the mean and reciprocal standard deviation, shaped as the
    input with the normalised dims kept as 1 (what ``native_layer_norm_backward`` reads)."""
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    rstd = symgrad.rsqrt((centred * centred).mean(dims, keepdim=True) + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def _native_layer_norm_backward(g, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    axis = x.ndim - len(normalized_shape)
    dims, lead = tuple(range(axis, x.ndim)), tuple(range(axis))
    xhat = (x - mean) * rstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gw = g * weight if weight is not None else g
        grad_input = rstd * (gw - gw.mean(dims, keepdim=True) - xhat * (gw * xhat).mean(dims, keepdim=True))
    # an empty ``lead`` would mean "all dims" to sum: a normalisation over every dim sums nothing
    if output_mask[1] and weight is not None:
        grad_weight = (g * xhat).sum(lead) if lead else g * xhat
    if output_mask[2] and bias is not None:
        grad_bias = g.sum(lead) if lead else g
    return grad_input, grad_weight, grad_bias


def _attention_probs(q, k, attn_mask, is_causal, scale):
    """The attention weights (zeros for a query that sees no key) and the log-sum-exp of each query's
    scores (0 for such a query, as torch's CPU kernel returns)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if attn_mask is not None:
        scores = scores + attn_mask
    if is_causal:   # the upper-left triangle, as torch
        keep = np.tril(np.ones((scores.shape[-2], scores.shape[-1]), dtype=bool))
        scores = symgrad.where(symgrad.as_tensor(keep), scores, -math.inf)
    top = scores.amax(-1, keepdim=True)
    empty = top == -math.inf
    e = symgrad.exp(scores - symgrad.where(empty, 0.0, top))
    total = symgrad.where(empty, 1.0, e.sum(-1, keepdim=True))
    lse = symgrad.where(empty, 0.0, top + symgrad.log(total)).squeeze(-1)
    return e * (1.0 / total), lse, scale


def _sdpa_flash(q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    p, lse, _ = _attention_probs(q, k, attn_mask, is_causal, scale)
    return p @ v, lse


def _sdpa_flash_backward(g, q, k, v, out, logsumexp, dropout_p, is_causal, attn_mask=None, scale=None):
    p, _, scale = _attention_probs(q, k, attn_mask, is_causal, scale)
    dp = g @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, p.transpose(-2, -1) @ g


def _sdpa_supported(node) -> str | None:
    given = _bind(node.target, node.args, node.kwargs)
    q, k, v = (given[name].meta["val"] for name in ("query", "key", "value"))
    if given.get("dropout_p", 0.0) != 0.0:
        return f"dropout_p={given['dropout_p']}"
    if q.ndim != 4 or k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        return "attention with other than 4-d inputs of one head count"
    mask = given.get("attn_mask")
    if mask is not None and mask.meta["val"].dtype != q.dtype:
        return f"attention mask of dtype {mask.meta['val'].dtype}"
    return None


def _full(size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    return symgrad.full(tuple(size), fill_value, dtype=dtype)


def _scalar_tensor(s, dtype=None, layout=None, device=None, pin_memory=None):
    # the default dtype whatever the Python type of ``s`` (torch.scalar_tensor(2) is float32)
    return symgrad.full((), s, dtype=dtype or symgrad.get_default_dtype())


def _ones(size, dtype=None, layout=None, device=None, pin_memory=None):
    return symgrad.full(tuple(size), 1.0, dtype=dtype or symgrad.get_default_dtype())


def _full_supported(node) -> str | None:
    layout, pin = node.kwargs.get("layout"), node.kwargs.get("pin_memory")
    if layout not in (None, torch.strided) or pin:
        return f"full with layout={layout}, pin_memory={pin}"
    return None


def _nll_supported(node) -> str | None:
    args = node.args
    first = 1 if node.target is aten.nll_loss_backward.default else 0     # the backward takes grad_output first
    logp, weight, reduction = args[first], args[first + 2], args[first + 3]
    if weight is not None or reduction not in (1, 2) or len(logp.meta["val"].shape) != 2:
        return "nll_loss with class weights, reduction='none' or other than 2-d input"
    return None


SPECIAL = {} if torch is None else {
    aten.detach.default: lambda x: x,
    aten.alias.default: lambda x: x,
    aten.lift_fresh_copy.default: lambda x: x,
    aten.add.Scalar: _scalar_op(operator.add),
    aten.sub.Scalar: _scalar_op(operator.sub),
    aten.add.Tensor: _scalar_op(operator.add),
    aten.sub.Tensor: _scalar_op(operator.sub),
    aten.mul.Scalar: lambda x, s: x * s,
    aten.div.Scalar: lambda x, s: x / s,
    aten.tanh_backward.default: lambda g, y: g * (1.0 - y * y),
    aten.sigmoid_backward.default: lambda g, y: g * y * (1.0 - y),
    aten.threshold_backward.default: lambda g, x, threshold: symgrad.where(x <= threshold, 0.0, g),
    aten.gelu.default: _gelu,
    aten.gelu_backward.default: _gelu_backward,
    aten._log_softmax_backward_data.default: lambda g, out, dim, dtype: g - symgrad.exp(out) * g.sum(dim, keepdim=True),
    aten._softmax_backward_data.default: lambda g, out, dim, dtype: out * (g - (g * out).sum(dim, keepdim=True)),
    aten.nll_loss_forward.default: _nll_loss_forward,
    aten._log_softmax.default: _log_softmax,
    aten._softmax.default: _softmax,
    aten.nll_loss_backward.default: _nll_loss_backward,
    aten.addmm.default: lambda bias, a, b, beta=1, alpha=1: bias * beta + (a @ b) * alpha,
    aten.sym_size.int: lambda x, dim: x.shape[dim],
    aten.full.default: _full,
    aten.scalar_tensor.default: _scalar_tensor,
    aten.ones.default: _ones,
    aten.tril.default: lambda x, diagonal=0: symgrad.tril(x, diagonal),
    aten._safe_softmax.default: _safe_softmax,
    aten.native_layer_norm.default: _native_layer_norm,
    aten.native_layer_norm_backward.default: _native_layer_norm_backward,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_flash,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: _sdpa_flash_backward,
    # aten's None skips a dimension; in a Python key None would insert one
    aten.index.Tensor: lambda x, indices: x[tuple(slice(None) if i is None else i for i in indices)],
}
# arguments a SPECIAL lowering does not handle: (op, reason) checks made on the FX node
SPECIAL_CHECKS = {} if torch is None else {aten.full.default: _full_supported,
                                           aten.scalar_tensor.default: _full_supported,
                                           aten.ones.default: _full_supported,
                                           aten.nll_loss_forward.default: _nll_supported,
                                           aten.nll_loss_backward.default: _nll_supported,
                                           aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_supported,
                                           aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
                                               _sdpa_supported}

PYTHON_OPS = {operator.getitem, operator.add, operator.sub, operator.mul, operator.floordiv, operator.neg,
              operator.truediv, operator.mod}


# --- the generic path: aten op -> the rule-table op of the same name -----------------------------

def _table_key(op) -> str:
    name = op._schema.name.split("::")[-1]
    overload = op._overloadname
    return name if overload == "default" else f"{name}.{overload}"


def _bind(op, args, kwargs) -> dict:
    out = {}
    for a, v in zip(op._schema.arguments, args):
        out[a.name] = v
    out.update(kwargs)
    return out


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - incomparable values are different
        return False


def table_plan(op, args, kwargs):
    """How to call the rule-table op standing for aten ``op`` with these FX arguments: (OpDef, list of
    argument names or ("default", value)), or a string saying why it cannot be."""
    key = _table_key(op)
    if key.split(".")[0].endswith("_"):
        return f"{key} writes into its input (a functionalised graph keeps such writes for torch)"
    try:
        opdef = registry.get(key)
    except KeyError:
        return f"{key} is not in symgrad's rule table"
    # a name is not a meaning: symgrad's native_layer_norm returns one tensor where aten's returns three,
    # and indexing that one tensor as aten's tuple reads its first row
    if len(op._schema.returns) != opdef.schema.num_outputs:
        return (f"{key}: aten's returns {len(op._schema.returns)} values, symgrad's "
                f"{opdef.schema.num_outputs}")
    given = _bind(op, args, kwargs)
    aten_defaults = {a.name: a.default_value for a in op._schema.arguments if a.has_default_value()}
    names = [a.name for a in opdef.schema.args]
    for name, value in given.items():
        if name not in names and not (name in aten_defaults and _same(value, aten_defaults[name])) \
                and not (value is None and name in ("memory_format", "layout", "device", "pin_memory")):
            return f"{key}: argument {name}={value!r} is not supported by symgrad's {key}"
    plan = []
    for a in opdef.schema.args:
        value = given.get(a.name, aten_defaults.get(a.name))
        if value is None and (a.name in given or a.name in aten_defaults) and a.is_tensor and not a.optional:
            return f"{key}: aten's {a.name} is None, a tensor symgrad's {key} requires"
        if a.name in given:
            plan.append(a.name)
        elif a.name in aten_defaults:
            plan.append(("default", aten_defaults[a.name]))
        elif a.default is not None:
            plan.append(("default", registry._default_value(a.default)))
        else:
            return f"{key}: symgrad's {key} needs argument {a.name}, which aten's schema lacks"
    return opdef, plan


# --- checking a whole graph -----------------------------------------------------------------------

def _dtype_problem(node) -> str | None:
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else (val,)
    for v in vals:
        if isinstance(v, torch.Tensor) and v.dtype not in _SUPPORTED_TENSOR_DTYPES:
            return f"dtype {v.dtype}"
        if isinstance(v, torch.Tensor) and v.device.type != "cpu":
            return f"device {v.device}"
    return None


def unsupported_ops(gm) -> list[str]:
    """Why each node that symgrad cannot lower cannot be (empty: the whole graph lowers)."""
    problems = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            if node.op == "placeholder" and (why := _dtype_problem(node)):
                problems.append(f"input {node.name}: {why}")
            continue
        if node.op == "get_attr":
            continue
        if node.op != "call_function":
            problems.append(f"{node.op} {node.target}")
            continue
        target = node.target
        if (why := _dtype_problem(node)) is not None:
            problems.append(f"{target}: {why}")
        elif target in PYTHON_OPS:
            continue
        elif target in SPECIAL:
            check = SPECIAL_CHECKS.get(target)
            if check is not None and (why := check(node)):
                problems.append(f"{target}: {why}")
        elif isinstance(target, torch._ops.OpOverload):
            plan = table_plan(target, node.args, node.kwargs)
            if isinstance(plan, str):
                problems.append(str(target))
        else:
            problems.append(str(target))
    return problems


# --- running --------------------------------------------------------------------------------------

def _convert(value, env):
    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, env) for v in value)
    if isinstance(value, torch.dtype):
        return _DTYPES[value]
    return value


class _Interpreter:
    """Calls the FX graph on symgrad Tensors (what symgrad's tracer records): returns the computed
    tensor outputs and, per FX output, where it comes from."""

    def __init__(self, gm) -> None:
        self.gm = gm
        self.nodes = list(gm.graph.nodes)
        self.layout: list = []

    def __call__(self, *inputs):
        env: dict = {}
        log_softmaxes: dict = {}    # FX _log_softmax node -> its _LogSoftmax
        placeholders = iter(inputs)
        input_ids = {}
        for node in self.nodes:
            if node.op == "placeholder":
                env[node] = next(placeholders)
                if isinstance(env[node], Tensor):
                    input_ids[id(env[node])] = len(input_ids)
            elif node.op == "get_attr":
                attr = getattr(self.gm, node.target)
                env[node] = symgrad.tensor(attr.detach().numpy().copy()) if isinstance(attr, torch.Tensor) else attr
            elif node.op == "call_function":
                args = _convert(node.args, env)
                kwargs = {k: _convert(v, env) for k, v in node.kwargs.items()}
                target = node.target
                if target in PYTHON_OPS:
                    env[node] = target(*args, **kwargs)
                elif target is aten._log_softmax.default:
                    log_softmaxes[node] = _LogSoftmax(args[0], args[1])
                    env[node] = log_softmaxes[node].log_softmax()
                elif target is aten._log_softmax_backward_data.default and \
                        (source := log_softmaxes.get(_through_detach(node.args[1]))) is not None and \
                        source.dim == args[2] % max(args[0].ndim, 1):
                    # the log-softmax was computed in this graph: exp(log_softmax(x)) is its softmax
                    g, dim = args[0], args[2]
                    env[node] = g - source.softmax() * g.sum(dim, keepdim=True)
                elif target is aten.nll_loss_forward.default and \
                        (source := log_softmaxes.get(_through_detach(node.args[0]))) is not None:
                    # the one log-probability per row it needs, not the whole rows
                    env[node] = _nll_loss_forward(*args, **kwargs, log_softmax=source)
                elif target in SPECIAL:
                    env[node] = SPECIAL[target](*args, **kwargs)
                else:
                    opdef, plan = table_plan(target, node.args, node.kwargs)
                    given = _bind(target, args, kwargs)
                    call = tuple(p[1] if isinstance(p, tuple) else given[p] for p in plan)
                    env[node] = registry.apply(opdef, call)
            elif node.op == "output":
                results, layout = [], []
                for v in node.args[0]:
                    value = env[v] if isinstance(v, torch.fx.Node) else v
                    if isinstance(value, Tensor):
                        if id(value) in input_ids:
                            layout.append(("input", input_ids[id(value)]))
                        else:
                            layout.append(("kernel", len(results)))
                            results.append(value)
                    else:
                        layout.append(("constant", value))
                self.layout = layout
                return tuple(results)
        raise AssertionError("an FX graph ends with an output node")


def _to_torch(value) -> torch.Tensor:
    """A kernel's result as a tensor on its memory; a read-only array (a broadcast view, whose
    elements share memory) is copied: torch would write through it."""
    if type(value) is not np.ndarray or not value.flags.writeable:
        value = np.array(value)
    return torch.from_numpy(value)


class GraphRunner:
    """A boxed callable (AOTAutograd's calling convention) running one aten graph with symgrad kernels,
    built once per input signature (dtypes, shapes, and the values of symbolic sizes)."""

    def __init__(self, gm, count) -> None:
        self._boxed_call = True     # an instance attribute: the wrappers Dynamo adds copy __dict__
        self.gm = gm
        self.count = count
        self.interpreter = _Interpreter(gm)
        self.compiled = CompiledFunction(self.interpreter, scalar_loss="split")
        self.built: dict = {}

    def __call__(self, *args):
        # boxed (one list, cleared so that the caller's references go) or, once Dynamo wraps the
        # backward, unboxed
        if len(args) == 1 and type(args[0]) is list:
            boxed = args[0]
            args = tuple(boxed)
            boxed.clear()
        arrays, key = [], []
        for a in args:
            if isinstance(a, torch.Tensor):
                if not a.is_cpu:
                    raise RuntimeError(f"torch.compile(backend='symgrad') runs on CPU tensors only; got a tensor "
                                       f"on {a.device}. Move the inputs to the CPU, or use backend='inductor'")
                array = a.detach().numpy()
                arrays.append(array)
                key.append((array.dtype, array.shape))
            else:
                key.append(a)
        key = tuple(key)
        entry = self.built.get(key)
        if entry is None:
            entry = self.built[key] = self._build(args)
        run, layout = entry
        results = run(*arrays) if run is not None else ()
        out = []
        for kind, what in layout:
            if kind == "kernel":
                out.append(_to_torch(results[what]))
            elif kind == "input":
                out.append(args[what])
            else:
                out.append(what)
        return out

    def _build(self, args):
        self.count("kernel_builds")
        inputs = [Tensor._wrap(a.detach().numpy()) if isinstance(a, torch.Tensor) else a for a in args]
        kernels = self.compiled.kernels_for(*inputs, wrt=())
        # an output that is an input: its position among all the arguments
        tensor_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        layout = [("input", tensor_positions[what]) if kind == "input" else (kind, what)
                  for kind, what in self.interpreter.layout]
        n = kernels.n_outputs
        if not any(kind == "kernel" for kind, _ in layout):
            return None, layout

        def run(*arrays):
            # read at each call: under tiered=True the kernels switch from numpy code to Numba
            return kernels.forward(*arrays)[:n]
        return run, layout
