"""``tofu sim``: the engine's iteration for a model's plan, its timeline files, and one-line errors."""
import json

import pytest

from tests.test_cli import assert_one_line_error, run
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
from tofu.sim.engine import simulate_iteration
from tofu.sim import profile


def test_sim_reports_the_engines_iteration_and_writes_its_timeline(capsys, tmp_path):
    trace, figure = tmp_path / "t.json", tmp_path / "t.png"
    rc, out, err = run(capsys, "sim", "mlp", "--workers", "4", "--json", "--trace", str(trace), "--figure",
                       str(figure))
    assert rc == 0, err
    doc = json.loads(out)
    graph = load_graph("mlp", ModelOptions())
    want = simulate_iteration(graph, plan_graph(graph, 4, "tofu"), profile("k80x8"))
    assert doc["iteration_seconds"] == pytest.approx(want.seconds, rel=1e-12)
    assert doc["peak_bytes"] == list(want.peak_bytes) and doc["tasks"] == len(want.spans)
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X") == len(want.spans)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sim_with_replicas_simulates_tofu_runs_binding(capsys):
    """``--replicas``: the engine's iteration of the program with the runtime's parameter replicas (the
    data-parallel plan of mlp on 4 devices: its forward weight copies become the exchange's after the update)."""
    rc, out, err = run(capsys, "sim", "mlp", "--workers", "4", "--algo", "data-parallel", "--replicas", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    graph = load_graph("mlp", ModelOptions())
    plan = plan_graph(graph, 4, "data-parallel")
    want = simulate_iteration(graph, plan, profile("k80x8"), replicas=True)
    routed = simulate_iteration(graph, plan, profile("k80x8"))
    assert doc["iteration_seconds"] == pytest.approx(want.seconds, rel=1e-12)
    assert doc["tasks"] == len(want.spans) < len(routed.spans)


@pytest.mark.parametrize("argv,message", [
    (["sim", "mlp", "--workers", "16"], "--workers must be in [1, 8]"),
    (["sim", "mlp", "--profile", "tpu"], "invalid choice: 'tpu'"),
    (["sim", "mlp", "--figure", "x.txt"], "unknown format '.txt'"),
    (["sim", "no-such-model"], "unknown model"),
])
def test_sim_bad_input_is_one_line(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert_one_line_error(rc, out, err, message)


def test_a_bad_input_fails_before_the_cpu_profile_is_calibrated(capsys, tmp_path, monkeypatch):
    """The cpu profile measures this machine for tens of seconds when its cache is cold: a misnamed input is
    reported first (it was reported after the calibration)."""
    import mxnet as mx

    import tofu.sim as sim

    def calibrate(name):
        raise AssertionError(f"profile '{name}' asked for before the model was read")

    monkeypatch.setattr(sim, "profile", calibrate)
    path = tmp_path / "m.json"
    mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc").save(str(path))
    rc, out, err = run(capsys, "sim", str(path), "--shape", "label=4,5", "--profile", "cpu")
    assert_one_line_error(rc, out, err, "no input named label")
