"""Summarises runs of run_runtime.py: measured over predicted communication per (model, algorithm, workers) as a
markdown table, the largest differences from one device, and a figure. Reads CSV only.

    python experiments/plot_runtime.py results/runtime/k248.csv results/runtime/k36.csv --out figures/runtime.png
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.plotstyle import Algo, save  # noqa: E402


KNOWN = {a.key for a in Algo}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="+")
    p.add_argument("--out", type=Path, default=Path("figures/runtime.png"))
    args = p.parse_args(argv)
    rows = [r for path in args.csv for r in csv.DictReader(path.open()) if r["status"] == "ok"]
    if not rows:
        print("no ok rows", file=sys.stderr)
        return 2
    models = list(dict.fromkeys(r["model"] for r in rows))
    workers = sorted({int(r["workers"]) for r in rows})
    algos = list(dict.fromkeys(r["algo"] for r in rows))
    ratio = {(r["model"], r["algo"], int(r["workers"])): float(r["measured_over_predicted"]) for r in rows}
    print("| model | algorithm | " + " | ".join(f"k={k}" for k in workers) + " |")
    print("|---|---|" + "---|" * len(workers))
    for m in models:
        for a in algos:
            cells = [f"{ratio[(m, a, k)]:.3f}" if (m, a, k) in ratio else "-" for k in workers]
            print(f"| {m} | {a} | " + " | ".join(cells) + " |")
    for key in ("output_max_abs_diff", "gradient_max_rel_diff", "loss_max_abs_diff", "parameter_max_rel_diff"):
        worst = max(rows, key=lambda r: float(r[key]))
        print(f"largest {key}: {float(worst[key]):.3g} ({worst['model']}, {worst['algo']}, k={worst['workers']})")
    within = sum(1 for v in ratio.values() if abs(v - 1) <= 0.1)
    print(f"measured within 10% of predicted: {within} of {len(ratio)} cases")
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.5), squeeze=False)
    for ax, m in zip(axes[0], models):
        for a in algos:
            ks = [k for k in workers if (m, a, k) in ratio]
            style = {"label": Algo.of(a).label, "color": Algo.of(a).color} if a in KNOWN else \
                {"label": a, "linestyle": "--"}
            ax.plot(ks, [ratio[(m, a, k)] for k in ks], marker="o", **style)
        ax.axhspan(0.9, 1.1, color="0.9")
        ax.set_title(m)
        ax.set_xlabel("workers")
        ax.set_xticks(workers)
    axes[0][0].set_ylabel("measured / predicted bytes")
    axes[0][-1].legend(fontsize=7)
    save(fig, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
