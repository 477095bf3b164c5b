"""Case, the example settings every description carries (tofu.tdl.describe): every field documented in
docs/tdl.md, and the draws of index inputs: negative indices (for operators that wrap, gather_nd) and unique
indices (for operators that write at them, _contrib_index_copy), as tests/operators/test_conformance.py's
``random_inputs`` makes them.
"""
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from tests.operators.test_conformance import SPECS, random_inputs
from tofu.errors import TDLError
from tofu.tdl.describe import Case

DOC = Path(__file__).resolve().parents[2] / "docs" / "tdl.md"


def test_docs_list_every_case_field():
    """The table under "### Cases" names each field of Case (it lacked ``uniform``)."""
    section = DOC.read_text().split("### Cases", 1)[1].split("\n### ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))
    assert documented == {f.name for f in dataclasses.fields(Case)}


def test_negative_draws_both_signs():
    case = Case(shapes=((400,),), ints=((0, 3),), negative=(0,))
    (x,) = random_inputs(case)
    assert set(np.unique(x)) == {-3.0, -2.0, -1.0, 0.0, 1.0, 2.0}
    assert case.int_range(0) == (-3, 3)


def test_unique_draws_distinct_integers():
    for seed in range(5):
        (x, i, y) = random_inputs(Case(shapes=((7, 2), (2, 3), (6, 2)), ints=((1, 7),), unique=(1,)), seed)
        assert len(np.unique(i)) == i.size and i.min() >= 0 and i.max() < 7
        assert i.shape == (2, 3)
    (i,) = random_inputs(Case(shapes=((6,),), ints=((0, 3),), negative=(0,), unique=(0,)))
    assert sorted(i) == [-3, -2, -1, 0, 1, 2]


def test_plain_ints_draw_as_before():
    """Adding fields changed no existing draw: ``ints`` alone is still rng.integers(0, n)."""
    (x,) = random_inputs(Case(shapes=((4, 5),), ints=((0, 6),)), seed=3)
    np.testing.assert_array_equal(x, np.random.default_rng(3).integers(0, 6, size=(4, 5)).astype(np.float32))


@pytest.mark.parametrize("kwargs,says", [
    ({"shapes": ((3,),), "negative": (0,)}, "negative input 0 is not drawn as integers"),
    ({"shapes": ((3,),), "unique": (0,)}, "unique input 0 is not drawn as integers"),
    ({"shapes": ((5,),), "ints": ((0, 4),), "unique": (0,)}, "5 elements but only 4 distinct integers"),
    ({"shapes": ((9,),), "ints": ((0, 4),), "negative": (0,), "unique": (0,)}, "only 8 distinct"),
])
def test_a_malformed_case_is_refused(kwargs, says):
    with pytest.raises(TDLError, match=says):
        Case(**kwargs)


def test_the_wrapping_and_scatter_operators_use_them():
    """gather_nd draws negative indices in some Case, _contrib_index_copy unique ones in every Case."""
    assert any(c.negative for c in SPECS["gather_nd"].cases)
    assert all(c.unique for c in SPECS["_contrib_index_copy"].cases)


def test_spd_draws_symmetric_positive_definite_stacks():
    (a, b) = random_inputs(Case(shapes=((3, 5, 5), (5, 5)), spd=(0,)))
    np.testing.assert_allclose(a, np.swapaxes(a, -1, -2), rtol=1e-6)
    assert np.linalg.eigvalsh(a.astype(np.float64)).min() >= 1.0 - 1e-5      # M M^T / n + I: at least 1
    assert not np.allclose(b, b.T)                                            # the other input: normal
    with pytest.raises(TDLError, match="spd input 0 of shape \\(3, 4\\) is not a stack of square matrices"):
        Case(shapes=((3, 4),), spd=(0,))
