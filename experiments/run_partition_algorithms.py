"""Per-batch time of every partition algorithm on a simulated 8-GPU machine, each plan run on the event-driven
engine (tofu.sim.engine), split into the busiest device's compute and the overhead around it.

    python experiments/run_partition_algorithms.py [--profile k80x8] [--algos all] [--ilp-seconds 60]
                                                   [--jobs N] [--tag NAME] [--out-dir DIR] [--quick]

The paper's comparison (section 7): WResNet-152-10 at batch 8 and RNN-4-8K at batch 512
(:data:`tofu.models.paper.PARTITION_COMPARISON_BATCH`) on the profile's devices, every algorithm of
``tofu.search.algorithms.GENERAL_ALGORITHMS`` (``megatron`` plans transformers only). Each plan's program
(:func:`tofu.sim.program.program_from_plan`, MXNet's gradient sum cap as in tofu.sim.systems) is simulated once:

- ``seconds``: the iteration; ``compute_seconds``: the busiest device's compute stream (its kernels, the
  partitioned graph's slices, concatenations and sums, and its updates); ``overhead_seconds`` = seconds -
  compute_seconds, the time that device waits (for copies, or for other devices), i.e. the communication not
  hidden behind compute; ``idle_seconds``: the most idle device's idle time;
- ``ideal_compute_seconds``: one device's compute for the whole model at the same batch divided by the devices
  (what a perfect split would cost; compute_seconds minus it is the compute overhead of the split);
- ``overlap_fraction``: the part of communication time overlapped with compute; ``comm_bytes``: bytes copied
  between devices per iteration;
- ``peak_bytes``: the fullest device's peak memory in the simulated iteration; status ``oom`` when it exceeds
  the profile's memory (the time is still reported).

An algorithm that cannot plan the model (an ILP past its time limit) gets status ``error`` or ``timeout``.
Everything is simulated. One CSV row per (model, algorithm) in <out-dir>/<tag>.csv as each finishes, rewritten in
(model, algorithm) order at the end, a JSON sidecar, progress on stderr. ``--jobs N`` runs N cases at once in
worker processes. ``--quick``: wresnet-tiny at batch 8 and rnn-tiny at batch 16 on 4 devices.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import logging
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, rerun_source, rewrite_rows, write_simulated_sidecar  # noqa: E402
from tofu.api import load_graph  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402
from tofu.models.paper import PARTITION_COMPARISON_BATCH  # noqa: E402
from tofu.search import algorithms  # noqa: E402
from tofu.search.algorithms import ALGORITHMS, GENERAL_ALGORITHMS, plan_graph  # noqa: E402
from tofu.sim import profile  # noqa: E402
from tofu.sim.engine import Execution, simulate  # noqa: E402
from tofu.sim.hardware import GPU_PROFILES, Profile  # noqa: E402
from tofu.sim.program import TaskKind, program_from_plan  # noqa: E402
from tofu.sim.systems import Options, one_device_program  # noqa: E402

COLUMNS = ("profile", "model", "batch", "workers", "algo", "status", "seconds", "compute_seconds",
           "overhead_seconds", "ideal_compute_seconds", "idle_seconds", "overlap_fraction", "comm_bytes",
           "peak_bytes", "capacity_bytes", "search_seconds", "message")
QUICK_CASES = {"wresnet-tiny": 8, "rnn-tiny": 16}
QUICK_WORKERS = 4


def simulated(graph, plan, prof: Profile, options: Options = Options()) -> Execution:
    """``plan`` of ``graph`` as tofu.sim.systems runs Tofu's: its program with ``options.sum_cap``, on ``prof``."""
    return simulate(program_from_plan(graph, plan, options.sum_cap), prof, order=options.order)


def row_of(ex: Execution, ideal_compute: float, capacity: float) -> dict:
    """The numbers of one simulated plan (see the module docstring)."""
    compute, peak = max(ex.busy), max(ex.peak_bytes)
    copied = sum(t.nbytes for t in ex.program.tasks if t.kind is TaskKind.COPY)
    return {"status": "oom" if peak > capacity else "ok", "seconds": f"{ex.seconds:.6g}",
            "compute_seconds": f"{compute:.6g}", "overhead_seconds": f"{max(0.0, ex.seconds - compute):.6g}",
            "ideal_compute_seconds": f"{ideal_compute:.6g}", "idle_seconds": f"{max(ex.idle):.6g}",
            "overlap_fraction": f"{ex.overlap_fraction:.4f}", "comm_bytes": f"{copied:.0f}", "peak_bytes": peak}


def run_one(graph, prof: Profile, algo: str, ideal_compute: float) -> dict:
    """One algorithm's plan of ``graph`` on ``prof``'s devices, simulated (status ok / oom / error / timeout)."""
    try:
        plan = plan_graph(graph, prof.devices, algo)
    except TofuError as e:
        return {"status": "timeout" if "time limit" in str(e) else "error", "message": str(e)[:200]}
    return {**row_of(simulated(graph, plan, prof), ideal_compute, prof.memory_bytes),
            "search_seconds": f"{plan.search_seconds:.3f}"}


def run_case(model: str, batch: int, algo: str, prof: Profile, ilp_seconds: float) -> tuple[dict, float]:
    """One (model, algorithm) case, its row and wall seconds (what a worker process runs; the ideal compute is
    simulated again in each worker, a second or so)."""
    t0 = time.perf_counter()
    algorithms.ILP_TIME_LIMIT = ilp_seconds
    graph = load_graph(model, ModelOptions(batch=batch))
    alone = simulate(one_device_program(graph), prof)
    row = {"profile": prof.name, "model": model, "batch": batch, "workers": prof.devices, "algo": algo,
           "capacity_bytes": f"{prof.memory_bytes:.0f}", **run_one(graph, prof, algo, alone.busy[0] / prof.devices)}
    return row, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", default="k80x8", choices=sorted(GPU_PROFILES))
    p.add_argument("--algos", default="all", help=f"'all' (every algorithm that plans any graph: megatron plans "
                   f"transformers only) or comma-separated of: {', '.join(ALGORITHMS)}")
    p.add_argument("--ilp-seconds", type=float, default=60.0, help="time limit of one ILP cut")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once in worker processes (default 1)")
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
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_simulated_sidecar(out, vars(args), prof, **rerun_source())
    cases = [(model, batch, algo) for model, batch in cases.items() for algo in algos]
    rows: dict[tuple[str, str], dict] = {}

    def done(row: dict, seconds: float) -> None:
        writer.write(row)
        rows[(row["model"], row["algo"])] = row
        print(f"{row['model']:<16} {row['algo']:<15} {row['status']:<7} {float(row.get('seconds') or 0):8.3f} "
              f"s/batch (compute {float(row.get('compute_seconds') or 0):.3f}, overhead "
              f"{float(row.get('overhead_seconds') or 0):.3f}, peak {float(row.get('peak_bytes') or 0) / 1e9:.2f} "
              f"GB)  ({seconds:.1f} s)", file=sys.stderr, flush=True)

    try:
        if args.jobs == 1:
            for case in cases:
                done(*run_case(*case, prof, args.ilp_seconds))
        else:
            context = multiprocessing.get_context("spawn")       # no fork of a process that loaded MXNet
            with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
                futures = [pool.submit(run_case, *case, prof, args.ilp_seconds) for case in cases]
                for future in concurrent.futures.as_completed(futures):
                    done(*future.result())
    finally:
        writer.close()
    rewrite_rows(out, COLUMNS, [rows[(m, a)] for m, _, a in cases if (m, a) in rows])
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
