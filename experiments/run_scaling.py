"""Throughput from 1 to 16 machines of 8 simulated GPUs: Tofu inside each machine, data parallel across machines
through parameter servers (tofu.sim.cluster).

    python experiments/run_scaling.py [--models wresnet-152-10,rnn-10-8k] [--machines 1,2,4,8,16]
                                      [--gbits 25,100,400] [--profile k80x8] [--tag NAME] [--quick]

For each model, Tofu's plan on one machine at the largest batch that fits (from the paper's Ideal batch down by
halves, as in run_throughput.py) is simulated once with its glue; every machine count, network bandwidth and
overlap (none: the exchange after the iteration; full: hidden behind it) then adds the inter-machine exchange
of :mod:`tofu.sim.cluster` (each machine pushes and pulls every parameter shard once per iteration; weak
scaling: each machine keeps its batch). ``linear_samples_per_second`` is M times one machine's throughput.
Everything is simulated. One CSV row per (model, machines, bandwidth, overlap) in results/scaling/<tag>.csv, a
JSON sidecar, progress on stderr. ``--quick``: rnn-tiny on 1, 2 and 4 machines at 25 and 400 Gbit/s.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, ideal_batch, model_builder, write_simulated_sidecar  # noqa: E402
from tofu.sim.baselines import tofu_fit  # noqa: E402
from tofu.sim.cluster import ETHERNET_GBITS, GBIT, simulate_cluster  # noqa: E402
from tofu.sim.glue import glue_from_plan  # noqa: E402
from tofu.sim.hardware import GPU_PROFILES, profile  # noqa: E402
from tofu.sim.model import Overlap, batch_size, simulate  # noqa: E402

COLUMNS = ("profile", "model", "machines", "network_gbits", "overlap", "status", "batch_per_machine", "global_batch",
           "samples_per_second", "linear_samples_per_second", "seconds", "machine_seconds", "inter_seconds",
           "inter_bytes", "kvstore_bytes", "per_device_bytes", "message")
DEFAULT_MODELS = ("wresnet-152-10", "rnn-10-8k")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--machines", default="1,2,4,8,16", help="comma-separated machine counts")
    p.add_argument("--gbits", default=",".join(str(g) for g in ETHERNET_GBITS),
                   help="comma-separated network bandwidths, Gbit/s per direction")
    p.add_argument("--profile", default="k80x8", choices=sorted(GPU_PROFILES), help="one machine")
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
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_simulated_sidecar(out, vars(args), prof)
    try:
        for model in models:
            t0 = time.perf_counter()
            graph, plan, mem, note = tofu_fit(model_builder(model), prof, ideal_batch(model))
            base = {"profile": prof.name, "model": model, "per_device_bytes": mem}
            if plan is None:
                writer.write({**base, "status": "oom", "message": note})
                print(f"{model}: no batch fits one machine ({note})", file=sys.stderr)
                continue
            glue = glue_from_plan(graph, plan)
            b = batch_size(graph)
            for overlap in Overlap:
                one = simulate(graph, plan, prof, overlap, batch=b, glue=glue)
                for g in gbits:
                    line = []
                    for m in machines:
                        est = simulate_cluster(one, graph.param_bytes, m, g * GBIT, prof, overlap)
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
