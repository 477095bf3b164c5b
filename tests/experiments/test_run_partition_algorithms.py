"""Smoke test of run_partition_algorithms.py --quick and its plot: every algorithm has a row, compute plus
communication is the time per batch, the ideal compute is one device's divided by the devices."""
import csv
import dataclasses

import pytest

from experiments import plot_partition_algorithms, run_partition_algorithms
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import GENERAL_ALGORITHMS, plan_graph
from tofu.sim.hardware import K80X8
from tofu.sim.model import simulate


def test_quick_rows_and_plot(tmp_path):
    assert run_partition_algorithms.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "smoke.json").exists()
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    cases = run_partition_algorithms.QUICK_CASES
    assert [(r["model"], r["algo"]) for r in rows] == [(m, a) for m in cases for a in GENERAL_ALGORITHMS]
    prof = dataclasses.replace(K80X8, devices=run_partition_algorithms.QUICK_WORKERS)
    for model, batch in cases.items():
        graph = load_graph(model, ModelOptions(batch=batch))
        ideal = simulate(graph, plan_graph(graph, 1, "tofu"), prof).compute_seconds / prof.devices
        for r in (r for r in rows if r["model"] == model):
            assert r["status"] in ("ok", "oom")
            assert float(r["ideal_compute_seconds"]) == pytest.approx(ideal, rel=1e-5)
            assert float(r["seconds"]) == pytest.approx(float(r["compute_seconds"]) + float(r["comm_seconds"]),
                                                        rel=1e-4)
            assert float(r["compute_seconds"]) >= float(r["ideal_compute_seconds"])
            assert (r["status"] == "oom") == (int(r["per_device_bytes"]) > prof.memory_bytes)
    assert plot_partition_algorithms.main([str(tmp_path / "smoke.csv"), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 10_000
