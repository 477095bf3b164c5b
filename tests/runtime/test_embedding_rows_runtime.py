"""Embedding split along its table's rows at every cut of a recursive plan, trained on CPU contexts (issue 22).

gpt-tiny's 4-worker recursive plan, edited so that the token embedding splits its table's rows at both 2-way
cuts (each worker then holds a quarter of the vocabulary and looks up the tokens of its rows, zeros for the
others, through the op's expansion composed over the two cuts): training equals one device, and the copies
MXNet makes equal the independent count (tests/oracle.py) and the plan's recount (tofu.search.copies).
"""
import dataclasses

from tests.oracle import count
from tofu.analysis.compose import ChoiceKind, OpChoice, compose
from tofu.analysis.views import NodeView
from tofu.api import load_graph, partitioned, reference_symbol
from tofu.models import ModelOptions
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.run import train
from tofu.search.algorithms import plan_graph
from tofu.search.copies import copied_bytes

ROWS = OpChoice(ChoiceKind.REDUCE, "v")


def _rows_at_every_cut(graph, plan):
    steps = []
    for s in plan.steps:
        dims = tuple((n, 0 if n == "embed_token_weight" else d) for n, d in s.tensor_dims)
        choices = tuple((n, ROWS if n == "embed_token" else c) for n, c in s.op_choices)
        steps.append(dataclasses.replace(s, tensor_dims=dims, op_choices=choices))
    return dataclasses.replace(plan, steps=tuple(steps))


def test_the_table_split_by_rows_at_two_cuts_trains_as_one_device():
    graph = load_graph("gpt-tiny", ModelOptions(batch=4))
    plan = _rows_at_every_cut(graph, plan_graph(graph, 4, "tofu-recursive"))
    assert [s.factor for s in plan.steps] == [2, 2]
    node = next(n for n in graph.nodes if n.name == "embed_token")
    calls = compose(NodeView.of(graph, node), [dict(s.op_choices)[node.name] for s in plan.steps], (2, 2))
    assert all(call.expanded == (0, 1) and call.outputs[0].partial == (0, 1) for call in calls)
    pg = partitioned(graph, plan)
    report = train(graph, plan, pg, initial_values(graph), synthetic_batch(graph), 5, reference_symbol(graph),
                   lr=2e-4)
    c = report.check
    assert c.output <= 1e-4 and c.gradient <= 1e-4 and c.loss <= 1e-4 and c.parameters <= 1e-4, c
    factors = [s.factor for s in plan.steps]
    dims = [tuple(dict(s.tensor_dims)[t.name] for s in plan.steps) for t in graph.tensors]
    choices = [tuple(dict(s.op_choices)[n.name] for s in plan.steps) for n in graph.nodes]
    assert report.measured_comm_bytes == count(graph, plan).shared == copied_bytes(graph, factors, dims, choices)
