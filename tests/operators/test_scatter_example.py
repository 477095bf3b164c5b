"""The scatter and gather descriptions (operators_tdl/scatter.py, operators_tdl/embedding.py) and docs/tdl.md's
worked example of the scatter idiom ("Scatter: writing into a tensor").

Beyond the conformance test's Cases: the page's code block is the registered description verbatim; repeated
scatter indices give MXNet's CPU result (the last write wins); gather_nd's indices at both ends of every
dimension, negatives included, read what MXNet reads; and the valid ranges the descriptions declare are the
ones index_ranges derives.
"""
import re
from pathlib import Path

import numpy as np

from tests.operators.test_conformance import check_conformance, random_inputs
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import run_op
from tofu.tdl.describe import Case, describe, index_ranges
from tofu.tdl.interpret import evaluate

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- scatter-code -->"


def test_the_pages_example_is_the_registered_description():
    text = (ROOT / "docs" / "tdl.md").read_text()
    assert text.count(MARKER) == 1
    block = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.DOTALL).group(1)
    assert "@tdl_op(\"_contrib_index_copy\"" in block
    assert block in (ROOT / "operators_tdl" / "scatter.py").read_text()


def test_index_copy_repeated_indices_last_write_wins():
    """Six writes into the first three of six rows: rows written several times keep the last write (MXNet's CPU
    kernel writes in order)."""
    case = Case(shapes=((6, 2), (6,), (6, 2)), ints=((1, 3),))
    assert len(np.unique(random_inputs(case)[1])) < 6
    check_conformance("_contrib_index_copy", case)


def test_index_copy_truncates_fractional_indices():
    check_conformance("_contrib_index_copy", Case(shapes=((5, 2), (3,), (3, 2)), uniform=((1, 0.0, 0.99),)))


def test_gather_nd_reads_both_ends_of_every_dimension():
    data = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    indices = np.array([[-3, -1, 0, 2, -2, 1], [-4, 3, 0, -1, 2, -3]], np.float32)
    (expected,) = run_op("gather_nd", Attrs.of(), [data, indices])
    (got,) = evaluate(describe("gather_nd", Attrs.of(), [(3, 4, 2), (2, 6)], [(6, 2)]), [data, indices])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, data[indices[0].astype(int), indices[1].astype(int)])


def test_declared_and_derived_index_ranges():
    gather = describe("gather_nd", Attrs.of(), [(3, 4, 2), (2, 6)], [(6, 2)])
    # [0, 2] & [0, 3]: the forward's negatives (above) are not valid in training, where the backward writes them
    assert {i: (r.low, r.high) for i, r in index_ranges(gather).items()} == {1: (0, 2)}
    copy = describe("_contrib_index_copy", Attrs.of(), [(5, 3), (2,), (2, 3)], [(5, 3)])
    assert {i: (r.low, r.high) for i, r in index_ranges(copy).items()} == {1: (0, 4)}
    embed = describe("Embedding", Attrs.of(input_dim=7, output_dim=4), [(5,), (7, 4)], [(5, 4)])
    (r,) = index_ranges(embed).values()
    # a one-hot contraction over the table's rows (issue 22): the rows it may select, declared
    assert (r.low, r.high, r.reason) == (0, 6, "an index or a length (its description's valid=)")
