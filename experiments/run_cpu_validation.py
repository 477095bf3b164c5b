"""The engine (``tofu.sim.engine``) against measured training steps on this CPU, and its kernel curves against
measured single ops.

    python experiments/run_cpu_validation.py [--models mlp,wresnet-tiny,rnn-tiny,gpt-tiny,resnet18_v1]
                                             [--workers 1,2,4] [--algos tofu,data-parallel,spartan]
                                             [--seconds 3] [--levels op,step] [--tag cpu_validation]
                                             [--out-dir results/sim] [--cpus 0] [--quick] [--replicas]

Level ``step``: for each model, each of its two batches (``BATCHES``) and each k in ``--workers``, every plan of
``--algos`` (at k = 1 only the first: one worker has one plan) is partitioned and bound on cpu(0..k-1); after
``WARMUP_STEPS`` steps each, the plans' training steps (:class:`tofu.runtime.train.Trainer`'s ``step``, what
``tofu.runtime.run.train`` runs: forward, backward, SGD update, all waited for) are timed round-robin, one step of
each plan in turn, for about ``--seconds`` (at least ``MIN_STEPS``), so that the other jobs of a shared machine
slow every plan of a configuration alike; ``measured_seconds`` is a plan's median step. Beside it,
``predicted_seconds``: the engine's simulated iteration of the same plan on profile ``cpu``
(:func:`tofu.sim.engine.simulate_iteration` on the partitioned MXNet symbol), which reads nothing measured here
(the profile was fitted by :mod:`tofu.sim.calibrate` on single operators). ``resnet18_v1`` is Gluon's model-zoo
network (random weights, 10 classes, no download) exported to a symbol file at ``ZOO_IMAGE`` x ``ZOO_IMAGE``
pixels (``experiments.run_zoo_check.export``) and read back as a user's file. The graph is bound as the rewriter
builds it (``Trainer(..., replicas=False)``: the graph the profile is calibrated on); ``--replicas`` binds and
simulates it with the runtime's parameter replicas instead (``tofu run``'s default, :mod:`tofu.runtime.replicas`).

Level ``op`` (the kernel curves alone): each case of ``OP_CASES`` binds one MXNet operator (inputs with
gradients), median of ``--repeats`` forward + backward calls, beside the profile's executor call plus the curve of
each kernel call (forward and backward, :func:`tofu.sim.kernels.seconds`). The cases are not in the calibration
sets of :mod:`tofu.sim.calibrate` (tests/sim/test_cpu_validation.py checks it).

Error = predicted / measured - 1. One CSV row per case in ``<out-dir>/<tag>.csv``, written as soon as it is
measured; a JSON sidecar with the arguments, versions, the profile's calibration and the summary
(:func:`experiments.table_cpu_validation.summary`: per level, the median and worst |error|; for steps, the ranking agreement: over every pair of plans of one
(model, batch, k >= 2), the fraction where the plan the engine simulates faster is the one measured faster, pairs
the engine ties excluded). Progress lines on stderr. ``--cpus``: the whole process (the calibration that
``--recalibrate`` makes, the plans' MXNet workers) pinned to those cores, so that the k contexts' threads share
them alone (docs/sim.md, "How steady a step is here"). ``--quick``: three ops, mlp at one batch, k = 1, 2 (well under
a minute).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

from experiments.common import RowWriter, pin_option, rerun_source, six_digits, write_sidecar  # noqa: E402
from experiments.table_cpu_validation import summary  # noqa: E402
from tofu.sim.calibrate import activation, batchnorm, binary, conv, fc, pooling  # noqa: E402

COLUMNS = ("level", "model", "batch", "workers", "plan", "status", "measured_seconds", "predicted_seconds",
           "relative_error", "steps", "measured_p25_seconds", "measured_p75_seconds", "tasks", "copies",
           "predicted_busy_seconds", "op_class", "flops", "bytes", "message")
ZOO_NET = "resnet18_v1"
ZOO_IMAGE = 32
BATCHES = {"mlp": (16, 64), "wresnet-tiny": (4, 16), "rnn-tiny": (8, 32), "gpt-tiny": (4, 16), ZOO_NET: (4, 8)}
"""Two batches per model, each divisible by 4 (data parallelism over k = 4)."""
MODELS = tuple(BATCHES)
ALGOS = ("tofu", "data-parallel", "spartan")
WARMUP_STEPS = 3
MIN_STEPS = 10
MAX_STEPS = 400


# The op-level validation set: none of these shapes is in tofu.sim.calibrate's calibration or sweep sets
# (tests/sim/test_cpu_validation.py checks it).
OP_CASES = (
    conv(8, 16, 32, 16, 3), conv(16, 64, 16, 64, 3), conv(32, 64, 28, 128, 1),
    fc(64, 1024, 1024), fc(256, 512, 256), fc(32, 4096, 4096),
    batchnorm((16, 64, 32, 32)), batchnorm((32, 128, 14, 14)),
    activation((16, 64, 32, 32)), activation((64, 4096)),
    binary("elemwise_add", (16, 64, 32, 32)), binary("elemwise_add", (256, 1024)),
    pooling((16, 64, 32, 32)), pooling((32, 128, 28, 28)),
)
QUICK_OP_CASES = (OP_CASES[0], OP_CASES[3], OP_CASES[9])


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------- op level

def op_prediction(case, out_shapes, profile) -> tuple[float, object]:
    """The profile's executor call plus each kernel call's curve (forward, and backward when an input has a
    gradient), and the case's forward work."""
    from tofu.sim.calibrate import case_work
    from tofu.sim.flops import backward_work
    from tofu.sim.kernels import kernel_model, seconds

    work = case_work(case, out_shapes)
    bf, bb = backward_work(work, case.grads)
    calls = [(work.flops, work.bytes)] + ([(bf, bb)] if bf or bb else [])
    model = kernel_model(profile)
    return profile.step_seconds + sum(seconds(work.op_class, f, b, model, grain=work.grain) for f, b in calls), work


def op_row(case, repeats: int, runs: int, profile) -> dict:
    """The median over ``runs`` runs of the median of ``repeats`` calls, beside the curves' prediction."""
    from tofu.sim.calibrate import measure_op

    times = []
    for _ in range(runs):
        t, out_shapes = measure_op(case, repeats)
        times.append(t)
    measured = statistics.median(times)
    predicted, work = op_prediction(case, out_shapes, profile)
    return {"status": "ok", "measured_seconds": measured, "predicted_seconds": predicted,
            "relative_error": predicted / measured - 1, "flops": work.flops, "bytes": work.bytes,
            "op_class": work.op_class.value, "steps": repeats * runs}


# ----------------------------------------------------------------------------------------------- step level

def graph_of(model: str, batch: int, work_dir: Path):
    """The model's graph at ``batch``: a zoo model by name, or :data:`ZOO_NET` exported from Gluon and read back."""
    from tofu.api import load_graph
    from tofu.models import ModelOptions

    if model != ZOO_NET:
        return load_graph(model, ModelOptions(batch=batch))
    from experiments.run_zoo_check import export

    symbol_file = work_dir / f"{ZOO_NET}-symbol.json"
    if not symbol_file.exists():
        symbol_file = export(ZOO_NET, ZOO_IMAGE, batch, work_dir)
    return load_graph(str(symbol_file), shapes={"data": (batch, 3, ZOO_IMAGE, ZOO_IMAGE)}, with_loss=True)


def measure_round_robin(steps: Sequence[Callable[[], float]], seconds: float, min_steps: int = MIN_STEPS,
                        max_steps: int = MAX_STEPS) -> list[list[float]]:
    """Each of ``steps`` (a callable that runs one step and returns its seconds) run in turn, round after round,
    until about ``seconds`` have passed and every one has run at least ``min_steps`` times (at most
    ``max_steps``); the times of each, in order."""
    times: list[list[float]] = [[] for _ in steps]
    start = time.perf_counter()
    for i in itertools.count():
        if i >= max_steps or (i >= min_steps and time.perf_counter() - start >= seconds):
            break
        for step, out in zip(steps, times):
            out.append(step())
    return times


def _quantile(xs: Sequence[float], q: float) -> float:
    return statistics.quantiles(xs, n=4)[int(q * 4) - 1] if len(xs) > 1 else xs[0]


def step_rows(model: str, batch: int, workers: int, algos: Sequence[str], seconds: float, profile,
              work_dir: Path, replicas: bool = False) -> list[dict]:
    """One row per plan of (model, batch, workers): the measured median step beside the simulated iteration;
    ``replicas``: both with the runtime's parameter replicas (``tofu run``'s default), else the graph as the
    rewriter builds it (what the ``cpu`` profile is calibrated on)."""
    from tofu.api import partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph
    from tofu.sim.engine import simulate_iteration
    from tofu.sim.program import TaskKind

    graph = graph_of(model, batch, work_dir)
    values = {**initial_values(graph), **synthetic_batch(graph)}
    rows, trainers = [], []
    for algo in algos:
        base = {"level": "step", "model": model, "batch": batch, "workers": workers, "plan": algo}
        try:
            plan = plan_graph(graph, workers, algo)
            trainer = Trainer(partitioned(graph, plan), values, "cpu", lr=1e-3, replicas=replicas)
            for _ in range(WARMUP_STEPS):
                trainer.step()
            run = simulate_iteration(graph, plan, profile, from_symbol=True, replicas=replicas)
        except Exception as e:          # keep the case, say why (a failed case is a result too)
            rows.append({**base, "status": "error", "message": f"{type(e).__name__}: {e}"[:200]})
            continue
        tasks = run.program.tasks
        rows.append({**base, "status": "ok", "predicted_seconds": run.seconds, "tasks": len(tasks),
                     "copies": sum(t.kind is TaskKind.COPY for t in tasks), "predicted_busy_seconds": sum(run.busy)})
        trainers.append((rows[-1], trainer))

    def timed(trainer):
        def step() -> float:
            trainer.step()
            return trainer.step_seconds[-1]
        return step
    times = measure_round_robin([timed(t) for _, t in trainers], seconds)
    for (row, _), ts in zip(trainers, times):
        measured = statistics.median(ts)
        row.update(measured_seconds=measured, relative_error=row["predicted_seconds"] / measured - 1, steps=len(ts),
                   measured_p25_seconds=_quantile(ts, 0.25), measured_p75_seconds=_quantile(ts, 0.75))
    return rows


# ----------------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated from {', '.join(MODELS)}")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--algos", default=",".join(ALGOS), help="plans per configuration (k = 1: the first only)")
    p.add_argument("--seconds", type=float, default=3.0, help="measuring time per (model, batch, k)")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per op (median)")
    p.add_argument("--runs", type=int, default=3, help="runs per op case (median of the runs' medians)")
    p.add_argument("--levels", default="op,step", help="comma-separated from op, step")
    p.add_argument("--calibration", type=Path, default=None,
                   help="the cpu profile's cache file (default: tofu.sim.profile('cpu')'s)")
    p.add_argument("--recalibrate", action="store_true", help="measure the cpu profile again (else cached)")
    p.add_argument("--tag", default="cpu_validation")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    p.add_argument("--cpus", default=None, help="comma-separated core numbers to pin the process to")
    p.add_argument("--quick", action="store_true", help="three ops, mlp at one batch, k = 1, 2")
    p.add_argument("--replicas", action="store_true",
                   help="the step level binds and simulates the runtime's parameter replicas (tofu run's default)")
    args = p.parse_args(argv)
    from tofu.search.algorithms import ALGORITHMS

    models, algos = args.models.split(","), args.algos.split(",")
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model '{m}' (choose from {', '.join(MODELS)})")
    for a in algos:
        if a not in ALGORITHMS:
            p.error(f"unknown algorithm '{a}' (choose from {', '.join(ALGORITHMS)})")
    workers = [int(w) for w in args.workers.split(",")]
    levels = args.levels.split(",")
    pin_option(args.cpus, p.error)
    batches = dict(BATCHES)
    if args.quick:
        models, workers, args.seconds, args.repeats, args.runs = ["mlp"], [1, 2], 1.0, 5, 1
        batches["mlp"] = batches["mlp"][:1]

    from tofu.sim import profile as named_profile
    from tofu.sim.calibrate import calibration

    cal = calibration(args.calibration, args.recalibrate) if args.calibration or args.recalibrate else calibration()
    prof = cal.profile() if args.calibration or args.recalibrate else named_profile("cpu")
    log(f"cpu profile: GEMM {cal.gemm_flops / 1e9:.1f} GFLOP/s, executor call {cal.call_seconds * 1e6:.1f} us, "
        f"copy {cal.copy_launch_seconds * 1e6:.1f} us + "
        f"{cal.cross_context_bandwidth / 1e9:.1f} GB/s, update {cal.update_seconds * 1e6:.1f} us")
    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    rows: list[dict] = []
    started = time.perf_counter()

    def record(row: dict) -> None:
        rows.append(row)
        writer.write(six_digits(row))
        err = row.get("relative_error")
        log(f"[{time.perf_counter() - started:6.1f} s] {row['level']:<4} {row['model']:<38} b={row['batch']:<3} "
            f"k={row['workers']} {row.get('plan', ''):<13} {row['status']:<5} "
            f"measured {row.get('measured_seconds', float('nan')) * 1e3:8.3f} ms  "
            f"simulated {row.get('predicted_seconds', float('nan')) * 1e3:8.3f} ms  "
            f"error {'-' if err is None else f'{err:+.0%}'}" + (f"  {row['message']}" if row.get("message") else ""))

    if "op" in levels:
        for case in (QUICK_OP_CASES if args.quick else OP_CASES):
            base = {"level": "op", "model": case.name, "batch": case.inputs[0][1][0], "workers": 1, "plan": ""}
            try:
                record({**base, **op_row(case, args.repeats, args.runs, prof)})
            except Exception as e:
                record({**base, "status": "error", "message": f"{type(e).__name__}: {e}"[:200]})
    if "step" in levels:
        with tempfile.TemporaryDirectory() as tmp:
            for model in models:
                for batch in batches[model]:
                    work_dir = Path(tmp) / f"{model}-{batch}"
                    work_dir.mkdir()
                    for k in workers:
                        try:
                            found = step_rows(model, batch, k, algos if k > 1 else algos[:1], args.seconds, prof,
                                              work_dir, args.replicas)
                        except Exception as e:      # the model itself failed (import, export)
                            found = [{"level": "step", "model": model, "batch": batch, "workers": k, "plan": "",
                                      "status": "error", "message": f"{type(e).__name__}: {e}"[:200]}]
                        for row in found:
                            record(row)
    writer.close()
    result = summary(rows)
    write_sidecar(path, vars(args), calibration=dataclasses.asdict(cal), summary=result,
                  profile={"name": prof.name, "source": prof.source, "step_seconds": prof.step_seconds,
                           "copy_launch_seconds": prof.copy_launch_seconds, "concurrency": prof.concurrency},
                  seconds=time.perf_counter() - started, **rerun_source())
    for level, s in result.items():
        line = (f"{level}: {s['cases']} cases, median |error| {s['median_abs_relative_error']:.1%}, "
                f"worst {s['worst_abs_relative_error']:.1%} ({s['worst_case']})")
        if "ranking" in s:
            r = s["ranking"]
            line += f"; ranking agreement {r['agree']}/{r['pairs']} ({r['agreement']:.0%}), {r['ties']} ties"
        print(line)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
