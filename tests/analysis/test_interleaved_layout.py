"""MXNet's interleaved attention kernels take the projection's last axis whole, (heads, 3, d) per token for
self-attention, (heads, 2, d) for encoder-decoder keys and values. Their descriptions declare the slots they do not
multiply (``uses``), so that a batch split's shards read that axis whole and MXNet's kernel runs them: without the
declared reads, a shard's piece would stop short of the last head's unread slot and the kernel would refuse it
(tests/analysis/test_strategies.py then only finds the split refused, consistently, so it is checked here)."""
import pytest

from tofu import registry
from tofu.analysis.strategies import strategies
from tofu.analysis.views import runnable
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe

registry.load_builtin_operators()
S, B, H, D = 4, 4, 2, 3       # sequence, batch, heads, head width
CASES = [  # op, input shapes, the batch split's variable
    ("_contrib_interleaved_matmul_selfatt_qk", ((S, B, 3 * H * D),), "bh"),
    ("_contrib_interleaved_matmul_selfatt_valatt", ((S, B, 3 * H * D), (B * H, S, S)), "b"),
    ("_contrib_interleaved_matmul_encdec_qk", ((S, B, H * D), (S + 2, B, 2 * H * D)), "bh"),
    ("_contrib_interleaved_matmul_encdec_valatt", ((S + 2, B, 2 * H * D), (B * H, S, S + 2)), "b"),
]


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("op,shapes,var", CASES, ids=[c[0] for c in CASES])
def test_a_batch_split_reads_the_projection_whole_and_runs_on_the_kernel(op, shapes, var, k):
    attrs = Attrs.of(heads=H)
    desc = describe(op, attrs, shapes, infer_op_shapes(op, attrs, shapes))
    split = [s for s in strategies(desc, k) if s.var == var]
    assert len(split) == 1, [str(s) for s in strategies(desc, k)]
    assert runnable(op, attrs, desc, split[0])
    width = shapes[0][-1]                                  # the interleaved projection, input 0
    batch = [worker[0].bounds[1] for worker in split[0].input_regions]
    assert all(worker[0].bounds[-1] == (0, width - 1) for worker in split[0].input_regions)
    assert batch == [(w * B // k, (w + 1) * B // k - 1) for w in range(k)]     # each worker its batch rows
