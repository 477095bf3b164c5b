"""Markdown tables of a run of run_transformer.py: communication per iteration of every algorithm for every GPT
configuration, batch and worker count, and Tofu's bytes over Megatron-LM's; and the bytes the runtime sends (each
piece once per device) under both plans. Reads CSV only.

    python experiments/table_transformer.py results/transformer/latest.csv

A tofu row may carry ``tofu_over_megatron`` / ``shared_tofu_over_megatron``: the ratio as recorded where the
bytes beside it are rounded (a file transcribed from a doc); it is shown instead of the ratio of those bytes.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import read_rows  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402

ORDER = ("tofu", "megatron", "megatron-vp", "tofu-recursive", "dp-flat", "icml18", "equalchop", "spartan", "allrow-greedy",
         "data-parallel")


def _index(sources: list[Rows]) -> tuple[dict, list[tuple], list[str]]:
    """The rows by (model, batch, workers, algo), the cases in order, the algorithms present in :data:`ORDER`."""
    rows = [r for rows in sources for r in rows]
    by = {(r["model"], int(r["batch"]), int(r["workers"]), r["algo"]): r for r in rows}
    cases = unique((r["model"], int(r["batch"]), int(r["workers"])) for r in rows)
    return by, cases, [a for a in ORDER if any(key[3] == a for key in by)]


def _ratio(tofu, megatron, key: str, recorded: str) -> float:
    return float(tofu[recorded]) if tofu.get(recorded) else float(tofu[key]) / float(megatron[key])


def tofu_over_megatron(sources: list[Rows]) -> list[float]:
    """Tofu's communication over Megatron-LM's in every case both plan."""
    by, cases, _ = _index(sources)
    pairs = [(by.get((*c, "tofu")), by.get((*c, "megatron"))) for c in cases]
    return [_ratio(t, m, "comm_bytes", "tofu_over_megatron") for t, m in pairs
            if t and m and t["status"] == m["status"] == "ok"]


def render_comm(sources: list[Rows]) -> str:
    """Communication per iteration (GB) of every algorithm per case (n/a: it cannot plan the case), Tofu over
    Megatron-LM, Tofu's search seconds."""
    by, cases, algos = _index(sources)

    def cell(case, a):
        r = by.get((*case, a))
        if r is None:
            return "-"
        return f"{float(r['comm_bytes']) / 1e9:.2f}" if r["status"] == "ok" else "n/a"

    lines = []
    for case in cases:
        tofu, meg = by.get((*case, "tofu")), by.get((*case, "megatron"))
        ratio = "-"
        if tofu and meg and tofu["status"] == meg["status"] == "ok":
            ratio = f"{_ratio(tofu, meg, 'comm_bytes', 'tofu_over_megatron'):.2f}"
        seconds = f"{float(tofu['search_seconds']):.2f}" if tofu and tofu["status"] == "ok" else "-"
        lines.append([*map(str, case), *(cell(case, a) for a in algos), ratio, seconds])
    return markdown_table(["model", "batch", "k", *algos, "tofu / megatron", "Tofu search (s)"], lines)


def render_shared(sources: list[Rows]) -> str:
    """Bytes sent once per device (GB) under Tofu's and Megatron-LM's plans, where both were counted."""
    by, cases, _ = _index(sources)
    lines = []
    for case in cases:
        t, m = by.get((*case, "tofu"), {}), by.get((*case, "megatron"), {})
        if t.get("shared_bytes") and m.get("shared_bytes"):
            ratio = _ratio(t, m, "shared_bytes", "shared_tofu_over_megatron")
            lines.append([*map(str, case), f"{float(t['shared_bytes']) / 1e9:.2f}",
                          f"{float(m['shared_bytes']) / 1e9:.2f}", f"{ratio:.2f}"])
    return markdown_table(["model", "batch", "k", "tofu", "megatron", "tofu / megatron"], lines)


def render_faithful(sources: list[Rows]) -> str:
    """Megatron-LM + SP by the formula (``megatron_sp_bytes``) beside the faithful ``megatron-vp`` plan, the
    runnable ``megatron``, Tofu and data parallelism (GB per iteration; n/a: the algorithm refuses the case),
    Tofu over the formula, and the planner's memory of the fullest device (GiB) under Tofu and ``megatron-vp``."""
    by, cases, _ = _index(sources)

    def gb(case, a):
        r = by.get((*case, a))
        if r is None:
            return "-"
        return f"{float(r['comm_bytes']) / 1e9:.2f}" if r["status"] == "ok" else "n/a"

    def memory(case, a):
        r = by.get((*case, a))
        ok = r is not None and r["status"] == "ok" and r.get("per_device_total_bytes")
        return f"{float(r['per_device_total_bytes']) / 2**30:.1f}" if ok else "-"

    lines = []
    for case in cases:
        meg = by.get((*case, "megatron-vp"))
        formula = float(meg["megatron_sp_bytes"]) if meg and meg["status"] == "ok" and meg.get("megatron_sp_bytes") \
            else None
        tofu = by.get((*case, "tofu"))
        ratio = f"{float(tofu['comm_bytes']) / formula:.2f}" if formula and tofu and tofu["status"] == "ok" else "-"
        lines.append([*map(str, case), f"{formula / 1e9:.2f}" if formula else "n/a",
                      *(gb(case, a) for a in ("megatron-vp", "megatron", "tofu", "data-parallel")), ratio,
                      *(memory(case, a) for a in ("tofu", "megatron-vp"))])
    return markdown_table(["model", "batch", "k", "Megatron-LM + SP (formula)", "megatron-vp (faithful)",
                           "megatron (runnable)", "tofu", "data parallel", "tofu / formula",
                           "tofu GiB / device", "megatron-vp GiB / device"], lines)


def render_simulated(sources: list[Rows]) -> str:
    """One simulated training iteration (seconds) of Tofu's and ``megatron-vp``'s plans where the run simulated
    them (``run_transformer.py --simulate PROFILE``), and Megatron's over Tofu's."""
    by, cases, _ = _index(sources)
    lines = []
    for case in cases:
        t, m = by.get((*case, "tofu"), {}), by.get((*case, "megatron-vp"), {})
        if t.get("simulated_seconds") and m.get("simulated_seconds"):
            ts, ms = float(t["simulated_seconds"]), float(m["simulated_seconds"])
            lines.append([*map(str, case), t["simulated_profile"], f"{ts:.3f}", f"{ms:.3f}", f"{ms / ts:.2f}"])
    return markdown_table(["model", "batch", "k", "profile", "tofu (s)", "megatron-vp (s)",
                           "megatron-vp / tofu"], lines)


TABLES = {"transformer-comm": DocTable(render_comm), "transformer-shared": DocTable(render_shared),
          "transformer-faithful": DocTable(render_faithful), "transformer-simulated": DocTable(render_simulated)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    args = p.parse_args(argv)
    sources = [read_rows(args.csv)]
    if not sources[0]:
        print(f"{args.csv}: no rows", file=sys.stderr)
        return 2
    print("Communication per iteration (GB); n/a: the algorithm cannot plan the case:\n")
    print(render_comm(sources))
    ratios = tofu_over_megatron(sources)
    if ratios:
        print(f"\nTofu over Megatron-LM: min {min(ratios):.2f}, median {statistics.median(ratios):.2f}, max "
              f"{max(ratios):.2f} over {len(ratios)} cases; Tofu moves more in {sum(x > 1 + 1e-9 for x in ratios)} of them")
    if any(r.get("shared_bytes") for r in sources[0]):
        print("\nBytes sent once per device (GB; what the runtime sends), Tofu's and Megatron-LM's plans:\n")
        print(render_shared(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
