"""Markdown table of bench_runtime_versions.py (docs/runtime.md): per case, the op nodes and the median training
step of the earlier revision's partitioned graph and this tree's, timed side by side. Reads CSV only.

    python experiments/table_runtime_versions.py docs/results/runtime_overhead/shared-reads.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main  # noqa: E402


def render(sources: list[Rows]) -> str:
    by_case: dict[str, dict[str, dict]] = {}
    for r in (r for rows in sources for r in rows):
        by_case.setdefault(r["case"], {})[r["tree"] or r["status"]] = r
    lines = []
    for case, trees in by_case.items():
        a, t = trees.get("against"), trees.get("this")
        if a is None or t is None:
            lines.append([case, "-", "-", "-", (trees.get("error") or {}).get("message", "not measured")])
            continue
        lines.append([case, f"{a['ops']} -> {t['ops']}",
                      f"{float(a['seconds']) * 1e3:.3g} -> {float(t['seconds']) * 1e3:.3g}",
                      f"**{float(t['over_against']):.2f}x**", f"{t['steps']} each, outputs differ by "
                                                              f"{float(t['output_difference']):.2g}"])
    head = ["case (model:batch:k:plan)", "op nodes", "median step (ms)", "ratio", "steps"]
    return markdown_table(head, lines)


TABLES = {"runtime-versions": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
