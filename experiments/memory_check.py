"""Checks the training-memory estimate against MXNet's profiler: one CSV row per (model, batch).

    python experiments/memory_check.py [--quick] [--out results/memory_check.csv]

Each row: the estimate by category (tofu.graph.memory), the peak of the profiler's ``Memory: cpu/0`` counter
over one training step measured in a fresh process (tofu.graph.memory_profile), and their ratio.
"""
from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
from pathlib import Path

from tofu.errors import TofuError
from tofu.graph import import_symbol
from tofu.graph.memory import MemoryEstimate, estimate_training_memory
from tofu.graph.memory_profile import measure_peak_bytes
from tofu.models import ModelOptions, build_model

CASES: tuple[tuple[str, int], ...] = (
    ("mlp", 256), ("mlp", 1024),                     # tests/graph/test_memory.py uses mlp 1024,
    ("wresnet-tiny", 16), ("wresnet-tiny", 32),      # wresnet-tiny 16 and rnn-tiny 256
    ("rnn-tiny", 64), ("rnn-tiny", 256),
    ("rnn-2-64", 16),                                # seq_len 20, vocab 10000: a large projection
)
QUICK_CASES: tuple[tuple[str, int], ...] = (("mlp", 256), ("rnn-tiny", 64))
CATEGORIES = ("params", "grads", "optimizer", "aux", "activations", "workspace")
COLUMNS = ("model", "batch", *(f"{c}_bytes" for c in CATEGORIES), "estimate_bytes", "measured_bytes",
           "ratio", "measure_seconds", "status")


def check(name: str, batch: int, optimizer: str) -> dict:
    """Estimates and measures one model; failures are recorded in ``status``."""
    model = build_model(name, ModelOptions(batch=batch))
    estimate: MemoryEstimate = estimate_training_memory(import_symbol(model.symbol, model.shapes(), name), optimizer)
    row = {"model": name, "batch": batch, **{f"{c}_bytes": getattr(estimate, c) for c in CATEGORIES},
           "estimate_bytes": estimate.total}
    start = time.perf_counter()
    try:
        measured = measure_peak_bytes(model.symbol, model.shapes(), optimizer=optimizer)
    except TofuError as e:
        logging.warning("%s batch %d: %s", name, batch, e)
        return {**row, "measured_bytes": "", "ratio": "", "measure_seconds": "", "status": "error"}
    return {**row, "measured_bytes": measured, "ratio": round(estimate.total / measured, 4),
            "measure_seconds": round(time.perf_counter() - start, 2), "status": "ok"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small cases only")
    parser.add_argument("--optimizer", choices=("sgd_mom", "sgd"), default="sgd_mom")
    parser.add_argument("--out", type=Path, default=Path("results/memory_check.csv"))
    args = parser.parse_args(argv)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(f"{'model':<14}{'batch':>6}{'estimate B':>14}{'measured B':>14}{'ratio':>8}")
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for name, batch in QUICK_CASES if args.quick else CASES:
            row = check(name, batch, args.optimizer)
            writer.writerow(row)
            f.flush()
            print(f"{name:<14}{batch:>6}{row['estimate_bytes']:>14,}{row['measured_bytes'] or 0:>14,}"
                  f"{row['ratio'] or float('nan'):>8.3f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
