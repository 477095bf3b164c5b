"""Markdown table of a run of bench_search.py: Tofu's search against the recursion alone, the recursion with an
ILP per cut, and the first cut by the DP on the coarsened graph against Alpa's ILP form on the uncoarsened one.
Reads CSV only.

    python experiments/table_bench_search.py results/bench_search/exact.csv [results/coarsening/paper.csv]

The optional second file (columns model, ops: the coarsening of ``tofu plan --json``) names the size of the
uncoarsened graph the Alpa-form ILP solves.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

COLUMNS = (("plan-tofu", "`tofu` (both searches, median)"), ("plan-tofu-recursive", "recursion alone: DP"),
           ("plan-ilp", "recursion: ILP per cut"), ("first-cut-dp-coarsened", "first cut: DP, coarsened"),
           ("first-cut-ilp-alpa-uncoarsened", "first cut: Alpa-form ILP, uncoarsened"))


def _seconds(x: float) -> str:
    """Three significant digits from one second on, two below it (``1.30 s``, ``16.7 s``, ``0.070 s``)."""
    return f"{x:#.3g}".rstrip(".") + " s" if x >= 1 else f"{x:#.2g} s"


def render(sources: list[Rows]) -> str:
    """One row per model: the median seconds of each measure; the Alpa-form ILP also as a multiple of the DP's
    first cut, with the uncoarsened graph's op count where a second source gives it."""
    rows = [r for r in sources[0] if r["status"] == "ok"]
    ops = {r["model"]: r["ops"] for rows in sources[1:] for r in rows}
    lines = []
    for m in unique(r["model"] for r in rows):
        median = {measure: statistics.median(float(r["seconds"]) for r in rows
                                             if r["model"] == m and r["measure"] == measure)
                  for measure, _ in COLUMNS if any(r["model"] == m and r["measure"] == measure for r in rows)}
        cells = [_seconds(median[measure]) if measure in median else "-" for measure, _ in COLUMNS]
        raw, first = median.get(COLUMNS[-1][0]), median.get(COLUMNS[-2][0])
        if raw and first:
            cells[-1] += f" ({raw / first:.0f}x" + (f"; {ops[m]} op groups)" if m in ops else ")")
        lines.append([m, *cells])
    return markdown_table(["", *(label for _, label in COLUMNS)], lines)


TABLES = {"search-speed": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
