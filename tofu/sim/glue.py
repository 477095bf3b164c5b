"""The partitioned forward graph from the plan alone: the rewriter's construction replayed on boxes, no MXNet.

Input: a :class:`~tofu.graph.ir.Graph` and a :class:`~tofu.search.plan.Plan`. Output: a :class:`Dataflow`,
every value and op of the partitioned forward graph as :mod:`tofu.rewrite` builds it (each worker's kernel call,
as :func:`tofu.analysis.compose.compose` gives it, and the glue around it: ``slice``, ``Concat``, ``add_n``,
``_copy`` of a piece cut for another device, fills, scalings; a constant's pieces made where they are read),
each op on its device reading the values it reads. :mod:`tofu.sim.program` turns it (or the same read from the
partitioned MXNet symbol, for the small models) into the iteration's tasks; the paper-size models, which
MXNet cannot bind here, take this path. An op run by its expansion (BatchNorm split along the batch) is one
call of the op on its pieces: its statistics exchange is left out (docs/sim.md, "Not done yet").
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tofu.errors import TofuError
from tofu.graph.attrs import Attrs
from tofu.graph.ir import Graph, Role
from tofu.search.constants import constant_tensors
from tofu.search.owners import parameter_pieces
from tofu.sim.flops import OpClass, OpWork

_UNDESCRIBED = frozenset({"identity", "_copy", "_zeros", "zeros", "_full", "full"})   # no TDL: data movement


def _device(attrs: Mapping[str, str]) -> int | None:
    g = attrs.get("__ctx_group__")
    return int(g[3:]) if g and g.startswith("dev") else None


def _shapes(symbol, arg_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    internals = symbol.get_internals()
    _, out, _ = internals.infer_shape(**arg_shapes)
    return dict(zip(internals.list_outputs(), (tuple(s) for s in out)))


def _work(op: str, attrs: Mapping[str, str], ins, outs, op_call_work) -> OpWork:
    elements = sum(math.prod(s) for s in ins) + sum(math.prod(s) for s in outs)
    if op not in _UNDESCRIBED:
        try:
            clean = {k: v for k, v in attrs.items() if not k.startswith("__")}
            return op_call_work(op, Attrs.parse(clean), ins, outs)
        except TofuError:       # an op the registry cannot describe is costed as data movement
            pass
    return OpWork(0.0, 4.0 * elements, OpClass.DATA_MOVEMENT, frozenset())


@dataclass(frozen=True)
class FlowValue:
    """One value of the partitioned forward graph: a variable (``role``: its tensor's role) or an op's output
    (``producer``: the index of the :class:`FlowOp`), held on ``device``."""

    id: int
    device: int
    nbytes: int
    tensor: int | None = None          # the graph tensor it is a piece of (None: a statistic, a fill)
    role: Role | None = None           # a variable's role; None for an op's output
    producer: int | None = None


@dataclass(frozen=True)
class FlowOp:
    """One op of the partitioned forward graph on ``device``: a kernel call of graph node ``node``, or glue
    (``node`` None); ``expansion``: part of an op run by its expansion (its statistics exchange included)."""

    device: int
    op: str
    work: OpWork
    inputs: tuple[int, ...]            # the values it reads, in argument order
    outputs: tuple[int, ...]           # the values it writes
    node: int | None = None
    expansion: bool = False
    to: int | None = None              # the device a piece is cut for (the rewriter's ``__tofu_to__``)
    attrs: tuple = ()                  # what tells it from an op of the same kind reading the same values


@dataclass(frozen=True)
class Dataflow:
    """The partitioned forward graph: values, ops in a topological order, and the values handed out (heads)."""

    values: tuple[FlowValue, ...]
    ops: tuple[FlowOp, ...]
    heads: tuple[int, ...]


class _PlanReplay:
    """The rewriter's gathers (:mod:`tofu.rewrite.comm`) replayed on boxes, from the plan and
    :func:`~tofu.analysis.compose.compose` alone (no MXNet), recording the dataflow (:class:`Dataflow`): every
    value a gather builds on, as the rewriter's symbols do."""

    def __init__(self, graph: Graph, plan):
        from tofu.analysis.compose import coordinates

        self.graph = graph
        self.factors = tuple(s.factor for s in plan.steps)
        self.k = math.prod(self.factors)
        dims = [dict(s.tensor_dims) for s in plan.steps]
        self.dims = {t.id: tuple(d[t.name] for d in dims) for t in graph.tensors}
        steps = [dict(s.op_choices) for s in plan.steps]
        self.choices = {n.id: tuple(c[n.name] for c in steps) for n in graph.nodes}
        self.coords = [coordinates(w, self.factors) for w in range(self.k)]
        self.sent: dict = {}
        self.read: dict = {}
        self.values: list[FlowValue] = []
        self.ops: list[FlowOp] = []
        self.heads: list[int] = []

    def box(self, t: int, w: int):
        from tofu.analysis.compose import held_box

        return held_box(self.graph.tensors[t].shape, self.dims[t], self.factors, w)

    def distance(self, u: int, w: int) -> int:
        if u == w:
            return 0
        first = next(j for j, (a, b) in enumerate(zip(self.coords[u], self.coords[w])) if a != b)
        return len(self.factors) - first

    def value(self, device: int, nbytes: int, tensor: int | None, role: Role | None = None,
              producer: int | None = None) -> int:
        self.values.append(FlowValue(len(self.values), device, int(nbytes), tensor, role, producer))
        return len(self.values) - 1

    def op(self, device: int, op: str, work: OpWork, srcs, out_bytes, tensor: int | None, node: int | None = None,
           expansion: bool = False, to: int | None = None, attrs: tuple = ()) -> tuple[int, ...]:
        """One op of the dataflow; returns the values it writes (one per entry of ``out_bytes``)."""
        outs = tuple(self.value(device, b, tensor, producer=len(self.ops)) for b in out_bytes)
        self.ops.append(FlowOp(device, op, work, tuple(srcs), outs, node, expansion, to, attrs))
        return outs

    def emit(self, device: int, op: str, ins, out, t: int, srcs=(), to: int | None = None) -> int:
        """One glue op (data movement, or an element-wise ``add_n``); returns the value it writes."""
        elements = sum(math.prod(_extent(b)) for b in ins) + math.prod(_extent(out))
        cls = OpClass.ELEMENTWISE if op == "add_n" else OpClass.DATA_MOVEMENT
        work = OpWork(0.0 if cls is OpClass.DATA_MOVEMENT else float(math.prod(_extent(out)) * (len(ins) - 1)),
                      4.0 * elements, cls, frozenset())
        return self.op(device, op, work, srcs, (4 * math.prod(_extent(out)),), t, to=to,
                       attrs=(tuple(ins), out))[0]

    # a held piece: (device, box, key, value); value a _Lazy for a constant's piece made where it is read
    def piece(self, t: int, src, box, dst: int) -> int:
        dev, held, key, value = src
        sent = (t, dev, held, key, box, dst)
        if sent in self.sent:
            return self.sent[sent]
        if isinstance(value, _Lazy):
            value = value.get()
        if box == held and dev == dst:
            return value
        v = self.emit(dev, "_copy" if box == held else "slice", [held], box, t, (value,), to=dst)
        self.sent[sent] = v
        return v

    def gather(self, t: int, held, box, dst: int, data=None) -> int:
        data = box if data is None else data
        if not all(hi > lo for lo, hi in data):
            return self.emit(dst, "_full", [], box, t)
        parts = [h for h in held if _meet(h[1], data) is not None]
        cuts = []
        for d, (lo, hi) in enumerate(data):
            cuts.append(sorted({lo, hi} | {e for h in parts for e in h[1][d] if lo < e < hi}))
        v = self.assemble(t, parts, data, cuts, 0, dst)
        current = list(data)                    # the fill around the data (a halo past the tensor's ends)
        for d, ((lo, hi), (a, b)) in enumerate(zip(box, data)):
            pads = (a > lo) + (b < hi)
            fills = [self.emit(dst, "_full", [], tuple((lo, a) if i == d else r for i, r in enumerate(current)), t)
                     for _ in range(pads)]
            if pads:
                srcs = (fills[:1] if a > lo else []) + [v] + (fills[-1:] if b < hi else [])
                v = self.emit(dst, "Concat", [tuple(current)], tuple((lo, hi) if i == d else r
                                                                     for i, r in enumerate(current)), t, srcs)
            current[d] = (lo, hi)
        return v

    def assemble(self, t, parts, box, cuts, d, dst) -> int:
        if d == len(box):
            return self.cell(t, parts, box, dst)
        edges = [e for e in cuts[d] if box[d][0] <= e <= box[d][1]]
        segments = [tuple((a, b) if i == d else r for i, r in enumerate(box)) for a, b in zip(edges, edges[1:])]
        values = [self.assemble(t, parts, s, cuts, d + 1, dst) for s in segments]
        if len(segments) > 1:
            return self.emit(dst, "Concat", segments, box, t, values)
        return values[0]

    def cell(self, t, parts, cell, dst) -> int:
        covering: dict = {}
        for h in parts:
            if all(a <= c and e <= b for (a, b), (c, e) in zip(h[1], cell)):
                best = covering.get(h[2])
                if best is None or (self.distance(h[0], dst), h[0]) < (self.distance(best[0], dst), best[0]):
                    covering[h[2]] = h
        values = [self.piece(t, h, cell, dst) for _, h in sorted(covering.items())]
        if len(covering) > 1:
            return self.emit(dst, "add_n", [cell] * len(covering), cell, t, values)
        return values[0]

    def run(self) -> None:
        from tofu.analysis.compose import compose
        from tofu.analysis.views import NodeView
        from tofu.graph.ir import LOSS_OPS

        held: dict[int, list] = {}
        owners = parameter_pieces(self.graph, self.factors, self.dims)
        for t in self.graph.tensors:
            if t.producer is None and t.role is not Role.AUX:
                # a parameter's replicas read it from its owner
                boxes = owners[t.id] if t.role is Role.PARAM else [(w, self.box(t.id, w)) for w in range(self.k)]
                held[t.id] = [(w, b, (), self.value(w, 4 * math.prod(_extent(b)), t.id, t.role)) for w, b in boxes]
        self.aux: dict[tuple[int, int], int] = {}
        self.held = held
        self.const = constant_tensors(self.graph)
        self.const_calls: dict[int, tuple] = {}
        self.const_pieces: dict[tuple[int, int], list] = {}    # (tensor, device) -> its pieces made there
        self.const_whole: dict[tuple[int, int], list] = {}     # (tensor, device) -> it made whole there
        self.const_runs: dict[tuple[int, int | None, int], list[int]] = {}
        read = {t for n in self.graph.nodes for t in n.inputs}
        consumed = read | set(self.graph.heads)
        for node in self.graph.nodes:
            calls = compose(NodeView.of(self.graph, node), self.choices[node.id], self.factors)
            if node.outputs and node.outputs[0] in self.const:
                self.const_calls[node.id] = calls       # run where a reader needs it (the rewriter's _constant)
                continue
            results = [self.call(node, call, call.worker) for call in calls]
            for o, t in enumerate(node.outputs):
                if t not in consumed:
                    continue
                produced = [(c.worker, c.outputs[o].box, tuple(self.coords[c.worker][j] for j in c.outputs[o].partial),
                             r[o]) for c, r in zip(calls, results)]
                if node.op in LOSS_OPS:
                    produced = list({(h[1], h[2]): h for h in reversed(produced)}.values())[::-1]
                gathered = [(w, self.box(t, w), (), self.gather(t, produced, self.box(t, w), w)) for w in range(self.k)]
                # a graph output no op reads is handed out as computed (the rewriter moves nothing for it)
                handed = produced if t not in read and all(not h[2] for h in produced) else gathered
                held[t] = gathered
                if t in self.graph.heads:
                    boxes: set = set()
                    for h in handed:
                        if h[1] not in boxes:
                            boxes.add(h[1])
                            self.heads.append(h[3])

    def call(self, node, call, device: int, own: bool | None = None) -> list[int]:
        """Worker ``call.worker``'s call of ``node`` run on ``device`` (itself, or a device that makes a
        constant's piece it reads): its inputs gathered there, the kernel and its kept part; returns its outputs.
        A constant's call run on another device than its worker's, or made whole (``own`` False), is named apart
        by the rewriter (not a kernel call of the node; glue when its op is one)."""
        from tofu.sim.flops import op_call_work

        first = self.graph.tensors[node.outputs[0]]
        item = first.nbytes // max(1, first.size)
        args = []
        for p in call.inputs:
            t = node.inputs[p.input]
            if p.zeroed:
                args.append(self.emit(device, "_zeros", [], p.box, t))
            elif self.graph.tensors[t].role is not Role.AUX:     # assembled once per (region, device), shared
                key = (t, p.box, device, p.data, p.fill)            # by its readers there (the rewriter's)
                if key not in self.read:
                    self.read[key] = self.gather(t, self.constant(t, device, p.box) if t in self.const
                                                 else self.held[t], p.box, device, p.data)
                args.append(self.read[key])
            else:       # an auxiliary state: a variable of the box the call reads, on its device
                if (t, device) not in self.aux:
                    self.aux[(t, device)] = self.value(device, 4 * math.prod(_extent(p.box)), t, Role.AUX)
                args.append(self.aux[(t, device)])
        ins = tuple(_extent(p.box) for p in call.inputs)
        outs = tuple(_extent(o.box) for o in call.outputs)
        own = call.worker == device if own is None else own
        work = op_call_work(node.op, call.attrs, ins, outs, item) if own else \
            _work(node.op, call.attrs.to_mxnet(), ins, outs, op_call_work)
        args = [a for a, p in zip(args, call.inputs) if p.read]     # an expansion's unread inputs
        out = list(self.op(device, node.op, work, args, [item * math.prod(s) for s in outs],
                           node.outputs[0], node.id if own else None, call.expansion))
        if not call.expansion:
            for o, box in enumerate(call.keep or ()):
                out[o] = self.emit(device, "slice", [call.outputs[o].box], box, node.outputs[o], (out[o],))
            if call.scale != 1.0:
                for o, piece in enumerate(call.outputs):
                    out[o] = self.emit(device, "_mul_scalar", [piece.box], piece.box, node.outputs[0], (out[o],))
        return out

    def constant(self, t: int, device: int, region) -> list:
        """The pieces of the constant tensor t as its producer's calls make them, each run on ``device`` when a
        gather there first reads it (the rewriter's ``_constant``: the device's own call first); when
        ``region`` is all of it, the producer run whole there instead (the rewriter's ``_whole_constant``)."""
        from tofu.analysis.compose import whole_box

        tensor = self.graph.tensors[t]
        node = self.graph.nodes[tensor.producer]
        o = tensor.output_index
        if region == whole_box(tensor.shape):
            if (t, device) not in self.const_whole:
                self.const_whole[(t, device)] = [
                    (device, region, (), _Lazy(lambda: self.run_constant(node, None, device)[o]))]
            return self.const_whole[(t, device)]
        if (t, device) not in self.const_pieces:
            calls = sorted(self.const_calls[node.id], key=lambda c: c.worker != device)
            self.const_pieces[(t, device)] = [
                (device, c.outputs[o].box, tuple(self.coords[c.worker][j] for j in c.outputs[o].partial),
                 _Lazy(lambda c=c: self.run_constant(node, c, device)[o])) for c in calls]
        return self.const_pieces[(t, device)]

    def run_constant(self, node, call, device: int) -> list[int]:
        """``call`` of the constant op ``node`` run on ``device``; None: the op whole (named apart, as glue)."""
        from tofu.analysis.compose import whole_call
        from tofu.analysis.views import NodeView

        key = (node.id, call.worker if call is not None else None, device)
        if key not in self.const_runs:
            self.const_runs[key] = self.call(node, call, device) if call is not None else \
                self.call(node, whole_call(NodeView.of(self.graph, node)), device, own=False)
        return self.const_runs[key]

    def dataflow(self) -> Dataflow:
        """The dataflow of the last :meth:`run`."""
        return Dataflow(tuple(self.values), tuple(self.ops), tuple(self.heads))


class _Lazy:
    """A held piece's value made when a gather first reads it (a constant's piece, made where it is read)."""

    def __init__(self, build):
        self._build, self._value = build, None

    def get(self) -> int:
        if self._value is None:
            self._value = self._build()
        return self._value


def _extent(box) -> tuple[int, ...]:
    return tuple(b - a for a, b in box)


def _meet(a, b):
    out = tuple((max(x, u), min(y, v)) for (x, y), (u, v) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def dataflow_from_plan(graph: Graph, plan) -> Dataflow:
    """The partitioned forward graph of ``graph`` under ``plan`` as the rewriter builds it, without MXNet: every
    worker's kernel call (:func:`~tofu.analysis.compose.compose`, its work from
    :func:`tofu.sim.flops.op_call_work`), every glue op around them, each reading the values it reads. An op run
    by its expansion is one call of the op on its pieces (``expansion`` set): its statistics exchange is left
    out."""
    replay = _PlanReplay(graph, plan)
    replay.run()
    return replay.dataflow()
