"""Markdown table of what plans split, tensor by tensor: each tensor's shape and the dimension it is split along at
every cut of each plan. Reads CSV only (columns tensor, shape, and one per plan holding its cuts' dimensions,
space-separated, e.g. ``tofu_cuts``: ``0 1 1``).

    python experiments/table_plan.py results/plans/gpt-350m-block5.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main  # noqa: E402

PLANS = {"tofu_cuts": "Tofu, cuts", "megatron_cuts": "Megatron"}   # column -> header (a cut list when several)


def render(sources: list[Rows]) -> str:
    """One row per tensor: its shape and, per plan, the dimension split at each cut."""
    rows = [r for rows in sources for r in rows]
    plans = [c for c in PLANS if rows and c in rows[0]]
    head = [PLANS[c] + (" " + " ".join(str(i + 1) for i in range(len(rows[0][c].split())))
                        if len(rows[0][c].split()) > 1 else "") for c in plans]
    lines = [[f"`{r['tensor']}`", "(" + ", ".join(r["shape"].split()) + ")", *(r[c] for c in plans)] for r in rows]
    return markdown_table(["tensor", "shape", *head], lines)


TABLES = {"plan-splits": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
