"""The CPU validation's tables of docs/sim.md, from the CSV that ``experiments/run_cpu_validation.py`` writes: the
engine's simulated iteration beside the measured step of every (model, batch, k, plan), and the summary (median
and worst |error| per level, the ranking agreement of the plans). Reads CSV only; no MXNet.

    python experiments/table_cpu_validation.py docs/results/sim/cpu_validation.csv
"""
from __future__ import annotations

import itertools
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402

Row = Mapping[str, object]


def ranking(rows: Sequence[Row], by: str = "predicted_seconds") -> dict:
    """Over every pair of plans of one (model, batch, k >= 2), both measured: how many pairs the engine ranks as
    measured (the plan it simulates faster is the one measured faster), and how many it ties (equal simulated
    times: the same program; left out of the fraction). ``by``: the column that predicts (another column, such as
    ``tasks``, ranks by a simpler predictor: fewer tasks, faster)."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        if r["level"] == "step" and r["status"] == "ok" and int(r["workers"]) >= 2:
            groups.setdefault((r["model"], int(r["batch"]), int(r["workers"])), []).append(r)
    agree = pairs = ties = 0
    disagreements = []
    for key, group in groups.items():
        for a, b in itertools.combinations(group, 2):
            pa, pb = float(a[by]), float(b[by])
            ma, mb = float(a["measured_seconds"]), float(b["measured_seconds"])
            if pa == pb:
                ties += 1
                continue
            pairs += 1
            if (pa < pb) == (ma < mb):
                agree += 1
            else:
                disagreements.append(f"{key[0]} b={key[1]} k={key[2]}: {a['plan']} vs {b['plan']}")
    return {"pairs": pairs, "agree": agree, "ties": ties, "agreement": agree / pairs if pairs else float("nan"),
            "disagreements": disagreements}


def summary(rows: Sequence[Row]) -> dict:
    """Per level: cases, failures, median and worst |relative error| and the worst case; for steps also
    :func:`ranking`."""
    out = {}
    for level in ("op", "step"):
        ok = [r for r in rows if r["level"] == level and r["status"] == "ok"]
        if not ok:
            continue
        errors = [abs(float(r["relative_error"])) for r in ok]
        worst = max(ok, key=lambda r: abs(float(r["relative_error"])))
        out[level] = {"cases": len(ok), "failed": sum(r["level"] == level and r["status"] != "ok" for r in rows),
                      "median_abs_relative_error": statistics.median(errors), "worst_abs_relative_error": max(errors),
                      "worst_case": f"{worst['model']} b={worst['batch']} k={worst['workers']} {worst['plan']}".strip()}
        if level == "step":
            out[level]["ranking"] = ranking(ok)
    return out


def _ms(value: object) -> str:
    """Seconds as milliseconds, three significant digits (whole milliseconds from 1000 on).

    >>> _ms("0.000214"), _ms("2.0")
    ('0.214', '2000')
    """
    ms = float(value) * 1e3
    return f"{ms:.3g}" if ms < 1000 else f"{ms:.0f}"


def render_steps(sources: list[Rows]) -> str:
    """One row per (model, batch, k), one column per plan: measured / simulated ms (error)."""
    rows = [r for rows in sources for r in rows if r["level"] == "step"]
    plans = unique(r["plan"] for r in rows if r["plan"])
    lines = []
    for key in unique((r["model"], r["batch"], r["workers"]) for r in rows):
        mine = {r["plan"]: r for r in rows if (r["model"], r["batch"], r["workers"]) == key}
        cells = []
        for p in plans:
            r = mine.get(p)
            if r is None:
                cells.append("")
            elif r["status"] != "ok":
                cells.append(r["status"])
            else:
                cells.append(f"{_ms(r['measured_seconds'])} / {_ms(r['predicted_seconds'])} "
                             f"({float(r['relative_error']):+.0%})")
        lines.append([key[0], key[1], key[2], *cells])
    return markdown_table(["model", "batch", "k", *[f"`{p}`: measured / simulated ms (error)" for p in plans]],
                          lines)


def render_summary(sources: list[Rows]) -> str:
    """One row per level: cases, median and worst |error|, the worst case; steps: the ranking agreement."""
    rows = [r for rows in sources for r in rows]
    lines = []
    for level, s in summary(rows).items():
        rank = s.get("ranking")
        agreement = "" if rank is None else \
            f"{rank['agree']} / {rank['pairs']} ({rank['agreement']:.0%}), {rank['ties']} tied"
        lines.append([level, str(s["cases"]), str(s["failed"]), f"{s['median_abs_relative_error']:.0%}",
                      f"{s['worst_abs_relative_error']:.0%}", s["worst_case"], agreement or "-"])
    return markdown_table(["level", "cases", "failed", "median abs error", "worst abs error", "worst case",
                           "ranking agreement (k >= 2)"], lines)


TABLES = {"sim-cpu-validation": DocTable(render_steps), "sim-cpu-validation-summary": DocTable(render_summary)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    from experiments.common import read_rows

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="+")
    args = p.parse_args(argv)
    sources = [read_rows(path) for path in args.csv]
    print(render_summary(sources))
    print()
    print(render_steps(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
