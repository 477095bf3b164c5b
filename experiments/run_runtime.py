"""Partitioned training on CPU contexts against one device, and measured against predicted communication.

    python experiments/run_runtime.py [--models mlp,wresnet-tiny,rnn-tiny] [--workers 2,3,4,6,8]
                                      [--algos all] [--batch 12] [--steps 10] [--tag NAME] [--quick]

One CSV row per (model, workers, algorithm) in results/runtime/<tag>.csv, written as soon as it finishes, with a
JSON sidecar. Each case plans the model, rewrites it into one partitioned MXNet symbol, binds it on
cpu(0..k-1), runs ``--steps`` SGD-momentum steps beside the unpartitioned model on one context and records the
largest differences (first step's outputs and gradients, every loss and parameter update, one device stepping
from the partitioned run's state), the
bytes of every ``_CrossDeviceCopy`` of the bound training graph (forward, backward) beside the plan's
``comm_bytes``, and the median step time. A case the planner refuses (shapes that do not divide) is kept with
status ``refused``. ``--quick``: mlp at 2 workers, two algorithms, two steps.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, write_sidecar  # noqa: E402
from tofu.api import load_graph, partitioned, reference_symbol  # noqa: E402
from tofu.errors import SearchError, TofuError  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402
from tofu.runtime.data import initial_values, synthetic_batch  # noqa: E402
from tofu.runtime.run import train  # noqa: E402
from tofu.search.algorithms import GENERAL_ALGORITHMS, plan_graph  # noqa: E402

COLUMNS = ("model", "batch", "workers", "algo", "status", "steps", "output_max_abs_diff", "gradient_max_rel_diff",
           "loss_max_abs_diff", "parameter_max_rel_diff", "measured_forward_bytes", "measured_backward_bytes",
           "measured_comm_bytes", "predicted_comm_bytes", "measured_over_predicted", "cross_device_copies",
           "median_step_seconds", "message")
SMALL = ("mlp", "wresnet-tiny", "rnn-tiny")
ALGOS = tuple(a for a in GENERAL_ALGORITHMS if a != "ilp")


def run_case(model: str, batch: int, workers: int, algo: str, steps: int, lr: float) -> dict:
    graph = load_graph(model, ModelOptions(batch=batch))
    try:
        plan = plan_graph(graph, workers, algo)
    except SearchError as e:
        return {"status": "refused", "message": str(e)[:200]}
    report = train(graph, plan, partitioned(graph, plan), initial_values(graph), synthetic_batch(graph), steps,
                   reference_symbol(graph), lr=lr)
    c = report.check
    return {"status": "ok", "steps": steps, "output_max_abs_diff": f"{c.output:.3g}",
            "gradient_max_rel_diff": f"{c.gradient:.3g}", "loss_max_abs_diff": f"{c.loss:.3g}",
            "parameter_max_rel_diff": f"{c.parameters:.3g}",
            "measured_forward_bytes": report.measured_forward_bytes,
            "measured_backward_bytes": report.measured_backward_bytes,
            "measured_comm_bytes": report.measured_comm_bytes, "predicted_comm_bytes": f"{plan.comm_bytes:.0f}",
            "measured_over_predicted": f"{report.measured_comm_bytes / plan.comm_bytes:.4f}" if plan.comm_bytes else "",
            "cross_device_copies": report.copies, "median_step_seconds": f"{report.median_step_seconds:.4f}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(SMALL))
    p.add_argument("--workers", default="2,3,4,6,8")
    p.add_argument("--algos", default="all", help=f"comma-separated from {', '.join(ALGOS)}, or all")
    p.add_argument("--batch", type=int, default=24, help="batch of every model (default 24: divides by 2, 3, 4, 6, 8)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--tag", default="runtime")
    p.add_argument("--out-dir", type=Path, default=Path("results/runtime"))
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    models = args.models.split(",")
    workers = [int(w) for w in args.workers.split(",")]
    algos = list(ALGOS) if args.algos == "all" else args.algos.split(",")
    if args.quick:
        models, workers, algos, args.steps = ["mlp"], [2], ["tofu", "data-parallel"], 2
    for a in algos:
        if a not in ALGOS:
            p.error(f"unknown algorithm '{a}'")
    path = args.out_dir / f"{args.tag}.csv"
    rows = RowWriter(path, COLUMNS)
    write_sidecar(path, vars(args))
    for model in models:
        for k in workers:
            for algo in algos:
                base = {"model": model, "batch": args.batch, "workers": k, "algo": algo}
                try:
                    row = run_case(model, args.batch, k, algo, args.steps, args.lr)
                except TofuError as e:
                    row = {"status": "error", "message": str(e)[:200]}
                rows.write({**base, **row})
                print(f"{model:<13} k={k} {algo:<15} {row['status']:<8} "
                      f"measured/predicted {row.get('measured_over_predicted', '-'):>7} "
                      f"grad {row.get('gradient_max_rel_diff', '-'):>9} params {row.get('parameter_max_rel_diff', '-')}",
                      flush=True)
    rows.close()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
