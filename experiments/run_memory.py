"""Per-device peak memory of partitioned training steps, measured by MXNet's profiler, against one device / k.

    python experiments/run_memory.py [--configs wresnet-tiny:64,rnn-tiny:64,rnn-2-256:2,mlp:8] [--workers 2,4]
                                     [--algos tofu,data-parallel] [--one-context] [--tag NAME]

One CSV row per (model, batch, workers, algorithm) in results/memory/<tag>.csv, with a JSON sidecar. Each
case measures one training step (bind, momentum buffers, forward, backward, update) in a fresh process with
MXNet's profiler (at most 4 CPU contexts): the unpartitioned model on cpu(0), then the partitioned graph on
cpu(0..k-1). Columns: each device's peak, the largest of them over (one device's peak / k), the plan's per-device
estimate, and the share of activations in the one-device estimate (activation- or weight-dominated).
``--one-context`` also binds each partitioned graph with every device group on cpu(0): its peak over one
device's is the cost of the partitioned graph's own structure (expansions, gathered copies, glue), and the sum
of the device peaks over it the cost of spreading that graph over k contexts.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, write_sidecar  # noqa: E402
from tofu.api import load_graph, partitioned, reference_symbol  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.graph.memory import estimate_training_memory  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402
from tofu.runtime.memory import measure_device_peaks  # noqa: E402
from tofu.runtime.train import whole_graph  # noqa: E402
from tofu.search.algorithms import plan_graph  # noqa: E402

COLUMNS = ("model", "batch", "workers", "algo", "status", "activation_share", "one_device_peak_bytes",
           "device_peak_bytes", "max_peak_over_one_per_k", "plan_per_device_bytes", "plan_over_one_per_k", "one_context_peak_bytes", "message")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="wresnet-tiny:64,rnn-tiny:64,rnn-2-256:2,mlp:8",
                   help="MODEL:BATCH, comma-separated")
    p.add_argument("--workers", default="2,4")
    p.add_argument("--algos", default="tofu,data-parallel")
    p.add_argument("--one-context", action="store_true",
                   help="also measure each partitioned graph with every device on cpu(0)")
    p.add_argument("--tag", default="memory")
    p.add_argument("--out-dir", type=Path, default=Path("results/memory"))
    args = p.parse_args(argv)
    path = args.out_dir / f"{args.tag}.csv"
    rows = RowWriter(path, COLUMNS)
    write_sidecar(path, vars(args))
    for config in args.configs.split(","):
        model, batch = config.rsplit(":", 1)
        graph = load_graph(model, ModelOptions(batch=int(batch)))
        estimate = estimate_training_memory(graph)
        share = estimate.activations / estimate.total
        (one,) = measure_device_peaks(whole_graph(graph, reference_symbol(graph)))
        for k in (int(w) for w in args.workers.split(",")):
            for algo in args.algos.split(","):
                base = {"model": model, "batch": batch, "workers": k, "algo": algo,
                        "activation_share": f"{share:.3f}", "one_device_peak_bytes": one}
                try:
                    plan = plan_graph(graph, k, algo)
                    pg = partitioned(graph, plan)
                    peaks = measure_device_peaks(pg)
                    (together,) = measure_device_peaks(pg, one_context=True) if args.one_context else (None,)
                except TofuError as e:
                    rows.write({**base, "status": "error", "message": str(e)[:200]})
                    continue
                planned = dict(plan.per_device_bytes)["total"]
                row = {**base, "status": "ok", "device_peak_bytes": " ".join(map(str, peaks)),
                       "max_peak_over_one_per_k": f"{max(peaks) / (one / k):.3f}", "plan_per_device_bytes": planned,
                       "plan_over_one_per_k": f"{planned / (one / k):.3f}", "one_context_peak_bytes": together or ""}
                rows.write(row)
                print(f"{model:<13} batch {batch:>3} k={k} {algo:<14} activations {share:5.1%}  one device "
                      f"{one / 1e6:7.2f} MB  per device {max(peaks) / 1e6:7.2f} MB = "
                      f"{row['max_peak_over_one_per_k']} x one/k  (plan's estimate {row['plan_over_one_per_k']})"
                      + (f"; on one context {together / one:.3f} x one device, the k devices' peaks summed "
                         f"{sum(peaks) / together:.3f} x that" if together else ""), flush=True)
    rows.close()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
