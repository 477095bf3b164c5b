"""Markdown table of run_calibration_aftereffect.py (docs/sim.md): per case, its median step before the work, after
it, and of trainers bound anew after it, in the process that calibrated and in the one that slept. Reads CSV only.

    python experiments/table_calibration_aftereffect.py docs/results/sim/calibration_aftereffect.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main  # noqa: E402


def render(sources: list[Rows]) -> str:
    rows = [r for rows in sources for r in rows]
    works = list(dict.fromkeys(r["work"] for r in rows))
    cases = list(dict.fromkeys((r["model"], r["batch"], r["workers"]) for r in rows))
    got = {(r["work"], r["model"], r["batch"], r["workers"], r["phase"]): r for r in rows}
    took = {w: next(float(r["work_seconds"]) for r in rows if r["work"] == w) for w in works}
    lines = []
    for case in cases:
        line = [*case]
        for w in works:
            cells = []
            for phase in ("before", "after", "after, new"):
                r = got.get((w, *case, phase))
                if r is None:
                    cells.append("-")
                    continue
                ms = f"{float(r['median_seconds']) * 1e3:.3g}"
                cells.append(ms if phase == "before" else f"{ms} ({float(r['ratio_to_before']):.2f}x)")
            line.append(" / ".join(cells))
        lines.append(line)
    head = ["model", "batch", "k", *(f"{w} ({took[w]:.0f} s): before / after / new trainers after, ms" for w in works)]
    return markdown_table(head, lines)


TABLES = {"calibration-aftereffect": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
