"""Smoke tests of run_throughput.py --quick and its plot: a row per (model, system), rows equal to simulating the
system's program on the engine directly (Ideal: k times one device's iteration; Tofu: its plan at its batch, the
next batch up not fitting), the same rows with --jobs 2 as with one process, figures written."""
import csv
import dataclasses
import json

import pytest

from experiments import plot_throughput, run_throughput
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim import profile
from tofu.sim.engine import simulate
from tofu.sim.program import program_from_plan
from tofu.sim.systems import Options, System, one_device_program

QUICK = dataclasses.replace(profile("k80x8"), memory_bytes=run_throughput.QUICK_DEVICE_BYTES)


def _run(out, *extra):
    assert run_throughput.main(["--quick", "--tag", "smoke", "--out-dir", str(out), "--quiet", *extra]) == 0
    return list(csv.DictReader((out / "smoke.csv").open()))


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("throughput")
    table = _run(out)
    side = json.loads((out / "smoke.json").read_text())
    assert side["args"]["quick"] and side["profile"]["name"] == "k80x8" and side["simulated"]
    return out, table


def test_a_row_per_model_and_system(rows):
    _, table = rows
    assert [(r["model"], r["system"]) for r in table] == [
        (m, s.value) for m in run_throughput.QUICK_MODELS for s in System]
    status = {(r["model"], r["system"]): r["status"] for r in table}
    assert status[("wresnet-tiny", "opplacement")] == "n/a" and status[("rnn-tiny", "opplacement")] == "ok"
    for r in table:
        if r["status"] == "ok":
            assert float(r["seconds"]) >= float(r["busy_seconds"]) > 0
            assert 0 <= float(r["overlap_fraction"]) <= 1
            if r["system"] != "ideal":
                assert int(r["peak_bytes"]) <= int(r["capacity_bytes"]) == run_throughput.QUICK_DEVICE_BYTES


def test_ideal_is_eight_times_one_device_on_the_engine(rows):
    _, table = rows
    for r in (r for r in table if r["system"] == "ideal"):
        b = int(r["batch"])
        ex = simulate(one_device_program(load_graph(r["model"], ModelOptions(batch=b))), QUICK)
        assert float(r["samples_per_second"]) == pytest.approx(8 * b / ex.seconds, rel=1e-5)
        assert int(r["peak_bytes"]) == ex.peak_bytes[0]


def _tofu(model: str, batch: int):
    graph = load_graph(model, ModelOptions(batch=batch))
    return simulate(program_from_plan(graph, plan_graph(graph, 8, "tofu"), Options().sum_cap), QUICK)


def test_tofu_row_is_its_plan_on_the_engine(rows):
    _, table = rows
    for r in (r for r in table if r["system"] == "tofu"):
        b = int(r["batch"])
        ex = _tofu(r["model"], b)
        assert float(r["samples_per_second"]) == pytest.approx(b / ex.seconds, rel=1e-5)
        assert float(r["busy_seconds"]) == pytest.approx(max(ex.busy), rel=1e-5)
        assert float(r["overlap_fraction"]) == pytest.approx(ex.overlap_fraction, abs=1e-4)
        assert int(r["peak_bytes"]) == max(ex.peak_bytes) <= QUICK.memory_bytes
        if b < int(r["ideal_batch"]):                        # twice the batch would not have fitted
            assert max(_tofu(r["model"], 2 * b).peak_bytes) > QUICK.memory_bytes


def test_jobs_give_the_same_rows(rows, tmp_path):
    _, table = rows
    assert _run(tmp_path, "--jobs", "2") == table


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


def test_tofu_start_finds_the_same_batch_with_one_plan(rows, tmp_path):
    out, table = rows
    again = _run(tmp_path, "--systems", "tofu", "--tofu-start", str(out / "smoke.csv"))
    tofu = [r for r in table if r["system"] == "tofu"]
    assert [{**r, "note": ""} for r in again] == [{**r, "note": ""} for r in tofu]
    assert all(r["note"].startswith(f"search started at batch {r['batch']}") for r in again
               if int(r["batch"]) != int(r["ideal_batch"]))
