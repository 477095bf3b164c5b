"""Markdown table of run_context_concurrency.py (docs/sim.md): per kind of kernel and mode, the median forward
pass of c independent chains on c CPU contexts and how many chains ran at once (c x t(1) / t(c)). Reads CSV only.

    python experiments/table_context_concurrency.py docs/results/sim/concurrency.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402


def render(sources: list[Rows]) -> str:
    rows = [r for rows in sources for r in rows]
    contexts = sorted(unique(int(r["contexts"]) for r in rows))
    by = {(r["kind"], r["kernels"], r["mode"], int(r["contexts"])): r for r in rows}
    lines = []
    for case in unique((r["kind"], r["kernels"], r["mode"]) for r in rows):
        cells = list(case)
        for c in contexts:
            r = by.get((*case, c))
            if r is None:
                cells.append("-")
                continue
            eff = r["effective"]
            cells.append(f"{float(r['seconds']) * 1e3:.3g}" + ("" if c == 1 or eff == "" else f" ({float(eff):.2f})"))
        lines.append(cells)
    head = ["kernel", "kernels", "mode", *(f"{c} context{'s' if c > 1 else ''}: ms (at once)" for c in contexts)]
    return markdown_table(head, lines)


TABLES = {"context-concurrency": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
