"""How steady one partitioned training step is on this machine, window after window (issue 21, item 4).

    python experiments/run_step_stability.py [--cases mlp:64,rnn-tiny:8,wresnet-tiny:4,gpt-tiny:4]
                                             [--workers 1,2,4] [--plan tofu] [--windows 20] [--window-steps 20]
                                             [--cpus 0] [--tag stability] [--out-dir results/sim]

The CPU validation (run_cpu_validation.py) takes a plan's median step over about 3 s; this script asks how much
that median depends on which 3 s. For each case (model:batch, a model of the validation) and k in ``--workers``,
one :class:`tofu.runtime.train.Trainer` of plan ``--plan`` is bound as ``tofu run`` binds it and, after warm-up,
runs ``--windows`` windows of ``--window-steps`` steps back to back. Per case one CSV row: the median, 10th and
90th percentile of all its steps, the fastest and the slowest window's median and their ratio (``wander``: 1 is a
step that does not move), beside the engine's simulated iteration of the same plan on profile ``cpu`` (the cached
calibration, as the validation reads it) and the fraction of the steps that ran faster than it. ``--cpus``: every
thread of the process, and so every MXNet worker it starts later, pinned to those cores (``sched_setaffinity``
per thread), to compare the contexts sharing one core with their spreading over all. A JSON sidecar with the
command, the load and the core count; progress on stderr.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from experiments.common import RowWriter, pin_option, rerun_source, write_sidecar  # noqa: E402
from experiments.run_cpu_validation import MODELS, graph_of  # noqa: E402

COLUMNS = ("model", "batch", "workers", "plan", "cpus", "steps", "windows", "median_seconds", "p10_seconds",
           "p90_seconds", "fastest_window_seconds", "slowest_window_seconds", "wander", "predicted_seconds",
           "faster_than_predicted")
CASES = "mlp:64,rnn-tiny:8,wresnet-tiny:4,gpt-tiny:4"
WARMUP_STEPS = 5


def case_row(model: str, batch: int, workers: int, plan_name: str, windows: int, window_steps: int, profile,
             work_dir: Path) -> dict:
    """One case measured window after window, beside its simulated iteration (see the module docstring)."""
    from tofu.api import partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph
    from tofu.sim.engine import simulate_iteration

    graph = graph_of(model, batch, work_dir)
    plan = plan_graph(graph, workers, plan_name)
    trainer = Trainer(partitioned(graph, plan), {**initial_values(graph), **synthetic_batch(graph)}, "cpu", lr=1e-3,
                      replicas=False)       # the graph tofu.sim.program models: routes, no replicas
    predicted = simulate_iteration(graph, plan, profile, from_symbol=True).seconds
    for _ in range(WARMUP_STEPS):
        trainer.step()
    first = len(trainer.step_seconds)
    for _ in range(windows * window_steps):
        trainer.step()
    return {"model": model, "batch": batch, "workers": workers, "plan": plan_name,
            **step_statistics(trainer.step_seconds[first:], window_steps, predicted)}


def step_statistics(steps: list[float], window_steps: int, predicted: float) -> dict:
    """The row's statistics of ``steps`` (seconds, in order) cut into windows of ``window_steps`` beside the
    simulated ``predicted`` (see the module docstring)."""
    medians = [statistics.median(steps[i:i + window_steps]) for i in range(0, len(steps), window_steps)]
    return {"steps": len(steps), "windows": len(medians), "median_seconds": statistics.median(steps),
            "p10_seconds": float(np.percentile(steps, 10)), "p90_seconds": float(np.percentile(steps, 90)),
            "fastest_window_seconds": min(medians), "slowest_window_seconds": max(medians),
            "wander": max(medians) / min(medians), "predicted_seconds": predicted,
            "faster_than_predicted": sum(s < predicted for s in steps) / len(steps)}


def parse_cases(text: str) -> list[tuple[str, int]]:
    """``model:batch,...`` -> [(model, batch)]; ValueError naming what is wrong."""
    out = []
    for item in text.split(","):
        model, sep, batch = item.partition(":")
        if model not in MODELS:
            raise ValueError(f"unknown model '{model}' (choose from {', '.join(MODELS)})")
        if not sep or not batch.isdigit() or int(batch) < 1:
            raise ValueError(f"case '{item}': MODEL:BATCH with a positive batch")
        out.append((model, int(batch)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=CASES, help="comma-separated MODEL:BATCH")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--plan", default="tofu")
    p.add_argument("--windows", type=int, default=20)
    p.add_argument("--window-steps", type=int, default=20)
    p.add_argument("--cpus", default=None, help="comma-separated core numbers to pin the process to")
    p.add_argument("--tag", default="stability")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    args = p.parse_args(argv)
    from tofu.search.algorithms import ALGORITHMS

    try:
        cases = parse_cases(args.cases)
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError as e:
        p.error(str(e))
    if any(w < 1 for w in workers):
        p.error(f"--workers '{args.workers}': each at least 1")
    if args.plan not in ALGORITHMS:
        p.error(f"unknown plan '{args.plan}' (choose from {', '.join(ALGORITHMS)})")
    if args.windows < 2 or args.window_steps < 1:
        p.error("--windows at least 2, --window-steps at least 1")
    cpus = pin_option(args.cpus, p.error)

    from tofu.sim import profile as named_profile

    prof = named_profile("cpu")
    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    started, load = time.perf_counter(), os.getloadavg()[0]
    label = "all" if cpus is None else ",".join(map(str, sorted(cpus)))
    work_dir = tempfile.TemporaryDirectory()          # the Gluon network's exported symbol file
    for model, batch in cases:
        for k in workers:
            row = {**case_row(model, batch, k, args.plan, args.windows, args.window_steps, prof,
                              Path(work_dir.name)), "cpus": label}
            writer.write(row)
            print(f"[{time.perf_counter() - started:6.1f} s] {model} b={batch} k={k} cpus {label}: median "
                  f"{row['median_seconds'] * 1e3:.3f} ms, windows {row['fastest_window_seconds'] * 1e3:.3f}-"
                  f"{row['slowest_window_seconds'] * 1e3:.3f} ms (x{row['wander']:.2f}), simulated "
                  f"{row['predicted_seconds'] * 1e3:.3f} ms ({row['faster_than_predicted']:.0%} of steps faster)",
                  file=sys.stderr, flush=True)
    writer.close()
    work_dir.cleanup()
    write_sidecar(path, vars(args), seconds=time.perf_counter() - started, load=load, cores=os.cpu_count(),
                  profile=prof.source, **rerun_source())
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
