r"""Every worker group of one step of the recursion, held as arrays (recursive.py makes them, cost.py reads them).

At step j the F_j = f_1 ... f_{j-1} worker groups see each op as a shard (:class:`NodeView`) that is the same
for most of them and lies at another place in the whole tensors, and each holds every tensor in a box of the
same shape at its own place. Kept one by one, that is F_j Python views per op (100,000 at 64 workers on an RNN,
each made, keyed and costed alone). Here the views of an op are kept by *class*: the shard they share (its
origins left out) and its members' origins as rows of integers; the held boxes as their starts, one row per
group. Group G's view of op n is its class's shard placed at G's row,

    view_G(n) = shard_c(n) + origin_G(n),       held_G(t) = [start_G(t), start_G(t) + shape(t)),

and a cut moves every member of a class by one array operation: member c of group G is group G f + c, its
origins its parent's (of the inputs the shard keeps) plus the move the cut makes on worker c's shard, its held
starts its parent's plus c shape(t)_d along the dimension d that t is split along.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tofu.analysis.strategies import PartitionStrategy
from tofu.analysis.views import NodeView, follow_cuts, followed_shard, moved_shard, transition
from tofu.graph.ir import Graph

Shape = tuple[int, ...]
Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True, eq=False)
class ViewClass:
    """The groups that see an op as one shard: ``shard`` (origins None), its ``members`` (group numbers,
    ascending) and where each member's pieces start, one row each (inputs' dimensions, then outputs'; None:
    every member's view has its origins None, at 0)."""

    shard: NodeView
    members: np.ndarray
    in_origins: np.ndarray | None
    out_origins: np.ndarray | None

    def view(self, row: int) -> NodeView:
        """The view of the member in ``row``."""
        if self.in_origins is None and self.out_origins is None:
            return self.shard
        v = self.shard
        return NodeView(v.op, v.attrs, v.in_shapes, v.out_shapes, v.inputs, v.outputs,
                        _split(self.in_origins, row, v.in_shapes), _split(self.out_origins, row, v.out_shapes),
                        v.out_classes, v.in_zeroed, v.done)

    def rows_in(self) -> np.ndarray:
        """Every member's input origins (zeros where they are None)."""
        if self.in_origins is not None:
            return self.in_origins
        return np.zeros((len(self.members), sum(map(len, self.shard.in_shapes))), dtype=np.int64)

    def rows_out(self) -> np.ndarray:
        if self.out_origins is not None:
            return self.out_origins
        return np.zeros((len(self.members), sum(map(len, self.shard.out_shapes))), dtype=np.int64)

    def subset(self, keep: np.ndarray) -> "ViewClass":
        """The members where ``keep`` (a mask over the rows) is true."""
        return ViewClass(self.shard, self.members[keep], None if self.in_origins is None else self.in_origins[keep],
                         None if self.out_origins is None else self.out_origins[keep])


def _split(rows: np.ndarray | None, row: int, shapes: Sequence[Shape]):
    if rows is None:
        return None
    flat, out, at = rows[row].tolist(), [], 0
    for shape in shapes:
        out.append(tuple(flat[at:at + len(shape)]))
        at += len(shape)
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Groups:
    """All worker groups of a step: per node id its view classes, and each group's held boxes (of ``shapes``)
    by their starts, ``starts[G, columns[t] + d]``."""

    count: int
    shapes: tuple[Shape, ...]
    columns: tuple[int, ...]
    starts: np.ndarray
    classes: tuple[tuple[ViewClass, ...], ...]

    @staticmethod
    def whole(graph: Graph) -> "Groups":
        """The single group before the first cut: every op whole, every tensor held whole."""
        shapes = tuple(t.shape for t in graph.tensors)
        columns = _columns(shapes)
        one = np.zeros(1, dtype=np.int64)
        return Groups(1, shapes, columns[:-1], np.zeros((1, columns[-1]), dtype=np.int64),
                      tuple((ViewClass(NodeView.of(graph, n), one, None, None),) for n in graph.nodes))

    @staticmethod
    def of_views(graph: Graph, shapes: Sequence[Shape], views: Sequence[Sequence[NodeView]],
                 held: Sequence[Sequence[Box]]) -> "Groups":
        """Groups given one by one: ``views[G]`` per node id, ``held[G]`` per tensor id (of ``shapes``)."""
        columns = _columns(shapes)
        starts = np.array([[lo for box in boxes for lo, _ in box] for boxes in held], dtype=np.int64)
        starts = starts.reshape(len(held), columns[-1] if shapes else 0)
        classes = []
        for n in range(len(graph.nodes)):
            found: dict[tuple, list] = {}
            for g, group in enumerate(views):
                v = group[n]
                shard = dataclasses.replace(v, in_origins=None, out_origins=None)
                entry = found.setdefault((shard, v.in_origins is None, v.out_origins is None), [shard, [], [], []])
                entry[1].append(g)
                entry[2].append([o for origin in v.in_origins_or_zero() for o in origin])
                entry[3].append([o for origin in v.out_origins_or_zero() for o in origin])
            classes.append(tuple(
                ViewClass(shard, np.array(members, dtype=np.int64),
                          None if in_none else _rows(ins, shard.in_shapes),
                          None if out_none else _rows(outs, shard.out_shapes))
                for (_, in_none, out_none), (shard, members, ins, outs) in found.items()))
        return Groups(len(views), tuple(tuple(s) for s in shapes), columns[:-1], starts, tuple(classes))

    def views(self, g: int) -> tuple[NodeView, ...]:
        """Group ``g``'s view of every node."""
        out = []
        for per_node in self.classes:
            for c in per_node:
                at = 0 if g == 0 else int(np.searchsorted(c.members, g))     # members ascend: group 0 is first
                if at < len(c.members) and c.members[at] == g:
                    out.append(c.view(at))
                    break
        return tuple(out)

    def start_rows(self) -> list[list[int]]:
        """``starts`` as lists (made once)."""
        rows = self.__dict__.get("_rows")
        if rows is None:
            rows = self.starts.tolist()
            object.__setattr__(self, "_rows", rows)
        return rows

    def held(self, g: int) -> tuple[Box, ...]:
        """Group ``g``'s held box of every tensor."""
        row = self.starts[g].tolist()
        return tuple(tuple((row[c + d], row[c + d] + n) for d, n in enumerate(shape))
                     for c, shape in zip(self.columns, self.shapes))

    def class_of(self, n: int) -> np.ndarray:
        """Per group, the number of its class for node ``n``."""
        out = np.empty(self.count, dtype=np.int64)
        for i, c in enumerate(self.classes[n]):
            out[c.members] = i
        return out

    def cut(self, strategies: Sequence[Sequence[tuple[PartitionStrategy, ...]]],
            plan: Sequence[tuple[int | None, int | None]], dims: Sequence[int | None], f: int) -> "Groups":
        """The groups of the next step, each group cut ``f`` ways: ``strategies[n][c]`` are class c's strategies
        of node n, ``plan[n]`` the chosen one's index (or, for a merged element-wise op, None and the dimension
        its tensors are split along), ``dims[t]`` the dimension tensor t is split along (None: replicated)."""
        shapes = tuple(s if d is None else tuple(x // f if i == d else x for i, x in enumerate(s))
                       for s, d in zip(self.shapes, dims))
        starts = np.repeat(self.starts, f, axis=0)
        split = [(self.columns[t] + d, shapes[t][d]) for t, d in enumerate(dims) if d is not None]
        if split:
            cols, steps = (np.array(v, dtype=np.int64) for v in zip(*split))
            worker = np.tile(np.arange(f, dtype=np.int64), self.count)
            starts[:, cols] += worker[:, None] * steps[None, :]
        classes = []
        for n, per_node in enumerate(self.classes):
            y, d = plan[n]
            found: dict[tuple, list] = {}
            for ci, c in enumerate(per_node):
                s = strategies[n][ci][y] if y is not None else None
                if (s is None and d is None) or (s is not None and s.var.endswith("*")):
                    # kept whole (replicated, or computed whole on every worker): every member's f workers see
                    # the same shard at the same origins
                    shard = c.shard if s is None else dataclasses.replace(c.shard, done=True)
                    entry = found.setdefault((shard, c.in_origins is None, c.out_origins is None),
                                             [shard, [], [], []])
                    entry[1].append((c.members[:, None] * f + np.arange(f)).ravel())
                    entry[2].append(None if c.in_origins is None else np.repeat(c.in_origins, f, axis=0))
                    entry[3].append(None if c.out_origins is None else np.repeat(c.out_origins, f, axis=0))
                    continue
                for worker in range(f):
                    if y is not None:
                        moved = _after(c, strategies[n][ci][y], f, worker)
                    else:
                        moved = _followed(c, d, f, worker)
                    shard, ins, outs = moved
                    entry = found.setdefault((shard, ins is None, outs is None), [shard, [], [], []])
                    entry[1].append(c.members * f + worker)
                    entry[2].append(ins)
                    entry[3].append(outs)
            merged = []
            for (_, in_none, out_none), (shard, members, ins, outs) in found.items():
                if len(members) == 1:       # one class's members for one worker: ascending already
                    merged.append(ViewClass(shard, members[0], ins[0], outs[0]))
                    continue
                members = np.concatenate(members)
                order = np.argsort(members, kind="stable")
                merged.append(ViewClass(shard, members[order], None if in_none else np.concatenate(ins)[order],
                                        None if out_none else np.concatenate(outs)[order]))
            classes.append(tuple(merged))
        return Groups(self.count * f, shapes, self.columns, starts, tuple(classes))


def _columns(shapes: Sequence[Shape]) -> tuple[int, ...]:
    out = [0]
    for s in shapes:
        out.append(out[-1] + len(s))
    return tuple(out)


def _rows(rows: list[list[int]], shapes: Sequence[Shape]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(len(rows), sum(map(len, shapes)))


def _after(c: ViewClass, s: PartitionStrategy, f: int, worker: int):
    """Class ``c`` cut with ``s`` on ``worker``: the new shard and its members' origins (None: at 0)."""
    shard = c.shard
    if s.var.endswith("*"):        # computed whole on every worker: later cuts do not narrow it
        return dataclasses.replace(shard, done=True), c.in_origins, c.out_origins
    t = transition(shard, s, f, worker)
    moves, out_moves, keep = _flat(t, shard)
    n = len(c.members)
    if c.in_origins is None:
        ins = _rows_of(moves, n)
    else:
        ins = (c.in_origins if keep is None else c.in_origins[:, keep]) + moves
    if out_moves is None:
        outs = c.out_origins
    else:
        outs = _rows_of(out_moves, n) if c.out_origins is None else c.out_origins + out_moves
    return moved_shard(shard, t), ins, outs


_FLAT: dict[int, tuple] = {}


def _flat(t, shard: NodeView) -> tuple[np.ndarray, np.ndarray | None, list[int] | None]:
    """A transition's moves as flat arrays (inputs', outputs' or None), and the columns of the inputs it keeps
    (None: all of them), made once per transition."""
    hit = _FLAT.get(id(t))
    if hit is None or hit[0] is not t:
        moves = np.array([m for move in t.in_moves for m in move], dtype=np.int64)
        out_moves = None if t.out_moves is None else np.array([m for move in t.out_moves for m in move],
                                                              dtype=np.int64)
        keep = None
        if not t.all_inputs:
            at = _columns(shard.in_shapes)
            keep = [at[i] + d for i in t.positions for d in range(len(shard.in_shapes[i]))]
        if len(_FLAT) > 200_000:
            _FLAT.clear()
        hit = _FLAT[id(t)] = (t, moves, out_moves, keep)
    return hit[1:]


def _rows_of(row: np.ndarray, n: int) -> np.ndarray:
    """``row`` repeated ``n`` times."""
    return np.repeat(row[None, :], n, axis=0)


def _followed(c: ViewClass, d: int | None, f: int, worker: int):
    """Class ``c`` of a merged element-wise op cut along ``d`` (its tensors' split) on ``worker``."""
    shard = c.shard
    if d is None:
        return shard, c.in_origins, c.out_origins
    ins, outs = follow_cuts(shard, d, f, worker)
    return (followed_shard(shard, ins, outs), _moved(c.in_origins, ins, len(c.members)),
            _moved(c.out_origins, outs, len(c.members)))


def _moved(rows: np.ndarray | None, cuts, members: int) -> np.ndarray:
    move = np.array([m for shape, step in cuts for m in (step or (0,) * len(shape))], dtype=np.int64)
    return _rows_of(move, members) if rows is None else rows + move


def slice_box(box: Box, d: int | None, f: int, c: int) -> Box:
    """The c-th of ``f`` equal slices of ``box`` along ``d`` (None: the whole box)."""
    if d is None:
        return box
    lo, hi = box[d]
    n = (hi - lo) // f
    return tuple((lo + c * n, lo + (c + 1) * n) if e == d else b for e, b in enumerate(box))
