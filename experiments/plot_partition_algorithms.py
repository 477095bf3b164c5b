"""Plots a run of run_partition_algorithms.py: per model, each algorithm's simulated time per batch stacked as the
ideal compute (one device's compute divided by the devices), the compute overhead above it (the busiest
device's kernels beyond that: uneven or halo'd pieces, slices, concatenations, sums), and the rest of the
iteration (the busiest device waiting: communication not hidden behind compute); plans whose simulated peak
memory exceeds a device's hatched and marked OOM, algorithms that cannot plan the model marked.
Reads CSV only.

    python experiments/plot_partition_algorithms.py results/partition_algorithms/k80x8.csv \
        --out docs/figures/partition_algorithms.png
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from experiments.common import read_rows  # noqa: E402
from experiments.plotstyle import Algo, save  # noqa: E402

IDEAL, OVERHEAD, COMM = "#bdbdbd", "#fdb863", "#5e3c99"


def label(key: str) -> str:
    try:
        return Algo.of(key).label
    except KeyError:
        return key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--out", type=Path, default=Path("figures/partition_algorithms.png"))
    args = p.parse_args(argv)
    rows = read_rows(args.csv)
    if not rows:
        p.error(f"no rows in {args.csv}")
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        top = max((float(r["seconds"]) for r in mine if r["seconds"]), default=1.0)
        for x, r in enumerate(mine):
            if not r["seconds"]:
                ax.text(x, 0.02 * top, r["status"], rotation=90, ha="center", va="bottom", fontsize=7, color="#555555")
                continue
            ideal, compute, comm = (float(r[c]) for c in ("ideal_compute_seconds", "compute_seconds",
                                                          "overhead_seconds"))
            hatch = "///" if r["status"] == "oom" else None
            ax.bar(x, ideal, 0.7, color=IDEAL, edgecolor="black", linewidth=0.3, hatch=hatch)
            ax.bar(x, compute - ideal, 0.7, bottom=ideal, color=OVERHEAD, edgecolor="black", linewidth=0.3, hatch=hatch)
            ax.bar(x, comm, 0.7, bottom=compute, color=COMM, edgecolor="black", linewidth=0.3, hatch=hatch)
            text = f"{compute + comm:.3g} s" + ("\nOOM" if r["status"] == "oom" else "")
            ax.text(x, compute + comm + 0.01 * top, text, ha="center", va="bottom", fontsize=6.5,
                    color="#b2182b" if r["status"] == "oom" else "black")
        ax.set_xticks(range(len(mine)), [label(r["algo"]) for r in mine], rotation=40, ha="right", fontsize=7)
        ax.set_ylim(0, top * 1.2)
        ax.set_ylabel("seconds per batch")
        first = mine[0]
        ax.set_title(f"{model}, batch {first['batch']}, {first['workers']} x simulated {first['profile']}", fontsize=9)
    axes[0][0].legend(handles=[Patch(facecolor=IDEAL, label="ideal compute (1 device / k)"),
                               Patch(facecolor=OVERHEAD, label="compute overhead"),
                               Patch(facecolor=COMM, label="waiting (communication not overlapped)"),
                               Patch(facecolor="white", edgecolor="black", hatch="///", label="exceeds device memory")],
                      fontsize=7, loc="upper left")
    save(fig, args.out, dpi=150)
    return 0


if __name__ == "__main__":
    sys.exit(main())
