"""Stacked-LSTM language model builder: an :class:`LSTMConfig` and a batch size -> the MXNet forward Symbol.

The network is ``Embedding -> L x LSTM -> FullyConnected(vocab) -> SoftmaxOutput``, unrolled by hand:
each layer's ``mx.rnn.LSTMCell`` is called once per timestep (no fused ``RNN`` op), so every timestep's
ops are separate graph nodes, as in the paper's unrolled RNNs. The cells of one layer share their weights.

Graph attributes: the embedding ops carry ``__tofu_layer__='embed'``; every op made by a cell call (and
the zero begin states, at step 0) carries ``__tofu_layer__='lstm_l{l}'`` and ``__tofu_step__='{t}'``;
the projection and loss carry ``__tofu_layer__='head'``. Op names are deterministic: LSTMCell names its
ops ``lstm_l{l}_t{t}_*`` and the few it leaves unnamed get the same prefix (``lstm_l0_t3_plus0``).

Output and label order: the last layer's outputs are concatenated along axis 1 and reshaped to
(batch * seq_len, hidden), so row ``b * seq_len + t`` holds sequence ``b`` at step ``t``; the label
(batch, seq_len) is flattened row-major to the same order.
"""
from __future__ import annotations

from dataclasses import dataclass

import mxnet as mx


@dataclass(frozen=True)
class LSTMConfig:
    """Shape of one stacked-LSTM language model.

    Attributes:
        layers: number of stacked LSTM layers (L).
        hidden: hidden and embedding size (H).
        seq_len: unrolled timesteps (T).
        vocab: vocabulary size (V), the embedding's rows and the projection's outputs.
    """

    layers: int
    hidden: int
    seq_len: int
    vocab: int

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.seq_len, self.vocab) < 1:
            raise ValueError(f"invalid LSTMConfig {self}")


TINY = LSTMConfig(layers=2, hidden=16, seq_len=4, vocab=20)
"""``rnn-tiny``: two layers of 16 units over 4 steps, trainable on a CPU in milliseconds."""


class _StepNames(mx.name.NameManager):
    """Names the ops a cell call leaves unnamed ``{prefix}{hint}{n}``, counting from 0 in each call."""

    def __init__(self, prefix: str):
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        if name:
            return name
        return self._prefix + super().get(None, hint.strip("_"))


def lstm_symbol(config: LSTMConfig, batch: int) -> mx.sym.Symbol:
    """Builds the unrolled forward graph of a stacked-LSTM language model with its softmax loss head.

    Args:
        config: layers, hidden size, timesteps and vocabulary.
        batch: sequences per batch (the zero begin states have this many rows).

    Returns:
        A Symbol with arguments ``data`` (batch, seq_len) of token ids stored as float32,
        ``softmax_label`` (batch, seq_len) and the parameters; its one output is ``softmax`` of shape
        (batch * seq_len, vocab), row ``b * seq_len + t`` for sequence ``b`` at step ``t``.
    """
    L, H, T = config.layers, config.hidden, config.seq_len
    with mx.name.NameManager():  # any name left to MXNet is then independent of earlier builds
        data = mx.sym.var("data")
        with mx.AttrScope(__tofu_layer__="embed"):
            embedded = mx.sym.Embedding(data, input_dim=config.vocab, output_dim=H, name="embed")
            steps = mx.sym.split(embedded, num_outputs=T, axis=1, squeeze_axis=True, name="embed_split")
            inputs = [steps] if T == 1 else [steps[t] for t in range(T)]  # split's single output is itself
        for layer in range(L):
            prefix = f"lstm_l{layer}_"
            with mx.AttrScope(__tofu_layer__=f"lstm_l{layer}"):
                cell = mx.rnn.LSTMCell(H, prefix=prefix)  # its weights carry the layer attribute
            outputs = []
            for t in range(T):
                with mx.AttrScope(__tofu_layer__=f"lstm_l{layer}", __tofu_step__=str(t)), \
                        _StepNames(f"{prefix}t{t}_"):
                    if t == 0:
                        states = [mx.sym.zeros(shape=(batch, H), name=f"{prefix}begin_h"),
                                  mx.sym.zeros(shape=(batch, H), name=f"{prefix}begin_c")]
                    output, states = cell(inputs[t], states)
                outputs.append(output)
            inputs = outputs
        with mx.AttrScope(__tofu_layer__="head"):
            hidden = mx.sym.concat(*inputs, dim=1, name="head_concat")  # (batch, T * H)
            hidden = mx.sym.reshape(hidden, shape=(-1, H), name="head_reshape")  # row b * T + t
            logits = mx.sym.FullyConnected(hidden, num_hidden=config.vocab, name="proj")
            label = mx.sym.reshape(mx.sym.var("softmax_label"), shape=(-1,), name="head_label_reshape")
            return mx.sym.SoftmaxOutput(logits, label, name="softmax")
