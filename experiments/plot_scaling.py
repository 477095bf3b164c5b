"""Plots a run of run_scaling.py: samples/s against machines (8 simulated GPUs each), one line per network
bandwidth, solid with the exchange after the iteration and dashed with it hidden behind it, dotted the linear
scaling of one machine. Reads CSV only.

    python experiments/plot_scaling.py results/scaling/k80x8.csv --out docs/figures/scaling.png
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.common import read_rows  # noqa: E402
from experiments.plotstyle import save  # noqa: E402

COLORS = ("#d6604d", "#4393c3", "#1b7837", "#762a83", "#e08214")
STYLES = {"none": "-", "full": "--"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--out", type=Path, default=Path("figures/scaling.png"))
    args = p.parse_args(argv)
    rows = [r for r in read_rows(args.csv) if r["status"] == "ok"]
    if not rows:
        p.error(f"no successful rows in {args.csv}")
    models = list(dict.fromkeys(r["model"] for r in rows))
    gbits = sorted({float(r["network_gbits"]) for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        mine = [r for r in rows if r["model"] == model]
        for overlap, style in STYLES.items():
            for g, color in zip(gbits, COLORS):
                line = sorted((int(r["machines"]), float(r["samples_per_second"])) for r in mine
                              if float(r["network_gbits"]) == g and r["overlap"] == overlap)
                if line:
                    ax.plot(*zip(*line), style, marker="o", markersize=3, color=color,
                            label=f"{g:g} Gbit/s" + (", exchange hidden" if overlap == "full" else ""))
        linear = sorted({(int(r["machines"]), float(r["linear_samples_per_second"])) for r in mine
                         if r["overlap"] == "none"})
        ax.plot(*zip(*linear), ":", color="black", label="linear (M x one machine, exchange after)")
        machines = [m for m, _ in linear]
        ax.set_xscale("log", base=2)
        ax.set_xticks(machines, [str(m) for m in machines])
        ax.set_xlabel(f"machines of {mine[0]['profile']} (8 GPUs each)")
        ax.set_ylabel("samples / s")
        ax.set_title(f"{model}, batch {mine[0]['batch_per_machine']} per machine (Tofu inside, data parallel "
                     f"across)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    save(fig, args.out, dpi=150)
    return 0


if __name__ == "__main__":
    sys.exit(main())
