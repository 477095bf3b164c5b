"""The GPT-style decoders of tofu.models.transformer: parameter counts from the architecture's formula,
causality and the heads' layout checked by running MXNet, the named configurations' shapes."""
import numpy as np
import pytest

import mxnet as mx

from tofu.models import GPT_MODELS, ModelOptions, build_model
from tofu.models.transformer import CONFIGS, TINY, GPTConfig, gpt_symbol


def _parameters(c: GPTConfig) -> int:
    """Token and position embeddings, per block 12 h^2 weights (q, k, v, proj: h x h; fc1, fc2: 4h x h) and
    13 h biases and LayerNorm terms (q, k, v, proj, fc2: h each; fc1: 4h; two LayerNorms: 4h), the final
    LayerNorm (2h) and the untied projection (V h, no bias)."""
    h = c.hidden
    return c.vocab * h + c.seq_len * h + c.layers * (12 * h * h + 13 * h) + 2 * h + (0 if c.tied else c.vocab * h)


@pytest.mark.parametrize("name", ["gpt-tiny", *GPT_MODELS])
def test_parameter_count(name):
    model = build_model(name, ModelOptions(batch=1))
    args, _, _ = model.symbol.infer_shape(**model.shapes())
    names = model.symbol.list_arguments()
    count = sum(int(np.prod(s)) for n, s in zip(names, args) if n not in ("data", "softmax_label"))
    config = TINY if name == "gpt-tiny" else CONFIGS[name]
    assert count == _parameters(config)


def test_gpt2_small_is_124m_parameters_when_tied():
    """GPT-2 small has 124M parameters with the output projection tied to the token embedding (with the
    vocabulary 50257; Megatron's padding to 50304 adds 47 x 768)."""
    tied = GPTConfig(layers=12, hidden=768, heads=12, vocab=50257, tied=True)
    assert round(_parameters(tied) / 1e6) == 124
    symbol = gpt_symbol(tied, 1)
    args, _, _ = symbol.infer_shape(data=(1, 1024), softmax_label=(1, 1024))
    assert sum(int(np.prod(s)) for n, s in zip(symbol.list_arguments(), args)
               if n not in ("data", "softmax_label")) == _parameters(tied)


def _forward(symbol, config: GPTConfig, tokens: np.ndarray, seed: int = 0) -> np.ndarray:
    batch = tokens.shape[0]
    shapes = {"data": tokens.shape, "softmax_label": tokens.shape}
    exe = symbol.simple_bind(mx.cpu(), grad_req="null", **shapes)
    rng = np.random.default_rng(seed)
    for name, array in exe.arg_dict.items():
        if name == "data":
            array[:] = tokens
        elif name != "softmax_label":
            array[:] = rng.standard_normal(array.shape).astype(np.float32) * 0.5
    return exe.forward(is_train=False)[0].asnumpy().reshape(batch, config.seq_len, -1)


def test_causal_every_position_sees_only_earlier_tokens():
    """Changing token t changes the outputs at positions >= t only (the mask), and every such position."""
    config = TINY
    symbol = gpt_symbol(config, 2)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, config.vocab, size=(2, config.seq_len)).astype(np.float32)
    base = _forward(symbol, config, tokens)
    for t in range(config.seq_len):
        changed = tokens.copy()
        changed[:, t] = (changed[:, t] + 1) % config.vocab
        diff = np.abs(_forward(symbol, config, changed) - base).max(axis=(0, 2))
        assert np.all(diff[:t] == 0), t
        assert np.all(diff[t:] > 1e-6), t


def test_attention_equals_a_numpy_reference():
    """Block 0's attention context against numpy: per head (contiguous channels), causal softmax of the
    scaled scores times the values, heads concatenated back in order."""
    config = GPTConfig(layers=1, hidden=12, heads=3, seq_len=5, vocab=10)
    internals = gpt_symbol(config, 2).get_internals()
    both = mx.sym.Group([internals["block0_ln1_output"], internals["block0_context_merge_output"]])
    exe = both.simple_bind(mx.cpu(), grad_req="null", data=(2, 5))
    rng = np.random.default_rng(2)
    for name, array in exe.arg_dict.items():
        array[:] = rng.integers(0, 10, size=array.shape) if name == "data" else rng.standard_normal(array.shape)
    a, context = (o.asnumpy() for o in exe.forward(is_train=False))
    w = {n: exe.arg_dict[f"block0_{n}"].asnumpy() for n in ("q_weight", "q_bias", "k_weight", "k_bias",
                                                             "v_weight", "v_bias")}
    q, k, v = (a @ w[f"{r}_weight"].T + w[f"{r}_bias"] for r in ("q", "k", "v"))
    d = config.head_dim
    expected = np.zeros_like(context)
    for head in range(config.heads):
        cols = slice(head * d, (head + 1) * d)
        scores = q[..., cols] @ k[..., cols].transpose(0, 2, 1) / np.sqrt(d)
        scores = np.where(np.triu(np.ones((5, 5), bool), 1), -np.inf, scores)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        expected[..., cols] = probs @ v[..., cols]
    np.testing.assert_allclose(context, expected, rtol=1e-4, atol=1e-5)


def test_options_set_sequence_and_vocabulary():
    model = build_model("gpt-124m", ModelOptions(batch=2, seq_len=64, vocab=1000))
    assert model.shapes() == {"data": (2, 64), "softmax_label": (2, 64)}
    args, outs, _ = model.symbol.infer_shape(**model.shapes())
    assert dict(zip(model.symbol.list_arguments(), args))["embed_token_weight"] == (1000, 768)
    assert outs == [(2 * 64, 1000)]
