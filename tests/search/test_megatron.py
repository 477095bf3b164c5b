"""The ``megatron`` baseline: Megatron-LM's partition of the transformer blocks, on the same cost model."""
import pytest

from tofu.api import load_graph, load_plan
from tofu.errors import SearchError


@pytest.mark.parametrize("model", ["mlp", "rnn-tiny", "wresnet-tiny"])
def test_refuses_graphs_without_transformer_blocks(model):
    with pytest.raises(SearchError, match="no transformer block"):
        load_plan(load_graph(model), 2, "megatron")


def _block_bytes(b: int, s: int, h: int, k: int) -> int:
    """One block's bytes under Megatron's partition on the cost model, derived in docs/search.md: every
    activation moves forward and its gradient backward (x2), 4-byte floats.

    - q, k and v (one op group: parallel projections) fetch the sequence-split LayerNorm output whole, once
      per worker for the three: (k-1) b s h
    - proj and fc2 reduce-scatter their partial outputs onto the sequence split: 2 x (k-1) b s h
    - fc1 fetches the second LayerNorm's output whole: (k-1) b s h

    The activations' 8 (k-1) b s h are Megatron-LM's own: two all-gathers and two reduce-scatters of b s h
    forward, their mirrors backward.
    - each LayerNorm reads its gamma and beta (held split) whole: 2 x 2 x (k-1) h
    - proj's and fc2's biases are added by worker 0 only, which fetches them: 2 x (k-1) h / k
    - the causal mask (no gradient), held split, is read whole by every worker, but a worker fetches it once for
      every block (the runtime shares a piece among the ops of a device that read it): nothing per block
    """
    grad = 2 * ((1 + 2 + 1) * (k - 1) * b * s * h + 4 * (k - 1) * h + 2 * (k - 1) * h // k)
    return 4 * grad


@pytest.mark.parametrize("k", [2, 4])
def test_one_block_costs_what_the_derivation_says(k):
    """The cost of a block is the difference between the plans of a 2-block and a 1-block model (the
    embedding and head are planned alike in both)."""
    from tofu.models import transformer
    import dataclasses

    b, costs = 4, []
    for layers in (1, 2):
        config = dataclasses.replace(transformer.TINY, layers=layers)
        symbol = transformer.gpt_symbol(config, b)
        graph = _graph(symbol, b, config.seq_len)
        costs.append(load_plan(graph, k, "megatron").comm_bytes)
    c = transformer.TINY
    assert costs[1] - costs[0] == _block_bytes(b, c.seq_len, c.hidden, k)


def _graph(symbol, batch: int, seq: int):
    from tofu.graph.mxnet_import import import_symbol
    return import_symbol(symbol, {"data": (batch, seq), "softmax_label": (batch, seq)})
