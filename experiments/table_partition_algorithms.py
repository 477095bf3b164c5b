"""Markdown tables of runs of run_partition_algorithms.py: each algorithm's simulated time per batch on each
model split into the busiest device's compute and the overhead around it, the ideal compute, the overlap and the
fullest device's peak memory (``partition-algorithms``); and one run against another, e.g. the additive model's
against the engine's (``partition-algorithms-change``). Reads CSV only.

    python experiments/table_partition_algorithms.py results/partition_algorithms/k80x8.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

TIMED = ("ok", "oom")        # statuses with a simulated time (an OOM plan is still timed)


def _short(model: str) -> str:
    """``wresnet-152-10`` -> ``WResNet-152-10``, ``rnn-4-8k`` -> ``RNN-4-8K`` (the paper's spelling)."""
    family, rest = model.split("-", 1)
    return {"wresnet": "WResNet", "rnn": "RNN"}.get(family, family) + "-" + rest.upper()


def _time(row) -> str:
    if row is None or row["status"] not in TIMED:
        return "-" if row is None else row["status"]
    return (f"{float(row['seconds']):.2f} ({float(row['compute_seconds']):.2f} + "
            f"{float(row['overhead_seconds']):.2f})")


def _memory(row, column: str = "peak_bytes") -> str:
    if row is None or row["status"] not in TIMED:
        return "-"
    return f"{float(row[column]) / 1e9:.1f} GB " + ("ok" if row["status"] == "ok" else "**OOM**")


def render(sources: list[Rows]) -> str:
    """One row per algorithm; per model: s/batch (busiest device's compute + overhead), the fraction of
    communication overlapped with compute, and the fullest device's peak memory (OOM marked). The ideal compute
    (one device / k) of each model heads its column."""
    rows = [r for rows in sources for r in rows]
    by = {(r["model"], r["algo"]): r for r in rows}
    models = unique(r["model"] for r in rows)
    head = ["algorithm"]
    for m in models:
        ideal = next((r["ideal_compute_seconds"] for r in rows if r["model"] == m and r["ideal_compute_seconds"]), "")
        head += [f"{_short(m)} s/batch (compute + overhead; ideal compute "
                 f"{float(ideal):.2f})" if ideal else f"{_short(m)} s/batch", "overlap", "peak memory"]
    lines = []
    for a in unique(r["algo"] for r in rows):
        cells = [a]
        for m in models:
            r = by.get((m, a))
            timed = r is not None and r["status"] in TIMED
            cells += [_time(r), f"{float(r['overlap_fraction']):.0%}" if timed else "-", _memory(r)]
        lines.append(cells)
    return markdown_table(head, lines)


def render_change(sources: list[Rows]) -> str:
    """Two runs, before (the additive model's: ``per_device_bytes``) and after (the engine's: ``peak_bytes``):
    per algorithm and model, s/batch and memory before -> after."""
    if len(sources) != 2:
        raise ValueError(f"partition-algorithms-change takes two sources (before, after), got {len(sources)}")
    before, after = ({(r["model"], r["algo"]): r for r in rows} for rows in sources)
    models = unique(r["model"] for rows in sources for r in rows)

    def seconds(row) -> str:
        return f"{float(row['seconds']):.2f}" if row is not None and row["status"] in TIMED else "-"

    def memory(row) -> str:
        column = "peak_bytes" if row is not None and "peak_bytes" in row else "per_device_bytes"
        return _memory(row, column)

    lines = [[a, *(cell for m in models for cell in (
        f"{seconds(before.get((m, a)))} -> {seconds(after.get((m, a)))}",
        f"{memory(before.get((m, a)))} -> {memory(after.get((m, a)))}"))]
        for a in unique(r["algo"] for rows in sources for r in rows)]
    head = ["algorithm", *(h for m in models for h in (f"{_short(m)} s/batch", f"{_short(m)} memory"))]
    return markdown_table(head, lines)


TABLES = {"partition-algorithms": DocTable(render), "partition-algorithms-change": DocTable(render_change)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
