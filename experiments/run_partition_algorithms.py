"""Per-batch time of every partition algorithm on a simulated 8-GPU machine, split into compute and communication.

    python experiments/run_partition_algorithms.py [--profile k80x8] [--algos all] [--ilp-seconds 60]
                                                   [--overlap none] [--tag NAME] [--quick]

The paper's comparison (section 7): WResNet-152-10 at batch 8 and RNN-4-8K at batch 512
(:data:`tofu.models.paper.PARTITION_COMPARISON_BATCH`) on the profile's devices, every algorithm of
``tofu.search.algorithms.GENERAL_ALGORITHMS`` (``megatron`` plans transformers only). For each plan the
performance model gives the iteration's compute (with the partitioned graph's glue) and communication, and the plan's per-device memory is set against the device
(status ``oom`` when it exceeds it; the time is still reported). ``ideal_compute_seconds`` is one device's
compute at the same batch divided by the devices: what a perfect split would cost, so compute_seconds minus it
is the compute overhead; ``glue_seconds`` is the busiest device's share of it spent in the partitioned graph's
slices, concatenations and sums (:mod:`tofu.sim.glue`). An algorithm that cannot plan the model (an ILP past its
time limit) gets status ``error`` or ``timeout``. Everything is simulated. One CSV row per (model, algorithm) in results/partition_algorithms/<tag>.csv, a JSON sidecar,
progress on stderr. ``--quick``: wresnet-tiny at batch 8 and rnn-tiny at batch 16 on 4 devices.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, write_simulated_sidecar  # noqa: E402
from tofu.api import load_graph  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402
from tofu.models.paper import PARTITION_COMPARISON_BATCH  # noqa: E402
from tofu.search import algorithms  # noqa: E402
from tofu.search.algorithms import ALGORITHMS, GENERAL_ALGORITHMS, plan_graph  # noqa: E402
from tofu.sim.glue import glue_from_plan  # noqa: E402
from tofu.sim.hardware import GPU_PROFILES, profile  # noqa: E402
from tofu.sim.model import Overlap, glue_seconds, simulate  # noqa: E402

COLUMNS = ("profile", "model", "batch", "workers", "algo", "status", "seconds", "compute_seconds", "comm_seconds",
           "ideal_compute_seconds", "glue_seconds", "comm_bytes", "per_device_bytes", "capacity_bytes",
           "search_seconds", "message")
QUICK_CASES = {"wresnet-tiny": 8, "rnn-tiny": 16}
QUICK_WORKERS = 4


def run_one(graph, prof, algo: str, overlap: Overlap, ideal_compute: float) -> dict:
    """One algorithm's plan of ``graph`` on ``prof``'s devices, simulated (status ok / oom / error / timeout)."""
    try:
        plan = plan_graph(graph, prof.devices, algo)
    except TofuError as e:
        return {"status": "timeout" if "time limit" in str(e) else "error", "message": str(e)[:200]}
    glue = glue_from_plan(graph, plan)
    est = simulate(graph, plan, prof, overlap, glue=glue)
    return {"status": "oom" if est.oom else "ok", "seconds": f"{est.seconds:.6g}",
            "compute_seconds": f"{est.compute_seconds:.6g}", "comm_seconds": f"{est.comm_seconds:.6g}",
            "ideal_compute_seconds": f"{ideal_compute:.6g}",
            "glue_seconds": f"{max(glue_seconds(glue, plan.workers, prof)):.6g}",
            "comm_bytes": f"{plan.comm_bytes:.0f}",
            "per_device_bytes": est.per_device_bytes, "search_seconds": f"{plan.search_seconds:.3f}"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="k80x8", choices=sorted(GPU_PROFILES))
    p.add_argument("--algos", default="all", help=f"'all' (every algorithm that plans any graph: megatron plans "
                   f"transformers only) or comma-separated of: {', '.join(ALGORITHMS)}")
    p.add_argument("--ilp-seconds", type=float, default=60.0, help="time limit of one ILP cut")
    p.add_argument("--overlap", default="none", choices=[o.value for o in Overlap])
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/partition_algorithms"))
    p.add_argument("--quick", action="store_true", help="tiny models on 4 devices")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    algos = GENERAL_ALGORITHMS if args.algos == "all" else tuple(args.algos.split(","))
    unknown = [a for a in algos if a not in ALGORITHMS]
    if unknown:
        p.error(f"unknown algorithm(s) {', '.join(unknown)}")
    prof, cases = profile(args.profile), dict(PARTITION_COMPARISON_BATCH)
    if args.quick:
        prof, cases = dataclasses.replace(prof, devices=QUICK_WORKERS), QUICK_CASES
    algorithms.ILP_TIME_LIMIT = args.ilp_seconds
    overlap = Overlap(args.overlap)
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_simulated_sidecar(out, vars(args), prof)
    try:
        for model, batch in cases.items():
            graph = load_graph(model, ModelOptions(batch=batch))
            alone = simulate(graph, plan_graph(graph, 1, "tofu"), prof)
            for algo in algos:
                t0 = time.perf_counter()
                row = {"profile": prof.name, "model": model, "batch": batch, "workers": prof.devices, "algo": algo,
                       "capacity_bytes": f"{prof.memory_bytes:.0f}",
                       **run_one(graph, prof, algo, overlap, alone.compute_seconds / prof.devices)}
                writer.write(row)
                print(f"{model:<16} {algo:<15} {row['status']:<7} {float(row.get('seconds') or 0):8.3f} s/batch "
                      f"(compute {float(row.get('compute_seconds') or 0):.3f}, comm "
                      f"{float(row.get('comm_seconds') or 0):.3f})  ({time.perf_counter() - t0:.1f} s)",
                      file=sys.stderr, flush=True)
    finally:
        writer.close()
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
