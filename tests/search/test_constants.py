"""Constants made where they are read (issue 23, item 2) and the plan's worst-device memory (item 4).

References written here, apart from tofu.search: which tensors are constant is found by walking each tensor's
ancestors to the graph's variables; what crosses devices is read from the partitioned symbol's JSON (every
edge between two device groups) or from the rewriter's replay on boxes (tofu.sim.glue); the memory a device
keeps is the parameters' bytes it lacks, counted by hand for data parallelism.
"""
import json
import math
from collections import Counter

import mxnet as mx
import pytest

from tests.test_cli import run
from tofu.api import load_graph, partitioned
from tofu.graph import import_symbol
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.search.constants import constant_tensors
from tofu.search.plan import DEVICE_RESERVE_BYTES, fits
from tofu.sim.glue import dataflow_from_plan


def _from_variables(graph) -> set[int]:
    """Tensors with a variable (or a random op) among their ancestors, by a walk up from each tensor."""
    def reaches(t, seen) -> bool:
        tensor = graph.tensors[t]
        if tensor.producer is None:
            return True
        node = graph.nodes[tensor.producer]
        if node.op == "Dropout":
            return True
        return any(u not in seen and (seen.add(u) or reaches(u, seen)) for u in node.inputs)
    return {t.id for t in graph.tensors if reaches(t.id, set())}


@pytest.mark.parametrize("model", ["gpt-tiny", "rnn-tiny", "mlp", "wresnet-tiny"])
def test_the_constants_are_what_no_variable_reaches(model):
    graph = load_graph(model)
    heads = set(graph.heads)
    want = {t.id for t in graph.tensors} - _from_variables(graph) - heads
    assert constant_tensors(graph) == want
    names = {graph.tensors[t].name for t in want}
    if model == "gpt-tiny":
        assert "embed_mask_output" in names and "embed_positions_output" in names
    if model == "rnn-tiny":
        assert "lstm_l0_begin_h_output" in names


def test_a_random_op_and_what_reads_a_variable_are_not_constant():
    seq = 4
    x = mx.sym.var("data")
    ramp = mx.sym.arange(0, seq, name="ramp")
    noisy = mx.sym.Dropout(ramp, p=0.5, name="noisy")
    total = mx.sym.broadcast_add(mx.sym.reshape(noisy, shape=(1, seq), name="row"), x, name="total")
    ones = mx.sym.ones(shape=(2, seq), name="one")
    out = mx.sym.MakeLoss(mx.sym.sum(total * ones, name="s"), name="loss")
    graph = import_symbol(out, {"data": (2, seq)}, "random")
    names = {graph.tensors[t].name for t in constant_tensors(graph)}
    assert names == {"ramp_output", "one_output"}


def _cross_device_sources(pg) -> list[str]:
    """The names of the nodes whose output a node on another device reads (what MXNet copies)."""
    doc = json.loads(pg.symbol.tojson())
    nodes = doc["nodes"]
    group = [n.get("attrs", {}).get("__ctx_group__") for n in nodes]
    out = []
    for i, n in enumerate(nodes):
        for j, *_ in n["inputs"]:
            if group[j] is not None and group[i] is not None and group[j] != group[i]:
                out.append(nodes[j]["name"])
    return out


@pytest.mark.parametrize("k", [2, 4, 8])
def test_no_piece_of_the_causal_mask_crosses_devices(k):
    graph = load_graph("gpt-tiny", ModelOptions(batch=8))
    const = {graph.tensors[t].name for t in constant_tensors(graph)}
    const |= {graph.nodes[graph.tensors[t].producer].name for t in constant_tensors(graph)}
    pg = partitioned(graph, plan_graph(graph, k, "tofu"))
    sources = _cross_device_sources(pg)
    assert sources, "a partitioned GPT block copies activations"
    assert not [s for s in sources if s.split("@")[0] in const]
    # every device that reads the mask computes it (its arange, at least)
    groups = {n.get("attrs", {}).get("__ctx_group__") for n in json.loads(pg.symbol.tojson())["nodes"]
              if n["op"] == "_arange"}
    assert len(groups) == k


@pytest.mark.parametrize("k", [2, 4])
def test_a_device_that_reads_all_of_a_constant_runs_its_ops_whole(capsys, k):
    """Data parallelism reads the whole causal mask on every device: each device runs each of the mask's ops
    once, on whole shapes (as MXNet's Module does), and assembles no piece of it; the step equals one device's."""
    graph = load_graph("gpt-tiny", ModelOptions(batch=8))
    pg = partitioned(graph, plan_graph(graph, k, "data-parallel"))
    const = constant_tensors(graph)
    producers = {graph.nodes[graph.tensors[t].producer].name: graph.tensors[t] for t in const}
    doc = json.loads(pg.symbol.tojson())
    nodes = doc["nodes"]
    runs = Counter((n["name"].split("@")[0], n["attrs"]["__ctx_group__"]) for n in nodes
                   if n["op"] != "null" and n["name"].split("@")[0] in producers)
    assert runs == {(name, f"dev{w}"): 1 for name in producers for w in range(k)}
    _, shapes, _ = pg.symbol.get_internals().infer_shape_partial(**pg.shapes())
    inferred = dict(zip(pg.symbol.get_internals().list_outputs(), shapes))
    for n in nodes:
        name = n["name"].split("@")[0]
        if n["op"] != "null" and name in producers:
            assert tuple(inferred[n["name"] + "_output"]) == producers[name].shape, n["name"]
    assemblers = [n for n in nodes if n["op"] in ("Concat", "add_n", "ElementWiseSum")]
    assert not [n for n in assemblers for j, *_ in n["inputs"] if nodes[j]["name"].split("@")[0] in producers]
    rc, out, err = run(capsys, "run", "gpt-tiny", "--batch", "8", "--workers", str(k), "--algo", "data-parallel",
                       "--steps", "2", "--check", "--json")
    assert rc == 0, err
    assert json.loads(out)["check_passed"]


@pytest.mark.parametrize("algo", ["tofu", "data-parallel"])
def test_a_constant_read_whole_and_in_pieces_on_one_device_trains_equal_to_one_device(capsys, tmp_path, algo):
    """A ramp read whole (a broadcast row) and, through a constant product with a batch dimension, in pieces;
    a multi-output constant (split) read by piece: under the tofu plan at k = 4 some device runs the ramp both
    whole and as another's piece."""
    x, w = mx.sym.var("data"), mx.sym.var("w")
    row = mx.sym.reshape(mx.sym.arange(0, 16, name="ramp"), shape=(1, 16), name="row")
    scaled = mx.sym.broadcast_mul(mx.sym.ones(shape=(8, 16), name="ones"), row, name="scaled")
    parts = mx.sym.split(scaled, num_outputs=2, axis=1, name="parts")
    a = mx.sym.broadcast_add(mx.sym.FullyConnected(x, weight=w, num_hidden=16, no_bias=True, name="fc"), row,
                             name="a") * scaled
    c = mx.sym.concat(a.slice_axis(axis=1, begin=0, end=8) + parts[0],
                      a.slice_axis(axis=1, begin=8, end=16) * parts[1], dim=1, name="c")
    path = tmp_path / "const.json"
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(c)), name="loss").save(str(path))
    graph = load_graph(str(path), shapes={"data": (8, 16)})
    names = [n["name"] for n in json.loads(partitioned(graph, plan_graph(graph, 4, algo)).symbol.tojson())["nodes"]]
    assert any(n.endswith("<all") for n in names)       # some device runs a constant whole
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=8,16", "--workers", "4", "--algo", algo,
                       "--steps", "2", "--check", "--json")
    assert rc == 0, err
    assert json.loads(out)["check_passed"]


@pytest.mark.parametrize("model", ["gpt-124m", "gpt-350m"])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_paper_size_gpt_plans_move_no_mask_bytes(model, k):
    """The rewriter replayed on boxes (no MXNet): no piece of a constant is cut for another device, and the
    plan's bytes are unchanged if the constants are taken out of the graph's reads."""
    graph = load_graph(model)
    plan = plan_graph(graph, k, "tofu")
    const = constant_tensors(graph)
    assert {graph.tensors[t].name for t in const} >= {"embed_mask_output"}
    flow = dataflow_from_plan(graph, plan)
    moved = [op for op in flow.ops if op.to is not None and op.to != op.device]
    assert moved
    assert not [op for op in moved if flow.values[op.outputs[0]].tensor in const]


def _shared_weight_graph():
    """Two FullyConnected ops reading one 32 x 32 weight, on a batch of 16."""
    x, w = mx.sym.var("data"), mx.sym.var("w")
    h = mx.sym.FullyConnected(x, weight=w, num_hidden=32, no_bias=True, name="fc1")
    h = mx.sym.FullyConnected(mx.sym.relu(h, name="r"), weight=w, num_hidden=32, no_bias=True, name="fc2")
    return import_symbol(mx.sym.MakeLoss(mx.sym.sum(h, name="s"), name="loss"), {"data": (16, 32)}, "shared")


def test_a_weight_read_by_two_ops_is_kept_once():
    """Data parallelism on 4 workers holds the weight whole on its owner (the only weight: the first device, as
    MXNet's device kvstore assigns it): each other device receives it whole and keeps its 4,096 bytes once,
    though two ops read it (the oracle's count); the worst device is the owner, with the weight, its gradient
    and its momentum, and nothing fetched. The runtime binds the received weight as a replica, whose gradient
    is resident too, and the owner receives the three gradients in turn in one buffer: 4,096 bytes more on
    every device."""
    from tests.oracle import count

    graph = _shared_weight_graph()
    plan = plan_graph(graph, 4, "data-parallel")
    assert count(graph, plan).kept_per_device == pytest.approx([0, 4096, 4096, 4096])
    assert count(graph, plan).replicas_per_device == pytest.approx([4096] * 4)
    memory = dict(plan.per_device_bytes)
    assert (memory["params"], memory["grads"], memory["optimizer"], memory["fetched"]) == (4096, 4096, 4096, 0)
    assert memory["replicas"] == 4096


def test_the_worst_device_is_reported_not_the_average():
    """Tofu's plan of the same graph: the devices keep different amounts; the figure is the largest of the
    oracle's per-device counts (each remote cell a device receives for an op that keeps it, once)."""
    from tests.oracle import count

    graph = _shared_weight_graph()
    plan = plan_graph(graph, 4, "tofu")
    per_device = count(graph, plan).kept_per_device
    assert dict(plan.per_device_bytes)["fetched"] == int(max(per_device))
    assert max(per_device) > sum(per_device) / 4


def test_a_fit_leaves_the_reserve():
    memory = {"total": 12 * 2**30 - DEVICE_RESERVE_BYTES}
    assert fits(memory, 12 * 2**30)
    assert not fits({"total": memory["total"] + 1}, 12 * 2**30)
    assert fits({"total": 12 * 2**30}, 12 * 2**30, reserve=0)
    assert DEVICE_RESERVE_BYTES == 2**29
    assert math.isclose(DEVICE_RESERVE_BYTES / 2**30, 0.5)
