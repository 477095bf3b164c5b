"""Markdown table of a run of run_bytes.py: per model and worker count, what the search's cost model charged (every
op its own pieces), the plan's bytes (the recount), MXNet's measured copies,
the needed bytes (on data regions, and reading only what a kept part reads) and the plan over what it needs,
with the gap by cause. Reads CSV only.

    python experiments/table_bytes.py results/bytes/latest.csv [--suite small|paper]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import read_rows  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table  # noqa: E402

_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def _bytes(text: str) -> str:
    """A byte count in SI units with 4 significant digits ('' when not measured)."""
    if not text:
        return "-"
    x = float(text)
    for scale, unit in _UNITS:
        if x >= scale:
            return f"{x / scale:.4g} {unit}"
    return f"{x:.0f} B"


def _gap(row) -> str:
    """The plan's bytes beyond what it needs, by cause, as shares of the plan."""
    plan = float(row["plan_bytes"])
    parts = [(float(row["cells_bytes"]), "cells"), (float(row["bounding_box_bytes"]), "bounding box")]
    return ", ".join(f"{name} {b / plan:.2%}" for b, name in parts if b) if plan else ""


def render(sources: list[Rows], suite: str | None = None) -> str:
    """One line per (model, k) of the rows (of ``suite`` when given)."""
    lines = []
    for row in (r for rows in sources for r in rows):
        if suite and row["suite"] != suite:
            continue
        head = [row["model"], row["batch"], row["workers"]]
        if row["status"] != "ok":
            lines.append([*head, "n/a", "", "", "", "", "", row["message"]])
            continue
        lines.append([*head, _bytes(row["charged_bytes"]), _bytes(row["plan_bytes"]), _bytes(row["measured_bytes"]),
                      _bytes(row["needed_bytes"]),
                      _bytes(row["needed_exact_bytes"]), f"{float(row['plan_over_needed']):.4f}", _gap(row) or "-"])
    return markdown_table(["model", "batch", "k", "charged by the search", "plan", "measured", "needed (data regions)",
                           "needed (kept parts)", "plan / needed", "gap (share of the plan)"], lines)


TABLES = {"bytes": DocTable(render, {"suite": str})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--suite", choices=("small", "paper"))
    args = p.parse_args(argv)
    rows = read_rows(args.csv)
    if not rows:
        print(f"{args.csv}: no rows", file=sys.stderr)
        return 2
    print(render([rows], args.suite))
    return 0


if __name__ == "__main__":
    sys.exit(main())
