"""Markdown table of a run of run_scaling.py: samples/s per model, network bandwidth and machine count, with the
exchange after the iteration (overlap none) / hidden behind it (full). Reads CSV only.

    python experiments/table_scaling.py results/scaling/k80x8.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

OVERLAPS = ("none", "full")


def render(sources: list[Rows]) -> str:
    """One row per (model, Gbit/s), one column per machine count: samples/s without / with overlap."""
    rows = [r for rows in sources for r in rows]
    speed = {(r["model"], int(r["network_gbits"]), int(r["machines"]), r["overlap"]):
             float(r["samples_per_second"]) for r in rows if r["status"] == "ok"}
    machines = sorted({int(r["machines"]) for r in rows})
    lines = []
    for m in unique(r["model"] for r in rows):
        for gbits in sorted({int(r["network_gbits"]) for r in rows if r["model"] == m}):
            cells = [" / ".join(f"{speed[(m, gbits, n, o)]:.1f}" if (m, gbits, n, o) in speed else "-"
                                for o in OVERLAPS) for n in machines]
            lines.append([m, str(gbits), *cells])
    head = ["model", "Gbit/s", *map(str, machines)]
    head[-1] += " machines"
    return markdown_table(head, lines)


TABLES = {"scaling": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
