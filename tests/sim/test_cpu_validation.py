"""experiments/run_cpu_validation.py: the engine against measured training steps on this CPU (a small subset,
measured for real), the summary's ranking agreement, the ``--quick`` smoke run; and the calibration's fits."""
import csv
import dataclasses
import json
import math

import pytest

from experiments import run_cpu_validation, table_cpu_validation
from tofu.sim import calibrate
from tofu.sim.flops import OpClass


def test_mlp_steps_measured_beside_the_engine(tmp_path):
    """mlp at k = 1 and 2, measured and simulated independently: every plan's simulated iteration within a factor
    3 of its measured median step (docs/sim.md, "CPU validation": the engine is 15-60% under on this machine),
    and the engine charging the two-context plans their copies and glue (slower than one context). Whether the
    measurement agrees on that order is not asserted per case: the steps are 0.3-0.7 ms, and two runs of the suite
    here measured two contexts faster than one (0.45 against 0.49 ms, 0.35 against 0.47 ms; the 2-core host runs
    their kernels in parallel); the validation table's ranking agreement counts such pairs over all cases."""
    from tofu.sim import profile

    prof = profile("cpu")
    one = run_cpu_validation.step_rows("mlp", 16, 1, ["tofu"], 0.5, prof, tmp_path)
    two = run_cpu_validation.step_rows("mlp", 16, 2, ["tofu", "data-parallel"], 0.5, prof, tmp_path)
    rows = one + two
    assert [r["status"] for r in rows] == ["ok"] * 3, [r.get("message") for r in rows]
    for r in rows:
        assert r["steps"] >= run_cpu_validation.MIN_STEPS
        assert r["predicted_seconds"] / r["measured_seconds"] == pytest.approx(1 + r["relative_error"])
        assert 1 / 3 < r["predicted_seconds"] / r["measured_seconds"] < 3, r
    assert one[0]["copies"] == 0 and all(r["copies"] > 0 for r in two)
    for r in two:
        assert r["predicted_seconds"] > one[0]["predicted_seconds"]


def _row(plan, predicted, measured, k=2):
    return {"level": "step", "status": "ok", "model": "m", "batch": 4, "workers": k, "plan": plan,
            "predicted_seconds": predicted, "measured_seconds": measured, "relative_error": predicted / measured - 1}


def test_ranking_counts_pairs_of_one_configuration_and_leaves_out_ties():
    rows = [_row("a", 1.0, 2.0), _row("b", 2.0, 3.0), _row("c", 3.0, 2.5),      # a<b agree, a<c agree, b<c not
            _row("d", 3.0, 9.0),                                                  # c = d simulated: a tie
            _row("a", 1.0, 5.0, k=4), _row("a", 9.0, 1.0, k=1)]                 # alone in its group; k = 1
    r = table_cpu_validation.ranking(rows)
    assert (r["pairs"], r["agree"], r["ties"]) == (5, 4, 1)     # a-b, a-c, a-d, b-c, b-d; c-d tied
    assert r["agreement"] == pytest.approx(4 / 5)
    assert r["disagreements"] == ["m b=4 k=2: b vs c"]


def test_summary_and_tables_render_from_csv_rows():
    rows = [{**{k: str(v) for k, v in _row("a", 1.0, 2.0).items()}, "status": "ok"},
            {**{k: str(v) for k, v in _row("b", 2.0, 3.0).items()}, "status": "ok"},
            {**{k: str(v) for k, v in _row("c", 1.0, 1.0).items()}, "status": "error", "relative_error": ""}]
    s = table_cpu_validation.summary(rows)["step"]
    assert (s["cases"], s["failed"]) == (2, 1) and s["median_abs_relative_error"] == pytest.approx((0.5 + 1 / 3) / 2)
    steps = table_cpu_validation.render_steps([rows])
    assert "| m | 4 | 2 | 2000 / 1000 (-50%) | 3000 / 2000 (-33%) | error |" in steps
    assert "1 / 1 (100%), 0 tied" in table_cpu_validation.render_summary([rows])


def test_round_robin_runs_every_step_alike():
    calls = []
    times = run_cpu_validation.measure_round_robin([lambda: calls.append("a") or 1.0,
                                                    lambda: calls.append("b") or 2.0], 0.0, min_steps=3)
    assert calls == ["a", "b"] * 3 and times == [[1.0] * 3, [2.0] * 3]


def test_quick_writes_rows_and_sidecar(tmp_path, capsys):
    assert run_cpu_validation.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert {r["level"] for r in rows} == {"op", "step"}
    assert all(r["status"] == "ok" for r in rows), [r["message"] for r in rows]
    for r in rows:
        measured, predicted = float(r["measured_seconds"]), float(r["predicted_seconds"])
        assert measured > 0 and predicted > 0
        assert abs(float(r["relative_error"]) - (predicted / measured - 1)) < 1e-4
    steps = [r for r in rows if r["level"] == "step"]
    assert sorted((int(r["workers"]), r["plan"]) for r in steps) == [
        (1, "tofu"), (2, "data-parallel"), (2, "spartan"), (2, "tofu")]
    side = json.loads((tmp_path / "smoke.json").read_text())
    summary = side["summary"]
    assert summary["op"]["cases"] == 3 and summary["step"]["cases"] == 4
    ranking = summary["step"]["ranking"]
    assert ranking["pairs"] + ranking["ties"] == 3 and 0 <= ranking["agree"] <= ranking["pairs"]
    assert side["profile"]["name"] == "cpu"
    assert "ranking agreement" in capsys.readouterr().out


@pytest.mark.parametrize("cpus", ["99", "0,x", ""])
def test_cores_that_are_not_this_process_s_are_refused(tmp_path, capsys, cpus):
    with pytest.raises(SystemExit) as e:
        run_cpu_validation.main(["--quick", "--cpus", cpus, "--out-dir", str(tmp_path)])
    assert e.value.code == 2 and f"--cpus '{cpus}': cores of" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())          # refused before anything is measured or written


# ------------------------------------------------------------------------------------------ the calibration

def test_a_cache_of_another_version_is_measured_again(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cpu.json"
    cache.write_text(json.dumps({"version": calibrate.VERSION - 1, "gemm_flops": 1.0}))
    measured = []
    monkeypatch.setattr(calibrate, "measure", lambda repeats: measured.append(repeats) or _FAKE)
    assert calibrate.calibration(cache) is _FAKE and measured
    assert "measuring this machine's cpu profile" in capsys.readouterr().err     # minutes: it says so
    assert calibrate.calibration(cache) == _FAKE and len(measured) == 1       # now cached, read back
    assert capsys.readouterr().err == ""


def test_fit_recovers_rate_and_launch():
    points = [(0.5 + 2 * 3e-6 + x / 2e9, 0.5, 2, x) for x in (1e6, 1e7, 1e8)]
    rate, launch = calibrate.fit_rate(points)
    assert rate == pytest.approx(2e9, rel=1e-6) and launch == pytest.approx(3e-6, rel=1e-4)


@pytest.mark.parametrize("points, max_rate", [
    # time falls as work grows (noise): the unconstrained fit has 1/R < 0, which crashed CI once
    ([(2e-3, 2e-4, 2, 1e6), (1e-3, 2e-4, 2, 5e6), (1.5e-3, 2e-4, 2, 3e6)], math.inf),
    ([(7.8e-4, 1.9e-4, 2, 1.57e6), (4.8e-4, 1.9e-4, 2, 1.57e6), (1.2e-2, 1.9e-4, 2, 6.29e6)], math.inf),
    ([(2e-3, 2e-4, 2, 1e6), (1e-3, 2e-4, 2, 5e6)], 1e10),
    ([(0.5 + 2 * 3e-6 + x / 2e9, 0.5, 2, x) for x in (1e6, 1e7, 1e8)], 1e9),
])
def test_fit_is_the_constrained_least_squares_optimum(points, max_rate):
    """Against a brute-force search over a grid of (L, 1/R) with L >= 0, 0 < 1/R, R <= max_rate."""
    import numpy as np

    def loss(launch, inv):
        return sum(((c + n * launch + x * inv) / t - 1) ** 2 for t, c, n, x in points)

    rate, launch = calibrate.fit_rate(points, max_rate)
    assert 0 < rate <= max_rate and launch >= 0
    t_max = max(p[0] for p in points)
    x_min = min(p[3] for p in points)
    best = min(loss(la, inv) for la in np.linspace(0, t_max, 401)
               for inv in np.linspace(1 / max_rate if max_rate < math.inf else 0, 2 * t_max / x_min, 401)[1:])
    assert loss(launch, 1 / rate) <= best + 1e-9


def test_the_per_task_calibration_graph_is_not_a_validation_model():
    names = {calibrate.glue_net(d).name for d in (*calibrate.TASK_DEPTHS, *calibrate.BULK_DEPTHS)}
    assert not names & set(run_cpu_validation.MODELS)
    assert all(name.startswith("calibration-glue-") for name in names)
    assert 1 not in calibrate.TASK_WORKERS            # a multi-context graph: one context bulks its ops


def test_per_task_fit_recovers_the_slope():
    points = [calibrate.TaskPoint(d, 2, "tofu", n, 1e-4 + n * 5e-6 + s, s)
              for d, n, s in ((4, 100, 1e-3), (16, 400, 3e-3), (32, 900, 5e-3))]
    assert calibrate.fit_task_seconds(points) == pytest.approx(5e-6)
    flat = [dataclasses.replace(p, measured_seconds=p.simulated_seconds) for p in points]
    assert calibrate.fit_task_seconds(flat) == pytest.approx(0.0, abs=1e-12)


def test_the_joint_fit_recovers_the_per_task_cost_and_the_copys_latency():
    """t - s = c + n p + m (L - L0): s simulated with the two-op latency L0 = 15 us, the truth p = 3 us, L = 4 us."""
    l0, p, lat = 15e-6, 3e-6, 4e-6
    points = [calibrate.TaskPoint(d, w, "tofu", n, 1e-4 + n * p + m * (lat - l0) + s, s, m)
              for d, w, n, m, s in ((4, 2, 141, 20, 1e-3), (16, 2, 429, 40, 3e-3), (4, 4, 589, 150, 3e-3),
                                    (32, 4, 3669, 700, 2e-2))]
    assert calibrate.fit_task_and_copy_seconds(points, l0) == pytest.approx((p, lat))
    # a latency the data puts below 0 is held at 0, and p stays >= 0
    slow = [dataclasses.replace(q, measured_seconds=q.simulated_seconds - q.copies * 2 * l0) for q in points]
    fitted_p, fitted_l = calibrate.fit_task_and_copy_seconds(slow, l0)
    assert fitted_l == pytest.approx(0.0, abs=1e-12) and fitted_p >= 0.0


def test_the_bulked_cost_is_the_profile_s_and_none_keeps_the_per_task_cost():
    cal = dataclasses.replace(_FAKE, task_seconds=5e-6, bulk_task_seconds=2e-6)
    assert (cal.profile().task_seconds, cal.profile().bulk_task_seconds) == (5e-6, 2e-6)
    assert dataclasses.replace(cal, bulk_task_seconds=None).profile().bulk_task_seconds is None
    doc = json.loads(json.dumps(dataclasses.asdict(cal)))
    assert calibrate.Calibration.from_json(doc).bulk_task_seconds == 2e-6


_FAKE = calibrate.Calibration(
    1e10, 1e10, 1e9, 1e-6, 1e-5, 1e-5,
    {c.value: calibrate.ClassFit("compute" if c.contraction else "memory", 1e9, 1e-6, 3, 0.1) for c in OpClass},
    1e9, __import__("platform").node(), __import__("os").cpu_count() or 1, 3)


# ----------------------------------------------------------------------------- the committed validation run

TARGETS = {"median": 0.15, "worst": 0.35, "ranking": 0.90}       # issue 21, item 4


def _committed_rows(name="cpu_validation.csv"):
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "results" / "sim" / name
    return list(csv.DictReader(path.open()))


def _committed_summary(name="cpu_validation.csv"):
    summary = table_cpu_validation.summary(_committed_rows(name))["step"]
    assert summary["cases"] >= 60 and summary["failed"] == 0      # the whole validation, not a quick run
    return summary


@pytest.mark.parametrize("name", ["cpu_validation.csv", "cpu_validation-one-core.csv"])
def test_the_committed_validation_ranks_plans_at_least_as_well_as_counting_their_tasks(name):
    """docs/sim.md's validation tables (the committed run on both cores, and the one pinned to one core; recomputed
    here from their rows): the engine ranks the pairs of plans as measured at least as often as the simplest
    predictor, fewer tasks faster (each over the pairs it does not tie). On this validation set counting tasks
    alone ranks 83-93% of the pairs right (docs/sim.md), so the 90% target alone does not tell the engine from it."""
    rows = _committed_rows(name)
    engine, tasks = _committed_summary(name)["ranking"], table_cpu_validation.ranking(rows, by="tasks")
    assert engine["pairs"] >= 40 and tasks["pairs"] >= 40
    assert engine["agreement"] >= tasks["agreement"], (engine["disagreements"], tasks["disagreements"])


def test_the_committed_validation_meets_the_ranking_target():
    """Issue 21's ranking target on the committed one-core run, which every one-core run of calibrate v11 but one
    met (docs/sim.md, 'CPU validation')."""
    assert _committed_summary("cpu_validation-one-core.csv")["ranking"]["agreement"] >= TARGETS["ranking"]


@pytest.mark.xfail(strict=True, reason="issue 21, open: the committed one-core run of 2026-12-08 (tree 137f786, the "
                   "host's CPU then about twice as fast as in the earlier runs) misses both error targets, the engine "
                   "fast on 67 of 70 steps (docs/sim.md, 'CPU validation')")
def test_the_committed_validation_meets_the_error_targets():
    """Issue 21's median and worst-case targets on the committed one-core run (met by the run of 2026-12-05, on
    another tree and a slower CPU; not by the committed one of 2026-12-08). Strict: a committed run that meets
    them turns this into a failure, to be made a plain assertion again."""
    s = _committed_summary("cpu_validation-one-core.csv")
    assert s["median_abs_relative_error"] <= TARGETS["median"]
    assert s["worst_abs_relative_error"] <= TARGETS["worst"]
