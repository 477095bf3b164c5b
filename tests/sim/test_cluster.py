"""Several machines: the inter-machine exchange by hand, and the kvstore bytes equal to the runtime's."""
import pytest

from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.cluster import GBIT, inter_machine_seconds, simulate_cluster
from tofu.sim.hardware import K80X8
from tofu.sim.model import Overlap, simulate


@pytest.fixture(scope="module")
def mlp_estimate():
    graph = load_graph("mlp", ModelOptions(batch=32))
    return graph, simulate(graph, plan_graph(graph, 8, "tofu"), K80X8)


def test_one_machine_has_no_exchange(mlp_estimate):
    graph, one = mlp_estimate
    est = simulate_cluster(one, graph.param_bytes, 1, 25 * GBIT, K80X8)
    assert est.inter_seconds == est.inter_bytes == 0
    assert est.samples_per_second == pytest.approx(one.samples_per_second, rel=1e-12)


@pytest.mark.parametrize("machines", [2, 4, 16])
@pytest.mark.parametrize("gbits", [25, 400])
def test_exchange_by_hand(machines, gbits):
    p = 23.3e9                                       # WResNet-152-10's parameter bytes, roughly
    network = 2 * p * (machines - 1) / machines      # push + the server's answers, per direction
    host = p / (8 / 4 * 10e9)                        # k80x8: two quad uplinks of 10 GB/s to the host
    nbytes, seconds = inter_machine_seconds(int(p), machines, gbits * 1e9 / 8, K80X8)
    assert nbytes == pytest.approx(network, rel=1e-9)
    assert seconds == pytest.approx(max(network / (gbits * 1e9 / 8), host), rel=1e-9)


def test_overlap_and_throughput(mlp_estimate):
    graph, one = mlp_estimate
    slow = simulate_cluster(one, graph.param_bytes, 4, 1e3, K80X8)            # a 1 kB/s network dominates
    assert slow.seconds == pytest.approx(one.seconds + slow.inter_seconds, rel=1e-12)
    hidden = simulate_cluster(one, graph.param_bytes, 4, 1e3, K80X8, Overlap.FULL)
    assert hidden.seconds == pytest.approx(slow.inter_seconds, rel=1e-12)
    assert hidden.samples_per_second == pytest.approx(4 * one.batch / slow.inter_seconds, rel=1e-12)
    with pytest.raises(ValueError):
        inter_machine_seconds(1, 0, 1e9, K80X8)


def test_kvstore_bytes_are_the_runtimes_prediction(mlp_estimate):
    distributed = pytest.importorskip("tofu.runtime.distributed")
    graph, _ = mlp_estimate
    assert distributed.predicted_kvstore_bytes(graph) == graph.param_bytes
