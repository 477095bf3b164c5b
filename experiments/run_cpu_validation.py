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
from tofu.graph.attrs import Attrs  # noqa: E402
from tofu.models import ModelOptions  # noqa: E402
from tofu.runtime.data import initial_values, synthetic_batch  # noqa: E402
from tofu.runtime.run import train  # noqa: E402
from tofu.search.algorithms import plan_graph  # noqa: E402
from tofu.sim.calibrate import DEFAULT_CACHE, calibration  # noqa: E402
from tofu.sim.model import call_time, op_call_work, simulate  # noqa: E402

COLUMNS = ("level", "case", "workers", "batch", "status", "measured_seconds", "predicted_seconds",
           "relative_error", "predicted_compute_seconds", "predicted_comm_seconds", "flops", "bytes", "message")
SMALL = ("mlp", "wresnet-tiny", "rnn-tiny")


@dataclass(frozen=True)
class OpCase:
    """One MXNet operator call: its inputs (name -> shape, in the operator's argument order; ``aux`` names the
    auxiliary states among them) and its attributes as MXNet takes them."""

    name: str
    op: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    attrs: dict = field(default_factory=dict)
    aux: tuple[str, ...] = ()


def _conv(n, c, hw, f, k):
    return OpCase(f"Convolution {n}x{c}x{hw}x{hw} f{f} k{k}", "Convolution",
                  (("data", (n, c, hw, hw)), ("weight", (f, c, k, k)), ("bias", (f,))),
                  {"num_filter": f, "kernel": (k, k), "pad": (k // 2, k // 2)})


def _fc(n, k, m):
    return OpCase(f"FullyConnected {n}x{k} -> {m}", "FullyConnected",
                  (("data", (n, k)), ("weight", (m, k)), ("bias", (m,))), {"num_hidden": m})


def _bn(shape):
    c = shape[1]
    return OpCase(f"BatchNorm {'x'.join(map(str, shape))}", "BatchNorm",
                  (("data", shape), ("gamma", (c,)), ("beta", (c,)), ("moving_mean", (c,)), ("moving_var", (c,))),
                  {}, ("moving_mean", "moving_var"))


def _relu(shape):
    return OpCase(f"Activation relu {'x'.join(map(str, shape))}", "Activation", (("data", shape),),
                  {"act_type": "relu"})


def _add(shape):
    return OpCase(f"elemwise_add {'x'.join(map(str, shape))}", "elemwise_add", (("lhs", shape), ("rhs", shape)))


def _pool(shape):
    return OpCase(f"Pooling max 2x2 {'x'.join(map(str, shape))}", "Pooling", (("data", shape),),
                  {"kernel": (2, 2), "stride": (2, 2), "pool_type": "max"})


OP_CASES = (
    _conv(8, 16, 32, 16, 3), _conv(16, 64, 16, 64, 3), _conv(32, 64, 28, 128, 1),
    _fc(64, 1024, 1024), _fc(256, 512, 256), _fc(32, 4096, 4096),
    _bn((16, 64, 32, 32)), _bn((32, 128, 14, 14)),
    _relu((16, 64, 32, 32)), _relu((64, 4096)),
    _add((16, 64, 32, 32)), _add((256, 1024)),
    _pool((16, 64, 32, 32)), _pool((32, 128, 28, 28)),
)
QUICK_OP_CASES = (_conv(8, 16, 32, 16, 3), _fc(64, 1024, 1024), _relu((64, 4096)))


def measure_op(case: OpCase, repeats: int) -> tuple[float, tuple[tuple[int, ...], ...]]:
    """Median seconds of one forward + backward call of the case's operator, and its output shapes."""
    import mxnet as mx

    args = {n: mx.sym.var(n) for n, _ in case.inputs}
    sym = getattr(mx.sym, case.op)(**args, **case.attrs, name="op")
    shapes = dict(case.inputs)
    grad_req = {n: ("null" if n in case.aux else "write") for n in sym.list_arguments()}
    exe = sym.simple_bind(ctx=mx.cpu(0), grad_req=grad_req, **shapes)
    for n, arr in {**exe.arg_dict, **exe.aux_dict}.items():
        arr[:] = mx.nd.random.uniform(0.5, 1.5, shape=arr.shape)
    heads = [mx.nd.ones(o.shape) for o in exe.outputs]

    def run():
        exe.forward(is_train=True)
        exe.backward(heads)
        for g in exe.grad_arrays:
            if g is not None:
                g.wait_to_read()
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), tuple(tuple(o.shape) for o in exe.outputs)


def op_row(case: OpCase, repeats: int, profile) -> dict:
    measured, out_shapes = measure_op(case, repeats)
    attrs = Attrs.parse({k: str(v) for k, v in case.attrs.items()})
    work = op_call_work(case.op, attrs, [s for _, s in case.inputs], out_shapes)
    grads = [n for n, _ in case.inputs if n not in case.aux]
    predicted = call_time(work, grads, profile).total + profile.step_seconds
    return {"status": "ok", "measured_seconds": measured, "predicted_seconds": predicted,
            "relative_error": predicted / measured - 1, "flops": work.flops, "bytes": work.bytes}


def step_row(model: str, batch: int, workers: int, steps: int, profile) -> dict:
    graph = load_graph(model, ModelOptions(batch=batch))
    plan = plan_graph(graph, workers, "tofu")
    report = train(graph, plan, partitioned(graph, plan), initial_values(graph), synthetic_batch(graph), steps)
    est = simulate(graph, plan, profile)
    measured = report.median_step_seconds
    return {"status": "ok", "measured_seconds": measured, "predicted_seconds": est.seconds,
            "relative_error": est.seconds / measured - 1, "predicted_compute_seconds": est.compute_seconds,
            "predicted_comm_seconds": est.comm_seconds, "flops": est.flops, "bytes": plan.comm_bytes}


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
        cases, models, workers, args.steps, args.repeats = QUICK_OP_CASES, ["mlp"], [1, 2], 3, 5
    cal = calibration(args.calibration, args.recalibrate)
    profile = cal.profile()
    print(f"cpu profile: GEMM {cal.gemm_flops / 1e9:.1f} GFLOP/s, copy {cal.copy_bandwidth / 1e9:.1f} GB/s, "
          f"cross-context {cal.cross_context_bandwidth / 1e9:.1f} GB/s, op {cal.op_seconds * 1e6:.2f} us, "
          f"call {cal.call_seconds * 1e6:.0f} us, update {cal.update_seconds * 1e6:.0f} us", flush=True)
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
                   lambda: op_row(case, args.repeats, profile))
    if "step" in levels:
        for model in models:
            for k in workers:
                record({"level": "step", "case": model, "workers": k, "batch": args.batch},
                       lambda: step_row(model, args.batch, k, args.steps, profile))
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
