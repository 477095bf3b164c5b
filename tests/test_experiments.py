"""Smoke tests of the experiment scripts' ``--quick`` runs: they write their CSV (and sidecar) and the rows
say what the scripts promise (every algorithm on the small models; Tofu never moves more than the others)."""
import csv
import json
from collections import defaultdict

import pytest

from experiments import common, plot_search, run_search_time


def test_run_search_time_quick_writes_rows_and_sidecar(tmp_path, capsys):
    assert run_search_time.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert rows and all(r["status"] == "ok" for r in rows)
    assert {r["model"] for r in rows} == {"wresnet-tiny", "rnn-tiny", "mlp"}
    by = defaultdict(dict)
    for r in rows:
        by[(r["model"], r["workers"])][r["algo"]] = float(r["comm_bytes"])
    for costs in by.values():
        assert costs["tofu"] <= min(costs.values())
    sidecar = json.loads((tmp_path / "smoke.json").read_text())
    assert sidecar["args"]["quick"] is True and sidecar["mxnet"] == "1.9.1"
    out = tmp_path / "fig.png"
    assert plot_search.main([str(tmp_path / "smoke.csv"), "--workers", "2", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_run_transformer_quick_writes_rows_and_table(tmp_path, capsys):
    from experiments import run_transformer, table_transformer

    assert run_transformer.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert {(r["model"], r["workers"]) for r in rows} == {("gpt-tiny", "2"), ("gpt-tiny", "4")}
    general = [r for r in rows if not r["algo"].startswith("megatron")]
    assert general and all(r["status"] == "ok" for r in general)
    for k in ("2", "4"):
        costs = {r["algo"]: float(r["comm_bytes"]) for r in general if r["workers"] == k}
        assert costs["tofu"] <= min(costs.values())
    assert all(r["status"] == "ok" or r["message"] for r in rows)
    capsys.readouterr()
    assert table_transformer.main([str(tmp_path / "smoke.csv")]) == 0
    assert "| gpt-tiny | 4 | 2 |" in capsys.readouterr().out


def test_run_transformer_simulates_each_plan_on_the_engine(tmp_path):
    """--simulate: each row's simulated seconds are the engine's iteration of that plan, computed here directly."""
    from experiments import run_transformer
    from tofu.api import load_graph
    from tofu.models import ModelOptions
    from tofu.search.algorithms import plan_graph
    from tofu.sim import profile
    from tofu.sim.engine import simulate
    from tofu.sim.program import MXNET_GRAD_SUM_CAP, program_from_plan

    assert run_transformer.main(["--quick", "--algos", "tofu,megatron-vp", "--shared", "", "--simulate", "v100x8",
                                 "--tag", "sim", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "sim.csv").open()))
    assert len(rows) == 4 and all(r["status"] == "ok" and r["simulated_profile"] == "v100x8" for r in rows)
    for r in rows:
        graph = load_graph("gpt-tiny", ModelOptions(batch=int(r["batch"])))
        plan = plan_graph(graph, int(r["workers"]), r["algo"])
        want = simulate(program_from_plan(graph, plan, MXNET_GRAD_SUM_CAP), profile("v100x8")).seconds
        assert float(r["simulated_seconds"]) == pytest.approx(want, rel=1e-5)


def test_plot_plan_draws_two_plans_and_refuses_bad_input(tmp_path, capsys):
    from experiments import plot_plan
    from tofu.cli import main as tofu_main

    paths = []
    for algo in ("tofu", "megatron"):
        paths.append(str(tmp_path / f"{algo}.json"))
        assert tofu_main(["plan", "gpt-tiny", "--batch", "4", "--workers", "4", "--algo", algo,
                          "--out", paths[-1]]) == 0
    import json

    from tofu.figures import plan_columns

    tofu_cols = plan_columns(json.loads((tmp_path / "tofu.json").read_text())).columns
    megatron_cols = plan_columns(json.loads((tmp_path / "megatron.json").read_text())).columns
    assert [c.factor for c in tofu_cols] == [2, 2] and [c.factor for c in megatron_cols] == [4]
    # the second cut sees the shapes the first left: a tensor the first cut split is half as long there
    for name, d in tofu_cols[0].dims.items():
        if d is not None:
            assert tofu_cols[1].shapes[name][d] * 2 == tofu_cols[0].shapes[name][d]
    out = tmp_path / "plan.png"
    assert plot_plan.main([*paths, "--tensors", "^block0_", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    (tmp_path / "bad.json").write_text("{}")
    assert plot_plan.main([str(tmp_path / "bad.json"), "--out", str(out)]) == 2
    assert plot_plan.main([*paths, "--tensors", "^nothing", "--out", str(out)]) == 2
    assert "no tensor" in capsys.readouterr().err


def test_run_bulking_binds_each_setting_and_refuses_a_bad_case(tmp_path, capsys):
    """One row per bulking setting, each a median of the same graph's steps, the first the reference; a case
    that is not model:workers:plan:batch is a usage error (exit 2)."""
    from experiments import run_bulking, table_bulking

    assert run_bulking.main(["--cases", "mlp:2:data-parallel:16", "--seconds", "0.1", "--tag", "b",
                             "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "b.csv").open()))
    assert [r["bulking"] for r in rows] == ["off", "15", "60"]
    assert float(rows[0]["over_off"]) == 1.0 and all(float(r["seconds"]) > 0 and int(r["steps"]) >= 15 for r in rows)
    for r in rows[1:]:
        assert float(r["over_off"]) == pytest.approx(float(r["seconds"]) / float(rows[0]["seconds"]))
    assert "| mlp | 16 | 2 | data-parallel |" in table_bulking.render([rows])
    assert json.loads((tmp_path / "b.json").read_text())["source"].startswith("re-run: ")
    with pytest.raises(SystemExit) as e:
        run_bulking.main(["--cases", "mlp:two:tofu:16", "--out-dir", str(tmp_path)])
    assert e.value.code == 2 and "expected model:workers:plan:batch" in capsys.readouterr().err


def test_run_context_concurrency_times_each_count_of_contexts_and_refuses_an_unknown_kind(tmp_path, capsys):
    """One row per (kind, mode, contexts), each a median of its own executor's passes; ``effective`` is
    c x t(1) / t(c) of the same kind and mode, and 1 at one context; the table prints it; an unknown kind is a
    usage error (exit 2)."""
    from experiments import run_context_concurrency, table_context_concurrency

    assert run_context_concurrency.main(["--kinds", "tiny-ops", "--contexts", "1,2", "--seconds", "0.1",
                                         "--tag", "c", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert [(r["mode"], r["contexts"]) for r in rows] == [("round-robin", "1"), ("round-robin", "2"),
                                                          ("alone", "1"), ("alone", "2")]
    for one, two in (rows[:2], rows[2:]):
        assert float(one["effective"]) == 1.0 and int(one["steps"]) >= 10 and int(two["steps"]) >= 10
        assert float(two["effective"]) == pytest.approx(2 * float(one["seconds"]) / float(two["seconds"]))
        assert float(two["per_chain_seconds"]) == pytest.approx(float(two["seconds"]) / 2)
    assert f"({float(rows[1]['effective']):.2f})" in table_context_concurrency.render([rows])
    assert json.loads((tmp_path / "c.json").read_text())["source"].startswith("re-run: ")
    with pytest.raises(SystemExit) as e:
        run_context_concurrency.main(["--kinds", "fft", "--out-dir", str(tmp_path)])
    assert e.value.code == 2 and "unknown kind 'fft'" in capsys.readouterr().err


def test_run_update_cost_counts_each_parameter_shards_update_and_refuses_an_unknown_model(tmp_path, capsys):
    """One row per (model, k): one update per parameter shard (every parameter of mlp has a piece on each of the
    k contexts under the tofu plan), the increment per update from the row's own medians; the table prints it; an
    unknown model is a usage error (exit 2)."""
    from experiments import run_update_cost, table_update_cost
    from tofu.api import load_graph
    from tofu.graph.ir import Role
    from tofu.models import ModelOptions

    assert run_update_cost.main(["--models", "mlp:8", "--workers", "1,2", "--seconds", "0.1", "--tag", "u",
                                 "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "u.csv").open()))
    params = len(load_graph("mlp", ModelOptions(batch=8)).by_role(Role.PARAM))
    assert [(r["workers"], int(r["updates"])) for r in rows] == [("1", params), ("2", 2 * params)]
    for r in rows:
        added = (float(r["step_seconds"]) - float(r["passes_seconds"])) / int(r["updates"])
        assert float(r["increment_per_update"]) == pytest.approx(added, rel=1e-4, abs=1e-9)
        assert int(r["steps"]) >= 10 and float(r["host_per_update"]) > 0
    assert f"{float(rows[1]['increment_per_update']) * 1e6:.1f}" in table_update_cost.render([rows])
    assert json.loads((tmp_path / "u.json").read_text())["source"].startswith("re-run: ")
    with pytest.raises(SystemExit) as e:
        run_update_cost.main(["--models", "nosuchnet:8", "--out-dir", str(tmp_path)])
    assert e.value.code == 2 and "nosuchnet" in capsys.readouterr().err


def test_bench_runtime_versions_times_both_trees_and_refuses_a_malformed_case(tmp_path, capsys):
    """Against this very revision (HEAD) both trees partition mlp alike: the same op count and outputs, one row
    per tree with its median step among its own steps; a case that is not model:batch:k:algo exits 2."""
    from experiments import bench_runtime_versions as bench

    assert bench.main(["--against", "HEAD", "--cases", "mlp:8:2:tofu", "--seconds", "0.1", "--tag", "b",
                       "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "b.csv").open()))
    assert [r["tree"] for r in rows] == ["against", "this"] and all(r["status"] == "ok" for r in rows)
    assert rows[0]["ops"] == rows[1]["ops"] and float(rows[1]["output_difference"]) == 0.0
    for r in rows:
        assert int(r["steps"]) >= bench.MIN_STEPS
        assert float(r["p25_seconds"]) <= float(r["seconds"]) <= float(r["p75_seconds"])
    assert float(rows[1]["over_against"]) == pytest.approx(float(rows[1]["seconds"]) / float(rows[0]["seconds"]),
                                                         rel=1e-3)
    assert json.loads((tmp_path / "b.json").read_text())["source"].startswith("re-run: ")
    assert bench.main(["--against", "HEAD", "--cases", "mlp:8:two:tofu", "--out-dir", str(tmp_path)]) == 2
    assert "mlp:8:two:tofu" in capsys.readouterr().err


def test_step_stability_statistics_match_numpy():
    """The windows' medians, the percentiles and the fraction below the prediction, against numpy on a step
    series whose windows differ (one window 3x the others)."""
    import numpy as np

    from experiments import run_step_stability

    rng = np.random.default_rng(7)
    steps = list(rng.uniform(1.0, 2.0, 40) * np.repeat([1.0, 3.0, 1.0, 1.0], 10))
    row = run_step_stability.step_statistics(steps, 10, 1.5)
    windows = np.median(np.array(steps).reshape(4, 10), axis=1)
    assert row["steps"] == 40 and row["windows"] == 4
    assert row["median_seconds"] == pytest.approx(np.median(steps))
    assert row["p10_seconds"] == pytest.approx(np.percentile(steps, 10))
    assert row["p90_seconds"] == pytest.approx(np.percentile(steps, 90))
    assert row["fastest_window_seconds"] == pytest.approx(windows.min())
    assert row["slowest_window_seconds"] == pytest.approx(windows[1])
    assert row["wander"] == pytest.approx(windows.max() / windows.min()) and row["wander"] > 2
    assert row["faster_than_predicted"] == pytest.approx(np.mean(np.array(steps) < 1.5))


def test_run_step_stability_writes_a_row_per_case_and_refuses_bad_input(tmp_path, capsys):
    """One row per (case, k) with windows x window-steps steps, the engine's iteration of the same plan beside
    it; the table prints it; an unknown model, a malformed case and a core the machine lacks are usage errors
    (exit 2); ``pin`` pins every thread of the process."""
    import os

    from experiments import run_step_stability, table_step_stability
    from tofu.api import load_graph
    from tofu.models import ModelOptions
    from tofu.search.algorithms import plan_graph
    from tofu.sim import profile
    from tofu.sim.engine import simulate_iteration

    assert run_step_stability.main(["--cases", "mlp:16", "--workers", "1,2", "--windows", "2", "--window-steps",
                                    "3", "--tag", "s", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert [(r["model"], r["workers"], r["steps"], r["windows"], r["cpus"]) for r in rows] == [
        ("mlp", "1", "6", "2", "all"), ("mlp", "2", "6", "2", "all")]
    graph = load_graph("mlp", ModelOptions(batch=16))
    for r in rows:
        sim = simulate_iteration(graph, plan_graph(graph, int(r["workers"]), "tofu"), profile("cpu"), from_symbol=True)
        assert float(r["predicted_seconds"]) == pytest.approx(sim.seconds)
        assert float(r["fastest_window_seconds"]) <= float(r["slowest_window_seconds"])
    assert "| mlp | 16 | 2 | tofu | all |" in table_step_stability.render([rows])
    assert json.loads((tmp_path / "s.json").read_text())["source"].startswith("re-run: ")
    for bad, says in ((["--cases", "vgg:4"], "unknown model 'vgg'"), (["--cases", "mlp"], "MODEL:BATCH"),
                      (["--cpus", "99"], "--cpus '99'")):
        with pytest.raises(SystemExit) as e:
            run_step_stability.main([*bad, "--out-dir", str(tmp_path)])
        assert e.value.code == 2 and says in capsys.readouterr().err
    saved = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
    try:
        one = {min(os.sched_getaffinity(0))}
        common.pin(one)
        assert all(os.sched_getaffinity(int(t)) == one for t in os.listdir("/proc/self/task"))
    finally:
        for t, cpus in saved.items():
            try:
                os.sched_setaffinity(t, cpus)
            except ProcessLookupError:      # a thread that ended meanwhile
                pass


def test_run_op_profile_counts_each_ops_calls_as_the_engine_does_and_refuses_bad_input(tmp_path, capsys):
    """MXNet's profiler sees as many FullyConnected calls (forward and backward) per step of mlp on two contexts
    as the engine's program has tasks of those ops; the step row holds both times; bad input exits 2."""
    from experiments import run_op_profile

    assert run_op_profile.main(["mlp", "--batch", "16", "--workers", "2", "--steps", "3", "--tag", "ops",
                                "--out-dir", str(tmp_path)]) == 0
    rows = {r["op"]: r for r in csv.DictReader((tmp_path / "ops.csv").open())}
    step = rows[run_op_profile.STEP]
    assert float(step["measured_seconds"]) > 0 and float(step["simulated_seconds"]) > 0
    for op in ("FullyConnected", "_backward_FullyConnected"):
        assert float(rows[op]["simulated_calls"]) > 0
        assert float(rows[op]["measured_calls"]) == float(rows[op]["simulated_calls"]), rows[op]
    assert json.loads((tmp_path / "ops.json").read_text())["args"]["model"] == "mlp"
    assert run_op_profile.main(["no-such-model", "--out-dir", str(tmp_path)]) == 2
    with pytest.raises(SystemExit) as e:
        run_op_profile.main(["mlp", "--workers", "5"])
    assert e.value.code == 2


def test_run_plan_splits_writes_each_plans_cuts_and_megatrons_dimensions(tmp_path):
    from experiments import run_plan_splits
    from tofu.api import load_graph
    from tofu.models import ModelOptions
    from tofu.search.algorithms import plan_graph

    out = tmp_path / "splits.csv"
    assert run_plan_splits.main(["--model", "gpt-tiny", "--batch", "8", "--workers", "2", "--block", "1",
                                 "--out", str(out)]) == 0
    rows = {r["tensor"]: r for r in csv.DictReader(out.open())}
    assert list(rows) == list(run_plan_splits.TENSORS)
    graph = load_graph("gpt-tiny", ModelOptions(batch=8))
    dims = dict(plan_graph(graph, 2, "tofu").steps[0].tensor_dims)
    for role, row in rows.items():
        want = dims[f"block1_{role}"]
        assert row["tofu_cuts"] == ("-" if want is None else str(want)), role
    # Megatron-LM's split (Shoeybi et al. 2019): q and fc1 by output features, the attention by heads (dimension 1
    # of (batch, heads, seq, d)), proj and fc2 by input features, the residual stream by the sequence
    assert {r: rows[r]["megatron_cuts"] for r in ("q_weight", "q_output", "q_front_output", "probs_output",
                                                  "proj_weight", "fc1_weight", "fc2_weight", "attn_add_output")} == \
        {"q_weight": "0", "q_output": "2", "q_front_output": "1", "probs_output": "1", "proj_weight": "1",
         "fc1_weight": "0", "fc2_weight": "1", "attn_add_output": "1"}
    assert json.loads(out.with_suffix(".json").read_text())["source"].startswith("re-run: ")
    assert run_plan_splits.main(["--model", "gpt-tiny", "--block", "7", "--workers", "2",
                                 "--out", str(tmp_path / "x.csv")]) == 2


def test_run_calibration_aftereffect_times_each_work_in_its_own_process_and_refuses_bad_input(tmp_path, capsys,
                                                                                              monkeypatch):
    """``--quick``: the sleeping process's rows, one per phase, each ratio its median over the one before; the
    table prints them; the work ``calibrate`` runs the calibration between the phases (here a stand-in that takes
    0.1 s); a malformed case and an unknown work are usage errors (exit 2)."""
    import time

    from experiments import run_calibration_aftereffect as after
    from experiments import table_calibration_aftereffect
    from tofu.sim import calibrate

    assert after.main(["--quick", "--tag", "a", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    assert [(r["work"], r["model"], r["phase"]) for r in rows] == [
        ("sleep", "mlp", "before"), ("sleep", "mlp", "after"), ("sleep", "mlp", "after, new")]
    before = float(rows[0]["median_seconds"])
    for r in rows:
        assert float(r["ratio_to_before"]) == pytest.approx(float(r["median_seconds"]) / before, rel=1e-4)
        assert int(r["steps"]) >= 10 and float(r["work_seconds"]) >= 0.2
    assert f"{float(rows[1]['median_seconds']) * 1e3:.3g} ({float(rows[1]['ratio_to_before']):.2f}x)" in \
        table_calibration_aftereffect.render([rows])
    assert json.loads((tmp_path / "a.json").read_text())["source"].startswith("re-run: ")

    measured = []
    monkeypatch.setattr(calibrate, "measure", lambda: measured.append(time.sleep(0.1)))
    got = after.one("calibrate", [("mlp", 8, 1)], 0.05, None)
    assert measured and [r["phase"] for r in got] == list(after.PHASES) and got[0]["work_seconds"] >= 0.1

    for bad in (["--cases", "mlp:8"], ["--cases", "nosuchnet:8:1"], ["--works", "nap"]):
        with pytest.raises(SystemExit) as e:
            after.main([*bad, "--out-dir", str(tmp_path)])
        assert e.value.code == 2 and bad[1].split(":")[0] in capsys.readouterr().err
