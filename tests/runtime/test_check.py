"""Nothing silently wrong in ``tofu run`` (issue 24, items 1-4): a split the analysis refused never runs, ``--check``
fails beyond its tolerance, Dropout is compared like with like, and settings that train to NaN are refused.

Each test failed before its fix: the merged ``_contrib_div_sqrt_dim`` ran its refused last-axis split (outputs off
by 3.7e-4, gradients by 0.41 relative, exit 0); ``--check`` exited 0 whatever it found; a Dropout network differed
from one device by its masks; ``--lr nan`` trained to NaN and ``--json`` printed a bare ``NaN``.
"""
import json

import mxnet as mx
import pytest

from tests.test_cli import assert_one_line_error, run
from tofu.api import clear_caches, load_graph
from tofu.errors import AnalysisError
from tofu.runtime import DEFAULT_RTOL


def _div_sqrt_dim_net(path):
    """Two wide FullyConnected around ``_contrib_div_sqrt_dim``: at batch 2, the plans split the hidden axis,
    the one whose extent the op's constant follows."""
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=256, no_bias=True, name="fc1")
    h = mx.sym.contrib.div_sqrt_dim(h, name="dsd")
    mx.sym.FullyConnected(h, num_hidden=256, no_bias=True, name="fc2").save(str(path))
    return str(path)


DSD_SHAPE = ("--shape", "data=2,256")


@pytest.fixture()
def dsd(tmp_path):
    return _div_sqrt_dim_net(tmp_path / "dsd.json")


def test_an_op_whose_split_is_refused_is_not_merged_as_elementwise(dsd):
    from tofu.search.coarsen import coarsen, is_elementwise

    graph = load_graph(dsd, shapes={"data": (2, 256)})
    node = next(n for n in graph.nodes if n.op == "_contrib_div_sqrt_dim")
    assert not is_elementwise(graph, node)
    assert coarsen(graph).op_group[node.id] >= 0          # an op group of its own: the search chooses its split
    relu_graph = load_graph(_saved_to(mx.sym.relu(mx.sym.var("data"), name="r")), shapes={"data": (2, 256)})
    assert is_elementwise(relu_graph, relu_graph.nodes[0])      # a true element-wise op still merges


@pytest.mark.parametrize("algo", ["tofu", "dp-flat", "spartan", "equalchop", "icml18"])
def test_div_sqrt_dim_trains_equal_to_one_device(capsys, dsd, algo):
    rc, out, err = run(capsys, "run", dsd, *DSD_SHAPE, "--workers", "2", "--algo", algo, "--steps", "2", "--check",
                       "--rtol", "1e-4", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-4 and doc["output_max_rel_diff"] < 1e-4


def test_a_plan_merging_a_refused_split_is_refused(capsys, dsd, tmp_path):
    """A plan file whose op follows a split the analysis refused (as the old coarsening made) does not run."""
    rc, _, err = run(capsys, "plan", dsd, *DSD_SHAPE, "--workers", "2", "--out", str(tmp_path / "p.json"))
    assert rc == 0, err
    doc = json.loads((tmp_path / "p.json").read_text())
    step = doc["steps"][0]
    step["ops"]["dsd"] = {"kind": "follow", "var": None, "dim": 1}
    for t in ("fc1_output", "dsd_output"):
        step["tensor_dims"][t] = 1
    step["ops"]["fc1"] = {"kind": "output", "var": "h", "dim": None}
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    rc, out, err = run(capsys, "run", dsd, *DSD_SHAPE, "--workers", "2", "--plan", str(tmp_path / "bad.json"))
    assert_one_line_error(rc, out, err, "dsd")


def test_compose_refuses_to_follow_an_unproven_split():
    from tofu.analysis.compose import ChoiceKind, OpChoice, compose
    from tofu.analysis.views import NodeView
    from tofu.graph.attrs import Attrs

    view = NodeView("_contrib_div_sqrt_dim", Attrs(), ((2, 256),), ((2, 256),), (0,), (1,))
    assert len(compose(view, [OpChoice(ChoiceKind.FOLLOW, dim=0)], (2,))) == 2    # the batch split is proven
    with pytest.raises(AnalysisError, match="did not prove runnable"):
        compose(view, [OpChoice(ChoiceKind.FOLLOW, dim=1)], (2,))


def test_the_check_fails_a_wrong_partition(capsys, dsd, monkeypatch):
    """The old coarsening (every identical-region split taken as runnable) and no compose check: the refused split
    runs, and --check now says so with exit status 1."""
    import tofu.analysis.compose
    import tofu.search.coarsen

    monkeypatch.setattr(tofu.search.coarsen, "runnable", lambda *a: True)
    monkeypatch.setattr(tofu.analysis.compose, "_check_follow", lambda *a: None)
    clear_caches()
    try:
        rc, out, err = run(capsys, "run", dsd, *DSD_SHAPE, "--workers", "2", "--algo", "spartan", "--steps", "2",
                           "--check")
    finally:
        monkeypatch.undo()
        clear_caches()
    assert rc == 1
    assert "FAILED" in out
    line = err.strip().splitlines()
    assert len(line) == 1 and line[0].startswith("tofu: error: --check failed: ") and "gradients" in line[0]


def test_check_tolerance_and_json(capsys):
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] is True and doc["rtol"] == DEFAULT_RTOL
    # the same run held to a tolerance below float32 rounding fails, naming what exceeded it
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "2", "--check", "--json", "--rtol", "1e-12")
    assert rc == 1
    doc = json.loads(out)
    assert doc["check_passed"] is False
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--check failed: " in lines[0] and "gradients" in lines[0] and "> 1e-12" in lines[0]


def test_dropout_is_off_on_both_sides_of_the_check(capsys, tmp_path):
    x = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=32, name="fc1")
    x = mx.sym.Dropout(mx.sym.relu(x), p=0.5, name="drop")
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc2")
    path = tmp_path / "drop.json"
    x.save(str(path))
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=8,16", "--workers", "2", "--steps", "3",
                       "--check", "--rtol", "1e-4", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_dropout_off"] == ["drop"] and doc["check_passed"]
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=8,16", "--workers", "2", "--steps", "1", "--check")
    assert rc == 0, err
    assert "Dropout off on both sides (1 ops at p = 0" in out


def test_without_dropout_keeps_every_other_op():
    from tofu.graph.deterministic import without_dropout

    x = mx.sym.Dropout(mx.sym.var("data"), p=0.3, name="a")
    x = mx.sym.Dropout(x, p=0.0, name="b")              # already deterministic: unchanged, not reported
    graph = load_graph(_saved_to(x), shapes={"data": (4, 4)})
    changed, names = without_dropout(graph)
    assert names == ("a",)
    assert [dict(n.attrs).get("p") for n in changed.nodes] == [0.0, 0.0]
    assert [n.name for n in changed.nodes] == [n.name for n in graph.nodes]


def _saved_to(symbol):
    import tempfile

    path = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    symbol.save(path)
    return path


@pytest.mark.parametrize("option,value", [("--lr", "nan"), ("--lr", "inf"), ("--lr", "-0.1"), ("--lr", "0"),
                                          ("--momentum", "nan"), ("--momentum", "1"), ("--momentum", "-0.5"),
                                          ("--seed", "-1"), ("--seed", str(2**32)), ("--rtol", "nan"),
                                          ("--rtol", "0")])
def test_settings_that_cannot_train_are_refused(capsys, option, value):
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", option, value)
    assert_one_line_error(rc, out, err, option.lstrip("-"))


def test_a_diverging_run_stops_naming_its_step(capsys):
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "5", "--lr", "1e30", "--json")
    assert rc == 1
    assert out == ""                      # no JSON with a bare NaN, no partial document
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the loss of step 2 is nan" in lines[0]


def test_json_has_no_bare_nan():
    from tofu.cli import dumps

    text = dumps({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -float("inf")}})
    assert json.loads(text) == {"a": None, "b": [1.0, None], "c": {"d": None}}


_ONE_DEVICE_GATHER_ND = """
import mxnet as mx, numpy as np
from tofu.graph.ir import Role
from tofu.rewrite.apply_plan import HeadPiece, PartitionedGraph, ShardVar
from tofu.runtime.train import Trainer
sym = mx.sym.make_loss(mx.sym.gather_nd(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc"),
                                        mx.sym.var("indices")))
box = lambda *s: tuple((0, n) for n in s)
pg = PartitionedGraph(sym, 1, (ShardVar("data", "data", 0, box(8, 4), Role.DATA),
                               ShardVar("fc_weight", "fc_weight", 0, box(16, 4), Role.PARAM),
                               ShardVar("fc_bias", "fc_bias", 0, box(16), Role.PARAM),
                               ShardVar("indices", "indices", 0, box(1, 5), Role.DATA)), (HeadPiece("g", 0, box(5, 16), 0),))
values = {"data": np.ones((8, 4), np.float32), "fc_weight": np.ones((16, 4), np.float32),
          "fc_bias": np.zeros(16, np.float32), "indices": np.arange(5, dtype=np.float32)[None]}
print(Trainer(pg, values).forward_backward()["g"].shape)
"""


def _python(code):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MXNET_SUBGRAPH_BACKEND": "NONE", "MXNET_SUBGRAPH_VERBOSE": "0"})


def test_one_device_binds_without_context_groups():
    """The one-device reference of --check: bound with group2ctx on a symbol without groups, MXNet segfaulted in
    simple_bind on gather_nd (exit 255, nothing printed)."""
    done = _python(_ONE_DEVICE_GATHER_ND)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(5, 16)"


def test_a_crash_inside_quiet_says_so():
    """MXNet's own crash message went to quiet()'s sink and died with the process; now the fault handler writes
    to the real stderr."""
    done = _python("""
import mxnet as mx
from tofu.runtime.train import quiet
g = mx.sym.gather_nd(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc"), mx.sym.var("indices"))
with quiet():
    g.simple_bind(ctx=mx.cpu(0), group2ctx={"dev0": mx.cpu(0)}, data=(8, 4), indices=(1, 5))
""")
    assert done.returncode != 0
    assert "Segmentation fault" in done.stderr
