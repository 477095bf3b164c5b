"""softmax's use_length form (a second input, each row's length, masking the row past it): described, checked
against MXNet's kernel by the registry-wide conformance tests (its Cases feed int32 lengths, as the kernel
requires); its softmax axis is not split, since the axis expansion masks no row. log_softmax and softmin have no
such form in MXNet 1.9.1 (their kernels take no length): a graph cannot hold one, and a description asked for
it refuses by name."""
import numpy as np
import pytest

from tofu.analysis.strategies import strategies
from tofu.analysis.views import runnable
from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.tdl.describe import describe
from tofu.tdl.interpret import evaluate


@pytest.mark.parametrize("op", ["log_softmax", "softmin"])
def test_a_length_to_log_softmax_or_softmin_is_refused_by_name(op):
    with pytest.raises(TDLError, match=f"{op}: a length input \\(use_length=True"):
        describe(op, Attrs.parse({"use_length": "True"}), ((4, 6), (4,)), ((4, 6),))


def test_a_masked_softmax_is_split_by_rows_only():
    attrs = Attrs.parse({"use_length": "True"})
    desc = describe("softmax", attrs, ((4, 6), (4,)), ((4, 6),))
    found = {s.outputs[0].dim if hasattr(s.outputs[0], "dim") else None: runnable("softmax", attrs, desc, s)
             for s in strategies(desc, 2)}
    assert found == {0: True, 1: False}


def test_a_masked_softmax_row_of_length_zero_is_zero():
    """numpy's reference: each row's first n entries softmaxed, the rest 0 (MXNet's kernel gives the same)."""
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    lengths = np.array([0, 2, 5], dtype=np.int32)
    desc = describe("softmax", Attrs.parse({"use_length": "True"}), ((3, 5), (3,)), ((3, 5),))
    (got,) = evaluate(desc, [x, lengths])
    expected = np.zeros_like(x)
    for r, n in enumerate(lengths):
        e = np.exp(x[r, :n] - x[r, :n].max(initial=-np.inf)) if n else x[r, :0]
        expected[r, :n] = e / e.sum()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
