"""Hybrid training on MXNet's dist kvstore, on loopback: 2 machines (ps-lite worker processes) x 2 CPU contexts,
each running the Tofu-partitioned graph on half of the global batch, equal one device on the whole batch; the
bytes handed to the kvstore are the plan's parameter shards; a failing worker brings the whole run down quickly,
leaving no process behind.

``wresnet-tiny``'s BatchNorm statistics are averaged over the machines mid-pass (synchronised BatchNorm,
tofu/rewrite/machines.py), so it equals one device on the global batch too.
"""
import os
import sys
import time

import mxnet as mx
import numpy as np
import pytest

from tofu.api import load_graph, load_plan, partitioned, reference_symbol
from tofu.graph import import_symbol
from tofu.errors import RewriteError
from tofu.graph.ir import Role
from tofu.models import ModelOptions
from tofu.runtime.data import initial_values, loss, synthetic_batch
from tofu.runtime.distributed import (DistributedError, gradient_scale, inter_machine_bytes, machine_rows,
                                      machine_statistics, train_hybrid)
from tofu.runtime.launch import LaunchError, launch_local
from tofu.runtime.train import Trainer, whole_graph

MACHINES, WORKERS = 2, 2
BATCH = {"mlp": 24, "rnn-tiny": 8, "wresnet-tiny": 32}     # global batch
LR, STEPS, TOL = 0.05, 10, 1e-4


def _one_device(model, batch, steps=STEPS, lr=LR, roles=(Role.PARAM,)):
    """Losses and final parameters (and with ``roles``, auxiliary states) of ``steps`` steps on one device, the
    whole batch (the existing Trainer)."""
    graph = load_graph(model, ModelOptions(batch=batch))
    data = synthetic_batch(graph)
    trainer = Trainer(whole_graph(graph, reference_symbol(graph)), {**initial_values(graph), **data}, lr=lr)
    losses = [loss(graph, trainer.step(), data) for _ in range(steps)]
    return losses, trainer.parameters(roles)


@pytest.mark.parametrize("model,workers", [("mlp", 2), ("rnn-tiny", 2), ("mlp", 4), ("rnn-tiny", 4)], ids=str)
def test_two_machines_equal_one_device(model, workers, tmp_path):
    report = train_hybrid(model, BATCH[model], MACHINES, workers, tmp_path, steps=STEPS, lr=LR, timeout_s=120)
    losses, params = _one_device(model, BATCH[model])
    np.testing.assert_allclose(report.losses, losses, rtol=TOL)
    assert report.losses[-1] < report.losses[0]
    assert set(report.final_values) == set(params)
    scale = max(float(np.abs(v).max()) for v in params.values())
    for name, value in params.items():
        np.testing.assert_allclose(report.final_values[name], value, rtol=TOL, atol=TOL * scale, err_msg=name)
    assert report.replica_max_abs_diff == 0.0           # the machines' replicas never part
    # every shard pushed once and pulled once per machine per step: the parameters' bytes, both ways (mlp's
    # shards on 4 devices are unequal: 4 x the largest device's would overcount)
    assert report.measured_bytes == report.predicted_bytes
    graph = load_graph(model, ModelOptions(batch=BATCH[model]))
    assert report.predicted_bytes == 2 * sum(t.nbytes for t in graph.by_role(Role.PARAM))
    assert all(m.pushed_bytes == m.pulled_bytes for m in report.machines)


BN_LR = 2e-4      # tests/runtime/test_train.py's: ten steps check the updates, not how far training amplifies rounding
KINKED = 3e-2     # and its bound for wresnet-tiny after ten steps (a ReLU or pooling kink crossed, see there)


@pytest.mark.parametrize("workers", [2, 4])
def test_batchnorm_model_first_update_equals_one_device(workers, tmp_path):
    """wresnet-tiny on 2 machines: every BatchNorm's statistics are averaged over the machines mid-pass
    (through the kvstore, forward and backward), so the first loss and the first update (lr times the
    gradient of the global batch, momentum starting at zero) equal one device's to 1e-4 of the largest; each
    machine's own statistics would part at the first loss. The moving statistics follow the global batch's as one
    device's follow its batch's. The kvstore carries the parameter shards and those statistics, as predicted from
    the plan."""
    model, batch = "wresnet-tiny", BATCH["wresnet-tiny"]
    report = train_hybrid(model, batch, MACHINES, workers, tmp_path, steps=1, lr=BN_LR, timeout_s=200)
    losses, state = _one_device(model, batch, steps=1, lr=BN_LR, roles=(Role.PARAM, Role.AUX))
    moving = {n for n in state if n.endswith(("_moving_mean", "_moving_var"))}
    assert len(moving) >= 10
    for name in moving:
        np.testing.assert_allclose(report.final_values[name], state[name], rtol=TOL, atol=TOL, err_msg=name)
    params = {n: v for n, v in state.items() if n not in moving}
    np.testing.assert_allclose(report.losses, losses, rtol=TOL)
    start = initial_values(load_graph(model, ModelOptions(batch=batch)))
    updates = {n: report.final_values[n] - start[n] for n in params}
    expected = {n: params[n] - start[n] for n in params}
    scale = max(float(np.abs(u).max()) for u in expected.values())
    assert scale > 0
    for name, update in expected.items():
        np.testing.assert_allclose(updates[name], update, rtol=TOL, atol=TOL * scale, err_msg=name)
    assert report.replica_max_abs_diff == 0.0
    _assert_statistics_bytes(model, batch, report, tmp_path / "plan.json")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 4])
def test_batchnorm_model_ten_steps_follow_one_device(workers, tmp_path):
    """Ten SGD-momentum steps: the first two losses to 1e-4, the rest within the bound of kinked models, as
    the single-machine partitioned graph of wresnet-tiny is held (tests/runtime/test_train.py: its trajectory
    parts from one device by up to ~1e-2 once rounding carries an activation across a kink; wrong partitioning
    shows up as errors of order one)."""
    model, batch = "wresnet-tiny", BATCH["wresnet-tiny"]
    report = train_hybrid(model, batch, MACHINES, workers, tmp_path, steps=STEPS, lr=BN_LR, timeout_s=300)
    losses, params = _one_device(model, batch, lr=BN_LR)
    np.testing.assert_allclose(report.losses[:2], losses[:2], rtol=TOL)
    assert max(abs(a - b) for a, b in zip(report.losses, losses)) <= KINKED
    assert report.losses[-1] < report.losses[0]
    scale = max(float(np.abs(v).max()) for v in params.values())
    assert max(float(np.abs(report.final_values[n] - v).max()) for n, v in params.items()) <= KINKED * scale
    _assert_statistics_bytes(model, batch, report, tmp_path / "plan.json")


def _assert_statistics_bytes(model, batch, report, plan_path):
    """Measured = predicted = parameters + every averaged statistic (each BatchNorm's sum and sum of squares on
    every device, once forward and once backward, each way)."""
    whole = load_graph(model, ModelOptions(batch=batch))
    graph = load_graph(model, ModelOptions(batch=batch // MACHINES))
    plan = load_plan(graph, report.machines[0].workers, "tofu", str(plan_path))
    sync = machine_statistics(whole, MACHINES)
    assert sync == {n.name for n in whole.nodes if n.op == "BatchNorm"}
    stats = partitioned(graph, plan, sync).machine_stats
    assert {s.key.split("#")[0] for s in stats} == sync
    assert report.measured_bytes == report.predicted_bytes == 2 * inter_machine_bytes(graph, plan, whole, MACHINES)
    assert report.predicted_bytes == 2 * (graph.param_bytes + sum(2 * s.nbytes for s in stats if s.backward)
                                          + sum(s.nbytes for s in stats if not s.backward))
    # BatchNorm's expansion: two statistics per device, each averaged forward and backward
    per_bn = [s for s in stats if s.key.startswith(sorted(sync)[0] + "#")]
    assert len(per_bn) == 2 * report.machines[0].workers and all(s.backward for s in per_bn)


def test_models_without_batch_statistics_average_nothing():
    for model in ("mlp", "rnn-tiny"):
        assert machine_statistics(load_graph(model, ModelOptions(batch=BATCH[model])), MACHINES) == frozenset()


@pytest.mark.parametrize("normalization,scale", [("null", 1.0), ("batch", 0.5), ("valid", 0.5)])
def test_gradient_scale_makes_the_sum_over_machines_the_global_gradient(normalization, scale):
    """What each SoftmaxOutput normalisation does to gradients, measured on MXNet's kernel: the sum of the
    machines' gradients, scaled, is the gradient of the global batch."""
    x, w, label = mx.sym.var("x"), mx.sym.var("w"), mx.sym.var("softmax_label")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(x, w, no_bias=True, num_hidden=3), label,
                               normalization=normalization, name="softmax")
    graph = import_symbol(sym, {"x": (8, 5), "w": (3, 5), "softmax_label": (8,)})
    assert gradient_scale(graph, MACHINES) == scale
    rng = np.random.default_rng(0)
    xs, ws, ys = rng.standard_normal((8, 5)), rng.standard_normal((3, 5)), rng.integers(0, 3, 8)

    def grad(rows):
        exe = sym.simple_bind(mx.cpu(), x=(rows.stop - rows.start, 5), w=(3, 5),
                              grad_req={"x": "null", "w": "write", "softmax_label": "null"})
        exe.arg_dict["x"][:], exe.arg_dict["w"][:], exe.arg_dict["softmax_label"][:] = xs[rows], ws, ys[rows]
        exe.forward(is_train=True)
        exe.backward()
        return exe.grad_dict["w"].asnumpy()

    summed = sum(grad(machine_rows(8, MACHINES, m)) for m in range(MACHINES))
    np.testing.assert_allclose(scale * summed, grad(slice(0, 8)), rtol=1e-5, atol=1e-6)


def test_a_batch_that_does_not_split_is_a_one_line_error(tmp_path):
    with pytest.raises(DistributedError, match="global batch 25 is not divisible by 2 machines"):
        train_hybrid("mlp", 25, 2, 2, tmp_path)


def _kvstore_children():
    """Pids of live children of this process that carry a ps-lite role (tofu's own helpers, such as its shape
    probe, do not)."""
    me, kids = os.getpid(), []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/environ", "rb") as f:
                role = b"DMLC_ROLE=" in f.read()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z" and role:
            kids.append(int(entry))
    return kids


def _assert_all_gone(error: LaunchError):
    assert len(error.processes) == 2 + MACHINES           # scheduler, server, workers
    for p in error.processes:
        with pytest.raises(ProcessLookupError):
            os.kill(p.pid, 0)
    assert _kvstore_children() == []


# machine 1 dies at its third step, between two synchronised steps: machine 0 then waits on a pull forever
_FAILING_WORKER = """
import os, signal, sys
from tofu.runtime import dist_worker

def fail(machine, step, loss):
    if machine == 1 and step == 3:
        {action}

sys.exit(dist_worker.main(progress=fail))
"""


@pytest.mark.parametrize("action,message", [("os.kill(os.getpid(), signal.SIGKILL)", "was killed by SIGKILL"),
                                            ("raise RuntimeError('injected at step 3')",
                                             "exited with status 1: RuntimeError: injected at step 3")])
def test_a_failing_worker_stops_every_process(tmp_path, action, message):
    script = tmp_path / "failing_worker.py"
    script.write_text(_FAILING_WORKER.format(action=action))
    start = time.monotonic()
    with pytest.raises(LaunchError) as caught:
        train_hybrid("mlp", 24, MACHINES, WORKERS, tmp_path, steps=STEPS, timeout_s=40,
                     worker_command=[sys.executable, str(script)])
    assert time.monotonic() - start < 30
    text = str(caught.value)
    assert "\n" not in text and text.startswith("worker") and message in text
    assert f"(log: {tmp_path / 'logs'}" in text
    _assert_all_gone(caught.value)


def test_a_hanging_run_times_out_and_stops_every_process(tmp_path):
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"timed out after 3 s with worker0, worker1 still running") as caught:
        launch_local([sys.executable, "-c", "import time; time.sleep(60)"], MACHINES, 1, log_dir=tmp_path,
                     timeout_s=3)
    assert time.monotonic() - start < 15
    _assert_all_gone(caught.value)


def test_averaging_an_op_the_model_lacks_is_a_one_line_error():
    graph = load_graph("mlp", ModelOptions(batch=BATCH["mlp"]))
    plan = load_plan(graph, WORKERS, "tofu")
    with pytest.raises(RewriteError, match="model 'mlp' has no op 'bn9' to average over machines"):
        partitioned(graph, plan, frozenset({"bn9"}))
