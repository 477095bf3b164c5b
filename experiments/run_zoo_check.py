"""Networks nobody here wrote: Gluon model-zoo ImageNet networks exported and run partitioned, checked.

    python experiments/run_zoo_check.py [--nets resnet18_v1,...] [--plan-workers 2,4,8] [--train-workers 2,4]
                                        [--steps 2] [--tag zoo] [--quick]

Each network is built by Gluon inside this script (``mx.gluon.model_zoo.vision``, random weights, 10 classes, no
download), hybridized, run once and ``export()``ed to a symbol file, then read back as a user's file is
(``tofu.api.load_graph``, a softmax loss over its logits). For each network: the ``tofu`` plan at every
``--plan-workers`` K (search time, bytes, the plan's per-device memory); and at every ``--train-workers`` K,
``--steps`` partitioned training steps beside one device (``tofu run --check``: Dropout off on both sides, each
step from the same state, status ``ok`` only within the default tolerance, or, where float32 exceeds it, within
float64's: the steps beyond it run again on both sides in float64, column ``float64_rel``), the bytes of every
cross-device copy beside the plan's prediction, and each device's peak memory (MXNet's profiler) beside one
device's peak / K. ``--plan-workers ''``: no plan rows (a re-run of the trained rows alone).
One CSV row per (network, stage, K) in results/zoo/<tag>.csv as it finishes, a JSON sidecar; the table of
docs/runtime.md is written from it by ``experiments/table_zoo.py``. ``--quick``: one small network, K = 2.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, write_sidecar  # noqa: E402
from tofu.errors import TofuError  # noqa: E402

# network -> image side (small where the network allows: Gluon's densenet, inception and squeezenet end in fixed
# 7x7 / 8x8 / 13x13 pools, so they take their ImageNet sizes), batch 8 for all
NETS = {"resnet18_v1": 64, "resnet18_v2": 64, "mobilenet0.25": 64, "mobilenetv2_0.25": 64, "squeezenet1.1": 224,
        "alexnet": 64, "vgg11": 32, "densenet121": 224, "inceptionv3": 299}
COLUMNS = ("net", "image", "batch", "stage", "workers", "status", "search_seconds", "predicted_comm_bytes",
           "measured_comm_bytes", "plan_per_device_bytes", "output_rel", "gradient_rel", "loss_rel",
           "update_rel", "float64_rel", "dropout_off", "one_device_peak_bytes", "device_peak_bytes",
           "max_peak_over_one_per_k", "estimate_over_measured", "seconds", "message")


def export(net_name: str, image: int, batch: int, out_dir: Path) -> Path:
    """Builds ``net_name`` with Gluon (random weights, 10 classes), runs it once and exports its symbol file."""
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision

    net = vision.get_model(net_name, classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.random.uniform(shape=(batch, 3, image, image)))
    prefix = out_dir / net_name
    net.export(str(prefix))
    return prefix.with_name(f"{net_name}-symbol.json")


def plan_row(graph, k: int) -> dict:
    from tofu.search.algorithms import plan_graph

    plan = plan_graph(graph, k, "tofu")
    return {"status": "ok", "search_seconds": f"{plan.search_seconds:.3f}", "predicted_comm_bytes": plan.comm_bytes,
            "plan_per_device_bytes": dict(plan.per_device_bytes)["total"]}


def train_row(graph, k: int, steps: int, one_peak: int | None) -> dict:
    """``tofu run --check`` on ``graph`` (Dropout already off) at K, with the bytes and the memory measured."""
    from tofu.api import partitioned, reference_symbol
    from tofu.runtime import DEFAULT_RTOL
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.memory import estimated_device_peaks, measure_device_peaks
    from tofu.runtime.run import train
    from tofu.search.algorithms import plan_graph

    plan = plan_graph(graph, k, "tofu")
    pg = partitioned(graph, plan)
    report = train(graph, plan, pg, initial_values(graph, 0), synthetic_batch(graph, 1), steps,
                   reference_symbol(graph), lr=1e-3)
    c = report.check
    failed = c.failures(DEFAULT_RTOL)
    exact = report.measured_comm_bytes == report.predicted_comm_bytes
    row = {"predicted_comm_bytes": report.predicted_comm_bytes, "measured_comm_bytes": report.measured_comm_bytes,
           "plan_per_device_bytes": report.predicted_per_device_bytes["total"], "output_rel": f"{c.output_rel:.3g}",
           "gradient_rel": f"{c.gradient:.3g}", "loss_rel": f"{c.loss_rel:.3g}", "update_rel": f"{c.parameters:.3g}"}
    if c.float64 is not None:          # float32 exceeded the tolerance: float64's second opinion decides
        row["float64_rel"] = "-" if c.float64.error else f"{c.float64.max_rel_diff:.3g}"
    peaks = measure_device_peaks(pg)
    if peaks and one_peak:
        estimate = estimated_device_peaks(report.predicted_per_device_bytes, k)
        row.update({"device_peak_bytes": " ".join(map(str, peaks)),
                    "max_peak_over_one_per_k": f"{max(peaks) / (one_peak / k):.3f}",
                    "estimate_over_measured": " ".join(f"{e / p:.3f}" for e, p in zip(estimate, peaks))})
    problems = list(failed) + ([] if exact else [f"measured {report.measured_comm_bytes} B, predicted "
                                                  f"{report.predicted_comm_bytes:.0f} B"])
    notes = problems or ([c.verdict(DEFAULT_RTOL)] if c.float64 is not None else [])
    return {**row, "status": "ok" if not problems else "failed", "message": "; ".join(notes)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", default=",".join(NETS), help=f"comma-separated, of {', '.join(NETS)}")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--plan-workers", default="2,4,8")
    p.add_argument("--train-workers", default="2,4")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--tag", default="zoo")
    p.add_argument("--out-dir", type=Path, default=Path("results/zoo"))
    p.add_argument("--quick", action="store_true", help="resnet18_v1 at 32 px, K = 2 only, one step")
    args = p.parse_args(argv)
    nets = args.nets.split(",")
    unknown = [n for n in nets if n not in NETS]
    if unknown:
        p.error(f"unknown network '{unknown[0]}' (one of {', '.join(NETS)})")
    images = dict(NETS)
    if args.quick:
        nets, images["resnet18_v1"] = ["resnet18_v1"], 32
        args.plan_workers = args.train_workers = "2"
        args.steps = 1
    path = args.out_dir / f"{args.tag}.csv"
    rows = RowWriter(path, COLUMNS)
    write_sidecar(path, vars(args))
    import mxnet as mx

    from tofu.api import load_graph, reference_symbol
    from tofu.graph.deterministic import without_dropout
    from tofu.runtime.memory import measure_device_peaks
    from tofu.runtime.train import whole_graph

    with tempfile.TemporaryDirectory() as tmp:
        for net in nets:
            image = images[net]
            base = {"net": net, "image": image, "batch": args.batch}
            start = time.perf_counter()
            try:
                symbol_file = export(net, image, args.batch, Path(tmp))
                graph, dropped = without_dropout(load_graph(str(symbol_file), shapes={"data": (args.batch, 3, image,
                                                                                               image)},
                                                            with_loss=True))
                (one_peak,) = measure_device_peaks(whole_graph(graph, reference_symbol(graph)))
            except (TofuError, ValueError, mx.base.MXNetError) as e:     # Gluon's own failures too
                rows.write({**base, "stage": "load", "status": "error", "message": str(e).splitlines()[0][:300]})
                print(f"{net:<17} load: {e}", flush=True)
                continue
            base.update({"dropout_off": len(dropped), "one_device_peak_bytes": one_peak})
            cases = [("plan", int(k)) for k in args.plan_workers.split(",") if k] + \
                    [("train", int(k)) for k in args.train_workers.split(",") if k]
            for stage, k in cases:
                start = time.perf_counter()
                try:
                    row = plan_row(graph, k) if stage == "plan" else train_row(graph, k, args.steps, one_peak)
                except TofuError as e:
                    row = {"status": "error", "message": str(e)[:300]}
                row = {**base, "stage": stage, "workers": k, **row, "seconds": f"{time.perf_counter() - start:.1f}"}
                rows.write(row)
                print(f"{net:<17} {image:>3} px  {stage:<5} k={k}  {row['status']:<6} "
                      f"bytes {row.get('measured_comm_bytes') or '-'} / {row.get('predicted_comm_bytes') or '-'}  "
                      f"check {row.get('gradient_rel', '-')} float64 {row.get('float64_rel') or '-'}  "
                      f"peak/(one/k) {row.get('max_peak_over_one_per_k') or '-'}"
                      f"  {row['seconds']} s  {row.get('message') or ''}", flush=True)
    rows.close()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
