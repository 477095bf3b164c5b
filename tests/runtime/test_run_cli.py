"""``tofu run`` in-process: its JSON document against the plan and a one-device run, its checkpoints, and
one-line errors with status 2 (and nothing written) for plans, checkpoints and contexts that do not fit."""
import json

import mxnet as mx
import numpy as np
import pytest

from tests.test_cli import assert_one_line_error, run


def test_run_json_matches_the_plan_and_one_device(capsys, tmp_path):
    rc, out, err = run(capsys, "plan", "mlp", "--workers", "4", "--json")
    assert rc == 0
    predicted = json.loads(out)["comm_bytes"]
    rc, out, err = run(capsys, "run", "mlp", "--workers", "4", "--steps", "3", "--check", "--json",
                       "--save", str(tmp_path / "m.params"))
    assert rc == 0, err
    assert err == ""
    doc = json.loads(out)
    assert doc["predicted_comm_bytes"] == predicted
    assert doc["measured_comm_bytes"] == doc["measured_forward_bytes"] + doc["measured_backward_bytes"] > 0
    assert doc["max_abs_diff"] < 1e-4
    assert np.allclose(doc["losses"], doc["reference_losses"], atol=1e-5)
    assert len(doc["losses"]) == 3 and doc["losses"][-1] < doc["losses"][0]
    saved = mx.nd.load(str(tmp_path / "m.params"))
    assert sorted(saved) == ["arg:fc1_bias", "arg:fc1_weight", "arg:fc2_bias", "arg:fc2_weight", "arg:fc3_bias",
                             "arg:fc3_weight"]
    assert saved["arg:fc1_weight"].shape == (64, 32)
    assert json.loads((tmp_path / "m.plan.json").read_text())["workers"] == 4


def test_no_replicas_runs_the_routes_with_the_same_bytes_and_losses(capsys):
    """``--no-replicas`` binds the rewriter's graph as it is: the same bytes each way and the same losses as the
    default run (its replicas exchanged in flat copies), with more copies (one per route and direction)."""
    docs = []
    for flags in ((), ("--no-replicas",)):
        rc, out, err = run(capsys, "run", "mlp", "--workers", "4", "--algo", "data-parallel", "--steps", "3",
                           "--json", *flags)
        assert rc == 0, err
        docs.append(json.loads(out))
    replicated, routed = docs
    for key in ("measured_forward_bytes", "measured_backward_bytes", "predicted_comm_bytes"):
        assert replicated[key] == routed[key] > 0, key
    assert replicated["cross_device_copies"] < routed["cross_device_copies"]
    assert np.allclose(replicated["losses"], routed["losses"], rtol=1e-5)


def test_run_terminal_progress(capsys):
    rc, out, err = run(capsys, "run", "rnn-tiny", "--workers", "2", "--steps", "2", "--check")
    assert rc == 0, err
    assert err == ""          # MXNet's own log lines never reach the user
    lines = out.splitlines()
    assert lines[1].startswith("step 1/2  loss ") and lines[2].startswith("step 2/2  loss ")
    assert "cross-device copies per iteration" in out and "check against one device" in out


@pytest.fixture()
def saved(tmp_path, capsys):
    path = tmp_path / "ck.params"
    rc, _, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "1", "--save", str(path))
    assert rc == 0, err
    return path


def _rewrite(path, drop=None, reshape=None):
    arrays = mx.nd.load(str(path))
    if drop:
        del arrays[f"arg:{drop}"]
    if reshape:
        arrays[f"arg:{reshape}"] = mx.nd.zeros((3, 3))
    mx.nd.save(str(path), arrays)


@pytest.mark.parametrize("case,message", [("missing", "has no 'fc2_bias'"), ("shape", "'fc1_weight' has shape (3, 3)")])
def test_bad_checkpoints_fail_in_one_line(capsys, saved, tmp_path, case, message):
    _rewrite(saved, drop="fc2_bias" if case == "missing" else None, reshape="fc1_weight" if case == "shape" else None)
    out_path = tmp_path / "after.params"
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--load", str(saved), "--save", str(out_path))
    assert_one_line_error(rc, out, err, message)
    assert not out_path.exists()


def test_bad_plans_and_contexts_fail_in_one_line(capsys, tmp_path):
    plan = tmp_path / "p.json"
    assert run(capsys, "plan", "mlp", "--workers", "4", "--out", str(plan))[0] == 0
    out_path = tmp_path / "after.params"
    cases = [
        (("--workers", "2", "--plan", str(plan)), "is for 4 workers, not 2"),
        (("--workers", "4", "--plan", str(plan), "--batch", "32"), "plan"),
        (("--workers", "4", "--plan", str(plan), "--algo", "tofu"), "not both"),
        (("--workers", "2", "--ctx", "gpu"), "GPUs"),
        (("--workers", "2", "--steps", "-1"), "--steps"),
        (("--workers", "0",), "--workers"),
        (("--workers", "2", "--load", str(tmp_path / "none.params")), "does not exist"),
    ]
    for extra, message in cases:
        rc, out, err = run(capsys, "run", "mlp", *extra, "--save", str(out_path))
        assert_one_line_error(rc, out, err, message)
        assert not out_path.exists()
    rc, out, err = run(capsys, "run", "rnn-tiny", "--workers", "4", "--plan", str(plan))
    assert_one_line_error(rc, out, err, "is for model 'mlp'")
    # `tofu plan --json` without --steps prints a summary, which is not a plan to run: said, with how to save one
    summary = tmp_path / "summary.json"
    rc, out, err = run(capsys, "plan", "mlp", "--workers", "4", "--json")
    assert rc == 0
    summary.write_text(out)
    rc, out, err = run(capsys, "run", "mlp", "--workers", "4", "--plan", str(summary))
    assert_one_line_error(rc, out, err, "no per-tensor splits")
    assert "--out PLAN.json" in err


def test_plan_load_refuses_options_that_do_not_apply(capsys, tmp_path):
    path = tmp_path / "p.json"
    assert run(capsys, "plan", "mlp", "--workers", "4", "--out", str(path))[0] == 0
    rc, out, err = run(capsys, "plan", "mlp", "--load", str(path), "--workers", "2")
    assert_one_line_error(rc, out, err, "is for 4 workers, not 2")
    for extra in (("--algo", "spartan"), ("--out", str(tmp_path / "q.json"))):
        rc, out, err = run(capsys, "plan", "mlp", "--load", str(path), *extra)
        assert_one_line_error(rc, out, err, "do not apply")
    assert not (tmp_path / "q.json").exists()
    rc, out, _ = run(capsys, "plan", "mlp", "--load", str(path), "--json")
    assert rc == 0 and json.loads(out)["workers"] == 4


def test_a_shape_given_twice_is_an_error(capsys):
    rc, out, err = run(capsys, "plan", "x.json", "--shape", "data=2,3", "--shape", "data=4,3")
    assert_one_line_error(rc, out, err, "'data' more than once")


def test_a_loaded_plan_is_replayed_not_trusted(capsys, tmp_path):
    path = tmp_path / "p.json"
    assert run(capsys, "plan", "wresnet-tiny", "--workers", "4", "--out", str(path))[0] == 0
    fresh = json.loads(path.read_text())
    doc = dict(fresh, comm_bytes=1.0, per_device_bytes={k: 1 for k in fresh["per_device_bytes"]})
    path.write_text(json.dumps(doc))
    rc, out, err = run(capsys, "plan", "wresnet-tiny", "--load", str(path), "--json")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["comm_bytes"] == fresh["comm_bytes"] and shown["per_device_bytes"] == fresh["per_device_bytes"]
    # a choice the op does not have at that step
    first = next(n for n, c in doc["steps"][0]["ops"].items() if c["kind"] == "output")
    doc["steps"][0]["ops"][first] = {"kind": "output", "var": "nonexistent", "dim": None}
    path.write_text(json.dumps(doc))
    rc, out, err = run(capsys, "plan", "wresnet-tiny", "--load", str(path))
    assert_one_line_error(rc, out, err, first, "nonexistent")


def test_plan_files_that_cannot_be_read_or_written(capsys, tmp_path):
    binary = tmp_path / "p.json"
    binary.write_bytes(b"\xff\xfe{\x00")
    rc, out, err = run(capsys, "plan", "mlp", "--load", str(binary))
    assert_one_line_error(rc, out, err, "not UTF-8")
    for target in (tmp_path / "missing" / "p.json", tmp_path):
        rc, out, err = run(capsys, "plan", "mlp", "--workers", "2", "--out", str(target))
        assert_one_line_error(rc, out, err, "cannot write plan")


def test_check_of_a_symbol_file_with_an_unread_parameter(capsys, tmp_path):
    """MXNet's default BatchNorm fixes gamma: a batch split never reads it, and the check still compares."""
    x = mx.sym.BatchNorm(mx.sym.Convolution(mx.sym.var("data"), kernel=(3, 3), pad=(1, 1), num_filter=4, name="c"),
                         name="bn")
    y = mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=10, name="fc")
    path = tmp_path / "net-symbol.json"
    mx.sym.SoftmaxOutput(y, mx.sym.var("softmax_label"), name="softmax").save(str(path))
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=8,3,8,8", "--shape", "softmax_label=8",
                       "--workers", "4", "--algo", "data-parallel", "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["gradient_max_rel_diff"] < 1e-4 and doc["parameter_max_rel_diff"] < 1e-4


def test_an_mxnet_failure_at_run_time_is_one_line(capsys, monkeypatch):
    import tofu.runtime.run

    def refuse(*args, **kwargs):
        raise mx.base.MXNetError("Traceback (most recent call last):\n  File x\nMXNetError: Check failed: boom")
    monkeypatch.setattr(tofu.runtime.run, "train", refuse)
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--json")
    assert_one_line_error(rc, out, err, "MXNet cannot run the partitioned graph", "boom")


@pytest.mark.parametrize("workers", [1, 2])
def test_an_output_that_is_no_loss_is_named(capsys, tmp_path, workers):
    """An output a gradient reaches that is not a loss (a hidden layer grouped with the loss): MXNet's backward
    wants its gradient. The error names it and says what to do (it used to be MXNet's message, cut mid-word);
    through BlockGrad the same output is fine, and equals one device."""
    h = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=16, name="fc1")
    loss = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.relu(h), num_hidden=4, name="fc2"), name="softmax")
    bad, good = tmp_path / "bad-symbol.json", tmp_path / "good-symbol.json"
    mx.sym.Group([loss, h]).save(str(bad))
    mx.sym.Group([loss, mx.sym.BlockGrad(h)]).save(str(good))
    rc, out, err = run(capsys, "run", str(bad), "--shape", "data=8,12", "--workers", str(workers), "--steps", "1")
    assert rc == 2 and err.count("\n") == 1, err
    assert "outputs are not all losses" in err and "'fc1_output' (FullyConnected)" in err and "BlockGrad" in err
    rc, out, err = run(capsys, "run", str(good), "--shape", "data=8,12", "--workers", str(workers), "--steps", "1",
                       "--check", "--json")
    assert rc == 0 and json.loads(out)["check_passed"], err


def _gluon_cells(path):
    """Gluon recurrent cells unrolled by hand (not the fused op): their ``begin_state`` is ``_zeros`` of batch 0,
    which MXNet infers from the cells that read it."""
    from mxnet import gluon
    from mxnet.gluon import nn, rnn

    class Net(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 8)
            self.cells = rnn.HybridSequentialRNNCell()
            self.cells.add(rnn.LSTMCell(8))
            self.cells.add(rnn.ResidualCell(rnn.GRUCell(8)))
            self.out = nn.Dense(5)

        def hybrid_forward(self, F, x):
            out, _ = self.cells.unroll(5, self.emb(x), layout="NTC", merge_outputs=True)
            return self.out(F.mean(out, axis=1))

    net = Net()
    net.initialize()
    net.hybridize()
    net(mx.nd.array(np.arange(20).reshape(4, 5)))
    net.export(str(path))
    return f"{path}-symbol.json"


def test_zeros_of_an_inferred_batch_train_partitioned(capsys, tmp_path):
    """Each device's begin_state is made with its own batch (the shape MXNet inferred, pinned at import): left at
    0, the partitioned graph could not infer it, and MXNet refused to bind it."""
    from tofu.api import load_graph

    path = _gluon_cells(tmp_path / "cells")
    graph = load_graph(path, shapes={"data": (4, 5)})
    zeros = [n for n in graph.nodes if n.op == "_zeros"]
    assert len(zeros) == 3 and all(n.attrs["shape"] == (4, 8) for n in zeros), [n.attrs for n in zeros]
    for workers in (2, 4):
        rc, out, err = run(capsys, "run", path, "--shape", "data=4,5", "--input", "data=int:0:19", "--workers",
                           str(workers), "--steps", "2", "--check")
        assert rc == 0, err
        assert ": passed (rtol" in out, out


def test_a_graph_mxnet_cannot_bind_is_one_line_with_status_1(capsys, tmp_path, monkeypatch):
    """What MXNet refuses to bind (here the zeros above left at batch 0) is tofu's defect, not the input's:
    a one-line error naming MXNet's reason, exit status 1, no traceback."""
    import tofu.graph.mxnet_import

    path = _gluon_cells(tmp_path / "cells")
    monkeypatch.setattr(tofu.graph.mxnet_import, "_pin_deferred_shapes", lambda doc, shapes: None)
    rc, out, err = run(capsys, "run", path, "--shape", "data=4,5", "--input", "data=int:0:19", "--workers", "2",
                       "--steps", "1")
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tofu: error: MXNet cannot bind the graph on 2 context(s)"), err
    assert "InferShape" in lines[0]


def test_an_input_the_workers_do_not_divide_is_replicated_beside_one_they_do(capsys, tmp_path):
    """Sequence lengths of a batch of 6 beside data of 8 steps: at 4 workers the lengths cannot split (6 -> 3), the
    data can (along its steps); the lengths are fed whole to every device, and the run equals one device. (It
    was refused: every input had to split.) When no input splits, the plan is still refused."""
    s = mx.sym
    h = s.SequenceMask(s.FullyConnected(s.var("data"), num_hidden=5, flatten=False, name="f"), s.var("len"),
                       use_sequence_length=True)
    path = tmp_path / "masked.json"
    s.SoftmaxOutput(s.FullyConnected(s.Flatten(h), num_hidden=4, name="o"), name="softmax").save(str(path))
    shapes = ["--shape", "data=8,6,10", "--shape", "len=6", "--input", "len=int:1:8"]
    rc, out, err = run(capsys, "run", str(path), *shapes, "--workers", "4", "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["gradient_max_rel_diff"] < 1e-4 and doc["measured_comm_bytes"] == doc["predicted_comm_bytes"], doc
    rc, out, err = run(capsys, "plan", str(path), *shapes[:4], "--workers", "7")
    assert_one_line_error(rc, out, err, "too many for input 'data'")


@pytest.mark.parametrize("make,trains", [(lambda h: mx.sym.khatri_rao(h, h), False),
                                         (lambda h: mx.sym.sort(h), False),
                                         (lambda h: mx.sym.sort(h, axis=-1), True),
                                         (lambda h: mx.sym.argmax_channel(h), False)])
def test_a_model_mxnet_cannot_differentiate_is_refused_by_the_op(capsys, tmp_path, make, trains):
    """An op MXNet has no gradient for, on a parameter's gradient path: refused before any work, naming it (MXNet's
    own bind of the one-device graph fails alike, checked here); sort given its axis differentiates and trains."""
    s = mx.sym
    h = s.FullyConnected(s.var("data"), num_hidden=4, name="f")
    loss = s.MakeLoss(s.sum(make(h)))
    path = tmp_path / "net.json"
    loss.save(str(path))
    try:
        loss.simple_bind(mx.cpu(), data=(4, 5)).backward
        mxnet_trains = True
    except (mx.base.MXNetError, RuntimeError):
        mxnet_trains = False
    assert mxnet_trains == trains
    rc, out, err = run(capsys, "run", str(path), "--shape", "data=4,5", "--workers", "2", "--steps", "1")
    if trains:
        assert rc == 0, err
    else:
        assert_one_line_error(rc, out, err, "cannot be trained", "MXNet cannot differentiate")


def test_no_step_is_said_so_not_timed_as_nan(capsys):
    """``--steps 0`` binds and measures the copies but times no step: said in words (it printed 'nan ms')."""
    rc, out, err = run(capsys, "run", "mlp", "--workers", "2", "--steps", "0")
    assert rc == 0, err
    assert "no step run (--steps 0)" in out and "nan" not in out, out


def test_a_one_unit_output_is_not_given_a_softmax_loss(capsys, tmp_path):
    """A regression net's (batch, 1) output was given a softmax loss over its one class: the loss 0 and every
    gradient 0 at every step, and the check passed. Now it is refused, naming the loss to give it; the same net
    with LinearRegressionOutput trains."""
    s = mx.sym
    out = s.FullyConnected(s.Activation(s.FullyConnected(s.var("data"), num_hidden=8, name="fc"), act_type="relu"),
                           num_hidden=1, name="out")
    out.save(str(tmp_path / "bare.json"))
    rc, got, err = run(capsys, "run", str(tmp_path / "bare.json"), "--shape", "data=16,4", "--workers", "2",
                       "--steps", "1")
    assert_one_line_error(rc, got, err, "output has shape (16, 1): give it a loss")
    s.LinearRegressionOutput(out, s.var("target"), name="l2").save(str(tmp_path / "l2.json"))
    rc, got, err = run(capsys, "run", str(tmp_path / "l2.json"), "--shape", "data=16,4", "--workers", "2",
                       "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(got)
    assert doc["check_passed"] and doc["losses"][0] > doc["losses"][1] > 0, doc
