"""The systems of the paper's throughput comparison (section 7), each run on the event-driven engine: Ideal,
SmallBatch, Swap, OpPlacement and Tofu share one kernel model, one link model and one memory model.

Input: a model builder (batch -> :class:`~tofu.graph.ir.Graph`, e.g. ``experiments.common.model_builder``), a
:class:`~tofu.sim.hardware.Profile`, the largest batch to consider (the paper's Ideal batch: 128 WResNet, 512
RNN) and :class:`Options`. Output: an :class:`Estimate` per system.

Every system's iteration is a :class:`~tofu.sim.program.Program` simulated by :func:`tofu.sim.engine.simulate`
(forward, MXNet's backward, gradient sums with ``options.sum_cap``, SGD-momentum update). With k the profile's
devices and C one device's memory:

- **Ideal**: the one-device program at the Ideal batch, memory not limited; throughput k b / T (the paper: one
  GPU's throughput times k, no communication).
- **SmallBatch**: the one-device program at the largest batch b <= ``most`` that fits C (integer bisection);
  k b / T. OOM when batch 1 does not fit.
- **Swap**: the one-device program under the LRU swapper of :mod:`tofu.sim.swap` (capacity C, the prefetch window
  ``options.window``), on ``options.replicas`` GPUs (default k) at once, each replica's host copies through its
  own host endpoint and all of them sharing the host links (:func:`tofu.sim.hardware.with_host`); b the largest
  batch <= ``most`` the swapper can run (every operator's blocks fit C, the swapped-out copies fit the replica's
  share of host memory; integer bisection); replicas b / T.
- **OpPlacement** (RNNs, as in the paper): the one-device dataflow with each graph node on its layer's device
  (:func:`layer_placement`: layers round-robin), a copy for every tensor read on another
  device (:func:`tofu.sim.program.placed`); the engine pipelines the unrolled time steps (step t of layer l+1
  runs beside step t+1 of layer l). The largest batch <= ``most`` that fits (integer bisection); b / T. A graph
  with no layer unrolled over time steps (WResNet) is n/a.
- **Tofu**: the plan of ``options.algo`` on k devices at the largest batch ``most / 2^i`` that fits (the paper's
  powers of two), its program built from the plan (:func:`tofu.sim.program.program_from_plan`, what
  :func:`tofu.sim.engine.simulate_iteration` simulates, with ``options.sum_cap``); b / T.

*Fits* (``options.fit``): :attr:`Fit.ENGINE` (default), the simulated iteration's peak memory on the fullest
device (tensors held from their writer to their last reader, the memory model the swapper replays);
:attr:`Fit.PLAN`, the planner's estimate (``plan.per_device_bytes``; for OpPlacement :func:`placement_memory`). Swap always replays the program's own tensors.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tofu.errors import TofuError
from tofu.graph.ir import Graph, Role
from tofu.search.algorithms import plan_graph
from tofu.search.plan import Plan
from tofu.sim.engine import Execution, Order, simulate
from tofu.sim.glue import dataflow_from_plan
from tofu.sim.hardware import Profile, with_host
from tofu.sim.program import MXNET_GRAD_SUM_CAP, Program, TaskKind, build_program, placed, program_from_plan
from tofu.sim.swap import WINDOW, DoesNotFit, replay, replicate, swap_program, trace_of

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


class Fit(enum.Enum):
    """How a batch's memory is judged against a device's."""

    ENGINE = "engine"        # the simulated iteration's peak on the fullest device
    PLAN = "plan"            # the planner's estimate (plan.per_device_bytes)


@dataclass(frozen=True)
class Options:
    """How the systems are run.

    Attributes:
        fit: how SmallBatch, OpPlacement and Tofu judge that a batch fits (see the module docstring).
        sum_cap: MXNet's in-place gradient sum cap the programs are built with (default MXNet's own, 8: the
            paper's systems ran on MXNet; tofu's runtime raises it for its own checks, docs/runtime.md).
        window: Swap's prefetch window, in operators.
        replicas: Swap's data-parallel replicas (None: every device of the profile).
        order: which ready task a free stream runs first (:class:`tofu.sim.engine.Order`).
        algo: Tofu's plan finder (``tofu.search.algorithms``).
    """

    fit: Fit = Fit.ENGINE
    sum_cap: int = MXNET_GRAD_SUM_CAP
    window: int = WINDOW
    replicas: int | None = None
    order: Order = Order.ID
    algo: str = "tofu"


@dataclass(frozen=True)
class Estimate:
    """One system's training throughput on a profile, from the engine.

    Attributes:
        batch: samples per iteration of one replica (Ideal, SmallBatch, Swap) or of the machine (OpPlacement,
            Tofu); None when no batch fits.
        replicas: independent copies of the model the throughput counts.
        samples_per_second: all replicas together; 0 unless ``status`` is OK.
        seconds: one simulated iteration (of one replica; Swap: every replica at once).
        peak_bytes: the fullest device's peak memory at ``batch`` (Swap: its block stays, at most the capacity;
            OOM: at the smallest batch tried).
        busy_seconds: the busiest device's compute-stream seconds in the iteration.
        transfer_bytes: bytes copied per iteration: between devices (OpPlacement, Tofu), to and from host memory
            (Swap, one replica's).
        note: what limited the batch, or why OOM / n/a.
        execution: the simulated iteration (None when none ran), for its timeline (:mod:`tofu.sim.trace`).
    """

    system: System
    model: str
    status: Status
    batch: int | None
    replicas: int
    samples_per_second: float
    seconds: float
    peak_bytes: int
    capacity_bytes: float
    busy_seconds: float = 0.0
    transfer_bytes: float = 0.0
    note: str = ""
    execution: Execution | None = field(default=None, repr=False, compare=False)


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
    """The trivial plan: the whole graph on one device."""
    return plan_graph(graph, 1, "tofu")


def memory(plan: Plan) -> int:
    """The planner's per-device memory estimate of ``plan`` (what :attr:`Fit.PLAN` judges)."""
    return int(dict(plan.per_device_bytes)["total"])


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


def placement_memory(graph: Graph, plan: Plan, placement: Sequence[int], received: Sequence[int]) -> int:
    """The planner's estimate for a placement (:attr:`Fit.PLAN`): the fullest device's share of the one-device
    plan's categories, by its share of the parameters (weights, gradients, history, aux) and of the activations
    produced, plus the tensors it receives, plus the whole workspace."""
    whole = dict(plan.per_device_bytes)
    devices = max(placement) + 1
    params = [0] * devices
    for t in graph.by_role(Role.PARAM):
        if graph.consumers(t.id):
            params[placement[graph.consumers(t.id)[0]]] += t.nbytes
    acts = [0] * devices
    for node in graph.nodes:
        acts[placement[node.id]] += sum(graph.tensors[o].nbytes for o in node.outputs)
    p_all, a_all = max(1, sum(params)), max(1, sum(acts))
    weights = whole["params"] + whole["grads"] + whole["optimizer"] + whole["aux"]
    return max(int(weights * params[d] / p_all + whole["activations"] * acts[d] / a_all + received[d]
                   + whole["workspace"]) for d in range(devices))



def one_device_program(graph: Graph, options: Options = Options()) -> Program:
    """The whole of ``graph`` on one device (:func:`one_device`'s plan)."""
    return program_from_plan(graph, one_device(graph), options.sum_cap)


def _copied(execution: Execution) -> float:
    return sum(t.nbytes for t in execution.program.tasks if t.kind is TaskKind.COPY)


def _ok(system: System, graph: Graph, batch: int, replicas: int, ex: Execution, peak: int, profile: Profile,
        note: str = "", transfer: float | None = None) -> Estimate:
    return Estimate(system, graph.name, Status.OK, batch, replicas, replicas * batch / ex.seconds, ex.seconds, peak,
                    profile.memory_bytes, max(ex.busy), _copied(ex) if transfer is None else transfer, note, ex)


def _oom(system: System, model: str, peak: int, profile: Profile, note: str) -> Estimate:
    return Estimate(system, model, Status.OOM, None, 1, 0.0, 0.0, peak, profile.memory_bytes, note=note)


def ideal(build: Build, profile: Profile, batch: int, options: Options = Options()) -> Estimate:
    """One device's simulated iteration at ``batch`` with unlimited memory, times the profile's devices."""
    graph = build(batch)
    ex = simulate(one_device_program(graph, options), profile, order=options.order)
    return _ok(System.IDEAL, graph, batch, profile.devices, ex, ex.peak_bytes[0], profile, "memory not limited")


def small_batch(build: Build, profile: Profile, most: int, options: Options = Options()) -> Estimate:
    """The largest batch up to ``most`` whose one-device iteration fits one device, times the devices."""
    cases: dict[int, tuple[Graph, Execution, int]] = {}

    def at(b: int) -> tuple[Graph, Execution, int]:
        if b not in cases:
            g = build(b)
            plan = one_device(g)
            ex = simulate(program_from_plan(g, plan, options.sum_cap), profile, order=options.order)
            cases[b] = (g, ex, ex.peak_bytes[0] if options.fit is Fit.ENGINE else memory(plan))
        return cases[b]

    b = largest_batch(lambda b: at(b)[2] <= profile.memory_bytes, most)
    if b is None:
        g, _, need = at(1)
        return _oom(System.SMALL_BATCH, g.name, need, profile, "batch 1 does not fit one device")
    graph, ex, need = at(b)
    return _ok(System.SMALL_BATCH, graph, b, profile.devices, ex, need, profile)


def swap(build: Build, profile: Profile, most: int, options: Options = Options()) -> Estimate:
    """The LRU swapper of :mod:`tofu.sim.swap` on every replica at the largest batch it runs (module docstring).

    Raises:
        ValueError: the profile has no host path (:func:`tofu.sim.hardware.with_host`), or more replicas than
            devices.
    """
    hosted = with_host(profile)
    replicas = options.replicas or profile.devices
    share = profile.host_memory_bytes / replicas if profile.host_memory_bytes else math.inf
    cases: dict[int, tuple[Graph, Program, object]] = {}

    def at(b: int):
        if b not in cases:
            g = build(b)
            program = one_device_program(g, options)
            try:
                result = replay(trace_of(program), profile.memory_bytes, options.window, share)
            except DoesNotFit as e:
                result = e
            cases[b] = (g, program, result)
        return cases[b]

    b = largest_batch(lambda b: not isinstance(at(b)[2], DoesNotFit), most)
    if b is None:
        g, _, why = at(1)
        return _oom(System.SWAP, g.name, 0, profile, f"batch 1: {why}")
    graph, program, rep = at(b)
    swapped = replicate(swap_program(program, rep, hosted.host(0)), hosted, replicas)
    ex = simulate(swapped.program, hosted, order=options.order)
    note = (f"per replica and iteration {rep.bytes_in / 1e9:.4g} GB in, {rep.bytes_out / 1e9:.4g} GB out; "
            f"{rep.warmup} warm-up iterations" + ("" if rep.steady else " (no steady state)"))
    return _ok(System.SWAP, graph, b, replicas, ex, swapped.peak_bytes(ex), profile, note,
               rep.bytes_in + rep.bytes_out)


def placed_program(graph: Graph, devices: int, options: Options = Options()) -> Program:
    """``graph``'s layers round-robin on ``devices`` devices (:func:`layer_placement`), every
    tensor read on another device copied there."""
    placement = layer_placement(graph, devices)
    flow = placed(dataflow_from_plan(graph, one_device(graph)), placement)
    return build_program(flow, graph, max(placement) + 1, options.sum_cap)


def op_placement(build: Build, profile: Profile, most: int, options: Options = Options()) -> Estimate:
    """Layers round-robin on the profile's devices, pipelined over time steps by the engine (module docstring)."""
    probe = build(1)
    if not unrolled(probe):
        return Estimate(System.OP_PLACEMENT, probe.name, Status.NA, None, 1, 0.0, 0.0, 0, profile.memory_bytes,
                        note="no unrolled time steps to pipeline (the paper: RNNs only)")
    cases: dict[int, tuple[Graph, Execution, int]] = {}

    def at(b: int) -> tuple[Graph, Execution, int]:
        if b not in cases:
            g = build(b)
            ex = simulate(placed_program(g, profile.devices, options), profile, order=options.order)
            if options.fit is Fit.ENGINE:
                need = max(ex.peak_bytes)
            else:
                placement = layer_placement(g, profile.devices)
                received = [0] * (max(placement) + 1)
                for t in ex.program.tasks:
                    if t.kind is TaskKind.COPY:
                        received[t.dst] += int(t.nbytes)
                need = placement_memory(g, one_device(g), placement, received)
            cases[b] = (g, ex, need)
        return cases[b]

    b = largest_batch(lambda b: at(b)[2] <= profile.memory_bytes, most)
    if b is None:
        g, _, need = at(1)
        return _oom(System.OP_PLACEMENT, g.name, need, profile, "batch 1 does not fit the fullest device")
    graph, ex, need = at(b)
    return _ok(System.OP_PLACEMENT, graph, b, 1, ex, need, profile)


def tofu(build: Build, profile: Profile, most: int, options: Options = Options()) -> Estimate:
    """``options.algo``'s plan on every device at the largest batch ``most / 2^i`` that fits (module docstring)."""
    b, note, need, name = most, "", 0, ""
    while b >= 1:
        graph = build(b)
        name = graph.name
        try:
            plan = plan_graph(graph, profile.devices, options.algo)
        except TofuError as e:                      # e.g. no way to split this batch: try a smaller one
            note = note or f"{options.algo} cannot plan batch {b}: {e}"
            b //= 2
            continue
        if options.fit is Fit.PLAN and memory(plan) > profile.memory_bytes:
            need = memory(plan)
            b //= 2
            continue
        ex = simulate(program_from_plan(graph, plan, options.sum_cap), profile, order=options.order)
        need = max(ex.peak_bytes) if options.fit is Fit.ENGINE else memory(plan)
        if need <= profile.memory_bytes:
            return _ok(System.TOFU, graph, b, 1, ex, need, profile, note)
        b //= 2
    return _oom(System.TOFU, name, need, profile, note or "batch 1 does not fit")


RUNNERS: dict[System, Callable[..., Estimate]] = {
    System.IDEAL: ideal, System.SMALL_BATCH: small_batch, System.SWAP: swap, System.OP_PLACEMENT: op_placement,
    System.TOFU: tofu}


def estimate(system: System, build: Build, profile: Profile, most: int, options: Options = Options()) -> Estimate:
    """``system``'s throughput for the model ``build`` makes, on ``profile``, up to batch ``most`` (Ideal: at it)."""
    return RUNNERS[system](build, profile, most, options)


__all__ = ["Build", "Estimate", "Fit", "Options", "Status", "System", "largest_batch", "one_device", "RUNNERS", "estimate", "ideal", "one_device_program", "op_placement",
           "placed_program", "small_batch", "swap", "tofu"]
