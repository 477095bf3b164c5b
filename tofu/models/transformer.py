"""GPT-style decoder builder: a :class:`GPTConfig` and a batch size -> the MXNet forward Symbol.

The network is token Embedding + learned position embedding, ``layers`` pre-LayerNorm blocks, a final
LayerNorm, the output projection to the vocabulary (untied, or tied to the token embedding) and a softmax
cross-entropy over every position. A block is

    x = x + proj(attention(q(ln1(x)), k(ln1(x)), v(ln1(x))))
    x = x + fc2(gelu(fc1(ln2(x))))

with causal multi-head self-attention built from FullyConnected (``flatten=False``), Reshape, transpose,
batch_dot and softmax: the heads get a dimension of their own beside the batch, (batch, seq, hidden) -> (batch,
heads, seq, head_dim), and the scores and the context are 4-d ``batch_dot`` products over (batch, heads), so that a
split of the first dimension is a split of the batch (data parallelism) and one of the second a split by heads
(Megatron-LM's); the causal mask adds -1e4 to every
score of a later position (from ``arange`` and ``broadcast_greater``, so it is computed, not learned).
q, k and v are three FullyConnected ops (not one fused matrix), so that a contiguous split of each weight's
rows is a split by heads, as in Megatron-LM's column-parallel attention.

Every op is named ``block{l}_{role}`` (l from 0), ``embed_*`` or ``head_*`` and carries ``__tofu_layer__``
(``'embed'``, ``'block3'``, ``'head'``). Dropout is left out: training is deterministic, so partitioned and
single-device runs compare element by element.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import mxnet as mx


@dataclass(frozen=True)
class GPTConfig:
    """Shape of one GPT-style decoder.

    Attributes:
        layers: transformer blocks.
        hidden: model width h (embedding, attention and residual stream); the MLP is 4h wide.
        heads: attention heads; each has hidden / heads channels.
        seq_len: tokens per sequence.
        vocab: vocabulary size (padded, as Megatron-LM pads GPT-2's 50257 to 50304).
        tied: the output projection reuses the token embedding's weight.
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int = 1024
    vocab: int = 50304
    tied: bool = False

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.seq_len, self.vocab) < 1:
            raise ValueError(f"invalid GPTConfig {self}")
        if self.hidden % self.heads:
            raise ValueError(f"GPTConfig: hidden {self.hidden} is not a multiple of heads {self.heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


CONFIGS: dict[str, GPTConfig] = {
    # GPT-2 (Radford et al. 2019): small, medium, large, xl
    "gpt-124m": GPTConfig(layers=12, hidden=768, heads=12),
    "gpt-350m": GPTConfig(layers=24, hidden=1024, heads=16),
    "gpt-774m": GPTConfig(layers=36, hidden=1280, heads=20),
    "gpt-1.5b": GPTConfig(layers=48, hidden=1600, heads=25),
    # GPT-3 (Brown et al. 2020, Table 2.1): 2.7B and 6.7B
    "gpt-2.7b": GPTConfig(layers=32, hidden=2560, heads=32),
    "gpt-6.7b": GPTConfig(layers=32, hidden=4096, heads=32),
}
"""The named configurations: GPT-2's and GPT-3's layers, width and heads, sequence 1024, vocabulary 50304."""

TINY = GPTConfig(layers=2, hidden=16, heads=4, seq_len=8, vocab=32)
"""``gpt-tiny``: two blocks of width 16 with 4 heads over 8 tokens, trainable on a CPU in milliseconds."""


def gpt_symbol(config: GPTConfig, batch: int) -> mx.sym.Symbol:
    """Builds the forward graph of a GPT-style decoder with its softmax cross-entropy head.

    Args:
        config: layers, width, heads, sequence length, vocabulary, tying.
        batch: sequences per batch.

    Returns:
        A Symbol with arguments ``data`` (batch, seq_len) of token ids stored as float32, ``softmax_label``
        (batch, seq_len) and the parameters; its one output is ``softmax`` of shape (batch * seq_len, vocab),
        row ``b * seq_len + t`` for sequence ``b`` at position ``t``.
    """
    s, h = config.seq_len, config.hidden
    with mx.name.NameManager():       # any name left to MXNet is then independent of earlier builds
        with mx.AttrScope(__tofu_layer__="embed"):
            token_weight = mx.sym.var("embed_token_weight")
            x = mx.sym.Embedding(mx.sym.var("data"), weight=token_weight, input_dim=config.vocab, output_dim=h,
                                 name="embed_token")
            position = mx.sym.expand_dims(mx.sym.var("embed_position_weight", shape=(s, h)), axis=0,
                                          name="embed_position")
            x = mx.sym.broadcast_add(x, position, name="embed_add")
            mask = _causal_mask(s)
        for layer in range(config.layers):
            with mx.AttrScope(__tofu_layer__=f"block{layer}"):
                x = _block(x, mask, config, f"block{layer}")
        with mx.AttrScope(__tofu_layer__="head"):
            x = mx.sym.LayerNorm(x, axis=-1, name="head_ln")
            x = mx.sym.reshape(x, shape=(-1, h), name="head_reshape")               # row b * s + t
            weight = token_weight if config.tied else mx.sym.var("head_proj_weight")
            logits = mx.sym.FullyConnected(x, weight=weight, num_hidden=config.vocab, no_bias=True,
                                           name="head_proj")
            label = mx.sym.reshape(mx.sym.var("softmax_label"), shape=(-1,), name="head_label_reshape")
            return mx.sym.SoftmaxOutput(logits, label, name="softmax")


def _causal_mask(seq: int) -> mx.sym.Symbol:
    """(1, 1, seq, seq): -1e4 where the key position is after the query's, 0 elsewhere."""
    positions = mx.sym.arange(0, seq, name="embed_positions")
    later = mx.sym.broadcast_greater(mx.sym.reshape(positions, shape=(1, seq), name="embed_keys"),
                                     mx.sym.reshape(positions, shape=(seq, 1), name="embed_queries"),
                                     name="embed_later")
    penalty = mx.sym._internal._mul_scalar(later, scalar=-1e4, name="embed_penalty")
    return mx.sym.reshape(penalty, shape=(1, 1, seq, seq), name="embed_mask")


def _block(x: mx.sym.Symbol, mask: mx.sym.Symbol, config: GPTConfig, name: str) -> mx.sym.Symbol:
    h, heads, d = config.hidden, config.heads, config.head_dim
    a = mx.sym.LayerNorm(x, axis=-1, name=f"{name}_ln1")

    def split_heads(t: mx.sym.Symbol, role: str) -> mx.sym.Symbol:     # (b, s, h) -> (b, heads, s, d)
        t = mx.sym.reshape(t, shape=(0, 0, heads, d), name=f"{name}_{role}_heads")
        return mx.sym.transpose(t, axes=(0, 2, 1, 3), name=f"{name}_{role}_front")

    q, k, v = (split_heads(mx.sym.FullyConnected(a, num_hidden=h, flatten=False, name=f"{name}_{role}"), role)
               for role in ("q", "k", "v"))
    scores = mx.sym.batch_dot(q, k, transpose_b=True, name=f"{name}_scores")         # (b, heads, s, s)
    scores = mx.sym._internal._mul_scalar(scores, scalar=1.0 / math.sqrt(d), name=f"{name}_scale")
    scores = mx.sym.broadcast_add(scores, mask, name=f"{name}_masked")
    probs = mx.sym.softmax(scores, axis=-1, name=f"{name}_probs")
    context = mx.sym.batch_dot(probs, v, name=f"{name}_context")                    # (b, heads, s, d)
    context = mx.sym.transpose(context, axes=(0, 2, 1, 3), name=f"{name}_context_back")  # (b, s, heads, d)
    context = mx.sym.reshape(context, shape=(0, 0, -3), name=f"{name}_context_merge")  # (b, s, h)
    x = mx.sym.elemwise_add(x, mx.sym.FullyConnected(context, num_hidden=h, flatten=False, name=f"{name}_proj"),
                            name=f"{name}_attn_add")
    m = mx.sym.LayerNorm(x, axis=-1, name=f"{name}_ln2")
    m = mx.sym.FullyConnected(m, num_hidden=4 * h, flatten=False, name=f"{name}_fc1")
    m = mx.sym.LeakyReLU(m, act_type="gelu", name=f"{name}_gelu")
    m = mx.sym.FullyConnected(m, num_hidden=h, flatten=False, name=f"{name}_fc2")
    return mx.sym.elemwise_add(x, m, name=f"{name}_mlp_add")
