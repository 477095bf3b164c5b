"""Communication glue of the partitioned graph: boxes of tensors gathered from the devices that hold them.

Input: the pieces of a tensor that devices hold (box, partial-sum key, symbol) and a box a device needs.
Output: one MXNet symbol on that device, built from ``slice`` (on the holder's device), ``Concat``, ``add_n``
(or ``maximum`` ...) and constants for fill; MXNet inserts a ``_CrossDeviceCopy`` for every piece that crosses
devices, and derives the backward pass (a fetched piece's gradient flows back to its holder and is summed
there; the adjoint of a reduce-scatter is an all-gather).

Rules that keep what MXNet copies equal to what the plan counts (see MXNET.md, "Several devices"):

* a piece is cut on its holder's device (slice, or ``identity`` when the whole piece is sent), so only the
  bytes needed cross devices, and no entry feeds two devices directly (MXNet would then sum its gradient on
  the wrong device);
* a piece sent to a device is built once per destination and shared by every consumer there (an RNN weight
  read by every timestep crosses once per iteration); the rewriter also assembles a region once per device
  (``_Rewriter._read_input``), so its ``Concat`` is shared too;
* partial sums are reduced on the device that holds the result's slice (a reduce-scatter: every device sums
  its own slice, never one shared sum that MXNet would place on a single device).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import mxnet as mx

from tofu.errors import RewriteError
from tofu.graph.single_op import json_op_function

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Held:
    """A piece of a tensor available on a device: its box, the partial-sum coordinates it belongs to (empty
    for a complete value), and the symbol that computes it."""

    device: int
    box: Box
    key: tuple[int, ...]
    symbol: object


class Lazy:
    """A held piece's symbol built when a gather first reads it (a constant's piece made where it is read)."""

    def __init__(self, build: Callable[[], object]):
        self._build, self._symbol = build, None

    def get(self) -> object:
        if self._symbol is None:
            self._symbol = self._build()
        return self._symbol


def scope(device: int) -> mx.AttrScope:
    return mx.AttrScope(ctx_group=f"dev{device}")


def box_shape(box: Box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


def intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(x, u), min(y, v)) for (x, y), (u, v) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def contains(outer: Box, inner: Box) -> bool:
    return all(a <= c and d <= b for (a, b), (c, d) in zip(outer, inner))


_concatenate = json_op_function("_npi_concatenate")      # numpy's: takes booleans, which Concat does not

_REDUCE = {"sum": None, "max": "broadcast_maximum", "min": "broadcast_minimum", "prod": "broadcast_mul"}
# (the element-wise forms that take a name: mx.sym.maximum is a Python helper without one)


class Fabric:
    """Builds the glue of one partitioned graph, naming every node and sharing pieces per destination."""

    def __init__(self, distance: Callable[[int, int], int], dtypes: Mapping[str, str] | None = None):
        self._distance = distance            # lower is closer (0: the same device)
        self._dtypes = dict(dtypes or {})    # per tensor, when not float32: what a fill around it is made of
        # tensors of numpy's booleans: MXNet's Concat does not take them
        self._booleans = frozenset(n for n, d in self._dtypes.items() if d == "bool")
        self._sent: dict[tuple, object] = {}
        self._count = itertools.count()

    def name(self, base: str) -> str:
        return f"{base}_{next(self._count)}"

    # -------------------------------------------------------------------------------------------- pieces
    def piece(self, tensor: str, src: Held, box: Box, dst: int) -> object:
        """``box`` (inside ``src.box``) of a held piece, as a symbol ``dst`` can read."""
        key = (tensor, src.device, src.box, src.key, box, dst)
        if key in self._sent:
            return self._sent[key]
        whole = box == src.box
        symbol = src.symbol.get() if isinstance(src.symbol, Lazy) else src.symbol
        if whole and src.device == dst:
            return symbol
        # the destination is an attribute too, so that MXNet's common-expression elimination cannot merge
        # two routes of one piece to different devices into one node feeding both (its gradient would be lost)
        with scope(src.device), mx.AttrScope(__tofu_to__=f"dev{dst}"):
            if whole:       # routed through the holder's device, one route per destination
                sym = mx.sym.identity(symbol, name=self.name(f"{tensor}@dev{src.device}>dev{dst}"))
            else:
                begin = tuple(a - o for (a, _), (o, _) in zip(box, src.box))
                end = tuple(b - o for (_, b), (o, _) in zip(box, src.box))
                sym = mx.sym.slice(symbol, begin=begin, end=end,
                                   name=self.name(f"{tensor}@dev{src.device}>dev{dst}_slice"))
        self._sent[key] = sym
        return sym

    def gather(self, tensor: str, held: Sequence[Held], box: Box, dst: int, data: Box | None = None,
               fill: float = 0.0, reducer: str = "sum") -> object:
        """The value of ``box`` of ``tensor`` on device ``dst``: the ``data`` part (default: all) from the
        pieces ``held`` (pieces of different partial-sum classes combined with ``reducer``), the rest ``fill``.
        """
        if reducer not in _REDUCE:
            raise RewriteError(f"tensor '{tensor}': unknown reduction '{reducer}'")
        data = box if data is None else data
        parts = [h for h in held if intersect(h.box, data) is not None]
        with scope(dst):
            if not all(hi > lo for lo, hi in data):
                return self._fill(tensor, box, fill, dst)
            inner = self._grid(tensor, parts, data, dst, reducer)
            return self._pad(tensor, inner, box, data, fill, dst)

    def _grid(self, tensor: str, parts: Sequence[Held], box: Box, dst: int, reducer: str) -> object:
        """``box`` assembled from the cells of the grid the pieces' edges cut it into."""
        cuts = []
        for d, (lo, hi) in enumerate(box):
            edges = {lo, hi}
            for h in parts:
                for e in h.box[d]:
                    if lo < e < hi:
                        edges.add(e)
            cuts.append(sorted(edges))
        return self._assemble(tensor, parts, box, cuts, 0, dst, reducer)

    def _assemble(self, tensor, parts, box, cuts, d, dst, reducer):
        if d == len(box):
            return self._cell(tensor, parts, box, dst, reducer)
        edges = [e for e in cuts[d] if box[d][0] <= e <= box[d][1]]
        segments = [self._assemble(tensor, parts, tuple((a, b) if i == d else r for i, r in enumerate(box)),
                                   cuts, d + 1, dst, reducer) for a, b in zip(edges, edges[1:])]
        if len(segments) == 1:
            return segments[0]
        if tensor in self._booleans:
            return _concatenate(*segments, axis=d, num_args=len(segments), name=self.name(f"{tensor}@dev{dst}_concat"))
        return mx.sym.concat(*segments, dim=d, name=self.name(f"{tensor}@dev{dst}_concat"))

    def _cell(self, tensor: str, parts: Sequence[Held], cell: Box, dst: int, reducer: str) -> object:
        """One cell: inside one piece of every partial-sum class; the classes' pieces reduced on ``dst``."""
        covering: dict[tuple, Held] = {}
        for h in parts:
            if contains(h.box, cell):
                best = covering.get(h.key)
                if best is None or (self._distance(h.device, dst), h.device) < (self._distance(best.device, dst),
                                                                               best.device):
                    covering[h.key] = h
        if not covering:
            raise RewriteError(f"no device holds box {cell} of tensor '{tensor}'")
        pieces = [self.piece(tensor, h, cell, dst) for _, h in sorted(covering.items())]
        if len(pieces) == 1:
            return pieces[0]
        if reducer == "sum":
            return mx.sym.add_n(*pieces, name=self.name(f"{tensor}@dev{dst}_sum"))
        fn = getattr(mx.sym, _REDUCE[reducer])
        out = pieces[0]
        for p in pieces[1:]:
            out = fn(out, p, name=self.name(f"{tensor}@dev{dst}_{reducer}"))
        return out

    # ----------------------------------------------------------------------------------------------- fill
    def _fill(self, tensor: str, box: Box, fill: float, dst: int) -> object:
        return mx.sym.full(shape=box_shape(box), val=fill, dtype=self._dtypes.get(tensor, "float32"),
                           name=self.name(f"fill@dev{dst}"))

    def _pad(self, tensor: str, inner, box: Box, data: Box, fill: float, dst: int):
        """``inner`` (the ``data`` part) surrounded by ``fill`` up to ``box``."""
        current = list(data)
        for d, ((lo, hi), (a, b)) in enumerate(zip(box, data)):
            parts = []
            if a > lo:
                parts.append(self._fill(tensor, tuple((lo, a) if i == d else r for i, r in enumerate(current)), fill,
                                        dst))
            parts.append(inner)
            if b < hi:
                parts.append(self._fill(tensor, tuple((b, hi) if i == d else r for i, r in enumerate(current)), fill,
                                        dst))
            if len(parts) > 1:
                inner = mx.sym.concat(*parts, dim=d, name=self.name(f"pad@dev{dst}"))
            current[d] = (lo, hi)
        return inner

    def allreduce(self, parts: Sequence[object], devices: Sequence[int], reducer: str = "sum",
                  shape: tuple[int, ...] | None = None) -> list[object]:
        """Every device's copy of the ``reducer`` of all devices' symbols (a statistics exchange).

        With the statistic's ``shape`` and n or more elements (n the number of devices): a reduce-scatter
        (device i reduces chunk i of every partial along a dimension of extent n or more, the chunks as even as
        the extent allows; a statistic whose every extent is below n is flattened first) then an all-gather of
        the chunks, 2 (n - 1) |S| sent in all; otherwise (fewer elements than devices) every device reads every
        partial, n (n - 1) |S|. The cost model charges the same (tofu.search.cost, copies).
        """
        name = self.name("stat")
        n = len(devices)
        size = math.prod(shape) if shape is not None else 0
        if shape is None or size < n:
            return self._all_to_all(parts, devices, reducer, name)
        axis = next((d for d, e in enumerate(shape) if e >= n), None)
        if axis is None:            # every extent below n but not the size: reduce-scatter the flattened statistic
            flat = []
            for p, dev in zip(parts, devices):
                with scope(dev):
                    flat.append(mx.sym.reshape(p, shape=(size,), name=self.name(f"{name}@dev{dev}_flat")))
            out = self.allreduce(flat, devices, reducer, (size,))
            back = []
            for o, dev in zip(out, devices):
                with scope(dev):
                    back.append(mx.sym.reshape(o, shape=shape, name=self.name(f"{name}@dev{dev}_shape")))
            return back
        whole = tuple((0, e) for e in shape)
        e = shape[axis]
        chunks = [tuple((i * e // n, (i + 1) * e // n) if d == axis else r for d, r in enumerate(whole))
                  for i in range(n)]
        partials = [Held(dev, whole, (j,), p) for j, (dev, p) in enumerate(zip(devices, parts))]
        reduced = [Held(dev, chunk, (), self.gather(name, partials, chunk, dev, reducer=reducer))
                   for dev, chunk in zip(devices, chunks)]
        return [self.gather(f"{name}_all", reduced, whole, dev) for dev in devices]

    def _all_to_all(self, parts, devices, reducer, name) -> list[object]:
        out = []
        for i, dst in enumerate(devices):
            with scope(dst):
                pieces = []
                for j, (p, src) in enumerate(zip(parts, devices)):
                    if j == i:
                        pieces.append(p)
                        continue
                    with scope(src), mx.AttrScope(__tofu_to__=f"dev{dst}"):
                        pieces.append(mx.sym.identity(p, name=self.name(f"{name}@dev{src}>dev{dst}")))
                if reducer == "sum":
                    out.append(mx.sym.add_n(*pieces, name=self.name(f"{name}@dev{dst}_sum")))
                elif reducer in _REDUCE:
                    fn = getattr(mx.sym, _REDUCE[reducer])
                    acc = pieces[0]
                    for q in pieces[1:]:
                        acc = fn(acc, q, name=self.name(f"{name}@dev{dst}_{reducer}"))
                    out.append(acc)
                else:
                    raise RewriteError(f"unknown all-reduce '{reducer}'")
        return out
