"""Bytes per training iteration three ways: planned, measured and needed (issue 23, item 3).

    python experiments/run_bytes.py [--suite small,paper] [--algo tofu] [--tag NAME] [--out-dir DIR] [--quick]

One CSV row per (model, workers) in <out-dir>/<tag>.csv, written as soon as it finishes, with a JSON sidecar
(``source``: the command that wrote it):

* ``plan_bytes``: the plan's ``comm_bytes`` (the search's recount of what the runtime sends);
* ``measured_bytes``: the bytes of every ``_CrossDeviceCopy`` of the bound training executor on k CPU
  contexts, forward and backward (the ``small`` suite only: binding a paper-size model takes its memory);
* ``needed_bytes``: tests/needed.py's count, each element a device lacks once per device and pass, on every
  call's data region; ``needed_exact_bytes``: the same with a call that keeps part of what its kernel computes
  reading only what its kept part reads (traced through the op's TDL description);
* ``charged_bytes``: what the search's cost model charges the plan, every consumer op its own pieces but the
  ops of one fetch group (tests/oracle.py's ``per_consumer``): the upper bound the DP minimises;
* ``cells_bytes`` = plan - needed (overlapping reads sent cell by cell), ``bounding_box_bytes`` = needed -
  needed_exact (kernel calls reading more than they keep), ``plan_over_needed`` = plan / needed_exact.

Suites: ``small`` is mlp, wresnet-tiny, rnn-tiny and gpt-tiny at k = 2, 4, 8 (their default batches);
``paper`` the paper's 21 configurations (tofu.models.PAPER_MODELS) and gpt-124m, gpt-350m, gpt-774m at k = 8.
``--quick``: mlp at k = 2 only. Progress goes to stderr.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402
from tests.needed import needed  # noqa: E402
from tests.oracle import count  # noqa: E402
from tofu.api import load_graph, partitioned  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import PAPER_MODELS, ModelOptions  # noqa: E402
from tofu.search.algorithms import ALGORITHMS, plan_graph  # noqa: E402

COLUMNS = ("suite", "model", "batch", "workers", "algo", "status", "plan_bytes", "measured_bytes", "charged_bytes",
           "needed_bytes", "needed_exact_bytes", "cells_bytes", "bounding_box_bytes", "plan_over_needed",
           "search_seconds", "count_seconds", "message")
SMALL = ("mlp", "wresnet-tiny", "rnn-tiny", "gpt-tiny")
PAPER_GPT = ("gpt-124m", "gpt-350m", "gpt-774m")
SUITES = {"small": tuple((m, k) for m in SMALL for k in (2, 4, 8)),
          "paper": tuple((m, 8) for m in PAPER_MODELS + PAPER_GPT)}


def measured(graph, plan) -> int:
    """Bytes of every ``_CrossDeviceCopy`` of the bound training executor (forward and backward)."""
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer

    values = {**initial_values(graph), **synthetic_batch(graph)}
    return sum(c.nbytes for c in Trainer(partitioned(graph, plan), values).copies())


def run_one(model: str, k: int, algo: str, measure: bool) -> dict:
    try:
        graph = load_graph(model, ModelOptions())
        plan = plan_graph(graph, k, algo)
    except TofuError as e:
        return {"status": "error", "message": str(e)[:200]}
    t0 = time.perf_counter()
    box, exact = needed(graph, plan).total, needed(graph, plan, exact=True).total
    seconds = time.perf_counter() - t0
    charged = count(graph, plan).per_consumer
    row = {"batch": graph.tensors[0].shape[0], "status": "ok", "plan_bytes": f"{plan.comm_bytes:.0f}",
           "charged_bytes": f"{charged:.0f}",
           "needed_bytes": f"{box:.0f}", "needed_exact_bytes": f"{exact:.0f}",
           "cells_bytes": f"{plan.comm_bytes - box:.0f}", "bounding_box_bytes": f"{box - exact:.0f}",
           "plan_over_needed": f"{plan.comm_bytes / exact:.6f}" if exact else "",
           "search_seconds": f"{plan.search_seconds:.3f}", "count_seconds": f"{seconds:.3f}"}
    if measure:
        row["measured_bytes"] = str(measured(graph, plan))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default="small,paper", help=f"comma-separated of {', '.join(SUITES)}")
    p.add_argument("--algo", default="tofu", choices=[a for a in ALGORITHMS if a != "ilp"])
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/bytes"))
    p.add_argument("--quick", action="store_true", help="mlp at k = 2 only")
    args = p.parse_args(argv)
    suites = args.suite.split(",")
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        p.error(f"unknown suite(s) {', '.join(unknown)} (known: {', '.join(SUITES)})")
    cases = [("small", "mlp", 2)] if args.quick else [(s, m, k) for s in suites for m, k in SUITES[s]]
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_sidecar(out, vars(args), **rerun_source())
    for i, (suite, model, k) in enumerate(cases, 1):
        t0 = time.perf_counter()
        row = {"suite": suite, "model": model, "workers": k, "algo": args.algo,
               **run_one(model, k, args.algo, measure=suite == "small")}
        writer.write(row)
        ratio = row.get("plan_over_needed") or "-"
        print(f"[{i}/{len(cases)}] {model:<15} k={k} {row['status']:<5} plan {float(row.get('plan_bytes') or 0) / 1e9:9.4f}"
              f" GB  plan/needed {ratio}  ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    writer.close()
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
