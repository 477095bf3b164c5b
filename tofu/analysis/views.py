"""An op as a worker group sees it after earlier cuts of a plan (shared by the search and the rewriter).

Input: an op (name, attributes, shapes) and a strategy instantiated for f workers. Output: a
:class:`NodeView` (the shard: MXNet's kernel call for one worker, its attributes and shapes) and the
:class:`~tofu.analysis.shard.ShardCall` that runs it.

After a cut, each op is its shard: the attributes MXNet's kernel runs with on the worker's pieces. The search
(``tofu.search.recursive``) continues on worker 0's view of each group; the rewriter (``tofu.rewrite``)
follows every worker's own view, since border workers (a halo at the tensor's edge) differ from the others.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tofu import registry
from tofu.analysis.shard import ShardCall, shard_call
from tofu.analysis.strategies import PartialSum, PartitionStrategy, SplitDim
from tofu.errors import AnalysisError
from tofu.tdl.describe import describe

Shape = tuple[int, ...]


@dataclass(frozen=True)
class NodeView:
    """An op as one worker group sees it at a step of the recursion: after a cut, each op is its shard (the
    shard's attributes and shapes, as MXNet's kernel runs it), reading pieces of its input tensors."""

    op: str
    attrs: object
    in_shapes: tuple[Shape, ...]
    out_shapes: tuple[Shape, ...]
    inputs: tuple[int, ...]           # tensor ids, one per view input
    outputs: tuple[int, ...]
    # where the view's inputs and outputs start in the whole tensors, for worker 0 of group 0 (None: at 0)
    in_origins: tuple[Shape, ...] | None = None
    out_origins: tuple[Shape, ...] | None = None
    # per output: how many partial-sum classes earlier steps left (None: one each)
    out_classes: tuple[int, ...] | None = None
    # per input: passed as zeros (a term counted on another worker only, as a bias under a reduction split)
    in_zeroed: tuple[bool, ...] | None = None
    # computed whole at an earlier step: every worker of the group computes this view's whole output
    done: bool = False

    def zeroed(self, p: int) -> bool:
        return self.in_zeroed is not None and self.in_zeroed[p]

    def classes(self, o: int) -> int:
        return self.out_classes[o] if self.out_classes is not None else 1

    def in_origins_or_zero(self) -> tuple[Shape, ...]:
        return self.in_origins if self.in_origins is not None else tuple((0,) * len(s) for s in self.in_shapes)

    def out_origins_or_zero(self) -> tuple[Shape, ...]:
        return self.out_origins if self.out_origins is not None else tuple((0,) * len(s) for s in self.out_shapes)

    def origin(self, p: int, output: bool = False) -> Shape:
        """The offset of the view's input (or output) ``p`` in its whole tensor."""
        origins, shapes = (self.out_origins, self.out_shapes) if output else (self.in_origins, self.in_shapes)
        return origins[p] if origins is not None else (0,) * len(shapes[p])

    @staticmethod
    def of(graph, node) -> "NodeView":
        return NodeView(node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
                        tuple(graph.tensors[t].shape for t in node.outputs), node.inputs, node.outputs)

    def describe(self):
        return describe(self.op, self.attrs, self.in_shapes, self.out_shapes)


_CALLS: dict = {}


def runnable(op, attrs, desc, s: PartitionStrategy) -> bool:
    """Whether the strategy can be run: MXNet's kernel on the shards (checked on the border workers and one
    interior one, which differs from the others by its offset only), or the op's declared expansion, where it
    does not refuse the op's attributes and shapes."""
    if s.exchanges:
        expansion = registry.expansion(op)
        return expansion is not None and expansion.runs(desc.attrs, tuple(t.shape for t in desc.inputs))
    if all(kernel_call(op, attrs, desc, s, w) is not None for w in sorted({0, min(1, s.k - 1), s.k - 1})):
        return True
    return s.kind == "reduce" and expands_partials(op, desc)


def expands_partials(op: str, desc) -> bool:
    """Whether the op's expansion runs a split of its reduction that MXNet's kernel cannot (Embedding split along
    its table's rows: ``tdl_expansion(partials=True)``) for these attributes and shapes."""
    expansion = registry.expansion(op)
    return expansion is not None and expansion.partials and \
        expansion.runs(desc.attrs, tuple(t.shape for t in desc.inputs))


def kernel_call(op, attrs, desc, s: PartitionStrategy, worker: int) -> ShardCall | None:
    """MXNet's kernel call for one worker's shard (cached), or None when the kernel cannot run it."""
    key = (op, attrs, s.input_shapes, tuple(o.shape for o in desc.outputs), s.var, s.kind, s.k, worker)
    if key not in _CALLS:
        first = _CALLS.get(key[:-1] + (0,)) if worker else None
        try:
            call = shard_call(op, attrs, s, worker, desc, prefer=first.attrs if first else None)
        except AnalysisError:
            call = None
        if call is not None and (_unread_beside_cut(s, worker, call) or _unequal_pieces(op, call)):
            call = None
        _CALLS[key] = call
    return _CALLS[key]


EQUAL_SHAPE_INPUTS: dict[str, tuple[int, ...]] = {"Correlation": (0, 1)}
"""Inputs (by position) that an op's MXNet kernel indexes with the first one's extents, which its shape
inference does not check: Correlation reads and writes data2 over data1's rows and columns. A shard whose pieces
of them differ (a border worker's data2 clipped where its data1 is not) read past the piece forward and wrote
past it backward (a 3-way split aborted the process; 6 workers trained 8% off)."""


def _unequal_pieces(op: str, call: ShardCall) -> bool:
    """Whether the call passes the inputs of :data:`EQUAL_SHAPE_INPUTS` in pieces of different shapes."""
    same = EQUAL_SHAPE_INPUTS.get(op)
    if same is None:
        return False
    shapes = dict(zip(call.inputs, call.input_shapes()))
    return len({shapes[i] for i in same if i in shapes}) > 1


def _unread_beside_cut(s: PartitionStrategy, worker: int, call: ShardCall) -> bool:
    """Whether the call passes an input the description never reads (BatchNorm's gamma under fix_gamma) whole
    while it cuts another: MXNet's shape inference does not check such an input, but its kernel indexes it by
    the cut extent (a channel split then reads or writes past the pieces), so the shard is refused."""
    regions = s.input_regions[worker]
    unread = [i for i in call.inputs if regions[i] is None]
    cut = any(r is not None and r.shape != shape for r, shape in zip(regions, s.input_shapes))
    return bool(unread) and cut


def clear_calls() -> None:
    _CALLS.clear()
    _TRANSITIONS.clear()
    _FOLLOWS.clear()


def next_view(view: NodeView, s: PartitionStrategy, k: int, worker: int = 0) -> NodeView:
    """The op as ``worker``'s group sees it after the cut: MXNet's kernel call for its shard when there is
    one, else the op on its regions (an expansion's statistics exchange recurs on the smaller problem); with
    the origins of its pieces in the whole tensors (as :func:`tofu.analysis.compose.compose` places them).

    What the cut does to the shard and by how much it moves each piece depends on ``s`` and ``worker`` alone
    (a strategy belongs to one op signature): :func:`_transition`, computed once and applied to every group's
    view, each at its own origins."""
    if s.var.endswith("*"):        # computed whole on every worker: later cuts do not narrow it
        return dataclasses.replace(view, done=True)
    t = transition(view, s, k, worker)
    origins = view.in_origins
    if origins is None:
        in_origins = t.in_moves
    else:
        in_origins = tuple([tuple([a + b for a, b in zip(origins[i], move)])
                            for i, move in zip(t.positions, t.in_moves)])
    if t.out_moves is None:
        out_origins = view.out_origins
    elif view.out_origins is None:
        out_origins = t.out_moves
    else:
        out_origins = tuple([tuple([a + b for a, b in zip(o, move)]) for o, move in zip(view.out_origins, t.out_moves)])
    return moved_shard(view, t, in_origins, out_origins)


def moved_shard(view: NodeView, t: _Transition, in_origins=None, out_origins=None) -> NodeView:
    """The shard ``t`` makes of ``view``, at ``in_origins`` and ``out_origins`` (None: at 0)."""
    classes = view.out_classes if t.multiplies is None else \
        tuple([view.classes(i) * m for i, m in enumerate(t.multiplies)])
    zeroed = tuple([view.zeroed(i) or z for i, z in zip(t.positions, t.zeroes)])
    inputs = view.inputs if t.all_inputs else tuple([view.inputs[i] for i in t.positions])
    return NodeView(view.op, t.attrs, t.in_shapes, t.out_shapes or view.out_shapes, inputs, view.outputs, in_origins,
                    out_origins, classes, zeroed, t.done)


@dataclass(frozen=True)
class _Transition:
    """What a cut does to an op's shard, for one strategy and worker: the shard's attributes and shapes, which
    of the view's inputs it takes (``positions``) and how far each piece moves against the view's."""

    attrs: object
    in_shapes: tuple[Shape, ...]
    out_shapes: tuple[Shape, ...] | None      # None: the view's (a kernel that computes the whole output)
    positions: tuple[int, ...]
    in_moves: tuple[Shape, ...]
    out_moves: tuple[Shape, ...] | None       # None: the view's origins stay
    multiplies: tuple[int, ...] | None        # per output, the factor of its partial-sum classes (None: stay)
    zeroes: tuple[bool, ...]                  # per taken input: passed as zeros from now on
    done: bool
    all_inputs: bool = True                   # positions are every input of the view, in order


_TRANSITIONS: dict[tuple, tuple[PartitionStrategy, _Transition]] = {}


def transition(view: NodeView, s: PartitionStrategy, k: int, worker: int) -> _Transition:
    """What cutting ``view`` with ``s`` (not computed whole) does to ``worker``'s shard (cached per strategy)."""
    key = (id(s), k, worker)
    hit = _TRANSITIONS.get(key)
    if hit is None or hit[0] is not s:
        if len(_TRANSITIONS) > 200_000:
            _TRANSITIONS.clear()
        hit = _TRANSITIONS[key] = (s, _transition(view, s, k, worker))
    return hit[1]


def _transition(view: NodeView, s: PartitionStrategy, k: int, worker: int) -> _Transition:
    desc = view.describe()
    call = None if s.exchanges else kernel_call(view.op, view.attrs, desc, s, worker)
    produced = s.output_regions[worker]
    multiplies = tuple(k if isinstance(p, PartialSum) else 1 for p in s.outputs)
    if call is not None:
        moves = tuple(tuple(lo - (pad[0] if call.padded else 0) for (lo, _), pad in zip(r.bounds, r.pad))
                      for r in call.regions)
        zeroes = tuple(i in call.zeroed for i in call.inputs)
        every = tuple(call.inputs) == tuple(range(len(view.in_shapes)))
        if call.crop:       # the kernel computes the whole output: later cuts do not narrow it (as compose)
            return _Transition(call.attrs, call.input_shapes(), None, tuple(call.inputs), moves, None, None, zeroes,
                               True, every)
        out_moves = tuple(tuple(r.bounds[p.dim][0] if isinstance(p, SplitDim) and d == p.dim else 0
                                for d in range(len(r.bounds)))
                          for r, p in zip(produced, s.outputs))
        # a kernel that computes more than the worker's part keeps it: later cuts do not narrow it either
        return _Transition(call.attrs, call.input_shapes(), tuple(r.shape for r in produced), tuple(call.inputs),
                           moves, out_moves, multiplies, zeroes, call.keep is not None, every)
    # an input the strategy does not read keeps its shape (the op still takes it)
    regions = s.input_regions[worker]
    shapes = tuple(r.shape if r is not None else shape for r, shape in zip(regions, view.in_shapes))
    moves = tuple((0,) * len(shape) if r is None else tuple(lo for lo, _ in r.bounds)
                  for r, shape in zip(regions, view.in_shapes))
    out_moves = tuple(tuple(lo for lo, _ in r.bounds) for r in produced)
    zeroes = tuple(worker > 0 and i in s.once_inputs for i in range(len(regions)))
    return _Transition(view.attrs, shapes, tuple(r.shape for r in produced), tuple(range(len(regions))), moves,
                       out_moves, multiplies, zeroes, False)


def follow_view(view: NodeView, d: int | None, f: int, worker: int = 0) -> NodeView:
    """A merged element-wise op after the cut: ``worker``'s slice along ``d`` of its same-shaped inputs and
    output (its other inputs, a broadcast operand, unchanged)."""
    if d is None:
        return view
    ins, outs = follow_cuts(view, d, f, worker)

    def moved(origins, cuts):
        if origins is None:
            return tuple([move or (0,) * len(shape) for shape, move in cuts])
        return tuple([o if move is None else tuple([a + b for a, b in zip(o, move)])
                      for o, (_, move) in zip(origins, cuts)])

    return followed_shard(view, ins, outs, moved(view.in_origins, ins), moved(view.out_origins, outs))


def followed_shard(view: NodeView, ins, outs, in_origins=None, out_origins=None) -> NodeView:
    """A merged element-wise op's view cut as :func:`follow_cuts` says, at ``in_origins`` and ``out_origins``."""
    return NodeView(view.op, view.attrs, tuple([c for c, _ in ins]), tuple([c for c, _ in outs]), view.inputs,
                    view.outputs, in_origins, out_origins, view.out_classes, view.in_zeroed)


def follow_cuts(view: NodeView, d: int, f: int, worker: int = 0) -> tuple[tuple, tuple]:
    """Per input and per output of a merged element-wise op cut along ``d``: its shape after the cut and how far
    its piece moves (None: a broadcast operand, unchanged)."""
    key = (view.in_shapes, view.out_shapes, d, f, worker)
    hit = _FOLLOWS.get(key)
    if hit is None:
        out = view.out_shapes[0]
        step = out[d] // f
        cut = tuple(step if i == d else n for i, n in enumerate(out))
        move = tuple(worker * step if i == d else 0 for i in range(len(out)))
        hit = tuple((cut, move) if shape == out else (shape, None) for shape in view.in_shapes), \
            tuple((cut, move) if shape == out else (shape, None) for shape in view.out_shapes)
        if len(_FOLLOWS) > 100_000:
            _FOLLOWS.clear()
        _FOLLOWS[key] = hit
    return hit


_FOLLOWS: dict[tuple, tuple] = {}
