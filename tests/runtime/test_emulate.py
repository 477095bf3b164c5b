"""A whole model's forward pass with every op partitioned by a searched cut, on k CPU contexts, equals the
unpartitioned forward pass on one context (MXNet's own executor)."""
import numpy as np
import pytest

from tofu.graph import Role, import_symbol
from tofu.models import build_model
from tofu.runtime.emulate import emulate_cut, reference_forward
from tofu.search.recursive import search


def _inputs(graph, name, seed=0):
    rng = np.random.default_rng(seed)
    inputs = {}
    for t in graph.tensors:
        if t.producer is not None:
            continue
        if t.role is Role.LABEL or (t.role is Role.DATA and name.startswith("rnn")):
            inputs[t.name] = rng.integers(0, 10, t.shape).astype(np.float32)     # labels, token ids
        elif t.role is Role.AUX and "var" in t.name:
            inputs[t.name] = np.ones(t.shape, np.float32)
        else:
            inputs[t.name] = (rng.standard_normal(t.shape) * 0.5).astype(np.float32)
    return inputs


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("name", ["mlp", "wresnet-tiny", "rnn-tiny"])
def test_partitioned_forward_equals_single_device(name, k):
    model = build_model(name)
    graph = import_symbol(model.symbol, model.shapes(), name)
    (step,) = search(graph, (k,))
    inputs = _inputs(graph, name)
    values = emulate_cut(graph, step, inputs)
    expected = reference_forward(model.symbol, inputs)[0]
    got = values[graph.heads[0]]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # the plan is not trivial: some op is split on something other than the batch
    assert any(v not in ("b", "i0", "o0", "dim0") for v in step.op_vars)
