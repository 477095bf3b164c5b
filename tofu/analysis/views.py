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
        if call is not None and _unread_beside_cut(s, worker, call):
            call = None
        _CALLS[key] = call
    return _CALLS[key]


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


def next_view(view: NodeView, s: PartitionStrategy, k: int, worker: int = 0) -> NodeView:
    """The op as ``worker``'s group sees it after the cut: MXNet's kernel call for its shard when there is
    one, else the op on its regions (an expansion's statistics exchange recurs on the smaller problem); with
    the origins of its pieces in the whole tensors (as :func:`tofu.analysis.compose.compose` places them)."""
    if s.var.endswith("*"):        # computed whole on every worker: later cuts do not narrow it
        return dataclasses.replace(view, done=True)
    desc = view.describe()
    call = None if s.exchanges else kernel_call(view.op, view.attrs, desc, s, worker)
    produced = s.output_regions[worker]
    outs = tuple(r.shape for r in produced)
    out_origins = tuple(tuple(o + (r.bounds[p.dim][0] if isinstance(p, SplitDim) and d == p.dim else 0)
                              for d, o in enumerate(view.origin(i, True)))
                        for i, (r, p) in enumerate(zip(produced, s.outputs)))
    classes = tuple(view.classes(i) * (k if isinstance(p, PartialSum) else 1) for i, p in enumerate(s.outputs))
    if call is not None:
        in_origins = tuple(tuple(o + lo - (pad[0] if call.padded else 0)
                                 for o, (lo, _), pad in zip(view.origin(i), r.bounds, r.pad))
                           for i, r in zip(call.inputs, call.regions))
        zeroed = tuple(view.zeroed(i) or i in call.zeroed for i in call.inputs)
        if call.crop:       # the kernel computes the whole output: later cuts do not narrow it (as compose)
            return NodeView(view.op, call.attrs, call.input_shapes(), view.out_shapes,
                            tuple(view.inputs[i] for i in call.inputs), view.outputs, in_origins, view.out_origins,
                            view.out_classes, zeroed, done=True)
        # a kernel that computes more than the worker's part keeps it: later cuts do not narrow it either
        return NodeView(view.op, call.attrs, call.input_shapes(), outs, tuple(view.inputs[i] for i in call.inputs),
                        view.outputs, in_origins, out_origins, classes, zeroed, done=call.keep is not None)
    # an input the strategy does not read keeps its shape (the op still takes it)
    regions = s.input_regions[worker]
    shapes = tuple(r.shape if r is not None else shape for r, shape in zip(regions, view.in_shapes))
    in_origins = tuple(view.origin(i) if r is None else tuple(o + lo for o, (lo, _) in zip(view.origin(i), r.bounds))
                       for i, r in enumerate(regions))
    out_origins = tuple(tuple(o + lo for o, (lo, _) in zip(view.origin(i, True), r.bounds))
                        for i, r in enumerate(produced))
    zeroed = tuple(view.zeroed(i) or (worker > 0 and i in s.once_inputs) for i in range(len(regions)))
    return NodeView(view.op, view.attrs, shapes, outs, view.inputs, view.outputs, in_origins, out_origins, classes,
                    zeroed)


def follow_view(view: NodeView, d: int | None, f: int, worker: int = 0) -> NodeView:
    """A merged element-wise op after the cut: ``worker``'s slice along ``d`` of its same-shaped inputs and
    output (its other inputs, a broadcast operand, unchanged)."""
    if d is None:
        return view
    out = view.out_shapes[0]
    step = out[d] // f

    def cut(shape, origin):
        if tuple(shape) != tuple(out):
            return shape, origin
        return (tuple(step if i == d else n for i, n in enumerate(shape)),
                tuple(x + (worker * step if i == d else 0) for i, x in enumerate(origin)))

    ins = [cut(s, view.origin(i)) for i, s in enumerate(view.in_shapes)]
    outs = [cut(s, view.origin(i, True)) for i, s in enumerate(view.out_shapes)]
    return NodeView(view.op, view.attrs, tuple(s for s, _ in ins), tuple(s for s, _ in outs), view.inputs,
                    view.outputs, tuple(o for _, o in ins), tuple(o for _, o in outs), view.out_classes,
                    view.in_zeroed)
