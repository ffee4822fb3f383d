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
from . import creation as _creation
from ._device import (
    DeviceError,
    Generator,
    backends,
    cuda,
    default_generator,
    device,
    get_default_device,
    get_rng_state,
    initial_seed,
    seed,
    set_default_device,
    set_rng_state,
)
from .autograd import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .creation import (
    arange,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    strided,
    tensor,
    zeros,
    zeros_like,
)
from .dtypes import bool_ as bool
from .dtypes import (
    dtype,
    finfo,
    float16,
    float32,
    float64,
    get_default_dtype,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    promote_types,
    set_default_dtype,
    uint8,
)
from .ops import linalg  # noqa: F401 - symgrad.linalg, mirroring torch.linalg (numpy surface: linalg)
from .ops import methods as _methods
from .ops.custom import register_op
from .ops.functional import *  # noqa: F403 - the public op functions
from .ops.functional import slice_op as _slice_op
from .tensor import Size, Tensor

# the star import above brought functional's internal as_tensor: the public one is the factory's
as_tensor = _creation.as_tensor

float = float32
double = float64
half = float16
long = int64
int = int32
short = int16

_methods.attach()
# torch.sin_(t), torch.relu_(t) ...: the in-place forms PyTorch also has as functions
for _name in ("sin_", "cos_", "tan_", "exp_", "exp2_", "expm1_", "log_", "log1p_", "log2_", "log10_", "sqrt_",
              "rsqrt_", "abs_", "neg_", "sign_", "sinh_", "cosh_", "tanh_", "atan_", "asin_", "acos_", "erf_",
              "reciprocal_", "square_", "round_", "trunc_", "floor_", "ceil_", "frac_", "sigmoid_", "relu_",
              "clamp_", "clamp_min_", "clamp_max_", "fill_", "zero_"):
    if hasattr(Tensor, _name):
        globals()[_name] = getattr(Tensor, _name)
del _name

# torch.nn and torch.optim need the tensor methods attached; symgrad.scipy.special does not import scipy
from . import nn, optim, scipy  # noqa: E402, F401
from .ir import Graph, TraceError, trace  # noqa: E402

__version__ = "0.1.0"

# The compiler sits above the eager core and the IR: it is imported on first use, so that
# importing a lower layer (or codegen) never pulls it in.
_COMPILER_NAMES = {"CompiledFunction": "compile", "CompileOptions": "options", "compile": "compile", "autodiff": None,
                   "EagerFallbackWarning": "compile", "KernelBuildWarning": "tiers",
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
    if name in _NOT_SUPPORTED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}: {_NOT_SUPPORTED[name]} "
                             "(see docs/torch.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# PyTorch names symgrad deliberately lacks, with what to do instead (docs/torch.md lists them)
_COMPLEX = "symgrad has no complex dtypes; compute with the real and imaginary parts as separate real tensors"
_NOT_SUPPORTED = {
    **dict.fromkeys(("complex32", "complex64", "complex128", "cfloat", "cdouble", "chalf", "complex", "view_as_real",
                     "view_as_complex", "polar"), _COMPLEX),
    "bfloat16": "symgrad's floating dtypes are float16, float32 and float64 (numpy has no bfloat16)",
    **dict.fromkeys(("sparse_coo", "sparse_csr", "sparse_csc", "sparse_coo_tensor", "sparse_csr_tensor", "sparse"),
                    "symgrad has dense (strided) tensors only"),
    "distributed": "symgrad has no distributed training; for many processes see symgrad.dask (docs/dask.md)",
    **dict.fromkeys(("jit", "fx", "export", "onnx"), "symgrad has no TorchScript/FX/export; symgrad.compile traces "
                    "a function to its own IR (docs/compiling.md)"),
    **dict.fromkeys(("quantize_per_tensor", "quantization", "ao"), "symgrad has no quantized tensors"),
    "mps": "symgrad runs on the CPU only",
    "xpu": "symgrad runs on the CPU only",
}


def __dir__():
    return sorted(set(globals()) | set(_COMPILER_NAMES))


if "SYMGRAD_LOG" in __import__("os").environ:  # SYMGRAD_LOG=trace,code,... (see symgrad/compiler/logs.py)
    from .compiler import logs as _logs

    _logs.configure()
