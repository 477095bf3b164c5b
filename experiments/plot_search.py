"""Plots a run of run_search_time.py: communication per iteration of every plan finder on every model at one
worker count, and Tofu's search time. Reads CSV only.

    python experiments/plot_search.py results/search_time/paper.csv --workers 8 --out figures/search.png
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("figures/search.png"))
    args = p.parse_args(argv)
    rows = [r for r in csv.DictReader(args.csv.open()) if r["status"] == "ok" and int(r["workers"]) == args.workers]
    if not rows:
        p.error(f"no successful rows for {args.workers} workers in {args.csv}")
    models = list(dict.fromkeys(r["model"] for r in rows))
    algos = [a for a in Algo if any(r["algo"] == a.key for r in rows)]
    value = {(r["model"], r["algo"]): float(r["comm_bytes"]) / 1e9 for r in rows}
    seconds = {r["model"]: float(r["search_seconds"]) for r in rows if r["algo"] == "tofu"}
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(12, 7), gridspec_kw={"height_ratios": [3, 1]})
    width = 0.8 / len(algos)
    for i, a in enumerate(algos):
        xs = [m + (i - len(algos) / 2) * width for m in range(len(models))]
        ax.bar(xs, [value.get((m, a.key), float("nan")) for m in models], width, label=a.label, color=a.color)
    ax.set_yscale("log")
    ax.set_ylabel("GB moved per iteration")
    ax.set_title(f"Communication of each plan ({args.workers} workers, same cost model)")
    ax.set_xticks(range(len(models)), [""] * len(models))
    ax.legend(ncol=4, fontsize=8)
    bx.bar(range(len(models)), [seconds.get(m, float("nan")) for m in models], color=Algo.TOFU.color)
    bx.set_ylabel("Tofu search (s)")
    bx.set_xticks(range(len(models)), models, rotation=60, ha="right", fontsize=8)
    save(fig, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
