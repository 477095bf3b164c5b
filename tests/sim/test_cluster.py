"""Several machines: the inter-machine exchange by hand on top of the engine's machine iteration, and the kvstore
bytes equal to the runtime's."""
import numpy as np
import pytest

from tofu.api import load_graph, partitioned
from tofu.models import ModelOptions, build_model
from tofu.runtime.distributed import predicted_kvstore_bytes
from tofu.search.algorithms import plan_graph
from tofu.sim import profile
from tofu.sim.cluster import GBIT, Overlap, inter_machine_seconds, simulate_cluster
from tofu.sim.engine import simulate_iteration

K80X8 = profile("k80x8")
BATCH = 32


@pytest.fixture(scope="module")
def mlp_estimate():
    graph = load_graph("mlp", ModelOptions(batch=BATCH))
    return graph, simulate_iteration(graph, plan_graph(graph, 8, "tofu"), K80X8)


def test_one_machine_has_no_exchange(mlp_estimate):
    graph, one = mlp_estimate
    est = simulate_cluster(one, BATCH, graph.param_bytes, 1, 25 * GBIT, K80X8)
    assert est.inter_seconds == est.inter_bytes == 0
    assert est.seconds == one.seconds
    assert est.samples_per_second == pytest.approx(BATCH / one.seconds, rel=1e-12)


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
    slow = simulate_cluster(one, BATCH, graph.param_bytes, 4, 1e3, K80X8)      # a 1 kB/s network dominates
    assert slow.seconds == pytest.approx(one.seconds + slow.inter_seconds, rel=1e-12)
    hidden = simulate_cluster(one, BATCH, graph.param_bytes, 4, 1e3, K80X8, Overlap.FULL)
    assert hidden.seconds == pytest.approx(slow.inter_seconds, rel=1e-12)
    assert hidden.samples_per_second == pytest.approx(4 * BATCH / slow.inter_seconds, rel=1e-12)
    fast = simulate_cluster(one, BATCH, graph.param_bytes, 4, 1e15, K80X8, Overlap.FULL)
    assert fast.seconds == max(one.seconds, fast.inter_seconds)
    with pytest.raises(ValueError):
        inter_machine_seconds(1, 0, 1e9, K80X8)
    with pytest.raises(ValueError):
        simulate_cluster(one, 0, graph.param_bytes, 2, 1e9, K80X8)


def _mxnet_bytes(symbol, inputs, counted):
    """Bytes of the arguments ``counted`` picks, by MXNet's own shape and type inference from ``inputs``."""
    names = symbol.list_arguments()
    shapes, _, _ = symbol.infer_shape_partial(**inputs)
    types, _, _ = symbol.infer_type(**{n: np.float32 for n in inputs})
    found = {n: (s, t) for n, s, t in zip(names, shapes, types) if counted(n)}
    assert found and all(s and all(s) and t is not None for s, t in found.values()), found
    return {n: int(np.prod(s)) * np.dtype(t).itemsize for n, (s, t) in found.items()}


def test_kvstore_bytes_are_the_parameters_mxnet_infers(mlp_estimate):
    """A machine hands the kvstore every device's parameter shards, each once: the model's parameters (MXNet's
    shape inference of the mlp symbol, every argument but the data and the label: 3 weights and 3 biases) and
    the shards of the 8-device plan (MXNet's inference of the partitioned symbol from its data shards alone)."""
    graph, _ = mlp_estimate
    built = build_model("mlp", ModelOptions(batch=32))
    inputs = built.shapes()
    params = _mxnet_bytes(built.symbol, inputs, lambda n: n not in inputs)
    assert sorted(params) == sorted(f"fc{i}_{p}" for i in (1, 2, 3) for p in ("weight", "bias"))
    assert predicted_kvstore_bytes(graph) == sum(params.values())

    pg = partitioned(graph, plan_graph(graph, 8, "tofu"))
    shards = _mxnet_bytes(pg.symbol, {n: s for n, s in pg.shapes().items() if n.split("@")[0] in inputs},
                          lambda n: n.split("@")[0] in params)
    assert {n.split("@")[0] for n in shards} == set(params)
    assert predicted_kvstore_bytes(graph, pg) == sum(shards.values()) == sum(params.values())
