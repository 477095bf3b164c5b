"""The matrix factorizations and solves split where the mathematics lets them, found by the analysis from their
descriptions: a stack of matrices along its batch axes (every op); a triangular product or solve from the left
along the right-hand side's columns (column j of the result needs column j of B alone), from the right along its
rows; never a matrix axis of a factorization. Each split found runs on MXNet's kernel. (The conformance tests
check each description's values; this checks that the splits it offers are the ones the mathematics has.)"""
import pytest

from tofu import registry
from tofu.analysis.strategies import strategies
from tofu.analysis.views import runnable
from tofu.graph.attrs import Attrs
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe

registry.load_builtin_operators()
CASES = [  # op, attributes, input shapes, the output axes a 2-way split may cut
    ("_linalg_potrf", {}, ((4, 6, 6),), {0}),
    ("_linalg_potri", {}, ((2, 4, 6, 6),), {0, 1}),
    ("_linalg_inverse", {}, ((4, 6, 6),), {0}),
    ("_linalg_det", {}, ((4, 6, 6),), {0}),
    ("_linalg_trsm", {}, ((4, 6, 6), (4, 6, 8)), {0, 2}),
    ("_linalg_trsm", {"rightside": True, "transpose": True}, ((4, 6, 6), (4, 8, 6)), {0, 1}),
    ("_linalg_trmm", {"lower": False}, ((4, 6, 6), (4, 6, 8)), {0, 2}),
    ("_linalg_trmm", {"rightside": True}, ((4, 6, 6), (4, 8, 6)), {0, 1}),
]


@pytest.mark.parametrize("op,attrs,shapes,axes", CASES, ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_the_splits_are_the_batch_and_the_right_hand_sides_columns_or_rows(op, attrs, shapes, axes):
    attrs = Attrs.of(**attrs)
    outs = infer_op_shapes(op, attrs, shapes)
    desc = describe(op, attrs, shapes, outs)
    found = set()
    for s in strategies(desc, 2):
        if s.kind != "output":
            continue
        cut = {d for d in range(len(outs[0]))
               if s.output_regions[0][0].bounds[d] != (0, outs[0][d] - 1)}
        assert len(cut) == 1, (str(s), cut)
        assert runnable(op, attrs, desc, s), str(s)
        found |= cut
    assert found == axes
