"""Partitioned training on k CPU contexts equals one device (MXNet's unpartitioned executor): the first step's
outputs and every parameter gradient, then the loss and the parameter update of ten SGD-momentum steps, one
device taking each step from the partitioned run's state; the cross-device bytes are counted from the bound
executor; checkpoints load across partitionings.

The full matrix (every algorithm, k = 2, 3, 4, 6, 8) is marked slow and runs in CI; ``make test`` runs a
cross-section. Everything must agree to 1e-4 (gradients and updates relative to their largest value), but the
updates of models with ReLU and max-pooling kinks (see KINKED). Each step starting from the same state keeps
float32 rounding from compounding over the steps (two free trajectories part by up to 1e-2 after ten steps), but
within one step rounding may still carry an input across its kink in one run and not the other: its gradient then
differs by design (docs/runtime.md, "The check").
"""
import mxnet as mx
import numpy as np
import pytest

from tests.oracle import count
from tofu.api import load_graph, partitioned, reference_symbol
from tofu.models import ModelOptions
from tofu.graph.ir import Role
from tofu.runtime import DEFAULT_RTOL
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.run import train
from tofu.runtime.train import Trainer, measure_copies, whole_graph
from tofu.search.algorithms import GENERAL_ALGORITHMS, plan_graph

ALGOS = sorted(a for a in GENERAL_ALGORITHMS if a != "ilp")
BATCH = {"mlp": 24, "wresnet-tiny": 8, "rnn-tiny": 8, "gpt-tiny": 4}
TOL = 1e-4          # outputs and gradients of the first step, every step's loss and parameter update
LR = 2e-4           # small: ten steps check each device's update of its own shards (momentum included), not how
                    # far training amplifies float32 reassociation over a long trajectory (docs/runtime.md)


def _run(model, k, algo, steps=10, batch=None):
    graph = load_graph(model, ModelOptions(batch=batch or BATCH[model]))
    plan = plan_graph(graph, k, algo)
    report = train(graph, plan, partitioned(graph, plan), initial_values(graph), synthetic_batch(graph), steps,
                   reference_symbol(graph), lr=LR)
    return graph, plan, report


# ReLU and max pooling: from the same state, one step's update of wresnet-tiny at k = 2 (tofu, lr 2e-4) differs
# by 3.1e-2 of the largest update at its second step and by 1e-5 at the other nine, a kink crossed; wrong
# partitioning shows up as errors of order one (the bugs these tests found were 0.2 to 0.9). Models with such kinks
# are held to --check's default tolerance for their updates; the first step's outputs and gradients to 1e-4.
KINKED = {"wresnet-tiny": DEFAULT_RTOL}


def _assert_equal_to_one_device(report):
    c = report.check
    assert c.output <= TOL, f"outputs differ by {c.output}"
    assert c.gradient <= TOL, f"gradients differ by {c.gradient} (relative)"
    assert c.loss <= TOL, f"losses differ by {c.loss}: {report.losses} vs {c.reference_losses}"
    assert c.parameters <= KINKED.get(report.model, TOL), f"parameter updates differ by {c.parameters} (relative)"
    assert report.losses[-1] < report.losses[0], "training did not lower the loss"


FAST = [("mlp", k, a) for k in (2, 3, 4, 8) for a in ("tofu", "data-parallel", "spartan")] + \
       [("wresnet-tiny", 2, "tofu"), ("wresnet-tiny", 4, "tofu"), ("rnn-tiny", 2, "tofu"), ("rnn-tiny", 4, "tofu"),
        ("rnn-tiny", 8, "tofu"), ("wresnet-tiny", 4, "icml18")] + \
       [("gpt-tiny", k, a) for k in (2, 4) for a in ("tofu", "megatron", "megatron-vp")]


def _assert_bytes(graph, plan, report):
    """MXNet's copies are what the plan predicts and what the byte oracle says the runtime sends (each piece
    once per device, however many ops there read it)."""
    c = count(graph, plan)
    assert report.measured_comm_bytes == c.shared == plan.comm_bytes


@pytest.mark.parametrize("model,k,algo", FAST, ids=lambda x: str(x))
def test_partitioned_training_equals_one_device(model, k, algo):
    graph, plan, report = _run(model, k, algo)
    _assert_equal_to_one_device(report)
    _assert_bytes(graph, plan, report)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("k", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("model", ["mlp", "wresnet-tiny", "rnn-tiny"])
def test_every_algorithm_and_worker_count(model, k, algo):
    batch = 12 if k in (3, 6) else None
    graph, plan, report = _run(model, k, algo, batch=batch)
    _assert_equal_to_one_device(report)
    _assert_bytes(graph, plan, report)


def test_plans_without_shared_reads_move_the_bytes_they_predict():
    """No op of these plans reads a piece another op on its device also reads: every copy MXNet makes is one the
    cost model charges, byte for byte, the recursion's conversions inside worker groups included."""
    for model, algo, k in (("mlp", "tofu", 4), ("mlp", "tofu", 8), ("mlp", "icml18", 2), ("wresnet-tiny", "tofu", 4)):
        _, plan, report = _run(model, k, algo, steps=1)
        assert report.measured_comm_bytes == plan.comm_bytes, (model, algo, k)


def test_copy_counter_on_a_hand_built_graph():
    """Two devices; device 1 reads rows 0-1 of device 0's weight (a 2 x 4 slice): 32 bytes cross forward, and
    their gradient (32 bytes) crosses back."""
    with mx.AttrScope(ctx_group="dev0"):
        w0 = mx.sym.var("w@dev0")
        x0 = mx.sym.var("x@dev0")
        piece = mx.sym.slice(w0, begin=(0, 0), end=(2, 4), name="piece")
        y0 = mx.sym.FullyConnected(x0, w0, no_bias=True, num_hidden=4, name="fc0")
    with mx.AttrScope(ctx_group="dev1"):
        x1 = mx.sym.var("x@dev1")
        y1 = mx.sym.FullyConnected(x1, piece, no_bias=True, num_hidden=2, name="fc1")
    sym = mx.sym.Group([mx.sym.make_loss(mx.sym.sum(y0)), mx.sym.make_loss(mx.sym.sum(y1))])
    shapes = {"w@dev0": (4, 4), "x@dev0": (3, 4), "x@dev1": (3, 4)}
    exe = sym.simple_bind(mx.cpu(0), group2ctx={"dev0": mx.cpu(0), "dev1": mx.cpu(1)},
                          grad_req={"w@dev0": "write", "x@dev0": "null", "x@dev1": "null"}, **shapes)
    copies = measure_copies(exe)
    assert sorted((c.backward, c.shape, c.nbytes) for c in copies) == [(False, (2, 4), 32), (True, (2, 4), 32)]


def test_checkpoint_round_trip(tmp_path):
    """Trained partitioned -> saved whole -> loaded unpartitioned gives the same outputs; and the reverse."""
    from tofu.runtime.data import load_checkpoint, save_checkpoint

    graph = load_graph("wresnet-tiny", ModelOptions(batch=8))
    plan = plan_graph(graph, 4, "tofu")
    batch = synthetic_batch(graph)
    report = train(graph, plan, partitioned(graph, plan), initial_values(graph), batch, 2, lr=0.002)
    path = tmp_path / "w.params"
    save_checkpoint(path, graph, report.final_values, plan)
    assert (tmp_path / "w.plan.json").is_file()
    loaded = load_checkpoint(path, graph)
    for name, value in report.final_values.items():
        np.testing.assert_array_equal(loaded[name], value)
    whole = Trainer(whole_graph(graph, reference_symbol(graph)), {**loaded, **batch})
    parts = Trainer(partitioned(graph, plan), {**loaded, **batch})
    a, b = whole.forward_backward(), parts.forward_backward()
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5)
    # and back: what one device saves, k devices load
    save_checkpoint(path, graph, whole.parameters((Role.PARAM, Role.AUX)))
    again = Trainer(partitioned(graph, plan), {**load_checkpoint(path, graph), **batch})
    np.testing.assert_allclose(again.forward_backward()[graph.tensors[graph.heads[0]].name],
                               whole.forward_backward()[graph.tensors[graph.heads[0]].name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model,k,algo", [("mlp", 4, "tofu"), ("wresnet-tiny", 8, "tofu"), ("rnn-tiny", 3, "data-parallel")])
def test_shard_then_gather_gives_back_every_parameter(model, k, algo):
    from tofu.rewrite import gather_values, shard_values

    graph = load_graph(model, ModelOptions(batch=24 if k == 3 else 8))
    pg = partitioned(graph, plan_graph(graph, k, algo))
    values = initial_values(graph, seed=3)
    shards = shard_values(pg, {**values, **synthetic_batch(graph)})
    params = {v.name: shards[v.name] for v in pg.variables if v.role is Role.PARAM}
    back = gather_values(pg, params)
    assert set(back) == {t.name for t in graph.by_role(Role.PARAM)}
    for name, value in back.items():
        np.testing.assert_array_equal(value, values[name])
    # every parameter element lives in exactly one shard variable
    assert sum(a.size for a in params.values()) == sum(t.size for t in graph.by_role(Role.PARAM))


def test_gpt_tiny_at_8_sends_the_oracles_bytes_without_common_expression_elimination(monkeypatch):
    """gpt-tiny at k = 8: every device computes the causal mask's positions (an ``arange``, no input) whole
    and keeps its slice. MXNet's common-expression elimination merges such identical computations across
    devices and then sends fewer pieces than the plan builds (24 B fewer here); without it, MXNet copies
    exactly what the byte oracle counts."""
    graph = load_graph("gpt-tiny", ModelOptions(batch=BATCH["gpt-tiny"]))
    plan = plan_graph(graph, 8, "tofu")
    shared = count(graph, plan).shared
    values = {**initial_values(graph), **synthetic_batch(graph)}
    merged = sum(c.nbytes for c in Trainer(partitioned(graph, plan), values).copies())
    monkeypatch.setenv("MXNET_ELIMINATE_COMMON_EXPR", "0")
    exact = sum(c.nbytes for c in Trainer(partitioned(graph, plan), values).copies())
    assert exact == shared
    assert merged <= shared


def test_image_operators_train_partitioned_like_one_device():
    """A network whose NHWC input is resized (``mx.sym.image.resize``) and whose features are cropped like a
    pooled copy of themselves (``Crop``, num_args=2), planned by Tofu's search for two CPU devices: ten steps
    equal one device's. The rewriter finds ``_image_resize`` as ``mx.sym.image.resize``. The data has no
    gradient, so MXNet never runs ``_backward_image_resize`` (in 1.9.1 it fails when the size changes)."""
    from tofu.graph import import_symbol

    data = mx.sym.var("data")
    h = mx.sym.transpose(mx.sym.image.resize(data, size=(8, 8), name="resize"), axes=(0, 3, 1, 2))
    h = mx.sym.Activation(mx.sym.Convolution(h, kernel=(3, 3), pad=(1, 1), num_filter=4, name="conv"), act_type="tanh")
    like = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="like")
    h = mx.sym.Crop(h, like, num_args=2, center_crop=True, name="crop")
    h = mx.sym.FullyConnected(mx.sym.Flatten(h), num_hidden=3, name="head")
    symbol = mx.sym.SoftmaxOutput(h, mx.sym.var("softmax_label"), name="softmax")
    graph = import_symbol(symbol, {"data": (8, 4, 4, 3), "softmax_label": (8,)}, "image-tiny")
    plan = plan_graph(graph, 2, "tofu")
    assert {"_image_resize", "Crop"} <= {n.op for n in graph.nodes}
    report = train(graph, plan, partitioned(graph, plan), initial_values(graph), synthetic_batch(graph), 10,
                   reference_symbol(graph), lr=LR)
    _assert_equal_to_one_device(report)
