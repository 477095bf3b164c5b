"""Times the partition analysis of every registered operator, on every one of its Cases.

    python experiments/bench_analysis.py [--repeats 5] [--out results/bench_analysis.csv]

The analysis of one case is ``describe`` (the TDL description at the case's shapes) + ``analyse`` (symbolic
strategies) + ``instantiate`` for k = 2, 4 and 8. MXNet's output shapes are asked once, before timing (a graph
import has them already). The analysis cache is cleared before every repeat, so each repeat is cold. One
burn-in repeat, then ``--repeats`` timed ones; the CSV has one row per (op, repeat) with raw seconds.

``shard_call`` (finding the attributes with which MXNet's own kernel runs each worker's shard, k = 2) asks
MXNet's shape inference and is timed separately; it is not part of the analysis time.
"""
from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import mxnet as mx

from tofu import registry
from tofu.analysis.shard import shard_call
from tofu.analysis.strategies import analyse, instantiate
from tofu.api import clear_caches
from tofu.errors import TofuError
from tofu.graph.single_op import infer_op_shapes
from tofu.tdl.describe import describe

KS = (2, 4, 8)
COLUMNS = ("op", "repeat", "cases", "describe_seconds", "analyse_seconds", "instantiate_seconds",
           "analysis_seconds", "strategies_k2", "strategies_k4", "strategies_k8", "shard_seconds",
           "shard_strategies", "kernel_executable")


def prepare() -> dict[str, list[tuple]]:
    """Per op, each case's parsed attributes, input shapes and MXNet's output shapes (not timed)."""
    specs = registry.load_builtin_operators()
    out = {}
    for op, spec in sorted(specs.items()):
        out[op] = [(c.parsed_attrs(), c.shapes, infer_op_shapes(op, c.parsed_attrs(), c.shapes)) for c in spec.cases]
    return out


def time_op(op: str, cases: list[tuple]) -> dict:
    """One cold analysis of every case of ``op``, then shard_call for every k=2 strategy, timed by phase."""
    t_desc = t_an = t_inst = 0.0
    counts = dict.fromkeys(KS, 0)
    k2 = []
    for attrs, shapes, out_shapes in cases:
        t0 = time.perf_counter()
        desc = describe(op, attrs, shapes, out_shapes)
        t1 = time.perf_counter()
        symbolic = analyse(desc).strategies
        t2 = time.perf_counter()
        for k in KS:
            found = [s for s in (instantiate(desc, s, k) for s in symbolic) if s is not None]
            counts[k] += len(found)
            if k == 2:
                k2 += [(attrs, desc, s) for s in found]
        t3 = time.perf_counter()
        t_desc, t_an, t_inst = t_desc + t1 - t0, t_an + t2 - t1, t_inst + t3 - t2
    t0 = time.perf_counter()
    executable = 0
    for attrs, desc, s in k2:
        try:
            for w in range(s.k):
                shard_call(op, attrs, s, w, desc)
            executable += 1
        except TofuError:
            pass
    shard = time.perf_counter() - t0
    return {"op": op, "cases": len(cases), "describe_seconds": t_desc, "analyse_seconds": t_an,
            "instantiate_seconds": t_inst, "analysis_seconds": t_desc + t_an + t_inst,
            **{f"strategies_k{k}": counts[k] for k in KS}, "shard_seconds": shard, "shard_strategies": len(k2),
            "kernel_executable": executable}


def run_repeat(prepared: dict[str, list[tuple]], repeat: int) -> list[dict]:
    clear_caches()          # cold: descriptions, analyses, MXNet's one-op symbols and shape answers
    return [{**time_op(op, cases), "repeat": repeat} for op, cases in prepared.items()]


def _git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats after one burn-in (default 5)")
    parser.add_argument("--out", type=Path, default=Path("results/bench_analysis.csv"))
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")

    prepared = prepare()
    run_repeat(prepared, 0)                                   # burn-in: imports, first-call costs
    rows = [row for r in range(1, args.repeats + 1) for row in run_repeat(prepared, r)]

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    args.out.with_suffix(".json").write_text(json.dumps({
        "args": {"repeats": args.repeats, "out": str(args.out)}, "ks": KS, "git_sha": _git_sha(),
        "mxnet": mx.__version__, "python": platform.python_version(), "machine": platform.processor()
        or platform.machine()}, indent=2) + "\n")

    def per_repeat(column: str) -> list[float]:
        return [sum(r[column] for r in rows if r["repeat"] == k) for k in range(1, args.repeats + 1)]

    def slowest(column: str) -> tuple[str, float]:
        medians = {op: statistics.median(r[column] for r in rows if r["op"] == op) for op in prepared}
        op = max(medians, key=lambda o: (medians[o], o))
        return op, medians[op]

    n_cases = sum(len(c) for c in prepared.values())
    first = [r for r in rows if r["repeat"] == 1]
    counts = "/".join(str(sum(r[f"strategies_k{k}"] for r in first)) for k in KS)
    op, worst = slowest("analysis_seconds")
    print(f"analysed {len(prepared)} ops ({n_cases} cases) in {statistics.median(per_repeat('analysis_seconds')):.2f} "
          f"s (median of {args.repeats}); strategies for k = {'/'.join(map(str, KS))}: {counts}; "
          f"slowest op {op} {worst * 1e3:.1f} ms")
    op, worst = slowest("shard_seconds")
    print(f"shard_call (MXNet shape inference, every worker, k = 2): {sum(r['shard_strategies'] for r in first)} "
          f"strategies ({sum(r['kernel_executable'] for r in first)} kernel-executable) in "
          f"{statistics.median(per_repeat('shard_seconds')):.2f} s (median of {args.repeats}); "
          f"slowest op {op} {worst * 1e3:.1f} ms")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
