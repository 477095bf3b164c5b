"""bench_search_versions.py against HEAD itself (an A/A run) on mlp at 2 workers: both trees plan the same bytes,
``--command`` times a whole ``python -m tofu plan`` process, which imports MXNet and plans: longer than the plan
alone in the same tree and round, and the tree that runs first alternates from round to round."""
import csv
import json
import statistics

from experiments import bench_search_versions as bench
from experiments.common import read_rows
from experiments.table_search_versions import render


def test_an_a_a_run_with_the_command_timed(tmp_path, capsys):
    assert bench.main(["--against", "HEAD", "--models", "mlp", "--workers", "2", "--rounds", "2", "--repeats", "1",
                       "--command", "--tag", "aa", "--out-dir", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "aa.csv").open()))
    assert all(r["status"] == "ok" for r in rows) and len(rows) == 8
    timed = [r for r in rows if r["plan_seconds"]]
    assert [(r["round"], r["tree"]) for r in timed] == [("0", "old"), ("0", "new"), ("1", "new"), ("1", "old")]
    assert all(float(r["load"]) >= 0 for r in timed)
    plans = {r["tree"]: r for r in timed if r["round"] == "0"}
    commands = {r["tree"]: float(r["command_seconds"]) for r in rows if r["command_seconds"] and r["round"] == "0"}
    assert set(plans) == set(commands) == {"old", "new"}
    assert plans["old"]["comm_bytes"] == plans["new"]["comm_bytes"] != ""
    for tree, seconds in commands.items():
        assert seconds > float(plans[tree]["plan_seconds"]), tree
    assert "mlp: the whole command HEAD" in capsys.readouterr().out
    assert json.loads((tmp_path / "aa.json").read_text())["source"].startswith("re-run: ")
    # the docs' table of such runs: each tree's median whole plan, and how many of this tree's took >= 1 ms
    new = [float(r["plan_seconds"]) for r in timed if r["tree"] == "new"]
    old = statistics.median(float(r["plan_seconds"]) for r in timed if r["tree"] == "old")
    line = render([read_rows(tmp_path / "aa.csv")], labels="aa", threshold=0.001).splitlines()[2]
    assert line.startswith(f"| aa | mlp | 2 | {old:.2f} -> **{statistics.median(new):.2f}** (")
    assert f"| {sum(x >= 0.001 for x in new)} of {len(new)} |" in line
