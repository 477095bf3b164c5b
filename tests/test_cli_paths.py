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
    (["run", "mlp", "--workers", "2", "--save", "a.params", "--checkpoint", "./a.params", "--checkpoint-every", "1"],
     "name the same file"),
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
