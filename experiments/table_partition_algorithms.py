"""Markdown table of a run of run_partition_algorithms.py: each algorithm's time per batch (compute +
communication) on each model, the first model's per-device memory, and the glue each plan adds. Reads CSV only.

    python experiments/table_partition_algorithms.py results/partition_algorithms/k80x8.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402

TIMED = ("ok", "oom")        # statuses with a simulated time (an OOM plan is still timed)


def _time(row, oom_mark: bool) -> str:
    if row is None or row["status"] not in TIMED:
        return "-" if row is None else row["status"]
    cell = (f"{float(row['seconds']):.2f} ({float(row['compute_seconds']):.2f} + "
            f"{float(row['comm_seconds']):.2f})")
    return cell + (" **OOM**" if oom_mark and row["status"] == "oom" else "")


def _memory(row) -> str:
    if row is None or row["status"] not in TIMED:
        return "-"
    return f"{float(row['per_device_bytes']) / 1e9:.1f} GB " + ("ok" if row["status"] == "ok" else "**OOM**")


def _short(model: str) -> str:
    """``wresnet-152-10`` -> ``WResNet-152-10``, ``rnn-4-8k`` -> ``RNN-4-8K`` (the paper's spelling)."""
    family, rest = model.split("-", 1)
    return {"wresnet": "WResNet", "rnn": "RNN"}.get(family, family) + "-" + rest.upper()


def render(sources: list[Rows]) -> str:
    """One row per algorithm: the first model's s/batch (compute + comm) and memory, every other model's s/batch
    (OOM marked), and the busiest device's glue seconds on each model (W / R: the models' initials)."""
    rows = [r for rows in sources for r in rows]
    by = {(r["model"], r["algo"]): r for r in rows}
    models = unique(r["model"] for r in rows)
    first, rest = models[0], models[1:]
    head = [f"{_short(first)} s/batch (compute + comm)", "memory", *(f"{_short(m)} s/batch" for m in rest),
            f"glue s/device ({' / '.join(_short(m)[0] for m in models)})"]
    lines = []
    for a in unique(r["algo"] for r in rows):
        glue = [by.get((m, a)) for m in models]
        lines.append([a, _time(by.get((first, a)), oom_mark=False), _memory(by.get((first, a))),
                      *(_time(by.get((m, a)), oom_mark=True) for m in rest),
                      " / ".join(f"{float(g['glue_seconds']):.2f}" if g and g["status"] in TIMED else "-"
                                 for g in glue)])
    return markdown_table(["algorithm", *head], lines)


TABLES = {"partition-algorithms": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
