"""Smoke test of run_scaling.py --quick and its plot: one machine equals Tofu's plan simulated on the engine, more
machines add the exchange of tofu.sim.cluster computed by hand, never more than linear."""
import csv

import pytest

from experiments import plot_scaling, run_scaling
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim import profile
from tofu.sim.engine import simulate
from tofu.sim.program import program_from_plan
from tofu.sim.systems import Options


def test_quick_rows_and_plot(tmp_path):
    assert run_scaling.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "smoke.json").exists()
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert len(rows) == 3 * 2 * 2                            # machines x bandwidths x overlaps
    params = load_graph("rnn-tiny", ModelOptions(batch=1)).param_bytes
    b = int(rows[0]["batch_per_machine"])
    graph = load_graph("rnn-tiny", ModelOptions(batch=b))
    one = simulate(program_from_plan(graph, plan_graph(graph, 8, "tofu"), Options().sum_cap), profile("k80x8"))
    for r in rows:
        assert float(r["machine_seconds"]) == pytest.approx(one.seconds, rel=1e-5)
        m, b = int(r["machines"]), int(r["batch_per_machine"])
        assert int(r["global_batch"]) == m * b and int(r["kvstore_bytes"]) == params
        assert float(r["inter_bytes"]) == pytest.approx(2 * params * (m - 1) / m, rel=1e-6)
        machine, inter = float(r["machine_seconds"]), float(r["inter_seconds"])
        expected = machine + inter if r["overlap"] == "none" else max(machine, inter)
        assert float(r["seconds"]) == pytest.approx(expected, rel=1e-4)
        assert float(r["samples_per_second"]) == pytest.approx(m * b / float(r["seconds"]), rel=1e-4)
        assert float(r["samples_per_second"]) <= float(r["linear_samples_per_second"]) * (1 + 1e-5)
        if m == 1:
            assert inter == 0 and float(r["samples_per_second"]) == pytest.approx(
                float(r["linear_samples_per_second"]), rel=1e-5)
    assert plot_scaling.main([str(tmp_path / "smoke.csv"), "--out", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").stat().st_size > 10_000
