"""The module classes of :mod:`symgrad.nn`."""

from .activation import ELU, GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softplus, Tanh
from .container import ModuleDict, ModuleList, Sequential
from .conv import AvgPool2d, Conv1d, Conv2d, MaxPool2d
from .layers import Dropout, Embedding, LayerNorm
from .linear import Flatten, Identity, Linear
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import Module

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "Linear", "Identity", "Flatten", "ReLU", "GELU",
           "SiLU", "Tanh", "Sigmoid", "Softplus", "ELU", "LeakyReLU", "Softmax", "LogSoftmax", "Dropout",
           "LayerNorm", "Embedding", "Conv1d", "Conv2d", "MaxPool2d", "AvgPool2d", "MSELoss", "L1Loss",
           "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "HuberLoss", "SmoothL1Loss", "KLDivLoss"]
