"""Which statistics of an expansion have their gradient all-reduced in the backward pass, read off the expansion's
symbol (tofu.graph.gradients.statistics_gradients), against what MXNet copies.

Before, an expansion declared one flag for all its statistics, so the softmax family's row maximum (computed under
BlockGrad: no gradient) was charged a backward all-reduce that MXNet never runs: a log_softmax over the batch at 4
workers was planned at 744 B and MXNet copied 696 B; a softmax split along its axis at 2 workers 216 B against
184 B. And SoftmaxActivation over the last axis of rank-3 data, whose output is rebuilt under BlockGrad, still
exchanges its row sum backward (MXNet's concats run their backward on zeros): 272 B copied."""
import mxnet as mx
import pytest

from tofu.analysis.strategies import strategies
from tofu.api import load_graph, partitioned
from tofu.graph.attrs import Attrs
from tofu.graph.gradients import _trace_statistics, statistics_gradients
from tofu.graph.single_op import infer_op_shapes
from tofu.runtime.data import initial_values, synthetic_batch
from tofu.runtime.train import Trainer
from tofu.search.algorithms import plan_graph
from tofu.tdl.describe import describe

EXPECTED = [    # (op, attributes, input shapes, per statistic in the expansion's order: its gradient exchanged)
    ("softmax", {"axis": "1"}, ((8, 4),), (False, True)),
    ("log_softmax", {"axis": "0"}, ((4, 3),), (False, True)),
    ("softmin", {}, ((4, 6),), (False, True)),
    ("SoftmaxActivation", {}, ((2, 3, 4),), (False, True)),
    ("SoftmaxActivation", {"mode": "channel"}, ((2, 4, 3),), (False, True)),
    ("SoftmaxOutput", {}, ((8, 4), (8,)), (False, False)),
    ("BatchNorm", {}, ((4, 3, 2, 2), (3,), (3,), (3,), (3,)), (True, True)),
    ("LayerNorm", {}, ((4, 6), (6,), (6,)), (True, True)),
    ("L2Normalization", {}, ((4, 6),), (True,)),
    ("GroupNorm", {"num_groups": "2"}, ((2, 4, 4, 4), (2,), (2,)), (True, True)),
    ("InstanceNorm", {}, ((2, 4, 4, 4), (4,), (4,)), (True, True)),
]


@pytest.mark.parametrize("op, attrs, shapes, carries", EXPECTED, ids=[f"{c[0]}-{len(c[2][0])}d-{i}"
                                                                         for i, c in enumerate(EXPECTED)])
def test_each_statistic_as_the_expansion_builds_it(op, attrs, shapes, carries):
    attrs = Attrs.parse(attrs)
    assert statistics_gradients(op, attrs, shapes) == carries
    # one all-reduce per statistic the description exchanges, and the same answer at other extents of the same
    # ranks (what the cache per ranks assumes)
    desc = describe(op, attrs, shapes, infer_op_shapes(op, attrs, shapes))
    exchanged = [s for s in strategies(desc, 2) if s.exchanges]
    assert exchanged and all(len(s.exchange_elements) == len(carries) for s in exchanged)
    wider = tuple(tuple(2 * n for n in shape) for shape in shapes)
    if op == "GroupNorm":
        wider = tuple((2 * s[0], *s[1:]) if len(s) > 1 else s for s in shapes)    # the groups stay 2
    assert _trace_statistics(op, attrs, wider) == carries


def _models():
    s = mx.sym

    def fc(n, flatten=True):
        return s.FullyConnected(s.var("data"), num_hidden=n, flatten=flatten, name="fc")
    return {
        "log_softmax over the batch": (s.make_loss(s.sum(s.square(s.log_softmax(fc(6), axis=0))), name="loss"),
                                       {"data": (8, 5)}, 4),
        "softmax over 64 classes": (s.make_loss(s.sum(s.square(s.softmax(fc(64), axis=1))), name="loss"),
                                    {"data": (4, 5)}, 2),
        "softmin": (s.make_loss(s.sum(s.square(s.softmin(fc(64), axis=1))), name="loss"), {"data": (4, 5)}, 4),
        "SoftmaxActivation, rank 3": (s.make_loss(s.sum(s.square(s.SoftmaxActivation(fc(32, False)))), name="loss"),
                                      {"data": (2, 3, 5)}, 2),
        "SoftmaxActivation, channels": (s.make_loss(s.sum(s.square(s.SoftmaxActivation(
            s.reshape(fc(32), (4, 32, 1)), mode="channel"))), name="loss"), {"data": (4, 5)}, 4),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_the_plan_counts_what_mxnet_copies(tmp_path, name):
    """Each model's plan splits the softmax axis (some copy is of a statistic, ``stat_``), and the bytes MXNet's
    `_CrossDeviceCopy`s move in one forward and backward pass equal the plan's, with algorithms tofu and
    equalchop (the old count was 32-96 B over on every one of them)."""
    sym, shapes, k = _models()[name]
    sym.save(str(tmp_path / "m.json"))
    graph = load_graph(str(tmp_path / "m.json"), shapes=shapes, with_loss=True)
    for algo in ("tofu", "equalchop"):
        plan = plan_graph(graph, k, algo)
        copies = Trainer(partitioned(graph, plan), {**initial_values(graph, 0), **synthetic_batch(graph, 0)}).copies()
        assert any("stat_" in c.name for c in copies), (algo, "no statistic is exchanged")
        assert sum(c.nbytes for c in copies) == plan.comm_bytes, (algo, [(c.name, c.nbytes) for c in copies])
