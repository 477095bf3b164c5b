"""MXNet profiler peaks of a partitioned training step, per device and with every device on one context,
against what each context must hold at least: its variables, the gradients and the momentum of its parameters."""
import math

import pytest

from tofu.api import load_graph, partitioned, reference_symbol
from tofu.graph.ir import Role
from tofu.models import ModelOptions
from tofu.runtime.memory import estimated_device_peaks, measure_device_peaks
from tofu.runtime.train import whole_graph
from tofu.search.algorithms import plan_graph


def _held(pg, devices) -> int:
    total = 0
    for v in pg.variables:
        if v.device in devices:
            n = math.prod(v.shape) * 4
            total += n * (3 if v.role is Role.PARAM else 1)       # value, gradient, momentum
    return total


def test_peaks_hold_each_devices_state_and_one_context_holds_all():
    graph = load_graph("mlp", ModelOptions(batch=64))
    pg = partitioned(graph, plan_graph(graph, 2, "data-parallel"))
    peaks = measure_device_peaks(pg)
    (together,) = measure_device_peaks(pg, one_context=True)
    assert len(peaks) == 2
    for d, peak in enumerate(peaks):
        assert peak >= _held(pg, {d})
    # on one context everything is there at once: more than either device alone holds
    assert together >= _held(pg, {0, 1}) > max(_held(pg, {0}), _held(pg, {1}))


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 4])
def test_activation_dominated_devices_hold_near_a_kth(k):
    """wresnet-tiny at batch 1024 (98.6% activations): every device's peak within 1.15 x one device's / k
    (docs/runtime.md, "Memory") as the rewriter builds the graph, and within that plus the plan's ``replicas``
    with the runtime's parameter replicas; its BatchNorms split on the batch run their expansion, which must
    keep no more than the fused kernel (before it did, device 0 was at 1.35 x at k = 4)."""
    graph = load_graph("wresnet-tiny", ModelOptions(batch=1024))
    (one,) = measure_device_peaks(whole_graph(graph, reference_symbol(graph)))
    plan = plan_graph(graph, k, "tofu")
    pg = partitioned(graph, plan)
    # the BatchNorms run their expansion (its kernels' own zero statistics are auxiliary states)
    assert any(name.startswith("_bn_affine") for name in pg.symbol.list_auxiliary_states())
    peaks = measure_device_peaks(pg, replicas=False)
    assert max(peaks) <= 1.15 * one / k, [p / (one / k) for p in peaks]
    replicas = dict(plan.per_device_bytes)["replicas"]
    assert replicas > 0
    peaks = measure_device_peaks(pg)
    assert max(peaks) <= 1.15 * one / k + replicas, [(p - replicas) / (one / k) for p in peaks]


@pytest.fixture(scope="module")
def gluon_mobilenet(tmp_path_factory) -> str:
    """mobilenet0.25 from Gluon's model zoo, hybridized and exported to a symbol file (the user's path)."""
    import mxnet as mx

    out = tmp_path_factory.mktemp("gluon")
    net = mx.gluon.model_zoo.vision.get_model("mobilenet0.25")
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 3, 128, 128)))
    net.export(str(out / "mobilenet0.25"))
    return str(out / "mobilenet0.25-symbol.json")


@pytest.mark.parametrize("copies", [None, "1"], ids=["default-copies", "one-copy"])
def test_device0_holds_every_contexts_temp_space(gluon_mobilenet, monkeypatch, copies):
    """Issue 24 item 6: MXNet 1.9.1 allocates the temporary space of every CPU context on cpu(0), one buffer
    per context up to MXNET_CPU_TEMP_COPY (default 4; src/resource.cc), so device 0 peaked at 1.6 x one/k
    while the plan's estimate was the same for every device. The plan now counts it (``device0_temp``): each
    device's measured peak within 15% of its estimate, and device 0's excess over the others is
    min(k, copies) buffers of the largest workspace an op requests."""
    if copies is None:
        monkeypatch.delenv("MXNET_CPU_TEMP_COPY", raising=False)
    else:
        monkeypatch.setenv("MXNET_CPU_TEMP_COPY", copies)     # the plan reads it, the measuring child inherits it
    k = 4
    graph = load_graph(gluon_mobilenet, shapes={"data": (8, 3, 128, 128)}, with_loss=True)
    plan = plan_graph(graph, k, "tofu")
    mem = dict(plan.per_device_bytes)
    peaks = measure_device_peaks(partitioned(graph, plan))
    estimates = estimated_device_peaks(mem, k)
    ratios = [round(p / e, 3) for p, e in zip(peaks, estimates)]
    assert all(1 / 1.15 <= r <= 1.15 for r in ratios), (ratios, peaks, mem)
    buffers = min(k, int(copies or 4))
    assert mem["workspace"] > 0 and mem["device0_temp"] == (buffers - 1) * mem["workspace"]
    excess = peaks[0] - sum(peaks[1:]) / (k - 1)
    assert excess == pytest.approx(buffers * mem["workspace"], rel=0.1), (excess, mem)
