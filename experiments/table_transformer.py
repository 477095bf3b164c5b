"""Markdown table of a run of run_transformer.py: communication per iteration of every algorithm for every GPT
configuration, batch and worker count, and Tofu's bytes over Megatron-LM's. Reads CSV only.

    python experiments/table_transformer.py results/transformer/latest.csv
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ORDER = ("tofu", "megatron", "tofu-recursive", "dp-flat", "icml18", "equalchop", "spartan", "allrow-greedy",
         "data-parallel")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    args = p.parse_args(argv)
    rows = list(csv.DictReader(args.csv.open()))
    if not rows:
        print(f"{args.csv}: no rows", file=sys.stderr)
        return 2
    by = {(r["model"], int(r["batch"]), int(r["workers"]), r["algo"]): r for r in rows}
    cases = list(dict.fromkeys((r["model"], int(r["batch"]), int(r["workers"])) for r in rows))
    algos = [a for a in ORDER if any(key[3] == a for key in by)]

    def cell(case, a):
        r = by.get((*case, a))
        if r is None:
            return "-"
        return f"{float(r['comm_bytes']) / 1e9:.2f}" if r["status"] == "ok" else "n/a"

    print("Communication per iteration (GB); n/a: the algorithm cannot plan the case:\n")
    print("| model | batch | k | " + " | ".join(algos) + " | tofu / megatron | Tofu search (s) |")
    print("|---" * (len(algos) + 5) + "|")
    ratios = []
    for case in cases:
        tofu, meg = by.get((*case, "tofu")), by.get((*case, "megatron"))
        ratio = "-"
        if tofu and meg and tofu["status"] == meg["status"] == "ok":
            ratios.append(float(tofu["comm_bytes"]) / float(meg["comm_bytes"]))
            ratio = f"{ratios[-1]:.2f}"
        seconds = f"{float(tofu['search_seconds']):.2f}" if tofu and tofu["status"] == "ok" else "-"
        print(f"| {case[0]} | {case[1]} | {case[2]} | " + " | ".join(cell(case, a) for a in algos) +
              f" | {ratio} | {seconds} |")
    if ratios:
        print(f"\nTofu over Megatron-LM: min {min(ratios):.2f}, median {statistics.median(ratios):.2f}, max "
              f"{max(ratios):.2f} over {len(ratios)} cases; Tofu moves more in {sum(x > 1 + 1e-9 for x in ratios)} of them")
    sent = [(case, by[(*case, "tofu")], by[(*case, "megatron")]) for case in cases
            if all(by.get((*case, a), {}).get("shared_bytes") for a in ("tofu", "megatron"))]
    if sent:
        print("\nBytes sent once per device (GB; what the runtime sends), Tofu's and Megatron-LM's plans:\n")
        print("| model | batch | k | tofu | megatron | tofu / megatron |")
        print("|---|---|---|---|---|---|")
        for case, t, m in sent:
            a, b = float(t["shared_bytes"]), float(m["shared_bytes"])
            print(f"| {case[0]} | {case[1]} | {case[2]} | {a / 1e9:.2f} | {b / 1e9:.2f} | {a / b:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
