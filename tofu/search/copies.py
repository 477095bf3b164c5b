"""What the runtime copies under a plan: the plan's predicted communication, counted as MXNet will move it.

Input: a Graph, the cuts' factors, every tensor's split dimension and every op's choice at each cut. Output:
the bytes that cross devices per training iteration (forward and backward) when the first j cuts are run.

The count replays what the rewriter builds (tofu.rewrite.apply_plan and tofu.rewrite.comm) on boxes, with
every worker's call as :func:`tofu.analysis.compose.compose` gives it, and keeps what MXNet runs:

* an op's input piece that its device does not hold is assembled from the cells the holders' boxes cut it
  into, each cell from its nearest holder, cut on the holder's device and sent once per destination: ops on
  one device that read the same cell share it (forward one copy; backward their gradients summed there, one
  copy back), and the cells' assembly (concat, add_n, pad) is built once per device and region, as the
  rewriter does;
* an op's output is turned into every holder's box (partial sums reduced there); a graph output that no op
  reads is handed out as computed, unless partial;
* MXNet runs only what a graph output needs: of a loss computed whole the first copy alone (the others would
  inject its gradient again), and no conversion to a holder whose box no running op reads;
* a constant (:mod:`tofu.search.constants`) is computed by every device that reads it: nothing of it is sent;
* a cell crosses back in the backward pass when its tensor has a gradient, the piece it is cut from
  depends on a variable with one through ops that pass it (a piece of Concat(data, f1) made of data alone
  has none: MXNet prunes its backward, though the tensor has a gradient), and what reads it on the
  destination gives it one (:func:`tofu.graph.gradients.gives_gradient`, MXNet's rule: an op whose gradient is
  zero gives none, an expansion none to an input its symbol does not differentiate, as SoftmaxOutput's its
  label, read through ``one_hot``; zeros pass back through the cut and through ops that pass them on, but a
  concat, a partial sum or a pad that assembles a piece runs its backward on them); a statistics exchange moves
  2 (n - 1) |S| per group of workers MXNet runs (of a loss computed whole over later cuts, only its first
  copies' group: the other copies' exchanges feed nothing), and its gradient as much when the group's pieces
  of the tensor the statistic is computed from depend on a variable with a gradient (not the channels of
  Concat(data, conv) that come from data) and the op's expansion lets the statistic carry it
  (SoftmaxOutput's does not: its backward is local).

The search's cost model (cost.py) charges every op for its own pieces, which keeps a cut's cost separable
for the solvers; this count equals it but where several ops on a device read one cell, a piece or a
statistics exchange feeds nothing an output needs, or only MXNet's zero gradient reaches a piece (the cost
model charges the backward of every piece of a tensor with a gradient). Step j's cost in a plan is this count
for j cuts less that for j - 1.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from tofu.analysis.compose import OpChoice, compose, coordinates, held_box
from tofu.analysis.views import NodeView
from tofu.graph.ir import LOSS_OPS, Graph, Role
from tofu.graph.memory import rule_for
from tofu.search.constants import constant_tensors
from tofu.search.cost import allreduce_elements, exchanged_gradients
from tofu.search.owners import parameter_pieces
from tofu.graph.gradients import expansion_gradients, gives_gradient

Box = tuple[tuple[int, int], ...]
Gives = tuple[bool, bool]       # whether a symbol gives an input a gradient when one arrives at it, when zeros do
PASSES: Gives = (True, False)   # a cut, a route, a kept part: a zero passes back
RUNS: Gives = (True, True)      # a concat, a partial sum, a pad: its backward runs on zeros too


def copied_bytes(graph: Graph, factors: Sequence[int], dims: Sequence[Sequence[int | None]],
                 choices: Sequence[Sequence[OpChoice]]) -> float:
    """Bytes copied across devices per training iteration by ``graph`` under the cuts ``factors``, with
    ``dims[t]`` the split dimension of tensor id t and ``choices[n]`` the choice of node id n at each cut."""
    return _Replay(graph, tuple(factors), dims, choices).run()


def copies_and_kept(graph: Graph, factors: Sequence[int], dims: Sequence[Sequence[int | None]],
                    choices: Sequence[Sequence[OpChoice]]) -> tuple[float, tuple[float, ...]]:
    """:func:`copied_bytes`; per device the forward bytes it receives for the inputs of ops that keep them
    for the backward pass (:attr:`tofu.graph.memory.MemoryRule.keeps_inputs`): each region a device receives
    counted once, however many ops there read it (they read one copy), as MXNet holds it until the backward;
    and per device what the runtime's parameter replicas hold beyond that (:meth:`_Replay.replicas_per_device`)."""
    replay = _Replay(graph, tuple(factors), dims, choices)
    total = replay.run()
    return total, replay.kept_per_device(), replay.replicas_per_device()


class _Replay:
    """The rewriter's construction on boxes: every symbol it would build is a number with its inputs and, for a
    piece that crosses devices, the bytes of its copy; what the graph outputs need is summed."""

    def __init__(self, graph: Graph, factors: tuple[int, ...], dims, choices):
        self.graph, self.factors, self.choices = graph, factors, choices
        self.dims = [tuple(d) for d in dims]
        self.k = math.prod(factors)
        self.coords = [coordinates(w, factors) for w in range(self.k)]
        self.inputs: list[tuple[int, ...]] = []    # per symbol: the symbols it reads
        self.gives: list[tuple[Gives, ...]] = []   # per symbol: per input, whether it gives it a gradient
        self.nbytes: list[float] = []              # per symbol: bytes its copy moves forward
        self.back: list[float] = []                # per symbol: and backward, if a gradient reaches it
        self.needs: list[bool] = []                # per symbol: it depends on a variable with a gradient
        self.sent: dict[tuple, int] = {}           # (tensor, held symbol, box number, destination) -> its copy
        self.assembled: dict[tuple, int] = {}      # (tensor, the cells' symbols, box, data) -> their assembly
        self.grads = graph.with_gradient
        self.const = constant_tensors(graph)
        self.received: dict[int, tuple[int, float]] = {}   # per copied symbol: (destination, forward bytes)
        self.params: dict[int, tuple[int, int]] = {}       # a parameter shard's symbol: (its elements, its tensor)
        self.replicas: dict[int, tuple[int, int]] = {}     # a copy of a whole parameter shard: owner, shard
        self.kept: set[int] = set()                         # copied symbols an op keeps for the backward pass
        self.kept_live: set[int] = set()                   # the kept copies a graph output depends on (run)
        self.layouts: dict[int, tuple[list, int]] = {}       # id of a pieces list -> (the list, its layout)
        self.layout_ids: dict[tuple, int] = {}
        self.cells: dict[tuple, tuple] = {}     # (layout, data, destination) -> its cells: (position, box's
        #                                         number, elements, whether it is that piece on the destination)
        self.layout_arrays: dict[int, tuple] = {}             # layout -> its pieces' boxes as arrays (_arrays)
        self.boxes: dict[tuple, Box] = {}
        self.box_ids: dict[Box, int] = {}                     # a number for every cell box met
        self.itemsize = [np.dtype(t.dtype).itemsize for t in graph.tensors]

    def symbol(self, inputs=(), nbytes: float = 0.0, needs: bool = False, gives: Sequence[Gives] | None = None,
               back: float = 0.0) -> int:
        """A new symbol reading ``inputs`` (``gives``: per input, whether it gives it a gradient; default
        :data:`PASSES`); it needs a gradient when it is a variable with one (``needs``) or reads one that needs
        one through an input it gives a gradient (MXNet differentiates only towards the variables with one)."""
        if gives is None:
            gives = (PASSES,) * len(inputs)
            needs = needs or any(self.needs[i] for i in inputs)
        else:
            gives = tuple(gives)
            needs = needs or any(self.needs[i] for i, g in zip(inputs, gives) if g[0])
        self.inputs.append(tuple(inputs))
        self.gives.append(gives)
        self.nbytes.append(nbytes)
        self.back.append(back)
        self.needs.append(needs)
        return len(self.nbytes) - 1

    def box(self, t: int, w: int) -> Box:
        shape = self.graph.tensors[t].shape
        key = (shape, self.dims[t], w)
        box = self.boxes.get(key)
        if box is None:
            box = self.boxes[key] = held_box(shape, self.dims[t], self.factors, w)
        return box

    def distance(self, u: int, w: int) -> int:
        if u == w:
            return 0
        first = next(j for j, (a, b) in enumerate(zip(self.coords[u], self.coords[w])) if a != b)
        return len(self.factors) - first

    def run(self) -> float:
        graph = self.graph
        read = {t for n in graph.nodes for t in n.inputs}
        consumed = read | set(graph.heads)
        held: dict[int, list] = {}     # per tensor: (device, box, partial key, symbol) of every held piece
        owners = parameter_pieces(graph, self.factors, self.dims)
        for t in graph.tensors:
            if t.producer is None and t.role is not Role.AUX:
                # a parameter's replicas read it from its owner
                boxes = owners[t.id] if t.role is Role.PARAM else [(w, self.box(t.id, w)) for w in range(self.k)]
                held[t.id] = [(w, b, (), self.symbol(needs=t.id in self.grads)) for w, b in boxes]
                if t.role is Role.PARAM:
                    self.params.update((h[3], (math.prod(hi - lo for lo, hi in h[1]), t.id)) for h in held[t.id])
        exchanges: list[tuple[list[int], float]] = []
        for node in graph.nodes:
            if node.outputs and node.outputs[0] in self.const:
                continue            # computed where it is read, the region read: nothing crosses devices
            keeps = rule_for(node).keeps_inputs
            calls = _calls(node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
                           tuple(graph.tensors[t].shape for t in node.outputs), tuple(self.choices[node.id]),
                           self.factors)
            syms, needs = [], []       # per call: its symbol, and whether its first input's pieces need a gradient
            for call in calls:
                reads, gives, first = [], [], []
                for q, p in enumerate(call.inputs):
                    t = node.inputs[p.input]
                    if p.zeroed or not p.read or graph.tensors[t].role is Role.AUX or t in self.const:
                        continue        # zeros, an input the expansion ignores, state kept on the device, or a
                        #                 constant computed there
                    got = self.gather(t, held[t], p.box, call.worker, p.data)
                    if keeps:
                        self.kept.update(got)
                    if len(got) > 1 or (p.data is not None and p.data != p.box):
                        # assembled (concat, add_n, pad) once per device and region: its readers share it
                        key = (t, tuple(got), p.box, p.data)
                        made = self.assembled.get(key)
                        if made is None:
                            made = self.assembled[key] = self.symbol(got, gives=(RUNS,) * len(got))
                        got = [made]
                    reads += got
                    gives += [_gives(node.op, call, q)] * len(got)
                    if p.input == 0:
                        first += got
                syms.append(self.symbol(reads, gives=gives))
                needs.append(any(self.needs[g] for g in first))
            if calls[0].exchange_steps:
                exchanges += self.exchange(node, calls, syms, needs)
            for o, t in enumerate(node.outputs):
                if t not in consumed:
                    continue
                produced = [(c.worker, c.outputs[o].box, tuple(self.coords[c.worker][j] for j in c.outputs[o].partial),
                             s) for c, s in zip(calls, syms)]
                if node.op in LOSS_OPS:         # one copy of each piece is read
                    first: dict[tuple, tuple] = {}
                    for h in produced:
                        first.setdefault((h[1], h[2]), h)
                    produced = list(first.values())
                if t not in read and all(not h[2] for h in produced):
                    held[t] = produced          # a graph output no op reads: handed out as computed
                    continue
                if len(produced) == self.k and all(h[0] == w and not h[2] and h[1] == self.box(t, w)
                                                   for w, h in enumerate(produced)):
                    held[t] = produced          # computed as it is held (what the gather below would give)
                    continue
                held[t] = [(w, self.box(t, w), (), self.held_piece(self.gather(t, produced, self.box(t, w), w)))
                           for w in range(self.k)]
        roots = []
        for t in dict.fromkeys(graph.heads):
            boxes = set()
            for w, b, _, s in held[t]:
                if b not in boxes:
                    boxes.add(b)
                    roots.append(s)
        live, reached = self.walk_back(roots)
        self.kept_live = {s for s in self.kept if live[s]}
        self.replicas_live = {s: (owner, reached[s]) for s, owner in self.replicas.items() if live[s]}
        total = sum(self.nbytes[s] + (self.back[s] if reached[s] else 0.0) for s, on in enumerate(live) if on)
        return total + sum(nbytes for group, nbytes in exchanges if any(live[s] for s in group))

    def held_piece(self, cells: list[int]) -> int:
        """A holder's piece of an op's output, from the cells of its pieces (several: assembled; one made on the
        holder's device is that piece itself: what a piece received is, the memory count tells apart)."""
        if len(cells) == 1 and cells[0] not in self.received:
            return cells[0]
        return self.symbol(cells, gives=(RUNS if len(cells) > 1 else PASSES,) * len(cells))

    def walk_back(self, roots: list[int]) -> tuple[list[bool], list[bool]]:
        """Per symbol, whether a graph output depends on it (MXNet runs it), and whether a gradient reaches it,
        not only MXNet's zeros: the outputs' does; then, back from the outputs, each live symbol gives its inputs
        one as ``gives`` says. Symbols are numbered in a topological order: one pass, highest first."""
        live = [False] * len(self.nbytes)
        reached = [False] * len(self.nbytes)
        for s in roots:
            live[s] = reached[s] = True
        for s in range(len(live) - 1, -1, -1):
            if not live[s]:
                continue
            side = 0 if reached[s] else 1
            for i, g in zip(self.inputs[s], self.gives[s]):
                live[i] = True
                if g[side]:
                    reached[i] = True
        return live, reached

    def kept_per_device(self) -> tuple[float, ...]:
        """Per device, the forward bytes of the copies it receives and keeps for the backward pass (after
        :meth:`run`; each copy once)."""
        out = [0.0] * self.k
        for s in self.kept_live:
            hit = self.received.get(s)
            if hit is not None:
                out[hit[0]] += hit[1]
        return tuple(out)

    def replicas_per_device(self) -> tuple[float, ...]:
        """Per device, what the runtime's parameter replicas hold beyond the copies :meth:`kept_per_device`
        counts (:mod:`tofu.runtime.replicas`: a whole parameter shard a device reads from another is bound there,
        resident): a replica's weight where no op keeps it for the backward pass, and when a gradient reaches it
        its gradient there; on the owner of a shard whose replicas send gradients, one buffer of the shard's
        size that receives them in turn (after :meth:`run`)."""
        out = [0.0] * self.k
        receiving: dict[int, tuple[int, float]] = {}
        for s, ((owner, shard), gradient) in self.replicas_live.items():
            dst, nbytes = self.received[s]
            out[dst] += (0.0 if s in self.kept_live else nbytes) + (nbytes if gradient else 0.0)
            if gradient:
                receiving[shard] = (owner, nbytes)
        for owner, nbytes in receiving.values():        # one buffer per shard, whatever the replicas
            out[owner] += nbytes
        return tuple(out)

    def gather(self, t: int, pieces, box: Box, dst: int, data: Box | None = None) -> list[int]:
        """The symbols that assemble ``data`` (default: ``box``) of tensor t on ``dst`` from the pieces: the
        cells the pieces' edges cut it into, each from the nearest piece of every partial-sum class."""
        data = box if data is None else data
        layout = self.layout(pieces)
        key = (layout, data, dst)
        cells = self.cells.get(key)
        if cells is None:
            arrays = self.layout_arrays.get(layout)
            if arrays is None:
                arrays = self.layout_arrays[layout] = _arrays(pieces)
            cells = self.cells[key] = tuple(
                (i, self.box_ids.setdefault(cell, len(self.box_ids)), math.prod(b - a for a, b in cell),
                 pieces[i][0] == dst and cell == pieces[i][1])
                for i, cell in _cells(pieces, data, dst, self.distance, arrays))
        got = []
        for i, box_id, volume, local in cells:
            sym = pieces[i][3]
            if local:                       # the holder's piece itself
                got.append(sym)
                continue
            sent = self.sent.get((t, sym, box_id, dst))
            got.append(self.piece(t, pieces[i][0], sym, box_id, volume, dst) if sent is None else sent)
        return got

    def layout(self, pieces) -> int:
        """A number for the (device, box, partial key) of every piece of ``pieces``: lists alike in them (the
        timesteps of an RNN layer, the blocks of a network) are cut into the same cells."""
        seen = self.layouts.get(id(pieces))
        if seen is None or seen[0] is not pieces:       # the list is kept in the entry: its id stays its own
            shape = tuple(h[:3] for h in pieces)
            seen = self.layouts[id(pieces)] = (pieces, self.layout_ids.setdefault(shape, len(self.layout_ids)))
        return seen[1]

    def piece(self, t: int, device: int, sym: int, box_id: int, volume: int, dst: int) -> int:
        """A new symbol for the box numbered ``box_id`` (``volume`` elements) of a held piece (``sym``, on
        ``device``), readable on ``dst``: cut on the holder's device and sent once per destination (:meth:`gather`
        finds it in ``sent`` after). A held piece's symbol stands for its (device, box, partial key): within one
        tensor no two held pieces share a symbol."""
        forward = volume * self.itemsize[t] if device != dst else 0.0
        needs = self.needs[sym]             # a cut passes a gradient: it needs one when its source does
        self.inputs.append((sym,))
        self.gives.append((PASSES,))
        self.nbytes.append(forward)
        self.back.append(forward if needs and t in self.grads else 0.0)
        self.needs.append(needs)
        got = self.sent[(t, sym, box_id, dst)] = len(self.nbytes) - 1
        if forward:
            self.received[got] = (dst, forward)
            if sym in self.params and self.params[sym] == (volume, t):       # all of a parameter shard
                self.replicas[got] = (device, sym)
        return got

    def exchange(self, node, calls, syms: Sequence[int], needs: Sequence[bool]) -> list[tuple[list[int], float]]:
        """The statistics all-reduce of an op run by its expansion, per group of the n workers that differ only
        at the exchange steps: the group's calls' symbols (``syms``, one per call) and its bytes,
        :func:`allreduce_elements` of each statistic S (2 (n - 1) |S| when |S| >= n), and as much for its
        gradient when the op's first input (the tensor the statistic is computed from) has one, the group's
        pieces of it depend on a variable with one (``needs``, per call: Gluon's resnet v2 normalises the data
        itself, and the channels of Concat(data, conv) that come from data need none; MXNet prunes that
        backward), and the op's expansion lets that statistic carry it (:func:`statistics_gradients`: not the
        softmax's row maximum, computed under BlockGrad). A group moves its bytes only when MXNet runs it (some
        call of it is live): of a loss computed whole over later steps, the group of its first copies alone."""
        from tofu.analysis.strategies import strategies

        steps = calls[0].exchange_steps
        n = math.prod(self.factors[j] for j in steps)
        var = self.choices[node.id][steps[-1]].var
        data = self.graph.tensors[node.inputs[0]]          # the statistic is computed from it: its gradient
        backward = data.id in self.grads                   # is exchanged too (where the statistic carries one)
        members: dict[tuple, list[int]] = {}        # per group: its calls' positions
        for i, call in enumerate(calls):
            key = tuple(c for j, c in enumerate(self.coords[call.worker]) if j not in steps)
            members.setdefault(key, []).append(i)
        out = []
        for group in members.values():
            call = calls[group[0]]
            piece = NodeView(node.op, call.attrs, tuple(tuple(b - a for a, b in p.box) for p in call.inputs),
                             tuple(tuple(b - a for a, b in o.box) for o in call.outputs), (), ())
            found = [s for s in strategies(piece.describe(), 1) if s.var == var and s.exchanges]
            if not found:
                out.append(([syms[i] for i in group], 0.0))
                continue
            sizes = found[0].exchange_elements
            carries = exchanged_gradients(node.op, piece.attrs, piece.in_shapes, found[0]) \
                if backward and any(needs[i] for i in group) else (False,) * len(sizes)
            elements = sum(allreduce_elements(e, n) * (1 + g) for e, g in zip(sizes, carries))
            out.append(([syms[i] for i in group], elements * np.dtype(data.dtype).itemsize))
        return out


def _gives(op: str, call, q: int) -> Gives:
    """Whether worker ``call``'s call of ``op`` gives its input ``q`` (a position in ``call.inputs``) a gradient
    when one arrives at its outputs, when only zeros do: its expansion's symbol says, else MXNet's rule for op."""
    if call.expansion:
        shapes = tuple(tuple(b - a for a, b in p.box) for p in call.inputs)
        origins = tuple(tuple(a for a, _ in p.box) for p in call.inputs)
        return (expansion_gradients(op, call.attrs, shapes, origins, True)[q],
                expansion_gradients(op, call.attrs, shapes, origins, False)[q])
    p = call.inputs[q].input
    return gives_gradient(op, True, p, call.attrs), gives_gradient(op, False, p, call.attrs)


@lru_cache(maxsize=65536)
def _calls(op, attrs, ins, outs, choices, factors):
    """Every worker's call of one op signature under ``choices`` (shared by the signature's nodes: the unrolled
    timesteps of an RNN)."""
    n = len(ins)
    return compose(NodeView(op, attrs, ins, outs, tuple(range(n)), tuple(range(n, n + len(outs)))), choices,
                   factors)


def _arrays(pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """The pieces' boxes as arrays for :func:`_cells`: their lower and upper corners (n x rank), their devices,
    and whether any piece is a partial sum."""
    lo = np.array([[a for a, _ in h[1]] for h in pieces], dtype=np.int64).reshape(len(pieces), -1)
    hi = np.array([[b for _, b in h[1]] for h in pieces], dtype=np.int64).reshape(len(pieces), -1)
    return lo, hi, np.array([h[0] for h in pieces]), any(h[2] for h in pieces)


def _cells(pieces, data: Box, dst: int, distance, arrays) -> tuple[tuple[int, Box], ...]:
    """Which piece each cell of ``data`` on ``dst`` is cut from, as (position in ``pieces``, cell): the pieces'
    edges cut ``data`` into cells, each taken from the nearest piece (``distance``, then the lower device) of
    every partial-sum class; ``data`` whole from a piece ``dst`` holds, when no piece is partial. ``arrays``:
    :func:`_arrays` of ``pieces``."""
    if not all(hi > lo for lo, hi in data):
        return ()
    lo, hi, devices, partial = arrays
    low = np.array([a for a, _ in data], dtype=np.int64)
    high = np.array([b for _, b in data], dtype=np.int64)
    if not partial:                       # held on dst whole (the usual case): nothing else is read
        whole = np.flatnonzero((devices == dst) & (lo <= low).all(1) & (high <= hi).all(1))
        if whole.size:
            return ((int(whole[0]), data),)
    parts = np.flatnonzero((np.maximum(lo, low) < np.minimum(hi, high)).all(1))
    plo, phi = lo[parts], hi[parts]
    cuts = []
    for d, (a, b) in enumerate(data):
        e = np.concatenate((plo[:, d], phi[:, d]))
        edges = [a, *np.unique(e[(e > a) & (e < b)]).tolist(), b]
        cuts.append(list(zip(edges, edges[1:])))
    out = []
    for cell in itertools.product(*cuts):
        c_lo = np.array([a for a, _ in cell], dtype=np.int64)
        c_hi = np.array([b for _, b in cell], dtype=np.int64)
        nearest: dict[tuple, tuple] = {}
        for i in parts[((plo <= c_lo) & (c_hi <= phi)).all(1)].tolist():
            h = pieces[i]
            best = nearest.get(h[2])
            if best is None or (distance(h[0], dst), h[0]) < (distance(best[1][0], dst), best[1][0]):
                nearest[h[2]] = (i, h)
        out += [(i, cell) for i, _ in nearest.values()]
    return tuple(out)
