"""What the optimizer's updates add to a training step on CPU contexts (issue 21: how the engine charges them).

    python experiments/run_update_cost.py [--models mlp:64,gpt-tiny:4,rnn-tiny:8,wresnet-tiny:4] [--workers 1,2,4]
                                          [--seconds 2] [--tag update_cost] [--out-dir results/sim]

``tofu run``'s step is the executor's forward and backward calls, then the optimizer from Python (one imperative
``sgd_mom_update`` per parameter shard, :meth:`tofu.runtime.train.Trainer.update`), waited for. Per (model, batch,
k), the ``tofu`` plan bound once, three things are timed one after another in a round-robin for about
``--seconds``: ``passes``, the forward and backward calls alone (to ``waitall``); ``step``, a whole step
(:meth:`Trainer.step`); ``host``, the update loop alone after a ``waitall`` (the host's time to issue the calls,
not waited for). ``increment_per_update`` = (step - passes) / updates: what one update adds to a step;
``host_per_update`` = host / updates; ``tasks``, the simulator's tasks of the step besides the updates
(:func:`tofu.sim.program.program_from_symbol`: the ops and copies the engine runs), for scale. Beside them, the ``cpu`` profile's ``update_launch_seconds``, what the engine
holds a device's compute stream for per update (:mod:`tofu.sim.engine`). Medians; one CSV row per case; a JSON
sidecar. Progress on stderr.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from experiments.common import RowWriter, rerun_source, six_digits, write_sidecar  # noqa: E402
from experiments.run_cpu_validation import graph_of, measure_round_robin  # noqa: E402

COLUMNS = ("model", "batch", "workers", "updates", "tasks", "passes_seconds", "step_seconds", "host_seconds",
           "increment_per_update", "host_per_update", "profile_update_seconds", "steps")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def case(model: str, batch: int, workers: int, seconds: float, work_dir: Path, profile) -> dict:
    """One row: the three timings of (model, batch, workers) under the ``tofu`` plan (see the module docstring)."""
    import mxnet as mx

    from tofu.api import partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph
    from tofu.sim.program import TaskKind, program_from_symbol

    graph = graph_of(model, batch, work_dir)
    plan = plan_graph(graph, workers, "tofu")
    trainer = Trainer(partitioned(graph, plan), {**initial_values(graph), **synthetic_batch(graph)}, "cpu", lr=1e-3,
                      replicas=False)       # the graph tofu.sim.program models: routes, one update per shard
    for _ in range(3):
        trainer.step()
    program = program_from_symbol(graph, plan)

    def passes() -> float:
        mx.nd.waitall()
        begin = time.perf_counter()
        trainer.executor.forward(is_train=True)
        trainer.executor.backward()
        mx.nd.waitall()
        return time.perf_counter() - begin

    def step() -> float:
        trainer.step()
        return trainer.step_seconds[-1]

    def host() -> float:
        mx.nd.waitall()
        begin = time.perf_counter()
        trainer.update()
        elapsed = time.perf_counter() - begin
        mx.nd.waitall()
        return elapsed

    times = measure_round_robin([passes, step, host], seconds)
    p, s, h = (statistics.median(t) for t in times)
    n = len(trainer.params)
    return {"model": model, "batch": batch, "workers": workers, "updates": n,
            "tasks": sum(t.kind is not TaskKind.UPDATE for t in program.tasks), "passes_seconds": p,
            "step_seconds": s, "host_seconds": h, "increment_per_update": (s - p) / n, "host_per_update": h / n,
            "profile_update_seconds": profile.update_launch_seconds, "steps": len(times[0])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp:64,gpt-tiny:4,rnn-tiny:8,wresnet-tiny:4",
                   help="comma-separated MODEL:BATCH")
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--seconds", type=float, default=2.0, help="measuring time per case")
    p.add_argument("--tag", default="update_cost")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    args = p.parse_args(argv)
    try:
        cases = [(m, int(b)) for m, b in (x.split(":") for x in args.models.split(","))]
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        p.error("--models takes MODEL:BATCH pairs and --workers integers, comma-separated")
    if any(w < 1 for w in workers) or any(b < 1 for _, b in cases):
        p.error("--workers and the batches must be positive")
    from tofu.sim.calibrate import cpu_profile

    from tofu.errors import TofuError

    with tempfile.TemporaryDirectory() as work_dir:
        for model, batch in cases:
            try:
                graph_of(model, batch, Path(work_dir))
            except TofuError as e:
                p.error(f"model '{model}': {e}")
        profile = cpu_profile()
        out = args.out_dir / f"{args.tag}.csv"
        writer = RowWriter(out, COLUMNS)
        for model, batch in cases:
            for k in workers:
                log(f"{model} batch {batch}, {k} context(s)")
                row = case(model, batch, k, args.seconds, Path(work_dir), profile)
                writer.write(six_digits(row))
                log(f"  passes {row['passes_seconds'] * 1e3:.2f} ms, step {row['step_seconds'] * 1e3:.2f} ms, "
                    f"{row['updates']} updates: +{row['increment_per_update'] * 1e6:.1f} us each in a step, "
                    f"{row['host_per_update'] * 1e6:.1f} us each to issue alone")
    writer.close()
    write_sidecar(out, vars(args), **rerun_source())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
