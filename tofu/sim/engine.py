"""The engine: a discrete-event simulation of one training iteration as MXNet's dependency engine runs it.

Input: a :class:`~tofu.sim.program.Program` (the tasks of the partitioned graph, forward, backward and update)
and a :class:`~tofu.sim.hardware.Profile`. Output: an :class:`Execution`, the iteration's time, each device's
busy and idle time, the bytes over every link, how much communication overlaps compute, the memory each device
holds over time, and the timeline (every task's start, end and resource).

The rules (MXNet 1.9.1's ``ThreadedEnginePerDevice``; numbers named where they are used):

* A task starts when every task it depends on has finished and its resource is free. Each device has one
  compute stream, which runs its kernels and updates one at a time, the ready one with the smallest task id
  first (:attr:`Order.ID`, the default: the program's order, forward before backward) or the one that became
  ready first (:attr:`Order.FIFO`: MXNet's worker queues, ``kWorkerQueue = kFIFO`` in
  ``threaded_engine_perdevice.cc``). At most ``profile.concurrency`` devices compute at once (the CPU contexts
  of this machine share its cores: 1; GPUs: all).
* A copy between devices runs on one of its source's ``profile.copy_engines`` copy engines (MXNet pushes a
  GPU-to-GPU copy to the source's copy workers, ``MXNET_GPU_COPY_NTHREADS``, default 2), beside the compute
  stream, so copies overlap compute; with no copy engines it runs on the source's compute stream (a CPU
  context's copies run in its compute workers). A copy first waits a fixed per-transfer latency,
  ``profile.copy_launch`` (the profile's copy launch cost: for ``k80x8`` the assumed 10 us of a launch, to be
  measured in part 2 of issue 21) plus ``profile.task_seconds``, then moves its bytes.
* A transfer crosses the links :meth:`Profile.route` gives (the uplinks of every interconnect domain it leaves
  and enters, one per direction; a shared level's one link). The links are shared max-min fairly among the
  transfers crossing them at each moment (progressive filling: raise every rate together; a link that fills
  freezes the rates of its transfers; repeat), the rates recomputed whenever a transfer starts or finishes.
* A compute task takes :func:`kernel_seconds`: its op class's size-dependent curve, or its op's own where the
  profile measured one (:attr:`tofu.sim.hardware.KernelModel.ops`) (:mod:`tofu.sim.kernels`; a profile without curves: the roofline of its class rates, :func:`tofu.sim.kernels.from_rates`) plus
  ``profile.task_seconds``, the fixed cost of one op inside a large bound graph (the ``cpu`` profile's is
  measured on a calibration graph by :mod:`tofu.sim.calibrate`; the GPU profiles': 0); an update takes its
  kernel time alone (:func:`task_seconds`). A program that MXNet's executor runs in bulk segments
  (:func:`bulks`: every task on one device, no copy) charges ``profile.bulk_task_seconds`` instead (None:
  ``task_seconds``). The iteration's time is the last task's end plus ``profile.step_seconds`` (the executor's
  fixed cost per iteration).

Memory: a tensor is held on its device from the start of the task that writes it to the end of its last
reader (a tensor nothing reads: to its writer's end); parameters, their gradient arrays, optimizer state and
bound inputs are held throughout. MXNet's memory planner, which reuses and shares buffers, is not modelled (so
this is the memory of the schedule, not the executor's pool), nor is temporary workspace.
"""
from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tofu.sim import kernels
from tofu.sim.hardware import Link, Profile
from tofu.sim.program import Program, Task, TaskKind, program_from_plan, program_from_symbol


class Stream(enum.Enum):
    COMPUTE = "compute"
    COPY = "copy"


class Order(enum.Enum):
    """Which ready task a free stream runs first."""

    ID = "id"          # the smallest task id (the program's order: forward before backward, sums and updates last)
    FIFO = "fifo"      # the first to become ready, ties by id (MXNet's GPU and CPU worker queues are FIFO)


@dataclass(frozen=True)
class Span:
    """When and where one task ran: ``device``'s ``stream`` (a copy engine's index as ``lane``)."""

    task: int
    start: float
    end: float
    device: int
    stream: Stream
    lane: int = 0


@dataclass(frozen=True)
class Execution:
    """One simulated iteration.

    Attributes:
        profile: the profile's name.
        seconds: the iteration: the last task's end plus ``step_seconds``.
        makespan: the last task's end.
        busy: per device, seconds its compute stream runs kernels and updates.
        idle: per device, ``makespan - busy``.
        link_bytes: bytes over each link the copies cross, (link, bytes) in the profile's order.
        comm_seconds: per device, seconds during which some copy from or to it is under way.
        overlapped_seconds: per device, the part of ``comm_seconds`` during which it also computes.
        peak_bytes: per device, the most memory held at once (see the module docstring).
        memory: per device, the memory held over time as (time, bytes) steps.
        spans: every task's :class:`Span`, by task id.
        program: the program simulated.
    """

    profile: str
    seconds: float
    makespan: float
    busy: tuple[float, ...]
    idle: tuple[float, ...]
    link_bytes: tuple[tuple[Link, float], ...]
    comm_seconds: tuple[float, ...]
    overlapped_seconds: tuple[float, ...]
    peak_bytes: tuple[int, ...]
    memory: tuple[tuple[tuple[float, int], ...], ...]
    spans: tuple[Span, ...]
    program: Program = field(repr=False, compare=False)

    @property
    def overlap_fraction(self) -> float:
        """The fraction of communication time overlapped with compute: sum over devices of the seconds a
        copy from or to a device is under way while the device computes, over the seconds such a copy is under
        way (1 without communication)."""
        total = sum(self.comm_seconds)
        return sum(self.overlapped_seconds) / total if total > 0 else 1.0


KernelTime = Callable[[Task, Profile], float]


def kernel_seconds(task: Task, profile: Profile) -> float:
    """The time of one compute or update task: its class's size-dependent curve on its FLOPs, bytes and grain,
    :func:`tofu.sim.kernels.seconds` (t = L + max(w / r(w), the roofline's other side), r(w) = R w^a /
    (w^a + h^a); a profile without curves: its roofline). An update (the optimizer's, one call per parameter
    shard) takes the profile's ``update_launch_seconds`` as its launch when the profile has one, unless the
    profile's kernels hold a curve of the update's own op (measured with its launch: ``tofu.sim.calibrate``'s
    update sweep). A task whose op has a curve of its own in the profile's kernels (``KernelModel.ops``) is timed
    by it instead of its class's."""
    model = kernels.kernel_model(profile)
    launch = None
    if task.kind is TaskKind.UPDATE and profile.update_launch_seconds is not None and model.own(task.op) is None:
        launch = profile.update_launch_seconds
    return kernels.seconds(task.op_class, task.flops, task.nbytes, model, launch, task.grain, task.op)


def bulks(program: Program) -> bool:
    """Whether MXNet's executor runs every op of ``program`` inside a bulk segment: every task on one device and
    no copy.

    MXNet 1.9.1 (``GraphExecutor::InitOpSegs``, ``BulkOpSegs``, ``CreateCachedSegOpr`` in
    ``src/executor/graph_executor.cc``), with ``MXNET_EXEC_BULK_EXEC_TRAIN`` on (the default), cuts a training
    graph's forward nodes, then its backward nodes, in topological order into segments of at most
    ``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD`` / ``_BWD`` (15) ops, ending one at every op that is not
    synchronous (a ``_CrossDeviceCopy``); a segment whose ops all run on one context is pushed as one engine op,
    any other op by op. On one context without copies every op is in such a segment. A multi-context graph
    bulks only the segments that happen to lie on one context, which depends on MXNet's topological order (not
    the program's): not modelled, the ``cpu`` profile's ``task_seconds`` is fitted on such graphs as they come.
    """
    return not any(t.kind is TaskKind.COPY for t in program.tasks) and len({t.device for t in program.tasks}) <= 1


def task_seconds(task: Task, profile: Profile, kernel_time: KernelTime = kernel_seconds,
                 bulked: bool = False) -> float:
    """What one task holds its stream for, beside a copy's bytes: a compute task its kernel time plus
    ``profile.task_seconds`` (``bulked``, an op of a program that :func:`bulks`: ``profile.bulk_task_seconds``
    when the profile has one); a copy its latency ``profile.copy_launch`` plus ``profile.task_seconds``; an
    update its kernel time alone (its launch, ``update_launch_seconds``, is measured on the imperative call the
    runtime makes, which holds an op's fixed cost already)."""
    if task.kind is TaskKind.COPY:
        return profile.copy_launch + profile.task_seconds
    if task.kind is TaskKind.UPDATE:
        return kernel_time(task, profile)
    fixed = profile.bulk_task_seconds if bulked and profile.bulk_task_seconds is not None else profile.task_seconds
    return kernel_time(task, profile) + fixed


def max_min_rates(routes: Mapping[int, Sequence[Link]], capacity: Mapping[Link, float]) -> dict[int, float]:
    """The max-min fair rates of transfers over shared links, by progressive filling.

    Every unfrozen transfer's rate rises together; the link whose remaining capacity divided by its unfrozen
    transfers is smallest fills first, freezing those transfers at that share; repeat until all are frozen.
    A transfer that crosses no link gets ``inf``. Ties are broken by the link's order in ``capacity``.

    >>> from tofu.sim.hardware import Direction
    >>> bus = Link("bus", 0, Direction.SHARED)
    >>> max_min_rates({1: [bus], 2: [bus]}, {bus: 10.0})
    {1: 5.0, 2: 5.0}
    """
    index = {link: i for i, link in enumerate(capacity)}
    return _fair_rates({f: tuple(index[x] for x in links) for f, links in routes.items()}, list(capacity.values()))


def _fair_rates(routes: Mapping[int, tuple[int, ...]], capacity: Sequence[float]) -> dict[int, float]:
    """:func:`max_min_rates` on links numbered by their position in ``capacity``."""
    rates: dict[int, float] = {}
    users: dict[int, set[int]] = {}
    for f, links in routes.items():
        if not links:
            rates[f] = math.inf
        for x in links:
            users.setdefault(x, set()).add(f)
    left = {x: capacity[x] for x in users}
    while users:
        link = min(users, key=lambda x: (left[x] / len(users[x]), x))
        share = left[link] / len(users[link])
        for f in sorted(users.pop(link)):
            rates[f] = share
            for other in routes[f]:
                left[other] -= share
                if other in users:
                    users[other].discard(f)
                    if not users[other]:
                        del users[other]
    return rates


def simulate(program: Program, profile: Profile, kernel_time: KernelTime = kernel_seconds,
             order: Order = Order.ID) -> Execution:
    """One iteration of ``program`` on ``profile`` (see the module docstring).

    Args:
        program: the tasks.
        profile: the machine.
        kernel_time: a compute task's seconds (default :func:`kernel_seconds`).
        order: which ready task a free compute stream or copy engine runs first.

    Raises:
        ValueError: the program uses more devices than the profile has, or its dependencies never resolve.
    """
    return _Simulation(program, profile, kernel_time, order).run()


class _Simulation:
    def __init__(self, program: Program, profile: Profile, kernel_time: KernelTime, order: Order = Order.ID):
        if program.workers > profile.devices:
            raise ValueError(f"the program runs on {program.workers} devices, profile {profile.name} has "
                             f"{profile.devices}")
        self.program, self.profile, self.fifo = program, profile, order is Order.FIFO
        n = len(program.tasks)
        self.waiting = [len(t.deps) for t in program.tasks]
        self.successors: list[list[int]] = [[] for _ in range(n)]
        for t in program.tasks:
            for d in t.deps:
                self.successors[d].append(t.id)
        bulked = bulks(program)
        self.duration = [task_seconds(t, profile, kernel_time, bulked) for t in program.tasks]
        pairs: dict[tuple[int, int], tuple[Link, ...]] = {}
        self.routes: dict[int, tuple[Link, ...]] = {}
        for t in program.tasks:
            if t.kind is TaskKind.COPY:
                if (t.src, t.dst) not in pairs:
                    pairs[(t.src, t.dst)] = profile.route(t.src, t.dst)
                self.routes[t.id] = pairs[(t.src, t.dst)]
        level = {lv.name: i for i, lv in enumerate(profile.levels)}
        links = sorted({x for r in self.routes.values() for x in r},
                       key=lambda x: (level[x.level], x.domain, x.direction.value))
        self.links = tuple(links)
        number = {x: i for i, x in enumerate(links)}
        self.capacity = [profile.levels[level[x.level]].bandwidth for x in links]
        self.hops = {f: tuple(number[x] for x in r) for f, r in self.routes.items()}
        k = program.workers
        self.engines = profile.copy_engines
        self.ready_compute: list[list[tuple[float, int]]] = [[] for _ in range(k)]     # (key, task) heaps
        self.ready_copy: list[list[tuple[float, int]]] = [[] for _ in range(k)]
        self.stream_free = [True] * k
        self.free_lanes: list[list[int]] = [list(range(self.engines)) for _ in range(k)]
        self.slots = min(profile.concurrency, k)
        self.start = [math.nan] * n
        self.end = [math.nan] * n
        self.where: list[tuple[int, Stream, int]] = [(0, Stream.COMPUTE, 0)] * n
        self.now = 0.0
        self.running: list[tuple[float, int]] = []          # (end, task): kernels and copies' latencies
        self.transfers: dict[int, float] = {}                # copy -> bytes left
        self.rates: dict[int, float] = {}
        self.dirty = False

    # ------------------------------------------------------------------------------------------ resources
    def ready(self, tid: int) -> None:
        t = self.program.tasks[tid]
        key = (self.now if self.fifo else 0.0, tid)
        if t.kind is TaskKind.COPY and self.engines:
            heapq.heappush(self.ready_copy[t.src], key)
        else:
            heapq.heappush(self.ready_compute[t.device], key)

    def dispatch(self) -> None:
        while self.slots:
            free = [(q[0], d) for d, q in enumerate(self.ready_compute) if q and self.stream_free[d]]
            if not free:
                break
            _, d = min(free)
            _, tid = heapq.heappop(self.ready_compute[d])
            self.stream_free[d] = False
            self.slots -= 1
            self.begin(tid, d, Stream.COMPUTE, 0)
        for d, q in enumerate(self.ready_copy):
            while q and self.free_lanes[d]:
                _, tid = heapq.heappop(q)
                self.begin(tid, d, Stream.COPY, self.free_lanes[d].pop(0))

    def begin(self, tid: int, device: int, stream: Stream, lane: int) -> None:
        self.start[tid] = self.now
        self.where[tid] = (device, stream, lane)
        heapq.heappush(self.running, (self.now + self.duration[tid], tid))    # a copy: its latency, then its bytes

    def release(self, tid: int) -> None:
        device, stream, lane = self.where[tid]
        if stream is Stream.COPY:
            self.free_lanes[device].append(lane)
            self.free_lanes[device].sort()
        else:
            self.stream_free[device] = True
            self.slots += 1

    def finish(self, tid: int) -> None:
        self.end[tid] = self.now
        self.release(tid)
        for s in self.successors[tid]:
            self.waiting[s] -= 1
            if not self.waiting[s]:
                self.ready(s)

    # ------------------------------------------------------------------------------------------ the loop
    def run(self) -> Execution:
        tasks = self.program.tasks
        for t in tasks:
            if not t.deps:
                self.ready(t.id)
        done = 0
        while done < len(tasks):
            self.dispatch()
            if self.dirty:
                self.rates = _fair_rates({f: self.hops[f] for f in self.transfers}, self.capacity)
                self.dirty = False
            t_next = self.running[0][0] if self.running else math.inf
            for f, left in self.transfers.items():
                t_next = min(t_next, self.now + left / self.rates[f])
            if t_next == math.inf:
                stuck = next(i for i, e in enumerate(self.end) if math.isnan(e))
                raise ValueError(f"task {stuck} ({tasks[stuck].label}) never becomes ready: the program's "
                                 f"dependencies do not resolve")
            dt = t_next - self.now
            self.now = t_next
            finished: list[int] = []
            for f in list(self.transfers):
                left = self.transfers[f] - self.rates[f] * dt
                if left <= 1e-9 * tasks[f].nbytes or self.now + left / self.rates[f] <= self.now:
                    del self.transfers[f]
                    finished.append(f)
                    self.dirty = True
                else:
                    self.transfers[f] = left
            while self.running and self.running[0][0] <= self.now:
                _, tid = heapq.heappop(self.running)
                t = tasks[tid]
                if t.kind is TaskKind.COPY and t.nbytes > 0 and self.routes[tid]:
                    self.transfers[tid] = t.nbytes           # the latency is over: the bytes move
                    self.dirty = True
                else:
                    finished.append(tid)
            for tid in sorted(finished):
                self.finish(tid)
                done += 1
        return self._result()

    # ----------------------------------------------------------------------------------------- the result
    def _result(self) -> Execution:
        program, profile = self.program, self.profile
        k = program.workers
        makespan = max(self.end, default=0.0)
        spans = tuple(Span(t.id, self.start[t.id], self.end[t.id], *self.where[t.id]) for t in program.tasks)
        busy = [0.0] * k
        compute: list[list[tuple[float, float]]] = [[] for _ in range(k)]
        comm: list[list[tuple[float, float]]] = [[] for _ in range(k)]
        link_bytes = dict.fromkeys(self.links, 0.0)
        for t, s in zip(program.tasks, spans):
            if t.kind is TaskKind.COPY:
                for link in self.routes[t.id]:
                    link_bytes[link] += t.nbytes
                comm[t.src].append((s.start, s.end))
                comm[t.dst].append((s.start, s.end))
            else:
                busy[t.device] += s.end - s.start
                compute[t.device].append((s.start, s.end))
        comm_seconds, overlapped = [], []
        for d in range(k):
            c, w = _union(comm[d]), _union(compute[d])
            comm_seconds.append(sum(b - a for a, b in c))
            overlapped.append(_intersection(c, w))
        memory = _memory(program, spans, makespan)
        return Execution(profile.name, makespan + profile.step_seconds, makespan, tuple(busy),
                         tuple(makespan - b for b in busy), tuple(link_bytes.items()), tuple(comm_seconds),
                         tuple(overlapped), tuple(max((b for _, b in m), default=0) for m in memory), memory, spans,
                         program)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersection(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> float:
    """The measure of the intersection of two sorted disjoint interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0.0, hi - lo)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def _memory(program: Program, spans: Sequence[Span], makespan: float) -> tuple[tuple[tuple[float, int], ...], ...]:
    """Per device, the bytes held over time as (time, bytes) steps (see the module docstring)."""
    events: list[list[tuple[float, int]]] = [[] for _ in range(program.workers)]
    for tensor, readers in zip(program.tensors, program.readers):
        if tensor.kind.resident or tensor.producer is None:
            begin, end = 0.0, makespan
        else:
            begin = spans[tensor.producer].start
            end = max((spans[r].end for r in readers), default=spans[tensor.producer].end)
        events[tensor.device].append((begin, tensor.nbytes))
        events[tensor.device].append((end, -tensor.nbytes))
    return tuple(held_over_time(ev) for ev in events)


def held_over_time(events: Sequence[tuple[float, int]]) -> tuple[tuple[float, int], ...]:
    """Bytes held over time as (time, bytes) steps, from (time, +bytes allocated or -bytes freed) events; at
    equal times frees come first, and one step per time."""
    steps: list[tuple[float, int]] = []
    held = 0
    for time, delta in sorted(events, key=lambda e: (e[0], e[1])):
        held += delta
        if steps and steps[-1][0] == time:
            steps[-1] = (time, held)
        else:
            steps.append((time, held))
    return tuple(steps)


def simulate_iteration(graph, plan, profile: Profile, from_symbol: bool = False, order: Order = Order.ID,
                       replicas: bool = False) -> Execution:
    """One training iteration of ``graph`` partitioned by ``plan`` on ``profile``: the program built from the plan
    (:func:`tofu.sim.program.program_from_plan`, no MXNet) or, with ``from_symbol``, read from the partitioned
    MXNet symbol (:func:`tofu.sim.program.program_from_symbol`; small models), simulated by :func:`simulate`
    with ``order``; ``replicas``: with the runtime's parameter replicas, as ``tofu run`` binds the graph.

    Raises:
        ValueError: the plan has more workers than the profile has devices.
    """
    if plan.workers > profile.devices:
        raise ValueError(f"the plan has {plan.workers} workers, profile {profile.name} has {profile.devices} devices")
    program = program_from_symbol(graph, plan, replicas) if from_symbol else \
        program_from_plan(graph, plan, replicas=replicas)
    return simulate(program, profile, order=order)
