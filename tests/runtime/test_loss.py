"""The loss `tofu run` prints (tofu.runtime.data.loss): the one each loss head's backward descends.

Before, any head but a 2-D SoftmaxOutput printed the mean of its output: a segmentation net's SoftmaxOutput
with multi_output printed 0.2 (one over its five classes) at every step, a regression head its mean prediction.
The reference is MXNet's own backward: the loss's gradient with respect to the head's data (central
differences through MXNet's forward, float64) is a positive multiple of the gradient MXNet injects.
"""
import mxnet as mx
import numpy as np
import pytest

from tofu.graph.mxnet_import import import_symbol
from tofu.runtime.data import head_loss, loss
from tofu.graph.attrs import Attrs

CASES = [
    ("SoftmaxOutput", (4, 5), (4,), {}),
    ("SoftmaxOutput", (2, 3, 4), (2, 4), {"multi_output": True}),
    ("SoftmaxOutput", (2, 3, 4), (2, 3), {"preserve_shape": True}),
    ("SoftmaxOutput", (2, 3, 2), (2, 3), {}),                     # flattened rows: the first n labels
    ("SoftmaxOutput", (2, 3, 4), (2, 4), {"multi_output": True, "use_ignore": True, "ignore_label": 1}),
    ("LinearRegressionOutput", (4, 3), (4, 3), {}),
    ("MAERegressionOutput", (4, 3), (4, 3), {}),
    ("LogisticRegressionOutput", (4, 3), (4, 3), {}),
    ("SVMOutput", (4, 3), (4,), {}),
    ("SVMOutput", (5, 4), (5,), {"margin": 0.5, "use_linear": True, "regularization_coefficient": 2.0}),
]


def _label(op, data_shape, shape, rng):
    if op in ("SoftmaxOutput", "SVMOutput"):
        classes = data_shape[1] if op == "SVMOutput" or len(data_shape) == 2 else (
            data_shape[-1] if shape == data_shape[:-1] else data_shape[1])
        return rng.integers(0, classes, size=shape).astype(np.float64)
    if op == "LogisticRegressionOutput":
        return rng.integers(0, 2, size=shape).astype(np.float64)
    return rng.standard_normal(shape)


@pytest.mark.parametrize("op,data_shape,label_shape,attrs", CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-{'-'.join(c[3]) or 'default'}" for c in CASES])
def test_loss_descends_mxnet_gradient(op, data_shape, label_shape, attrs):
    rng = np.random.default_rng(3)
    data = rng.standard_normal(data_shape)
    label = _label(op, data_shape, label_shape, rng)
    if attrs.get("use_ignore"):
        label.reshape(-1)[:2] = attrs["ignore_label"]          # some rows ignored, for sure
    parsed = Attrs.parse({k: str(v) for k, v in attrs.items()})

    def forward(x):
        return getattr(mx.nd, op)(mx.nd.array(x, dtype="float64"), mx.nd.array(label, dtype="float64"),
                                  **attrs).asnumpy()

    x = mx.nd.array(data, dtype="float64")
    x.attach_grad()
    with mx.autograd.record():
        y = getattr(mx.nd, op)(x, mx.nd.array(label, dtype="float64"), **attrs)
    y.backward()
    injected = x.grad.asnumpy().reshape(-1)

    eps = 1e-6
    numeric = np.zeros(data.size)
    for i in range(data.size):
        up, down = data.copy().reshape(-1), data.copy().reshape(-1)
        up[i] += eps
        down[i] -= eps
        numeric[i] = (head_loss(op, parsed, forward(up.reshape(data_shape)), label)
                      - head_loss(op, parsed, forward(down.reshape(data_shape)), label)) / (2 * eps)
    assert np.abs(injected).max() > 0
    scale = numeric @ injected / (injected @ injected)
    assert scale > 0
    np.testing.assert_allclose(numeric, scale * injected, atol=1e-6 * np.abs(numeric).max())


def test_loss_finds_a_label_reshaped_in_the_graph():
    """The zoo's language models feed (batch, seq) labels reshaped to the (batch * seq,) rows of their logits."""
    logits = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=5, name="fc")
    label = mx.sym.reshape(mx.sym.var("softmax_label"), shape=(-1,))
    graph = import_symbol(mx.sym.SoftmaxOutput(logits, label, name="softmax"),
                          {"data": (6, 3), "softmax_label": (2, 3)})
    rng = np.random.default_rng(0)
    probs = rng.random((6, 5))
    probs /= probs.sum(1, keepdims=True)
    labels = rng.integers(0, 5, size=(2, 3)).astype(np.float32)
    got = loss(graph, {graph.tensors[graph.heads[0]].name: probs}, {"softmax_label": labels, "data": None})
    expected = -np.mean(np.log(probs[np.arange(6), labels.reshape(-1).astype(int)]))
    assert got == pytest.approx(expected, rel=1e-9)
