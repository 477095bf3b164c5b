"""The partitioned training step of this working tree against an earlier revision's, timed side by side in one
process.

    python experiments/bench_runtime_versions.py --against REV
        [--cases rnn-tiny:256:2:data-parallel,rnn-tiny:256:4:tofu,...] [--seconds 4] [--tag NAME]
        [--out-dir results/bench_versions]

A case is ``model:batch:k:algo``. The revision is checked out into a temporary git worktree, where a fresh process
plans and partitions every case with that tree's code and writes the partitioned graph (its symbol, shard
variables and heads) to JSON. This process partitions each case with this tree and binds both graphs with this
tree's :class:`tofu.runtime.train.Trainer` on cpu(0..k-1), with the same initial values and batch; after
``WARMUP_STEPS`` steps each, their training steps (forward, backward, SGD-momentum update, waited for) run
round-robin, one of each in turn (for half the time this tree's first, then the other's), for about
``--seconds`` (at least ``MIN_STEPS``), so that a shared machine's other jobs slow both alike. Per case and tree, one CSV row: the median step and its quartiles, the op nodes of the
symbol and the first step's outputs' largest difference between the trees (relative to the largest output: both
trees compute the same math). Machines here are shared and noisy: read the ratio, not the seconds. A JSON sidecar
records the arguments and both revisions.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402
from experiments.run_cpu_validation import measure_round_robin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("case", "model", "batch", "workers", "algo", "tree", "status", "seconds", "p25_seconds", "p75_seconds",
           "steps", "ops", "over_against", "output_difference", "message")
CASES = ("rnn-tiny:256:2:data-parallel", "rnn-tiny:256:4:data-parallel", "rnn-tiny:256:4:tofu",
         "gpt-tiny:64:4:tofu", "mlp:1024:4:data-parallel", "wresnet-tiny:16:4:tofu")
WARMUP_STEPS = 3
MIN_STEPS = 10
LR = 1e-3

# run in the other tree (PYTHONPATH): each case's partitioned graph as JSON, or the error that stopped it
DUMP = r"""
import json, sys
from tofu.api import load_graph, partitioned
from tofu.models import ModelOptions
from tofu.search.algorithms import plan_graph
out = {}
for case in sys.argv[1].split(","):
    model, batch, k, algo = case.split(":")
    try:
        graph = load_graph(model, ModelOptions(batch=int(batch)))
        pg = partitioned(graph, plan_graph(graph, int(k), algo))
        out[case] = {"symbol": pg.symbol.tojson(),
                     "variables": [[v.name, v.tensor, v.device, v.box, v.role.name] for v in pg.variables],
                     "heads": [[h.tensor, h.device, h.box, h.output] for h in pg.heads]}
    except Exception as e:
        out[case] = {"error": f"{type(e).__name__}: {e}"[:200]}
print(json.dumps(out))
"""


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    batch: int
    workers: int
    algo: str

    @classmethod
    def parse(cls, text: str) -> "Case":
        parts = text.split(":")
        if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ValueError(f"case '{text}' is not model:batch:k:algo")
        return cls(parts[0], int(parts[1]), int(parts[2]), parts[3])

    def __str__(self) -> str:
        return f"{self.model}:{self.batch}:{self.workers}:{self.algo}"


def dump_partitioned(tree: Path, cases: list[Case]) -> dict:
    """Every case partitioned by the code of ``tree``, in a fresh process there: case -> its JSON (or error)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MXNET_SUBGRAPH_BACKEND": "NONE", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", DUMP, ",".join(map(str, cases))], cwd=tree, env=env,
                          capture_output=True, text=True)
    if done.returncode:
        reason = (done.stderr.strip().splitlines() or ["failed"])[-1][:200]
        return {str(c): {"error": reason} for c in cases}
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_partitioned(entry: dict):
    """A :class:`tofu.rewrite.apply_plan.PartitionedGraph` from :data:`DUMP`'s JSON."""
    import mxnet as mx

    from tofu.graph.ir import Role
    from tofu.rewrite.apply_plan import HeadPiece, PartitionedGraph, ShardVar

    def box(b):
        return tuple(tuple(r) for r in b)
    variables = tuple(ShardVar(n, t, d, box(b), Role[r]) for n, t, d, b, r in entry["variables"])
    heads = tuple(HeadPiece(t, d, box(b), o) for t, d, b, o in entry["heads"])
    return PartitionedGraph(mx.sym.load_json(entry["symbol"]), max(v.device for v in variables) + 1, variables,
                            heads)


def op_nodes(pg) -> int:
    return sum(n["op"] != "null" for n in json.loads(pg.symbol.tojson())["nodes"])


def compare(case: Case, against, seconds: float) -> list[dict]:
    """Both trees' graphs of ``case`` bound and timed round-robin: one row per tree."""
    import numpy as np

    from tofu.api import load_graph, partitioned
    from tofu.models import ModelOptions
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph

    graph = load_graph(case.model, ModelOptions(batch=case.batch))
    this = partitioned(graph, plan_graph(graph, case.workers, case.algo))
    values = {**initial_values(graph), **synthetic_batch(graph)}
    trainers = [Trainer(pg, values, "cpu", lr=LR) for pg in (against, this)]
    first = [t.step() for t in trainers]
    scale = max(float(np.max(np.abs(v))) for v in first[0].values()) or 1.0
    difference = max(float(np.max(np.abs(first[0][k] - first[1][k]))) for k in first[0]) / scale
    for t in trainers:
        for _ in range(WARMUP_STEPS - 1):
            t.step()

    def timed(trainer):
        def step() -> float:
            trainer.step()
            return trainer.step_seconds[-1]
        return step
    # half the time each tree goes first in a round, half the time second (the step after another may differ)
    steps = [timed(t) for t in trainers]
    ahead = measure_round_robin(steps, seconds / 2, min_steps=MIN_STEPS // 2)
    behind = measure_round_robin(steps[::-1], seconds / 2, min_steps=MIN_STEPS // 2)[::-1]
    times = [a + b for a, b in zip(ahead, behind)]
    medians = [statistics.median(ts) for ts in times]
    base = {"case": str(case), "model": case.model, "batch": case.batch, "workers": case.workers, "algo": case.algo,
            "status": "ok", "output_difference": f"{difference:.3g}"}
    rows = []
    for tree, pg, ts, m in zip(("against", "this"), (against, this), times, medians):
        q = statistics.quantiles(ts, n=4)
        rows.append({**base, "tree": tree, "seconds": f"{m:.6g}", "p25_seconds": f"{q[0]:.6g}",
                     "p75_seconds": f"{q[2]:.6g}", "steps": len(ts), "ops": op_nodes(pg),
                     "over_against": f"{m / medians[0]:.4f}"})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", required=True, help="a git revision of this repository")
    p.add_argument("--cases", default=",".join(CASES), help="model:batch:k:algo, comma-separated")
    p.add_argument("--seconds", type=float, default=4.0, help="round-robin time per case")
    p.add_argument("--tag", default="runtime")
    p.add_argument("--out-dir", type=Path, default=Path("results/bench_versions"))
    args = p.parse_args(argv)
    try:
        cases = [Case.parse(c) for c in args.cases.split(",") if c]
    except ValueError as e:
        print(f"bench_runtime_versions: {e}", file=sys.stderr)
        return 2
    if not cases:
        print("bench_runtime_versions: no case given", file=sys.stderr)
        return 2
    out = args.out_dir / f"{args.tag}.csv"
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        made = subprocess.run(["git", "worktree", "add", "--detach", str(old), args.against], cwd=ROOT,
                              capture_output=True, text=True)
        if made.returncode:
            print(f"bench_runtime_versions: cannot check out {args.against}: {made.stderr.strip()}",
                  file=sys.stderr)
            return 2
        try:
            sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=old, capture_output=True,
                                 text=True).stdout.strip()
            print(f"partitioning {len(cases)} case(s) with {args.against} ({sha[:7]})", file=sys.stderr, flush=True)
            dumped = dump_partitioned(old, cases)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    writer = RowWriter(out, COLUMNS)
    write_sidecar(out, vars(args), against_sha=sha, **rerun_source())
    for case in cases:
        entry = dumped.get(str(case), {"error": "not partitioned"})
        try:
            if "error" in entry:
                raise RuntimeError(f"{args.against}: {entry['error']}")
            rows = compare(case, load_partitioned(entry), args.seconds)
        except Exception as e:          # keep the case, say why
            writer.write({"case": str(case), "model": case.model, "batch": case.batch, "workers": case.workers,
                          "algo": case.algo, "status": "error", "message": f"{type(e).__name__}: {e}"[:200]})
            print(f"{case}: error: {e}", file=sys.stderr, flush=True)
            continue
        for r in rows:
            writer.write(r)
        a, t = rows
        print(f"{case}: ops {a['ops']} -> {t['ops']}, median step {float(a['seconds']) * 1e3:.3f} -> "
              f"{float(t['seconds']) * 1e3:.3f} ms, ratio {t['over_against']} ({t['steps']} steps each; outputs "
              f"differ by {t['output_difference']})", file=sys.stderr, flush=True)
    writer.close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
