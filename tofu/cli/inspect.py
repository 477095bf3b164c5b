"""``tofu inspect MODEL``: ops, parameter bytes and the training-memory estimate of one device."""
from __future__ import annotations

from tofu.cli.common import dumps, gb, model_args, model_graph, parse_bytes
from tofu.graph import Role


def add_parser(sub) -> None:
    p = sub.add_parser("inspect", help="ops, parameter bytes and training-memory estimate of a model")
    model_args(p)
    p.add_argument("--device-memory", type=parse_bytes, default=parse_bytes("12GiB"),
                   help="device memory to compare with (default 12GiB)")
    p.add_argument("--reserve", type=parse_bytes, default=None,
                   help="memory kept free on the device for the CUDA context and library workspace "
                        "(default 0.5GiB, docs/search.md)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    graph = model_graph(args)
    from tofu.graph.memory import estimate_training_memory

    from tofu.errors import TofuError
    from tofu.search.plan import DEVICE_RESERVE_BYTES

    reserve = DEVICE_RESERVE_BYTES if args.reserve is None else args.reserve
    if reserve >= args.device_memory:
        raise TofuError(f"--reserve {gb(reserve)} leaves nothing of --device-memory {gb(args.device_memory)}")
    mem = estimate_training_memory(graph)
    fits = mem.total <= args.device_memory - reserve
    counts = graph.op_counts()
    if args.json:
        print(dumps({"model": graph.name, "ops": len(graph.nodes), "op_counts": counts,
                          "param_count": sum(t.size for t in graph.by_role(Role.PARAM)),
                          "param_bytes": graph.param_bytes, "memory_bytes": mem.as_dict(),
                          "device_memory_bytes": args.device_memory, "reserve_bytes": reserve, "fits": fits}))
        return 0
    print(f"model {graph.name}: {len(graph.nodes)} ops, {len(graph.tensors)} tensors")
    print("ops by type: " + ", ".join(f"{op} {n}" for op, n in counts.items()))
    nparams = sum(t.size for t in graph.by_role(Role.PARAM))
    print(f"parameters: {nparams:,} ({gb(graph.param_bytes)})")
    print("training memory on one device (estimate):")
    for k, v in mem.as_dict().items():
        print(f"  {k:<12} {gb(v):>12}")
    print(f"fits {gb(args.device_memory)} less a reserve of {gb(reserve)}: {'yes' if fits else 'no'}")
    return 0
