"""Markdown table of run_update_cost.py (docs/sim.md): per model and contexts, the forward and backward passes, the
whole step, and what one update adds to a step against what issuing one takes alone. Reads CSV only.

    python experiments/table_update_cost.py docs/results/sim/update_cost.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main  # noqa: E402


def render(sources: list[Rows]) -> str:
    lines = []
    for r in (r for rows in sources for r in rows):
        lines.append([r["model"], r["batch"], r["workers"], r["updates"], f"{float(r['passes_seconds']) * 1e3:.3g}",
                      f"{float(r['step_seconds']) * 1e3:.3g}", f"{float(r['increment_per_update']) * 1e6:.1f}",
                      f"{float(r['host_per_update']) * 1e6:.1f}", f"{float(r['profile_update_seconds']) * 1e6:.1f}"])
    head = ["model", "batch", "k", "updates", "passes (ms)", "step (ms)", "added per update (us)",
            "issued alone (us)", "engine charges (us)"]
    return markdown_table(head, lines)


TABLES = {"update-cost": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
