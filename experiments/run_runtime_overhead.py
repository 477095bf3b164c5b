"""The partitioned runtime's training step beside one device and beside MXNet's own data parallelism, and where the
partitioned step's time goes, op class by op class (issue 23, item 5).

    python experiments/run_runtime_overhead.py [--models mlp,gpt-tiny,rnn-tiny,wresnet-tiny] [--workers 1,2,4]
                                               [--profile-workers 4] [--seconds 4] [--levels step,profile]
                                               [--tag overhead] [--out-dir results/runtime_overhead] [--quick]
                                               [--routes]

Level ``step``: for each model (at its batch, :data:`BATCHES`) and each k in ``--workers``, one process binds side
by side (:class:`System`): the unpartitioned model on cpu(0) (``one-device``); tofu's runtime
(:class:`tofu.runtime.train.Trainer`, what ``tofu run`` trains) with the ``tofu`` plan and with the
``data-parallel`` plan on cpu(0..k-1); and MXNet's ``mx.mod.Module`` over the same k contexts (``module``: the
model's symbol built at batch b / k, which is what each of Module's executors runs, the batch of b sliced by
Module, SGD with momentum through its local kvstore; ``forward_backward`` then ``update``, waited for). At k = 1
only ``one-device`` and ``module``. After ``WARMUP_STEPS`` steps each, their steps run round-robin, one of each in
turn, for about ``--seconds`` (at least ``MIN_STEPS``), so that a shared machine's other jobs slow them alike;
``seconds`` is a system's median step, ``over_one_device`` and ``over_module`` its ratios to the other two of the
same configuration. ``--routes`` also binds both plans without parameter replicas (``tofu-routes``,
``data-parallel-routes``: ``Trainer(..., replicas=False)``, each parameter shard another device reads whole sent
through the rewriter's route, :mod:`tofu.runtime.replicas`), in the same round-robin. MXNet's Module normalises
BatchNorm over each device's slice of the batch (local statistics), while tofu's plans compute the whole batch's
(an all-reduce of the sums): not the same math on wresnet-tiny (``batchnorm`` column).

Level ``profile``: for each model at each k in ``--profile-workers``, one device and the ``tofu`` and
``data-parallel`` plans are bound with MXNet's bulk execution off (``MXNET_EXEC_BULK_EXEC_TRAIN=0``: a bulked
segment is profiled as one event, so its ops could not be told apart; the kernels are the same), and
``PROFILE_STEPS`` training steps of each run under MXNet's profiler (``profile_symbolic``, ``profile_imperative``).
From the trace's operator events (op type and device, no node names), one row per (system, device, op class,
:class:`OpClass`): calls and summed seconds per step. Beside them, per system, a ``busy`` row per device (the time
at least one of its ops runs; spans of one device can overlap: its copies run beside its kernels) and one for
all devices together, and a ``wall`` row: its median profiled step.

One CSV row per case in ``<out-dir>/<tag>.csv``, written as it finishes; a JSON sidecar with the arguments,
versions, the load average and how to re-run it. Progress on stderr. ``--quick``: mlp at batch 64, k = 1, 2.
"""
from __future__ import annotations

import argparse
import enum
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from experiments.common import RowWriter, rerun_source, six_digits, write_sidecar  # noqa: E402
from experiments.run_cpu_validation import measure_round_robin  # noqa: E402

COLUMNS = ("level", "model", "batch", "workers", "system", "status", "seconds", "p25_seconds", "p75_seconds",
           "steps", "over_one_device", "over_module", "batchnorm", "forward_ops", "load", "device", "op_class",
           "calls", "message")
BATCHES = {"mlp": 1024, "gpt-tiny": 64, "rnn-tiny": 256, "wresnet-tiny": 256}
MODELS = tuple(BATCHES)
WARMUP_STEPS = 3
MIN_STEPS = 10
PROFILE_STEPS = 5
GAP = 0.05          # seconds between two systems' profiled steps (the trace's clock and time.time() differ slightly)
LR = 1e-3
MOMENTUM = 0.9


class System(enum.Enum):
    ONE_DEVICE = "one-device"
    TOFU = "tofu"
    DATA_PARALLEL = "data-parallel"
    MODULE = "module"
    TOFU_ROUTES = "tofu-routes"                     # the plan's graph bound as the rewriter builds it: each
    DATA_PARALLEL_ROUTES = "data-parallel-routes"   # parameter read through a route, no replicas (--routes)

    @property
    def algo(self) -> str:
        return self.value.removesuffix("-routes")

    @property
    def routes(self) -> bool:
        return self.value.endswith("-routes")


ROUTES = (System.TOFU_ROUTES, System.DATA_PARALLEL_ROUTES)


class OpClass(enum.Enum):
    """What an op of the profiled trace is, by its MXNet op type (the trace names no nodes)."""

    KERNEL = "kernels"            # an op type the one-device graph runs (the model's own ops and their backward)
    SLICE = "slice"
    CONCAT = "Concat"
    ADD_N = "add_n"               # the rewriter's reductions and MXNet's gradient sums alike
    COPY = "copies"               # identity routes (_copy), MXNet's _CrossDeviceCopy (CopyCPU2CPU), replicas' (_copyto)
    FILL = "fill"
    UPDATE = "update"             # sgd_mom_update
    OTHER = "expansion and other"  # op types the one device never runs: BatchNorm's statistics exchange, ...


GLUE_OPS = {
    OpClass.SLICE: {"slice", "slice_axis", "_backward_slice", "_backward_slice_axis", "_slice_assign"},
    OpClass.CONCAT: {"Concat", "_backward_Concat"},
    OpClass.ADD_N: {"add_n", "ElementWiseSum", "_backward_add_n"},
    OpClass.COPY: {"_copy", "_backward_copy", "_CrossDeviceCopy", "CopyCPU2CPU", "_copyto"},
    OpClass.FILL: {"_full", "_backward_full"},
    OpClass.UPDATE: {"sgd_mom_update", "sgd_update"},
}
OP_CLASS = {op: c for c, ops in GLUE_OPS.items() for op in ops}
WALL = "wall"
BUSY = "busy"       # the union of a device's op spans (device empty: of every device's)


def op_class(op: str, one_device_ops: frozenset[str]) -> OpClass:
    """The class of op type ``op``: a glue class by name, else a kernel if the one-device graph runs it."""
    if op in OP_CLASS:
        return OP_CLASS[op]
    return OpClass.KERNEL if op in one_device_ops else OpClass.OTHER


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ binding

def _graph(model: str, batch: int):
    from tofu.api import load_graph
    from tofu.models import ModelOptions

    return load_graph(model, ModelOptions(batch=batch))


def _forward_ops(symbol) -> int:
    return sum(n["op"] != "null" for n in json.loads(symbol.tojson())["nodes"])


def has_batchnorm(graph) -> bool:
    return any(n.op == "BatchNorm" for n in graph.nodes)


def _with_shapes(symbol, shapes: Mapping[str, tuple[int, ...]]):
    """``symbol`` with each variable of ``shapes`` carrying its shape (``__shape__``), so that Module, which infers
    shapes from the data alone, can bind a model whose parameter shapes the data does not determine (gpt-tiny's
    position embedding and layer norms)."""
    import mxnet as mx

    graph = json.loads(symbol.tojson())
    for node in graph["nodes"]:
        if node["op"] == "null" and node["name"] in shapes:
            node.setdefault("attrs", {})["__shape__"] = str(tuple(shapes[node["name"]]))
    return mx.sym.load_json(json.dumps(graph))


class ModuleStep:
    """MXNet's own data parallelism: ``mx.mod.Module`` over ``workers`` CPU contexts, each executor running
    ``graph_per_device`` (the model at batch b / k), fed the whole batch (Module slices it), SGD with momentum
    through the local kvstore."""

    def __init__(self, graph_per_device, workers: int, values: Mapping, batch: Mapping):
        import mxnet as mx

        from tofu.api import reference_symbol
        from tofu.graph.ir import Role
        from tofu.runtime.train import contexts, quiet

        inputs = {t.name: t.role for t in graph_per_device.tensors if t.producer is None}
        symbol = _with_shapes(reference_symbol(graph_per_device),
                              {t.name: t.shape for t in graph_per_device.tensors
                               if t.producer is None and t.role in (Role.PARAM, Role.AUX)})
        self.forward_ops = workers * _forward_ops(symbol)
        data = [n for n, r in inputs.items() if r is Role.DATA]
        labels = [n for n, r in inputs.items() if r is Role.LABEL]
        aux = set(symbol.list_auxiliary_states())
        self.module = mx.mod.Module(symbol, data_names=data, label_names=labels, context=contexts(workers))
        with quiet():
            self.module.bind(data_shapes=[(n, batch[n].shape) for n in data],
                             label_shapes=[(n, batch[n].shape) for n in labels])
            self.module.init_params(arg_params={n: mx.nd.array(v) for n, v in values.items()
                                                if n in inputs and inputs[n] is Role.PARAM},
                                    aux_params={n: mx.nd.array(v) for n, v in values.items() if n in aux},
                                    allow_missing=False)
            self.module.init_optimizer(kvstore="local", optimizer="sgd",
                                       optimizer_params={"learning_rate": LR, "momentum": MOMENTUM})
        self.batch = mx.io.DataBatch(data=[mx.nd.array(batch[n]) for n in data],
                                     label=[mx.nd.array(batch[n]) for n in labels])

    def step(self) -> float:
        import mxnet as mx

        from tofu.runtime.train import quiet

        with quiet():
            start = time.perf_counter()
            self.module.forward_backward(self.batch)
            self.module.update()
            mx.nd.waitall()
            return time.perf_counter() - start


def bind_systems(model: str, batch: int, workers: int, systems: Sequence[System]) -> tuple[list, list[dict]]:
    """Every system of (model, batch, workers) bound and warmed up: [(system, step callable, forward ops)], and a
    row for each system that failed."""
    from tofu.api import partitioned, reference_symbol
    from tofu.runtime.data import initial_values, synthetic_batch
    from tofu.runtime.train import Trainer, whole_graph
    from tofu.search.algorithms import plan_graph

    graph = _graph(model, batch)
    values, data = initial_values(graph), synthetic_batch(graph)
    bound, failed = [], []
    for system in systems:
        try:
            if system is System.MODULE:
                if batch % workers:
                    raise ValueError(f"batch {batch} does not divide by {workers}")
                runner = ModuleStep(_graph(model, batch // workers), workers, values, data)
                step, ops = runner.step, runner.forward_ops
            else:
                pg = whole_graph(graph, reference_symbol(graph)) if system is System.ONE_DEVICE else \
                    partitioned(graph, plan_graph(graph, workers, system.algo))
                trainer = Trainer(pg, {**values, **data}, "cpu", lr=LR, momentum=MOMENTUM,
                                  replicas=not system.routes)
                step, ops = _trainer_step(trainer), _forward_ops(pg.symbol)
            for _ in range(WARMUP_STEPS):
                step()
            bound.append((system, step, ops))
        except Exception as e:      # keep the case, say why
            failed.append({"system": system.value, "status": "error", "message": f"{type(e).__name__}: {e}"[:200]})
    return bound, failed


def _trainer_step(trainer) -> Callable[[], float]:
    def step() -> float:
        trainer.step()
        return trainer.step_seconds[-1]
    return step


def _quartile(xs: Sequence[float], q: int) -> float:
    return statistics.quantiles(xs, n=4)[q - 1] if len(xs) > 1 else xs[0]


def step_rows(model: str, batch: int, workers: int, seconds: float, min_steps: int = MIN_STEPS,
              routes: bool = False) -> list[dict]:
    """One row per system of (model, batch, workers): its median step, and its ratios to one device and Module;
    ``routes``: the two plans also bound without replicas (:data:`ROUTES`)."""
    systems = [System.ONE_DEVICE, System.MODULE] if workers == 1 else \
        [s for s in System if routes or s not in ROUTES]
    load = os.getloadavg()[0]
    bound, failed = bind_systems(model, batch, workers, systems)
    base = {"level": "step", "model": model, "batch": batch, "workers": workers,
            "batchnorm": has_batchnorm(_graph(model, batch)), "load": round(load, 2)}
    times = measure_round_robin([step for _, step, _ in bound], seconds, min_steps=min_steps)
    medians = {s: statistics.median(ts) for (s, _, _), ts in zip(bound, times)}
    rows = []
    for (system, _, ops), ts in zip(bound, times):
        m = medians[system]
        rows.append({**base, "system": system.value, "status": "ok", "seconds": m, "steps": len(ts),
                     "p25_seconds": _quartile(ts, 1), "p75_seconds": _quartile(ts, 3), "forward_ops": ops,
                     "over_one_device": m / medians[System.ONE_DEVICE] if System.ONE_DEVICE in medians else None,
                     "over_module": m / medians[System.MODULE] if System.MODULE in medians else None})
    return rows + [{**base, **f} for f in failed]


# ---------------------------------------------------------------------------------------------- profiling

def trace_spans(path: Path) -> list[tuple[str, int, float, float]]:
    """The operator events of a chrome trace MXNet's profiler dumped: (op type, device, start, end), times in
    seconds. Begin and end events are paired per (device, thread, op type) in the file's order, in which MXNet
    writes each call's end right after its begin: not by time, since a short call's begin and end can carry the
    same microsecond, and one that sorts its end first loses the call. The device is the event's pid, the
    context's index (MXNet labels cpu(2) and cpu(3) ``cpu pinned/`` and ``cpu shared/``, MXNET.md)."""
    text = path.read_text().strip()
    # an unfinished dump (dump(finished=False), so that a later configuration can profile again) leaves the list
    # open, and every dump after the process's first starts with the comma that continues it
    if not text.startswith("{"):
        text = '{"traceEvents": [' + text.lstrip(",")
    try:
        events = json.loads(text)["traceEvents"]
    except json.JSONDecodeError:
        events = json.loads(text + "]}")["traceEvents"]
    open_: dict[tuple, list[float]] = {}
    spans = []
    for e in (e for e in events if e.get("cat") == "operator" and e.get("ph") in ("B", "E")):
        key = (e["pid"], e["tid"], e["name"])
        if e["ph"] == "B":
            open_.setdefault(key, []).append(e["ts"] * 1e-6)
        elif open_.get(key):
            spans.append((e["name"], e["pid"], open_[key].pop(), e["ts"] * 1e-6))
    return spans


def busy_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """The length of the union of the intervals ``spans`` (time during which at least one of them runs)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def profile_rows(model: str, batch: int, workers: int, work_dir: Path, steps: int = PROFILE_STEPS) -> list[dict]:
    """Per system (one device, the tofu and data-parallel plans), device and op class: calls and seconds per step
    under MXNet's profiler, bulk execution off; and a ``wall`` row per system (median profiled step)."""
    import mxnet as mx

    systems = [System.ONE_DEVICE, System.TOFU, System.DATA_PARALLEL]
    saved = os.environ.get("MXNET_EXEC_BULK_EXEC_TRAIN")
    os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"] = "0"          # read at bind
    try:
        bound, failed = bind_systems(model, batch, workers, systems)
    finally:
        if saved is None:
            del os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"]
        else:
            os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"] = saved
    base = {"level": "profile", "model": model, "batch": batch, "workers": workers,
            "batchnorm": has_batchnorm(_graph(model, batch)), "load": round(os.getloadavg()[0], 2)}
    trace = work_dir / f"trace-{model}-{batch}-{workers}.json"
    mx.profiler.set_config(profile_symbolic=True, profile_imperative=True, aggregate_stats=False,
                           filename=str(trace))
    windows, walls = [], []
    mx.profiler.set_state("run")
    for _, step, _ in bound:        # the systems' windows apart by GAP, each event assigned by its midpoint
        mx.nd.waitall()
        time.sleep(GAP)
        begin = time.time()
        walls.append(statistics.median(step() for _ in range(steps)))
        windows.append((begin - GAP / 2, time.time() + GAP / 2))
    time.sleep(GAP)
    mx.profiler.set_state("stop")
    mx.profiler.dump(finished=False)
    spans = trace_spans(trace)
    rows = []
    per_system = []
    for begin, end in windows:
        per_system.append([s for s in spans if begin <= (s[2] + s[3]) / 2 <= end])
    one = next((ss for (sys_, _, _), ss in zip(bound, per_system) if sys_ is System.ONE_DEVICE), [])
    one_ops = frozenset(name for name, *_ in one)
    for (system, _, ops), ss, wall in zip(bound, per_system, walls):
        rows.append({**base, "system": system.value, "status": "ok", "op_class": WALL, "seconds": wall,
                     "steps": steps, "forward_ops": ops, "calls": len(ss) / steps})
        totals: dict[tuple[int, OpClass], list] = {}
        for name, device, start, stop in ss:
            acc = totals.setdefault((device, op_class(name, one_ops)), [0, 0.0, set()])
            acc[0] += 1
            acc[1] += stop - start
            acc[2].add(name)
        for device in sorted({d for _, d, _, _ in ss}):
            rows.append({**base, "system": system.value, "status": "ok", "device": device, "op_class": BUSY,
                         "seconds": busy_seconds([(a, b) for _, d, a, b in ss if d == device]) / steps,
                         "steps": steps})
        rows.append({**base, "system": system.value, "status": "ok", "op_class": BUSY, "steps": steps,
                     "seconds": busy_seconds([(a, b) for _, _, a, b in ss]) / steps})
        for (device, cls), (calls, secs, names) in sorted(totals.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
            rows.append({**base, "system": system.value, "status": "ok", "device": device, "op_class": cls.value,
                         "calls": calls / steps, "seconds": secs / steps, "steps": steps,
                         "message": " ".join(sorted(names)) if cls is not OpClass.KERNEL else ""})
    return rows + [{**base, **f} for f in failed]


# ----------------------------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated from {', '.join(MODELS)}")
    p.add_argument("--workers", default="1,2,4", help="k of the step level")
    p.add_argument("--profile-workers", default="4", help="k of the profile level (at most 4: MXNet's profiler)")
    p.add_argument("--seconds", type=float, default=4.0, help="measuring time per (model, k)")
    p.add_argument("--levels", default="step,profile", help="comma-separated from step, profile")
    p.add_argument("--tag", default="overhead")
    p.add_argument("--out-dir", type=Path, default=Path("results/runtime_overhead"))
    p.add_argument("--quick", action="store_true", help="mlp at batch 64, k = 1, 2; a short profile at k = 2")
    p.add_argument("--routes", action="store_true",
                   help="the step level also binds both plans without parameter replicas (tofu.runtime.replicas)")
    args = p.parse_args(argv)
    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            p.error(f"unknown model '{m}' (choose from {', '.join(MODELS)})")
    levels = args.levels.split(",")
    for level in levels:
        if level not in ("step", "profile"):
            p.error(f"unknown level '{level}' (choose from step, profile)")
    workers = [int(w) for w in args.workers.split(",")]
    profile_workers = [int(w) for w in args.profile_workers.split(",")]
    if any(not 2 <= k <= 4 for k in profile_workers):
        p.error("--profile-workers: each k from 2 to 4 (MXNet's profiler supports at most 4 CPU contexts)")
    batches, min_steps, profile_steps = dict(BATCHES), MIN_STEPS, PROFILE_STEPS
    if args.quick:
        models, workers, profile_workers, args.seconds, min_steps, profile_steps = ["mlp"], [1, 2], [2], 0.3, 5, 2
        batches["mlp"] = 64

    path = args.out_dir / f"{args.tag}.csv"
    writer = RowWriter(path, COLUMNS)
    started = time.perf_counter()
    loads = [os.getloadavg()[0]]

    def record(row: dict) -> None:
        writer.write(six_digits(row))
        if row.get("op_class") not in (None, "", WALL):
            return
        ratios = "".join(f"  {name} {row[key]:.2f}x" for key, name in (("over_one_device", "/one"),
                                                                        ("over_module", "/module"))
                         if isinstance(row.get(key), float))
        log(f"[{time.perf_counter() - started:6.1f} s] {row['level']:<7} {row['model']:<13} b={row['batch']:<5} "
            f"k={row['workers']} {row['system']:<20} {row['status']:<5} "
            f"{row.get('seconds', float('nan')) * 1e3:9.3f} ms{ratios}  load {row['load']}"
            + (f"  {row['message']}" if row.get("message") else ""))

    work_dir = Path(tempfile.mkdtemp(prefix="runtime_overhead-"))
    for model in models:
        if "step" in levels:
            for k in workers:
                for row in step_rows(model, batches[model], k, args.seconds, min_steps, args.routes):
                    record(row)
                loads.append(os.getloadavg()[0])
        if "profile" in levels:
            for k in profile_workers:
                for row in profile_rows(model, batches[model], k, work_dir, profile_steps):
                    record(row)
                loads.append(os.getloadavg()[0])
    writer.close()
    shutil.rmtree(work_dir, ignore_errors=True)
    write_sidecar(path, vars(args), batches=batches, seconds=time.perf_counter() - started,
                  load_average={"min": min(loads), "median": statistics.median(loads), "max": max(loads)},
                  cores=os.cpu_count(), **rerun_source())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
