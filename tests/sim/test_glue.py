"""The partitioned forward graph built from the plan alone (tofu.sim.glue.dataflow_from_plan) against an
independent read of the rewriter's symbol: its glue ops by the rewriter's names, and the edges that cross
``ctx_group``s (each a ``_CrossDeviceCopy`` MXNet inserts)."""
import json
from collections import Counter

import pytest

from tofu.api import load_graph, partitioned
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.calibrate import CALIBRATION_CASES
from tofu.sim.glue import dataflow_from_plan


def _graph(model):
    return load_graph(model, ModelOptions(batch=24))


def _reference(graph, pg):
    """Glue ops named by the rewriter's fabric (``>dev``, ``_concat``, ``_sum``, fills; not the graph's own calls
    ``{node}@dev{w}``), and the (producer output, destination group) pairs whose edge crosses ``ctx_group``s, read
    straight from the symbol's JSON."""
    nodes = json.loads(pg.symbol.tojson())["nodes"]
    own = {f"{n.name}@dev{w}" for n in graph.nodes for w in range(pg.workers)}
    group = [n.get("attrs", {}).get("__ctx_group__") for n in nodes]
    ops = Counter(n["op"] for n in nodes if n["op"] != "null" and n["name"] not in own
                  and any(tag in n["name"] for tag in (">dev", "_concat", "_sum", "zeros@", "fill@", "pad@")))
    crossing = {(i[0], i[1], group[j]) for j, n in enumerate(nodes) for i in n["inputs"] if group[i[0]] != group[j]}
    return ops, len(crossing)


def _plan_side(flow):
    """The same two counts from the plan's dataflow: ops that are no graph node's call, and (value, device)
    pairs where an op reads a value held on another device."""
    ops = Counter(op.op for op in flow.ops if op.node is None and not op.expansion and op.op != "_full")
    crossing = {(v, op.device) for op in flow.ops for v in op.inputs if flow.values[v].device != op.device}
    return ops, len(crossing)


def test_one_device_has_no_glue():
    graph = _graph("mlp")
    ops, crossing = _plan_side(dataflow_from_plan(graph, plan_graph(graph, 1, "tofu")))
    assert not ops and crossing == 0


@pytest.mark.parametrize("model,k", [("mlp", 2), ("mlp", 4), ("rnn-tiny", 2), ("rnn-tiny", 4)])
def test_the_plans_glue_and_crossings_are_the_symbols(model, k):
    graph = _graph(model)
    plan = plan_graph(graph, k, "tofu")
    want_ops, want_crossing = _reference(graph, partitioned(graph, plan))
    ops, crossing = _plan_side(dataflow_from_plan(graph, plan))
    assert sum(want_ops.values()) > 0 and want_crossing > 0
    assert crossing == want_crossing
    # the symbol's fabric ops by kind (fills aside: the plan's zero-size fills are not symbols)
    assert ops == Counter({op: n for op, n in want_ops.items() if op not in ("_full", "full")})


def test_calibration_and_validation_sets_are_disjoint():
    from experiments.run_cpu_validation import OP_CASES

    calibration = {(c.op, c.inputs, tuple(sorted(c.attrs.items()))) for cases in CALIBRATION_CASES.values()
                   for c in cases}
    validation = {(c.op, c.inputs, tuple(sorted(c.attrs.items()))) for c in OP_CASES}
    assert not calibration & validation
