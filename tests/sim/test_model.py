"""The performance model against hand computations: roofline time, backward rule, per-step transfer time on a
hierarchy, FLOPs kept under a split, and the OOM flag flipping with capacity and worker count."""
import dataclasses
import math

import pytest

from tofu.api import load_graph
from tofu.graph.attrs import Attrs
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.flops import OpClass
from tofu.sim.hardware import K80X8, ClassRate, Level, Profile, profile
from tofu.sim.model import call_time, device_compute, op_call_work, simulate, step_comm_seconds

TINY = Profile(name="tiny", devices=4, peak_flops=1e9, mem_bandwidth=2e9, memory_bytes=1e6,
               levels=(Level("dev", 1, 1e9), Level("pair", 2, 0.25e9)), host_bandwidth=1e9, launch_seconds=1e-6,
               classes=tuple((c, ClassRate(0.5 if c.contraction else 0.25, 0.8, 1e-6)) for c in OpClass),
               concurrency=4, source="test")


def test_roofline_time_of_a_matrix_product_by_hand():
    n, k, m = 64, 128, 32
    work = op_call_work("FullyConnected", Attrs.of(num_hidden=m, no_bias=True), [(n, k), (m, k)], [(n, m)])
    flops, nbytes = 2 * n * k * m, 4 * (n * k + m * k + n * m)
    fwd = max(flops / (0.5 * 1e9), nbytes / (0.8 * 2e9)) + 1e-6
    bwd = max(2 * flops / (0.5 * 1e9), 2 * nbytes / (0.8 * 2e9)) + 1e-6     # dX and dW: two contractions
    t = call_time(work, ["data", "weight"], TINY)
    assert t.forward == pytest.approx(fwd, rel=1e-12) and t.backward == pytest.approx(bwd, rel=1e-12)
    first_layer = call_time(work, ["weight"], TINY)                        # no gradient for the data
    assert first_layer.backward == pytest.approx(max(flops / 0.5e9, 2 * nbytes / 1.6e9) + 1e-6, rel=1e-12)
    assert call_time(work, [], TINY).backward == 0.0


def test_memory_bound_op_by_hand():
    shape = (256, 1024)
    work = op_call_work("elemwise_add", Attrs.of(), [shape, shape], [shape])
    nbytes = 3 * 4 * math.prod(shape)
    assert call_time(work, ["lhs", "rhs"], TINY).forward == pytest.approx(nbytes / (0.8 * 2e9) + 1e-6, rel=1e-12)


@pytest.fixture(scope="module")
def mlp():
    return load_graph("mlp", ModelOptions(batch=24))


def test_two_step_transfer_time_by_hand(mlp):
    plan = plan_graph(mlp, 4, "tofu")
    assert [s.factor for s in plan.steps] == [2, 2]
    d1, d2 = (s.cost_bytes for s in plan.steps)
    assert d1 > 0 and d2 > 0
    # step 1 separates the pairs {0,1} | {2,3}: every device sends d1/4 over its own link, every pair d1/2 over
    # the pair's uplink; step 2 stays inside the pairs: d2/4 per device link only
    t1 = max(d1 / 4 / 1e9, d1 / 2 / 0.25e9)
    t2 = d2 / 4 / 1e9
    assert step_comm_seconds(plan, TINY) == pytest.approx((t1, t2), rel=1e-12)
    est = simulate(mlp, plan, TINY)
    assert est.comm_seconds == pytest.approx(t1 + t2, rel=1e-12)
    assert est.seconds == pytest.approx(est.compute_seconds + est.comm_seconds, rel=1e-12)


def test_k80_first_cut_of_eight_crosses_the_root(mlp):
    plan = plan_graph(mlp, 8, "tofu")
    d = [s.cost_bytes for s in plan.steps]
    # 2-way cuts on (die 21 GB/s, pair 21 GB/s, quad uplink 10 GB/s): step 1 crosses the quads' uplinks
    want = (max(d[0] / 8 / 21e9, d[0] / 4 / 21e9, d[0] / 2 / 10e9), max(d[1] / 8 / 21e9, d[1] / 4 / 21e9),
            d[2] / 8 / 21e9)
    assert step_comm_seconds(plan, K80X8) == pytest.approx(want, rel=1e-12)


def test_a_data_parallel_split_keeps_the_flops_and_halves_each_device(mlp):
    one = device_compute(mlp, plan_graph(mlp, 1, "tofu"), TINY)
    two = device_compute(mlp, plan_graph(mlp, 2, "data-parallel"), TINY)
    assert two[1] == pytest.approx(one[1], rel=1e-9)          # same FLOPs in all (updates once per piece)
    assert len(two[0]) == 2 and max(two[0]) < one[0][0]


def test_oom_flag_flips_with_capacity_and_with_workers(mlp):
    p1, p4 = plan_graph(mlp, 1, "tofu"), plan_graph(mlp, 4, "tofu")
    m1, m4 = (dict(p.per_device_bytes)["total"] for p in (p1, p4))
    assert m4 < m1
    at = lambda cap: dataclasses.replace(TINY, memory_bytes=cap)
    assert simulate(mlp, p1, at(m1 - 1)).oom and not simulate(mlp, p1, at(m1)).oom
    between = at((m1 + m4) / 2)
    assert simulate(mlp, p1, between).oom and not simulate(mlp, p4, between).oom
    est = simulate(mlp, p4, between)
    assert est.per_device_bytes == m4 and est.samples_per_second == pytest.approx(24 / est.seconds)


def test_profiles_by_name_and_bad_requests(mlp):
    assert profile("k80x8") is K80X8 and profile("v100x8").devices == 8
    with pytest.raises(ValueError, match="unknown hardware profile"):
        profile("tpu")
    with pytest.raises(ValueError, match="8 workers"):
        step_comm_seconds(plan_graph(mlp, 8, "tofu"), TINY)
    with pytest.raises(ValueError, match="must increase"):
        dataclasses.replace(TINY, levels=(Level("a", 2, 1.0), Level("b", 1, 1.0)))


def test_each_class_uses_its_own_rate_and_launch():
    shape = (256, 1024)
    work = op_call_work("elemwise_add", Attrs.of(), [shape, shape], [shape])
    slow = dataclasses.replace(TINY, classes=((OpClass.ELEMENTWISE, ClassRate(1.0, 0.1, 5e-6)),))
    nbytes = 3 * 4 * math.prod(shape)
    assert call_time(work, ["lhs"], slow).forward == pytest.approx(nbytes / (0.1 * 2e9) + 5e-6, rel=1e-12)
    gemm = op_call_work("FullyConnected", Attrs.of(num_hidden=8, no_bias=True), [(4, 8), (8, 8)], [(4, 8)])
    # a class the profile lacks: efficiencies 1, the profile's default launch
    assert call_time(gemm, [], slow).forward == pytest.approx(
        max(2 * 4 * 8 * 8 / 1e9, 4 * (32 + 64 + 32) / 2e9) + 1e-6, rel=1e-12)
