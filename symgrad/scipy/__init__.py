"""scipy's functions on symgrad tensors, with gradients: ``symgrad.scipy.special``.

As ``autograd.scipy.special`` and ``jax.scipy.special``: the same names and arguments as scipy's, computed
with symgrad ops, so that they record the graph; given plain arrays they return numpy values.  Importing
this package does not import scipy.
"""

from . import special  # noqa: F401

__all__ = ["special"]
