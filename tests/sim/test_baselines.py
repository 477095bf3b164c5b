"""The paper's baselines in the performance model against hand computations on tiny models: the batch search
against brute force, Ideal and SmallBatch as k times one device's roofline time, Swap's transfer bound,
OpPlacement's pipeline against the one-device sum and its bounds, Tofu's batch against planning it directly."""
import dataclasses
import math

import pytest

from tofu.api import load_graph
from tofu.graph.ir import Role
from tofu.graph.memory import estimate_training_memory
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim import baselines
from tofu.sim.baselines import Status, System
from tofu.sim.hardware import K80X8, Level
from tofu.sim.model import call_time, device_compute, op_call_work, simulate, update_seconds
from tests.sim.test_model import TINY


def build(model):
    return lambda b: load_graph(model, ModelOptions(batch=b))


def one_device_seconds(graph, profile):
    """One device's compute, from device_compute on the trivial plan (what the baselines should multiply)."""
    (seconds,), _ = device_compute(graph, plan_graph(graph, 1, "tofu"), profile)
    return seconds + profile.step_seconds


@pytest.mark.parametrize("limit", [0, 1, 2, 7, 50, 127, 128, 500])
def test_largest_batch_equals_brute_force(limit):
    calls = []

    def fits(b):
        calls.append(b)
        return b <= limit

    expected = max((b for b in range(1, 129) if b <= limit), default=None)
    assert baselines.largest_batch(fits, 128) == expected
    assert len(calls) <= 2 + math.ceil(math.log2(128))


def test_ideal_is_k_times_one_device_at_the_ideal_batch():
    est = baselines.ideal(build("mlp"), TINY, 32)
    graph = load_graph("mlp", ModelOptions(batch=32))
    seconds = one_device_seconds(graph, TINY)
    assert est.status is Status.OK and est.batch == 32 and est.replicas == TINY.devices
    assert est.seconds == pytest.approx(seconds, rel=1e-12)
    assert est.samples_per_second == pytest.approx(TINY.devices * 32 / seconds, rel=1e-12)


def test_small_batch_is_the_largest_batch_whose_single_device_estimate_fits():
    totals = {b: estimate_training_memory(load_graph("mlp", ModelOptions(batch=b))).total for b in range(1, 65)}
    capacity = (totals[20] + totals[21]) / 2                       # batch 20 fits, 21 does not
    profile = dataclasses.replace(TINY, memory_bytes=capacity)
    est = baselines.small_batch(build("mlp"), profile, 64)
    assert est.batch == max(b for b, t in totals.items() if t <= capacity) == 20
    seconds = one_device_seconds(load_graph("mlp", ModelOptions(batch=20)), profile)
    assert est.samples_per_second == pytest.approx(TINY.devices * 20 / seconds, rel=1e-12)
    tight = dataclasses.replace(TINY, memory_bytes=totals[1] - 1)
    oom = baselines.small_batch(build("mlp"), tight, 64)
    assert oom.status is Status.OOM and oom.samples_per_second == 0 and oom.per_device_bytes == totals[1]


def test_swap_moves_the_excess_out_and_back_over_its_share_of_the_host_link():
    graph = load_graph("mlp", ModelOptions(batch=64))
    total = estimate_training_memory(graph).total
    capacity = max(total // 2, baselines.working_set(graph))       # the largest op still fits
    assert capacity < total
    profile = dataclasses.replace(TINY, memory_bytes=capacity, host_bandwidth=1e6, host_sharing=4,
                                  host_memory_bytes=0)
    est = baselines.swap(build("mlp"), profile, 64)
    assert est.status is Status.OK and est.batch == 64              # host memory unlimited: the largest batch
    transfer = (total - capacity) / (1e6 / 4)
    compute = one_device_seconds(graph, profile)
    assert est.comm_seconds == pytest.approx(transfer, rel=1e-12)
    # by hand: op i moves x_i = X w_i / sum w each way, w_i its outputs' and weights' bytes, hidden up to its
    # forward (out) and backward (in) time
    params = {t.id for t in graph.by_role(Role.PARAM)}
    w = [sum(graph.tensors[o].nbytes for o in n.outputs) + sum(graph.tensors[i].nbytes for i in n.inputs if i in params)
         for n in graph.nodes]
    expected = compute
    for node, wi in zip(graph.nodes, w):
        x = transfer * wi / sum(w)
        t = call_time(op_call_work(node.op, node.attrs, *_shapes(graph, node)), _grads(graph, node), profile)
        expected += max(0, x - t.forward) + max(0, x - t.backward)
    assert est.seconds == pytest.approx(expected, rel=1e-9) and est.seconds > compute
    assert est.samples_per_second == pytest.approx(TINY.devices * 64 / expected, rel=1e-9)
    # without swapping (everything fits) Swap is Ideal at the same batch
    roomy = dataclasses.replace(TINY, memory_bytes=10 * total)
    assert baselines.swap(build("mlp"), roomy, 64).samples_per_second == pytest.approx(
        baselines.ideal(build("mlp"), roomy, 64).samples_per_second, rel=1e-12)


def _shapes(graph, node):
    return [graph.tensors[i].shape for i in node.inputs], [graph.tensors[o].shape for o in node.outputs]


def _grads(graph, node):
    names = {"FullyConnected": ("data", "weight", "bias")}.get(node.op, ("data",) * len(node.inputs))
    return [n for n, i in zip(names, node.inputs) if i in graph.with_gradient]


def test_swap_batch_is_bounded_by_the_host_memory_share_and_the_working_set():
    totals = {b: estimate_training_memory(load_graph("mlp", ModelOptions(batch=b))).total for b in (31, 32)}
    capacity = baselines.working_set(load_graph("mlp", ModelOptions(batch=64)))
    share = (totals[31] + totals[32]) / 2 - capacity               # batch 31 fits in host memory, 32 does not
    profile = dataclasses.replace(TINY, memory_bytes=capacity, host_memory_bytes=share * TINY.devices)
    assert baselines.swap(build("mlp"), profile, 64).batch == 31
    small = dataclasses.replace(TINY, memory_bytes=baselines.working_set(load_graph("mlp", ModelOptions(batch=1))) - 1)
    assert baselines.swap(build("mlp"), small, 64).status is Status.OOM


def test_link_bandwidth_is_the_slowest_uplink_crossed():
    assert K80X8.link_bandwidth(0, 1) == K80X8.link_bandwidth(0, 3) == 21e9
    assert K80X8.link_bandwidth(3, 4) == K80X8.link_bandwidth(0, 7) == 10e9
    assert K80X8.link_bandwidth(5, 5) == math.inf
    assert TINY.link_bandwidth(0, 1) == 1e9 and TINY.link_bandwidth(1, 2) == 0.25e9


def test_layers_go_round_robin_in_order_of_first_use():
    graph = load_graph("rnn-tiny", ModelOptions(batch=4))
    placement = baselines.layer_placement(graph, 3)
    layers = list(dict.fromkeys(n.layer for n in graph.nodes))
    assert layers[:2] == ["embed", "lstm_l0"] and layers[-1] == "head"
    for node in graph.nodes:
        assert placement[node.id] == layers.index(node.layer) % 3
    assert baselines.unrolled(graph) and not baselines.unrolled(load_graph("wresnet-tiny", ModelOptions(batch=4)))


def test_pipeline_on_one_device_is_the_one_device_compute():
    graph = load_graph("rnn-tiny", ModelOptions(batch=8))
    schedule = baselines.pipeline_schedule(graph, (0,) * len(graph.nodes), TINY)
    assert schedule.seconds == pytest.approx(one_device_seconds(graph, TINY), rel=1e-9)
    assert schedule.transfer_seconds == 0 and schedule.received_bytes == (0,)


def test_pipeline_overlaps_layers_within_its_bounds():
    graph = load_graph("rnn-2-64", ModelOptions(batch=8, seq_len=6, vocab=50))
    fast = dataclasses.replace(TINY, levels=(Level("dev", 1, 1e15),))
    placement = baselines.layer_placement(graph, 4)                # embed | l0 | l1 | head
    schedule = baselines.pipeline_schedule(graph, placement, fast)
    alone = one_device_seconds(graph, fast)
    assert sum(schedule.device_busy) == pytest.approx(alone, rel=1e-9)
    assert max(schedule.device_busy) <= schedule.seconds < alone     # the two layers' cells overlap
    # a chain overlaps nothing but the updates: every op waits for the one before it (mlp's three layers on
    # three devices), and the backward ends on fc1's device, whose update comes last
    mlp = load_graph("mlp", ModelOptions(batch=8))
    chain = baselines.pipeline_schedule(mlp, baselines.layer_placement(mlp, 3), fast)
    hidden = sum(update_seconds(t.size, 4, fast) for t in mlp.by_role(Role.PARAM) if not t.name.startswith("fc1"))
    assert chain.seconds == pytest.approx(one_device_seconds(mlp, fast) - hidden, rel=1e-6)   # links: 1e15 B/s


def test_op_placement_memory_and_applicability():
    assert baselines.op_placement(build("wresnet-tiny"), TINY, 16).status is Status.NA
    graph = load_graph("rnn-tiny", ModelOptions(batch=8))
    plan = plan_graph(graph, 1, "tofu")
    whole = dict(plan.per_device_bytes)["total"]
    assert baselines.placement_memory(graph, plan, (0,) * len(graph.nodes), (0,)) == whole
    placement = baselines.layer_placement(graph, 4)
    spread = baselines.placement_memory(graph, plan, placement, (0,) * 4)
    assert whole / 4 < spread < whole
    est = baselines.op_placement(build("rnn-tiny"), dataclasses.replace(TINY, memory_bytes=10 * whole), 8)
    assert est.status is Status.OK and est.batch == 8 and est.replicas == 1
    assert est.samples_per_second == pytest.approx(8 / est.seconds, rel=1e-12)


def test_tofu_trains_at_the_largest_power_of_two_whose_plan_fits():
    mems = {b: dict(plan_graph(load_graph("mlp", ModelOptions(batch=b)), 4, "tofu").per_device_bytes)["total"]
            for b in (16, 32, 64)}
    profile = dataclasses.replace(TINY, memory_bytes=(mems[32] + mems[64]) / 2)
    est = baselines.tofu(build("mlp"), profile, 64, with_glue=False)
    assert est.status is Status.OK and est.batch == 32
    graph = load_graph("mlp", ModelOptions(batch=32))
    direct = simulate(graph, plan_graph(graph, 4, "tofu"), profile)
    assert est.samples_per_second == pytest.approx(direct.samples_per_second, rel=1e-12)
    assert baselines.estimate(System.TOFU, build("mlp"), dataclasses.replace(TINY, memory_bytes=1), 4).status \
        is Status.OOM
