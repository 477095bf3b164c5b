"""The partitioned symbol computes nothing twice: no two of its op nodes run the same op with the same attributes
on the same inputs. MXNet's common-expression elimination, which would merge such nodes, is off (tofu turns it
off so that each route of a piece keeps its own copy, docs/runtime.md), so a region that several ops of a device
read (an RNN layer's weights, read by every timestep; a statistic read twice by BatchNorm's expansion) must be
assembled once there by the rewriter itself (tests/sim/test_glue.py holds the simulator's replay of the rewriter
to the same glue).
"""
import collections
import json

import pytest

from tofu.api import load_graph, partitioned
from tofu.graph.ir import Role
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph

CASES = [("rnn-tiny", 8, 2, "data-parallel"), ("rnn-tiny", 8, 4, "tofu"), ("gpt-tiny", 4, 4, "tofu"),
         ("wresnet-tiny", 8, 2, "tofu"), ("mlp", 24, 4, "spartan")]


def duplicates(symbol) -> list[tuple[str, list[str]]]:
    """Op nodes of ``symbol`` alike in op, attributes (all but the name) and inputs: (op, their names)."""
    nodes = json.loads(symbol.tojson())["nodes"]
    alike: dict[tuple, list[str]] = collections.defaultdict(list)
    for n in nodes:
        if n["op"] != "null" and n["inputs"]:
            key = (n["op"], json.dumps(n.get("attrs", {}), sort_keys=True), tuple(tuple(i[:2]) for i in n["inputs"]))
            alike[key].append(n["name"])
    return [(key[0], names) for key, names in alike.items() if len(names) > 1]


def test_the_duplicate_finder_finds_a_repeated_concat():
    import mxnet as mx

    a, b = mx.sym.var("a"), mx.sym.var("b")
    twice = mx.sym.Group([mx.sym.concat(a, b, dim=0, name="c1"), mx.sym.concat(a, b, dim=0, name="c2"),
                          mx.sym.concat(b, a, dim=0, name="c3")])
    assert duplicates(twice) == [("Concat", ["c1", "c2"])]


@pytest.mark.parametrize("model,batch,k,algo", CASES, ids=lambda x: str(x))
def test_no_region_is_assembled_twice_on_a_device(model, batch, k, algo):
    graph = load_graph(model, ModelOptions(batch=batch))
    plan = plan_graph(graph, k, algo)
    assert not duplicates(partitioned(graph, plan).symbol)


def test_an_rnn_layer_fetches_each_weight_once_per_device():
    """Under data parallelism one device (the weight's owner, as MXNet's device kvstore assigns keys) holds each
    weight whole and every other device reads all of it at every timestep: one route per (weight, device),
    shared by the timesteps."""
    graph = load_graph("rnn-tiny", ModelOptions(batch=8))
    k = 4
    pg = partitioned(graph, plan_graph(graph, k, "data-parallel"))
    names = [n["name"] for n in json.loads(pg.symbol.tojson())["nodes"] if n["op"] != "null"]
    owner = {v.tensor: v.device for v in pg.variables if v.role is Role.PARAM}
    assert owner and len(owner) == sum(v.role is Role.PARAM for v in pg.variables)    # one variable each
    assert len(set(owner.values())) > 1, "every weight is owned by one device"
    read = collections.Counter(t for n in graph.nodes for t in n.inputs)
    assert any(read[graph.tensor(p).id] > 1 for p in owner), "no weight is read by several timesteps"
    for p, o in owner.items():
        for w in set(range(k)) - {o}:
            assert sum(n.startswith(f"{p}@dev{o}>dev{w}_") for n in names) == 1, (p, w)
