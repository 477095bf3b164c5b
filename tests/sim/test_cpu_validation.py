"""Smoke test of experiments/run_cpu_validation.py --quick: rows for both levels, sidecar with the summary."""
import csv
import json
import math

import pytest

from experiments import run_cpu_validation
from tofu.sim import calibrate
from tofu.sim.flops import OpClass


def test_quick_writes_rows_and_sidecar(tmp_path, capsys):
    cache = tmp_path / "cpu.json"
    assert run_cpu_validation.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path),
                                    "--calibration", str(cache)]) == 0
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert {r["level"] for r in rows} == {"op", "step"}
    assert all(r["status"] == "ok" for r in rows), [r["message"] for r in rows]
    for r in rows:
        measured, predicted = float(r["measured_seconds"]), float(r["predicted_seconds"])
        assert measured > 0 and predicted > 0
        assert abs(float(r["relative_error"]) - (predicted / measured - 1)) < 1e-4
    side = json.loads((tmp_path / "smoke.json").read_text())
    assert side["summary"]["op"]["cases"] == 3 and side["summary"]["step"]["cases"] == 2
    cal = json.loads(cache.read_text())                               # this run measured the profile
    assert cal["gemm_flops"] > 1e8 and cal["version"] == calibrate.VERSION
    assert set(cal["classes"]) == {c.value for c in OpClass}
    assert all(f["rate"] > 0 and f["launch"] >= 0 for f in cal["classes"].values())
    assert "median |error|" in capsys.readouterr().out


def test_a_cache_of_another_version_is_measured_again(tmp_path, monkeypatch):
    cache = tmp_path / "cpu.json"
    cache.write_text(json.dumps({"version": calibrate.VERSION - 1, "gemm_flops": 1.0}))
    measured = []
    monkeypatch.setattr(calibrate, "measure", lambda repeats: measured.append(repeats) or _FAKE)
    assert calibrate.calibration(cache) is _FAKE and measured
    assert calibrate.calibration(cache) == _FAKE and len(measured) == 1       # now cached, read back


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


_FAKE = calibrate.Calibration(
    1e10, 1e10, 1e9, 1e-6, 1e-5, 1e-5,
    {c.value: calibrate.ClassFit("compute" if c.contraction else "memory", 1e9, 1e-6, 3, 0.1) for c in OpClass},
    1e9, __import__("platform").node(), __import__("os").cpu_count() or 1, 3)
