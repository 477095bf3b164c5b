"""Markdown tables of per-device memory measurements (docs/runtime.md). From a run of run_memory.py: the fullest
device's peak over (one device's peak / k) beside the plan's estimate, per configuration, algorithm and k; and,
with ``--one-context``, where the excess goes (the partitioned graph's structure, its spread over k contexts).
From measurements of Gluon exports (``tofu run --memory``): device 0 against the others. Reads CSV only.

    python experiments/table_memory.py results/memory/session20.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import read_rows  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402

WEIGHT_DOMINATED = 0.5             # activation share below which a configuration is labelled "(weights)"
DEFAULT_SHAPE = "8x3x224x224"      # the input the device-0 table states once ("unless stated")
MXNET_CPU_TEMP_COPY = 4            # MXNet 1.9.1's default number of CPU temporary-space buffers


def _config(r) -> tuple[str, str]:
    return r["model"], r["batch"]


def render_peaks(sources: list[Rows], bold: str = "") -> str:
    """One row per (model, batch): the activations' share of the one-device estimate, then per algorithm and k the
    fullest device's peak over one device's / k and, in brackets, the plan's estimate on the same scale. ``bold``:
    ``MODEL:BATCH,...`` whose Tofu cells are set in bold (the configurations the text discusses)."""
    rows = [r for rows in sources for r in rows if r["status"] == "ok"]
    by = {(*_config(r), r["algo"], int(r["workers"])): r for r in rows}
    algos, workers = unique(r["algo"] for r in rows), sorted({int(r["workers"]) for r in rows})
    emphasised = {tuple(c.rsplit(":", 1)) for c in bold.split(",") if c}
    lines = []
    for config in unique(map(_config, rows)):
        share = float(next(r for r in rows if _config(r) == config)["activation_share"])
        cells = []
        for a in algos:
            for k in workers:
                r = by.get((*config, a, k))
                peak = "-" if r is None else f"{float(r['max_peak_over_one_per_k']):.3f}"
                if r is not None and a == "tofu" and config in emphasised:
                    peak = f"**{peak}**"
                cells.append(peak if r is None else f"{peak} ({float(r['plan_over_one_per_k']):.3f})")
        label = f"{config[0]}, {config[1]}" + (" (weights)" if share < WEIGHT_DOMINATED else "")
        lines.append([label, f"{share:.1%}", *cells])
    head = ["model, batch", "activations", *(f"{a} k={k}" for a in algos for k in workers)]
    return markdown_table(head, lines)


def _structure(r) -> tuple[float, float]:
    """(the partitioned graph on one context / one device, the k device peaks summed / that): from the bytes of
    run_memory.py --one-context, or the recorded ratios of a transcribed file."""
    if r.get("one_context_peak_bytes"):
        together = float(r["one_context_peak_bytes"])
        peaks = [float(p) for p in r["device_peak_bytes"].split()]
        return together / float(r["one_device_peak_bytes"]), sum(peaks) / together
    return float(r["one_context_over_one_device"]), float(r["device_peaks_over_one_context"])


def render_structure(sources: list[Rows], algo: str = "tofu") -> str:
    """Where the excess of ``algo``'s plans goes, for every case measured on one context too."""
    rows = [r for rows in sources for r in rows if r["status"] == "ok" and r["algo"] == algo
            and (r.get("one_context_peak_bytes") or r.get("one_context_over_one_device"))]
    lines = [[f"{r['model']}, {r['batch']}", r["workers"], f"{float(r['max_peak_over_one_per_k']):.3f}",
              *(f"{x:.3f}" for x in _structure(r))] for r in rows]
    return markdown_table(["model, batch", "k", "per device / (one / k)",
                          "structure: the partitioned graph on one context / one device",
                          "spread: the k peaks summed / that"], lines)


def _range(low: float, high: float, digits: int) -> str:
    a, b = f"{low:.{digits}f}", f"{high:.{digits}f}"
    return a if a == b else f"{a}-{b}"


def render_device0(sources: list[Rows]) -> str:
    """Device 0 against the others (devices 1-3 as a range), measured and over the plan's estimate before and
    after the estimate counted device 0's temporary space; one row per (network, input shape,
    ``MXNET_CPU_TEMP_COPY``)."""
    lines, previous = [], None
    for r in (r for rows in sources for r in rows):
        x = lambda key: float(r[key])  # noqa: E731
        net = (r["net"], r["shape"])
        label = "same" if net == previous else r["net"] + ("" if r["shape"] == DEFAULT_SHAPE else f", {r['shape']}")
        if int(r["cpu_temp_copy"]) != MXNET_CPU_TEMP_COPY:
            label += f", `MXNET_CPU_TEMP_COPY={r['cpu_temp_copy']}`"
        previous = net
        lines.append([
            label,
            f"{x('device0_peak_bytes') / 1e6:.1f} MB ({x('device0_over_one_per_k'):.3f})",
            f"{_range(x('others_peak_min_bytes') / 1e6, x('others_peak_max_bytes') / 1e6, 1)} MB "
            f"({_range(x('others_over_one_per_k_min'), x('others_over_one_per_k_max'), 2)})",
            f"{x('old_device0_over_estimate'):.3f}, "
            f"{_range(x('old_others_over_estimate_min'), x('old_others_over_estimate_max'), 2)}",
            f"{x('device0_over_estimate'):.3f}, "
            f"{_range(x('others_over_estimate_min'), x('others_over_estimate_max'), 2)}"])
    return markdown_table(["model", "device 0 (x one/k)", "devices 1-3 (x one/k)",
                           "before: device 0, 1-3 / the old estimate", "now: device 0, 1-3 / estimate"], lines)


TABLES = {"memory-peaks": DocTable(render_peaks, {"bold": str}),
          "memory-structure": DocTable(render_structure, {"algo": str}),
          "memory-device0": DocTable(render_device0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="+")
    args = p.parse_args(argv)
    sources = [read_rows(path) for path in args.csv]
    print(render_peaks(sources))
    if any(r.get("one_context_peak_bytes") or r.get("one_context_over_one_device") for rows in sources for r in rows):
        print()
        print(render_structure(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
