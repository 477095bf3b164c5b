"""The systems of the paper's throughput comparison (section 7) in the performance model: Ideal, SmallBatch,
Swap, OpPlacement and Tofu's plan, each a training throughput on one profile's devices.

Input: a model builder (batch -> :class:`~tofu.graph.ir.Graph`), a :class:`~tofu.sim.hardware.Profile`, the
largest batch to consider (the paper's Ideal batch). Output: a :class:`SystemEstimate` per system.

Every system's compute is :mod:`tofu.sim.model`'s (the roofline time of every kernel, forward + backward +
SGD-momentum update); memory is the planner's (``plan.per_device_bytes``: the single-device
:func:`~tofu.graph.memory.estimate_training_memory`, scaled by what a device holds). With k = ``profile.devices``,
M = ``profile.memory_bytes``, C(b) one device's compute for the whole model at batch b, F(b) its memory:

- **Ideal**: k b_I / C(b_I) at the Ideal batch b_I, memory ignored, no communication (the paper's definition).
- **SmallBatch**: k b_S / C(b_S), b_S the largest batch with F(b_S) <= M (integer bisection: F grows with b);
  no communication (the paper's definition: k independent replicas). OOM when F(1) > M.
- **Swap** (vDNN-style, ours as stated): k replicas, each holding what fits and swapping the rest to host memory
  over its share of the host link, B_h = ``host_bandwidth / host_sharing`` per direction (every replica swaps
  at once). Tensors are used in the same cyclic order every iteration; an eviction policy that knows that order
  (the paper's dataflow analysis with prefetching; Belady's optimum on a loop) misses X = F(b) - M bytes per
  iteration, and each such byte goes out once and comes back once (activations are written in the forward and
  read in the backward; weights, gradients and history change every iteration). As in vDNN, transfers overlap
  the op they belong to, layer by layer: op i's share of X is x_i = X w_i / sum w, w_i the bytes it creates
  (outputs) or reads from weights, and it moves x_i during its forward and x_i during its backward (full
  duplex), so

      iteration = C(b) + sum_i [max(f_i, x_i / B_h) - f_i + max(g_i, x_i / B_h) - g_i]

  f_i, g_i op i's forward and backward times: an op whose compute hides its transfer costs nothing more, one
  with large tensors and little arithmetic (the first convolutions) stalls. No fragmentation, no cost of the
  eviction decisions (optimistic for Swap). A batch is feasible when the largest op's working set,
  2 x (its inputs + outputs), fits M, and X fits the replica's share of host memory; b is the largest feasible
  batch up to b_I (bisection).
- **OpPlacement** (ours as stated; the paper runs it on RNNs only): the model's layers (``Node.layer``, in order
  of first use: embedding, LSTM layers, head) go to the devices round-robin, and the unrolled graph runs as a
  dataflow pipeline: every op on its layer's device, each device one op at a time (greedy list scheduling in
  order of readiness, ties by graph order), an edge between devices delayed by its tensor's bytes over the
  slowest link it crosses (:meth:`~tofu.sim.hardware.Profile.link_bandwidth`; no contention). The backward of an
  op waits for the backward of the ops that read its outputs, so time step t of layer l+1 overlaps step t+1 of
  layer l (the pipelining over time steps). Each device then updates its own layers' weights. Memory per device:
  the one-device estimate's weight categories scaled by the device's share of the parameters, activations by
  its share of the activations produced, plus the tensors it receives, plus the whole workspace. A graph
  without unrolled time steps (no layer whose ops carry several ``Node.step`` values: WResNet) is n/a, as in the
  paper: its layers form a chain, so a placed CNN runs one device at a time. The batch is the largest that
  fits (bisection up to b_I).
- **Tofu**: the plan of ``tofu.search`` (algorithm ``tofu``) on k devices at the largest batch b_T = b_I / 2^i
  whose plan fits (the paper's powers of two), simulated with the partitioned graph's glue
  (:func:`tofu.sim.glue.glue_from_plan`).
"""
from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tofu.analysis.compose import compose
from tofu.analysis.views import NodeView
from tofu.errors import TofuError
from tofu.graph.ir import Graph, Role
from tofu.search.algorithms import plan_graph
from tofu.search.plan import Plan
from tofu.sim.hardware import Profile
from tofu.sim.model import CallTime, Overlap, batch_size, call_time, op_call_work, simulate, update_seconds
from tofu.tdl.describe import describe

Build = Callable[[int], Graph]
"""A model at a batch size."""


class System(enum.Enum):
    IDEAL = "ideal"
    SMALL_BATCH = "smallbatch"
    SWAP = "swap"
    OP_PLACEMENT = "opplacement"
    TOFU = "tofu"


class Status(enum.Enum):
    OK = "ok"
    OOM = "oom"              # no batch fits the device's memory
    NA = "n/a"               # the system does not apply to this model


@dataclass(frozen=True)
class SystemEstimate:
    """One system's training throughput on a profile.

    Attributes:
        batch: samples per iteration of one replica (Ideal, SmallBatch, Swap) or of the whole machine (Tofu,
            OpPlacement); None when no batch fits.
        replicas: independent copies of the model the throughput counts (k or 1).
        samples_per_second: all replicas together; 0 unless ``status`` is OK.
        seconds: one iteration of one replica.
        compute_seconds: its compute (the busiest device's, for OpPlacement).
        comm_seconds: its transfers: between devices (Tofu), to and from host memory (Swap), or the transfers on
            the devices' edges (OpPlacement, partly hidden by the pipeline).
        per_device_bytes: the fullest device's memory at ``batch`` (at batch 1 when OOM).
        note: why n/a or OOM, or what limited the batch.
    """

    system: System
    model: str
    status: Status
    batch: int | None
    replicas: int
    samples_per_second: float
    seconds: float
    compute_seconds: float
    comm_seconds: float
    per_device_bytes: int
    capacity_bytes: float
    note: str = ""


def largest_batch(fits: Callable[[int], bool], most: int) -> int | None:
    """The largest b in 1..``most`` with ``fits(b)``, for a ``fits`` true up to some b and false above it (integer
    bisection: about log2(most) calls); None when even 1 does not fit.

    >>> largest_batch(lambda b: b * b <= 50, 128)
    7
    """
    if fits(most):
        return most
    if not fits(1):
        return None
    lo, hi = 1, most                     # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def one_device(graph: Graph) -> Plan:
    """The trivial plan: the whole graph on one device (its memory is the single-device estimate)."""
    return plan_graph(graph, 1, "tofu")


def memory(plan: Plan) -> int:
    return int(dict(plan.per_device_bytes)["total"])


def ideal(build: Build, profile: Profile, batch: int) -> SystemEstimate:
    """One device's throughput at ``batch`` with unlimited memory, times the profile's devices."""
    graph = build(batch)
    plan = one_device(graph)
    est = simulate(graph, plan, profile, batch=batch)
    return SystemEstimate(System.IDEAL, graph.name, Status.OK, batch, profile.devices,
                          profile.devices * est.samples_per_second, est.seconds, est.compute_seconds, 0.0,
                          memory(plan), profile.memory_bytes, "memory not limited")


def small_batch(build: Build, profile: Profile, most: int) -> SystemEstimate:
    """The largest batch up to ``most`` whose single-device memory fits one device, times the devices."""
    plans: dict[int, tuple[Graph, Plan]] = {}

    def at(b: int) -> tuple[Graph, Plan]:
        if b not in plans:
            g = build(b)
            plans[b] = (g, one_device(g))
        return plans[b]

    b = largest_batch(lambda b: memory(at(b)[1]) <= profile.memory_bytes, most)
    if b is None:
        g, plan = at(1)
        return _oom(System.SMALL_BATCH, g.name, memory(plan), profile, "batch 1 does not fit one device")
    graph, plan = at(b)
    est = simulate(graph, plan, profile, batch=b)
    return SystemEstimate(System.SMALL_BATCH, graph.name, Status.OK, b, profile.devices,
                          profile.devices * est.samples_per_second, est.seconds, est.compute_seconds, 0.0,
                          memory(plan), profile.memory_bytes)


def working_set(graph: Graph) -> int:
    """The most bytes one op touches at once, backward included: 2 x (its distinct inputs + outputs)."""
    return max((2 * sum(graph.tensors[t].nbytes for t in dict.fromkeys(n.inputs + n.outputs)) for n in graph.nodes),
               default=0)


def swap(build: Build, profile: Profile, most: int) -> SystemEstimate:
    """vDNN-style swapping to host memory on every device, one replica each (see the module docstring)."""
    host_share = profile.host_memory_bytes / profile.devices if profile.host_memory_bytes else math.inf
    cases: dict[int, tuple[Graph, Plan, int]] = {}

    def at(b: int) -> tuple[Graph, Plan, int]:
        if b not in cases:
            g = build(b)
            cases[b] = (g, one_device(g), working_set(g))
        return cases[b]

    def fits(b: int) -> bool:
        _, plan, ws = at(b)
        return ws <= profile.memory_bytes and memory(plan) - profile.memory_bytes <= host_share

    b = largest_batch(fits, most)
    if b is None:
        g, plan, ws = at(1)
        why = (f"the largest op's working set ({ws / 1e9:.1f} GB) exceeds a device" if ws > profile.memory_bytes
               else "the swapped bytes exceed the host memory share")
        return _oom(System.SWAP, g.name, memory(plan), profile, why)
    graph, plan, _ = at(b)
    est = simulate(graph, plan, profile, batch=b)
    swapped = max(0, memory(plan) - profile.memory_bytes)
    seconds = est.compute_seconds + swap_stall(graph, swapped, profile)
    return SystemEstimate(System.SWAP, graph.name, Status.OK, b, profile.devices, profile.devices * b / seconds,
                          seconds, est.compute_seconds, swapped / profile.host_share,
                          min(memory(plan), int(profile.memory_bytes)), profile.memory_bytes,
                          f"{swapped / 1e9:.3g} GB swapped out and in per iteration")


def swap_stall(graph: Graph, swapped: float, profile: Profile) -> float:
    """Seconds an iteration waits for the host link when ``swapped`` bytes go out and come back, each op's share
    overlapping its own forward and backward (the sum in the module docstring, less C(b))."""
    if swapped <= 0:
        return 0.0
    params = {t.id for t in graph.by_role(Role.PARAM)}
    weights = [sum(graph.tensors[o].nbytes for o in n.outputs)
               + sum(graph.tensors[i].nbytes for i in dict.fromkeys(n.inputs) if i in params) for n in graph.nodes]
    total = sum(weights)
    stall = 0.0
    for t, w in zip(node_times(graph, profile), weights):
        x = swapped * w / total / profile.host_share
        stall += max(0.0, x - t.forward) + max(0.0, x - t.backward)
    return stall


# ---------------------------------------------------------------------------------------------------------
# OpPlacement: layers on devices round-robin, the unrolled graph run as a pipeline.

def node_times(graph: Graph, profile: Profile) -> tuple[CallTime, ...]:
    """Per node, the forward and backward time of its one whole-tensor call (what a one-device plan runs)."""
    grads = graph.with_gradient
    out = []
    for node in graph.nodes:
        view = NodeView.of(graph, node)
        (call,) = compose(view, (), ())
        item = graph.tensors[node.outputs[0]].nbytes // max(1, graph.tensors[node.outputs[0]].size)
        desc = describe(node.op, node.attrs, view.in_shapes, view.out_shapes)
        with_grad = [t.name for t, i in zip(desc.inputs, node.inputs) if i in grads]
        work = op_call_work(node.op, call.attrs, view.in_shapes, view.out_shapes, item)
        out.append(call_time(work, with_grad, profile))
    return tuple(out)


def unrolled(graph: Graph) -> bool:
    """Whether some layer of ``graph`` is unrolled over time: its ops carry two or more ``Node.step`` values."""
    steps: dict[str | None, set[int]] = {}
    for node in graph.nodes:
        if node.step is not None:
            steps.setdefault(node.layer, set()).add(node.step)
    return any(len(s) > 1 for s in steps.values())


def layer_placement(graph: Graph, devices: int) -> tuple[int, ...]:
    """Per node, its device: the graph's layers (``Node.layer`` in order of first use; a node without one joins
    the layer before it) assigned to ``devices`` round-robin."""
    order: dict[str | None, int] = {}
    out, current = [], None
    for node in graph.nodes:
        current = node.layer if node.layer is not None else current
        out.append(order.setdefault(current, len(order)) % devices)
    return tuple(out)


def param_devices(graph: Graph, placement: Sequence[int]) -> dict[int, int]:
    """Parameter tensor id -> the device of its first reader."""
    return {t.id: placement[graph.consumers(t.id)[0]] for t in graph.by_role(Role.PARAM) if graph.consumers(t.id)}


@dataclass(frozen=True)
class Schedule:
    """The pipeline's iteration: ``seconds`` (the last device's finish, update included), per device its busy
    seconds and the bytes it receives, and all transfers' seconds (each alone on its link)."""

    seconds: float
    device_busy: tuple[float, ...]
    received_bytes: tuple[int, ...]
    transfer_seconds: float


def pipeline_schedule(graph: Graph, placement: Sequence[int], profile: Profile) -> Schedule:
    """Greedy list scheduling of forward and backward ops on their devices (see the module docstring)."""
    n, devices = len(graph.nodes), max(placement) + 1
    times = node_times(graph, profile)
    grads = graph.with_gradient
    has_bwd = [any(t in grads for t in node.inputs) for node in graph.nodes]
    duration = [t.forward for t in times] + [t.backward for t in times]
    succs: list[list[tuple[int, float]]] = [[] for _ in range(2 * n)]
    npred = [0] * (2 * n)
    received = [0] * devices
    moved: set[tuple[int, int, int]] = set()          # (direction, tensor, destination device)
    transfer_total = 0.0

    def edge(src: int, dst: int, tensor: int, direction: int) -> None:
        nonlocal transfer_total
        a, b = placement[src % n], placement[dst % n]
        delay = 0.0
        if a != b:
            nbytes = graph.tensors[tensor].nbytes
            delay = nbytes / profile.link_bandwidth(a, b)
            if (direction, tensor, b) not in moved:
                moved.add((direction, tensor, b))
                received[b] += nbytes
                transfer_total += delay
        succs[src].append((dst, delay))
        npred[dst] += 1

    for node in graph.nodes:
        for t in dict.fromkeys(node.inputs):
            producer = graph.tensors[t].producer
            if producer is not None:
                edge(producer, node.id, t, 0)
        if has_bwd[node.id]:
            edge(node.id, n + node.id, node.outputs[0], 0)       # same device: no transfer
            for o in node.outputs:
                if o in grads:
                    for c in graph.consumers(o):
                        if has_bwd[c]:
                            edge(n + c, n + node.id, o, 1)
    exists = [True] * n + has_bwd
    ready = [0.0] * (2 * n)
    heap = [(0.0, i) for i in range(2 * n) if exists[i] and npred[i] == 0]
    heapq.heapify(heap)
    free = [0.0] * devices
    busy = [0.0] * devices
    while heap:
        r, i = heapq.heappop(heap)
        d = placement[i % n]
        finish = max(r, free[d]) + duration[i]
        free[d] = finish
        busy[d] += duration[i]
        for s, delay in succs[i]:
            ready[s] = max(ready[s], finish + delay)
            npred[s] -= 1
            if npred[s] == 0:
                heapq.heappush(heap, (ready[s], s))
    for t, d in param_devices(graph, placement).items():
        tensor = graph.tensors[t]
        u = update_seconds(tensor.size, tensor.nbytes // max(1, tensor.size), profile)
        free[d] += u
        busy[d] += u
    return Schedule(max(free), tuple(busy), tuple(received), transfer_total)


def placement_memory(graph: Graph, plan: Plan, placement: Sequence[int], received: Sequence[int]) -> int:
    """The fullest device's memory under a placement: the one-device plan's categories scaled by the device's
    share of the parameters (weights, gradients, history, aux) and of the activations produced, plus the tensors
    it receives, plus the whole workspace (see the module docstring)."""
    whole = dict(plan.per_device_bytes)
    devices = max(placement) + 1
    params = [0] * devices
    for t, d in param_devices(graph, placement).items():
        params[d] += graph.tensors[t].nbytes
    acts = [0] * devices
    for node in graph.nodes:
        acts[placement[node.id]] += sum(graph.tensors[o].nbytes for o in node.outputs)
    p_all, a_all = max(1, sum(params)), max(1, sum(acts))
    weights = whole["params"] + whole["grads"] + whole["optimizer"] + whole["aux"]
    return max(int(weights * params[d] / p_all + whole["activations"] * acts[d] / a_all + received[d]
                   + whole["workspace"]) for d in range(devices))


def op_placement(build: Build, profile: Profile, most: int) -> SystemEstimate:
    """Layers round-robin on the profile's devices, pipelined over time steps (see the module docstring)."""
    probe = build(1)
    if not unrolled(probe):
        return SystemEstimate(System.OP_PLACEMENT, probe.name, Status.NA, None, 1, 0.0, 0.0, 0.0, 0.0, 0,
                              profile.memory_bytes, "no unrolled time steps to pipeline (the paper: RNNs only)")
    cases: dict[int, tuple[Graph, tuple[int, ...], Schedule, int]] = {}

    def at(b: int):
        if b not in cases:
            g = build(b)
            placement = layer_placement(g, profile.devices)
            schedule = pipeline_schedule(g, placement, profile)
            cases[b] = (g, placement, schedule, placement_memory(g, one_device(g), placement,
                                                                 schedule.received_bytes))
        return cases[b]

    b = largest_batch(lambda b: at(b)[3] <= profile.memory_bytes, most)
    if b is None:
        g, _, _, mem = at(1)
        return _oom(System.OP_PLACEMENT, g.name, mem, profile, "batch 1 does not fit the fullest device")
    graph, _, schedule, mem = at(b)
    return SystemEstimate(System.OP_PLACEMENT, graph.name, Status.OK, b, 1, b / schedule.seconds, schedule.seconds,
                          max(schedule.device_busy), schedule.transfer_seconds, mem, profile.memory_bytes)


# ---------------------------------------------------------------------------------------------------------
# Tofu

def tofu_fit(build: Build, profile: Profile, most: int, algo: str = "tofu") -> tuple[Graph, Plan | None, int, str]:
    """The model at the largest batch ``most / 2^i`` whose ``algo`` plan on every device of ``profile`` fits.

    Returns:
        (graph, plan, memory, note): the plan None when no batch fits (graph and memory: the smallest batch
        planned); the note says why a batch could not be planned.
    """
    b, mem, note = most, 0, ""
    graph = None
    while b >= 1:
        graph = build(b)
        try:
            plan = plan_graph(graph, profile.devices, algo)
        except TofuError as e:                     # e.g. no way to split this batch: try a smaller one
            note = note or f"{algo} cannot plan batch {b}: {e}"
            b //= 2
            continue
        mem = memory(plan)
        if mem <= profile.memory_bytes:
            return graph, plan, mem, note
        b //= 2
    return graph, None, mem, note or "batch 1 does not fit"


def tofu(build: Build, profile: Profile, most: int, algo: str = "tofu", overlap: Overlap = Overlap.NONE,
         with_glue: bool = True) -> SystemEstimate:
    """Tofu's plan on every device of ``profile`` at the largest batch ``most / 2^i`` whose plan fits
    (:func:`tofu_fit`); the iteration with the partitioned graph's glue unless ``with_glue`` is False."""
    from tofu.sim.glue import glue_from_plan

    graph, plan, mem, note = tofu_fit(build, profile, most, algo)
    if plan is None:
        return _oom(System.TOFU, graph.name, mem, profile, note)
    b = batch_size(graph)
    est = simulate(graph, plan, profile, overlap, batch=b, glue=glue_from_plan(graph, plan) if with_glue else None)
    return SystemEstimate(System.TOFU, graph.name, Status.OK, b, 1, est.samples_per_second, est.seconds,
                          est.compute_seconds, est.comm_seconds, mem, profile.memory_bytes)


def _oom(system: System, model: str, nbytes: int, profile: Profile, note: str) -> SystemEstimate:
    return SystemEstimate(system, model, Status.OOM, None, 1, 0.0, 0.0, 0.0, 0.0, nbytes, profile.memory_bytes,
                          note)


RUNNERS: dict[System, Callable[..., SystemEstimate]] = {
    System.SMALL_BATCH: small_batch, System.SWAP: swap, System.OP_PLACEMENT: op_placement, System.TOFU: tofu}


def estimate(system: System, build: Build, profile: Profile, most: int) -> SystemEstimate:
    """``system``'s throughput for the model ``build`` makes, on ``profile``, up to batch ``most`` (Ideal: at it)."""
    if system is System.IDEAL:
        return ideal(build, profile, most)
    return RUNNERS[system](build, profile, most)


__all__ = ["Build", "Schedule", "Status", "System", "SystemEstimate", "estimate", "ideal",
           "largest_batch", "layer_placement", "unrolled", "node_times", "op_placement", "pipeline_schedule",
           "placement_memory", "small_batch", "swap", "swap_stall", "tofu", "tofu_fit", "working_set"]
