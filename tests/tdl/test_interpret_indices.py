"""Data-dependent subscripts in the reference interpreter (tofu.tdl.interpret), as docs/tdl.md ("Accesses")
states them: the value is truncated toward zero, as MXNet casts a float index, then clipped to the dimension,
as MXNet's clip mode does. The interpreter rounded to the nearest integer before, so a fractional index
(2.7, 1.5) read another row than MXNet's take, pick and Embedding. A subscript may be any value expression,
index variables included (lifted by IndexValue); only a value inside *index* arithmetic is refused.
"""
import numpy as np
import pytest

from tests.operators.test_conformance import check_conformance
from tofu import registry
from tofu.errors import TDLError
from tofu.graph.attrs import Attrs
from tofu.tdl.describe import Case, describe, tdl_op
from tofu.tdl.expr import IndexValue, TensorVar, Var, lt, where
from tofu.tdl.interpret import evaluate


@pytest.mark.parametrize("op,case", [
    ("take", Case(shapes=((5, 3), (12,)), uniform=((1, -0.95, 6.9),))),
    ("take", Case(shapes=((2, 6, 3), (8,)), attrs={"axis": 1}, uniform=((1, 0.0, 5.99),))),
    ("pick", Case(shapes=((6, 4), (6,)), uniform=((1, -0.9, 4.9),))),
    ("Embedding", Case(shapes=((10,), (6, 3)), attrs={"input_dim": 6, "output_dim": 3}, uniform=((0, 0.0, 7.5),))),
], ids=["take", "take-axis1", "pick", "Embedding"])
def test_fractional_indices_read_the_row_mxnet_reads(op, case):
    check_conformance(op, case)


def test_truncation_toward_zero_then_clip():
    weight = np.arange(12.0).reshape(6, 2)
    desc = describe("Embedding", Attrs.of(input_dim=6, output_dim=2), [(6,), (6, 2)], [(6, 2)])
    (out,) = evaluate(desc, [np.array([2.7, 1.5, -0.6, -3.2, 5.9, 9.0]), weight])
    np.testing.assert_array_equal(out[:, 0], weight[[2, 1, 0, 0, 5, 5], 0])


@pytest.fixture
def scratch():
    registry.load_builtin_operators()
    before = dict(registry.REGISTRY)
    yield
    for name in set(registry.REGISTRY) - set(before):
        del registry.REGISTRY[name]


def test_a_value_subscript_may_use_index_variables(scratch):
    """out[i] = data[(i + shift[i]) mod n]: a data-dependent subscript built with IndexValue and where."""
    @tdl_op("_tofu_test_roll", inputs=("data", "shift"), cases=[Case(shapes=((5,), (5,))), Case(shapes=((3,), (3,)))])
    def roll(data: TensorVar, shift: TensorVar, attrs):
        """out[i] = data[(i + shift[i]) mod n], shift in [-n, n)."""
        n = data.shape[0]

        def out(i: Var):
            j = IndexValue(i) + shift[i]
            return data[where(lt(j, 0.0), j + n, where(lt(j, float(n)), j, j - n))]
        return out

    data, shift = np.arange(10.0, 15.0), np.array([1, -2, 4, -5, 0])
    desc = describe("_tofu_test_roll", Attrs.of(), [(5,), (5,)], [(5,)])
    (out,) = evaluate(desc, [data, shift])
    np.testing.assert_array_equal(out, data[(np.arange(5) + shift) % 5])


def test_a_value_in_index_arithmetic_says_how_to_write_it():
    data = TensorVar("data", (4,))
    with pytest.raises(TDLError, match=r"is used in index arithmetic '\+'; to index with a value, write the "
                                       r"whole subscript as a value .*IndexValue"):
        Var("i") + data[0]
