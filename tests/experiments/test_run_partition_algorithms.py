"""Smoke test of run_partition_algorithms.py --quick and its plot: every algorithm has a row equal to simulating
its plan on the engine directly (compute the busiest device's, overhead the rest of the iteration, OOM by the
simulated peak), the ideal compute one device's divided by the devices."""
import csv
import dataclasses

import pytest

from experiments import plot_partition_algorithms, run_partition_algorithms
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import GENERAL_ALGORITHMS, plan_graph
from tofu.sim import profile
from tofu.sim.engine import simulate
from tofu.sim.program import program_from_plan
from tofu.sim.systems import Options, one_device_program


def test_quick_rows_and_plot(tmp_path):
    assert run_partition_algorithms.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "smoke.json").exists()
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    cases = run_partition_algorithms.QUICK_CASES
    assert [(r["model"], r["algo"]) for r in rows] == [(m, a) for m in cases for a in GENERAL_ALGORITHMS]
    prof = dataclasses.replace(profile("k80x8"), devices=run_partition_algorithms.QUICK_WORKERS)
    for model, batch in cases.items():
        graph = load_graph(model, ModelOptions(batch=batch))
        ideal = simulate(one_device_program(graph), prof).busy[0] / prof.devices
        for r in (r for r in rows if r["model"] == model):
            assert r["status"] in ("ok", "oom")
            ex = simulate(program_from_plan(graph, plan_graph(graph, prof.devices, r["algo"]), Options().sum_cap),
                          prof)
            assert float(r["seconds"]) == pytest.approx(ex.seconds, rel=1e-5)
            assert float(r["compute_seconds"]) == pytest.approx(max(ex.busy), rel=1e-5)
            assert float(r["seconds"]) == pytest.approx(float(r["compute_seconds"]) + float(r["overhead_seconds"]),
                                                        rel=1e-4)
            assert float(r["ideal_compute_seconds"]) == pytest.approx(ideal, rel=1e-5)
            assert float(r["compute_seconds"]) >= float(r["ideal_compute_seconds"])
            assert int(r["peak_bytes"]) == max(ex.peak_bytes)
            assert (r["status"] == "oom") == (int(r["peak_bytes"]) > prof.memory_bytes)
    assert plot_partition_algorithms.main([str(tmp_path / "smoke.csv"), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 10_000
