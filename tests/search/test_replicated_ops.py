"""An op no cut can split (no output dimension divides by the cut's width: a learned scalar's reshape, the mean of
a whole tensor reshaped to broadcast) is computed whole on every worker (``replicate*``), where the search refused
the model before: its bytes against the independent counts (tests/oracle.py, tests/needed.py) and MXNet's copies,
and its training against one device."""
import mxnet as mx
import pytest

from tests.needed import needed
from tests.oracle import count
from tofu import cli
from tofu.analysis.views import NodeView
from tofu.api import load_graph, load_plan, partitioned
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer
from tofu.search.cost import node_options


def _temperature():
    """Logits scaled by a learned scalar plus a constant one: reshape of (1,) to (1, 1) has no dimension to cut."""
    s = mx.sym
    h = s.FullyConnected(s.var("data"), num_hidden=12, name="fc1")
    scale = s.reshape(s.var("temp", shape=(1,)) + s.ones((1,)), (1, 1), name="scale")
    return s.SoftmaxOutput(s.broadcast_mul(h, scale), s.var("softmax_label"), name="softmax")


def _centred():
    """Activations less their mean over the whole tensor, a (1,) statistic reshaped to broadcast."""
    s = mx.sym
    h = s.FullyConnected(s.var("data"), num_hidden=12, name="fc1")
    mean = s.reshape(s.mean(h), (1, 1), name="centre")
    return s.SoftmaxOutput(s.broadcast_sub(h, mean), s.var("softmax_label"), name="softmax")


MODELS = {"temperature": (_temperature, "scale"), "centred": (_centred, "centre")}


def _graph(tmp_path, model):
    path = tmp_path / f"{model}.json"
    MODELS[model][0]().save(str(path))
    return load_graph(str(path), shapes={"data": (16, 8), "softmax_label": (16,)}), path


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_an_unsplittable_op_is_computed_whole_and_counted(tmp_path, model, k):
    graph, _ = _graph(tmp_path, model)
    plan = load_plan(graph, k, "tofu")
    name = MODELS[model][1]
    assert [str(dict(s.op_choices)[name]) for s in plan.steps] == ["replicate*"] * len(plan.steps)
    c = count(graph, plan)
    assert c.shared == pytest.approx(plan.comm_bytes, rel=1e-12, abs=1e-6)
    assert needed(graph, plan).total == pytest.approx(plan.comm_bytes, rel=1e-12, abs=1e-6)
    values = {**initial_values(graph), **synthetic_batch(graph)}
    assert sum(c.nbytes for c in Trainer(partitioned(graph, plan), values).copies()) == plan.comm_bytes


@pytest.mark.parametrize("model", sorted(MODELS))
def test_it_trains_equal_to_one_device(tmp_path, capsys, model):
    _, path = _graph(tmp_path, model)
    rc = cli.main(["run", str(path), "--shape", "data=16,8", "--workers", "4", "--check", "--steps", "2"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert ": passed (rtol" in out, out


def test_the_fallback_is_offered_only_where_no_output_split_is(tmp_path):
    """The reshape of the scalar offers ``replicate*`` alone; the layer before it its own splits, not that."""
    graph, _ = _graph(tmp_path, "temperature")

    def offered(name):
        node = next(n for n in graph.nodes if n.name == name)
        return {o.strategy.var for o in node_options(graph, node, NodeView.of(graph, node), 2)}

    assert offered("scale") == {"replicate*"}
    assert "replicate*" not in offered("fc1") and offered("fc1")
