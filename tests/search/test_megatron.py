"""The ``megatron`` baseline: Megatron-LM's partition of the transformer blocks, on the same cost model."""
import pytest

from tofu.api import load_graph, load_plan
from tofu.errors import SearchError


@pytest.mark.parametrize("model", ["mlp", "rnn-tiny", "wresnet-tiny"])
def test_refuses_graphs_without_transformer_blocks(model):
    with pytest.raises(SearchError, match="no transformer block"):
        load_plan(load_graph(model), 2, "megatron")
