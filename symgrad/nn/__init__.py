"""``symgrad.nn``: PyTorch's ``torch.nn`` on symgrad tensors."""

from . import functional  # noqa: F401
