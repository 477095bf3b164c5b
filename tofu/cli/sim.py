"""``tofu sim MODEL --workers K``: one training iteration of a model's partitioned graph, simulated as MXNet's
engine runs it (:mod:`tofu.sim.engine`) on a hardware profile: its time, each device's busy and idle time, how
much communication overlaps compute, the bytes over each link, each device's peak memory; ``--trace`` writes
the timeline as a Chrome trace (Perfetto, chrome://tracing), ``--figure`` as a Gantt chart."""
from __future__ import annotations

from tofu.cli.common import FIGURE_FORMATS, dumps, gb, model_args, model_graph, output_path
from tofu.errors import TofuError


def add_parser(sub) -> None:
    from tofu.search.algorithms import ALGORITHMS
    from tofu.sim.hardware import NAMES

    p = sub.add_parser("sim", help="simulate one training iteration of the partitioned graph on a hardware profile")
    model_args(p)
    p.add_argument("--workers", type=int, default=8, help="number of devices K (default 8)")
    p.add_argument("--algo", choices=sorted(ALGORITHMS), default="tofu", help="plan finder (default tofu)")
    p.add_argument("--profile", choices=NAMES, default="k80x8",
                   help="hardware profile (default k80x8; docs/sim.md gives each number's source)")
    p.add_argument("--order", choices=("id", "fifo"), default="id",
                   help="a device's ready tasks run in program order (id) or in the order they became ready "
                        "(fifo, MXNet's worker queues)")
    p.add_argument("--from-symbol", action="store_true",
                   help="read the program from the partitioned MXNet symbol (small models) instead of the plan")
    p.add_argument("--replicas", action="store_true",
                   help="with the runtime's parameter replicas, as tofu run binds the graph (default: as the "
                        "rewriter builds it, what the paper's runtime ran)")
    p.add_argument("--trace", metavar="OUT.json", help="write the timeline as a Chrome trace")
    p.add_argument("--figure", metavar="OUT.png", help="draw the timeline as a Gantt chart")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from tofu.search.algorithms import plan_graph
    from tofu.sim.engine import Order, simulate_iteration
    from tofu.sim import profile

    if args.trace:
        output_path(args.trace, "trace")
    if args.figure:
        output_path(args.figure, "figure", FIGURE_FORMATS)
    graph = model_graph(args, with_loss=True)       # a bad model or input fails before a profile is calibrated
    prof = profile(args.profile)
    if not 1 <= args.workers <= prof.devices:
        raise TofuError(f"--workers must be in [1, {prof.devices}] on profile '{prof.name}', got {args.workers}")
    plan = plan_graph(graph, args.workers, args.algo)
    ex = simulate_iteration(graph, plan, prof, from_symbol=args.from_symbol, order=Order[args.order.upper()],
                            replicas=args.replicas)
    if args.trace:
        from tofu.sim.trace import write_chrome_trace

        write_chrome_trace(ex, args.trace)
    if args.figure:
        from tofu.sim.trace import gantt

        gantt(ex, args.figure, f"{graph.name}, {args.workers} x {prof.name}, plan {plan.algo}")
    if args.json:
        print(dumps({"model": graph.name, "workers": args.workers, "algo": plan.algo, "profile": prof.name,
                     "iteration_seconds": ex.seconds, "busy_seconds": list(ex.busy), "idle_seconds": list(ex.idle),
                     "overlap_fraction": ex.overlap_fraction, "peak_bytes": list(ex.peak_bytes),
                     "link_bytes": {str(link): b for link, b in ex.link_bytes},
                     "plan_comm_bytes": plan.comm_bytes, "tasks": len(ex.spans)}))
        return 0
    print(f"{graph.name}: {len(graph.nodes)} ops, plan {plan.algo} on {args.workers} x {prof.name}: "
          f"{len(ex.spans)} tasks (forward, backward, copies, updates)")
    print(f"iteration {ex.seconds * 1e3:.3f} ms; communication overlapped with compute {ex.overlap_fraction:.0%}")
    for d, (busy, idle, peak) in enumerate(zip(ex.busy, ex.idle, ex.peak_bytes)):
        print(f"  device {d}: busy {busy * 1e3:10.3f} ms  idle {idle * 1e3:10.3f} ms  peak memory {gb(peak)}")
    moved = [(link, b) for link, b in ex.link_bytes if b]
    if moved:
        print("bytes per link: " + ", ".join(f"{link} {gb(b)}" for link, b in moved[:8])
              + (f", ... ({len(moved)} links)" if len(moved) > 8 else ""))
    for path, what in ((args.trace, "Chrome trace"), (args.figure, "Gantt figure")):
        if path:
            print(f"wrote {path} ({what})")
    return 0
