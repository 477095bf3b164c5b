"""experiments/common.py's helpers of the simulated experiments: rows rewritten in order, what a device holds at
its peak adding up to the engine's own peak."""
import csv

from experiments.common import RowWriter, held_at_peak, rewrite_rows
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim import profile
from tofu.sim.engine import simulate_iteration


def test_held_at_peak_adds_up_to_the_engines_peak():
    graph = load_graph("wresnet-tiny", ModelOptions(batch=4))
    ex = simulate_iteration(graph, plan_graph(graph, 4, "tofu"), profile("k80x8"))
    device, when, held = held_at_peak(ex)
    assert ex.peak_bytes[device] == max(ex.peak_bytes) and 0 <= when <= ex.makespan
    assert sum(held.values()) == ex.peak_bytes[device]
    assert {"param", "optimizer", "gradient"} <= set(held)
    for d in range(4):
        assert sum(held_at_peak(ex, d)[2].values()) == ex.peak_bytes[d]


def test_rewrite_rows_puts_rows_in_the_given_order(tmp_path):
    path = tmp_path / "r.csv"
    writer = RowWriter(path, ("a", "b"))
    for row in ({"a": 2, "b": "y"}, {"a": 1, "b": "x"}):
        writer.write(row)
    writer.close()
    rewrite_rows(path, ("a", "b"), sorted(csv.DictReader(path.open()), key=lambda r: r["a"]))
    assert list(csv.DictReader(path.open())) == [{"a": "1", "b": "x"}, {"a": "2", "b": "y"}]
