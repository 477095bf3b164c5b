"""Search time of this working tree against an earlier revision, measured side by side.

    python experiments/bench_search_versions.py --against REV [--models wresnet-152-10,rnn-10-8k,gpt-6.7b]
                                                [--workers 8] [--rounds 3] [--repeats 3] [--tag NAME]
                                                [--gluon-batch 32] [--command]

A model is a zoo name or ``gluon:NET``: a Gluon model-zoo network (``gluon:densenet121``) exported here as
``experiments/run_zoo_check.py`` does (224 x 224 images, 10 classes, batch ``--gluon-batch``) and read back by
both trees as a user's symbol file with a softmax loss over its logits.

The revision is checked out into a temporary git worktree. Each round runs every model once in each tree
(alternating, in fresh processes with one burn-in plan), ``--repeats`` cold searches each (every cache cleared), so
both trees see the same machine load; the tree that goes first alternates from round to round, since a plan forks a
second process only while the load average leaves a core idle (``_fork_pays``), and the load the first tree leaves
weighs on the second (``load`` records the 1-minute load average before each run); ``search_seconds`` is the plan's
own search time, ``plan_seconds`` the whole ``plan_graph`` call (the recount of the bytes,
:mod:`tofu.search.copies`, included); results/bench_versions/<tag>.csv gets every timing with the plan's bytes, and
the medians and their ratio are printed. A model the older tree does not know is skipped there. With ``--command``,
each round also times the whole command a user types, ``python -m tofu plan MODEL --workers K`` in a fresh process
of each tree (``command_seconds``: MXNet's import, the search, the recount, the printing and the process's exit).
Machines here are shared and noisy: read the ratio, not the absolute seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, rerun_source, write_sidecar  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("tree", "model", "workers", "round", "repeat", "status", "load", "search_seconds", "plan_seconds",
           "comm_bytes", "command_seconds")
TIMER = r"""
import json, sys, time
from tofu.api import clear_caches, load_graph
from tofu.search.algorithms import plan_graph
shapes = {name: tuple(shape) for name, shape in json.loads(sys.argv[4]).items()} or None
graph = load_graph(sys.argv[1], shapes=shapes, with_loss=True); workers, repeats = int(sys.argv[2]), int(sys.argv[3])
plan_graph(graph, workers, "tofu")
out = []
for _ in range(repeats):
    clear_caches()
    start = time.perf_counter()
    plan = plan_graph(graph, workers, "tofu")
    out.append((plan.search_seconds, time.perf_counter() - start, plan.comm_bytes))
print(json.dumps(out))
"""


def _time(tree: Path, model: tuple[str, str], workers: int, repeats: int) -> list | str:
    """``model``: (zoo name or symbol file, its input shapes as JSON: ``{}`` for a zoo name)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MXNET_SUBGRAPH_BACKEND": "NONE", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", TIMER, model[0], str(workers), str(repeats), model[1]],
                          cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:200]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _command(tree: Path, model: tuple[str, str], workers: int) -> float | str:
    """Seconds of ``python -m tofu plan`` of ``model`` in a fresh process of ``tree``, from start to exit."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MXNET_SUBGRAPH_BACKEND": "NONE", "OMP_NUM_THREADS": "1"}
    shapes = [f"--shape={name}={','.join(map(str, shape))}" for name, shape in json.loads(model[1]).items()]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tofu", "plan", model[0], "--workers", str(workers), *shapes],
                          cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        return (done.stderr.strip().splitlines() or ["failed"])[-1][:200]
    return seconds


def _spec(model: str, batch: int, tmp: Path) -> tuple[str, str]:
    """What :func:`_time` passes for ``model``: a zoo name as it is; ``gluon:NET`` exported into ``tmp``."""
    if not model.startswith("gluon:"):
        return model, "{}"
    from experiments.run_zoo_check import export

    return str(export(model.split(":", 1)[1], 224, batch, tmp)), json.dumps({"data": [batch, 3, 224, 224]})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", required=True, help="a git revision of this repository")
    p.add_argument("--models", default="wresnet-152-10,rnn-10-8k,gpt-6.7b")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/bench_versions"))
    p.add_argument("--gluon-batch", type=int, default=32, help="the batch of a gluon:NET model")
    p.add_argument("--command", action="store_true",
                   help="also time the whole `python -m tofu plan` command per round and tree")
    args = p.parse_args(argv)
    if args.gluon_batch < 1:
        print(f"bench_search_versions: --gluon-batch must be at least 1, got {args.gluon_batch}", file=sys.stderr)
        return 2
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        made = subprocess.run(["git", "worktree", "add", "--detach", str(old), args.against], cwd=ROOT,
                              capture_output=True, text=True)
        if made.returncode:
            print(f"bench_search_versions: cannot check out {args.against}: {made.stderr.strip()}", file=sys.stderr)
            return 2
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=old, capture_output=True, text=True).stdout.strip()
        write_sidecar(out, vars(args), against_sha=sha, **rerun_source())
        try:
            try:
                specs = {model: _spec(model, args.gluon_batch, Path(tmp)) for model in args.models.split(",")}
            except Exception as e:        # noqa: BLE001 (Gluon's errors for an unknown network vary)
                print(f"bench_search_versions: cannot export {args.models}: {str(e).splitlines()[0]}",
                      file=sys.stderr)
                return 2
            times: dict[tuple[str, str], list[float]] = {}
            walls: dict[tuple[str, str], list[float]] = {}
            commands: dict[tuple[str, str], list[float]] = {}
            for r in range(args.rounds):
                for model in args.models.split(","):
                    trees = (("old", old), ("new", ROOT))
                    for tree, path in trees if r % 2 == 0 else trees[::-1]:
                        load = f"{os.getloadavg()[0]:.2f}"
                        got = _time(path, specs[model], args.workers, args.repeats)
                        if isinstance(got, str):
                            writer.write({"tree": tree, "model": model, "workers": args.workers, "round": r,
                                          "status": "error"})
                            print(f"{tree} {model}: {got}", file=sys.stderr)
                            continue
                        for i, (seconds, wall, comm) in enumerate(got):
                            times.setdefault((tree, model), []).append(seconds)
                            walls.setdefault((tree, model), []).append(wall)
                            writer.write({"tree": tree, "model": model, "workers": args.workers, "round": r,
                                          "repeat": i, "status": "ok", "load": load, "search_seconds": f"{seconds:.4f}",
                                          "plan_seconds": f"{wall:.4f}", "comm_bytes": f"{comm:.0f}"})
                        print(f"round {r + 1}/{args.rounds} {tree} {model}: search "
                              f"{' '.join(f'{s:.2f}' for s, _, _ in got)} s, plan "
                              f"{' '.join(f'{w:.2f}' for _, w, _ in got)} s (load {load})", flush=True)
                        if args.command:
                            took = _command(path, specs[model], args.workers)
                            ok = not isinstance(took, str)
                            writer.write({"tree": tree, "model": model, "workers": args.workers, "round": r,
                                          "status": "ok" if ok else "error",
                                          "command_seconds": f"{took:.4f}" if ok else ""})
                            if ok:
                                commands.setdefault((tree, model), []).append(took)
                            print(f"round {r + 1}/{args.rounds} {tree} {model}: command "
                                  + (f"{took:.2f} s" if ok else took), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    writer.close()
    for model in args.models.split(","):
        o, n = times.get(("old", model)), times.get(("new", model))
        if o and n:
            wo, wn = statistics.median(walls[("old", model)]), statistics.median(walls[("new", model)])
            print(f"{model}: search {args.against} {statistics.median(o):.2f} s, this tree {statistics.median(n):.2f}"
                  f" s (median of {len(n)}), ratio {statistics.median(n) / statistics.median(o):.2f}; whole plan "
                  f"(the recount included) {wo:.2f} s against {wn:.2f} s, ratio {wn / wo:.2f}")
        co, cn = commands.get(("old", model)), commands.get(("new", model))
        if co and cn:
            print(f"{model}: the whole command {args.against} {statistics.median(co):.2f} s, this tree "
                  f"{statistics.median(cn):.2f} s, ratio {statistics.median(cn) / statistics.median(co):.2f}")
        if not o and n:
            print(f"{model}: this tree {statistics.median(n):.2f} s (median of {len(n)}); {args.against} cannot plan it")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
