"""The numpy usage table, shape/assembly/indexing family: flip, roll, tile, repeat, pad, tril/triu, diag,
diagonal, trace, the stacks, the splits, take, take_along_axis, moveaxis, negative-step slices.
Each row runs eagerly and compiled against numpy's values and finite-difference gradients
(tests/numpy_usage.py)."""

from __future__ import annotations

import numpy as np

from numpy_usage import Usage, check, params


def m(*shape):
    return lambda r: (r.standard_normal(shape),)


def two(s1, s2):
    return lambda r: (r.standard_normal(s1), r.standard_normal(s2))


def _pieces(parts):
    # every piece weighted differently, so a gradient routed to the wrong piece shows
    return np.concatenate([np.ravel(p) * (k + 1) for k, p in enumerate(parts)])


ROWS = [
    # flip
    Usage("np.flip(x)", lambda x: np.flip(x), m(3, 4)),
    Usage("np.flip(x, axis=0)", lambda x: np.flip(x, axis=0), m(3, 4)),
    Usage("np.flip(x, axis=-1)", lambda x: np.flip(x, axis=-1), m(3, 4)),
    Usage("np.flip(x, axis=(0, 2))", lambda x: np.flip(x, axis=(0, 2)), m(2, 3, 4)),
    Usage("np.flip(x) 1-D", lambda x: np.flip(x), m(5)),
    Usage("np.fliplr(x)", lambda x: np.fliplr(x), m(3, 4)),
    Usage("np.flipud(x)", lambda x: np.flipud(x), m(3, 4)),
    # roll
    Usage("np.roll(x, 2)", lambda x: np.roll(x, 2), m(3, 4)),
    Usage("np.roll(x, -1, axis=1)", lambda x: np.roll(x, -1, axis=1), m(3, 4)),
    Usage("np.roll(x, (1, 2), axis=(0, 1))", lambda x: np.roll(x, (1, 2), axis=(0, 1)), m(3, 4)),
    Usage("np.roll(x, 7) 1-D", lambda x: np.roll(x, 7), m(5)),
    # tile, repeat
    Usage("np.tile(x, 2) 1-D", lambda x: np.tile(x, 2), m(3)),
    Usage("np.tile(x, (2, 1))", lambda x: np.tile(x, (2, 1)), m(2, 3)),
    Usage("np.tile(x, (2, 1, 3))", lambda x: np.tile(x, (2, 1, 3)), m(2, 3)),
    Usage("np.repeat(x, 2)", lambda x: np.repeat(x, 2), m(2, 3)),
    Usage("np.repeat(x, 3, axis=1)", lambda x: np.repeat(x, 3, axis=1), m(2, 3)),
    Usage("np.repeat(x, [1, 0, 2], axis=-1)", lambda x: np.repeat(x, [1, 0, 2], axis=-1), m(2, 3)),
    Usage("np.repeat(x, [2, 1]) 1-D", lambda x: np.repeat(x, [2, 1]), m(2)),
    # pad
    Usage("np.pad(x, 1)", lambda x: np.pad(x, 1), m(2, 3)),
    Usage("np.pad(x, (1, 2)) 1-D", lambda x: np.pad(x, (1, 2)), m(4)),
    Usage("np.pad(x, ((0, 1), (2, 0)), constant_values=3.5)",
          lambda x: np.pad(x, ((0, 1), (2, 0)), constant_values=3.5), m(2, 3)),
    Usage("np.pad(x, 1, constant_values=((1, 2), (3, 4)))",
          lambda x: np.pad(x, 1, constant_values=((1, 2), (3, 4))), m(2, 3)),
    Usage("np.pad(x, 2, mode='edge')", lambda x: np.pad(x, 2, mode="edge"), m(2, 3)),
    Usage("np.pad(x, 2, mode='reflect')", lambda x: np.pad(x, 2, mode="reflect"), m(3, 4)),
    Usage("np.pad(x, (3, 1), mode='symmetric') 1-D", lambda x: np.pad(x, (3, 1), mode="symmetric"), m(4)),
    Usage("np.pad(x, ((1, 0), (2, 5)), mode='wrap')", lambda x: np.pad(x, ((1, 0), (2, 5)), mode="wrap"),
          m(2, 3)),
    # tril, triu
    Usage("np.tril(x)", lambda x: np.tril(x), m(3, 4)),
    Usage("np.tril(x, k=-1)", lambda x: np.tril(x, k=-1), m(4, 3)),
    Usage("np.triu(x, 1)", lambda x: np.triu(x, 1), m(3, 4)),
    Usage("np.triu(x) batched", lambda x: np.triu(x), m(2, 3, 3)),
    Usage("np.tril(x) 1-D", lambda x: np.tril(x), m(3)),
    # diag, diagonal, trace
    Usage("np.diag(v)", lambda x: np.diag(x), m(3)),
    Usage("np.diag(v, k=1)", lambda x: np.diag(x, k=1), m(3)),
    Usage("np.diag(v, -2)", lambda x: np.diag(x, -2), m(2)),
    Usage("np.diag(M)", lambda x: np.diag(x), m(3, 4)),
    Usage("np.diag(M, k=-1)", lambda x: np.diag(x, k=-1), m(3, 4)),
    Usage("np.diagonal(x)", lambda x: np.diagonal(x), m(3, 4)),
    Usage("np.diagonal(x, offset=1, axis1=1, axis2=2)", lambda x: np.diagonal(x, offset=1, axis1=1, axis2=2),
          m(2, 3, 4)),
    Usage("np.diagonal(x, 0, 2, 0)", lambda x: np.diagonal(x, 0, 2, 0), m(3, 2, 4)),
    Usage("np.trace(x)", lambda x: np.trace(x), m(3, 3)),
    Usage("np.trace(x, offset=-1)", lambda x: np.trace(x, offset=-1), m(3, 4)),
    Usage("np.trace(x) 3-D", lambda x: np.trace(x), m(3, 3, 2)),
    # stacks
    Usage("np.vstack([a, b]) 1-D", lambda a, b: np.vstack([a, b]), two((3,), (3,)), wrt=(0, 1)),
    Usage("np.vstack((a, b)) 2-D", lambda a, b: np.vstack((a, b)), two((2, 3), (1, 3)), wrt=(0, 1)),
    Usage("np.hstack([a, b]) 1-D", lambda a, b: np.hstack([a, b]), two((2,), (3,)), wrt=(0, 1)),
    Usage("np.hstack([a, b]) 2-D", lambda a, b: np.hstack([a, b]), two((2, 1), (2, 3)), wrt=(0, 1)),
    Usage("np.dstack([a, b])", lambda a, b: np.dstack([a, b]), two((2, 3), (2, 3)), wrt=(0, 1)),
    Usage("np.column_stack([a, b])", lambda a, b: np.column_stack([a, b]), two((3,), (3, 2)), wrt=(0, 1)),
    Usage("np.vstack([a, const])", lambda a: np.vstack([a, np.ones(3)]), m(3)),
    Usage("np.atleast_2d(x)", lambda x: np.atleast_2d(x), m(3)),
    Usage("np.atleast_3d(x)", lambda x: np.atleast_3d(x), m(2, 3)),
    # splits: the pieces reassembled with distinct weights
    Usage("np.split(x, 3, axis=1)", lambda x: _pieces(np.split(x, 3, axis=1)), m(2, 6)),
    Usage("np.split(x, [1, 3])", lambda x: _pieces(np.split(x, [1, 3])), m(5, 2)),
    Usage("np.array_split(x, 3)", lambda x: _pieces(np.array_split(x, 3)), m(7)),
    Usage("np.array_split(x, 4, axis=-1)", lambda x: _pieces(np.array_split(x, 4, axis=-1)), m(2, 6)),
    Usage("np.hsplit(x, 2)", lambda x: _pieces(np.hsplit(x, 2)), m(3, 4)),
    Usage("np.vsplit(x, [2])", lambda x: _pieces(np.vsplit(x, [2])), m(3, 4)),
    Usage("a, b = np.split(x, 2)", lambda x: (lambda a, b: a * b)(*np.split(x, 2)), m(4, 3)),
    # take, take_along_axis
    Usage("np.take(x, [0, 5, 5, 2])", lambda x: np.take(x, [0, 5, 5, 2]), m(2, 3)),
    Usage("np.take(x, [[2, 0], [1, 1]], axis=1)", lambda x: np.take(x, [[2, 0], [1, 1]], axis=1), m(2, 3)),
    Usage("np.take(x, idx, axis=-1) idx an argument", lambda x, i: np.take(x, i, axis=-1),
          lambda r: (r.standard_normal((2, 4)), np.array([3, 0, 3]))),
    Usage("np.take(x, 4)", lambda x: np.take(x, 4), m(2, 3)),
    Usage("np.take(x, [-1, 7], mode='wrap')", lambda x: np.take(x, [-1, 7], mode="wrap"), m(5)),
    Usage("np.take(x, [-1, 7], axis=0, mode='clip')", lambda x: np.take(x, [-1, 7], axis=0, mode="clip"), m(5, 2)),
    Usage("np.take_along_axis(x, np.argsort(x, 1), 1)",
          lambda x: np.take_along_axis(x, np.array([[2, 0, 1], [1, 1, 0]]), axis=1), m(2, 3)),
    Usage("np.take_along_axis(x, idx, axis=0) broadcast",
          lambda x: np.take_along_axis(x, np.array([[1, 0, 1]]), axis=0), m(2, 3)),
    Usage("np.take_along_axis(x, idx, None)", lambda x: np.take_along_axis(x, np.array([5, 0, 5]), None), m(2, 3)),
    Usage("np.take_along_axis(x, idx, -1) idx an argument", lambda x, i: np.take_along_axis(x, i, -1),
          lambda r: (r.standard_normal((3, 4)), np.array([[3], [0], [1]]))),
    # moveaxis
    Usage("np.moveaxis(x, 0, -1)", lambda x: np.moveaxis(x, 0, -1), m(2, 3, 4)),
    Usage("np.moveaxis(x, [0, 1], [-1, -2])", lambda x: np.moveaxis(x, [0, 1], [-1, -2]), m(2, 3, 4)),
    # in a loss written the numpy way
    Usage("np.sum(np.diff-like via roll)", lambda x: np.sum((np.roll(x, 1) - x) ** 2), m(6)),
    Usage("np.trace(np.tril(x) @ x.T)", lambda x: np.trace(np.tril(x) @ x.T), m(3, 3)),
]


@params(ROWS)
def test_usage(usage):
    check(usage)
