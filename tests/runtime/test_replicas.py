"""Parameter replicas (tofu.runtime.replicas): a parameter shard read whole on another device is bound there as a
replica kept equal by an exchange after the backward pass, in place of the rewriter's route through the graph.

References: the same partitioned graph trained with the routes (``Trainer(..., replicas=False)``, what MXNet's
executor runs for the rewriter's symbol as it is), step by step; MXNet's own copies of that executor (which routes
send a gradient back); the plan's bytes.
"""
import mxnet as mx
import numpy as np
import pytest

from tofu.api import load_graph, partitioned
from tofu.graph.ir import Role
from tofu.graph.mxnet_import import import_symbol
from tofu.models import ModelOptions
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer
from tofu.search.algorithms import plan_graph

BATCH = {"mlp": 24, "wresnet-tiny": 8, "rnn-tiny": 8, "gpt-tiny": 4}
CASES = [(m, k, a) for m in BATCH for k in (2, 4) for a in ("tofu", "data-parallel")]


def _pair(graph, plan):
    values = {**initial_values(graph), **synthetic_batch(graph)}
    pg = partitioned(graph, plan)
    return Trainer(pg, values, lr=1e-3), Trainer(pg, values, lr=1e-3, replicas=False)


def _bytes(copies, backward):
    return sum(c.nbytes for c in copies if c.backward == backward)


@pytest.mark.parametrize("model,k,algo", CASES, ids=[f"{m}-{k}-{a}" for m, k, a in CASES])
def test_replicas_train_as_the_routes_do_and_move_the_same_bytes(model, k, algo):
    """Three steps (after the measuring pass ``tofu run`` makes first) give the same parameters, momentum and
    outputs as the graph with its routes; the bytes of each direction are the routes' and the plan's."""
    graph = load_graph(model, ModelOptions(batch=BATCH[model]))
    plan = plan_graph(graph, k, algo)
    replicated, routed = _pair(graph, plan)
    assert replicated.replicas, "no parameter shard is read whole on another device: nothing is tested"
    mine, theirs = replicated.copies(), routed.copies()
    assert (_bytes(mine, False), _bytes(mine, True)) == (_bytes(theirs, False), _bytes(theirs, True))
    assert sum(c.nbytes for c in mine) == plan.comm_bytes
    assert len(mine) <= len(theirs)                 # a group of shards crosses as one flat copy
    for _ in range(3):
        a, b = replicated.step(), routed.step()
        for name in b:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6)
    for mine_, theirs_ in ((replicated.parameters(), routed.parameters()),
                           (replicated.momentum_values(), routed.momentum_values())):
        assert set(mine_) == set(theirs_)
        scale = max(float(np.abs(v).max()) for v in theirs_.values())     # a gradient of rounding alone (a key
        for name in theirs_:                                                # bias under softmax) is held to it
            assert float(np.abs(mine_[name] - theirs_[name]).max()) <= 1e-5 * scale, name


def test_a_shard_its_own_device_does_not_read_gets_its_replicas_gradients_alone():
    """gpt-tiny's tofu plan at k = 4 holds shards on devices that read only other pieces: their gradient is their
    replicas' sum, not added to a stale one (repeated measuring passes then steps agree with the routes)."""
    graph = load_graph("gpt-tiny", ModelOptions(batch=BATCH["gpt-tiny"]))
    replicated, routed = _pair(graph, plan_graph(graph, 4, "tofu"))
    assert any(not g.local for g in replicated.exchange.groups)
    for t in (replicated, routed):
        t.copies()
        t.copies()
        t.forward_backward()
    mine, theirs = replicated.gradients(), routed.gradients()
    for name in theirs:
        np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-5, atol=1e-7)


def test_a_replica_without_a_gradient_sends_nothing_back():
    """A parameter read on the other device only through ``one_hot`` (no gradient, as MXNet's gradient pass says):
    its replica's gradient is not sent back, as the route's copy sends nothing back in MXNet's executor."""
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    label = mx.sym.round(mx.sym.var("softmax_label"), name="rounded")
    graph = import_symbol(mx.sym.SoftmaxOutput(x, label, name="softmax"), {"data": (1, 4)}, name="label")
    assert next(t for t in graph.tensors if t.name == "softmax_label").role is Role.PARAM
    plan = plan_graph(graph, 2, "tofu")
    rng = np.random.default_rng(0)
    values = {t.name: rng.random(t.shape).astype(np.float32) for t in graph.tensors if t.producer is None}
    values["softmax_label"] = rng.integers(0, 2, values["softmax_label"].shape).astype(np.float32)
    pg = partitioned(graph, plan)
    replicated, routed = Trainer(pg, values), Trainer(pg, values, replicas=False)
    label_replicas = [r for r in replicated.replicas if r.of.startswith("softmax_label")]
    assert label_replicas and not any(r.gradient for r in label_replicas)
    routed_label = [c.backward for c in routed.copies() if c.name.startswith("softmax_label")]
    assert routed_label == [False]                  # MXNet's executor: forward only
    assert [c.backward for c in replicated.copies() if c.name.startswith("softmax_label")] == routed_label
    assert sum(c.nbytes for c in replicated.copies()) == plan.comm_bytes


def test_replicas_share_the_executors_memory():
    """The executor's arguments are the exchange's views: a shard written through the flat buffer is what the
    executor reads, and so is each replica after the broadcast."""
    graph = load_graph("mlp", ModelOptions(batch=BATCH["mlp"]))
    replicated, _ = _pair(graph, plan_graph(graph, 2, "data-parallel"))
    ex = replicated.executor
    weights, _, _ = replicated.exchange.flats
    for flat in weights.values():
        flat[:] = 7.0
    replicated.exchange.broadcast()
    mx.nd.waitall()
    for r in replicated.replicas:
        assert float(ex.arg_dict[r.name].asnumpy().min()) == 7.0 == float(ex.arg_dict[r.name].asnumpy().max())
    assert all(float(ex.arg_dict[v.name].asnumpy().min()) == 7.0 for v in replicated.params)


@pytest.mark.parametrize("model", ["mlp", "gpt-tiny"])
def test_the_plans_replica_memory_is_what_the_exchange_allocates(model):
    """Data parallelism on 4 workers, every weight read by ops that keep it for the backward pass (so the
    replica's weight is the copy the plan counts as fetched already): the test oracle's count of what the
    replicas hold beyond (tests/oracle.py, apart from tofu.search) is, device by device, the gradients of the
    replicas there and the buffers receiving their shards' gradients that the runtime's exchange allocates."""
    from tests.oracle import count

    graph = load_graph(model, ModelOptions(batch=BATCH[model]))
    plan = plan_graph(graph, 4, "data-parallel")
    replicated, _ = _pair(graph, plan)
    allocated = [0] * 4
    for g in replicated.exchange.groups:
        for d, a in g.replica_grad.items():
            allocated[d] += a.size * 4
        if g.received is not None:
            allocated[g.device] += g.received.size * 4
    assert allocated == pytest.approx(count(graph, plan).replicas_per_device)
    assert dict(plan.per_device_bytes)["replicas"] == max(allocated)
