"""Tests of tofu.graph.memory: hand-computed estimates of tiny graphs, and the estimate against MXNet's profiler."""
import os

for _key, _value in (("MXNET_SUBGRAPH_BACKEND", "NONE"), ("MXNET_SUBGRAPH_VERBOSE", "0"), ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_key, _value)

import mxnet as mx  # noqa: E402
import pytest  # noqa: E402

from tofu.graph import import_symbol  # noqa: E402
from tofu.graph.memory import MemoryEstimate, estimate_training_memory  # noqa: E402
from tofu.graph.memory_profile import MemoryProfileError, measure_peak_bytes, peak_from_trace  # noqa: E402
from tofu.models import ModelOptions, build_model  # noqa: E402

F32 = 4
BATCH, IN, HIDDEN, CLASSES = 64, 32, 48, 10


def two_layer_mlp(relu: bool = True) -> mx.sym.Symbol:
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=HIDDEN, name="fc1")
    if relu:
        x = mx.sym.Activation(x, act_type="relu", name="relu1")
    x = mx.sym.FullyConnected(x, num_hidden=CLASSES, name="fc2")
    return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax")


MLP_SHAPES = {"data": (BATCH, IN), "softmax_label": (BATCH,)}
MLP_PARAM_BYTES = F32 * (IN * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES)


def mlp_estimate(optimizer: str = "sgd_mom", relu: bool = True) -> MemoryEstimate:
    return estimate_training_memory(import_symbol(two_layer_mlp(relu), MLP_SHAPES, "mlp2"), optimizer)


def test_mlp_parameter_categories_by_hand():
    est = mlp_estimate()
    assert est.params == est.grads == est.optimizer == MLP_PARAM_BYTES
    assert est.aux == 0
    assert mlp_estimate("sgd").optimizer == 0


def test_mlp_activations_and_workspace_by_hand():
    # Forward: fc1's output is overwritten in place by relu (relu's backward reads only its output, fc2's
    # backward reads its input), fc2's output in place by softmax. Backward needs one new (batch, classes)
    # and one new (batch, hidden) buffer, since the forward ones are still read; relu's backward works in
    # place. Data and label live outside the plan. SoftmaxOutput's temporary space holds the label.
    est = mlp_estimate()
    inputs = F32 * (BATCH * IN + BATCH)
    assert est.activations == inputs + 2 * F32 * (BATCH * HIDDEN + BATCH * CLASSES)
    assert est.workspace == F32 * BATCH
    assert est.total == sum(v for k, v in est.as_dict().items() if k != "total")
    assert set(est.as_dict()) == {"params", "grads", "optimizer", "aux", "activations", "workspace", "total"}


def test_inplace_relu_adds_no_activation_memory():
    assert mlp_estimate(relu=True).activations == mlp_estimate(relu=False).activations


def test_conv_bn_relu_by_hand():
    n, c, k, hw = 2, 3, 4, 8
    x = mx.sym.Convolution(mx.sym.var("data"), num_filter=k, kernel=(3, 3), pad=(1, 1), no_bias=True, name="c")
    x = mx.sym.Activation(mx.sym.BatchNorm(x, name="bn"), act_type="relu", name="r")
    x = mx.sym.FullyConnected(x, num_hidden=5, name="fc")
    loss = mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax")
    est = estimate_training_memory(import_symbol(loss, {"data": (n, c, hw, hw), "softmax_label": (n,)}))
    assert est.workspace == F32 * c * 3 * 3 * hw * hw       # im2col of one image
    assert est.aux == F32 * 2 * k                            # moving mean and variance
    feature, logits, stats = F32 * n * k * hw * hw, F32 * n * 5, F32 * 2 * k
    # Forward: conv's output (read by BatchNorm's backward), one buffer for bn and relu (relu in place),
    # BatchNorm's saved mean and variance, the logits (overwritten by softmax). Backward: the logits'
    # gradient and relu's output gradient (relu's backward works in place) need new buffers; conv's output
    # gradient reuses relu's output, which relu's backward was the last to read.
    assert est.activations == F32 * (n * c * hw * hw + n) + 3 * feature + 2 * logits + stats


def test_unknown_optimizer_is_rejected():
    with pytest.raises(ValueError, match="optimizer"):
        mlp_estimate("adam")


def test_peak_from_trace_reads_the_cpu0_counter():
    trace = {"traceEvents": [
        {"cat": "Device Storage", "name": "Memory: cpu/0", "ph": "C", "args": {"Memory: cpu/0": v}}
        for v in (10, 30, 20)] + [{"cat": "operator", "name": "FullyConnected", "ph": "B"}]}
    assert peak_from_trace(trace) == 30
    with pytest.raises(MemoryProfileError):
        peak_from_trace({"traceEvents": []})


CASES = [("mlp", 1024), ("wresnet-tiny", 16), ("rnn-tiny", 256)]


@pytest.mark.parametrize("name,batch", CASES, ids=[f"{n}-b{b}" for n, b in CASES])
def test_estimate_matches_profiler(name, batch):
    model = build_model(name, ModelOptions(batch=batch))
    estimate = estimate_training_memory(import_symbol(model.symbol, model.shapes(), name)).total
    measured = measure_peak_bytes(model.symbol, model.shapes())
    assert estimate == pytest.approx(measured, rel=0.15), f"estimate {estimate} B, measured {measured} B"


def test_two_layer_mlp_estimate_matches_profiler():
    measured = measure_peak_bytes(two_layer_mlp(), MLP_SHAPES, optimizer="sgd")
    assert mlp_estimate("sgd").total == pytest.approx(measured, rel=0.15)
