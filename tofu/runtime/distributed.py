"""Stage 5 across machines: Tofu inside each machine, data parallel across machines on MXNet's dist kvstore.

Input: the Graph of one machine's share of the global batch, its :class:`~tofu.search.plan.Plan` for the k local
devices, the partitioned graph, whole initial values, a ``dist_sync`` kvstore. Output: a :class:`KVStoreTrainer`
whose steps are bit-for-bit the local :class:`~tofu.runtime.train.Trainer`'s but for the gradients, which are
summed over the machines, and a :class:`MachineReport` of one machine's run (losses, bytes handed to the kvstore).

Every machine binds the same partitioned graph on its k devices and feeds rows ``[m B/M, (m+1) B/M)`` of the
global batch (machine ``m`` is the kvstore rank). After the backward pass, every parameter shard variable's
gradient (one array on the device that holds the shard) is pushed under its own key, the variable's name
(``fc1_weight@dev0``); ``dist_sync`` servers sum the M pushes of a key and the sum is pulled back into the same
gradient array. Servers hold gradient shards, never whole tensors, and never parameters.

The update is local, after the pull: every machine applies the same ``sgd_mom_update`` with the same summed
gradient to its own shards and momentum, so the replicas stay identical without parameters ever crossing.
Chosen over the servers' optimizer because (1) the bytes are the same (push a gradient, pull a gradient instead of
a weight), (2) the update is the single-machine Trainer's, operation for operation, so one machine with M = 1
trains exactly as ``tofu run`` does, (3) the momentum stays on the device of its shard instead of on servers, and
(4) ``kvstore.set_optimizer`` sends a pickled optimizer that every server unpickles: code execution on the servers
for whoever reaches their port.

Gradient scaling: the global gradient is the sum over machines of each machine's gradient on its rows when the
loss head sums per-sample gradients (``SoftmaxOutput``'s default ``normalization='null'``, the regression outputs,
``MakeLoss``): scale 1. A head normalised by its batch (``'batch'``, or ``'valid'`` without an ignored label)
divides by B/M on each machine instead of B: scale 1/M, applied as the update's ``rescale_grad``
(:func:`gradient_scale`).

Bytes: each shard is pushed and pulled once per machine per iteration, so a machine hands the kvstore the
parameter shards of all its devices in each direction: the model's parameter bytes
(:func:`predicted_kvstore_bytes`). The count is of array payloads at the push and pull calls; ps-lite's message
headers are not counted.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import mxnet as mx
import numpy as np

from tofu.errors import TofuError
from tofu.graph.ir import LOSS_OPS, Graph, Role
from tofu.rewrite.apply_plan import PartitionedGraph
from tofu.rewrite.machines import backward_key, join_machines
from tofu.runtime.train import Trainer, quiet


class DistributedError(TofuError):
    """A hybrid run cannot be set up as asked (batch not divisible, a loss head that cannot be split)."""


def machine_rows(global_batch: int, machines: int, machine: int) -> slice:
    """Rows ``[m B/M, (m+1) B/M)`` of the global batch, machine ``m``'s share.

    Raises:
        DistributedError: ``global_batch`` is not divisible by ``machines``, or ``machine`` is out of range.
    """
    if machines < 1 or global_batch % machines:
        raise DistributedError(f"global batch {global_batch} is not divisible by {machines} machines")
    if not 0 <= machine < machines:
        raise DistributedError(f"machine {machine} is not one of 0..{machines - 1}")
    share = global_batch // machines
    return slice(machine * share, (machine + 1) * share)


def machine_batch(batch: Mapping[str, np.ndarray], machines: int, machine: int) -> dict[str, np.ndarray]:
    """Machine ``machine``'s rows (axis 0, the batch axis of every zoo model's data and labels) of each array."""
    sizes = {a.shape[0] for a in batch.values()}
    if len(sizes) != 1:
        raise DistributedError(f"data and labels disagree on the batch size: {sorted(sizes)}")
    rows = machine_rows(sizes.pop(), machines, machine)
    return {name: np.ascontiguousarray(a[rows]) for name, a in batch.items()}


def gradient_scale(graph: Graph, machines: int) -> float:
    """The factor that turns the sum over machines of their gradients into the gradient of the global batch.

    Raises:
        DistributedError: a loss head normalises by its count of valid labels, which differs per machine.
    """
    scale = 1.0
    for node in graph.nodes:
        if node.op not in LOSS_OPS:
            continue
        norm = str(node.attrs.get("normalization", "null"))
        ignore = str(node.attrs.get("use_ignore", "False")).lower() in ("true", "1")
        if norm == "valid" and ignore:
            raise DistributedError(f"{node.op} '{node.name}' divides by its valid labels, which differ per machine")
        if norm in ("batch", "valid"):
            scale = 1.0 / machines
    return scale


def predicted_kvstore_bytes(graph: Graph, pg: PartitionedGraph | None = None) -> int:
    """Bytes one machine pushes per iteration, and pulls: every device's parameter shards, each once, and every
    statistic averaged over the machines (``pg.machine_stats``), once forward and once backward when MXNet runs
    its backward pass.

    A plan partitions every parameter evenly over the devices, each element in exactly one shard (DESIGN.md,
    section 2), so the shards of all devices add up to the model's parameters. (``plan.per_device_bytes``
    gives the largest device's share: k times it is an upper bound, exact only when the shards are equal.)
    """
    stats = pg.machine_stats if pg is not None else ()
    return graph.param_bytes + sum(s.nbytes * (2 if s.backward else 1) for s in stats)


def inter_machine_bytes(graph: Graph, plan, whole: Graph, machines: int) -> int:
    """:func:`predicted_kvstore_bytes` of one of ``machines`` training ``graph`` (its share of the batch of
    ``whole``) under ``plan``: the partitioned graph is built only when some statistic is averaged."""
    from tofu.api import partitioned

    sync = machine_statistics(whole, machines)
    return predicted_kvstore_bytes(graph, partitioned(graph, plan, sync) if sync else None)


def machine_statistics(whole: Graph, machines: int) -> frozenset[str]:
    """The ops of ``whole`` (the model at the global batch) whose statistics must be averaged over ``machines``
    that each train an equal share of the batch: those whose split of the batch exchanges statistics
    (BatchNorm in training mode), as the ``data-parallel`` plan over the machines runs them.

    Raises:
        TofuError: the model cannot be planned data-parallel over the machines.
    """
    from tofu.analysis.compose import compose
    from tofu.analysis.views import NodeView
    from tofu.search.algorithms import plan_graph

    if machines == 1:
        return frozenset()
    step = plan_graph(whole, machines, "data-parallel").steps[0]
    choices = dict(step.op_choices)
    return frozenset(n.name for n in whole.nodes
                     if any(c.expansion for c in compose(NodeView.of(whole, n), (choices[n.name],), (machines,))))


class KVStoreTrainer(Trainer):
    """A :class:`Trainer` whose parameter gradients are summed over the machines of a ``dist_sync`` kvstore
    between the backward pass and the (local) SGD-momentum update; the statistics of ``pg.machine_stats`` are
    summed through it mid-pass (synchronised BatchNorm, :mod:`tofu.rewrite.machines`)."""

    def __init__(self, pg: PartitionedGraph, values: Mapping[str, np.ndarray], kvstore, scale: float = 1.0,
                 ctx: str = "cpu", lr: float = 0.05, momentum: float = 0.9):
        self.kvstore, self.scale = kvstore, scale
        self._lock = threading.Lock()
        self._stat_bytes = [0, 0]                   # pushed, pulled by the statistics since the last step
        # the servers only ever hold sums: start every key at zero, the same on every machine (dist kvstore:
        # rank 0 sends the value, every worker waits at a barrier); a statistic has a key per direction
        stats = [(k, s.shape) for s in pg.machine_stats for k in (s.key, backward_key(s.key))]
        if stats:
            kvstore.init([k for k, _ in stats], [mx.nd.zeros(shape) for _, shape in stats])
        join_machines(self._sum_over_machines, kvstore.num_workers)
        super().__init__(pg, values, ctx, lr, momentum)
        self.keys = [v.name for v in self.params]
        kvstore.init(self.keys, [mx.nd.zeros(v.shape) for v in self.params])
        self.pushed_bytes: list[int] = []
        self.pulled_bytes: list[int] = []

    def _sum_over_machines(self, key: str, x):
        """The sum of ``x`` over the machines (push, then pull into a new array); called by MXNet's custom-op
        threads, one at a time."""
        with self._lock:
            total = mx.nd.zeros(x.shape, ctx=x.context, dtype=x.dtype)
            self.kvstore.push(key, x)
            self.kvstore.pull(key, out=total)
            self._stat_bytes[0] += _nbytes([x])
            self._stat_bytes[1] += _nbytes([total])
            return total

    def step(self, batch: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """One step: forward, backward, push every gradient shard, pull the sums into them, update locally;
        returns the graph outputs before the update."""
        if batch:
            self.feed(batch)
        grads = [self._grads[k] for k in self.keys]
        start = time.perf_counter()
        with quiet():
            outs = self.executor.forward(is_train=True)
            self.executor.backward()
            if self.pg.machine_stats:
                mx.nd.waitall()         # no statistic's push or pull (another thread's) overlaps the gradients'
            self.exchange.reduce()      # the replicas' gradients summed into their shards (tofu.runtime.replicas)
            self.kvstore.push(self.keys, grads)
            self.kvstore.pull(self.keys, out=grads)
            self.pushed_bytes.append(_nbytes(grads) + self._stat_bytes[0])
            self.pulled_bytes.append(_nbytes(grads) + self._stat_bytes[1])
            self._stat_bytes[:] = [0, 0]
            self._update(rescale_grad=self.scale)
            mx.nd.waitall()
            self.step_seconds.append(time.perf_counter() - start)
            return self._assemble([o.asnumpy() for o in outs])


def _nbytes(arrays) -> int:
    return sum(a.size * np.dtype(a.dtype).itemsize for a in arrays)


@dataclass(frozen=True)
class MachineReport:
    """One machine's run: its rank, its losses (on its rows), and the bytes it handed the kvstore per step."""

    model: str
    machine: int
    machines: int
    workers: int
    algo: str
    global_batch: int
    losses: tuple[float, ...]
    step_seconds: tuple[float, ...]
    pushed_bytes: tuple[int, ...]
    pulled_bytes: tuple[int, ...]
    predicted_bytes: int            # per direction, per iteration
    resumed_step: int = 0           # steps done before this run (a resumed checkpoint's); losses are of the rest

    def to_json(self) -> dict:
        return {"model": self.model, "machine": self.machine, "machines": self.machines, "workers": self.workers,
                "algo": self.algo, "global_batch": self.global_batch, "losses": list(self.losses),
                "step_seconds": list(self.step_seconds), "pushed_bytes": list(self.pushed_bytes),
                "pulled_bytes": list(self.pulled_bytes), "predicted_bytes": self.predicted_bytes,
                "resumed_step": self.resumed_step}

    @staticmethod
    def from_json(doc: Mapping) -> "MachineReport":
        return MachineReport(doc["model"], int(doc["machine"]), int(doc["machines"]), int(doc["workers"]),
                             doc["algo"], int(doc["global_batch"]), tuple(doc["losses"]),
                             tuple(doc["step_seconds"]), tuple(doc["pushed_bytes"]), tuple(doc["pulled_bytes"]),
                             int(doc["predicted_bytes"]), int(doc.get("resumed_step", 0)))


def final_values(graph: Graph, values: Mapping[str, np.ndarray], trainer: Trainer) -> dict[str, np.ndarray]:
    """Every parameter and auxiliary state of ``graph``, whole, after training (values the graph never updated
    keep their initial ones)."""
    final = {**values, **trainer.parameters((Role.PARAM, Role.AUX))}
    return {t.name: final[t.name] for t in graph.tensors if t.producer is None and t.role in (Role.PARAM, Role.AUX)}


@dataclass(frozen=True)
class HybridReport:
    """A whole hybrid run: every machine's report (by rank), the parameters after training (machine 0's, whole),
    and how far the other machines' copies of them are from machine 0's (0 when the replicas stayed in step)."""

    machines: tuple[MachineReport, ...]
    final_values: dict
    replica_max_abs_diff: float
    seconds: float

    @property
    def losses(self) -> tuple[float, ...]:
        """The loss of the global batch at every step: the mean of the machines' (equal shares of rows)."""
        return tuple(float(np.mean(step)) for step in zip(*(m.losses for m in self.machines)))

    @property
    def measured_bytes(self) -> int:
        """Bytes one machine handed the kvstore per iteration, pushed plus pulled (every machine, every step
        alike; :class:`DistributedError` otherwise)."""
        counts = {p + q for m in self.machines for p, q in zip(m.pushed_bytes, m.pulled_bytes)}
        if len(counts) != 1:
            raise DistributedError(f"machines or steps moved different bytes: {sorted(counts)}")
        return counts.pop()

    @property
    def predicted_bytes(self) -> int:
        """The plan's pushed plus pulled bytes per machine per iteration."""
        return 2 * self.machines[0].predicted_bytes


def train_hybrid(model: str, global_batch: int, machines: int, workers: int, out_dir: str | Path, steps: int = 10,
                 algo: str = "tofu", servers: int = 1, lr: float = 0.05, momentum: float = 0.9, seed: int = 0,
                 timeout_s: float = 300.0, worker_command: Sequence[str] | None = None) -> HybridReport:
    """Plans one machine's share of the batch, launches ``machines`` workers of it on loopback
    (:func:`tofu.runtime.launch.launch_local`) and collects their results from ``out_dir``.

    ``worker_command`` (argv) replaces ``python -m tofu.runtime.dist_worker``, with the same arguments appended.

    Raises:
        DistributedError: the batch does not split over the machines, or a machine wrote no result.
        LaunchError: a process failed or the run timed out (logs in ``out_dir/logs``).
    """
    from tofu.api import load_graph, load_plan
    from tofu.models import ModelOptions
    from tofu.runtime.launch import launch_local

    rows = machine_rows(global_batch, machines, 0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    graph = load_graph(model, ModelOptions(batch=rows.stop - rows.start))
    plan_path = out / "plan.json"
    load_plan(graph, workers, algo).save(plan_path)      # planned once, replayed by every machine
    command = list(worker_command or [sys.executable, "-m", "tofu.runtime.dist_worker"])
    command += [model, "--batch", str(global_batch), "--workers", str(workers), "--out-dir", str(out),
                "--steps", str(steps), "--algo", algo, "--plan", str(plan_path), "--lr", repr(lr),
                "--momentum", repr(momentum), "--seed", str(seed)]
    launched = launch_local(command, machines, servers, log_dir=out / "logs", timeout_s=timeout_s)
    return collect_results(out, graph, machines, launched.seconds)


def collect_results(out_dir: str | Path, graph: Graph, machines: int, seconds: float) -> HybridReport:
    """The :class:`HybridReport` of a finished run from what its machines wrote to ``out_dir``
    (``machine{m}.json`` and ``machine{m}.params``).

    Raises:
        DistributedError: a machine wrote no result.
        CheckpointError: a machine's parameters do not fit ``graph``.
    """
    from tofu.runtime.data import load_checkpoint

    out = Path(out_dir)
    reports, values = [], []
    for m in range(machines):
        doc = out / f"machine{m}.json"
        if not doc.is_file():
            raise DistributedError(f"machine {m} wrote no result '{doc}'")
        reports.append(MachineReport.from_json(json.loads(doc.read_text())))
        values.append(load_checkpoint(out / f"machine{m}.params", graph))
    spread = max((float(np.abs(v[n] - values[0][n]).max()) for v in values[1:] for n in v), default=0.0)
    return HybridReport(tuple(reports), values[0], spread, seconds)


@dataclass(frozen=True)
class HybridCheck:
    """A hybrid run beside one device training the global batch from the same start: the largest difference of
    the global loss at any step, and of the final parameters relative to the largest parameter."""

    loss: float
    parameters: float
    reference_losses: tuple[float, ...]


def check_against_one_device(whole: Graph, report: HybridReport, start_values: Mapping[str, np.ndarray],
                             start_momentum: Mapping[str, np.ndarray] | None, batch: Mapping[str, np.ndarray],
                             lr: float = 0.05, momentum: float = 0.9) -> HybridCheck:
    """Trains ``whole`` (the model at the global batch) on one device for as many steps as ``report`` ran, from
    ``start_values`` (and ``start_momentum`` of a resumed run), and compares.

    Raises:
        DistributedError: the machines ran different numbers of steps.
    """
    from tofu.api import reference_symbol
    from tofu.runtime.data import loss
    from tofu.runtime.run import max_rel_diff
    from tofu.runtime.train import whole_graph

    steps = {len(m.losses) for m in report.machines}
    if len(steps) != 1:
        raise DistributedError(f"the machines ran different numbers of steps: {sorted(steps)}")
    trainer = Trainer(whole_graph(whole, reference_symbol(whole)), {**start_values, **batch}, lr=lr,
                      momentum=momentum)
    if start_momentum is not None:
        trainer.load_momentum(start_momentum)
    losses = tuple(loss(whole, trainer.step(), batch) for _ in range(steps.pop()))
    # the moving statistics too: synchronised BatchNorm updates them from the global batch's statistics
    return HybridCheck(max((abs(a - b) for a, b in zip(report.losses, losses)), default=0.0),
                       max_rel_diff(report.final_values, trainer.parameters((Role.PARAM, Role.AUX))), losses)
