"""Tables of a run of run_runtime_overhead.py: the partitioned runtime's median step beside one device and MXNet's
Module (level ``step``), and the profiled step's time by op class (level ``profile``). Reads CSV only; no MXNet.

    python experiments/table_runtime_overhead.py docs/results/runtime_overhead/overhead.csv
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402

SYSTEMS = ("one-device", "tofu", "data-parallel", "module")
PROFILED = ("one-device", "tofu", "data-parallel")
CLASSES = ("kernels", "expansion and other", "slice", "Concat", "add_n", "copies", "fill", "update")
WALL = "wall"
BUSY = "busy"


def _ok(sources: Sequence[Rows], level: str) -> list[Mapping[str, str]]:
    return [r for rows in sources for r in rows if r["level"] == level and r["status"] == "ok"]


def render_steps(sources: Sequence[Rows]) -> str:
    """Median step (ms) of every system per (model, batch, k), with its ratios to one device and to Module."""
    rows = _ok(sources, "step")
    by = {(r["model"], int(r["batch"]), int(r["workers"]), r["system"]): r for r in rows}
    failed = {(r["model"], int(r["batch"]), int(r["workers"]), r["system"])
              for rows_ in sources for r in rows_ if r["level"] == "step" and r["status"] != "ok"}
    cases = unique((r["model"], int(r["batch"]), int(r["workers"])) for rows_ in sources for r in rows_
                   if r["level"] == "step")

    def cell(case, system):
        r = by.get((*case, system))
        if r is None:
            return "failed" if (*case, system) in failed else "-"
        ms = f"{float(r['seconds']) * 1e3:.3g}"
        if system in ("one-device",):
            return ms
        ratios = [f"{float(r['over_one_device']):.2f}x one"] if r.get("over_one_device") else []
        if system != "module" and r.get("over_module"):
            ratios.append(f"**{float(r['over_module']):.2f}x Module**" if system == "data-parallel"
                          else f"{float(r['over_module']):.2f}x Module")
        return f"{ms} ({', '.join(ratios)})" if ratios else ms

    lines = []
    for case in cases:
        bn = any(by.get((*case, s), {}).get("batchnorm") == "True" for s in SYSTEMS)
        loads = [float(by[(*case, s)]["load"]) for s in SYSTEMS if (*case, s) in by]
        lines.append([case[0] + (" (BatchNorm)" if bn else ""), str(case[1]), str(case[2]),
                      *(cell(case, s) for s in SYSTEMS), f"{max(loads):.1f}" if loads else "-"])
    return markdown_table(["model", "batch", "k", "one device (ms)", "tofu plan (ms)", "data-parallel plan (ms)",
                           "MXNet Module (ms)", "load"], lines)


def render_routes(sources: Sequence[Rows]) -> str:
    """Per (model, batch, k) run with ``--routes``: each plan's median step with parameter replicas and with the
    rewriter's routes (bound side by side in one process), their ratio, and Module's step."""
    rows = _ok(sources, "step")
    by = {(r["model"], int(r["batch"]), int(r["workers"]), r["system"]): float(r["seconds"]) for r in rows}
    cases = unique(key[:3] for key in by if key[3].endswith("-routes"))

    def pair(case, plan):
        new, old = by.get((*case, plan)), by.get((*case, f"{plan}-routes"))
        if new is None or old is None:
            return "-"
        return f"{new * 1e3:.3g} / {old * 1e3:.3g} (**{new / old:.2f}x**)"

    def module(case, plan):
        new, m = by.get((*case, plan)), by.get((*case, "module"))
        return f"{new / m:.2f}x / {by[(*case, f'{plan}-routes')] / m:.2f}x" if new and m and \
            (*case, f"{plan}-routes") in by else "-"

    lines = [[c[0], str(c[1]), str(c[2]), pair(c, "tofu"), pair(c, "data-parallel"), module(c, "data-parallel"),
              f"{by[(*c, 'module')] * 1e3:.3g}" if (*c, "module") in by else "-"] for c in cases]
    return markdown_table(["model", "batch", "k", "tofu plan: replicas / routes (ms)",
                           "data-parallel plan: replicas / routes (ms)", "data-parallel over Module: replicas / routes",
                           "MXNet Module (ms)"], lines)


def profile_summary(sources: Sequence[Rows]) -> dict[tuple, dict[str, dict[str, float]]]:
    """Per (model, batch, k, system): calls and seconds per step of each op class summed over devices, ``all ops``
    (their sum), ``busiest device`` (the largest time one device has an op running), ``any device`` (the time
    some device has one) and ``wall`` (the profiled step)."""
    out: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in _ok(sources, "profile"):
        key = (r["model"], int(r["batch"]), int(r["workers"]), r["system"])
        entry = out.setdefault(key, {})
        seconds, calls = float(r["seconds"]), float(r["calls"] or 0)
        if r["op_class"] == BUSY:
            name = "any device" if r["device"] == "" else "busiest device"
            old = entry.get(name, {"calls": 0.0, "seconds": 0.0})
            entry[name] = {"calls": 0.0, "seconds": max(old["seconds"], seconds)}
            continue
        acc = entry.setdefault(r["op_class"], {"calls": 0.0, "seconds": 0.0})
        acc["calls"] += calls
        acc["seconds"] += seconds
    for entry in out.values():
        entry["all ops"] = {"calls": sum(v["calls"] for c, v in entry.items() if c in CLASSES),
                            "seconds": sum(v["seconds"] for c, v in entry.items() if c in CLASSES)}
    return out


def render_profile(sources: Sequence[Rows]) -> str:
    """Per model: calls per step of each op class, summed over the devices, and (in brackets) its share of the
    summed op time, under one device and the two plans (MXNet's profiler, bulk execution off); then the profiled
    step's wall time (ms; :func:`profile_summary` also gives each device's busy time). Shares, not ms: on a shared 2-core machine
    the k devices' worker threads are time-sliced, so an op's span includes the time its thread waits for a core
    and the spans of one device overlap (its copies run on other threads); summed, they say where the calls go,
    not how long each took alone."""
    summary = profile_summary(sources)
    cases = unique(key[:3] for key in summary)
    lines = []
    for case in cases:
        first = True
        for cls in (*CLASSES, "all ops", WALL):
            cells = []
            for system in PROFILED:
                v = summary.get((*case, system), {}).get(cls)
                if v is None:
                    cells.append("")
                elif cls in ("busiest device", "any device", WALL):
                    cells.append(f"{v['seconds'] * 1e3:.3g} ms")
                else:
                    total = summary[(*case, system)]["all ops"]["seconds"]
                    cells.append(f"{v['calls']:.0f} ({v['seconds'] / total:.1%})")
            if not any(cells):
                continue
            label = f"{case[0]}, b={case[1]}, k={case[2]}" if first else ""
            first = False
            lines.append([label, f"**{cls}**" if cls in ("all ops", WALL) else cls, *cells])
    return markdown_table(["model", "op class", "one device: calls (share)", "tofu plan: calls (share)",
                           "data-parallel plan: calls (share)"], lines)


TABLES = {"runtime-overhead": DocTable(render_steps), "runtime-overhead-ops": DocTable(render_profile),
          "runtime-overhead-routes": DocTable(render_routes)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    from experiments.common import read_rows

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="+")
    args = p.parse_args(argv)
    sources = [read_rows(path) for path in args.csv]
    print("Median training step (ms), ratios to one device and to MXNet's Module:\n")
    print(render_steps(sources))
    print("\nThe profiled step by op class (calls per step summed over devices, share of the summed op time):\n")
    print(render_profile(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
