"""An independent count of the bytes a plan moves per training iteration (the exact-cost check).

Written apart from ``tofu.search`` (it imports nothing from it): it reads only the plan (each step's tensor
dimensions and op choices) and every worker's kernel call under it (``tofu.analysis.compose``, the calls the
runtime runs and that the single-device comparisons validate), and counts, element by element as boxes, what
each worker needs and does not have:

* an op's input piece on worker w: the elements of the piece's data that w does not hold (a replicated
  parameter is held by its owner only, tofu.search.owners, which the others read it from and send its
  gradient to, as the runtime does; a zeroed input, or one an expansion is passed but never reads, is not
  sent; of a loss op, only the first worker computing each piece reads, as MXNet runs no other copy);
* an op's output, turned into every worker's held box: the elements of the held box w did not produce itself,
  once per partial-sum class covering them (the reduction of partial outputs); a graph output that no op
  reads is handed out as computed, unless it is left in partial sums; in ``shared``, only to the holders
  MXNet reads from (:func:`live_calls`: a running op's own piece, else the nearest holder of each cell it
  reads, and a graph output's first holder of each box; the runtime converts to no other: dead code), and
  the inputs only of the calls MXNet runs (that make a piece some holder read takes, or that exchange
  statistics with one);
* the backward pass is the adjoint: the same elements again for every tensor that has a gradient (not a loss
  op's output: its backward ignores that gradient); in ``shared``, only for the elements computed by a call
  that reads something with a gradient through an input it differentiates (MXNet prunes the backward of a
  piece computed from data alone, such as the data half of Concat(data, f1)), followed region by region from
  the variables, and only when a gradient, not MXNet's zero, reaches the piece where it is read: some reader
  there gives it one (``gives_gradient``; an expansion as its symbol does, SoftmaxOutput's none to its label,
  read through ``one_hot``), for what reaches the reader's outputs (tensor by tensor, back from the graph
  outputs), or the runtime assembles the piece from several (a concat, a partial sum or a pad runs its
  backward on zeros);
* a statistics exchange over the n workers that differ only at its steps: 2 (n - 1) |S| per group when
  |S| >= n, n (n - 1) |S| otherwise (every device reads every partial), and as much for its gradient when
  the tensor it is computed from has one, the op is not a loss (a loss's backward is its own, local) and the
  expansion's symbol lets that statistic carry one (``statistics_gradients``: not a softmax's row maximum,
  computed under BlockGrad);
  S as the analysis sizes the statistic on the worker's piece; in ``shared``, only the groups with a running
  call (of a loss computed whole over later cuts, its first copies' group), and the gradient only where the
  group's pieces of that tensor carry one (the channels of Concat(data, conv) from data carry none);
* ``kept``: the forward part of the input receipts of ops that keep their inputs for the backward pass
  (the remote regions a device holds until then); ``kept_per_device``: the same per device, each remote cell
  once (the runtime's one copy, read by every op there); ``replicas_per_device``: what the runtime's parameter
  replicas (a remote cell that is all of another device's parameter shard) hold beyond that: the weight when
  not kept already, and when its gradient is sent back that gradient on the reader, and on the owner one buffer
  of the shard's size receiving them;
* a constant (computed from nothing the model is fed, learns, keeps or draws, :func:`constants`) is computed
  by every device that reads it: never sent.

Two totals: ``per_consumer`` (every consumer op fetches its own pieces, as the cost model charges, but for the
ops of one fetch group, :func:`fetch_groups`, which fetch a piece they all read once) and ``shared`` (what the
runtime sends: each cell of a piece that the holders' boxes cut it into, once per device, shared by all its
consumers there).

What it shares with the cost model, and why that is safe: the per-worker kernel calls and the statistic sizes
(``tofu.analysis``: the analysis the search consumes, checked on its own against MXNet's kernels and a
reference interpreter in tests/analysis/), which ops keep their inputs for the backward pass
(``tofu.graph.memory.rule_for``, used only for ``kept``), MXNet's gradient rule (``tofu.sim.program``:
which ops give a zero, which pass one on, what an expansion differentiates; checked against MXNet's own
gradient pass in tests/search/test_softmax_class_split_bytes.py), and the convention of which consumers fetch
together (:func:`fetch_groups`: the grouping the paper's coarsening defines, written here again from the graph's
layer and step labels, not taken from ``tofu.search.coarsen``).
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import numpy as np

from tofu.analysis.compose import compose
from tofu.analysis.views import NodeView
from tofu.graph.ir import LOSS_OPS, Graph, Role
from tofu.graph.memory import rule_for
from tofu.graph.gradients import expansion_gradients, gives_gradient, statistics_gradients
from tofu.search.owners import parameter_pieces

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Count:
    per_consumer: float           # bytes, forward + backward
    shared: float
    by_tensor: tuple[tuple[str, float], ...]   # per tensor name (op:NAME for its statistics): per-consumer bytes
    by_edge: tuple[tuple[tuple[str, str], float], ...] = ()   # per (node, tensor): what the node reads or makes
    kept: float = 0.0             # forward bytes received for the inputs of ops that keep them for backward
    largest_buffer: int = 0       # worker 0's largest partial-sum or unconverted output piece, bytes
    kept_per_device: tuple[float, ...] = ()   # per device: forward bytes of the remote cells it receives for ops
    #                                           that keep their inputs, each cell once (one copy, read by all)
    replicas_per_device: tuple[float, ...] = ()  # per device: what the runtime's parameter replicas hold beyond


def _size(box: Box) -> int:
    return math.prod(max(0, b - a) for a, b in box)


def _meet(a: Box, b: Box) -> Box:
    return tuple((max(x, u), min(y, v)) for (x, y), (u, v) in zip(a, b))


def _cells(box: Box, holders) -> list[Box]:
    """``box`` cut along the edges of the holders' boxes that fall inside it."""
    if not _size(box):
        return []
    cuts = []
    for d, (lo, hi) in enumerate(box):
        edges = sorted({lo, hi} | {e for h in holders if _size(_meet(h, box)) for e in h[d] if lo < e < hi})
        cuts.append(list(zip(edges, edges[1:])))
    return list(itertools.product(*cuts))


def _union_size(boxes) -> int:
    """Elements in the union of half-open boxes: their sum when disjoint, else by cells between their edges."""
    boxes = [b for b in boxes if _size(b)]
    if all(not _size(_meet(a, b)) for i, a in enumerate(boxes) for b in boxes[i + 1:]):
        return sum(_size(b) for b in boxes)
    edges = [sorted({x for b in boxes for x in b[d]}) for d in range(len(boxes[0]))]
    total = 0
    for cell in itertools.product(*(list(zip(e, e[1:])) for e in edges)):
        if any(all(lo <= a and c <= hi for (a, c), (lo, hi) in zip(cell, b)) for b in boxes):
            total += _size(cell)
    return total


def _coords(w: int, factors) -> list[int]:
    out = []
    for f in reversed(factors):
        out.append(w % f)
        w //= f
    return out[::-1]


def _held(shape, dims, factors, w) -> Box:
    box = [(0, n) for n in shape]
    for d, f, c in zip(dims, factors, _coords(w, factors)):
        if d is not None:
            lo, hi = box[d]
            n = (hi - lo) // f
            box[d] = (lo + c * n, lo + (c + 1) * n)
    return tuple(box)


_STEP = re.compile(r"_t\d+(?=_|$)")


def fetch_groups(graph: Graph) -> dict[int, tuple]:
    """Per node id, the group whose members fetch a piece they all read once per worker (PAPER.md, "Search",
    coarsening): the unrolled timesteps of one RNN layer at one position (the node's layer, its name but for
    the ``_tN`` step, its operator, attributes and shapes equal: every step reads the layer's weights), and
    projections of one activation (the same operator, attributes and shapes reading the same tensor at the same
    position, every other input a parameter: attention's q, k and v). Every other node is a group of its own."""
    groups = {}
    for node in graph.nodes:
        signature = (node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
                     tuple(graph.tensors[t].shape for t in node.outputs))
        others = [(p, t) for p, t in enumerate(node.inputs) if graph.tensors[t].role is not Role.PARAM]
        if node.step is not None:
            groups[node.id] = ("steps", node.layer, _STEP.sub("", node.name), signature)
        elif len(node.inputs) > 1 and len(others) == 1:
            groups[node.id] = ("projections", others[0], signature)
        else:
            groups[node.id] = ("node", node.id)
    return groups


def constants(graph: Graph) -> set[int]:
    """Tensors computed from nothing the model is fed, learns, keeps as state or draws at random (an ``arange``,
    a ``zeros`` and what ops compute from those alone: a causal mask, an RNN's zero begin state), but a graph
    output: every device that reads one computes what it reads, so none of it is sent."""
    random = ("Dropout", "_random_", "_sample_", "random_", "sample_")
    found: set[int] = set()
    for node in graph.nodes:
        if (all(t in found for t in node.inputs) and node.op not in LOSS_OPS and not node.op.startswith(random)
                and not set(node.outputs) & set(graph.heads)):
            found.update(node.outputs)
    return found


def plan_tables(graph: Graph, plan) -> tuple[tuple[int, ...], int, dict, dict]:
    """The plan read as the counts use it: the cuts' factors, the workers, every tensor's split dimension at
    each cut (by tensor id) and every op's choice at each cut (by node id)."""
    factors = tuple(s.factor for s in plan.steps)
    step_dims = [dict(s.tensor_dims) for s in plan.steps]
    step_choices = [dict(s.op_choices) for s in plan.steps]
    dims = {t.id: tuple(d[t.name] for d in step_dims) for t in graph.tensors}
    choices = {n.id: tuple(c[n.name] for c in step_choices) for n in graph.nodes}
    return factors, math.prod(factors), dims, choices


def holder_boxes(graph: Graph, factors: tuple[int, ...], dims: dict) -> dict[int, dict[int, Box]]:
    """Per tensor id, the box each holding worker holds: every worker its own, but a parameter once per distinct
    box, on its owner (tofu.search.owners: the runtime's variables; the others read it from there)."""
    k = math.prod(factors)
    owners = parameter_pieces(graph, factors, dims)
    return {tensor.id: dict(owners[tensor.id]) if tensor.role is Role.PARAM else
            {w: _held(tensor.shape, dims[tensor.id], factors, w) for w in range(k)} for tensor in graph.tensors}


def count(graph: Graph, plan) -> Count:
    factors, k, dims, choices = plan_tables(graph, plan)
    grads = graph.with_gradient
    item = {t.id: np.dtype(t.dtype).itemsize for t in graph.tensors}
    read = {t for n in graph.nodes for t in n.inputs}
    consumed = read | set(graph.heads)
    const = constants(graph)
    kept_device = [0.0] * k
    kept_cells: set = set()
    replica_cells: dict = {}        # a remote cell that is all of a parameter shard: its owner
    # per tensor, the boxes computed and whether each depends on a variable with a gradient
    computed: dict[int, list[tuple[Box, bool]]] = {
        t.id: [(tuple((0, d) for d in t.shape), t.id in grads)] for t in graph.tensors if t.producer is None}

    def carries(t, region: Box) -> bool:
        return t in grads and any(c for b, c in computed.get(t, ()) if _size(_meet(b, region)))

    held = holder_boxes(graph, factors, dims)
    runs = {node.id: _running(graph, node, choices[node.id], factors, const) for node in graph.nodes}
    live, needed = live_calls(graph, runs, held, dims, factors, const, read)
    reached, arriving = _reached(graph, runs, live, held, dims, factors, const, consumed, needed)
    tied = fetch_groups(graph)              # ops that fetch a piece they all read once (per worker)
    per_tensor: dict[str, float] = {}
    per_edge: dict[tuple, float] = {}
    shared_total = kept_total = 0.0
    largest = 0
    sent: set = set()

    def charge(t, elements, key=None, label=None, group=None, node=None, keeps=False, cells=None, back=None,
               grad=None, runs=True):
        """``cells``: the remote cells of an input piece, each sent once per device (``shared``), and back when
        their region carries a gradient and some reader there gives them one (``back``, default: it does);
        without cells, ``back``: whether ``shared`` counts the backward pass (default: the tensor has a
        gradient); ``grad``: whether both totals do (default: the tensor has a gradient); ``runs``: whether
        MXNet runs what moves it (else ``per_consumer`` alone counts it: a holder no running op reads from)."""
        nonlocal shared_total, kept_total
        b = elements * item[t] * (1 + ((t in grads) if grad is None else grad))
        label = label or graph.tensors[t].name
        if key is None or (group, key) not in sent:
            per_tensor[label] = per_tensor.get(label, 0.0) + b
            edge = (node, label)
            per_edge[edge] = per_edge.get(edge, 0.0) + b
            if keeps:
                kept_total += elements * item[t]
            if key is not None:
                sent.add((group, key))
        if cells is not None and runs:
            for cell in cells:
                if graph.tensors[t].role is Role.PARAM:         # all of another device's shard: a replica
                    whole = [u for u, b in held[t].items() if b == cell[2] and u != cell[1]]
                    if whole:
                        replica_cells[cell] = whole[0]
                if keeps and cell not in kept_cells:
                    kept_cells.add(cell)
                    kept_device[cell[1]] += _size(cell[2]) * item[t]
                if cell not in sent:
                    sent.add(cell)
                    shared_total += _size(cell[2]) * item[t]
                if back is not False and carries(t, cell[2]) and ("back", cell) not in sent:
                    sent.add(("back", cell))
                    shared_total += _size(cell[2]) * item[t]
        elif runs and (key is None or key not in sent):
            shared_total += b if back is None else elements * item[t] * (1 + back)
            if key is not None:
                sent.add(key)

    for node in graph.nodes:
        view = NodeView.of(graph, node)
        calls, running = runs[node.id]
        arrives = node.id in arriving
        for call in running:
            w = call.worker
            runs_here = call.worker in live[node.id]
            reads_gradient = any(carries(node.inputs[p.input], p.data) for q, p in enumerate(call.inputs)
                                 if not p.zeroed and p.read and _size(p.data) and _gives(node.op, call, q, True))
            for o, t in enumerate(node.outputs):
                computed.setdefault(t, []).append((call.outputs[o].box, reads_gradient))
            for q, piece in enumerate(call.inputs):
                t = node.inputs[piece.input]
                if piece.zeroed or not piece.read or graph.tensors[t].role is Role.AUX or t in const:
                    continue        # zeros, an input an expansion ignores (MXNet drops it), state, or a
                    #                 constant the device computes itself
                own = held[t].get(w)
                local = _size(_meet(piece.data, own)) if own is not None else 0
                # the runtime cuts the piece into the cells its holders' boxes make and sends each remote
                # cell once to w, however many ops there read it
                cells = [(t, w, c) for c in _cells(piece.data, held[t].values())
                         if own is None or _size(_meet(c, own)) < _size(c)]
                gives = _gives(node.op, call, q, arrives) or _assembled(piece.data, piece.box, held[t], w)
                charge(t, _size(piece.data) - local, (t, w, piece.data), group=tied[node.id], node=node.name,
                       keeps=rule_for(node).keeps_inputs, cells=cells, back=gives, runs=runs_here)
        if calls[0].exchange_steps:      # statistics exchanged (a reduction split the expansion runs: none)
            _exchange(node, view, calls, factors, choices[node.id], charge,
                      [c for c in calls if c.worker in live[node.id]], carries)
        for o, t in enumerate(node.outputs):        # worker 0's largest partial or unconverted output piece
            piece = calls[0].outputs[o]
            if piece.partial or piece.box != _held(graph.tensors[t].shape, dims[t], factors, 0):
                largest = max(largest, _size(piece.box) * item[t])
        for o, t in enumerate(node.outputs):
            if t not in consumed or t in const:
                continue
            produced = [(c.worker, c.outputs[o].box, tuple(_coords(c.worker, factors)[j] for j in c.outputs[o].partial))
                        for c in calls]
            if node.op in LOSS_OPS:                     # one copy of each piece (the runtime's _one_replica)
                produced = list({(b, key): (w, b, key) for w, b, key in reversed(produced)}.values())
            if t not in read and all(not key for _, _, key in produced):
                continue                                # a graph output no op reads is handed out as computed
            for w in range(k):
                want = _held(graph.tensors[t].shape, dims[t], factors, w)
                # back when it carries a gradient and one reaches the held piece, or the holder assembles it
                back = carries(t, tuple((0, d) for d in graph.tensors[t].shape)) and (
                    t in reached or _assembles(want, produced, w))
                classes: dict[tuple, set] = {}
                for _, b, key in produced:
                    classes.setdefault(key, set()).add(b)
                moved = 0
                for key, boxes in classes.items():
                    need = _union_size([_meet(want, b) for b in boxes])      # a cropping worker's whole piece
                    #                                                          overlaps the others' pieces
                    own = max((_size(_meet(want, b)) for u, b, c in produced if u == w and c == key), default=0)
                    moved += need - own
                # (``shared`` only to a holder whose piece MXNet reads: the runtime builds no other)
                charge(t, moved, node=node.name, back=back, runs=w in needed[t])
    # the runtime's replicas (tofu.runtime.replicas): the weight (unless kept already), and when it is sent back
    # its gradient on the reader and the one buffer its owner receives the gradients in
    replica_device = [0.0] * k
    receiving = {}
    for cell, owner in replica_cells.items():
        nbytes = _size(cell[2]) * item[cell[0]]
        back = ("back", cell) in sent
        replica_device[cell[1]] += (0.0 if cell in kept_cells else nbytes) + (nbytes if back else 0.0)
        if back:
            receiving[(cell[0], cell[2])] = (owner, nbytes)
    for owner, nbytes in receiving.values():
        replica_device[owner] += nbytes
    return Count(sum(per_tensor.values()), shared_total,
                 tuple(per_tensor.items()), tuple(per_edge.items()), kept_total, largest, tuple(kept_device),
                 tuple(replica_device))


def _running(graph: Graph, node, choices, factors, const: set[int]) -> tuple[list, list]:
    """The node's calls, and those that run: none of a constant (it runs where it is read), one per piece of a
    loss (MXNet runs no other copy), else all."""
    calls = compose(NodeView.of(graph, node), choices, factors)
    if set(node.outputs) & const:
        return calls, []
    if node.op not in LOSS_OPS:
        return calls, calls
    first: dict[tuple, object] = {}
    for c in calls:
        first.setdefault((c.outputs[0].box, tuple(_coords(c.worker, factors)[j] for j in c.outputs[0].partial)), c)
    return calls, list(first.values())


def _distance(u: int, w: int, factors) -> int:
    """The runtime's distance between two workers: 0 for one, else the cuts below the first that separates them."""
    if u == w:
        return 0
    cu, cw = _coords(u, factors), _coords(w, factors)
    return len(factors) - next(j for j, (a, b) in enumerate(zip(cu, cw)) if a != b)


def live_calls(graph: Graph, runs: dict, held: dict, dims: dict, factors, const: set[int],
               read: set[int]) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """What MXNet runs of the plan (only what the graph outputs need: dead code is never run), back from the
    graph outputs: per node id the workers whose call runs, and per tensor id the holders whose piece is read,
    so that the runtime converts the op's output to them. A running call reads its own piece when it holds the
    whole of what it reads, else each cell of it from the nearest holder (the fewest cuts apart, then the lowest
    worker: the rewriter's rule); a graph output is read from the first holder of each box (handed out as
    computed, when no op reads it and it is whole: the first call of each box). A call runs when it is one of
    those ``runs`` lets run (a loss: one per piece) and a holder read takes a cell of its output from it (its
    own output when it computes the whole holder's box, else the nearest of each partial-sum class), or it is in
    the statistics exchange of a running call (its partial statistic is read). So a loss run once per piece
    reads only some replicas of its input, and what computes the others does not run."""
    k = math.prod(factors)
    live: dict[int, set[int]] = {}
    needed: dict[int, set[int]] = {t.id: set() for t in graph.tensors}
    heads = set(graph.heads)
    for t in heads:
        first: dict[Box, int] = {}
        for w, b in held[t].items():
            first.setdefault(b, w)
        needed[t].update(first.values())
    for node in reversed(graph.nodes):
        calls, running = runs[node.id]
        allowed = {c.worker: c for c in running}
        taken: set[int] = set()
        for o, t in enumerate(node.outputs):
            produced = [(c.worker, c.outputs[o].box, tuple(_coords(c.worker, factors)[j] for j in c.outputs[o].partial))
                        for c in allowed.values()]
            if t in heads and t not in read and all(not key for _, _, key in produced):
                first: dict[Box, int] = {}
                for w, b, _ in produced:
                    first.setdefault(b, w)
                taken.update(first.values())        # handed out as computed
                continue
            for w in needed[t]:
                want = _held(graph.tensors[t].shape, dims[t], factors, w)
                if all(not key for _, _, key in produced) and any(
                        u == w and _size(_meet(b, want)) == _size(want) for u, b, _ in produced):
                    taken.add(w)
                    continue
                for cell in _cells(want, [b for _, b, _ in produced]):
                    nearest: dict[tuple, tuple[int, int]] = {}
                    for u, b, key in produced:
                        if _size(_meet(b, cell)) == _size(cell):
                            nearest[key] = min(nearest.get(key, (k + 1, u)), (_distance(u, w, factors), u))
                    taken.update(u for _, u in nearest.values())
        if calls and calls[0].expansion and calls[0].exchange_steps:
            steps = calls[0].exchange_steps
            groups = {tuple(c for j, c in enumerate(_coords(w, factors)) if j not in steps) for w in taken}
            taken |= {w for w in allowed
                      if tuple(c for j, c in enumerate(_coords(w, factors)) if j not in steps) in groups}
        live[node.id] = taken & set(allowed)
        for w in live[node.id]:
            call = allowed[w]
            for p in call.inputs:
                t = node.inputs[p.input]
                if (p.zeroed or not p.read or graph.tensors[t].role is Role.AUX or t in const
                        or not _size(p.data)):
                    continue
                own = held[t].get(w)
                if own is not None and _size(_meet(p.data, own)) == _size(p.data):
                    needed[t].add(w)
                    continue
                for cell in _cells(p.data, held[t].values()):
                    needed[t].add(min((_distance(u, w, factors), u) for u, b in held[t].items()
                                      if _size(_meet(b, cell)) == _size(cell))[1])
    return live, needed


def _gives(op: str, call, q: int, arrives: bool) -> bool:
    """Whether ``call`` gives its input ``q`` a gradient, ``arrives`` telling whether one reaches its outputs (else
    MXNet's zeros): its expansion's symbol says (on its pieces), else MXNet's rule for ``op``."""
    if not call.expansion:
        return gives_gradient(op, arrives, call.inputs[q].input, call.attrs)
    shapes = tuple(tuple(b - a for a, b in p.box) for p in call.inputs)
    return expansion_gradients(op, call.attrs, shapes, tuple(tuple(a for a, _ in p.box) for p in call.inputs),
                               arrives)[q]


def _assembled(data: Box, box: Box, holders: dict[int, Box], w: int) -> bool:
    """Whether the runtime assembles an input piece (``data`` of ``box``) on w from several cells, or pads it:
    a concat, whose backward runs on zeros too."""
    own = holders.get(w)
    if own is not None and _size(_meet(data, own)) == _size(data):
        return data != box
    return data != box or len(_cells(data, holders.values())) > 1


def _assembles(want: Box, produced: list, w: int) -> bool:
    """Whether the runtime assembles w's held box ``want`` of an op's output from several of its pieces
    (``produced``: worker, box, partial-sum class): a concat or a partial sum, whose backward runs on zeros."""
    if all(not key for _, _, key in produced) and any(
            u == w and _size(_meet(b, want)) == _size(want) for u, b, _ in produced):
        return False
    parts = [(b, key) for _, b, key in produced if _size(_meet(b, want))]
    return len({key for _, key in parts}) > 1 or len(_cells(want, [b for b, _ in parts])) > 1


def _reached(graph: Graph, runs: dict, live: dict, held: dict, dims: dict, factors, const: set[int],
             consumed: set[int], needed: dict[int, set[int]]) -> tuple[set[int], set[int]]:
    """The tensors a gradient reaches where they are read, not only MXNet's zeros (the graph outputs; then, back
    through the nodes, an input that a running call gives one, :func:`_gives`, or assembles from several
    cells); and the nodes one reaches: an output that one reaches, or whose pieces some holder MXNet reads
    (:func:`live_calls`) assembles (the concat or sum runs its backward on zeros)."""
    found, arriving = set(graph.heads), set()
    for node in reversed(graph.nodes):
        calls, running = runs[node.id]
        for o, t in enumerate(node.outputs):
            produced = [(c.worker, c.outputs[o].box, tuple(_coords(c.worker, factors)[j] for j in c.outputs[o].partial))
                        for c in calls]
            if t in found or (t in consumed and t not in const and any(
                    _assembles(_held(graph.tensors[t].shape, dims[t], factors, w), produced, w) for w in needed[t])):
                arriving.add(node.id)
        for call in running:
            if call.worker not in live[node.id]:
                continue
            for q, p in enumerate(call.inputs):
                t = node.inputs[p.input]
                if p.zeroed or not p.read or graph.tensors[t].role is Role.AUX or t in const:
                    continue
                if _gives(node.op, call, q, node.id in arriving) or _assembled(p.data, p.box, held[t], call.worker):
                    found.add(t)
    return found, arriving


def _exchange(node, view, calls, factors, choices, charge, running=None, carries=None):
    """The statistics all-reduce of an op run by its expansion: 2 (n - 1) |S| per group of the n workers that
    differ only at the exchange steps, |S| the statistic as the analysis sizes it on the group's pieces; as
    much backward when the input it is computed from has a gradient, unless the op is a loss (its backward
    ignores the gradient arriving at its output, so none reaches the statistics: SoftmaxOutput's is local).
    ``shared`` counts only the groups with a call in ``running`` (default: every call; of a loss computed whole
    over later cuts, its first copies' group: MXNet runs no other), and the gradient only of a group whose
    pieces of that input carry one (``carries(tensor, region)``, default: all do; MXNet prunes the backward of
    the channels of Concat(data, conv) that come from data)."""
    from tofu.analysis.strategies import strategies

    steps = calls[0].exchange_steps
    n = math.prod(factors[j] for j in steps)
    var = choices[steps[-1]].var

    def group(call) -> tuple:
        return tuple(c for j, c in enumerate(_coords(call.worker, factors)) if j not in steps)

    live = {group(call) for call in (calls if running is None else running)}
    carried = {group(c) for c in calls if carries is not None and any(
        carries(node.inputs[0], p.data) for p in c.inputs if p.input == 0 and not p.zeroed and p.read)}
    seen = set()
    for call in calls:
        key = group(call)
        if key in seen:
            continue
        seen.add(key)
        # the statistic of one worker's pieces (each member of the group holds one of that size)
        piece = NodeView(view.op, call.attrs, tuple(tuple(b - a for a, b in p.box) for p in call.inputs),
                         tuple(tuple(b - a for a, b in o.box) for o in call.outputs), (), ())
        found = [s for s in strategies(piece.describe(), 1) if s.var == var and s.exchanges]
        assert found, f"{node.name}: no exchange of '{var}' on the pieces"
        # its gradient flows back to the input it is computed from, and is exchanged when that has a gradient
        # a reduce-scatter and an all-gather when the statistic has n elements or more; else all to all
        moved = [2 * (n - 1) * e if e >= n else n * (n - 1) * e for e in found[0].exchange_elements]
        with_grad = statistics_gradients(view.op, call.attrs, piece.in_shapes)
        assert len(with_grad) == len(moved), f"{node.name}: {len(with_grad)} all-reduces for {len(moved)} statistics"
        both = sum(m for m, g in zip(moved, with_grad) if g)          # forward, and backward as the input has one
        once = sum(m for m, g in zip(moved, with_grad) if not g)      # forward only: the symbol stops its gradient
        if both:
            charge(node.inputs[0], both, label=f"op:{node.name}", grad=False if node.op in LOSS_OPS else None,
                   runs=key in live, back=None if carries is None else node.op not in LOSS_OPS and key in carried)
        if once:
            charge(node.inputs[0], once, label=f"op:{node.name}", grad=False, runs=key in live, back=False)

