"""Multi-output operators and partition-n-reduce (tofu.analysis.strategies): no reduction strategy is derived
for an operator with several outputs, and that is said, never silent. ``moments`` (mean and variance) got no
reduce strategy while ``tofu ops`` printed "unsplittable: none".
"""
import pytest

from tofu import cli, registry
from tofu.analysis.strategies import analyse, reduction_root
from tofu.tdl.describe import describe
from tofu.graph.single_op import infer_op_shapes

SPECS = registry.load_builtin_operators()


def _described(op, case):
    attrs = case.parsed_attrs()
    return describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))


def test_moments_reduced_axes_are_reported_unsplittable_with_the_reason():
    for case in SPECS["moments"].cases:
        analysis = analyse(_described("moments", case))
        assert all(s.kind == "output" for s in analysis.strategies)
        reasons = {u.var: u.reason for u in analysis.unsplittable}
        assert reasons and set(reasons) == {v.name for v in reduction_root(
            _described("moments", case).outputs[1].body)[0].vars}
        for reason in reasons.values():
            assert "single-output operators only" in reason
            assert "'var' reads 'mean', itself a reduction" in reason


def test_tofu_ops_says_why(capsys):
    assert cli.main(["ops", "--op", "moments"]) == 0
    out = capsys.readouterr().out
    assert "unsplittable: none" not in out
    assert "unsplittable: k0: reduction variable of outputs 'mean' and 'var'" in out


MULTI = [(op, i) for op, spec in sorted(SPECS.items()) for i, _ in enumerate(spec.cases)
         if len(spec.outputs) > 1 or spec.op in ("SliceChannel", "split")]


@pytest.mark.parametrize("op,i", MULTI, ids=[f"{op}-{i}" for op, i in MULTI])
def test_no_multi_output_reduction_is_dropped_silently(op, i):
    """Every top-level reduction variable of a multi-output operator is a strategy or reported unsplittable."""
    desc = _described(op, SPECS[op].cases[i])
    if len(desc.outputs) < 2:
        return
    analysis = analyse(desc)
    named = {s.var for s in analysis.strategies} | {u.var for u in analysis.unsplittable}
    for out in desc.outputs:
        root = reduction_root(out.body)
        for v in (root[0].vars if root else ()):
            assert v.name in named, f"{op}: reduction variable {v.name} of '{out.name}' dropped silently"
