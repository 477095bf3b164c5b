"""Throughput from 1 to 16 machines of 8 simulated GPUs: Tofu inside each machine, simulated on the event-driven
engine, data parallel across machines through parameter servers (tofu.sim.cluster).

    python experiments/run_scaling.py [--models wresnet-152-10,rnn-10-8k] [--machines 1,2,4,8,16]
                                      [--gbits 25,100,400] [--profile k80x8] [--throughput CSV] [--tag NAME]
                                      [--quick]

For each model, Tofu on one machine (:func:`tofu.sim.systems.tofu`: its plan at the largest batch that fits,
from the paper's Ideal batch down by halves, as in run_throughput.py) is simulated once by the engine; every
machine count, network bandwidth and overlap (none: the exchange after the iteration; full: hidden behind it)
then adds the inter-machine exchange of :mod:`tofu.sim.cluster` (each machine pushes and pulls every parameter
shard once per iteration; weak scaling: each machine keeps its batch). ``linear_samples_per_second`` is M times
one machine's throughput. ``--throughput CSV``: start Tofu's search at the batch a run_throughput.py run on the
same profile found for the model (the same batch, found with one plan and one simulation instead of up to
six). Everything is simulated. One CSV row per (model, machines, bandwidth, overlap) in
<out-dir>/<tag>.csv, a JSON sidecar, progress on stderr. ``--quick``: rnn-tiny on 1, 2 and 4 machines at 25 and
400 Gbit/s.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import (RowWriter, ideal_batch, model_builder, read_rows, rerun_source,  # noqa: E402
                                write_simulated_sidecar)
from tofu.sim import profile  # noqa: E402
from tofu.sim.cluster import ETHERNET_GBITS, GBIT, Overlap, simulate_cluster  # noqa: E402
from tofu.sim.hardware import GPU_PROFILES  # noqa: E402
from tofu.sim.systems import Status, System, estimate  # noqa: E402

COLUMNS = ("profile", "model", "machines", "network_gbits", "overlap", "status", "batch_per_machine", "global_batch",
           "samples_per_second", "linear_samples_per_second", "seconds", "machine_seconds", "inter_seconds",
           "inter_bytes", "kvstore_bytes", "peak_bytes", "message")
DEFAULT_MODELS = ("wresnet-152-10", "rnn-10-8k")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--machines", default="1,2,4,8,16", help="comma-separated machine counts")
    p.add_argument("--gbits", default=",".join(str(g) for g in ETHERNET_GBITS),
                   help="comma-separated network bandwidths, Gbit/s per direction")
    p.add_argument("--profile", default="k80x8", choices=sorted(GPU_PROFILES), help="one machine")
    p.add_argument("--throughput", type=Path, default=None,
                   help="a run_throughput.py CSV of the same profile: start at the batch Tofu trains at there")
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/scaling"))
    p.add_argument("--quick", action="store_true", help="rnn-tiny, 1-4 machines, 25 and 400 Gbit/s")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = tuple(args.models.split(","))
    machines = tuple(int(m) for m in args.machines.split(","))
    gbits = tuple(float(g) for g in args.gbits.split(","))
    if args.quick:
        models, machines, gbits = ("rnn-tiny",), (1, 2, 4), (25.0, 400.0)
    prof = profile(args.profile)
    found = {}
    if args.throughput is not None:
        found = {r["model"]: int(r["batch"]) for r in read_rows(args.throughput)
                 if r["system"] == "tofu" and r["status"] == "ok" and r["profile"] == prof.name}
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_simulated_sidecar(out, vars(args), prof, **rerun_source())
    try:
        for model in models:
            t0 = time.perf_counter()
            build = model_builder(model)
            one = estimate(System.TOFU, build, prof, found.get(model, ideal_batch(model)))
            base = {"profile": prof.name, "model": model, "peak_bytes": one.peak_bytes}
            if one.status is not Status.OK:
                writer.write({**base, "status": one.status.value, "message": one.note})
                print(f"{model}: no batch fits one machine ({one.note})", file=sys.stderr)
                continue
            b, params = one.batch, build(1).param_bytes
            for overlap in Overlap:
                for g in gbits:
                    line = []
                    for m in machines:
                        est = simulate_cluster(one.execution, b, params, m, g * GBIT, prof, overlap)
                        writer.write({**base, "machines": m, "network_gbits": f"{g:g}", "overlap": overlap.value,
                                      "status": "ok", "batch_per_machine": b, "global_batch": m * b,
                                      "samples_per_second": f"{est.samples_per_second:.6g}",
                                      "linear_samples_per_second": f"{m * one.samples_per_second:.6g}",
                                      "seconds": f"{est.seconds:.6g}", "machine_seconds": f"{one.seconds:.6g}",
                                      "inter_seconds": f"{est.inter_seconds:.6g}",
                                      "inter_bytes": f"{est.inter_bytes:.0f}", "kvstore_bytes": est.kvstore_bytes})
                        line.append(f"M={m}: {est.samples_per_second:.2f}")
                    print(f"{model:<16} overlap {overlap.value:<4} {g:5g} Gbit/s: {'  '.join(line)} samples/s",
                          file=sys.stderr, flush=True)
            print(f"{model}: batch {b} per machine ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    finally:
        writer.close()
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
