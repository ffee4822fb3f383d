"""PyTorch-style autograd: graph nodes, the backward engine, custom Functions, grad modes, checks."""

from . import functional, graph
from .anomaly import detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled, set_detect_anomaly
from .engine import backward, grad
from .function import Function, once_differentiable
from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .node import AccumulateGrad, Node

__all__ = [
    "AccumulateGrad", "Function", "GradcheckError", "Node", "backward", "detect_anomaly", "enable_grad",
    "functional", "grad", "gradcheck", "gradgradcheck", "graph", "inference_mode", "is_anomaly_check_nan_enabled",
    "is_anomaly_enabled", "is_grad_enabled", "is_inference_mode_enabled", "no_grad", "once_differentiable",
    "set_detect_anomaly", "set_grad_enabled",
]
