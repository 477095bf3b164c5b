"""The performance model (``tofu.sim``) against measurements on this CPU: single ops, then partitioned steps.

    python experiments/run_cpu_validation.py [--models mlp,wresnet-tiny,rnn-tiny] [--workers 1,2,4]
                                             [--batch 24] [--steps 10] [--repeats 20] [--tag NAME] [--quick]

Level ``op``: each case binds one MXNet operator (inputs with gradients, as inside a network), times
``--repeats`` forward + backward calls after a warm-up and keeps the median, beside the ``cpu`` profile's
prediction for one call (the op's forward and backward roofline times plus the profile's per-call cost).
Level ``step``: each (model, workers) plans the model with ``tofu``, runs ``--steps`` partitioned training steps
on cpu(0..k-1) (``tofu.runtime.run.train``) and keeps the median step time, beside ``tofu.sim.simulate``.
One CSV row per case in results/sim/<tag>.csv (``relative_error`` = predicted / measured - 1), a JSON sidecar
with the arguments, versions and the calibrated profile, and a summary (median and worst |error| per level)
printed and stored in the sidecar. ``--quick``: three ops, mlp at 1 and 2 workers, three steps.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

from experiments.common import RowWriter, write_sidecar  # noqa: E402
from tofu.api import load_graph, partitioned  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402
from tofu.runtime.data import initial_values, synthetic_batch  # noqa: E402
from tofu.runtime.run import train  # noqa: E402
from tofu.search.algorithms import plan_graph  # noqa: E402
from tofu.sim.calibrate import (DEFAULT_CACHE, OpCase, activation, batchnorm, binary, calibration,  # noqa: E402
                                case_work, conv, fc, measure_op, pooling)
from tofu.sim.glue import count_glue  # noqa: E402
from tofu.sim.model import call_time, simulate  # noqa: E402

COLUMNS = ("level", "case", "workers", "batch", "status", "measured_seconds", "predicted_seconds",
           "relative_error", "predicted_compute_seconds", "predicted_comm_seconds", "predicted_kernels_seconds",
           "op_class", "glue_ops", "copies", "flops", "bytes", "message")
SMALL = ("mlp", "wresnet-tiny", "rnn-tiny")


# The validation set: none of these shapes is in tofu.sim.calibrate.CALIBRATION_CASES (tests/sim checks it).
OP_CASES = (
    conv(8, 16, 32, 16, 3), conv(16, 64, 16, 64, 3), conv(32, 64, 28, 128, 1),
    fc(64, 1024, 1024), fc(256, 512, 256), fc(32, 4096, 4096),
    batchnorm((16, 64, 32, 32)), batchnorm((32, 128, 14, 14)),
    activation((16, 64, 32, 32)), activation((64, 4096)),
    binary("elemwise_add", (16, 64, 32, 32)), binary("elemwise_add", (256, 1024)),
    pooling((16, 64, 32, 32)), pooling((32, 128, 28, 28)),
)
QUICK_OP_CASES = (conv(8, 16, 32, 16, 3), fc(64, 1024, 1024), activation((64, 4096)))


def op_row(case: OpCase, repeats: int, runs: int, profile) -> dict:
    """The median over ``runs`` runs of the median of ``repeats`` calls, beside the prediction."""
    times = []
    for _ in range(runs):
        t, out_shapes = measure_op(case, repeats)
        times.append(t)
    measured = statistics.median(times)
    work = case_work(case, out_shapes)
    predicted = call_time(work, case.grads, profile).total + profile.step_seconds
    return {"status": "ok", "measured_seconds": measured, "predicted_seconds": predicted,
            "relative_error": predicted / measured - 1, "flops": work.flops, "bytes": work.bytes,
            "op_class": work.op_class.value, "predicted_kernels_seconds": predicted}


def step_row(model: str, batch: int, workers: int, steps: int, runs: int, profile) -> dict:
    """The median over ``runs`` training runs of the median step, beside the model with and without glue."""
    graph = load_graph(model, ModelOptions(batch=batch))
    plan = plan_graph(graph, workers, "tofu")
    pg = partitioned(graph, plan)
    measured = statistics.median(
        train(graph, plan, pg, initial_values(graph), synthetic_batch(graph), steps).median_step_seconds
        for _ in range(runs))
    glue = count_glue(graph, pg)
    est = simulate(graph, plan, profile, glue=glue)
    kernels = simulate(graph, plan, profile)
    return {"status": "ok", "measured_seconds": measured, "predicted_seconds": est.seconds,
            "relative_error": est.seconds / measured - 1, "predicted_compute_seconds": est.compute_seconds,
            "predicted_comm_seconds": est.comm_seconds, "flops": est.flops, "bytes": plan.comm_bytes,
            "predicted_kernels_seconds": kernels.seconds, "glue_ops": len(glue.calls), "copies": len(glue.copies)}


def summary(rows: list[dict]) -> dict:
    """Per level: cases, median and worst |relative error|, and the worst case's name."""
    out = {}
    for level in ("op", "step"):
        ok = [r for r in rows if r["level"] == level and r["status"] == "ok"]
        if not ok:
            continue
        errors = [abs(r["relative_error"]) for r in ok]
        worst = max(ok, key=lambda r: abs(r["relative_error"]))
        out[level] = {"cases": len(ok), "median_abs_relative_error": statistics.median(errors),
                      "worst_abs_relative_error": max(errors),
                      "worst_case": f"{worst['case']} k={worst['workers']}"}
    return out


def _fmt(row: dict) -> dict:
    return {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(SMALL))
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=20, help="timed calls per op (median)")
    p.add_argument("--runs", type=int, default=3, help="runs per case (median of the runs' medians)")
    p.add_argument("--levels", default="op,step", help="comma-separated from op, step")
    p.add_argument("--recalibrate", action="store_true", help="measure the cpu profile again (else cached)")
    p.add_argument("--calibration", type=Path, default=DEFAULT_CACHE, help="the cpu profile's cache file")
    p.add_argument("--tag", default="cpu_validation")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    models = args.models.split(",")
    for m in models:
        if m not in SMALL:
            p.error(f"unknown model '{m}' (choose from {', '.join(SMALL)})")
    workers = [int(w) for w in args.workers.split(",")]
    levels = args.levels.split(",")
    cases = OP_CASES
    if args.quick:
        cases, models, workers, args.steps, args.repeats, args.runs = QUICK_OP_CASES, ["mlp"], [1, 2], 3, 5, 1
    cal = calibration(args.calibration, args.recalibrate, repeats=3 if args.quick else 15)
    profile = cal.profile()
    print(f"cpu profile: GEMM {cal.gemm_flops / 1e9:.1f} GFLOP/s, copy {cal.copy_bandwidth / 1e9:.1f} GB/s, "
          f"cross-context {cal.cross_context_bandwidth / 1e9:.1f} GB/s + {cal.copy_launch_seconds * 1e6:.1f} us, "
          f"call {cal.call_seconds * 1e6:.0f} us, update {cal.update_seconds * 1e6:.0f} us", flush=True)
    for name, f in cal.classes.items():
        unit = "GFLOP/s" if f.bound == "compute" else "GB/s"
        print(f"  {name:<14} {f.rate / 1e9:8.2f} {unit:<8} launch {f.launch * 1e6:7.2f} us  "
              f"fit median |error| {f.median_abs_relative_error:.0%} ({f.cases} cases)", flush=True)
    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    rows = []

    def record(base: dict, make) -> None:
        try:
            row = {**base, **make()}
        except Exception as e:          # keep the case, say why (a failed case is a result too)
            row = {**base, "status": "error", "message": f"{type(e).__name__}: {e}"[:200]}
        rows.append(row)
        writer.write(_fmt(row))
        err = row.get("relative_error")
        print(f"{row['level']:<5} {row['case']:<40} k={row['workers']} {row['status']:<6} "
              f"measured {row.get('measured_seconds', float('nan')) * 1e3:9.3f} ms  "
              f"predicted {row.get('predicted_seconds', float('nan')) * 1e3:9.3f} ms  "
              f"error {'-' if err is None else f'{err:+.0%}'}", flush=True)

    if "op" in levels:
        for case in cases:
            record({"level": "op", "case": case.name, "workers": 1, "batch": case.inputs[0][1][0]},
                   lambda: op_row(case, args.repeats, args.runs, profile))
    if "step" in levels:
        for model in models:
            for k in workers:
                record({"level": "step", "case": model, "workers": k, "batch": args.batch},
                       lambda: step_row(model, args.batch, k, args.steps, args.runs, profile))
    writer.close()
    result = summary(rows)
    write_sidecar(path, vars(args), calibration=dataclasses.asdict(cal), summary=result)
    for level, s in result.items():
        print(f"{level}: {s['cases']} cases, median |error| {s['median_abs_relative_error']:.0%}, "
              f"worst {s['worst_abs_relative_error']:.0%} ({s['worst_case']})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
