"""Markdown tables of a run of run_search_time.py: communication and per-device memory of every plan finder at
one worker count, and each finder's communication relative to Tofu's over every case. Reads CSV only.

    python experiments/table_search.py results/search_time/paper.csv --workers 8 [--gpu-gb 12]
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ORDER = ("tofu", "tofu-recursive", "dp-flat", "icml18", "equalchop", "spartan", "allrow-greedy", "data-parallel")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--gpu-gb", type=float, default=12.0, help="device memory, 10^9 bytes (a K80 has 12)")
    args = p.parse_args(argv)
    rows = [r for r in csv.DictReader(args.csv.open()) if r["status"] == "ok"]
    if not rows:
        print(f"{args.csv}: no finished rows", file=sys.stderr)
        return 2
    by = {(r["model"], int(r["workers"]), r["algo"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    algos = [a for a in ORDER if any(k[2] == a for k in by)]
    gb = lambda r, key: float(r[key]) / 1e9  # noqa: E731

    print(f"Communication per iteration (GB), {args.workers} workers:\n")
    print("| model | " + " | ".join(algos) + " | Tofu search (s) |")
    print("|---" * (len(algos) + 2) + "|")
    for m in models:
        cells = [f"{gb(by[(m, args.workers, a)], 'comm_bytes'):.2f}" if (m, args.workers, a) in by else "-"
                 for a in algos]
        tofu = by.get((m, args.workers, "tofu"))
        seconds = f"{float(tofu['search_seconds']):.2f}" if tofu else "-"
        print(f"| {m} | " + " | ".join(cells) + f" | {seconds} |")

    print(f"\nPer-device memory (GB: steady shards + remote regions kept for the backward pass), "
          f"{args.workers} workers; * does not fit {args.gpu_gb:g} GB:\n")
    print("| model | " + " | ".join(algos) + " |")
    print("|---" * (len(algos) + 1) + "|")
    fits = {a: 0 for a in algos}
    for m in models:
        cells = []
        for a in algos:
            r = by.get((m, args.workers, a))
            if r is None:
                cells.append("-")
                continue
            total = gb(r, "per_device_total_bytes")
            fits[a] += total <= args.gpu_gb
            cells.append(f"{total:.2f}{'' if total <= args.gpu_gb else '*'}")
        print(f"| {m} | " + " | ".join(cells) + " |")
    print("| fits | " + " | ".join(f"{fits[a]} / {len(models)}" for a in algos) + " |")

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
