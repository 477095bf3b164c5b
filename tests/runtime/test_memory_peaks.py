"""MXNet profiler peaks of a partitioned training step, per device and with every device on one context,
against what each context must hold at least: its variables, the gradients and the momentum of its parameters."""
import math

from tofu.api import load_graph, partitioned
from tofu.graph.ir import Role
from tofu.models import ModelOptions
from tofu.runtime.memory import measure_device_peaks
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
