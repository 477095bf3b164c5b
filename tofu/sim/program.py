"""The program one training iteration runs: every task of the partitioned graph, forward, backward and update.

Input: the partitioned forward graph as a :class:`~tofu.sim.glue.Dataflow`, from either of two readers:

* :func:`dataflow_from_symbol`: the MXNet symbol :func:`tofu.api.partitioned` builds (the small models: every
  node of the JSON the executor binds, its device from ``__ctx_group__``, its shapes from MXNet's inference);
* :func:`tofu.sim.glue.dataflow_from_plan`: the same graph replayed from the plan alone, without MXNet (the
  paper-size models: :func:`~tofu.analysis.compose.compose`'s kernel calls and the rewriter's gathers).

Output: a :class:`Program`, a frozen value: its :class:`Task` list (in a topological order; ids are positions)
and the :class:`Tensor` values the tasks read and write. :func:`build_program` is the one construction both
readers share. It does what MXNet does to the forward graph when it binds it for training:

1. **Common expressions** (``src/executor/eliminate_common_expr_pass.cc``, on by MXNet's default, off under
   tofu: :func:`eliminates_common_expressions`): an op reading the same values as an earlier op of the same
   kind, attributes and device is dropped, its readers reading the earlier op's outputs. **Dead code**: only the ops the heads depend on run.
2. **Gradient** (``src/nnvm/gradient.cc`` of MXNet 1.9.1). In reverse topological order, an op gets a backward
   when some input needs a gradient (a parameter, or computed from one through ops other than a loss,
   ``BlockGrad``, ``one_hot`` and fills) and an output has an adjoint (a loss op always has: its backward
   injects the loss gradient), or only MXNet's zero gradient reaches its outputs and its backward runs on it
   (:func:`gives_gradient`: a concat, a FullyConnected; through most ops a zero passes back, and no
   contribution is written for it). The backward node runs on the forward op's device (it carries the
   forward's ``__ctx_group__``), reads the output adjoints and the forward tensors it keeps
   (:data:`tofu.graph.memory.RULES`; index-only glue keeps none), and writes one gradient per input that
   needs one. Two ops have no backward node:
   ``elemwise_add`` hands its adjoint to both inputs (``CloneGradient``), ``add_n`` through an ``identity`` per
   input on the adjoint's device (``ElementWiseSumGrad``). The contributions to one entry's adjoint are summed
   (``AggregateGradient`` of ``src/executor/graph_executor.cc``) on the device of the first one (a parameter's
   on its own device, where its gradient array lives): by one ``ElementWiseSum`` once all are written when
   there are fewer than ``MXNET_EXEC_INPLACE_GRAD_SUM_CAP`` (:func:`grad_sum_cap`: tofu's runtime raises it to
   1000000, docs/runtime.md; MXNet's default is 8), else by a chain of in-place ``_grad_add`` as they come (each
   contribution's writer waits for the sum so far: MXNet's control dependency) and an ``identity``. Not
   modelled: the zeros MXNet feeds as the adjoint of an op's hidden output (``_zeros_without_dtype``, max
   pooling's mask: one tiny op per call).
3. **Copies** (nnvm's ``PlaceDevice``). Every tensor read by a task on another device is copied once per
   (tensor, destination device): one ``_CrossDeviceCopy`` task, forward or backward, whose readers on that
   device read the copy.
4. **Update.** SGD with momentum on each parameter shard, on its device, after its gradient (what
   :class:`tofu.runtime.train.Trainer` pushes after ``backward()``): reads weight, gradient and momentum and
   writes weight and momentum, 5 x 4 bytes and 4 FLOPs per element (:data:`tofu.sim.flops.UPDATE_BYTES_PER_ELEMENT`).
   With ``replicas`` (how ``tofu run`` binds the graph, :mod:`tofu.runtime.replicas`), each route of a whole
   parameter shard to another device is a variable there instead (no forward copy), and after the backward
   pass the runtime's exchange runs: per group of shards, each replica device's gradients copied to the shards'
   device in turn and added, one update per device over all its shards, then the weights copied to the
   replicas (the next iteration's; here after the tasks that read them).

Work. A forward kernel call's work is :func:`tofu.sim.flops.op_call_work` on its shapes; its backward's is
:func:`tofu.sim.flops.backward_work` (the contraction's adjoints, twice the bytes), with the inputs that have
a gradient in the graph, as :func:`tofu.sim.flops.backward_work` costs it. A glue op's backward (a slice's scatter, a concat's
split) is its own work with twice the bytes; a gradient sum reads its n inputs and writes one, n - 1 FLOPs
per element.

What the two readers differ in: an op run by its expansion (BatchNorm split along the batch) is, read from the
symbol, the expansion's own MXNet ops and its statistics exchange (two all-reduces of a per-channel vector
forward, their adjoints backward); replayed from the plan, one call of the op on its pieces, no exchange.
Every task that is, reads from, or feeds such an op has :attr:`Origin.EXPANSION`; all other tasks are equal
(tests/sim/test_program.py, which also checks the symbol's program against the nodes and the copies of MXNet's
bound executor).
"""
from __future__ import annotations

import enum
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from tofu.errors import TofuError
from tofu.graph.gradients import contributions, expansion_gradients, gives_gradient, needing
from tofu.graph.ir import LOSS_OPS, Graph, Role
from tofu.sim.flops import OpClass
from tofu.sim.glue import Dataflow, FlowOp, FlowValue, _device, _shapes, _work, dataflow_from_plan
from tofu.sim.flops import UPDATE_BYTES_PER_ELEMENT, UPDATE_FLOPS_PER_ELEMENT, backward_work, op_call_work

MXNET_GRAD_SUM_CAP = 8
"""MXNet's default ``MXNET_EXEC_INPLACE_GRAD_SUM_CAP`` (``src/executor/graph_executor.cc``, 1.9.1): fewer
contributions are summed by one ``ElementWiseSum``, more by a chain of in-place ``_grad_add``."""


def grad_sum_cap() -> int:
    """The cap MXNet reads in this process: ``MXNET_EXEC_INPLACE_GRAD_SUM_CAP``, which importing ``tofu`` sets to
    1000000 unless the user set it (the runtime sums every gradient out of place: docs/runtime.md), else
    MXNet's default :data:`MXNET_GRAD_SUM_CAP`."""
    return int(os.environ.get("MXNET_EXEC_INPLACE_GRAD_SUM_CAP", MXNET_GRAD_SUM_CAP))

def eliminates_common_expressions() -> bool:
    """Whether MXNet eliminates common expressions in this process: ``MXNET_ELIMINATE_COMMON_EXPR``, which
    importing ``tofu`` sets to 0 unless the user set it (each device computes its own ops:
    docs/runtime.md); MXNet's default is on."""
    return os.environ.get("MXNET_ELIMINATE_COMMON_EXPR", "1") != "0"


_PASS_THROUGH = frozenset({"elemwise_add", "_plus", "_Plus", "_add"})
"""Ops whose gradient is the output's adjoint itself, no backward node (MXNet's ``CloneGradient``)."""

_BACKWARD_OP = {"_copy": "_copy", "identity": "_copy", "_plus_scalar": "_copy", "_minus_scalar": "_copy",
                "Flatten": "_backward_copy", "flatten": "_backward_copy", "Reshape": "_backward_reshape",
                "reshape": "_backward_reshape", "elemwise_mul": "_backward_mul", "elemwise_sub": "_backward_sub",
                "elemwise_div": "_backward_div", "_mul_scalar": "_backward_mul_scalar",
                "_div_scalar": "_backward_div_scalar", "transpose": "transpose",
                "expand_dims": "_backward_reshape", "batch_dot": "batch_dot"}
"""The MXNet op of a forward op's backward node where it is not ``_backward_<op>`` (its FGradient)."""


def backward_op(op: str) -> str:
    """The MXNet op of ``op``'s backward node (what a backward task's ``op`` names)."""
    return _BACKWARD_OP.get(op, f"_backward_{op}")

_BACKWARD_PER_INPUT = frozenset({"batch_dot"})
"""Ops whose FGradient builds one node per input gradient (``batch_dot``: one ``batch_dot`` each)."""

_INDEX_ONLY = frozenset({"slice", "slice_axis", "Concat", "concat", "_copy", "identity", "add_n",
                         "ElementWiseSum", "_mul_scalar", "_div_scalar", "SliceChannel", "split", "Reshape",
                         "reshape", "Flatten", "flatten", "expand_dims", "_grad_add"})
"""Ops whose backward reads only the output adjoints (no forward tensor)."""


class TaskKind(enum.Enum):
    COMPUTE = "compute"      # a kernel on a device's compute stream
    COPY = "copy"            # a _CrossDeviceCopy between two devices
    UPDATE = "update"        # the optimizer's update of one parameter shard


class Phase(enum.Enum):
    FORWARD = "forward"
    BACKWARD = "backward"
    UPDATE = "update"


class Origin(enum.Enum):
    """What part of the partitioned graph a task comes from."""

    KERNEL = "kernel"            # a worker's kernel call of a graph op, or its backward
    GLUE = "glue"                # the rewriter's slices, concats, sums, fills, identities, or their adjoints
    EXPANSION = "expansion"      # an op run by its expansion (and its statistics exchange), or touching one
    GRADIENT_SUM = "gradient_sum"  # MXNet's sum of an entry's gradient contributions
    OPTIMIZER = "optimizer"      # the update
    SWAP = "swap"                # a copy to or from host memory (tofu.sim.swap)


class TensorKind(enum.Enum):
    PARAM = "param"              # a parameter shard (resident)
    GRADIENT = "gradient"        # a parameter shard's gradient array (resident: bound with grad_req 'write')
    OPTIMIZER = "optimizer"      # a parameter shard's momentum (resident)
    INPUT = "input"              # data, labels, auxiliary states (resident: bound arrays)
    ACTIVATION = "activation"    # a forward op's output, or a copy of one
    ADJOINT = "adjoint"          # a gradient contribution or an activation's gradient

    @property
    def resident(self) -> bool:
        return self in (TensorKind.PARAM, TensorKind.GRADIENT, TensorKind.OPTIMIZER, TensorKind.INPUT)


@dataclass(frozen=True)
class Tensor:
    """One buffer of the program on ``device`` (``producer``: the task that writes it; None: bound before)."""

    id: int
    device: int
    nbytes: int
    kind: TensorKind
    producer: int | None = None


@dataclass(frozen=True)
class Task:
    """One task of the iteration.

    Attributes:
        id: its position in :attr:`Program.tasks` (a topological order).
        kind, phase, origin: what it is (see the enums).
        op: the MXNet op it runs (a backward: ``_backward_<op>``; a copy: ``_CrossDeviceCopy``).
        device: where it runs: the device whose compute stream runs it; a copy's source.
        dst: a copy's destination device (None otherwise).
        op_class: the kernel's class (None for a copy).
        flops: floating-point operations (0 for a copy).
        nbytes: a kernel's bytes read and written; a copy's bytes moved.
        deps: the tasks it waits for (the producers of what it reads).
        reads, writes: tensor ids.
        label: a name to show (the symbol's node name, or the op and its tensor).
        grain: a convolution kernel's output pixels per image (:attr:`tofu.sim.flops.OpWork.grain`), inf
            otherwise.
    """

    id: int
    kind: TaskKind
    phase: Phase
    origin: Origin
    op: str
    device: int
    dst: int | None
    op_class: OpClass | None
    flops: float
    nbytes: float
    deps: tuple[int, ...]
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    label: str = ""
    grain: float = math.inf

    @property
    def src(self) -> int:
        return self.device


@dataclass(frozen=True)
class Program:
    """The tasks of one training iteration on ``workers`` devices and the tensors they use."""

    workers: int
    tasks: tuple[Task, ...]
    tensors: tuple[Tensor, ...]

    @cached_property
    def readers(self) -> tuple[tuple[int, ...], ...]:
        """Per tensor, the tasks that read it."""
        out: list[list[int]] = [[] for _ in self.tensors]
        for t in self.tasks:
            for r in t.reads:
                out[r].append(t.id)
        return tuple(tuple(r) for r in out)


# ------------------------------------------------------------------------------------------------- readers

def dataflow_from_symbol(graph: Graph, pg) -> Dataflow:
    """The partitioned forward graph read from the symbol of ``pg`` (a
    :class:`~tofu.rewrite.apply_plan.PartitionedGraph` of ``graph``): one op per JSON node, on its
    ``__ctx_group__``; its work from the shapes MXNet infers.
    A kernel call is a node named ``{node}@dev{w}``; an expansion's own nodes are unnamed by the rewriter (no
    ``@dev``) or its statistics exchange (``stat...``).

    Raises:
        TofuError: a node has no device.
    """
    doc = json.loads(pg.symbol.tojson())
    shapes = _shapes(pg.symbol, pg.shapes())
    own = {f"{n.name}@dev{w}": n for n in graph.nodes for w in range(pg.workers)}
    shard = {v.name: v for v in pg.variables}
    values: list[FlowValue] = []
    shape: list[tuple[int, ...]] = []              # per value
    ops: list[FlowOp] = []
    entries: list[list[int]] = []
    for jn in doc["nodes"]:
        attrs = jn.get("attrs", {})
        name = jn["name"]
        dev = _device(attrs)
        if dev is None:
            raise TofuError(f"node '{name}' ({jn['op']}) of the partitioned symbol has no device")
        if jn["op"] == "null":
            var = shard.get(name)
            tensor = graph.tensor(var.tensor).id if var is not None else None
            role = var.role if var is not None else Role.AUX       # an expansion's own (zero) statistics
            shape.append(tuple(shapes.get(name, ())))
            values.append(FlowValue(len(values), dev, 4 * math.prod(shape[-1]), tensor, role))
            entries.append([values[-1].id])
            continue
        outs = _visible_outputs(name, shapes)
        ins = [entries[i][o] for i, o, *_ in jn["inputs"]]
        in_shapes = [shape[v] for v in ins]
        node = own.get(name)
        expansion = "@dev" not in name or name.startswith("stat")
        work = _work(jn["op"], attrs, in_shapes, outs, op_call_work)
        tensor = graph.tensor(node.outputs[0]).id if node is not None else None
        produced = []
        for s in outs:
            shape.append(tuple(s))
            values.append(FlowValue(len(values), dev, 4 * math.prod(s), tensor, None, len(ops)))
            produced.append(values[-1].id)
        entries.append(produced)
        to = attrs.get("__tofu_to__")
        ops.append(FlowOp(dev, jn["op"], work, tuple(ins), tuple(produced), node.id if node is not None else None,
                          expansion, int(to[3:]) if to else None, tuple(sorted(attrs.items()))))
    heads = tuple(entries[h[0]][h[1]] for h in doc["heads"])
    return Dataflow(tuple(values), tuple(ops), heads)


def _visible_outputs(name: str, shapes) -> list[tuple[int, ...]]:
    """The shapes of a node's visible outputs, which MXNet names ``{node}_output`` or ``{node}_output{i}``."""
    if f"{name}_output" in shapes:
        return [shapes[f"{name}_output"]]
    outs = []
    while f"{name}_output{len(outs)}" in shapes:
        outs.append(shapes[f"{name}_output{len(outs)}"])
    return outs or [s for n, s in shapes.items() if n.startswith(name + "_")][:1]


# ------------------------------------------------------------------------------------------ construction

class _Builder:
    """Accumulates tasks and tensors in a topological order, inserting a copy for every tensor a task reads on
    another device (once per tensor and destination)."""

    def __init__(self, workers: int):
        self.workers = workers
        self.tasks: list[Task] = []
        self.tensors: list[Tensor] = []
        self.copied: dict[tuple[int, int], int] = {}      # (tensor, device) -> its copy there
        self.origin_of_tensor: list[Origin | None] = []

    def tensor(self, device: int, nbytes: int, kind: TensorKind, producer: int | None = None,
               origin: Origin | None = None) -> int:
        self.tensors.append(Tensor(len(self.tensors), device, int(nbytes), kind, producer))
        self.origin_of_tensor.append(origin)
        return len(self.tensors) - 1

    def local(self, t: int, device: int, reader: Origin) -> int:
        """``t`` as a task on ``device`` reads it: itself, or its copy there."""
        src = self.tensors[t]
        if src.device == device:
            return t
        key = (t, device)
        if key not in self.copied:
            producer = self.tasks[src.producer] if src.producer is not None else None
            phase = producer.phase if producer is not None else Phase.FORWARD
            origin = Origin.EXPANSION if Origin.EXPANSION in (self.origin_of_tensor[t], reader) else \
                (self.origin_of_tensor[t] or Origin.GLUE)
            kind = TensorKind.ACTIVATION if phase is Phase.FORWARD else TensorKind.ADJOINT
            tid = len(self.tasks)
            out = self.tensor(device, src.nbytes, kind, tid, origin)
            deps = (src.producer,) if src.producer is not None else ()
            what = producer.label if producer is not None else "input"
            self.tasks.append(Task(tid, TaskKind.COPY, phase, origin, "_CrossDeviceCopy", src.device, device, None,
                                   0.0, float(src.nbytes), deps, (t,), (out,), f"{what} > dev{device}"))
            self.copied[key] = out
        return self.copied[key]

    def task(self, kind: TaskKind, phase: Phase, origin: Origin, op: str, device: int, op_class: OpClass,
             flops: float, nbytes: float, reads: Sequence[int], outputs: Sequence[tuple[int, TensorKind]],
             label: str, extra_writes: Sequence[int] = (), after: Sequence[int] = (),
             grain: float = math.inf) -> tuple[int, ...]:
        """A compute or update task; returns the tensors it writes (one per ``outputs`` entry: bytes, kind).
        ``after``: tasks it waits for beyond the writers of what it reads (control dependencies)."""
        local = tuple(dict.fromkeys(self.local(r, device, origin) for r in reads))
        tid = len(self.tasks)
        writes = tuple(self.tensor(device, b, k, tid, origin) for b, k in outputs)
        deps = tuple(sorted({self.tensors[r].producer for r in local if self.tensors[r].producer is not None}
                            | set(after)))
        self.tasks.append(Task(tid, kind, phase, origin, op, device, None, op_class, float(flops), float(nbytes),
                               deps, local, writes + tuple(extra_writes), label, grain))
        return writes


def build_program(flow: Dataflow, graph: Graph, workers: int, sum_cap: int | None = None,
                  replicas: bool = False) -> Program:
    """The program of one training iteration of the partitioned forward graph ``flow`` of ``graph`` on
    ``workers`` devices (see the module docstring); ``sum_cap``: MXNet's in-place gradient sum cap (None:
    :func:`grad_sum_cap`); ``replicas``: as ``tofu run`` binds the graph, with its parameter replicas
    (:func:`_with_replicas`, :func:`_exchange`), else as the rewriter builds it."""
    if eliminates_common_expressions():
        flow = _eliminate_common(flow)
    replica_of: dict[int, int] = {}
    if replicas:
        flow, replica_of = _with_replicas(flow)
    values, ops = flow.values, flow.ops
    live = _live_ops(flow)
    needs = _needs_gradient(graph, flow, live)
    b = _Builder(workers)
    tensor_of: dict[int, int] = {}         # flow value -> tensor

    def tensor(v: int) -> int:
        if v not in tensor_of:
            value = values[v]
            kind = TensorKind.PARAM if value.role is Role.PARAM else TensorKind.INPUT
            tensor_of[v] = b.tensor(value.device, value.nbytes, kind)
        return tensor_of[v]

    origin = [Origin.EXPANSION if op.expansion else Origin.KERNEL if op.node is not None else Origin.GLUE
              for op in ops]
    # forward
    for i in live:
        op = ops[i]
        label = _label(graph, flow, op)
        writes = b.task(TaskKind.COMPUTE, Phase.FORWARD, origin[i], op.op, op.device, op.work.op_class,
                        op.work.flops, op.work.bytes, [tensor(v) for v in op.inputs],
                        [(values[v].nbytes, TensorKind.ACTIVATION) for v in op.outputs], label,
                        grain=op.work.grain)
        tensor_of.update(zip(op.outputs, writes))
    # backward
    names = _gradient_names(graph)
    expected, given = contributions(flow.ops, live, needs, _gives(graph, flow))
    sums = _Sums(b, graph, values, expected, grad_sum_cap() if sum_cap is None else sum_cap)
    for i in reversed(live):
        op = ops[i]
        outs = [sums.adjoint(v) for v in op.outputs]
        grads = given.get(i, [])
        if not grads:
            continue
        label = _label(graph, flow, op)
        adjoints = [a for a in outs if a is not None]
        if op.op in _PASS_THROUGH:                       # CloneGradient: each input's is the adjoint itself
            for p in grads:
                sums.add(op.inputs[p], adjoints[0])
            continue
        if op.op in ("add_n", "ElementWiseSum"):         # ElementWiseSumGrad: an identity per input
            device = b.tensors[adjoints[0]].device if adjoints else op.device      # (on zeros: op's)
            for p in grads:
                n = values[op.inputs[p]].nbytes
                g = b.task(TaskKind.COMPUTE, Phase.BACKWARD, origin[i], "identity", device, OpClass.DATA_MOVEMENT,
                           0.0, 2 * n, adjoints, [(n, TensorKind.ADJOINT)], f"{label} backward",
                           after=sums.control([op.inputs[p]]))[0]
                sums.add(op.inputs[p], g)
            continue
        keeps_inputs, keeps_outputs = _keeps(graph, op)
        kept = [tensor_of[v] for v in (op.inputs if keeps_inputs else ())] + \
            [tensor_of[v] for v in (op.outputs if keeps_outputs else ())]
        flops, nbytes = backward_work(op.work, names(op, grads))
        name = backward_op(op.op)
        nodes = [[p] for p in grads] if op.op in _BACKWARD_PER_INPUT else [grads]     # the work split evenly
        for part in nodes:
            share = len(part) / len(grads)
            writes = b.task(TaskKind.COMPUTE, Phase.BACKWARD, origin[i], name, op.device, op.work.op_class,
                            flops * share, nbytes * share, adjoints + kept,
                            [(values[op.inputs[p]].nbytes, TensorKind.ADJOINT) for p in part], f"{label} backward",
                            after=sums.control([op.inputs[p] for p in part]), grain=op.work.grain)
            for p, g in zip(part, writes):
                sums.add(op.inputs[p], g)
    # the parameters' gradients, then their updates
    params = sorted(v for v in tensor_of if values[v].role is Role.PARAM)
    gradient = {}
    for v in params:
        g = sums.adjoint(v)
        if g is not None:
            gradient[v] = g
            b.tensors[g] = _with_kind(b.tensors[g], TensorKind.GRADIENT)
    if replicas:
        read = set(tensor_of)
        for r in replica_of.values():
            tensor(r)           # a shard only its replicas read
        _exchange(b, values, tensor_of, gradient, replica_of, read)
        return Program(workers, tuple(b.tasks), tuple(b.tensors))
    for v in params:
        value = values[v]
        n = value.nbytes
        momentum = b.tensor(value.device, n, TensorKind.OPTIMIZER)
        reads = [tensor_of[v], momentum] + ([gradient[v]] if v in gradient else [])
        elements = n // 4
        b.task(TaskKind.UPDATE, Phase.UPDATE, Origin.OPTIMIZER, "sgd_mom_update", value.device, OpClass.ELEMENTWISE,
               UPDATE_FLOPS_PER_ELEMENT * elements, UPDATE_BYTES_PER_ELEMENT * elements * 4, reads, [],
               f"update {_value_label(graph, value)}", extra_writes=(tensor_of[v], momentum))
    return Program(workers, tuple(b.tasks), tuple(b.tensors))


def _with_replicas(flow: Dataflow) -> tuple[Dataflow, dict[int, int]]:
    """``flow`` with each route of a whole parameter shard to another device (an ``identity`` of the variable,
    cut for that device) made a variable there: the runtime's replica (:func:`tofu.runtime.replicas.replicate`);
    returns it and, per replica value, the shard's. The route's op no longer produces anything read."""
    values = list(flow.values)
    replica_of: dict[int, int] = {}
    for op in flow.ops:
        if op.op not in ("_copy", "identity") or len(op.inputs) != 1 or op.to is None or op.to == op.device:
            continue
        shard = flow.values[op.inputs[0]]
        if shard.role is Role.PARAM and shard.producer is None:
            out = op.outputs[0]
            values[out] = FlowValue(out, op.to, shard.nbytes, shard.tensor, Role.PARAM, None)
            replica_of[out] = shard.id
    return Dataflow(tuple(values), flow.ops, flow.heads), replica_of


def _exchange(b: "_Builder", values: Sequence[FlowValue], tensor_of: dict[int, int], gradient: dict[int, int],
              replica_of: dict[int, int], read: set[int]) -> None:
    """The runtime's exchange and update (:class:`tofu.runtime.replicas.Exchange`), in its groups
    (:func:`~tofu.runtime.replicas.exchange_groups`): per group, each replica device's gradients copied to the
    shards' device in turn through one buffer and added to the shards' (the first is theirs where their own
    device reads none), one ``sgd_mom_update`` per device over all its shards, then the updated weights copied
    to each replica device (waiting for the tasks that read the replicas there)."""
    import numpy as np

    from tofu.runtime.replicas import Replica, Shard, exchange_groups

    owners = sorted({v for v in tensor_of if values[v].role is Role.PARAM and v not in replica_of})
    shards = [Shard(str(v), values[v].device, (values[v].nbytes // 4,), np.dtype(np.float32)) for v in owners]
    reps = [Replica(str(r), str(v), values[r].device, r in gradient) for r, v in replica_of.items()
            if r in tensor_of]
    by_shard: dict[int, list[int]] = {}
    for r, v in replica_of.items():
        if r in tensor_of:
            by_shard.setdefault(v, []).append(r)
    readers: dict[int, list[int]] = {}
    for task in b.tasks:
        for t in task.reads:
            readers.setdefault(t, []).append(task.id)
    groups = exchange_groups(shards, reps, {str(v) for v in owners if v in read})
    summed: dict[int, list[int]] = {}           # per device: the gradient tensors its update reads
    later: list = []                            # per group: its weights' copies, after the update
    for g in groups:
        members = [int(s.name) for s in g.shards]
        o, nbytes = g.device, 4 * g.elements
        acc = [gradient[v] for v in members if v in gradient] if g.local else []
        previous = None
        for d in g.gradients:
            sources = [gradient[r] for v in members for r in by_shard.get(v, ()) if values[r].device == d
                       and r in gradient]
            deps = {b.tensors[t].producer for t in sources if b.tensors[t].producer is not None}
            after = {previous} if previous is not None else set()      # the buffer read by the last sum
            received = _copy(b, Phase.BACKWARD, d, o, nbytes, sources, deps | after, TensorKind.ADJOINT,
                             f"gradients > dev{o}")
            if not acc:
                acc = [received]
                continue
            acc = list(b.task(TaskKind.COMPUTE, Phase.BACKWARD, Origin.GRADIENT_SUM, "elemwise_add", o,
                              OpClass.ELEMENTWISE, float(g.elements), 3.0 * nbytes, acc + [received],
                              [(nbytes, TensorKind.GRADIENT)], f"sum of the replicas' gradients@dev{o}"))
            previous = len(b.tasks) - 1
        summed.setdefault(o, []).extend(acc)
        later.append((g, members))
    updates: dict[int, int] = {}
    for o in sorted({values[v].device for v in owners}):
        mine = [v for v in owners if values[v].device == o]
        n = sum(values[v].nbytes for v in mine)
        momentum = b.tensor(o, n, TensorKind.OPTIMIZER)
        elements = n // 4
        b.task(TaskKind.UPDATE, Phase.UPDATE, Origin.OPTIMIZER, "sgd_mom_update", o, OpClass.ELEMENTWISE,
               UPDATE_FLOPS_PER_ELEMENT * elements, UPDATE_BYTES_PER_ELEMENT * elements * 4,
               [tensor_of[v] for v in mine] + [momentum] + summed.get(o, []), [], f"update dev{o}",
               extra_writes=(*(tensor_of[v] for v in mine), momentum))
        updates[o] = len(b.tasks) - 1
    for g, members in later:
        for d in g.devices:
            targets = [tensor_of[r] for v in members for r in by_shard.get(v, ()) if values[r].device == d]
            waits = {updates[g.device]} | {t for r in targets for t in readers.get(r, ())}
            _copy(b, Phase.FORWARD, g.device, d, 4 * g.elements, [tensor_of[v] for v in members], waits, None,
                  f"weights > dev{d}", writes=targets)


def _copy(b: "_Builder", phase: Phase, src: int, dst: int, nbytes: int, reads: Sequence[int], deps: set[int],
          kind: TensorKind | None, label: str, writes: Sequence[int] = ()) -> int:
    """A copy of the exchange (a flat buffer, ``_copyto``); returns the tensor it writes (``kind``: a new one on
    ``dst``), else writes ``writes``."""
    tid = len(b.tasks)
    out = b.tensor(dst, nbytes, kind, tid, Origin.GLUE) if kind is not None else None
    b.tasks.append(Task(tid, TaskKind.COPY, phase, Origin.GLUE, "_copyto", src, dst, None, 0.0, float(nbytes),
                        tuple(sorted(deps)), tuple(reads), (out,) if out is not None else tuple(writes), label))
    return out


def _gives(graph: Graph, flow: Dataflow) -> Callable[[int, int, bool | None], bool]:
    """``(op index, input position, what arrives at its outputs) -> whether the op gives that input a gradient``:
    :func:`gives_gradient` for an MXNet op; for an op replayed from the plan as one call of its expansion, the
    inputs the expansion's symbol differentiates (:func:`expansion_gradients`, on the whole op's shapes: the
    pieces' differ in size only), others none."""
    def gives(i: int, p: int, arrives: bool | None) -> bool:
        op = flow.ops[i]
        if not (op.expansion and op.node is not None):
            return gives_gradient(op.op, arrives, p, _attrs(graph, op))
        node = graph.nodes[op.node]
        if arrives is None and node.op not in LOSS_OPS:
            return False
        differentiated = expansion_gradients(
            node.op, node.attrs, tuple(graph.tensors[t].shape for t in node.inputs),
            tuple((0,) * len(graph.tensors[t].shape) for t in node.inputs), bool(arrives))
        tensor = flow.values[op.inputs[p]].tensor
        return any(d for t, d in zip(node.inputs, differentiated) if t == tensor)
    return gives


class _Sums:
    """The gradient contributions of each value, summed as MXNet's ``AggregateGradient`` does: fewer than
    the cap by one ``ElementWiseSum`` once all are written; more by a chain of in-place
    ``_grad_add`` as they come, each contribution's writer made to wait for the sum so far (the control
    dependency MXNet adds so that one buffer accumulates them), then an ``identity`` (``sum_grad_final``)."""

    def __init__(self, b: _Builder, graph: Graph, values: Sequence[FlowValue], expected: Counter, cap: int):
        self.b, self.graph, self.values, self.expected, self.cap = b, graph, values, expected, cap
        self.parts: dict[int, list[int]] = {}
        self.running: dict[int, int] = {}
        self.done: dict[int, int] = {}

    def chained(self, v: int) -> bool:
        return self.expected[v] >= self.cap

    def control(self, vs: Sequence[int]) -> tuple[int, ...]:
        """The tasks a task writing contributions to ``vs`` waits for: the sums so far of chained ones."""
        return tuple(self.b.tensors[self.running[v]].producer for v in vs if v in self.running)

    def origin(self, parts: Sequence[int]) -> Origin:
        return Origin.EXPANSION if any(self.b.origin_of_tensor[p] is Origin.EXPANSION for p in parts) \
            else Origin.GRADIENT_SUM

    def add(self, v: int, g: int) -> None:
        if not self.chained(v):
            self.parts.setdefault(v, []).append(g)
        elif v not in self.running:
            self.running[v] = g
        else:
            acc = self.running[v]
            n = self.values[v].nbytes
            self.running[v] = self.b.task(
                TaskKind.COMPUTE, Phase.BACKWARD, self.origin([acc, g]), "_grad_add", self.b.tensors[acc].device,
                OpClass.ELEMENTWISE, n / 4, 3 * n, [acc, g], [(n, TensorKind.ADJOINT)], self.label(v))[0]

    def adjoint(self, v: int) -> int | None:
        """The summed gradient of ``v`` (None: no contribution)."""
        if v in self.done:
            return self.done[v]
        value = self.values[v]
        n = value.nbytes
        if self.chained(v):
            acc = self.running.pop(v)
            device = value.device if value.role is Role.PARAM else self.b.tensors[acc].device
            out = self.b.task(TaskKind.COMPUTE, Phase.BACKWARD, self.origin([acc]), "identity", device,
                              OpClass.DATA_MOVEMENT, 0.0, 2 * n, [acc], [(n, TensorKind.ADJOINT)], self.label(v))[0]
        else:
            parts = self.parts.pop(v, [])
            if not parts:
                return None
            if len(parts) == 1:
                out = parts[0]
            else:
                device = value.device if value.role is Role.PARAM else self.b.tensors[parts[0]].device
                out = self.b.task(TaskKind.COMPUTE, Phase.BACKWARD, self.origin(parts), "ElementWiseSum", device,
                                  OpClass.ELEMENTWISE, (len(parts) - 1) * n / 4, (len(parts) + 1) * n, parts,
                                  [(n, TensorKind.ADJOINT)], self.label(v))[0]
        self.done[v] = out
        return out

    def label(self, v: int) -> str:
        return f"sum_grad {_value_label(self.graph, self.values[v])}"


def _with_kind(t: Tensor, kind: TensorKind) -> Tensor:
    return Tensor(t.id, t.device, t.nbytes, kind, t.producer)


def _eliminate_common(flow: Dataflow) -> Dataflow:
    """MXNet's common-expression elimination (``src/executor/eliminate_common_expr_pass.cc``, on by default:
    ``MXNET_ELIMINATE_COMMON_EXPR``), run on the forward graph before the gradient: an op that reads the same
    values as an earlier op of the same kind, attributes and device is replaced by it (its readers read the
    earlier op's outputs). Attributes: the symbol's; in the plan's replay, the boxes a glue op reads and
    writes. Kernel calls (one per node and device) and ops reading auxiliary states (which they may update)
    are kept."""
    same: dict[int, int] = {}
    seen: dict[tuple, FlowOp] = {}
    ops = []
    for op in flow.ops:
        inputs = tuple(same.get(v, v) for v in op.inputs)
        op = FlowOp(op.device, op.op, op.work, inputs, op.outputs, op.node, op.expansion, op.to, op.attrs)
        ops.append(op)
        if not inputs or op.node is not None or any(flow.values[v].role is Role.AUX for v in inputs):
            continue
        key = (op.op, op.device, op.to, op.attrs, op.work, inputs, tuple(flow.values[v].nbytes for v in op.outputs))
        first = seen.setdefault(key, op)
        if first is not op:
            same.update(zip(op.outputs, first.outputs))
    return Dataflow(flow.values, tuple(ops), tuple(same.get(v, v) for v in flow.heads))


def _live_ops(flow: Dataflow) -> list[int]:
    """Indices of the ops the heads depend on, in the flow's (topological) order."""
    live: set[int] = set()
    stack = list(flow.heads)
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        p = flow.values[v].producer
        if p is not None and p not in live:
            live.add(p)
            stack.extend(flow.ops[p].inputs)
    return sorted(live)


def _attrs(graph: Graph, op) -> Mapping:
    """The attributes of the graph node a flow op calls (a glue op's: none)."""
    return graph.nodes[op.node].attrs if op.node is not None else {}


def _needs_gradient(graph: Graph, flow: Dataflow, live: Sequence[int]) -> list[bool]:
    """Per value: a parameter, or computed from one through ops that pass gradients (:func:`gives_gradient`;
    not a loss's output)."""
    return needing(flow.ops, live, [v.role is Role.PARAM for v in flow.values],
                   lambda i, p: gives_gradient(flow.ops[i].op, True, p, _attrs(graph, flow.ops[i])))


def _gradient_names(graph: Graph):
    """For an op and the input positions that get a gradient, the names :func:`backward_work` takes: a kernel
    call's are its graph node's inputs with a gradient (as :func:`tofu.sim.flops.backward_work` takes them); a glue op's none that
    it contracts (one pass over its bytes twice)."""
    from tofu.analysis.views import NodeView

    grads = graph.with_gradient
    cache: dict[int, list[str]] = {}

    def names(op: FlowOp, positions: Sequence[int]) -> list[str]:
        if op.node is None:
            return ["input"]
        if op.node not in cache:
            node = graph.nodes[op.node]
            desc = NodeView.of(graph, node).describe()
            cache[op.node] = [t.name for t, tid in zip(desc.inputs, node.inputs) if tid in grads] or ["input"]
        return cache[op.node]
    return names


def _keeps(graph: Graph, op: FlowOp) -> tuple[bool, bool]:
    """(inputs, outputs): whether the op's backward reads its forward inputs and outputs."""
    from tofu.graph.memory import RULES, rule_for

    if op.node is not None:
        rule = rule_for(graph.nodes[op.node])
        return rule.keeps_inputs, rule.keeps_outputs
    if op.op in _INDEX_ONLY:
        return False, False
    rule = RULES.get(op.op)
    return (rule.keeps_inputs, rule.keeps_outputs) if rule is not None else (True, True)


def _label(graph: Graph, flow: Dataflow, op: FlowOp) -> str:
    if op.node is not None:
        return f"{graph.nodes[op.node].name}@dev{op.device}"
    tensor = flow.values[op.outputs[0]].tensor if op.outputs else None
    return f"{op.op} {graph.tensors[tensor].name}@dev{op.device}" if tensor is not None else f"{op.op}@dev{op.device}"


def _value_label(graph: Graph, value: FlowValue) -> str:
    name = graph.tensors[value.tensor].name if value.tensor is not None else ""
    return f"{name}@dev{value.device}"


# ---------------------------------------------------------------------------------------------- entry points

def program_from_plan(graph: Graph, plan, sum_cap: int | None = None, replicas: bool = False) -> Program:
    """The program of ``graph`` under ``plan``, built from the plan alone (no MXNet); ``sum_cap`` and
    ``replicas`` as :func:`build_program`'s."""
    return build_program(dataflow_from_plan(graph, plan), graph, plan.workers, sum_cap, replicas)


def placed(flow: Dataflow, devices: Sequence[int]) -> Dataflow:
    """A one-device dataflow with its ops moved to other devices: a kernel call of graph node n to
    ``devices[n]``, any other op to its first input's device (else the device of the op before it); a variable
    to its first reader's device, an op's output to the op's. :func:`build_program` then copies every value read
    on another device (operator placement: :func:`tofu.sim.systems.layer_placement` gives ``devices``)."""
    device_of_op: list[int] = []
    value_device: dict[int, int] = {}
    for op in flow.ops:
        if op.node is not None:
            d = devices[op.node]
        else:
            first = next((flow.values[v] for v in op.inputs), None)
            d = value_device.get(first.id, 0) if first is not None and first.producer is not None else \
                (device_of_op[-1] if device_of_op else 0)
        device_of_op.append(d)
        for v in op.inputs:
            value_device.setdefault(v, d)
        for v in op.outputs:
            value_device[v] = d
    values = tuple(FlowValue(v.id, value_device.get(v.id, v.device), v.nbytes, v.tensor, v.role, v.producer)
                   for v in flow.values)
    ops = tuple(FlowOp(d, op.op, op.work, op.inputs, op.outputs, op.node, op.expansion, op.to, op.attrs)
                for d, op in zip(device_of_op, flow.ops))
    return Dataflow(values, ops, flow.heads)


def program_from_symbol(graph: Graph, plan, replicas: bool = False) -> Program:
    """The program of ``graph`` under ``plan``, read from the partitioned symbol (builds it with MXNet);
    ``replicas`` as :func:`build_program`'s."""
    from tofu.api import partitioned

    pg = partitioned(graph, plan)
    return build_program(dataflow_from_symbol(graph, pg), graph, pg.workers, replicas=replicas)
