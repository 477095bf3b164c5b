"""The glue count of a partitioned graph against an independent count of the rewriter's symbol, and its cost."""
import json
from collections import Counter

import pytest

from tofu.api import load_graph, partitioned
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.calibrate import CALIBRATION_CASES
from tofu.sim.glue import count_glue, glue_from_plan


@pytest.fixture(scope="module")
def mlp():
    return load_graph("mlp", ModelOptions(batch=24))


def _reference(pg):
    """Glue ops named by the rewriter's fabric (``>dev``, ``_concat``, ``_sum``, fills), and edges that cross
    ``ctx_group``s, read straight from the symbol's JSON."""
    nodes = json.loads(pg.symbol.tojson())["nodes"]
    group = [n.get("attrs", {}).get("__ctx_group__") for n in nodes]
    ops = Counter(n["op"] for n in nodes if n["op"] != "null"
                  and any(tag in n["name"] for tag in (">dev", "_concat", "_sum", "zeros@", "fill@", "pad@")))
    crossing = {(i[0], i[1], group[j]) for j, n in enumerate(nodes) for i in n["inputs"] if group[i[0]] != group[j]}
    return ops, len(crossing)


def test_one_device_has_no_glue(mlp):
    glue = count_glue(mlp, partitioned(mlp, plan_graph(mlp, 1, "tofu")))
    assert glue.calls == () and glue.copies == ()


@pytest.mark.parametrize("k", [2, 4])
def test_glue_matches_the_symbol(mlp, k):
    plan = plan_graph(mlp, k, "tofu")
    pg = partitioned(mlp, plan)
    glue = count_glue(mlp, pg)
    ops, crossing = _reference(pg)
    assert Counter(c.op for c in glue.calls) == ops
    assert len(glue.copies) == crossing
    # the copies, forward and (where a gradient flows back) backward, carry exactly the plan's bytes
    assert sum(c.nbytes * (1 + c.backward) for c in glue.copies) == pytest.approx(plan.comm_bytes, rel=1e-12)
    assert {c.device for c in glue.calls} <= set(range(k))


def test_calibration_and_validation_sets_are_disjoint():
    from experiments.run_cpu_validation import OP_CASES

    calibration = {(c.op, c.inputs, tuple(sorted(c.attrs.items()))) for cases in CALIBRATION_CASES.values()
                   for c in cases}
    validation = {(c.op, c.inputs, tuple(sorted(c.attrs.items()))) for c in OP_CASES}
    assert not calibration & validation


def _summary(glue):
    return (Counter((c.device, c.op, c.work.bytes, c.backward) for c in glue.calls),
            Counter((c.src, c.dst, c.nbytes, c.backward) for c in glue.copies))


@pytest.mark.parametrize("model,k", [("mlp", 2), ("mlp", 4), ("rnn-tiny", 2), ("rnn-tiny", 4)])
def test_plan_count_equals_the_symbol_count(model, k):
    graph = mlp_or(model)
    plan = plan_graph(graph, k, "tofu")
    assert _summary(glue_from_plan(graph, plan)) == _summary(count_glue(graph, partitioned(graph, plan)))


def test_plan_count_leaves_out_only_the_statistics_exchange():
    graph = mlp_or("wresnet-tiny")
    plan = plan_graph(graph, 2, "tofu")
    ops, copies = _summary(glue_from_plan(graph, plan))
    want_ops, want_copies = _summary(count_glue(graph, partitioned(graph, plan)))
    assert not ops - want_ops and not copies - want_copies      # a sub-multiset of what the symbol has
    assert sum(copies.values()) < sum(want_copies.values())


def mlp_or(model):
    return load_graph(model, ModelOptions(batch=24))
