"""``tofu launch --machines M --workers K -- tofu run ...``: MXNet's dist kvstore processes (loopback or
``--hostfile`` over ssh) and one summary of the machines' results."""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from tofu.cli.common import check_contexts, dumps, gb, input_path, model_graph, split_batch
from tofu.cli.run import check_run_args, checkpoint_policy, resumed
from tofu.errors import TofuError


def add_parser(sub) -> None:
    p = sub.add_parser("launch", help="hybrid training on M machines: `tofu launch --machines M --workers K -- "
                                      "tofu run MODEL ...`")
    p.add_argument("--machines", type=int, required=True, help="machines M (kvstore workers), each on its share")
    p.add_argument("--workers", type=int, required=True, help="devices K per machine")
    p.add_argument("--servers", type=int, default=1, help="kvstore servers S (default 1)")
    p.add_argument("--hostfile", metavar="FILE",
                   help="start the processes over ssh on these hosts (docs/distributed.md); default: loopback")
    p.add_argument("--port", type=int, default=9091, help="with --hostfile: the scheduler's port (default 9091)")
    p.add_argument("--log-dir", metavar="DIR",
                   help="per-process logs, the plan and each machine's results (default: a new temporary directory)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="the whole run's limit, start-up included (default 600)")
    p.set_defaults(run=run)


_TOFU_RUN = ("tofu", "run")


def remote_run_args(command: Sequence[str] | None):
    """The ``tofu run ...`` after ``--``, parsed by ``tofu run``'s own parser."""
    if command is None:
        raise TofuError("missing `--`: give the training command after it, e.g. `tofu launch --machines 2 "
                        "--workers 2 -- tofu run mlp --steps 10`")
    words = list(command)
    if words[:2] == list(_TOFU_RUN):
        words = words[2:]
    elif len(words) >= 4 and os.path.basename(words[0]).startswith("python") and words[1:4] == ["-m", *_TOFU_RUN]:
        words = words[4:]
    else:
        raise TofuError(f"after `--` comes `tofu run MODEL ...`, not `{' '.join(command) or '(nothing)'}`")
    from tofu.cli import run as run_command
    from tofu.cli.common import Parser

    parser = Parser(prog="tofu")
    run_command.add_parser(parser.add_subparsers(dest="command", required=True, parser_class=Parser))
    try:
        return parser.parse_args(["run", *words])
    except TofuError as e:
        raise TofuError(f"in `tofu run` after `--`: {e}") from None


def _worker_command(run, workers: int, batch: int, plan: str) -> list[str]:
    """The argv every machine runs: ``python -m tofu run`` with the launch's K, global batch and plan, and every
    path absolute."""
    def path(p):
        return os.path.abspath(p)

    argv = [sys.executable, "-m", "tofu", "run", run.model, "--workers", str(workers), "--batch", str(batch),
            "--plan", path(plan), "--ctx", run.ctx, "--steps", str(run.steps), "--lr", repr(run.lr),
            "--momentum", repr(run.momentum), "--seed", str(run.seed)]
    for flag, value in (("--seq-len", run.seq_len), ("--vocab", run.vocab),
                        ("--checkpoint-every", run.checkpoint_every), ("--fail-at-step", run.fail_at_step)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, value in (("--checkpoint", run.checkpoint), ("--resume", run.resume), ("--load", run.load),
                        ("--save", run.save)):
        if value is not None:
            argv += [flag, path(value)]
    return argv


def run(args) -> int:
    """``tofu launch``: plans one machine, starts the kvstore's scheduler, servers and M machines (loopback or
    ``--hostfile``), and summarises their results (``--check``: beside one device on the global batch)."""
    import tempfile
    from pathlib import Path

    from tofu.api import load_graph, load_plan
    from tofu.models import ModelOptions
    from tofu.runtime import launch

    for flag, value in (("--machines", args.machines), ("--workers", args.workers), ("--servers", args.servers)):
        if value < 1:
            raise TofuError(f"{flag} must be at least 1, got {value}")
    if args.timeout <= 0:
        raise TofuError(f"--timeout must be positive, got {args.timeout:g}")
    run = remote_run_args(args.remote)
    check_run_args(run)
    if run.input:                # the machines draw their batch rows with the defaults; not forwarded yet
        raise TofuError("--input is not supported under `tofu launch` (each machine draws the default inputs)")
    if run.workers is not None and run.workers != args.workers:
        raise TofuError(f"`tofu run --workers {run.workers}` disagrees with `tofu launch --workers {args.workers}`")
    if run.memory:
        raise TofuError("--memory measures one process's devices; it does not apply under `tofu launch`")
    if run.shape:
        raise TofuError("--shape: several machines train zoo models only (their batch is split by rows)")
    input_path(args.hostfile, "hostfile")
    hosts = launch.read_hostfile(args.hostfile) if args.hostfile else None
    if hosts is not None and len(hosts) < args.machines:
        raise TofuError(f"hostfile '{args.hostfile}' lists {len(hosts)} hosts; {args.machines} machines need "
                        f"{args.machines} (one machine per host)")
    global_batch = split_batch(run, args.machines)
    options = ModelOptions(batch=global_batch, seq_len=run.seq_len, vocab=run.vocab)
    whole = load_graph(run.model, options)
    if hosts is None:                                    # a remote host's GPUs cannot be counted from here
        check_contexts(args.workers, run.ctx)
    checkpoint_policy(run)
    start = resumed(run, whole)
    if run.load:
        from tofu.runtime.data import load_checkpoint

        load_checkpoint(run.load, whole)
    graph = model_graph(run, with_loss=True)                  # one machine's share of the batch
    plan = load_plan(graph, args.workers, run.algo or "tofu", run.plan)
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="tofu-launch-"))
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TofuError(f"cannot create the log directory '{log_dir}': {e.strerror}") from None
    log_dir = log_dir.absolute()
    for stale in log_dir.glob("machine*.*"):            # a result is never mistaken for this run's
        stale.unlink()
    plan_file = log_dir / "plan.json"
    plan.save(plan_file)
    command = _worker_command(run, args.workers, global_batch, str(plan_file))
    env = {"TOFU_LAUNCH_DIR": str(log_dir)}
    terminal = not run.json
    if terminal:
        where = f"hosts of {args.hostfile}" if hosts else "loopback"
        print(f"tofu launch: {graph.name}, {args.machines} machines x {args.workers} {run.ctx} contexts, "
              f"{args.servers} server{'s' * (args.servers > 1)} ({where}); global batch {global_batch} "
              f"({run.batch} per machine); plan {plan.algo} ({'x'.join(str(t.factor) for t in plan.steps) or '1'}); "
              f"logs in {log_dir}", flush=True)

    def stop(signum, frame):        # the launcher killed: every process goes with it (supervise's cleanup)
        raise launch.LaunchError(f"tofu launch was stopped by {signal.Signals(signum).name}; every process it "
                                 f"started has been stopped (logs: {log_dir})")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        if hosts:
            launched = launch.launch_hosts(command, args.machines, args.servers, hosts, log_dir=log_dir,
                                           port=args.port, timeout_s=args.timeout, env=env)
        else:
            launched = launch.launch_local(command, args.machines, args.servers, log_dir=log_dir,
                                           timeout_s=args.timeout, env=env)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return _launch_summary(run, args, whole, start, log_dir, launched.seconds, terminal)


def _launch_summary(run, args, whole, start, log_dir, seconds: float, terminal: bool) -> int:
    """Each machine's steps, kvstore bytes and time, and with ``--check`` the comparison with one device."""
    import statistics

    from tofu.runtime.data import initial_values, load_checkpoint, synthetic_batch
    from tofu.runtime.distributed import check_against_one_device, collect_results

    report = collect_results(log_dir, whole, args.machines, seconds)
    check = None
    if run.check:
        values = start.values if start else (load_checkpoint(run.load, whole) if run.load
                                             else initial_values(whole, run.seed))
        check = check_against_one_device(whole, report, values, start.momentum if start else None,
                                         synthetic_batch(whole, run.seed + 1), run.lr, run.momentum)
    if not terminal:
        doc = {"model": whole.name, "machines": args.machines, "workers": args.workers, "servers": args.servers,
               "global_batch": report.machines[0].global_batch, "algo": report.machines[0].algo,
               "log_dir": str(log_dir), "seconds": seconds, "losses": list(report.losses),
               "first_step": report.machines[0].resumed_step + 1,
               "measured_kvstore_bytes": report.measured_bytes, "predicted_kvstore_bytes": report.predicted_bytes,
               "replica_max_abs_diff": report.replica_max_abs_diff,
               "machine_reports": [m.to_json() for m in report.machines]}
        if check is not None:
            doc.update({"max_abs_diff": check.loss, "loss_max_abs_diff": check.loss,
                        "parameter_max_rel_diff": check.parameters, "reference_losses": list(check.reference_losses)})
        print(dumps(doc))
        return 0
    for m in report.machines:
        first = m.resumed_step + 1
        span = f"steps {first}-{first + len(m.losses) - 1}" if m.losses else "no steps"
        losses = f", loss on its rows {m.losses[0]:.6f} -> {m.losses[-1]:.6f}" if m.losses else ""
        pushed = statistics.median(m.pushed_bytes) if m.pushed_bytes else 0
        pulled = statistics.median(m.pulled_bytes) if m.pulled_bytes else 0
        step = statistics.median(m.step_seconds) * 1e3 if m.step_seconds else float("nan")
        print(f"machine {m.machine}: {span}{losses}; kvstore {gb(pushed)} pushed + {gb(pulled)} pulled per "
              f"step (predicted {gb(2 * m.predicted_bytes)}); median step {step:.1f} ms, "
              f"{sum(m.step_seconds):.2f} s in steps")
    print(f"replicas after training: max |diff| {report.replica_max_abs_diff:.3g} between machines; "
          f"the run took {seconds:.1f} s")
    if check is not None:
        print(f"check against one device on the global batch: losses max |diff| {check.loss:.3g}, parameters "
              f"after the last step max rel diff {check.parameters:.3g}")
    if run.checkpoint:
        print(f"checkpoint {os.path.abspath(run.checkpoint)} every {run.checkpoint_every} steps (by machine 0)")
    if run.save:
        print(f"saved {os.path.abspath(run.save)} (whole tensors, MXNet .params) by machine 0")
    return 0
