"""``symgrad.nn``: PyTorch's ``torch.nn`` modules, parameters and initialisers, on symgrad tensors.

>>> import symgrad as torch
>>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
>>> sum(p.numel() for p in model.parameters())
21
"""

from . import functional, init
from .modules import *  # noqa: F403 - the module classes
from .modules import __all__ as _modules_all
from .parameter import Parameter

__all__ = ["functional", "init", "Parameter", *_modules_all]
