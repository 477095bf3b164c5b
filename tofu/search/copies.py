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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order

from tofu.analysis.compose import OpChoice, compose, coordinates, held_box
from tofu.analysis.strategies import signature_strategies
from tofu.analysis.views import NodeView
from tofu.errors import SearchError
from tofu.graph.ir import LOSS_OPS, Graph, Role
from tofu.graph.memory import rule_for
from tofu.search.constants import constant_tensors
from tofu.search.cost import allreduce_elements, exchanged_gradients
from tofu.search.owners import parameter_pieces
from tofu.graph.gradients import expansion_gradients, gives_gradient

Box = tuple[tuple[int, int], ...]
Gives = int     # whether a symbol gives an input a gradient when one arrives at it (bit 0), when zeros do (bit 1)
PASSES: Gives = 1   # a cut, a route, a kept part: a zero passes back
RUNS: Gives = 3     # a concat, a partial sum, a pad: its backward runs on zeros too


def copied_bytes(graph: Graph, factors: Sequence[int], dims: Sequence[Sequence[int | None]],
                 choices: Sequence[Sequence[OpChoice]]) -> float:
    """Bytes copied across devices per training iteration by ``graph`` under the cuts ``factors``, with
    ``dims[t]`` the split dimension of tensor id t and ``choices[n]`` the choice of node id n at each cut."""
    return _Replay(graph, tuple(factors), dims, choices).run()


@dataclass(frozen=True)
class Recount:
    """What :func:`copies_and_kept` finds under a plan's cuts."""
    total: float                        # bytes copied across devices per training iteration
    kept: tuple[float, ...]             # per device: forward bytes received and kept for the backward pass
    replicas: tuple[float, ...]         # per device: what the parameter replicas hold beyond ``kept``
    owners: Mapping[int, tuple[tuple[int, Box], ...]]     # per parameter: :func:`parameter_pieces`


def copies_and_kept(graph: Graph, factors: Sequence[int], dims: Sequence[Sequence[int | None]],
                    choices: Sequence[Sequence[OpChoice]]) -> Recount:
    """:func:`copied_bytes`; per device the forward bytes it receives for the inputs of ops that keep them
    for the backward pass (:attr:`tofu.graph.memory.MemoryRule.keeps_inputs`): each region a device receives
    counted once, however many ops there read it (they read one copy), as MXNet holds it until the backward;
    per device what the runtime's parameter replicas hold beyond that (:meth:`_Replay.replicas_per_device`);
    and the parameters' owners the count used."""
    replay = _Replay(graph, tuple(factors), dims, choices)
    total = replay.run()
    return Recount(total, replay.kept_per_device(), replay.replicas_per_device(), replay.owners)


class _Symbols:
    """The replay's symbols as arrays, grown by doubling: per symbol where its edges end, the bytes its copy
    moves forward and backward (the latter when a gradient reaches it), whether it needs a gradient, the device
    it was copied to (-1: not a copy), whether an op keeps it for the backward pass and, for a parameter shard,
    its elements and its tensor (-1: not a shard); per edge the symbol read and whether the reader gives it a
    gradient (:data:`Gives`)."""

    _ROWS = (("ends", np.int64, 0), ("nbytes", np.float64, 0), ("back", np.float64, 0), ("needs", bool, 0),
             ("dst", np.int64, -1), ("kept", bool, 0), ("shard", np.int64, 0), ("param", np.int64, -1))

    def __init__(self, capacity: int = 1 << 14):
        self.n = self.m = 0
        for name, dtype, fill in self._ROWS:
            setattr(self, name, np.full(capacity, fill, dtype=dtype))
        self.edges = np.zeros(capacity, dtype=np.int64)
        self.codes = np.zeros(capacity, dtype=np.int8)

    def add(self, counts, edges, codes, nbytes=None, back=None, needs=None, dst=None) -> np.ndarray:
        """New symbols, one per entry of ``counts``, each reading the next that many of ``edges`` (with
        ``codes``); their numbers, which follow every symbol's before them (a topological order). A row not
        given keeps its fill (no bytes, no gradient needed, not a copy)."""
        n0, m0 = self.n, self.m
        n, m = n0 + len(counts), m0 + len(edges)
        if n > len(self.ends) or m > len(self.edges):
            self._grow(n, m)
        self.edges[m0:m] = edges
        self.codes[m0:m] = codes
        ends = self.ends[n0:n]
        counts.cumsum(out=ends)
        ends += m0
        if nbytes is not None:
            self.nbytes[n0:n] = nbytes
        if back is not None:
            self.back[n0:n] = back
        if needs is not None:
            self.needs[n0:n] = needs
        if dst is not None:
            self.dst[n0:n] = dst
        self.n, self.m = n, m
        return np.arange(n0, n)

    def _grow(self, n: int, m: int) -> None:
        if n > len(self.ends):
            size = max(n, 2 * len(self.ends))
            for name, dtype, fill in self._ROWS:
                old = getattr(self, name)
                setattr(self, name, np.concatenate((old, np.full(size - len(old), fill, dtype=dtype))))
        if m > len(self.edges):
            size = max(m, 2 * len(self.edges))
            self.edges = np.concatenate((self.edges, np.zeros(size - len(self.edges), dtype=np.int64)))
            self.codes = np.concatenate((self.codes, np.zeros(size - len(self.codes), dtype=np.int8)))


class _Batch:
    """The cells that every call of one op reads of one tensor (or every holder reads of an op's output), in
    order: per cell the entry it belongs to (a call's input, or a holder), the position of the piece it is cut
    from and whether it is that piece itself on the destination; per entry its first cell and its number of
    cells; of the cells another device holds (``remote``, None: none), the box's number and destination packed
    as a copy's key is (:meth:`_Replay.copies`), the elements, the holder's device and the destination."""

    def __init__(self, cells: list[tuple], entries: int):
        rows = np.fromiter(itertools.chain.from_iterable(cells), dtype=np.int64, count=7 * len(cells)).reshape(-1, 7)
        self.entry, self.piece, box, volume, device, dst, local = rows.T
        self.count = np.bincount(self.entry, minlength=entries)
        self.first = np.concatenate(([0], np.cumsum(self.count)[:-1])) if entries else self.count
        remote = local == 0
        self.remote = remote if remote.any() else None
        self.remote_key = (box[remote] << 12) | dst[remote]
        self.remote_volume, self.remote_device, self.remote_dst = volume[remote], device[remote], dst[remote]
        self.alone = self.alone_entries = self.joined_at = self.joined_entries = None
        self.joined_regions: list[tuple] = []

    def reading(self, entries: list[int], regions: list[tuple]) -> "_Batch":
        """For a batch of calls' reads (``entries``: their numbers among the op's, ``regions`` their (box, data)
        by number): which cells are read as they are (``alone``, None: all), their entries, and the entries whose
        cells are assembled first (several cells, or a data region other than the box: padded)."""
        joined = np.array([(regions[e][1] is not None and regions[e][1] != regions[e][0]) or self.count[j] > 1
                           for j, e in enumerate(entries)], dtype=bool)
        numbers = np.asarray(entries, dtype=np.int64)
        alone = ~joined[self.entry]
        self.alone = None if alone.all() else alone
        self.alone_entries = numbers[self.entry[alone]]
        self.joined_at = np.flatnonzero(joined)
        self.joined_entries = numbers[self.joined_at]
        self.joined_regions = [regions[entries[j]] for j in self.joined_at.tolist()]
        return self


class _Replay:
    """The rewriter's construction on boxes: every symbol it would build is a number with its inputs and, for a
    piece that crosses devices, the bytes of its copy; what the graph outputs need is summed. Each op is
    replayed for all its workers' calls at once: the cells they read (:class:`_Batch`, the same for the ops of
    one signature reading pieces laid out alike: an RNN's timesteps) are cut and sent as arrays, a copy keyed by
    its held symbol, box and destination packed in one integer."""

    def __init__(self, graph: Graph, factors: tuple[int, ...], dims, choices):
        self.graph, self.factors, self.choices = graph, factors, choices
        self.dims = [tuple(d) for d in dims]
        self.k = math.prod(factors)
        if self.k >= 1 << 12:
            raise SearchError(f"{self.k} workers: the count of copies numbers destinations in 12 bits")
        self.coords = [coordinates(w, factors) for w in range(self.k)]
        self.coord_rows = np.array(self.coords, dtype=np.int64).reshape(self.k, len(factors))
        self.sym = _Symbols()
        self.owners = parameter_pieces(graph, factors, self.dims)     # per parameter: its pieces' owners
        # per tensor: the (held symbol, box number, destination) keys of its copies, sorted, and their symbols
        self.sent: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.assembled: dict[tuple, int] = {}       # (tensor, the cells' symbols, box, data) -> their assembly
        self.grads = graph.with_gradient
        self.const = constant_tensors(graph)
        self.replicas: list[np.ndarray] = []    # rows (copy of a whole parameter shard, its owner, the shard)
        self.layouts: dict[int, tuple[list, int]] = {}       # id of a pieces list -> (the list, its layout)
        self.layout_ids: dict[tuple, int] = {}
        self.cells: dict[tuple, tuple] = {}     # (layout, data, destination; not for a layout that holds no
        #                   element twice) -> its cells: (position, box's number, elements, whether it is that piece)
        self.layout_arrays: dict[int, tuple] = {}             # layout -> its pieces' boxes as arrays (_arrays)
        self.boxes: dict[tuple, Box] = {}
        self.orders: dict[int, np.ndarray] = {}             # per destination: its sources' order (order)
        self.box_ids: dict[Box, int] = {}                     # a number for every cell box met
        self.batches: dict[tuple, _Batch] = {}
        self.shapes: dict[tuple, tuple] = {}        # per calls and batches read: the order of their reads (read)
        self.skips = [tuple(graph.tensors[t].role is Role.AUX or t in self.const for t in n.inputs)
                      for n in graph.nodes]         # per node, per input: state kept on the device, a constant
        self.reads: dict[tuple, tuple] = {}         # per calls and skipped inputs: what the calls read (_reads)
        self.outputs: dict[tuple, tuple] = {}       # per calls and output: its pieces as computed (_produced)
        self.holders: dict[tuple, list] = {}        # per shape and dims: the pieces every worker holds
        self.itemsize = [np.dtype(t.dtype).itemsize for t in graph.tensors]

    def box(self, t: int, w: int) -> Box:
        shape = self.graph.tensors[t].shape
        key = (shape, self.dims[t], w)
        box = self.boxes.get(key)
        if box is None:
            box = self.boxes[key] = held_box(shape, self.dims[t], self.factors, w)
        return box

    def order(self, dst: int) -> np.ndarray:
        """Per device, its rank as a source for ``dst``, least first: its distance (m less the first step at
        which the two devices' coordinates differ), then the lower device; dst itself 0."""
        row = self.orders.get(dst)
        if row is None:
            differ = self.coord_rows != self.coord_rows[dst]
            first = np.where(differ.any(1), differ.argmax(1), len(self.factors))
            row = self.orders[dst] = (len(self.factors) - first) * self.k + np.arange(self.k)
            row[dst] = 0
        return row

    def run(self) -> float:
        graph, sym = self.graph, self.sym
        read = {t for n in graph.nodes for t in n.inputs}
        consumed = read | set(graph.heads)
        held: dict[int, tuple[list, np.ndarray]] = {}     # per tensor: its held pieces (device, box, partial key)
        owners = self.owners
        for t in graph.tensors:
            if t.producer is None and t.role is not Role.AUX:
                # a parameter's replicas read it from its owner
                boxes = owners[t.id] if t.role is Role.PARAM else [(w, self.box(t.id, w)) for w in range(self.k)]
                ids = sym.add(np.zeros(len(boxes), dtype=np.int64), (), (), needs=t.id in self.grads)
                held[t.id] = ([(w, b, ()) for w, b in boxes], ids)
                if t.role is Role.PARAM:
                    sym.shard[ids] = [math.prod(hi - lo for lo, hi in b) for _, b in boxes]
                    sym.param[ids] = t.id
        exchanges: list[tuple[list[int], float]] = []
        for node in graph.nodes:
            if node.outputs and node.outputs[0] in self.const:
                continue            # computed where it is read, the region read: nothing crosses devices
            calls = _calls(node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
                           tuple(graph.tensors[t].shape for t in node.outputs), tuple(self.choices[node.id]),
                           self.factors)
            syms, first_needs = self.read(node, calls, held)
            if calls[0].exchange_steps:
                exchanges += self.exchange(node, calls, syms.tolist(), first_needs.tolist())
            for o, t in enumerate(node.outputs):
                if t in consumed:
                    held[t] = self.hold(node.op, t, calls, o, syms, t in read)
        roots = []
        for t in dict.fromkeys(graph.heads):
            boxes = set()
            for (_, b, _), s in zip(held[t][0], held[t][1].tolist()):
                if b not in boxes:
                    boxes.add(b)
                    roots.append(s)
        live, reached = self.walk_back(roots)
        n = sym.n
        self.live = live
        self.reached = reached
        total = float(sym.nbytes[:n][live].sum() + sym.back[:n][live & reached].sum())
        return total + sum(nbytes for group, nbytes in exchanges if any(live[s] for s in group))

    def read(self, node, calls, held) -> tuple[np.ndarray, np.ndarray | None]:
        """The symbols of ``node``'s calls, each reading the cells of its input pieces from their holders
        (assembled by concat, add_n or pad once per device and region: readers share it), and per call whether
        its first input's pieces need a gradient (for a statistics exchange; None without one)."""
        sym = self.sym
        call_of, code_of, first_of, by_input, regions = self._reads(node.op, calls, self.skips[node.id])
        keeps = rule_for(node).keeps_inputs
        parts, batches = [], []
        for p, entries in by_input.items():
            t = node.inputs[p]
            pieces, holders = held[t]
            key = ("read", self.layout(pieces), id(regions), p)
            batch = self.batches.get(key)
            if batch is None:
                batch = self.batches[key] = self._batch(pieces, [(*regions[e], calls[call_of[e]].worker)
                                                                 for e in entries]).reading(entries, regions)
            got = holders[batch.piece]
            if batch.remote is not None:
                got[batch.remote] = self.copies(t, got[batch.remote], batch)
            if keeps:
                sym.kept[got] = True
            parts.append(got if batch.alone is None else got[batch.alone])
            if len(batch.joined_at):
                parts.append(self.assemble(t, got, batch))
            batches.append(batch)
        key = (id(regions), tuple(map(id, batches)))
        shape = self.shapes.get(key)
        if shape is None:       # the calls' reads in order (call, input), and what each call's symbol is
            entry = np.concatenate([e for b in batches for e in (b.alone_entries, b.joined_entries)]) \
                if batches else np.zeros(0, dtype=np.int64)
            order = np.argsort(entry, kind="stable")
            call, codes = call_of[entry[order]], code_of[entry[order]]
            shape = self.shapes[key] = (order, call, codes, (codes & 1).astype(bool), first_of[entry[order]],
                                        np.bincount(call, minlength=len(calls)))
        order, call, codes, passes, first, counts = shape
        items = np.concatenate(parts)[order] if parts else np.zeros(0, dtype=np.int64)
        needs = sym.needs[items]
        passing = np.bincount(call[needs & passes], minlength=len(calls)) > 0
        firsts = np.bincount(call[needs & first], minlength=len(calls)) > 0 if calls[0].exchange_steps else None
        return sym.add(counts, items, codes, needs=passing), firsts

    def assemble(self, t: int, got: np.ndarray, batch: _Batch) -> np.ndarray:
        """The assemblies (concat, add_n, pad) of the cells ``got`` of the batch's joined entries, each read as
        (box, data) of ``regions``: one per device and region, which its readers share."""
        cells, first, count = got.tolist(), batch.first.tolist(), batch.count.tolist()
        made, new = [], {}
        for j, (box, data) in zip(batch.joined_at.tolist(), batch.joined_regions):
            key = (t, tuple(cells[first[j]:first[j] + count[j]]), box, data)
            number = self.assembled.get(key)
            if number is None:
                number = new.setdefault(key, -1 - len(new))      # made below, after every one is known
            made.append(number)
        if new:
            counts = np.array([len(key[1]) for key in new], dtype=np.int64)
            reads = np.fromiter(itertools.chain.from_iterable(key[1] for key in new), dtype=np.int64,
                                count=int(counts.sum()))
            needs = np.bincount(np.repeat(np.arange(len(counts)), counts)[self.sym.needs[reads]],
                                minlength=len(counts)) > 0
            ids = self.sym.add(counts, reads, RUNS, needs=needs)
            self.assembled.update(zip(new, ids.tolist()))
            made = [ids[-1 - m] if m < 0 else m for m in made]
        return np.array(made, dtype=np.int64)

    def _reads(self, op, calls, skip) -> tuple:
        """What ``calls`` read (their inputs not zeroed, read, and not ``skip``: state kept on the device or a
        constant computed there): per entry (a call's input) its call's position, :data:`Gives` and whether it is
        the op's first input; the entries per op input; and per entry its (box, data)."""
        key = (id(calls), skip)
        hit = self.reads.get(key)
        if hit is None or hit[0] is not calls:
            call_of, codes, first, by_input, regions = [], [], [], {}, []
            gives: dict[tuple, int] = {}    # a kernel's rule depends on its attributes and input alone
            for c, call in enumerate(calls):
                for q, p in enumerate(call.inputs):
                    if p.zeroed or not p.read or skip[p.input]:
                        continue
                    by_input.setdefault(p.input, []).append(len(regions))
                    call_of.append(c)
                    code = None if call.expansion else gives.get((id(call.attrs), p.input))
                    if code is None:
                        g = _gives(op, call, q)
                        code = int(g[0]) | int(g[1]) << 1
                        if not call.expansion:
                            gives[(id(call.attrs), p.input)] = code
                    codes.append(code)
                    first.append(p.input == 0)
                    regions.append((p.box, p.data))
            hit = self.reads[key] = (calls, (np.array(call_of, dtype=np.int64), np.array(codes, dtype=np.int8),
                                             np.array(first, dtype=bool), by_input, regions))
        return hit[1]

    def _batch(self, pieces, wanted: list[tuple]) -> _Batch:
        """The cells of every (box, data, destination) of ``wanted`` read from ``pieces``."""
        layout = self.layout(pieces)
        arrays = self.layout_arrays.get(layout)
        if arrays is None:
            arrays = self.layout_arrays[layout] = _arrays(pieces)
        alone = arrays[5]       # no element held twice: where a cell comes from never depends on where it goes
        rows = []
        for e, (box, data, dst) in enumerate(wanted):
            data = box if data is None else data
            key = (layout, data) if alone else (layout, data, dst)
            cells = self.cells.get(key)
            if cells is None:
                cells = self.cells[key] = tuple(
                    (i, self.box_ids.setdefault(cell, len(self.box_ids)), math.prod(b - a for a, b in cell),
                     cell == pieces[i][1])
                    for i, cell in _cells(pieces, data, dst, self.order(dst), arrays))
            rows += [(e, i, box_id, volume, pieces[i][0], dst, whole and pieces[i][0] == dst)
                     for i, box_id, volume, whole in cells]
        if len(self.box_ids) >= 1 << 20:
            raise SearchError("the count of copies numbers cell boxes in 20 bits: too many boxes")
        return _Batch(rows, len(wanted))

    def copies(self, t: int, held: np.ndarray, batch: _Batch) -> np.ndarray:
        """The symbols of the batch's remote cells, cut from the held pieces' symbols ``held`` (one per remote
        cell): each cut on its holder's device and sent once per destination (a cell met again is its first
        copy)."""
        keys = (held << 32) | batch.remote_key
        known, ids_known = self.sent.get(t, (_NONE, _NONE))
        pos = np.minimum(np.searchsorted(known, keys), max(len(known) - 1, 0))
        hit = known[pos] == keys if len(known) else np.zeros(len(keys), dtype=bool)
        found = np.where(hit, ids_known[pos] if len(known) else -1, -1)
        if not hit.all():
            miss = np.flatnonzero(~hit)
            new_keys, first, which = np.unique(keys[miss], return_index=True, return_inverse=True)
            order = np.argsort(first)       # the new copies numbered as their first cells come
            at = miss[first[order]]
            source, volume, device, dst = held[at], batch.remote_volume[at], batch.remote_device[at], \
                batch.remote_dst[at]
            forward = np.where(device != dst, volume * self.itemsize[t], 0).astype(np.float64)
            needs = self.sym.needs[source]        # a cut passes a gradient: it needs one when its source does
            ids = self.sym.add(np.ones(len(source), dtype=np.int64), source, PASSES, forward,
                               np.where(needs, forward, 0.0) if t in self.grads else None, needs,
                               np.where(forward > 0, dst, -1))
            numbered = np.empty(len(new_keys), dtype=np.int64)
            numbered[order] = ids
            found[miss] = numbered[which]
            keys_all = np.concatenate((known, new_keys))
            sort = np.argsort(keys_all, kind="stable")
            self.sent[t] = (keys_all[sort], np.concatenate((ids_known, numbered))[sort])
            # all of a shard of parameter t
            whole = (forward > 0) & (self.sym.shard[source] == volume) & (self.sym.param[source] == t)
            if whole.any():
                self.replicas.append(np.stack((ids[whole], device[whole], source[whole]), axis=1))
        return found

    def hold(self, op: str, t: int, calls, o: int, syms: np.ndarray, read: bool) -> tuple[list, np.ndarray]:
        """Output ``o`` of the calls (symbols ``syms``) turned into every holder's box of tensor t: partial sums
        reduced there, a loss's pieces read once (the others would inject its gradient again), a graph output
        that no op reads handed out as computed."""
        pieces, kept, as_held, summed = self._produced(op, t, calls, o)
        produced = syms[kept]
        if (not read and not summed) or as_held:
            return pieces, produced     # as computed, or computed as it is held (what the gather would give)
        shape = self.graph.tensors[t].shape
        holders = self.holders.get((shape, self.dims[t]))
        if holders is None:
            holders = self.holders[(shape, self.dims[t])] = [(w, self.box(t, w), ()) for w in range(self.k)]
        key = ("hold", self.layout(pieces), shape, self.dims[t])
        batch = self.batches.get(key)
        if batch is None:
            batch = self.batches[key] = self._batch(pieces, [(box, None, w) for w, box, _ in holders])
        got = produced[batch.piece]
        if batch.remote is not None:
            got[batch.remote] = self.copies(t, got[batch.remote], batch)
        # a holder's piece: one cell made on its device is that piece itself; a received one or several cells
        # are assembled (what a piece received is, the memory count tells apart)
        count, first = batch.count, batch.first
        single = count == 1
        out = np.full(self.k, -1, dtype=np.int64)
        own = np.flatnonzero(single)
        own = own[self.sym.dst[got[first[own]]] < 0]
        out[own] = got[first[own]]
        new = np.flatnonzero(out < 0)
        cells = np.isin(batch.entry, new)
        codes = np.where(count[batch.entry[cells]] > 1, RUNS, PASSES)
        needs = np.bincount(batch.entry[cells][self.sym.needs[got[cells]]], minlength=self.k)[new] > 0
        out[new] = self.sym.add(count[new], got[cells], codes, needs=needs)
        return holders, out

    def _produced(self, op: str, t: int, calls, o: int) -> tuple[list, np.ndarray, bool, bool]:
        """Output ``o`` of ``calls`` as computed: its pieces (worker, box, partial key), the calls they come
        from (of a loss, the first call of each piece: one copy of each is read), whether they are every
        worker's held box of t, and whether some is a partial sum."""
        key = (id(calls), o, self.graph.tensors[t].shape, self.dims[t])
        hit = self.outputs.get(key)
        if hit is None or hit[0] is not calls:
            produced = [((c.worker, c.outputs[o].box, tuple(self.coords[c.worker][j] for j in c.outputs[o].partial)),
                         i) for i, c in enumerate(calls)]
            if op in LOSS_OPS:
                first: dict[tuple, tuple] = {}
                for h, i in produced:
                    first.setdefault((h[1], h[2]), (h, i))
                produced = list(first.values())
            pieces = [h for h, _ in produced]
            as_held = len(pieces) == self.k and all(h[0] == w and not h[2] and h[1] == self.box(t, w)
                                                    for w, h in enumerate(pieces))
            hit = self.outputs[key] = (calls, (pieces, np.array([i for _, i in produced], dtype=np.int64), as_held,
                                               any(h[2] for h in pieces)))
        return hit[1]

    def walk_back(self, roots: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Per symbol, whether a graph output depends on it (MXNet runs it), and whether a gradient reaches it,
        not only MXNet's zeros: the outputs' does; then, back from the outputs, each live symbol gives its inputs
        one as its :data:`Gives` say.

        With L the symbols an output reaches over any edge, and R those a gradient reaches: R is what the edges
        that pass a gradient (bit 0) reach from the outputs and from the inputs that a live symbol's backward
        gives one even from zeros (bit 1: a concat, a partial sum, a pad), when every such edge also passes a
        gradient (a backward that runs on zeros runs on a gradient): two breadth-first searches. Otherwise, one
        pass in the symbols' (topological) order, highest first."""
        sym, n = self.sym, self.sym.n
        indptr = np.zeros(n + 2, dtype=np.int64)
        indptr[1:n + 1] = sym.ends[:n]
        targets, codes = sym.edges[:sym.m], sym.codes[:sym.m]
        passes, zeros = (codes & 1).astype(bool), (codes & 2).astype(bool)
        seeds = np.asarray(roots, dtype=np.int64)
        if (zeros & ~passes).any():
            return self._walk_back_in_order(seeds)
        live = _reach(indptr, targets, seeds, n)
        passing = np.zeros(n + 2, dtype=np.int64)        # the passing edges' ends, symbol by symbol
        passing[1:n + 1] = np.concatenate(([0], np.cumsum(passes)))[indptr[1:n + 1]]
        zeros &= np.repeat(live, np.diff(indptr[:n + 1]))
        return live, _reach(passing, targets[passes], np.concatenate((seeds, targets[zeros])), n)

    def _walk_back_in_order(self, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`walk_back` as one pass from the highest symbol down (symbols are numbered in a topological
        order), for edges that pass zeros back where they pass no gradient."""
        sym = self.sym
        live, reached = np.zeros(sym.n, dtype=bool), np.zeros(sym.n, dtype=bool)
        live[roots] = reached[roots] = True
        ends, edges, codes = sym.ends.tolist(), sym.edges.tolist(), sym.codes.tolist()
        for s in range(sym.n - 1, -1, -1):
            if not live[s]:
                continue
            bit = 1 if reached[s] else 2
            for e in range(ends[s - 1] if s else 0, ends[s]):
                live[edges[e]] = True
                if codes[e] & bit:
                    reached[edges[e]] = True
        return live, reached

    def kept_per_device(self) -> tuple[float, ...]:
        """Per device, the forward bytes of the copies it receives and keeps for the backward pass (after
        :meth:`run`; each copy once)."""
        sym, n = self.sym, self.sym.n
        kept = sym.kept[:n] & self.live & (sym.dst[:n] >= 0)
        return tuple(np.bincount(sym.dst[:n][kept], weights=sym.nbytes[:n][kept], minlength=self.k).tolist())

    def replicas_per_device(self) -> tuple[float, ...]:
        """Per device, what the runtime's parameter replicas hold beyond the copies :meth:`kept_per_device`
        counts (:mod:`tofu.runtime.replicas`: a whole parameter shard a device reads from another is bound there,
        resident): a replica's weight where no op keeps it for the backward pass, and when a gradient reaches it
        its gradient there; on the owner of a shard whose replicas send gradients, one buffer of the shard's
        size that receives them in turn (after :meth:`run`)."""
        copy, owner, shard = np.concatenate(self.replicas).T if self.replicas else np.zeros((3, 0), dtype=np.int64)
        live = self.live[copy]
        copy, owner, shard = copy[live], owner[live], shard[live]
        gradient, nbytes = self.reached[copy], self.sym.nbytes[copy]
        out = np.bincount(self.sym.dst[copy], weights=np.where(self.sym.kept[copy], 0.0, nbytes)
                          + np.where(gradient, nbytes, 0.0), minlength=self.k)
        _, first = np.unique(shard[gradient], return_index=True)    # one buffer per shard, whatever the replicas
        out += np.bincount(owner[gradient][first], weights=nbytes[gradient][first], minlength=self.k)
        return tuple(out.tolist())

    def layout(self, pieces) -> int:
        """A number for the (device, box, partial key) of every piece of ``pieces``: lists alike in them (the
        timesteps of an RNN layer, the blocks of a network) are cut into the same cells."""
        seen = self.layouts.get(id(pieces))
        if seen is None or seen[0] is not pieces:       # the list is kept in the entry: its id stays its own
            seen = self.layouts[id(pieces)] = (pieces, self.layout_ids.setdefault(tuple(pieces), len(self.layout_ids)))
        return seen[1]

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
            found = [s for s in signature_strategies(node.op, piece.attrs, piece.in_shapes, piece.out_shapes, 1)
                     if s.var == var and s.exchanges]
            if not found:
                out.append(([syms[i] for i in group], 0.0))
                continue
            sizes = found[0].exchange_elements
            carries = exchanged_gradients(node.op, piece.attrs, piece.in_shapes, found[0]) \
                if backward and any(needs[i] for i in group) else (False,) * len(sizes)
            elements = sum(allreduce_elements(e, n) * (1 + g) for e, g in zip(sizes, carries))
            out.append(([syms[i] for i in group], elements * np.dtype(data.dtype).itemsize))
        return out


def _reach(indptr: np.ndarray, targets: np.ndarray, seeds: np.ndarray, n: int) -> np.ndarray:
    """Which of ``n`` nodes the edges reach from ``seeds`` (them included): node s's edges go to
    ``targets[indptr[s]:indptr[s + 1]]``; ``indptr`` has n + 2 entries, its last free for a node n that points at
    the seeds."""
    if not len(seeds):
        return np.zeros(n, dtype=bool)
    indptr = indptr.copy()
    indptr[n + 1] = indptr[n] + len(seeds)
    graph = csr_matrix((np.ones(indptr[n + 1]), np.concatenate((targets, seeds)), indptr), shape=(n + 1, n + 1))
    graph.has_sorted_indices = True     # the search's order does not matter: scipy need not sort them
    out = np.zeros(n + 1, dtype=bool)
    out[breadth_first_order(graph, n, directed=True, return_predecessors=False)] = True
    return out[:n]


def _gives(op: str, call, q: int) -> tuple[bool, bool]:
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


_ALONE_UP_TO = 1024
"""Layouts of more pieces are not checked for pieces that share an element (n^2 pairs): taken to share one."""


def _arrays(pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool, dict[int, list[int]], bool]:
    """The pieces' boxes as arrays for :func:`_cells`: their lower and upper corners (n x rank), their devices,
    whether any piece is a partial sum, per device the positions of its pieces, and whether no element is held
    twice (no piece is partial and no two overlap: each cell then has one holder, whatever the destination)."""
    lo = np.array([[a for a, _ in h[1]] for h in pieces], dtype=np.int64).reshape(len(pieces), -1)
    hi = np.array([[b for _, b in h[1]] for h in pieces], dtype=np.int64).reshape(len(pieces), -1)
    on: dict[int, list[int]] = {}
    for i, h in enumerate(pieces):
        on.setdefault(h[0], []).append(i)
    partial = any(h[2] for h in pieces)
    alone = False
    if not partial and len(pieces) <= _ALONE_UP_TO:
        shared = (np.maximum(lo[:, None], lo[None]) < np.minimum(hi[:, None], hi[None])).all(2)
        np.fill_diagonal(shared, False)
        alone = not shared.any()
    return lo, hi, np.array([h[0] for h in pieces]), partial, on, alone


_NEVER = np.iinfo(np.int64).max
_NONE = np.zeros(0, dtype=np.int64)


def _cells(pieces, data: Box, dst: int, order: np.ndarray, arrays) -> tuple[tuple[int, Box], ...]:
    """Which piece each cell of ``data`` on the destination is cut from, as (position in ``pieces``, cell): the
    pieces' edges cut ``data`` into cells, each taken from the nearest piece (``order``: per device, its rank
    as a source, least first, the destination itself 0; then the first piece) of every partial-sum class;
    ``data`` whole from a piece the destination ``dst`` holds, when no piece is partial. ``arrays``:
    :func:`_arrays` of ``pieces``."""
    if not all(hi > lo for lo, hi in data):
        return ()
    lo, hi, devices, partial, on, _ = arrays
    if not partial:                       # held on dst whole (the usual case): nothing else is read
        for i in on.get(dst, ()):
            if all(a <= c and d <= b for (a, b), (c, d) in zip(pieces[i][1], data)):
                return ((i, data),)
    low = np.array([a for a, _ in data], dtype=np.int64)
    high = np.array([b for _, b in data], dtype=np.int64)
    parts = np.flatnonzero((np.maximum(lo, low) < np.minimum(hi, high)).all(1))
    plo, phi = lo[parts], hi[parts]
    cuts = []
    for (a, b), lows, highs in zip(data, plo.T.tolist(), phi.T.tolist()):
        edges = [a, *sorted({e for e in (*lows, *highs) if a < e < b}), b]
        cuts.append(list(zip(edges, edges[1:])))
    # the cells in itertools.product's order (the last dimension fastest), and which pieces hold each
    cells = list(itertools.product(*cuts))
    corners = np.array(cells, dtype=np.int64).reshape(len(cells), len(data), 2)
    c_lo, c_hi = corners[:, :, 0], corners[:, :, 1]
    inside = ((plo[None] <= c_lo[:, None]) & (c_hi[:, None] <= phi[None])).all(2)       # cells x parts
    rank = order[devices[parts]]          # the nearest piece: the least rank, the first of equals
    if not partial:
        best = np.where(inside, rank, _NEVER).argmin(1).tolist()
        return tuple((int(parts[b]), cell) for b, cell, ok in zip(best, cells, inside.any(1).tolist()) if ok)
    # one piece of every partial-sum class, in the order of the class's first piece that holds the cell
    keys = [pieces[i][2] for i in parts.tolist()]
    ids: dict[tuple, int] = {}
    classes = np.array([ids.setdefault(key, len(ids)) for key in keys], dtype=np.int64)
    per_class = []
    for g in range(len(ids)):
        held = inside & (classes == g)
        per_class.append((held.argmax(1).tolist(), np.where(held, rank, _NEVER).argmin(1).tolist(),
                          held.any(1).tolist()))
    out = []
    for c, cell in enumerate(cells):
        found = sorted((first[c], best[c]) for first, best, ok in per_class if ok[c])
        out += [(int(parts[b]), cell) for _, b in found]
    return tuple(out)
