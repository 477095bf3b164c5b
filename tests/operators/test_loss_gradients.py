"""Every loss head's split, held to MXNet's backward: a loss head (``tofu.graph.ir.LOSS_OPS``) ignores the gradient
arriving at its output and injects its own, which its description cannot state (it describes the forward). A
split is right only if MXNet's backward run on each worker's pieces gives the whole op's gradient on them; a
backward that divides by an extent or a count of the whole tensor breaks that (SoftmaxOutput's multi_output
divided by a sample's spatial extent, and trained with k times the gradient when split there).

Generic over the registry: every case of every described loss head, every output split the analysis offers at
k = 2 (those with a statistics exchange run an expansion instead: tests/analysis/test_softmax_output_exchange.py),
MXNet's kernel on the pieces against MXNet's kernel on the whole."""
import mxnet as mx
import numpy as np
import pytest

from tofu import registry
from tofu.analysis.strategies import strategies
from tofu.graph.ir import LOSS_OPS
from tofu.graph.single_op import infer_op_shapes, op_symbol
from tofu.tdl.describe import describe

from tests.operators.test_conformance import random_inputs

SPECS = registry.load_builtin_operators()
CASES = [(op, case) for op, spec in sorted(SPECS.items()) if op in LOSS_OPS for case in spec.cases]


def _gradient(op, attrs, inputs):
    """MXNet's gradient of ``op`` with respect to its first input (the others fed as they are)."""
    sym = op_symbol(op, attrs, len(inputs))
    args = {f"in{i}": mx.nd.array(a) for i, a in enumerate(inputs)}
    grad = mx.nd.zeros(inputs[0].shape)
    exe = sym.bind(mx.cpu(), args, args_grad={"in0": grad},
                   grad_req={n: "write" if n == "in0" else "null" for n in args})
    exe.forward(is_train=True)
    exe.backward([mx.nd.ones(o.shape) for o in exe.outputs])     # ignored by a loss head
    return grad.asnumpy()


def test_every_loss_head_is_described():
    assert {op for op, _ in CASES} == set(LOSS_OPS) & set(SPECS)
    assert len({op for op, _ in CASES}) >= 6


def _splits(op, case, inputs):
    attrs = case.parsed_attrs()
    shapes = tuple(a.shape for a in inputs)
    desc = describe(op, attrs, shapes, infer_op_shapes(op, attrs, shapes))
    return [s for s in strategies(desc, 2) if not s.exchanges]


def test_the_splits_checked_are_many_and_all_output_splits():
    found = [s for op, case in CASES for s in _splits(op, case, random_inputs(case))]
    assert len(found) >= 20
    assert {s.kind for s in found} == {"output"}


@pytest.mark.parametrize("op,case", CASES, ids=[f"{op}-{c}" for op, c in CASES])
def test_each_split_of_a_loss_head_gives_mxnet_s_gradient(op, case):
    attrs = case.parsed_attrs()
    inputs = [np.asarray(a, dtype=np.float32) for a in random_inputs(case)]
    splits = _splits(op, case, inputs)
    whole = _gradient(op, attrs, inputs)
    for s in splits:
        got = np.zeros_like(whole)
        for w in range(2):
            regions = s.input_regions[w]
            assert all(r is not None and not any(p for pad in r.pad for p in pad) for r in regions), (s.var, w)
            got[regions[0].slices()] = _gradient(op, attrs, [a[r.slices()] for a, r in zip(inputs, regions)])
        np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-7, err_msg=f"{op} split along {s.var}")
