"""Tofu's plans for GPT-style decoders against Megatron-LM's partition and the other baselines (issue 12).

    python experiments/run_transformer.py [--models gpt] [--workers 2,4,8] [--batches 1,8] [--tag NAME] [--quick]

One CSV row per (model, batch, workers, algorithm) in results/transformer/<tag>.csv, written as soon as it
finishes, with a JSON sidecar: communication per iteration, per-device memory and search time (cold caches)
on the same cost model for every algorithm, and for ``--shared`` algorithms the bytes the runtime sends (each
piece once per device; the cost model charges every op that reads it), counted by tests/oracle.py. An algorithm that cannot plan a case (``megatron`` where k does
not divide the heads) is recorded with status "error" and its one-line reason. Every row of a named GPT carries
``megatron_sp_bytes``, Megatron-LM + sequence parallelism's bytes by the formula (docs/search.md), where k
divides the heads. ``--quick``: gpt-tiny only.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402
from tests.oracle import count  # noqa: E402
from tofu.api import clear_caches, load_graph  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.models import GPT_MODELS, ModelOptions  # noqa: E402
from tofu.search.algorithms import ALGORITHMS, plan_graph  # noqa: E402
from tofu.models.transformer import CONFIGS  # noqa: E402
from tofu.search.baselines import megatron_sp_bytes  # noqa: E402

COLUMNS = ("model", "batch", "workers", "algo", "status", "search_seconds", "comm_bytes", "shared_bytes", "step_bytes",
           "per_device_total_bytes", "per_device_fetched_bytes", "megatron_sp_bytes", "simulated_seconds",
           "simulated_profile", "message")
ALGOS = tuple(a for a in ALGORITHMS if a != "ilp")


def run_one(graph, workers: int, algo: str, shared: bool, simulate: str | None = None) -> dict:
    clear_caches()
    try:
        plan = plan_graph(graph, workers, algo)
    except TofuError as e:
        return {"status": "error", "message": str(e)[:200]}
    simulated = {}
    if simulate:        # one training iteration of the plan on the engine (tofu.sim), MXNet's gradient sum cap
        from tofu.sim import profile
        from tofu.sim.engine import simulate as run_engine
        from tofu.sim.program import MXNET_GRAD_SUM_CAP, program_from_plan

        ex = run_engine(program_from_plan(graph, plan, MXNET_GRAD_SUM_CAP), profile(simulate))
        simulated = {"simulated_seconds": f"{ex.seconds:.6g}", "simulated_profile": simulate}
    mem = dict(plan.per_device_bytes)
    # what the runtime sends: each needed piece once per device, however many of its ops read it (the cost
    # model charges every consumer); counted by the independent byte oracle of the test suite
    sent = f"{count(graph, plan).shared:.0f}" if shared else ""
    return {"status": "ok", "search_seconds": f"{plan.search_seconds:.4f}", "comm_bytes": f"{plan.comm_bytes:.0f}",
            "shared_bytes": sent,
            "step_bytes": " ".join(f"{s.cost_bytes:.0f}" for s in plan.steps),
            "per_device_total_bytes": mem["total"], "per_device_fetched_bytes": mem.get("fetched", 0), **simulated}


def _formula(model: str, batch: int, k: int, seq_len: int | None = None) -> str:
    """Megatron-LM + sequence parallelism's bytes by the formula (``baselines.megatron_sp_bytes``), for a named
    GPT whose heads k divides (``seq_len``: tokens per sequence, default the model's); '' otherwise."""
    c = CONFIGS.get(model)
    if c is None or c.heads % k:
        return ""
    return str(megatron_sp_bytes(c.layers, batch, seq_len or c.seq_len, c.hidden, k))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt", help="'gpt' (all six) or comma-separated zoo names")
    p.add_argument("--workers", default="2,4,8")
    p.add_argument("--batches", default="1,8", help="sequences per batch (1024 tokens each)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default the model's, 1024)")
    p.add_argument("--algos", default="all", help=f"'all' (without ilp) or comma-separated of {', '.join(ALGOS)}")
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/transformer"))
    p.add_argument("--shared", default="tofu,megatron",
                   help="algorithms whose bytes sent once per device are counted too ('' for none; slower)")
    p.add_argument("--simulate", metavar="PROFILE", help="also simulate one training iteration of each plan on this "
                   "hardware profile (tofu.sim: k80x8, v100x8)")
    p.add_argument("--quick", action="store_true", help="gpt-tiny at batch 4 only")
    args = p.parse_args(argv)
    models = GPT_MODELS if args.models == "gpt" else tuple(args.models.split(","))
    batches = tuple(int(b) for b in args.batches.split(","))
    workers = tuple(int(k) for k in args.workers.split(","))
    algos = ALGOS if args.algos == "all" else tuple(args.algos.split(","))
    if args.quick:
        models, batches, workers = ("gpt-tiny",), (4,), (2, 4)
    unknown = [a for a in algos if a not in ALGORITHMS]
    if unknown:
        p.error(f"unknown algorithm(s) {', '.join(unknown)}")
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_sidecar(out, vars(args), **rerun_source())
    for model in models:
        for batch in batches:
            try:
                graph = load_graph(model, ModelOptions(batch=batch, seq_len=args.seq_len))
            except TofuError as e:
                print(f"{model}: {e}", file=sys.stderr)
                return 2
            for k in workers:
                for algo in algos:
                    t0 = time.perf_counter()
                    row = {"model": model, "batch": batch, "workers": k, "algo": algo,
                           "megatron_sp_bytes": _formula(model, batch, k, args.seq_len),
                           **run_one(graph, k, algo, algo in args.shared.split(","), args.simulate)}
                    writer.write(row)
                    print(f"{model:<9} b={batch:<3} k={k} {algo:<14} {row['status']:<6} "
                          f"{float(row.get('comm_bytes') or 0) / 1e9:9.3f} GB  ({time.perf_counter() - t0:.1f} s)",
                          flush=True)
    writer.close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
