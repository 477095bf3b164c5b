"""plan_graph's concurrent one-cut search (issue 9): ``tofu``'s k-way cut costed in a forked process while the
recursion runs must give the sequential plan, byte for byte, whichever order wins and whatever the fork does;
and so must the plan's prefix recounts (issue 23), counted while the recursion searches on, in one process forked
as the plan begins.

The reference is the same call with ``concurrent=False``; the fork is forced (a spare core is not assumed).
"""
import json
import os
import time

import mxnet as mx
import numpy as np
import pytest

from tofu.errors import SearchError
from tofu.graph import import_symbol
from tofu.models import ModelOptions, build_model
from tofu.search import algorithms
from tofu.search.algorithms import plan_graph


def graph(name: str, batch: int | None = None):
    m = build_model(name, ModelOptions(batch=batch))
    return import_symbol(m.symbol, m.shapes(), name)


def plan_doc(plan) -> str:
    doc = plan.to_json()
    doc.pop("search_seconds")
    return json.dumps(doc, sort_keys=True)


@pytest.fixture
def forked(monkeypatch):
    monkeypatch.setattr(algorithms, "_fork_pays", lambda graph: True)
    starts = []
    start = algorithms._Ahead.start

    def counted(*args):
        ahead = start(*args)
        starts.append(ahead)
        return ahead

    monkeypatch.setattr(algorithms._Ahead, "start", staticmethod(counted))
    return starts


@pytest.mark.parametrize("name, batch, workers, factors", [
    ("wresnet-tiny", 16, 4, [2, 2]),      # the recursion wins: the fork's answer alone decides
    ("wresnet-tiny", 64, 4, [4]),         # the one 4-way cut wins: searched again here
    ("rnn-tiny", 16, 8, [2, 2, 2]),
])
def test_concurrent_plan_equals_the_sequential_one(forked, name, batch, workers, factors):
    g = graph(name, batch)
    sequential = plan_graph(g, workers, "tofu", concurrent=False)
    assert not forked
    concurrent = plan_graph(g, workers, "tofu")
    assert len(forked) == 1 and forked[0] is not None
    assert [s.factor for s in concurrent.steps] == factors
    assert plan_doc(concurrent) == plan_doc(sequential)


@pytest.mark.parametrize("answer", [None, -1.0, float("inf")])
def test_any_answer_of_the_fork_gives_the_sequential_plan(forked, monkeypatch, answer):
    """No answer (the fork failed), a wrong low one (it claims to win) or a wrong high one for the recursion's
    winner: a win is always searched again here, so only a claim to lose can skip it, and that skips a loser."""
    g = graph("wresnet-tiny", 64)
    sequential = plan_graph(g, 4, "tofu", concurrent=False)
    monkeypatch.setattr(algorithms._Ahead, "cost", lambda self, timeout_s: answer)
    got = plan_graph(g, 4, "tofu")
    if answer == float("inf"):       # a (false) claim to lose keeps the recursion's plan
        assert [s.factor for s in got.steps] == [2, 2]
    else:
        assert plan_doc(got) == plan_doc(sequential)


def in_the_child(monkeypatch, misbehave) -> None:
    """Makes the forked child call ``misbehave()`` instead of searching; the parent searches as before."""
    parent = os.getpid()
    search = algorithms.search

    def patched(graph, order, *args, **kwargs):
        if os.getpid() != parent:
            misbehave()
        return search(graph, order, *args, **kwargs)

    monkeypatch.setattr(algorithms, "search", patched)


def test_a_fork_that_dies_is_searched_again_here(forked, monkeypatch):
    in_the_child(monkeypatch, lambda: os._exit(3))
    g = graph("wresnet-tiny", 64)
    got = plan_graph(g, 4, "tofu")
    assert forked[0] is not None
    assert plan_doc(got) == plan_doc(plan_graph(g, 4, "tofu", concurrent=False))
    assert [s.factor for s in got.steps] == [4]


def test_a_fork_that_hangs_is_killed_and_searched_again_here(forked, monkeypatch):
    """A child stuck (say on a lock another thread held at fork) never hangs the planner: past the wait it is
    killed and the cut is searched here."""
    import time

    in_the_child(monkeypatch, lambda: time.sleep(600))
    cost = algorithms._Ahead.cost
    monkeypatch.setattr(algorithms._Ahead, "cost", lambda self, timeout_s: cost(self, 0.5))
    g = graph("wresnet-tiny", 64)
    t0 = time.monotonic()
    got = plan_graph(g, 4, "tofu")
    assert time.monotonic() - t0 < 60
    assert plan_doc(got) == plan_doc(plan_graph(g, 4, "tofu", concurrent=False))
    with pytest.raises(ChildProcessError):        # reaped: no process left behind
        os.waitpid(forked[0]._pid, os.WNOHANG)


def test_when_every_order_fails_concurrently_the_first_reason_is_raised(forked):
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    g = import_symbol(mx.sym.SoftmaxOutput(fc, name="softmax"), {"data": (2, 3)})    # 2 x 3 on 8 workers
    with pytest.raises(SearchError) as sequential:
        plan_graph(g, 8, "tofu", concurrent=False)
    with pytest.raises(SearchError) as concurrent:
        plan_graph(g, 8, "tofu")
    assert str(concurrent.value) == str(sequential.value)
    assert "\n" not in str(concurrent.value)


def test_only_tofu_forks(forked):
    g = graph("mlp")
    for algo in ("tofu-recursive", "dp-flat", "data-parallel"):
        plan_graph(g, 8, algo)
    plan_graph(g, 2, "tofu")          # one order only: nothing to run beside it
    assert not forked


def test_small_graphs_never_fork():
    assert not algorithms._fork_pays(graph("mlp"))


@pytest.fixture
def prefixes(monkeypatch):
    """Forces the fork of the plan's prefix recounts; records what each child had sent when last asked (by
    child), what each child was started for, and the cuts of every count made in this process. This process's
    counts wait 0.5 s first, so that a child that counts has sent everything by the time it is asked."""
    monkeypatch.setattr(algorithms, "_fork_pays", lambda graph: True)
    parent, count = os.getpid(), algorithms.copies_and_kept
    record = {"sent": {}, "here": [], "started": []}
    arrived, start = algorithms._Forked.arrived, algorithms._Forked.start.__func__

    def recorded(self, *args):
        got = arrived(self, *args)
        if not isinstance(self, algorithms._Ahead):
            record["sent"][id(self)] = got
        return got

    def started(cls, compute, count, what, feed=False):
        child = start(cls, compute, count, what, feed)
        if cls is algorithms._Forked:
            record["started"].append(what)
        return child

    def slowed(graph, factors, *args):
        if os.getpid() == parent:
            record["here"].append(len(factors))
            time.sleep(0.5)
        return count(graph, factors, *args)

    monkeypatch.setattr(algorithms._Forked, "arrived", recorded)
    monkeypatch.setattr(algorithms._Forked, "start", classmethod(started))
    monkeypatch.setattr(algorithms, "copies_and_kept", slowed)
    return record


def sequential_and_concurrent(prefixes, g, workers: int, algo: str):
    """The plan made sequentially, then concurrently with only the latter's counts here recorded."""
    sequential = plan_graph(g, workers, algo, concurrent=False)
    prefixes["here"].clear()
    return sequential, plan_graph(g, workers, algo)


def cuts_sent(monkeypatch, after_the_k_way_cut: bool = False) -> list[int]:
    """How many cuts the prefix-count child has after each of the recursion's steps (filled as the plan runs);
    with ``after_the_k_way_cut``, each step first waits for the k-way cut's child to end, whenever it does."""
    step, sent = algorithms._EarlyPrefixes.step, []

    def recorded(self, steps):
        if after_the_k_way_cut:
            assert self.ahead is not None
            self.ahead.arrived(1, 10.0)
        step(self, steps)
        sent.append(self.sent)

    monkeypatch.setattr(algorithms._EarlyPrefixes, "step", recorded)
    return sent


@pytest.mark.parametrize("name, batch, workers", [("rnn-tiny", 16, 8), ("wresnet-tiny", 16, 4), ("gpt-tiny", 64, 8)])
def test_prefixes_recounted_in_a_fork_give_the_sequential_plan(prefixes, name, batch, workers):
    """Each step's bytes are the recount of its prefix of cuts less the one before: counted in children (begun
    during the search, or the longest first while the last prefix is counted here), they are the same floats."""
    g = graph(name, batch)
    sequential, got = sequential_and_concurrent(prefixes, g, workers, "tofu")
    n = len(got.steps)
    assert n > 1
    totals = np.cumsum([s.cost_bytes for s in sequential.steps])
    assert prefixes["here"] == [n]          # the last here; every other prefix once, from some child
    assert sorted(x for sent in prefixes["sent"].values() for x in sent) == sorted(totals[:-1])
    assert plan_doc(got) == plan_doc(sequential)


def test_prefixes_begin_while_the_recursion_searches_on(prefixes, monkeypatch):
    """With no k-way cut searched beside it (``tofu-recursive``), one child is forked as the plan begins and sent
    each cut as soon as it is fixed (the last one, which this process counts, never), and the plan is the
    sequential one."""
    sent = cuts_sent(monkeypatch)
    g = graph("rnn-tiny", 16)
    sequential, got = sequential_and_concurrent(prefixes, g, 8, "tofu-recursive")
    assert prefixes["started"] == ["the plan's prefixes"]
    assert sent == [1, 2, 2]
    assert prefixes["here"] == [3]
    totals = np.cumsum([s.cost_bytes for s in sequential.steps])
    assert sorted(x for sent in prefixes["sent"].values() for x in sent) == sorted(totals[:-1])
    assert plan_doc(got) == plan_doc(sequential)


def test_a_prefix_count_that_dies_is_counted_again_here(prefixes, monkeypatch):
    parent, count = os.getpid(), algorithms.copies_and_kept

    def patched(*args):
        if os.getpid() != parent:
            os._exit(3)
        return count(*args)

    monkeypatch.setattr(algorithms, "copies_and_kept", patched)
    g = graph("rnn-tiny", 16)
    got = plan_graph(g, 8, "tofu")
    assert prefixes["sent"] and not any(prefixes["sent"].values())
    assert sorted(prefixes["here"]) == list(range(1, len(got.steps) + 1))
    assert plan_doc(got) == plan_doc(plan_graph(g, 8, "tofu", concurrent=False))


def test_a_k_way_cut_that_cannot_be_made_does_not_hold_the_prefixes_back(prefixes, monkeypatch):
    """The k-way cut's search fails at once when no input divides k ways (6 x 10 on 4 workers): its child is
    done, and the recursion's cuts go to the prefix counts as they are fixed, as with no k-way cut at all."""
    sent = cuts_sent(monkeypatch, after_the_k_way_cut=True)
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    g = import_symbol(mx.sym.SoftmaxOutput(fc, name="softmax"), {"data": (6, 10)})
    sequential, got = sequential_and_concurrent(prefixes, g, 4, "tofu")
    assert sent == [1, 1]
    assert prefixes["here"] == [2]
    assert plan_doc(got) == plan_doc(sequential)


def test_a_child_that_cannot_take_a_cut_is_given_up_and_its_prefixes_counted_here(prefixes, monkeypatch):
    """A cut that does not fit the pipe at once (a child stuck, or a pipe that cannot grow) is never waited on:
    the child is given up and every prefix is counted here, the plan unchanged."""
    monkeypatch.setattr(algorithms, "_FEED_BYTES", 4096)
    message = algorithms._cut_message
    monkeypatch.setattr(algorithms, "_cut_message", lambda graph, step: (message(graph, step), b"x" * 200_000))
    sent = cuts_sent(monkeypatch)
    g = graph("rnn-tiny", 16)
    sequential, got = sequential_and_concurrent(prefixes, g, 8, "tofu-recursive")
    assert prefixes["started"] == ["the plan's prefixes"]
    assert sent == [0, 0, 0]
    assert sorted(prefixes["here"]) == [1, 2, 3]
    assert plan_doc(got) == plan_doc(sequential)
