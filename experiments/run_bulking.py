"""Whether MXNet's bulk execution shortens the partitioned step (issue 23, item 5): the same partitioned graph bound
with bulking off, at MXNet's default segment of 15 ops and at 60, its steps timed round-robin in one process.

    python experiments/run_bulking.py [--cases gpt-tiny:4:tofu:64,mlp:4:data-parallel:1024] [--seconds 8]
                                      [--tag bulking] [--out-dir results/runtime_overhead]

MXNet 1.9.1 reads ``MXNET_EXEC_BULK_EXEC_TRAIN`` and ``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN`` when an executor is
bound (``GraphExecutor::InitOpSegs``), so each :class:`tofu.runtime.train.Trainer` is bound under its own setting.
A case is ``model:workers:plan:batch``. One CSV row per (case, setting): the median step (seconds) over the
round-robin rounds; a JSON sidecar with the command. Progress on stderr.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402
from experiments.run_cpu_validation import measure_round_robin  # noqa: E402

COLUMNS = ("model", "workers", "plan", "batch", "bulking", "seconds", "steps", "over_off")
SETTINGS = (("off", {"MXNET_EXEC_BULK_EXEC_TRAIN": "0"}),
            ("15", {"MXNET_EXEC_BULK_EXEC_TRAIN": "1", "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "15"}),
            ("60", {"MXNET_EXEC_BULK_EXEC_TRAIN": "1", "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN": "60"}))


def case_rows(model: str, workers: int, plan: str, batch: int, seconds: float) -> list[dict]:
    from tofu.api import ModelOptions, load_graph, partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph

    graph = load_graph(model, ModelOptions(batch=batch))
    values, data = initial_values(graph), synthetic_batch(graph)
    pg = partitioned(graph, plan_graph(graph, workers, plan))
    steps = []
    saved = {k: os.environ.get(k) for _, env in SETTINGS for k in env}
    try:
        for _, env in SETTINGS:
            os.environ.update(env)
            trainer = Trainer(pg, {**values, **data}, "cpu", lr=1e-4, momentum=0.9)

            def step(t=trainer) -> float:
                t.step()
                return t.step_seconds[-1]
            for _ in range(3):
                step()
            steps.append(step)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    times = measure_round_robin(steps, seconds, min_steps=15)
    medians = [statistics.median(ts) for ts in times]
    return [{"model": model, "workers": workers, "plan": plan, "batch": batch, "bulking": name, "seconds": m,
             "steps": len(ts), "over_off": m / medians[0]} for (name, _), m, ts in zip(SETTINGS, medians, times)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="gpt-tiny:4:tofu:64,mlp:4:data-parallel:1024")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--tag", default="bulking")
    p.add_argument("--out-dir", type=Path, default=Path("results/runtime_overhead"))
    args = p.parse_args(argv)
    cases = []
    for c in args.cases.split(","):
        parts = c.split(":")
        if len(parts) != 4 or not parts[1].isdigit() or not parts[3].isdigit():
            p.error(f"case '{c}': expected model:workers:plan:batch")
        cases.append((parts[0], int(parts[1]), parts[2], int(parts[3])))
    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    started = time.perf_counter()
    for model, workers, plan, batch in cases:
        print(f"{model} k={workers} {plan} batch {batch} ...", file=sys.stderr, flush=True)
        for row in case_rows(model, workers, plan, batch, args.seconds):
            writer.write(row)
            print(f"  bulking {row['bulking']:>3}: {row['seconds'] * 1e3:.2f} ms ({row['over_off']:.2f}x off)",
                  file=sys.stderr, flush=True)
    writer.close()
    write_sidecar(path, vars(args), seconds=time.perf_counter() - started, load=os.getloadavg()[0],
                  **rerun_source())
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
