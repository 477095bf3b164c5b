"""Plots a run of run_throughput.py as the paper draws its throughput figure: per configuration, every system's
throughput normalised to Ideal's, the absolute samples/s written on each bar, OOM and n/a marked. Reads CSV only.

    python experiments/plot_throughput.py results/throughput/k80x8.csv --out docs/figures/throughput.png
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
from experiments.plotstyle import SystemStyle, save  # noqa: E402


def family(model: str) -> str:
    return model.split("-")[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--out", type=Path, default=Path("figures/throughput.png"))
    args = p.parse_args(argv)
    rows = read_rows(args.csv)
    if not rows:
        p.error(f"no rows in {args.csv}")
    cell = {(r["model"], r["system"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    families = list(dict.fromkeys(family(m) for m in models))
    systems = [s for s in SystemStyle if any(r["system"] == s.key for r in rows)]
    prof = rows[0]["profile"]
    fig, axes = plt.subplots(len(families), 1, figsize=(max(8, 1.25 * len(models) / len(families) * len(systems) / 4),
                                                          4.2 * len(families)), squeeze=False)
    width = 0.85 / len(systems)
    for ax, fam in zip(axes[:, 0], families):
        mine = [m for m in models if family(m) == fam]
        top = 1.0
        for i, s in enumerate(systems):
            for x, m in enumerate(mine):
                r = cell.get((m, s.key))
                ideal = cell.get((m, SystemStyle.IDEAL.key))
                pos = x + (i - (len(systems) - 1) / 2) * width
                if r is None:
                    continue
                if r["status"] != "ok" or not ideal or ideal["status"] != "ok":
                    ax.text(pos, 0.02, r["status"].upper(), rotation=90, ha="center", va="bottom", fontsize=6,
                            color="#b2182b" if r["status"] == "oom" else "#555555")
                    continue
                value = float(r["samples_per_second"])
                h = value / float(ideal["samples_per_second"])
                top = max(top, h)
                ax.bar(pos, h, width, color=s.color, edgecolor="black", linewidth=0.3)
                ax.text(pos, h + 0.02, f"{value:.0f}" if value >= 100 else f"{value:.3g}", rotation=90, ha="center",
                        va="bottom", fontsize=5.5)
        ax.set_xticks(range(len(mine)), [f"{m}\n(b={cell.get((m, 'tofu'), {}).get('batch', '') or '-'})"
                                         for m in mine], fontsize=7)
        ax.set_ylim(0, top * 1.3)
        ax.axhline(1.0, color="black", linewidth=0.5, linestyle=":")
        ax.set_ylabel("throughput / Ideal")
        ax.set_title(f"{fam}: training throughput on simulated {prof}, event-driven engine (numbers on bars: "
                     f"samples/s; b = Tofu's batch)", fontsize=9)
        ax.legend(handles=[Patch(facecolor=s.color, edgecolor="black", linewidth=0.3, label=s.label) for s in systems],
                  ncol=len(systems), fontsize=7, loc="upper right")
    save(fig, args.out, dpi=150)
    for line in summary(rows):
        print(line)
    return 0


def summary(rows: list[dict[str, str]]) -> list[str]:
    """Per model: each system's throughput over Ideal's (its batch), or its status."""
    cell = {(r["model"], r["system"]): r for r in rows}
    systems = [s for s in SystemStyle if any(r["system"] == s.key for r in rows)]
    lines = [f"{'throughput / Ideal':<18} " + " ".join(f"{s.label:>16}" for s in systems)]
    for m in dict.fromkeys(r["model"] for r in rows):
        ideal = cell.get((m, SystemStyle.IDEAL.key))
        parts = []
        for s in systems:
            r = cell.get((m, s.key))
            if r is None:
                parts.append(f"{'-':>16}")
            elif r["status"] != "ok" or not ideal or ideal["status"] != "ok":
                parts.append(f"{r['status'].upper():>16}")
            else:
                ratio = float(r["samples_per_second"]) / float(ideal["samples_per_second"])
                text = f"{ratio:.2f} (b={r['batch']})"
                parts.append(f"{text:>16}")
        lines.append(f"{m:<18} " + " ".join(parts))
    return lines


if __name__ == "__main__":
    sys.exit(main())
