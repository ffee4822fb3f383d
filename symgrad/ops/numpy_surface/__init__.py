"""The numpy functions and ufuncs that run on tensors, beyond the core ones in
:mod:`symgrad.ops.numpy_dispatch`: one module per family, each registering its handlers with
:func:`~symgrad.ops.numpy_dispatch.numpy_functions` / :func:`~symgrad.ops.numpy_dispatch.numpy_ufuncs`."""

from . import elementwise, face, linalg, reductions, shape  # noqa: F401 - registration on import
