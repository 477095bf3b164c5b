"""Swap, the paper's swapping baseline as its authors built it into their MXNet fork: an LRU swapper between one
GPU's memory and host memory, with a prefetcher (PAPER.md, "Baselines"), replayed over the training iteration and
run on the engine.

Input: the one-device program of a model (:func:`tofu.sim.program.program_from_plan` of
:func:`tofu.sim.systems.one_device`), the GPU's capacity and the prefetch window. Output: a :class:`Replay`, what
the swapper does over one steady-state iteration, in order (every allocation, eviction, drop, fetch, prefetch and
release), and a :class:`SwapProgram`, the program with the host copies that the engine runs
(:func:`tofu.sim.engine.simulate` on :func:`tofu.sim.hardware.with_host` of the profile), for one GPU or, by
:func:`replicate`, for several data-parallel replicas whose host copies share the host links.

**The policy** (:func:`replay`), over an access :class:`Trace`: the program's tasks in execution order (task ids;
each task an *operator*), each tensor a *block* of its bytes.

* A parameter, its gradient array, its momentum and a bound input are *persistent*: they live across iterations.
  Every other block is *transient*: it gets memory when its writer runs and loses it after its last access of
  the iteration (MXNet's memory planner reuses it).
* Before operator i runs, each block it reads that is not on the GPU is swapped in (a *fetch*: the operator waits
  for it), then each block it writes that is not on the GPU gets memory (an *allocation*: a write overwrites,
  nothing moves). Operator i runs; what it writes loses its host copy (it is *dirty*). Transient blocks at their
  last access are then freed.
* When an allocation (a fetch's, an operator's output's, a prefetch's) would exceed the capacity, the least
  recently used blocks go to host memory, never one that operator i reads or writes (an access or a swap-in is a
  use). A block whose host copy is valid (read only since it came in) is *dropped*, nothing moved; a dirty one is
  *copied out*. A block that one of the next W operators reads (*soon used*) goes only when the others do not
  free enough.
* After operator i the *prefetcher* walks operators i+1 .. i+W (the window, about 100 operators, running on into
  the next iteration) and swaps in, in that order, every block they read that is in host memory, evicting only
  blocks that are not soon used; the first block it finds no room for ends the walk.
* A block read again after it was evicted is swapped in again (by the prefetcher, else fetched).
* Operator i fails when the blocks it uses exceed the capacity; the iteration fails when its valid host copies
  (persistent blocks start in host memory; a copy-out adds one; a write or a transient block's release removes
  one; a swap-in keeps it) exceed ``host_capacity`` at some moment of the recorded iteration: :class:`DoesNotFit`.

Iterations repeat: the replay starts with every persistent block in host memory and the GPU empty, replays
iterations until one starts in the state the previous one started in (at most :data:`MAX_WARMUP`), and records
the next one.

**On the engine** (:func:`swap_program`). Every fetch and prefetch becomes a copy task from the GPU's host
endpoint to the GPU, every copy-out one from the GPU to the endpoint (the endpoint runs the copies into the GPU,
the GPU the copies out: each direction has its own copy engines, :class:`tofu.sim.hardware.HostedProfile`). Each
stay of a block on the GPU is a tensor of its own (a :class:`Segment`): what an operator reads is the block's stay
at that moment. Dependencies:

* an operator waits for the stays it reads or writes in place (their writer or swap-in copy) beside its own
  dependencies;
* a copy is issued when operator i starts: it waits for operator i-1 (the swapper acts in execution order); a
  copy-out also waits for every task that used the stay, a swap-in for the copy-out that wrote its host copy;
* memory: each allocation takes its bytes from the releases before it in the replay's order (a FIFO of freed
  bytes; at the start, the capacity less what the GPU holds), and its task (the operator, or the swap-in) waits
  for the tasks whose ends free them: the end of a copy-out, or of every task that used a dropped or freed stay.
  So the GPU never holds more than the capacity on the engine's timeline either (:meth:`SwapProgram.memory`).
"""
from __future__ import annotations

import dataclasses
import enum
import math
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from tofu.errors import TofuError
from tofu.sim.engine import held_over_time
from tofu.sim.hardware import HostedProfile
from tofu.sim.program import Origin, Phase, Program, Task, TaskKind, Tensor

WINDOW = 100
"""The prefetcher's window: about 100 operators ahead in execution order (PAPER.md)."""

MAX_WARMUP = 4
"""Iterations replayed at most before the recorded one, while the state at an iteration's start still changes."""


class DoesNotFit(TofuError):
    """The swapper cannot run the iteration: an operator uses more than the GPU holds, or host memory fills."""


@dataclass(frozen=True)
class Access:
    """The blocks one operator reads and writes (an update writes what it reads: weight and momentum)."""

    reads: tuple[int, ...]
    writes: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    """What the swapper sees of an iteration: the bytes of every block, which blocks are persistent, and each
    operator's accesses in execution order."""

    sizes: tuple[int, ...]
    persistent: frozenset[int]
    steps: tuple[Access, ...]

    def __post_init__(self):
        for i, a in enumerate(self.steps):
            for b in a.reads + a.writes:
                if not 0 <= b < len(self.sizes):
                    raise ValueError(f"operator {i} uses block {b}; the trace has {len(self.sizes)} blocks")


class Move(enum.Enum):
    """What happens to a block (or, RUN, the operator itself)."""

    ALLOCATE = "allocate"    # an operator's output gets memory (nothing moves)
    FETCH = "fetch"          # swapped in for the operator about to run (it waits)
    PREFETCH = "prefetch"    # swapped in for an operator of the window
    COPY_OUT = "copy_out"    # evicted, copied to host memory (it had no valid host copy)
    DROP = "drop"            # evicted, its host copy valid: memory released, nothing moves
    FREE = "free"            # a transient block released after its last access
    RUN = "run"              # the operator runs (block: None)


@dataclass(frozen=True)
class Event:
    """One entry of the replay: at operator ``step`` (the operator about to run, or, after RUN, the one that ran),
    ``move`` of ``block``."""

    step: int
    move: Move
    block: int | None = None


@dataclass(frozen=True)
class Replay:
    """The swapper over one steady-state iteration (see the module docstring).

    Attributes:
        trace: what was replayed.
        capacity: the GPU's bytes.
        window: the prefetcher's window (operators).
        warmup: iterations replayed before this one.
        steady: whether this iteration starts as the one before it did (False: ``MAX_WARMUP`` reached first).
        start: the blocks on the GPU at the iteration's start, least recently used first.
        start_dirty: of those, the ones without a valid host copy.
        start_host: the blocks with a valid host copy at the start.
        events: everything that happened, in order.
        peak_bytes: the most the GPU held at once during the iteration.
        host_peak_bytes: the most host memory held (valid host copies) during the iteration.
    """

    trace: Trace
    capacity: float
    window: int
    warmup: int
    steady: bool
    start: tuple[int, ...]
    start_dirty: frozenset[int]
    start_host: frozenset[int]
    events: tuple[Event, ...]
    peak_bytes: int
    host_peak_bytes: int

    def moved(self, *moves: Move) -> int:
        """Bytes of the blocks of the events of ``moves``."""
        return sum(self.trace.sizes[e.block] for e in self.events if e.move in moves)

    @property
    def bytes_in(self) -> int:
        """Bytes swapped in (fetched and prefetched) per iteration."""
        return self.moved(Move.FETCH, Move.PREFETCH)

    @property
    def bytes_out(self) -> int:
        """Bytes copied out per iteration."""
        return self.moved(Move.COPY_OUT)


class _Swapper:
    """The policy's state; :meth:`iteration` replays one iteration (module docstring)."""

    def __init__(self, trace: Trace, capacity: float, window: int, host_capacity: float):
        self.trace, self.capacity, self.window, self.host_capacity = trace, capacity, window, host_capacity
        self.sizes = trace.sizes
        self.n = len(trace.steps)
        self.gpu: OrderedDict[int, None] = OrderedDict()       # least recently used first
        self.dirty: set[int] = set()
        self.host: set[int] = set(trace.persistent)
        self.used = 0
        self.host_used = sum(self.sizes[b] for b in trace.persistent)
        self.dies: list[list[int]] = [[] for _ in range(self.n)]     # transient blocks by their last access
        last: dict[int, int] = {}
        for i, a in enumerate(trace.steps):
            for b in a.reads + a.writes:
                if b not in trace.persistent:
                    last[b] = i
        for b, i in sorted(last.items()):
            self.dies[i].append(b)
        self.soon: Counter = Counter()      # block -> reads of it by the window's operators
        self.clock = 0                      # the absolute operator: iteration * n + step
        self.events: list[Event] | None = None
        self.peak = self.host_peak = 0
        for j in range(1, window + 1):
            self._window(j, 1)

    # ------------------------------------------------------------------------------------------ the window
    def _window(self, j: int, sign: int) -> None:
        """Adds (sign 1) or removes (-1) the reads of absolute operator ``j`` to the soon-used counts. A read of a
        transient block by the next iteration's operators counts too: it cannot change a decision, since a
        transient block on the GPU or in host memory is read again in this iteration, before that read."""
        if self.n:
            for b in self.trace.steps[j % self.n].reads:
                self.soon[b] += sign

    def _soon(self, block: int) -> bool:
        return self.soon[block] > 0

    # ------------------------------------------------------------------------------------------ moves
    def _note(self, move: Move, block: int | None) -> None:
        if self.events is not None:
            self.events.append(Event(self.clock % self.n, move, block))

    def _room(self, nbytes: int, pinned: set[int], soft: bool) -> bool:
        """Evicts least recently used blocks until ``nbytes`` more fit (soon-used ones last; never ``pinned``);
        with ``soft`` (a prefetch) only blocks not soon used, and nothing when that is not enough (False)."""
        need = self.used + nbytes - self.capacity
        if need <= 0:
            return True
        victims, freed = [], 0
        for b in self.gpu:
            if b not in pinned and not self._soon(b):
                victims.append(b)
                freed += self.sizes[b]
                if freed >= need:
                    break
        if freed < need:
            if soft:
                return False
            for b in self.gpu:
                if b not in pinned and self._soon(b):
                    victims.append(b)
                    freed += self.sizes[b]
                    if freed >= need:
                        break
            if freed < need:
                raise DoesNotFit(f"operator {self.clock % self.n} needs {nbytes} more bytes; the GPU holds "
                                 f"{self.used} of {self.capacity:.0f}, {self.used - freed} of them its own blocks")
        for b in victims:
            self._evict(b)
        return True

    def _evict(self, b: int) -> None:
        del self.gpu[b]
        self.used -= self.sizes[b]
        if b in self.dirty:
            self.dirty.discard(b)
            self._to_host(b)
            self._note(Move.COPY_OUT, b)
        else:
            self._note(Move.DROP, b)

    def _to_host(self, b: int) -> None:
        self.host.add(b)
        self.host_used += self.sizes[b]
        self.host_peak = max(self.host_peak, self.host_used)

    def _drop_host(self, b: int) -> None:
        if b in self.host:
            self.host.discard(b)
            self.host_used -= self.sizes[b]

    def _in(self, b: int, move: Move) -> None:
        self.gpu[b] = None
        self.used += self.sizes[b]
        self.peak = max(self.peak, self.used)
        self._note(move, b)

    # ------------------------------------------------------------------------------------------ one operator
    def _operator(self, i: int) -> None:
        access = self.trace.steps[i]
        pinned = set(access.reads) | set(access.writes)
        need = sum(self.sizes[b] for b in pinned)
        if need > self.capacity:
            raise DoesNotFit(f"operator {i} uses {need} bytes at once, more than the GPU's {self.capacity:.0f}")
        for b in dict.fromkeys(access.reads):
            if b not in self.gpu:
                if b not in self.host:
                    raise ValueError(f"operator {i} reads block {b}, which is nowhere: written after it is read")
                self._room(self.sizes[b], pinned, soft=False)
                self._in(b, Move.FETCH)
        for b in dict.fromkeys(access.writes):
            if b not in self.gpu:
                self._room(self.sizes[b], pinned, soft=False)
                self._in(b, Move.ALLOCATE)
        self._note(Move.RUN, None)
        for b in dict.fromkeys(access.reads + access.writes):
            self.gpu.move_to_end(b)
        for b in access.writes:
            self.dirty.add(b)
            self._drop_host(b)
        for b in self.dies[i]:
            del self.gpu[b]
            self.used -= self.sizes[b]
            self.dirty.discard(b)
            self._drop_host(b)
            self._note(Move.FREE, b)
        self._prefetch()

    def _prefetch(self) -> None:
        for j in range(self.clock + 1, self.clock + self.window + 1):
            for b in self.trace.steps[j % self.n].reads:
                if b in self.gpu or b not in self.host:     # (the next iteration's transient blocks: not yet)
                    continue
                if not self._room(self.sizes[b], set(), soft=True):
                    return
                self._in(b, Move.PREFETCH)

    def iteration(self, record: bool) -> None:
        self.events = [] if record else None
        self.peak = self.used
        self.host_peak = self.host_used
        for i in range(self.n):
            self._operator(i)
            self._window(self.clock + 1, -1)
            self._window(self.clock + self.window + 1, 1)
            self.clock += 1
        if record and self.host_peak > self.host_capacity:
            raise DoesNotFit(f"host memory: {self.host_peak} bytes of host copies exceed {self.host_capacity:.0f}")

    def state(self) -> tuple:
        return tuple(self.gpu), frozenset(self.dirty), frozenset(self.host)


def replay(trace: Trace, capacity: float, window: int = WINDOW, host_capacity: float = math.inf) -> Replay:
    """The swapper over ``trace`` on a GPU of ``capacity`` bytes, in steady state (see the module docstring).

    Raises:
        DoesNotFit: an operator uses more than ``capacity`` at once, or host memory would exceed
            ``host_capacity``.
    """
    if window < 0:
        raise ValueError(f"the prefetch window {window} must not be negative")
    s = _Swapper(trace, capacity, window, host_capacity)
    previous, warmup = None, 0
    while warmup < MAX_WARMUP and s.state() != previous:
        previous = s.state()
        s.iteration(record=False)
        warmup += 1
    steady = s.state() == previous
    start, dirty, host = s.state()
    s.iteration(record=True)
    return Replay(trace, capacity, window, warmup, steady, start, dirty, host, tuple(s.events), s.peak,
                  s.host_peak)


def trace_of(program: Program) -> Trace:
    """The swapper's view of a one-device program: every tensor a block, the resident ones (parameters, their
    gradient arrays and momentum, bound inputs) persistent, every task an operator.

    Raises:
        ValueError: the program runs on more than one device or copies between devices.
    """
    if program.workers != 1 or any(t.kind is TaskKind.COPY for t in program.tasks):
        raise ValueError("the swapper replays a one-device program without copies")
    return Trace(tuple(t.nbytes for t in program.tensors),
                 frozenset(t.id for t in program.tensors if t.kind.resident),
                 tuple(Access(t.reads, t.writes) for t in program.tasks))


# ---------------------------------------------------------------------------------------------- the program

@dataclass(frozen=True)
class Segment:
    """One stay of a block in GPU memory: ``tensor`` of the swapped program, allocated when task ``begin`` starts
    (None: there at the iteration's start), released when every task of ``release`` has ended (empty: at once, a
    stay there at the start and dropped unused; None: still there at the iteration's end)."""

    tensor: int
    begin: int | None
    release: tuple[int, ...] | None


@dataclass(frozen=True)
class SwapProgram:
    """The program with the swapper's host copies (see the module docstring), and every block's stays on the GPU.

    Attributes:
        program: the tasks: the operators (ids renumbered), the copies to and from host memory.
        segments: every stay of a block on a GPU (its tensor's device says which GPU).
        replay: the swapper's iteration the copies come from (one replica's).
        replicas: how many GPUs run it, each with its own host endpoint.
    """

    program: Program
    segments: tuple[Segment, ...]
    replay: Replay
    replicas: int = 1

    def memory(self, execution) -> dict[int, tuple[tuple[float, int], ...]]:
        """Per GPU, the bytes its block stays hold over ``execution``'s timeline as (time, bytes) steps: from the
        start of the task that allocates a stay (0: there at the start) to the end of its release (the
        iteration's end: never released)."""
        spans = execution.spans
        events: dict[int, list[tuple[float, int]]] = {}
        for s in self.segments:
            tensor = self.program.tensors[s.tensor]
            begin = spans[s.begin].start if s.begin is not None else 0.0
            end = execution.makespan if s.release is None else max((spans[t].end for t in s.release), default=begin)
            events.setdefault(tensor.device, []).extend([(begin, tensor.nbytes), (end, -tensor.nbytes)])
        return {device: held_over_time(ev) for device, ev in sorted(events.items())}

    def peak_bytes(self, execution) -> int:
        """The most one GPU holds at once over ``execution``."""
        return max((b for steps in self.memory(execution).values() for _, b in steps), default=0)


def _deps(tasks) -> tuple[int, ...]:
    return tuple(sorted(d for d in set(tasks) if d is not None))


_PHASE = {Phase.FORWARD: Phase.FORWARD, Phase.BACKWARD: Phase.BACKWARD, Phase.UPDATE: Phase.BACKWARD}
"""A copy's phase: its operator's (an update's copies count as the backward's: copies carry the two passes)."""


class _Builder:
    def __init__(self, program: Program, rep: Replay, host: int):
        self.source, self.rep, self.host = program, rep, host
        self.tasks: list[Task] = []
        self.tensors: list[Tensor] = []
        self.segments: list[list] = []                    # [tensor, begin, release]
        self.stay: dict[int, int] = {}                    # block -> its segment (on the GPU)
        self.users: dict[int, list[int]] = {}             # segment -> the tasks that used it
        self.copy: dict[int, int] = {}                    # block -> its host tensor (a valid host copy)
        self.renamed: dict[int, int] = {}                 # operator -> its task
        finite = math.isfinite(rep.capacity)
        held = sum(rep.trace.sizes[b] for b in rep.start)
        self.free: deque | None = deque([[int(rep.capacity) - held, ()]]) if finite else None
        for b in rep.start:
            self._segment(b, None)
        for b in sorted(rep.start_host):
            self.copy[b] = self._tensor(host, b, None)

    def _tensor(self, device: int, block: int, producer: int | None) -> int:
        t = self.source.tensors[block]
        self.tensors.append(Tensor(len(self.tensors), device, t.nbytes, t.kind, producer))
        return len(self.tensors) - 1

    def _segment(self, block: int, begin: int | None) -> int:
        self.segments.append([self._tensor(0, block, begin), begin, None])
        self.stay[block] = len(self.segments) - 1
        self.users[len(self.segments) - 1] = [begin] if begin is not None else []
        return self.segments[-1][0]

    def _take(self, block: int) -> set[int]:
        """The tasks whose ends free the bytes ``block``'s allocation takes (the FIFO of the module docstring)."""
        if self.free is None:
            return set()
        need, deps = self.rep.trace.sizes[block], set()
        while need > 0:
            entry = self.free[0]
            deps.update(entry[1])
            if entry[0] > need:
                entry[0] -= need
                need = 0
            else:
                need -= entry[0]
                self.free.popleft()
        return deps

    def _release(self, block: int, tasks: Sequence[int]) -> None:
        seg = self.stay.pop(block)
        self.segments[seg][2] = tuple(sorted(set(tasks)))
        if self.free is not None:
            self.free.append([self.rep.trace.sizes[block], self.segments[seg][2]])

    def _copy(self, op: str, src: int, dst: int, block: int, at: Task, deps: set, read: int, write: int,
              label: str) -> int:
        """A copy task of ``block`` issued at operator ``at`` (its phase: the operator's)."""
        tid = len(self.tasks)
        self.tasks.append(Task(tid, TaskKind.COPY, _PHASE[at.phase], Origin.SWAP, op, src, dst, None, 0.0,
                               float(self.rep.trace.sizes[block]), _deps(deps), (read,), (write,), label))
        return tid

    def build(self) -> SwapProgram:
        source = self.source
        allocated: list[tuple[int, set[int]]] = []
        for e in self.rep.events:
            op = source.tasks[e.step]
            issue = self.renamed.get(e.step - 1)        # the swapper acts when operator e.step starts
            if e.move is Move.RUN:
                tid = len(self.tasks)
                for b, _ in allocated:
                    self._segment(b, tid)
                reads = [self.segments[self.stay[b]][0] for b in op.reads]
                deps = {self.renamed[d] for d in op.deps} | \
                    {self.segments[self.stay[b]][1] for b in op.reads + op.writes} - {tid}   # (a write in place too)
                for _, d in allocated:
                    deps |= d
                writes = [self.segments[self.stay[b]][0] for b in op.writes]
                self.tasks.append(dataclasses.replace(op, id=tid, deps=_deps(deps), reads=tuple(reads),
                                                      writes=tuple(writes)))
                for b in dict.fromkeys(op.reads + op.writes):
                    self.users[self.stay[b]].append(tid)
                for b in op.writes:
                    self.copy.pop(b, None)
                self.renamed[e.step] = tid
                allocated = []
            elif e.move is Move.ALLOCATE:
                allocated.append((e.block, self._take(e.block)))
            elif e.move in (Move.FETCH, Move.PREFETCH):
                src = self.copy[e.block]
                deps = {self.tensors[src].producer, issue} | self._take(e.block)
                out = self._segment(e.block, len(self.tasks))
                self._copy("swap_in", self.host, 0, e.block, op, deps, src, out,
                           f"{e.move.value} {self._name(e.block)} for {op.label}")
            elif e.move is Move.COPY_OUT:
                seg = self.stay[e.block]
                tid = len(self.tasks)
                out = self._tensor(self.host, e.block, tid)
                self._copy("swap_out", 0, self.host, e.block, op, set(self.users[seg]) | {issue},
                           self.segments[seg][0], out, f"copy out {self._name(e.block)} at {op.label}")
                self.copy[e.block] = out
                self._release(e.block, [tid])
            else:                                                            # DROP, FREE
                self._release(e.block, self.users[self.stay[e.block]])
                if e.move is Move.FREE:
                    self.copy.pop(e.block, None)
        program = Program(self.host + 1, tuple(self.tasks), tuple(self.tensors))
        return SwapProgram(program, tuple(Segment(t, b, r) for t, b, r in self.segments), self.rep)

    def _name(self, block: int) -> str:
        t = self.source.tensors[block]
        producer = self.source.tasks[t.producer].label if t.producer is not None else f"{t.kind.value} {block}"
        return f"{t.kind.value} of {producer}" if t.producer is not None else producer


def swap_program(program: Program, rep: Replay, host: int = 1) -> SwapProgram:
    """The one-device ``program`` with the host copies of ``rep`` (its :func:`replay` over :func:`trace_of` it),
    on device 0 with its host memory as device ``host`` (:meth:`~tofu.sim.hardware.HostedProfile.host`).

    Raises:
        ValueError: ``rep`` is not a replay of ``program``'s trace.
    """
    if rep.trace != trace_of(program):
        raise ValueError("the replay is not of this program's trace")
    if host < 1:
        raise ValueError(f"the host endpoint {host} must not be the GPU (device 0)")
    return _Builder(program, rep, host).build()


def replicate(swapped: SwapProgram, profile: HostedProfile, replicas: int) -> SwapProgram:
    """``replicas`` independent copies of a one-GPU ``swapped`` program on devices 0 .. replicas - 1 of
    ``profile``, each GPU's host copies through its own endpoint (:meth:`HostedProfile.host`): data-parallel
    replicas with no communication but the host links they share.

    Raises:
        ValueError: ``replicas`` is not between 1 and the profile's GPUs, or ``swapped`` is already replicated.
    """
    if not 1 <= replicas <= profile.gpus or swapped.replicas != 1:
        raise ValueError(f"{replicas} replicas of a one-GPU program on {profile.gpus} GPUs")
    source = swapped.program
    n, m = len(source.tasks), len(source.tensors)
    tasks, tensors, segments = [], [], []
    for r in range(replicas):
        def device(d: int) -> int:
            return r if d == 0 else profile.host(r)
        tasks += [Task(t.id + r * n, t.kind, t.phase, t.origin, t.op, device(t.device),
                       None if t.dst is None else device(t.dst), t.op_class, t.flops, t.nbytes,
                       tuple(d + r * n for d in t.deps), tuple(x + r * m for x in t.reads),
                       tuple(x + r * m for x in t.writes), t.label, t.grain) for t in source.tasks]
        tensors += [Tensor(t.id + r * m, device(t.device), t.nbytes, t.kind,
                           None if t.producer is None else t.producer + r * n) for t in source.tensors]
        segments += [Segment(s.tensor + r * m, None if s.begin is None else s.begin + r * n,
                             None if s.release is None else tuple(x + r * n for x in s.release))
                     for s in swapped.segments]
    workers = profile.host(replicas - 1) + 1
    return SwapProgram(Program(workers, tuple(tasks), tuple(tensors)), tuple(segments), swapped.replay, replicas)


__all__ = ["Access", "DoesNotFit", "Event", "MAX_WARMUP", "Move", "Replay", "Segment", "SwapProgram", "Trace",
           "WINDOW", "replay", "replicate", "swap_program", "trace_of"]
