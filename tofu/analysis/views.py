"""An op as a worker group sees it after earlier cuts of a plan (shared by the search and the rewriter).

Input: an op (name, attributes, shapes) and a strategy instantiated for f workers. Output: a
:class:`NodeView` (the shard: MXNet's kernel call for one worker, its attributes and shapes) and the
:class:`~tofu.analysis.shard.ShardCall` that runs it.

After a cut, each op is its shard: the attributes MXNet's kernel runs with on the worker's pieces. The search
(``tofu.search.recursive``) continues on worker 0's view of each group; the rewriter (``tofu.rewrite``)
follows every worker's own view, since border workers (a halo at the tensor's edge) differ from the others.
"""
from __future__ import annotations

from dataclasses import dataclass

from tofu import registry
from tofu.analysis.shard import ShardCall, shard_call
from tofu.analysis.strategies import PartitionStrategy
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

    @staticmethod
    def of(graph, node) -> "NodeView":
        return NodeView(node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
                        tuple(graph.tensors[t].shape for t in node.outputs), node.inputs, node.outputs)

    def describe(self):
        return describe(self.op, self.attrs, self.in_shapes, self.out_shapes)


_CALLS: dict = {}


def runnable(op, attrs, desc, s: PartitionStrategy) -> bool:
    """Whether the strategy can be run: MXNet's kernel on the shards (checked on the border workers and one
    interior one, which differs from the others by its offset only), or the op's declared expansion."""
    if s.exchanges:
        return registry.expansion(op) is not None
    return all(kernel_call(op, attrs, desc, s, w) is not None for w in sorted({0, min(1, s.k - 1), s.k - 1}))


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
    one, else the op on its regions (an expansion's statistics exchange recurs on the smaller problem)."""
    if s.var.endswith("*"):        # computed whole on every worker: the same op again
        return view
    desc = view.describe()
    call = None if s.exchanges else kernel_call(view.op, view.attrs, desc, s, worker)
    outs = tuple(r.shape for r in s.output_regions[worker])
    if call is not None:
        return NodeView(view.op, call.attrs, call.input_shapes(), outs if not call.crop else view.out_shapes,
                        tuple(view.inputs[i] for i in call.inputs), view.outputs)
    # an input the strategy does not read keeps its shape (the op still takes it)
    shapes = tuple(r.shape if r is not None else shape for r, shape in zip(s.input_regions[worker], view.in_shapes))
    return NodeView(view.op, view.attrs, shapes, outs, view.inputs, view.outputs)
