"""Markdown tables of runs of run_throughput.py: every system's samples/s and batch per configuration with Tofu
over Ideal and over the best other system (``throughput``); per system, the configurations it trains, its
fraction of Ideal and Tofu's speed-up over it (``throughput-summary``); and one run against another, e.g. the
additive model's against the engine's (``throughput-change``). Reads CSV only.

    python experiments/table_throughput.py results/throughput/k80x8.csv
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.plotstyle import SystemStyle  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

SYSTEMS = tuple(s.key for s in SystemStyle)
FASTER = 1.25
"""The paper's claim: Tofu is 25%-400% faster than the alternatives, i.e. at least 1.25x."""


def _cell(row) -> str:
    if row is None:
        return "-"
    if row["status"] != "ok":
        return {"oom": "OOM"}.get(row["status"], row["status"])
    return f"{float(row['samples_per_second']):.3g} (b={row['batch']})"


def _speeds(rows: Rows) -> dict[tuple[str, str], float]:
    return {(r["model"], r["system"]): float(r["samples_per_second"]) for r in rows if r["status"] == "ok"}


def render(sources: list[Rows]) -> str:
    """One row per model: each system's samples/s (batch), Tofu / Ideal, Tofu / the fastest other system."""
    rows = [r for rows in sources for r in rows]
    by = {(r["model"], r["system"]): r for r in rows}
    speed = _speeds(rows)
    lines = []
    for m in unique(r["model"] for r in rows):
        tofu, ideal = speed.get((m, "tofu")), speed.get((m, "ideal"))
        others = [speed[(m, s)] for s in SYSTEMS if s not in ("tofu", "ideal") and (m, s) in speed]
        lines.append([m, *(_cell(by.get((m, s))) for s in SYSTEMS),
                      f"{tofu / ideal:.0%}" if tofu and ideal else "-",
                      f"{tofu / max(others):.2f}x" if tofu and others else "-"])
    return markdown_table(["model", *SYSTEMS, "Tofu / Ideal", "Tofu / best other"], lines)


def _range(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    return f"{format(min(values), fmt)} - {format(max(values), fmt)} (median {format(statistics.median(values), fmt)})"


def render_summary(sources: list[Rows]) -> str:
    """One row per (model family, system): configurations trained of those run, the system's throughput over
    Ideal's, and where both train, Tofu over the system (range, median, and in how many configurations Tofu is
    at least 1.25x faster / slower)."""
    rows = [r for rows in sources for r in rows]
    speed = _speeds(rows)
    lines = []
    for fam in unique(r["model"].split("-")[0] for r in rows):
        models = unique(r["model"] for r in rows if r["model"].split("-")[0] == fam)
        for s in SYSTEMS:
            mine = [r for r in rows if r["system"] == s and r["model"] in models]
            if not mine:
                continue
            trained = [m for m in models if (m, s) in speed]
            na = sum(r["status"] == "n/a" for r in mine)
            of_ideal = [speed[(m, s)] / speed[(m, "ideal")] for m in trained if (m, "ideal") in speed]
            ratio = [speed[(m, "tofu")] / speed[(m, s)] for m in trained if (m, "tofu") in speed]
            vs = "-" if s in ("tofu", "ideal") or not ratio else (
                f"{_range(ratio, '.2f')}; >= {FASTER}x in {sum(x >= FASTER for x in ratio)}, slower in "
                f"{sum(x < 1 for x in ratio)}")
            lines.append([fam, s, "n/a" if na == len(mine) else f"{len(trained)} / {len(mine)}",
                          _range(of_ideal, ".0%"), vs])
    return markdown_table(["family", "system", "trains", "of Ideal", "Tofu / system where both train"], lines)


def render_change(sources: list[Rows]) -> str:
    """Two runs, before and after (e.g. the additive model's and the engine's): per model and system, samples/s
    (batch) before -> after."""
    if len(sources) != 2:
        raise ValueError(f"throughput-change takes two sources (before, after), got {len(sources)}")
    before, after = ({(r["model"], r["system"]): r for r in rows} for rows in sources)
    lines = [[m, *(f"{_cell(before.get((m, s)))} -> {_cell(after.get((m, s)))}" for s in SYSTEMS)]
             for m in unique(r["model"] for rows in sources for r in rows)]
    return markdown_table(["model", *SYSTEMS], lines)


TABLES = {"throughput": DocTable(render), "throughput-summary": DocTable(render_summary),
          "throughput-change": DocTable(render_change)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
