"""``--check``'s float64 second opinion: a step whose float32 comparison with one device exceeds ``--rtol`` is run
again on both sides in float64 from the same state and batch, held to ``--rtol x FLOAT64_SCALE``
(``tofu.runtime.float64_rtol``; 1e-9 at the default).

Float32 rounding shrinks in float64 (by 2^-29 where a network amplifies it smoothly: 1.4e-9 to 1.7e-9 measured
here) while a partitioning error does not, so: a correct partition held to an ``--rtol`` below its float32
rounding passes, saying both numbers; a BatchNorm whose exchanged variance is divided by n - 1 (injected here, in
the test only) fails in float64 too, exit status 1; where float64 cannot run (LRN and InstanceNorm have no float64
kernel) the check fails as before, saying why. The numbers are held against references computed apart from the
code under test: the gradients bound in float64 by ``tests/runtime/test_bn_check._gradients`` (its own JSON
rewrite and binding, its own assembly of the shards), not by ``float64_symbol``, ``Trainer(dtype=...)`` or
``gather_values``.
"""
import dataclasses
import json
import math

import mxnet as mx
import numpy as np
import pytest

from tests.runtime.test_bn_check import _bn_net, _gradients
from tests.test_cli import run
from tofu import registry
from tofu.api import load_graph, partitioned, reference_symbol
from tofu.graph.ir import Role
from tofu.rewrite.apply_plan import gather_values
from tofu.runtime import DEFAULT_RTOL, FLOAT64_SCALE, float64_rtol
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.run import Check, Float64Check, max_rel_diff, train
from tofu.runtime.train import float64_symbol, whole_graph
from tofu.search.algorithms import plan_graph

SHAPE = (8, 3, 6, 6)


@pytest.fixture(scope="module")
def bn_path(tmp_path_factory):
    return _bn_net(tmp_path_factory.mktemp("f64") / "bn.json")


@pytest.fixture(scope="module")
def graph(bn_path):
    return load_graph(bn_path, shapes={"data": SHAPE})


def _values(graph):
    return {**initial_values(graph, 0), **synthetic_batch(graph, 1)}


def _reference(graph, pg, values):
    """The first step's parameter gradients, partitioned against one device, in float32 and in float64, bound by
    test_bn_check's own float64 binding."""
    one = whole_graph(graph, reference_symbol(graph))
    diffs = {}
    for dtype in (np.float32, np.float64):
        want = _gradients(one, values, dtype)
        got = _gradients(pg, values, dtype)
        diffs[dtype] = max_rel_diff({n: got.get(n, np.zeros_like(g)) for n, g in want.items()}, want)
    return diffs[np.float32], diffs[np.float64]


@pytest.mark.parametrize("algo", ["data-parallel", "tofu"])
def test_float32_rounding_beyond_a_tiny_rtol_passes_in_float64(graph, algo):
    plan = plan_graph(graph, 2, algo)
    pg = partitioned(graph, plan)
    values = _values(graph)
    f32, f64 = _reference(graph, pg, values)
    assert 0 < f32 < 1e-5 and f64 < 1e-14                # float32 rounding alone, and float64's
    assert f64 <= FLOAT64_SCALE / 4 * f32                # it shrinks in float64 by about 2^-29
    rtol = f32 / 3                                       # a tolerance the float32 gradients exceed
    report = train(graph, plan, pg, initial_values(graph, 0), synthetic_batch(graph, 1), 2,
                   reference_symbol(graph), lr=0.05, rtol=rtol)
    c = report.check
    assert c.gradient == pytest.approx(f32, rel=1e-3)    # the float32 comparison is the reference's
    assert any(e.startswith("gradients") for e in c.exceeded(rtol))
    assert c.float64 is not None and c.float64.steps[0] == 1 and not c.float64.error
    # the first step's float64 gradients are the reference's (the rerun's maximum also covers step 2)
    assert f64 * 0.5 <= c.float64.gradient <= float64_rtol(rtol)
    assert c.float64.max_rel_diff <= float64_rtol(rtol)
    assert c.failures(rtol) == ()
    line = c.verdict(rtol)
    assert f"float32 differs by {c.max_rel_diff:.3g} (> rtol {rtol:g})" in line
    assert f"float64 agrees to {c.float64.max_rel_diff:.3g}" in line and "not the partition" in line


def _biased_variance(orig):
    """BatchNorm's expansion with the all-reduced squared deviations divided by n - 1 instead of n."""
    def run_biased(pieces, shapes, attrs, allreduce):
        axis = attrs.axis % len(shapes[0][0])
        n = sum(math.prod(s[0]) // s[0][axis] for s in shapes)
        calls = []

        def biased(parts, reducer="sum"):
            out = allreduce(parts, reducer)
            calls.append(reducer)
            if len(calls) == 2:                  # the second exchange: the squared deviations
                out = [o * (n / (n - 1)) for o in out]
            return out
        return orig.run(pieces, shapes, attrs, biased)
    return dataclasses.replace(orig, run=run_biased)


def test_a_partitioning_error_fails_in_float64_too(capsys, bn_path, graph, monkeypatch):
    orig = registry.expansion("BatchNorm")
    monkeypatch.setitem(registry.EXPANSIONS, "BatchNorm", _biased_variance(orig))
    # the reference: the same wrong partition, bound by test_bn_check's helper
    pg = partitioned(graph, plan_graph(graph, 2, "data-parallel"))
    assert sum("_bn_affine" in a for a in pg.symbol.list_auxiliary_states()) == 3 * 2 * 2    # every BN exchanges
    f32, f64 = _reference(graph, pg, _values(graph))
    assert 1e-4 < f64 < DEFAULT_RTOL and f32 == pytest.approx(f64, rel=0.1)   # as large in either format
    rtol = 1e-4                   # below the error: the default passes it in float32 (f32 < DEFAULT_RTOL)
    rc, out, err = run(capsys, "run", bn_path, "--shape", "data=8,3,6,6", "--workers", "2", "--algo",
                       "data-parallel", "--steps", "2", "--check", "--rtol", str(rtol))
    assert rc == 1
    assert "float64 differs by" in out and "not float32 rounding alone: FAILED" in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tofu: error: --check failed: ") and "gradients" in lines[0]
    assert "float64: " in lines[0] and "gradients" in lines[0].split("float64: ")[1]
    rc, out, err = run(capsys, "run", bn_path, "--shape", "data=8,3,6,6", "--workers", "2", "--algo",
                       "data-parallel", "--steps", "2", "--check", "--rtol", str(rtol), "--json")
    assert rc == 1
    doc = json.loads(out)
    assert doc["check_passed"] is False and doc["check_passed_by"] is None
    second = doc["check_float64"]
    assert second["ran"] and not second["passed"] and second["steps"][0] == 1
    assert second["gradient_max_rel_diff"] >= 0.5 * f64 and doc["check_float64_max_rel_diff"] > 1e-4
    # without the error, the same tolerance passes in float32 alone
    monkeypatch.undo()
    rc, out, err = run(capsys, "run", bn_path, "--shape", "data=8,3,6,6", "--workers", "2", "--algo",
                       "data-parallel", "--steps", "2", "--check", "--rtol", str(rtol), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed_by"] == "float32" and doc["check_float64"] is None


def test_json_carries_both_numbers(capsys):
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "2", "--check", "--rtol", "5e-8", "--json")
    assert rc == 0, err
    doc = json.loads(out)                        # valid JSON: no bare NaN
    assert doc["check_passed"] is True and doc["check_passed_by"] == "float64" and doc["rtol"] == 5e-8
    assert doc["check_float32_max_rel_diff"] > 5e-8
    assert doc["check_float32_max_rel_diff"] == max(doc[k] for k in ("output_max_rel_diff", "gradient_max_rel_diff",
                                                                     "loss_max_rel_diff", "parameter_max_rel_diff"))
    assert doc["check_float64_rtol"] == pytest.approx(5e-8 * FLOAT64_SCALE)
    assert 0 < doc["check_float64_max_rel_diff"] <= doc["check_float64_rtol"]
    second = doc["check_float64"]
    assert second["ran"] and second["passed"] and second["error"] is None and second["steps"] == [1, 2]
    assert second["max_rel_diff"] == doc["check_float64_max_rel_diff"]
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "2", "--check", "--rtol", "5e-8")
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("check: "))
    assert "float32 differs by" in line and "(> rtol 5e-08)" in line and "float64 agrees to" in line
    assert line.endswith("float32 rounding, not the partition: passed")
    # within --rtol in float32: no float64 run, the fields say so
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "2", "--check", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["check_passed_by"] == "float32" and doc["check_float64"] is None
    assert doc["check_float64_max_rel_diff"] is None and 0 < doc["check_float32_max_rel_diff"] < DEFAULT_RTOL


@pytest.mark.parametrize("op", ["LRN", "InstanceNorm"])   # no float64 kernel: at the first pass, at the bind
def test_an_op_without_float64_fails_as_before_saying_why(capsys, tmp_path, op):
    s = mx.sym
    h = s.Convolution(s.var("data"), kernel=(3, 3), pad=(1, 1), num_filter=8, name="c1")
    h = s.LRN(h, nsize=3, name="lrn") if op == "LRN" else s.InstanceNorm(h, name="inorm")
    s.FullyConnected(s.flatten(h), num_hidden=10, name="fc").save(str(tmp_path / "lrn.json"))
    argv = ("run", str(tmp_path / "lrn.json"), "--shape", "data=8,3,6,6", "--workers", "2", "--steps", "2",
            "--check", "--rtol", "1e-12")
    rc, out, err = run(capsys, *argv)
    assert rc == 1
    assert "float64 could not be run (MXNetError: " in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--check failed: " in lines[0] and "float64 could not be run: " in lines[0]
    rc, out, err = run(capsys, *argv, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["check_passed"] is False and doc["check_float64_max_rel_diff"] is None
    assert doc["check_float64"]["ran"] is False and "MXNetError" in doc["check_float64"]["error"]


def test_float64_symbol_and_gather_keep_float64(graph):
    pg = partitioned(graph, plan_graph(graph, 2, "tofu"))
    sym = mx.sym.broadcast_add(mx.sym.var("x", dtype=np.float32), mx.sym.zeros((2, 3)))
    attrs = {n["name"]: n.get("attrs", {}) for n in json.loads(float64_symbol(sym).tojson())["nodes"]}
    assert attrs["x"]["__dtype__"] == "1"                # MXNet's flag of float64 (float32's is 0)
    assert [a["dtype"] for n, a in attrs.items() if n.startswith("_zeros")] == ["float64"]
    # the zero shards of a bias the rewrite adds: float32 in the partitioned symbol, float64 once made so
    zeros = [n for n in json.loads(pg.symbol.tojson())["nodes"] if n["op"] == "_zeros"]
    made = [n for n in json.loads(float64_symbol(pg.symbol).tojson())["nodes"] if n["op"] == "_zeros"]
    assert {n["attrs"]["dtype"] for n in zeros} <= {"float32"} and {n["attrs"]["dtype"] for n in made} <= {"float64"}
    _, types, _ = float64_symbol(sym).infer_type(x=np.float64)
    assert types == [np.float64]
    shards = {v.name: np.arange(np.prod(v.shape), dtype=np.float64).reshape(v.shape) / 3
              for v in pg.variables if v.role is Role.PARAM}
    whole = gather_values(pg, shards)
    assert all(w.dtype == np.float64 for w in whole.values())
    assert all(w.dtype == np.float32 for w in gather_values(pg, {n: a.astype(np.float32)
                                                                 for n, a in shards.items()}).values())


def test_the_verdict():
    base = Check(0.0, 0.2, 0.0, 0.1, (1.0,), 0.0, 0.0, (), None, 0.05)
    assert base.exceeded(0.05) and base.failures() == ("gradients 0.2 > 0.05", "parameter updates 0.1 > 0.05",
                                                       "float64 not run")
    agrees = dataclasses.replace(base, float64=Float64Check((1,), 1e-13, 1e-12, 0.0, 2e-12))
    assert agrees.failures() == () and agrees.failures(0.05) == ()
    assert agrees.failures(1e-5) != ()          # 1e-5 x 2e-8 = 2e-13 < 2e-12
    differs = dataclasses.replace(base, float64=Float64Check((1,), 0.0, 7e-4, 0.0, 7e-4))
    assert differs.failures()[-1] == "float64: gradients 0.0007 > 1e-09, parameter updates 0.0007 > 1e-09"
    nan = dataclasses.replace(base, float64=Float64Check((1,), 0.0, float("nan"), 0.0, 0.0))
    assert nan.failures() and math.isnan(nan.float64.max_rel_diff)
    cannot = dataclasses.replace(base, float64=Float64Check((1,), error="MXNetError: no float64"))
    assert cannot.failures()[-1] == "float64 could not be run: MXNetError: no float64"
    assert "float64 could not be run (MXNetError: no float64)" in cannot.verdict()
