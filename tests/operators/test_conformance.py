"""Conformance: every registered TDL description, on every one of its cases, equals MXNet's own operator.

Generic over the registry: a new description is covered by adding it (with its cases), no new test.
"""
import numpy as np
import pytest

from tofu import registry
from tofu.graph.deterministic import at_mean
from tofu.graph.single_op import infer_op_shapes, run_op as _run_op
from tofu.tdl.describe import describe
from tofu.tdl.interpret import evaluate

from tests.operators.native_kernels import check_under_mkldnn, native_bug

SPECS = registry.load_builtin_operators()
CASES = [(op, case) for op, spec in sorted(SPECS.items()) for case in spec.cases]


def run_op(op, attrs, inputs, train=False):
    """MXNet's kernel of ``op`` in the form its description states: a sampler drawing its mean (the form
    ``tofu run --check`` runs, :func:`tofu.graph.deterministic.at_mean`), every other op as it is."""
    return _run_op(*(at_mean(op, attrs) or (op, attrs)), inputs, train=train)


def random_inputs(case, seed=0):
    """One array per input of ``case``, drawn as its fields say (docs/tdl.md, "Cases"), float32 (int32 where
    ``case.int32`` says)."""
    rng = np.random.default_rng(seed)
    bounds = {i: (low, high) for i, low, high in case.uniform}
    out = []
    for i, shape in enumerate(case.shapes):
        ints = case.int_range(i)
        if ints is not None and i in case.unique:
            values = rng.permutation(np.arange(*ints))[:int(np.prod(shape))]
            out.append(values.reshape(shape).astype(np.float32))
        elif ints is not None:
            out.append(rng.integers(*ints, size=shape).astype(np.int32 if i in case.int32 else np.float32))
        elif i in bounds:
            out.append(rng.uniform(*bounds[i], size=shape).astype(np.float32))
        elif i in case.positive:
            out.append(rng.uniform(0.5, 2.0, size=shape).astype(np.float32))
        elif i in case.spd:
            m = rng.standard_normal(shape)
            out.append((m @ np.swapaxes(m, -1, -2) / shape[-1] + np.eye(shape[-1])).astype(np.float32))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


@pytest.mark.parametrize("op", sorted(SPECS))
def test_every_description_has_two_cases(op):
    assert len(SPECS[op].cases) >= 2, f"{op} ({SPECS[op].source}) needs at least two Case settings"


@pytest.mark.parametrize("op,case", CASES, ids=[f"{op}-{c}" for op, c in CASES])
def test_interpreter_matches_mxnet(op, case):
    if native_bug(op, case.parsed_attrs()):
        check_under_mkldnn("conformance", op, SPECS[op].cases.index(case))
        return
    check_conformance(op, case)


def check_conformance(op, case):
    attrs = case.parsed_attrs()
    inputs = random_inputs(case)
    expected = run_op(op, attrs, inputs, train=case.train)
    desc = describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))
    got = evaluate(desc, inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        e = e.astype(np.float32) if e.dtype == bool else e      # numpy's comparisons: booleans for 1 and 0
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * (1.0 + np.abs(e).max()))
