"""Smoke tests of run_throughput.py --quick and its plot: a row per (model, system), Ideal equal to k times one
device's throughput computed directly, Tofu's row equal to simulating its plan at its batch, figures written."""
import csv
import dataclasses
import json

import pytest

from experiments import plot_throughput, run_throughput
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.baselines import System
from tofu.sim.glue import glue_from_plan
from tofu.sim.hardware import K80X8
from tofu.sim.model import simulate


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("throughput")
    assert run_throughput.main(["--quick", "--tag", "smoke", "--out-dir", str(out)]) == 0
    side = json.loads((out / "smoke.json").read_text())
    assert side["args"]["quick"] and side["profile"]["name"] == "k80x8" and side["simulated"]
    return out, list(csv.DictReader((out / "smoke.csv").open()))


def test_a_row_per_model_and_system(rows):
    _, table = rows
    assert [(r["model"], r["system"]) for r in table] == [
        (m, s.value) for m in run_throughput.QUICK_MODELS for s in System]
    status = {(r["model"], r["system"]): r["status"] for r in table}
    assert status[("wresnet-tiny", "opplacement")] == "n/a" and status[("rnn-tiny", "opplacement")] == "ok"
    for r in table:
        if r["status"] == "ok" and r["system"] != "ideal":
            assert int(r["per_device_bytes"]) <= int(r["capacity_bytes"]) == run_throughput.QUICK_DEVICE_BYTES


def test_ideal_is_eight_times_one_device(rows):
    _, table = rows
    for r in (r for r in table if r["system"] == "ideal"):
        graph = load_graph(r["model"], ModelOptions(batch=int(r["batch"])))
        one = simulate(graph, plan_graph(graph, 1, "tofu"), K80X8)
        assert float(r["samples_per_second"]) == pytest.approx(8 * one.samples_per_second, rel=1e-5)


def test_tofu_row_is_its_plan_simulated(rows):
    _, table = rows
    prof = dataclasses.replace(K80X8, memory_bytes=run_throughput.QUICK_DEVICE_BYTES)
    for r in (r for r in table if r["system"] == "tofu"):
        b = int(r["batch"])
        graph = load_graph(r["model"], ModelOptions(batch=b))
        plan = plan_graph(graph, 8, "tofu")
        est = simulate(graph, plan, prof, glue=glue_from_plan(graph, plan))
        assert float(r["samples_per_second"]) == pytest.approx(est.samples_per_second, rel=1e-5)
        if b < int(r["ideal_batch"]):                        # twice the batch would not have fitted
            bigger = load_graph(r["model"], ModelOptions(batch=2 * b))
            assert dict(plan_graph(bigger, 8, "tofu").per_device_bytes)["total"] > prof.memory_bytes


def test_plot(rows, tmp_path):
    out, _ = rows
    assert plot_throughput.main([str(out / "smoke.csv"), "--out", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").stat().st_size > 10_000


def test_summary_is_each_systems_throughput_over_ideals(rows):
    _, table = rows
    lines = plot_throughput.summary(table)
    for line in lines[1:]:
        model, *cells = line.split()
        ideal = next(r for r in table if r["model"] == model and r["system"] == "ideal")
        for r in (r for r in table if r["model"] == model):
            if r["status"] == "ok":
                ratio = float(r["samples_per_second"]) / float(ideal["samples_per_second"])
                assert f"{ratio:.2f}" in line and f"(b={r['batch']})" in line
            else:
                assert r["status"].upper() in line
    assert [ln.split()[0] for ln in lines[1:]] == list(run_throughput.QUICK_MODELS)
