"""``tofu run MODEL --workers K``: partitioned training steps on K contexts, measured (copies, memory, time);
``--check`` beside one device; checkpoints. Under ``tofu launch`` (``DMLC_ROLE=worker``) it runs as one machine of
a hybrid run."""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Sequence

from tofu.cli.common import (check_contexts, dumps, finite, gb, input_path, model_args, model_graph,
                             output_path)
from tofu.errors import CheckFailedError, TofuError
from tofu.graph.ir import Role
from tofu.runtime import DEFAULT_RTOL, FLOAT64_SCALE

FLOAT32_MAX = 3.4028234663852886e38


def add_parser(sub) -> None:
    from tofu.search.algorithms import ALGORITHMS

    p = sub.add_parser("run", help="train a model partitioned over K devices, measured (--check: against one)")
    model_args(p)
    p.add_argument("--workers", type=int, help="number of devices K (default 4; under `tofu launch`, its K)")
    p.add_argument("--algo", choices=sorted(ALGORITHMS), help="plan finder (default tofu)")
    p.add_argument("--plan", metavar="PLAN.json", help="run a saved plan (checked against the model)")
    p.add_argument("--ctx", choices=("cpu", "gpu"), default="cpu", help="device kind (default cpu)")
    p.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    p.add_argument("--lr", type=finite, default=0.05,
                   help="SGD learning rate, applied to the loss's gradient as MXNet's backward gives it (not divided "
                        "by the batch, as Module's default rescale_grad is); a parameter's __lr_mult__ scales it "
                        "(default 0.05)")
    p.add_argument("--momentum", type=finite, default=0.9, help="SGD momentum, in [0, 1) (default 0.9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial values and the batch (0 to 2^32 - 2)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=int:LOW:HIGH",
                   help="input NAME gets integers from LOW to HIGH, both included (repeatable; default: inputs read "
                        "as indices or lengths get their valid range, others standard normal values)")
    p.add_argument("--check", action="store_true",
                   help="run one device beside it and compare (Dropout off on both sides); a step beyond --rtol is "
                        f"run again on both sides in float64, held to --rtol x {FLOAT64_SCALE:g}; exit 1 if that "
                        f"differs too")
    p.add_argument("--rtol", type=finite, default=DEFAULT_RTOL,
                   help=f"with --check: the largest relative difference of outputs, gradients, losses and "
                        f"parameter updates that passes (default {DEFAULT_RTOL:g})")
    p.add_argument("--memory", action="store_true",
                   help="measure each device's peak memory over one step with MXNet's profiler (up to 4 CPU contexts)")
    p.add_argument("--no-replicas", dest="replicas", action="store_false",
                   help="bind the partitioned graph as the rewriter builds it: each parameter shard read whole on "
                        "another device sent there through the graph, not held there as a replica (less memory: the "
                        "plan's 'replicas' figure; slower)")
    p.add_argument("--save", metavar="CKPT.params", help="save the trained parameters (whole tensors)")
    p.add_argument("--load", metavar="CKPT.params", help="start from saved parameters")
    p.add_argument("--checkpoint", metavar="CKPT.params",
                   help="write parameters, momentum and step here (atomically) every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, metavar="N", help="with --checkpoint: every N steps")
    p.add_argument("--resume", metavar="CKPT.params",
                   help="continue from a --checkpoint file (its parameters, momentum and step) up to --steps")
    p.add_argument("--fail-at-step", type=int, metavar="N",
                   help="for testing only: after step N the process (under launch: the last machine) kills itself")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    """``tofu run``: partitioned training steps on K contexts, measured; ``--check`` beside one device."""
    from tofu.api import has_loss, load_plan, partitioned, reference_symbol
    from tofu.runtime.data import initial_values, load_checkpoint, save_checkpoint, synthetic_batch
    from tofu.runtime.run import train

    if os.environ.get("DMLC_ROLE") == "worker":      # started by `tofu launch`: one machine of a hybrid run
        return _run_machine(args)
    check_run_args(args)
    if args.workers is None:
        args.workers = 4
    graph = model_graph(args, with_loss=True)
    if len(graph.heads) == 1 and not has_loss(graph):
        shape = graph.tensors[graph.heads[0]].shape
        raise TofuError(f"the model's output has shape {shape}: give it a loss to train (a softmax loss is added "
                        f"only to one (batch, classes) output of 2 classes or more; a regression, for one: "
                        f"LinearRegressionOutput)")
    from tofu.graph.gradients import trained_parameters

    if graph.by_role(Role.PARAM) and not trained_parameters(graph):
        print("tofu: note: no parameter gets a gradient from the loss (it is computed behind BlockGrad, a rounding "
              "or a comparison): the steps change no parameter", file=sys.stderr)
    dropout_off: tuple[str, ...] = ()
    if args.check:                       # the two sides cannot draw the same masks: compare without them
        from tofu.graph.deterministic import without_dropout

        graph, dropout_off = without_dropout(graph)
    check_contexts(args.workers, args.ctx)
    policy = checkpoint_policy(args)
    start = resumed(args, graph)
    plan = load_plan(graph, args.workers, args.algo or "tofu", args.plan)
    pg = partitioned(graph, plan)
    values = load_checkpoint(args.load, graph) if args.load else initial_values(graph, args.seed)
    batch = synthetic_batch(graph, args.seed + 1, args.input_ranges)
    terminal = not args.json

    def progress(step, loss, seconds, ref):
        if terminal:
            extra = f"  one device {ref:.6f}" if ref is not None else ""
            print(f"step {step}/{args.steps}  loss {loss:.6f}  {seconds * 1e3:8.1f} ms{extra}", flush=True)
        if step == args.fail_at_step:
            os.kill(os.getpid(), signal.SIGKILL)

    if terminal:
        factors = "x".join(str(s.factor) for s in plan.steps) or "1"
        print(f"{graph.name}: {len(graph.nodes)} ops on {args.workers} {args.ctx} contexts, plan {plan.algo} "
              f"({factors}); partitioned graph: {len(pg.variables)} shard variables", flush=True)
    import mxnet as mx

    from tofu.graph.single_op import first_line

    try:
        report = train(graph, plan, pg, values, batch, args.steps,
                       reference_symbol(graph) if args.check else None, args.ctx, args.lr, args.momentum,
                       progress, start=start, checkpoint=policy, dropout_off=dropout_off, rtol=args.rtol,
                       replicas=args.replicas)
    except mx.base.MXNetError as e:      # a kernel or bind MXNet refuses at run time: one line, not its trace
        if "head_gradient is required" in str(e):
            raise TofuError(_not_a_loss(graph)) from None
        hint = ("; an input a kernel reads as integers only (softmax's length) is float32 unless the symbol "
                "declares its type: mx.sym.var(NAME, dtype='int32')") if "only support integer types" in str(e) else ""
        raise TofuError(f"MXNet cannot run the partitioned graph: {first_line(e)}{hint}") from None
    if args.memory and args.ctx == "cpu":
        from tofu.runtime.memory import MAX_PROFILED_DEVICES, measure_device_peaks

        peaks = measure_device_peaks(pg, replicas=args.replicas)
        if peaks is None and terminal:
            print(f"per-device memory is measured up to {MAX_PROFILED_DEVICES} CPU contexts (MXNet's profiler)")
        report = dataclasses.replace(report, per_device_peak_bytes=peaks)
    if args.save:
        from tofu.graph.mxnet_import import numpy_semantics

        save_checkpoint(args.save, graph, report.final_values, plan, numpy_semantics(args.model))
    failed = report.check.failures(args.rtol) if report.check is not None else ()
    if args.json:
        doc = report.to_json()
        if report.check is not None:
            doc.update({"rtol": args.rtol, "check_passed": not failed})
        print(dumps(doc))
        _check_passed(failed, args.rtol)
        return 0
    print(f"cross-device copies per iteration: {report.copies}, {gb(report.measured_comm_bytes)} "
          f"(forward {gb(report.measured_forward_bytes)}, backward {gb(report.measured_backward_bytes)}); "
          f"the plan predicted {gb(report.predicted_comm_bytes)}")
    mem = report.predicted_per_device_bytes
    step = f"median step {report.median_step_seconds * 1e3:.1f} ms" if args.steps else "no step run (--steps 0)"
    extra = f" + {gb(mem['replicas'])} for the parameter replicas" if args.replicas and mem.get("replicas") else ""
    print(f"per-device memory (plan's model): {gb(mem.get('total', 0))}{extra}; {step}, "
          f"bind {report.bind_seconds:.2f} s")
    if report.per_device_peak_bytes:
        from tofu.runtime.memory import estimated_device_peaks

        print("per-device peak memory (MXNet's profiler): " + ", ".join(gb(p) for p in report.per_device_peak_bytes))
        print("per-device estimate (the plan's, with every context's temporary space on cpu(0)): "
              + ", ".join(gb(e) for e in estimated_device_peaks(mem, args.workers, args.replicas)))
    if report.check is not None:
        c = report.check
        if c.dropout_off:
            off = set(c.dropout_off)
            samplers = sum(1 for n in graph.nodes if n.name in off and n.op != "Dropout")
            what = f"{len(off) - samplers} ops at p = 0" + (f", {samplers} samplers at their means" if samplers else "")
            print(f"check with Dropout off on both sides ({what}: their masks and samples are drawn per device and "
                  f"cannot match one device's)")
        within = not c.exceeded(args.rtol)
        print(f"check against one device (each step from the same state): outputs max |diff| {c.output:.3g} "
              f"(rel {c.output_rel:.3g}), gradients max rel diff {c.gradient:.3g}, losses max |diff| {c.loss:.3g} "
              f"(rel {c.loss_rel:.3g}), parameter updates max rel diff {c.parameters:.3g}: "
              f"{'passed' if within else 'beyond'} (rtol {args.rtol:g})")
        if not within:                   # float64's second opinion decides
            print(f"check: {c.verdict(args.rtol)}: {'FAILED' if failed else 'passed'}")
    if args.save:
        print(f"saved {args.save} (whole tensors, MXNet .params) and its plan beside it")
    if policy is not None:
        print(f"checkpoint {policy.path} every {policy.every} steps (parameters, momentum and step)")
    _check_passed(failed, args.rtol)
    return 0


def _check_passed(failed: Sequence[str], rtol: float) -> None:
    """Raises CheckFailedError (exit status 1) naming what exceeded ``rtol`` in float32 and what float64 said
    (:meth:`~tofu.runtime.run.Check.failures`), if the check failed."""
    if failed:
        raise CheckFailedError(f"--check failed: {', '.join(failed)} (the partitioned run differs from one "
                               f"device; --rtol sets the tolerance, default {DEFAULT_RTOL:g}; float64's is "
                               f"--rtol x {FLOAT64_SCALE:g})")


def check_run_args(args) -> None:
    """The checks of ``tofu run``'s options that need no model."""
    if args.steps < 0:
        raise TofuError(f"--steps must be >= 0, got {args.steps}")
    from tofu.runtime.data import parse_input_option

    args.input_ranges = [parse_input_option(s) for s in getattr(args, "input", ())]
    if not 0 <= args.seed < 2**32 - 1:          # numpy's and MXNet's seeds; the batch is drawn with seed + 1
        raise TofuError(f"--seed must be in [0, 2^32 - 2], got {args.seed}")
    if not 0 < args.lr <= FLOAT32_MAX:          # MXNet's update takes it as a float32
        raise TofuError(f"--lr must be positive and at most {FLOAT32_MAX:.4g} (float32), got {args.lr:g}")
    if not 0 <= args.momentum < 1:
        raise TofuError(f"--momentum must be in [0, 1), got {args.momentum:g}")
    if not args.rtol > 0:
        raise TofuError(f"--rtol must be positive, got {args.rtol:g}")
    if args.plan and args.algo:
        raise TofuError("give --algo or --plan, not both")
    if args.resume and args.load:
        raise TofuError("give --load (parameters) or --resume (a checkpoint: parameters, momentum, step), not both")
    if (args.checkpoint is None) != (args.checkpoint_every is None):
        raise TofuError("--checkpoint PATH and --checkpoint-every N go together")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise TofuError(f"--checkpoint-every must be at least 1, got {args.checkpoint_every}")
    for path, what in ((args.plan, "plan"), (args.load, "checkpoint"), (args.resume, "checkpoint")):
        input_path(path, what)
    if args.save:
        from tofu.runtime.data import plan_path

        output_path(args.save, "checkpoint")
        output_path(str(plan_path(args.save)), "the plan beside --save")
    if args.checkpoint:
        from tofu.runtime.data import plan_path

        output_path(args.checkpoint, "checkpoint")
        output_path(str(plan_path(args.checkpoint)), "the plan beside --checkpoint")
    written: dict[str, str] = {}           # every file the run writes, so that none overwrites another
    for path, what in ((args.save, "--save"), (args.checkpoint, "--checkpoint")):
        if path:
            from tofu.runtime.data import plan_path

            for target, name in ((path, f"{what} '{path}'"), (str(plan_path(path)), f"the plan beside {what} "
                                                                                       f"'{path}'")):
                other = written.setdefault(os.path.abspath(target), name)
                if other != name:
                    raise TofuError(f"{other} and {name} write the same file '{target}': one would overwrite "
                                    f"the other")
    if args.fail_at_step is not None and not 1 <= args.fail_at_step <= args.steps:
        raise TofuError(f"--fail-at-step must be a step of this run (1 to {args.steps}), got {args.fail_at_step}")


def checkpoint_policy(args):
    """``--checkpoint`` and ``--checkpoint-every`` as a policy (None without them), the path made absolute."""
    from pathlib import Path

    from tofu.runtime.checkpoint import CheckpointPolicy

    if args.checkpoint is None:
        return None
    path = Path(args.checkpoint).absolute()
    if not path.parent.is_dir():
        raise TofuError(f"cannot write checkpoint '{args.checkpoint}': no directory '{path.parent}'")
    return CheckpointPolicy(path, args.checkpoint_every)


def resumed(args, graph):
    """The training state of ``--resume`` (None without it), checked against the model and ``--steps``."""
    if not args.resume:
        return None
    from tofu.runtime.checkpoint import load_training_state

    state = load_training_state(args.resume, graph)
    if state.step >= args.steps:
        raise TofuError(f"checkpoint '{args.resume}' is at step {state.step}: --steps {args.steps} leaves nothing "
                        f"to run (--steps is the number of the last step)")
    return state


def _run_machine(args) -> int:
    """``tofu run`` as one machine of ``tofu launch`` (its environment names the kvstore and ``TOFU_LAUNCH_DIR``,
    where it writes ``machine{m}.json`` and ``machine{m}.params``). A failure exits at once (``os._exit``): MXNet's
    shutdown would wait at ps-lite's final barrier for machines that wait for this one's gradients."""
    import traceback

    from tofu.models import ModelOptions
    from tofu.runtime.dist_worker import MachineOptions, run_machine

    try:
        out_dir = os.environ.get("TOFU_LAUNCH_DIR")
        if not out_dir:
            raise TofuError("started as a kvstore worker (DMLC_ROLE=worker) without TOFU_LAUNCH_DIR: start it "
                            "with `tofu launch`")
        check_run_args(args)
        options = MachineOptions(args.steps, args.lr, args.momentum, args.seed, args.ctx, checkpoint_policy(args),
                                 args.resume, args.load, args.save, args.fail_at_step)
        report = run_machine(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab),
                             args.workers or 4, out_dir, algo=args.algo or "tofu", plan_path=args.plan,
                             progress=_machine_progress, options=options)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        _abandon(2)
    except BaseException:           # the traceback goes to this machine's log
        traceback.print_exc()
        _abandon(1)
    print(dumps(report.to_json()), flush=True)
    return 0


def _machine_progress(machine: int, step: int, loss: float) -> None:
    print(f"machine {machine} step {step} loss {loss:.6f}", flush=True)


def _abandon(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _not_a_loss(graph) -> str:
    """The error for a model MXNet cannot train because an output that a gradient reaches is not a loss (MXNet's
    backward then needs that output's gradient, which training does not give), naming the likely outputs."""
    from tofu.graph.ir import LOSS_OPS

    suspects = [graph.tensors[t] for t in dict.fromkeys(graph.heads) if t in graph.with_gradient
                and graph.nodes[graph.tensors[t].producer].op not in LOSS_OPS | {"BlockGrad", "stop_gradient"}]
    named = ", ".join(f"'{t.name}' ({graph.nodes[t.producer].op})" for t in suspects) or "one of them"
    return (f"the model's outputs are not all losses: MXNet's backward needs a gradient for {named}; pass such an "
            f"output through BlockGrad to output it untrained, or make_loss to train on it")
