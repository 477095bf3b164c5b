"""Small model builders for tests and CPU runs: sizes -> the MXNet forward Symbol ending in SoftmaxOutput.

``mlp`` is ``data (batch, 32) -> FC 64 -> relu -> FC 64 -> relu -> FC 10 -> SoftmaxOutput``; its layers
carry ``__tofu_layer__`` ``fc1``, ``fc2`` and ``fc3`` (the loss belongs to ``fc3``).
"""
from __future__ import annotations

import mxnet as mx

MLP_INPUT = 32
MLP_HIDDEN = (64, 64)
MLP_CLASSES = 10


def mlp_symbol(hidden: tuple[int, ...] = MLP_HIDDEN, classes: int = MLP_CLASSES) -> mx.sym.Symbol:
    """Builds a multi-layer perceptron with relu activations and a softmax loss.

    Args:
        hidden: widths of the hidden FullyConnected layers, in order.
        classes: outputs of the last FullyConnected layer.

    Returns:
        A Symbol with arguments ``data`` (batch, features), ``softmax_label`` (batch,) and the parameters
        ``fc{i}_weight`` / ``fc{i}_bias``; its one output is ``softmax`` of shape (batch, classes).
    """
    with mx.name.NameManager():
        x = mx.sym.var("data")
        for i, width in enumerate(hidden, start=1):
            with mx.AttrScope(__tofu_layer__=f"fc{i}"):
                x = mx.sym.FullyConnected(x, num_hidden=width, name=f"fc{i}")
                x = mx.sym.Activation(x, act_type="relu", name=f"relu{i}")
        last = f"fc{len(hidden) + 1}"
        with mx.AttrScope(__tofu_layer__=last):
            x = mx.sym.FullyConnected(x, num_hidden=classes, name=last)
            return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax")
