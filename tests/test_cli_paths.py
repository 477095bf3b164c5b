"""Every path of the command line checked before any work (issue 24, items 9 and 10): outputs that are
directories, in missing directories, or of a format nothing writes; inputs that are not regular files (a named
pipe blocked forever); ``--save`` and ``--checkpoint`` on one file. Each fails in one line with status 2 and
writes nothing; before, they failed after training with a traceback, or not at all."""
import json
import os

import mxnet as mx
import pytest

from tests.test_cli import assert_one_line_error, run


@pytest.fixture()
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv,message", [
    (["plan", "mlp", "--workers", "2", "--figure", "fig.txt"], "unknown format '.txt'"),
    (["plan", "mlp", "--workers", "2", "--out", "newdir/"], "it is a directory"),
    (["plan", "mlp", "--workers", "2", "--out", "missing/p.json"], "no directory"),
    (["run", "mlp", "--workers", "2", "--save", "missing/x.params"], "no directory"),
    (["run", "mlp", "--workers", "2", "--save", "ck.params"], "the plan beside --save 'ck.plan.json': it is a dir"),
    (["run", "mlp", "--workers", "2", "--checkpoint", "ck.params", "--checkpoint-every", "1"],
     "the plan beside --checkpoint 'ck.plan.json': it is a dir"),
    (["run", "mlp", "--workers", "2", "--save", "a.params", "--checkpoint", "./a.params", "--checkpoint-every", "1"],
     "write the same file"),
    (["run", "mlp", "--workers", "2", "--plan", "pipe.json"], "plan 'pipe.json' is not a regular file"),
    (["run", "mlp", "--workers", "2", "--load", "pipe.json"], "checkpoint 'pipe.json' is not a regular file"),
    (["plan", "pipe.json", "--shape", "data=2,3"], "model file 'pipe.json' is not a regular file"),
    (["plan", "mlp", "--workers", "2", "--load", "."], "plan '.' is not a regular file"),
])
def test_paths_are_checked_before_any_work(capsys, here, argv, message):
    os.mkfifo(here / "pipe.json")
    (here / "ck.plan.json").mkdir()
    before = sorted(os.listdir(here))
    rc, out, err = run(capsys, *argv)
    assert_one_line_error(rc, out, err, message)
    assert sorted(os.listdir(here)) == before            # nothing written, no .tmp left behind


def test_a_figure_in_a_known_format_is_written(capsys, here):
    rc, _, err = run(capsys, "plan", "mlp", "--workers", "2", "--figure", "fig.svg")
    assert rc == 0, err
    assert (here / "fig.svg").read_text().lstrip().startswith("<?xml")


def test_unicode_names_train_save_and_load(capsys, here):
    """Input and op names outside ASCII: inspect, plan, run --save and --load (the user saw --save fail)."""
    y = mx.sym.FullyConnected(mx.sym.var("数据"), num_hidden=4, name="层🙂")
    y.save(str(here / "u.json"))
    shape = ("--shape", "数据=4,3")
    rc, out, err = run(capsys, "run", "u.json", *shape, "--workers", "2", "--steps", "1", "--save", "ü.params",
                       "--json")
    assert rc == 0, err
    saved = mx.nd.load(str(here / "ü.params"))
    assert sorted(saved) == ["arg:层🙂_bias", "arg:层🙂_weight"]
    trained = json.loads(out)["losses"]
    rc, out, err = run(capsys, "run", "u.json", *shape, "--workers", "2", "--steps", "1", "--load", "ü.params",
                       "--json")
    assert rc == 0, err
    assert json.loads(out)["losses"] != trained           # it started from the saved, trained parameters


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["steps"][0].update(factor=2.5), "2.5 is not an integer"),
    (lambda d: d["steps"][0].update(factor="2"), "'2' is not an integer"),
    (lambda d: d.update(workers=True), "True is not an integer"),
    (lambda d: d["steps"][0].update(factor=-2), "every step cuts 2 or more ways"),
])
def test_a_tampered_plan_is_refused(capsys, here, edit, message):
    rc, _, err = run(capsys, "plan", "mlp", "--workers", "2", "--out", "p.json")
    assert rc == 0, err
    doc = json.loads((here / "p.json").read_text())
    edit(doc)
    (here / "p.json").write_text(json.dumps(doc))
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", "--plan", "p.json")
    assert_one_line_error(rc, out, err, message)


def test_checkpoints_with_nan_or_foreign_tensors_are_refused(capsys, here):
    rc, _, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", "--save", "m.params")
    assert rc == 0, err
    assert sorted(os.listdir(here)) == ["m.params", "m.plan.json"]      # written atomically: no .tmp left
    arrays = mx.nd.load("m.params")
    arrays["arg:fc1_weight"][0, 0] = float("nan")
    mx.nd.save("nan.params", arrays)
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", "--load", "nan.params")
    assert_one_line_error(rc, out, err, "'fc1_weight' holds NaN or infinite values")
    arrays = mx.nd.load("m.params")
    arrays["arg:conv9_weight"] = mx.nd.zeros((2, 2))
    mx.nd.save("extra.params", arrays)
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", "--load", "extra.params")
    assert_one_line_error(rc, out, err, "holds 'conv9_weight', which model 'mlp' does not have")


def test_a_plan_of_a_symbol_file_replays_under_run_and_load(capsys, here):
    """Item 7: `tofu plan FILE --out` planned the file without the loss `tofu run FILE` adds, so `tofu run --plan`
    refused every Gluon export; and the plan written beside --save must load in `tofu plan --load`."""
    x = mx.sym.FullyConnected(mx.sym.relu(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc1")),
                              num_hidden=10, name="fc2")
    x.save(str(here / "logits.json"))                       # ends in logits, as a Gluon export does
    shape = ("--shape", "data=8,12")
    rc, _, err = run(capsys, "plan", "logits.json", *shape, "--workers", "2", "--out", "p.json")
    assert rc == 0, err
    rc, out, err = run(capsys, "run", "logits.json", *shape, "--workers", "2", "--plan", "p.json", "--steps", "1",
                       "--check", "--json", "--save", "s.params")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["measured_comm_bytes"] == doc["predicted_comm_bytes"]
    rc, out, err = run(capsys, "plan", "logits.json", *shape, "--load", "s.plan.json", "--json")
    assert rc == 0, err
    assert json.loads(out)["comm_bytes"] == doc["predicted_comm_bytes"]
