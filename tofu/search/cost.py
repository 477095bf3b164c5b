r"""Cost model (PAPER.md, "Search"; DESIGN.md, decisions): bytes moved per training iteration by one cut.

Input: the graph, its coarsening, every tensor's shape at this step of the recursion, every worker group's
view of the ops and boxes of the tensors (one group, holding everything, at the first step), the cut's
width k. Output: a :class:`~tofu.search.problem.CutProblem` whose costs are summed over the groups.

In a group G, worker w holds H_w(t, d), the w-th of k equal slices along d of the box H_G(t) that G holds
(all of it when t is replicated). An op run with strategy s needs, on worker w, the region R_w(s, i) of
input i and produces P_w(s, o) of output o (tofu.analysis; in the whole tensor's coordinates, as the view
places its pieces). With |.| counting elements, x bytes per element, and g(t) = 1 when t has a gradient
(parameters and what is computed from them; not data, labels, auxiliary states nor what is computed from
those alone, as a reshaped label or an RNN's zero begin state), the cost charged to (s, d) is

    input i     sum_w |R_w(s, i) \ H_w(i, d)| - |R_G(i) \ H_G(i)|                             x (1 + g(i))
    parameter   sum_{w > 0} |R_w(s, i) & H_G(i)|    (replicated: read from the group's first worker)  x 2 g(i)
    output o    sum_w (m |H_w(o, d)| - |H_w(o, d) & P_w(s, o)|) - (n |H_G(o)| - |H_G(o) & P_G(o)|)  x (1 + g(o))
    exchange    2 (k - 1) |S|, |S| >= k; k (k - 1) |S|, |S| < k  (all-reduce of a partial statistic S)  x (1 + g(0) b)

The output term counts what every holder receives: its held box from each of the m partial-sum classes
(m = n k when s reduces o, n the classes earlier cuts left; each class's pieces cover the tensor) but the
part its own piece covers; a replicated holder receives it all (an all-gather; with partial sums, from
every class). The subtracted terms are what the same count gave the group before this cut, so that the
steps' costs add up to each worker's final pieces against its final held boxes, which is what the runtime
moves (tests/oracle.py counts it independently). Backward is the adjoint of forward: a fetched input region
becomes a reduced gradient region, a reduce-scatter of partial outputs an all-gather of the output
gradient, a conversion is converted back. Auxiliary states and zeroed inputs (a bias that a reduction split
counts on one worker) are never sent. b = 1 for a statistic the op's expansion lets carry a gradient
(BatchNorm's mean and variance, the softmax's row sum), 0 for one it stops (the softmax's row maximum, computed
under BlockGrad; SoftmaxOutput's, whose backward is local): traced on the expansion's symbol,
``tofu.graph.gradients.statistics_gradients``. A loss op computed whole runs on one worker (the runtime reads
one copy of each piece of a loss; MXNet runs no other), which alone reads its inputs; an output that no op reads is not
converted (a graph output is handed out as computed, unless left in partial sums), and a loss op's output has
no gradient. Tied ops (the timesteps of an RNN layer) that read the same tensor fetch it once per iteration,
as a worker keeps what it fetched; different ops reading the same piece are each charged, which keeps the
costs separable: the runtime sends it once per device, so the search minimises an upper bound there, and a
plan's reported bytes are counted as the runtime moves them (tofu.search.copies).

The costs depend on a strategy and one tensor's choice each, so they are separable (problem.py).
A constant (a tensor that depends on no input, parameter, state or random draw: a causal mask, an RNN's zero
begin state; tofu.search.constants) is computed by every device that reads it, the region it reads: reading
or converting one costs 0 bytes, whatever the split.

Strategies that cannot be run (by MXNet's kernel on the shards, or by the op's declared expansion when the
strategy exchanges statistics or is a reduction split it declares it runs, ``partials``) are excluded: the search finds them by checking what it chooses
(``recursive._solve_runnable``) and passes them as ``excluded``; when every strategy of an op is excluded,
each output split is computed whole on every worker (and stays whole at later cuts); an op with no output split
at all (no output dimension divides by k) is computed whole on every worker, each keeping the whole outputs.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tofu.analysis.strategies import PartialSum, PartitionStrategy, Region, Replicate, SplitDim
from tofu.analysis.strategies import signature_strategies as analysed_strategies
from tofu.analysis.views import NodeView, kernel_call, next_view, runnable  # noqa: F401 (re-exported)
from tofu.errors import SearchError, TofuError
from tofu.graph.gradients import gives_gradient, statistics_gradients
from tofu.graph.ir import LOSS_OPS, Graph, Node, Role
from tofu.graph.memory import rule_for
from tofu.search.coarsen import Coarsening
from tofu.search.constants import constant_tensors
from tofu.search.groups import _FLAT, Groups, ViewClass, _columns
from tofu.search.problem import CutProblem, OpGroup, TensorGroup
from tofu.tdl.describe import describe

Shape = tuple[int, ...]


@dataclass(frozen=True)
class CutIndex:
    """How a CutProblem maps back to the graph: the strategies of every op at this step."""

    node_strategies: tuple[tuple[PartitionStrategy, ...], ...]   # per node id (empty for merged ops)
    group_nodes: tuple[tuple[int, ...], ...]                     # per op group: its node ids
    # per node id, per view class of ``groups``: the same strategies as that class's shard instantiates them
    class_strategies: tuple[tuple[tuple[PartitionStrategy, ...], ...], ...] = ()
    # per op group, per tensor group: [strategy][choice] forward bytes received and kept for the backward pass
    kept: tuple[dict[int, list[list[float]]], ...] = ()
    groups: Groups | None = None        # the worker groups, their classes as ``class_strategies`` numbers them

    def kept_bytes(self, x, y) -> float:
        """Bytes the cut's workers receive for their ops' inputs and keep until the backward pass."""
        return sum(table[y[g]][x[tg]] for g, tables in enumerate(self.kept) for tg, table in tables.items())

    @property
    def group_strategies(self) -> tuple[tuple[tuple[PartitionStrategy, ...], ...], ...]:
        """Per worker group, per node id: the strategies as that group's view instantiates them."""
        of = [self.groups.class_of(n) for n in range(len(self.class_strategies))]
        return tuple(tuple(per_class[of[n][g]] if per_class else ()
                           for n, per_class in enumerate(self.class_strategies)) for g in range(self.groups.count))



def allreduce_elements(size: int, n: int) -> int:
    """Elements the rewriter's all-reduce of an ``size``-element statistic over ``n`` devices sends
    (tofu.rewrite.comm.Fabric.allreduce): a reduce-scatter and an all-gather, 2 (n - 1) |S|, when the statistic
    has n elements or more; every device reading every partial, n (n - 1) |S|, when it has fewer."""
    return 2 * (n - 1) * size if size >= n else n * (n - 1) * size


def exchanged_gradients(op: str, attrs, shapes: Sequence[Shape], s: PartitionStrategy) -> tuple[bool, ...]:
    """Per statistic ``s`` exchanges (in its order), whether the backward pass all-reduces its gradient as well,
    from the expansion run on one worker's pieces of ``shapes`` (:func:`statistics_gradients`).

    Raises:
        SearchError: the expansion all-reduces another number of statistics than the description exchanges.
    """
    carries = statistics_gradients(op, attrs, tuple(tuple(x) for x in shapes))
    if len(carries) != len(s.exchange_elements):
        raise SearchError(f"{op}: its expansion all-reduces {len(carries)} statistics where its description "
                          f"exchanges {len(s.exchange_elements)}")
    return carries


def choices(shape: Shape, k: int) -> tuple[int | None, ...]:
    """Dimensions a tensor can be split k ways along (None alone: it must be replicated)."""
    dims = tuple(d for d, n in enumerate(shape) if n % k == 0 and n >= k)
    return dims or (None,)


Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class GroupView:
    """One worker group at a step of the recursion: every op as the group sees it (its shard, placed in the
    whole tensors) and the box of every tensor the group holds (half-open, in the whole tensor)."""

    views: tuple[NodeView, ...]      # per node id
    held: tuple[Box, ...]            # per tensor id

    @staticmethod
    def whole(graph: Graph) -> "GroupView":
        """The single group before the first cut: every op whole, every tensor held whole."""
        return GroupView(tuple(NodeView.of(graph, n) for n in graph.nodes),
                         tuple(tuple((0, n) for n in t.shape) for t in graph.tensors))


def build_cut(graph: Graph, coarse: Coarsening, shapes: Sequence[Shape],
              views: Sequence[NodeView] | Sequence[GroupView] | Groups, k: int, runnable_only: bool = True,
              excluded: frozenset = frozenset(), whole_params: bool = False) -> tuple[CutProblem, CutIndex]:
    """The one-cut problem of ``graph`` for ``k`` workers inside every worker group: tensors held at
    ``shapes`` (by every group, each its own box), ops seen as ``views`` (one group's, or every group's
    :class:`GroupView` one by one, or all of them as :class:`~tofu.search.groups.Groups`). A cost is the sum
    over the groups: they make the same choices but, at a later step, differ in where their pieces lie against
    what they hold.

    ``excluded`` holds the :func:`strategy_key` of strategies found not runnable (see ``recursive.search``:
    runnability is checked on the strategies a solution chooses, and the cut solved again without the ones
    that fail, which gives the optimum over runnable strategies at a fraction of the checks). A strategy
    some group cannot use is not offered.

    ``whole_params``: every tensor group holding a trained parameter (one with a gradient; not a label read as
    a parameter) may also be replicated (held whole by each group's first worker, the others reading it there
    and sending their gradient parts back: MXNet's kvstore), the choice None offered after its dimensions (the
    data-parallel baseline takes it).

    Raises:
        SearchError: some op cannot be split k ways at these shapes (no strategy applies).
    """
    groups = _as_groups(graph, shapes, views)
    members: dict[int, list[int]] = {}
    for t in graph.tensors:
        members.setdefault(coarse.tensor_group[t.id], []).append(t.id)
    tgroups = []
    for gid in range(coarse.n_tensor_groups):
        ids = members[gid]
        shape = tuple(shapes[ids[0]])
        dims = choices(shape, k)
        if whole_params and None not in dims and any(_trained(graph, t) for t in ids):
            dims += (None,)
        tgroups.append(TensorGroup(gid, graph.tensors[ids[0]].name, dims,
                                   sum(_nbytes(graph, t, shapes) for t in ids),
                                   tuple(graph.tensors[t].name for t in ids), shape))
    group_nodes: dict[int, list[int]] = {}
    for node in graph.nodes:
        if coarse.op_group[node.id] >= 0:
            group_nodes.setdefault(coarse.op_group[node.id], []).append(node.id)
    order = sorted(group_nodes, key=lambda g: group_nodes[g][0])
    node_strategies: list[tuple[PartitionStrategy, ...]] = [()] * len(graph.nodes)
    by_class: list[tuple[tuple[PartitionStrategy, ...], ...]] = [()] * len(graph.nodes)
    refined = list(groups.classes)
    ops = []
    tensor_group = coarse.tensor_group
    kept_tables = []
    for new_id, g in enumerate(order):
        nodes = group_nodes[g]
        const: list[float] | None = None
        terms: dict[int, Sequence[float]] = {}      # per tensor group its flat table (_add)
        kept: dict[int, Sequence[float]] = {}     # forward bytes received that the op keeps for backward
        read_once: set[tuple[int, int]] = set()
        # per (tensor group, signature, touched tensor, its part of a class's row, ...): how many groups
        parts: dict[tuple, list] = {}
        names = kinds = produces = None
        for nid in nodes:
            node = graph.nodes[nid]
            # a group that does not run the op (idle) costs nothing; its class is split from the others'
            idle = _idle_groups(node, groups)
            if idle:
                refined[nid] = _split_idle(refined[nid], idle)
            # groups whose pieces lie alike against what they hold (a class's distinct rows) cost alike: each is
            # counted once, times its multiplicity, its first group representing it; a group that does not run
            # the op (idle) costs nothing
            active = [(ci, c) for ci, c in enumerate(refined[nid]) if not (idle and int(c.members[0]) in idle)]
            infos = {ci: _class_costs(graph, node, c.shard, k, runnable_only, excluded) for ci, c in active}
            reps: dict[tuple, list] = {}
            for ci, c in active:
                static = infos[ci].key.static
                for row, (first, count) in _distinct_rows(c, infos[ci], groups).items():
                    entry = reps.get((static, row))
                    if entry is None:
                        reps[(static, row)] = [first, count, ci, row]
                    else:
                        entry[1] += count
                        if first < entry[0]:
                            entry[0], entry[2] = first, ci
            reps = sorted(reps.values(), key=lambda e: e[0])
            first_class = infos[reps[0][2]]
            strategies = {ci: info.strategies for ci, info in infos.items()}
            if all(v == first_class.strategies for v in strategies.values()):     # the common case
                picks = {ci: range(len(info.strategies)) for ci, info in infos.items()}
                chosen = first_class.strategies
            else:
                # a group whose kernel computed the op whole (a cropping shard) offers the same splits computed
                # whole ("i*"): it already holds what the others split, so they align by split variable
                keys = {ci: {_aligned_key(x): j for j, x in enumerate(v)} for ci, v in strategies.items()}
                chosen = tuple(x for x in first_class.strategies if all(_aligned_key(x) in m for m in keys.values()))
                picks = {ci: [m[_aligned_key(x)] for x in chosen] for ci, m in keys.items()}
            if not chosen:
                raise SearchError(f"node '{node.name}' ({node.op}): no strategy fits every worker group")
            node_strategies[nid] = chosen
            by_class[nid] = tuple(tuple(strategies[ci][j] for j in picks[ci]) if ci in picks else chosen
                                  for ci in range(len(refined[nid])))
            if const is None:
                const = [0.0] * len(chosen)
                names = tuple(x.var for x in chosen)
                kinds = tuple(x.kind for x in chosen)
                produces = tuple(tuple((tensor_group[t], p.dim if isinstance(p, SplitDim) else None)
                                       for t, p in zip(node.outputs, x.outputs)) for x in chosen)
            elif tuple(x.var for x in chosen) != names:
                raise SearchError(f"tied ops of group '{graph.nodes[nodes[0]].name}' differ in strategies")
            keeps = rule_for(node).keeps_inputs
            under = {ci: tuple(infos[ci].picked[j] for j in picked) for ci, picked in picks.items()}
            for gi, mult, ci, row in reps:
                info = infos[ci]
                for s, j in enumerate(picks[ci]):
                    const[s] += info.const[j] * mult
                for p, (t, at, end) in enumerate(info.parts):
                    if p < info.n_inputs:
                        if (t, gi) in read_once:
                            continue    # a tied op reads the same tensor (an RNN weight): fetched once
                        read_once.add((t, gi))
                    # the same tensor group's part costed alike: by its signature, role and held box
                    key = (tensor_group[t], info.sig_id, p, row[at:end], groups.shapes[t], info.key.roles[p],
                           info.grads[p], info.items[p], under[ci], keeps and p < info.n_inputs)
                    entry = parts.get(key)
                    if entry is None:
                        parts[key] = [mult, info]
                    else:
                        entry[0] += mult
        for (tg, *cost_key, keep), (mult, info) in parts.items():
            flat = _projected(info, tuple(cost_key), tgroups[tg].choices)
            _add(terms, tg, flat[0], mult)
            if keep:
                _add(kept, tg, flat[1], mult)
        ops.append(OpGroup(new_id, graph.nodes[nodes[0]].name, names, kinds, tuple(float(c) for c in const),
                           tuple([(t, _rows(flat, len(tgroups[t].choices))) for t, flat in terms.items()]),
                           produces, nodes[0]))
        kept_tables.append({t: _rows(flat, len(tgroups[t].choices)) for t, flat in kept.items()})
    problem = CutProblem(k, tuple(tgroups), tuple(ops))
    groups = dataclasses.replace(groups, classes=tuple(refined))
    return problem, CutIndex(tuple(node_strategies), tuple(tuple(group_nodes[g]) for g in order),
                             tuple(by_class), tuple(kept_tables), groups)


def _trained(graph: Graph, t: int) -> bool:
    """Whether tensor t is a parameter that some op reading it gives a gradient: not a label read as one (a loss
    op's inputs after its first get none)."""
    return graph.tensors[t].role is Role.PARAM and any(
        gives_gradient(graph.nodes[n].op, True, p, graph.nodes[n].attrs) and not (p and graph.nodes[n].op in LOSS_OPS)
        for n in graph.consumers(t) for p, i in enumerate(graph.nodes[n].inputs) if i == t)


def _idle_groups(node: Node, groups: Groups) -> set[int]:
    """The groups that do not run ``node``: a loss op computed whole at an earlier cut by several groups (the
    same piece) runs in the first of them only, as the runtime reads one copy of each piece of a loss (another
    would inject its gradient again) and MXNet does not run what no output needs."""
    if node.op not in LOSS_OPS or groups.count == 1:
        return set()
    pieces = []
    for c in groups.classes[node.id]:
        view = c.shard
        if not view.done or any(view.classes(o) > 1 for o in range(len(view.outputs))):
            continue
        for row, g in enumerate(c.members.tolist()):
            pieces.append((g, (c.view(row).out_origins_or_zero(), view.out_shapes)))
    idle, seen = set(), set()
    for g, piece in sorted(pieces, key=lambda p: p[0]):
        if piece in seen:
            idle.add(g)
        seen.add(piece)
    return idle


def _split_idle(classes: Sequence[ViewClass], idle: set[int]) -> tuple[ViewClass, ...]:
    """``classes`` with each one's idle members apart from the others (their strategies differ)."""
    out = []
    for c in classes:
        mask = np.isin(c.members, sorted(idle))
        out.extend([c] if mask.all() or not mask.any() else [c.subset(~mask), c.subset(mask)])
    return tuple(out)


def _aligned_key(s: PartitionStrategy) -> tuple[str, str]:
    return s.var.rstrip("*"), s.kind


def _add(tables: dict, tg: int, flat: tuple[float, ...], mult: int) -> None:
    """Adds ``mult`` times ``flat`` (a cost per option and choice of tensor group ``tg``, option by option) to its
    table, kept flat until :func:`_rows`."""
    table = tables.get(tg)
    if table is None:
        tables[tg] = flat if mult == 1 else [v * mult for v in flat]
    elif mult == 1:
        tables[tg] = [a + b for a, b in zip(table, flat)]
    else:
        tables[tg] = [a + b * mult for a, b in zip(table, flat)]


def _rows(flat, n: int) -> tuple[tuple[float, ...], ...]:
    """A flat table (:func:`_add`) as its rows of ``n`` choices."""
    return tuple([tuple(flat[at:at + n]) for at in range(0, len(flat), n)])


# a part's costs laid out per picked strategy and per choice of its tensor group, by its parts key in build_cut
_PROJECTED: dict[tuple, tuple] = {}


def _projected(info: _ClassCosts, cost_key: tuple, dims: tuple) -> tuple:
    """A touched tensor's costs, per picked strategy (``cost_key[-1]``) and per choice in ``dims``, flat (option by
    option): what it adds to its tensor group's table, and (an input) the forward bytes received. ``cost_key`` is
    build_cut's parts key without the tensor group: (signature id, part, row, held shape, role, g, item, picked),
    which fixes the costs (the signature id fixes the signature and whether it is computed whole)."""
    memo = (*cost_key, dims)
    hit = _PROJECTED.get(memo)
    if hit is None:
        _, p, part, shape, *_, picked = cost_key
        costs = _part_costs(info, p, part, shape)
        if p < info.n_inputs:
            hit = (tuple([float(costs[j][0][d]) for j in picked for d in dims]),
                   tuple([float(costs[j][1][d]) for j in picked for d in dims]))
        else:
            hit = (tuple([float(costs[j][d]) for j in picked for d in dims]), ())
        if len(_PROJECTED) > 200_000:
            _PROJECTED.clear()
        _PROJECTED[memo] = hit
    return hit


def _as_groups(graph: Graph, shapes: Sequence[Shape], views) -> Groups:
    """``views`` as worker groups: a plain list of views is one group holding ``shapes`` from the origin."""
    if isinstance(views, Groups):
        return views
    if views and isinstance(views[0], GroupView):
        return Groups.of_views(graph, shapes, [g.views for g in views], [g.held for g in views])
    return Groups.of_views(graph, shapes, [tuple(views)], [tuple(tuple((0, n) for n in shape) for shape in shapes)])


def _nbytes(graph: Graph, t: int, shapes: Sequence[Shape]) -> int:
    return math.prod(shapes[t]) * np.dtype(graph.tensors[t].dtype).itemsize


@dataclass(frozen=True)
class Option:
    """One strategy of one op with its costs: a constant, and per touched tensor a cost per dimension
    (index ndim: replicated)."""

    strategy: PartitionStrategy
    const: float
    terms: tuple[tuple[int, dict], ...]
    fetched: tuple[tuple[int, dict], ...] = ()    # per input tensor: forward bytes received, per dimension


def strategy_key(view: NodeView, s: PartitionStrategy) -> tuple:
    return (view.op, view.attrs, view.in_shapes, view.out_shapes, s.k, s.var, s.kind)


_EXCLUDED: dict[int, tuple[frozenset, dict]] = {}


def _excluded_index(excluded: frozenset) -> dict:
    """``excluded``'s keys grouped by view (op, attributes, shapes): one lookup per node, not per strategy."""
    hit = _EXCLUDED.get(id(excluded))
    if hit is None or hit[0] is not excluded:
        index: dict = {}
        for key in excluded:
            index.setdefault(key[:4], set()).add(key[4:])
        if len(_EXCLUDED) > 64:
            _EXCLUDED.clear()
        hit = _EXCLUDED[id(excluded)] = (excluded, index)
    return hit[1]


def node_options(graph: Graph, node: Node, view: NodeView, k: int, runnable_only: bool = True,
                 excluded: frozenset = frozenset(), held: Sequence[Box] | None = None) -> tuple[Option, ...]:
    """The strategies ``node`` (seen as ``view``) can use, with their costs; without the excluded ones, and
    when none is left, each output split computed whole on every worker (always runnable). ``held``: the
    box of every tensor (by id) that the group holds (default: the view's own pieces, as at the first step)."""
    info = _class_costs(graph, node, dataclasses.replace(view, in_origins=None, out_origins=None), k, runnable_only,
                        excluded)
    key = info.key
    origins = view.in_origins_or_zero() + view.out_origins_or_zero()
    if held is None:
        boxes = tuple(tuple((0, n) for n in shape) for shape in view.in_shapes + view.out_shapes)
    else:
        boxes = tuple([tuple([(lo - o, hi - o) for o, (lo, hi) in zip(origin, held[t])])
                       for t, origin in zip(key.ids, origins)])
    tensors = graph.tensors
    # the part of each input piece inside its tensor (the rest is a padded halo's fill)
    windows = tuple([tuple([(-o if o < 0 else 0, n if n <= full - o else full - o)
                            for o, n, full in zip(origin, shape, tensors[t].shape)])
                     for t, origin, shape in zip(view.inputs, origins, view.in_shapes)])
    n_in = info.n_inputs
    costs = [_input_costs(info.sig, info.whole, p, boxes[p], windows[p], key.roles[p], info.grads[p], info.items[p])
             if p < n_in else _output_costs(info.sig, info.whole, p - n_in, boxes[p], key.classes[p - n_in], info.done,
                                            info.grads[p], info.items[p], key.roles[p])
             for p in range(len(key.ids))]
    return tuple(Option(s, const, tuple((t, c[j][0] if p < n_in else c[j]) for p, (t, c) in enumerate(zip(key.ids,
                                                                                                       costs))),
                        tuple((t, c[j][1]) for t, c in zip(key.ids[:n_in], costs)))
                 for j, s, const in zip(info.picked, info.strategies, info.const))


@dataclass(frozen=True)
class _ShardKey:
    """What the costs need of a shard beyond its members' places: the tensors it touches, the interned number of
    everything else they depend on, the roles and partial-sum classes; per dimension of its touched tensors in
    order, the column of the held starts (Groups.starts); per input dimension, the shard's extent and the whole
    tensor's."""

    ids: tuple[int, ...]
    static: int
    roles: tuple[int, ...]
    classes: tuple[int, ...]
    columns: list[int]
    ranks: tuple[int, ...]
    extents: list[int]       # per input dimension: the shard's extent
    fulls: list[int]         # per input dimension: the whole tensor's


def _shard_key(graph: Graph, shard: NodeView) -> _ShardKey:
    """:class:`_ShardKey` of a shard (its origins None), cached per shard object."""
    hit = _VIEW_KEYS.get(id(shard))
    if hit is not None and hit[0] is shard and hit[1] is graph:
        return hit[2]
    ids = shard.inputs + shard.outputs
    info = _tensor_info(graph)
    roles = tuple([info.roles[t] for t in ids])
    if shard.in_zeroed is not None:      # a zeroed input is not read: it costs nothing, as state
        roles = tuple([_AUX if z else r for r, z in zip(roles, shard.in_zeroed)]) + roles[len(shard.inputs):]
    classes = shard.out_classes or (1,) * len(shard.outputs)
    content = (id(graph), shard.attrs, shard.op, shard.in_shapes, shard.out_shapes, ids, roles, classes, shard.done)
    tensors = graph.tensors
    value = _ShardKey(ids, _INTERNED.setdefault(content, len(_INTERNED)), roles, classes,
                      [info.columns[t] + d for t in ids for d in range(len(tensors[t].shape))],
                      tuple(len(tensors[t].shape) for t in ids),
                      [n for shape in shard.in_shapes for n in shape],
                      [n for t in shard.inputs for n in tensors[t].shape])
    if len(_VIEW_KEYS) > 400_000:
        _VIEW_KEYS.clear()
    _VIEW_KEYS[id(shard)] = (shard, graph, value)
    return value


@dataclass(frozen=True, eq=False)
class _ClassCosts:
    """What build_cut needs of a view class's shard at a cut: its strategies (without the excluded ones;
    ``picked`` are their numbers in the signature's list, ``whole``: that of its output splits computed whole),
    their constant costs, and how a class's row of integers splits into its touched tensors' parts (``parts``:
    per touched tensor, its id and columns [at, end) of the row, laid out by ``order``)."""

    key: _ShardKey
    sig: tuple
    whole: bool
    picked: tuple[int, ...]
    strategies: tuple[PartitionStrategy, ...]
    const: tuple[float, ...]
    grads: tuple[bool, ...]
    items: tuple[int, ...]
    parts: tuple[tuple[int, int, int], ...]
    order: np.ndarray
    done: bool
    n_inputs: int
    sig_id: int          # the signature and ``whole``, interned (with the shard's classes and done)


_CLASS_COSTS: dict[tuple, tuple] = {}


def _class_costs(graph: Graph, node: Node, shard: NodeView, k: int, runnable_only: bool,
                 excluded: frozenset) -> _ClassCosts:
    """:class:`_ClassCosts` of ``shard`` (memoized per shard object): the strategies node_options offers."""
    memo = (id(shard), k, runnable_only, id(excluded))
    hit = _CLASS_COSTS.get(memo)
    if hit is not None and hit[0] is shard and hit[1] is graph and hit[2] is excluded:
        return hit[3]
    key = _shard_key(graph, shard)
    sig = (shard.op, shard.attrs, shard.in_shapes, shard.out_shapes, k)
    grads, items = tuple(_grads(graph, key.ids)), tuple(_items(graph, key.ids))
    try:
        found, wholes = _strategies(*sig)
        # computed whole at an earlier cut: it stays whole
        (whole, primary), fallback = ((True, wholes), None) if shard.done and wholes else ((False, found), wholes)
        bad = _excluded_index(excluded).get(sig[:4]) if runnable_only and excluded else None
        picked = tuple(j for j, x in enumerate(primary) if not (bad and (x.k, x.var, x.kind) in bad))
        if not picked and fallback:
            whole, primary, picked = True, fallback, tuple(range(len(fallback)))
        const = []
        for j in picked:
            # the all-reduce of each partial statistic, and of its gradient when the input it is computed from has
            # one and the expansion lets the statistic carry it
            x = primary[j]
            carries = _carries(sig, x) if grads[0] and x.exchanges else (False,) * len(x.exchange_elements)
            const.append(sum(allreduce_elements(n, k) * items[0] * (1 + g)
                             for n, g in zip(x.exchange_elements, carries)))
    except TofuError as e:
        raise SearchError(f"node '{node.name}' ({node.op}): {e}") from None
    if not picked:
        raise SearchError(f"node '{node.name}' ({node.op}) cannot be split {k} ways at input shapes "
                          f"{list(shard.in_shapes)}: no dimension or strategy divides evenly")
    spans, order = _layout(key.ranks, len(shard.in_shapes))
    value = _ClassCosts(key, sig, whole, picked, tuple(primary[j] for j in picked), tuple(const), grads, items,
                        tuple((t, at, end) for t, (at, end) in zip(key.ids, spans)), order, shard.done,
                        len(shard.in_shapes),
                        _INTERNED.setdefault((sig, whole, key.classes, shard.done), len(_INTERNED)))
    if len(_CLASS_COSTS) > 200_000:
        _CLASS_COSTS.clear()
    _CLASS_COSTS[memo] = (shard, graph, excluded, value)
    return value


@lru_cache(maxsize=4096)
def _layout(ranks: tuple[int, ...], n_in: int) -> tuple[tuple[tuple[int, int], ...], np.ndarray]:
    """A class's row: every touched tensor's held starts against the piece, then every input's window starts
    and ends; laid out per touched tensor (an input's starts followed by its window's starts and ends): its
    columns [at, end) there, and the order that lays it out."""
    starts = list(itertools.accumulate(ranks, initial=0))
    lows = list(itertools.accumulate(ranks[:n_in], initial=starts[-1]))
    highs = list(itertools.accumulate(ranks[:n_in], initial=lows[-1]))
    order, spans = [], []
    for p, rank in enumerate(ranks):
        at = len(order)
        order.extend(range(starts[p], starts[p] + rank))
        if p < n_in:
            order.extend(range(lows[p], lows[p] + rank))
            order.extend(range(highs[p], highs[p] + rank))
        spans.append((at, len(order)))
    return tuple(spans), np.array(order, dtype=np.int64)


def _distinct_rows(c: ViewClass, info: _ClassCosts, groups: Groups) -> dict[tuple, list[int]]:
    """Class ``c``'s members by their row (each touched tensor's held box against its piece, and each input
    piece's part inside its tensor, as ``info.order`` lays it out): per distinct row its first group and how
    many members have it."""
    key = info.key
    members = c.members.tolist()
    if len(members) <= _FEW:         # a few rows: in Python, numpy's fixed cost per call would outweigh them
        order, starts = info.order.tolist(), groups.start_rows()
        ins = c.in_origins.tolist() if c.in_origins is not None else None
        outs = c.out_origins.tolist() if c.out_origins is not None else None
        rows = []
        for i, g in enumerate(members):
            at = starts[g]
            o_in = ins[i] if ins is not None else [0] * len(key.extents)
            origins = o_in + (outs[i] if outs is not None else [0] * (len(key.columns) - len(o_in)))
            full = [at[col] - o for col, o in zip(key.columns, origins)]
            full += [-o if o < 0 else 0 for o in o_in]
            full += [n if n <= f - o else f - o for n, f, o in zip(key.extents, key.fulls, o_in)]
            rows.append(tuple([full[j] for j in order]))
    else:
        held = groups.starts[np.ix_(c.members, key.columns)]
        ins = c.rows_in()
        rel = held if c.in_origins is None and c.out_origins is None else held - np.hstack([ins, c.rows_out()])
        rows = map(tuple, np.hstack([rel, np.maximum(-ins, 0),
                                     np.minimum(key.extents, np.subtract(key.fulls, ins))])[:, info.order].tolist())
    found: dict[tuple, list[int]] = {}
    for g, r in zip(members, rows):
        entry = found.get(r)
        if entry is None:
            found[r] = [g, 1]
        else:
            entry[1] += 1
    return found


_FEW = 4       # classes of at most this many groups: their rows made in Python


def _part_costs(info: _ClassCosts, p: int, part: tuple, shape: Shape):
    """Per strategy of the signature: the cost of touched tensor ``p`` held in a box of ``shape`` that starts at
    ``part``'s first numbers against the piece (an input: then its window's starts and ends).

    Costs are in the view's coordinates: the held box is the tensor's held slice placed where the view's piece
    starts (the view's whole box at the first step). Worker w holds H_w(d), the w-th slice of that box along d
    (all of it when replicated). What earlier steps charged the group (its pieces against its held boxes) is
    subtracted, so that the steps' costs add up to every worker's final pieces against its final held boxes.
    Each input's and output's costs depend on its own box only, and are cached apart (groups differ in one
    tensor's box more often than in all)."""
    rank = len(shape)
    box = tuple([(part[d], part[d] + shape[d]) for d in range(rank)])
    key = info.key
    if p < info.n_inputs:
        window = tuple([(part[rank + d], part[2 * rank + d]) for d in range(rank)])
        return _input_costs(info.sig, info.whole, p, box, window, key.roles[p], info.grads[p], info.items[p])
    o = p - info.n_inputs
    return _output_costs(info.sig, info.whole, o, box, key.classes[o], info.done, info.grads[p], info.items[p],
                         key.roles[p])


# per shard object (by id, the shard kept alive): what node_options' key needs of it, its part interned as an int
_VIEW_KEYS: dict[int, tuple] = {}
_INTERNED: dict[tuple, int] = {}


def _grads(graph: Graph, ids) -> list[bool]:
    grads = _tensor_info(graph).grads
    return [grads[t] for t in ids]


def _items(graph: Graph, ids) -> list[int]:
    items = _tensor_info(graph).items
    return [items[t] for t in ids]


def clear_caches() -> None:
    """Forgets every cost table (for cold timings), and the worker calls a plan's bytes are counted from."""
    from tofu.search.copies import _calls

    for cached in (_strategies, _input_costs, _output_costs, _layout, _calls):
        cached.cache_clear()
    for table in (_CLASS_COSTS, _VIEW_KEYS, _INTERNED, _EXCLUDED, _INFO, _FLAT, _PROJECTED):
        table.clear()


_AUX, _PARAM, _COMPUTED, _UNREAD, _HEAD, _CONST = 0, 1, 2, 3, 4, 5


@dataclass(frozen=True)
class _TensorInfo:
    grads: tuple[bool, ...]       # per tensor id: g(t)
    items: tuple[int, ...]        # bytes per element
    roles: tuple[int, ...]
    columns: tuple[int, ...]      # per tensor id: its first column in Groups.starts


_INFO: dict[int, tuple[Graph, _TensorInfo]] = {}


def _tensor_info(graph: Graph) -> _TensorInfo:
    """Per tensor what its costs need, computed once per graph."""
    hit = _INFO.get(id(graph))
    if hit is None or hit[0] is not graph:
        read = {t for n in graph.nodes for t in n.inputs}
        heads = set(graph.heads)
        const = constant_tensors(graph)
        info = _TensorInfo(tuple(t.id in graph.with_gradient for t in graph.tensors),
                           tuple(np.dtype(t.dtype).itemsize for t in graph.tensors),
                           tuple(_CONST if t.id in const else _role(t, t.id in read, t.id in heads)
                                 for t in graph.tensors),
                           _columns([t.shape for t in graph.tensors]))
        if len(_INFO) > 64:
            _INFO.clear()
        hit = _INFO[id(graph)] = (graph, info)
    return hit[1]


def _role(tensor, read: bool = True, head: bool = False) -> int:
    """Auxiliary states are never sent (every device keeps the box its op reads); a parameter is held once per
    box, by its first holder, which the other readers of a replica fetch it from and send gradients to. An op
    output that no op reads is not converted to the held boxes (MXNet would not run what no output needs); a
    graph output is handed out as its producers computed it, but for partial sums, which are reduced."""
    if tensor.role is Role.AUX:
        return _AUX
    if tensor.role is Role.PARAM:
        return _PARAM
    if tensor.producer is not None and not read:
        return _HEAD if head else _UNREAD
    return _COMPUTED


def build_runnable_cut(graph: Graph, coarse: Coarsening, shapes: Sequence[Shape],
                       views: Sequence[NodeView] | Sequence[GroupView] | Groups, k: int,
                       whole_params: bool = False) -> tuple[CutProblem, CutIndex]:
    """:func:`build_cut` with every strategy checked for runnability first (for the reference solvers)."""
    excluded = set()
    groups = _as_groups(graph, shapes, views)
    for node in graph.nodes:
        if coarse.op_group[node.id] < 0:
            continue
        for view in (c.shard for c in groups.classes[node.id]):
            desc = describe(view.op, view.attrs, view.in_shapes, view.out_shapes)
            for o in node_options(graph, node, view, k, runnable_only=False):
                if not runnable(view.op, view.attrs, desc, o.strategy):
                    excluded.add(strategy_key(view, o.strategy))
    return build_cut(graph, coarse, shapes, groups, k, True, frozenset(excluded), whole_params)


def not_runnable(graph: Graph, node: Node, view: NodeView, k: int) -> frozenset:
    """The :func:`strategy_key` of every strategy of ``node`` (seen as ``view``) that MXNet cannot run."""
    desc = describe(view.op, view.attrs, view.in_shapes, view.out_shapes)
    return frozenset(strategy_key(view, o.strategy) for o in node_options(graph, node, view, k, runnable_only=False)
                     if not runnable(view.op, view.attrs, desc, o.strategy))


@lru_cache(maxsize=16384)
def _strategies(op, attrs, ins, outs, k):
    """An op signature's strategies for k workers, and its output splits computed whole (shared by every
    group and held box the signature is costed against)."""
    found = analysed_strategies(op, attrs, ins, outs, k)
    return found, tuple(_computed_whole(s) for s in found if s.kind == "output") or (_replicated(op, ins, outs, k),)


def signature_strategies(op, attrs, ins, outs, k) -> tuple[PartitionStrategy, ...]:
    """The strategies the analysis derives for one op signature (before any is found not runnable)."""
    return _strategies(op, attrs, ins, outs, k)[0]


def _carries(sig, s: PartitionStrategy) -> tuple[bool, ...]:
    """:func:`exchanged_gradients` of ``s`` on the first worker's pieces; all True where the expansion cannot
    run them (the strategy is then not runnable, and never chosen)."""
    shapes = tuple(r.shape if r is not None else shape for r, shape in zip(s.input_regions[0], sig[2]))
    try:
        return exchanged_gradients(sig[0], sig[1], shapes, s)
    except SearchError:
        raise
    except TofuError:
        return (True,) * len(s.exchange_elements)


@lru_cache(maxsize=65536)
def _input_costs(sig, whole, i, box, window, role, grad, item):
    """Per strategy: input i's cost table and the forward bytes its workers receive, per dimension;
    ``window``: the part of the view's input that lies inside the tensor (half-open, view coordinates)."""
    shape, k = sig[2][i], sig[4]
    strategies = _strategies(*sig)[whole]
    if role == _AUX or role == _CONST:     # state kept on the device; a constant computed where it is read
        zero = dict.fromkeys((*range(len(shape)), None), 0.0)
        return ((zero, zero),) * len(strategies)
    # a loss computed whole runs on the first worker only: the runtime reads one copy of it (the others
    # would inject its gradient again), and MXNet does not run what no output needs
    alone = whole and sig[0] in LOSS_OPS
    outside = _size(window) - _overlap(tuple((lo, hi - 1) for lo, hi in window), box)   # of the data, not held
    out, seen = [], {}
    for s in strategies:
        regions = tuple([None if w and (alone or i in s.once_inputs) else r[i]
                         for w, r in enumerate(s.input_regions)])
        hit = seen.get(regions)     # strategies that read input i alike cost alike (a weight under a batch split)
        if hit is None:
            # only the part of a piece inside the tensor is data (a padded view carries its halo's fill)
            pieces = [tuple([(a if a > lo else lo, b if b < hi - 1 else hi - 1)
                             for (a, b), (lo, hi) in zip(r.bounds, window)]) if r is not None else None
                      for r in regions]
            read = sum(math.prod([b - a + 1 if b >= a else 0 for a, b in p]) for p in pieces if p is not None)
            before = outside if read else 0
            held_read = _overlaps(pieces, box, k)
            received = {d: (read - v - before) * item for d, v in held_read.items()}
            if role == _PARAM:     # a replicated parameter is held by the group's first worker: the others read
                # it from there and send their gradient parts back
                first = _overlap(pieces[0], box) if pieces[0] is not None else 0
                received[None] += (held_read[None] - first) * item
            hit = seen[regions] = ({d: v * (1 + grad) for d, v in received.items()}, received)
        out.append(hit)
    return tuple(out)


@lru_cache(maxsize=65536)
def _output_costs(sig, whole, o, box, n, done, grad, item, role=_COMPUTED):
    """Per strategy: output o's cost table. Every holder h receives its held box H_h from each of the m
    partial-sum classes (each class's pieces cover the tensor) but the part its own piece P_h covers:
    sum_h m |H_h| - |H_h & P_h|. An output no op reads costs nothing (a graph output is handed out as
    computed) unless it is a graph output left in partial sums (m > 1), which are reduced to the held boxes."""
    op, shape, k = sig[0], sig[3][o], sig[4]
    view = _whole(shape)
    size = _size(box)
    before = n * size - _overlap(view, box)          # the same count for the group before the cut
    if role == _HEAD and n == 1:
        before = 0                                   # complete before the cut: nothing was converted
    scale = item * (1 + grad)
    out = []
    for s in _strategies(*sig)[whole]:
        placement = s.outputs[o]
        m = n * k if isinstance(placement, PartialSum) else n
        if role == _UNREAD or role == _CONST or (role == _HEAD and m == 1):
            out.append(dict.fromkeys((*range(len(shape)), None), 0.0))
            continue
        if isinstance(placement, SplitDim) and not done:
            produced = [w[o].bounds for w in s.output_regions]
            if op in LOSS_OPS and s.var.endswith("*"):   # computed whole: the first worker's copy is read
                produced = [view] + [None] * (k - 1)
        elif op in LOSS_OPS and done:
            produced = [view] + [None] * (k - 1)
        else:                                            # a partial sum, or the whole output, everywhere
            produced = [view] * k
        own = _overlaps(produced, box, k)
        out.append({d: ((k if d is None else 1) * m * size - v - before) * scale for d, v in own.items()})
    return tuple(out)


def _overlaps(pieces, box, k: int) -> dict:
    """For every dimension d, and None: sum_w |pieces[w] & H_w(d)|, with H_w(d) the w-th of k slices of the
    half-open ``box`` along d ([w n / k, (w + 1) n / k) rounded down; all of it for None); pieces are
    inclusive bounds (None: nothing). A piece meets H_w(d) in its overlap with the box, cut along d."""
    nd = len(box)
    out = [0] * (nd + 1)
    spans = [(lo, hi - 1, hi - lo) for lo, hi in box]
    for w, p in enumerate(pieces):
        if p is None:
            continue
        ov = []
        for (a, b), (lo, top, _) in zip(p, spans):      # the piece's overlap with the box, per dimension
            e = (b if b < top else top) - (a if a > lo else lo) + 1
            if e <= 0:
                break
            ov.append(e)
        else:
            total = math.prod(ov)
            out[nd] += total
            for d, ((a, b), (lo, _, n), e) in enumerate(zip(p, spans, ov)):
                first, last = lo + w * n // k, lo + (w + 1) * n // k - 1
                cut = (b if b < last else last) - (a if a > first else first) + 1
                if cut > 0:
                    out[d] += total // e * cut
    result = dict(enumerate(out[:nd]))
    result[None] = out[nd]
    return result


def _whole(shape: Shape) -> tuple[tuple[int, int], ...]:
    return tuple((0, n - 1) for n in shape)


def _size(box) -> int:
    return math.prod(max(0, hi - lo) for lo, hi in box)


def _overlap(bounds, box) -> int:
    """Elements of the inclusive ``bounds`` inside the half-open ``box``."""
    return math.prod(max(0, min(b, hi - 1) - max(a, lo) + 1) for (a, b), (lo, hi) in zip(bounds, box))


def _replicated(op: str, ins: tuple[Shape, ...], outs: tuple[Shape, ...], k: int) -> PartitionStrategy:
    """The op computed whole on every worker, each keeping the whole outputs (``replicate*``): the fallback of an
    op with no output split to compute whole (no output dimension divides by k, as a learned scalar's reshape),
    run by MXNet's kernel unchanged on whole inputs."""
    return PartitionStrategy(op, "replicate*", "output", k, tuple(Replicate() for _ in outs),
                             tuple(tuple(_whole_region(s) for s in ins) for _ in range(k)),
                             tuple(tuple(_whole_region(s) for s in outs) for _ in range(k)), (None,) * len(ins), (),
                             tuple(ins), 1)


def _whole_region(shape: Shape) -> Region:
    return Region(tuple((0, n - 1) for n in shape), tuple((0, 0) for _ in shape))


def _computed_whole(s: PartitionStrategy) -> PartitionStrategy:
    """``s``'s output split, computed redundantly: each worker reads whole inputs and keeps its slice
    (MXNet's kernel runs unchanged; named ``var*``)."""
    read = [any(w[i] is not None for w in s.input_regions) for i in range(len(s.input_shapes))]
    whole = tuple(_whole_region(shape) if r else None for r, shape in zip(read, s.input_shapes))
    return dataclasses.replace(s, var=s.var + "*", input_regions=tuple(whole for _ in range(s.k)), exchanges=(),
                               exchange_elements=())
