"""Where one training step's time goes, per MXNet op: MXNet's profiler beside the engine's tasks.

    python experiments/run_op_profile.py MODEL [--batch B] [--workers K] [--algo tofu] [--steps 20]
                                         [--calibration PATH] [--cpus 0] [--tag op_profile] [--out-dir results/sim]

MODEL: a zoo model (``mlp``, ``gpt-tiny``, ...) or ``resnet18_v1`` (Gluon's, exported as in
``experiments/run_cpu_validation.py``). The plan of ``--algo`` at ``--workers`` CPU contexts is bound as ``tofu
run`` binds it, with MXNet's bulk execution off (each op its own profiler event), warmed up, and ``--steps``
training steps run under MXNet's profiler (``profile_symbolic``, ``profile_imperative``: the updates too). Per op
(the event's name: ``Convolution``, ``_backward_Convolution``, ``sgd_mom_update``, ...): its calls and seconds
per step, beside the engine's (:func:`tofu.sim.engine.simulate_iteration` on the same plan and profile ``cpu``:
the tasks of that op and the time their spans take). One CSV row per op, a ``step`` row (the profiled median step
and the engine's iteration), a JSON sidecar. This is how docs/sim.md's "Kernels measured apart" found which kernels
depart from their class. Read the large kernels' rows at one context: the profiler's events of ops of a few
microseconds are stretched by its own overhead (their sum can exceed the step), and on several contexts the small
ops' events overlap the waits of their engine threads (on wresnet-tiny at k = 2, copies and element-wise ops of
tens of milliseconds each in a 24 ms step), while the kernels' stay close to one context's.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

from experiments.common import RowWriter, pin_option, six_digits, write_sidecar  # noqa: E402

COLUMNS = ("model", "batch", "workers", "plan", "op", "measured_calls", "measured_seconds", "simulated_calls",
           "simulated_seconds", "ratio")
STEP = "step"


def profile_rows(model: str, batch: int, workers: int, algo: str, steps: int, calibration: Path | None,
                 work_dir: Path) -> list[dict]:
    """One row per op of the step (see the module docstring) and a ``step`` row."""
    import mxnet as mx

    from experiments.run_cpu_validation import graph_of
    from experiments.run_runtime_overhead import trace_spans
    from tofu.api import partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph
    from tofu.sim.calibrate import DEFAULT_CACHE, cpu_profile
    from tofu.sim.engine import simulate_iteration

    graph = graph_of(model, batch, work_dir)
    plan = plan_graph(graph, workers, algo)
    saved = os.environ.get("MXNET_EXEC_BULK_EXEC_TRAIN")
    os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"] = "0"          # read at bind: every op its own event
    try:
        trainer = Trainer(partitioned(graph, plan), {**initial_values(graph), **synthetic_batch(graph)}, "cpu",
                          lr=1e-3, replicas=False)      # the graph tofu.sim.program models: routes, no replicas
    finally:
        if saved is None:
            del os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"]
        else:
            os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"] = saved
    for _ in range(5):
        trainer.step()
    run = simulate_iteration(graph, plan, cpu_profile(calibration or DEFAULT_CACHE), from_symbol=True)
    simulated, sim_calls = collections.defaultdict(float), collections.Counter()
    for span in run.spans:
        op = run.program.tasks[span.task].op
        simulated[op] += span.end - span.start
        sim_calls[op] += 1
    trace = work_dir / "trace.json"
    mx.profiler.set_config(profile_symbolic=True, profile_imperative=True, aggregate_stats=False,
                           filename=str(trace))
    mx.profiler.set_state("run")
    walls = []
    for _ in range(steps):
        trainer.step()
        walls.append(trainer.step_seconds[-1])
    mx.profiler.set_state("stop")
    mx.profiler.dump(finished=False)
    measured, calls = collections.defaultdict(float), collections.Counter()
    for name, _, start, stop in trace_spans(trace):
        measured[name] += (stop - start) / steps
        calls[name] += 1
    base = {"model": model, "batch": batch, "workers": workers, "plan": algo}
    rows = [{**base, "op": STEP, "measured_seconds": statistics.median(walls), "simulated_seconds": run.seconds,
             "ratio": run.seconds / statistics.median(walls)}]
    for op in sorted(set(measured) | set(simulated), key=lambda o: -max(measured.get(o, 0.0), simulated.get(o, 0.0))):
        m, s = measured.get(op, 0.0), simulated.get(op, 0.0)
        rows.append({**base, "op": op, "measured_calls": calls[op] / steps, "measured_seconds": m,
                     "simulated_calls": sim_calls[op], "simulated_seconds": s, "ratio": s / m if m else ""})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a zoo model, or resnet18_v1")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--workers", type=int, default=1, help="CPU contexts (at most 4: MXNet's profiler)")
    p.add_argument("--algo", default="tofu")
    p.add_argument("--steps", type=int, default=20, help="profiled steps")
    p.add_argument("--calibration", type=Path, help="the cpu profile's cache file (default: tofu.sim.calibrate's)")
    p.add_argument("--cpus", help="pin the process to these cores (comma-separated)")
    p.add_argument("--tag", default="op_profile")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    args = p.parse_args(argv)
    if not 1 <= args.workers <= 4:
        p.error(f"--workers {args.workers}: from 1 to 4 (MXNet's profiler supports at most 4 CPU contexts)")
    if args.batch < 1 or args.steps < 1:
        p.error("--batch and --steps must be positive")
    pin_option(args.cpus, p.error)
    from tofu.errors import TofuError

    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"{args.tag}.csv"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            rows = profile_rows(args.model, args.batch, args.workers, args.algo, args.steps, args.calibration,
                                Path(tmp))
        except TofuError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    out = RowWriter(path, COLUMNS)
    for row in rows:
        out.write(six_digits(row))
    out.close()
    write_sidecar(path, vars(args))
    for row in rows[:16]:
        ratio = f"{row['ratio']:.2f}" if isinstance(row["ratio"], float) else "-"
        print(f"{row['op']:32s} measured {row['measured_seconds'] * 1e3:9.3f} ms  simulated "
              f"{row['simulated_seconds'] * 1e3:9.3f} ms  simulated / measured {ratio}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
