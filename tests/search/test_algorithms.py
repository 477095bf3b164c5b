"""plan_graph: an order of cuts that fails leaves the others (issue 10, item 4).

``tofu`` tries the paper's recursion and one k-way cut. At 8 workers the tiny models have 4 samples, so the
8-way cut cannot split the data (rnn-tiny's input, 4 x 4) or the loss (wresnet-tiny's, 4 x 10: computed whole on
every worker since 2026-12-05, a dearer plan), while the recursion of 2-way cuts can: the default must find the
recursion's plan, and fail, with the recursion's reason, only where every order fails. The references are the
single-order algorithms run alone.
"""
import mxnet as mx
import pytest

from tofu.cli import main
from tofu.errors import SearchError
from tofu.graph import import_symbol
from tofu.models import ModelOptions, build_model
from tofu.search.algorithms import plan_graph


def graph(name: str, batch: int | None = None):
    m = build_model(name, ModelOptions(batch=batch))
    return import_symbol(m.symbol, m.shapes(), name)


@pytest.mark.parametrize("name", ["wresnet-tiny", "rnn-tiny"])
def test_default_finds_the_recursion_where_one_cut_fails(name):
    g = graph(name)
    recursive = plan_graph(g, 8, "tofu-recursive")
    if name == "rnn-tiny":
        with pytest.raises(SearchError, match="too many for input 'data'"):
            plan_graph(g, 8, "dp-flat")             # the order that fails on its own
    else:       # the loss no 8-way cut splits is computed whole on every worker: a plan, dearer than the recursion's
        flat = plan_graph(g, 8, "dp-flat")
        assert [str(dict(flat.steps[0].op_choices)["softmax"])] == ["replicate*"]
        assert flat.comm_bytes > recursive.comm_bytes
    best = plan_graph(g, 8, "tofu")
    assert best.comm_bytes == recursive.comm_bytes
    assert [s.factor for s in best.steps] == [2, 2, 2]


@pytest.mark.parametrize("name", ["wresnet-tiny", "rnn-tiny"])
def test_cli_default_plans_the_tiny_models_on_8_workers(capsys, name):
    rc = main(["plan", name])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"{name}: 8 workers" in out


def test_when_every_order_fails_the_first_reason_is_raised():
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    g = import_symbol(mx.sym.SoftmaxOutput(fc, name="softmax"), {"data": (2, 3)})    # 2 x 3 on 8 workers
    with pytest.raises(SearchError) as recursive:
        plan_graph(g, 8, "tofu-recursive")
    with pytest.raises(SearchError) as flat:
        plan_graph(g, 8, "dp-flat")
    assert str(recursive.value) != str(flat.value)
    with pytest.raises(SearchError) as best:
        plan_graph(g, 8, "tofu")
    assert str(best.value) == str(recursive.value)
