"""Stage 4 of the pipeline: Graph + Plan -> one partitioned forward MXNet Symbol over k devices.

Input: a :class:`~tofu.graph.ir.Graph` and a :class:`~tofu.search.plan.Plan` (any number of recursion steps).
Output: a :class:`PartitionedGraph`: the symbol, whose every op runs once per device under ``ctx_group``
``dev{i}`` with MXNet's own kernel on its shard, and the shard variables it reads.

Every op of the graph becomes one op per device, called as :func:`tofu.analysis.compose.compose` says (the
attributes the analysis derived, the pieces of its inputs). Every tensor is held as the plan says: device w
holds the box of it that the plan's cuts give w (:func:`~tofu.analysis.compose.held_box`); an op's input piece
that its device does not hold is gathered from the holders (:mod:`tofu.rewrite.comm`), and each op's outputs
are turned into the held boxes (partial results reduce-scattered: each device sums its own slice). A graph
output that no op reads is handed out as its devices computed it (one copy of each piece of a loss), not
moved, unless it is left in partial sums. A constant (:mod:`tofu.search.constants`: a causal mask, a zero begin
state) is never moved: a device that reads a region of it runs, itself, the calls of its producer whose pieces
the region meets (their constant inputs likewise), and reads the region from them; a device that reads all of
it runs its producer whole (as MXNet's data parallelism does), not the pieces.

Shard variables (the naming scheme): ``{tensor}@dev{w}`` is device w's box of ``tensor``. A parameter has one
variable per distinct box, on the box's owner among the devices holding it (:mod:`tofu.search.owners`: spread
over the devices as MXNet's device kvstore spreads its keys; the other holders of a replicated parameter read it
from there, and their gradients are summed there); data and labels have one on every device (replicas are fed
the same values); an auxiliary state has one on every device whose op reads it, with the box that op reads.
MXNet derives the backward pass and runs each backward op on its forward op's device.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass

import mxnet as mx
import numpy as np

from tofu import registry
from tofu.analysis.compose import Box, InputPiece, compose, coordinates, held_box, whole_box as _whole_box, whole_call
from tofu.analysis.views import NodeView
from tofu.errors import RewriteError, TofuError
from tofu.graph.gradients import NO_GRADIENT_OPS, ZERO_GRADIENT_INPUTS
from tofu.graph.ir import LOSS_OPS, Graph, Node, Role
from tofu.graph.single_op import json_op_function
from tofu.rewrite.comm import Fabric, Held, Lazy, box_shape, intersect, scope
from tofu.rewrite.machines import MachineStat, machine_mean
from tofu.search.constants import constant_tensors
from tofu.search.owners import parameter_pieces
from tofu.search.plan import Plan
from tofu.tdl.describe import typed_attrs


@dataclass(frozen=True)
class ShardVar:
    """A variable of the partitioned symbol: device ``device``'s box of tensor ``tensor``."""

    name: str
    tensor: str
    device: int
    box: Box
    role: Role

    @property
    def shape(self) -> tuple[int, ...]:
        return box_shape(self.box)


@dataclass(frozen=True)
class HeadPiece:
    """Output ``output`` of the partitioned symbol: device ``device``'s box of the graph output ``tensor``."""

    tensor: str
    device: int
    box: Box
    output: int


@dataclass(frozen=True)
class PartitionedGraph:
    symbol: mx.sym.Symbol
    workers: int
    variables: tuple[ShardVar, ...]
    heads: tuple[HeadPiece, ...]
    machine_stats: tuple[MachineStat, ...] = ()     # statistics averaged over machines (hybrid training)
    unread: tuple[ShardVar, ...] = ()
    """Parameter pieces no op of the symbol reads (a slice leaves a layer's outputs unread): not variables of the
    symbol, their gradient MXNet's zero, so a trainer holds them unchanged, as one device's SGD leaves them."""

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {v.name: v.shape for v in self.variables}


def apply_plan(graph: Graph, plan: Plan, machine_sync: frozenset[str] = frozenset()) -> PartitionedGraph:
    """The partitioned forward symbol of ``graph`` under ``plan``.

    ``machine_sync`` names the ops whose statistics are averaged over the machines of a hybrid run (one machine
    of several each training ``graph`` on its share of the global batch; :mod:`tofu.rewrite.machines`): each
    runs its expansion on every device, whatever the plan chose, every exchanged statistic then averaged.

    Raises:
        RewriteError: the plan does not fit the graph, or an op's shard cannot be built.
    """
    unknown = sorted(set(machine_sync) - {n.name for n in graph.nodes})
    if unknown:
        raise RewriteError(f"model '{graph.name}' has no op '{unknown[0]}' to average over machines")
    try:
        return _Rewriter(graph, plan, frozenset(machine_sync)).run()
    except RewriteError:
        raise
    except TofuError as e:
        raise RewriteError(str(e)) from None


class _Rewriter:
    def __init__(self, graph: Graph, plan: Plan, machine_sync: frozenset[str] = frozenset()):
        self.graph, self.machine_sync = graph, machine_sync
        self.machine_stats: list[MachineStat] = []
        self.factors = tuple(s.factor for s in plan.steps)
        self.k = math.prod(self.factors)
        if self.k != plan.workers:
            raise RewriteError(f"the plan's cuts multiply to {self.k}, not its {plan.workers} workers")
        try:
            step_dims = [dict(s.tensor_dims) for s in plan.steps]
            step_choices = [dict(s.op_choices) for s in plan.steps]
            self.dims = {t.id: tuple(d[t.name] for d in step_dims) for t in graph.tensors}
            self.choices = {n.id: tuple(c[n.name] for c in step_choices) for n in graph.nodes}
        except KeyError as e:
            raise RewriteError(f"the plan does not cover {e} of model '{graph.name}'") from None
        self.coords = [coordinates(w, self.factors) for w in range(self.k)]
        self.parameters = parameter_pieces(graph, self.factors, self.dims)
        self.fabric = Fabric(self._distance, {t.name: t.dtype for t in graph.tensors if t.dtype != "float32"})
        self.held: dict[int, list[Held]] = {}
        self.variables: list[ShardVar] = []
        self._aux: dict[tuple[int, int], tuple[Box, object]] = {}
        self.read = {t for n in graph.nodes for t in n.inputs}
        self.consumed = self.read | set(graph.heads)
        self.const = constant_tensors(graph)
        self._const_calls: dict[int, tuple] = {}         # per constant node id: its view's calls
        self._const_pieces: dict[tuple[int, int], list[Held]] = {}
        self._const_runs: dict[tuple[int, int | None, int], list] = {}
        self._const_whole: dict[tuple[int, int], list[Held]] = {}
        self._read: dict[tuple, object] = {}     # (tensor, box, device, data, fill) -> the symbol its readers share

    def _distance(self, u: int, w: int) -> int:
        """0 for the same device; else the number of steps below the first one that separates them."""
        if u == w:
            return 0
        first = next(j for j, (a, b) in enumerate(zip(self.coords[u], self.coords[w])) if a != b)
        return len(self.factors) - first

    def box(self, t: int, w: int) -> Box:
        return held_box(self.graph.tensors[t].shape, self.dims[t], self.factors, w)

    def run(self) -> PartitionedGraph:
        for t in self.graph.tensors:
            if t.producer is None and t.role is not Role.AUX:
                self._variables(t.id)
        for node in self.graph.nodes:
            self._node(node)
        heads, outputs = [], []
        for t in dict.fromkeys(self.graph.heads):
            seen = set()
            for h in self.held[t]:
                if h.box not in seen:
                    seen.add(h.box)
                    heads.append(HeadPiece(self.graph.tensors[t].name, h.device, h.box, len(outputs)))
                    outputs.append(h.symbol)
        symbol = _place_ungrouped(mx.sym.Group(outputs))
        used = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
        return PartitionedGraph(symbol, self.k, tuple(v for v in self.variables if v.name in used), tuple(heads),
                                tuple(self.machine_stats),
                                tuple(v for v in self.variables if v.name not in used and v.role is Role.PARAM))

    # ------------------------------------------------------------------------------------------ variables
    def _var(self, t: int, w: int, box: Box):
        tensor = self.graph.tensors[t]
        name = f"{tensor.name}@dev{w}"
        self.variables.append(ShardVar(name, tensor.name, w, box, tensor.role))
        dtype = None if tensor.dtype == "float32" else tensor.dtype         # int32 lengths keep their type
        attr = {"__ctx_group__": f"dev{w}"}
        if tensor.lr_mult != 1.0:                       # the trainer scales the shard's update by it
            attr["__lr_mult__"] = repr(tensor.lr_mult)
        return mx.sym.var(name, shape=box_shape(box), dtype=dtype, attr=attr)

    def _variables(self, t: int) -> None:
        pieces = self.parameters[t] if self.graph.tensors[t].role is Role.PARAM else \
            [(w, self.box(t, w)) for w in range(self.k)]      # a parameter's replicas read it from its owner
        self.held[t] = [Held(w, box, (), self._var(t, w, box)) for w, box in pieces]

    def _aux_input(self, t: int, w: int, piece: InputPiece):
        if piece.box != piece.data:
            raise RewriteError(f"auxiliary state '{self.graph.tensors[t].name}' is read past its ends")
        if (t, w) in self._aux:
            box, sym = self._aux[(t, w)]
            if box != piece.box:
                raise RewriteError(f"auxiliary state '{self.graph.tensors[t].name}' is read as two boxes on "
                                   f"device {w}")
            return sym
        sym = self._var(t, w, piece.box)
        self._aux[(t, w)] = (piece.box, sym)
        return sym

    # ------------------------------------------------------------------------------------------------ ops
    def _inputs(self, node: Node, call) -> list:
        w = call.worker
        args = []
        for piece in call.inputs:
            t = node.inputs[piece.input]
            tensor = self.graph.tensors[t]
            if piece.zeroed:
                with scope(w):
                    args.append(mx.sym.zeros(shape=box_shape(piece.box), dtype=tensor.dtype,
                                             name=self.fabric.name(f"zeros@dev{w}")))
            elif tensor.role is Role.AUX:
                args.append(self._aux_input(t, w, piece))
            else:
                args.append(self._read_input(t, w, piece))
        return args

    def _read_input(self, t: int, w: int, piece) -> object:
        """``piece`` of tensor t on device w, assembled once and shared by every op there that reads it (the
        timesteps of an RNN layer reading its weights): one Concat per (region, device), not one per reader."""
        key = (t, piece.box, w, piece.data, piece.fill)
        if key not in self._read:
            name = self.graph.tensors[t].name
            if t in self.const:
                whole = piece.box == _whole_box(self.graph.tensors[t].shape)
                self._read[key] = self.fabric.gather(name, self._whole_constant(t, w) if whole else
                                                     self._constant(t, w), piece.box, w, piece.data,
                                                     piece.fill, reducer=self._const_reducer(t))
            else:
                self._read[key] = self.fabric.gather(name, self.held[t], piece.box, w, piece.data, piece.fill)
        return self._read[key]

    def _node(self, node: Node) -> None:
        view = NodeView.of(self.graph, node)
        try:
            calls = compose(view, self.choices[node.id], self.factors)
        except TofuError as e:
            raise RewriteError(f"node '{node.name}' ({node.op}): {e}") from None
        if node.outputs and node.outputs[0] in self.const:
            self._const_calls[node.id] = calls      # run where a reader needs it (_constant)
            return
        if any(c.expansion for c in calls) or node.name in self.machine_sync:
            results = self._expansion(node, view, calls)
        else:
            results = []
            fn = _op_function(node.op)
            for call in calls:
                args = self._inputs(node, call)
                with scope(call.worker):
                    sym = fn(*args, name=f"{node.name}@dev{call.worker}", **call.attrs.to_mxnet())
                n_visible = len(sym.list_outputs())
                results.append(_kept([sym[o] if n_visible > 1 else sym for o in range(n_visible)], call,
                                     f"{node.name}@dev{call.worker}"))
        for o, t in enumerate(node.outputs):
            if t not in self.consumed:
                continue
            if o >= len(results[0]):
                raise RewriteError(f"node '{node.name}': output {o} is read but MXNet hides it")
            produced = [Held(c.worker, c.outputs[o].box, tuple(self.coords[c.worker][j] for j in c.outputs[o].partial),
                             r[o]) for c, r in zip(calls, results)]
            if node.op in LOSS_OPS:
                produced = _one_replica(node, produced)
            if t not in self.read and all(not h.key for h in produced):
                self.held[t] = produced     # a graph output no op reads: handed out as computed, not moved
                continue
            reducer = calls[0].outputs[o].reducer or "sum"
            name = self.graph.tensors[t].name
            self.held[t] = [Held(w, self.box(t, w), (), self.fabric.gather(name, produced, self.box(t, w), w,
                                                                              reducer=reducer))
                            for w in range(self.k)]

    # ------------------------------------------------------------------------------------------ constants
    def _constant(self, t: int, w: int) -> list[Held]:
        """The pieces of the constant tensor t as the plan's calls of its producer make them, each computed on
        device w when a gather there first reads it (a :class:`~tofu.rewrite.comm.Lazy` symbol): a region of a
        constant is made where it is read, from the calls whose pieces it meets, never sent."""
        key = (t, w)
        if key not in self._const_pieces:
            tensor = self.graph.tensors[t]
            node = self.graph.nodes[tensor.producer]
            o = tensor.output_index
            self._const_pieces[key] = [
                Held(w, c.outputs[o].box, tuple(self.coords[c.worker][j] for j in c.outputs[o].partial),
                     Lazy(lambda c=c: self._run_constant(node, c, w)[o]))
                for c in sorted(self._const_calls[node.id], key=lambda c: c.worker != w)]   # w's own first
        return self._const_pieces[key]

    def _whole_constant(self, t: int, w: int) -> list[Held]:
        """The constant tensor t whole, for a reader on device w that reads all of it: its producer run
        unpartitioned there (its constant inputs likewise) when a gather first reads it, as MXNet's own data
        parallelism computes it on every device, rather than the plan's pieces assembled."""
        key = (t, w)
        if key not in self._const_whole:
            tensor = self.graph.tensors[t]
            node = self.graph.nodes[tensor.producer]
            self._const_whole[key] = [Held(w, _whole_box(tensor.shape), (),
                                           Lazy(lambda: self._run_constant(node, None, w)[tensor.output_index]))]
        return self._const_whole[key]

    def _const_reducer(self, t: int) -> str:
        tensor = self.graph.tensors[t]
        return self._const_calls[tensor.producer][0].outputs[tensor.output_index].reducer or "sum"

    def _run_constant(self, node: Node, call, w: int) -> list:
        """Worker ``call.worker``'s call of the constant op ``node``, run on device w (its inputs, constant too,
        made there): named as w's own call when it is, else ``{node}@dev{w}<{worker}``; ``call`` None: the op
        run whole, ``{node}@dev{w}<all``."""
        key = (node.id, call.worker if call is not None else None, w)
        if key not in self._const_runs:
            if call is None:
                here, name = dataclasses.replace(whole_call(NodeView.of(self.graph, node)), worker=w), \
                    f"{node.name}@dev{w}<all"
            else:
                here = dataclasses.replace(call, worker=w)
                name = f"{node.name}@dev{w}" if call.worker == w else f"{node.name}@dev{w}<{call.worker}"
            args = self._inputs(node, here)
            with scope(w):
                sym = _op_function(node.op)(*args, name=name, **here.attrs.to_mxnet())
            n_visible = len(sym.list_outputs())
            self._const_runs[key] = _kept([sym[o] if n_visible > 1 else sym for o in range(n_visible)], here, name)
        return self._const_runs[key]

    def _shape(self, symbol) -> tuple[int, ...] | None:
        """The shape of a symbol built so far (a statistic inside an expansion), from the shard variables'."""
        known = {v.name: v.shape for v in self.variables}
        try:
            _, out, _ = symbol.infer_shape_partial(**{a: known[a] for a in symbol.list_arguments() if a in known})
        except mx.base.MXNetError:
            return None
        return tuple(out[0]) if out and out[0] and all(out[0]) else None

    def _expansion(self, node: Node, view: NodeView, calls) -> list[list]:
        """The op's declared expansion, the statistics combined over the workers that differ only at the
        steps that exchange them."""
        expand = registry.expansion(node.op)
        if expand is None:
            raise RewriteError(f"node '{node.name}' ({node.op}) exchanges statistics but has no expansion")
        steps = calls[0].exchange_steps
        if any(c.exchange_steps != steps for c in calls):
            raise RewriteError(f"node '{node.name}': workers differ in the steps that exchange statistics")
        if any(c.keep is not None or c.scale != 1.0 for c in calls):      # a kernel's form, forced (machine_sync)
            raise RewriteError(f"node '{node.name}' ({node.op}): its shards cannot run its expansion")
        attrs = typed_attrs(type(view.describe().attrs), calls[0].attrs, node.op)
        groups: dict[tuple, list] = {}
        for c in calls:
            key = tuple(x for j, x in enumerate(self.coords[c.worker]) if j not in steps)
            groups.setdefault(key, []).append(c)
        results: dict[int, list] = {}
        for members in groups.values():
            devices = [c.worker for c in members]
            pieces = [self._inputs(node, c) for c in members]
            shapes = [[box_shape(p.box) for p in c.inputs] for c in members]
            origins = [[tuple(lo for lo, _ in p.box) for p in c.inputs] for c in members]
            outs = expand(pieces, shapes, attrs,
                          lambda parts, reducer="sum", d=devices: self._allreduce(node, parts, d, reducer), origins)
            for c, out in zip(members, outs):
                results[c.worker] = list(out)
        return [results[c.worker] for c in calls]


    def _allreduce(self, node: Node, parts: list, devices: list[int], reducer: str) -> list:
        """Every device's copy of the ``reducer`` of a statistic's parts over ``devices``, then, for an op
        synchronised over machines, the mean of each copy over the machines."""
        out = self.fabric.allreduce(parts, devices, reducer, self._shape(parts[0])) if len(devices) > 1 \
            else list(parts)
        if node.name not in self.machine_sync:
            return out
        if reducer != "sum":
            raise RewriteError(f"node '{node.name}' ({node.op}): a '{reducer}' statistic cannot be averaged "
                               f"over machines")
        params = {v.name for v in self.variables if v.role is Role.PARAM}
        synced = []
        for dev, x in zip(devices, out):
            shape = self._shape(x)
            if shape is None:
                raise RewriteError(f"node '{node.name}': the shape of a statistic is unknown")
            key = f"{node.name}#{sum(s.key.startswith(node.name + '#') for s in self.machine_stats)}@dev{dev}"
            self.machine_stats.append(MachineStat(key, shape, _differentiable_in(x, params)))
            with scope(dev):
                synced.append(machine_mean(x, key))
        return synced


def _differentiable_in(symbol, params: set[str]) -> bool:
    """Whether ``symbol`` depends on one of ``params`` through ops that pass gradients (MXNet then runs the
    backward pass of what reads it)."""
    doc = json.loads(symbol.tojson())
    nodes, heads = doc["nodes"], doc["heads"]
    stack, seen = [h[0] for h in heads], set()
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        node = nodes[i]
        if node["op"] == "null":
            if node["name"] in params:
                return True
        elif node["op"] not in NO_GRADIENT_OPS:
            stack.extend(j[0] for p, j in enumerate(node["inputs"])
                          if p not in ZERO_GRADIENT_INPUTS.get(node["op"], ()))
    return False


def _kept(outputs: list, call, name: str) -> list:
    """The worker's part of a kernel's outputs: the box ``call.keep`` of each (a kernel that computed more than
    the part, a halo split run on the region with its halo), times ``call.scale`` (the partial of a mean);
    built on the worker's device."""
    if call.keep is None and call.scale == 1.0:
        return outputs
    out = []
    with scope(call.worker):
        for o, x in enumerate(outputs):
            if call.keep is not None and o < len(call.keep):
                box = call.keep[o]
                x = mx.sym.slice(x, begin=tuple(a for a, _ in box), end=tuple(b for _, b in box),
                                 name=f"{name}_keep{o}")
            if call.scale != 1.0:
                x = mx.sym._internal._mul_scalar(x, scalar=call.scale, name=f"{name}_scale{o}")
            out.append(x)
    return out


def _one_replica(node: Node, produced: list[Held]) -> list[Held]:
    """One copy of each piece of a loss op's output: every copy that is read injects the whole loss gradient
    of what it computed, so devices that compute the same piece (a loss computed whole) read the first's."""
    first: dict[tuple, Held] = {}
    for h in produced:
        first.setdefault((h.box, h.key), h)
    kept = list(first.values())
    for i, a in enumerate(kept):
        for b in kept[i + 1:]:
            if a.key == b.key and intersect(a.box, b.box) is not None:
                raise RewriteError(f"node '{node.name}' ({node.op}): devices {a.device} and {b.device} compute "
                                   f"overlapping parts of a loss; its gradient would be counted twice")
    return kept


def _op_function(op: str):
    numpy = op.startswith(("_np_", "_npi_", "_npx_"))     # their mx.sym functions take numpy symbols only
    fn = None if numpy else getattr(mx.sym, op, None) or getattr(mx.sym._internal, op, None)
    if fn is None and op.startswith("_np_") and _same_op(op, op[4:]):
        fn = getattr(mx.sym, op[4:], None)    # a numpy operator's legacy alias (_np_cumsum: mx.sym.cumsum)
    if fn is None and not numpy and op.startswith("_"):   # _contrib_X, _image_X: mx.sym.contrib.X, mx.sym.image.X
        namespace, _, name = op[1:].partition("_")
        module = getattr(mx.sym, namespace, None)
        fn = getattr(module, name, None) if isinstance(module, types.ModuleType) else None
    if fn is None and _same_op(op, op):
        fn = json_op_function(op)
    if fn is None:
        raise RewriteError(f"MXNet has no symbol function for operator '{op}'")
    return fn


def _same_op(a: str, b: str) -> bool:
    """Whether MXNet registers the names ``a`` and ``b`` for one operator (one is the other's alias)."""
    import ctypes

    from mxnet.base import OpHandle, _LIB, c_str

    handles = []
    for name in (a, b):
        h = OpHandle()
        if _LIB.NNGetOpHandle(c_str(name), ctypes.byref(h)) != 0:
            return False
        handles.append(h.value)
    return handles[0] is not None and handles[0] == handles[1]


def _place_ungrouped(symbol: mx.sym.Symbol) -> mx.sym.Symbol:
    """Puts every op that was built without a device (inside an expansion) on the device of its first input
    (for a piece sent to another device, that device), and every variable built so (an expansion's own
    constant) on the device of its first reader, explicitly, rather than leaving it to MXNet's placement."""
    doc = json.loads(symbol.tojson())
    groups: list[str | None] = []
    readers: list[str | None] = []        # where a node's output is read: a piece sent (``__tofu_to__``) elsewhere
    changed = False
    for jn in doc["nodes"]:
        attrs = jn.setdefault("attrs", {})
        group = attrs.get("__ctx_group__")
        if group is None and jn["op"] != "null":
            group = next((readers[i[0]] for i in jn["inputs"] if readers[i[0]] is not None), None)
            if group is not None:
                attrs["__ctx_group__"] = group
                changed = True
        groups.append(group)
        readers.append(attrs.get("__tofu_to__", group))
    for jn, group in zip(doc["nodes"], groups):
        for i in jn["inputs"]:
            var = doc["nodes"][i[0]]
            if var["op"] == "null" and groups[i[0]] is None and group is not None:
                var["attrs"]["__ctx_group__"] = groups[i[0]] = group
                changed = True
    return mx.sym.load_json(json.dumps(doc)) if changed else symbol


def shard_values(pg: PartitionedGraph, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every shard variable's value, cut from the whole tensors ``values`` (tensor name -> array)."""
    return {v.name: values[v.tensor][tuple(slice(a, b) for a, b in v.box)] for v in pg.variables}


def gather_values(pg: PartitionedGraph, shards: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole tensors whose shard variables are in ``shards`` (variable name -> array), reassembled in float32,
    or in float64 where its shards are float64 (a float64 binding's, ``tofu run --check``'s second opinion)."""
    extents: dict[str, list[int]] = {}
    dtypes: dict[str, np.dtype] = {}
    every = (*pg.variables, *pg.unread)
    for v in every:
        if v.name in shards:
            ends = extents.setdefault(v.tensor, [0] * len(v.box))
            for d, (_, b) in enumerate(v.box):
                ends[d] = max(ends[d], b)
            if np.asarray(shards[v.name]).dtype == np.float64:
                dtypes[v.tensor] = np.float64
    out = {t: np.zeros(e, dtype=dtypes.get(t, np.float32)) for t, e in extents.items()}
    for v in every:
        if v.name in shards:
            out[v.tensor][tuple(slice(a, b) for a, b in v.box)] = shards[v.name]
    return out
