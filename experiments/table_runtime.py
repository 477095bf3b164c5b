"""Markdown table of runs of run_runtime.py: measured over predicted cross-device bytes per (model, algorithm,
workers); a model on which every algorithm gives the same row is shown once. Reads CSV only.

    python experiments/table_runtime.py results/runtime/k248.csv results/runtime/k36.csv

(plot_runtime.py prints the uncollapsed table beside its figure and the largest differences from one device.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import read_rows  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402


def render_bytes(sources: list[Rows]) -> str:
    """One row per (model, algorithm), one column per worker count: measured / predicted bytes."""
    rows = [r for rows in sources for r in rows if r["status"] == "ok"]
    ratio = {(r["model"], r["algo"], int(r["workers"])): float(r["measured_over_predicted"]) for r in rows}
    workers = sorted({int(r["workers"]) for r in rows})
    lines = []
    for m in unique(r["model"] for r in rows):
        algos = unique(r["algo"] for r in rows if r["model"] == m)
        per_algo = {a: [f"{ratio[(m, a, k)]:.3f}" if (m, a, k) in ratio else "-" for k in workers] for a in algos}
        distinct = unique(tuple(cells) for cells in per_algo.values())
        if len(algos) > 1 and len(distinct) == 1:
            lines.append([m, "every algorithm", *distinct[0]])
        else:
            lines += [[m, a, *cells] for a, cells in per_algo.items()]
    return markdown_table(["model", "algorithm", *(f"k={k}" for k in workers)], lines)


TABLES = {"runtime-bytes": DocTable(render_bytes)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="+")
    args = p.parse_args(argv)
    print(render_bytes([read_rows(path) for path in args.csv]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
