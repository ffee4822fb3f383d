"""Pytrees: nested tuples, lists, dicts and namedtuples of arrays, as JAX calls them.

The transforms of :mod:`symgrad.compiler.transforms` accept a pytree wherever they accept an array
and give gradients back in the same structure.  Flattening is :mod:`optree`'s (the pytree library
PyTorch can also use); ``None`` is an empty subtree, as in JAX.

>>> import numpy as np
>>> params = {"w": np.ones((2, 2)), "b": (np.zeros(2), 3.0)}
>>> flat, unravel = ravel_pytree(params)
>>> flat
array([0., 0., 3., 1., 1., 1., 1.])
>>> back = unravel(flat * 2)
>>> back["w"], back["b"][1]
(array([[2., 2.],
       [2., 2.]]), 6.0)
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np

from ..ops import functional as F
from ..tensor import Tensor

if TYPE_CHECKING:
    import optree

__all__ = ["tree_flatten", "tree_unflatten", "tree_structure", "ravel_pytree"]


def tree_flatten(tree) -> tuple[list, optree.PyTreeSpec]:
    """``(leaves, treespec)`` of ``tree`` (``None`` is an empty subtree, as in JAX)."""
    import optree  # on first use: numpy arrays in value_and_grad never need it, and it takes ms to load

    return optree.tree_flatten(tree, none_is_leaf=False)


def tree_unflatten(spec: optree.PyTreeSpec, leaves) -> object:
    """The tree of structure ``spec`` holding ``leaves``."""
    import optree

    return optree.tree_unflatten(spec, list(leaves))


def tree_structure(tree) -> optree.PyTreeSpec:
    import optree

    return optree.tree_structure(tree, none_is_leaf=False)


def describe(spec: optree.PyTreeSpec) -> str:
    """A short description of a tree structure for error messages."""
    text = repr(spec)
    return text[len("PyTreeSpec("):-1] if text.startswith("PyTreeSpec(") else text


def ravel_pytree(tree):
    """``(flat, unravel)``: the leaves of ``tree`` as one 1-D array, and the function that turns
    such an array back into a tree of the same structure, shapes and dtypes.

    Leaves are numpy arrays, Python numbers or Tensors.  With numpy leaves ``flat`` is a numpy array
    of the leaves' common dtype (scipy.optimize takes it); if a leaf is a Tensor, ``flat`` is a Tensor
    made with differentiable ops (``cat`` of ``reshape``), and ``unravel`` of a Tensor slices it, so
    gradients flow both ways.  A Python number comes back as a Python number.
    """
    leaves, spec = tree_flatten(tree)
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, (Tensor, np.ndarray, np.generic, numbers.Number)):
            raise TypeError(f"ravel_pytree: leaf {i} is a {type(leaf).__name__}; leaves must be numpy arrays, "
                            f"Tensors or numbers")
    shapes = [tuple(np.shape(leaf._data if isinstance(leaf, Tensor) else leaf)) for leaf in leaves]
    dtypes = [leaf._data.dtype if isinstance(leaf, Tensor) else np.asarray(leaf).dtype for leaf in leaves]
    python_numbers = [isinstance(leaf, numbers.Number) and not isinstance(leaf, np.generic) for leaf in leaves]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).tolist()
    common = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    if any(isinstance(leaf, Tensor) for leaf in leaves):
        parts = [F.reshape(leaf if isinstance(leaf, Tensor) else Tensor._wrap(np.asarray(leaf, dtype=common)), (-1,))
                 for leaf in leaves]
        parts = [p if p._data.dtype == common else p.to(_symgrad_dtype(common)) for p in parts]
        flat = F.cat(parts) if parts else Tensor._wrap(np.zeros(0, common))
    else:
        flat = np.concatenate([np.asarray(leaf, dtype=common).reshape(-1) for leaf in leaves]) if leaves \
            else np.zeros(0, common)

    def unravel(flat_values):
        size = int(np.shape(flat_values._data if isinstance(flat_values, Tensor) else flat_values)[0]) \
            if np.ndim(flat_values._data if isinstance(flat_values, Tensor) else flat_values) == 1 else -1
        if size != offsets[-1]:
            got = np.shape(flat_values._data if isinstance(flat_values, Tensor) else flat_values)
            raise ValueError(f"unravel: expected a 1-D array of {offsets[-1]} elements (the pytree's size), "
                             f"got shape {got}")
        out = []
        for k, (shape, dtype, number) in enumerate(zip(shapes, dtypes, python_numbers)):
            piece = flat_values[offsets[k]:offsets[k + 1]]
            if isinstance(piece, Tensor):
                piece = F.reshape(piece, shape)
                if piece._data.dtype != dtype:
                    piece = piece.to(_symgrad_dtype(dtype))
            else:
                piece = np.asarray(piece).reshape(shape).astype(dtype, copy=False)
                if number:
                    piece = piece.item()
            out.append(piece)
        return tree_unflatten(spec, out)

    return flat, unravel


def _symgrad_dtype(dtype: np.dtype):
    from ..dtypes import from_numpy_dtype

    return from_numpy_dtype(np.dtype(dtype))
