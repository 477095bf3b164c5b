"""The tutorial of docs/tdl.md works as written: its code block registers a new operator whose interpreted
description equals MXNet's kernel on every declared case (the conformance test's check), and `tofu ops`
lists it.

The block (the fenced python block right after the ``<!-- tutorial-code -->`` line) is executed as a module
from a temporary file, in a scratch copy of the registry: registrations it makes are removed afterwards,
and an operator it describes that ``operators_tdl`` already registers (someone followed the tutorial) is
set aside first, so the page's version is the one tested.
"""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from tests.operators.test_conformance import random_inputs
from tofu import cli, registry
from tofu.graph.single_op import infer_op_shapes, run_op
from tofu.tdl.describe import _describe, describe
from tofu.tdl.interpret import evaluate

DOC = Path(__file__).resolve().parents[2] / "docs" / "tdl.md"
MARKER = "<!-- tutorial-code -->"


def tutorial_code(text: str) -> str:
    """The fenced python block that follows the marker line."""
    assert text.count(MARKER) == 1, f"{DOC} must contain the line {MARKER} exactly once"
    match = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.DOTALL)
    assert match, f"the line after {MARKER} in {DOC} must open a ```python block"
    return match.group(1)


@pytest.fixture
def registered_aside():
    """The builtin descriptions of the operators the tutorial writes (set aside while it runs), by name."""
    described = re.findall(r'@tdl_op\(\s*"([^"]+)"', tutorial_code(DOC.read_text()))
    builtin = registry.load_builtin_operators()
    return {name: builtin[name] for name in described if name in builtin}


@pytest.fixture
def tutorial_ops(tmp_path, registered_aside):
    """Registers the tutorial's operators in a scratch registry; yields {name: OpSpec} of those added."""
    code = tutorial_code(DOC.read_text())
    described = re.findall(r'@tdl_op\(\s*"([^"]+)"', code)
    assert described, "the tutorial's code block registers no operator"
    # Loaded first, so that lookups below do not import builtins into the scratch registry (and the cleanup
    # does not then remove them for good: their modules would not register again).
    registry.load_builtin_operators()
    saved = dict(registry.REGISTRY)
    for name in described:
        registry.REGISTRY.pop(name, None)
    path = tmp_path / "tutorial_op.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("tofu_docs_tutorial_op", path)
    _describe.cache_clear()      # descriptions are cached by op name: none of the set-aside ones may answer
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        added = {name: s for name, s in registry.REGISTRY.items() if saved.get(name) is not s}
        yield added
    finally:
        registry.REGISTRY.clear()
        registry.REGISTRY.update(saved)
        _describe.cache_clear()


def test_tutorial_adds_one_operator_with_cases(tutorial_ops):
    assert len(tutorial_ops) == 1, sorted(tutorial_ops)
    (op, spec), = tutorial_ops.items()
    assert len(spec.cases) >= 2, f"{op} needs at least two Case settings"
    assert spec.source.endswith("tutorial_op.py:" + spec.builder.__name__)


def test_tutorial_operator_matches_mxnet(tutorial_ops):
    for op, spec in tutorial_ops.items():
        for case in spec.cases:
            attrs = case.parsed_attrs()
            inputs = random_inputs(case)
            expected = run_op(op, attrs, inputs, train=case.train)
            desc = describe(op, attrs, case.shapes, infer_op_shapes(op, attrs, case.shapes))
            got = evaluate(desc, inputs)
            assert len(got) == len(expected), f"{op} {case}"
            for g, e in zip(got, expected):
                assert g.shape == e.shape, f"{op} {case}"
                np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * (1.0 + np.abs(e).max()),
                                           err_msg=f"{op} {case}")


def test_tofu_ops_lists_the_tutorial_operator(tutorial_ops, capsys):
    assert cli.main(["ops"]) == 0
    listing = capsys.readouterr().out.splitlines()
    for op, spec in tutorial_ops.items():
        row = next((line for line in listing if line.split()[0] == op), None)
        assert row is not None, f"`tofu ops` does not list {op}"
        assert spec.doc.splitlines()[0] in row


def test_tutorial_operator_agrees_with_the_registered_one(registered_aside, tutorial_ops):
    """An operator the tutorial writes that ``operators_tdl`` also describes (InstanceNorm): both descriptions
    give the same values on every case of either."""
    assert "InstanceNorm" in registered_aside, "operators_tdl describes InstanceNorm; the page writes it again"
    for op, builtin in registered_aside.items():
        page_spec = tutorial_ops[op]
        assert page_spec is not builtin
        for case in (*page_spec.cases, *builtin.cases):
            attrs = case.parsed_attrs()
            inputs = random_inputs(case)
            out_shapes = infer_op_shapes(op, attrs, case.shapes)
            results = []
            for spec in (page_spec, builtin):
                registry.REGISTRY[op] = spec
                _describe.cache_clear()
                results.append(evaluate(describe(op, attrs, case.shapes, out_shapes), inputs))
            registry.REGISTRY[op] = page_spec
            _describe.cache_clear()
            assert results[0][0].shape == results[1][0].shape
            for a, b in zip(*results):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=f"{op} {case}")
