"""``tofu plan MODEL --workers K [--machines M]``: the partition plan (one of M machines, with the kvstore's
inter-machine bytes); ``--out`` saves it, ``--load`` replays a saved one, ``--figure`` draws it."""
from __future__ import annotations

import argparse
import os

from tofu.cli.common import (FIGURE_FORMATS, dumps, gb, input_path, model_args, model_graph, output_path,
                             parse_bytes, split_batch)
from tofu.errors import TofuError


def add_parser(sub) -> None:
    from tofu.search.algorithms import ALGORITHMS

    p = sub.add_parser("plan", help="partition a model over K workers (the plan: per step, per tensor and op)")
    model_args(p)
    p.add_argument("--workers", type=int, help="number of devices K (default 8; with --load, checked)")
    p.add_argument("--machines", type=int, metavar="M",
                   help="plan one of M machines: its K devices on --batch / M rows; reports the kvstore's "
                        "inter-machine bytes beside the plan's intra-machine bytes")
    p.add_argument("--algo", choices=sorted(ALGORITHMS), default="tofu", help="plan finder (default tofu)")
    p.add_argument("--out", metavar="PLAN.json", help="save the plan")
    p.add_argument("--load", metavar="PLAN.json", help="show a saved plan (checked against the model)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--steps", action="store_true", help="with --json: include every tensor's and op's split")
    p.add_argument("--device-memory", type=parse_bytes, metavar="BYTES",
                   help="say whether the plan's worst device fits a device of this memory (e.g. 12GiB), less "
                        "--reserve")
    p.add_argument("--reserve", type=parse_bytes, metavar="BYTES",
                   help="with --device-memory: memory each device keeps for the CUDA context and the libraries' "
                        "workspaces, which the plan's estimate does not count (default 0.5GiB; docs/search.md)")
    p.add_argument("--figure", metavar="PLAN.png", help="draw each chosen tensor's split at every cut")
    p.add_argument("--figure-tensors", metavar="REGEX", default="",
                   help="with --figure: the tensors to draw (default every tensor, at most 150)")
    p.set_defaults(run=run)


_DIM_LETTERS = {1: "C", 2: "NC", 3: "NTC", 4: "NCHW", 5: "NCDHW"}


def _dim_name(shape: tuple[int, ...], d: int | None) -> str:
    if d is None:
        return "-"
    letters = _DIM_LETTERS.get(len(shape))
    return letters[d] if letters else str(d)


def run(args) -> int:
    from tofu.search.algorithms import plan_graph, replay
    from tofu.search.plan import Plan

    if args.out:
        output_path(args.out, "plan")
    if args.figure:
        output_path(args.figure, "figure", FIGURE_FORMATS)
        if args.out and os.path.abspath(args.out) == os.path.abspath(args.figure):
            raise TofuError(f"--out and --figure are the same file '{args.out}': one would overwrite the other")
    input_path(args.load, "plan")
    from tofu.search.plan import DEVICE_RESERVE_BYTES, fits

    if args.reserve is not None and args.device_memory is None:
        raise TofuError("--reserve applies with --device-memory")
    reserve = DEVICE_RESERVE_BYTES if args.reserve is None else args.reserve
    if args.device_memory is not None and not 0 <= reserve < args.device_memory:
        raise TofuError(f"--reserve of {gb(reserve)} leaves nothing of --device-memory {gb(args.device_memory)}")
    global_batch = None
    if args.machines is not None:
        global_batch = split_batch(args, args.machines)
    graph = model_graph(args, with_loss=True)      # the graph `tofu run` trains, so that its plans replay there
    if args.load:
        if args.algo != "tofu" or args.out:
            raise TofuError("--load shows a saved plan: --algo and --out do not apply to it")
        plan = Plan.load(args.load, graph)
        if args.workers is not None and plan.workers != args.workers:
            raise TofuError(f"plan '{args.load}' is for {plan.workers} workers, not {args.workers}")
        plan = replay(graph, plan)        # the file's numbers are recomputed, not trusted
    else:
        plan = plan_graph(graph, 8 if args.workers is None else args.workers, args.algo)
        if args.out:
            plan.save(args.out)
    if args.figure:
        from tofu.figures import draw, plan_columns

        draw([plan_columns(plan.to_json())], args.figure_tensors, args.figure,
             f"{plan.model}, {plan.workers} workers")
    inter = None
    if global_batch is not None:
        from tofu.runtime.distributed import inter_machine_bytes

        inter = inter_machine_bytes(graph, plan, model_graph(argparse.Namespace(**{**vars(args), "batch": global_batch}), True),
                                    args.machines)
    if args.json:
        doc = plan.to_json()
        if not args.steps:
            for step in doc["steps"]:          # the per-tensor tables are in --out files; keep stdout short
                step.pop("tensor_dims")
                step.pop("ops")
        if args.device_memory is not None:
            doc.update({"device_memory_bytes": args.device_memory, "reserve_bytes": reserve,
                        "fits": fits(doc["per_device_bytes"], args.device_memory, reserve),
                        "fits_with_replicas": fits(doc["per_device_bytes"], args.device_memory, reserve, True)})
        if inter is not None:
            doc.update({"machines": args.machines, "global_batch": global_batch, "machine_batch": args.batch,
                        "intra_machine_bytes": plan.comm_bytes, "inter_machine_pushed_bytes": inter,
                        "inter_machine_pulled_bytes": inter, "inter_machine_bytes": 2 * inter})
        print(dumps(doc))
        return 0
    print(_plan_text(graph, plan))
    if args.device_memory is not None:
        memory = dict(plan.per_device_bytes)
        gib = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
        yes = lambda b: "yes" if b else "no"  # noqa: E731
        with_replicas = fits(memory, args.device_memory, reserve, replicas=True)
        print(f"fits {gib(args.device_memory)} less a {gib(reserve)} reserve: "
              f"{yes(fits(memory, args.device_memory, reserve))} (worst device {gib(memory['total'])} of "
              f"{gib(args.device_memory - reserve)}); with tofu run's parameter replicas "
              f"(+{gib(memory.get('replicas', 0))}): {yes(with_replicas)}"
              + ("" if with_replicas or not fits(memory, args.device_memory, reserve) else
                 ": train it with tofu run --no-replicas"))
    if inter is not None:
        print(f"{args.machines} machines, global batch {global_batch} ({args.batch} per machine): per iteration, "
              f"intra-machine {gb(plan.comm_bytes)} on each machine (the plan's), inter-machine {gb(2 * inter)} "
              f"per machine through the kvstore ({gb(inter)} of gradient shards and statistics pushed, {gb(inter)} "
              f"pulled)")
    return 0


def _plan_text(graph, plan) -> str:
    """The paper's plan figure as text: per layer, the split of its first op and of its output per step."""
    factors = "x".join(str(s.factor) for s in plan.steps) or "1"
    lines = [f"{plan.model}: {plan.workers} workers, {plan.algo} ({factors}), searched in "
             f"{plan.search_seconds:.2f} s"]
    c = dict(plan.coarsening)
    if c:
        lines.append(f"coarsened: {c['ops']} ops -> {c['op_groups']} op groups ({c['merged_elementwise']} "
                     f"element-wise merged), {c['tensors']} tensors -> {c['tensor_groups']} tensor groups")
    splits = [dict(s.op_splits) for s in plan.steps]
    dims = [dict(s.tensor_dims) for s in plan.steps]
    seen, rows = set(), []
    for node in graph.nodes:
        layer = node.layer or node.name
        if layer in seen or (splits and splits[0][node.name].startswith(("dim", "replicate"))):
            continue
        seen.add(layer)
        out = graph.tensors[node.outputs[0]]
        rows.append((layer, node.name, " ".join(sp[node.name] for sp in splits),
                     " ".join(_dim_name(out.shape, dm[out.name]) for dm in dims)))
    if rows:
        w = [max(len(r[i]) for r in rows + [("layer", "first op", "op split", "output split")]) for i in range(4)]
        lines.append(f"{'layer':<{w[0]}}  {'first op':<{w[1]}}  {'op split':<{w[2]}}  output split (per step)")
        lines += [f"{a:<{w[0]}}  {b:<{w[1]}}  {c_:<{w[2]}}  {d}" for a, b, c_, d in rows]
    for j, s in enumerate(plan.steps, 1):
        lines.append(f"step {j}: {s.factor}-way cut in {s.groups} group(s): {gb(s.cost_bytes)}")
    lines.append(f"communication per iteration: {gb(plan.comm_bytes)}")
    mem = dict(plan.per_device_bytes)
    lines.append("per-device memory (the worst device): " + ", ".join(f"{k} {gb(v)}" for k, v in mem.items()))
    return "\n".join(lines)
