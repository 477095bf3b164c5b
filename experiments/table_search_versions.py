"""Markdown table of runs of bench_search_versions.py (docs/search.md): per run and model, the medians of the whole
plan and of the search, the earlier revision's against this tree's, and how many of this tree's plans took
``threshold`` seconds or more. Reads CSV only.

    python experiments/table_search_versions.py docs/results/search_versions/s31-64.csv [...]

The marker's ``labels`` option names the runs, comma-separated, in the order of its sources (default: 1, 2, ...).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402


def render(sources: list[Rows], labels: str = "", threshold: float = 2.0) -> str:
    names = labels.split(",") if labels else [str(i + 1) for i in range(len(sources))]
    if len(names) != len(sources):
        raise ValueError(f"{len(names)} labels for {len(sources)} runs")
    lines = []
    for name, rows in zip(names, sources):
        timed = [r for r in rows if r["status"] == "ok" and r["plan_seconds"]]
        for model in unique(r["model"] for r in timed):
            of = {tree: [r for r in timed if r["model"] == model and r["tree"] == tree] for tree in ("old", "new")}
            if not of["old"] or not of["new"]:
                continue
            plan = {tree: [float(r["plan_seconds"]) for r in got] for tree, got in of.items()}
            search = {tree: statistics.median(float(r["search_seconds"]) for r in got) for tree, got in of.items()}
            old, new = statistics.median(plan["old"]), statistics.median(plan["new"])
            loads = [float(r["load"]) for r in of["old"] + of["new"] if r["load"]]
            lines.append([name, model, of["new"][0]["workers"], f"{old:.2f} -> **{new:.2f}** ({new / old:.2f})",
                          f"{sum(x >= threshold for x in plan['new'])} of {len(plan['new'])}",
                          f"{search['old']:.2f} -> {search['new']:.2f}",
                          f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"])
    head = ["run", "model", "workers", "whole plan (s, median)", f"this tree's plans >= {threshold:g} s",
            "search (s, median)", "load"]
    return markdown_table(head, lines)


TABLES = {"search-versions": DocTable(render, {"labels": str, "threshold": float})}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
