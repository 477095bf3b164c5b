"""The search's views of every worker against :func:`tofu.analysis.compose.compose`, the rewriter's own placement.

``next_view`` computes what a cut does to a shard once per strategy and worker and moves each group's view by
it (issue 23: the search's per-group views at 64 workers); ``compose`` builds each worker's call from the whole op
in one pass, apart from it. Every worker's chain of views, followed cut by cut through a plan's choices, must
read and write the boxes its call does. All workers are followed in one process, so the later ones reuse the
first ones' transitions at other origins.
"""
import pytest

from tofu.analysis.compose import ChoiceKind, OpChoice, compose, coordinates
from tofu.analysis.strategies import signature_strategies
from tofu.analysis.views import NodeView, clear_calls, follow_view, next_view
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph


def _boxes(origins, shapes):
    return tuple(tuple((o, o + n) for o, n in zip(origin, shape)) for origin, shape in zip(origins, shapes))


def _search_view(view, choices, factors, w):
    """Worker w's view after every cut, as the search makes it; None where the search does not follow the op
    itself (a statistics exchange: the expansion runs it)."""
    for choice, f, c in zip(choices, factors, coordinates(w, factors)):
        if view.done or choice.kind is ChoiceKind.WHOLE:
            break
        if choice.kind is ChoiceKind.FOLLOW:
            view = follow_view(view, choice.dim, f, c)
            continue
        s = next(s for s in signature_strategies(view.op, view.attrs, view.in_shapes, view.out_shapes, f)
                 if OpChoice.of(s) == choice)
        if s.exchanges:
            return None
        view = next_view(view, s, f, c)
    return view


CASES = [("wresnet-tiny", 4), ("wresnet-tiny", 6), ("gpt-tiny", 4), ("rnn-tiny", 8), ("mlp", 8)]


@pytest.mark.parametrize("model,k", CASES)
def test_every_workers_view_reads_and_writes_the_boxes_compose_gives(model, k):
    graph = load_graph(model, ModelOptions(batch=24))
    plan = plan_graph(graph, k, "tofu")
    factors = tuple(s.factor for s in plan.steps)
    by_step = [dict(s.op_choices) for s in plan.steps]
    clear_calls()
    compared = 0
    for node in graph.nodes:
        choices = [step[node.name] for step in by_step]
        calls = compose(NodeView.of(graph, node), choices, factors)
        for w, call in enumerate(calls):
            view = _search_view(NodeView.of(graph, node), choices, factors, w)
            if view is None or call.expansion:
                continue
            assert [(node.inputs[p.input], p.box) for p in call.inputs] == \
                list(zip(view.inputs, _boxes(view.in_origins_or_zero(), view.in_shapes))), (node.name, w)
            assert [o.box for o in call.outputs] == \
                list(_boxes(view.out_origins_or_zero(), view.out_shapes)), (node.name, w)
            assert call.attrs == view.attrs, (node.name, w)
            compared += 1
    assert compared >= len(graph.nodes) * k // 2


def _conv_views():
    """A padded 3 x 3 convolution and max pooling, as MXNet's symbols give them."""
    import mxnet as mx

    from tofu.graph import import_symbol

    x = mx.sym.var("data")
    conv = mx.sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=True, name="conv")
    pool = mx.sym.Pooling(conv, kernel=(3, 3), pad=(1, 1), stride=(1, 1), pool_type="max", name="pool")
    graph = import_symbol(mx.sym.MakeLoss(mx.sym.sum(pool), name="loss"), {"data": (4, 2, 8, 8)}, "halo")
    return [NodeView.of(graph, n) for n in graph.nodes if n.op in ("Convolution", "Pooling")]


@pytest.mark.parametrize("view", _conv_views(), ids=lambda v: v.op)
def test_halo_splits_place_every_worker_as_compose_does(view):
    """Every pair of strategies of two 2-way cuts of a padded 3 x 3 window (halos at the borders and inside)."""
    clear_calls()
    compared = 0
    for s1 in signature_strategies(view.op, view.attrs, view.in_shapes, view.out_shapes, 2):
        if s1.exchanges or s1.var.endswith("*"):
            continue
        middle = next_view(view, s1, 2, 0)
        for s2 in signature_strategies(middle.op, middle.attrs, middle.in_shapes, middle.out_shapes, 2):
            if s2.exchanges or s2.var.endswith("*"):
                continue
            choices = [OpChoice.of(s1), OpChoice.of(s2)]
            try:
                calls = compose(view, choices, (2, 2))
            except Exception:       # noqa: BLE001 (a pair MXNet's kernel cannot run: the search excludes it)
                continue
            for w, call in enumerate(calls):
                got = _search_view(view, choices, (2, 2), w)
                assert [(view.inputs[p.input], p.box) for p in call.inputs] == \
                    list(zip(got.inputs, _boxes(got.in_origins_or_zero(), got.in_shapes))), (choices, w)
                assert [o.box for o in call.outputs] == list(_boxes(got.out_origins_or_zero(), got.out_shapes))
                compared += 1
    assert compared >= 16
