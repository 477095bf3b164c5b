"""Markdown table of a run of run_throughput.py: every system's samples/s and batch per configuration, Tofu over
Ideal and over the best other system. Reads CSV only.

    python experiments/table_throughput.py results/throughput/k80x8.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.plotstyle import SystemStyle  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

SYSTEMS = tuple(s.key for s in SystemStyle)


def _cell(row) -> str:
    if row is None:
        return "-"
    if row["status"] != "ok":
        return {"oom": "OOM"}.get(row["status"], row["status"])
    return f"{float(row['samples_per_second']):.3g} (b={row['batch']})"


def render(sources: list[Rows]) -> str:
    """One row per model: each system's samples/s (batch), Tofu / Ideal, Tofu / the fastest other system."""
    rows = [r for rows in sources for r in rows]
    by = {(r["model"], r["system"]): r for r in rows}
    speed = {key: float(r["samples_per_second"]) for key, r in by.items() if r["status"] == "ok"}
    lines = []
    for m in unique(r["model"] for r in rows):
        tofu, ideal = speed.get((m, "tofu")), speed.get((m, "ideal"))
        others = [speed[(m, s)] for s in SYSTEMS if s not in ("tofu", "ideal") and (m, s) in speed]
        lines.append([m, *(_cell(by.get((m, s))) for s in SYSTEMS),
                      f"{tofu / ideal:.0%}" if tofu and ideal else "-",
                      f"{tofu / max(others):.2f}x" if tofu and others else "-"])
    return markdown_table(["model", *SYSTEMS, "Tofu / Ideal", "Tofu / best other"], lines)


TABLES = {"throughput": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
