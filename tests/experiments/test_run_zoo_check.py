"""Smoke test of experiments/run_zoo_check.py --quick: a Gluon network exported, planned and trained partitioned,
its measured bytes and check against independent counts (MXNet's copies, one device)."""
import csv

from experiments import run_zoo_check


def test_quick_exports_plans_and_checks_a_gluon_network(tmp_path, capsys):
    assert run_zoo_check.main(["--quick", "--tag", "smoke", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "smoke.csv").open()))
    assert [(r["net"], r["stage"], r["workers"]) for r in rows] == [("resnet18_v1", "plan", "2"),
                                                                     ("resnet18_v1", "train", "2")]
    assert all(r["status"] == "ok" for r in rows), [r["message"] for r in rows]
    train = rows[1]
    assert int(train["measured_comm_bytes"]) == float(train["predicted_comm_bytes"]) > 0
    assert float(train["gradient_rel"]) < 1e-4 and float(train["update_rel"]) < 1e-2
    assert float(rows[0]["predicted_comm_bytes"]) == float(train["predicted_comm_bytes"])
    peaks = [int(p) for p in train["device_peak_bytes"].split()]
    assert len(peaks) == 2 and max(peaks) / (int(train["one_device_peak_bytes"]) / 2) < 1.6
    assert (tmp_path / "smoke.json").is_file()
