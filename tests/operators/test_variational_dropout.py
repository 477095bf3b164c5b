"""Dropout with ``axes`` (variational dropout) draws one mask shared along those axes. Shards split along one of
them would each draw their own, so the partitioned model would train another model than the user's, silently
(--check turns Dropout off and cannot see it). Before, its description split every axis; now the shared axes are
read whole and never split."""
import mxnet as mx
import pytest

from tofu.analysis.strategies import strategies
from tofu.api import load_graph
from tofu.graph.attrs import Attrs
from tofu.search.algorithms import plan_graph
from tofu.tdl.describe import describe


def test_mxnet_shares_the_mask_along_the_axes():
    x = mx.nd.ones((4, 6, 8))
    with mx.autograd.record(train_mode=True):
        y = mx.nd.Dropout(x, p=0.5, axes=(1,)).asnumpy()
    assert (y == 0).any() and (y != 0).any()
    assert (y == y[:, :1, :]).all()         # the same along axis 1, as a split of axis 1 would not keep it


@pytest.mark.parametrize("axes, split", [((), {0, 1, 2}), ((1,), {0, 2}), ((0, 2), {1}), ((-1,), {0, 1})])
def test_the_shared_axes_do_not_split(axes, split):
    attrs = Attrs.parse({"p": "0.3", **({"axes": str(axes)} if axes else {})})
    found = strategies(describe("Dropout", attrs, ((4, 6, 8),), ((4, 6, 8),)), 2)
    assert {s.outputs[0].dim for s in found} == split


def _graph(tmp_path, axes):
    s = mx.sym
    h = s.FullyConnected(s.var("data"), num_hidden=16, flatten=False, name="fc1")
    d = s.Dropout(h, p=0.3, axes=axes, name="drop") if axes else s.Dropout(h, p=0.3, name="drop")
    out = s.FullyConnected(d, num_hidden=8, flatten=False, name="fc2")
    path = tmp_path / f"m{len(axes)}.json"
    s.make_loss(s.sum(s.square(out)), name="loss").save(str(path))
    return load_graph(str(path), shapes={"data": (2, 8, 6)})


ALGOS = ("tofu", "data-parallel", "spartan", "equalchop", "dp-flat")


def _time_splits(graph) -> list[str]:
    """The algorithms whose plan at 4 workers splits the dropout's output along time (axis 1)."""
    return [algo for algo in ALGOS
            if 1 in [dict(step.tensor_dims)["drop_output"] for step in plan_graph(graph, 4, algo).steps]]


def test_a_plan_never_splits_the_shared_axis(tmp_path):
    """A sequence model (batch 2, time 8, features 6 at 4 workers: the batch alone cannot take the cut) whose
    dropout shares its mask over time: plain dropout is split along time by some algorithms, variational
    dropout by none."""
    assert _time_splits(_graph(tmp_path, ()))
    assert _time_splits(_graph(tmp_path, (1,))) == []
