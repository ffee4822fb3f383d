"""symgrad: PyTorch-style autograd you can look inside, driven by one rule table.

>>> import symgrad as torch
>>> x = torch.tensor([2.0], requires_grad=True)
>>> z = 2 * x ** 2
>>> z.grad_fn, z.grad_fn.next_functions[0][0]        # doctest: +ELLIPSIS
(<MulBackward0 object at 0x...>, <PowBackward0 object at 0x...>)
>>> z.backward(); x.grad
tensor([8.])
"""

from . import autograd
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .creation import (
    arange,
    as_tensor,
    empty,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from .dtypes import bool_ as bool
from .dtypes import (
    dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    set_default_dtype,
    uint8,
)
from .ops import linalg  # noqa: F401 - symgrad.linalg, mirroring torch.linalg (numpy surface: linalg)
from .ops import methods as _methods
from .ops.custom import register_op
from .ops.functional import *  # noqa: F403 - the public op functions
from .ops.functional import slice_op as _slice_op
from .tensor import Size, Tensor

float = float32
double = float64
half = float16
long = int64
int = int32

_methods.attach()

from .ir import Graph, TraceError, trace  # noqa: E402

__version__ = "0.1.0"

# The compiler sits above the eager core and the IR: it is imported on first use, so that
# importing a lower layer (or codegen) never pulls it in.
_COMPILER_NAMES = {"CompiledFunction": "compile", "CompileOptions": "options", "compile": "compile", "autodiff": None,
                   # function transforms (JAX names) and pytrees: symgrad/compiler/transforms.py
                   **dict.fromkeys(["grad", "value_and_grad", "vjp", "jvp", "jacrev", "jacobian", "jacfwd", "hessian",
                                    "hvp", "elementwise_grad", "ravel_pytree"], "transforms")}


def __getattr__(name):
    if name in _COMPILER_NAMES:
        import importlib

        module = _COMPILER_NAMES[name]
        if module is None:
            value = importlib.import_module(f"{__name__}.compiler.{name}")
        else:
            value = getattr(importlib.import_module(f"{__name__}.compiler.{module}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_COMPILER_NAMES))


if "SYMGRAD_LOG" in __import__("os").environ:  # SYMGRAD_LOG=trace,code,... (see symgrad/compiler/logs.py)
    from .compiler import logs as _logs

    _logs.configure()
