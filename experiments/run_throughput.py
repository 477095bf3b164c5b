"""Training throughput of every system of the paper's comparison, each simulated on the event-driven engine
(tofu.sim.systems).

    python experiments/run_throughput.py [--models paper] [--systems all] [--profile k80x8] [--device-gib G]
                                         [--jobs N] [--tofu-start CSV] [--tag NAME] [--out-dir DIR] [--quick]
                                         [--quiet]

For each model (default: the paper's 21 configurations, WResNet-50/101/152 x widening 4/6/8/10 and RNN-6/8/10
x 4K/6K/8K) and each system (Ideal, SmallBatch, Swap, OpPlacement, Tofu), :func:`tofu.sim.systems.estimate` on
the profile: the batch the system trains at (Ideal: the paper's Ideal batch, 128 WResNet and 512 RNN; the others
the largest that fits, found by the tool), samples/s, one simulated iteration's seconds, the busiest device's
compute-stream seconds, the fraction of communication overlapped with compute, the bytes copied per iteration
(between devices, or to and from host memory for Swap), the fullest device's peak memory, the status (ok, oom,
n/a) and what limited the batch. Every number is simulated; nothing is measured.

One CSV row per (model, system) in <out-dir>/<tag>.csv as soon as it is computed (in the order the cases
finish), rewritten in (model, system) order at the end; a JSON sidecar beside it; progress on stderr.
``--jobs N`` runs N cases at once in worker processes (the slowest systems' first: Tofu, Swap). ``--tofu-start
CSV``: Tofu's search of a model starts at the batch Tofu trains at in that earlier run on the same profile (one
plan and one simulation instead of up to six: what ``make demo`` uses with the committed results; a batch that
fits only since that run was made is not found, and the row's note says where the search started).
``--quick``: wresnet-tiny and rnn-tiny on devices of 4 MiB, in seconds.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import logging
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import (RowWriter, ideal_batch, model_builder, read_rows, rerun_source,  # noqa: E402
                                rewrite_rows, write_simulated_sidecar)
from tofu.errors import TofuError  # noqa: E402
from tofu.models import PAPER_MODELS  # noqa: E402
from tofu.sim import profile  # noqa: E402
from tofu.sim.hardware import GPU_PROFILES, Profile  # noqa: E402
from tofu.sim.systems import Estimate, Options, Status, System, estimate  # noqa: E402

COLUMNS = ("profile", "model", "system", "status", "batch", "replicas", "samples_per_second", "seconds",
           "busy_seconds", "overlap_fraction", "transfer_bytes", "peak_bytes", "capacity_bytes", "ideal_batch",
           "note")
QUICK_MODELS = ("wresnet-tiny", "rnn-tiny")
QUICK_DEVICE_BYTES = 4 * 2**20


def row_of(est: Estimate, profile_name: str, most: int) -> dict:
    """The CSV row of one system's estimate (numbers empty unless it trained)."""
    ok = est.status is Status.OK
    ex = est.execution

    def num(x: float) -> str:
        return f"{x:.6g}" if ok else ""

    return {"profile": profile_name, "model": est.model, "system": est.system.value, "status": est.status.value,
            "batch": est.batch if est.batch is not None else "", "replicas": est.replicas,
            "samples_per_second": num(est.samples_per_second), "seconds": num(est.seconds),
            "busy_seconds": num(est.busy_seconds),
            "overlap_fraction": f"{ex.overlap_fraction:.4f}" if ok and ex is not None else "",
            "transfer_bytes": f"{est.transfer_bytes:.0f}" if ok else "", "peak_bytes": est.peak_bytes,
            "capacity_bytes": f"{est.capacity_bytes:.0f}", "ideal_batch": most, "note": est.note}


def run_case(model: str, system: System, prof: Profile, start: int | None = None,
             options: Options = Options()) -> tuple[dict, float]:
    """One (model, system) case: its row and the wall seconds it took (what a worker process runs). ``start``:
    where Tofu's search of the batch starts (default the Ideal batch)."""
    t0 = time.perf_counter()
    most = ideal_batch(model)
    begin = start if system is System.TOFU and start is not None else most
    est = estimate(system, model_builder(model), prof, begin, options)
    row = row_of(est, prof.name, most)
    if begin != most:
        row["note"] = "; ".join(filter(None, [f"search started at batch {begin} (--tofu-start)", row["note"]]))
    return row, time.perf_counter() - t0


SLOWEST_FIRST = (System.TOFU, System.SWAP, System.OP_PLACEMENT, System.SMALL_BATCH, System.IDEAL)
"""The order a process pool starts the cases in: Tofu plans and simulates up to six batches on every device;
Swap replays its policy at each batch tried, then simulates every replica at once; the rest run one device."""


def _longest_first(cases: list[tuple[str, System]]) -> list[tuple[str, System]]:
    """The cases in :data:`SLOWEST_FIRST` order of their system, larger models (later in the list) first."""
    order = {model: i for i, (model, _) in enumerate(cases)}
    return sorted(cases, key=lambda c: (SLOWEST_FIRST.index(c[1]), -order[c[0]]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="paper", help="'paper' (the 21 configurations) or comma-separated names")
    p.add_argument("--systems", default="all",
                   help=f"'all' or comma-separated of: {', '.join(s.value for s in System)}")
    p.add_argument("--profile", default="k80x8", choices=sorted(GPU_PROFILES))
    p.add_argument("--device-gib", type=float, default=None, help="override one device's memory, GiB")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once in worker processes (default 1)")
    p.add_argument("--tofu-start", type=Path, default=None, metavar="CSV",
                   help="an earlier run_throughput.py CSV of the same profile: Tofu's search starts at its batch")
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/throughput"))
    p.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK_MODELS)} on devices of 4 MiB")
    p.add_argument("--quiet", action="store_true", help="no progress lines (errors still go to stderr)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    logging.basicConfig(level=logging.WARNING)
    models = PAPER_MODELS if args.models == "paper" else tuple(args.models.split(","))
    try:
        systems = tuple(System) if args.systems == "all" else tuple(System(s) for s in args.systems.split(","))
    except ValueError as e:
        p.error(str(e))
    prof = profile(args.profile)
    if args.device_gib is not None:
        prof = dataclasses.replace(prof, memory_bytes=args.device_gib * 2**30)
    if args.quick:
        models, prof = QUICK_MODELS, dataclasses.replace(prof, memory_bytes=QUICK_DEVICE_BYTES)
    for model in models:
        try:
            ideal_batch(model)
        except TofuError as e:
            print(f"{model}: {e}", file=sys.stderr)
            return 2
    tofu_start: dict[str, int] = {}
    if args.tofu_start is not None:
        tofu_start = {r["model"]: int(r["batch"]) for r in read_rows(args.tofu_start)
                 if r["system"] == "tofu" and r["status"] == "ok" and r["profile"] == prof.name}
    cases = [(m, s) for m in models for s in systems]
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_simulated_sidecar(out, vars(args), prof, **rerun_source())
    rows: dict[tuple[str, str], dict] = {}
    start = time.perf_counter()

    def done(row: dict, seconds: float) -> None:
        writer.write(row)
        rows[(row["model"], row["system"])] = row
        if not args.quiet:
            speed = float(row["samples_per_second"] or 0)
            print(f"[{len(rows)}/{len(cases)}] {row['model']:<16} {row['system']:<12} {row['status']:<4} "
                  f"batch {row['batch'] or '-':>4}  {speed:9.2f} samples/s  ({seconds:.1f} s, "
                  f"{time.perf_counter() - start:.0f} s in all)", file=sys.stderr, flush=True)

    try:
        if args.jobs == 1:
            for model, system in cases:
                done(*run_case(model, system, prof, tofu_start.get(model)))
        else:
            context = multiprocessing.get_context("spawn")       # no fork of a process that loaded MXNet
            with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
                futures = [pool.submit(run_case, m, s, prof, tofu_start.get(m)) for m, s in _longest_first(cases)]
                for future in concurrent.futures.as_completed(futures):
                    done(*future.result())
    finally:
        writer.close()
    rewrite_rows(out, COLUMNS, [rows[(m, s.value)] for m, s in cases if (m, s.value) in rows])
    if not args.quiet:
        print(f"wrote {out} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
