"""Hybrid training on MXNet's dist kvstore, on loopback: 2 machines (ps-lite worker processes) x 2 CPU contexts,
each running the Tofu-partitioned graph on half of the global batch, equal one device on the whole batch; the
bytes handed to the kvstore are the plan's parameter shards; a failing worker brings the whole run down quickly,
leaving no process behind.

``wresnet-tiny``'s BatchNorm normalises by each machine's batch statistics, which differ from the global batch's
unless they are exchanged mid-forward (synchronised BatchNorm), which this runtime does not do: it is checked
against the machines' partitioned graphs trained side by side in one process, gradients summed without a kvstore.
"""
import os
import sys
import time

import mxnet as mx
import numpy as np
import pytest

from tofu.api import load_graph, load_plan, partitioned, reference_symbol
from tofu.graph import import_symbol
from tofu.graph.ir import Role
from tofu.models import ModelOptions
from tofu.runtime.data import initial_values, loss, synthetic_batch
from tofu.runtime.distributed import (DistributedError, gradient_scale, machine_batch, machine_rows,
                                      train_hybrid)
from tofu.runtime.launch import LaunchError, launch_local
from tofu.runtime.train import Trainer, whole_graph

MACHINES, WORKERS = 2, 2
BATCH = {"mlp": 24, "rnn-tiny": 8, "wresnet-tiny": 32}     # global batch
LR, STEPS, TOL = 0.05, 10, 1e-4


def _one_device(model, batch, steps=STEPS):
    """Losses and final parameters of ``steps`` steps on one device, the whole batch (the existing Trainer)."""
    graph = load_graph(model, ModelOptions(batch=batch))
    data = synthetic_batch(graph)
    trainer = Trainer(whole_graph(graph, reference_symbol(graph)), {**initial_values(graph), **data}, lr=LR)
    losses = [loss(graph, trainer.step(), data) for _ in range(steps)]
    return losses, trainer.parameters()


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


def _per_machine_in_process(model, batch, machines, plan_path, lr, steps=STEPS):
    """Losses per machine and final parameters of ``machines`` in-process trainers of the same partitioned graph
    (no kvstore, no other process), each on its machine's rows (BatchNorm on that machine's statistics): at every
    step their gradients are summed and each makes the same SGD-momentum update."""
    whole = load_graph(model, ModelOptions(batch=batch))
    data = synthetic_batch(whole)
    graph = load_graph(model, ModelOptions(batch=batch // machines))
    pg = partitioned(graph, load_plan(graph, WORKERS, "tofu", str(plan_path)))
    rows = [machine_batch(data, machines, m) for m in range(machines)]
    trainers = [Trainer(pg, {**initial_values(whole), **r}, lr=lr) for r in rows]
    names, scale = [v.name for v in trainers[0].params], gradient_scale(graph, machines)
    losses = []
    for _ in range(steps):
        losses.append([loss(graph, t.forward_backward(), r) for t, r in zip(trainers, rows)])
        total = {n: sum(t.executor.grad_dict[n].asnumpy() for t in trainers) for n in names}
        for t in trainers:
            for n in names:
                w = t.executor.arg_dict[n]
                mx.nd.sgd_mom_update(w, mx.nd.array(total[n], ctx=w.context), t.moms[n], lr=lr,
                                     momentum=t.momentum, rescale_grad=scale, out=w)
    return np.array(losses), trainers[0].parameters()


def test_batchnorm_model_equals_the_machines_trained_in_one_process(tmp_path):
    """wresnet-tiny on 2 machines: each machine's BatchNorm uses its own rows' statistics, so the reference is
    the machines' partitioned graphs trained side by side in this process, gradients summed without a kvstore.
    (Against unpartitioned executors per machine the first three steps agree and the next drift apart, from
    2.6e-5 at step 4: this small network's training is chaotic at these gradients, and the expansion's BatchNorm
    arithmetic differs from the fused kernel's in the last bits.)"""
    model, batch, lr = "wresnet-tiny", BATCH["wresnet-tiny"], 0.002
    report = train_hybrid(model, batch, MACHINES, WORKERS, tmp_path, steps=STEPS, lr=lr, timeout_s=120)
    losses, params = _per_machine_in_process(model, batch, MACHINES, tmp_path / "plan.json", lr)
    for m, machine in enumerate(sorted(report.machines, key=lambda r: r.machine)):
        np.testing.assert_allclose(machine.losses, losses[:, m], rtol=1e-5)
    assert losses[-1].mean() < losses[0].mean()
    scale = max(float(np.abs(v).max()) for v in params.values())
    for name, value in params.items():
        np.testing.assert_allclose(report.final_values[name], value, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
    assert report.measured_bytes == report.predicted_bytes
    # and it is not one device on the global batch: the machines' statistics differ from the batch's
    global_losses, _ = _one_device(model, batch)
    assert abs(report.losses[0] - global_losses[0]) > 1e2 * TOL


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
