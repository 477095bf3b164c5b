"""Do the training steps measured after a calibration in the same process run as fast as before it?

    python experiments/run_calibration_aftereffect.py [--cases MODEL:BATCH:K,...] [--seconds 4]
        [--works calibrate,sleep] [--sleep-seconds S] [--cpus 0] [--out-dir docs/results/sim]
        [--tag calibration_aftereffect] [--quick]

Each work runs in a fresh process of its own (this script again, ``--one WORK``): one :class:`Trainer` per case
(plan ``tofu``, bound as ``experiments/run_cpu_validation.py`` binds it), their steps timed round-robin for about
``--seconds`` (the validation's :func:`~experiments.run_cpu_validation.measure_round_robin`; phase ``before``),
then the work, then the same trainers' steps again (``after``) and those of trainers bound anew (``after, new``).
Works: ``calibrate`` runs :func:`tofu.sim.calibrate.measure` in the process, as ``run_cpu_validation.py
--recalibrate`` does before it times its steps (does what the calibration leaves behind slow them?); ``sleep``
sleeps as long as the calibration took (the control: the machine's drift over the same minutes). One CSV row per
(work, case, phase): the median step and its ratio to ``before``. ``--quick``: mlp at batch 16 on one context,
0.3 s per phase, ``sleep`` for 0.2 s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, pin_option, rerun_source, six_digits, write_sidecar  # noqa: E402

COLUMNS = ("work", "model", "batch", "workers", "phase", "median_seconds", "steps", "ratio_to_before",
           "work_seconds")
CASES = "mlp:16:1,mlp:64:2,wresnet-tiny:4:1,rnn-tiny:8:1,gpt-tiny:4:2"
WORKS = ("calibrate", "sleep")
PHASES = ("before", "after", "after, new")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_cases(text: str) -> list[tuple[str, int, int]]:
    """``model:batch:k,...`` as (model, batch, k); ValueError naming the bad item."""
    from experiments.run_cpu_validation import MODELS

    cases = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3 or parts[0] not in MODELS or not (parts[1].isdigit() and parts[2].isdigit()):
            raise ValueError(f"case '{item}': want MODEL:BATCH:K, MODEL one of {', '.join(MODELS)}")
        cases.append((parts[0], int(parts[1]), int(parts[2])))
    return cases


def one(work: str, cases: list[tuple[str, int, int]], seconds: float, sleep_seconds: float | None) -> list[dict]:
    """This process: the cases' steps before ``work``, after it, and of new trainers after it (see the module
    docstring); one row per (case, phase), ``work_seconds`` what the work took."""
    from experiments.run_cpu_validation import graph_of, measure_round_robin
    from tofu.api import partitioned
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer
    from tofu.search.algorithms import plan_graph

    with tempfile.TemporaryDirectory(prefix="tofu-aftereffect-") as work_dir:
        graphs = [graph_of(m, b, Path(work_dir)) for m, b, _ in cases]

        def bind():
            trainers = []
            for graph, (_, _, k) in zip(graphs, cases):
                values = {**initial_values(graph), **synthetic_batch(graph)}
                t = Trainer(partitioned(graph, plan_graph(graph, k, "tofu")), values, "cpu", lr=1e-3,
                            replicas=False)
                for _ in range(3):
                    t.step()
                trainers.append(t)
            return trainers

        def timed(t):
            def step() -> float:
                t.step()
                return t.step_seconds[-1]
            return step

        def medians(trainers) -> list[tuple[float, int]]:
            return [(statistics.median(ts), len(ts))
                    for ts in measure_round_robin([timed(t) for t in trainers], seconds)]

        trainers = bind()
        before = medians(trainers)
        start = time.perf_counter()
        if work == "calibrate":
            from tofu.sim import calibrate
            calibrate.measure()
        else:
            time.sleep(sleep_seconds or 0.0)
        took = time.perf_counter() - start
        phases = {"before": before, "after": medians(trainers), "after, new": medians(bind())}
        return [{"work": work, "model": m, "batch": b, "workers": k, "phase": phase,
                 "median_seconds": phases[phase][i][0], "steps": phases[phase][i][1],
                 "ratio_to_before": phases[phase][i][0] / before[i][0], "work_seconds": took}
                for i, (m, b, k) in enumerate(cases) for phase in PHASES]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=CASES, help="comma-separated MODEL:BATCH:K (plan tofu)")
    p.add_argument("--seconds", type=float, default=4.0, help="measuring time per phase")
    p.add_argument("--works", default=",".join(WORKS), help=f"comma-separated from {', '.join(WORKS)}")
    p.add_argument("--sleep-seconds", type=float, default=None,
                   help="how long 'sleep' sleeps (default: as long as 'calibrate' took, or 180 s without it)")
    p.add_argument("--cpus", default=None, help="comma-separated core numbers to pin the process to")
    p.add_argument("--out-dir", type=Path, default=Path("results/sim"))
    p.add_argument("--tag", default="calibration_aftereffect")
    p.add_argument("--quick", action="store_true", help="mlp at batch 16 on one context, 'sleep' for 0.2 s")
    p.add_argument("--one", choices=WORKS, help=argparse.SUPPRESS)       # a child: one work, rows as JSON
    p.add_argument("--rows-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.cases, args.seconds, args.works, args.sleep_seconds = "mlp:16:1", 0.3, "sleep", 0.2
    try:
        cases = parse_cases(args.cases)
    except ValueError as e:
        p.error(str(e))
    works = args.works.split(",")
    for w in works:
        if w not in WORKS:
            p.error(f"unknown work '{w}' (choose from {', '.join(WORKS)})")
    pin_option(args.cpus, p.error)
    if args.one:
        args.rows_out.write_text(json.dumps(one(args.one, cases, args.seconds, args.sleep_seconds)))
        return 0

    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    sleep_seconds = args.sleep_seconds
    for work in works:
        log(f"[{work}] a fresh process: {len(cases)} cases before, {work}, after (minutes for 'calibrate')")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rows.json"
            cmd = [sys.executable, __file__, "--one", work, "--rows-out", str(out), "--cases", args.cases,
                   "--seconds", str(args.seconds), "--sleep-seconds", str(sleep_seconds or 180.0)]
            done = subprocess.run(cmd)
            if done.returncode != 0:
                raise SystemExit(f"run_calibration_aftereffect: the '{work}' process failed (exit {done.returncode})")
            got = json.loads(out.read_text())
        for row in got:
            writer.write(six_digits(row))
            if row["phase"] != "before":
                log(f"[{work}] {row['model']} b={row['batch']} k={row['workers']} {row['phase']:<10} "
                    f"{row['median_seconds'] * 1e3:.3f} ms, {row['ratio_to_before']:.2f}x before")
        if work == "calibrate" and args.sleep_seconds is None:
            sleep_seconds = got[0]["work_seconds"]       # the control sleeps as long as the calibration took
    writer.close()
    write_sidecar(path, vars(args), **rerun_source())
    return 0


if __name__ == "__main__":
    sys.exit(main())
