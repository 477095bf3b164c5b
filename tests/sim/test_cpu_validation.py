"""Smoke test of experiments/run_cpu_validation.py --quick: rows for both levels, sidecar with the summary."""
import csv
import json

from experiments import run_cpu_validation


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
    assert json.loads(cache.read_text())["gemm_flops"] > 1e8          # this run measured the profile
    assert "median |error|" in capsys.readouterr().out
