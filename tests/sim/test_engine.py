"""The event-driven engine against independent references: schedules of tiny programs computed by hand (a
chain, a fork-join over two devices, copies sharing a link at half rate each, three transfers of unequal sizes
under max-min fairness, the per-transfer latency, copy engines, shared cores), max-min fairness against its
bottleneck characterisation on random instances, and on real programs conservation (bytes per link), the
critical-path and busiest-device lower bounds, no two tasks at once on one stream, and the memory held."""
import dataclasses
import itertools
import math
import random

import pytest

from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.engine import Stream, bulks, kernel_seconds, max_min_rates, simulate, simulate_iteration
from tofu.sim.flops import OpClass
from tofu.sim.hardware import K80X8, Direction, Level, Link, Profile
from tofu.sim.program import (Origin, Phase, Program, Task, TaskKind, Tensor, TensorKind, program_from_plan)
from tofu.sim.trace import chrome_trace, gantt

GB = 1e9


def machine(levels=(Level("dev", 1, 10 * GB), Level("pair", 2, 10 * GB)), latency=0.0, engines=2, concurrency=4,
            devices=4, step=0.0):
    return Profile(name="test", devices=devices, peak_flops=1e12, mem_bandwidth=1e11, memory_bytes=1e9,
                   levels=levels, host_bandwidth=1 * GB, launch_seconds=0.0, classes=(), concurrency=concurrency,
                   source="test", copy_launch_seconds=latency, copy_engines=engines, step_seconds=step)


def seconds_as_flops(task, profile):
    """The tests' kernel time: a compute task's ``flops`` field holds its seconds."""
    return task.flops


class Builder:
    """A hand-written program: ``compute(device, seconds, reads)`` and ``copy(tensor, dst)`` return the tensor
    they write (``size`` bytes)."""

    def __init__(self, workers):
        self.workers, self.tasks, self.tensors = workers, [], []

    def tensor(self, device, nbytes, kind=TensorKind.ACTIVATION, producer=None):
        self.tensors.append(Tensor(len(self.tensors), device, int(nbytes), kind, producer))
        return len(self.tensors) - 1

    def _deps(self, reads, after):
        return tuple(sorted({self.tensors[r].producer for r in reads if self.tensors[r].producer is not None}
                            | set(after)))

    def compute(self, device, seconds, reads=(), size=0, after=()):
        tid = len(self.tasks)
        out = self.tensor(device, size, producer=tid)
        self.tasks.append(Task(tid, TaskKind.COMPUTE, Phase.FORWARD, Origin.KERNEL, "op", device, None,
                               OpClass.ELEMENTWISE, float(seconds), 0.0, self._deps(reads, after), tuple(reads),
                               (out,), f"t{tid}"))
        return out

    def copy(self, tensor, dst):
        tid = len(self.tasks)
        src = self.tensors[tensor]
        out = self.tensor(dst, src.nbytes, producer=tid)
        self.tasks.append(Task(tid, TaskKind.COPY, Phase.FORWARD, Origin.GLUE, "_CrossDeviceCopy", src.device, dst,
                               None, 0.0, float(src.nbytes), self._deps([tensor], ()), (tensor,), (out,),
                               f"copy{tid}"))
        return out

    def program(self):
        return Program(self.workers, tuple(self.tasks), tuple(self.tensors))


def run(builder, profile):
    return simulate(builder.program(), profile, kernel_time=seconds_as_flops)


def test_a_chain_runs_back_to_back():
    b = Builder(1)
    b.compute(0, 3.0, reads=[b.compute(0, 2.0, reads=[b.compute(0, 1.0)])])
    out = run(b, machine(devices=1, step=0.5))
    assert [(s.start, s.end) for s in out.spans] == [(0.0, 1.0), (1.0, 3.0), (3.0, 6.0)]
    assert out.makespan == 6.0 and out.seconds == 6.5
    assert out.busy == (6.0,) and out.idle == (0.0,)


def test_ready_tasks_run_in_id_order_one_at_a_time():
    b = Builder(1)
    for s in (1.0, 2.0, 3.0):
        b.compute(0, s)
    out = run(b, machine(devices=1))
    assert [(s.start, s.end) for s in out.spans] == [(0.0, 1.0), (1.0, 3.0), (3.0, 6.0)]


def test_a_fork_join_over_two_devices_by_hand():
    # a (dev 0, 1 s) forks to b (dev 0, 2 s) and, through a copy of 5 GB over 10 GB/s links, to c (dev 1, 3 s);
    # c's 1 GB result comes back and d (dev 0, 1 s) joins b and it
    b = Builder(2)
    a = b.compute(0, 1.0, size=5 * GB)
    left = b.compute(0, 2.0, reads=[a])
    right = b.compute(1, 3.0, reads=[b.copy(a, 1)], size=1 * GB)
    b.compute(0, 1.0, reads=[left, b.copy(right, 0)])
    out = run(b, machine(latency=0.25))
    ends = [s.end for s in out.spans]
    assert ends[0] == 1.0 and ends[1] == 3.0                  # a, then b on device 0
    assert ends[2] == pytest.approx(1.0 + 0.25 + 0.5)          # the copy: latency, then 5 GB at 10 GB/s
    assert ends[3] == pytest.approx(ends[2] + 3.0)             # c
    assert ends[4] == pytest.approx(ends[3] + 0.25 + 0.1)      # the copy back
    assert ends[5] == pytest.approx(ends[4] + 1.0) == out.makespan
    assert out.busy == pytest.approx((4.0, 3.0))
    assert out.spans[2].stream is Stream.COPY and out.spans[2].device == 0 and out.spans[4].device == 1


def test_two_copies_sharing_a_link_run_at_half_rate_each():
    # 0 -> 2 and 1 -> 3 both leave pair 0 and enter pair 1: those two 10 GB/s uplinks carry both, 5 GB/s each
    b = Builder(4)
    b.copy(b.tensor(0, 10 * GB), 2)
    b.copy(b.tensor(1, 10 * GB), 3)
    out = run(b, machine(latency=0.5))
    assert [s.end for s in out.spans] == pytest.approx([0.5 + 2.0, 0.5 + 2.0])
    # alone, or inside a pair (own links only), a copy runs at the full 10 GB/s
    alone = Builder(4)
    alone.copy(alone.tensor(0, 10 * GB), 2)
    alone.copy(alone.tensor(2, 10 * GB), 3)
    assert [s.end for s in run(alone, machine(latency=0.5)).spans] == pytest.approx([1.5, 1.5])


def test_three_transfers_of_unequal_size_share_a_bus_max_min_fairly():
    # one shared 12 GB/s bus, 4, 8 and 12 GB at once: 4 GB/s each until the first ends at 1 s; 6 GB/s each for
    # the other two, so the second ends at 1 + 4 / 6 s; the last alone at 12 GB/s ends at 2 s (24 GB / 12 GB/s)
    b = Builder(4)
    for d, size in ((1, 4), (2, 8), (3, 12)):
        b.copy(b.tensor(0 if d != 1 else 2, size * GB), d)
    out = run(b, machine(levels=(Level("bus", 1, 12 * GB, shared=True),), engines=3))
    assert [s.end for s in out.spans] == pytest.approx([1.0, 1.0 + 4 / 6, 2.0])


def test_unequal_demands_by_hand():
    # flow 1 crosses x (10), flow 2 crosses x and y (4), flow 3 crosses y: y fills first at 2 each; x gives flow 1
    # the remaining 8
    x, y = Link("x", 0, Direction.UP), Link("y", 0, Direction.UP)
    assert max_min_rates({1: [x], 2: [x, y], 3: [y]}, {x: 10.0, y: 4.0}) == {1: 8.0, 2: 2.0, 3: 2.0}
    assert max_min_rates({1: []}, {}) == {1: math.inf}


@pytest.mark.parametrize("seed", range(20))
def test_max_min_rates_have_a_bottleneck_each(seed):
    """Max-min fairness (Bertsekas and Gallager, Data Networks, 6.5.2): a feasible allocation is max-min fair iff
    every flow crosses a saturated link on which no flow gets more than it."""
    rng = random.Random(seed)
    links = [Link("l", i, Direction.UP) for i in range(rng.randint(1, 5))]
    capacity = {x: rng.uniform(1, 10) for x in links}
    routes = {f: rng.sample(links, rng.randint(1, len(links))) for f in range(rng.randint(1, 8))}
    rates = max_min_rates(routes, capacity)
    load = {x: sum(rates[f] for f, r in routes.items() if x in r) for x in links}
    assert all(load[x] <= capacity[x] * (1 + 1e-9) for x in links)
    for f, route in routes.items():
        assert any(math.isclose(load[x], capacity[x], rel_tol=1e-9)
                   and all(rates[g] <= rates[f] * (1 + 1e-9) for g, r in routes.items() if x in r) for x in route)


def test_latency_and_copy_engines():
    # one copy engine: two copies from device 0 run one after the other, each its latency then its bytes
    b = Builder(2)
    b.copy(b.tensor(0, 1 * GB), 1)
    b.copy(b.tensor(0, 1 * GB), 1)
    one = run(b, machine(latency=0.01, engines=1))
    assert [s.end for s in one.spans] == pytest.approx([0.11, 0.22])
    # two engines: both at once, sharing device 0's uplink
    two = run(b, machine(latency=0.01, engines=2))
    assert [s.end for s in two.spans] == pytest.approx([0.21, 0.21])
    assert {s.lane for s in two.spans} == {0, 1}


def test_without_copy_engines_a_copy_holds_the_compute_stream():
    b = Builder(2)
    src = b.tensor(0, 1 * GB)
    b.compute(0, 1.0)
    b.copy(src, 1)
    with_engines = run(b, machine(engines=2))
    assert [s.end for s in with_engines.spans] == pytest.approx([1.0, 0.1])     # the copy overlaps compute
    without = run(b, machine(engines=0))
    assert [s.end for s in without.spans] == pytest.approx([1.0, 1.1])          # after it, on the same stream
    assert without.spans[1].stream is Stream.COMPUTE


def test_the_per_task_cost_is_charged_to_every_kernel_and_copy_not_to_updates():
    # compute 1 s on device 0, its result copied (1 GB at 10 GB/s) to device 1, compute 2 s there, an update 0.5 s
    b = Builder(2)
    b.compute(1, 2.0, reads=[b.copy(b.compute(0, 1.0, size=1 * GB), 1)])
    b.tasks.append(dataclasses.replace(b.tasks[-1], id=3, kind=TaskKind.UPDATE, flops=0.5, deps=(2,), reads=(),
                                       writes=(), label="update"))
    profile = dataclasses.replace(machine(latency=0.01, engines=0), task_seconds=0.25)
    out = run(b, profile)
    ends = [1.0 + 0.25, 1.25 + 0.01 + 0.25 + 0.1, 1.61 + 2.0 + 0.25, 3.86 + 0.5]       # by hand
    assert [s.end for s in out.spans] == pytest.approx(ends)
    assert out.seconds - run(b, machine(latency=0.01, engines=0)).seconds == pytest.approx(3 * 0.25)


def _with_update(b, seconds):
    """Appends an update of ``seconds`` on device 0 after the last task."""
    last = b.tasks[-1]
    b.tasks.append(dataclasses.replace(last, id=len(b.tasks), kind=TaskKind.UPDATE, phase=Phase.UPDATE, device=0,
                                       dst=None, flops=seconds, deps=(last.id,), reads=(), writes=(), label="update"))


def test_a_one_device_program_charges_the_bulked_cost_to_every_kernel_not_to_updates():
    # a chain of kernels 1 s, 2 s on device 0 and an update 0.5 s: MXNet bulks both kernels
    b = Builder(1)
    b.compute(0, 2.0, reads=[b.compute(0, 1.0)])
    _with_update(b, 0.5)
    assert bulks(b.program())
    profile = dataclasses.replace(machine(devices=1), task_seconds=0.25, bulk_task_seconds=0.125)
    assert [s.end for s in run(b, profile).spans] == pytest.approx([1.125, 3.25, 3.75])      # by hand
    unset = dataclasses.replace(profile, bulk_task_seconds=None)                                 # None: task_seconds
    assert [s.end for s in run(b, unset).spans] == pytest.approx([1.25, 3.5, 4.0])


def test_a_program_on_several_devices_or_with_copies_charges_the_per_task_cost():
    # compute on device 0, its result copied to device 1, compute there: ops pushed one by one
    b = Builder(2)
    b.compute(1, 2.0, reads=[b.copy(b.compute(0, 1.0, size=1 * GB), 1)])
    assert not bulks(b.program())
    profile = dataclasses.replace(machine(latency=0.01, engines=0), task_seconds=0.25, bulk_task_seconds=0.125)
    ends = [1.0 + 0.25, 1.25 + 0.01 + 0.25 + 0.1, 1.61 + 2.0 + 0.25]                           # by hand
    assert [s.end for s in run(b, profile).spans] == pytest.approx(ends)
    # two devices without a copy: two contexts, no segment spans both (MXNet bulks only one context's)
    two = Builder(2)
    two.compute(0, 1.0)
    two.compute(1, 1.0)
    assert not bulks(two.program())
    assert [s.end for s in run(two, profile).spans] == pytest.approx([1.25, 1.25])
    # a plan of two workers whose every task lies on device 0 is bound as one context: bulked
    one = Builder(2)
    one.compute(0, 1.0, reads=[one.compute(0, 1.0)])
    assert bulks(one.program())
    assert [s.end for s in run(one, profile).spans] == pytest.approx([1.125, 2.25])


def test_the_bulked_cost_reaches_real_one_worker_programs_only():
    graph = load_graph("mlp", ModelOptions(batch=8))
    profile = dataclasses.replace(K80X8, task_seconds=1e-3, bulk_task_seconds=0.0)
    one, two = (simulate_iteration(graph, plan_graph(graph, k, "tofu"), profile) for k in (1, 2))
    assert bulks(one.program) and not bulks(two.program)
    plain = simulate_iteration(graph, plan_graph(graph, 1, "tofu"), dataclasses.replace(profile, task_seconds=0.0))
    assert one.seconds == pytest.approx(plain.seconds)                  # every kernel bulked: no per-task cost
    kernels = sum(t.kind is TaskKind.COMPUTE for t in two.program.tasks)
    assert kernels and two.seconds > kernels * 1e-3 / two.program.workers


def test_a_negative_bulked_cost_is_rejected():
    with pytest.raises(ValueError, match="bulk_task_seconds"):
        dataclasses.replace(machine(), bulk_task_seconds=-1e-6)


def test_shared_cores_let_one_device_compute_at_a_time():
    b = Builder(2)
    b.compute(0, 1.0)
    b.compute(1, 2.0)
    b.compute(0, 1.0)
    assert run(b, machine(concurrency=4)).makespan == 2.0
    serial = run(b, machine(concurrency=1))
    assert [(s.start, s.end) for s in serial.spans] == [(0.0, 1.0), (1.0, 3.0), (3.0, 4.0)]


def test_overlap_and_memory_by_hand():
    # device 0 computes from 0 to 2 s; a 1 GB copy 0 -> 1 (latency 1 s, 10 GB/s) is under way from 0 to 1.1 s
    b = Builder(2)
    weight = b.tensor(0, 100, kind=TensorKind.PARAM)
    x = b.compute(0, 2.0, reads=[weight], size=1000)
    y = b.tensor(0, 1 * GB)
    z = b.copy(y, 1)
    b.compute(1, 0.5, reads=[z], size=10)
    out = run(b, machine(latency=1.0))
    assert out.comm_seconds == pytest.approx((1.1, 1.1))
    assert out.overlapped_seconds == pytest.approx((1.1, 0.0))
    assert out.overlap_fraction == pytest.approx(0.5)
    # device 0 holds the weight and y throughout, x from 0 to 2 s (nothing reads it: to its writer's end);
    # device 1 holds z from the copy's start to its reader's end, and the reader's output meanwhile
    assert out.peak_bytes == (100 + 1000 + GB, GB + 10)
    (t0, b0), (t1, b1), (t2, b2) = out.memory[1]
    assert (t0, t1, t2) == pytest.approx((0.0, 1.1, 1.6)) and (b0, b1, b2) == (GB, GB + 10, 0)
    assert out.memory[0][-1] == (2.0, 0)                      # everything is released at the end
    assert out.link_bytes == ((Link("dev", 0, Direction.UP), GB), (Link("dev", 1, Direction.DOWN), GB))
    assert x != z


def test_unresolvable_dependencies_are_an_error():
    b = Builder(1)
    b.compute(0, 1.0)
    task = b.tasks[0]
    b.tasks[0] = Task(**{**task.__dict__, "deps": (0,)})
    with pytest.raises(ValueError, match="never becomes ready"):
        run(b, machine(devices=1))


# ------------------------------------------------------------------------------------------ real programs

REAL = [("mlp", 4), ("rnn-tiny", 4), ("wresnet-tiny", 4)]


@pytest.fixture(scope="module")
def executions():
    out = {}
    for model, k in REAL:
        graph = load_graph(model, ModelOptions(batch=24))
        out[(model, k)] = simulate(program_from_plan(graph, plan_graph(graph, k, "tofu")), K80X8)
    return out


@pytest.mark.parametrize("case", REAL, ids=str)
def test_bytes_per_link_are_conserved(executions, case):
    """Each link carries exactly the bytes of the copies that leave (or enter) its domain, counted from the
    devices' numbering, not from the routes."""
    out = executions[case]
    copies = [t for t in out.program.tasks if t.kind is TaskKind.COPY]
    for link, nbytes in out.link_bytes:
        size = next(lv.size for lv in K80X8.levels if lv.name == link.level)
        inside = (lambda d, x=link.domain, s=size: d // s == x)
        want = sum(t.nbytes for t in copies if (inside(t.src) and not inside(t.dst) if link.direction is Direction.UP
                                                 else inside(t.dst) and not inside(t.src)))
        assert nbytes == pytest.approx(want, rel=1e-12)
    first = next(lv for lv in K80X8.levels if lv.size == 1)
    assert sum(b for x, b in out.link_bytes if x.level == first.name and x.direction is Direction.UP) == \
        pytest.approx(sum(t.nbytes for t in copies), rel=1e-12)


@pytest.mark.parametrize("case", REAL, ids=str)
def test_the_iteration_is_at_least_the_critical_path_and_the_busiest_device(executions, case):
    out = executions[case]
    tasks = out.program.tasks
    alone = [K80X8.copy_launch + t.nbytes / K80X8.link_bandwidth(t.src, t.dst) if t.kind is TaskKind.COPY
             else kernel_seconds(t, K80X8) for t in tasks]
    longest = [0.0] * len(tasks)
    for t in tasks:
        longest[t.id] = alone[t.id] + max((longest[d] for d in t.deps), default=0.0)
    work = [0.0] * out.program.workers
    for t in tasks:
        if t.kind is not TaskKind.COPY:
            work[t.device] += alone[t.id]
    assert out.makespan >= max(longest) * (1 - 1e-9)
    assert out.makespan >= max(work) * (1 - 1e-9)
    assert out.busy == pytest.approx(tuple(work), rel=1e-9)
    assert out.seconds == pytest.approx(out.makespan + K80X8.step_seconds)


@pytest.mark.parametrize("case", REAL, ids=str)
def test_no_stream_runs_two_tasks_at_once_and_no_task_starts_early(executions, case):
    out = executions[case]
    tasks, spans = out.program.tasks, out.spans
    by_lane: dict = {}
    for s in spans:
        by_lane.setdefault((s.device, s.stream, s.lane), []).append((s.start, s.end))
    for lane, runs in by_lane.items():
        runs.sort()
        assert all(b[0] >= a[1] - 1e-15 for a, b in zip(runs, runs[1:])), lane
        assert lane[1] is Stream.COMPUTE or lane[2] < K80X8.copy_engines
    for t, s in zip(tasks, spans):
        assert all(s.start >= spans[d].end - 1e-15 for d in t.deps)
        assert s.device == t.device
        assert (s.stream is Stream.COPY) == (t.kind is TaskKind.COPY)
        if t.kind is not TaskKind.COPY:
            assert s.end - s.start == pytest.approx(kernel_seconds(t, K80X8), rel=1e-9)
        else:
            assert s.end - s.start >= K80X8.copy_launch + t.nbytes / K80X8.link_bandwidth(t.src, t.dst) - 1e-12


@pytest.mark.parametrize("case", REAL, ids=str)
def test_memory_is_the_live_tensors_and_the_resident_state(executions, case):
    """The peak equals a brute-force sweep over every task's start and end of the bytes then alive."""
    out = executions[case]
    program, spans = out.program, out.spans
    lives = []
    for tensor, readers in zip(program.tensors, program.readers):
        if tensor.kind.resident or tensor.producer is None:
            lives.append((tensor.device, 0.0, out.makespan, tensor.nbytes))
        else:
            end = max((spans[r].end for r in readers), default=spans[tensor.producer].end)
            lives.append((tensor.device, spans[tensor.producer].start, end, tensor.nbytes))
    for d in range(program.workers):
        mine = [x for x in lives if x[0] == d]
        times = sorted({x[1] for x in mine})
        peak = max(sum(n for _, a, b, n in mine if a <= t < b) for t in times)
        assert out.peak_bytes[d] == peak
    resident = [sum(x.nbytes for x in program.tensors if x.device == d and x.kind.resident)
                for d in range(program.workers)]
    assert all(p >= r > 0 for p, r in zip(out.peak_bytes, resident))


def test_one_device_has_no_copies_and_no_idle_time():
    graph = load_graph("mlp", ModelOptions(batch=24))
    out = simulate_iteration(graph, plan_graph(graph, 1, "tofu"), K80X8)
    assert not any(t.kind is TaskKind.COPY for t in out.program.tasks)
    assert out.idle == pytest.approx((0.0,), abs=1e-15) and out.overlap_fraction == 1.0 and out.link_bytes == ()


def test_the_symbol_and_the_plan_simulate_the_same_work():
    graph = load_graph("mlp", ModelOptions(batch=24))
    plan = plan_graph(graph, 4, "tofu")
    a, b = simulate_iteration(graph, plan, K80X8), simulate_iteration(graph, plan, K80X8, from_symbol=True)
    assert sorted(a.busy) == pytest.approx(sorted(b.busy), rel=1e-12)
    assert sorted(x for _, x in a.link_bytes) == pytest.approx(sorted(x for _, x in b.link_bytes), rel=1e-12)
    with pytest.raises(ValueError, match="8 devices"):
        simulate_iteration(load_graph("mlp", ModelOptions(batch=32)),
                           plan_graph(load_graph("mlp", ModelOptions(batch=32)), 16, "tofu"), K80X8)


def test_the_trace_and_the_figure(executions, tmp_path):
    out = executions[("wresnet-tiny", 4)]
    doc = chrome_trace(out)
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(out.program.tasks)
    assert {e["pid"] for e in complete} == set(range(4))
    names = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {(d, "compute") for d in range(4)} <= names and {(d, "copy engine 0") for d in range(4)} <= names
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(out.makespan * 1e6)
    for e, s in itertools.islice(zip(complete, out.spans), 50):
        assert e["ts"] == pytest.approx(s.start * 1e6)
    gantt(out, tmp_path / "gantt.png")
    assert (tmp_path / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
