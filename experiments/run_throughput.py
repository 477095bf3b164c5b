"""Training throughput of every system of the paper's comparison on a simulated machine (tofu.sim.baselines).

    python experiments/run_throughput.py [--models paper] [--systems all] [--profile k80x8] [--device-gib G]
                                         [--overlap none] [--tag NAME] [--quick]

For each model (default: the paper's 21 configurations, WResNet-50/101/152 x widening 4/6/8/10 and RNN-6/8/10
x 4K/6K/8K) and each system (Ideal, SmallBatch, Swap, OpPlacement, Tofu), the performance model's samples/s on
the profile's devices, the batch each system trains at (Ideal: the paper's Ideal batch, 128 WResNet and 512 RNN;
the others the largest that fits, found by the tool), the compute and communication seconds, the fullest
device's memory and the status (ok, oom, n/a). Every number is simulated; nothing is measured. One CSV row per
(model, system) in results/throughput/<tag>.csv as soon as it is computed, a JSON sidecar beside it, progress
on stderr. ``--quick``: wresnet-tiny and rnn-tiny on devices of 4 MiB, in seconds.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, ideal_batch, model_builder, write_simulated_sidecar  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import PAPER_MODELS  # noqa: E402
from tofu.sim import baselines  # noqa: E402
from tofu.sim.baselines import System  # noqa: E402
from tofu.sim.hardware import GPU_PROFILES, profile  # noqa: E402
from tofu.sim.model import Overlap  # noqa: E402

COLUMNS = ("profile", "model", "system", "status", "batch", "replicas", "samples_per_second", "seconds",
           "compute_seconds", "comm_seconds", "per_device_bytes", "capacity_bytes", "ideal_batch", "note")
QUICK_MODELS = ("wresnet-tiny", "rnn-tiny")
QUICK_DEVICE_BYTES = 4 * 2**20


def row_of(est: baselines.SystemEstimate, profile_name: str, most: int) -> dict:
    ok = est.status is baselines.Status.OK
    return {"profile": profile_name, "model": est.model, "system": est.system.value, "status": est.status.value,
            "batch": est.batch if est.batch is not None else "", "replicas": est.replicas,
            "samples_per_second": f"{est.samples_per_second:.6g}" if ok else "",
            "seconds": f"{est.seconds:.6g}" if ok else "",
            "compute_seconds": f"{est.compute_seconds:.6g}" if ok else "",
            "comm_seconds": f"{est.comm_seconds:.6g}" if ok else "", "per_device_bytes": est.per_device_bytes,
            "capacity_bytes": f"{est.capacity_bytes:.0f}", "ideal_batch": most, "note": est.note}


def estimate(system: System, model: str, prof, most: int, overlap: Overlap) -> baselines.SystemEstimate:
    build = model_builder(model)
    if system is System.TOFU:
        return baselines.tofu(build, prof, most, overlap=overlap)
    return baselines.estimate(system, build, prof, most)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="paper", help="'paper' (the 21 configurations) or comma-separated names")
    p.add_argument("--systems", default="all",
                   help=f"'all' or comma-separated of: {', '.join(s.value for s in System)}")
    p.add_argument("--profile", default="k80x8", choices=sorted(GPU_PROFILES))
    p.add_argument("--device-gib", type=float, default=None, help="override one device's memory, GiB")
    p.add_argument("--overlap", default="none", choices=[o.value for o in Overlap],
                   help="how Tofu's compute and communication combine")
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/throughput"))
    p.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK_MODELS)} on devices of 4 MiB")
    p.add_argument("--quiet", action="store_true", help="no progress lines (errors still go to stderr)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = PAPER_MODELS if args.models == "paper" else tuple(args.models.split(","))
    systems = tuple(System) if args.systems == "all" else tuple(System(s) for s in args.systems.split(","))
    prof = profile(args.profile)
    if args.device_gib is not None:
        prof = dataclasses.replace(prof, memory_bytes=args.device_gib * 2**30)
    if args.quick:
        models, prof = QUICK_MODELS, dataclasses.replace(prof, memory_bytes=QUICK_DEVICE_BYTES)
    overlap = Overlap(args.overlap)
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_simulated_sidecar(out, vars(args), prof)
    try:
        for i, model in enumerate(models, 1):
            try:
                most = ideal_batch(model)
            except TofuError as e:
                print(f"{model}: {e}", file=sys.stderr)
                return 2
            for system in systems:
                t0 = time.perf_counter()
                est = estimate(system, model, prof, most, overlap)
                writer.write(row_of(est, prof.name, most))
                if not args.quiet:
                    print(f"[{i}/{len(models)}] {model:<16} {system.value:<12} {est.status.value:<4} "
                          f"batch {est.batch if est.batch is not None else '-':>4}  "
                          f"{est.samples_per_second:9.2f} samples/s  ({time.perf_counter() - t0:.1f} s)",
                          file=sys.stderr, flush=True)
    finally:
        writer.close()
    if not args.quiet:
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
