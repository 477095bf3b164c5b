"""Checkpoints that resume exactly: one MXNet ``.params`` file (whole parameters as ``--save`` writes them, plus
momentum and step) written atomically; a resumed run ends where the uninterrupted one does, on one machine and
under ``tofu launch`` after one machine was killed mid-run (every other process then stops within bounded time,
with one line on the terminal, and the last checkpoint stays intact)."""
import os
import subprocess
import sys
import time

import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import assert_one_line_error, run
from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.runtime.checkpoint import TrainingState, load_training_state, save_training_state
from tofu.runtime.data import CheckpointError, initial_values, load_checkpoint

RTOL = 1e-5


def _assert_same(got, want, rtol=RTOL):
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=1e-7, err_msg=name)


@pytest.fixture(scope="module")
def mlp():
    return load_graph("mlp", ModelOptions(batch=24))


def _state(graph, step=3):
    values = initial_values(graph, seed=5)
    rng = np.random.default_rng(0)
    return TrainingState(step, values, {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in values.items()})


def test_a_checkpoint_round_trips_and_reads_as_an_ordinary_params_file(mlp, tmp_path):
    path = tmp_path / "ck.params"
    state = _state(mlp)
    save_training_state(path, mlp, state)
    back = load_training_state(path, mlp)
    assert back.step == 3
    _assert_same(back.values, state.values, rtol=0)
    _assert_same(back.momentum, state.momentum, rtol=0)
    _assert_same(load_checkpoint(path, mlp), state.values, rtol=0)        # what `tofu run --load` reads
    assert os.listdir(tmp_path) == ["ck.params"]                           # no temporary file left
    # MXNet's own reader (what Module.load_checkpoint calls) keeps the arg:/aux: keys and skips the others
    (tmp_path / "mx").mkdir()
    (tmp_path / "mx" / "model-0005.params").write_bytes(path.read_bytes())
    args, auxs = mx.model.load_params(str(tmp_path / "mx" / "model"), 5)
    assert set(args) == set(state.values) and auxs == {}
    _assert_same({n: a.asnumpy() for n, a in args.items()}, state.values, rtol=0)


def test_the_write_is_a_rename_of_a_file_in_the_same_directory(mlp, tmp_path, monkeypatch):
    path = tmp_path / "ck.params"
    save_training_state(path, mlp, _state(mlp, 1))
    renames = []
    real = os.replace

    def replace(src, dst):
        renames.append((os.path.dirname(src), os.path.abspath(dst)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    save_training_state(path, mlp, _state(mlp, 2))
    assert renames == [(str(tmp_path), str(path))]
    assert load_training_state(path, mlp).step == 2

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(CheckpointError, match="No space left on device"):
        save_training_state(path, mlp, _state(mlp, 3))
    assert load_training_state(path, mlp).step == 2                       # the last good checkpoint, intact
    assert os.listdir(tmp_path) == ["ck.params"]


def test_a_save_file_cannot_be_resumed(capsys, tmp_path):
    saved = tmp_path / "final.params"
    rc, _, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", "--save", str(saved), "--json")
    assert rc == 0, err
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "2", "--resume", str(saved))
    assert_one_line_error(rc, out, err, "no optimizer state and step", "--load")


def test_one_machine_resumes_exactly(capsys, tmp_path):
    """`tofu run` checkpointing every 3 steps, resumed at step 3, ends with the uninterrupted run's parameters;
    the checkpoint at step 3 holds the parameters of a 3-step run."""
    common = ["run", "mlp", "--workers", "2", "--batch", "24", "--json"]
    for steps, extra in ((6, ["--checkpoint", str(tmp_path / "ck.params"), "--checkpoint-every", "3"]),
                         (3, ["--save", str(tmp_path / "three.params")]), (6, ["--save", str(tmp_path / "six.params")])):
        rc, _, err = run(capsys, *common, "--steps", str(steps), *extra)
        assert rc == 0, err
    graph = load_graph("mlp", ModelOptions(batch=24))
    # the checkpoint file was last written at step 6: it is the six-step run's end
    _assert_same(load_training_state(tmp_path / "ck.params", graph).values, load_checkpoint(tmp_path / "six.params",
                                                                                             graph))
    rc, _, err = run(capsys, *common, "--steps", "3", "--checkpoint", str(tmp_path / "at3.params"),
                     "--checkpoint-every", "3")
    assert rc == 0, err
    state = load_training_state(tmp_path / "at3.params", graph)
    assert state.step == 3
    _assert_same(state.values, load_checkpoint(tmp_path / "three.params", graph))
    rc, out, err = run(capsys, *common, "--steps", "6", "--resume", str(tmp_path / "at3.params"),
                       "--save", str(tmp_path / "resumed.params"))
    assert rc == 0, err
    assert len(__import__("json").loads(out)["losses"]) == 3
    _assert_same(load_checkpoint(tmp_path / "resumed.params", graph), load_checkpoint(tmp_path / "six.params", graph))


# --------------------------------------------------------------------------- under `tofu launch`, a machine killed

def _launch(tmp_path, name, *run_args, timeout=90):
    argv = [sys.executable, "-m", "tofu", "launch", "--machines", "2", "--workers", "2", "--log-dir",
            str(tmp_path / name), "--timeout", "60", "--", "tofu", "run", "mlp", "--batch", "24", *run_args]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return done, time.monotonic() - start


def _launched_processes(log_dir):
    """Live processes started for the run logging to ``log_dir`` (their environment names it)."""
    mark = f"TOFU_LAUNCH_DIR={log_dir}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark in env and state != "Z":
            found.append(int(entry))
    return found


def test_a_killed_machine_stops_the_run_and_its_checkpoint_resumes_exactly(tmp_path):
    mlp = load_graph("mlp", ModelOptions(batch=24))
    done, _ = _launch(tmp_path, "ten", "--steps", "10", "--save", str(tmp_path / "ten.params"))
    assert done.returncode == 0, done.stderr
    done, _ = _launch(tmp_path, "five", "--steps", "5", "--save", str(tmp_path / "five.params"))
    assert done.returncode == 0, done.stderr

    # machine 1 kills itself (SIGKILL) after step 6; machine 0 wrote the checkpoint of step 5 before its step 6
    done, seconds = _launch(tmp_path, "killed", "--steps", "10", "--checkpoint", str(tmp_path / "ck.params"),
                            "--checkpoint-every", "5", "--fail-at-step", "6")
    assert_one_line_error(done.returncode, "", done.stderr, "was killed by SIGKILL",
                          f"(log: {tmp_path / 'killed'}")
    assert seconds < 45
    assert _launched_processes(tmp_path / "killed") == []
    state = load_training_state(tmp_path / "ck.params", mlp)
    assert state.step == 5
    _assert_same(state.values, load_checkpoint(tmp_path / "five.params", mlp))
    assert sorted(os.listdir(tmp_path / "killed")) == ["plan.json", "scheduler.log", "server0.log", "worker0.log",
                                                       "worker1.log"]        # no machine finished

    done, _ = _launch(tmp_path, "resumed", "--steps", "10", "--resume", str(tmp_path / "ck.params"),
                      "--save", str(tmp_path / "resumed.params"))
    assert done.returncode == 0, done.stderr
    assert "steps 6-10" in done.stdout
    _assert_same(load_checkpoint(tmp_path / "resumed.params", mlp), load_checkpoint(tmp_path / "ten.params", mlp))
