"""The plan finders by name (DESIGN.md, section 3): Tofu's recursive search, its flat and ILP variants, and
the paper's competing partitioners, all on the same cost model.

``tofu`` runs the paper's recursion (one cut per prime factor of k) and the single k-way cut, both solved
exactly by the DP, and keeps the cheaper: counting bytes, a layout conversion split over two 2-way cuts
moves 1/2 + 2 x 1/4 of a tensor but 3/4 in one 4-way cut, so stacked LSTMs, whose plans convert between
gate and state layouts, partition more cheaply in one cut, while WResNets gain from the recursion's 2-D
partitions. ``tofu-recursive`` is the recursion alone.

Input: a Graph and the number of workers. Output: a :class:`~tofu.search.plan.Plan`.
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import math
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from tofu.analysis.compose import OpChoice
from tofu.analysis.strategies import PartialSum
from tofu.errors import SearchError, TofuError
from tofu.graph.gradients import undifferentiable
from tofu.graph.ir import Graph
from tofu.search.coarsen import coarsen
from tofu.search.copies import Recount, copies_and_kept
from tofu.search.dp import solve_dp
from tofu.search.owners import owned_fractions, parameter_pieces
from tofu.search.plan import Plan, PlanStep, per_device_memory
from tofu.search.recursive import CutStep, factorize, search, total_cost

log = logging.getLogger(__name__)

def _baseline(name: str) -> Callable:
    def solver(problem):
        from tofu.search import baselines
        return getattr(baselines, name)(problem)
    return solver


ILP_TIME_LIMIT: float | None = None
"""Seconds one ILP cut may take (None: no limit); past it the search fails rather than return a worse plan."""


def _ilp(problem):
    from tofu.search.reference import solve_ilp
    return solve_ilp(problem, ILP_TIME_LIMIT, tight=True, require_optimal=True)


# name -> (solver of one cut, how k is cut): "recursive" cuts k's prime factors one after the other (the
# paper's recursion), "flat" makes one k-way cut, "best" does both and keeps the cheaper plan.
ALGORITHMS: dict[str, tuple[Callable, str]] = {
    "tofu": (solve_dp, "best"),
    "tofu-recursive": (solve_dp, "recursive"),
    "dp-flat": (solve_dp, "flat"),
    "ilp": (_ilp, "recursive"),
    "data-parallel": (_baseline("data_parallel"), "flat"),
    "allrow-greedy": (_baseline("allrow_greedy"), "flat"),
    "spartan": (_baseline("spartan"), "flat"),
    "equalchop": (_baseline("equalchop"), "flat"),
    "icml18": (_baseline("icml18"), "flat"),
    "megatron": (_baseline("megatron"), "flat"),
    "megatron-vp": (_baseline("megatron_vp"), "flat"),
}
HOLD_PARAMETERS_WHOLE: frozenset[str] = frozenset({"data-parallel"})
"""The algorithms offered each parameter held whole by the first worker (``cost.build_cut``'s ``whole_params``):
data parallelism as MXNet's kvstore runs it, every device reading the weights from one place and sending its
gradient there, where they are summed and updated (2 (k - 1) copies per parameter and iteration, where an
all-gather and a reduce-scatter of sharded weights make 2 k (k - 1) of the same total bytes)."""
GENERAL_ALGORITHMS: tuple[str, ...] = tuple(a for a in ALGORITHMS if not a.startswith("megatron"))
"""The algorithms that plan any graph (``megatron`` and ``megatron-vp`` plan the transformers of
tofu.models.transformer only)."""


@contextlib.contextmanager
def _no_gc():
    """The search allocates millions of small, acyclic values (views, cost tables, options) that it keeps:
    Python's cycle collector would rescan them over and over (half the search time on the paper's models),
    so it is paused while planning. On the way out, what survived (the caches, about a million objects on
    densenet121) is moved to the oldest generation at once (``gc.freeze`` then ``gc.unfreeze``, two list
    splices) rather than scanned by the young collection the next allocation would start (0.16-0.22 s there):
    they are kept, and the few cycles planning left are collected with the oldest generation. Not done when
    something else holds objects frozen (its ``gc.freeze`` is left as it is)."""
    was = gc.isenabled()
    frozen = gc.get_freeze_count()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if not frozen:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def plan_graph(graph: Graph, workers: int, algo: str = "tofu", concurrent: bool = True) -> Plan:
    """Partitions ``graph`` over ``workers`` devices with algorithm ``algo``.

    An order of cuts that cannot split some tensor (8 rows in one 8-way cut) leaves the others: the search
    fails only when every order does. With ``concurrent`` and a core to spare, ``tofu``'s single k-way cut is
    costed in a forked process while the recursion runs here; it is searched here again only when it wins
    (or the fork gives no answer), so the plan is the sequential one. The plan's bytes per step (each prefix
    of the cuts recounted) are counted in a forked process too, each as soon as the recursion fixes its cuts
    (:class:`_EarlyPrefixes`), while the whole plan is counted here (:func:`_step_costs`).

    Raises:
        SearchError: unknown algorithm, impossible worker count, or an op that cannot be split (the first
            order's reason when every order fails).
    """
    if algo not in ALGORITHMS:
        raise SearchError(f"unknown algorithm '{algo}'; choose one of {', '.join(ALGORITHMS)}")
    blocked = undifferentiable(graph)
    if blocked:
        node = blocked[0]
        raise SearchError(f"the model cannot be trained: MXNet cannot differentiate {node.op} ('{node.name}'"
                          f"{f' and {len(blocked) - 1} more' if len(blocked) > 1 else ''}), which the gradient of "
                          f"a parameter must pass through")
    with _no_gc():
        return _plan(graph, workers, algo, concurrent)


def _plan(graph: Graph, workers: int, algo: str, concurrent: bool = False) -> Plan:
    factors = factorize(workers)
    solver, cuts = ALGORITHMS[algo]
    start = time.perf_counter()
    coarse = coarsen(graph)
    steps: tuple[CutStep, ...] = ()
    early: _EarlyPrefixes | None = None
    try:
        if workers > 1:
            orders = {"recursive": [factors], "flat": [(workers,)],
                      "best": list(dict.fromkeys([factors, (workers,)]))}
            candidates, failures = [], []
            ahead = _Ahead.start(graph, orders[cuts][1], solver, coarse) \
                if concurrent and len(orders[cuts]) == 2 and _fork_pays(graph) else None
            early = _EarlyPrefixes(graph, len(orders[cuts][0]), ahead) if concurrent else None
            try:
                for j, order in enumerate(orders[cuts]):
                    if j == 1 and ahead is not None and candidates:
                        # the child searches a smaller problem than the recursion just did: waiting as long again
                        # (at least 5 s) bounds a child stuck at fork (a lock held by another thread) without a hang
                        cost = ahead.cost(timeout_s=max(5.0, time.perf_counter() - start))
                        if cost is not None and cost >= total_cost(candidates[0]):
                            break           # it would lose (ties: the first); else it is searched here again
                    try:
                        candidates.append(search(graph, order, solver, coarse,
                                                 whole_params=algo in HOLD_PARAMETERS_WHOLE,
                                                 on_step=early.step if early is not None and j == 0 else None))
                    except TofuError as e:
                        log.info("%s: cuts %s fail: %s", algo, order, e)
                        failures.append(e)
            finally:
                if ahead is not None:
                    ahead.close()
            if not candidates:
                raise failures[0]
            steps = min(candidates, key=total_cost)       # ties: the first (the recursion)
        seconds = time.perf_counter() - start
        log.info("%s: %d workers in %.2f s", algo, workers, seconds)
        return to_plan(graph, workers, algo, steps, seconds, coarse.stats(graph),
                       early.counting(steps) if early is not None else ())
    finally:
        if early is not None:
            early.close()


_FORK_FROM_NODES = 300
"""Graphs with fewer ops search both orders here: forking a process that holds MXNet takes 30-90 ms on this
machine, more than a small graph's k-way cut."""


def _fork_pays(graph: Graph) -> bool:
    """Whether to cost the k-way cut in a forked process: the graph is large enough, this process may use
    two cores and the load leaves one idle."""
    if len(graph.nodes) < _FORK_FROM_NODES or not hasattr(os, "fork") or not hasattr(os, "sched_getaffinity"):
        return False
    cores = len(os.sched_getaffinity(0))
    return cores >= 2 and os.getloadavg()[0] <= cores - 0.5


_FEED_BYTES = 1 << 20
"""The pipe that feeds a child is grown to this (Linux's default most, /proc/sys/fs/pipe-max-size): every cut
of a plan's choices fits it at once (2627 ops' of rnn-10-8k are 10 kB a cut, :func:`_cut_message`)."""


def _receive(fd: int):
    """The next value sent down ``fd`` (:meth:`_Forked.send`), or None once the parent closed it."""
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = os.read(fd, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data
    head = exactly(8)
    body = exactly(struct.unpack("Q", head)[0]) if head is not None else None
    return None if body is None else pickle.loads(body)


class _Forked:
    """Floats computed in a forked process, each sent as it is done (8 bytes each; nothing else crosses back): the
    caller computes itself what the child does not give, so what it returns never depends on the fork. A child
    started with ``feed`` also reads, in order, what the caller sends it (:meth:`send`)."""

    def __init__(self, pid: int, fd: int, count: int, feed: int = -1):
        self._pid, self._fd, self._count, self._feed = pid, fd, count, feed
        self._got = b""
        self._ended = False             # the child closed the pipe (or was given up): nothing more comes

    @classmethod
    def start(cls, compute: Callable[..., Iterable[float]], count: int, what: str,
              feed: bool = False) -> "_Forked | None":
        """``compute()`` (``count`` floats, ``what`` they are) run in a child, or None when no child starts; with
        ``feed``, ``compute(receive)``, where ``receive()`` gives the next value sent (None once none can come)."""
        try:
            read, write = os.pipe()
            into = os.pipe() if feed else (-1, -1)
            pid = os.fork()
        except OSError as e:
            log.info("no process for %s (%s): computing it here", what, e)
            return None
        if pid == 0:                      # the child: any failure is reported as no answer
            code = 1
            try:
                os.close(read)
                if feed:
                    os.close(into[1])
                sent = 0
                for value in compute(lambda: _receive(into[0])) if feed else compute():
                    os.write(write, struct.pack("d", float(value)))
                    sent += 1
                code = 0 if sent == count else 1
            except BaseException:         # noqa: BLE001 (the parent computes it again and reports it)
                pass
            finally:
                os._exit(code)
        os.close(write)
        if feed:
            os.close(into[0])
            with contextlib.suppress(AttributeError, OSError):      # room for every cut's choices (Linux)
                fcntl.fcntl(into[1], fcntl.F_SETPIPE_SZ, _FEED_BYTES)
            os.set_blocking(into[1], False)
        return cls(pid, read, count, into[1])

    def send(self, value) -> bool:
        """Sends ``value`` to a child started with ``feed``; when it cannot take it whole now (the pipe is full:
        the child is stuck), the child is given up (:meth:`close`) and False returned."""
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        data = struct.pack("Q", len(data)) + data
        try:
            done = os.write(self._feed, data) if not self._ended else 0
        except OSError:
            done = 0
        if done == len(data):
            return True
        self.close()
        return False

    def values(self, timeout_s: float) -> tuple[float, ...] | None:
        """The child's floats, or None when it failed, died or gave no answer within ``timeout_s``."""
        got = self.arrived(self._count, timeout_s)
        if len(got) < self._count:
            log.info("the forked process gave no full answer within %.0f s: computing it here", timeout_s)
            return None
        return got

    def arrived(self, count: int = 0, timeout_s: float = 0.0) -> tuple[float, ...]:
        """The floats the child has sent, in its order: all that came so far, waiting up to ``timeout_s`` while
        fewer than ``count`` came (it may die or take longer)."""
        deadline = time.monotonic() + timeout_s
        while len(self._got) < 8 * self._count and not self._ended:
            wait = deadline - time.monotonic() if len(self._got) < 8 * count else 0.0
            if not select.select([self._fd], [], [], max(0.0, wait))[0] or not self._read():
                break           # nothing more for now, or the child closed the pipe
        done = len(self._got) // 8
        return struct.unpack(f"{done}d", self._got[:8 * done])

    def finished(self) -> bool:
        """Whether the child is done: every float came, or it closed the pipe (it failed or died)."""
        self.arrived()
        return self._ended or len(self._got) == 8 * self._count

    def _read(self) -> bool:
        if self._ended:
            return False
        chunk = os.read(self._fd, 8 * self._count - len(self._got))
        self._got += chunk
        self._ended = not chunk
        return bool(chunk)

    def close(self) -> None:
        """Stops the child if it still runs, and reaps it (what it sent stays readable)."""
        if self._fd < 0:
            return
        self._ended = True
        for fd in (self._fd, self._feed):
            if fd >= 0:
                os.close(fd)
        self._fd = self._feed = -1
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)


class _Ahead(_Forked):
    """One search run in a forked process, which reports its total cost only: the caller keeps its own plan
    when that is no dearer, and otherwise searches again itself."""

    @classmethod
    def start(cls, graph: Graph, order: tuple[int, ...], solver: Callable, coarse) -> "_Ahead | None":
        return super().start(lambda: (total_cost(search(graph, order, solver, coarse)),), 1,
                             f"the {order}-way cut")

    def cost(self, timeout_s: float) -> float | None:
        """The child's total cost, or None when it failed, died or gave no answer within ``timeout_s``."""
        got = self.values(timeout_s)
        return None if got is None else got[0]


_Counting = tuple[tuple[int, ...], "_Forked"]      # a child and the prefixes it counts, in its order


class _EarlyPrefixes:
    """The recursion's prefix recounts, begun while it searches on: one process, forked as the plan begins (its
    memory is small then, so neither process pays much for the pages the other writes after: forking after
    each cut cost this one up to 0.2 s of page copies at 64 workers), is sent each cut as the recursion fixes it
    (:func:`_cut_message`; held back while the k-way cut's search runs on the other core) and counts the
    prefixes 1 to m - 1 in order, each as soon as its cuts have come. A prefix's count needs its own cuts only,
    which later cuts never change; the recount after the search (:func:`_step_costs`) takes what it gives and
    counts what it does not: a child that dies or is given up costs only the speed-up, never a figure."""

    def __init__(self, graph: Graph, cuts: int, ahead: _Ahead | None):
        self.graph, self.cuts, self.ahead = graph, cuts, ahead
        self.steps: tuple[CutStep, ...] = ()        # the steps fixed so far
        self.sent = 0                               # how many of them the child has
        self.child = _Forked.start(lambda receive: _prefix_totals(graph, cuts - 1, receive), cuts - 1,
                                   "the plan's prefixes", feed=True) \
            if cuts > 1 and _fork_pays(graph) else None

    def step(self, steps: tuple[CutStep, ...]) -> None:
        """The search's ``on_step``: ``steps`` are fixed, one more than at the last call."""
        self.steps = steps
        if self.ahead is None or self.ahead.finished():
            self._send()

    def _send(self) -> None:
        while self.child is not None and self.sent < min(len(self.steps), self.cuts - 1):
            if not self.child.send(_cut_message(self.graph, self.steps[self.sent])):
                log.info("the prefix counts' process takes no more cuts: they are counted here")
                return
            self.sent += 1

    def counting(self, steps: tuple[CutStep, ...]) -> list[_Counting]:
        """The child and the prefixes it counts, in its order, when ``steps`` are those it is sent (the
        recursion's plan won); every cut it lacks is sent now."""
        same = len(steps) == len(self.steps) and all(a is b for a, b in zip(steps, self.steps))
        if not same or self.child is None:
            return []
        self._send()
        return [(tuple(range(1, self.cuts)), self.child)]

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


def _cut_message(graph: Graph, step: CutStep) -> tuple:
    """What a prefix count needs of one cut, compactly: its factor, every tensor's split dimension (-1: none)
    and every node's choice, as distinct choices and their numbers."""
    table: dict[OpChoice, int] = {}
    numbers = [table.setdefault(c, len(table)) for c in _choices(graph, [step])[0]]
    return (step.factor, np.array([-1 if d is None else d for d in step.tensor_dims], dtype=np.int8).tobytes(),
            tuple(table), np.array(numbers, dtype=np.int32).tobytes())


def _prefix_totals(graph: Graph, count: int, receive: Callable[[], tuple | None]) -> Iterable[float]:
    """The child's side of :class:`_EarlyPrefixes`: the totals of the prefixes 1 to ``count``, each as soon as
    its last cut (:func:`_cut_message`) is received."""
    cuts: list[tuple[int, tuple, tuple]] = []
    while len(cuts) < count:
        got = receive()
        if got is None:
            return
        factor, dims, table, numbers = got
        cuts.append((factor, tuple(None if d < 0 else int(d) for d in np.frombuffer(dims, dtype=np.int8)),
                     tuple(table[i] for i in np.frombuffer(numbers, dtype=np.int32).tolist())))
        yield _count_cuts(graph, cuts).total


def replay(graph: Graph, plan: Plan) -> Plan:
    """``plan`` with its communication and per-device memory recomputed by the cost model, by replaying its
    choices step by step (a plan file's numbers are not trusted).

    Raises:
        PlanError: a step's choice is not one the search could make at that step (a tensor split its shape
            does not allow, a strategy the op does not have there).
    """
    from tofu.analysis.compose import ChoiceKind
    from tofu.errors import PlanError
    from tofu.search.problem import CutSolution

    factors = tuple(s.factor for s in plan.steps)
    shapes = {t.name: t.shape for t in graph.tensors}
    at_step = []                      # per step: every tensor's shape before its cut
    for step in plan.steps:
        at_step.append(dict(shapes))
        shapes = {n: tuple(e // step.factor if i == dict(step.tensor_dims)[n] else e for i, e in enumerate(shape))
                  for n, shape in shapes.items()}

    def fixed(problem):
        j = next(j for j, sh in enumerate(at_step)
                 if plan.steps[j].factor == problem.k and all(sh[t.name] == t.shape for t in problem.tensors))
        step = plan.steps[j]
        dims, ops = dict(step.tensor_dims), dict(step.op_choices)
        x, y = [], []
        for t in problem.tensors:
            d = dims[t.name]
            if d not in t.choices:
                raise PlanError(f"step {j + 1} splits tensor '{t.name}' along {d}, which cannot be "
                                f"split {problem.k} ways there")
            x.append(t.choices.index(d))
        for op in problem.ops:
            c = ops[op.name]
            kind = "output" if c.kind is ChoiceKind.WHOLE else c.kind.value
            found = [i for i, (name, k) in enumerate(zip(op.strategies, op.kinds)) if name == str(c) and k == kind]
            y.append(found[0] if found else 0)   # not offered yet (a fallback offered once others fail): the
            # search re-solves without what cannot run; a choice never offered shows in the comparison below
        return CutSolution(tuple(x), tuple(y), problem.cost(x, y))

    start = time.perf_counter()
    coarse = coarsen(graph)
    try:
        with _no_gc():
            # a trained parameter may be held whole by any plan (the runtime runs it; data-parallel's are)
            steps = search(graph, factors, fixed, coarse, whole_params=True) if plan.workers > 1 else ()
    except SearchError as e:
        raise PlanError(f"the plan cannot be replayed: {e}") from None
    replayed = to_plan(graph, plan.workers, plan.algo, steps, plan.search_seconds or time.perf_counter() - start,
                       coarse.stats(graph))
    for j, (a, b) in enumerate(zip(plan.steps, replayed.steps), 1):
        for (name, want), (_, got) in zip(a.op_choices, b.op_choices):
            if want != got:
                raise PlanError(f"step {j}: op '{name}' cannot run '{want}' there")
    return replayed


def to_plan(graph: Graph, workers: int, algo: str, steps: tuple[CutStep, ...], seconds: float,
            coarsening: dict[str, int], early: Sequence[_Counting] = ()) -> Plan:
    """The plan of ``steps``, its bytes recounted as the runtime moves them (:func:`_step_costs`; ``early``:
    prefix counts already under way)."""
    final = [t.shape for t in graph.tensors]
    for s in steps:
        final = [tuple(n // s.factor if i == d else n for i, n in enumerate(shape))
                 for shape, d in zip(final, s.tensor_dims)]
    choices = _choices(graph, steps)
    costs, kept, replicas, owners = _step_costs(graph, steps, choices, early)
    plan_steps = tuple(PlanStep(s.factor, s.groups, cost,
                                tuple((t.name, d) for t, d in zip(graph.tensors, s.tensor_dims)),
                                tuple((n.name, c) for n, c in zip(graph.nodes, step_choices)))
                       for s, cost, step_choices in zip(steps, costs, choices))
    if kept is None:        # a plan the runtime cannot run: the search's own count, spread over the devices
        kept = (sum(s.kept_bytes for s in steps) / workers,)
    if owners is None:
        owners = parameter_pieces(graph, [s.factor for s in steps], [tuple(s.tensor_dims[t.id] for s in steps)
                                                                      for t in graph.tensors])
    owned = owned_fractions(graph, owners, workers)
    memory = per_device_memory(graph, final, owned, fetched=kept if len(kept) == workers else max(kept, default=0.0),
                               transient=_largest_buffer(graph, steps, final), replicas=replicas or ())
    return Plan(graph.name, workers, algo, plan_steps, float(sum(costs)), seconds,
                tuple(memory.items()), tuple(coarsening.items()), tuple((t.name, t.shape) for t in graph.tensors))


def _step_costs(graph: Graph, steps: tuple[CutStep, ...], choices, early: Sequence[_Counting] = ()
                ) -> tuple[list[float], tuple[float, ...] | None, tuple[float, ...] | None, Mapping | None]:
    """Each step's d_j as the runtime moves it: what the first j cuts copy less what the first j - 1 copy
    (:mod:`tofu.search.copies`), and per device the forward bytes it receives and keeps for the backward pass
    under all the cuts (each region once), what the runtime's parameter replicas hold beyond that, and the
    parameters' owners the count found (:func:`tofu.search.owners.parameter_pieces`). The search's own costs,
    which charge every op for its pieces, are the same but where ops on a device share a piece or MXNet runs no
    op that needs one; for a plan the runtime cannot run (a search without the runnability check), they are
    kept, and the per-device bytes and the owners are None.

    ``early``: children counting some prefixes (:class:`_EarlyPrefixes`), each with the prefixes it counts in
    its order (the shortest first). The whole plan is counted here first; then the other prefixes from the
    longest down, each taken from a child that has sent it, waited for when a child counts it now, and else
    counted here (a child that died, or one behind: it and this process meet in the middle)."""
    n = len(steps)
    try:
        start = time.perf_counter()
        last = _count(graph, steps, choices, n) if n else None
        wait = max(5.0, 2 * (time.perf_counter() - start))     # bounds a child stuck (a lock held at fork)
        known: dict[int, float] = {}
        for j in range(n - 1, 0, -1):
            for js, source in early:
                sent = source.arrived()
                if j not in known and j in js and len(sent) < len(js) and js[len(sent)] == j \
                        and not source.finished():                # the child counts it now
                    sent = source.arrived(len(sent) + 1, wait)
                known.update(zip(js, sent))
            if j not in known:
                known[j] = _count(graph, steps, choices, j).total
        prefixes = [known[j] for j in range(1, n)]
    except TofuError:
        return [float(s.cost) for s in steps], None, None, None
    if last is None:
        return [], (), (), None
    totals = [*prefixes, last.total]
    return [now - before for before, now in zip([0.0, *totals], totals)], last.kept, last.replicas, last.owners


def _choices(graph: Graph, steps: Sequence[CutStep]) -> list[tuple[OpChoice, ...]]:
    """Per step, every node's choice (by node id)."""
    return [tuple(OpChoice.of(st, s.tensor_dims[n.outputs[0]]) for n, st in zip(graph.nodes, s.strategies))
            for s in steps]


def _count(graph: Graph, steps: Sequence[CutStep], choices, j: int) -> Recount:
    """The recount of the first ``j`` steps (:func:`~tofu.search.copies.copies_and_kept`)."""
    return _count_cuts(graph, [(s.factor, s.tensor_dims, c) for s, c in zip(steps[:j], choices[:j])])


def _count_cuts(graph: Graph, cuts: Sequence[tuple[int, Sequence, Sequence[OpChoice]]]) -> Recount:
    """The recount of ``cuts``: per cut its factor, every tensor's split dimension and every node's choice."""
    return copies_and_kept(graph, [f for f, _, _ in cuts], [tuple(d[t.id] for _, d, _ in cuts) for t in graph.tensors],
                           [tuple(c[n.id] for _, _, c in cuts) for n in graph.nodes])


def _largest_buffer(graph: Graph, steps: tuple[CutStep, ...], final) -> int:
    """The largest output piece the first device computes but does not hold as it is: a partial sum before
    its reduce-scatter, or a piece laid out otherwise before its conversion (one at a time: MXNet's memory
    planner frees it once it is sent)."""
    if not steps:
        return 0
    last = steps[-1]
    largest = 0
    for node in graph.nodes:
        s, view = last.strategies[node.id], last.views[node.id]
        if s is None:                       # a merged element-wise op follows its tensors' split
            continue
        for o, t in enumerate(node.outputs):
            whole = view.done or s.var.endswith("*")
            shape = view.out_shapes[o] if whole else s.output_regions[0][o].shape
            partial = not whole and isinstance(s.outputs[o], PartialSum) or view.classes(o) > 1
            if partial or tuple(shape) != tuple(final[t]):
                largest = max(largest, math.prod(shape) * np.dtype(graph.tensors[t].dtype).itemsize)
    return largest
