"""The paper's systems on the engine against independent references on tiny models: Ideal and SmallBatch as k
times one device's simulated iteration, SmallBatch's batch monotone in memory and maximal, Swap with unlimited
memory equal to Ideal's one GPU (nothing moved), Swap's batch the largest the swapper runs, OpPlacement on one GPU
equal to one device and pipelined on several, Tofu equal to its plan simulated and, judged by the plan's estimate,
at the largest power-of-two batch whose plan fits."""
import dataclasses
import math

import pytest

from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim import systems
from tofu.sim.systems import Status
from tofu.sim.engine import simulate
from tofu.sim.hardware import K80X8
from tofu.sim.program import TaskKind, program_from_plan
from tofu.sim.swap import DoesNotFit, replay, trace_of
from tofu.sim.systems import Fit, Options


def build(model):
    return lambda b: load_graph(model, ModelOptions(batch=b))


def with_memory(nbytes):
    return dataclasses.replace(K80X8, memory_bytes=nbytes)


def one_gpu(model, batch, options=Options()):
    return simulate(systems.one_device_program(build(model)(batch), options), K80X8)


def test_ideal_is_the_devices_times_one_device():
    est = systems.ideal(build("rnn-tiny"), K80X8, 32)
    alone = one_gpu("rnn-tiny", 32)
    assert est.status is Status.OK and est.batch == 32 and est.replicas == 8
    assert est.seconds == alone.seconds and est.peak_bytes == alone.peak_bytes[0]
    assert est.samples_per_second == pytest.approx(8 * 32 / alone.seconds)


@pytest.mark.parametrize("model", ["rnn-tiny", "wresnet-tiny"])
def test_small_batch_is_maximal_and_monotone_in_memory(model):
    peaks = {b: one_gpu(model, b).peak_bytes[0] for b in range(1, 33)}
    assert all(peaks[b] <= peaks[b + 1] for b in range(1, 32))
    batches = []
    for capacity in sorted({peaks[1] - 1, peaks[3], (peaks[7] + peaks[8]) / 2, peaks[20], peaks[32] + 1}):
        est = systems.small_batch(build(model), with_memory(capacity), 32)
        expected = max((b for b in peaks if peaks[b] <= capacity), default=None)
        assert est.batch == expected
        if expected is None:
            assert est.status is Status.OOM
        else:
            assert est.peak_bytes <= capacity
            assert est.samples_per_second == pytest.approx(8 * expected / one_gpu(model, expected).seconds)
        batches.append(est.batch or 0)
    assert batches == sorted(batches)


def test_swap_with_unlimited_memory_is_ideal_without_transfers():
    est = systems.swap(build("rnn-tiny"), with_memory(math.inf), 32)
    ideal = systems.ideal(build("rnn-tiny"), K80X8, 32)
    assert est.status is Status.OK and est.batch == 32 and est.transfer_bytes == 0
    assert not [t for t in est.execution.program.tasks if t.kind is TaskKind.COPY]
    assert est.seconds == pytest.approx(ideal.seconds, rel=1e-12)
    assert est.samples_per_second == pytest.approx(ideal.samples_per_second, rel=1e-12)


def test_swap_runs_the_largest_batch_the_swapper_can_and_stays_within_the_gpu():
    model = "wresnet-tiny"
    capacity = one_gpu(model, 4).peak_bytes[0]
    est = systems.swap(build(model), with_memory(capacity), 64, Options(replicas=2))
    assert est.status is Status.OK and est.replicas == 2
    small = systems.small_batch(build(model), with_memory(capacity), 64)
    assert est.batch >= small.batch
    assert est.peak_bytes <= capacity and est.transfer_bytes > 0

    def runs(b):
        try:
            replay(trace_of(systems.one_device_program(build(model)(b))), capacity)
            return True
        except DoesNotFit:
            return False
    assert runs(est.batch) and (est.batch == 64 or not runs(est.batch + 1))
    assert est.seconds > one_gpu(model, est.batch).seconds


def test_swap_needs_a_host_path():
    with pytest.raises(ValueError, match="no host path"):
        systems.swap(build("mlp"), dataclasses.replace(K80X8, name="bare"), 8)


def test_op_placement_on_one_gpu_is_one_device():
    graph = build("rnn-tiny")(16)
    placed = systems.placed_program(graph, 1)
    alone = systems.one_device_program(graph)
    assert placed.workers == 1
    assert [(t.op, t.device, t.flops, t.nbytes, t.deps) for t in placed.tasks] == \
        [(t.op, t.device, t.flops, t.nbytes, t.deps) for t in alone.tasks]
    assert simulate(placed, K80X8).seconds == pytest.approx(simulate(alone, K80X8).seconds, rel=1e-12)


def test_op_placement_pipelines_the_layers_over_devices():
    graph = build("rnn-tiny")(64)
    placement = systems.layer_placement(graph, 4)
    placed = systems.placed_program(graph, 4)
    out = simulate(placed, K80X8)
    alone = one_gpu("rnn-tiny", 64)
    assert placed.workers == max(placement) + 1 > 1
    copies = [t for t in placed.tasks if t.kind is TaskKind.COPY]
    assert copies and all(t.src != t.dst for t in copies)
    # every kernel call on its layer's device, every copy between two layers' devices
    layer_device = {n.name: placement[n.id] for n in graph.nodes}
    calls = [t for t in placed.tasks if t.kind is TaskKind.COMPUTE and t.label.split("@dev")[0] in layer_device]
    assert len(calls) >= 2 * len(graph.nodes) - len(graph.nodes) // 2
    for t in calls:
        name, device = t.label.removesuffix(" backward").rsplit("@dev", 1)
        assert t.device == int(device) == layer_device[name]
    assert max(out.busy) <= out.makespan < sum(out.busy) and out.seconds < alone.seconds
    est = systems.op_placement(build("rnn-tiny"), dataclasses.replace(K80X8, devices=4, levels=K80X8.levels[:2]), 64)
    assert est.status is Status.OK and est.batch == 64 and est.replicas == 1
    assert systems.op_placement(build("wresnet-tiny"), K80X8, 8).status is Status.NA


def test_tofu_is_its_plan_on_the_engine():
    model = "rnn-tiny"
    est = systems.tofu(build(model), K80X8, 32)
    graph = build(model)(est.batch)
    ex = simulate(program_from_plan(graph, plan_graph(graph, 8, "tofu"), Options().sum_cap), K80X8)
    assert est.status is Status.OK and est.seconds == pytest.approx(ex.seconds, rel=1e-12)
    assert est.peak_bytes == max(ex.peak_bytes) and est.samples_per_second == pytest.approx(est.batch / ex.seconds)


def test_tofu_judged_by_the_plan_takes_the_largest_power_of_two_batch_whose_plan_fits():
    model = "wresnet-tiny"
    capacity = systems.memory(plan_graph(build(model)(32), 8, "tofu")) * 0.6
    est = systems.tofu(build(model), with_memory(capacity), 32, Options(fit=Fit.PLAN))
    b = 32                                       # by hand: halve until the planner's estimate fits
    while systems.memory(plan_graph(build(model)(b), 8, "tofu")) > capacity:
        b //= 2
    assert est.status is Status.OK and est.batch == b < 32
