"""The program each machine runs under the launcher: ``python -m tofu.runtime.dist_worker MODEL ...``.

Input: a zoo model, the global batch, k local devices, a saved plan (or an algorithm to plan with), the steps.
Output, in ``--out-dir``: ``machine{m}.json`` (its :class:`~tofu.runtime.distributed.MachineReport`) and
``machine{m}.params`` (the whole parameters after training, in the checkpoint format of single-machine runs),
each written to a temporary file and renamed. It joins the ``dist_sync`` kvstore named by the ``DMLC_*``
environment (see :mod:`tofu.runtime.launch`); its machine index is the kvstore rank. Exit status 2 with a one-line
error on bad input.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tofu.errors import TofuError
from tofu.models import ModelOptions
from tofu.runtime.checkpoint import CheckpointPolicy


@dataclass(frozen=True)
class MachineOptions:
    """How a machine trains besides the model: steps (the number of the last step), optimizer, seed, where
    checkpoints go, what to resume, and the testing-only failure injection."""

    steps: int = 10
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    ctx: str = "cpu"
    checkpoint: CheckpointPolicy | None = None    # written by machine 0 only
    resume: str | None = None                     # a checkpoint to continue from (its step, parameters, momentum)
    load: str | None = None                       # parameters to start from (step 0, momentum 0)
    save: str | None = None                       # the final parameters, written by machine 0
    fail_at_step: int | None = None               # testing only: the last machine SIGKILLs itself after this step


def run_machine(model: str, global_batch: int | ModelOptions, workers: int, out_dir: str | Path, steps: int = 10,
                algo: str = "tofu", plan_path: str | None = None, lr: float = 0.05, momentum: float = 0.9,
                seed: int = 0, kvstore: str = "dist_sync",
                progress: Callable[[int, int, float], None] | None = None,
                options: MachineOptions | None = None):
    """Joins the kvstore, trains this machine's share of the global batch up to step ``steps`` (SGD-momentum)
    and writes its results.

    ``global_batch`` is the global batch, or the model's options with the global batch in them (None: the
    family's default). ``options`` replaces ``steps``, ``lr``, ``momentum`` and ``seed`` and adds checkpoints,
    resuming and failure injection. ``progress(machine, step, loss)`` is called after every step.

    Returns:
        The :class:`~tofu.runtime.distributed.MachineReport` written to ``out_dir``.

    Raises:
        DistributedError: the global batch does not split over the machines.
        TofuError: unknown model, unusable plan or checkpoint.
    """
    import mxnet as mx

    from tofu.api import load_graph, load_plan, model_batch, partitioned
    from tofu.runtime.checkpoint import load_training_state, save_training_state, trainer_state
    from tofu.runtime.data import initial_values, load_checkpoint, loss, save_checkpoint, synthetic_batch
    from tofu.runtime.distributed import (KVStoreTrainer, MachineReport, final_values, gradient_scale,
                                          machine_batch, machine_rows, machine_statistics,
                                          predicted_kvstore_bytes)

    opts = options or MachineOptions(steps, lr, momentum, seed)
    model_options = global_batch if isinstance(global_batch, ModelOptions) else ModelOptions(batch=global_batch)
    kv = mx.kv.create(kvstore)
    machine, machines = kv.rank, kv.num_workers
    global_batch = model_batch(model, model_options)
    whole = load_graph(model, dataclasses.replace(model_options, batch=global_batch))   # one device's: values, batch
    share = machine_rows(global_batch, machines, machine)
    graph = load_graph(model, dataclasses.replace(model_options, batch=share.stop - share.start))
    plan = load_plan(graph, workers, algo, plan_path)
    done, momenta = 0, None
    if opts.resume:
        state = load_training_state(opts.resume, whole)
        values, done, momenta = dict(state.values), state.step, state.momentum
    elif opts.load:
        values = load_checkpoint(opts.load, whole)
    else:
        values = initial_values(whole, opts.seed)
    batch = machine_batch(synthetic_batch(whole, opts.seed + 1), machines, machine)
    pg = partitioned(graph, plan, machine_statistics(whole, machines))
    trainer = KVStoreTrainer(pg, {**values, **batch}, kv, gradient_scale(graph, machines), ctx=opts.ctx,
                             lr=opts.lr, momentum=opts.momentum)
    if momenta is not None:
        trainer.load_momentum(momenta)
    losses = []
    for i in range(done + 1, opts.steps + 1):
        losses.append(loss(graph, trainer.step(), batch))
        if machine == 0 and opts.checkpoint is not None and opts.checkpoint.due(i):
            save_training_state(opts.checkpoint.path, whole, trainer_state(whole, values, trainer, i), plan)
        if progress:
            progress(machine, i, losses[-1])
        if opts.fail_at_step == i and machine == machines - 1:
            print(f"machine {machine}: --fail-at-step {i}: killing itself (SIGKILL), as asked", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    report = MachineReport(graph.name, machine, machines, workers, plan.algo, global_batch, tuple(losses),
                           tuple(trainer.step_seconds), tuple(trainer.pushed_bytes), tuple(trainer.pulled_bytes),
                           predicted_kvstore_bytes(graph, pg), done)
    out = Path(out_dir)
    final = final_values(whole, values, trainer)
    params = out / f"machine{machine}.params"
    save_checkpoint(out / f"machine{machine}.tmp.params", whole, final)
    os.replace(out / f"machine{machine}.tmp.params", params)
    if machine == 0 and opts.save:
        from tofu.graph.mxnet_import import numpy_semantics

        save_checkpoint(opts.save, whole, final, plan, numpy_semantics(model))
    tmp = out / f"machine{machine}.tmp.json"
    tmp.write_text(json.dumps(report.to_json(), indent=1))
    os.replace(tmp, out / f"machine{machine}.json")
    return report


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tofu.runtime.dist_worker",
                                description="One machine of a hybrid (Tofu x data-parallel) training run.")
    p.add_argument("model")
    p.add_argument("--batch", type=int, required=True, help="the global batch, split evenly over the machines")
    p.add_argument("--workers", type=int, required=True, help="devices (CPU contexts) on this machine")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--algo", default="tofu")
    p.add_argument("--plan", default=None, help="a plan saved by `tofu plan` for the per-machine batch")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    return p


def _print_progress(machine: int, step: int, value: float) -> None:
    print(f"machine {machine} step {step} loss {value:.6f}", flush=True)


def main(argv: list[str] | None = None,
         progress: Callable[[int, int, float], None] | None = _print_progress) -> int:
    """The command line above; ``progress`` as in :func:`run_machine` (a wrapper script may pass its own)."""
    args = _parser().parse_args(argv)
    try:
        report = run_machine(args.model, args.batch, args.workers, args.out_dir, args.steps, args.algo, args.plan,
                             args.lr, args.momentum, args.seed, progress=progress)
    except TofuError as e:
        print(f"error: {e}", file=sys.stderr)
        _abandon(2)
    except BaseException:           # anything else, Ctrl-C included: the traceback goes to this process's log
        traceback.print_exc()
        _abandon(1)
    print(json.dumps(report.to_json()), flush=True)
    return 0


def _abandon(status: int) -> None:
    """Exits at once, skipping interpreter and MXNet shutdown: a failed worker's kvstore would wait at ps-lite's
    finalising barrier for workers that wait for its gradients, and the process would hang instead of exiting."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
