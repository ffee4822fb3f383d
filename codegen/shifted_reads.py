"""Index maps of the ops tagged ``shifted_read``: where a loop reads their inputs instead of making their output.

A loop over some domain reads a value ``v`` at a position given per dim of ``v`` by an :class:`Idx`,
``off + coef * i<var>`` in the loop's counters (or the constant ``off``).  For an op tagged ``shifted_read``
(:mod:`symgrad.rules.facts`) the lowering registered here turns the position of its output into the
positions of its inputs: a slice or a flip reads its input at a shifted or mirrored position, a
``slice_backward`` reads its gradient there (and is zero where no element of the slice lands), a ``cat``
reads the input whose part holds the position.  So a stencil never makes the slices, the zero-padded
gradients or the concatenations as arrays (:mod:`codegen.stencil_kernel`).

A lowering returns the *pieces* of the output: ``(guards, input, input position)``.  The output at
that position is the input of the piece whose guards all hold, or zero when none does.

>>> import numpy as np, symgrad
>>> g = symgrad.trace(lambda u: u[2:] - u[:-2], np.ones(10))
>>> at = (Idx(0, 1, 0),)                                  # the loop reads %slice at i0
>>> [(guards, v.name, pos) for guards, v, pos in pieces(g.nodes[0], at)]
[((), 'u', (Idx(var=0, coef=1, off=2, div=1),))]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from symgrad.ir.graph import Node, Value

from .op_facts import register


class Idx(NamedTuple):
    """One dim of a read position: ``(off + coef * i<var>) // div``, or ``off // div`` when ``var`` is None.

    ``div`` is 1 but where a strided slice's gradient is read: there the guard of that gradient
    (a :class:`Guard` with a ``step``) makes sure the division is exact wherever the position is read.
    """

    var: int | None
    coef: int
    off: int
    div: int = 1

    def shifted(self, scale: int, add: int) -> Idx:
        """``add + scale * self``."""
        return position(self.var, scale * self.coef, add * self.div + scale * self.off, self.div)

    def text(self) -> str:
        if self.var is None or self.coef == 0:
            return str(self.off // self.div)
        term = f"i{self.var}" if self.coef == 1 else (f"-i{self.var}" if self.coef == -1 else
                                                       f"{self.coef}*i{self.var}")
        if self.off == 0:
            text = term
        elif term.startswith("-"):
            text = f"{self.off} {term[0]} {term[1:]}"
        else:
            text = f"{term} {'+' if self.off > 0 else '-'} {abs(self.off)}"
        return text if self.div == 1 else f"({text}) // {self.div}"


def position(var: int | None, coef: int, off: int, div: int = 1) -> Idx:
    """An :class:`Idx` in lowest terms."""
    if var is None or coef == 0:
        var, coef = None, 0
    common = math.gcd(coef, off, div)
    return Idx(var, coef // common, off // common, div // common)


class Guard(NamedTuple):
    """``lo <= at < hi`` and ``(at - lo) % step == 0``: where a piece of an output is."""

    at: Idx
    lo: int
    hi: int
    step: int = 1

    def text(self) -> str:
        at = self.at.text()
        return f"{self.lo} <= {at} < {self.hi}" + (f" and ({at} - {self.lo}) % {self.step} == 0"
                                                     if self.step != 1 else "")


Piece = tuple[tuple[Guard, ...], Value, tuple[Idx, ...]]

# op -> lowering(node, position of the output) -> pieces
READ_MAPS: dict[str, Callable[[Node, tuple[Idx, ...]], list[Piece]]] = {}


class NotShifted(Exception):
    """The node's output is not its input at shifted positions (a reshape that moves elements)."""


# The ops whose reads keep each element where it was (a dtype copy, a broadcast, a reshape of size-1
# dims): a graph of only these and elementwise ops is no stencil, and the loop fuser's loops, which
# take their sizes as arguments, serve it.
IN_PLACE_READS: set[str] = set()


def read_map(*ops: str, in_place: bool = False):
    """Register the index map of ``ops`` (decorator); ``in_place``: see :data:`IN_PLACE_READS`."""
    if in_place:
        IN_PLACE_READS.update(ops)
    return register(READ_MAPS, *ops)


def pieces(node: Node, at: tuple[Idx, ...]) -> list[Piece]:
    """The pieces of ``node``'s output at ``at`` (raises KeyError for an op without a lowering)."""
    return READ_MAPS[node.op](node, at)


def broadcast_position(shape: tuple, out_shape: tuple, at: tuple[Idx, ...]) -> tuple[Idx, ...]:
    """Where a value of ``shape``, broadcast to ``out_shape``, is read when its broadcast is read at ``at``."""
    lead = len(out_shape) - len(shape)
    return tuple(Idx(None, 0, 0) if n == 1 and out_shape[lead + j] != 1 else at[lead + j]
                 for j, n in enumerate(shape))


def _bounds(size: int, start, end, step) -> tuple[int, int, int]:
    """(first, count, step) of ``range(size)[start:end:step]``."""
    first, stop, step = slice(start, end, step).indices(size)
    return first, len(range(first, stop, step)), step


@read_map("_to_copy", in_place=True)
def _same_position(node: Node, at):
    """A copy (to another dtype: the loop converts the value it reads)."""
    return [((), node.args[0], at)]


@read_map("expand", in_place=True)
def _expand(node: Node, at):
    src = node.args[0]
    return [((), src, broadcast_position(tuple(src.shape), tuple(node.outputs[0].shape), at))]


@read_map("slice.Tensor")
def _slice(node: Node, at):
    src, dim, start, end, step = node.args
    dim %= len(src.shape)
    first, _, step = _bounds(src.shape[dim], start, end, step)
    pos = list(at)
    pos[dim] = at[dim].shifted(step, first)
    return [((), src, tuple(pos))]


@read_map("flip")
def _flip(node: Node, at):
    src, dims = node.args[0], node.args[1]
    rank = len(src.shape)
    pos = list(at)
    for d in {int(d) % rank for d in dims}:
        pos[d] = at[d].shifted(-1, src.shape[d] - 1)
    return [((), src, tuple(pos))]


@read_map("select.int")
def _select(node: Node, at):
    src, dim, index = node.args
    dim %= len(src.shape)
    pos = list(at)
    pos.insert(dim, Idx(None, 0, int(index) % src.shape[dim]))
    return [((), src, tuple(pos))]


@read_map("slice_backward")
def _slice_backward(node: Node, at):
    grad, sizes, dim, start, end, step = node.args
    dim %= len(sizes)
    first, count, step = _bounds(sizes[dim], start, end, step)
    if count == 0:
        return []
    here = at[dim]
    pos = list(at)
    pos[dim] = position(here.var, here.coef, here.off - first * here.div, step * here.div)
    return [((Guard(here, first, first + step * (count - 1) + 1, step),), grad, tuple(pos))]


@read_map("select_backward")
def _select_backward(node: Node, at):
    grad, sizes, dim, index = node.args
    dim %= len(sizes)
    index = int(index) % sizes[dim]
    pos = list(at)
    here = pos.pop(dim)
    return [((Guard(here, index, index + 1),), grad, tuple(pos))]


@read_map("cat")
def _cat(node: Node, at):
    tensors, dim = node.args[0], node.args[1]
    out = node.outputs[0]
    dim %= len(out.shape)
    found, start = [], 0
    for t in tensors:
        if len(t.shape) != len(out.shape):   # a legacy empty 1-D input: skipped, as cat skips it
            continue
        n = t.shape[dim]
        if n:
            pos = list(at)
            pos[dim] = at[dim].shifted(1, -start)
            found.append(((Guard(at[dim], start, start + n),), t, tuple(pos)))
        start += n
    return found


@read_map("view", "_unsafe_view", "squeeze", "squeeze.dim", "squeeze.dims", "unsqueeze", in_place=True)
def _unit_dims(node: Node, at):
    """A reshape that only adds or removes dims of size 1 (``x[:, None]``, a sum's kept dims)."""
    src, out = node.args[0], node.outputs[0]
    if [n for n in src.shape if n != 1] != [n for n in out.shape if n != 1]:
        raise NotShifted(f"{node.op} from {list(src.shape)} to {list(out.shape)}")
    kept = iter([p for p, n in zip(at, out.shape) if n != 1])
    return [((), src, tuple(Idx(None, 0, 0) if n == 1 else next(kept) for n in src.shape))]
