"""The largest batch that fits each device under a partition plan: the paper's "largest batch that fits".

    python experiments/run_largest_batch.py [--models paper] [--workers 8] [--algo tofu] [--device-gib 12]
                                            [--tag NAME] [--quick]

For each model, batches are tried from the paper's Ideal batch (:data:`tofu.models.paper.IDEAL_BATCH`: 128 for
WResNet, 512 for RNN) down by halves; each is planned with ``tofu.api.load_plan`` and its per-device memory
(the plan's estimate, built on ``tofu.graph.memory.estimate_training_memory``) compared with the device.
The first that fits is the answer, so it is the largest power of two up to the Ideal batch that fits under
the plan found for it. One CSV row per (model, batch) tried in results/largest_batch/<tag>.csv, with a JSON
sidecar; ``--quick`` runs the small models on 2 workers of 1 MiB.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, write_sidecar  # noqa: E402
from tofu.api import load_graph, load_plan  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import PAPER_EXTRA_MODELS, PAPER_MODELS, ModelOptions, build_model  # noqa: E402
from tofu.models.paper import IDEAL_BATCH  # noqa: E402
from tofu.search.algorithms import ALGORITHMS  # noqa: E402

COLUMNS = ("model", "workers", "algo", "batch", "status", "per_device_total_bytes", "device_bytes", "fits",
           "search_seconds", "message")
QUICK_MODELS = ("mlp", "wresnet-tiny", "rnn-tiny")


def try_batch(model: str, batch: int, workers: int, algo: str) -> dict:
    """Plans ``model`` at ``batch`` and returns the plan's per-device memory (status 'error' if it cannot)."""
    try:
        plan = load_plan(load_graph(model, ModelOptions(batch=batch)), workers, algo)
    except TofuError as e:
        return {"status": "error", "message": str(e)[:200]}
    return {"status": "ok", "per_device_total_bytes": dict(plan.per_device_bytes)["total"],
            "search_seconds": f"{plan.search_seconds:.3f}"}


def probe_batches(model: str, workers: int, algo: str, device_bytes: int, start: int) -> Iterator[dict]:
    """Rows for ``start``, ``start // 2``, ... down to the first batch whose plan fits ``device_bytes`` (or 1)."""
    batch = start
    while batch >= 1:
        row = {"model": model, "workers": workers, "algo": algo, "batch": batch, "device_bytes": device_bytes,
               **try_batch(model, batch, workers, algo)}
        row["fits"] = row["status"] == "ok" and row["per_device_total_bytes"] <= device_bytes
        yield row
        if row["fits"]:
            return
        batch //= 2


def ideal_batch(model: str) -> int:
    """The paper's Ideal batch of the model's family, 16 for the families it does not train."""
    return IDEAL_BATCH.get(build_model(model, ModelOptions(batch=1)).family, 16)


def largest_batch(model: str, workers: int = 8, algo: str = "tofu", device_bytes: int = 12 * 2**30) -> int | None:
    """The largest power of two up to the Ideal batch whose plan fits each device; None if batch 1 does not."""
    last = None
    for last in probe_batches(model, workers, algo, device_bytes, ideal_batch(model)):
        pass
    return last["batch"] if last and last["fits"] else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="paper", help="'paper' (the 21 and rnn-4-8k) or comma-separated names")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--algo", default="tofu", choices=ALGORITHMS)
    p.add_argument("--device-gib", type=float, default=12.0, help="memory of one device in GiB (2^30 bytes)")
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/largest_batch"))
    p.add_argument("--quick", action="store_true", help="small models, 2 workers of 1 MiB")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = PAPER_MODELS + PAPER_EXTRA_MODELS if args.models == "paper" else tuple(args.models.split(","))
    workers, device_bytes = args.workers, int(args.device_gib * 2**30)
    if args.quick:
        models, workers, device_bytes = QUICK_MODELS, 2, 2**20
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_sidecar(out, vars(args), device_bytes=device_bytes)
    try:
        for model in models:
            try:
                start = ideal_batch(model)
            except TofuError as e:
                print(f"{model}: {e}", file=sys.stderr)
                return 2
            best = None
            for row in probe_batches(model, workers, args.algo, device_bytes, start):
                writer.write(row)
                best = row["batch"] if row["fits"] else None
            print(f"{model}: largest batch {best if best is not None else '-'} "
                  f"(from {start}, {workers} x {device_bytes / 2**30:g} GiB, {args.algo})", flush=True)
    finally:
        writer.close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
