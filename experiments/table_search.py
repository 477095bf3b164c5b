"""Markdown tables of the plan search (docs/search.md). From a run of run_search_time.py: communication and
per-device memory of every plan finder at one worker count, and each finder's communication relative to Tofu's
over every case; besides, the coarsening of the paper's models, the exact-cost change and the recursion against
the optimum over cut sequences. Reads CSV only.

    python experiments/table_search.py results/search_time/paper.csv --workers 8 [--gpu-gb 12]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import read_rows  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402

ORDER = ("tofu", "tofu-recursive", "dp-flat", "icml18", "equalchop", "spartan", "allrow-greedy", "data-parallel")


def _finished(sources: list[Rows]) -> tuple[dict, list[str], list[str]]:
    """The ok rows by (model, workers, algo), the models in order, the algorithms present in :data:`ORDER`."""
    rows = [r for rows in sources for r in rows if r["status"] == "ok"]
    by = {(r["model"], int(r["workers"]), r["algo"]): r for r in rows}
    return by, unique(r["model"] for r in rows), [a for a in ORDER if any(k[2] == a for k in by)]


def _gb(row, key: str) -> float:
    return float(row[key]) / 1e9


def render_comm(sources: list[Rows], workers: int = 8) -> str:
    """Communication per iteration (GB) of every finder at ``workers``, and Tofu's search seconds."""
    by, models, algos = _finished(sources)
    lines = []
    for m in models:
        tofu = by.get((m, workers, "tofu"))
        lines.append([m, *(f"{_gb(by[(m, workers, a)], 'comm_bytes'):.2f}" if (m, workers, a) in by else "-"
                           for a in algos), f"{float(tofu['search_seconds']):.2f}" if tofu else "-"])
    return markdown_table(["model", *algos, "Tofu search (s)"], lines)


def render_memory(sources: list[Rows], workers: int = 8, gpu_gb: float = 12.0) -> str:
    """Per-device memory (GB) of every finder's plan at ``workers``, ``*`` past ``gpu_gb``, and a row of fits."""
    by, models, algos = _finished(sources)
    fits = {a: 0 for a in algos}
    lines = []
    for m in models:
        cells = []
        for a in algos:
            r = by.get((m, workers, a))
            if r is None:
                cells.append("-")
                continue
            total = _gb(r, "per_device_total_bytes")
            fits[a] += total <= gpu_gb
            cells.append(f"{total:.2f}{'' if total <= gpu_gb else '*'}")
        lines.append([m, *cells])
    lines.append(["fits", *(f"{fits[a]} / {len(models)}" for a in algos)])
    return markdown_table(["model", *algos], lines)


def render_coarsening(sources: list[Rows]) -> str:
    """Ops and tensors before and after coarsening (the ``coarsening`` object of ``tofu plan --json``)."""
    keys = ("ops", "op_groups", "tensors", "tensor_groups", "merged_elementwise")
    return markdown_table(["model", "ops", "op groups", "tensors", "tensor groups", "element-wise merged"],
                          [[r["model"], *(r[k] for k in keys)] for rows in sources for r in rows])


def render_exact_cost(sources: list[Rows]) -> str:
    """Communication (GB) of some finders before (old) and after (new) the exact-cost change, one row per model."""
    rows = [r for rows in sources for r in rows]
    by = {(r["model"], r["algo"]): r for r in rows}
    algos = unique(r["algo"] for r in rows)
    lines = [[m, *(f"{_gb(by[(m, a)], key):.2f}" if (m, a) in by else "-" for a in algos
                   for key in ("old_comm_bytes", "new_comm_bytes"))] for m in unique(r["model"] for r in rows)]
    head = [cell for i, a in enumerate(algos) for cell in
            ((f"{a} old", f"{a} new") if i == 0 else (f"{a} old", "new"))]
    return markdown_table(["model", *head], lines)


def render_recursion_optimum(sources: list[Rows]) -> str:
    """Bytes per iteration of the recursion against the optimum over every sequence of cuts, and the best plan
    the recursion returns under some tie-breaking of its one-cut solver (where it was enumerated)."""
    lines = []
    for r in (r for rows in sources for r in rows):
        recursion, optimum = int(r["recursion_bytes"]), int(r["optimum_bytes"])
        gap = recursion / optimum - 1
        best = r["best_tiebreak_bytes"]
        lines.append([r["case"], r["workers"], f"{recursion:,}", f"{optimum:,}", f"{gap:.1%}" if gap else "0",
                      f"{int(best):,}" if best else ""])
    return markdown_table(["case", "k", "recursion", "optimum", "gap", "best step-optimal tie-break"], lines)


TABLES = {"search-comm": DocTable(render_comm, {"workers": int}),
          "search-memory": DocTable(render_memory, {"workers": int, "gpu_gb": float}),
          "search-coarsening": DocTable(render_coarsening),
          "search-exact-cost": DocTable(render_exact_cost),
          "search-recursion-optimum": DocTable(render_recursion_optimum)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--gpu-gb", type=float, default=12.0, help="device memory, 10^9 bytes (a K80 has 12)")
    args = p.parse_args(argv)
    sources = [read_rows(args.csv)]
    by, _, algos = _finished(sources)
    if not by:
        print(f"{args.csv}: no finished rows", file=sys.stderr)
        return 2
    print(f"Communication per iteration (GB), {args.workers} workers:\n")
    print(render_comm(sources, args.workers))
    print(f"\nPer-device memory (GB: steady shards + remote regions kept for the backward pass), "
          f"{args.workers} workers; * does not fit {args.gpu_gb:g} GB:\n")
    print(render_memory(sources, args.workers, args.gpu_gb))
    print("\nCommunication relative to Tofu's over every (model, workers) case (min / median / max):\n")
    cases = sorted({(m, k) for m, k, _ in by})
    for a in algos[1:]:
        ratios = [float(by[(m, k, a)]["comm_bytes"]) / float(by[(m, k, "tofu")]["comm_bytes"])
                  for m, k in cases if (m, k, a) in by and (m, k, "tofu") in by]
        if ratios:
            print(f"- {a}: {min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f} "
                  f"({len(ratios)} cases, below Tofu in {sum(x < 1 - 1e-9 for x in ratios)})")
    seconds = [float(r["search_seconds"]) for (m, k, a), r in by.items() if a == "tofu"]
    print(f"\nTofu's search: median {statistics.median(seconds):.2f} s, at most {max(seconds):.2f} s "
          f"({len(seconds)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
