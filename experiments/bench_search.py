"""Search speed on the paper's largest models: Tofu's recursive DP against the same recursion solved by ILP.

    python experiments/bench_search.py [--models wresnet-152-10,rnn-10-8k] [--workers 8] [--repeats 5]
                                       [--ilp-seconds 600] [--tag NAME]

Cold timings (every cache cleared before each search). For each model: the median of ``--repeats`` whole
plans with ``tofu`` (the recursion and one k-way cut, both by the DP), the same for the recursion alone
(``tofu-recursive``) and one whole plan with the ILP solving the recursion's cuts (``ilp``, each cut under
``--ilp-seconds``), and, on the very same cut problems, the time of the one-cut solvers alone (DP vs ILP). Writes
results/bench_search/<tag>.csv (one row per model and measurement) and a JSON sidecar; prints the ratios.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, write_sidecar  # noqa: E402
from tofu.api import clear_caches, load_graph  # noqa: E402
from tofu.errors import TofuError  # noqa: E402
from tofu.search import algorithms  # noqa: E402
from tofu.search.algorithms import plan_graph  # noqa: E402
from tofu.search.coarsen import coarsen  # noqa: E402
from tofu.search.cost import NodeView, build_cut  # noqa: E402
from tofu.search.dp import solve_dp  # noqa: E402
from tofu.search.recursive import factorize, search  # noqa: E402
from tofu.search.reference import solve_ilp  # noqa: E402

COLUMNS = ("model", "workers", "measure", "repeat", "status", "seconds", "comm_bytes")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="wresnet-152-10,rnn-10-8k")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ilp-seconds", type=float, default=600.0)
    p.add_argument("--tag", default="latest")
    p.add_argument("--out-dir", type=Path, default=Path("results/bench_search"))
    args = p.parse_args(argv)
    out = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(out, COLUMNS)
    write_sidecar(out, vars(args))
    algorithms.ILP_TIME_LIMIT = args.ilp_seconds
    for name in args.models.split(","):
        graph = load_graph(name)
        row = {"model": name, "workers": args.workers}
        medians = {}
        for algo in ("tofu", "tofu-recursive"):
            times = []
            for r in range(args.repeats + 1):             # the first is a burn-in (imports, MXNet start-up)
                clear_caches()
                plan = plan_graph(graph, args.workers, algo)
                if r:
                    times.append(plan.search_seconds)
                    writer.write({**row, "measure": f"plan-{algo}", "repeat": r, "status": "ok",
                                  "seconds": f"{plan.search_seconds:.4f}", "comm_bytes": f"{plan.comm_bytes:.0f}"})
            medians[algo] = statistics.median(times)
        tofu_median, dp_median = medians["tofu"], medians["tofu-recursive"]
        clear_caches()
        try:
            ilp = plan_graph(graph, args.workers, "ilp")
            ilp_status, ilp_seconds, ilp_bytes = "ok", ilp.search_seconds, ilp.comm_bytes
        except TofuError as e:
            ilp_status, ilp_seconds, ilp_bytes = "timeout", float("nan"), float("nan")
            print(f"{name}: ILP: {e}")
        writer.write({**row, "measure": "plan-ilp", "repeat": 0, "status": ilp_status,
                      "seconds": f"{ilp_seconds:.4f}", "comm_bytes": f"{ilp_bytes:.0f}"})
        # the one-cut solvers alone, on the recursion's own cut problems
        steps = search(graph, factorize(args.workers), solve_dp, coarsen(graph))
        dp_solve = ilp_solve = alpa_solve = 0.0
        for s in steps:
            t0 = time.perf_counter()
            solve_dp(s.problem)
            dp_solve += time.perf_counter() - t0
            for tight in (True, False):       # the tight linearisation, and Alpa's (z >= x + y - 1)
                t0 = time.perf_counter()
                try:
                    solve_ilp(s.problem, args.ilp_seconds, tight=tight, require_optimal=True)
                    spent = time.perf_counter() - t0
                except TofuError:
                    spent = float("nan")
                if tight:
                    ilp_solve += spent
                else:
                    alpa_solve += spent
        # the ILP without coarsening (as an auto-sharding ILP sees the graph): the first cut, Alpa's form
        flat_graph = coarsen(graph, elementwise=False, timesteps=False)
        views = [NodeView.of(graph, n) for n in graph.nodes]
        first, _ = build_cut(graph, flat_graph, [t.shape for t in graph.tensors], views, factorize(args.workers)[0])
        t0 = time.perf_counter()
        try:
            solve_ilp(first, args.ilp_seconds, tight=False, require_optimal=True)
            raw_ilp = time.perf_counter() - t0
        except TofuError:
            raw_ilp = float("nan")
        first_dp = steps[0].problem
        t0 = time.perf_counter()
        solve_dp(first_dp)
        first_dp_seconds = time.perf_counter() - t0
        for measure, sec in (("solve-dp", dp_solve), ("solve-ilp", ilp_solve), ("solve-ilp-alpa", alpa_solve),
                             ("first-cut-dp-coarsened", first_dp_seconds),
                             ("first-cut-ilp-alpa-uncoarsened", raw_ilp)):
            writer.write({**row, "measure": measure, "repeat": 0, "status": "ok" if sec == sec else "timeout",
                          "seconds": f"{sec:.4f}"})
        print(f"{name} on {args.workers} workers: tofu {tofu_median:.2f} s (median of {args.repeats}); the "
              f"recursion with DP {dp_median:.2f} s, with ILP {ilp_seconds:.2f} s ({ilp_status}; "
              f"{ilp_seconds / dp_median:.1f}x), "
              f"same plan cost: {abs(ilp_bytes - plan.comm_bytes) < 1e-6 * plan.comm_bytes}; "
              f"one-cut solvers alone: DP {dp_solve:.3f} s, ILP {ilp_solve:.3f} s "
              f"({ilp_solve / dp_solve:.1f}x), Alpa-form ILP {alpa_solve:.3f} s ({alpa_solve / dp_solve:.1f}x); "
              f"first cut: DP on the coarsened graph {first_dp_seconds:.3f} s, Alpa-form ILP on the uncoarsened "
              f"graph ({len(first.ops)} op groups) {raw_ilp:.2f} s ({raw_ilp / first_dp_seconds:.0f}x)", flush=True)
    writer.close()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
