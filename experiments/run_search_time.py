"""Search time, communication and per-device memory of every plan finder on the paper's configurations.

    python experiments/run_search_time.py [--models paper] [--workers 2,4,8] [--algos all] [--tag NAME]
                                          [--repeats 1] [--ilp-seconds 60] [--quick]

One CSV row per (model, workers, algorithm, repeat) in results/search_time/<tag>.csv, written as soon as it
finishes, with a JSON sidecar. Timings are cold: every cache (descriptions, analyses, kernel checks, cost
tables) is cleared before each search. The ILP runs one cut at a time (scipy's HiGHS) under a time limit per
cut; a run that exceeds it is recorded with status "timeout". ``--quick`` plans the small models only.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402
from tofu.api import clear_caches, load_graph  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import PAPER_MODELS, SMALL_MODELS  # noqa: E402
from tofu.search.algorithms import ALGORITHMS, GENERAL_ALGORITHMS, plan_graph  # noqa: E402

COLUMNS = ("model", "workers", "algo", "repeat", "status", "search_seconds", "comm_bytes", "step_bytes",
           "per_device_total_bytes", "per_device_params_bytes", "per_device_activations_bytes",
           "per_device_fetched_bytes", "op_groups", "tensor_groups", "message")


def run_one(graph, workers: int, algo: str, ilp_seconds: float) -> dict:
    clear_caches()
    if algo == "ilp":
        from tofu.search import algorithms
        algorithms.ILP_TIME_LIMIT = ilp_seconds
    try:
        plan = plan_graph(graph, workers, algo)
    except TofuError as e:
        status = "timeout" if "time limit" in str(e) else "error"
        return {"status": status, "message": str(e)[:200]}
    mem = dict(plan.per_device_bytes)
    return {"status": "ok", "search_seconds": f"{plan.search_seconds:.4f}", "comm_bytes": f"{plan.comm_bytes:.0f}",
            "step_bytes": " ".join(f"{s.cost_bytes:.0f}" for s in plan.steps),
            "per_device_total_bytes": mem["total"], "per_device_params_bytes": mem["params"],
            "per_device_activations_bytes": mem["activations"], "per_device_fetched_bytes": mem.get("fetched", 0),
            "op_groups": dict(plan.coarsening).get("op_groups", ""),
            "tensor_groups": dict(plan.coarsening).get("tensor_groups", "")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="paper", help="'paper', 'small' or comma-separated names")
    p.add_argument("--workers", default="2,4,8", help="comma-separated worker counts")
    p.add_argument("--algos", default="all",
                   help=f"'all' (without ilp and megatron), or comma-separated of: {', '.join(ALGORITHMS)}")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ilp-seconds", type=float, default=60.0, help="time limit of one ILP cut")
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/search_time"))
    p.add_argument("--quick", action="store_true", help="small models, 2 and 4 workers")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = {"paper": PAPER_MODELS, "small": SMALL_MODELS}.get(args.models, tuple(args.models.split(",")))
    workers = tuple(int(w) for w in args.workers.split(","))
    algos = tuple(a for a in GENERAL_ALGORITHMS if a != "ilp") if args.algos == "all" else tuple(args.algos.split(","))
    if args.quick:
        models, workers = SMALL_MODELS, (2, 4)
    unknown = [a for a in algos if a not in ALGORITHMS]
    if unknown:
        p.error(f"unknown algorithm(s) {', '.join(unknown)}")
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_sidecar(out, vars(args))
    for model in models:
        try:
            graph = load_graph(model)
        except TofuError as e:
            print(f"{model}: {e}", file=sys.stderr)
            return 2
        for k in workers:
            for algo in algos:
                for r in range(args.repeats):
                    t0 = time.perf_counter()
                    row = {"model": model, "workers": k, "algo": algo, "repeat": r,
                           **run_one(graph, k, algo, args.ilp_seconds)}
                    writer.write(row)
                    print(f"{model:<16} k={k:<2} {algo:<14} {row['status']:<7} "
                          f"{float(row.get('search_seconds') or 0):7.2f} s  "
                          f"{float(row.get('comm_bytes') or 0) / 1e9:10.3f} GB  ({time.perf_counter() - t0:.1f} s)",
                          flush=True)
    writer.close()
    write_sidecar(out, vars(args), **rerun_source())        # again, with how to re-run it from this tree
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
