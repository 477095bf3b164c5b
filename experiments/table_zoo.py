"""Markdown table of the Gluon model-zoo trial (docs/runtime.md), from a run of run_zoo_check.py: per network, the
plan at each K (its bytes; its status), and at each trained K the check (largest relative difference of the
gradients and of the updates in float32; where float32 exceeded the tolerance, the float64 rerun's largest
difference beside the status), the measured bytes against the plan's, and the fullest device's peak over one
device's peak / K. Reads CSV only.

    python experiments/table_zoo.py results/zoo/zoo.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, table_main, unique  # noqa: E402


def _mb(n: str) -> str:
    return f"{float(n) / 1e6:.2f}"


def render(sources: list[Rows]) -> str:
    rows = [r for rows in sources for r in rows]
    plans = sorted({int(r["workers"]) for r in rows if r["stage"] == "plan"})
    trains = sorted({int(r["workers"]) for r in rows if r["stage"] == "train"})
    by = {(r["net"], r["stage"], int(r["workers"] or 0)): r for r in rows}
    lines = []
    for net in unique(r["net"] for r in rows):
        first = next(r for r in rows if r["net"] == net)
        cells = [f"{net} ({first['batch']}x3x{first['image']}x{first['image']})"]
        for k in plans:
            r = by.get((net, "plan", k))
            cells.append("-" if r is None else _mb(r["predicted_comm_bytes"]) if r["status"] == "ok" else r["status"])
        for k in trains:
            r = by.get((net, "train", k))
            if r is None or not r.get("measured_comm_bytes"):
                cells.append("-" if r is None else f"{r['status']}: {r['message']}")
                continue
            equal = "=" if int(r["measured_comm_bytes"]) == round(float(r["predicted_comm_bytes"])) else "!="
            peak = r["max_peak_over_one_per_k"] or "-"
            status = "ok" if r["status"] == "ok" else "**failed**"
            if r.get("float64_rel"):          # float32 beyond the tolerance: what float64 said
                status += f" (float64: {r['float64_rel']})"
            cells.append(f"{status}: {r['gradient_rel']} / {r['update_rel']}; "
                         f"{_mb(r['measured_comm_bytes'])} {equal} plan; {peak}")
        lines.append(cells)
    head = ["network (input)", *(f"plan k={k}: MB" for k in plans),
            *(f"train k={k}: check (gradients / updates); MB measured vs plan; peak / (one / k)" for k in trains)]
    return markdown_table(head, lines)


TABLES = {"zoo-check": DocTable(render)}


def main(argv=None) -> int:
    return table_main(render, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
