"""Markdown table of run_bulking.py (docs/runtime.md): per case, the median step with MXNet's bulk execution off,
at 15 ops a segment (MXNet's default) and at 60, and each against off. Reads CSV only.

    python experiments/table_bulking.py docs/results/runtime_overhead/bulking.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402


def render(sources: list[Rows]) -> str:
    rows = [r for rows in sources for r in rows]
    settings = unique(r["bulking"] for r in rows)
    by = {(r["model"], r["workers"], r["plan"], r["batch"], r["bulking"]): r for r in rows}
    lines = []
    for case in unique((r["model"], r["workers"], r["plan"], r["batch"]) for r in rows):
        cells = [case[0], case[3], case[1], case[2]]
        for s in settings:
            r = by.get((*case, s))
            cells.append("-" if r is None else f"{float(r['seconds']) * 1e3:.2f}" +
                         ("" if s == settings[0] else f" ({float(r['over_off']):.2f}x)"))
        lines.append(cells)
    head = ["model", "batch", "k", "plan", *(f"bulking {s} (ms)" for s in settings)]
    return markdown_table(head, lines)


TABLES = {"bulking": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
