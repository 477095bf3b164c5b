"""Smoke test of run_runtime_overhead.py --quick and its tables: every configuration present, the one-device step
equal to a Trainer timed directly (within a loose factor: a shared machine), the ratios those of the medians, and
the profile's calls per step equal to what the bound executors run (their ``debug_str``, read apart from the
profiler's trace)."""
import collections
import csv
import json
import re
import statistics

import pytest

from experiments import run_runtime_overhead as rro
from experiments import table_runtime_overhead as table


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("overhead")
    assert rro.main(["--quick", "--routes", "--tag", "smoke", "--out-dir", str(out)]) == 0
    rows = list(csv.DictReader((out / "smoke.csv").open()))
    return rows, json.loads((out / "smoke.json").read_text())


def _graph_values():
    from tofu.runtime.data import initial_values, synthetic_batch

    graph = rro._graph("mlp", 64)
    return graph, {**initial_values(graph), **synthetic_batch(graph)}


def test_every_configuration_is_measured(run):
    rows, side = run
    steps = [r for r in rows if r["level"] == "step"]
    assert [(int(r["workers"]), r["system"], r["status"]) for r in steps] == [
        (1, "one-device", "ok"), (1, "module", "ok"),
        *((2, s.value, "ok") for s in rro.System)]
    assert side["source"].startswith("re-run: `") and side["args"]["quick"]
    for k in (1, 2):
        case = {r["system"]: r for r in steps if int(r["workers"]) == k}
        one, module = float(case["one-device"]["seconds"]), float(case["module"]["seconds"])
        for r in case.values():
            assert float(r["over_one_device"]) == pytest.approx(float(r["seconds"]) / one, rel=1e-4)
            assert float(r["over_module"]) == pytest.approx(float(r["seconds"]) / module, rel=1e-4)
            assert float(r["p25_seconds"]) <= float(r["seconds"]) <= float(r["p75_seconds"])


def test_one_device_row_matches_a_direct_trainer_timing(run):
    from tofu.api import reference_symbol
    from tofu.runtime.train import Trainer, whole_graph

    rows, _ = run
    graph, values = _graph_values()
    trainer = Trainer(whole_graph(graph, reference_symbol(graph)), values, "cpu", lr=1e-3)
    for _ in range(25):
        trainer.step()
    direct = statistics.median(trainer.step_seconds[5:])
    for r in (r for r in rows if r["level"] == "step" and r["system"] == "one-device"):
        assert direct / 4 < float(r["seconds"]) < direct * 4


def _executor_ops(trainer) -> collections.Counter:
    return collections.Counter(re.findall(r"^Op:([^,]+), Name=", trainer.executor.debug_str(), re.M))


def test_profiled_calls_are_what_the_executors_run(run, monkeypatch):
    """Per step: the one device's kernel calls are its executor's ops and its update one call on its flat buffer
    of parameters; under the tofu plan the slice, Concat and add_n calls summed over devices are those of its
    executor's graph (and of its replicas' exchange)."""
    from tofu.api import partitioned, reference_symbol
    from tofu.runtime.train import Trainer, whole_graph
    from tofu.search.algorithms import plan_graph

    rows, _ = run
    monkeypatch.setenv("MXNET_EXEC_BULK_EXEC_TRAIN", "0")
    graph, values = _graph_values()
    one = Trainer(whole_graph(graph, reference_symbol(graph)), values, "cpu")
    tofu = Trainer(partitioned(graph, plan_graph(graph, 2, "tofu")), values, "cpu")
    summary = table.profile_summary([rows])
    got_one, got_tofu = summary[("mlp", 64, 2, "one-device")], summary[("mlp", 64, 2, "tofu")]
    assert got_one["kernels"]["calls"] == sum(_executor_ops(one).values())
    # one update per device's flat buffers of parameters (tofu.runtime.replicas)
    updates = len(one.exchange.flats[0]) + sum(v.name not in one.exchange for v in one.params)
    assert updates == 1
    assert got_one["update"]["calls"] == updates
    ops = _executor_ops(tofu)
    for cls in (rro.OpClass.SLICE, rro.OpClass.CONCAT, rro.OpClass.ADD_N):
        # the replicas' exchange adds by elemwise_add, a kernel the one device runs too: not in these classes
        expected = sum(n for op, n in ops.items() if op in rro.GLUE_OPS[cls])
        assert got_tofu.get(cls.value, {"calls": 0})["calls"] == expected, cls
    assert ops["add_n"] + ops["slice"] > 0
    # copies: the executor's routes and _CrossDeviceCopy ops, the exchange's, and the outputs' copies to the host
    assert got_tofu["copies"]["calls"] >= ops["_CrossDeviceCopy"] + ops["_copy"] > 0
    for system in ("one-device", "tofu", "data-parallel"):
        s = summary[("mlp", 64, 2, system)]
        assert 0 < s["busiest device"]["seconds"] <= s["any device"]["seconds"] <= s["all ops"]["seconds"] * 1.0001


def test_tables_render(run):
    rows, _ = run
    steps = table.render_steps([rows])
    assert steps.count("\n") == 3 and "x Module" in steps   # header, rule, k = 1 and k = 2
    ops = table.render_profile([rows])
    assert "copies" in ops and "**wall**" in ops and "busiest" not in ops
    routes = table.render_routes([rows])
    assert routes.count("\n") == 2 and routes.count("x**") == 2    # header, rule, k = 2: both plans' ratios


def test_trace_spans_pairs_calls_in_the_files_order(tmp_path):
    """A call whose begin and end carry the same microsecond, next to calls that end when the next begins, on two
    devices: each is one span (MXNet writes a call's end right after its begin; a sort by time put such an end first
    and lost the call)."""
    ev = [("slice", 0, 1, 10, 10), ("slice", 0, 1, 5, 10), ("slice", 0, 1, 10, 12), ("dot", 1, 2, 3, 7)]
    events = [e for name, pid, tid, a, b in ev
              for e in ({"cat": "operator", "ph": "B", "name": name, "pid": pid, "tid": tid, "ts": a},
                        {"cat": "operator", "ph": "E", "name": name, "pid": pid, "tid": tid, "ts": b})]
    path = tmp_path / "trace.json"
    # as an unfinished dump after the process's first: a leading comma, the list left open
    path.write_text("," + json.dumps(events)[1:-1])
    assert sorted(rro.trace_spans(path)) == sorted((name, pid, a * 1e-6, b * 1e-6) for name, pid, _, a, b in ev)
