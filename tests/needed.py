"""An independent count of the bytes a plan *needs* to move per training iteration: a lower bound on any runtime.

Written apart from ``tofu.search`` (it imports nothing from it) and apart from how the runtime assembles
pieces: it reads the plan (each step's tensor dimensions and op choices) and every worker's kernel call under
it (``tofu.analysis.compose``, the calls the runtime runs), and counts, per pass, the elements each device
lacks, each element once per device:

* reads: per device and tensor, the union of the regions its calls read (each call's ``data`` region: the
  box it reads from the tensor, fill left out) minus the box the device holds (a replicated parameter is held
  by its owner only, as the runtime stores it). A call whose kernel computes more than the worker
  keeps (``WorkerCall.keep``: a reshape of a longer piece, a halo split computed on the region with its halo)
  reads a bounding box; with ``exact=True`` such a call counts only the input elements its kept outputs read,
  traced element by element through the op's TDL description (:func:`accessed_by`), where the description is
  a plain element map (reshape, slice, transpose; a halo split or a strided convolution that skips part of its
  data region still counts the region: there the count is not minimal). Zeroed inputs, inputs an
  expansion is passed but never reads, auxiliary states and constants (computed where they are read) are not
  needed; of a loss op, only the first worker computing each piece reads, as MXNet runs no other copy;
* outputs: every holder receives its held box from each partial-sum class but what its own piece covers (the
  reduction of partial outputs; a replicated holder's all-gather), as tests/oracle.py counts it; a graph
  output that no op reads is handed out as computed, unless it is left in partial sums;
* statistics exchanges as tests/oracle.py counts them (``_exchange``: 2 (n - 1) |S| per group of n workers);
* backward: the same elements again for a tensor with a gradient, but elements computed only from data
  without one (MXNet prunes their backward: the data half of Concat(data, f1)), followed region by region
  from the variables as the oracle does.

What it shares with the plan's recount (tofu/search/copies.py) and the oracle: the per-worker calls and the
statistic sizes (``tofu.analysis``), which tensors are constants (``tests.oracle.constants``), the holder of
a replicated parameter and the output conversion. What it does not share: cells. The runtime cuts a piece into
the cells the holders' boxes make and sends each cell once per device; two overlapping reads that cut into
different cells, or a read wider than what the kernel keeps, send more than the union counted here.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tests.oracle import _exchange, constants, holder_boxes, plan_tables
from tofu.analysis.compose import compose, coordinates, held_box
from tofu.analysis.views import NodeView
from tofu.graph.ir import LOSS_OPS, Graph, Role

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Needed:
    """Bytes per training iteration a plan needs moved, by part (forward + backward each)."""

    reads: float             # input elements a device lacks, each once per device and pass
    outputs: float           # partial outputs reduced into holders, holders' boxes gathered
    exchanges: float         # statistics all-reduces
    by_tensor: tuple[tuple[str, float], ...]     # reads + outputs per tensor name (op:NAME for exchanges)

    @property
    def total(self) -> float:
        return self.reads + self.outputs + self.exchanges


def _size(box: Box) -> int:
    return math.prod(max(0, b - a) for a, b in box)


def _meet(a: Box, b: Box) -> Box:
    return tuple((max(x, u), min(y, v)) for (x, y), (u, v) in zip(a, b))


def _inside(inner: Box, outer: Box) -> bool:
    return all(u <= x and y <= v for (x, y), (u, v) in zip(inner, outer))


def _cells(bound: Box, boxes) -> list[Box]:
    """``bound`` cut along every edge of ``boxes`` that falls inside it."""
    cuts = []
    for d, (lo, hi) in enumerate(bound):
        edges = sorted({lo, hi} | {e for b in boxes for e in b[d] if lo < e < hi})
        cuts.append(list(zip(edges, edges[1:])))
    return [tuple(c) for c in itertools.product(*cuts)]


def _missing(reads: set, own: Box | None, computed) -> tuple[int, int]:
    """(elements, elements carrying a gradient) of the union of ``reads`` (boxes) that ``own`` does not hold;
    ``computed``: (box, carries) of every piece the tensor was made as."""
    reads = [r for r in reads if _size(r)]
    if not reads:
        return 0, 0
    flags = {c for b, c in computed}
    uniform = len(flags) == 1
    if len(reads) == 1 and uniform:
        n = _size(reads[0]) - (_size(_meet(reads[0], own)) if own else 0)
        return n, n * flags.pop()
    bound = tuple((min(r[d][0] for r in reads), max(r[d][1] for r in reads)) for d in range(len(reads[0])))
    edges = reads + ([own] if own else []) + ([] if uniform else [b for b, _ in computed])
    total = carrying = 0
    for cell in _cells(bound, edges):
        if own and _inside(cell, own) or not any(_inside(cell, r) for r in reads):
            continue
        n = _size(cell)
        total += n
        if uniform:
            carrying += n * next(iter(flags))
        else:
            carrying += n * any(c for b, c in computed if _size(_meet(b, cell)))
    return total, carrying


def needed(graph: Graph, plan, exact: bool = False) -> Needed:
    """The bytes ``plan`` needs moved per iteration on ``graph`` (see the module docstring); ``exact``: a call
    that keeps part of what its kernel computes counts only what its kept part reads."""
    factors, k, dims, choices = plan_tables(graph, plan)
    grads = graph.with_gradient
    item = {t.id: np.dtype(t.dtype).itemsize for t in graph.tensors}
    read = {t for n in graph.nodes for t in n.inputs}
    consumed = read | set(graph.heads)
    const = constants(graph)
    computed = {t.id: [(tuple((0, d) for d in t.shape), t.id in grads)] for t in graph.tensors
                if t.producer is None}

    held = holder_boxes(graph, factors, dims)
    reads: dict[tuple[int, int], set] = {}          # (tensor, device) -> boxes read
    exact_reads: dict[tuple[int, int], list] = {}    # (tensor, device) -> (data box, trace, input position)
    by_tensor: dict[str, float] = {}
    totals = {"outputs": 0.0, "exchanges": 0.0}

    def carries(t, region: Box) -> bool:
        return t in grads and any(c for b, c in computed.get(t, ()) if _size(_meet(b, region)))

    def exchange_charge(t, elements, label=None, grad=None, **_):
        b = elements * item[t] * (1 + ((t in grads) if grad is None else grad))
        totals["exchanges"] += b
        by_tensor[label] = by_tensor.get(label, 0.0) + b

    for node in graph.nodes:
        if set(node.outputs) & const:
            continue                    # computed by every device that reads it, the region it reads
        view = NodeView.of(graph, node)
        calls = compose(view, choices[node.id], factors)
        running = calls
        if node.op in LOSS_OPS:         # one copy of each piece of a loss is read: MXNet runs no other
            first: dict[tuple, object] = {}
            for c in calls:
                first.setdefault((c.outputs[0].box, tuple(coordinates(c.worker, factors)[j]
                                                          for j in c.outputs[0].partial)), c)
            running = list(first.values())
        for call in running:
            w = call.worker
            reads_gradient = any(carries(node.inputs[p.input], p.data) for p in call.inputs
                                 if not p.zeroed and p.read and _size(p.data))
            for o, t in enumerate(node.outputs):
                computed.setdefault(t, []).append((call.outputs[o].box, reads_gradient))
            traced = accessed_by(view, call) if exact else None
            for piece in call.inputs:
                t = node.inputs[piece.input]
                if piece.zeroed or not piece.read or graph.tensors[t].role is Role.AUX or t in const \
                        or not _size(piece.data):
                    continue
                if traced is not None and piece.input in _trace(*traced):
                    exact_reads.setdefault((t, w), []).append((piece.data, traced, piece.input))
                else:
                    reads.setdefault((t, w), set()).add(piece.data)
        if calls[0].expansion:
            _exchange(node, view, calls, factors, choices[node.id], exchange_charge)
        for o, t in enumerate(node.outputs):
            if t not in consumed:
                continue
            produced = [(c.worker, c.outputs[o].box, tuple(coordinates(c.worker, factors)[j]
                                                           for j in c.outputs[o].partial)) for c in calls]
            if node.op in LOSS_OPS:
                produced = list({(b, key): (w, b, key) for w, b, key in reversed(produced)}.values())
            if t not in read and all(not key for _, _, key in produced):
                continue                # a graph output no op reads is handed out as computed
            moved = 0
            for w in range(k):
                want = held_box(graph.tensors[t].shape, dims[t], factors, w)
                classes: dict[tuple, list] = {}
                for _, b, key in produced:
                    classes.setdefault(key, []).append(b)
                for key, boxes in classes.items():
                    need = _missing({_meet(want, b) for b in boxes}, None, [((), False)])[0]
                    own = max((_size(_meet(want, b)) for u, b, c in produced if u == w and c == key), default=0)
                    moved += need - own
            back = carries(t, tuple((0, d) for d in graph.tensors[t].shape))
            b = moved * item[t] * (1 + back)
            totals["outputs"] += b
            name = graph.tensors[t].name
            by_tensor[name] = by_tensor.get(name, 0.0) + b

    total_reads = 0.0
    for key in sorted(set(reads) | set(exact_reads)):
        t, w = key
        own = held[t].get(w)
        if key in exact_reads:
            n, back = _missing_exact(graph.tensors[t].shape, tuple(sorted(reads.get(key, ()))),
                                     tuple(exact_reads[key]), own, tuple(computed[t]))
        else:
            n, back = _missing(reads[key], own, computed[t])
        b = (n + back * (t in grads)) * item[t]
        total_reads += b
        name = graph.tensors[t].name
        by_tensor[name] = by_tensor.get(name, 0.0) + b
    return Needed(total_reads, totals["outputs"], totals["exchanges"], tuple(by_tensor.items()))


@lru_cache(maxsize=1024)
def _missing_exact(shape, boxes, traced, own, computed) -> tuple[int, int]:
    """:func:`_missing` where some reads are sets of elements (``traced``: (data box, :func:`_trace` arguments,
    input position), the flat indices into the tensor that the trace gives): counted on a mask of the reads'
    bounding box (the unrolled layers of a model ask again with the same arguments)."""
    regions = list(boxes) + [b for b, _, _ in traced]
    bound = tuple((min(r[d][0] for r in regions), max(r[d][1] for r in regions)) for d in range(len(shape)))
    extent = tuple(hi - lo for lo, hi in bound)
    mask = np.zeros(extent, dtype=bool)

    def local(box: Box):
        return tuple(slice(a - lo, b - lo) for (a, b), (lo, _) in zip(box, bound))

    for b in boxes:
        mask[local(b)] = True
    flat = mask.reshape(-1)
    for _, key, position in traced:
        indices = _trace(*key)[position]
        coords = np.unravel_index(indices, shape)
        flat[np.ravel_multi_index(tuple(c - lo for c, (lo, _) in zip(coords, bound)), extent)] = True
    if own:
        mask[local(_meet(own, bound))] = False
    carry = np.zeros(extent, dtype=bool)
    for b, c in computed:
        if c and _size(_meet(b, bound)):
            carry[local(_meet(b, bound))] = True
    return int(mask.sum()), int((mask & carry).sum())


def accessed_by(view: NodeView, call) -> tuple | None:
    """For a call that keeps part of what its kernel computes (``call.keep``): the arguments of :func:`_trace`,
    which gives per op input position the flat indices (into the whole input tensor) of the elements the kept
    part reads; None for any other call, which counts its data region."""
    if call.keep is None or len(call.outputs) != 1:
        return None
    # the output piece is the kept part, in the whole output's coordinates
    return view.op, view.attrs, view.in_shapes, view.out_shapes, call.outputs[0].box


@lru_cache(maxsize=64)
def _trace(op, attrs, in_shapes, out_shapes, kept: Box) -> dict[int, np.ndarray]:
    """Per input position, the flat indices the output box ``kept`` reads, when the op's description is a plain
    element map (its body one access of one input, without fill: a reshape, a slice, a transpose); else empty
    (the call counts its data region)."""
    from tofu.tdl.describe import describe
    from tofu.tdl.expr import Access, Affine, FloorDiv, Mod, Var

    desc = describe(op, attrs, in_shapes, out_shapes)
    body = desc.outputs[0].body
    if not isinstance(body, Access) or body.fill is not None or body.sliced:
        return {}
    position = next((p for p, t in enumerate(desc.inputs) if t is body.tensor), None)
    if position is None:
        return {}
    nd = len(kept)
    env = {v: np.arange(lo, hi).reshape([-1 if d == j else 1 for d in range(nd)])
           for j, (v, (lo, hi)) in enumerate(zip(desc.outputs[0].vars, kept))}

    def index(e):
        if isinstance(e, Var):
            return env[e]
        if isinstance(e, Affine):
            out = np.asarray(e.const, dtype=np.int64)
            for atom, c in e.terms:
                out = out + c * index(atom)
            return out
        if isinstance(e, FloorDiv):
            return np.floor_divide(index(e.arg), e.k)
        if isinstance(e, Mod):
            return np.mod(index(e.arg), e.k)
        raise TypeError(e)

    try:
        subs = np.broadcast_arrays(*(index(s) for s in body.index), *env.values())[:len(body.index)]
    except TypeError:           # a data-dependent or full-slice subscript: not an element map
        return {}
    return {position: np.unique(np.ravel_multi_index(tuple(s.ravel() for s in subs), in_shapes[position]))}
