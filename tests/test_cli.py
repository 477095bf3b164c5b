"""The ``tofu`` command line, run in-process: output shapes other tools read, and one-line errors with status 2.

References are independent of the code under test: parameter bytes and op counts come from MXNet's own
``infer_shape`` and symbol JSON, halo widths from the convolution's attributes.
"""
import json
import re

import mxnet as mx
import numpy as np
import pytest

from tofu import cli, registry
from tofu.models import build_model


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *names):
    assert rc == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tofu: error: ")
    for name in names:
        assert name in lines[0], lines[0]


# ------------------------------------------------------------------------------------------------- ops

@pytest.fixture(scope="module")
def ops_json():
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli.main(["ops", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_ops_json_lists_every_op_with_its_strategies(ops_json):
    ops = ops_json["ops"]
    assert len(ops) >= 40
    assert {o["name"] for o in ops} == set(registry.load_builtin_operators())
    for o in ops:
        assert {"name", "inputs", "outputs", "attrs", "strategies", "unsplittable", "example"} <= set(o), o["name"]
        n_inputs = len(o["example"]["shapes"])
        for s in o["strategies"]:
            assert s["kind"] in ("output", "reduce"), o["name"]
            assert len(s["regions"]) == n_inputs, o["name"]
            assert len(s["outputs"]) == len(o["example"]["output_shapes"]), o["name"]
            for p in s["outputs"]:
                assert p in ({"replicate": True}, {"partial": "sum"}, {"partial": "max"}, {"partial": "min"},
                             {"partial": "prod"}) or set(p) == {"split_dim"}, (o["name"], p)
            assert isinstance(s["kernel_executable"], bool)
            assert ("kernel_reason" in s) == (not s["kernel_executable"]), (o["name"], s["var"])


def test_ops_json_example_is_the_first_case(ops_json):
    specs = registry.load_builtin_operators()
    for o in ops_json["ops"]:
        case = specs[o["name"]].cases[0]
        assert [tuple(s) for s in o["example"]["shapes"].values()] == [tuple(s) for s in case.shapes], o["name"]


def test_ops_json_fully_connected_strategies(ops_json):
    fc = next(o for o in ops_json["ops"] if o["name"] == "FullyConnected")
    by_var = {s["var"]: s for s in fc["strategies"]}
    assert by_var["b"]["outputs"] == [{"split_dim": 0}]
    assert by_var["b"]["regions"][0][0] == "[b.lo, b.hi]"
    assert by_var["k"]["kind"] == "reduce" and by_var["k"]["outputs"] == [{"partial": "sum"}]
    assert by_var["k"]["once_inputs"] == ["bias"]        # the bias is added once, not once per partial sum


def _conv_halo(case) -> tuple[int, int]:
    """How far a worker's input window reaches past its output range [x.lo, x.hi]: (before, after)."""
    kernel, = case.attrs["kernel"]
    dilate = case.attrs.get("dilate", (1,))[0]
    pad = case.attrs.get("pad", (0,))[0]
    return pad, (kernel - 1) * dilate - pad


def test_ops_op_shows_convolution_halo(capsys):
    rc, out, err = run(capsys, "ops", "--op", "Convolution")
    assert rc == 0 and err == ""
    case = registry.load_builtin_operators()["Convolution"].cases[0]
    stride = case.attrs.get("stride", (1,))[0]
    before, after = _conv_halo(case)
    lo = f"{stride}*xs0.lo" if stride > 1 else "xs0.lo"
    hi = f"{stride}*xs0.hi" if stride > 1 else "xs0.hi"
    expected = f"[{lo}{f' - {before}' if before else ''}, {hi}{f' + {after}' if after else ''}]"
    assert after > 0, "the first Convolution case should have a halo"
    assert "output:xs0" in out
    assert re.search(r"^\s+data\s+.*" + re.escape(expected), out, re.MULTILINE), out
    assert "reduce:ci" in out and "counted once" in out       # partition-n-reduce, bias once


def test_ops_op_unknown_exits_2(capsys):
    assert_one_line_error(*run(capsys, "ops", "--op", "nosuchop"), "nosuchop")


def test_ops_takes_the_operator_as_its_argument_too(capsys):
    """``tofu ops NAME`` is ``tofu ops --op NAME`` (it was refused as an unrecognized argument)."""
    assert run(capsys, "ops", "gather_nd") == run(capsys, "ops", "--op", "gather_nd")
    assert_one_line_error(*run(capsys, "ops", "nosuchop"), "nosuchop")
    assert_one_line_error(*run(capsys, "ops", "take", "--op", "pick"), "two operators named")


def test_ops_op_json_is_one_entry(capsys):
    rc, out, _ = run(capsys, "ops", "--op", "Pooling", "--json")
    assert rc == 0
    entry = json.loads(out)
    assert entry["name"] == "Pooling" and entry["strategies"]


def test_ops_op_case_selects_that_case(capsys):
    cases = registry.load_builtin_operators()["Convolution"].cases
    n = len(cases) - 1
    rc, out, err = run(capsys, "ops", "--op", "Convolution", "--case", str(n), "--json")
    assert rc == 0 and err == ""
    example = json.loads(out)["example"]
    assert example["case"] == n and example["workers"] == 2
    assert [tuple(s) for s in example["shapes"].values()] == [tuple(s) for s in cases[n].shapes]
    rc, out, _ = run(capsys, "ops", "--op", "Convolution", "--case", str(n))
    example_line = next(ln for ln in out.splitlines() if ln.startswith("example"))
    assert f"Case {n}" in example_line and f"data {tuple(cases[n].shapes[0])}" in example_line, example_line


def test_ops_op_workers_splits_the_batch_into_k_rows(capsys):
    case = registry.load_builtin_operators()["FullyConnected"].cases[0]
    batch, width = case.shapes[0]
    k = 4 if batch % 4 == 0 else batch           # the batch splits into k equal parts
    rc, out, err = run(capsys, "ops", "--op", "FullyConnected", "--workers", str(k))
    assert rc == 0 and err == ""
    rows = batch // k
    for w in range(k):
        assert f"worker {w} of {k}: data[{w * rows}:{(w + 1) * rows}, 0:{width}]" in out, out
    assert f"worker {k} of {k}" not in out
    assert f"MXNet kernel, {k} workers: yes" in out
    entry = json.loads(run(capsys, "ops", "--op", "FullyConnected", "--workers", str(k), "--json")[1])
    for s in entry["strategies"]:
        extent = {"b": batch, "h": case.attrs["num_hidden"], "k": width}[s["var"]]
        assert s["kernel_executable"] == (extent % k == 0), s
        if extent % k:
            assert f"not a multiple of {k} workers" in s["kernel_reason"]


@pytest.mark.parametrize("argv, names", [
    (("--op", "Convolution", "--case", "99"), ("--case 99", "Convolution", "cases")),
    (("--op", "Convolution", "--case", "-1"), ("--case -1",)),
    (("--op", "Convolution", "--case", "one"), ("--case", "one")),
    (("--op", "FullyConnected", "--workers", "0"), ("--workers 0", "positive")),
    (("--op", "FullyConnected", "--workers", "-2", "--json"), ("--workers -2", "positive")),
    (("--op", "FullyConnected", "--workers", "2.5"), ("--workers", "2.5")),
    (("--case", "1"), ("--case", "--op")),
    (("--workers", "4", "--json"), ("--workers", "--op")),
], ids=["case-too-large", "case-negative", "case-not-int", "workers-zero", "workers-negative", "workers-not-int",
        "case-without-op", "workers-without-op"])
def test_ops_bad_case_or_workers_exits_2(capsys, argv, names):
    assert_one_line_error(*run(capsys, "ops", *argv), *names)


def _mxnet_op_counts(symbol) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in json.loads(symbol.tojson())["nodes"]:
        if node["op"] != "null":
            counts[node["op"]] = counts.get(node["op"], 0) + 1
    return counts


def test_ops_model_lists_each_op_with_count(capsys):
    rc, out, err = run(capsys, "ops", "--model", "mlp", "--json")
    assert rc == 0 and err == ""
    listed = json.loads(out)
    assert listed["model"] == "mlp"
    assert {o["name"]: o["count"] for o in listed["ops"]} == _mxnet_op_counts(build_model("mlp").symbol)
    fc = next(o for o in listed["ops"] if o["name"] == "FullyConnected")
    assert fc["strategies"] == len(fc["vars"]) and {"b", "h", "k(sum)"} <= set(fc["vars"])

    rc, out, _ = run(capsys, "ops", "--model", "mlp")
    assert rc == 0
    assert re.search(r"^FullyConnected\s+3\s+3\s", out, re.MULTILINE), out


def test_ops_model_with_undescribed_op_exits_2(capsys, tmp_path):
    data = mx.sym.var("data")
    fc = mx.sym.FullyConnected(data, num_hidden=4, name="fc")
    path = tmp_path / "gelqf.json"
    mx.sym.linalg.gelqf(fc, name="lq")[0].save(str(path))
    assert "_linalg_gelqf" not in registry.load_builtin_operators()
    assert_one_line_error(*run(capsys, "ops", "--model", str(path), "--shape", "data=4,6"), "_linalg_gelqf", "lq")


def test_ops_model_and_op_together_exit_2(capsys):
    assert_one_line_error(*run(capsys, "ops", "--model", "mlp", "--op", "Convolution"), "--op", "--model")


# --------------------------------------------------------------------------------------------- inspect

def test_inspect_json_param_bytes_match_mxnet(capsys):
    rc, out, err = run(capsys, "inspect", "mlp", "--json")
    assert rc == 0 and err == ""
    report = json.loads(out)
    assert {"model", "param_bytes", "memory_bytes", "fits"} <= set(report)
    assert report["model"] == "mlp" and isinstance(report["fits"], bool)
    assert report["memory_bytes"]["total"] >= report["param_bytes"] > 0
    model = build_model("mlp")
    arg_shapes, _, _ = model.symbol.infer_shape(**model.shapes())
    params = [s for name, s in zip(model.symbol.list_arguments(), arg_shapes) if name not in model.shapes()]
    assert report["param_bytes"] == sum(int(np.prod(s)) for s in params) * 4      # float32


def test_inspect_unknown_model_exits_2(capsys):
    assert_one_line_error(*run(capsys, "inspect", "foo"), "foo")


def test_inspect_batch_zero_exits_2(capsys):
    assert_one_line_error(*run(capsys, "inspect", "mlp", "--batch", "0"), "batch")


def test_inspect_malformed_json_exits_2(capsys, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"nodes": [')
    assert_one_line_error(*run(capsys, "inspect", str(path), "--shape", "data=2,3"), "broken.json")


def test_inspect_bad_device_memory_exits_2(capsys):
    assert_one_line_error(*run(capsys, "inspect", "mlp", "--device-memory", "12XB"), "12XB")


def test_inspect_fits_only_with_the_reserve_left_free(capsys):
    """A device of total + reserve bytes fits, one byte less does not (the reserve: the CUDA context's)."""
    rc, out, _ = run(capsys, "inspect", "mlp", "--json", "--reserve", "1000")
    total = json.loads(out)["memory_bytes"]["total"]
    for device, fits in ((total + 1000, True), (total + 999, False)):
        rc, out, _ = run(capsys, "inspect", "mlp", "--json", "--reserve", "1000", "--device-memory", str(device))
        assert rc == 0 and json.loads(out)["fits"] is fits and json.loads(out)["reserve_bytes"] == 1000
    assert_one_line_error(*run(capsys, "inspect", "mlp", "--reserve", "13GiB"), "--reserve")


@pytest.mark.parametrize("text,expected", [("12GB", 12 * 10**9), ("16GiB", 16 * 2**30), ("500MB", 500 * 10**6),
                                           ("1024", 1024), ("1.5 KiB", 1536)])
def test_parse_bytes(text, expected):
    assert cli.parse_bytes(text) == expected


def test_plan_figure_draws_the_chosen_tensors_and_refuses_bad_choices(capsys, tmp_path):
    out = tmp_path / "plan.png"
    rc, _, _ = run(capsys, "plan", "gpt-tiny", "--batch", "4", "--workers", "4", "--figure", str(out),
                   "--figure-tensors", "^block0_")
    assert rc == 0 and out.stat().st_size > 10_000
    assert_one_line_error(*run(capsys, "plan", "mlp", "--workers", "2", "--figure", str(out),
                               "--figure-tensors", "("), "tensor pattern")
    assert_one_line_error(*run(capsys, "plan", "mlp", "--workers", "2", "--figure", str(out),
                               "--figure-tensors", "^nothing"), "no tensor matches")
    assert_one_line_error(*run(capsys, "plan", "wresnet-50-4", "--workers", "2", "--figure", str(out)),
                          "make a readable figure")
    assert_one_line_error(*run(capsys, "plan", "mlp", "--workers", "2", "--figure",
                               str(tmp_path / "missing" / "p.png")), "cannot write figure")


def test_the_process_entry_point_runs_main_and_empties_the_cost_tables(monkeypatch, capsys):
    """``tofu`` and ``python -m tofu`` run :func:`tofu.cli.command`: main's exit status, and the search's cost
    tables emptied after it (else the interpreter's exit walks them); a killed machine of ``tofu launch``
    (tests/runtime/test_checkpoint.py) holds it to leaving MXNet's objects to the collector."""
    from tofu.cli import command
    from tofu.search import cost

    monkeypatch.setattr("sys.argv", ["tofu", "plan", "mlp", "--workers", "2"])
    assert cli.main() == 0 and cost._CLASS_COSTS and cost._VIEW_KEYS      # main alone keeps them
    capsys.readouterr()
    assert command() == 0
    assert "2 workers" in capsys.readouterr().out
    assert not cost._CLASS_COSTS and not cost._VIEW_KEYS
    monkeypatch.setattr("sys.argv", ["tofu", "plan", "no-such-model"])
    assert command() == 2


def test_plan_fits_with_and_without_the_runtimes_replicas(capsys):
    """``tofu plan --device-memory``: the rewriter's graph (``total``) fits a device of total + reserve bytes; the
    runtime's parameter replicas (``tofu run``'s default) need ``replicas`` more, and where only the bare graph
    fits the text says to train it with ``--no-replicas``."""
    args = ("plan", "mlp", "--workers", "2", "--algo", "data-parallel")
    rc, out, _ = run(capsys, *args, "--json")
    args += ("--reserve", "1000")
    memory = json.loads(out)["per_device_bytes"]
    total, replicas = memory["total"], memory["replicas"]
    assert rc == 0 and replicas > 0
    for device, bare, with_replicas in ((total + 999, False, False), (total + 1000, True, False),
                                        (total + replicas + 999, True, False), (total + replicas + 1000, True, True)):
        rc, out, _ = run(capsys, *args, "--json", "--device-memory", str(device))
        doc = json.loads(out)
        assert rc == 0 and (doc["fits"], doc["fits_with_replicas"]) == (bare, with_replicas), device
        rc, out, _ = run(capsys, *args, "--device-memory", str(device))
        line = out.strip().splitlines()[-1]
        assert line.startswith(f"fits {device / 2**30:.2f} GiB") and line.count("yes") == bare + with_replicas
        assert ("--no-replicas" in line) == (bare and not with_replicas), line
