"""Markdown table of run_step_stability.py (docs/sim.md): per case, the median step and its spread over windows,
beside the engine's simulated iteration. Reads CSV only.

    python experiments/table_step_stability.py docs/results/sim/stability.csv [more.csv ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main  # noqa: E402


def render(sources: list[Rows]) -> str:
    lines = []
    for r in (r for rows in sources for r in rows):
        ms = {c: float(r[c]) * 1e3 for c in ("median_seconds", "p10_seconds", "p90_seconds", "fastest_window_seconds",
                                             "slowest_window_seconds", "predicted_seconds")}
        lines.append([r["model"], r["batch"], r["workers"], r["plan"], r["cpus"], f"{ms['median_seconds']:.3g}",
                      f"{ms['p10_seconds']:.3g}-{ms['p90_seconds']:.3g}",
                      f"{ms['fastest_window_seconds']:.3g}-{ms['slowest_window_seconds']:.3g}",
                      f"{float(r['wander']):.2f}", f"{ms['predicted_seconds']:.3g}",
                      f"{float(r['faster_than_predicted']):.0%}"])
    head = ["model", "batch", "k", "plan", "cores", "median step (ms)", "p10-p90 (ms)",
            "window medians (ms)", "slowest / fastest window", "simulated (ms)", "steps faster than simulated"]
    return markdown_table(head, lines)


TABLES = {"step-stability": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
